"""Steering tests: reachability, the OT closed form, realization, exact and optimal
steering (CasADi/IPOPT), verified against independent evidence: the adaptive moment integrator,
Gauss–Legendre quadrature of the kinetic energy along the analytic geodesic, the
Bures–Wasserstein distance in Procrustes form, and the Benamou–Brenier lower bound."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
import pytest

from gtcontrol import (
    Collocation,
    Gaussian,
    IpoptSettings,
    Layer,
    OTSteering,
    Result,
    Schedule,
    Status,
    SteeringBounds,
    SteeringResult,
    check_reachable,
    exact_layer_steering,
    is_reachable,
    kinetic_energy,
    ot_steering,
    realize,
    simulate,
    steer,
)
from gtcontrol.control._constructions import _curvature_split, states_of, warm_starts
from gtcontrol.control._steer_problem import SteerOptions, make_plan
from gtcontrol.control._transcription import (
    STOPPED,
    _collocation_coefficients,
    field_function,
    n_params,
    pack,
    transcription,
)
from gtcontrol.errors import InvalidGaussianError, InvalidParametersError, UnreachableTargetError
from gtcontrol.model.moments import affine_velocity, moment_field
from gtcontrol.plotting.steering import plot_parameter_norms, plot_steering_moments

TIGHT = {"rtol": 1e-12, "atol": 1e-15}


def _cov(rng: np.random.Generator, d: int, rank: int | None = None) -> np.ndarray:
    """A covariance with eigenvalues in [0.4, 2] on a random range of dimension ``rank``."""
    r = d if rank is None else rank
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q[:, :r] * rng.uniform(0.4, 2.0, r)) @ q[:, :r].T


def _gauss(rng: np.random.Generator, d: int, rank: int | None = None, mean=None) -> Gaussian:
    m = rng.standard_normal(d) if mean is None else np.asarray(mean, dtype=float)
    return Gaussian(m, _cov(rng, d, rank))


def _w2sq(a: Gaussian, b: Gaussian) -> float:
    return a.bures_wasserstein(b) ** 2


def _gl_energy(ctrl: OTSteering, n: int = 40) -> float:
    """∫ E|v|² dt along the analytic geodesic by n-point Gauss–Legendre quadrature."""
    x, w = np.polynomial.legendre.leggauss(n)
    t = 0.5 * ctrl.T * (x + 1.0)
    total = 0.0
    for ti, wi in zip(t, w):
        m, s = ctrl.mean_at(ti), ctrl.cov_at(ti)
        mm, c = affine_velocity(ctrl.layer_at(ti), m, s)
        u = mm @ m + c
        total += wi * (np.trace(mm @ s @ mm.T) + u @ u)
    return 0.5 * ctrl.T * total


# ============================================================================ reachability
def test_full_and_ffn_reach_every_target_of_equal_rank() -> None:
    rng = np.random.default_rng(0)
    g0, g1 = _gauss(rng, 3), _gauss(rng, 3)
    for mode in ("full", "ffn", "attention"):
        assert is_reachable(g0, g1, mode=mode)
        check_reachable(g0, g1, mode=mode)
    s0, s1 = _gauss(rng, 3, 2), _gauss(rng, 3, 2)
    assert is_reachable(s0, s1, mode="full") and is_reachable(s0, s1, mode="ffn")


@pytest.mark.parametrize("mode", ["full", "ffn", "attention"])
def test_rank_change_is_refused_with_a_message_about_rank(mode: str) -> None:
    rng = np.random.default_rng(1)
    g0, g1 = _gauss(rng, 3), _gauss(rng, 3, 2)
    assert not is_reachable(g0, g1, mode=mode)
    with pytest.raises(UnreachableTargetError, match="rank 2 but the initial covariance has rank"):
        check_reachable(g0, g1, mode=mode)
    with pytest.raises(UnreachableTargetError, match="rank"):
        steer(g0, g1, 1.0, n_layers=4, mode=mode)
    with pytest.raises(UnreachableTargetError, match="rank"):
        ot_steering(g0, g1, 1.0)


def test_attention_invariants_of_the_mean() -> None:
    rng = np.random.default_rng(2)
    zero, nonzero = _gauss(rng, 2, mean=[0.0, 0.0]), _gauss(rng, 2, mean=[1.0, -0.5])
    assert not is_reachable(zero, nonzero, mode="attention")
    assert not is_reachable(nonzero, zero, mode="attention")
    assert is_reachable(zero, nonzero, mode="full")
    assert is_reachable(zero, _gauss(rng, 2, mean=[0.0, 0.0]), mode="attention")
    with pytest.raises(UnreachableTargetError, match="zero mean"):
        check_reachable(zero, nonzero, mode="attention")
    # d ≥ 2: the sign of a coordinate may flip (the mean goes around 0).
    assert is_reachable(nonzero, _gauss(rng, 2, mean=[-1.0, 0.5]), mode="attention")
    pos, neg = Gaussian([1.0], [[0.5]]), Gaussian([-2.0], [[1.0]])
    assert is_reachable(pos, Gaussian([3.0], [[2.0]]), mode="attention")
    assert not is_reachable(pos, neg, mode="attention")
    assert is_reachable(pos, neg, mode="full")
    with pytest.raises(UnreachableTargetError, match="sign"):
        steer(pos, neg, 1.0, n_layers=3, mode="attention")
    with pytest.raises(UnreachableTargetError, match="zero mean"):
        steer(zero, nonzero, 1.0, n_layers=3, mode="attention")


def test_attention_invariants_hold_under_random_attention_schedules() -> None:
    """The necessary conditions, checked on the dynamics itself: with A = 0, b = 0 a zero mean
    stays exactly zero and a scalar mean keeps its sign; the rank never changes."""
    rng = np.random.default_rng(3)
    for d in (1, 2, 3):
        layers = [
            Layer(V=rng.standard_normal((d, d)), B=0.5 * rng.standard_normal((d, d)))
            for _ in range(5)
        ]
        sched = Schedule(layers, 0.5)
        traj = simulate(sched, _gauss(rng, d, mean=np.zeros(d)))
        assert np.all(traj.mean == 0.0)
        singular = _gauss(rng, d, max(d - 1, 1)) if d > 1 else Gaussian([1.0], [[0.0]])
        assert np.all(simulate(sched, singular).rank == singular.rank)
    for _ in range(5):
        v, b = rng.standard_normal(), rng.standard_normal()
        traj = simulate(
            Schedule([Layer(V=[[v]], B=[[b]]), Layer(V=[[-v]], B=[[b]])], 0.4),
            Gaussian([0.7], [[0.3]]),
        )
        assert traj.status != "success" or np.all(traj.mean[:, 0] > 0)


def test_reachability_input_validation() -> None:
    rng = np.random.default_rng(4)
    with pytest.raises(InvalidParametersError, match="mode"):
        is_reachable(_gauss(rng, 2), _gauss(rng, 2), mode="both")
    with pytest.raises(InvalidGaussianError, match="dimension"):
        is_reachable(_gauss(rng, 2), _gauss(rng, 3))
    with pytest.raises(InvalidGaussianError, match="initial"):
        is_reachable(np.zeros(2), _gauss(rng, 2))  # type: ignore[arg-type]


# ============================================================================ OT closed form
@pytest.mark.parametrize("d", [1, 2, 3])
def test_ot_steering_reaches_target_with_energy_w2_over_t(d: int) -> None:
    rng = np.random.default_rng(10 + d)
    g0, g1 = _gauss(rng, d), _gauss(rng, d)
    T = 1.7
    ctrl = ot_steering(g0, g1, T)
    assert ctrl.T == T
    assert np.array_equal(ctrl.breakpoints, [0.0, T])
    lay = ctrl.layer_at(0.3)
    assert isinstance(lay, Layer) and lay.heads == ()
    traj = simulate(ctrl, g0, **TIGHT)
    assert traj.status == "success"
    assert traj.final.bures_wasserstein(g1) <= 1e-9
    assert np.max(np.abs(traj.final.cov - g1.cov)) <= 1e-9
    bound = _w2sq(g0, g1) / T
    assert ctrl.lower_bound == pytest.approx(bound, rel=1e-14)
    # Three independent evaluations of ∫ E|v|²: closed form, quadrature, integrator + Simpson.
    assert ctrl.kinetic_energy == pytest.approx(bound, rel=1e-11)
    assert _gl_energy(ctrl) == pytest.approx(bound, rel=1e-11)
    assert kinetic_energy(ctrl, g0).energy == pytest.approx(bound, rel=1e-8)


def test_ot_steering_is_the_constant_speed_geodesic() -> None:
    """W2(N0, N(t)) = (t/T) W2(N0, N1) and W2(N(t), N1) = (1 − t/T) W2(N0, N1): the path is the
    Bures–Wasserstein geodesic, and the simulated moments follow it."""
    rng = np.random.default_rng(20)
    g0, g1 = _gauss(rng, 3), _gauss(rng, 3)
    ctrl = ot_steering(g0, g1, 2.0)
    w = g0.bures_wasserstein(g1)
    traj = simulate(ctrl, g0, n_points=9, **TIGHT)
    for i, t in enumerate(traj.t):
        mid = ctrl.state_at(t)
        assert g0.bures_wasserstein(mid) == pytest.approx(t / 2.0 * w, abs=1e-9)
        assert mid.bures_wasserstein(g1) == pytest.approx((1 - t / 2.0) * w, abs=1e-9)
        assert np.max(np.abs(traj.cov[i] - ctrl.cov_at(t))) <= 1e-9
        assert np.max(np.abs(traj.mean[i] - ctrl.mean_at(t))) <= 1e-9


@pytest.mark.parametrize(("d", "r"), [(3, 2), (4, 1), (4, 2)])
def test_ot_steering_rank_deficient(d: int, r: int) -> None:
    rng = np.random.default_rng(30 + d + r)
    g0, g1 = _gauss(rng, d, r), _gauss(rng, d, r)
    ctrl = ot_steering(g0, g1, 1.0)
    traj = simulate(ctrl, g0, **TIGHT)
    assert np.all(traj.rank == r)
    assert np.max(np.abs(traj.final.cov - g1.cov)) <= 1e-9
    assert np.max(np.abs(traj.final.mean - g1.mean)) <= 1e-9
    # W2 near a singular Σ is Hölder-1/2 in Σ: a 1e-13 leak off the support reads as ~3e-7.
    assert traj.final.bures_wasserstein(g1) <= 1e-6
    assert _gl_energy(ctrl) == pytest.approx(_w2sq(g0, g1), rel=1e-10)
    assert ctrl.kinetic_energy == pytest.approx(_w2sq(g0, g1), rel=1e-10)


def test_ot_steering_refuses_degenerate_supports_not_in_general_position() -> None:
    g0 = Gaussian([0.0, 0.0], np.diag([1.0, 0.0]))
    g1 = Gaussian([1.0, 0.0], np.diag([0.0, 2.0]))
    with pytest.raises(InvalidParametersError, match="general position"):
        ot_steering(g0, g1, 1.0)
    sched = exact_layer_steering(g0, g1, 1.0, n_layers=6, mode="ffn")
    traj = simulate(sched, g0, **TIGHT)
    assert np.all(traj.rank == 1)
    assert np.max(np.abs(traj.final.cov - g1.cov)) <= 1e-9
    assert np.max(np.abs(traj.final.mean - g1.mean)) <= 1e-9


# ============================================================================ realization
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("mode", ["ffn", "attention", "full"])
def test_realize_produces_the_requested_field(d: int, mode: str) -> None:
    rng = np.random.default_rng(40 + d)
    state = _gauss(rng, d)
    m_mat, c = rng.standard_normal((d, d)), rng.standard_normal(d)
    lay = realize(m_mat, c, state, mode=mode)
    got_m, got_c = affine_velocity(lay, state.mean, state.cov)
    scale = 1.0 + np.linalg.norm(m_mat) + np.linalg.norm(c)
    assert np.max(np.abs(got_m - m_mat)) <= 1e-12 * scale
    assert np.max(np.abs(got_c - c)) <= 1e-12 * scale
    if mode == "ffn":
        assert all(not np.any(v) for v, _ in lay.heads)
    if mode == "attention":
        assert not np.any(lay.A) and not np.any(lay.b)


def test_realize_attention_gauge_when_c_vanishes() -> None:
    """c = 0 at m ≠ 0: the layer realizes M + SΣ⁻¹, −SΣ⁻¹m (S skew), with the same moment
    velocity (dm/dt, dΣ/dt)."""
    rng = np.random.default_rng(50)
    state = _gauss(rng, 3)
    m_mat = rng.standard_normal((3, 3))
    lay = realize(m_mat, np.zeros(3), state, mode="attention")
    dm, ds = moment_field(lay, state.mean, state.cov)
    assert np.max(np.abs(dm - m_mat @ state.mean)) <= 1e-11
    assert np.max(np.abs(ds - (m_mat @ state.cov + state.cov @ m_mat.T))) <= 1e-11
    assert not np.any(lay.A) and not np.any(lay.b)


def test_realize_attention_refusals() -> None:
    rng = np.random.default_rng(51)
    with pytest.raises(InvalidParametersError, match="zero mean"):
        realize(np.eye(2), np.ones(2), _gauss(rng, 2, mean=[0.0, 0.0]), mode="attention")
    with pytest.raises(InvalidParametersError, match="d = 1"):
        realize([[1.0]], [0.0], Gaussian([1.0], [[1.0]]), mode="attention")
    with pytest.raises(InvalidParametersError, match="non-singular"):
        realize(np.eye(3), np.ones(3), _gauss(rng, 3, 2), mode="attention")
    with pytest.raises(InvalidParametersError, match="M"):
        realize(np.eye(3), np.ones(2), _gauss(rng, 2), mode="ffn")


def test_realize_full_is_a_minimum_norm_split() -> None:
    """|A|² + |b|² + |V|² + |B|² is stationary (central differences) and below the pure-ffn
    split, for a field large enough that attention pays off (|M| |Σ| > 1)."""
    rng = np.random.default_rng(52)
    state = Gaussian(rng.standard_normal(3), 2.0 * _cov(rng, 3))
    m_mat, c = 3.0 * rng.standard_normal((3, 3)), rng.standard_normal(3)
    lay = realize(m_mat, c, state, mode="full")
    v, b = lay.heads[0]

    def norm2(vv: np.ndarray, bb: np.ndarray) -> float:
        a = m_mat - vv @ state.cov @ bb
        bias = c - vv @ state.mean
        return float(np.sum(a**2) + bias @ bias + np.sum(vv**2) + np.sum(bb**2))

    f0 = norm2(v, b)
    assert f0 < norm2(np.zeros((3, 3)), np.zeros((3, 3))) - 1.0
    grad = np.zeros(18)
    h = 1e-6
    for i in range(18):
        e = np.zeros(18)
        e[i] = h
        dv, db = e[:9].reshape(3, 3), e[9:].reshape(3, 3)
        grad[i] = (norm2(v + dv, b + db) - norm2(v - dv, b - db)) / (2 * h)
    assert np.linalg.norm(grad) <= 1e-5 * f0


# ======================================================================= exact L-layer steering
@pytest.mark.parametrize("d", [2, 3])
def test_exact_layer_steering_ffn_converges_to_the_bound(d: int) -> None:
    rng = np.random.default_rng(60 + d)
    g0, g1 = _gauss(rng, d), _gauss(rng, d)
    bound = _w2sq(g0, g1)
    gaps = []
    for n in (1, 3, 9):
        sched = exact_layer_steering(g0, g1, 1.0, n_layers=n, mode="ffn")
        assert sched.n_layers == n
        assert all(lay.heads == () for lay in sched.layers)
        traj = simulate(sched, g0, **TIGHT)
        assert traj.final.bures_wasserstein(g1) <= 1e-9
        # Each node is the geodesic's: W2 from the start grows by W2/L per layer.
        gaps.append(kinetic_energy(sched, g0).energy / bound - 1.0)
    assert gaps[0] > gaps[1] > gaps[2] > 0.0
    assert gaps[2] < gaps[0] / 20  # O(1/L²)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_exact_layer_steering_attention(d: int) -> None:
    rng = np.random.default_rng(70 + d)
    g0 = _gauss(rng, d, mean=np.abs(rng.standard_normal(d)) + 0.3)
    g1 = _gauss(rng, d, mean=np.abs(rng.standard_normal(d)) + 0.3)
    sched = exact_layer_steering(g0, g1, 1.0, n_layers=5, mode="attention")
    for lay in sched.layers:
        assert not np.any(lay.A) and not np.any(lay.b)
    traj = simulate(sched, g0, **TIGHT)
    assert traj.final.bures_wasserstein(g1) <= 1e-8
    zero0, zero1 = _gauss(rng, d, mean=np.zeros(d)), _gauss(rng, d, mean=np.zeros(d))
    sched = exact_layer_steering(zero0, zero1, 1.0, n_layers=1, mode="attention")
    assert simulate(sched, zero0, **TIGHT).final.bures_wasserstein(zero1) <= 1e-9
    with pytest.raises(InvalidParametersError, match="at least 2 layers"):
        exact_layer_steering(g0, g1, 1.0, n_layers=1, mode="attention")


def test_attention_with_singular_covariance_on_a_fixed_range() -> None:
    """A singular Σ keeps its range under V = vI: the constructive attention steering works on
    that range (and the optimizer finishes from it); a Dirac (Σ = 0) only translates its mean."""
    rng = np.random.default_rng(75)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    u = q[:, :2]
    g0 = Gaussian([1.0, 0.5, -0.3], u @ np.diag([1.0, 0.5]) @ u.T)
    g1 = Gaussian([-0.5, 1.0, 0.4], u @ np.array([[0.8, 0.3], [0.3, 1.5]]) @ u.T)
    sched = exact_layer_steering(g0, g1, 1.0, n_layers=6, mode="attention")
    traj = simulate(sched, g0, **TIGHT)
    assert np.all(traj.rank == 2)
    assert np.max(np.abs(traj.final.cov - g1.cov)) <= 1e-9
    assert np.max(np.abs(traj.final.mean - g1.mean)) <= 1e-9
    res = steer(g0, g1, 1.0, n_layers=6, mode="attention")
    _check_result(res, g0, g1, 1.0, 6)
    assert res.stats["regularization"] == 1e-3
    other = Gaussian([0.2, 0.1, 1.0], _cov(rng, 3, 2))
    with pytest.raises(InvalidParametersError, match="range"):
        exact_layer_steering(g0, other, 1.0, n_layers=6, mode="attention")
    d0, d1 = Gaussian([1.0, 0.0], np.zeros((2, 2))), Gaussian([0.0, -2.0], np.zeros((2, 2)))
    sched = exact_layer_steering(d0, d1, 1.0, n_layers=3, mode="attention")
    assert np.max(np.abs(simulate(sched, d0, **TIGHT).final.mean - d1.mean)) <= 1e-10


def test_exact_layer_steering_rank_deficient() -> None:
    rng = np.random.default_rng(80)
    g0, g1 = _gauss(rng, 3, 2), _gauss(rng, 3, 2)
    sched = exact_layer_steering(g0, g1, 1.0, n_layers=6, mode="full")
    traj = simulate(sched, g0, **TIGHT)
    assert np.all(traj.rank == 2)
    assert np.max(np.abs(traj.final.cov - g1.cov)) <= 1e-9


def test_kinetic_energy_against_a_closed_form() -> None:
    """A = aI from N(m0, σ²I): Σ(t) = σ² e^{2at} I, m(t) = e^{at} m0, so
    ∫ E|v|² = a² (d σ² + |m0|²)(e^{2aT} − 1)/(2a)."""
    a, sigma2, T, d = 0.7, 0.3, 1.3, 3
    m0 = np.array([0.5, -1.0, 2.0])
    exact = a * (d * sigma2 + m0 @ m0) * (math.exp(2 * a * T) - 1) / 2
    got = kinetic_energy(Layer(A=a * np.eye(d)), Gaussian(m0, sigma2 * np.eye(d)), T)
    assert got.status is Status.SUCCESS and got.success, got.message
    assert got.energy == pytest.approx(exact, rel=1e-9)
    # the integrand kept is E|v|² = a²(dσ² + |m0|²) e^{2at} at the nodes
    assert np.allclose(
        got.integrand, a * a * (d * sigma2 + m0 @ m0) * np.exp(2 * a * got.t), rtol=1e-9
    )


# ==================================================================== the NLP building blocks
@pytest.mark.parametrize("mode", ["ffn", "attention", "full"])
def test_symbolic_field_matches_moment_field(mode: str) -> None:
    """The CasADi field is built by moment_field itself on SX object arrays; check it numerically
    against moment_field on float arrays at random points."""
    rng = np.random.default_rng(90)
    for d in (1, 3):
        f = field_function(mode, d)
        iu = np.triu_indices(d)
        for _ in range(3):
            g = _gauss(rng, d)
            lay = Layer(
                A=rng.standard_normal((d, d)) if mode != "attention" else None,
                b=rng.standard_normal(d) if mode != "attention" else None,
                V=rng.standard_normal((d, d)) if mode != "ffn" else None,
                B=rng.standard_normal((d, d)) if mode != "ffn" else None,
                dim=d,
            )
            p = pack(lay, mode)
            assert p.shape == (n_params(mode, d),)
            xdot, energy, trace = (
                np.asarray(o).ravel() for o in f(np.concatenate([g.mean, g.cov[iu]]), p)
            )
            dm, ds = moment_field(lay, g.mean, g.cov)
            mm, c = affine_velocity(lay, g.mean, g.cov)
            u = mm @ g.mean + c
            assert np.max(np.abs(xdot - np.concatenate([dm, ds[iu]]))) <= 1e-12 * (
                1 + np.max(np.abs(ds))
            )
            assert energy[0] == pytest.approx(np.trace(mm @ g.cov @ mm.T) + u @ u, rel=1e-12)
            assert trace[0] == pytest.approx(2 * np.trace(mm), rel=1e-12, abs=1e-13)


def test_collocation_coefficients_are_exact_on_polynomials() -> None:
    tau, c, dvec, bvec = _collocation_coefficients(3)
    nodes = tau  # (0, τ1, τ2, τ3)
    for deg in range(4):  # the degree-3 interpolant is exact: derivative and end value
        vals = nodes**deg
        assert np.allclose(
            vals @ c[:, 1:], deg * nodes[1:] ** max(deg - 1, 0) if deg else 0.0, atol=1e-12
        )
        assert vals @ dvec == pytest.approx(1.0, abs=1e-12)
    for deg in range(6):  # Gauss–Legendre: quadrature exact up to degree 2k − 1 = 5
        assert bvec @ nodes[1:] ** deg == pytest.approx(1.0 / (deg + 1), abs=1e-13)


# ============================================================================ optimal steering
def _check_result(res, g0: Gaussian, g1: Gaussian, T: float, n: int) -> None:
    assert res.success, res.message
    assert res.status is Status.SUCCESS
    assert isinstance(res.controls, Schedule) and res.controls.n_layers == n
    # Independent re-simulation and energy.
    traj = simulate(res.controls, g0, **TIGHT)
    assert traj.final.bures_wasserstein(g1) <= 1e-6
    assert res.terminal_error <= 1e-6
    assert res.lower_bound == pytest.approx(_w2sq(g0, g1) / T, rel=1e-13)
    assert res.kinetic_energy == pytest.approx(kinetic_energy(res.controls, g0).energy, rel=1e-9)
    # Benamou–Brenier: no control beats W2²/T.
    assert res.kinetic_energy >= res.lower_bound * (1 - 1e-9)
    assert res.gap == pytest.approx(res.kinetic_energy / res.lower_bound - 1, rel=1e-9)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("mode", ["full", "ffn"])
def test_steer_kinetic_reaches_small_gap(d: int, mode: str) -> None:
    rng = np.random.default_rng(100 + d)
    g0, g1 = _gauss(rng, d), _gauss(rng, d)
    res = steer(g0, g1, 1.0, n_layers=10, mode=mode)
    _check_result(res, g0, g1, 1.0, 10)
    assert res.gap <= 1e-3
    assert res.cost == res.kinetic_energy
    assert res.stats["ipopt_status"] == "Solve_Succeeded"
    if mode == "ffn":
        assert all(not any(np.any(v) for v, _ in lay.heads) for lay in res.controls.layers)


def test_curvature_split_reproduces_the_geodesic_field_variation() -> None:
    """At the state the field is (M, c); inside the layer d(VΣB)/dt = V(MΣ + ΣMᵀ)B equals the
    geodesic's dM/dt = −M² (here M is the symmetric geodesic field, S = MΣ + ΣM invertible)."""
    rng = np.random.default_rng(102)
    g0, g1 = _gauss(rng, 3), _gauss(rng, 3)
    geo = ot_steering(g0, g1, 1.0)
    state = geo.state_at(0.4)
    m_mat, c = geo.field_at(0.4)
    lay = _curvature_split(m_mat, c, state)
    got_m, got_c = affine_velocity(lay, state.mean, state.cov)
    assert np.max(np.abs(got_m - m_mat)) <= 1e-12 and np.max(np.abs(got_c - c)) <= 1e-12
    v, b = lay.heads[0]
    rate = v @ (m_mat @ state.cov + state.cov @ m_mat.T) @ b
    assert np.max(np.abs(rate + m_mat @ m_mat)) <= 1e-6 * np.max(np.abs(m_mat @ m_mat))
    # The geodesic's own field derivative, by central differences, is −M².
    dm_dt = (geo.field_at(0.4 + 1e-5)[0] - geo.field_at(0.4 - 1e-5)[0]) / 2e-5
    assert np.max(np.abs(dm_dt + m_mat @ m_mat)) <= 1e-6


