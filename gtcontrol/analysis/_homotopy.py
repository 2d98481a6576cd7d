"""All covariance equilibria of a small layer by polynomial homotopy continuation.

The equilibrium equation ``F(Σ) = AΣ + ΣAᵀ + Σ_h (V_hΣB_hΣ + ΣB_hᵀΣV_hᵀ) [+ GGᵀ] = 0`` is a
system of ``n = d(d+1)/2`` quadratics in the entries of Σ, so it has at most ``2ⁿ`` isolated
complex roots (Bézout). :func:`homotopy_roots` tracks all ``2ⁿ`` paths of the total-degree
homotopy

    H(z, t) = (1 − t) γ G(z) + t E(z),   G_i(z) = x_i² − x_0²,   z = (x_0, x) ∈ Cⁿ⁺¹,

with E the homogenized equations ``Q_i(x) + x_0 L_i x + x_0² c_i`` and a random complex γ (the
"gamma trick": for all but finitely many γ on the unit circle no path meets a singularity for
t < 1), on a random affine chart ``p·z = 1`` of projective space, so paths whose roots lie at
infinity stay bounded (``x_0 → 0``). Paths are tracked in ``s = −log(1 − t)`` by an RK4
predictor and a Newton corrector with per-path adaptive steps, all paths at once (numpy batches).
End game: at ``t = 1 − 10⁻⁶`` each path is polished by Newton on the target system (a
non-singular end point converges quadratically); a path whose Jacobian is singular there is
followed on to ``1 − 10⁻⁸`` and the limit of ``x_0`` is extrapolated from the power-series law
``x_0(ε) = a + b ε^{1/c}`` (Aitken on the samples at ε = 10⁻⁶, 10⁻⁷, 10⁻⁸, whose ratio
``10^{−1/c}`` also gives the cycle number c): ``a ≈ 0`` is a root at infinity, otherwise a
finite singular root.
A path is *accounted for* when it ends at a non-singular finite root, at infinity or at a
finite singular root; two paths reaching the same non-singular root (path jumping) are
re-tracked with smaller steps. The search is complete when every path is accounted for and no
non-singular root is reached twice. Real roots are then refined by Newton in real arithmetic.

Reference: A. J. Sommese, C. W. Wampler, *The Numerical Solution of Systems of Polynomials
Arising in Engineering and Science*, World Scientific (2005), ch. 7–10 (gamma trick, projective
tracking, end games); docs/theory.md §4.4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._linalg import FloatArray, sym, unvech, vech
from .._status import Budget
from ..model.params import Layer
from ._certify import RootBall, certified_root, root_ball
from ._core import is_pd
from ._field_kernel import (
    covariance_field,
    jacobian_matrix,
    jacobian_parts,
    relative_residual,
    typical_scale,
)

__all__ = ["HOMOTOPY_MAX_DIM", "HomotopyRoots", "PolynomialSystem", "homotopy_roots"]

#: Largest d for which the complete search runs by default (2^10 = 1024 paths at d = 4).
HOMOTOPY_MAX_DIM = 4

#: End-game samples: ``t = 1 − ε`` for these ε (the first is where every path is polished).
_EPS = tuple(10.0**-k for k in range(4, 13))

#: Step control in s = −log(1 − t): first step, largest step, smallest step before giving up.
_H0, _HMAX, _HMIN = 0.02, 0.8, 1e-9

#: Largest end-game step in s (a power law e^{−s/c} is smooth in s: half a decade of ε).
_END_HMAX = 1.15

#: Predictor acceptance: first Newton correction relative to ‖z‖, final correction (before the
#: end game; in it, near a singular end point, Newton's attainable accuracy is cond × 1e-16, so
#: the final correction may be up to ``_END_CORR_TOL``).
_PRED_TOL, _CORR_TOL, _END_CORR_TOL = 1e-4, 1e-9, 1e-5

#: A root is real when ‖Im x‖ ≤ this × ‖x‖ after refinement; at infinity when |x_0| ≤ this × ‖z‖.
_REAL_TOL = 1e-8
_INF_TOL = 1e-7

#: Two non-singular roots closer than this (relative) are the same root.
_SAME_TOL = 1e-6

#: Condition number of the target Jacobian above which an end point counts as singular.
_COND_MAX = 1e10

#: Cap on predictor–corrector iterations of one tracking sweep (all paths together).
_MAX_SWEEPS = 4000

ComplexArray = np.ndarray[Any, np.dtype[np.complex128]]


@dataclass(frozen=True)
class HomotopyRoots:
    """What the total-degree homotopy found (see the module docstring).

    ``real_roots`` are the distinct real finite roots Σ (refined to ``residuals``), ``pd`` the
    indices of the positive-definite ones, ``radii`` their Kantorovich radii (``nan``: not
    certified) and ``certified`` whether an exact positive-definite root lies within the radius.
    ``undecided`` counts the finite end points whose reality or definiteness the float data
    cannot decide (:func:`_certify_roots`). ``complete`` holds when every path was accounted for.
    """

    paths: int
    finite: int
    real_roots: tuple[FloatArray, ...]
    residuals: tuple[float, ...]
    pd: tuple[int, ...]
    at_infinity: int
    singular: int
    singular_real_pd: int
    failed: int
    jumped: int
    complete: bool
    seconds: float
    stats: Mapping[str, Any] = field(default_factory=dict)
    radii: tuple[float, ...] = ()
    certified: tuple[bool, ...] = ()
    undecided: int = 0

    def summary(self) -> dict[str, Any]:
        """The counts, for ``stats`` and messages."""
        return {
            "paths": self.paths,
            "finite": self.finite,
            "real": len(self.real_roots),
            "positive_definite": len(self.pd),
            "at_infinity": self.at_infinity,
            "singular": self.singular,
            "failed": self.failed,
            "jumped": self.jumped,
            "complete": self.complete,
            "undecided": self.undecided,
            "seconds": self.seconds,
            **self.stats,
        }


class PolynomialSystem:
    """The scaled, homogenized target ``E(z)`` and the start system, evaluated in batches.

    ``x = vech(Σ)/s`` with ``s`` the layer's typical scale; each equation is divided by its
    largest coefficient. Coefficients come from the one home of the field
    (:func:`~._field_kernel.covariance_field`) by exact polarization of the quadratic:
    ``c = F(0)``, ``L_j = (F(E_j) − F(−E_j))/2``, ``Q_jj = (F(E_j) + F(−E_j))/2 − c``,
    ``2Q_jk = F(E_j + E_k) − F(E_j) − F(E_k) + c``.
    """

    def __init__(self, layer: Layer, gamma: complex, patch: Any) -> None:
        d = layer.dim
        n = d * (d + 1) // 2
        self.d, self.n = d, n
        self.scale = typical_scale(layer)
        s = self.scale
        basis = [unvech(np.eye(n)[j], d) * s for j in range(n)]
        c = vech(covariance_field(layer, np.zeros((d, d))))
        fp = [vech(covariance_field(layer, e)) for e in basis]
        fm = [vech(covariance_field(layer, -e)) for e in basis]
        lin = np.array([(p - m) / 2 for p, m in zip(fp, fm)]).T
        q = np.zeros((n, n, n))
        for j in range(n):
            q[:, j, j] = (fp[j] + fm[j]) / 2 - c
            for k in range(j + 1, n):
                both = vech(covariance_field(layer, basis[j] + basis[k]))
                q[:, j, k] = q[:, k, j] = (both - fp[j] - fp[k] + c) / 2
        row = np.maximum.reduce(
            [np.abs(c), np.max(np.abs(lin), axis=1), np.max(np.abs(q), axis=(1, 2))]
        )
        row = np.where(row > 0, row, 1.0)
        self.c = c / row
        self.lin = lin / row[:, None]
        self.q = q / row[:, None, None]
        self.q_flat = np.ascontiguousarray(self.q.reshape(n * n, n).T)  # (n, n²)
        self.gamma = gamma
        self.patch = patch

    def target(self, z: ComplexArray) -> tuple[ComplexArray, ComplexArray]:
        """``E(z)`` and its Jacobian ``(P, n)``, ``(P, n, n+1)``."""
        p, n = z.shape[0], self.n
        x0, x = z[:, 0], z[:, 1:]
        qx = (x @ self.q_flat).reshape(p, n, n)  # qx[p, i, j] = Σ_k Q_ijk x_k (one GEMM)
        lx = x @ self.lin.T
        e = (qx @ x[:, :, None])[:, :, 0] + x0[:, None] * lx + (x0 * x0)[:, None] * self.c
        jac = np.empty((p, n, n + 1), dtype=complex)
        jac[:, :, 0] = lx + 2.0 * x0[:, None] * self.c
        np.multiply(x0[:, None, None], self.lin, out=jac[:, :, 1:])
        jac[:, :, 1:] += 2.0 * qx
        return e, jac

    def homotopy(
        self, z: ComplexArray, t: FloatArray
    ) -> tuple[ComplexArray, ComplexArray, ComplexArray]:
        """``H(z, t)`` with the chart row, its z-Jacobian ``(P, n+1, n+1)`` and ``∂H/∂t``."""
        e, je = self.target(z)
        x0, x = z[:, 0], z[:, 1:]
        g = x * x - (x0 * x0)[:, None]
        a = (1.0 - t)[:, None] * self.gamma
        tt = t[:, None]
        p, n = z.shape[0], self.n
        h = np.empty((p, n + 1), dtype=complex)
        h[:, :n] = a * g + tt * e
        h[:, n] = z @ self.patch - 1.0
        jac = np.empty((p, n + 1, n + 1), dtype=complex)
        jac[:, :n, :] = tt[:, :, None] * je
        jac[:, :n, 0] -= a * 2.0 * x0[:, None]
        idx = np.arange(n)
        jac[:, idx, idx + 1] += a * 2.0 * x
        jac[:, n, :] = self.patch
        ht = np.zeros((p, n + 1), dtype=complex)
        ht[:, :n] = e - self.gamma * g
        return h, jac, ht


def _solve(jac: ComplexArray, rhs: ComplexArray) -> ComplexArray:
    """Batched ``jac⁻¹ rhs``; a singular system gives NaN for that path only."""
    try:
        out: ComplexArray = np.asarray(np.linalg.solve(jac, rhs[..., None])[..., 0], dtype=complex)
        return out
    except np.linalg.LinAlgError:
        res = np.full(rhs.shape, np.nan, dtype=complex)
        for k in range(jac.shape[0]):
            try:
                res[k] = np.linalg.solve(jac[k], rhs[k])
            except np.linalg.LinAlgError:
                pass
        return res


def _t_of(s: FloatArray) -> FloatArray:
    return -np.expm1(-s)


def _velocity(sys: PolynomialSystem, z: ComplexArray, s: FloatArray) -> ComplexArray:
    """``dz/ds = −e^{−s} (∂H/∂z)⁻¹ ∂H/∂t``."""
    _, jac, ht = sys.homotopy(z, _t_of(s))
    return -np.exp(-s)[:, None] * _solve(jac, ht)


def _correct(
    sys: PolynomialSystem, z: ComplexArray, t: FloatArray, iters: int = 3
) -> tuple[ComplexArray, FloatArray, FloatArray]:
    """Newton on ``H(·, t) = 0``: the corrected points, first and last relative corrections."""
    first = np.zeros(z.shape[0])
    last = np.zeros(z.shape[0])
    for k in range(iters):
        h, jac, _ = sys.homotopy(z, t)
        dz = _solve(jac, -h)
        z = z + dz
        rel = np.linalg.norm(dz, axis=1) / np.maximum(np.linalg.norm(z, axis=1), 1e-300)
        rel = np.where(np.isfinite(rel), rel, np.inf)
        if k == 0:
            first = rel
        last = rel
    return z, first, last


def _track(
    sys: PolynomialSystem,
    z: ComplexArray,
    s: FloatArray,
    s_end: float,
    h: FloatArray,
    hmax: float,
    budget: Budget,
    corr_tol: float = _CORR_TOL,
) -> tuple[ComplexArray, FloatArray, FloatArray, np.ndarray[Any, np.dtype[np.bool_]], int]:
    """Advance every path to ``s_end``; return ``(z, s, h, failed, steps)``."""
    failed = np.zeros(z.shape[0], dtype=bool)
    steps = 0
    for _ in range(_MAX_SWEEPS):
        act = np.flatnonzero((s < s_end) & ~failed)
        if act.size == 0:
            break
        budget.check()
        za, sa = z[act], s[act]
        ha = np.minimum(h[act], s_end - sa)
        k1 = _velocity(sys, za, sa)
        k2 = _velocity(sys, za + 0.5 * ha[:, None] * k1, sa + 0.5 * ha)
        k3 = _velocity(sys, za + 0.5 * ha[:, None] * k2, sa + 0.5 * ha)
        k4 = _velocity(sys, za + ha[:, None] * k3, sa + ha)
        zp = za + (ha / 6.0)[:, None] * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        zc, first, last = _correct(sys, zp, _t_of(sa + ha))
        ok = (first <= _PRED_TOL) & (last <= corr_tol) & np.all(np.isfinite(zc), axis=1)
        acc, rej = act[ok], act[~ok]
        z[acc] = zc[ok]
        s[acc] = np.where(s_end - (sa[ok] + ha[ok]) < 1e-12, s_end, sa[ok] + ha[ok])
        h[acc] = np.minimum(2.0 * h[acc], hmax)
        h[rej] *= 0.5
        failed[rej[h[rej] < _HMIN]] = True
        steps += 1
    failed |= s < s_end
    return z, s, h, failed, steps


def _polish_target(
    sys: PolynomialSystem, z: ComplexArray
) -> tuple[ComplexArray, FloatArray, FloatArray]:
    """Newton at t = 1 (target plus chart): points, last relative correction, condition."""
    one = np.ones(z.shape[0])
    for _ in range(6):
        h, jac, _ = sys.homotopy(z, one)
        dz = _solve(jac, -h)
        z = np.where(np.all(np.isfinite(dz), axis=1)[:, None], z + dz, z)
    h, jac, _ = sys.homotopy(z, one)
    dz = _solve(jac, -h)
    last = np.linalg.norm(dz, axis=1) / np.maximum(np.linalg.norm(z, axis=1), 1e-300)
    cond = np.linalg.cond(jac)
    return z, np.where(np.isfinite(last), last, np.inf), np.where(np.isfinite(cond), cond, np.inf)


def refine_real(layer: Layer, cov: FloatArray) -> tuple[FloatArray, float]:
    """Real Newton on F (dense Kronecker Jacobian) until the relative residual stops falling."""
    d = layer.dim
    _, best = relative_residual(layer, cov)
    for _ in range(8):
        f, _ = relative_residual(layer, cov)
        try:
            step = sla.solve(jacobian_matrix(*jacobian_parts(layer, cov)), -vech(f))
        except (np.linalg.LinAlgError, ValueError):
            break
        cand = sym(cov + unvech(step, d))
        _, rel = relative_residual(layer, cand)
        if not rel < best:
            break
        cov, best = cand, rel
        if best <= 1e-15:
            break
    return cov, best


def homotopy_roots(layer: Layer, budget: Budget, *, seed: int = 0) -> HomotopyRoots:
    """Every isolated root of ``F(Σ) = 0`` by total-degree homotopy (module docstring).

    Raises :class:`~gtcontrol._status.BudgetExhausted` when ``budget`` runs out.
    """
    clock = time.perf_counter()
    d = layer.dim
    n = d * (d + 1) // 2
    rng = np.random.default_rng(seed)
    gamma = complex(np.exp(2j * np.pi * rng.uniform()))
    patch = rng.standard_normal(n + 1) + 1j * rng.standard_normal(n + 1)
    patch /= np.linalg.norm(patch)
    sys = PolynomialSystem(layer, gamma, patch)
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2.0 - 1.0

    def starts(idx: np.ndarray[Any, Any]) -> ComplexArray:
        z = np.concatenate([np.ones((idx.size, 1)), signs[idx]], axis=1).astype(complex)
        out: ComplexArray = z / (z @ patch)[:, None]
        return out

    every = np.arange(2**n)
    s1 = -math.log(_EPS[0])
    z, _, h, failed, sweeps = _track(
        sys, starts(every), np.zeros(2**n), s1, np.full(2**n, _H0), _HMAX, budget
    )
    kinds, roots = _classify(sys, z, failed)
    # Path jumping shows as two paths at one non-singular root: re-track those with small steps.
    retracked = 0
    for hmax in (0.1, 0.02):
        dup = np.flatnonzero(kinds == "duplicate")
        if dup.size == 0:
            break
        clash = _clashing(roots, kinds, dup)
        retracked += clash.size
        zr, _, hr, fr, more = _track(
            sys, starts(clash), np.zeros(clash.size), s1, np.full(clash.size, _H0 / 4), hmax, budget
        )
        sweeps += more
        z[clash], h[clash], failed[clash] = zr, hr, fr
        kinds, roots = _classify(sys, z, failed)
    rest = np.flatnonzero((kinds == "singular") | (kinds == "failed"))
    cycles: list[float] = []
    if rest.size:
        end, cycles = _end_game(sys, z[rest], h[rest], failed[rest], budget)
        for k, (kind, x) in zip(rest, end):
            kinds[k] = kind
            if kind in ("finite", "singular"):
                roots[k] = x  # a singular one is checked for a possible real PD root
        kinds, jumped = _deduplicate(kinds, roots)
    else:
        jumped = int(np.sum(kinds == "duplicate"))
    far = _far_roots(layer, sys, kinds, roots)
    finite = np.flatnonzero(kinds == "finite")
    sing = np.flatnonzero(kinds == "singular")
    cert = _certify_roots(layer, sys, roots[finite], budget)
    sing_pd = sum(int(_maybe_real_pd(unvech(roots[k], d))) for k in sing)
    n_failed = int(np.sum(kinds == "failed"))
    return HomotopyRoots(
        paths=2**n,
        finite=int(finite.size),
        real_roots=tuple(cert.real),
        residuals=tuple(cert.residuals),
        pd=tuple(k for k, c in enumerate(cert.listed) if c),
        at_infinity=int(np.sum(kinds == "infinity")),
        singular=int(sing.size),
        singular_real_pd=sing_pd,
        failed=n_failed,
        jumped=jumped,
        complete=n_failed == 0 and jumped == 0,
        seconds=time.perf_counter() - clock,
        stats={
            "sweeps": sweeps,
            "retracked": retracked,
            "end_game_paths": int(rest.size),
            "cycle_numbers": sorted({round(c) for c in cycles if math.isfinite(c)}),
            "far_roots": far,
        },
        radii=tuple(cert.radii),
        certified=tuple(cert.certified),
        undecided=cert.undecided,
    )


def _clashing(
    roots: ComplexArray, kinds: np.ndarray[Any, np.dtype[Any]], dup: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The duplicated paths and the first paths that reached the same roots."""
    fin = np.flatnonzero(kinds == "finite")
    out = set(dup.tolist())
    for k in dup:
        dist = np.linalg.norm(roots[fin] - roots[k], axis=1)
        out.update(fin[dist <= _SAME_TOL * max(float(np.linalg.norm(roots[k])), 1.0)].tolist())
    return np.array(sorted(out))


