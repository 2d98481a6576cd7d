"""The token-level velocity field: tiled, numerically stable softmax attention.

``N`` tokens ``x_i ∈ R^d`` with empirical measure ``μ = (1/N) Σ_j δ_{x_j}`` move with velocity
(docs/theory.md §1)

    v(x_i) = A x_i + b [+ W_out σ(W_in x_i + b_in)] + Σ_h V_h Attn_h(x_i; μ),
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

Tiled, stable softmax
---------------------
The ``N×N`` weights, let alone an ``N×N×d`` tensor, are never stored. Per head, ``Q = X B_hᵀ``
(row ``i`` is ``B_h x_i``, so ``logit_ij = q_i · x_j = x_jᵀ B_h x_i``), then tiles of
``block_size`` queries × ``cols`` keys (128 × 256 by default: 256 KiB, in cache) are processed
in a reused buffer: ``L = Q_blk X_colsᵀ``, ``P = exp(L)``, ``acc += P [X_cols 1]`` (numerator and
denominator from one GEMM), and ``Attn_blk = acc[:, :d] / acc[:, d]``. The log-sum-exp shift is
skipped where a Cauchy–Schwarz bound proves it unnecessary (``|q_i| max_j |x_j| ≤ U ≈ 670`` in
float64); a query block with a larger bound first takes its exact row maximum ``m_i`` and then
exponentiates ``L − m_i`` (every weight in ``(0, 1]``, nothing overflows for finite logits). The
rule, its bound and the kernel are in :mod:`gtcontrol.model._attention_kernels`. Memory is
``O(N d + threads · block_size · cols)``, independent of ``N²``; query blocks are shared by
one thread per CPU (at most 8; numpy releases the GIL in its GEMMs and ``exp``).

Backends
--------
``backend="numpy"`` runs the tiles with numpy, the query blocks shared by one thread per CPU:
numpy releases the GIL in its GEMMs and ``exp``, and every tile's GEMMs are small enough that
OpenBLAS runs them unthreaded, so no thread waits at a BLAS barrier on a busy machine.
``backend="torch"`` runs the same algorithm with torch (optional: the ``experiments`` extra), on
the first CUDA device when torch sees one, else on the CPU with torch's intra-op threads; the
two agree to round-off (``~1e-15`` relative in float64; tests/model/test_attention.py asserts
1e-13).
``"auto"`` (default) takes torch on CUDA for ``N ≥ 2048`` and numpy otherwise
(``auto_backend``): on one CPU thread torch's float64 is ~20 % faster (its MKL GEMMs), but its
threads stall on a busy machine and importing torch next to OpenBLAS slows numpy's BLAS.

Measured by ``benchmarks/bench_attention.py`` at ``N = 16,384``, ``d = 16`` on a loaded 2-core
machine, as a fraction of the best float64 GEMM rate of the same products in the same process
(flops ``4 N² d`` per head): one thread, numpy 0.56 (16.6 of 30.4 GF/s), torch 0.69, the former
``block × N``-buffer kernel 0.15; two threads, numpy 0.45 (21.4 of 47.3 GF/s), former 0.09.

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

from .._blas import blas_single_threaded
from .._linalg import FloatArray
from .._status import Budget
from .._validation import (
    as_choice,
    as_float_array,
    as_float_dtype,
    as_positive_int,
    option_values,
    set_fields,
)
from ..errors import InvalidParametersError
from ._attention_kernels import BACKENDS, auto_backend, numpy_softmax, tile_plan
from .heads import FactoredHeads
from .params import Layer

__all__ = ["token_velocity"]

#: Largest ``block_size`` accepted (query rows per block).
MAX_BLOCK = 10**7
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
class PreparedLayer:
    """A layer's matrices, transposed for row-token products and cast to the working dtype."""

    a_t: AnyArray | None  # Aᵀ, None when A = 0
    b: AnyArray | None  # None when b = 0
    ffn: tuple[AnyArray, AnyArray, AnyArray, Callable[[AnyArray], AnyArray]] | None  # Uᵀ, c, Wᵀ
    mean_v_t: AnyArray | None  # (Σ_h V_h)ᵀ over heads with B_h = 0: they attend to the mean
    # (B_hᵀ, V_hᵀ) with B_h ≠ 0, V_h ≠ 0; V_hᵀ as its diagonal (1-D) when V_h is diagonal
    softmax_heads: tuple[tuple[AnyArray, AnyArray], ...]
    noise_t: AnyArray | None  # Gᵀ of the layer's Brownian forcing (Layer.noise)
    # Factored softmax heads: (s W_Qᵀ, W_Kᵀ, W_Vᵀ) of shape (d, H' d_head), W_Oᵀ (H' d_head, d)
    # and d_head, over the H' heads with W_Q,h, W_K,h, W_V,h, W_O,h all non-zero.
    factored: tuple[AnyArray, AnyArray, AnyArray, AnyArray, int] | None = None