def test_steer_full_fixed_is_never_worse_than_ffn() -> None:
    rng = np.random.default_rng(104)
    for d in (2, 3):
        g0, g1 = _gauss(rng, d), _gauss(rng, d)
        ffn = steer(g0, g1, 1.0, n_layers=8, mode="ffn")
        full = steer(g0, g1, 1.0, n_layers=8, mode="full")
        _check_result(full, g0, g1, 1.0, 8)
        assert full.stats["redundancy"] == "fixed"
        assert full.kinetic_energy <= ffn.kinetic_energy * (1 + 1e-8)


def test_steer_full_joint_redundancy_improves_on_ffn() -> None:
    """Optimizing A, b, V, B jointly (Tikhonov on the flat directions) may only lower the energy
    of the ffn optimum, since every ffn control is a full control."""
    rng = np.random.default_rng(103)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    ffn = steer(g0, g1, 1.0, n_layers=6, mode="ffn")
    joint = steer(g0, g1, 1.0, n_layers=6, mode="full", redundancy="joint")
    _check_result(joint, g0, g1, 1.0, 6)
    assert joint.kinetic_energy <= ffn.kinetic_energy * (1 + 1e-6)
    assert joint.stats["redundancy"] == "joint"


@pytest.mark.parametrize(
    ("m0", "m1"),
    [([1.0, 0.5], [-0.4, 1.2]), ([1.0, 0.0], [-1.0, 0.0]), ([0.0, 0.0], [0.0, 0.0])],
)
def test_steer_attention_only(m0: list[float], m1: list[float]) -> None:
    rng = np.random.default_rng(110)
    g0, g1 = _gauss(rng, 2, mean=m0), _gauss(rng, 2, mean=m1)
    res = steer(g0, g1, 1.0, n_layers=8, mode="attention")
    _check_result(res, g0, g1, 1.0, 8)
    for lay in res.controls.layers:
        assert not np.any(lay.A) and not np.any(lay.b)  # exactly zero
        assert len(lay.heads) == 1


