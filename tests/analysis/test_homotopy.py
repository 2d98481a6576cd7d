"""The complete equilibrium search at small d: total-degree homotopy continuation.

Independent evidence: the Riccati-class closed form (slycot Lyapunov route, 2^d finite roots),
planted equilibria, and two complete searches written here, apart from gtcontrol's code:

* an exhaustive multistart (scipy.optimize.root on the full-matrix equations from log-uniformly
  sized starts, then Newton to 1e-14; distinct roots kept);
* a second total-degree homotopy: another start system (``x_k² = c_k x_0²`` with random complex
  ``c_k``), another chart, and the Davidenko ODE ``[H_z; p] ż = −[H_t; 0]`` integrated by an
  explicit Dormand–Prince 5(4) in ``s = −log(1 − t)`` with a step per path (no corrector, no end
  game: a different tracker), every endpoint finished by complex Newton at ``t = 1``.

The multistart alone cannot be exhaustive: a positive-definite root can have a Newton basin of
a few per cent of its norm (d = 3, seed 2: ‖Σ*‖ = 460, condition number 2.8e4 of DF), which
random starts in six dimensions do not hit. The second homotopy has no such blind spot.
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


def _sym_basis(d: int) -> np.ndarray:
    iu = np.triu_indices(d)
    basis = np.zeros((iu[0].size, d, d))
    for k, (i, j) in enumerate(zip(*iu)):
        basis[k, i, j] = basis[k, j, i] = 1.0
    return basis


def _independent_homotopy_pd_roots(layer: Layer, seed: int) -> list[np.ndarray]:
    """Every real positive-definite root by a second total-degree homotopy (module docstring).

    ``H(z, t) = (1 − t)γ g(z) + t f(z)`` on ``ℂⁿ⁺¹`` with ``f`` the homogenized equations
    (``z_0 L(Σ) + Q(Σ)``, ``L(Σ) = AΣ + ΣAᵀ``), ``g_k = x_k² − c_k z_0²`` and the chart
    ``p·z = 1``. All ``2ⁿ`` paths are integrated, each with its own step, up to
    ``1 − t = e⁻¹¹``, where a path to a non-singular finite root is within ``O(1 − t)`` of it;
    complex Newton at ``t = 1`` finishes it. Paths to infinity (``z_0 → 0``) and to singular
    endpoints are dropped: a
    positive-definite equilibrium of a generic layer is a regular root.
    """
    a, heads = _mats(layer)
    d = layer.dim
    iu = np.triu_indices(d)
    n = iu[0].size
    basis = _sym_basis(d)
    rng = np.random.default_rng(seed)
    gamma = np.exp(2j * np.pi * rng.uniform())
    c = np.exp(2j * np.pi * rng.uniform(size=n)) * rng.uniform(0.5, 2.0, n)
    chart = rng.standard_normal(n + 1) + 1j * rng.standard_normal(n + 1)
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2.0 - 1.0
    z = np.concatenate([np.ones((2**n, 1)), signs * np.sqrt(c)], axis=1).astype(complex)
    z = z / (z @ chart)[:, None]
    lin_basis = (a @ basis + basis @ a.T)[:, iu[0], iu[1]]  # L(E_k), row k

    def velocity(s: np.ndarray, zz: np.ndarray) -> np.ndarray:
        t = -np.expm1(-s)[:, None]
        z0, x = zz[:, 0], zz[:, 1:]
        m = zz.shape[0]
        sig = np.zeros((m, d, d), complex)
        sig[:, iu[0], iu[1]] = x
        sig[:, iu[1], iu[0]] = x
        lin = (a @ sig + sig @ a.T)[:, iu[0], iu[1]]
        quad = np.zeros((m, d, d), complex)
        dquad = np.zeros((m, n, d, d), complex)
        for v, b in heads:
            vsb = v @ sig @ b
            term = vsb @ sig
            quad += term + np.swapaxes(term, -1, -2)
            dq = (v @ basis)[None] @ (b @ sig)[:, None] + vsb[:, None] @ basis[None]
            dquad += dq + np.swapaxes(dq, -1, -2)
        f = z0[:, None] * lin + quad[:, iu[0], iu[1]]
        g = x**2 - c * z0[:, None] ** 2
        jac = np.zeros((m, n + 1, n + 1), complex)
        jac[:, :n, 0] = t * lin - (1 - t) * gamma * 2 * c * z0[:, None]
        dfx = z0[:, None, None] * lin_basis[None] + dquad[:, :, iu[0], iu[1]]
        jac[:, :n, 1:] = t[:, :, None] * np.swapaxes(dfx, 1, 2)
        jac[:, np.arange(n), np.arange(n) + 1] += (1 - t) * gamma * 2 * x
        jac[:, n, :] = chart
        rhs = np.zeros((m, n + 1, 1), complex)
        rhs[:, :n, 0] = gamma * g - f
        # dz/ds = (1 − t) dz/dt
        return np.asarray((1 - t) * np.linalg.solve(jac, rhs)[..., 0])

    z = _dormand_prince(velocity, z, s_end=11.0)
    found: list[np.ndarray] = []
    for zk in z:
        if abs(zk[0]) < 1e-8 * np.linalg.norm(zk):
            continue  # a path to infinity
        sig = _csym(zk[1:] / zk[0], d)
        for _ in range(30):  # complex Newton on F at t = 1
            m = a + sum(v @ sig @ b for v, b in heads)
            cols = m @ basis + basis @ m.T
            for v, b in heads:
                dq = v @ basis @ (b @ sig)
                cols = cols + dq + np.swapaxes(dq, -1, -2)
            with np.errstate(all="ignore"):
                try:
                    step = np.linalg.solve(cols[:, iu[0], iu[1]].T, -_eq(a, heads, sig)[iu])
                except np.linalg.LinAlgError:
                    break
            sig = sig + _csym(step, d)
            if not np.all(np.isfinite(sig)) or np.linalg.norm(step) <= 1e-15 * np.linalg.norm(sig):
                break
        if not np.all(np.isfinite(sig)) or np.linalg.norm(sig) <= 1e-8:
            continue  # diverged, or the trivial root Σ = 0
        if np.linalg.norm(_eq(a, heads, sig)) > 1e-12 * np.linalg.norm(a @ sig):
            continue  # a singular endpoint that Newton does not finish
        if np.linalg.norm(sig.imag) > 1e-8 * np.linalg.norm(sig.real):
            continue  # complex root
        real = sig.real
        if _pd(real) and all(np.linalg.norm(real - r) > 1e-8 * np.linalg.norm(real) for r in found):
            found.append(real)
    return found


# Dormand–Prince 5(4) tableau (Hairer, Nørsett & Wanner, Solving ODEs I, Table 5.2).
_DP_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
_DP_C = [0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0]
_DP_B = [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0]
_DP_E = [71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40]


def _dormand_prince(f, z: np.ndarray, *, s_end: float, rtol: float = 1e-10) -> np.ndarray:
    """Integrate ``dz/ds = f(s, z)`` for every row of ``z`` from 0 to ``s_end``, each row with
    its own adaptive step (a stiff path near its end does not slow the others)."""
    s = np.zeros(z.shape[0])
    h = np.full(z.shape[0], 1e-3)
    z = z.copy()
    for _ in range(200_000):
        live = np.flatnonzero(s < s_end)
        if live.size == 0:
            return z
        hl = np.minimum(h[live], s_end - s[live])[:, None]
        zl, sl = z[live], s[live]
        k: list[np.ndarray] = []
        for a_row, c in zip(_DP_A, _DP_C):
            zi = zl + hl * sum((aij * kj for aij, kj in zip(a_row, k)), np.zeros_like(zl))
            k.append(f(sl + c * hl[:, 0], zi))
        new = zl + hl * sum(bi * ki for bi, ki in zip(_DP_B, k))
        err = hl * sum(ei * ki for ei, ki in zip(_DP_E, k))
        scale = 1e-12 + rtol * np.maximum(np.abs(zl), np.abs(new))
        ratio = np.sqrt(np.mean(np.abs(err / scale) ** 2, axis=1))
        ok = np.isfinite(ratio) & (ratio <= 1.0)
        z[live[ok]] = new[ok]
        s[live[ok]] += hl[ok, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            fac = np.where(np.isfinite(ratio), 0.9 * np.maximum(ratio, 1e-10) ** -0.2, 0.2)
        h[live] = hl[:, 0] * np.clip(fac, 0.2, 5.0)
        # A path whose step has collapsed is dropped at its current point (singular endpoint).
        s[live[h[live] < 1e-12]] = s_end
    raise AssertionError("the independent tracker did not finish")


def _csym(x: np.ndarray, d: int) -> np.ndarray:
    m = np.zeros((d, d), complex)
    m[np.triu_indices(d)] = x
    return m + np.triu(m, 1).T


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
    [
        (2, 300, 0),
        (2, 300, 1),
        (3, 200, 2),  # the layer whose PD root of norm 460 the multistart misses
        *(pytest.param(3, 200, s, marks=pytest.mark.slow) for s in range(3, 13)),
        *(pytest.param(4, 200, s, marks=pytest.mark.slow) for s in range(4, 7)),
    ],
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
        # d = 4 with a dense B: 1–4 of the 1,024 paths end neither at a regular root nor
        # provably at infinity, so the run is (honestly) not complete; its roots must still agree.
        assert hom.complete or d == 4, hom.summary()
        assert max(hom.residuals) <= 1e-13  # refined by Newton to round-off
        real = list(hom.real_roots)
        a, heads = _mats(layer)
        pd = [real[k] for k in hom.pd]
        for s in pd:  # every positive-definite root is one by the formula written here
            assert _pd(s)
            assert np.linalg.norm(_eq(a, heads, s)) <= 1e-12 * np.linalg.norm(a @ s)
        # The count equals that of the independent homotopy, root for root ...
        assert _same_sets(_independent_homotopy_pd_roots(layer, seed + 100), pd)
        # ... and every real root the multistart finds is among the homotopy's.
        ref = _exhaustive_real_roots(layer, n_starts, seed)
        assert all(
            any(np.linalg.norm(r - h) <= 1e-8 * max(np.linalg.norm(r), 1.0) for h in real)
            for r in ref
        )
        if d == 2:
            assert _same_sets([r for r in ref if _pd(r)], pd)


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