def _deduplicate(
    kinds: np.ndarray[Any, np.dtype[Any]], roots: ComplexArray
) -> tuple[np.ndarray[Any, np.dtype[Any]], int]:
    """Mark a finite non-singular root reached by a second path ``"duplicate"``."""
    idx = np.flatnonzero((kinds == "finite") | (kinds == "duplicate"))
    jumped = 0
    for j, k in enumerate(idx):
        prev = roots[idx[:j]]
        prev = prev[kinds[idx[:j]] == "finite"]
        scale = np.maximum(np.linalg.norm(prev, axis=1), 1.0)
        if prev.size and np.any(np.linalg.norm(prev - roots[k], axis=1) <= _SAME_TOL * scale):
            kinds[k] = "duplicate"
            jumped += 1
        else:
            kinds[k] = "finite"
    return kinds, jumped


def _classify(
    sys: PolynomialSystem, z: ComplexArray, failed: np.ndarray[Any, np.dtype[np.bool_]]
) -> tuple[np.ndarray[Any, np.dtype[Any]], ComplexArray]:
    """Kinds of end points at ``t = 1 − ε₀`` after Newton at t = 1: ``"finite"`` (affine
    roots in ``roots``), ``"infinity"``, ``"duplicate"``, ``"singular"`` (for the end game)
    or ``"failed"``."""
    zend, last, cond = _polish_target(sys, z.copy())
    kinds = np.full(z.shape[0], "singular", dtype=object)
    good = (last <= 1e-12) & (cond <= _COND_MAX) & ~failed
    norm = np.linalg.norm(zend, axis=1)
    at_inf = good & (np.abs(zend[:, 0]) <= _INF_TOL * norm)
    kinds[at_inf] = "infinity"
    kinds[failed] = "failed"
    fin = good & ~at_inf
    kinds[fin] = "finite"
    roots = np.zeros((z.shape[0], sys.n), dtype=complex)
    # at infinity too (where x_0 ≠ 0): a huge finite root also has a tiny x_0 (_far_roots)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        roots[good] = zend[good, 1:] / zend[good, 0:1]
    kinds, _ = _deduplicate(kinds, roots)
    return kinds, roots


