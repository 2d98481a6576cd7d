"""Copies of the frozen values and results (``pickle``, ``copy``) hold read-only arrays.

numpy's pickle does not keep an array's write flag, so a restored copy of a value whose
constructor froze its arrays (a Dask worker's, a cached result) could be changed in place.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gtcontrol as gt
from gtcontrol.experiments import AttentionWeights, FeedForwardWeights, LayerNormWeights


def _arrays(value: Any, seen: set[int] | None = None) -> list[np.ndarray]:
    """Every array reachable from ``value``'s fields (and tuples, lists of them)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v, seen)]
    fields = getattr(value, "__dict__", None)
    if fields is None:
        return []
    return [a for v in fields.values() for a in _arrays(v, seen)]


def _values() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    d = 3
    g = gt.Gaussian(rng.standard_normal(d), np.eye(d))
    ffn = gt.FeedForward(rng.standard_normal((d, 4)), rng.standard_normal((4, d)))
    heads = gt.FactoredHeads(
        rng.standard_normal((2, 2, d)),
        rng.standard_normal((2, 2, d)),
        rng.standard_normal((2, 2, d)),
        rng.standard_normal((2, d, 2)),
    )
    dense = gt.Layer(A=-np.eye(d), heads=[(rng.standard_normal((d, d)), np.eye(d))], ffn=ffn)
    return {
        "Gaussian": g,
        "FeedForward": ffn,
        "FactoredHeads": heads,
        "Layer (dense heads, ffn)": dense,
        "Layer (factored heads)": gt.Layer(A=-np.eye(d), heads=heads),
        "Schedule": gt.Schedule([dense, dense], 1.0),
        "KalmanData": gt.KalmanData(np.eye(d), np.eye(d), np.eye(d)),
        "Trajectory": gt.simulate(gt.Layer(A=-np.eye(d)), g, 0.5),
        "AttentionWeights": AttentionWeights(np.eye(d), np.eye(d), np.eye(d), np.eye(d), n_heads=1),
        "FeedForwardWeights": FeedForwardWeights(np.eye(d), np.eye(d)),
        "LayerNormWeights": LayerNormWeights(np.ones(d), np.zeros(d), 1e-5),
    }


COPIES: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda v: pickle.loads(pickle.dumps(v)),
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("name", sorted(_values()))
def test_a_restored_copy_holds_read_only_arrays(name: str, how: str) -> None:
    value = _values()[name]
    arrays = _arrays(value)
    assert arrays and not any(a.flags.writeable for a in arrays), name
    restored = COPIES[how](value)
    again = _arrays(restored)
    assert len(again) == len(arrays)
    for a, b in zip(arrays, again, strict=True):
        assert not b.flags.writeable, (name, how)
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="read-only"):
        again[0][...] = 0.0
