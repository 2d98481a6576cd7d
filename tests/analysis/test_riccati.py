"""Tests of the Riccati tools: structure, exact flows, certified blow-up, Bernoulli solves.

Every expected value comes from a closed form (docs/theory.md §2–3), an independent integrator
(gtcontrol.model.moments.simulate, DOP853 at rtol 1e-11) or a brute-force scan.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from helpers import random_spd
from scipy.optimize import brentq

from gtcontrol import Gaussian, Layer, Result, Status, moment_field, simulate
from gtcontrol.analysis._core import gramian as _gramian
from gtcontrol.analysis.bernoulli import solve_bernoulli
from gtcontrol.analysis.blowup import blowup_analysis
from gtcontrol.analysis.riccati import (
    is_riccati,
    riccati_flow,
    riccati_form,
    riccati_form_or_none,
)
from gtcontrol.errors import (
    GTControlError,
    InvalidGaussianError,
    InvalidParametersError,
    SolverError,
)
from gtcontrol.model.params import FeedForward


def _g(cov: np.ndarray) -> Gaussian:
    return Gaussian(np.zeros(cov.shape[0]), cov)


def _scalar_tstar(a: float, c: float, s0: float) -> float:
    """docs/theory.md §2–3: dσ/dt = 2aσ + 2cσ², T* = ln(1 + a/(cσ0))/(2a), or 1/(2cσ0) for a = 0."""
    if c <= 0:
        return math.inf
    if a == 0:
        return 1.0 / (2 * c * s0)
    arg = 1 + a / (c * s0)
    if arg <= 0:
        return math.inf
    t = math.log(arg) / (2 * a)
    return t if t > 0 else math.inf


# --------------------------------------------------------------------------- structure


def test_riccati_form_matches_the_moment_field():
    rng = np.random.default_rng(0)
    d = 4
    a = rng.standard_normal((d, d))
    b1, b2 = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    g = rng.standard_normal((d, d))
    lay = Layer(a, heads=[(0.7, b1), (-1.3 * np.eye(d), b2)], noise=g)
    form = riccati_form(lay)
    assert form is not None
    assert form.v == pytest.approx((0.7, -1.3))
    np.testing.assert_array_equal(form.R, form.R.T)
    np.testing.assert_allclose(form.R, -0.7 * (b1 + b1.T) + 1.3 * (b2 + b2.T), rtol=1e-15)
    assert not form.is_bernoulli
    s = random_spd(rng, d)
    _, ds = moment_field(lay, np.zeros(d), s)
    riccati = a @ s + s @ a.T - s @ form.R @ s + g @ g.T
    np.testing.assert_allclose(ds, riccati, rtol=1e-13, atol=1e-13 * np.abs(ds).max())


def test_riccati_form_detection_and_ffn():
    rng = np.random.default_rng(1)
    d = 3
    b = rng.standard_normal((d, d))
    assert not is_riccati(Layer(B=b, V=np.diag([1.0, 1.0, 1.0 + 1e-6])))
    assert not is_riccati(Layer(B=b, V=rng.standard_normal((d, d))))
    assert is_riccati(Layer(A=np.eye(d))) and is_riccati(Layer(B=b, V=0.5, noise=np.eye(d)))
    no_heads = riccati_form(Layer(A=np.eye(d)))
    assert not np.any(no_heads.R) and no_heads.is_bernoulli
    w, u = rng.standard_normal((d, 2)), rng.standard_normal((2, d))
    lay = Layer(A=np.eye(d), B=b, V=0.5, ffn=FeedForward(u, w, activation="identity"))
    form = riccati_form(lay)
    np.testing.assert_allclose(form.A, np.eye(d) + w @ u, rtol=1e-15)
    for call in (riccati_form, is_riccati):
        with pytest.raises(InvalidParametersError, match="relu"):
            call(Layer(A=np.eye(d), ffn=FeedForward(u, w, activation="relu")))
        with pytest.raises(InvalidParametersError, match="Layer"):
            call("not a layer")  # type: ignore[arg-type]


def test_riccati_form_refuses_a_layer_outside_the_class_naming_the_head():
    """A layer with a general V_h has no Riccati form: bad input for riccati_form, which said
    so by returning None (a signal the caller had to remember to check)."""
    rng = np.random.default_rng(1)
    b = rng.standard_normal((3, 3))
    lay = Layer(heads=[(0.5 * np.eye(3), b), (np.diag([1.0, 1.0, 1.0 + 1e-6]), b)])
    with pytest.raises(InvalidParametersError, match=r"^layer: .*Riccati class.*head 1 ") as err:
        riccati_form(lay)
    assert "is_riccati" in str(err.value)
    assert riccati_form_or_none(lay) is None and not is_riccati(lay)


def test_gramian_van_loan_doubling_matches_quadrature():
    rng = np.random.default_rng(2)
    d = 3
    a = rng.standard_normal((d, d))
    q = rng.standard_normal((d, d))
    q = q + q.T
    h = 3.7  # ‖A‖h > 1/2: exercises the doubling
    e, w = _gramian(a, q, h)
    from scipy.integrate import quad_vec
    from scipy.linalg import expm

    ref, _ = quad_vec(lambda s: expm(a.T * s) @ q @ expm(a * s), 0.0, h, epsabs=1e-13, epsrel=1e-13)
    np.testing.assert_allclose(e, expm(a * h), rtol=1e-12)
    # Both sides carry ~1e-13 relative quadrature/rounding error on entries of size ~‖W‖.
    np.testing.assert_allclose(w, ref, rtol=0, atol=1e-11 * np.abs(ref).max())


# --------------------------------------------------------------------------- blow-up: closed forms


SCALAR_CASES = [
    # (a, v, B, σ0): every sign case of docs/theory.md §2–3 with c = vB
    (1.0, 1.0, 0.5, 0.3),  # c > 0, a > 0: always blows up
    (0.0, 1.0, 0.5, 0.3),  # c > 0, a = 0: T* = 1/(2cσ0)
    (-1.0, 1.0, 1.0, 2.0),  # c > 0, a < 0, above σ* = 1: blows up
    (-1.0, 1.0, 1.0, 0.5),  # c > 0, a < 0, below σ*: never
    (-0.5, 2.0, 0.125, 5.0),  # c > 0, a < 0, above σ* = 2
    (2.0, 2.0, 3.0, 1e-3),  # tiny σ0, long transient
    (1.0, -1.0, 1.0, 0.3),  # c < 0: never (σ → σ* = 1)
    (-1.0, -1.0, 1.0, 0.3),  # c < 0, a < 0: never (σ → 0)
    (0.7, 0.0, 1.0, 0.3),  # c = 0: exponential, never
]


@pytest.mark.parametrize(("a", "v", "b", "s0"), SCALAR_CASES)
def test_scalar_blowup_time_closed_form(a, v, b, s0):
    lay = Layer(A=[[a]], B=[[b]], V=v)
    res = blowup_analysis(lay, Gaussian([0.0], [[s0]]))
    expected = _scalar_tstar(a, v * b, s0)
    if math.isinf(expected):
        assert res.blowup_time == math.inf
        assert res.status is Status.SUCCESS and res.proved_never and res.certified
    else:
        assert res.status is Status.BLOWUP and res.certified and res.success
        assert res.blowup_time == pytest.approx(expected, rel=1e-12)
        assert res.lower <= expected * (1 + 1e-14)
        assert res.upper >= expected * (1 - 1e-14)
        assert res.upper - res.lower <= 1e-12 * res.upper


def test_zero_A_blowup_closed_form():
    rng = np.random.default_rng(3)
    d = 3
    b = random_spd(rng, d)
    s0 = random_spd(rng, d)
    lay = Layer(B=b, heads=None, V=0.8)
    form = riccati_form(lay)
    assert form is not None
    w, u = np.linalg.eigh(s0)
    half = (u * np.sqrt(w)) @ u.T
    t_cf = 1.0 / np.linalg.eigvalsh(half @ (-form.R) @ half)[-1]
    assert blowup_analysis(lay, _g(s0)).blowup_time == pytest.approx(t_cf, rel=1e-12)


def test_first_root_certified_against_a_short_dip():
    # Rotation plus indefinite R: λ_min G(t) dips below 0 only on ≈ [0.239, 0.285], then G
    # stays positive; a coarse scan misses the dip altogether.
    a = np.array([[0.0, 2.0], [-2.0, 0.0]])
    r = np.diag([3.0, -1.0])
    lay = Layer(A=a, B=r / 2, V=-1.0)
    s0 = np.diag([1e-3, 5.9])
    f = np.linalg.cholesky(s0)

    def gmin(t: float) -> float:
        return float(np.linalg.eigvalsh(np.eye(2) + f.T @ _gramian(a, r, t)[1] @ f)[0])

    assert min(gmin(t) for t in np.linspace(0, 3, 7)) > 0  # the coarse scan sees nothing
    # Brute-force scan, independent of _gramian: W(h) by quadrature, then the exact recurrence
    # W(t + h) = W(t) + e^{Aᵀt} W(h) e^{At} on a fine grid.
    from scipy.integrate import quad_vec
    from scipy.linalg import expm

    n, h = 2000, 1.0 / 2000
    wh, _ = quad_vec(lambda s: expm(a.T * s) @ r @ expm(a * s), 0.0, h, epsabs=1e-15)
    eh = expm(a * h)
    grid = np.linspace(0, 1, n + 1)  # spacing 5e-4, far below the dip width ≈ 0.046
    vals = np.empty(n + 1)
    w, e = np.zeros((2, 2)), np.eye(2)
    for k in range(n + 1):
        vals[k] = np.linalg.eigvalsh(np.eye(2) + f.T @ w @ f)[0]
        w, e = w + e.T @ wh @ e, e @ eh
    k = int(np.argmax(vals < 0))
    assert k > 0 and vals[k:].min() < 0 and vals[-1] > 0  # a dip that closes again
    first = brentq(gmin, grid[k - 1], grid[k], xtol=1e-15, rtol=1e-15)
    res = blowup_analysis(lay, _g(s0))
    assert res.status is Status.BLOWUP and res.certified
    assert res.blowup_time == pytest.approx(first, rel=1e-10)
    traj = simulate(lay, _g(s0), 1.0, n_points=3)
    assert traj.status == "blowup"
    assert traj.blowup_time == pytest.approx(first, rel=1e-8)  # integrator event estimate


def test_blowup_matches_integrator_random_and_rank_deficient():
    rng = np.random.default_rng(4)
    d = 4
    a = 0.5 * rng.standard_normal((d, d))
    lay = Layer(A=a, B=random_spd(rng, d, 0.2, 1.0), V=0.7)
    f = rng.standard_normal((d, 2))
    for s0 in (random_spd(rng, d), f @ f.T):
        res = blowup_analysis(lay, _g(s0))
        assert res.status is Status.BLOWUP and res.certified
        traj = simulate(lay, _g(s0), 2 * res.blowup_time, n_points=3)
        assert traj.status == "blowup"
        # The integrator extrapolates 1/tr Σ from tr Σ ≈ 1e12 tr Σ0: ~1e-10 relative.
        assert traj.blowup_time == pytest.approx(res.blowup_time, rel=1e-8)


def test_tail_certificates_and_horizon():
    # Indefinite R on decoupled modes: collapses along e2, e4 and converges along e1, e3.
    lay = Layer(A=np.diag([1.0, -1.0, 0.5, -0.3]), B=np.diag([1.0, -1.0, 0.5, -2.0]), V=-1.0)
    res = blowup_analysis(lay, _g(0.1 * np.eye(4)))
    assert res.status is Status.SUCCESS and res.proved_never and res.certified
    assert "W₋(∞)" in res.message
    # −A Hurwitz, Σ0 ≻ 0, indefinite R with Ω* ≻ 0: the precision tail certificate.
    rng = np.random.default_rng(5)
    for _ in range(50):
        a = rng.standard_normal((3, 3)) + 2.5 * np.eye(3)
        om = random_spd(rng, 3)
        r = a.T @ om + om @ a
        w = np.linalg.eigvalsh(r)
        if np.all(np.linalg.eigvals(a).real > 0) and w[0] < 0 < w[-1]:
            break
    lay2 = Layer(A=a, B=r / 2, V=-1.0)
    s0 = np.linalg.inv(om) * 1.05
    res2 = blowup_analysis(lay2, _g(s0))
    assert res2.status is Status.SUCCESS and res2.proved_never and res2.certified
    traj = simulate(lay2, _g(s0), 40.0 / np.linalg.norm(a, 2), n_points=3)
    assert traj.status == "success"
    # Rank-1 Σ0 with −A Hurwitz and indefinite R: no tail applies; the search stops at the
    # horizon with [0, horizon] certified.
    lay3 = Layer(A=np.eye(2), B=np.diag([1.0, -0.5]), V=-1.0)
    f = np.array([[1.0], [0.5]])
    res3 = blowup_analysis(lay3, _g(f @ f.T), T=20.0)
    assert res3.status is Status.SUCCESS and not res3.proved_never and not res3.certified
    # the certified depth is a sum rounded down (a lower bound of the exact depth)
    assert res3.blowup_time == math.inf and res3.lower >= 20.0 * (1 - 1e-13)


def test_outside_class_uses_integrator_with_closed_form():
    # Diagonal, non-scalar V: each coordinate is a scalar Bernoulli equation (closed form).
    a = np.array([0.1, -0.2, 0.3, 0.0])
    p = np.array([1.0, 0.5, 1.0, 2.0])
    q = np.array([1.0, 1.0, 2.0, 0.5])
    lay = Layer(A=np.diag(a), B=np.diag(q), V=np.diag(p))
    assert not is_riccati(lay)
    res = blowup_analysis(lay, _g(0.5 * np.eye(4)))
    expected = min(_scalar_tstar(ai, pi * qi, 0.5) for ai, pi, qi in zip(a, p, q))
    assert res.method == "integrator" and not res.certified
    assert res.status is Status.BLOWUP
    assert res.blowup_time == pytest.approx(expected, rel=1e-8)


# --------------------------------------------------------------------------- exact flows


@pytest.mark.parametrize("method", ["radon", "lyapunov"])
def test_exact_flow_matches_integrator(method):
    rng = np.random.default_rng(6)
    d = 4
    a = 0.5 * rng.standard_normal((d, d))
    b = random_spd(rng, d, 0.2, 1.0)
    s0 = random_spd(rng, d, 0.1, 0.6)
    for lay, horizon in (
        (Layer(A=a, B=b, V=0.7), None),
        (Layer(A=a + 2 * np.eye(d), B=b, V=-0.7), 8.0),
    ):
        t_star = blowup_analysis(lay, _g(s0)).blowup_time
        t_end = 0.9 * t_star if horizon is None else horizon
        traj = simulate(lay, _g(s0), t_end, n_points=41)
        exact = riccati_flow(lay, _g(s0), traj.t, method=method).cov
        err = np.linalg.norm(exact - traj.cov, axis=(1, 2)) / np.linalg.norm(traj.cov, axis=(1, 2))
        # Integrator rtol 1e-11, accumulated over the run and amplified near blow-up.
        assert err.max() <= 1e-8


def test_radon_keeps_rank_and_handles_noise():
    rng = np.random.default_rng(7)
    d = 3
    a = 0.3 * rng.standard_normal((d, d))
    b = random_spd(rng, d, 0.2, 1.0)
    f = rng.standard_normal((d, 1))
    g0 = _g(f @ f.T)
    lay = Layer(A=a, B=b, V=-0.5)
    ts = np.linspace(0, 3, 7)
    flow = riccati_flow(lay, g0, ts).cov
    assert all(np.linalg.matrix_rank(s, tol=1e-9 * np.linalg.norm(s)) == 1 for s in flow)
    # With noise Q = GGᵀ the Hamiltonian gets the block Q (full Riccati equation).
    noisy = Layer(A=a, B=b, V=-0.5, noise=0.3 * np.eye(d))
    flow_n = riccati_flow(noisy, g0, ts).cov
    traj = simulate(noisy, g0, 3.0, n_points=7)
    np.testing.assert_allclose(flow_n, traj.cov, rtol=1e-8, atol=1e-10)
    with pytest.raises(InvalidParametersError, match="noise"):
        riccati_flow(noisy, _g(np.eye(d)), ts, method="lyapunov")


def test_flow_errors():
    lay = Layer(A=[[1.0]], B=[[0.5]], V=1.0)
    g0 = Gaussian([0.0], [[0.3]])
    t_star = blowup_analysis(lay, g0).blowup_time
    past = riccati_flow(lay, g0, [1.01 * t_star, 0.5 * t_star])  # a blow-up is a result
    assert past.status is Status.BLOWUP and past.success and past.blowup_time == t_star
    assert np.isnan(past.cov[0]).all() and np.isfinite(past.cov[1]).all()
    assert past.stats["computed"] == 1 and "T*" in past.message
    spent = riccati_flow(lay, g0, [0.5 * t_star], time_limit=1e-9)
    assert spent.status is Status.BUDGET_EXHAUSTED and not spent.success
    with pytest.raises(InvalidGaussianError, match="non-singular"):
        riccati_flow(
            Layer(A=np.eye(2), B=np.eye(2), V=-1.0),
            _g(np.diag([1.0, 0.0])),
            [1.0],
            method="lyapunov",
        )
    with pytest.raises(InvalidParametersError, match="Riccati class"):
        riccati_flow(Layer(A=np.eye(2), B=np.eye(2), V=np.diag([1.0, 2.0])), _g(np.eye(2)), [1.0])
    with pytest.raises(InvalidParametersError, match="method"):
        riccati_flow(lay, g0, [0.1], method="euler")
    with pytest.raises(InvalidParametersError, match="times"):
        riccati_flow(lay, g0, [-1.0])
    with pytest.raises(InvalidParametersError, match="rtol"):
        blowup_analysis(lay, g0, rtol=0.5)


# --------------------------------------------------------------------------- Bernoulli solves


def test_bernoulli_lyapunov_and_care_agree_both_signs():
    rng = np.random.default_rng(8)
    d = 5
    base = 0.3 * rng.standard_normal((d, d))
    b = random_spd(rng, d, 0.2, 1.0)
    # −A Hurwitz, R ≻ 0 (stable equilibrium; CARE sort 'S') and A Hurwitz, R ≺ 0 (unstable; 'U').
    for a, v in ((base + 1.5 * np.eye(d), -0.8), (base - 1.5 * np.eye(d), 0.8)):
        form = riccati_form(Layer(A=a, B=b, V=v))
        assert form is not None
        lyap = solve_bernoulli(form, method="lyapunov")
        care = solve_bernoulli(form, method="care")
        assert lyap.status is care.status is Status.SUCCESS
        assert lyap.success and lyap.message and "seconds" in lyap.stats
        s1, s2 = np.asarray(lyap.cov), np.asarray(care.cov)
        for s in (s1, s2):
            res = a @ s + s @ a.T - s @ form.R @ s
            scale = 2 * np.linalg.norm(a @ s) + np.linalg.norm(s @ form.R @ s)
            assert np.linalg.norm(res) <= 1e-12 * scale
        assert np.linalg.norm(s1 - s2) <= 1e-11 * np.linalg.norm(s1)
        np.testing.assert_allclose(
            np.sort_complex(lyap.eigvals_a), np.sort_complex(np.linalg.eigvals(a)), rtol=1e-12
        )


def test_bernoulli_ill_posed_cases_answer_clearly():
    b = np.eye(2)
    # Imaginary-axis eigenvalues of A (rotation) and A = 0 (singular Hamiltonian).
    for a in (np.array([[0.0, 1.0], [-1.0, 0.0]]), np.zeros((2, 2))):
        form = riccati_form(Layer(A=a, B=b, V=-1.0, dim=2))
        assert form is not None
        for method in ("lyapunov", "care"):
            sol = solve_bernoulli(form, method=method)
            assert sol.status is Status.FAILED and sol.degenerate
            assert not sol.success and sol.cov is None
            assert "imaginary axis" in sol.message
    # A Hurwitz with R ≻ 0: the Lyapunov solution is negative definite — no equilibrium.
    form = riccati_form(Layer(A=-np.eye(2), B=b, V=-1.0))
    sol = solve_bernoulli(form, method="lyapunov")
    assert sol.status is Status.INFEASIBLE and sol.success
    assert "no positive-definite" in sol.message
    assert solve_bernoulli(form, method="care").status is Status.INFEASIBLE
    # Mixed spectrum: the CARE route does not apply (but says so).
    form = riccati_form(Layer(A=np.diag([1.0, -2.0]), B=np.diag([1.0, -1.0]), V=-1.0))
    sol = solve_bernoulli(form, method="care")
    assert sol.status is Status.FAILED and sol.stats["not_applicable"] and not sol.degenerate
    assert "both sides" in sol.message
    assert solve_bernoulli(form, method="lyapunov").status is Status.SUCCESS
    # Eigenvalue pairs λ, −λ (1 and −1): singular Lyapunov operator, reported, never a raw error.
    form = riccati_form(Layer(A=np.diag([1.0, -1.0, 0.5]), B=np.eye(3), V=-1.0))
    assert solve_bernoulli(form, method="lyapunov").degenerate
    with pytest.raises(InvalidParametersError, match="Q = G Gᵀ"):
        solve_bernoulli(riccati_form(Layer(A=np.eye(2), B=b, V=-1.0, noise=np.eye(2))))


def test_no_raw_exception_on_ill_posed_layers():
    cases = [
        Layer(A=np.array([[0.0, 1.0], [-1.0, 0.0]]), B=np.eye(2), V=1.0),
        Layer(A=np.zeros((2, 2)), B=np.eye(2), V=-1.0),
        Layer(A=np.diag([1.0, -1.0]), B=np.eye(2), V=1.0),
        Layer(A=np.array([[0.0, 1.0], [0.0, 0.0]]), B=np.eye(2), V=-1.0),
    ]
    for lay in cases:
        for s0 in (np.eye(2), np.diag([1.0, 0.0])):
            try:
                res = blowup_analysis(lay, _g(s0), T=30.0)
            except GTControlError:
                continue
            assert res.status in (Status.BLOWUP, Status.SUCCESS)
    with pytest.raises(SolverError) as info:
        raise SolverError("x", status="budget_exhausted", stats={"a": 1})
    assert info.value.status is Status.BUDGET_EXHAUSTED and info.value.stats == {"a": 1}
    assert SolverError("y").status is Status.FAILED
    with pytest.raises(ValueError, match="singular"):
        SolverError("z", status="singular")  # a status is a Status, the detail is stats["cause"]


# --------------------------------------------------------------------------- result protocol


def test_blowup_result_protocol():
    lay = Layer(A=[[1.0]], B=[[0.5]], V=1.0)
    g0 = Gaussian([0.0], [[0.3]])
    res = blowup_analysis(lay, g0)
    assert isinstance(res, Result)
    assert res.status is Status.BLOWUP and res.success and res.message
    assert {"steps", "gramians", "seconds", "T"} <= set(res.stats)
    old = blowup_analysis(lay, g0, T=5.0)
    assert old.blowup_time == res.blowup_time and old.stats["T"] == 5.0
    assert not hasattr(res, "time")
    with pytest.raises(TypeError):
        blowup_analysis(lay, g0, horizon=5.0)  # type: ignore[call-arg]
    # the horizon is positional-or-keyword right after the data (docs/architecture.md)
    assert blowup_analysis(lay, g0, 5.0).blowup_time == old.blowup_time
    with pytest.raises(InvalidParametersError, match="time_limit"):
        blowup_analysis(lay, g0, time_limit=0.0)


def test_blowup_time_limit_and_step_cap_return_budget_exhausted():
    # A rotation with an indefinite R and a rank-1 Σ0: no tail certificate applies, so the
    # march runs to the depth T; a tiny budget stops it early with [0, lower] certified.
    lay = Layer(A=np.array([[0.0, 2.0], [-2.0, 0.0]]), B=np.diag([1.5, -0.5]), V=-1.0)
    g0 = _g(np.diag([1.0, 0.0]))
    t0 = time.perf_counter()
    res = blowup_analysis(lay, g0, T=1e6, time_limit=1e-3)
    assert time.perf_counter() - t0 < 1.0
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success and not res.certified
    assert "time limit" in res.message and res.blowup_time == math.inf
    capped = blowup_analysis(lay, g0, T=1e6, max_steps=3)
    assert capped.status is Status.BUDGET_EXHAUSTED and "max_steps" in capped.message
    assert capped.lower > 0
    assert capped.stats["steps"] == 3 and capped.blowup_time == math.inf
    # The integrator path (general V) is budgeted too.
    gen = Layer(A=np.eye(2), B=np.eye(2), V=np.diag([-1.0, -2.0]))
    res_i = blowup_analysis(gen, _g(np.eye(2)), T=1e6, time_limit=1e-3)
    assert res_i.status is Status.BUDGET_EXHAUSTED and res_i.method == "integrator"