def _affine_newton(sys: PolynomialSystem, x: ComplexArray) -> ComplexArray | None:
    """Newton on the affine target ``E(1, x) = 0``; the root if it converges non-singularly."""
    for _ in range(20):
        e, jac = sys.target(np.concatenate([[1.0], x])[None, :].astype(complex))
        jx = jac[0, :, 1:]
        if not np.isfinite(jx).all() or np.linalg.cond(jx) > 1e14:
            return None
        dx = np.linalg.solve(jx, -e[0])
        x = x + dx
        if np.linalg.norm(dx) <= 1e-10 * max(float(np.linalg.norm(x)), 1.0):
            return x
    return None


def _end_game(
    sys: PolynomialSystem,
    z: ComplexArray,
    h: FloatArray,
    failed: np.ndarray[Any, np.dtype[np.bool_]],
    budget: Budget,
) -> tuple[list[tuple[str, ComplexArray]], list[float]]:
    """Power-series end game for end points that Newton at t = 1 does not resolve.

    The paths are followed on through ``ε = 10⁻⁵ … 10⁻¹²`` (each as far as it can be tracked)
    and ``x_0(ε) = a + b ε^{1/c}`` is extrapolated from the last three samples (Aitken; the
    ratio of successive differences is ``10^{−1/c}``, c the cycle number): ``a ≈ 0`` is a root
    at infinity; otherwise affine Newton from the last sample decides between a non-singular
    finite root and a singular one. Fewer than three samples leave the path ``"failed"``.
    """
    m = z.shape[0]
    samples = [[z[k, 0]] if not failed[k] else [] for k in range(m)]
    s = np.full(m, -math.log(_EPS[0]))
    live = ~failed
    last = z.copy()
    for eps in _EPS[1:]:
        idx = np.flatnonzero(live)
        if idx.size == 0:
            break
        zi, si, hi, fi, _ = _track(
            sys, z[idx], s[idx], -math.log(eps), h[idx], _END_HMAX, budget, _END_CORR_TOL
        )
        z[idx], s[idx], h[idx] = zi, si, hi
        for j, k in enumerate(idx.tolist()):
            if fi[j]:
                live[k] = False
                continue
            samples[k].append(zi[j, 0])
            last[k] = zi[j]
            # Decided early: two equal ratios of a power law towards x_0 = 0.
            x0 = samples[k][-4:]
            if len(x0) == 4 and abs(x0[3]) <= 100 * _INF_TOL * np.linalg.norm(zi[j]):
                r1, r2 = (x0[2] - x0[1]) / (x0[1] - x0[0]), (x0[3] - x0[2]) / (x0[2] - x0[1])
                if abs(r2 - r1) <= 0.02 * abs(r2) and 0.05 < abs(r2) < 0.95:
                    live[k] = False
    out: list[tuple[str, ComplexArray]] = []
    cycles: list[float] = []
    for k in range(m):
        x0 = samples[k][-3:]
        if len(x0) < 3:
            out.append(("failed", last[k, 1:]))
            continue
        norm = float(np.linalg.norm(last[k]))
        d1, d2 = x0[1] - x0[0], x0[2] - x0[1]
        rho = d2 / d1 if abs(d1) > 0 else 0.0
        limit = x0[2] + d2 * rho / (1 - rho) if abs(1 - rho) > 1e-3 else x0[2]
        # A power law ε^{1/c} gives a real ratio 10^{-1/c} in (0, 1): c = 1, 2, 3, … .
        power_law = 0.05 < abs(rho) < 0.95 and abs(np.angle(rho)) < 0.3
        if power_law:
            cycles.append(-1.0 / math.log10(abs(rho)))
        if power_law and abs(limit) <= 100 * _INF_TOL * norm:
            out.append(("infinity", last[k, 1:]))
            continue
        x = last[k, 1:] / last[k, 0]
        root = _affine_newton(sys, x)
        if root is not None:
            out.append(("finite", root))
        elif abs(limit) > 100 * _INF_TOL * norm and (power_law or abs(d2) <= 1e-6 * abs(x0[2])):
            out.append(("singular", x))
        else:
            out.append(("failed", x))
    return out, cycles