def test_steer_attention_d1_keeps_sign() -> None:
    g0, g1 = Gaussian([1.0], [[0.5]]), Gaussian([2.0], [[1.5]])
    res = steer(g0, g1, 1.0, n_layers=5, mode="attention")
    _check_result(res, g0, g1, 1.0, 5)
    assert np.all(res.trajectory.mean[:, 0] > 0)


@pytest.mark.parametrize("mode", ["full", "ffn"])
def test_steer_rank_deficient_same_rank(mode: str) -> None:
    rng = np.random.default_rng(120)
    g0, g1 = _gauss(rng, 3, 2), _gauss(rng, 3, 2)
    res = steer(g0, g1, 1.0, n_layers=8, mode=mode)
    _check_result(res, g0, g1, 1.0, 8)
    assert np.all(res.trajectory.rank == 2)
    assert res.stats["cov_error"] <= 1e-9


def test_steer_bounds_and_infeasibility_are_reported() -> None:
    rng = np.random.default_rng(130)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    free = steer(g0, g1, 1.0, n_layers=6, mode="ffn")
    cap = 0.85 * max(float(np.max(np.abs(lay.A))) for lay in free.controls.layers)
    res = steer(g0, g1, 1.0, n_layers=6, mode="ffn", bounds=SteeringBounds(entry={"A": cap}))
    _check_result(res, g0, g1, 1.0, 6)
    assert max(float(np.max(np.abs(lay.A))) for lay in res.controls.layers) <= cap * (1 + 1e-7)
    assert res.kinetic_energy >= free.kinetic_energy * (1 - 1e-9)
    bad = steer(
        g0, g1, 1.0, n_layers=6, mode="ffn", bounds=SteeringBounds(entry={"A": 1e-3, "b": 1e-3})
    )
    assert not bad.success
    assert bad.status is Status.NOT_FOUND  # IPOPT is local: no proof of infeasibility
    assert bad.stats["ipopt_status"] == "Infeasible_Problem_Detected"
    assert "IPOPT" in bad.message and "Infeasible_Problem_Detected" in bad.message
    assert isinstance(bad.controls, Schedule)


