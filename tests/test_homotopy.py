"""The complete equilibrium search at small d: total-degree homotopy continuation.

Independent evidence: the Riccati-class closed form (slycot Lyapunov route, 2^d finite roots),
planted equilibria, and an exhaustive multistart written here (scipy.optimize.root on the
full-matrix equations, then Newton to 1e-14 and deflation of every root found).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as sopt
from helpers import planted_layer

import gtcontrol as gt
from gtcontrol import Layer, Status
from gtcontrol._status import Budget
from gtcontrol.analysis._homotopy import homotopy_roots


def _planted(rng: np.random.Generator, d: int) -> tuple[Layer, np.ndarray]:
    """Issue 21's recipe: ``A = (−Q(S)/2 + K)S⁻¹`` makes S ≻ 0 an equilibrium exactly."""
    return planted_layer(rng, d)


# --------------------------------------------------------------------------- independent check


def _mats(layer: Layer) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    a, _ = layer.affine_ffn()
    return np.asarray(a), [(np.asarray(v), np.asarray(b)) for v, b in layer.heads]


def _sym(x: np.ndarray, d: int) -> np.ndarray:
    m = np.zeros((d, d))
    m[np.triu_indices(d)] = x
    return m + np.triu(m, 1).T


def _eq(a, heads, s):  # F(Σ) written out, independent of gtcontrol's field
    out = a @ s + s @ a.T
    for v, b in heads:
        out = out + v @ s @ b @ s + s @ b.T @ s @ v.T
    return out


def _eq_jac(a, heads, s, d):
    iu = np.triu_indices(d)
    cols = []
    for i, j in zip(*iu):
        h = np.zeros((d, d))
        h[i, j] = h[j, i] = 1.0
        m = a.copy()
        for v, b in heads:
            m = m + v @ s @ b
        dh = m @ h + h @ m.T
        for v, b in heads:
            dh = dh + v @ h @ b @ s + s @ b.T @ h @ v.T
        cols.append(dh[iu])
    return np.array(cols).T


def _exhaustive_real_roots(layer: Layer, n_starts: int, seed: int) -> list[np.ndarray]:
    """Dense multistart: MINPACK hybrd from log-uniformly sized random starts, Newton to 1e-14,
    distinct roots kept."""
    a, heads = _mats(layer)
    d = layer.dim
    iu = np.triu_indices(d)
    scale = np.linalg.norm(a, 2) / sum(
        np.linalg.norm(v, 2) * np.linalg.norm(b, 2) for v, b in heads
    )
    rng = np.random.default_rng(seed)
    roots: list[np.ndarray] = [np.zeros((d, d))]
    for k in range(n_starts):
        w = rng.standard_normal((d, d))
        # Log-uniform sizes over e^-2 … e^7 times the scale: real roots can be large.
        x0 = (w @ w.T if k % 2 else w + w.T) * scale * np.exp(rng.uniform(-2.0, 7.0))
        with np.errstate(all="ignore"):
            sol = sopt.root(
                lambda x: _eq(a, heads, _sym(x, d))[iu],
                x0[iu],
                jac=lambda x: _eq_jac(a, heads, _sym(x, d), d),
                method="hybr",
                options={"xtol": 1e-13, "maxfev": 300},
            )
        s = _sym(sol.x, d)
        if not np.all(np.isfinite(s)) or np.linalg.norm(s) > 1e6 * scale:
            continue
        for _ in range(4):  # Newton polish (the analytic Jacobian written above)
            try:
                step = np.linalg.solve(_eq_jac(a, heads, s, d), -_eq(a, heads, s)[iu])
            except np.linalg.LinAlgError:
                break
            s = s + _sym(step, d)
        res = np.linalg.norm(_eq(a, heads, s)) / max(np.linalg.norm(a @ s), 1e-300)
        if not res <= 1e-12:
            continue
        if all(np.linalg.norm(s - r) > 1e-8 * max(np.linalg.norm(s), 1e-12) for r in roots):
            roots.append(s)
    return roots


def _pd(s: np.ndarray) -> bool:
    w = np.linalg.eigvalsh(s)
    return bool(w[-1] > 0 and w[0] > 1e-9 * w[-1])


def _same_sets(xs: list[np.ndarray], ys: list[np.ndarray]) -> bool:
    def inside(x, zs):
        return any(np.linalg.norm(x - z) <= 1e-8 * max(np.linalg.norm(x), 1.0) for z in zs)

    return all(inside(x, ys) for x in xs) and all(inside(y, xs) for y in ys)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("d", [2, 3])
