"""Tests of gtcontrol.control.design: constructive and CasADi mean-matching designs, certificates,
robustness. Evidence is independent of the construction: the adaptive moment integrator
(gtcontrol.simulate), the closed forms of docs/theory.md §3–5, slycot's equilibria, and
brute-force frequency sweeps."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import allowed, random_skew, timed

import gtcontrol as gt
from gtcontrol import IpoptSettings
from gtcontrol._status import Result, Status
from gtcontrol.analysis.equilibria import equilibria, equilibrium_at
from gtcontrol.control.design import (
    RobustnessCheck,
    design_certificate,
    design_convergence,
    design_mean_matching,
    design_robustness,
)
from gtcontrol.errors import (
    InvalidGaussianError,
    InvalidParametersError,
    UnreachableTargetError,
)
from gtcontrol.model.gaussian import Gaussian
from gtcontrol.model.moments import simulate
from gtcontrol.model.params import Layer

# The exact closed forms (no robustness report, no finite-N scale split: min_ess=None).
EXACT: dict[str, Any] = {"robustness": False, "min_ess": None}


def _spd(rng: np.random.Generator, d: int, lo: float = 0.3) -> np.ndarray:
    x = rng.standard_normal((d, d))
    return x @ x.T / d + lo * np.eye(d)


def _random_target(seed: int, d: int) -> tuple[np.random.Generator, Gaussian]:
    """A generator seeded with ``seed`` and a random target ``N(m*, Σ*)`` in ``R^d`` from it."""
    rng = np.random.default_rng(seed)
    return rng, Gaussian(rng.standard_normal(d), _spd(rng, d))


def _random_start(rng: np.random.Generator, target: Gaussian) -> Gaussian:
    d = target.dim
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = np.exp(rng.uniform(-2.0, 2.0, d))
    return Gaussian(target.mean + 3.0 * rng.standard_normal(d), (q * w) @ q.T)


def _sqrtm(s: np.ndarray) -> np.ndarray:
    w, u = np.linalg.eigh(s)
    return (u * np.sqrt(w)) @ u.T


# ----------------------------------------------------------------------------- constructive


@pytest.mark.parametrize("d", range(2, 11))
def test_constructive_design_converges_from_20_starts_at_the_promised_rate(d: int) -> None:
    rng, target = _random_target(100 + d, d)
    rate = float(rng.uniform(0.5, 1.5))
    rotation = 0.3 * random_skew(rng, d) if d % 2 else None
    res = design_mean_matching(target, rate=rate, rotation=rotation, **EXACT)
    assert res.success and res.status is Status.SUCCESS and res.method == "constructive"
    assert res.optimal
    assert res.certificate.kind == "global"
    omega = np.linalg.inv(target.cov)
    half = _sqrtm(target.cov)
    T = 22.0 / rate
    t1, t2 = 10.0 / rate, 16.0 / rate
    for _ in range(20):
        g0 = _random_start(rng, target)
        traj = simulate(res.layer, g0, T, n_points=45)
        assert traj.status == "success"
        m_err = np.linalg.norm(traj.mean - target.mean, axis=1)
        s_err = np.linalg.norm(traj.cov - target.cov, axis=(1, 2))
        assert m_err[-1] <= 1e-6 * np.linalg.norm(target.mean)
        assert s_err[-1] <= 1e-6 * np.linalg.norm(target.cov)
        # Mean: in the Σ*⁻¹ norm the linear part contracts exactly like e^{-rate t} (K = vI +
        # SΣ*⁻¹ with S skew); the coupling to Σ decays at 2·rate.
        e = traj.mean - target.mean
        m_w = np.sqrt(np.einsum("ti,ij,tj->t", e, omega, e))
        i1, i2 = np.searchsorted(traj.t, t1), np.searchsorted(traj.t, t2)
        slope = math.log(m_w[i2] / m_w[i1]) / (traj.t[i2] - traj.t[i1])
        # 1% covers the e^{-rate t} remainder of the coupling over [10/rate, 16/rate].
        assert slope == pytest.approx(-rate, rel=1e-2)
        # Covariance: ‖Σ*^½(Ω(t) − Ω*)Σ*^½‖_F = e^{-2 rate t} ‖…(0)‖ exactly (module docstring).
        w0 = np.linalg.norm(half @ (np.linalg.inv(g0.cov) - omega) @ half)
        for i in range(1, len(traj.t)):
            expected = math.exp(-2.0 * rate * traj.t[i]) * w0
            if expected < 1e-4 * w0:
                break
            got = np.linalg.norm(half @ (np.linalg.inv(traj.cov[i]) - omega) @ half)
            # Integrator rtol 1e-11 on Σ, relative to an error down to 1e-4 of the start.
            assert got == pytest.approx(expected, rel=1e-6)


def test_constructive_design_closed_forms() -> None:
    d = 4
    rng, target = _random_target(7, d)
    omega = np.linalg.inv(target.cov)
    s = random_skew(rng, d)
    res = design_mean_matching(target, rate=0.8, cov_rate=3.0, rotation=s, min_ess=None)
    lay = res.layer
    (v_mat, b_mat) = lay.heads[0]
    np.testing.assert_allclose(lay.A, 1.5 * np.eye(d) + s @ omega, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(v_mat, -0.8 * np.eye(d))
    # B = R/(−2v) with R = AᵀΩ* + Ω*A = 2aΩ* = 3Ω*.
    r = lay.A.T @ omega + omega @ lay.A
    np.testing.assert_allclose(r, 3.0 * omega, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b_mat, r / 1.6, rtol=0, atol=1e-12)
    # K = vI + SΩ* and b = −K m*.
    k = -0.8 * np.eye(d) + s @ omega
    np.testing.assert_allclose(res.certificate.mean_matrix, k, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lay.b, -k @ target.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.eigvals(k).real, -0.8, rtol=0, atol=1e-12)
    cert = res.certificate
    assert cert.kind == "global" and cert.success and cert.riccati
    assert cert.mean_rate == pytest.approx(0.8, rel=1e-12)
    assert cert.cov_rate == pytest.approx(3.0, rel=1e-12)
    assert cert.rate == pytest.approx(0.8, rel=1e-12)
    assert cert.r_min == pytest.approx(3.0, rel=1e-12)  # Σ*^½ R Σ*^½ = 3 I
    assert cert.uniqueness_gap is not None and cert.uniqueness_gap < 1e-12
    assert cert.residual < 1e-14


def test_default_rates_give_B_equal_to_target_precision_and_identity_default_cov() -> None:
    res = design_mean_matching(Gaussian([1.0, -2.0, 0.5], np.eye(3)), rate=0.5, **EXACT)
    np.testing.assert_allclose(res.target.cov, np.eye(3))
    lay = res.layer
    np.testing.assert_allclose(lay.A, 0.5 * np.eye(3), atol=1e-15)
    np.testing.assert_allclose(lay.heads[0][1], np.eye(3), atol=1e-15)
    np.testing.assert_allclose(lay.b, 0.5 * np.array([1.0, -2.0, 0.5]), atol=1e-15)
    assert res.cov_rate == 1.0 and res.certificate.cov_rate == pytest.approx(1.0, rel=1e-13)


def test_design_convergence_data_reaches_the_target() -> None:
    _, target = _random_target(3, 3)
    res = design_mean_matching(target, rate=1.0, **EXACT)
    data = design_convergence(res, n_starts=3, n_points=41, seed=1)
    assert data.mean_error.shape == (3, len(data.t)) == data.cov_error.shape
    assert np.all(data.mean_error[:, -1] < 1e-5) and np.all(data.cov_error[:, -1] < 1e-12)
    assert np.all(data.mean_error[:, 0] > 0.1)
    assert data.rate == pytest.approx(1.0) and data.cov_rate == pytest.approx(2.0)


# ----------------------------------------------------------------------------- robustness


def test_robustness_of_constructive_design_equals_its_rates() -> None:
    d = 3
    rng, target = _random_target(11, d)
    res = design_mean_matching(
        target,
        rate=0.6,
        cov_rate=2.0,
        rotation=random_skew(rng, d),
        robustness=RobustnessCheck(n_directions=4, n_samples=8),
        min_ess=None,
    )
    rob = res.robustness
    assert rob is not None
    # Whitened linearizations are normal: K̂ = vI + skew, DF = Lyapunov operator of −Âᵀ.
    assert rob.mean_radius == pytest.approx(0.6, rel=1e-10)
    assert rob.cov_radius == pytest.approx(2.0, rel=1e-10)
    assert rob.radius == pytest.approx(0.6, rel=1e-10) and rob.binding == "mean"
    assert rob.linear_stable_fraction == 1.0
    assert abs(rob.worst_case_abscissa) < 1e-9
    assert 0 < rob.parameter_radius <= 1.0
    assert rob.parameter_stable_fraction == 1.0
    # The destabilizing perturbation really is not stable (checked with the equilibria module).
    bad = rob.destabilizing
    assert bad is not None
    eqs = equilibria(bad, cross_check=False)
    stable_ok = [e for e in eqs if e.stable and np.max(np.linalg.eigvals(e.mean_matrix).real) < 0]
    assert not stable_ok


def test_stability_radius_of_nonnormal_design_matches_a_frequency_sweep() -> None:
    d = 3
    rng, target = _random_target(5, d)
    v = -1.2 * np.eye(d) + 0.5 * rng.standard_normal((d, d))
    res = design_mean_matching(target, rate=0.4, fixed_V=v, **EXACT)
    assert res.success
    rob = design_robustness(res.layer, res.target, n_directions=2, n_samples=4)
    # Brute force in whitened coordinates: K̂ = Σ*^{-½} K Σ*^{½}.
    h = _sqrtm(target.cov)
    k_hat = np.linalg.solve(h, res.certificate.mean_matrix @ h)
    ws = np.linspace(0.0, 20.0, 40001)
    eye = np.eye(d)
    sweep = min(np.linalg.svd(k_hat - 1j * w * eye, compute_uv=False)[-1] for w in ws)
    # The grid step 5e-4 bounds the sweep's overestimate (quadratic near the minimum).
    assert rob.mean_radius == pytest.approx(sweep, rel=1e-6)
    assert rob.linear_stable_fraction == 1.0
    assert abs(rob.worst_case_abscissa) < 1e-8


def test_robustness_refuses_a_layer_without_the_target_equilibrium() -> None:
    lay = Layer(np.eye(2), B=np.eye(2), V=-1.0)
    with pytest.raises(InvalidParametersError, match="not an equilibrium"):
        design_robustness(lay, Gaussian([0.0, 0.0], 3.0 * np.eye(2)))


# ----------------------------------------------------------------------------- CasADi


def _assert_converges(res, rng, n_starts: int, spread: float | None = None) -> None:
    target = res.target
    T = 22.0 / res.certificate.rate
    for _ in range(n_starts):
        if spread is None:
            g0 = _random_start(rng, target)
        else:
            e = rng.standard_normal((target.dim, target.dim))
            g0 = Gaussian(
                target.mean + spread * rng.standard_normal(target.dim),
                target.cov + spread * (e @ e.T) / target.dim,
            )
        traj = simulate(res.layer, g0, T, n_points=11)
        assert traj.status == "success"
        assert np.linalg.norm(traj.mean[-1] - target.mean) <= 1e-6 * max(
            np.linalg.norm(target.mean), 1.0
        )
        assert np.linalg.norm(traj.cov[-1] - target.cov) <= 1e-6 * np.linalg.norm(target.cov)


def test_casadi_design_with_fixed_pretrained_B_is_exact_global_and_converges() -> None:
    d = 4
    rng, target = _random_target(21, d)
    b_fixed = _spd(rng, d, 0.2) + 0.3 * random_skew(rng, d)
    res = design_mean_matching(target, rate=1.0, fixed_B=b_fixed, **EXACT)
    assert res.success, res.message
    assert res.method == "casadi" and res.fixed == ("B",)
    np.testing.assert_array_equal(res.layer.heads[0][1], b_fixed)
    cert = res.certificate
    assert cert.kind == "global" and cert.success
    assert cert.mean_rate >= 1.0 * (1 - 1e-6) and cert.cov_rate >= 2.0 * (1 - 1e-6)
    # Independent: slycot's unique equilibrium of the designed layer is the target.
    eq = equilibria(res.layer)[0]
    np.testing.assert_allclose(eq.cov, target.cov, rtol=1e-9, atol=1e-12)
    _assert_converges(res, rng, 5)


def test_minimum_norm_design_is_no_larger_than_a_feasible_constructive_one() -> None:
    rng, target = _random_target(22, 3)
    res = design_mean_matching(target, rate=0.7, minimum_norm=True, **EXACT)
    assert res.success and res.certificate.kind == "global"
    # The constructive design with covariance rate 1.4 (1 + 1/κ) is feasible for the NLP (its
    # Lyapunov weight has tr P = κ n exactly), so the optimum is no larger (whitened metric).
    kappa = 100.0  # the default max_condition
    ref = design_mean_matching(target, rate=0.7, cov_rate=1.4 * (1 + 1 / kappa), **EXACT)
    assert res.whitened_norm <= ref.whitened_norm * (1 + 1e-6)
    assert res.certificate.mean_rate == pytest.approx(0.7, rel=1e-5)  # the bound is active
    assert res.certificate.cov_rate >= 1.4
    _assert_converges(res, rng, 3)


def test_casadi_design_with_fixed_general_V_is_local_and_exact() -> None:
    d = 3
    rng, target = _random_target(23, d)
    v = -1.5 * np.eye(d) + 0.4 * rng.standard_normal((d, d))
    res = design_mean_matching(target, rate=0.5, fixed_V=v, **EXACT)
    assert res.success, res.message
    np.testing.assert_array_equal(res.layer.heads[0][0], v)
    cert = res.certificate
    assert cert.kind == "local" and not cert.riccati
    eq = equilibrium_at(res.layer, target.cov)
    assert eq.residual < 1e-12 and eq.stable
    assert -eq.spectral_abscissa >= 1.0 * (1 - 1e-6)
    assert -np.max(np.linalg.eigvals(eq.mean_matrix).real) >= 0.5 * (1 - 1e-6)
    _assert_converges(res, rng, 3, spread=0.1)


def test_casadi_design_with_full_designed_V_and_fixed_A_and_fixed_scalar_v() -> None:
    d = 3
    rng, target = _random_target(24, d)
    full = design_mean_matching(target, rate=0.5, V_structure="full", **EXACT)
    assert full.success and full.certificate.success, full.message
    # fixed A with eigenvalues 0.8 ± i·…: covariance rate 1.6 ≥ 1.
    a0 = 0.8 * np.eye(d) + 0.3 * random_skew(rng, d)
    a_fixed = target.cov @ a0 @ np.linalg.inv(target.cov)
    res_a = design_mean_matching(target, rate=0.5, cov_rate=1.0, fixed_A=a_fixed, **EXACT)
    assert res_a.success and res_a.certificate.kind == "global"
    np.testing.assert_array_equal(res_a.layer.A, a_fixed)
    assert res_a.certificate.cov_rate == pytest.approx(1.6, rel=1e-10)
    res_v = design_mean_matching(target, rate=0.5, cov_rate=1.0, fixed_V=-0.7, **EXACT)
    assert res_v.success and res_v.certificate.kind == "global"
    np.testing.assert_array_equal(res_v.layer.heads[0][0], -0.7 * np.eye(d))
    assert res_v.certificate.mean_rate == pytest.approx(0.7, rel=1e-10)


def test_casadi_design_with_indefinite_B_is_local_when_allowed() -> None:
    rng, target = _random_target(25, 2)
    b_fixed = np.diag([1.0, -0.3])
    res = design_mean_matching(
        target,
        rate=0.5,
        fixed_B=b_fixed,
        require_global=False,
        **EXACT,
    )
    assert res.success, res.message
    assert res.certificate.kind == "local" and res.certificate.r_min is not None
    assert res.certificate.r_min < 0  # R indefinite: no global certificate is possible
    _assert_converges(res, rng, 2, spread=0.02)


# ----------------------------------------------------------------------------- infeasible


@pytest.mark.parametrize(
    ("kwargs", "opts", "match"),
    [
        ({"fixed_B": np.diag([1.0, -0.5])}, None, "symmetric part"),
        ({"fixed_V": 0.5}, None, "v = 0.5 ≥ 0"),
        ({"fixed_V": -0.3, "rate": 1.0}, None, "mean rate"),
        ({"fixed_A": np.diag([0.2, 2.0]), "cov_rate": 1.0}, None, "covariance rate"),
        ({"fixed_A": np.array([[1.0, 3.0], [0.0, 1.0]])}, None, "R = AᵀΣ"),
        ({"fixed_A": np.eye(2), "fixed_B": np.diag([1.0, 2.0])}, None, "equilibrium"),
        ({"fixed_V": np.diag([-1.0, 0.5])}, None, "tr V"),
        ({"fixed_V": np.diag([-3.0, -2.0])}, {"require_global": True}, "global"),
        ({"fixed_V": -1.0, "fixed_B": 0.1 * np.eye(2), "cov_rate": 5.0}, None, "tr R"),
        (
            {"fixed_V": np.diag([-3.0, -2.0]), "fixed_B": 0.01 * np.eye(2)},
            None,
            "trace of DF",
        ),
    ],
)
def test_infeasible_requests_fail_with_the_reason(kwargs, opts, match) -> None:
    with pytest.raises(UnreachableTargetError, match=match):
        design_mean_matching(Gaussian([1.0, 0.5], np.eye(2)), **(opts or {}), **kwargs)


def test_margin_out_of_reach_of_the_bounded_certificate_is_named() -> None:
    # tr V = −2.4 passes the necessary trace condition for rate 1. With max_condition = 1 the
    # certificate of a normal K needs α(K) ≤ −2·rate: out of reach (K = −1.2 I + skew), so the
    # mean-margin slack stays positive and is named; the layer itself still verifies (its
    # spectral mean rate is 1.2 ≥ 1), so the result is certified but "suboptimal".
    res = design_mean_matching(
        Gaussian([1.0, -1.0], np.eye(2)),
        rate=1.0,
        fixed_V=np.diag([-1.2, -1.2 + 1e-3]),
        max_condition=1.0,
        **EXACT,
    )
    assert res.stats["slack"]["mean"] > 0.5 and not res.stats["optimal"]
    assert "binding constraint is the mean margin" in res.message
    assert "max_condition = 1" in res.message
    assert res.success and res.status is Status.SUCCESS and not res.optimal
    assert "the norm may not be minimal" in res.message
    assert res.certificate.mean_rate >= 1.0


def test_iteration_limit_is_reported() -> None:
    res = design_mean_matching(
        Gaussian([1.0, -1.0], [[1.0, 0.4], [0.4, 0.8]]),
        rate=2.0,
        V_structure="full",
        solver=IpoptSettings(max_iter=1),
        **EXACT,
    )
    assert res.stats["return_status"] == "Maximum_Iterations_Exceeded"
    assert not res.stats["optimal"]
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success and not res.optimal
    assert "iteration cap max_iter = 1" in res.message
    assert res.message.startswith("IPOPT: Maximum_Iterations_Exceeded")


# ----------------------------------------------------------------------------- validation


def test_input_validation() -> None:
    with pytest.raises(InvalidGaussianError, match="positive-definite"):
        design_mean_matching(Gaussian([0.0, 0.0], [[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(InvalidParametersError, match="rate"):
        design_mean_matching(Gaussian([0.0, 0.0], np.eye(2)), rate=-1.0)
    with pytest.raises(InvalidParametersError, match="skew"):
        design_mean_matching(Gaussian([0.0, 0.0], np.eye(2)), rotation=np.eye(2))
    with pytest.raises(InvalidParametersError, match="rotation"):
        design_mean_matching(
            Gaussian([0.0, 0.0], np.eye(2)), rotation=np.zeros((2, 2)), fixed_V=-1.0
        )
    with pytest.raises(InvalidParametersError, match="fixed_B"):
        design_mean_matching(Gaussian([0.0, 0.0], np.eye(2)), fixed_B=np.eye(3))
    with pytest.raises(InvalidParametersError, match="V_structure"):
        design_mean_matching(Gaussian([0.0, 0.0], np.eye(2)), V_structure="diag")
    with pytest.raises(InvalidParametersError, match="max_condition"):
        design_mean_matching(Gaussian([0.0, 0.0], np.eye(2)), max_condition=0.5)


def test_certificate_of_layers_that_do_not_match() -> None:
    target = Gaussian([0.0, 0.0], np.eye(2))
    # Not an equilibrium.
    cert = design_certificate(
        Layer(np.eye(2), B=np.eye(2), V=-1.0), Gaussian([0.0, 0.0], 3 * np.eye(2))
    )
    assert cert.kind == "none" and not cert.success and "not an equilibrium" in cert.message
    # Blow-up regime (same-sign V and B): R = −I ≺ 0 and −2Σ + Σ² = 0 at Σ* = 2I, whose
    # linearization has spectrum −(λ_i + λ_j)(A) = 2 > 0.
    lay = Layer(-np.eye(2), B=np.eye(2), V=0.5)
    cert = design_certificate(lay, Gaussian([0.0, 0.0], 2 * np.eye(2)))
    assert cert.kind == "none" and cert.residual < 1e-15 and cert.cov_rate < 0
    # Requested rate above what the layer delivers.
    good = design_mean_matching(Gaussian([0.0, 0.0], np.eye(2)), rate=1.0, **EXACT).layer
    cert = design_certificate(good, target, rate=1.5)
    assert cert.kind == "global" and not cert.success and "mean rate" in cert.message


def test_convergence_figure_is_written(tmp_path: Path) -> None:
    from gtcontrol.plotting.design import plot_design_convergence

    res = design_mean_matching(Gaussian([1.0, -1.0], np.eye(2)), rate=1.0, **EXACT)
    data = design_convergence(res, n_starts=2, n_points=21)
    out = tmp_path / "convergence.png"
    plot_design_convergence(
        data.t, data.mean_error, data.cov_error, out, rate=data.rate, cov_rate=data.cov_rate
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- result protocol


def _assert_protocol(res: Any) -> None:
    assert isinstance(res, Result)
    assert isinstance(res.status, Status)
    assert isinstance(res.success, bool) and res.success == (res.status is Status.SUCCESS)
    assert isinstance(res.message, str) and res.message
    assert isinstance(res.stats, Mapping)


def test_every_design_result_follows_the_result_protocol() -> None:
    res = design_mean_matching(
        Gaussian([1.0, -1.0], np.eye(2)),
        rate=1.0,
        robustness=RobustnessCheck(n_directions=2, n_samples=2),
        min_ess=None,
    )
    assert res.status is Status.SUCCESS and res.optimal
    _assert_protocol(res)
    _assert_protocol(res.certificate)
    assert res.robustness is not None
    _assert_protocol(res.robustness)
    data = design_convergence(res, n_starts=2, n_points=11)
    _assert_protocol(data)
    assert data.status is Status.SUCCESS and data.stats["max_final_cov_error"] < 1e-9
    # An invalid certificate is INFEASIBLE, with the failing condition in the message.
    cert = design_certificate(res.layer, res.target, rate=5.0)
    _assert_protocol(cert)
    assert cert.status is Status.INFEASIBLE and not cert.success and "mean rate" in cert.message


# ----------------------------------------------------------------------------- time_limit


def test_tiny_time_limit_returns_the_best_iterate_quickly() -> None:
    d = 4
    rng, target = _random_target(21, d)
    b_fixed = _spd(rng, d, 0.2) + 0.3 * random_skew(rng, d)
    t0 = time.perf_counter()
    res = design_mean_matching(target, rate=1.0, fixed_B=b_fixed, time_limit=1e-6)
    assert time.perf_counter() - t0 < 5.0
    _assert_protocol(res)
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success and not res.optimal
    assert "time limit" in res.message
    assert res.stats["iterations"] == 0 and res.stats["attempts"] == []
    # The best iterate: the closed-form starting design, with the fixed B kept exactly.
    np.testing.assert_array_equal(res.layer.heads[0][1], b_fixed)
    assert res.certificate.residual < 1e-9
    # The robustness report stops early too, with what it measured.
    rob = res.robustness
    assert rob is not None and rob.status is Status.BUDGET_EXHAUSTED
    assert rob.radius > 0 and rob.parameter_directions == 0


def test_reports_after_a_late_certificate_do_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """At d = 256 a certificate that ends past the time limit leaves no room for the token
    check, not even its set-up, nor for robustness radii whose estimate passes what is left of
    the tolerance (one native call each): both are reported not started. Under load the radii,
    then the token check's set-up (its default depth's certificate and the step rule), ran
    past the limit of 0.3 s to 1.31–1.37 s. The estimate is made huge after the certificate,
    so that the refusal does not depend on the machine's speed."""
    from gtcontrol.control.design import _finite_n
    from gtcontrol.control.design import mean_matching as mm

    _, target = _random_target(31, 256)
    limit = 0.5
    real_certify = mm._certify

    def late_certify(*args: Any) -> Any:
        out = real_certify(*args)
        monkeypatch.setattr(mm, "_CERTIFICATE_MATMULS", ((math.inf, 10**9),))
        time.sleep(max(clock + limit + 0.05 - time.perf_counter(), 0.0))
        return out

    def no_set_up(*args: Any) -> Any:
        raise AssertionError("the token check's set-up ran on a spent budget")

    monkeypatch.setattr(mm, "_certify", late_certify)
    monkeypatch.setattr(_finite_n, "_default_depth", no_set_up)
    monkeypatch.setattr(_finite_n, "_auto_steps", no_set_up)
    clock = time.perf_counter()
    res = design_mean_matching(target, token_check=256, time_limit=limit)
    assert time.perf_counter() - clock <= allowed(limit)
    assert res.status is Status.BUDGET_EXHAUSTED and res.certificate.success
    rob, tokens = res.robustness, res.token_certificate
    assert rob is not None and rob.status is Status.BUDGET_EXHAUSTED
    assert "the robustness radii were not started: at d = 256" in rob.message
    assert math.isnan(rob.radius) and rob.parameter_directions == 0
    assert tokens is not None and tokens.status is Status.BUDGET_EXHAUSTED
    assert "no token was moved" in tokens.message and len(tokens.t) == 0


