"""The token-level velocity field: blocked, numerically stable softmax attention.

``N`` tokens ``x_i ∈ R^d`` with empirical measure ``μ = (1/N) Σ_j δ_{x_j}`` move with velocity
(docs/theory.md §1)

    v(x_i) = A x_i + b [+ W σ(U x_i + c)] + Σ_h V_h Attn_h(x_i; μ),
    Attn_h(x; μ) = Σ_j x_j e^{x_jᵀ B_h x} / Σ_j e^{x_jᵀ B_h x},

every token being both a query and a key; σ ∈ {identity, relu, gelu (exact erf form)}. The
integrators of :mod:`gtcontrol.model.tokens` move tokens with this field.

Cost
----
One evaluation of the field costs ``O(N² d)`` per head with ``B_h ≠ 0`` (every query meets every
key: two ``N×N×d`` products and ``N²`` exponentials) plus ``O(N d²)`` for the matrices. The
moment field costs ``O(d³)`` (three ``d×d`` products per head) independently of ``N``: at
``N = 4096``, ``d = 16`` one token evaluation is ~1e9 flops and 1.7e7 exponentials against ~1.2e4
flops for the moments (see ``benchmarks/bench_moments_vs_tokens.py``). A head with ``B_h = 0``
attends uniformly and is evaluated in ``O(N d)`` as the empirical mean.

Blocked, stable softmax
-----------------------
The ``N×N`` weights, let alone an ``N×N×d`` tensor, are never stored. Per head, ``Q = X B_hᵀ``
(row ``i`` is ``B_h x_i``, so ``logit_ij = q_i · x_j = x_jᵀ B_h x_i``), then query blocks of
``block_size`` rows are processed in one reused ``block_size × N`` buffer: ``L = Q_blk Xᵀ``,
``L -= max_j L`` (the log-sum-exp shift: every weight is in ``(0, 1]`` and the largest is exactly
1, so the denominator is ``≥ 1`` and nothing overflows for any finite logits),
``P = exp(L)``, ``Attn_blk = (P X) / (P 1)``. Memory is ``O(N d + block_size · N)``.

Factored heads
--------------
For a layer with factored heads (:meth:`~gtcontrol.model.params.Layer.from_projections`) keys,
queries and values are projected to ``d_head`` first, all heads in one product each:
``Q = s X W_Qᵀ``, ``K = X W_Kᵀ``, ``U = X W_Vᵀ`` (``N × H d_head``). Head ``h`` then runs the same
blocked softmax on its ``d_head`` columns, ``logit_ij = q_i · k_j = s (W_K,h x_j)ᵀ(W_Q,h x_i) =
x_jᵀ B_h x_i``, with values ``U_h``, and one product ``[Attn_1 … Attn_H] W_Oᵀ`` applies the
output projections. A head costs ``O(N² d_head)`` instead of ``O(N² d)``.

Reference: the paper cited in :mod:`gtcontrol`, §1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import erf

from .._linalg import FloatArray
from .._status import Budget
from .._validation import as_float_array, as_positive_int
from ..errors import InvalidParametersError
from .heads import FactoredHeads
from .params import Layer

__all__ = ["token_velocity"]

#: Default size of the ``block_size × N`` logits buffer. Block sizes from 2 MiB to 512 MiB of
#: buffer measured within noise of each other (``bench_tokens.py --sweep``); 64 MiB keeps the
#: Python loop short while bounding memory independently of N.
_BUFFER_BYTES = 64 * 2**20
#: Largest ``block_size`` accepted (query rows per block).
_MAX_BLOCK = 10**7
_SQRT_HALF = math.sqrt(0.5)

AnyArray = NDArray[Any]


# ---------------------------------------------------------------------------- the token field
def _gelu(z: AnyArray) -> AnyArray:
    # Exact GELU z Φ(z) = z (1 + erf(z/√2)) / 2 (not the tanh approximation).
    out: AnyArray = 0.5 * z * (1.0 + erf(z * _SQRT_HALF))
    return out


def _relu(z: AnyArray) -> AnyArray:
    return np.maximum(z, 0.0)


def _identity(z: AnyArray) -> AnyArray:
    return z


_ACTIVATION_FUNCS: dict[str, Callable[[AnyArray], AnyArray]] = {
    "identity": _identity,
    "relu": _relu,
    "gelu": _gelu,
}


@dataclass(frozen=True)
class _Prepared:
    """A layer's matrices, transposed for row-token products and cast to the working dtype."""

    a_t: AnyArray | None  # Aᵀ, None when A = 0
    b: AnyArray | None  # None when b = 0
    ffn: tuple[AnyArray, AnyArray, AnyArray, Callable[[AnyArray], AnyArray]] | None  # Uᵀ, c, Wᵀ
    mean_v_t: AnyArray | None  # (Σ_h V_h)ᵀ over heads with B_h = 0: they attend to the mean
    softmax_heads: tuple[tuple[AnyArray, AnyArray], ...]  # (B_hᵀ, V_hᵀ) with B_h ≠ 0, V_h ≠ 0
    noise_t: AnyArray | None  # Gᵀ of the layer's Brownian forcing (Layer.noise)
    # Factored softmax heads: (s W_Qᵀ, W_Kᵀ, W_Vᵀ) of shape (d, H' d_head), W_Oᵀ (H' d_head, d)
    # and d_head, over the H' heads with W_Q,h, W_K,h, W_V,h, W_O,h all non-zero.
    factored: tuple[AnyArray, AnyArray, AnyArray, AnyArray, int] | None = None