def test_riccati_class_has_2_to_the_d_finite_roots_and_the_lyapunov_one(d: int) -> None:
    # AΣ + ΣAᵀ − ΣRΣ = 0: one symmetric root per Lagrangian invariant subspace of the
    # Hamiltonian, 2^d for distinct eigenvalues; the positive-definite one is Ω⁻¹ (SB03MD).
    rng = np.random.default_rng(d)
    for a in (np.eye(d) + 0.4 * rng.standard_normal((d, d)), 0.5 * rng.standard_normal((d, d))):
        layer = Layer(A=a, B=np.eye(d) + 0.2 * rng.standard_normal((d, d)), V=-1.0)
        hom = homotopy_roots(layer, Budget(None))
        assert hom.complete and hom.failed == 0 and hom.jumped == 0
        assert hom.finite == 2**d and hom.paths == 2 ** (d * (d + 1) // 2)
        assert hom.finite + hom.at_infinity + hom.singular == hom.paths
        assert max(hom.residuals) <= 1e-13
        ref = gt.equilibria(layer, method="lyapunov")
        pd = [hom.real_roots[k] for k in hom.pd]
        assert len(pd) == len(ref)
        for eq in ref:
            assert min(np.linalg.norm(p - eq.cov) for p in pd) <= 1e-12 * np.linalg.norm(eq.cov)


@pytest.mark.parametrize(
    ("d", "n_starts", "seed"),
    [(2, 300, 0), (2, 300, 1), pytest.param(3, 2000, 2, marks=pytest.mark.slow)],
)
def test_homotopy_count_equals_an_exhaustive_independent_search(
    d: int, n_starts: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    for layer in (
        _planted(rng, d)[0],
        Layer(rng.standard_normal((d, d)), heads=[(rng.standard_normal((d, d)), np.eye(d))]),
    ):
        hom = homotopy_roots(layer, Budget(None), seed=seed)
        assert hom.complete, hom.summary()
        assert max(hom.residuals) <= 1e-13  # refined by Newton to round-off
        ref = _exhaustive_real_roots(layer, n_starts, seed)
        real = list(hom.real_roots)
        # Every real root the multistart found is among the homotopy's ...
        assert all(
            any(np.linalg.norm(r - h) <= 1e-8 * max(np.linalg.norm(r), 1.0) for h in real)
            for r in ref
        )
        # ... and every positive-definite root of the homotopy is one by the formula above.
        a, heads = _mats(layer)
        pd = [real[k] for k in hom.pd]
        for s in pd:
            assert _pd(s)
            assert np.linalg.norm(_eq(a, heads, s)) <= 1e-12 * np.linalg.norm(a @ s)
        ref_pd = [r for r in ref if _pd(r)]
        if d == 2:
            assert _same_sets(ref_pd, pd)  # the count is the same
        else:
            # d = 3: the multistart can miss a large root (seed 2: ‖Σ*‖ = 460, two PD roots
            # against the multistart's one); the homotopy's extra ones are verified above.
            assert len(pd) >= len(ref_pd)


@pytest.mark.parametrize("d", [2, 3])
def test_planted_equilibrium_is_found_and_the_list_is_proved_complete(d: int) -> None:
    rng = np.random.default_rng(10 + d)
    for _ in range(3):
        layer, s = _planted(rng, d)
        res = gt.equilibria(layer)
        assert res.method == "homotopy" and res.proved and res.status is Status.SUCCESS
        assert min(np.linalg.norm(e.cov - s) for e in res) <= 1e-12 * np.linalg.norm(s)
        assert all(e.residual <= 1e-13 for e in res)
        counts = res.stats["homotopy"]
        assert counts["complete"] and counts["paths"] == 2 ** (d * (d + 1) // 2)
        assert f"{counts['paths']} paths" in res.message


@pytest.mark.slow
def test_homotopy_at_d4_finds_the_planted_equilibrium() -> None:
    rng = np.random.default_rng(4)
    layer, s = _planted(rng, 4)
    res = gt.equilibria(layer, method="homotopy")
    assert res.stats["homotopy"]["paths"] == 1024
    assert min(np.linalg.norm(e.cov - s) for e in res) <= 1e-12 * np.linalg.norm(s)
    if res.proved:
        assert res.status is Status.SUCCESS
    riccati = Layer(A=np.eye(4) + 0.3 * rng.standard_normal((4, 4)), B=np.eye(4), V=-1.0)
    hom = homotopy_roots(riccati, Budget(None))
    assert hom.finite == 16 and len(hom.pd) == 1


def test_homotopy_respects_the_budget_and_refuses_large_d() -> None:
    rng = np.random.default_rng(5)
    layer, _ = _planted(rng, 3)
    res = gt.equilibria(layer, method="homotopy", time_limit=1e-3)
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success and not res.proved
    with pytest.raises(gt.InvalidParametersError, match="homotopy"):
        gt.equilibria(_planted(rng, 5)[0], method="homotopy")
