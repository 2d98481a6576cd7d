"""Certified roots of the covariance field: Kantorovich balls for the layer's own floats.

A computed equilibrium Σ̃ is a float matrix; what it claims is an *exact* equilibrium of the
layer's float data nearby. :func:`root_ball` proves one by Kantorovich's theorem for the
quadratic map ``F(Σ) = MΣ + ΣMᵀ [+ GGᵀ]`` on (real or complex) symmetric matrices, with every
rounding of evaluating F, DF and the bound itself bounded (first-order ``γ_k = k·u`` bounds,
LAPACK's SVD and symmetric eigenvalue error ``p(n)·u·‖·‖``). :func:`certified_root` adds the
definiteness of that exact root, decided beyond the radius; where rounding cannot decide, an
exact rational test (small d) or a certified root of lower rank in a chart (an exactly singular
positive semidefinite root) decides it, and otherwise it is ``"undecided"``.

Reference: L. V. Kantorovich, G. P. Akilov, *Functional Analysis* (1982), ch. XVIII;
N. J. Higham, *Accuracy and Stability of Numerical Algorithms* (2002), ch. 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._linalg import FloatArray, sym, unvech, vech, vech_index, vech_scale
from ..model.params import Layer
from ._core import exact_definiteness
from ._field_kernel import jacobian_matrix

__all__ = [
    "CERTIFY_MAX_DIM",
    "BoundedEvaluation",
    "RootBall",
    "certified_root",
    "evaluate_bounded",
    "root_ball",
]


#: Unit round-off of float64.
_UNIT = float(np.finfo(np.float64).eps) / 2

#: Largest d at which equilibria are certified (a dense SVD of DF on Sym(d), n ≤ 300).
CERTIFY_MAX_DIM = 24

#: Largest d at which a candidate is also tested as an exact root in rational arithmetic.
_EXACT_ROOT_MAX_DIM = 6


@dataclass(frozen=True)
class RootBall:
    """A Kantorovich ball around a computed root of F, for the layer's own float numbers.

    In exact arithmetic on the layer's floats, F has exactly one root ``Σ_exact`` with
    ``‖Σ_exact − centre‖_F ≤ radius`` and no other within ``unique`` of the centre (Frobenius
    norm on real, or complex, symmetric matrices). The rounding of every evaluation behind the
    bound is included (first-order ``γ_k = k·u`` bounds, with ``k`` twice the longest chain).

    ``definiteness`` (real centres): ``"pd"`` (Σ_exact ≻ 0), ``"not_pd"`` (Σ_exact has a
    negative eigenvalue; or the exact root is the centre itself and singular), or ``"undecided"``
    (λ_min of the centre lies within the radius plus the rounding of the eigenvalue: the float
    data cannot decide at double precision). ``exact``: the centre is itself an exact root
    (checked in rational arithmetic for small d). ``singular``: the root is proved singular (a
    root of lower rank certified in a chart, :func:`_rank_deficient`).
    """

    radius: float
    unique: float
    definiteness: str = ""
    exact: bool = False
    singular: bool = False


def _data_bounds(
    layer: Layer,
) -> tuple[FloatArray, FloatArray, list[tuple[Any, Any, Any, Any]], Any, int]:
    """``(A_eff, |A_eff| bound, [(V_h, |V_h| bound, B_h, |B_h| bound)], GGᵀ, chain length)``.

    The bounds hold for the layer's exact data: a feed-forward folded into A and factored heads
    ``V_h = o_h v_h``, ``B_h = s k_hᵀ q_h`` are rounded products of its floats.
    """
    a, _ = layer.affine_ffn()
    a_abs = np.abs(layer.A)
    depth = 1
    if layer.ffn is not None:
        a_abs = a_abs + np.abs(layer.ffn.W_out) @ np.abs(layer.ffn.W_in)
        depth = layer.ffn.W_in.shape[0] + 1
    heads: list[tuple[Any, Any, Any, Any]] = []
    fh = layer.factored_heads
    if fh is not None:
        for h, (v_h, b_h) in enumerate(fh.dense()):
            v_abs = np.abs(fh.o[h]) @ np.abs(fh.v[h])
            b_abs = abs(fh.scale) * (np.abs(fh.k[h]).T @ np.abs(fh.q[h]))
            heads.append((v_h, v_abs, b_h, b_abs))
        depth = max(depth, fh.head_dim + 2)
    for v_h, b_h in layer.dense_heads if fh is not None else layer.heads:
        heads.append((v_h, np.abs(v_h), b_h, np.abs(b_h)))
    gg = None
    if layer.noise is not None and np.any(layer.noise):
        gg = layer.noise @ layer.noise.T
        depth = max(depth, layer.noise.shape[1] + 1)
    return a, a_abs, heads, gg, 4 * layer.dim + depth + len(heads) + 8


@dataclass(frozen=True)
class BoundedEvaluation:
    """F and DF at one (real or complex) symmetric matrix, with bounds on their rounding.

    ``f`` (d×d) and ``jac`` (DF in orthonormal coordinates of Sym(d)); the exact values for
    the layer's floats differ by at most ``f_err`` and ``jac_err`` (Frobenius / spectral);
    ``jac_bound`` bounds ``‖DF‖`` itself and ``lip`` the Lipschitz constant of DF.
    """

    f: Any
    f_err: float
    jac: Any
    jac_err: float
    jac_bound: float
    lip: float


def evaluate_bounded(layer: Layer, s: Any) -> BoundedEvaluation | None:
    """:class:`BoundedEvaluation` at ``s``, or ``None`` on non-finite numbers."""
    d = layer.dim
    a, a_abs, heads, gg, k = _data_bounds(layer)
    gam = (4.0 if np.iscomplexobj(s) else 2.0) * k * _UNIT
    s_abs = np.abs(s)
    with np.errstate(over="ignore", invalid="ignore"):
        m_mat = a + sum((v @ s @ b for v, _, b, _ in heads), np.zeros_like(s))
        m_abs = a_abs + sum((va @ s_abs @ ba for _, va, _, ba in heads), np.zeros((d, d)))
        p = m_mat @ s
        f = p + p.T + (0.0 if gg is None else gg)
        t_abs = m_abs @ s_abs
        t_abs = t_abs + t_abs.T + (0.0 if gg is None else np.abs(gg))
        jac = jacobian_matrix(m_mat, [(v, b @ s) for v, _, b, _ in heads])
        mag_j = 2.0 * float(np.linalg.norm(m_abs)) + 2.0 * sum(
            float(np.linalg.norm(va)) * float(np.linalg.norm(ba @ s_abs)) for _, va, _, ba in heads
        )
        lip = 4.0 * sum(
            float(np.linalg.norm(va)) * float(np.linalg.norm(ba)) for _, va, _, ba in heads
        )
        scale = vech_scale(d)
        jo = jac * scale[:, None] / scale[None, :]
        f_err = gam * float(np.linalg.norm(t_abs))
    if not (np.all(np.isfinite(jo)) and np.all(np.isfinite(f)) and math.isfinite(f_err + mag_j)):
        return None
    return BoundedEvaluation(
        f, f_err, jo, math.sqrt(2.0) * gam * mag_j, math.sqrt(2.0) * mag_j, lip
    )


def _kantorovich(beta: float, f_norm: float, lip: float) -> tuple[float, float] | None:
    """``(radius, uniqueness radius)`` of Kantorovich's theorem, or ``None`` if ``h > ½``."""
    eta = beta * f_norm * (1.0 + 4.0 * _UNIT)
    h = beta * lip * eta
    if not h < 0.5:
        return None
    root = math.sqrt(1.0 - 2.0 * h)
    radius = 2.0 * eta / (1.0 + root) * (1.0 + 1e-12)
    return radius, (math.inf if lip == 0 else (1.0 + root) / (beta * lip) * (1.0 - 1e-12))