def test_generous_time_limit_does_not_change_the_design() -> None:
    _, target = _random_target(22, 2)
    a = design_mean_matching(target, rate=0.7, minimum_norm=True, **EXACT)
    b = design_mean_matching(target, rate=0.7, minimum_norm=True, time_limit=60.0, **EXACT)
    assert a.status is b.status is Status.SUCCESS
    assert b.whitened_norm == pytest.approx(a.whitened_norm, rel=1e-8)


def test_robustness_and_convergence_respect_a_tiny_time_limit() -> None:
    res = design_mean_matching(Gaussian([1.0, -1.0], np.eye(2)), rate=1.0, **EXACT)
    t0 = time.perf_counter()
    rob = design_robustness(res.layer, res.target, n_directions=50, time_limit=1e-6)
    assert time.perf_counter() - t0 < 5.0
    assert rob.status is Status.BUDGET_EXHAUSTED and not rob.success
    assert rob.mean_radius == pytest.approx(1.0, rel=1e-10) and "time limit" in rob.message
    data = design_convergence(res, n_starts=4, n_points=11, time_limit=1e-6)
    assert data.status is Status.BUDGET_EXHAUSTED and len(data.starts) == 1
    assert data.mean_error.shape == (1, 11)
    with pytest.raises(InvalidParametersError, match="time_limit"):
        design_mean_matching(Gaussian([1.0, -1.0], np.eye(2)), time_limit=-1.0)
    with pytest.raises(InvalidParametersError, match="time_limit"):
        design_robustness(res.layer, res.target, time_limit=0.0)


