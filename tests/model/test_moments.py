"""Moment ODE and discrete recursion against closed forms and independent integrators."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from helpers import wishart_spd
from scipy.integrate import solve_ivp
from scipy.linalg import expm, sqrtm

from gtcontrol import (
    FeedForward,
    Gaussian,
    InvalidGaussianError,
    InvalidParametersError,
    Layer,
    Schedule,
    Status,
    moment_field,
    simulate,
    simulate_discrete,
)


# ---------------------------------------------------------------- scalar closed form (§3)
def _omega(t: np.ndarray, a: float, c: float, s0: float) -> np.ndarray:
    """1/σ(t) for dσ/dt = 2aσ + 2cσ²."""
    if a == 0.0:
        return 1.0 / s0 - 2.0 * c * t
    return (1.0 / s0 + c / a) * np.exp(-2.0 * a * t) + (-c / a)


@pytest.mark.parametrize(
    ("a", "v", "B", "s0", "T"),
    [
        (0.4, -1.0, 0.5, 0.3, 3.0),  # c < 0, a > 0: converges to -a/c
        (-0.5, 1.0, 0.2, 0.5, 3.0),  # a < 0, c > 0, below -a/c: decays
        (0.0, -0.5, 1.0, 2.0, 4.0),  # a = 0, c < 0: decays like 1/t
        (-0.3, -0.5, 0.5, 1.0, 2.0),  # both negative
    ],
)
def test_scalar_trajectory_matches_closed_form(a, v, B, s0, T) -> None:
    c = v * B
    traj = simulate(Layer([[a]], [[B]], V=v), Gaussian([0.0], [[s0]]), T=T)
    assert traj.status == "success" and traj.blowup_time == math.inf
    sigma = 1.0 / _omega(traj.t, a, c, s0)
    np.testing.assert_allclose(traj.cov[:, 0, 0], sigma, rtol=1e-9, atol=0)


@pytest.mark.parametrize(
    ("a", "c", "s0"),
    [(0.3, 0.4, 0.7), (0.0, 0.5, 0.8), (-0.5, 1.0, 1.0), (-0.2, 0.05, 10.0), (2.0, 0.1, 0.05)],
)
def test_scalar_blowup_time(a, c, s0) -> None:
    t_star = 1.0 / (2 * c * s0) if a == 0 else math.log(1 + a / (c * s0)) / (2 * a)
    # T is not a multiple of t_star, so that no recorded depth sits on the singularity
    traj = simulate(Layer([[a]], [[c]], V=1.0), Gaussian([1.0], [[s0]]), T=1.7 * t_star)
    assert traj.status == "blowup"
    assert traj.blowup_time == pytest.approx(t_star, rel=1e-9)
    # all recorded points precede the singularity and follow the closed form
    assert traj.t[-1] <= t_star * (1 + 1e-9)
    sigma = 1.0 / _omega(traj.t[:-1], a, c, s0)
    np.testing.assert_allclose(traj.cov[:-1, 0, 0], sigma, rtol=1e-8)


def test_unstable_equilibrium_above_and_below() -> None:
    a, c = -0.5, 1.0  # σ* = 0.5 unstable
    lay = Layer([[a]], [[c]], V=1.0)
    below = simulate(lay, Gaussian([0.0], [[0.45]]), T=20.0)
    above = simulate(lay, Gaussian([0.0], [[0.55]]), T=20.0)
    assert below.status == "success" and below.cov[-1, 0, 0] < 1e-8
    assert above.status == "blowup"
    t_star = math.log(1 + a / (c * 0.55)) / (2 * a)
    assert above.blowup_time == pytest.approx(t_star, rel=1e-9)


def test_exponential_growth_is_not_reported_as_blowup() -> None:
    traj = simulate(Layer([[3.0]]), Gaussian([1.0], [[1.0]]), T=10.0)
    assert traj.status == "success"
    assert traj.cov[-1, 0, 0] == pytest.approx(math.exp(60.0), rel=1e-8)
    assert traj.mean[-1, 0] == pytest.approx(math.exp(30.0), rel=1e-8)


# ---------------------------------------------------------------- multi-head, A = 0 (§3)
def test_zero_drift_multihead_blowup_time() -> None:
    rng = np.random.default_rng(10)
    d = 3
    heads = []
    for v in (0.7, 1.3):
        p = wishart_spd(rng, d)
        heads.append(
            (v, p + 0.2 * (rng.standard_normal((d, d))))
        )  # B + Bᵀ ≻ 0 not required per head
    r = -sum(v * (b + b.T) for v, b in heads)
    assert np.max(np.linalg.eigvalsh(r)) < 0
    s0 = wishart_spd(rng, d)
    h = np.real(sqrtm(s0))
    t_star = 1.0 / np.max(np.linalg.eigvalsh(h @ (-r) @ h))
    traj = simulate(Layer(heads=heads, dim=d), Gaussian(rng.standard_normal(d), s0), T=3 * t_star)
    assert traj.status == "blowup"
    assert traj.blowup_time == pytest.approx(t_star, rel=1e-9)


# ---------------------------------------------------------------- Riccati class: Radon (§4)
def _radon(a: np.ndarray, r: np.ndarray, s0: np.ndarray, t: float) -> np.ndarray:
    d = a.shape[0]
    ham = np.block([[a, np.zeros((d, d))], [r, -a.T]])
    xy = expm(t * ham) @ np.vstack([s0, np.eye(d)])
    return np.linalg.solve(xy[d:].T, xy[:d].T).T  # X Y^{-1}


def test_riccati_class_matches_radon_linearization() -> None:
    rng = np.random.default_rng(11)
    d = 4
    a = rng.standard_normal((d, d)) * 0.5
    b1, b2 = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    lay = Layer(a, heads=[(-0.4, b1 @ b1.T), (0.3, b2)])
    r = 0.4 * (2 * b1 @ b1.T) - 0.3 * (b2 + b2.T)
    s0 = wishart_spd(rng, d)
    traj = simulate(lay, Gaussian(np.zeros(d), s0), T=1.0)
    for i in range(0, len(traj), 25):
        ref = _radon(a, r, s0, traj.t[i])
        assert np.linalg.norm(traj.cov[i] - ref) <= 1e-9 * np.linalg.norm(ref)


def test_schedule_switches_exactly_at_layer_boundaries() -> None:
    rng = np.random.default_rng(12)
    d, L, T = 3, 4, 2.0
    layers, data = [], []
    for _ in range(L):
        a = rng.standard_normal((d, d)) * 0.4
        bb = wishart_spd(rng, d)
        layers.append(Layer(a, bb, V=-0.5))
        data.append((a, 0.5 * 2 * bb))
    s0 = wishart_spd(rng, d)
    traj = simulate(Schedule(layers, T), Gaussian(np.zeros(d), s0))
    s = s0
    for k, (a, r) in enumerate(data):
        s = _radon(a, r, s, T / L)
        i = int(np.argmin(np.abs(traj.t - (k + 1) * T / L)))
        assert traj.t[i] == pytest.approx((k + 1) * T / L, abs=1e-15)
        assert np.linalg.norm(traj.cov[i] - s) <= 1e-9 * np.linalg.norm(s)


# ---------------------------------------------------------------- independent integrator
def _independent_rhs(layer: Layer, d: int):
    a, b = layer.A, layer.b
    vs = np.array([h[0] for h in layer.heads])
    bs = np.array([h[1] for h in layer.heads])

    def rhs(t, y):
        m, s = y[:d], y[d:].reshape(d, d)
        mm = a + np.einsum("hij,jk,hkl->il", vs, s, bs)
        c = b + np.einsum("hij,j->i", vs, m)
        return np.concatenate([mm @ m + c, (mm @ s + s @ mm.T).ravel()])

    return rhs


def test_general_v_matches_independent_high_accuracy_integration() -> None:
    rng = np.random.default_rng(13)
    d = 5
    heads = [
        (rng.standard_normal((d, d)) * 0.1, rng.standard_normal((d, d)) * 0.1) for _ in range(3)
    ]
    lay = Layer(rng.standard_normal((d, d)) * 0.3, b=rng.standard_normal(d), heads=heads)
    g0 = Gaussian(rng.standard_normal(d), wishart_spd(rng, d))
    traj = simulate(lay, g0, T=1.0)
    assert traj.status == "success"
    y0 = np.concatenate([g0.mean, g0.cov.ravel()])
    ref = solve_ivp(
        _independent_rhs(lay, d),
        (0, 1.0),
        y0,
        method="Radau",
        rtol=1e-13,
        atol=1e-15,
        t_eval=traj.t,
    )
    for i in range(len(traj)):
        m_ref, s_ref = ref.y[:d, i], ref.y[d:, i].reshape(d, d)
        assert np.linalg.norm(traj.mean[i] - m_ref) <= 1e-8 * max(np.linalg.norm(m_ref), 1)
        assert np.linalg.norm(traj.cov[i] - s_ref) <= 1e-8 * np.linalg.norm(s_ref)


def test_moment_field_matches_definition_with_identity_ffn() -> None:
    rng = np.random.default_rng(14)
    d = 3
    w, u, c = rng.standard_normal((d, 5)), rng.standard_normal((5, d)), rng.standard_normal(5)
    a, bb, v = rng.standard_normal((d, d)), rng.standard_normal((d, d)), rng.standard_normal((d, d))
    b = rng.standard_normal(d)
    lay = Layer(a, bb, v, b, ffn=FeedForward(u, w, b_in=c, activation="identity"))
    m, s = rng.standard_normal(d), wishart_spd(rng, d)
    dm, ds = moment_field(lay, m, s)
    mm = a + w @ u + v @ s @ bb
    np.testing.assert_allclose(dm, mm @ m + b + w @ c + v @ m, rtol=1e-13)
    np.testing.assert_allclose(ds, mm @ s + s @ mm.T, rtol=1e-13)
    assert np.array_equal(ds, ds.T)
    with pytest.raises(InvalidParametersError, match="relu"):
        simulate(
            Layer(a, ffn=FeedForward(u, w, b_in=c, activation="relu")), Gaussian.standard(d), T=1
        )


# ---------------------------------------------------------------- rank invariance (§2)
def test_rank_is_invariant_and_cov_is_congruent() -> None:
    rng = np.random.default_rng(15)
    d, r = 5, 2
    f = rng.standard_normal((d, r))
    s0 = f @ f.T
    lay = Layer(rng.standard_normal((d, d)) * 0.5, rng.standard_normal((d, d)), V=0.4)
    traj = simulate(lay, Gaussian(np.ones(d), s0), T=1.0)
    assert set(traj.rank.tolist()) == {r}
    # the null space of Σ0ᵀ transported by Φ^{-T} stays the null space: Σ(t) = Φ Σ0 Φᵀ
    for i in (50, 100, 200):
        w = np.linalg.eigvalsh(traj.cov[i])
        assert np.all(w[: d - r] <= 1e-10 * w[-1])


# ---------------------------------------------------------------- time-varying controls
@dataclass(frozen=True)
class _Ramp:
    """A(t) = a t in d = 1: σ(t) = σ0 exp(a t²), m(t) = m0 exp(a t²/2)."""

    a: float
    T: float

    @property
    def breakpoints(self) -> np.ndarray:
        return np.array([0.0, self.T])

    def layer_at(self, t: float) -> Layer:
        return Layer([[self.a * t]])


def test_time_varying_control() -> None:
    traj = simulate(_Ramp(0.8, 2.0), Gaussian([0.5], [[0.3]]))
    np.testing.assert_allclose(traj.cov[:, 0, 0], 0.3 * np.exp(0.8 * traj.t**2), rtol=1e-9)
    np.testing.assert_allclose(traj.mean[:, 0], 0.5 * np.exp(0.4 * traj.t**2), rtol=1e-9)


# ---------------------------------------------------------------- discrete recursion (§2)
def test_discrete_recursion_is_the_affine_step() -> None:
    rng = np.random.default_rng(16)
    d, L, T = 3, 5, 1.0
    layers = [
        Layer(
            rng.standard_normal((d, d)) * 0.3,
            rng.standard_normal((d, d)) * 0.3,
            rng.standard_normal((d, d)) * 0.3,
            rng.standard_normal(d),
        )
        for _ in range(L)
    ]
    g0 = Gaussian(rng.standard_normal(d), wishart_spd(rng, d))
    traj = simulate_discrete(Schedule(layers, T), g0)
    assert len(traj) == L + 1
    np.testing.assert_allclose(traj.t, np.linspace(0, T, L + 1), rtol=0, atol=1e-15)
    # transport explicit samples by the affine map of each step: their exact moments agree
    x = g0.sample(7, seed=0)
    m, s = g0.mean, g0.cov
    h = T / L
    for k, lay in enumerate(layers):
        v, bb = lay.heads[0]
        mm = lay.A + v @ s @ bb
        c = lay.b + v @ m
        x = x + h * (x @ mm.T + c)
        m, s = m + h * (mm @ m + c), (np.eye(d) + h * mm) @ s @ (np.eye(d) + h * mm).T
        np.testing.assert_allclose(traj.mean[k + 1], m, rtol=1e-13)
        np.testing.assert_allclose(traj.cov[k + 1], s, rtol=1e-12)
    # many small discrete steps converge to the ODE (first order in h)
    ode = simulate(Schedule(layers, T), g0)
    errs = []
    for n in (50, 100, 200):
        fine = simulate_discrete(Schedule(layers, T), g0, steps_per_layer=n)
        errs.append(np.linalg.norm(fine.cov[-1] - ode.cov[-1]))
    assert 1.8 < errs[0] / errs[1] < 2.2 and 1.8 < errs[1] / errs[2] < 2.2


# ---------------------------------------------------------------- Brownian forcing (§6)
def test_noise_adds_g_gt() -> None:
    a, g, s0 = -0.7, 0.6, 0.2
    traj = simulate(Layer([[a]], noise=[[g]]), Gaussian([1.0], [[s0]]), T=3.0)
    q = g * g / (2 * a)
    np.testing.assert_allclose(traj.cov[:, 0, 0], (s0 + q) * np.exp(2 * a * traj.t) - q, rtol=1e-9)
    np.testing.assert_allclose(traj.mean[:, 0], np.exp(a * traj.t), rtol=1e-9)
    # Euler–Maruyama moments: Σ⁺ = (1 + h a)² Σ + h g²
    disc = simulate_discrete(
        Layer([[a]], noise=[[g]]), Gaussian([1.0], [[s0]]), T=3.0, steps_per_layer=30
    )
    s, h = s0, 0.1
    for k in range(30):
        s = (1 + h * a) ** 2 * s + h * g * g
        assert disc.cov[k + 1, 0, 0] == pytest.approx(s, rel=1e-13)


# ---------------------------------------------------------------- bad input
def test_bad_input_names_the_input() -> None:
    lay = Layer(np.eye(2))
    g = Gaussian.standard(2)
    with pytest.raises(InvalidParametersError, match="T"):
        simulate(lay, g, T=0.0)
    with pytest.raises(InvalidParametersError, match="T"):
        simulate(lay, g, T=-1.0)
    with pytest.raises(InvalidParametersError, match="T"):
        simulate(lay, g)
    with pytest.raises(InvalidGaussianError, match="initial"):
        simulate(lay, Gaussian.standard(3), T=1.0)
    with pytest.raises(InvalidParametersError, match="layers"):
        Schedule([], 1.0)
    with pytest.raises(InvalidParametersError, match=r"B: has leading size 3"):
        Layer(np.eye(2), np.eye(3))
    with pytest.raises(InvalidParametersError, match=r"B: expected shape \(2, 2\)"):
        Layer(np.eye(2), np.ones((2, 3)))
    with pytest.raises(InvalidParametersError, match="A"):
        Layer([[np.nan, 0], [0, 1]])
    with pytest.raises(InvalidParametersError, match="rtol"):
        simulate(lay, g, T=1.0, rtol=-1)
    with pytest.raises(InvalidParametersError, match="method"):
        simulate(lay, g, T=1.0, method="euler")
    with pytest.raises(InvalidParametersError, match="differs"):
        simulate(Schedule([lay], 1.0), g, T=2.0)
    with pytest.raises(InvalidParametersError, match="steps_per_layer"):
        simulate_discrete(lay, g, T=1.0, steps_per_layer=0)


# ---------------------------------------------------------------- result protocol and budgets
def test_trajectory_follows_the_result_protocol() -> None:
    from gtcontrol import Result, Status

    traj = simulate(Layer([[-0.5]], [[1.0]], V=-1.0), Gaussian([1.0], [[0.5]]), T=1.0)
    assert isinstance(traj, Result)
    assert traj.status is Status.SUCCESS and traj.success is True
    assert traj.message == "integrated to the horizon"
    assert traj.stats["nfev"] > 0 and traj.stats["seconds"] >= 0
    blow = simulate(Layer(B=[[1.0]], V=1.0), Gaussian([0.0], [[0.5]]), T=2.0)
    assert blow.status is Status.BLOWUP and blow.success  # a blow-up is the answer
    assert "blow-up" in blow.message and blow.blowup_time == pytest.approx(1.0, rel=1e-9)


def test_tiny_time_limit_returns_budget_exhausted_quickly() -> None:
    import time

    from gtcontrol import Status

    lay = Layer(np.eye(2) * 0.1, np.eye(2), V=-0.5)
    clock = time.perf_counter()
    traj = simulate(lay, Gaussian.standard(2), T=50.0, time_limit=1e-6)
    assert time.perf_counter() - clock < 0.5
    assert traj.status is Status.BUDGET_EXHAUSTED and not traj.success
    assert "time limit" in traj.message
    # the partial trajectory: at least the initial state, finite
    assert len(traj) >= 1 and traj.t[0] == 0.0 and np.all(np.isfinite(traj.cov))
    np.testing.assert_array_equal(traj.cov[0], np.eye(2))
    disc = simulate_discrete(
        lay, Gaussian.standard(2), T=1.0, steps_per_layer=10**6, time_limit=1e-3
    )
    assert disc.status is Status.BUDGET_EXHAUSTED and "time limit" in disc.message
    assert 1 <= len(disc) < 10**6 + 1


def test_evaluation_cap_keeps_an_accurate_partial_trajectory() -> None:
    from gtcontrol import Status

    a, c, s0 = 0.3, -1.0, 0.5  # converges to σ* = -a/c
    lay = Layer([[a]], [[c]], V=1.0)
    traj = simulate(lay, Gaussian([1.0], [[s0]]), T=2.0, max_evals=100)
    assert traj.status is Status.BUDGET_EXHAUSTED
    assert "cap of 100 evaluations" in traj.message
    assert traj.stats["nfev"] == 101  # the 101st evaluation is refused
    assert 2 < len(traj) and 0.0 < traj.t[-1] < 2.0
    assert np.all(np.diff(traj.t) > 0)
    # every state kept is a state of the true trajectory
    sigma = 1.0 / _omega(traj.t, a, c, s0)
    np.testing.assert_allclose(traj.cov[:, 0, 0], sigma, rtol=1e-9)
    # the default cap is finite and generous
    assert simulate(lay, Gaussian([1.0], [[s0]]), T=2.0).status == "success"


def test_step_collapse_at_a_singularity_is_classified_as_blowup() -> None:
    from gtcontrol import Status

    # blowup_factor so large that the watch never samples: the step size collapses at T* = 1,
    # which is evidence of the blow-up (issue 11), not a failure
    traj = simulate(Layer(B=[[1.0]], V=1.0), Gaussian([0.0], [[0.5]]), T=2.0, blowup_factor=1e300)
    assert traj.status is Status.BLOWUP and traj.success
    assert "step size collapsed" in traj.message
    assert traj.blowup_time == pytest.approx(1.0, rel=1e-10)
    assert traj.blowup_bracket is not None
    lower, upper = traj.blowup_bracket
    # lower: the last depth reached; both ends within the integration error of T* = 1
    assert lower == traj.t[-1] <= traj.blowup_time <= upper
    assert abs(lower - 1.0) < 1e-10 and abs(upper - 1.0) < 1e-10
    assert len(traj) > 50
    early = traj.t < 0.99  # away from the singularity the kept states are accurate
    sigma = 1.0 / _omega(traj.t[early], 0.0, 1.0, 0.5)
    np.testing.assert_allclose(traj.cov[early, 0, 0], sigma, rtol=1e-8)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_points": 10**7}, r"n_points: expected a positive integer at most 1000000"),
        ({"n_points": 0}, "n_points"),
        ({"max_evals": 10**10}, r"max_evals: .*at most 1000000000"),
        ({"max_evals": 0}, "max_evals"),
        ({"max_evals": 2.5}, "max_evals"),
        ({"time_limit": 0.0}, "time_limit"),
        ({"time_limit": -1.0}, "time_limit"),
        ({"time_limit": "soon"}, "time_limit"),
        ({"blowup_factor": 1.0}, "blowup_factor"),
        ({"max_step": 0.0}, "max_step"),
        ({"atol": float("nan")}, "atol"),
    ],
)
def test_absurd_options_are_refused_up_front(kwargs, match) -> None:
    with pytest.raises(InvalidParametersError, match=match):
        simulate(Layer(np.eye(2)), Gaussian.standard(2), T=1.0, **kwargs)


def test_absurd_discrete_options_are_refused() -> None:
    g = Gaussian.standard(2)
    with pytest.raises(InvalidParametersError, match=r"steps_per_layer.*at most 1000000"):
        simulate_discrete(Layer(np.eye(2)), g, T=1.0, steps_per_layer=10**7)
    with pytest.raises(InvalidParametersError, match="time_limit"):
        simulate_discrete(Layer(np.eye(2)), g, T=1.0, time_limit=0)


def test_options_are_keyword_only_and_the_validator_is_private() -> None:
    import gtcontrol
    from gtcontrol.model._moment_integrator import IntegratorOptions

    with pytest.raises(TypeError):
        simulate(Layer(np.eye(2)), Gaussian.standard(2), 1.0, 1e-8)  # type: ignore[misc]
    assert "IntegratorOptions" not in gtcontrol.__all__
    assert IntegratorOptions().n_points == 201
    with pytest.raises(InvalidParametersError, match="method"):
        IntegratorOptions(method="euler")


def test_discrete_recursion_overflow_is_an_overflow_not_a_blowup() -> None:
    """Finitely many residual steps cannot blow up in finite depth: leaving the floating-point
    range is ``OVERFLOW``, with the depth in the message and the arrays stopping before it."""
    traj = simulate_discrete(
        Layer(B=[[1.0]], V=1.0), Gaussian([0.0], [[1.0]]), 20.0, steps_per_layer=40
    )
    assert traj.status is Status.OVERFLOW and not traj.success
    assert "overflowed" in traj.message and math.isinf(traj.blowup_time)
    assert np.all(np.isfinite(traj.cov)) and traj.t[-1] < 20.0


def test_an_integrator_warning_becomes_the_failure_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # LSODA warns ("repeated convergence failures") and then fails its step; the warning is the
    # reason, so it must reach the result's message and not the user's terminal.
    import warnings

    from scipy.integrate import LSODA

    def failing_step(self: LSODA) -> tuple[bool, str]:
        warnings.warn("lsoda: Repeated convergence failures (test)", UserWarning, stacklevel=1)
        return False, "Unexpected istate in LSODA."

    monkeypatch.setattr(LSODA, "_step_impl", failing_step)
    layer = Layer(B=np.eye(2), V=-1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any escaping warning fails the test
        tr = simulate(layer, Gaussian(np.zeros(2), np.eye(2)), 1.0, method="LSODA")
    assert tr.status is not Status.SUCCESS and not tr.success
    assert "Repeated convergence failures (test)" in tr.message
    assert "Unexpected istate" in tr.message


@pytest.mark.parametrize("seed", [0, 19, 38])
def test_blowup_watch_stops_when_its_estimates_converge_geometrically(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Near the singularity the integrator loosens its tolerance, and the extrapolations of
    1/λ_max then agree only to a fraction of the remaining time: the watch stops on their
    geometric convergence, with a bracket that holds the same-tolerance run's estimate taken
    to the collapse of the step, in fewer evaluations, and within 1e-7 of a tight run."""
    from gtcontrol import FactoredHeads, Status
    from gtcontrol.model._blowup_detection import BlowupWatch

    rng = np.random.default_rng(seed)
    q, k, v = (0.8 * rng.standard_normal((3, 2, 6)) for _ in range(3))
    o = 0.8 * rng.standard_normal((3, 6, 2))
    layer = Layer(heads=FactoredHeads(q, k, v, o), A=0.3 * rng.standard_normal((6, 6)))
    g0 = Gaussian(rng.standard_normal(6), np.eye(6))
    tight = simulate(layer, g0, 20.0, rtol=1e-11, atol=1e-14, n_points=5)
    fast = simulate(layer, g0, 20.0, rtol=1e-6, n_points=5)
    assert fast.status is Status.BLOWUP and "converge geometrically" in fast.message
    monkeypatch.setattr(BlowupWatch, "_geometric", lambda self: None)
    full = simulate(layer, g0, 20.0, rtol=1e-6, n_points=5)
    assert full.status is Status.BLOWUP and "geometrically" not in full.message
    assert fast.blowup_bracket is not None
    lower, upper = fast.blowup_bracket
    assert lower <= full.blowup_time <= upper
    assert fast.stats["nfev"] < full.stats["nfev"]
    assert fast.blowup_time == pytest.approx(tight.blowup_time, rel=1e-7)
