"""Private array validation and small linear-algebra helpers shared by every module."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from .errors import InvalidParametersError

FloatArray = NDArray[np.float64]

#: Relative tolerance for symmetry and positive semi-definiteness checks (relative to the norm).
SYM_RTOL = 1e-9
#: Eigenvalues below ``RANK_RTOL * lambda_max`` count as zero when reporting rank.
RANK_RTOL = 1e-9


_A = TypeVar("_A", bound=NDArray[Any])


def frozen(a: _A) -> _A:
    """Return ``a`` made read-only (so that frozen dataclasses are really immutable)."""
    a.setflags(write=False)
    return a


def as_float_array(
    name: str,
    value: Any,
    *,
    ndim: int,
    shape: tuple[int | None, ...] | None = None,
    error: type[ValueError] = InvalidParametersError,
) -> FloatArray:
    """Convert ``value`` to a finite float64 array of ``ndim`` dimensions, or raise ``error``.

    ``shape`` entries that are ``None`` are free. The message names ``name`` and both shapes.
    """
    try:
        arr = np.array(value, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise error(f"{name}: expected a numeric {ndim}-d array, got {value!r} ({exc})") from None
    if ndim == 2 and arr.ndim == 0 and shape is not None and shape[0] == shape[1] == 1:
        arr = arr.reshape(1, 1)
    if ndim == 1 and arr.ndim == 0 and shape is not None and shape[0] == 1:
        arr = arr.reshape(1)
    if arr.ndim != ndim:
        raise error(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if shape is not None:
        for want, got in zip(shape, arr.shape, strict=True):
            if want is not None and want != got:
                expected = tuple("*" if s is None else s for s in shape)
                raise error(f"{name}: expected shape {expected}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise error(f"{name}: contains NaN or infinite entries")
    return arr


def as_positive_float(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Validate a strictly positive (finite unless ``allow_inf``) real number."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InvalidParametersError(f"{name}: expected a positive number, got {value!r}") from None
    if math.isnan(x) or x <= 0 or (math.isinf(x) and not allow_inf):
        raise InvalidParametersError(f"{name}: expected a positive number, got {value!r}")
    return x


def as_positive_int(name: str, value: Any) -> int:
    """Validate a strictly positive integer (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InvalidParametersError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def sym(a: FloatArray) -> FloatArray:
    """Symmetric part ``(a + aᵀ)/2``."""
    return 0.5 * (a + a.T)


def psd_sqrt(a: FloatArray) -> FloatArray:
    """Symmetric square root of a symmetric positive semi-definite matrix (eigenvalues clipped)."""
    w, u = np.linalg.eigh(sym(a))
    return (u * np.sqrt(np.clip(w, 0.0, None))) @ u.T


def psd_factor(a: FloatArray) -> FloatArray:
    """A square factor ``S`` with ``S Sᵀ = a`` for symmetric PSD ``a`` (eigen-based, any rank)."""
    w, u = np.linalg.eigh(sym(a))
    return u * np.sqrt(np.clip(w, 0.0, None))


def numerical_rank(a: FloatArray, rtol: float = RANK_RTOL) -> int:
    """Rank of a symmetric PSD matrix: eigenvalues above ``rtol * lambda_max`` (0 if zero)."""
    w = np.linalg.eigvalsh(sym(a))
    top = float(np.max(np.abs(w))) if w.size else 0.0
    if top == 0.0:
        return 0
    return int(np.sum(w > rtol * top))


@lru_cache(maxsize=64)
def _sym_index(d: int) -> tuple[tuple[NDArray[np.intp], NDArray[np.intp]], NDArray[np.intp]]:
    """Upper-triangle indices of a d×d matrix and, for every full entry, its packed position.

    Cached: computing ``triu_indices`` on every right-hand-side call dominated small-d runs.
    """
    iu = np.triu_indices(d)
    pos = np.empty((d, d), dtype=np.intp)
    pos[iu] = np.arange(iu[0].size)
    pos[(iu[1], iu[0])] = pos[iu]
    return iu, pos.ravel()


def sym_to_vec(a: FloatArray) -> FloatArray:
    """Upper triangle (row-major) of a symmetric matrix: each distinct entry stored once."""
    return a[_sym_index(a.shape[0])[0]]


def vec_to_sym(v: FloatArray, d: int) -> FloatArray:
    """Inverse of :func:`sym_to_vec` (one gather; the result is exactly symmetric)."""
    return v[_sym_index(d)[1]].reshape(d, d)


def numerical_ranks(stack: FloatArray, rtol: float = RANK_RTOL) -> NDArray[np.int_]:
    """:func:`numerical_rank` of every matrix in a ``(n, d, d)`` stack (one batched eigensolve)."""
    w = np.linalg.eigvalsh(0.5 * (stack + np.swapaxes(stack, -1, -2)))
    top = np.max(np.abs(w), axis=-1, keepdims=True)
    return np.sum((w > rtol * top) & (top > 0), axis=-1)


#: ``V`` counts as ``vI`` when it deviates from it by at most this, relative to ``|v|``.
SCALAR_RTOL = 1e-12


def identity_multiple(m: FloatArray) -> float | None:
    """``v`` if the square matrix ``m`` is ``vI`` (to ``1e-12 |v|`` entrywise), else ``None``."""
    d = m.shape[0]
    v = float(np.trace(m)) / d
    dev = float(np.max(np.abs(m - v * np.eye(d))))
    return v if dev <= SCALAR_RTOL * max(abs(v), np.finfo(float).tiny) else None