def test_steer_norm_and_covariance_bounds() -> None:
    rng = np.random.default_rng(131)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    res = steer(
        g0,
        g1,
        1.0,
        n_layers=6,
        mode="full",
        redundancy="joint",
        bounds=SteeringBounds(norm={"V": 0.2, "B": 0.2}),
    )
    _check_result(res, g0, g1, 1.0, 6)
    for lay in res.controls.layers:
        assert np.linalg.norm(lay.heads[0][0]) <= 0.2 * (1 + 1e-6)
        assert np.linalg.norm(lay.heads[0][1]) <= 0.2 * (1 + 1e-6)
    bound = 1.02 * max(np.linalg.norm(g0.cov), np.linalg.norm(g1.cov))
    res = steer(g0, g1, 1.0, n_layers=6, mode="ffn", bounds=SteeringBounds(cov=bound))
    _check_result(res, g0, g1, 1.0, 6)
    # Imposed at the collocation points; between them the re-simulated norm may exceed it by
    # the interpolation error of one layer (here well below 1e-3).
    assert res.stats["cov_norm_max"] <= bound * (1 + 1e-3)


def test_steer_parameter_objective_minimizes_parameter_energy() -> None:
    rng = np.random.default_rng(140)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    res = steer(g0, g1, 1.0, n_layers=6, mode="ffn", objective="parameter")
    _check_result(res, g0, g1, 1.0, 6)
    kin = steer(g0, g1, 1.0, n_layers=6, mode="ffn")
    closed = exact_layer_steering(g0, g1, 1.0, n_layers=6, mode="ffn")
    h = 1.0 / 6

    def energy(s: Schedule) -> float:
        return h * sum(float(np.sum(lay.A**2) + np.sum(lay.b**2)) for lay in s.layers)

    assert res.cost == pytest.approx(energy(res.controls), rel=1e-12)
    assert res.cost <= energy(kin.controls) + 1e-9
    assert res.cost <= energy(closed) + 1e-9
    with pytest.raises(InvalidParametersError, match=r"bounds\.cov"):
        steer(g0, g1, 1.0, n_layers=6, mode="full", objective="parameter")