@dataclass
class _Certified:
    """The real roots of :func:`_certify_roots` and how far each is decided."""

    real: list[FloatArray] = field(default_factory=list)
    residuals: list[float] = field(default_factory=list)
    radii: list[float] = field(default_factory=list)
    certified: list[bool] = field(default_factory=list)
    listed: list[bool] = field(default_factory=list)
    undecided: int = 0

    def add(self, cov: FloatArray, rel: float, ball: RootBall | None) -> None:
        """A real root (merged into an equal one already held)."""
        scale = max(float(np.linalg.norm(cov)), 1e-300)
        if any(np.linalg.norm(cov - r) <= _SAME_TOL * max(scale, 1e-12) for r in self.real):
            return
        self.real.append(cov)
        self.residuals.append(rel)
        self.radii.append(math.nan if ball is None else ball.radius)
        self.certified.append(ball is not None and ball.definiteness == "pd")
        # an uncertified root is listed on the float test alone (the proof is then withheld)
        self.listed.append(ball.definiteness == "pd" if ball is not None else is_pd(cov))
        if ball is None or ball.definiteness == "undecided":
            self.undecided += 1


def _certify_roots(
    layer: Layer, sys: PolynomialSystem, roots: ComplexArray, budget: Budget
) -> _Certified:
    """Classify the finite non-singular roots, each with a Kantorovich ball on the layer's F.

    A root is *non-real* when its ball (complex) excludes every real matrix (``‖Im Σ‖ > r``);
    otherwise real Newton from ``Re Σ`` gives a real root, certified by its own ball, and it is
    *the* root of the path when that ball lies inside the complex ball's uniqueness radius.
    Its definiteness is then decided beyond rounding (:func:`certified_root`). A root for which
    any step fails, or whose definiteness the float data cannot decide, is counted in
    ``undecided`` (the search then claims no complete list); a real root found on the way is
    kept either way.
    """
    d = layer.dim
    out = _Certified()
    zero_is_root = not np.any(sys.c)
    for x in roots:
        budget.check()
        if zero_is_root and np.linalg.norm(x) <= _REAL_TOL:
            x = np.zeros_like(x)  # the trivial root Σ = 0 (exact: certified_root checks it)
        cov_c = unvech(x, d) * sys.scale
        ball_c = root_ball(layer, cov_c)
        imag = float(np.linalg.norm(cov_c.imag))
        if ball_c is not None and imag > ball_c.radius:
            continue  # certainly not real: conjugate pairs of complex roots
        if ball_c is None and imag > _REAL_TOL * max(float(np.linalg.norm(cov_c)), 1.0):
            out.undecided += 1  # most likely complex, but not certified
            continue
        cov, rel = refine_real(layer, sym(cov_c.real)) if np.any(x) else (cov_c.real, 0.0)
        ball = certified_root(layer, cov)
        same = (
            ball_c is not None
            and ball is not None
            and float(np.linalg.norm(cov - cov_c)) + ball.radius <= ball_c.unique
        )
        if ball is not None or rel <= _LIST_RTOL:
            before = out.undecided
            out.add(cov, rel, ball)
            if not same and out.undecided == before:
                out.undecided += 1  # a real root, but not certainly this path's
        else:
            out.undecided += 1
    return out


