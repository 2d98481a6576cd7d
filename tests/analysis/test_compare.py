"""compare_tokens: real tokens against the moment ODE, error ~ N^(-1/2), and an honest verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import refused

import gtcontrol as gt
from gtcontrol import (
    FeedForward,
    Gaussian,
    InvalidParametersError,
    Layer,
    Result,
    Schedule,
    Status,
    compare_tokens,
    moment_field,
    simulate,
)
from gtcontrol._status import Budget
from gtcontrol.analysis._compare_checks import kurtosis_ratio, min_evals
from gtcontrol.model.finite_n import worst_ess_fraction
from gtcontrol.model.gaussian_closure import linearized_layer, simulate_closure
from gtcontrol.model.params import Control, as_control

ROOT = Path(__file__).resolve().parents[2]


def _setup() -> tuple[Layer, Gaussian]:
    lay = Layer(A=[[0.2, -0.5], [0.5, 0.1]], B=[[0.8, 0.3], [-0.1, 0.6]], V=-0.7, b=[0.3, -0.2])
    return lay, Gaussian([0.5, -0.3], [[0.8, 0.2], [0.2, 0.5]])


def test_errors_fall_like_inverse_sqrt_n_and_the_verdict_is_consistent() -> None:
    lay, g0 = _setup()
    cmp = compare_tokens(lay, g0, 0.6, n_tokens=(128, 512, 2048), repeats=6, seed=1)
    assert cmp.n_tokens == (128, 512, 2048)
    for name, slope in cmp.slopes.items():
        # 6 repeats per N: the RMS error has ~30 % relative noise, so the fitted slope over a
        # 16x range of N is known to about ±0.2 around the theoretical -1/2.
        assert -0.8 < slope < -0.25, (name, slope)
    assert cmp.consistent and cmp.message.count("consistent: ") == 1, cmp.message
    assert "NOT" not in cmp.message and f"N^{cmp.slopes['bures_wasserstein']:+.2f}" in cmp.message
    # default integrator: adaptive, tolerance from the statistical error; measured against a
    # converged integration of the same tokens, far below the statistical error
    assert cmp.stats["method"] == "DOP853" and 1e-9 <= cmp.stats["rtol"] <= 1e-3
    assert cmp.integration_error < 1e-6 < 0.1 * cmp.statistical_error
    assert cmp.statistical_error == cmp.bures_wasserstein[-1]
    # ESS/N along the path, from model.finite_n, reported and moderate for this mild layer
    assert cmp.ess is not None and cmp.ess_t is not None and cmp.ess.shape == cmp.ess_t.shape
    g_t0 = Gaussian(cmp.predicted.mean[0], cmp.predicted.cov[0])
    assert cmp.ess[0] == pytest.approx(float(worst_ess_fraction(lay, g_t0, n_std=2.0)[0]))
    assert 0.01 < cmp.ess_min <= 1.0 and cmp.stats["effective_keys"] > 10
    assert abs(cmp.stats["kurtosis_ratio"] - 1.0) < 0.15  # the cloud stays Gaussian
    # the predicted trajectory is the moment ODE from the exact initial Gaussian
    assert cmp.reference == "moment ODE"
    assert cmp.predicted.status == "success" and cmp.predicted.t[-1] == pytest.approx(0.6)
    assert np.all(cmp.bures_wasserstein > 0)
    assert cmp.bures_wasserstein[-1] < cmp.bures_wasserstein[0] / 2
    rows = cmp.table()
    assert [r["n_tokens"] for r in rows] == [128, 512, 2048]
    assert cmp.example is not None
    assert cmp.example.n_tokens == 2048 and len(cmp.example.snapshots) == 4
    assert isinstance(cmp, Result) and cmp.status is Status.SUCCESS and cmp.success
    assert cmp.stats["completed_runs"] == 18 and 0 < cmp.stats["work"] <= cmp.stats["max_work"]


def test_starved_softmax_is_not_consistent_and_says_why() -> None:
    """V = -0.5 I, B = 5 I from N(0, I), T = 2: the error does not fall like N^(-1/2) (it grows
    over these N). The integrator is ruled out (its error is ~1e-7 against a statistical error
    ~5e-2); ESS/N = exp(-uᵀΣu) is ~1e-44 for queries 2σ out, so the softmax is starved: the
    outer queries' attention falls short of the tilted mean 5Σx, the outer tokens lag, and the
    cloud becomes heavy-tailed (Mardia kurtosis well above its Gaussian value)."""
    lay = Layer(B=5.0 * np.eye(2), V=-0.5)
    g0 = Gaussian(np.zeros(2), np.eye(2))
    cmp = compare_tokens(lay, g0, 2.0, n_tokens=(128, 512, 2048), repeats=2)
    assert cmp.status is Status.SUCCESS and cmp.success  # the comparison itself completed
    assert not cmp.consistent
    slope = cmp.slopes["bures_wasserstein"]
    assert abs(slope + 0.5) > 0.5, slope  # measured +0.28: far from -1/2
    assert cmp.integration_error < 1e-3 * cmp.statistical_error
    assert cmp.ess_min < 1e-40 and cmp.stats["effective_keys"] < 1e-30
    assert cmp.stats["kurtosis_ratio"] > 1.2
    msg = cmp.message
    assert "NOT consistent" in msg and "integrator is not the cause" in msg
    assert "starved" in msg and "Mardia kurtosis" in msg and "ESS/N" in msg


def test_integration_error_above_the_statistical_error_is_not_consistent() -> None:
    """One residual step per layer is not the continuous-depth model: the comparison says the
    integrator, not the statistics, dominates."""
    lay, g0 = _setup()
    cmp = compare_tokens(lay, g0, 0.6, n_tokens=(64, 256), repeats=2, method="discrete")
    assert not cmp.consistent and cmp.status is Status.SUCCESS
    assert cmp.integration_error > 0.1 * cmp.statistical_error
    assert "NOT below a tenth" in cmp.message and "refine the token integration" in cmp.message


def test_relu_feedforward_is_compared_against_the_gaussian_closure() -> None:
    """Formerly refused (no exact moment ODE); now the tokens are compared against the
    moment-matched Gaussian flow, checked here against an independent integration of it."""
    ffn = FeedForward(
        W_out=[[0.5, 0.2], [-0.1, 0.4]], W_in=[[1.0, 0.3], [-0.2, 1.0]], b_in=[0.1, -0.2]
    )
    lay = Layer(A=-0.3 * np.eye(2), B=[[0.5, 0.1], [0.0, 0.4]], V=-0.5, ffn=ffn)
    g0 = Gaussian([0.3, -0.1], [[1.0, 0.2], [0.2, 0.6]])
    cmp = compare_tokens(lay, g0, 1.0, n_tokens=(64, 256), repeats=2)
    assert cmp.status is Status.SUCCESS and cmp.reference == "Gaussian closure"
    assert "against the Gaussian closure" in cmp.message
    mean, cov = _closure_by_solve_ivp(lay, g0, [1.0])
    np.testing.assert_allclose(cmp.predicted.final.cov, cov[-1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cmp.predicted.final.mean, mean[-1], rtol=1e-9, atol=1e-12)
    # ReLU kinks cost the 8th-order pair its order; still far below the statistical error
    assert cmp.integration_error < 0.01 * cmp.statistical_error


def test_gaussian_closure_is_the_moment_ode_for_affine_layers_and_stein_exact() -> None:
    rng = np.random.default_rng(3)
    w, u, c = rng.standard_normal((2, 3)), rng.standard_normal((3, 2)), rng.standard_normal(3)
    lay = Layer(
        A=-0.4 * np.eye(2),
        B=0.3 * np.eye(2),
        V=-0.5,
        ffn=FeedForward(u, w, b_in=c, activation="identity"),
    )
    g0 = Gaussian([0.2, -0.4], [[0.7, 0.1], [0.1, 0.4]])
    a, b = simulate_closure(lay, g0, 1.5), simulate(lay, g0, 1.5)
    np.testing.assert_allclose(a.final.cov, b.final.cov, rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(a.final.mean, b.final.mean, rtol=1e-8, atol=1e-11)
    # Statistical linearization = Stein: E σ(a) and E[σ(a)(x−m)ᵀ] = D U Σ, by Monte Carlo.
    for act in ("relu", "gelu"):
        lay_n = lay.replace(ffn=FeedForward(u, w, b_in=c, activation=act))
        lin = linearized_layer(lay_n, g0.mean, g0.cov)
        x = g0.sample(400_000, seed=np.random.default_rng(4))
        z = x @ u.T + c
        sig = np.maximum(z, 0.0) if act == "relu" else z * (0.5 * (1 + _erf(z / np.sqrt(2))))
        f_true = sig @ w.T
        f_lin = x @ (lin.A - lay.A).T + (lin.b - lay.b)
        se = f_true.std(axis=0) / np.sqrt(len(x))
        assert np.all(np.abs(f_true.mean(0) - f_lin.mean(0)) < 5 * se), act
        cross_true = (f_true - f_true.mean(0)).T @ (x - x.mean(0)) / len(x)
        cross_lin = (lin.A - lay.A) @ np.cov(x.T, bias=True)
        assert np.max(np.abs(cross_true - cross_lin)) < 0.02, act


def _erf(z: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(z)


def _spd(rng: np.random.Generator, d: int) -> np.ndarray:
    f = rng.standard_normal((d, d))
    return f @ f.T / d + 0.5 * np.eye(d)


def _closure_by_solve_ivp(
    lay: Layer, g0: Gaussian, times: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The closure flow of one layer by ``solve_ivp`` (RK45 on the vech of Σ), not by DOP853
    stepping: an independent integration of ``dm/dt``, ``dΣ/dt`` at the linearized layer."""
    from scipy.integrate import solve_ivp

    d = lay.dim
    iu = np.triu_indices(d)

    def rhs(_t: float, z: np.ndarray) -> np.ndarray:
        m, s = z[:d], np.zeros((d, d))
        s[iu] = z[d:]
        s = s + np.triu(s, 1).T
        dm, ds = moment_field(linearized_layer(lay, m, s), m, s)
        return np.concatenate([dm, ds[iu]])

    y0 = np.concatenate([g0.mean, g0.cov[iu]])
    sol = solve_ivp(rhs, (0.0, max(times)), y0, "RK45", times, rtol=1e-12, atol=1e-14)
    assert sol.success, sol.message
    covs = np.zeros((len(times), d, d))
    covs[:, iu[0], iu[1]] = sol.y[d:].T
    covs = covs + np.triu(covs, 1).transpose(0, 2, 1)
    return sol.y[:d].T, covs