def _inverse_bound(mat: Any, err: float) -> float | None:
    """A bound on ``‖(mat + E)⁻¹‖₂`` for every ``‖E‖₂ ≤ err`` (SVD rounding included)."""
    sv = np.linalg.svd(mat, compute_uv=False)
    s_min = float(sv[-1]) - err - 4.0 * mat.shape[0] * _UNIT * float(sv[0])
    return (1.0 + 4.0 * _UNIT) / s_min if s_min > 0 else None


def root_ball(layer: Layer, cov: Any) -> RootBall | None:
    """A :class:`RootBall` around ``cov`` (real or complex symmetric), or ``None``.

    Kantorovich's theorem for the quadratic map F on Sym(d): with ``β ≥ ‖DF(Σ)⁻¹‖``,
    ``η ≥ β‖F(Σ)‖`` and ``L = 4Σ_h‖V_h‖‖B_h‖`` (DF is L-Lipschitz), ``h = βLη < ½`` gives a
    unique root within ``2η/(1 + √(1 − 2h))``, and no other within ``(1 + √(1 − 2h))/(βL)``.
    ``β`` comes from the smallest singular value of DF (dense, ``d ≤ CERTIFY_MAX_DIM``) less
    the rounding of forming DF and of the SVD; ``‖F(Σ)‖`` is the computed norm plus the
    rounding of evaluating F. ``None`` when the theorem does not apply (DF numerically singular,
    ``h ≥ ½``, d too large or non-finite numbers).
    """
    s = np.asarray(cov)
    if layer.dim > CERTIFY_MAX_DIM or not np.all(np.isfinite(s)):
        return None
    ev = evaluate_bounded(layer, s)
    if ev is None:
        return None
    beta = _inverse_bound(ev.jac, ev.jac_err)
    if beta is None:
        return None
    ball = _kantorovich(beta, float(np.linalg.norm(ev.f)) + ev.f_err, ev.lip)
    if ball is None:
        return None
    if np.iscomplexobj(s):
        return RootBall(*ball)
    return RootBall(*ball, _definiteness(s, ball[0]))