def test_design_convergence_honours_its_time_limit_inside_a_start() -> None:
    """Issue 12: the first start ran to completion whatever time_limit (37 s for 5 s).

    Mean rate 0.01 against covariance rate 50 makes the default depth 16/0.01 = 1600 stiff
    for the explicit integrator: one start took 80 s here. The limit now reaches inside it.
    """
    _, target = _random_target(10, 10)
    res = design_mean_matching(target, rate=0.01, cov_rate=50.0, **EXACT)
    t0 = time.perf_counter()
    data = design_convergence(res, n_starts=5, n_points=101, time_limit=0.5)
    assert time.perf_counter() - t0 < 1.5
    _assert_protocol(data)
    assert data.status is Status.BUDGET_EXHAUSTED and "start 1 reached depth" in data.message
    assert len(data.starts) == 1 and data.mean_error.shape == (1, 101) == data.cov_error.shape
    # The best iterate: the depths reached, NaN beyond (the start was cut, not finished).
    reached = np.isfinite(data.mean_error[0])
    assert reached[0] and not reached[-1] and np.all(np.diff(reached.astype(int)) <= 0)
    assert np.array_equal(reached, np.isfinite(data.cov_error[0]))
    assert math.isnan(data.stats["max_final_mean_error"])
    np.testing.assert_allclose(data.t, np.linspace(0.0, 1600.0, 101))
    with pytest.raises(InvalidParametersError, match="n_points"):
        design_convergence(res, n_points=1)