def _prepare(layer: Layer, dtype: np.dtype[Any]) -> _Prepared:
    def cast(a: FloatArray) -> AnyArray:
        return np.ascontiguousarray(a, dtype=dtype)

    ffn = None
    if layer.ffn is not None:
        f = layer.ffn
        ffn = (cast(f.U.T), cast(f.c), cast(f.W.T), _ACTIVATION_FUNCS[f.activation])
    mean_v: FloatArray | None = None
    soft = []
    factored = None
    fh = layer.factored_heads
    if fh is not None:
        mean_v, factored = _prepare_factored(fh, cast)
    for v_h, b_h in () if fh is not None else layer.heads:
        if not np.any(v_h):
            continue  # V_h = 0: the head contributes nothing
        if not np.any(b_h):
            # B_h = 0: every weight is e^0, attention is exactly the empirical mean.
            mean_v = v_h.copy() if mean_v is None else mean_v + v_h
        else:
            soft.append((cast(b_h.T), cast(v_h.T)))
    return _Prepared(
        a_t=cast(layer.A.T) if np.any(layer.A) else None,
        b=cast(layer.b) if np.any(layer.b) else None,
        ffn=ffn,
        mean_v_t=None if mean_v is None else cast(mean_v.T),
        softmax_heads=tuple(soft),
        noise_t=None if layer.noise is None else cast(layer.noise.T),
        factored=factored,
    )


def _prepare_factored(
    fh: FactoredHeads, cast: Callable[[FloatArray], AnyArray]
) -> tuple[FloatArray | None, tuple[AnyArray, AnyArray, AnyArray, AnyArray, int] | None]:
    """``(Σ V_h over uniform heads, (s W_Qᵀ, W_Kᵀ, W_Vᵀ, W_Oᵀ, d_head))`` of factored heads.

    A head with ``W_V,h = 0`` or ``W_O,h = 0`` contributes nothing; one with ``W_Q,h = 0`` or
    ``W_K,h = 0`` (``B_h = 0``) attends uniformly, to the empirical mean.
    """
    mean_v: FloatArray | None = None
    keep = []
    for h in range(fh.n_heads):
        if not (np.any(fh.v[h]) and np.any(fh.o[h])):
            continue
        if np.any(fh.q[h]) and np.any(fh.k[h]):
            keep.append(h)
        else:
            v_h = fh.o[h] @ fh.v[h]
            mean_v = v_h if mean_v is None else mean_v + v_h
    if not keep:
        return mean_v, None
    d, dh = fh.dim, fh.head_dim

    def stacked_t(a: FloatArray) -> AnyArray:  # (H', d_head, d) -> (d, H' d_head)
        return cast(a[keep].reshape(len(keep) * dh, d).T)

    o_t = cast(fh.o[keep].transpose(0, 2, 1).reshape(len(keep) * dh, d))
    return mean_v, (stacked_t(fh.q * fh.scale), stacked_t(fh.k), stacked_t(fh.v), o_t, dh)


class _Workspace:
    """The reused logits buffer, the evaluation counters and the budget of one simulation.

    Every field evaluation ticks ``budget`` (when given), so a spent time limit or evaluation
    cap raises :class:`~gtcontrol._status.BudgetExhausted` between two evaluations.
    """

    def __init__(
        self,
        n: int,
        dtype: np.dtype[Any],
        block_size: int | None,
        budget: Budget | None = None,
    ) -> None:
        if block_size is None:
            block_size = _BUFFER_BYTES // (n * dtype.itemsize)
        self.block = int(min(max(block_size, 1), n))
        self.dtype = dtype
        self.n = n
        self.budget = budget
        self._buf: AnyArray | None = None  # allocated on the first softmax head
        self.n_velocity = 0
        self.n_attention = 0

    @property
    def buffer(self) -> AnyArray:
        """The ``block × N`` logits buffer (allocated on first use)."""
        if self._buf is None:
            self._buf = np.empty((self.block, self.n), dtype=self.dtype)
        return self._buf


def _attention(x: AnyArray, b_t: AnyArray, work: _Workspace) -> AnyArray:
    """Softmax attention of every token over all tokens, blocked over queries (stable)."""
    # Row i of the queries is B x_i, so (q xᵀ)_ij = x_jᵀ B x_i; the values are the tokens.
    return _softmax(x @ b_t, x.T, x, work)