def prepare_layer(layer: Layer, dtype: np.dtype[Any]) -> PreparedLayer:
    def cast(a: FloatArray) -> AnyArray:
        return np.ascontiguousarray(a, dtype=dtype)

    ffn = None
    if layer.ffn is not None:
        f = layer.ffn
        ffn = (cast(f.W_in.T), cast(f.b_in), cast(f.W_out.T), _ACTIVATION_FUNCS[f.activation])
    mean_v: FloatArray | None = None
    soft = []
    factored = None
    fh = layer.factored_heads
    if fh is not None:
        mean_v, factored = _prepare_factored(fh, cast)
    for v_h, b_h in layer.dense_heads:
        if not np.any(v_h):
            continue  # V_h = 0: the head contributes nothing
        if not np.any(b_h):
            # B_h = 0: every weight is e^0, attention is exactly the empirical mean.
            mean_v = v_h.copy() if mean_v is None else mean_v + v_h
        else:
            diag = np.diagonal(v_h)
            # a diagonal V_h (stabilize's added head −s c P) scales rows: O(N d), not a GEMM
            diagonal = np.count_nonzero(v_h) == np.count_nonzero(diag)
            soft.append((cast(b_h.T), cast(diag) if diagonal else cast(v_h.T)))
    return PreparedLayer(
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


class Workspace:
    """The tiling, the evaluation counters, the budget and the attention backend of a run.

    Every field evaluation ticks ``budget`` (when given), so a spent time limit or evaluation
    cap raises :class:`~gtcontrol._status.BudgetExhausted` between two evaluations.
    ``backend`` is ``"numpy"`` (default), ``"torch"`` or ``"auto"`` (:func:`auto_backend`);
    ``block`` is the number of query rows per tile, ``key_block`` the number of keys.
    """

    def __init__(
        self,
        n: int,
        dtype: np.dtype[Any],
        block_size: int | None,
        budget: Budget | None = None,
        *,
        backend: str = "numpy",
    ) -> None:
        self.dtype = np.dtype(dtype)
        self.n = n
        self.budget = budget
        as_choice("backend", backend, BACKENDS)
        self.backend = auto_backend(n) if backend == "auto" else backend
        self._torch_softmax: Any = None
        if self.backend == "torch":
            from ._attention_torch import TorchSoftmax, load_torch

            torch = load_torch()
            if torch is None:
                raise InvalidParametersError(
                    "backend: 'torch' needs the torch package, which is not importable; "
                    "install the experiments extra (pip install 'gtcontrol[experiments]') or "
                    "use backend='numpy'"
                )
            self._torch_softmax = TorchSoftmax(torch, n, block_size, self.dtype)
            plan = self._torch_softmax.plan
        else:
            # larger tiles when no GEMM of a tile can be threaded by BLAS (CPU_SINGLE_TILE);
            # BLAS is asked (milliseconds: threadpoolctl scans the loaded libraries) only when
            # the two plans differ, not for a short sequence that one tile holds either way
            plan = tile_plan(n, block_size)
            single = tile_plan(n, block_size, single_threaded_blas=True)
            if single != plan and blas_single_threaded():
                plan = single
        self.plan = plan
        self.block = plan.rows
        self.key_block = plan.cols
        self.n_velocity = 0
        self.n_attention = 0


def _attention(x: AnyArray, b_t: AnyArray, work: Workspace) -> AnyArray:
    """Softmax attention of every token over all tokens, tiled (stable)."""
    # Row i of the queries is B x_i, so (q xᵀ)_ij = x_jᵀ B x_i; the values are the tokens.
    return _softmax(x @ b_t, np.ascontiguousarray(x.T), x, work)


def _softmax(q: AnyArray, k_t: AnyArray, values: AnyArray, work: Workspace) -> AnyArray:
    """``softmax_j(q_i · k_j)``-weighted rows of ``values``, tiled (stable), on the backend."""
    if work._torch_softmax is not None:
        out: AnyArray = work._torch_softmax(q, k_t, values)
    else:
        check = None if work.budget is None else work.budget.check
        out = numpy_softmax(q, k_t, values, work.plan, check)
    work.n_attention += 1
    return out


def _factored_attention(
    x: AnyArray, fac: tuple[AnyArray, AnyArray, AnyArray, AnyArray, int], work: Workspace
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


def prepared_velocity(p: PreparedLayer, x: AnyArray, work: Workspace) -> AnyArray:
    """``v(x_i) = A x_i + b + W_out σ(W_in x_i + b_in) + Σ_h V_h Attn_h(x_i; μ)``, every token
    (rows)."""
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
        att = _attention(x, b_t, work)
        out += att * v_t if v_t.ndim == 1 else att @ v_t
    if p.factored is not None:
        out += _factored_attention(x, p.factored, work)
    work.n_velocity += 1
    return out


def check_tokens(tokens: Any, d: int) -> FloatArray:
    x = as_float_array("tokens", tokens, ndim=2)
    if x.shape[0] < 1 or x.shape[1] != d:
        raise InvalidParametersError(
            f"tokens: expected shape (N, {d}) with N >= 1 and {d} the model dimension, "
            f"got shape {x.shape}"
        )
    return x


@dataclass(frozen=True, kw_only=True)
class _VelocityOptions:
    """The validated options of :func:`token_velocity` (documented there)."""

    block_size: int | None = None
    backend: str = "auto"
    dtype: Any = np.float64

    def __post_init__(self) -> None:
        if self.block_size is not None:
            as_positive_int("block_size", self.block_size, maximum=MAX_BLOCK)
        as_choice("backend", self.backend, BACKENDS)
        set_fields(self, dtype=as_float_dtype("dtype", self.dtype))


def token_velocity(
    layer: Layer,
    tokens: Any,
    *,
    block_size: int | None = None,
    backend: str = "auto",
    dtype: Any = np.float64,
) -> FloatArray:
    """The token-level velocity of every token under one layer.

    ``v(x_i) = A x_i + b + W_out σ(W_in x_i + b_in) + Σ_h V_h Attn_h(x_i; μ)`` with
    ``Attn_h(x; μ) = Σ_j x_j e^{x_jᵀ B_h x} / Σ_j e^{x_jᵀ B_h x}`` over the empirical measure
    ``μ`` of ``tokens`` (docs/theory.md §1; Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026)).
    Softmax is evaluated by cache-sized tiles of queries × keys, with the log-sum-exp shift
    wherever the logits could overflow, so it is finite for any finite logits; ``O(N² d)`` work
    per head (``O(N² d_head)`` for factored heads, whose keys and queries are projected first),
    ``O(N d + block_size · key tile)`` memory (module docstring).

    Parameters
    ----------
    layer
        The layer; any feed-forward activation (identity, relu, gelu) is allowed.
    tokens
        Finite array ``(N, d)``, ``N ≥ 1``, ``d = layer.dim``.
    block_size
        Query rows per attention tile, at most ``10**7``; ``None`` (default): 128 (256 with
        torch on a CPU, 4096 on a GPU). The key tile holds ``max(256, 2**15 / block_size)``
        keys (``2**18`` with torch on a CPU, ``2**25`` on a GPU), at most ``N``. The result
        does not depend on it beyond round-off.
    backend
        ``"auto"`` (default), ``"numpy"`` or ``"torch"``. ``"torch"`` needs torch (the
        ``experiments`` extra) and uses its first CUDA device when there is one; ``"auto"``
        uses torch only on CUDA and for ``N ≥ 2048``. Backends agree to round-off.
    dtype
        ``numpy.float64`` (default) or ``numpy.float32``: the working and returned precision.
        float32 is about twice as fast and accurate to ~1e-6 relative.

    Returns
    -------
    numpy.ndarray
        Velocities ``(N, d)`` in ``dtype``.

    Raises
    ------
    InvalidParametersError
        If ``layer`` is not a Layer, ``tokens`` is malformed, ``block_size`` is not a
        positive integer up to ``10**7``, ``backend`` or ``dtype`` is not one of the choices,
        or ``backend="torch"`` without torch installed.

    Examples
    --------
    With ``B = 0`` every token attends uniformly: the velocity is ``v · mean``.

    >>> import numpy as np
    >>> from gtcontrol import Layer, token_velocity
    >>> token_velocity(Layer(V=2.0, dim=1), np.array([[1.0], [3.0]]))
    array([[4.],
           [4.]])
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    opts = _VelocityOptions(**option_values(_VelocityOptions, locals()))
    x = check_tokens(tokens, layer.dim).astype(opts.dtype, copy=False)
    work = Workspace(x.shape[0], opts.dtype, opts.block_size, backend=opts.backend)
    return prepared_velocity(prepare_layer(layer, work.dtype), x, work)