def test_ipopt_stops_when_the_budget_runs_out_during_a_solve(monkeypatch) -> None:
    import gtcontrol.control.design.mean_matching as mm
    from gtcontrol._status import Budget

    class RunsOutInsideIpopt(Budget):
        """Spent from the third check on: after the NLP is built, inside the first solve."""

        def __init__(self, time_limit: float | None = None) -> None:
            super().__init__(time_limit)
            self.checks = 0

        @property
        def exhausted(self) -> bool:
            self.checks += 1
            return self.checks > 2

    monkeypatch.setattr(mm, "Budget", RunsOutInsideIpopt)
    _, target = _random_target(21, 3)
    res = design_mean_matching(target, rate=1.0, minimum_norm=True, time_limit=100.0, **EXACT)
    assert res.stats["attempts"] == ["User_Requested_Stop"]
    assert res.status is Status.BUDGET_EXHAUSTED and "time limit" in res.message
    assert res.certificate.residual < 1e-9  # the best iterate is polished to an equilibrium


# -- min_ess is a requirement; the NLP is set up inside the budget


def _ill_conditioned_cov(d: int, condition: float, seed: int = 100) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return (q * np.logspace(0, -math.log10(condition), d)) @ q.T


@pytest.mark.parametrize(
    ("mean", "cov"),
    [
        pytest.param(np.ones(8), _ill_conditioned_cov(8, 1e8), marks=pytest.mark.slow),  # 8 s
        ([1e8], [[1e-8]]),
    ],
    ids=["condition-1e8-d8", "mean-1e8-var-1e-8"],
)
def test_a_design_whose_min_ess_is_not_met_is_not_success(mean: Any, cov: Any) -> None:
    """An unmet ``min_ess`` is FAILED with the certified unscaled layer, not a 10⁶-stiff SUCCESS.

    Reproducer: ../shared/hostile-cases/07_design_success_ess_not_met.py.
    """
    res = gt.design_mean_matching(gt.Gaussian(mean, cov), robustness=False, time_limit=30)
    assert res.ess is not None and not res.ess.success
    assert res.status is gt.Status.FAILED and not res.success
    assert res.message.startswith("min_ess = 0.5 is not met")
    # the layer is the certified unscaled design, not a 10⁶-stiff one that buys nothing
    assert res.certificate.success and res.ess.scale == 1.0
    assert res.certificate.mean_rate == pytest.approx(1.0, rel=1e-6)
    # without the requirement the same design is a success
    plain = gt.design_mean_matching(gt.Gaussian(mean, cov), robustness=False, min_ess=None)
    assert plain.success and np.allclose(plain.layer.A, res.layer.A)


def test_design_with_fixed_b_at_d24_keeps_half_a_second() -> None:
    """The design NLP is set up inside the budget: estimated, refused in time, the start kept.

    Reproducer: ../shared/hostile-cases/08_design_nlp_time_limit.py.
    """
    rng = np.random.default_rng(100)
    m = rng.standard_normal((24, 24))
    cov = m @ m.T / 24 + 0.3 * np.eye(24)
    rng = np.random.default_rng(5)
    bf = rng.standard_normal((24, 24))
    bf = bf @ bf.T / 24 + np.eye(24)
    res, wall = timed(
        lambda: gt.design_mean_matching(gt.Gaussian(np.ones(24), cov), fixed_B=bf, time_limit=0.5)
    )
    assert wall <= allowed(0.5), wall  # was 34-40 s
    assert res.status is gt.Status.BUDGET_EXHAUSTED
    assert "estimated at" in res.message and "time limit of 0.5 s" in res.message
    assert res.certificate.success  # the closed-form starting design, verified
    assert np.array_equal(res.layer.heads[0][1], bf)  # the fixed B is kept exactly
