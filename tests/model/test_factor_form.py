"""The factor-form moment integrator, blow-up in any direction and stiffness (issue 11)."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp
from scipy.linalg import expm, sqrtm

from gtcontrol import FactoredHeads, Gaussian, Layer, Schedule, Status, blowup_analysis, simulate


def _spd(rng: np.random.Generator, d: int, lo: float = 0.5) -> np.ndarray:
    x = rng.standard_normal((d, d))
    return x @ x.T / d + lo * np.eye(d)


def _random_layer(rng: np.random.Generator, d: int, scale: float = 0.3) -> Layer:
    heads = [
        (rng.standard_normal((d, d)) * scale, rng.standard_normal((d, d)) * scale) for _ in range(2)
    ]
    return Layer(rng.standard_normal((d, d)) * scale, b=rng.standard_normal(d), heads=heads)


# ------------------------------------------------------------- factor form vs entry-wise
def test_factor_form_matches_entrywise_on_well_conditioned_cases() -> None:
    rng = np.random.default_rng(1)
    for d in (2, 4, 6):
        lay = _random_layer(rng, d, 0.15)
        g0 = Gaussian(rng.standard_normal(d), _spd(rng, d))
        fac = simulate(lay, g0, T=1.0, rtol=1e-13, atol=1e-16)
        # a zero noise matrix sends the same layer through the entry-wise path
        ent = simulate(lay.replace(noise=np.zeros((d, d))), g0, T=1.0, rtol=1e-13, atol=1e-16)
        assert fac.stats["form"] == "factor" and ent.stats["form"] == "entrywise"
        assert fac.status is Status.SUCCESS and ent.status is Status.SUCCESS
        np.testing.assert_array_equal(fac.t, ent.t)
        for i in range(len(fac)):
            scale = np.linalg.norm(ent.cov[i])
            assert np.linalg.norm(fac.cov[i] - ent.cov[i]) <= 1e-10 * scale
            assert np.linalg.norm(fac.mean[i] - ent.mean[i]) <= 1e-10 * max(
                np.linalg.norm(ent.mean[i]), 1.0
            )
        assert fac.factor is not None and ent.factor is None
        np.testing.assert_allclose(
            np.einsum("nij,nkj->nik", fac.factor, fac.factor), fac.cov, rtol=0, atol=1e-13
        )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    d=st.integers(2, 6),
    rank_gap=st.integers(1, 4),
)
def test_low_rank_stays_psd_with_exact_rank(seed: int, d: int, rank_gap: int) -> None:
    rng = np.random.default_rng(seed)
    r = max(1, d - rank_gap)
    f0 = rng.standard_normal((d, r))
    g0 = Gaussian(rng.standard_normal(d), f0 @ f0.T)
    traj = simulate(_random_layer(rng, d, 0.3), g0, T=0.5, n_points=21)
    assert traj.status in (Status.SUCCESS, Status.BLOWUP)
    assert traj.factor is not None and traj.factor.shape[1:] == (d, r)
    for i in range(len(traj)):
        w = np.linalg.eigvalsh(traj.cov[i])
        assert w[0] >= -1e-13 * w[-1]  # PSD to round-off
        sv = np.linalg.svd(traj.factor[i], compute_uv=False)
        assert np.all(sv > 0)  # rank exactly r: a d×r factor with r positive singular values
        if sv[0] < 1e4 * sv[-1]:  # the numerical rank (relative 1e-9) sees all r directions
            assert traj.rank[i] == r


def test_decaying_covariance_keeps_relative_accuracy() -> None:
    rng = np.random.default_rng(3)
    d, T = 4, 3.0
    a = -20.0 * np.eye(d) + 0.5 * rng.standard_normal((d, d))
    s0 = _spd(rng, d)
    traj = simulate(Layer(A=a), Gaussian(np.zeros(d), s0), T=T)
    assert traj.status is Status.SUCCESS
    e = expm(a * T)
    exact = e @ s0 @ e.T
    w_exact, w = np.linalg.eigvalsh(exact), np.linalg.eigvalsh(traj.cov[-1])
    assert w_exact[-1] < 1e-45  # Σ ~ 1e-50
    np.testing.assert_allclose(w, w_exact, rtol=1e-8, atol=0)
    # along the way as well
    for i in range(0, len(traj), 20):
        e = expm(a * traj.t[i])
        np.testing.assert_allclose(
            np.linalg.eigvalsh(traj.cov[i]), np.linalg.eigvalsh(e @ s0 @ e.T), rtol=1e-8, atol=0
        )


# ------------------------------------------------------------------------------ blow-up
@pytest.mark.parametrize(
    ("a", "c", "s0"), [(0.0, 1.0, 0.5), (1.0, 0.5, 0.3), (-0.5, 2.0, 1.0), (2.0, 0.1, 4.0)]
)
def test_scalar_blowup_time_matches_closed_form(a: float, c: float, s0: float) -> None:
    t_star = 1 / (2 * c * s0) if a == 0 else math.log(1 + a / (c * s0)) / (2 * a)
    traj = simulate(Layer(A=[[a]], B=[[c]], V=1.0), Gaussian([0.0], [[s0]]), T=2 * t_star + 1)
    assert traj.status is Status.BLOWUP and traj.success
    assert abs(traj.blowup_time - t_star) <= 1e-10 * t_star
    assert traj.blowup_bracket is not None
    lower, upper = traj.blowup_bracket
    assert lower == traj.t[-1] <= traj.blowup_time <= upper
    assert upper - lower <= 1e-4 * t_star


def test_isotropic_v_blowup_matches_closed_form() -> None:
    rng = np.random.default_rng(5)
    d = 4
    heads, r = [], np.zeros((d, d))
    for v in (0.7, 0.3):
        b = _spd(rng, d, 0.2) + 0.3 * (lambda x: x - x.T)(rng.standard_normal((d, d)))
        heads.append((v, b))
        r -= v * (b + b.T)
    s0 = _spd(rng, d)
    h = np.real(sqrtm(s0))
    t_star = 1 / np.linalg.eigvalsh(h @ (-r) @ h)[-1]
    traj = simulate(Layer(heads=heads), Gaussian(np.zeros(d), s0), T=3 * t_star)
    assert traj.status is Status.BLOWUP
    assert abs(traj.blowup_time - t_star) <= 1e-10 * t_star


def _reference_blowup(layer: Layer, g0: Gaussian, T: float) -> float:
    """Independent: Radau on the full (m, Σ) at rtol 1e-12 to ‖Σ‖₂ = 1e8, then 1/λ tangent."""
    d = layer.dim

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        m, s = y[:d], y[d:].reshape(d, d)
        mm = layer.A + sum(v @ s @ b for v, b in layer.heads)
        c = layer.b + sum(v @ m for v, _ in layer.heads)
        return np.concatenate([mm @ m + c, (mm @ s + s @ mm.T).ravel()])

    def big(t: float, y: np.ndarray) -> float:
        return float(np.linalg.eigvalsh(y[d:].reshape(d, d))[-1]) - 1e8

    big.terminal = True  # type: ignore[attr-defined]
    y0 = np.concatenate([g0.mean, g0.cov.ravel()])
    sol = solve_ivp(rhs, (0, T), y0, method="Radau", rtol=1e-12, atol=1e-14, events=big)
    t_e, y_e = sol.t_events[0][0], sol.y_events[0][0]
    w, q = np.linalg.eigh(y_e[d:].reshape(d, d))
    ds = rhs(t_e, y_e)[d:].reshape(d, d)
    return float(t_e + w[-1] / (q[:, -1] @ ds @ q[:, -1]))


def test_general_v_blowup_matches_independent_integration() -> None:
    rng = np.random.default_rng(7)
    d = 3
    b = _spd(rng, d, 1.0)
    v = np.eye(d) + 0.3 * rng.standard_normal((d, d))  # not a multiple of I
    lay = Layer(A=0.2 * rng.standard_normal((d, d)), B=b, V=v)
    g0 = Gaussian(rng.standard_normal(d), _spd(rng, d))
    traj = simulate(lay, g0, T=10.0)
    assert traj.status is Status.BLOWUP
    ref = _reference_blowup(lay, g0, 10.0)
    assert abs(traj.blowup_time - ref) <= 1e-8 * ref
    res = blowup_analysis(lay, g0, T=10.0)
    assert res.status is Status.BLOWUP and res.method == "integrator"
    assert res.lower < res.upper < math.inf and res.lower <= res.blowup_time <= res.upper
    assert abs(res.blowup_time - ref) <= 1e-8 * ref


def test_blowup_inside_the_third_layer_of_a_schedule() -> None:
    # scalar layers dσ/dt = 2aσ + 2cσ²; layers 1, 2 bounded over their unit depth, 3 blows up
    params = [(-1.0, 0.5), (0.3, 0.2), (0.5, 3.0), (0.0, 1.0)]
    layers = [Layer(A=[[a]], B=[[c]], V=1.0) for a, c in params]
    sigma = 0.4
    for a, c in params[:2]:  # ω(t) = (ω0 + c/a) e^{−2at} − c/a over one unit of depth
        omega = (1 / sigma + c / a) * math.exp(-2 * a) - c / a
        sigma = 1 / omega
    a, c = params[2]
    t_star = 2.0 + math.log(1 + a / (c * sigma)) / (2 * a)
    assert 2.0 < t_star < 3.0
    traj = simulate(Schedule(layers, T=4.0), Gaussian([1.0], [[0.4]]))
    assert traj.status is Status.BLOWUP
    assert abs(traj.blowup_time - t_star) <= 1e-10 * t_star
    assert traj.blowup_bracket is not None and 2.0 < traj.blowup_bracket[0] <= t_star


def test_step_collapse_in_several_dimensions_is_classified() -> None:
    rng = np.random.default_rng(9)
    d = 3
    b = _spd(rng, d)
    s0 = _spd(rng, d)
    h = np.real(sqrtm(s0))
    t_star = 1 / np.linalg.eigvalsh(h @ (b + b.T) @ h)[-1]
    traj = simulate(Layer(B=b, V=1.0), Gaussian(np.zeros(d), s0), T=2 * t_star, blowup_factor=1e300)
    assert traj.status is Status.BLOWUP and "step size collapsed" in traj.message
    assert abs(traj.blowup_time - t_star) <= 1e-9 * t_star
    assert traj.blowup_bracket is not None and traj.blowup_bracket[0] < traj.blowup_bracket[1]


def test_exponential_growth_is_not_a_blowup() -> None:
    traj = simulate(Layer(A=[[200.0]]), Gaussian([0.0], [[1.0]]), T=5.0)
    assert traj.status is Status.OVERFLOW and traj.blowup_bracket is None
    assert math.isinf(traj.blowup_time)


# ---------------------------------------------------------------------------- stiffness
def test_stiff_rotation_returns_quickly_and_matches_closed_forms() -> None:
    w = 1e6
    a = np.array([[-1.0, w], [-w, -1.0]])
    c, s = math.cos(w), math.sin(w)
    e = math.exp(-1.0) * np.array([[c, s], [-s, c]])  # e^{A·1}, exactly
    m0 = np.array([1.0, 0.0])
    # attention off: Σ(1) = e^{A}Σ0e^{Aᵀ} for an anisotropic Σ0
    s0 = np.diag([2.0, 0.5])
    clock = time.perf_counter()
    traj = simulate(Layer(A=a), Gaussian(m0, s0), T=1.0)
    assert time.perf_counter() - clock < 5.0
    assert traj.status is Status.SUCCESS and traj.stats["switched_to"]
    assert traj.stats["nfev"] < 20_000
    np.testing.assert_allclose(traj.cov[-1], e @ s0 @ e.T, rtol=0, atol=1e-8 * np.exp(-2) * 2)
    np.testing.assert_allclose(traj.mean[-1], e @ m0, rtol=0, atol=1e-9)
    # weak isotropic attention V = vI, B = I from Σ0 = I: Σ = σI, dσ/dt = −2σ + 2vσ²
    v = 0.01
    clock = time.perf_counter()
    traj = simulate(Layer(A=a, B=np.eye(2), V=v), Gaussian(m0, np.eye(2)), T=1.0)
    assert time.perf_counter() - clock < 5.0
    assert traj.status is Status.SUCCESS and traj.stats["switched_to"]
    sigma = 1 / ((1 - v) * math.exp(2.0) + v)
    np.testing.assert_allclose(traj.cov[-1], sigma * np.eye(2), rtol=0, atol=1e-9 * sigma)
    growth = math.exp(v * ((1 - 0.5 * math.log((1 - v) * math.exp(2.0) + v)) / v + 1))
    np.testing.assert_allclose(traj.mean[-1], growth * (e @ m0), rtol=0, atol=1e-8)


def test_dissipative_stiffness_switches_to_radau() -> None:
    a = np.diag([-1e5, -1.0])
    traj = simulate(Layer(A=a, B=0.1 * np.eye(2), V=0.1), Gaussian([1.0, 1.0], np.eye(2)), T=2.0)
    assert traj.status is Status.SUCCESS
    assert any("Radau" in s for s in traj.stats["switched_to"]) and traj.stats["njev"] >= 1
    assert traj.stats["nfev"] < 200_000


def test_hard_growth_ends_within_its_budget_with_an_honest_status() -> None:
    """A random general-V layer whose covariance grows super-exponentially without a clean
    quadratic blow-up law (found by hypothesis: seed 4653, d = 6): the step size collapses while
    λ_max passes 1e11 and neither the blow-up watch nor the stiff solver concludes. Open
    (issue 11): the answer is not yet decided. Σ becomes numerically rank one (σ₂/σ₁ of the
    factor ~1e-3 → 1e-6) and λ_max grows near-exponentially, e-folding rate ~150 at depth
    0.23–0.31 rising to ~200 by 0.34 (seen with LSODA and Radau on the normalised factor
    (log tr Σ, L/‖L‖), in depth and in the time τ with dτ = ‖M‖ dt: all stall near 0.29–0.34).
    What holds is that the call ends within its time limit with BUDGET_EXHAUSTED, the trajectory
    so far, PSD and of exact rank, and a message that reports the growth measured so far."""
    rng = np.random.default_rng(4653)
    d, r = 6, 5
    f0 = rng.standard_normal((d, r))
    g0 = Gaussian(rng.standard_normal(d), f0 @ f0.T)
    layer = _random_layer(rng, d, 0.4)
    clock = time.perf_counter()
    traj = simulate(layer, g0, T=0.5, n_points=21, time_limit=3.0)
    assert time.perf_counter() - clock < 6.0
    assert traj.status in (Status.BUDGET_EXHAUSTED, Status.BLOWUP, Status.SUCCESS)
    assert traj.status is not Status.BUDGET_EXHAUSTED or "time limit" in traj.message
    if traj.status is Status.BUDGET_EXHAUSTED:
        # the message says what the growth looks like so far: near-exponential (the
        # remaining-time estimate λ/λ̇ stays near 0.006 instead of shrinking tenfold per decade)
        samples = traj.stats["growth_samples"]
        assert len(samples) >= 2 and "e-folding rate" in traj.message
        lams = [lam for _, lam, _ in samples]
        assert all(b > 5 * a for a, b in itertools.pairwise(lams))
        rho = [r for _, _, r in samples]
        assert 0.2 < rho[-1] / rho[0] < 5.0
        # the top direction converges to the common null cone of the two heads' B_h (vᵀB_h v
        # falls like 1/λ_max while λ_2 stays near 400): attention is flat along it
        assert "null cone of every head" in traj.message
    assert traj.factor is not None and traj.factor.shape[1:] == (d, r)
    for c in traj.cov:
        w = np.linalg.eigvalsh(c)
        assert w[0] >= -1e-13 * w[-1]


def test_growth_note_tells_quadratic_from_exponential_samples() -> None:
    """The watch's note for an undecided growth: the e-folding rate and the trend of λ/λ̇."""
    from gtcontrol.model._blowup_detection import BlowupWatch

    expo = BlowupWatch(1.0, 10.0, 1e-12)
    for t in (0.1, 0.25, 0.4):  # λ = e^{23 t}: λ/λ̇ = 1/23 at every sample
        lam = float(np.exp(23.0 * t)) * 1e3
        expo.observe(t, lam, 23.0 * lam)
    note = expo.growth_note()
    assert "e-folding rate 23 per unit depth" in note
    assert "0.0435 → 0.0435" in note
    assert len(expo.growth_samples()) == 3
    assert BlowupWatch(1.0, 10.0, 1e-12).growth_note() == ""


