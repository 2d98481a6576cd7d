"""ESS/N = exp(−uᵀΣu) of the softmax (docs/theory.md §2 "Finite N") against Monte Carlo and its
bound."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_spd
from hypothesis import given, settings
from hypothesis import strategies as st

import gtcontrol as gt
from gtcontrol.errors import InvalidParametersError
from gtcontrol.model.finite_n import ess_fraction, worst_ess_fraction


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ess_matches_monte_carlo(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = 3
    layer = gt.Layer(
        heads=[(np.eye(d), rng.normal(size=(d, d))), (-np.eye(d), rng.normal(size=(d, d)))]
    )
    keys = gt.Gaussian(rng.normal(size=d), random_spd(rng, d) / 3)
    queries = 0.3 * rng.normal(size=(4, d))
    exact = ess_fraction(layer, keys, queries)
    y = rng.multivariate_normal(keys.mean, keys.cov, size=2_000_000)
    for i, x in enumerate(queries):
        for h, (_, b) in enumerate(layer.heads):
            w = np.exp(y @ (b @ x))
            mc = w.mean() ** 2 / np.mean(w**2)
            # Monte Carlo error of a ratio of means of lognormal weights at 2e6 samples with
            # uᵀΣu ≲ 1: a few 1e-3 relative.
            assert mc == pytest.approx(exact[i, h], rel=2e-2)


def test_ess_shapes_and_limits() -> None:
    layer = gt.Layer(V=1.0, B=np.zeros((2, 2)))
    g = gt.Gaussian(np.zeros(2), np.eye(2))
    assert ess_fraction(layer, g, [3.0, -1.0]).tolist() == [1.0]
    assert ess_fraction(layer, g, np.ones((5, 2))).shape == (5, 1)
    with pytest.raises(InvalidParametersError, match="queries"):
        ess_fraction(layer, g, np.ones((2, 3)))
    with pytest.raises(InvalidParametersError, match="dimension"):
        ess_fraction(layer, gt.Gaussian(np.zeros(3), np.eye(3)), np.ones(3))
    with pytest.raises(InvalidParametersError, match="n_std"):
        worst_ess_fraction(layer, g, n_std=-1.0)
    with pytest.raises(InvalidParametersError, match="gaussian"):  # leaked AttributeError
        worst_ess_fraction(layer, "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidParametersError, match="keys"):
        ess_fraction(layer, "x", np.ones(2))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n_std=st.floats(0.0, 3.0))
def test_worst_ess_bounds_every_query_in_the_ball(seed: int, n_std: float) -> None:
    rng = np.random.default_rng(seed)
    d = 3
    layer = gt.Layer(V=1.0, B=rng.normal(size=(d, d)) / 2)
    g = gt.Gaussian(rng.normal(size=d) / 2, random_spd(rng, d) / 2)
    bound = worst_ess_fraction(layer, g, n_std=n_std)[0]
    z = rng.normal(size=(500, d))
    z *= (n_std * rng.uniform(size=(500, 1)) ** (1 / d)) / np.linalg.norm(z, axis=1, keepdims=True)
    w, u = np.linalg.eigh(g.cov)
    root = (u * np.sqrt(w)) @ u.T
    ess = ess_fraction(layer, g, g.mean + z @ root)[:, 0]
    assert np.all(ess >= bound * (1 - 1e-12))


def test_worst_ess_is_attained_for_zero_mean() -> None:
    layer = gt.Layer(V=1.0, B=np.diag([0.5, 0.1]))
    g = gt.Gaussian(np.zeros(2), np.diag([4.0, 1.0]))
    # |Σ^{1/2} B Σ^{1/2}|₂ = 2, attained at z = n_std e₁: x = (2 n_std, 0).
    bound = worst_ess_fraction(layer, g, n_std=1.5)[0]
    assert bound == pytest.approx(ess_fraction(layer, g, [3.0, 0.0])[0], rel=1e-14)
    assert bound == pytest.approx(np.exp(-9.0), rel=1e-14)