@pytest.mark.parametrize("terminal", ["bw", "kl"])
def test_steer_terminal_penalties(terminal: str) -> None:
    rng = np.random.default_rng(150)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    errs = []
    for weight in (1e2, 1e4):
        res = steer(
            g0,
            g1,
            1.0,
            n_layers=6,
            mode="ffn",
            terminal=terminal,
            terminal_weight=weight,
            terminal_tol=0.5,
        )
        assert res.success, res.message
        errs.append(res.terminal_error)
        assert (
            res.kinetic_energy
            <= kinetic_energy(exact_layer_steering(g0, g1, 1.0, n_layers=6), g0).energy
        )
    assert errs[1] < errs[0] / 10  # the miss shrinks like 1/weight
    with pytest.raises(InvalidParametersError, match="KL"):
        steer(_gauss(rng, 3, 2), _gauss(rng, 3, 2), 1.0, n_layers=4, terminal="kl")


def test_steer_unconverged_returns_best_iterate_with_reason() -> None:
    rng = np.random.default_rng(160)
    g0, g1 = _gauss(rng, 2, mean=[1.0, 0.0]), _gauss(rng, 2, mean=[0.0, 1.0])
    one_iteration = IpoptSettings(max_iter=1)
    no_correction = Collocation(max_corrections=0)
    res = steer(
        g0, g1, 1.0, n_layers=6, mode="attention", solver=one_iteration, collocation=no_correction
    )
    assert not res.success
    # The iteration cap is a budget: the best iterate comes back with BUDGET_EXHAUSTED.
    assert res.status in (Status.BUDGET_EXHAUSTED, Status.BLOWUP, Status.OVERFLOW)
    assert "IPOPT" in res.message and "Maximum_Iterations_Exceeded" in res.message
    assert isinstance(res.controls, Schedule)