def test_null_cone_note_sees_an_attention_flat_top_direction() -> None:
    """vᵀB_h v = 0 for every head along the top direction: noted, dense and factored alike."""
    from gtcontrol.model._blowup_detection import BlowupWatch
    from gtcontrol.model.heads import FactoredHeads

    v = np.array([1.0, 1.0, 0.0]) / np.sqrt(2.0)
    cov = 1e9 * np.outer(v, v) + np.diag([1.0, 2.0, 3.0])
    flat = Layer(A=-np.eye(3), heads=[(np.eye(3), np.diag([1.0, -1.0, 0.5]))])
    tilted = Layer(A=-np.eye(3), heads=[(np.eye(3), np.diag([1.0, 1.0, 0.5]))])
    watch = BlowupWatch(1.0, 10.0, 1e-12)
    assert watch.null_cone_note(flat, cov) == ""  # no sample past 1e6 yet
    watch.observe(0.1, 1e9, 1e11)
    assert "null cone of every head" in watch.null_cone_note(flat, cov)
    assert watch.null_cone_note(tilted, cov) == ""
    # factored heads: B = s kᵀq with q = diag(1, -1, 0.5), k = I: the same tilt, no dense head
    fh = FactoredHeads(
        np.diag([1.0, -1.0, 0.5])[None],
        np.eye(3)[None],
        np.eye(3)[None],
        np.eye(3)[None],
        scale=1.0,
    )
    assert "null cone" in watch.null_cone_note(Layer(A=-np.eye(3), heads=fh), cov)


