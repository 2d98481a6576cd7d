"""The covariance field's shared kernel: ``F(Σ)``, its residual, its derivative ``DF(Σ)``.

A time-invariant layer moves the covariance by ``dΣ/dt = F(Σ) = MΣ + ΣMᵀ [+ GGᵀ]``,
``M = A + Σ_h V_h Σ B_h`` (docs/theory.md §2; F comes from :func:`gtcontrol.moment_field`), and

    DF(Σ)[H] = M H + H Mᵀ + Σ_h (V_h H B_h Σ + Σ B_hᵀ H V_hᵀ).

Every equilibrium search (Newton, the whitened and deflated searches, homotopy), the
certificates and the linearization spectrum evaluate these through this one module: the field
and the size of its terms (the relative residual), ``DF`` as its parts, as an operator (dense or
factored heads) and as a dense matrix on symmetric matrices, the mean matrix ``K``, and the
norms that set a layer's scales. The functions take validated arrays; the one public function,
:func:`covariance_jacobian`, validates its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._linalg import FloatArray, sym, vech_index
from .._validation import as_float_array
from ..model.field import affine_velocity, moment_field
from ..model.params import Layer

__all__ = [
    "JacobianOperator",
    "covariance_field",
    "covariance_jacobian",
    "field_flops",
    "head_norm_sum",
    "jacobian_matrix",
    "jacobian_parts",
    "mean_jacobian",
    "norm2",
    "relative_residual",
    "residual_scale",
    "typical_scale",
]


def covariance_field(layer: Layer, cov: FloatArray) -> FloatArray:
    """``F(Σ) = dΣ/dt`` from the one home of the moment field (independent of the mean)."""
    return moment_field(layer, np.zeros(layer.dim), cov)[1]


def residual_scale(layer: Layer, cov: FloatArray) -> float:
    """Size of the terms of F: ``2‖AΣ‖ + 2 Σ_h ‖V_h Σ B_h Σ‖ + ‖GGᵀ‖`` (Frobenius)."""
    a, _ = layer.affine_ffn()
    s = 2.0 * float(np.linalg.norm(a @ cov))
    fh = layer.factored_heads
    if fh is not None:
        # V_h Σ B_h Σ = W_O,h (s W_V,h Σ W_K,hᵀ)(W_Q,h Σ): O(H d² d_head), no d×d head.
        cores = np.matmul(np.matmul(fh.v, cov), fh.k.transpose(0, 2, 1)) * fh.scale
        terms = np.matmul(np.matmul(fh.o, cores), np.matmul(fh.q, cov))
        s += 2.0 * float(np.sum(np.sqrt(np.einsum("hij,hij->h", terms, terms))))
    for v_h, b_h in layer.dense_heads:
        s += 2.0 * float(np.linalg.norm(v_h @ cov @ b_h @ cov))
    if layer.noise is not None:
        s += float(np.linalg.norm(layer.noise @ layer.noise.T))
    return s


def relative_residual(layer: Layer, cov: FloatArray) -> tuple[FloatArray, float]:
    """``(F(Σ), ‖F(Σ)‖ / residual_scale)``: the residual every equilibrium search reads."""
    # Huge (≈1e300) covariances overflow the squared norms: the ratio is then inf or NaN,
    # which every caller reads as "not an equilibrium".
    with np.errstate(over="ignore", invalid="ignore"):
        f = covariance_field(layer, cov)
        nf = float(np.linalg.norm(f))
        scale = residual_scale(layer, cov)
    return f, (nf / scale if scale > 0 else nf)


def jacobian_parts(
    layer: Layer, cov: FloatArray
) -> tuple[FloatArray, list[tuple[FloatArray, FloatArray]]]:
    """``M = A + Σ_h V_h Σ B_h`` (from :func:`affine_velocity`) and the pairs ``(V_h, B_h Σ)``."""
    m_mat, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
    return m_mat, [(v_h, b_h @ cov) for v_h, b_h in layer.heads]


def _df_apply(
    m_mat: FloatArray, pairs: Sequence[tuple[FloatArray, FloatArray]], h: FloatArray
) -> FloatArray:
    """``DF(Σ)[H] = MH + HMᵀ + Σ_h (V_h H B_hΣ + (V_h H B_hΣ)ᵀ)`` for symmetric H."""
    p = m_mat @ h
    out = p + p.T
    for v_h, bs in pairs:
        q = v_h @ h @ bs
        out += q + q.T
    return out


def mean_jacobian(layer: Layer, cov: FloatArray) -> FloatArray:
    """``K = A + Σ_h V_h (I + Σ B_h)``: with Σ held fixed the mean obeys ``dm/dt = K m + b``."""
    # K m + b = M m + c(m) with c(m) = b + Σ_h V_h m, so K = M + Σ_h V_h (M from the field).
    m_mat, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
    for v_h, _ in layer.heads:
        m_mat = m_mat + v_h
    return m_mat


def field_flops(layer: Layer) -> float:
    """Flops of one evaluation of the covariance field ``F(Σ)`` (dense or factored heads)."""
    d = float(layer.dim)
    fh = layer.factored_heads
    dense = 4.0 * d**3 * len(layer.dense_heads)
    if fh is not None:
        return 4.0 * d**3 + 6.0 * d * d * fh.n_heads * fh.head_dim + dense
    return 4.0 * d**3 + dense


class JacobianOperator:
    """``H ↦ DF(Σ)[H]`` at a fixed Σ, dense or with factored heads, and its cost in flops.

    With factored heads ``V_h H B_h Σ = W_O,h (s W_V,h H W_K,hᵀ)(W_Q,h Σ)``: every head at once
    in ``O(d² H d_head)`` (docs/theory.md §2 "Factored heads"), never a ``d×d`` head.
    """

    def __init__(self, layer: Layer, cov: FloatArray) -> None:
        d = layer.dim
        self.m_mat, _ = affine_velocity(layer, np.zeros(d), cov)
        self.fh = layer.factored_heads
        # The heads held as dense pairs: all of them, or those after the factored group.
        self.pairs: list[tuple[FloatArray, FloatArray]] = [
            (v_h, b_h @ cov) for v_h, b_h in layer.dense_heads
        ]
        self.flops = 4.0 * d**3 * (1 + len(self.pairs))
        if self.fh is not None:
            fh = self.fh
            hd = fh.n_heads * fh.head_dim
            self.qs = np.matmul(fh.q, cov) * fh.scale  # (H, d_head, d): s W_Q,h Σ
            self.kt = fh.k.transpose(0, 2, 1)  # (H, d, d_head)
            self.flops += 4.0 * d * d * hd + 2.0 * hd * fh.head_dim * (d + d)

    def __call__(self, h: FloatArray) -> FloatArray:
        if self.fh is None:
            return _df_apply(self.m_mat, self.pairs, h)
        fh = self.fh
        p = self.m_mat @ h
        cores = np.matmul(np.matmul(fh.v, h), self.kt)  # (H, d_head, d_head)
        p += fh.o_cat @ np.matmul(cores, self.qs).reshape(-1, h.shape[0])
        for v_h, bs in self.pairs:
            p += v_h @ h @ bs
        out: FloatArray = p + p.T
        return out

    def lyapunov_matrix(self) -> FloatArray:
        """``N = M + Σ_h (tr V_h / d) Σ B_hᵀ``: ``DF(Σ)[H] = NH + HNᵀ`` when every V_h ∝ I."""
        d = self.m_mat.shape[0]
        n_mat = self.m_mat.copy()
        if self.fh is not None:
            fh = self.fh
            tr = np.einsum("hij,hji->h", fh.v, fh.o) / d  # tr(W_O,h W_V,h) / d
            n_mat += np.einsum("h,hji,hjk->ki", tr, fh.k, self.qs)  # Σ_h c_h (s W_K,hᵀ W_Q,h Σ)ᵀ
        for v_h, bs in self.pairs:
            n_mat += (float(np.trace(v_h)) / d) * bs.T
        return n_mat


def jacobian_matrix(
    m_mat: FloatArray, pairs: Sequence[tuple[FloatArray, FloatArray]]
) -> FloatArray:
    """Matrix of DF(Σ) on symmetric H in the coordinates of :func:`vech`.

    Row-major ``vec(X Y Z) = (X ⊗ Zᵀ) vec(Y)``, so ``DF = M⊗I + I⊗M + Σ_h (V_h⊗(B_hΣ)ᵀ +
    (B_hΣ)ᵀ⊗V_h)``; the columns of ``H_ij = E_ij + E_ji`` are summed and the upper rows kept.
    """
    d = m_mat.shape[0]
    eye = np.eye(d)
    k = np.kron(m_mat, eye) + np.kron(eye, m_mat)
    for v_h, bs in pairs:
        k += np.kron(v_h, bs.T) + np.kron(bs.T, v_h)
    iu, _ = vech_index(d)
    up, lo, off = iu[0] * d + iu[1], iu[1] * d + iu[0], iu[0] != iu[1]
    kd = k[:, up]
    kd[:, off] += k[:, lo[off]]
    return kd[up, :]


def covariance_jacobian(layer: Layer, cov: Any) -> FloatArray:
    """The Fréchet derivative ``DF(Σ)`` on symmetric matrices, as a dense matrix.

    ``DF(Σ)[H] = M H + H Mᵀ + Σ_h (V_h H B_h Σ + Σ B_hᵀ H V_hᵀ)``, ``M = A + Σ_h V_h Σ B_h``
    (docs/theory.md §3–5), in the coordinates of ``gtcontrol._linalg.vech`` (upper triangle,
    row-major; each off-diagonal pair ``H_ij = H_ji`` is one coordinate). Its eigenvalues are
    the linearization spectrum of the covariance dynamics at Σ. Size ``d(d+1)/2``.

    Parameters
    ----------
    layer
        Any layer of the exact moment model.
    cov
        The symmetric ``d×d`` matrix Σ at which to differentiate.

    Returns
    -------
    ndarray
        ``(d(d+1)/2, d(d+1)/2)``.

    Raises
    ------
    InvalidParametersError
        If ``cov`` is not a finite ``d×d`` array.

    Examples
    --------
    Scalar ``F(σ) = 2aσ + 2cσ²`` with ``a = 1``, ``c = vB = −2``: ``DF(σ) = 2a + 4cσ = −2`` at
    the equilibrium ``σ* = 0.5``.

    >>> from gtcontrol import Layer, covariance_jacobian
    >>> covariance_jacobian(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), [[0.5]])
    array([[-2.]])
    """
    c = sym(as_float_array("cov", cov, ndim=2, shape=(layer.dim, layer.dim)))
    return jacobian_matrix(*jacobian_parts(layer, c))


#: Up to this size a 2-norm is an SVD; beyond, a power-iteration estimate (a scale, not a bound).
_EXACT_NORM_MAX_DIM = 64


def norm2(m: FloatArray) -> float:
    """``‖m‖₂``: exact up to 64×64, else 20 power iterations on ``mᵀm`` (``O(d²)`` each).

    The estimate is a lower bound, typically within a few per cent: it sets scales (starts,
    time constants), never a certificate, and keeps a d = 1024 layer from spending seconds in
    SVDs before any budget check.
    """
    if max(m.shape) <= _EXACT_NORM_MAX_DIM:
        return float(np.linalg.norm(m, 2))
    x = np.cos(np.arange(m.shape[1]) * 1.7) + 1.0  # a fixed start with no zero projection
    est = 0.0
    for _ in range(20):
        nx = float(np.linalg.norm(x))
        if nx == 0.0 or not np.isfinite(nx):
            break
        y = m @ (x / nx)
        est = float(np.linalg.norm(y))
        x = m.T @ y
    return est


def _low_rank_norm(x: FloatArray, y: FloatArray) -> float:
    """``‖XY‖₂`` for ``X`` (d×k), ``Y`` (k×d) from the k×k product ``(XᵀX)(YYᵀ)``, exactly."""
    w = np.linalg.eigvals((x.T @ x) @ (y @ y.T))
    return float(np.sqrt(max(float(np.max(w.real)), 0.0))) if w.size else 0.0


def head_norm_sum(layer: Layer) -> float:
    """``Σ_h ‖V_h‖₂‖B_h‖₂`` (factored heads from their rank-d_head factors, never d×d)."""
    total = 0.0
    fh = layer.factored_heads
    if fh is not None:
        for h in range(fh.n_heads):
            nv = _low_rank_norm(fh.o[h], fh.v[h])
            nb = fh.scale * _low_rank_norm(fh.k[h].T, fh.q[h])
            total += nv * nb
    for v, b in layer.dense_heads if fh is not None else layer.heads:
        total += norm2(v) * norm2(b)
    return total


def typical_scale(layer: Layer) -> float:
    """A covariance size where the linear and quadratic terms of F balance."""
    a, _ = layer.affine_ffn()
    na = norm2(a)
    q = head_norm_sum(layer)
    if q == 0 or na == 0:
        return 1.0
    return na / q