def test_steer_initial_guess_tokens_and_options() -> None:
    rng = np.random.default_rng(170)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    guess = exact_layer_steering(g0, g1, 1.0, n_layers=5, mode="ffn")
    res = steer(g0, g1, 1.0, n_layers=5, mode="ffn", initial_guess=guess, token_check=300, seed=1)
    _check_result(res, g0, g1, 1.0, 5)
    assert res.stats["warm_start"] == "initial_guess"
    # 300 tokens: the empirical Gaussian is within O(N^{-1/2}) of the target.
    assert 0.0 < res.stats["token_terminal_error"] < 0.5
    with pytest.raises(InvalidParametersError, match="objective"):
        steer(g0, g1, 1.0, objective="energy")
    with pytest.raises(InvalidParametersError, match="not optimized"):
        steer(g0, g1, 1.0, mode="ffn", bounds=SteeringBounds(entry={"V": 1.0}))
    with pytest.raises(InvalidParametersError, match="redundancy"):
        steer(g0, g1, 1.0, mode="full", bounds=SteeringBounds(norm={"B": 1.0}))
    with pytest.raises(InvalidParametersError, match="initial_guess"):
        steer(g0, g1, 1.0, n_layers=4, initial_guess=guess)
    with pytest.raises(InvalidParametersError, match="terminal_tol"):
        steer(g0, g1, 1.0, terminal_tol=0.0)
    with pytest.raises(InvalidParametersError, match="time_limit"):
        steer(g0, g1, 1.0, time_limit=-1.0)
    with pytest.raises(TypeError):
        steer(g0, g1, 1.0, 5)  # type: ignore[misc]  # options are keyword-only


