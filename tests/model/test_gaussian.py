"""Gaussian: validation, sampling, Bures–Wasserstein and KL against independent formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import sqrtm

from gtcontrol import Gaussian, GTControlError, InvalidGaussianError


def _random_spd(rng: np.random.Generator, d: int, rank: int | None = None) -> np.ndarray:
    r = d if rank is None else rank
    f = rng.standard_normal((d, r))
    return f @ f.T + (0.1 * np.eye(d) if rank is None else 0.0)


def _bw_trace_formula(g0: Gaussian, g1: Gaussian) -> float:
    r0 = np.real(sqrtm(g0.cov))
    cross = np.real(sqrtm(r0 @ g1.cov @ r0))
    dm = g0.mean - g1.mean
    return math.sqrt(max(dm @ dm + np.trace(g0.cov + g1.cov - 2 * cross), 0.0))


def test_validation_names_the_input() -> None:
    with pytest.raises(InvalidGaussianError, match="cov"):
        Gaussian([0.0, 0.0], [[1.0, np.nan], [0.0, 1.0]])
    with pytest.raises(InvalidGaussianError, match="symmetric"):
        Gaussian([0.0, 0.0], [[1.0, 0.5], [0.0, 1.0]])
    with pytest.raises(InvalidGaussianError, match="positive semi-definite"):
        Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, -1e-3]])
    with pytest.raises(InvalidGaussianError, match=r"mean"):
        Gaussian([[0.0]], [[1.0]])
    with pytest.raises(InvalidGaussianError, match=r"expected shape \(3, 3\)"):
        Gaussian([0.0, 0.0, 0.0], np.eye(2))
    with pytest.raises(InvalidGaussianError, match="mean"):
        Gaussian([np.inf], [[1.0]])
    with pytest.raises(GTControlError):
        Gaussian(["a"], [[1.0]])
    # errors are ValueErrors too
    with pytest.raises(ValueError):
        Gaussian([0.0], [[-1.0]])


def test_tolerances_are_relative_to_the_norm() -> None:
    big = 1e6 * np.eye(2)
    big[0, 1] = 1e-5  # asymmetry 1e-5 relative 1e-11: accepted and symmetrized
    g = Gaussian([0.0, 0.0], big)
    assert np.array_equal(g.cov, g.cov.T)
    tiny = 1e-12 * np.eye(2)
    tiny[0, 1] = 1e-14  # asymmetry 1e-2 relative: refused even though absolutely tiny
    with pytest.raises(InvalidGaussianError, match="symmetric"):
        Gaussian([0.0, 0.0], tiny)


def test_immutable_and_rank() -> None:
    rng = np.random.default_rng(0)
    g = Gaussian(np.zeros(4), _random_spd(rng, 4, rank=2))
    assert g.dim == 4 and g.rank == 2 and g.is_degenerate
    with pytest.raises(ValueError):
        g.cov[0, 0] = 3.0
    with pytest.raises(AttributeError):
        g.mean = np.ones(4)  # type: ignore[misc]
    assert Gaussian.standard(3).rank == 3
    assert Gaussian(np.zeros(2), np.zeros((2, 2))).rank == 0


def test_sampling_is_seeded_and_degenerate_samples_stay_on_support() -> None:
    rng = np.random.default_rng(1)
    cov = _random_spd(rng, 5, rank=3)
    g = Gaussian(np.arange(5.0), cov)
    x1, x2 = g.sample(1000, seed=7), g.sample(1000, seed=np.random.default_rng(7))
    assert np.array_equal(x1, x2)
    # the centred samples lie in the range of cov: the projection on its null space vanishes
    w, u = np.linalg.eigh(cov)
    null = u[:, w < 1e-9 * w.max()]
    assert null.shape[1] == 2
    assert np.max(np.abs((x1 - g.mean) @ null)) < 1e-12 * np.max(np.abs(x1))
    # empirical moments within a generous multiple of the sampling error (N = 200k)
    big = g.sample(200_000, seed=3)
    emp = Gaussian.from_samples(big)
    assert np.max(np.abs(emp.mean - g.mean)) < 6 * math.sqrt(np.max(np.diag(cov)) / 200_000)
    assert np.linalg.norm(emp.cov - cov) / np.linalg.norm(cov) < 0.02


def test_bures_wasserstein_matches_trace_formula_and_is_accurate_near_zero() -> None:
    rng = np.random.default_rng(2)
    for d in (1, 2, 5):
        g0 = Gaussian(rng.standard_normal(d), _random_spd(rng, d))
        g1 = Gaussian(rng.standard_normal(d), _random_spd(rng, d))
        assert g0.bures_wasserstein(g1) == pytest.approx(_bw_trace_formula(g0, g1), rel=1e-9)
        assert g0.bures_wasserstein(g1) == pytest.approx(g1.bures_wasserstein(g0), rel=1e-12)
        assert g0.bures_wasserstein(g0) < 1e-13
    # commuting case: closed form |m0-m1|^2 + sum (sqrt(a)-sqrt(b))^2
    a, b = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 16.0])
    g0, g1 = Gaussian(np.zeros(3), np.diag(a)), Gaussian(np.ones(3), np.diag(b))
    exact = math.sqrt(3 + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    assert g0.bures_wasserstein(g1) == pytest.approx(exact, rel=1e-14)
    # Procrustes form keeps relative accuracy for a 1e-9 perturbation (trace formula cannot)
    eps = 1e-9
    g2 = Gaussian(np.zeros(3), np.diag(a * (1 + eps) ** 2))
    exact_small = eps * math.sqrt(np.sum(a))
    assert g0.bures_wasserstein(g2) == pytest.approx(exact_small, rel=1e-6)
    # degenerate: two rank-one covariances along different lines
    u, v = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    d01 = Gaussian(np.zeros(2), np.outer(u, u)).bures_wasserstein(
        Gaussian(np.zeros(2), np.outer(v, v))
    )
    assert d01 == pytest.approx(math.sqrt(2.0), rel=1e-14)


def test_kl_divergence() -> None:
    rng = np.random.default_rng(3)
    d = 4
    s0, s1 = _random_spd(rng, d), _random_spd(rng, d)
    m0, m1 = rng.standard_normal(d), rng.standard_normal(d)
    g0, g1 = Gaussian(m0, s0), Gaussian(m1, s1)
    inv1 = np.linalg.inv(s1)
    ref = 0.5 * (
        np.trace(inv1 @ s0)
        + (m1 - m0) @ inv1 @ (m1 - m0)
        - d
        + math.log(np.linalg.det(s1) / np.linalg.det(s0))
    )
    assert g0.kl_divergence(g1) == pytest.approx(ref, rel=1e-10)
    assert g0.kl_divergence(g0) == pytest.approx(0.0, abs=1e-12)
    deg = Gaussian(np.zeros(d), _random_spd(rng, d, rank=2))
    assert deg.kl_divergence(g1) == math.inf
    with pytest.raises(InvalidGaussianError, match="non-singular"):
        g1.kl_divergence(deg)
    with pytest.raises(InvalidGaussianError, match="dimension"):
        g1.kl_divergence(Gaussian.standard(2))


@pytest.mark.parametrize("n", [0, -3, 2.5, True, "10"])
def test_sample_size_is_a_positive_integer(n) -> None:
    from gtcontrol import InvalidParametersError

    with pytest.raises(InvalidParametersError, match=r"^n: expected a positive integer"):
        Gaussian.standard(2).sample(n)


def test_check_gaussian_names_the_input() -> None:
    from gtcontrol.model.gaussian import check_gaussian

    g = Gaussian.standard(2)
    assert check_gaussian(g, 2) is g
    with pytest.raises(InvalidGaussianError, match="target: dimension 2 does not match"):
        check_gaussian(g, 3, "target")
    with pytest.raises(InvalidGaussianError, match="initial: expected a Gaussian"):
        check_gaussian([0.0, 1.0], 2)
