"""Private linear-algebra helpers shared by every module (no other gtcontrol imports).

The half-vectorization (vech), symmetric parts, PSD square roots and factors, numerical
ranks, the positive-definiteness test, the polar factor and the triangular Sylvester solve
live here and only here.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import lapack

__all__ = [
    "RANK_RTOL",
    "SCALAR_RTOL",
    "SYM_RTOL",
    "FloatArray",
    "frobenius_norms",
    "identity_multiple",
    "is_spd",
    "numerical_rank",
    "numerical_ranks",
    "polar",
    "power_of_two",
    "psd_factor",
    "psd_sqrt",
    "scaled_norm",
    "schur_sylvester",
    "spd_sqrt_pair",
    "sym",
    "sym_basis",
    "unvech",
    "vech",
    "vech_index",
    "vech_scale",
]

FloatArray = NDArray[np.float64]

#: Relative tolerance for symmetry and positive semi-definiteness checks (relative to the norm).
SYM_RTOL = 1e-9
#: Eigenvalues below ``RANK_RTOL * lambda_max`` count as zero when reporting rank.
RANK_RTOL = 1e-9
#: ``V`` counts as ``vI`` when it deviates from it by at most this, relative to ``|v|``.
SCALAR_RTOL = 1e-12
#: Largest block that :func:`schur_sylvester` hands to LAPACK's trsyl whole (fastest of 32, 64,
#: 128, 256 at d = 128–1024 on a 2-core machine).
SYLVESTER_LEAF = 64


def sym(a: FloatArray) -> FloatArray:
    """Symmetric part ``(a + aᵀ)/2``."""
    return 0.5 * (a + a.T)


def psd_sqrt(a: FloatArray) -> FloatArray:
    """Symmetric square root of a symmetric positive semi-definite matrix (eigenvalues clipped)."""
    w, u = np.linalg.eigh(sym(a))
    root: FloatArray = (u * np.sqrt(np.clip(w, 0.0, None))) @ u.T
    return root


def psd_factor(a: FloatArray) -> FloatArray:
    """A square factor ``S`` with ``S Sᵀ = a`` for symmetric PSD ``a`` (eigen-based, any rank)."""
    w, u = np.linalg.eigh(sym(a))
    factor: FloatArray = u * np.sqrt(np.clip(w, 0.0, None))
    return factor


def polar(a: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Polar decomposition ``a = U P`` via the SVD: ``U`` orthogonal (or with orthonormal
    columns), ``P = (aᵀa)^{1/2}`` symmetric PSD. Backward stable; no square roots of squares."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    return u @ vt, (vt.T * s) @ vt


def is_spd(a: FloatArray) -> bool:
    """Whether the symmetric matrix ``a`` is numerically positive definite (Cholesky succeeds)."""
    if a.size == 0 or not np.all(np.isfinite(a)):
        return False
    try:
        np.linalg.cholesky(sym(a))
    except np.linalg.LinAlgError:
        return False
    return True


def frobenius_norms(stack: FloatArray) -> FloatArray:
    """``‖X_k‖_F`` of each matrix of a ``(n, d, d)`` stack, in one pass.

    ``np.linalg.norm(stack, axis=(1, 2))`` builds ``|X|²`` as a temporary: 0.28 s against
    0.009 s for 522 matrices of size 128 (a steering verification's records).
    """
    out: FloatArray = np.sqrt(np.einsum("nij,nij->n", stack, stack))
    return out


def numerical_rank(a: FloatArray, rtol: float = RANK_RTOL) -> int:
    """Rank of a symmetric PSD matrix: eigenvalues above ``rtol * lambda_max`` (0 if zero)."""
    w = np.linalg.eigvalsh(sym(a))
    top = float(np.max(np.abs(w))) if w.size else 0.0
    if top == 0.0:
        return 0
    return int(np.sum(w > rtol * top))


def numerical_ranks(stack: FloatArray, rtol: float = RANK_RTOL) -> NDArray[np.int_]:
    """:func:`numerical_rank` of every matrix in a ``(n, d, d)`` stack (one batched eigensolve)."""
    w = np.linalg.eigvalsh(0.5 * (stack + np.swapaxes(stack, -1, -2)))
    top = np.max(np.abs(w), axis=-1, keepdims=True)
    ranks: NDArray[np.int_] = np.sum((w > rtol * top) & (top > 0), axis=-1)
    return ranks


@lru_cache(maxsize=64)
def vech_index(d: int) -> tuple[tuple[NDArray[np.intp], NDArray[np.intp]], NDArray[np.intp]]:
    """Upper-triangle indices of a d×d matrix and, for every full entry, its packed position.

    Cached: computing ``triu_indices`` on every right-hand-side call dominated small-d runs.
    """
    iu = np.triu_indices(d)
    pos = np.empty((d, d), dtype=np.intp)
    pos[iu] = np.arange(iu[0].size)
    pos[(iu[1], iu[0])] = pos[iu]
    return iu, pos.ravel()


def vech(a: FloatArray) -> FloatArray:
    """Upper triangle (row-major) of a symmetric matrix: each distinct entry stored once.

    Examples
    --------
    >>> vech(np.array([[1.0, 2.0], [2.0, 3.0]]))
    array([1., 2., 3.])
    """
    return a[vech_index(a.shape[0])[0]]


def unvech(v: Any, d: int) -> FloatArray:
    """Inverse of :func:`vech` (one gather; the result is exactly symmetric)."""
    return np.asarray(v)[vech_index(d)[1]].reshape(d, d)


def identity_multiple(m: FloatArray) -> float | None:
    """``v`` if the square matrix ``m`` is ``vI`` (to ``1e-12 |v|`` entrywise), else ``None``."""
    d = m.shape[0]
    v = float(np.trace(m)) / d
    dev = float(np.max(np.abs(m - v * np.eye(d))))
    return v if dev <= SCALAR_RTOL * max(abs(v), np.finfo(float).tiny) else None


@lru_cache(maxsize=64)
def vech_scale(d: int) -> FloatArray:
    """Weights that make :func:`vech` orthonormal: 1 on the diagonal, ``√2`` off it.

    ``vech_scale(d) * vech(H)`` are the coordinates of a symmetric ``H`` in the orthonormal
    (Frobenius) basis :func:`sym_basis` of Sym(d). The returned array is read-only (cached).
    """
    iu = vech_index(d)[0]
    out = np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))
    out.setflags(write=False)
    return out


@lru_cache(maxsize=64)
def sym_basis(d: int) -> FloatArray:
    """Orthonormal basis of Sym(d) (Frobenius product), in :func:`vech` order.

    Column ``k`` is ``vec`` of the k-th basis matrix (``e_i e_iᵀ`` or ``(e_i e_jᵀ + e_j e_iᵀ)/√2``;
    symmetric, so row- and column-major ``vec`` agree), shape ``(d², d(d+1)/2)``. A linear map
    ``L`` on Sym(d) with ``d²``-square matrix ``J`` (``vec L(H) = J vec H``) has the matrix
    ``sym_basis(d).T @ J @ sym_basis(d)`` in this basis. Read-only (cached).

    Examples
    --------
    >>> p = sym_basis(3)
    >>> p.shape, bool(np.allclose(p.T @ p, np.eye(6)))
    ((9, 6), True)
    """
    n = d * (d + 1) // 2
    out = np.zeros((d * d, n))
    pos = vech_index(d)[1]
    scale = vech_scale(d)
    out[np.arange(d * d), pos] = 1.0 / scale[pos]
    out.setflags(write=False)
    return out


def spd_sqrt_pair(a: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(a^{1/2}, a^{-1/2})`` of a symmetric positive-definite matrix from one eigensolve."""
    w, u = np.linalg.eigh(sym(a))
    return (u * np.sqrt(w)) @ u.T, (u / np.sqrt(w)) @ u.T


def _block_split(t: FloatArray, k: int) -> int:
    """``k``, or ``k + 1`` when ``k`` would cut a 2×2 diagonal block of the real Schur form."""
    return k + 1 if t[k, k - 1] != 0.0 else k


def schur_sylvester(a: FloatArray, b: FloatArray, c: FloatArray) -> FloatArray:
    """``X`` with ``A X + X Bᵀ = C`` for upper quasi-triangular ``A``, ``B`` (real Schur forms).

    Recursive blocked Bartels–Stewart: the larger of ``A`` and ``B`` is split in two at a
    diagonal block boundary, the trailing half is solved first, and its contribution leaves
    the leading half's right-hand side by one matrix product; blocks of at most
    :data:`SYLVESTER_LEAF` go to LAPACK's ``dtrsyl`` whole. Almost all the work is in matrix
    products, where ``dtrsyl`` alone runs level-2 loops over the whole matrix: at d = 1024,
    ``A = B``, 0.1 s against 6.8 s, with the same solution to 1e-13 relative.

    ``A`` and ``−B`` must have no common eigenvalue (else the equation is singular and the
    result is not finite). ``dtrsyl``'s overflow scaling is undone at each block.

    Reference: Jonsson and Kågström, *Recursive blocked algorithms for solving triangular
    systems — Part I: one-sided and coupled Sylvester-type matrix equations*, ACM TOMS 28
    (2002), 392–415.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[-1.0, 2.0], [0.0, -3.0]])
    >>> x = schur_sylvester(a, a, np.eye(2))
    >>> bool(np.allclose(a @ x + x @ a.T, np.eye(2)))
    True
    """
    m, n = c.shape
    if m <= SYLVESTER_LEAF and n <= SYLVESTER_LEAF:
        x, scale, _ = lapack.dtrsyl(a, b, c, trana="N", tranb="T", isgn=1)
        out: FloatArray = x / scale
        return out
    if m >= n:
        k = _block_split(a, m // 2)
        x2 = schur_sylvester(a[k:, k:], b, c[k:])
        x1 = schur_sylvester(a[:k, :k], b, c[:k] - a[:k, k:] @ x2)
        return np.vstack([x1, x2])
    k = _block_split(b, n // 2)
    x2 = schur_sylvester(a, b[k:, k:], c[:, k:])
    x1 = schur_sylvester(a, b[:k, :k], c[:, :k] - x2 @ b[:k, k:].T)
    return np.hstack([x1, x2])


def scaled_norm(x: Any) -> float:
    """``‖x‖`` (Frobenius, or Euclidean for a vector) without overflow or underflow of the
    squares: entries near ``1e150`` or ``1e-200`` (a target's scale) square out of float64."""
    a = np.asarray(x)
    if a.size == 0:
        return 0.0
    top = float(np.max(np.abs(a)))
    if top == 0.0 or not math.isfinite(top):
        return top
    return top * float(np.linalg.norm(a / top))


def power_of_two(mat: FloatArray) -> float:
    """The power of two nearest ``max |mat|`` (1 for a zero or non-finite matrix)."""
    top = float(np.max(np.abs(mat))) if mat.size else 0.0
    if top == 0.0 or not math.isfinite(top):
        return 1.0
    return math.ldexp(1.0, math.frexp(top)[1] - 1)