def _affine_schedule() -> tuple[Schedule, Gaussian]:
    """Three affine layers (the second with an identity feed-forward) on [0, 1.5]."""
    rng = np.random.default_rng(7)
    ffn = FeedForward(
        W_out=rng.standard_normal((2, 3)),
        W_in=rng.standard_normal((3, 2)),
        b_in=rng.standard_normal(3),
        activation="identity",
    )
    first = Layer(A=-0.3 * np.eye(2), B=[[0.5, 0.1], [0.0, 0.4]], V=-0.5, b=[0.1, 0.2])
    second = Layer(A=[[0.1, -0.4], [0.4, 0.0]], B=0.3 * np.eye(2), V=-0.7, ffn=ffn)
    third = Layer(A=0.2 * np.eye(2), B=np.eye(2), V=-0.4, b=[-0.3, 0.0])
    net = Schedule([first, second, third], T=1.5)
    return net, Gaussian([0.3, -0.2], [[1.0, 0.2], [0.2, 0.6]])


def test_simulate_closure_of_an_affine_layer_is_the_exact_moment_ode_at_the_times() -> None:
    rng = np.random.default_rng(15)
    d, k = 3, 5
    ffn = FeedForward(
        W_out=rng.standard_normal((d, k)) / 3,
        W_in=rng.standard_normal((k, d)),
        b_in=rng.standard_normal(k),
        activation="identity",
    )
    layer = Layer(B=0.3 * _spd(rng, d), V=-0.5, ffn=ffn)
    g0 = Gaussian(rng.standard_normal(d), _spd(rng, d))
    exact = simulate(layer, g0, 1.0, n_points=5)  # depths 0, 0.25, ..., 1
    flow = simulate_closure(layer, g0, 1.0, times=exact.t)
    assert flow.status is Status.SUCCESS and flow.success
    np.testing.assert_array_equal(flow.t, exact.t)  # the requested depths, not the steps
    assert flow.stats["nsteps"] > 0 and flow.stats["nfev"] > flow.stats["nsteps"]
    np.testing.assert_allclose(flow.mean, exact.mean, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(flow.cov, exact.cov, rtol=1e-8, atol=1e-9)


def test_simulate_closure_times_across_breakpoints_are_the_moment_ode() -> None:
    """Depths inside layers come from the dense output, depths at a breakpoint once each."""
    net, g0 = _affine_schedule()
    ref = simulate(net, g0, n_points=16)  # every 0.1, breakpoints 0.5 and 1.0 included
    np.testing.assert_allclose(ref.t, np.linspace(0.0, 1.5, 16), rtol=0, atol=1e-15)
    idx = [0, 2, 5, 5, 7, 10, 13, 15]  # 0.5 asked twice; 0.2, 0.7, 1.3 inside layers
    times = ref.t[idx]
    flow = simulate_closure(net, g0, times=times)
    assert flow.status is Status.SUCCESS, flow.message
    np.testing.assert_array_equal(flow.t, times)  # 1.0 (a breakpoint) once, 0.5 as asked
    for i, j in enumerate(idx):
        cov_err = np.linalg.norm(flow.cov[i] - ref.cov[j]) / np.linalg.norm(ref.cov[j])
        mean_err = np.linalg.norm(flow.mean[i] - ref.mean[j]) / np.linalg.norm(ref.mean[j])
        assert cov_err < 1e-8 and mean_err < 1e-8, (times[i], cov_err, mean_err)
    assert flow.rank.tolist() == [2] * len(idx)
    # the depths without times: the accepted steps, every breakpoint among them once
    steps = simulate_closure(net, g0)
    assert steps.t[0] == 0.0 and steps.t[-1] == 1.5 and np.all(np.diff(steps.t) > 0)
    assert {0.5, 1.0} <= set(steps.t.tolist()) and steps.t.size == steps.stats["nsteps"] + 1


def test_relu_closure_derivative_matches_monte_carlo() -> None:
    # At a Gaussian state the closure gives the exact moment derivatives: dm/dt = E v(x),
    # dΣ/dt = E[(x − m) v(x)ᵀ] + transpose (here no attention: v(x) = W relu(Ux + c)).
    rng = np.random.default_rng(16)
    d, k, n = 3, 4, 400_000
    ffn = FeedForward(
        W_out=rng.standard_normal((d, k)),
        W_in=rng.standard_normal((k, d)),
        b_in=rng.standard_normal(k),
        activation="relu",
    )
    layer = Layer(dim=d, ffn=ffn)
    g0 = Gaussian(rng.standard_normal(d), _spd(rng, d))
    h = 1e-4
    flow = simulate_closure(layer, g0, h, times=[0.0, h], rtol=1e-12)
    m, s = flow.mean, flow.cov
    x = g0.sample(n, seed=rng)
    v = np.maximum(x @ ffn.W_in.T + ffn.b_in, 0.0) @ ffn.W_out.T
    dm = v.mean(axis=0)
    c = (x - x.mean(axis=0)).T @ (v - dm) / n
    np.testing.assert_allclose((m[-1] - m[0]) / h, dm, atol=0.02 * np.abs(dm).max())
    np.testing.assert_allclose((s[-1] - s[0]) / h, c + c.T, atol=0.03 * np.abs(c + c.T).max())


def test_simulate_closure_cut_short_keeps_the_times_reached() -> None:
    layer = Layer(B=np.eye(2), V=-0.5)
    g0 = Gaussian(np.ones(2), np.eye(2))
    flow = simulate_closure(layer, g0, 1.0, times=[0.0, 0.5, 1.0], time_limit=1e-9)
    assert flow.status is Status.BUDGET_EXHAUSTED and not flow.success
    assert "time limit" in flow.message and "at depth 0" in flow.message
    np.testing.assert_array_equal(flow.t, [0.0])  # the initial state is kept
    np.testing.assert_array_equal(flow.cov[0], g0.cov)
    capped = simulate_closure(layer, g0, 100.0, max_evals=30)
    assert capped.status is Status.BUDGET_EXHAUSTED
    assert "cap of 30 evaluations" in capped.message
    assert 1 < capped.t.size and capped.t[-1] < 100.0
    assert capped.mean.shape == (capped.t.size, 2) and capped.cov.shape == (capped.t.size, 2, 2)
    # with times: the requested depths passed before the cap, equal to those of a full run
    times = np.linspace(0.0, 100.0, 2001)  # every 0.05
    full = simulate_closure(layer, g0, 100.0, times=times)
    cut = simulate_closure(layer, g0, 100.0, times=times, max_evals=60)
    assert full.status is Status.SUCCESS and cut.status is Status.BUDGET_EXHAUSTED
    assert 1 < cut.t.size < times.size, cut.t
    np.testing.assert_array_equal(cut.t, times[: cut.t.size])
    np.testing.assert_allclose(cut.cov, full.cov[: cut.t.size], rtol=1e-13, atol=0)
    reached = float(cut.message.rpartition("at depth ")[2])
    assert cut.t[-1] <= reached < times[cut.t.size]


def test_simulate_closure_blowup_is_a_status_with_the_times_before_it() -> None:
    # d = 1, A = 0, v B = 1, σ0 = 1: the moment ODE σ' = 2σ² blows up at T* = 1/(2 σ0) = 0.5,
    # σ(t) = 1/(1 − 2t).
    times = [0.0, 0.25, 0.45, 0.75, 1.0]
    flow = simulate_closure(Layer(B=[[1.0]], V=1.0), Gaussian([0.0], [[1.0]]), 1.0, times=times)
    assert flow.status in (Status.FAILED, Status.OVERFLOW, Status.BUDGET_EXHAUSTED)
    assert not flow.success and flow.message
    np.testing.assert_array_equal(flow.t, times[:3])
    np.testing.assert_allclose(flow.cov[:, 0, 0], 1.0 / (1.0 - 2.0 * flow.t), rtol=1e-8)
    steps = simulate_closure(Layer(B=[[1.0]], V=1.0), Gaussian([0.0], [[1.0]]), 1.0)
    assert not steps.success and 0.45 < steps.t[-1] <= 0.5 + 1e-9


@pytest.mark.parametrize(
    ("times", "match"),
    [
        ([0.0, 2.0], r"times: expected non-decreasing depths in \[0, T\] = \[0, 1\]"),
        ([-0.1, 0.5], r"times: expected non-decreasing depths in \[0, T\]"),
        ([0.5, 0.2], r"times: expected non-decreasing depths"),
        ([0.0, np.nan], "times"),
        ([[0.0, 1.0]], "times"),
        ("soon", "times"),
    ],
)
def test_simulate_closure_validates_times(times: object, match: str) -> None:
    layer = Layer(B=np.eye(2), V=-0.5)
    with pytest.raises(InvalidParametersError, match=match):
        simulate_closure(layer, Gaussian(np.zeros(2), np.eye(2)), 1.0, times=times)


def test_simulate_closure_validates() -> None:
    layer = Layer(B=np.eye(2), V=-0.5)
    g0 = Gaussian(np.zeros(2), np.eye(2))
    with pytest.raises(InvalidParametersError, match="initial"):
        simulate_closure(layer, Gaussian([0.0], [[1.0]]), 1.0)
    with pytest.raises(InvalidParametersError, match="T"):
        simulate_closure(layer, g0, -1.0)
    with pytest.raises(InvalidParametersError, match=r"times: .*\[0, 1\.5\]"):  # the net's own T
        simulate_closure(_affine_schedule()[0], _affine_schedule()[1], times=[0.0, 2.0])
    flow = simulate_closure(layer, g0, 1.0, times=[0.0, 1.0])
    assert not hasattr(flow, "__iter__") and flow.t.shape == (2,)
    assert flow.mean.shape == (2, 2) and flow.cov.shape == (2, 2, 2)
    empty = simulate_closure(layer, g0, 1.0, times=[])
    assert empty.success and empty.t.shape == (0,) and empty.cov.shape == (0, 2, 2)


def test_compare_tokens_refuses_blowup_bad_counts_and_absurd_sizes_up_front() -> None:
    lay, g0 = _setup()
    with pytest.raises(InvalidParametersError, match="n_tokens"):
        compare_tokens(lay, g0, 0.5, n_tokens=(128,))
    with pytest.raises(InvalidParametersError, match="n_tokens"):
        compare_tokens(lay, g0, 0.5, n_tokens=(128, 0))
    with pytest.raises(InvalidParametersError, match="slope_tol"):
        compare_tokens(lay, g0, 0.5, n_tokens=(64, 128), slope_tol=5.0)
    with pytest.raises(InvalidParametersError, match="rtol"):
        compare_tokens(lay, g0, 0.5, n_tokens=(64, 128), method="rk4", rtol=1e-6)
    blow = Layer(B=np.eye(2), V=2.0)
    with pytest.raises(InvalidParametersError, match="blow up"):
        compare_tokens(blow, g0, 5.0, n_tokens=(64, 128))
    # Absurd sizes: refused at once, with the limit named (formerly: hours of softmax).
    clock = time.perf_counter()
    with pytest.raises(InvalidParametersError, match=r"max_work = 6e\+09") as err:
        compare_tokens(lay, g0, 0.5, n_tokens=(20_000, 100_000), repeats=100)
    assert "n_tokens, repeats" in str(err.value) and "token pairs" in str(err.value)
    # a long horizon needs many steps: sized from T too
    with pytest.raises(InvalidParametersError, match="max_work"):
        compare_tokens(lay, g0, 1000.0, n_tokens=(1024, 4096))  # ≥ 1094 evaluations per run
    assert time.perf_counter() - clock < 10.0  # the T = 1000 moment reference: ~2 s


def test_min_evals_is_a_lower_bound_of_the_work_done() -> None:
    lay, g0 = _setup()
    cmp = compare_tokens(lay, g0, 3.0, n_tokens=(32, 64), repeats=1)
    bound = min_evals(_ctrl(lay, 3.0), cmp.predicted, "DOP853", None)
    assert cmp.example is not None and bound <= cmp.example.stats["n_velocity"]
    assert min_evals(_ctrl(lay, 3.0), cmp.predicted, "rk4", 7) == 28


def _ctrl(lay: Layer, T: float) -> Control:
    return as_control(lay, T)


def test_min_evals_with_a_spent_budget_is_the_bound_without_a_path() -> None:
    """The rates along the path cost a dense eigenproblem each: a spent budget skips them and
    keeps a lower bound (one step per segment)."""
    _, g0 = _setup()
    stiff = Layer(A=-40.0 * np.eye(2))  # rate 40: about 20 stability-limited steps in T = 3
    path = simulate(stiff, g0, 3.0)
    spent = Budget(1e-9)
    time.sleep(1e-3)
    cut = min_evals(_ctrl(stiff, 3.0), path, "DOP853", None, spent)
    assert cut == min_evals(_ctrl(stiff, 3.0), None, "DOP853", None)
    assert cut < min_evals(_ctrl(stiff, 3.0), path, "DOP853", None)


def test_a_small_time_limit_holds_at_d_256_planning_and_ess_included() -> None:
    """At d = 256 the sizing of the runs (64 eigenvalue problems, once per bound) and the ESS
    pass (64 more) took 2.7 s after a 0.3 s limit; both now stop with the budget, the ESS pass
    within its grace (half of max(1 s, 10 %))."""
    d = 256
    rng = np.random.default_rng(3)
    m = rng.standard_normal((d, d))
    g0 = Gaussian(rng.standard_normal(d), m @ m.T / d + 0.3 * np.eye(d))
    lay = Layer(A=-np.eye(d), B=0.01 * np.eye(d), V=-0.5)
    clock = time.perf_counter()
    res = compare_tokens(lay, g0, 0.5, n_tokens=(256, 1024), time_limit=0.3)
    wall = time.perf_counter() - clock
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success
    assert wall < 0.3 + 1.0 + 0.5, wall  # the documented tolerance, plus slack for a busy CI
    assert res.stats["seconds"] <= wall


def test_an_ess_pass_cut_by_the_time_limit_is_not_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every run done but the predicted ESS along the path not: BUDGET_EXHAUSTED, saying so."""
    import gtcontrol.analysis.compare as compare_module

    real = compare_module.ess_along

    def grace_spent(ctrl: Control, predicted: object, budget: Budget | None = None) -> object:
        assert budget is not None
        monkeypatch.setattr(Budget, "grace", lambda self: 1e-9)
        return real(ctrl, predicted, budget)  # type: ignore[arg-type]

    monkeypatch.setattr(compare_module, "ess_along", grace_spent)
    lay, g0 = _setup()
    res = compare_tokens(lay, g0, 0.5, n_tokens=(32, 64), repeats=1, time_limit=60.0)
    assert res.stats["completed_runs"] == 2
    assert res.status is Status.BUDGET_EXHAUSTED and not res.consistent
    assert "while predicting the ESS" in res.message and res.ess.size == 0


def test_compare_tokens_time_limit_returns_partial_results() -> None:
    lay, g0 = _setup()
    t0 = time.perf_counter()
    cmp = compare_tokens(lay, g0, 0.6, n_tokens=(64, 128, 4096), repeats=10, time_limit=0.05)
    assert time.perf_counter() - t0 < 3.0
    assert cmp.status is Status.BUDGET_EXHAUSTED and not cmp.success and not cmp.consistent
    assert cmp.stats["completed_runs"] < 30 and "stopped" in cmp.message
    assert cmp.example is None


def test_stiff_moment_reference_is_capped() -> None:
    """Regression (fuzz cases 276 and 721 of the 2,000-file run): a scaled-up A made the moment
    reference spend its million evaluations (27-40 s, past the 60 s case limit under load). The
    reference is capped at 1e5 evaluations: the comparison ends in seconds, honestly."""
    from gtcontrol.analysis._compare_checks import REFERENCE_MAX_EVALS

    lay = Layer(A=[[1e7, -0.6], [0.6, 0.2]], B=[[1.0, 0.2], [0.2, 0.8]], V=-1.0, b=[0.1, 0.0])
    g0 = Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
    clock = time.perf_counter()
    cmp = compare_tokens(lay, g0, 1.5, n_tokens=(16, 32), repeats=1, steps_per_layer=3)
    assert time.perf_counter() - clock < 30.0  # ~2 s; the former cap took 27 s idle
    assert cmp.status is Status.BUDGET_EXHAUSTED and not cmp.consistent
    assert "moment reference" in cmp.message and f"cap of {REFERENCE_MAX_EVALS}" in cmp.message
    assert cmp.stats["completed_runs"] == 0 and cmp.predicted.t[-1] < 1.5


def test_work_cap_stops_with_an_honest_status() -> None:
    lay, g0 = _setup()
    cmp = compare_tokens(lay, g0, 0.6, n_tokens=(64, 512), repeats=3, max_work=2 * 10**7)
    assert cmp.status is Status.BUDGET_EXHAUSTED and not cmp.consistent
    assert "max_work = 2e+07 was reached" in cmp.message
    assert cmp.stats["work"] <= 2 * 10**7
    assert np.isfinite(cmp.bures_wasserstein[0]) and cmp.stats["completed_runs"] >= 3


def test_adaptive_and_fixed_token_methods_run_with_their_default_steps() -> None:
    """``steps_per_layer`` defaults to the method's own choice, so "adaptive" works (it refused
    the former integer default of 20 and always failed); ``steps_per_layer`` alone means rk4."""
    layer = Layer(A=-0.5 * np.eye(2), B=0.5 * np.eye(2), V=-0.5)
    g0 = Gaussian(np.zeros(2), np.eye(2))
    cmp = compare_tokens(layer, g0, T=0.5, n_tokens=(64, 128), repeats=1, method="DOP853")
    assert cmp.status is Status.SUCCESS and cmp.success
    rk4 = compare_tokens(layer, g0, T=0.5, n_tokens=(64, 128), repeats=1, steps_per_layer=4)
    assert rk4.stats["method"] == "rk4" and rk4.stats["rtol"] is None
    assert rk4.integration_error < 1e-4  # RK4 with h = 1/8 on a mild layer


def _cli_design(tmp_path: Path, extra: str) -> Path:
    text = (ROOT / "designs" / "compare-tokens.toml").read_text()
    head = text.split("[compare-tokens]")[0]  # the table deleted: the defaults apply
    design = tmp_path / "d.toml"
    design.write_text(extra + head)
    return design


def test_cli_default_compare_tokens_honours_its_time_limit(tmp_path: Path) -> None:
    """Regression (issue 12, fuzz cases 325 and 352): the shipped two-head design with its
    [compare-tokens] table deleted ran past 60 s. Its run now honours the design's time limit:
    it ends in bounded time with an honest status and a complete output folder."""
    from gtcontrol.cli import main

    design = _cli_design(tmp_path, "time_limit = 2.0\n")
    out = tmp_path / "out"
    clock = time.perf_counter()
    assert main(["run", str(design), "-o", str(out)]) == 0
    assert time.perf_counter() - clock < 30.0
    res = json.loads((out / "result.json").read_text())
    assert res["status"] == "budget_exhausted"
    assert res["outputs"]["consistent"] is False and "stopped" in res["outputs"]["message"]
    assert res["outputs"]["method"] == "DOP853"


def test_cli_absurd_compare_tokens_sizes_are_a_clean_error(tmp_path: Path, capsys) -> None:
    from gtcontrol.cli import main

    design = _cli_design(tmp_path, "")
    design.write_text(
        design.read_text() + "\n[compare-tokens]\nn_tokens = [19999, 20000]\nrepeats = 100\n"
    )
    clock = time.perf_counter()
    assert main(["run", str(design), "-o", str(tmp_path / "out")]) == 2
    assert time.perf_counter() - clock < 10.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_work" in err[0] and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_default_compare_tokens_completes_within_its_work_cap(tmp_path: Path) -> None:
    """The fuzz cases 325/352 in full: the default comparison (N = 256, 1024, 4096, 3 repeats,
    two heads, T = 1) completes, consistent, with half its former work (RK4 with 20 steps: 8.6e9
    token pairs; measured 4.0e9 now: 26 evaluations per run, 50 for the run that stops at the
    figure's snapshot depths). Deterministic: counts work, not seconds."""
    from gtcontrol.cli import main

    design = _cli_design(tmp_path, "")
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    res = json.loads((out / "result.json").read_text())
    assert res["status"] == "success" and res["outputs"]["consistent"] is True
    assert res["outputs"]["work"] <= 4.5e9


def test_kurtosis_ratio_is_one_for_gaussian_clouds() -> None:
    rng = np.random.default_rng(5)
    g = Gaussian([1.0, -2.0, 0.5], [[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]])
    assert abs(kurtosis_ratio(g.sample(200_000, seed=rng)) - 1.0) < 0.01
    heavy = rng.standard_t(5, size=(200_000, 2))  # Student t, 5 dof: heavier tails
    assert kurtosis_ratio(heavy) > 1.3


def test_work_cap_bounds_a_stiff_comparison_at_small_n() -> None:
    """Fuzz case 1885 (issue 22): N = 16 and 32 tokens with a head of gain ``B = 10⁶``. The
    reference run (adaptive, rtol 1e-8) needs hundreds of thousands of evaluations at a few
    hundred token pairs each; counted by pairs alone they stayed far below ``max_work`` and the
    call ran 94–130 s with no time limit. The fixed cost of an evaluation is now counted, so
    ``max_work`` bounds it (the default of 6·10⁹ ends it in about 40 s; here 3·10⁸, ~3 s)."""
    lay = Layer(
        A=[[-0.2, 0.5, 0.0], [-0.5, -0.2, 0.0], [0.0, 0.0, 0.1]],
        b=[0.2, 0.0, -0.1],
        heads=[
            (-0.8 * np.eye(3), np.diag([1e6, 1.0, 1.0])),
            (np.diag([0.3, 0.2, 0.2]) + 0.1 * np.eye(3, k=2), np.diag([0.5, 0.5, 0.3])),
        ],
    )
    g0 = Gaussian([0.5, -0.2, 0.1], [[1.0, 0.2, 0.0], [0.2, 0.6, 0.1], [0.0, 0.1, 0.8]])
    clock = time.perf_counter()
    cmp = compare_tokens(
        lay, g0, 1.0, n_tokens=(16, 32), repeats=1, method="rk4", steps_per_layer=1,
        max_work=3 * 10**8, seed=7,
    )  # fmt: skip
    assert time.perf_counter() - clock < 30.0
    assert cmp.status is Status.BUDGET_EXHAUSTED and "max_work = 3e+08 was reached" in cmp.message
    assert cmp.stats["work"] <= 3 * 10**8


# -- compare_tokens out of time or out of range: a result, never an internal error


LAYER = gt.Layer(A=[[0.3, -0.4], [0.4, 0.2]], B=np.eye(2), V=-1.0)


G2 = gt.Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])