def _definiteness(s: FloatArray, radius: float) -> str:
    """``"pd"``, ``"not_pd"`` or ``"undecided"`` for every symmetric matrix within ``radius``."""
    d = s.shape[0]
    w = np.linalg.eigvalsh(sym(s))
    err = radius + 8.0 * d * _UNIT * float(np.linalg.norm(s))
    if w[0] > err:
        return "pd"
    if w[0] < -err:
        return "not_pd"
    return "undecided"


def certified_root(layer: Layer, cov: FloatArray) -> RootBall | None:
    """:func:`root_ball` of a real candidate, decided exactly where rounding cannot decide.

    An ``"undecided"`` candidate whose entries within the radius of zero are set to zero is
    tested as an exact root in rational arithmetic (``d ≤ 6``; e.g. ``Σ = 0`` or a singular
    root ``diag(s, 0)`` of a block-diagonal layer): if F vanishes there exactly, that matrix is
    the ball's root and its definiteness is decided exactly.
    """
    ball = root_ball(layer, cov)
    if ball is None or ball.definiteness != "undecided":
        return ball
    snapped = np.where(np.abs(cov) <= ball.radius, 0.0, cov)
    if (
        layer.dim <= _EXACT_ROOT_MAX_DIM
        and float(np.linalg.norm(snapped - cov)) + ball.radius <= ball.unique
    ):
        exact = _exact_field_definiteness(layer, sym(snapped))
        if exact is not None:
            return replace(ball, definiteness="pd" if exact == "pd" else "not_pd", exact=True)
    if _rank_deficient(layer, cov, ball):
        return replace(ball, definiteness="not_pd", singular=True)
    return ball