#: An uncertified real root is still listed (without a proof) when its relative residual is
#: at most this.
_LIST_RTOL = 1e-10


def _far_roots(
    layer: Layer, sys: PolynomialSystem, kinds: np.ndarray[Any, np.dtype[Any]], roots: ComplexArray
) -> int:
    """Re-read end points taken to lie at infinity (``|x_0|`` tiny) whose affine point is a
    certified finite root of F (a root far beyond the typical scale): they become finite."""
    d = layer.dim
    count = 0
    for k in np.flatnonzero(kinds == "infinity"):
        x = roots[k]
        if not (np.any(x) and np.all(np.isfinite(x))):
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            ball = root_ball(layer, unvech(x, d) * sys.scale)
        if ball is not None:
            kinds[k] = "finite"
            count += 1
    return count


def _maybe_real_pd(x: Any) -> bool:
    """Whether a singular end point (known only to about ``u^{1/m}``) may be a real positive
    semidefinite root: not clearly complex, not clearly indefinite."""
    scale = max(float(np.linalg.norm(x)), 1.0)
    if float(np.linalg.norm(x.imag)) > 1e-3 * scale:
        return False
    w = np.linalg.eigvalsh(sym(x.real))
    return bool(w[-1] > 0 and w[0] >= -1e-3 * w[-1])