def test_compare_tokens_with_a_tiny_time_limit_is_a_result() -> None:
    """``compare_tokens`` out of time returns BUDGET_EXHAUSTED, never its internal exception.

    Reproducer: ../shared/hostile-cases/02_compare_tokens_budget_leak.py.
    """
    cmp = gt.compare_tokens(LAYER, G2, T=2.0, n_tokens=(64, 256), repeats=2, time_limit=1e-9)
    assert cmp.status is gt.Status.BUDGET_EXHAUSTED and not cmp.success
    assert "time limit" in cmp.message and cmp.stats["completed_runs"] == 0


def test_compare_tokens_reports_the_overflow_of_the_moments() -> None:
    """Moments that overflow make an OVERFLOW comparison that says so, not an inconsistent one.

    Reproducer: ../shared/hostile-cases/09_design_token_check_internal_error.py.
    """
    cmp = gt.compare_tokens(gt.Layer(A=200 * np.eye(2)), G2, T=1.0, n_tokens=(64, 256), repeats=2)
    assert cmp.status is gt.Status.OVERFLOW and not cmp.consistent
    assert "overflows" in cmp.message and "1e+150" in cmp.message


def test_a_refusal_counts_past_float64_without_overflowing() -> None:
    """A horizon of 1e150 at a rate of 1e150 needs 2e300 evaluations per run, and the token
    pairs of 100 repeats at N = 10⁶ pass float64's range: formatting them raised Python's
    ``OverflowError`` (and the evaluations were printed as a 301-digit integer)."""
    layer = gt.Layer(A=-1e150 * np.eye(2))
    message = refused(
        lambda: gt.compare_tokens(
            layer,
            gt.Gaussian([0.0, 0.0], np.eye(2)),
            T=1e150,
            n_tokens=(500_000, 1_000_000),
            repeats=100,
        ),
        "n_tokens, repeats",
    )
    assert "at least 3.11e+308 token pairs" in message
    assert "at least 2e+300 evaluations per run" in message and len(message) < 500


def test_a_noisy_layer_is_refused_for_what_it_is() -> None:
    """It was refused as 'needs method euler' whatever the method, 'euler' included: the
    reference run of the same tokens is DOP853's, which has no Brownian forcing."""
    layer = gt.Layer(A=-np.eye(2), B=np.eye(2), V=-1.0, noise=0.3 * np.eye(2))
    for method in (None, "euler"):
        message = refused(
            lambda m=method: gt.compare_tokens(
                layer, gt.Gaussian([0.0, 0.0], np.eye(2)), T=1.0, n_tokens=(64, 256), method=m
            ),
            "control",
        )
        assert "a layer with noise" in message and "is not compared" in message
