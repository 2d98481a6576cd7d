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
from gtcontrol.interop import AttentionWeights, FeedForwardWeights, LayerNormWeights


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
    ffn = gt.FeedForward(W_out=rng.standard_normal((d, 4)), W_in=rng.standard_normal((4, d)))
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


def _built() -> dict[str, Callable[[], Any]]:
    """Real calls whose results held writable arrays before the mixin froze them when built."""
    from gtcontrol.experiments import feedforward_closeness

    d = 2
    g1 = gt.Gaussian(np.ones(d), 2.0 * np.eye(d))
    layer = gt.Layer(A=-np.eye(d), B=0.3 * np.eye(d), V=-0.5)
    return {
        "BernoulliSolution": lambda: gt.solve_bernoulli(gt.riccati_form(layer)),
        "SteadyState": lambda: gt.kalman_steady_state(
            gt.KalmanData(-np.eye(d), np.eye(d), np.eye(d))
        ),
        "OTSteering (singular end points)": lambda: gt.ot_steering(
            gt.Gaussian(np.zeros(d), np.diag([1.0, 0.0])),
            gt.Gaussian(np.ones(d), np.diag([2.0, 0.0])),
            1.0,
        ),
        "KineticEnergy": lambda: gt.kinetic_energy(layer, g1, 0.5, n_points=21),
        "TokenComparison": lambda: gt.compare_tokens(
            layer, g1, 0.2, n_tokens=(64, 128), repeats=1, n_points=2
        ),
        "FeedForwardCloseness": lambda: feedforward_closeness(
            d=2, n_tokens=100, n_points=2, n_projections=4, T=0.2
        ),
    }


@pytest.mark.parametrize("name", sorted(_built()))
def test_a_freshly_built_result_holds_read_only_arrays(name: str) -> None:
    """Every array a result holds (also in its nested values) is read-only as built."""
    value = _built()[name]()
    arrays = _arrays(value)
    assert arrays, name
    writable = [a.shape for a in arrays if a.flags.writeable]
    assert not writable, (name, writable)


def test_the_mixin_freezes_array_fields_and_tuples_of_them_when_built() -> None:
    from dataclasses import dataclass

    from gtcontrol._readonly import ReadOnlyArrays

    @dataclass(frozen=True)
    class Record(ReadOnlyArrays):
        a: np.ndarray
        pair: tuple[np.ndarray, np.ndarray]
        note: str = ""

    given = np.zeros(3)
    rec = Record(given, (np.ones(2), np.ones(2)))
    assert not rec.a.flags.writeable and not any(p.flags.writeable for p in rec.pair)
    assert rec.a is given  # frozen in place, not copied
    with pytest.raises(ValueError, match="read-only"):
        rec.pair[1][0] = 2.0
