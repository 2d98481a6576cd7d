"""Tests of equilibria and regimes: equilibria (slycot and Newton), regimes, interop, figure data.

Expected values come from closed forms (theory.md §2–4), constructions with a known equilibrium,
finite differences of the moment field, and the independent integrator gtcontrol.simulate.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np
import pytest
from helpers import random_spd
from scipy.optimize import linear_sum_assignment

from gtcontrol import (
    Gaussian,
    Layer,
    Result,
    Status,
    covariance_jacobian,
    moment_field,
    simulate,
)
from gtcontrol.analysis.equilibria import (
    EquilibriaResult,
    equilibria,
    equilibrium_at,
    mean_matrix,
)
from gtcontrol.analysis.newton import NewtonSettings, newton_equilibrium
from gtcontrol.analysis.regime_figures import cone_coordinates, regime_figure_data
from gtcontrol.analysis.regimes import analyze, mean_dynamics_ss
from gtcontrol.analysis.riccati import is_riccati, riccati_form
from gtcontrol.errors import InvalidParametersError
from gtcontrol.plotting.analysis import plot_cone, plot_covariance_eigenvalues


def _g(cov: np.ndarray, mean: np.ndarray | None = None) -> Gaussian:
    cov = np.atleast_2d(np.asarray(cov, dtype=float))
    return Gaussian(np.zeros(cov.shape[0]) if mean is None else mean, cov)


def _match(x: np.ndarray, y: np.ndarray) -> float:
    """Largest distance after optimally pairing two spectra."""
    c = np.abs(x[:, None] - y[None, :])
    r, k = linear_sum_assignment(c)
    return float(c[r, k].max())


def _known_general_equilibrium(rng: np.random.Generator, d: int) -> tuple[Layer, np.ndarray]:
    """A non-Riccati layer with a stable positive-definite equilibrium Σ* known by construction.

    With V = −P (P ≻ 0, not a multiple of I), B = P Σ*⁻¹ and A = P Σ* P Σ*⁻¹ one gets
    M* = A + VΣ*B = 0, so F(Σ*) = 0, and DF(Σ*)[H] = −2 P H P (eigenvalues −2 p_i p_j < 0).
    """
    s = random_spd(rng, d, 0.5, 2.0)
    p = random_spd(rng, d, 0.4, 1.5)
    si = np.linalg.inv(s)
    return Layer(A=p @ s @ p @ si, B=p @ si, V=-p), s


# --------------------------------------------------------------------------- the Fréchet derivative


def test_covariance_jacobian_matches_finite_differences():
    rng = np.random.default_rng(0)
    d = 3
    lay = Layer(
        A=rng.standard_normal((d, d)),
        heads=[(rng.standard_normal((d, d)), rng.standard_normal((d, d))) for _ in range(2)],
    )
    s = random_spd(rng, d)
    jac = covariance_jacobian(lay, s)
    iu = np.triu_indices(d)
    eps = 1e-6
    for k, (i, j) in enumerate(zip(*iu)):
        h = np.zeros((d, d))
        h[i, j] = h[j, i] = 1.0
        fp = moment_field(lay, np.zeros(d), s + eps * h)[1]
        fm = moment_field(lay, np.zeros(d), s - eps * h)[1]
        col = ((fp - fm) / (2 * eps))[iu]
        # F is quadratic: central differences are exact up to rounding (~1e-16/eps).
        np.testing.assert_allclose(jac[:, k], col, rtol=0, atol=1e-8 * np.abs(jac).max())


# --------------------------------------------------------------------------- equilibria


def test_scalar_equilibrium_and_its_stability():
    # σ* = −a/c; DF(σ*) = 2a + 4cσ* = −2a: stable iff a > 0 (docs/theory.md §2–3).
    for a, v, b in ((1.0, -1.0, 2.0), (-1.0, 1.0, 2.0)):
        c = v * b
        res = equilibria(Layer(A=[[a]], B=[[b]], V=v))
        assert res.status is Status.SUCCESS and len(res) == 1 and res.proved
        eq = res[0]
        assert eq.cov[0, 0] == pytest.approx(-a / c, rel=1e-14)
        assert eq.spectral_abscissa == pytest.approx(-2 * a, rel=1e-14)
        assert eq.stable == (a > 0)
        assert eq.residual <= 1e-15


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_three_ways_agree(sign):
    # sb02md (CARE, G = R) vs sb03md (Lyapunov for Ω) vs Newton-Kantorovich.
    rng = np.random.default_rng(1)
    d = 5
    a = 0.3 * rng.standard_normal((d, d)) + sign * 1.5 * np.eye(d)
    lay = Layer(A=a, B=random_spd(rng, d, 0.2, 1.0), V=-sign * 0.8)
    by_lyap = equilibria(lay, method="lyapunov", cross_check=True)
    by_care = equilibria(lay, method="care")
    by_newton = equilibria(lay, method="newton")
    assert by_lyap.status is Status.SUCCESS
    assert by_lyap.stats["cross_check"]["rel_diff"] <= 1e-12
    covs = []
    for res in (by_lyap, by_care, by_newton):
        assert res.status is Status.SUCCESS and len(res) == 1
        assert res[0].residual <= 1e-10
        covs.append(np.asarray(res[0].cov))
        assert res[0].stable == (sign > 0)  # stable iff −A Hurwitz
    for c in covs[1:]:
        # cond(Σ*) ≈ 10 here; three different solvers agree to a few ulps × condition.
        assert np.linalg.norm(c - covs[0]) <= 1e-11 * np.linalg.norm(covs[0])
    # Closed-form spectrum −(λ_i + λ_j) vs the dense Kronecker Jacobian.
    jac = np.linalg.eigvals(covariance_jacobian(lay, covs[0]))
    assert _match(by_lyap[0].spectrum, jac) <= 1e-10 * np.abs(jac).max()
    assert _match(by_newton[0].spectrum, jac) <= 1e-10 * np.abs(jac).max()


def test_general_v_newton_finds_the_constructed_equilibrium():
    rng = np.random.default_rng(2)
    lay, s = _known_general_equilibrium(rng, 4)
    assert not is_riccati(lay)
    res = equilibria(lay)
    assert res.status is Status.SUCCESS and res.method == "newton" and not res.proved
    stable = res.stable
    assert len(stable) == 1
    eq = stable[0]
    assert np.linalg.norm(eq.cov - s) <= 1e-12 * np.linalg.norm(s)
    assert eq.residual <= 1e-12
    p_eigs = np.linalg.eigvalsh(-lay.heads[0][0])
    expected = np.array([-2 * p_eigs[i] * p_eigs[j] for i, j in zip(*np.triu_indices(4))])
    assert _match(eq.spectrum, expected) <= 1e-10


@pytest.mark.parametrize("kron_max_dim", [16, 2])
def test_newton_converges_quadratically(kron_max_dim):
    # Kronecker solves (d ≤ kron_max_dim) and preconditioned GMRES (beyond) both converge
    # quadratically: r_{k+1} ≤ C r_k² on the final steps.
    rng = np.random.default_rng(3)
    lay, s = _known_general_equilibrium(rng, 6)
    res = newton_equilibrium(lay, 0.6 * s, newton=NewtonSettings(kron_max_dim=kron_max_dim))
    assert res.success and res.residuals[-1] <= 1e-12
    assert res.stats["linear_solver"] == ("kronecker" if kron_max_dim >= 6 else "gmres")
    r = np.array(res.residuals)
    tail = [(r[k], r[k + 1]) for k in range(len(r) - 1) if 1e-14 < r[k + 1] and r[k] < 1e-2]
    assert len(tail) >= 2
    for prev, nxt in tail:
        assert nxt <= 10 * prev**2  # quadratic, with a modest constant
        assert math.log(nxt) / math.log(prev) >= 1.7
    assert np.linalg.norm(res.cov - s) <= 1e-11 * np.linalg.norm(s)


def test_deflation_collects_distinct_positive_definite_equilibria():
    # Noise makes F(σ) = 2aσ + 2cσ² + g² have two positive roots per coordinate (a < 0 < c),
    # so there are 4 diagonal positive-definite equilibria, exactly one of them stable (both
    # lower roots). The layer is also symmetric under Σ ↦ DΣD, D = diag(1, −1), which pairs up
    # the non-diagonal equilibria that a wider search finds.
    a = np.array([-1.0, -1.5])
    c = np.array([1.0, 0.8])
    g = np.array([0.6, 0.7])
    v = np.array([1.0, 2.0])
    lay = Layer(A=np.diag(a), B=np.diag(c / v), V=np.diag(v), noise=np.diag(g))
    assert not is_riccati(lay)
    roots = []
    for ai, ci, gi in zip(a, c, g):
        disc = math.sqrt(4 * ai * ai - 8 * ci * gi * gi)
        roots.append(sorted([(-2 * ai - disc) / (4 * ci), (-2 * ai + disc) / (4 * ci)]))
    mirror = np.diag([1.0, -1.0])
    res = equilibria(lay)
    assert res.status is Status.SUCCESS
    for r0 in roots[0]:
        for r1 in roots[1]:
            e = np.diag([r0, r1])
            dists = [np.linalg.norm(eq.cov - e) / np.linalg.norm(e) for eq in res]
            k = int(np.argmin(dists))
            assert dists[k] <= 1e-12
            assert res[k].stable == (r0 == roots[0][0] and r1 == roots[1][0])
    wide = equilibria(lay, n_random=20, seed=1)
    assert len(wide) == 6 and len(wide.stable) == 1
    for eq in wide:
        assert eq.residual <= 1e-12
        assert all(
            np.linalg.norm(eq.cov - other.cov) > 1e-6 * np.linalg.norm(eq.cov)
            for other in wide
            if other is not eq
        )
        m = mirror @ eq.cov @ mirror
        assert min(np.linalg.norm(m - o.cov) for o in wide) <= 1e-10 * np.linalg.norm(m)


def test_equilibria_ill_posed_and_options():
    rot = Layer(A=np.array([[0.0, 1.0], [-1.0, 0.0]]), B=np.eye(2), V=-1.0)
    res = equilibria(rot)
    assert res.status is Status.FAILED and res.degenerate and not res.success and len(res) == 0
    assert "imaginary axis" in res.message
    none = equilibria(Layer(A=-np.eye(2), B=np.eye(2), V=-1.0))
    assert none.status is Status.INFEASIBLE and none.success and none.proved and len(none) == 0
    assert isinstance(none, EquilibriaResult) and list(none) == []
    with pytest.raises(InvalidParametersError, match="method"):
        equilibria(rot, method="magic")
    with pytest.raises(InvalidParametersError, match="Riccati class"):
        equilibria(Layer(A=np.eye(2), B=np.eye(2), V=np.diag([1.0, 2.0])), method="lyapunov")
    with pytest.raises(InvalidParametersError, match="tol"):
        NewtonSettings(tol=2.0)
    with pytest.raises(InvalidParametersError, match="newton: expected a NewtonSettings"):
        equilibria(rot, newton={"tol": 1e-8})
    with pytest.raises(InvalidParametersError, match="n_random"):
        equilibria(rot, n_random=-1)
    eq = equilibrium_at(Layer(A=[[1.0]], B=[[1.0]], V=-1.0), [[1.0]])
    assert eq.residual <= 1e-16 and eq.stable


# --------------------------------------------------------------------------- the regime table


@dataclass
class Case:
    id: str
    layer: Layer
    cov0: np.ndarray
    kind: str
    t_confirm: float  # depth for the simulate confirmation
    t_star: float = math.inf  # closed-form blow-up time
    limit: np.ndarray | None = None  # closed-form limit covariance


def _table() -> list[Case]:
    rng = np.random.default_rng(42)
    cases: list[Case] = []

    def scalar(a: float, c: float, s0: float) -> float:
        arg = 1 + a / (c * s0)
        return math.log(arg) / (2 * a)

    # d = 1, σ' = 2aσ + 2cσ² with c = vB (docs/theory.md §2–3)
    cases.append(
        Case(
            "d1-stable-sigma*",
            Layer(A=[[1.0]], B=[[1.0]], V=-1.0, b=[0.5]),
            np.array([[0.2]]),
            "converges",
            20.0,
            limit=np.array([[1.0]]),
        )
    )
    cases.append(
        Case(
            "d1-blowup-a>0",
            Layer(A=[[1.0]], B=[[0.5]], V=1.0),
            np.array([[0.3]]),
            "blowup",
            0.0,
            t_star=scalar(1.0, 0.5, 0.3),
        )
    )
    cases.append(
        Case(
            "d1-below-unstable",
            Layer(A=[[-1.0]], B=[[1.0]], V=1.0),
            np.array([[0.5]]),
            "collapses",
            20.0,
            limit=np.zeros((1, 1)),
        )
    )
    cases.append(
        Case(
            "d1-above-unstable",
            Layer(A=[[-1.0]], B=[[1.0]], V=1.0),
            np.array([[2.0]]),
            "blowup",
            0.0,
            t_star=math.log(2.0) / 2,
        )
    )
    cases.append(Case("d1-no-attention", Layer(A=[[0.5]]), np.array([[1.0]]), "unbounded", 30.0))
    # d = 2
    cases.append(
        Case(
            "d2-rotation",
            Layer(A=[[0.0, 1.0], [-1.0, 0.0]]),
            np.diag([2.0, 0.5]),
            "bounded",
            2 * math.pi,
        )
    )
    b2 = np.array([[0.5, 0.1], [0.1, 0.3]])
    s2 = np.array([[1.0, 0.3], [0.3, 0.5]])
    lay = Layer(B=b2, V=1.0, dim=2)
    r2 = -(b2 + b2.T)
    w, u = np.linalg.eigh(s2)
    half = (u * np.sqrt(w)) @ u.T
    cases.append(
        Case(
            "d2-A0-same-sign",
            lay,
            s2,
            "blowup",
            0.0,
            t_star=1.0 / np.linalg.eigvalsh(half @ (-r2) @ half)[-1],
        )
    )
    cases.append(
        Case(
            "d2-omega*-singular",
            Layer(A=np.eye(2), B=np.diag([1.0, 0.0]), V=-1.0),
            np.eye(2),
            "unbounded",
            15.0,
        )
    )
    cases.append(
        Case(
            "d2-hurwitz-below-sigma*",
            Layer(A=-np.eye(2), B=np.eye(2), V=1.0),
            0.5 * np.eye(2),
            "collapses",
            20.0,
            limit=np.zeros((2, 2)),
        )
    )
    # d = 3: the docs/theory.md §3–5 recipe, A = aI + SΣ*⁻¹, R = 2aΩ*, B = R/(−2v): converges to Σ*
    d = 3
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    sig = (q * np.array([0.5, 1.0, 2.0])) @ q.T
    om = np.linalg.inv(sig)
    sk = rng.standard_normal((d, d))
    sk = sk - sk.T
    a3 = 0.7 * np.eye(d) + sk @ om
    r3 = a3.T @ om + om @ a3
    cases.append(
        Case(
            "d3-design-recipe",
            Layer(A=a3, B=r3 / 2.0, V=-1.0, b=[1.0, 0.0, -1.0]),
            0.3 * np.eye(d),
            "converges",
            40.0,
            limit=sig,
        )
    )
    cases.append(
        Case(
            "d3-hurwitz-opposite-sign",
            Layer(
                A=-np.eye(3) + 0.3 * np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 0.0]]),
                B=np.eye(3),
                V=-1.0,
            ),
            np.eye(3),
            "collapses",
            25.0,
            limit=np.zeros((3, 3)),
        )
    )
    cases.append(
        Case(
            "d3-rotation-plus-decay",
            Layer(A=np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])),
            np.diag([1.0, 2.0, 3.0]),
            "collapses",
            25.0,
        )
    )
    # d = 4
    cases.append(
        Case(
            "d4-A0-opposite-sign",
            Layer(B=np.diag([1.0, 2.0, 3.0, 4.0]), V=-0.5, dim=4),
            np.eye(4),
            "collapses",
            1e4,
            limit=np.zeros((4, 4)),
        )
    )
    ad = np.array([1.0, 2.0, 0.5, 1.5])
    pd_ = np.array([1.0, 0.5, 1.0, 2.0])
    qd = np.array([1.0, 1.0, 2.0, 0.5])
    cases.append(
        Case(
            "d4-diagonal-general-V",
            Layer(A=np.diag(ad), B=np.diag(qd), V=-np.diag(pd_)),
            0.5 * np.eye(4),
            "converges",
            40.0,
            limit=np.diag(ad / (pd_ * qd)),
        )
    )
    f = rng.standard_normal((4, 2))
    cases.append(
        Case(
            "d4-rank2-same-sign",
            Layer(A=0.2 * rng.standard_normal((4, 4)), B=np.eye(4), V=1.0),
            f @ f.T,
            "blowup",
            0.0,
        )
    )
    # d = 5
    a5 = np.array([0.1, -0.2, 0.3, 0.0, 0.2])
    p5 = np.array([1.0, 0.5, 1.0, 2.0, 0.3])
    q5 = np.array([1.0, 1.0, 2.0, 0.5, 1.0])
    t5 = min(
        scalar(ai, pi * qi, 0.5) if ai != 0 else 1 / (2 * pi * qi * 0.5)
        for ai, pi, qi in zip(a5, p5, q5)
    )
    cases.append(
        Case(
            "d5-diagonal-general-V-blowup",
            Layer(A=np.diag(a5), B=np.diag(q5), V=np.diag(p5)),
            0.5 * np.eye(5),
            "blowup",
            0.0,
            t_star=t5,
        )
    )
    lay5, s5 = _known_general_equilibrium(rng, 5)
    cases.append(Case("d5-general-V-constructed", lay5, 0.8 * s5, "converges", 60.0, limit=s5))
    # d = 6: growth along the modes the attention does not see
    cases.append(
        Case(
            "d6-mixed-unbounded",
            Layer(
                A=np.diag([1.0, -1.0, 0.5, -0.5, -1.0, -2.0]),
                B=np.diag([0.0, 1.0, 0.0, 1.0, 1.0, 1.0]),
                V=-1.0,
            ),
            0.5 * np.eye(6),
            "unbounded",
            30.0,
        )
    )
    return cases


TABLE = _table()


def test_table_covers_every_kind_and_dimension():
    assert len(TABLE) >= 12
    assert {c.kind for c in TABLE} == {"converges", "collapses", "blowup", "unbounded", "bounded"}
    assert {c.layer.dim for c in TABLE} == {1, 2, 3, 4, 5, 6}


def _eigs(c: np.ndarray) -> np.ndarray:
    return np.linalg.eigvalsh(c)[::-1]


@pytest.mark.parametrize("case", TABLE, ids=[c.id for c in TABLE])
def test_regime_table(case: Case):
    g0 = _g(case.cov0)
    reg = analyze(case.layer, g0)
    assert reg.kind == case.kind, reg.message
    assert reg.message and reg.success
    assert reg.status is (Status.BLOWUP if case.kind == "blowup" else Status.SUCCESS)
    rank = g0.rank
    if case.kind == "blowup":
        t_star = reg.blowup_time
        if math.isfinite(case.t_star):
            assert t_star == pytest.approx(case.t_star, rel=1e-10)
        traj = simulate(case.layer, g0, 1.5 * t_star, n_points=3)
        assert traj.status == "blowup"
        assert traj.blowup_time == pytest.approx(t_star, rel=1e-7)
        return
    if case.limit is not None:
        assert reg.limit_cov is not None
        scale = max(np.linalg.norm(case.limit), 1.0)
        assert np.linalg.norm(reg.limit_cov - case.limit) <= 1e-9 * scale
    traj = simulate(case.layer, g0, case.t_confirm, n_points=201)
    assert traj.status == "success"
    lam0, lam_mid, lam_end = _eigs(traj.cov[0]), _eigs(traj.cov[100]), _eigs(traj.cov[-1])
    if case.kind == "converges":
        limit = reg.limit_cov
        assert np.linalg.norm(traj.cov[-1] - limit) <= 1e-6 * np.linalg.norm(limit)
        assert np.linalg.matrix_rank(limit) == rank
    elif case.kind == "collapses":
        # bounded, and the rank-r part degenerates (λ_r/λ_1 falls)
        assert lam_end[0] <= 10 * max(np.abs(traj.cov).max(axis=(1, 2)).max(), 1.0)
        ratio_mid = lam_mid[rank - 1] / lam_mid[0] if lam_mid[0] > 0 else 0
        ratio_end = lam_end[rank - 1] / lam_end[0] if lam_end[0] > 0 else 0
        assert lam_end[0] < 1e-3 * lam0[0] or ratio_end < 1e-3 * max(ratio_mid, 1e-300)
        if case.id == "d4-A0-opposite-sign":
            # Exact algebraic collapse Σ(t) = (Ω0 + tR)⁻¹ (docs/theory.md §2–3 with A = 0).
            r = riccati_form(case.layer).R
            exact = np.linalg.inv(np.linalg.inv(case.cov0) + case.t_confirm * r)
            assert np.linalg.norm(traj.cov[-1] - exact) <= 1e-8 * np.linalg.norm(exact)
    elif case.kind == "unbounded":
        assert lam_end[0] >= 1e6 * lam0[0]
        assert lam_end[0] > lam_mid[0] > lam0[0]
    elif case.kind == "bounded":
        # The rotation returns Σ0 after one period and is far from it at half a period.
        assert np.linalg.norm(traj.cov[-1] - traj.cov[0]) <= 1e-8 * np.linalg.norm(traj.cov[0])
        assert np.linalg.norm(traj.cov[50] - traj.cov[0]) >= 0.1 * np.linalg.norm(traj.cov[0])
        assert lam_end[rank - 1] >= 0.5 * lam0[rank - 1]


def test_mean_limit_and_state_space_interop():
    case = next(c for c in TABLE if c.id == "d3-design-recipe")
    g0 = _g(case.cov0, mean=np.array([2.0, -1.0, 0.5]))
    reg = analyze(case.layer, g0)
    assert reg.kind == "converges" and reg.certificate == "global"
    assert reg.mean_limit is not None and reg.equilibrium is not None
    k = reg.equilibrium.mean_matrix
    # docs/theory.md §3–5: K = vI + ½(A − Σ*AᵀΣ*⁻¹) has every eigenvalue with real part v = −1.
    np.testing.assert_allclose(np.linalg.eigvals(k).real, -1.0, atol=1e-12)
    sys = mean_dynamics_ss(case.layer, reg.equilibrium)
    assert sys.ninputs == sys.noutputs == sys.nstates == 3
    assert _match(np.asarray(sys.poles()), np.linalg.eigvals(k)) <= 1e-12
    b = np.asarray(case.layer.b)
    np.testing.assert_allclose(np.asarray(sys.dcgain()) @ b, reg.mean_limit, rtol=1e-12, atol=1e-12)
    traj = simulate(case.layer, g0, 60.0, n_points=3)
    np.testing.assert_allclose(traj.mean[-1], reg.mean_limit, rtol=1e-8, atol=1e-10)
    same = mean_dynamics_ss(case.layer, reg)
    np.testing.assert_allclose(same.A, sys.A, rtol=1e-12)
    with pytest.raises(InvalidParametersError, match="no known limit"):
        mean_dynamics_ss(case.layer, analyze(Layer(A=[[0.5]]), _g(np.eye(1))))


def test_mean_matrix_formula_multi_head():
    rng = np.random.default_rng(9)
    d = 3
    heads = [(rng.standard_normal((d, d)), rng.standard_normal((d, d))) for _ in range(2)]
    a = rng.standard_normal((d, d))
    s = random_spd(rng, d)
    k = mean_matrix(Layer(A=a, heads=heads), s)
    expected = a + sum(v @ (np.eye(d) + s @ b) for v, b in heads)
    np.testing.assert_allclose(k, expected, rtol=1e-13, atol=1e-13)
    with pytest.raises(InvalidParametersError, match="cov"):
        mean_matrix(Layer(A=a, heads=heads), np.eye(2))


def test_headline_conditions_with_their_spectral_conditions():
    d = 2
    b = np.array([[1.0, 0.2], [0.2, 0.6]])  # B + Bᵀ ≻ 0
    s0 = np.array([[0.4, 0.1], [0.1, 0.3]])
    rot = np.array([[0.0, 0.4], [-0.4, 0.0]])
    # Opposite sign (v < 0 ⇒ R ≻ 0): converges iff every eigenvalue of A has Re > 0 …
    reg = analyze(Layer(A=np.eye(d) + rot, B=b, V=-1.0), _g(s0))
    assert reg.kind == "converges" and reg.certificate == "global" and "opposite" in reg.message
    # … and collapses as soon as one eigenvalue has Re ≤ 0.
    for a in (-np.eye(d) + rot, np.diag([1.0, -0.5]), np.zeros((d, d))):
        reg = analyze(Layer(A=a, B=b, V=-1.0, dim=d), _g(s0))
        assert reg.kind == "collapses" and reg.certificate == "exact", reg.message
    # Same sign (v > 0 ⇒ R ≺ 0): Σ0 ≻ 0 blows up whenever A is not Hurwitz …
    for a in (np.zeros((d, d)), rot, np.diag([0.3, -2.0])):
        reg = analyze(Layer(A=a, B=b, V=1.0, dim=d), _g(s0))
        assert reg.kind == "blowup" and "same sign" in reg.message
    # … and, for A Hurwitz, iff Σ0 ⋠ Σ* (the unstable equilibrium).
    lay = Layer(A=-np.eye(d), B=b, V=1.0)
    eq = equilibria(lay)[0]
    assert not eq.stable
    assert analyze(lay, _g(0.9 * np.asarray(eq.cov))).kind == "collapses"
    assert analyze(lay, _g(1.1 * np.asarray(eq.cov))).kind == "blowup"


def test_noisy_layer_goes_through_the_general_path():
    lay = Layer(A=-np.eye(2), B=np.eye(2), V=-1.0, noise=0.5 * np.eye(2))
    reg = analyze(lay, _g(np.eye(2)))
    # dσ/dt = −2σ − 2σ² + 0.25 per coordinate: σ* = (−1 + √1.5)/2
    sig = (-1 + math.sqrt(1.5)) / 2
    assert reg.kind == "converges" and reg.certificate == "linearization"
    np.testing.assert_allclose(reg.limit_cov, sig * np.eye(2), rtol=1e-10)


# --------------------------------------------------------------------------- figure data


def test_regime_figure_data_and_plots(tmp_path):
    lay = Layer(A=np.array([[0.2, 0.5], [-0.5, 0.0]]), B=np.array([[1.0, 0.3], [0.3, 0.5]]), V=1.0)
    g0 = _g(np.array([[0.2, 0.05], [0.05, 0.1]]))
    data = regime_figure_data(lay, g0, n_points=101)
    assert data.regime.kind == "blowup" and data.trajectory.status == "blowup"
    assert data.blowup_time == pytest.approx(data.trajectory.blowup_time, rel=1e-8)
    cone = data.cone
    det = np.linalg.det(data.trajectory.cov)
    np.testing.assert_allclose(
        cone[:, 2] ** 2 - cone[:, 0] ** 2 - cone[:, 1] ** 2,
        4 * det,
        rtol=1e-9,
        atol=1e-12 * np.abs(cone).max() ** 2,
    )
    np.testing.assert_allclose(data.cone_normalized[:, 2], 1.0, rtol=1e-14)
    np.testing.assert_allclose(
        data.eigenvalues[:, 0], np.linalg.eigvalsh(data.trajectory.cov)[:, -1]
    )
    for fn in (plot_covariance_eigenvalues, plot_cone):
        path = tmp_path / f"{fn.__name__}.png"
        fn(data, path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    conv = regime_figure_data(Layer(A=np.eye(2), B=np.eye(2), V=-1.0), g0, n_points=51)
    assert conv.regime.kind == "converges" and conv.equilibrium_cone is not None
    plot_cone(conv, tmp_path / "conv.png")
    three = regime_figure_data(Layer(A=np.eye(3), B=np.eye(3), V=-1.0), _g(np.eye(3)), n_points=11)
    assert three.cone is None
    with pytest.raises(InvalidParametersError, match="2-dimensional"):
        plot_cone(three, tmp_path / "x.png")
    with pytest.raises(InvalidParametersError, match="2×2"):
        cone_coordinates(np.eye(3))


# --------------------------------------------------------------------------- result protocol


def test_result_protocol_of_equilibria_newton_and_regimes():
    rng = np.random.default_rng(11)
    lay, s = _known_general_equilibrium(rng, 3)
    res = equilibria(lay, method="newton")
    newton = newton_equilibrium(lay, 0.8 * s)
    reg = analyze(lay, _g(0.8 * s))
    for r in (res, newton, reg):
        assert isinstance(r, Result)
        assert r.success and r.status is Status.SUCCESS and r.message
        assert "seconds" in r.stats
    assert newton.stats["termination"] == "converged"
    assert "outcomes" in res.stats and res.stats["starts"] >= 3
    # max_iter is a budget, not an error: the best iterate comes back.
    capped = newton_equilibrium(lay, 0.2 * s, newton=NewtonSettings(max_iter=1))
    assert capped.status is Status.BUDGET_EXHAUSTED and not capped.success
    assert capped.stats["termination"] == "max_iter"
    assert capped.iterations == 1 and np.all(np.isfinite(capped.cov))
    blow = analyze(Layer(A=[[1.0]], B=[[0.5]], V=1.0), _g(np.array([[0.3]])))
    assert blow.status is Status.BLOWUP and blow.success and blow.kind == "blowup"


def test_removed_aliases_are_gone():
    rng = np.random.default_rng(12)
    lay, s = _known_general_equilibrium(rng, 3)
    gmres = newton_equilibrium(lay, 0.6 * s, newton=NewtonSettings(kron_max_dim=2))
    assert gmres.stats["linear_solver"] == "gmres"
    for func, kw in (
        (equilibria, "options"),
        (newton_equilibrium, "options"),
        (analyze, "horizon"),
    ):
        assert kw not in inspect.signature(func).parameters
    reg = analyze(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), _g(np.array([[0.2]])), T=10.0)
    assert reg.kind == "converges" and not hasattr(reg, "reason")
    with pytest.raises(TypeError):
        equilibria(lay, "newton")  # type: ignore[misc]


def test_time_limit_returns_budget_exhausted_quickly():
    import time

    rng = np.random.default_rng(13)
    lay, s = _known_general_equilibrium(rng, 4)
    t0 = time.perf_counter()
    res = equilibria(lay, n_random=50, time_limit=1e-3)
    assert time.perf_counter() - t0 < 2.0
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success
    assert "time limit" in res.message
    # A per-start limit abandons slow starts but keeps searching.
    per = equilibria(lay, start_time_limit=1e-6)
    assert per.status in (Status.SUCCESS, Status.NOT_FOUND)
    assert per.stats["outcomes"].get("time_limit", 0) >= 1
    t0 = time.perf_counter()
    nr = newton_equilibrium(lay, 0.2 * s, time_limit=1e-6)
    assert nr.status is Status.BUDGET_EXHAUSTED and nr.stats["termination"] == "time_limit"
    assert np.all(np.isfinite(nr.cov))
    t0 = time.perf_counter()
    reg = analyze(lay, _g(0.8 * s), time_limit=1e-3)
    assert time.perf_counter() - t0 < 2.0
    assert reg.status is Status.BUDGET_EXHAUSTED and not reg.success
    assert reg.certificate == "none" and reg.kind in ("converges", "bounded")
    with pytest.raises(InvalidParametersError, match="time_limit"):
        equilibria(lay, time_limit=-1.0)