def _rank_deficient(layer: Layer, cov: FloatArray, ball: RootBall) -> bool:
    """Whether the ball's root is proved singular: a root of rank ``r < d`` certified nearby.

    A PSD root of rank r (common: ``F(c uuᵀ) = 0`` is d equations in d unknowns) is exactly
    singular, which no ball in Sym(d) can show. In the chart ``Σ = YCYᵀ``, ``Y = [I; X]`` (after
    an exact permutation that puts r well-conditioned rows first), ``F₁₁ = 0`` and ``F₂₁ = 0``
    imply ``F = 0`` (no noise): a square system in ``(C, X)``. Kantorovich's theorem on it,
    with the second derivative bounded over a ball of radius ``ρ = 4η``, certifies a rank-r root
    Σ'; if Σ' lies within the uniqueness radius of ``ball``, it is the ball's root.
    """
    d = layer.dim
    if (layer.noise is not None and np.any(layer.noise)) or layer.ffn is not None:
        return False  # noise: no singular root; a feed-forward's A is a rounded product
    if layer.factored_heads is not None:
        return False  # so are factored heads
    w = np.linalg.eigvalsh(cov)
    err = ball.radius + 8.0 * d * _UNIT * float(np.linalg.norm(cov))
    r = int(np.sum(np.abs(w) > err))
    if r == 0 or r == d:
        return False
    _, _, piv = sla.qr(cov, pivoting=True)
    perm = np.asarray(piv)
    lay = _permuted(layer, perm)
    s = cov[np.ix_(perm, perm)]
    try:
        x0 = sla.solve(s[:r, :r], s[:r, r:], assume_a="sym").T
    except (np.linalg.LinAlgError, ValueError):
        return False
    chart = _Chart(lay, sym(s[:r, :r]), x0)
    cert = chart.certify()
    if cert is None:
        return False
    moved, dist = cert
    return bool(moved + dist + float(np.linalg.norm(chart.sigma() - s)) <= ball.unique)


def _permuted(layer: Layer, perm: Any) -> Layer:
    """The same layer in permuted coordinates (exact: a permutation moves floats unchanged)."""
    ix = np.ix_(perm, perm)
    return Layer(layer.A[ix], heads=[(v[ix], b[ix]) for v, b in layer.heads], dim=layer.dim)