# ---------------------------------------------------------------------------- gauge
def test_horizontal_gauge_holds_an_equilibrium_still_and_changes_no_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At an equilibrium the factor rotates (``K̇ = M*K`` with ``M*`` Σ*-skew) while Σ stands
    still; the horizontal gauge removes that rotation, so the steps are no longer held by its
    accuracy. Near the equilibrium it changes no moment: both runs match the closed form
    ``Σ(t) = e^{At} Σ0 e^{Aᵀt}``. Far from one (Σ moving fast) it is switched off again."""
    import gtcontrol.model._moment_integrator as mi

    rng = np.random.default_rng(3)
    d = 6
    w = rng.standard_normal((d, d))
    skew = 4.0 * (w - w.T)  # ‖A‖ ≈ 40: the factor turns ~40 rad per unit depth
    s_star = np.diag(np.linspace(0.5, 2.0, d))
    a = skew @ np.linalg.inv(s_star)  # A Σ* = skew: A Σ* + Σ* Aᵀ = 0, Σ* an equilibrium
    still = Gaussian(np.zeros(d), s_star)
    e = rng.standard_normal((d, d))
    near = Gaussian(np.zeros(d), s_star + 1e-7 * (e + e.T))
    f0 = rng.standard_normal((d, d))
    far = Gaussian(rng.standard_normal(d), s_star + 0.1 * f0 @ f0.T)
    lay = Layer(A=a)
    runs = [simulate(lay, g, T=2.0, n_points=5, rtol=1e-10) for g in (still, near)]
    weak = Layer(A=a - 0.5 * np.eye(d), heads=[(0.05 * np.eye(d), np.eye(d))])
    far_run = simulate(weak, far, T=2.0, n_points=3)
    monkeypatch.setattr(mi, "_GAUGE_SHARE", math.inf)
    monkeypatch.setattr(mi, "_GAUGE_SHARE_START", math.inf)
    plain = [simulate(lay, g, T=2.0, n_points=5, rtol=1e-10) for g in (still, near)]
    far_plain = simulate(weak, far, T=2.0, n_points=3)
    for on, off in zip(runs, plain, strict=True):
        assert on.status is Status.SUCCESS and off.status is Status.SUCCESS
        assert any("horizontal gauge" in s for s in on.stats["switched_to"])
        assert not any("horizontal gauge" in s for s in off.stats["switched_to"])
        # the steps are then held by Σ's own oscillation ([M*, H], up to 2‖M*‖, and its
        # amplitude), not by the accuracy of K's rotation: 19 and 78 against 117 and 119
        # steps when written. (This rotation never decays: at a 1e-3 perturbation the gauge
        # cost steps, 163 against 116; stabilized layers damp it, see docs/theory.md §2.)
        assert 1.4 * on.stats["nsteps"] < off.stats["nsteps"]
        g0 = np.asarray((still if on is runs[0] else near).cov)
        for t, c_on, c_off in zip(on.t, on.cov, off.cov, strict=True):
            exact = expm(a * t) @ g0 @ expm(a * t).T
            np.testing.assert_allclose(c_on, exact, rtol=0, atol=1e-8)
            np.testing.assert_allclose(c_off, exact, rtol=0, atol=1e-8)
    # Far from one (Σ oscillating at the rotation's speed) the gauge's share test passes but
    # the gauge costs steps (241 against 143 to depth 2 when it stayed on): its trial measures
    # that and switches it off again, within 3 % of the plain run's steps (147 against 143).
    switches = far_run.stats["switched_to"]
    assert any(s.startswith("horizontal gauge off") for s in switches), switches
    assert far_run.stats["nsteps"] <= 1.05 * far_plain.stats["nsteps"]
    np.testing.assert_allclose(far_run.cov[-1], far_plain.cov[-1], rtol=0, atol=1e-10)


@pytest.mark.parametrize("factored", [False, True])
def test_diagonal_and_uniform_heads_take_the_structured_paths(factored: bool) -> None:
    """Diagonal ``V`` (``−scP``, stabilize's added head), diagonal ``B`` (``P/s`` for a target
    ``I ⊕ 0``) and a uniform head ``(κP, 0)`` take the scaling and skipping paths of
    ``factor_field`` (from d = 64); ``moment_field`` forms ``V Σ B`` as products, independently."""
    from gtcontrol.model.field import factor_field, moment_field

    rng = np.random.default_rng(8)
    d = 80
    proj = np.eye(d)
    proj[-1, -1] = 0.0
    heads: list[object] = []
    if factored:
        w = [rng.standard_normal((d, d)) / d for _ in range(4)]
        heads.append(FactoredHeads.from_projections(*w, n_heads=4))
    heads += [
        (-2.5 * proj, proj / 3.0),
        (np.diag(rng.standard_normal(d)), rng.standard_normal((d, d))),
        (4.0 * proj, np.zeros((d, d))),
        (rng.standard_normal((d, d)), np.eye(d)),
    ]
    layer = Layer(A=rng.standard_normal((d, d)), heads=heads)
    lf = rng.standard_normal((d, 7))
    m = rng.standard_normal(d)
    dm, dl = factor_field(layer, m, lf)
    dm2, ds2 = moment_field(layer, m, lf @ lf.T)
    scale = float(np.abs(ds2).max())
    np.testing.assert_allclose(dm, dm2, rtol=1e-12, atol=1e-12 * float(np.abs(dm2).max()))
    np.testing.assert_allclose(dl @ lf.T + lf @ dl.T, ds2, rtol=1e-12, atol=1e-12 * scale)


class _Stub:
    """A form whose state is ``(m, L)`` flattened, ``Σ = L Lᵀ`` (the factor form's layout)."""

    def __init__(self, d: int, r: int) -> None:
        self.d, self.r = d, r

    def moments(self, t: float, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m, lf = y[: self.d], y[self.d :].reshape(self.d, self.r)
        return m, lf @ lf.T, lf


def test_record_grows_past_its_capacity_and_keeps_every_state() -> None:
    # The records are written into arrays allocated once and grown by doubling; the trajectory
    # takes views of them. Every state must come back in order, symmetrized, with its factor;
    # a factor of another shape (a rank change) drops the factors, as the old list did.
    from gtcontrol.model._moment_integrator import MomentRecord

    rng = np.random.default_rng(0)
    d = 3
    l0 = rng.standard_normal((d, d))
    rec = MomentRecord(0.0, np.zeros(d), l0 @ l0.T, l0, capacity=2)
    ys = [rng.standard_normal(d + d * d) for _ in range(6)]
    for k, y in enumerate(ys, start=1):
        rec.add(0.1 * k, _Stub(d, d), y)  # type: ignore[arg-type]
    rec.add(0.1 * 3, _Stub(d, d), ys[0])  # not beyond the last depth: ignored
    ts, means, covs, factors = rec.arrays()
    assert ts.tolist() == [0.1 * k for k in range(7)]
    assert factors is not None and factors.shape == (7, d, d)
    for i, y in enumerate(ys, start=1):
        lf = y[d:].reshape(d, d)
        np.testing.assert_array_equal(means[i], y[:d])
        np.testing.assert_array_equal(factors[i], lf)
        np.testing.assert_allclose(covs[i], lf @ lf.T, rtol=1e-15, atol=1e-15)
        np.testing.assert_array_equal(covs[i], covs[i].T)
    rec.add(0.7, _Stub(d, 2), rng.standard_normal(d + 2 * d))
    assert rec.arrays()[3] is None and len(rec.arrays()[0]) == 8


@pytest.mark.parametrize("seed", [101, 104])
def test_gauge_restarts_when_the_columns_drift_and_keeps_its_steps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The horizontal gauge's lift takes the Gram ``KᵀK``'s diagonal for the Gram (exact for
    orthogonal columns). On a stabilized random layer, from the identity, the columns drift
    apart as ``K`` moves; restarting (re-gauging) once a cosine exceeds 0.03 keeps the steps
    long: 83 and 85 steps with 7 and 9 restarts against 159 and 127 without, to depth 12.
    Both runs agree with a reference at rtol 1e-12 (without the gauge) to 1e-9 relative."""
    import gtcontrol.model._factor_form as ff
    import gtcontrol.model._moment_integrator as mi
    from gtcontrol import stabilize

    rng = np.random.default_rng(seed)
    d = int(rng.choice([6, 12, 24, 48]))
    h = int(rng.integers(1, 4))
    a = rng.standard_normal((d, d))
    target = Gaussian(rng.standard_normal(d), a @ a.T / d + 0.2 * np.eye(d))
    heads = [
        (rng.standard_normal((d, d)) / math.sqrt(d), rng.standard_normal((d, d)) / d)
        for _ in range(h)
    ]
    layer = Layer(A=rng.standard_normal((d, d)) / math.sqrt(d), heads=heads)
    res = stabilize(layer, target, add="head")
    assert res.success, res.message
    g0 = Gaussian(np.zeros(d), np.eye(d))
    on = simulate(res.layer, g0, 12.0, n_points=5)
    monkeypatch.setattr(ff, "_GAUGE_DRIFT", math.inf)
    drifting = simulate(res.layer, g0, 12.0, n_points=5)
    monkeypatch.setattr(mi, "_GAUGE_SHARE", math.inf)
    monkeypatch.setattr(mi, "_GAUGE_SHARE_START", math.inf)
    ref = simulate(res.layer, g0, 12.0, n_points=5, rtol=1e-12, atol=1e-14)
    assert on.stats["restarts"] > drifting.stats["restarts"]
    assert 1.4 * on.stats["nsteps"] < drifting.stats["nsteps"]
    scale = float(np.abs(ref.cov).max())
    for run in (on, drifting):
        np.testing.assert_allclose(run.cov, ref.cov, rtol=0, atol=1e-9 * scale)
        np.testing.assert_allclose(run.mean, ref.mean, rtol=0, atol=1e-9 * max(scale, 1.0))


def test_gauge_goes_off_when_its_columns_drift_apart_at_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Near a blow-up Σ itself moves fast and ``K``'s columns drift apart within a step: with
    the horizontal gauge kept on, every step restarts (a new solver, a re-gauging SVD). A
    restart on two consecutive steps switches the gauge off, which saves evaluations (734
    against 815 when written: 23 restarts against 62) and changes the blow-up time only
    within the tolerance, against a reference without the gauge at rtol 1e-10."""
    import gtcontrol.model._moment_integrator as mi

    rng = np.random.default_rng(0)
    d = 32
    heads = []
    for _ in range(2):
        q = rng.standard_normal((d, d)) / math.sqrt(d)
        heads.append((rng.standard_normal((d, d)) / math.sqrt(d), 0.5 * q @ q.T + 0.2 * np.eye(d)))
    a = 2.0 * rng.standard_normal((d, d))
    layer = Layer(A=a - a.T - 0.3 * np.eye(d), heads=heads)
    g0 = Gaussian(np.zeros(d), np.eye(d))
    run = simulate(layer, g0, 4.0, n_points=3, rtol=1e-4, method="RK45")
    monkeypatch.setattr(mi._Segment, "renormalize", mi._Segment.restart)  # the gauge stays on
    kept = simulate(layer, g0, 4.0, n_points=3, rtol=1e-4, method="RK45")
    monkeypatch.setattr(mi, "_GAUGE_SHARE", math.inf)
    monkeypatch.setattr(mi, "_GAUGE_SHARE_START", math.inf)
    ref = simulate(layer, g0, 4.0, n_points=3, rtol=1e-10, atol=1e-12, method="DOP853")
    assert run.status is kept.status is ref.status is Status.BLOWUP
    assert any("drift apart within a step" in s for s in run.stats["switched_to"])
    assert not any("drift apart" in s for s in kept.stats["switched_to"])
    assert run.stats["restarts"] < 0.5 * kept.stats["restarts"]
    assert run.stats["nfev"] < kept.stats["nfev"]
    for r in (run, kept):
        assert abs(r.blowup_time - ref.blowup_time) < 1e-5 * ref.blowup_time


# ------------------------------------------------------------- the distance to a reference
def test_the_distance_form_keeps_the_distance_relatively_accurate_as_it_falls() -> None:
    """``dσ/dt = 2σ(1 − σ)`` (``A = 1``, ``vB = −1``): from ``σ0 = 1.1`` the distance to the
    equilibrium ``σ* = 1`` falls as ``(1/σ0 − 1)e^{−2t} / (1 + (1/σ0 − 1)e^{−2t})``, from 0.1 to
    2e-10 at depth 10. Integrated as the distance it keeps its relative accuracy all the way
    down (to the rounding of ``1 + δ`` in the recorded covariance); the factor form, whose
    error control is relative to σ, loses it at its default tolerance 1e-11."""
    layer = Layer(A=[[1.0]], B=[[1.0]], V=-1.0)
    g0, star = Gaussian([0.0], [[1.1]]), Gaussian([0.0], [[1.0]])
    dist = simulate(layer, g0, 10.0, n_points=11, method="RK45", rtol=1e-8, atol=1e-8, around=star)
    plain = simulate(layer, g0, 10.0, n_points=11)
    assert dist.stats["form"] == "deviation" and dist.factor is None
    assert dist.status is Status.SUCCESS and plain.status is Status.SUCCESS
    q = (1 / 1.1 - 1) * np.exp(-2 * dist.t)
    exact = -q / (1 + q)  # σ(t) − 1
    eps = np.finfo(float).eps
    rel = np.abs((dist.cov[:, 0, 0] - 1.0) - exact) / np.abs(exact)
    assert np.all(rel <= np.maximum(1e-6, 2 * eps / np.abs(exact))), rel
    assert abs((plain.cov[-1, 0, 0] - 1.0) / exact[-1] - 1.0) > 1e-5  # the factor form's


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 4))
def test_the_distance_form_matches_the_closed_form_of_a_noisy_linear_layer(
    seed: int, d: int
) -> None:
    """``dm/dt = A m + b``, ``dΣ/dt = AΣ + ΣAᵀ + GGᵀ`` (a layer without heads, with noise) has
    the equilibrium ``m* = −A⁻¹b``, ``AΣ* + Σ*Aᵀ + GGᵀ = 0``, and the distance
    ``e^{At}(Σ0 − Σ*)e^{Aᵀt}``, ``e^{At}(m0 − m*)``: the distance form follows it to 1e-6 of its
    own size while it falls by six orders of magnitude."""
    from scipy.linalg import solve_continuous_lyapunov

    rng = np.random.default_rng(seed)
    r = rng.standard_normal((d, d))
    a = -(0.5 * np.eye(d) + r @ r.T / d)
    b, g = rng.standard_normal(d), rng.standard_normal((d, d))
    s_star = solve_continuous_lyapunov(a, -g @ g.T)
    m_star = -np.linalg.solve(a, b)
    e = rng.standard_normal((d, d))
    root = np.real(sqrtm(s_star))
    ds = 0.1 * root @ (e + e.T) / (2 * np.linalg.norm(e, 2)) @ root
    dm = 0.1 * root @ rng.standard_normal(d)
    T = 6.9 / float(-np.max(np.linalg.eigvalsh(a)))  # the slowest mode falls by 1e-6 (e^-13.8)
    traj = simulate(
        Layer(A=a, b=b, noise=g),
        Gaussian(m_star + dm, s_star + ds),
        T,
        n_points=7,
        rtol=1e-10,
        atol=1e-10,
        around=Gaussian(m_star, s_star),
    )
    assert traj.status is Status.SUCCESS and traj.stats["form"] == "deviation"
    eps = np.finfo(float).eps
    for i, t in enumerate(traj.t):
        phi = expm(a * t)
        want_s, want_m = phi @ ds @ phi.T, phi @ dm
        floor = 4 * eps * max(np.linalg.norm(s_star), np.linalg.norm(m_star), 1.0)
        got_s, got_m = traj.cov[i] - s_star, traj.mean[i] - m_star
        assert np.linalg.norm(got_s - want_s) <= 1e-6 * np.linalg.norm(want_s) + floor
        assert np.linalg.norm(got_m - want_m) <= 1e-6 * np.linalg.norm(want_m) + floor


def test_a_reference_of_the_wrong_dimension_is_refused_by_name() -> None:
    from gtcontrol.errors import InvalidGaussianError

    layer = Layer(A=-np.eye(2))
    with pytest.raises(InvalidGaussianError, match="around"):
        simulate(layer, Gaussian(np.zeros(2), np.eye(2)), 1.0, around=Gaussian([0.0], [[1.0]]))
    with pytest.raises(InvalidGaussianError, match="around"):
        simulate(layer, Gaussian(np.zeros(2), np.eye(2)), 1.0, around="target")  # type: ignore[arg-type]