# ============================================================================ outputs
def test_schedule_to_dict_round_trip() -> None:
    rng = np.random.default_rng(180)
    layers = [
        Layer(A=rng.standard_normal((2, 2)), b=rng.standard_normal(2)),
        Layer(V=rng.standard_normal((2, 2)), B=rng.standard_normal((2, 2))),
        Layer(heads=[(np.eye(2), rng.standard_normal((2, 2))), (0.5, np.eye(2))]),
    ]
    sched = Schedule(layers, 1.5)
    data = json.loads(json.dumps(sched.to_dict()))
    assert data["T"] == 1.5
    assert [e["duration"] for e in data["layers"]] == [0.5] * 3
    back = []
    for e in data["layers"]:
        if "heads" in e:
            back.append(Layer(e["A"], b=e["b"], heads=[(h["V"], h["B"]) for h in e["heads"]]))
        else:
            back.append(Layer(e["A"], e["B"], e["V"], e["b"]))
    traj0 = simulate(sched, _gauss(rng, 2))
    traj1 = simulate(Schedule(back, data["T"]), Gaussian(traj0.mean[0], traj0.cov[0]))
    assert np.array_equal(traj0.cov, traj1.cov)
    assert "V" not in data["layers"][2] and len(data["layers"][2]["heads"]) == 2
    assert data["layers"][0]["V"] == [[0.0, 0.0], [0.0, 0.0]]