def _softmax(q: AnyArray, k_t: AnyArray, values: AnyArray, work: _Workspace) -> AnyArray:
    """``softmax_j(q_i · k_j)``-weighted rows of ``values``, blocked over queries (stable)."""
    n = q.shape[0]
    out = np.empty((n, values.shape[1]), dtype=values.dtype)
    buf = work.buffer
    for s in range(0, n, work.block):
        e = min(s + work.block, n)
        logits = buf[: e - s]
        np.matmul(q[s:e], k_t, out=logits)
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        den = logits.sum(axis=1)
        np.matmul(logits, values, out=out[s:e])
        out[s:e] /= den[:, None]
    work.n_attention += 1
    return out


def _factored_attention(
    x: AnyArray, fac: tuple[AnyArray, AnyArray, AnyArray, AnyArray, int], work: _Workspace
) -> AnyArray:
    """``Σ_h W_O,h W_V,h Attn_h(x_i)`` for factored heads: softmax in ``d_head`` dimensions."""
    q_t, k_t, v_t, o_t, dh = fac
    xq, xk, xv = x @ q_t, x @ k_t, x @ v_t  # (N, H' d_head): every head in one product
    att = np.empty_like(xv)
    for s in range(0, xq.shape[1], dh):
        cols = slice(s, s + dh)
        keys_t = np.ascontiguousarray(xk[:, cols].T)
        att[:, cols] = _softmax(
            np.ascontiguousarray(xq[:, cols]), keys_t, np.ascontiguousarray(xv[:, cols]), work
        )
    out: AnyArray = att @ o_t
    return out


def _velocity(p: _Prepared, x: AnyArray, work: _Workspace) -> AnyArray:
    """``v(x_i) = A x_i + b + W σ(U x_i + c) + Σ_h V_h Attn_h(x_i; μ)`` for all tokens (rows)."""
    if work.budget is not None:
        work.budget.tick()
    out = x @ p.a_t if p.a_t is not None else np.zeros_like(x)
    if p.b is not None:
        out += p.b
    if p.ffn is not None:
        u_t, c, w_t, act = p.ffn
        out += act(x @ u_t + c) @ w_t
    if p.mean_v_t is not None:
        out += x.mean(axis=0) @ p.mean_v_t
    for b_t, v_t in p.softmax_heads:
        out += _attention(x, b_t, work) @ v_t
    if p.factored is not None:
        out += _factored_attention(x, p.factored, work)
    work.n_velocity += 1
    return out


def _check_tokens(tokens: Any, d: int) -> FloatArray:
    x = as_float_array("tokens", tokens, ndim=2)
    if x.shape[0] < 1 or x.shape[1] != d:
        raise InvalidParametersError(
            f"tokens: expected shape (N, {d}) with N >= 1 and {d} the model dimension, "
            f"got shape {x.shape}"
        )
    return x


def token_velocity(layer: Layer, tokens: Any, *, block_size: int | None = None) -> FloatArray:
    """The token-level velocity of every token under one layer (float64).

    ``v(x_i) = A x_i + b + W σ(U x_i + c) + Σ_h V_h Attn_h(x_i; μ)`` with
    ``Attn_h(x; μ) = Σ_j x_j e^{x_jᵀ B_h x} / Σ_j e^{x_jᵀ B_h x}`` over the empirical measure
    ``μ`` of ``tokens`` (docs/theory.md §1; Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026)).
    Softmax is evaluated by blocks of queries with the log-sum-exp shift, so it is finite for
    any finite logits; ``O(N² d)`` work per head (``O(N² d_head)`` for factored heads, whose keys
    and queries are projected first), ``O(N d + block_size · N)`` memory.

    Parameters
    ----------
    layer
        The layer; any feed-forward activation (identity, relu, gelu) is allowed.
    tokens
        Finite array ``(N, d)``, ``N ≥ 1``, ``d = layer.dim``.
    block_size
        Query rows per attention block, at most ``10**7``; ``None`` (default) fills a 64 MiB
        ``block_size × N`` buffer. The result does not depend on it beyond round-off.

    Returns
    -------
    numpy.ndarray
        Velocities ``(N, d)``.

    Raises
    ------
    InvalidParametersError
        If ``layer`` is not a Layer, ``tokens`` is malformed, or ``block_size`` is not a
        positive integer up to ``10**7``.

    Examples
    --------
    With ``B = 0`` every token attends uniformly: the velocity is ``v · mean``.

    >>> import numpy as np
    >>> from gtcontrol import Layer, token_velocity
    >>> token_velocity(Layer(v=2.0, dim=1), np.array([[1.0], [3.0]]))
    array([[4.],
           [4.]])
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    x = _check_tokens(tokens, layer.dim)
    if block_size is not None:
        as_positive_int("block_size", block_size, maximum=_MAX_BLOCK)
    work = _Workspace(x.shape[0], np.dtype(np.float64), block_size)
    return _velocity(_prepare(layer, work.dtype), x, work)
