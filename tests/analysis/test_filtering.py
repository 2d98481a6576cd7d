"""Tests of gtcontrol.analysis.filtering: the Kalman–Bucy ↔ Transformer covariance correspondence.

Evidence: the adaptive moment integrator (gtcontrol.simulate) against the filter
Riccati ODE integrated in filter variables and against the exact Radon solution
(gtcontrol.riccati_flow); python-control's care/lqe against the Transformer's equilibria
(gtcontrol.equilibria) and the moment field; softmax tokens with Euler–Maruyama noise against
the exact discrete moment recursion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gtcontrol import Result, Status
from gtcontrol.analysis.equilibria import equilibria
from gtcontrol.analysis.filtering import (
    KalmanData,
    compare_filter,
    from_kalman,
    kalman_covariance,
    kalman_steady_state,
    to_kalman,
)
from gtcontrol.analysis.riccati import riccati_flow, riccati_form
from gtcontrol.control.design import design_mean_matching
from gtcontrol.errors import InvalidParametersError
from gtcontrol.model.gaussian import Gaussian
from gtcontrol.model.moments import moment_field, simulate, simulate_discrete
from gtcontrol.model.params import Layer
from gtcontrol.model.tokens import simulate_tokens


def _filter_problem(seed: int, d: int = 3, p: int = 2) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((d, d)) * 0.7
    h = rng.standard_normal((p, d))
    x = rng.standard_normal((p, p))
    r = x @ x.T + 0.5 * np.eye(p)
    y = rng.standard_normal((d, d))
    q = y @ y.T / d + 0.1 * np.eye(d)
    return f, h, r, q


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.linalg.norm(a - b, axis=(-2, -1))) / np.max(np.linalg.norm(b)))


# ----------------------------------------------------------------------------- the maps


def test_from_kalman_and_to_kalman_are_inverse_on_the_riccati_data() -> None:
    f, h, r, q = _filter_problem(0)
    layer = from_kalman(f, h, r, q)
    form = riccati_form(layer)
    assert form is not None and form.v == (-1.0,)
    info = h.T @ np.linalg.solve(r, h)
    np.testing.assert_array_equal(layer.A, f)
    np.testing.assert_allclose(form.R, info, rtol=0, atol=1e-14 * np.abs(info).max())
    np.testing.assert_allclose(layer.noise @ layer.noise.T, q, rtol=0, atol=1e-14)
    kd = to_kalman(layer)
    assert kd.n_outputs == 2 and np.array_equal(kd.R, np.eye(2))  # p = rank HᵀR⁻¹H = 2
    np.testing.assert_array_equal(kd.F, f)
    np.testing.assert_allclose(kd.information, info, rtol=0, atol=1e-13 * np.abs(info).max())
    np.testing.assert_allclose(kd.Q, q, rtol=0, atol=1e-14)


def test_to_kalman_keeps_the_rank_of_R_and_handles_several_heads() -> None:
    # Two scalar heads, R = −Σ v_h (B_h + B_hᵀ) of rank 1.
    u = np.array([1.0, 2.0, -1.0])
    layer = Layer(np.eye(3), heads=[(-1.0, np.outer(u, u)), (-0.5, 0.0 * np.eye(3))])
    kd = to_kalman(layer)
    assert kd.n_outputs == 1
    np.testing.assert_allclose(kd.information, 2.0 * np.outer(u, u), atol=1e-13)
    assert not np.any(kd.Q)
    # No heads: R = 0, one output with H = 0.
    kd0 = to_kalman(Layer(np.eye(2)))
    assert kd0.H.shape == (1, 2) and not np.any(kd0.H)


def test_to_kalman_refuses_layers_without_a_filter_counterpart() -> None:
    with pytest.raises(InvalidParametersError, match="Riccati class"):
        to_kalman(Layer(np.eye(2), B=np.eye(2), V=np.diag([-1.0, -2.0])))
    with pytest.raises(InvalidParametersError, match="negative eigenvalue"):
        to_kalman(Layer(np.eye(2), B=np.eye(2), V=1.0))  # same-sign V and B: R ≺ 0


def test_kalman_data_validation() -> None:
    with pytest.raises(InvalidParametersError, match="R: the measurement-noise"):
        KalmanData(np.eye(2), np.eye(2), np.diag([1.0, 0.0]))
    with pytest.raises(InvalidParametersError, match="Q: expected a positive semi-definite"):
        KalmanData(np.eye(2), np.eye(2), np.eye(2), np.diag([1.0, -1.0]))
    with pytest.raises(InvalidParametersError, match="H"):
        KalmanData(np.eye(2), np.eye(3), np.eye(3))


# ----------------------------------------------------------------------------- trajectories


@pytest.mark.parametrize("noisy", [False, True])
def test_kalman_bucy_covariance_equals_transformer_covariance_along_trajectories(
    noisy: bool,
) -> None:
    f, h, r, q = _filter_problem(1)
    layer = from_kalman(f, h, r, q if noisy else None)
    g0 = Gaussian(
        np.array([0.3, -0.2, 0.1]), np.array([[1.0, 0.2, 0.0], [0.2, 0.6, 0.1], [0.0, 0.1, 0.8]])
    )
    traj = simulate(layer, g0, 4.0, n_points=41)
    assert traj.status == "success"
    # The filter ODE in filter variables (its own field and integrator).
    p = kalman_covariance(KalmanData(f, h, r, q if noisy else None), g0.cov, traj.t).cov
    assert _rel(traj.cov, p) < 1e-9
    # The exact Radon solution [X; Y]' = [[F, Q], [HᵀR⁻¹H, −Fᵀ]] [X; Y], P = XY⁻¹.
    exact = riccati_flow(layer, g0, traj.t).cov
    assert _rel(traj.cov, exact) < 1e-9
    assert _rel(p, exact) < 1e-9
    cmp = compare_filter(layer, g0, 4.0, n_points=41)
    assert cmp.max_rel_diff < 1e-9
    assert isinstance(cmp, Result) and cmp.status is Status.SUCCESS and cmp.success
    assert cmp.message and "seconds" in cmp.stats


# ----------------------------------------------------------------------------- steady states


def test_filter_ARE_steady_state_equals_the_transformer_equilibrium_with_noise() -> None:
    f, h, r, q = _filter_problem(2)
    layer = from_kalman(f, h, r, q)
    care = kalman_steady_state(layer, method="care")
    lqe = kalman_steady_state(KalmanData(f, h, r, q), method="lqe")
    assert care.status is Status.SUCCESS and care.positive_definite and care.residual < 1e-13
    assert np.max(care.poles.real) < 0
    np.testing.assert_allclose(care.cov, lqe.cov, rtol=1e-12, atol=0)
    # The Transformer's moment field vanishes there (plugged back into the one home of the field).
    _, ds = moment_field(layer, np.zeros(3), care.cov)
    assert np.linalg.norm(ds) < 1e-12 * np.linalg.norm(q)
    # Its equilibria (Newton with deflation): the stable one is P.
    eqs = equilibria(layer)
    stable = [e for e in eqs if e.stable]
    assert len(stable) == 1
    assert _rel(np.asarray(stable[0].cov), care.cov) < 1e-9
    # And the moment ODE converges to it.
    g0 = Gaussian(np.zeros(3), np.eye(3))
    traj = simulate(layer, g0, 60.0, n_points=3)
    assert _rel(traj.cov[-1], care.cov) < 1e-9
    cmp = compare_filter(layer, g0, 2.0, n_points=5)
    assert cmp.steady_rel_diff < 1e-9


def test_noiseless_filter_steady_state_is_the_designed_equilibrium() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 3))
    target = x @ x.T / 3 + 0.4 * np.eye(3)
    design = design_mean_matching(
        Gaussian([1.0, 0.0, -1.0], target),
        rate=0.7,
        rotation=np.array([[0.0, 0.5, 0.0], [-0.5, 0.0, 0.2], [0.0, -0.2, 0.0]]),
        robustness=False,
    )
    kd = to_kalman(design.layer)
    for method in ("care", "lqe"):
        ss = kalman_steady_state(kd, method=method)
        assert ss.status is Status.SUCCESS and ss.positive_definite
        np.testing.assert_allclose(ss.cov, target, rtol=1e-9, atol=1e-12)
    eq = equilibria(design.layer)[0]  # slycot Lyapunov route (SB03MD)
    np.testing.assert_allclose(kalman_steady_state(kd).cov, eq.cov, rtol=1e-9, atol=1e-12)


def test_filter_ARE_without_a_positive_definite_solution_is_reported() -> None:
    # Q = 0 and F Hurwitz: P = 0 is the stabilizing solution; the Transformer collapses.
    ss = kalman_steady_state(KalmanData(-np.eye(2), np.eye(2), np.eye(2)))
    assert ss.status is Status.SUCCESS and not ss.positive_definite
    np.testing.assert_allclose(ss.cov, 0.0, atol=1e-12)


# ----------------------------------------------------------------------------- noisy tokens


def test_noisy_tokens_match_the_noisy_moment_recursion_within_sampling_error() -> None:
    f = np.array([[0.3, -0.5], [0.5, 0.2]])
    q = np.array([[0.8, 0.2], [0.2, 0.5]])
    layer = from_kalman(f, np.eye(2), 2.0 * np.eye(2), q)
    n, steps, T = 2000, 40, 2.0
    rng = np.random.default_rng(0)
    x0 = rng.multivariate_normal([0.5, -0.3], [[0.3, 0.05], [0.05, 0.2]], size=n)
    tok = simulate_tokens(
        layer, x0, T, method="euler", steps_per_layer=steps, noise=layer.noise, seed=1
    )
    start = Gaussian.from_samples(x0)
    pred = simulate_discrete(layer, start, T, steps_per_layer=steps).final.cov
    emp = tok.final.cov
    # Standard error of an empirical covariance entry: sqrt((Σ_ii Σ_jj + Σ_ij²)/N).
    se = np.sqrt((np.outer(np.diag(pred), np.diag(pred)) + pred**2) / n)
    assert np.max(np.abs(emp - pred) / se) < 4.0
    # Without the G Gᵀ term the prediction is far outside the sampling error (the test bites).
    silent = simulate_discrete(layer.replace(noise=None), start, T, steps_per_layer=steps)
    assert np.max(np.abs(emp - silent.final.cov) / se) > 10.0


def test_filter_figure_is_written(tmp_path: Path) -> None:
    from gtcontrol.plotting.design import plot_filter_covariance

    f, h, r, q = _filter_problem(5, d=2, p=1)
    cmp = compare_filter(from_kalman(f, h, r, q), Gaussian([0.0, 0.0], np.eye(2)), 1.0, n_points=11)
    out = tmp_path / "filter.png"
    plot_filter_covariance(
        cmp.trajectory.t, cmp.filter_cov, cmp.trajectory.cov, out, steady=cmp.steady_care.cov
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- protocol, budgets


def test_steady_state_failure_is_a_status_not_an_exception() -> None:
    # An unobservable unstable mode (H = 0, Q ≻ 0): no stabilizing solution.
    ss = kalman_steady_state(KalmanData(np.eye(2), np.zeros((1, 2)), np.eye(1), np.eye(2)))
    assert isinstance(ss, Result)
    assert ss.status is Status.FAILED and not ss.success and "failed" in ss.message
    assert np.all(np.isnan(ss.cov))


def test_filter_time_limits() -> None:
    import time

    f, h, r, q = _filter_problem(6)
    layer = from_kalman(f, h, r, q)
    g0 = Gaussian(np.zeros(3), np.eye(3))
    t0 = time.perf_counter()
    cmp = compare_filter(layer, g0, 50.0, n_points=11, time_limit=1e-4)
    assert time.perf_counter() - t0 < 2.0
    assert cmp.status is Status.BUDGET_EXHAUSTED and not cmp.success
    assert cmp.steady_care.success  # the direct solves always come back
    capped = kalman_covariance(KalmanData(f, h, r, q), np.eye(3), [0.0, 50.0], max_evals=10)
    assert capped.status is Status.BUDGET_EXHAUSTED and not capped.success
    assert np.isfinite(capped.cov[0]).all() and np.isnan(capped.cov[1]).all()
    with pytest.raises(InvalidParametersError, match="time_limit"):
        compare_filter(layer, g0, 1.0, time_limit=0.0)