def test_steering_figures(tmp_path) -> None:
    rng = np.random.default_rng(190)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    sched = exact_layer_steering(g0, g1, 1.0, n_layers=4, mode="full")
    traj = simulate(sched, g0, n_points=41)
    plot_steering_moments(
        traj, g1, tmp_path / "moments.png", breakpoints=sched.breakpoints, title="steer"
    )
    plot_parameter_norms(sched, tmp_path / "norms.png", title="norms")
    for name in ("moments.png", "norms.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


# ============================================================================ result protocol
def test_results_follow_the_protocol() -> None:
    rng = np.random.default_rng(200)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    geo = ot_steering(g0, g1, 1.0)
    assert isinstance(geo, Result)
    assert geo.success and geo.status is Status.SUCCESS and "geodesic" in geo.message
    assert geo.stats["kinetic_energy"] == pytest.approx(geo.stats["lower_bound"], rel=1e-12)
    res = steer(g0, g1, 1.0, n_layers=4, mode="ffn")
    assert isinstance(res, SteeringResult) and isinstance(res, Result)
    assert isinstance(res.status, Status) and res.status is Status.SUCCESS
    assert res.success is True and isinstance(res.message, str) and res.message
    assert res.stats["ipopt_status"] == "Solve_Succeeded" and res.stats["converged"] is True
    assert res.stats["time_limit"] is None
    assert "Solve_Succeeded" in res.message


def test_steer_status_strings_compare_equal() -> None:
    """Status members are str: code that compared with the old strings keeps working for
    the statuses that kept their name."""
    rng = np.random.default_rng(201)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    res = steer(g0, g1, 1.0, n_layers=3, mode="ffn")
    assert res.status == "success"
    assert json.loads(json.dumps({"status": res.status})) == {"status": "success"}


# ============================================================================ time limit
def test_steer_tiny_time_limit_returns_the_starting_control_quickly() -> None:
    rng = np.random.default_rng(210)
    g0, g1 = _gauss(rng, 3), _gauss(rng, 3)
    t0 = time.perf_counter()
    res = steer(g0, g1, 1.0, n_layers=6, mode="full", time_limit=1e-9)
    assert time.perf_counter() - t0 < 5.0
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success
    assert "time limit" in res.message
    assert res.stats["iterations"] == 0 and res.stats["ipopt_status"] is None
    assert res.stats["time_limit"] == 1e-9
    # The best iterate is the closed-form start (curvature-matched attention, close to the
    # target but not on it): a 6-layer schedule, measured like any result.
    assert isinstance(res.controls, Schedule) and res.controls.n_layers == 6
    assert res.stats["warm_start"] == "closed form with curvature-matched attention"
    assert 0.0 < res.terminal_error < 0.05
    assert res.kinetic_energy >= res.lower_bound
    assert res.trajectory is not None


def test_steer_time_limit_stops_ipopt_with_its_iterate() -> None:
    """A deadline inside an IPOPT solve stops it (User_Requested_Stop); the transcription
    returns the iterate, and steer maps it onto BUDGET_EXHAUSTED."""
    rng = np.random.default_rng(211)
    g0, g1 = _gauss(rng, 2), _gauss(rng, 2)
    plan = make_plan(g0, g1, 1.0, 4, "ffn", SteerOptions())
    nlp, _ = transcription(plan.problem)
    layers0, _ = next(warm_starts(g0, g1, 1.0, 4, "ffn", "fixed"))
    start = Schedule(layers0, 1.0)
    iu = np.triu_indices(2)
    sol = nlp.solve(
        np.concatenate([g0.mean, g0.cov[iu]]),
        np.concatenate([g1.mean, g1.cov[iu]]),
        np.array([pack(lay, "ffn") for lay in layers0]),
        states_of(start, g0, nlp.collocation_times()).reshape(4, -1),
        states_of(start, g0, np.arange(1, 5) / 4.0),
        max_wall_time=0.0,
    )
    assert sol.status == STOPPED and sol.timed_out and not sol.success
    assert sol.params.shape == (4, n_params("ffn", 2))
    # The next solve has no deadline again.
    again = nlp.solve(
        np.concatenate([g0.mean, g0.cov[iu]]),
        np.concatenate([g1.mean, g1.cov[iu]]),
        sol.params,
        sol.colloc,
        sol.states,
    )
    assert again.success and not again.timed_out


def test_kinetic_energy_of_a_blowup_is_infinite() -> None:
    """dσ/dt = 2σ² (v = B = 1, d = 1) blows up at 1/(2σ0) = 0.5 < T: infinite energy, with the
    status that says so (not a success)."""
    res = kinetic_energy(Layer(V=[[1.0]], B=[[1.0]]), Gaussian([0.0], [[1.0]]), 1.0)
    assert res.energy == math.inf and res.status is Status.BLOWUP and not res.success
    assert "infinite" in res.message and len(res.t) == 0


def test_kinetic_energy_out_of_budget_is_unknown_not_infinite() -> None:
    """A spent evaluation cap leaves the energy unknown: ``nan`` with BUDGET_EXHAUSTED (it was
    a bare ``inf`` without a time limit, indistinguishable from a blow-up)."""
    from unittest import mock

    from gtcontrol.control import ot

    def capped(*args: Any, **kwargs: Any) -> Any:
        return simulate(*args, **{**kwargs, "max_evals": 5})

    with mock.patch.object(ot, "simulate", capped):
        res = kinetic_energy(Layer(A=-np.eye(2)), Gaussian([0.0, 1.0], np.eye(2)), 5.0)
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success
    assert math.isnan(res.energy) and "not known" in res.message