class _Chart:
    """Roots of rank r in the chart ``Σ = YCYᵀ``, ``Y = [I; X]`` (see :func:`_rank_deficient`).

    Coordinates: ``C`` in an orthonormal basis of Sym(r) and the entries of ``X``; values: the
    ``F₁₁`` block (orthonormal Sym(r) coordinates) and the entries of ``F₂₁``.
    """

    def __init__(self, layer: Layer, c0: FloatArray, x0: FloatArray) -> None:
        self.layer, self.c, self.x = layer, c0, x0
        self.r, self.d = c0.shape[0], layer.dim

    def _y(self, x: FloatArray) -> FloatArray:
        return np.vstack([np.eye(self.r), x])

    def sigma(self) -> FloatArray:
        y = self._y(self.x)
        return sym(y @ self.c @ y.T)

    def _directions(self, c: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
        """``DΣ`` at ``(c, x)`` as a matrix: orthonormal Sym(d) coordinates × chart ones."""
        r, d = self.r, self.d
        cols = []
        for j in range(r * (r + 1) // 2):
            e = unvech(np.eye(r * (r + 1) // 2)[j], r) / vech_scale(r)[j]
            cols.append(y @ e @ y.T)
        for j in range((d - r) * r):
            dy = np.zeros((d, r))
            dy[r + j // r, j % r] = 1.0
            t = dy @ c @ y.T
            cols.append(t + t.T)
        return np.stack([vech_scale(d) * vech(h) for h in cols], axis=1)

    def _rows(self) -> tuple[Any, FloatArray]:
        """Which orthonormal Sym(d) coordinates are ``F₁₁`` and ``F₂₁``, and their weights."""
        iu, _ = vech_index(self.d)
        keep = iu[0] < self.r
        weight = np.where(iu[1] < self.r, 1.0, 1.0 / math.sqrt(2.0))
        return keep, weight[keep]

    def certify(self) -> tuple[float, float] | None:
        """``(bound on ‖Σ' − Σ(z0)‖, bound on ‖Σ(z0) − sigma()‖)`` for a certified rank-r root
        Σ' (``Σ(z0)`` the exact chart point at the centre), or ``None``."""
        d = self.d
        y = self._y(self.x)
        sig = self.sigma()
        ev = evaluate_bounded(self.layer, sig)
        if ev is None:
            return None
        gam = 4.0 * (2 * d + 8) * _UNIT
        y_abs = np.abs(y)
        err_sig = gam * float(np.linalg.norm(y_abs @ np.abs(self.c) @ y_abs.T))
        keep, weight = self._rows()
        f_coords = vech_scale(d) * vech(ev.f)
        g_norm = float(np.linalg.norm(weight * f_coords[keep])) + ev.f_err
        g_norm += ev.jac_bound * err_sig + ev.lip * err_sig**2
        ds = self._directions(self.c, self.x, y)
        ds_abs = self._directions(np.abs(self.c), np.abs(self.x), y_abs)
        dg = weight[:, None] * (ev.jac @ ds)[keep]
        n_ds = float(np.linalg.norm(ds))
        e_ds = gam * float(np.linalg.norm(ds_abs))
        e_dg = ev.jac_err * n_ds + ev.jac_bound * e_ds + 4.0 * d * d * _UNIT * ev.jac_bound * n_ds
        beta = _inverse_bound(dg, e_dg)
        if beta is None or not math.isfinite(g_norm):
            return None
        rho = 3.0 * beta * g_norm * (1.0 + 1e-9)
        c = float(np.linalg.norm(self.c)) + rho
        yy = math.sqrt(1.0 + (float(np.linalg.norm(self.x)) + rho) ** 2)
        n1 = math.hypot(2.0 * c * yy, yy * yy)
        df = ev.jac_bound + ev.lip * (n1 * rho + err_sig)
        curv = ev.lip * n1 * n1 + df * (2.0 * c + 2.0 * yy)
        ball = _kantorovich(beta, g_norm, curv)
        if ball is None or ball[0] > rho:
            return None
        return n1 * ball[0], err_sig


def _exact_field_definiteness(layer: Layer, s: FloatArray) -> str | None:
    """Definiteness of ``s`` if ``F(s) = 0`` holds exactly for the layer's floats, else ``None``."""
    d = layer.dim

    def q(m: Any) -> list[list[Fraction]]:
        return [[Fraction(float(x)) for x in row] for row in np.asarray(m)]

    def mul(x: list[list[Fraction]], y: list[list[Fraction]]) -> list[list[Fraction]]:
        cols = list(zip(*y))
        return [
            [sum((xi * yj for xi, yj in zip(row, col)), Fraction(0)) for col in cols] for row in x
        ]

    def add(x: list[list[Fraction]], y: list[list[Fraction]]) -> list[list[Fraction]]:
        return [[p + r for p, r in zip(rx, ry)] for rx, ry in zip(x, y)]

    sq = q(s)
    m = q(layer.A)
    if layer.ffn is not None:
        m = add(m, mul(q(layer.ffn.W_out), q(layer.ffn.W_in)))
    fh = layer.factored_heads
    pairs: list[tuple[Any, Any]] = []
    if fh is not None:
        for h in range(fh.n_heads):
            kq = mul([list(r) for r in zip(*q(fh.k[h]))], q(fh.q[h]))
            sc = Fraction(float(fh.scale))
            pairs.append((mul(q(fh.o[h]), q(fh.v[h])), [[sc * x for x in r] for r in kq]))
    pairs += [(q(v), q(b)) for v, b in (layer.dense_heads if fh is not None else layer.heads)]
    for v, b in pairs:
        m = add(m, mul(mul(v, sq), b))
    p = mul(m, sq)
    f = [[p[i][j] + p[j][i] for j in range(d)] for i in range(d)]
    if layer.noise is not None:
        g = q(layer.noise)
        f = add(f, mul(g, [list(r) for r in zip(*g)]))
    if any(x != 0 for row in f for x in row):
        return None
    return exact_definiteness(sq)
