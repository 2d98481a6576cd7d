"""Private kernels of token attention: the tiled softmax in numpy and what the backends share.

The softmax ``Attn_i = Σ_j v_j e^{q_i·k_j} / Σ_j e^{q_i·k_j}`` is computed by tiles of
``rows × cols`` logits (queries × keys) small enough to stay in a core's cache (256 KiB: 128 ×
256 in float64), so the exponential runs on cached data and never on an ``N``-wide buffer
streamed through memory. Per tile there are three passes and no more: a GEMM for the logits,
``exp`` in place, and a GEMM ``P [V 1]`` that accumulates numerator and denominator at once (a
column of ones appended to the values). Query blocks are shared by a few threads. Memory is
``O(N d + threads · rows · cols)``, independent of ``N²``.

Shift-free when safe, exact row maximum otherwise
-------------------------------------------------
The log-sum-exp shift ``e^{l - max_j l}`` exists to keep ``exp`` finite; it changes nothing
else, because it cancels between numerator and denominator. By Cauchy–Schwarz every logit of
row ``i`` satisfies ``|q_i · k_j| ≤ β_i = |q_i| max_j |k_j|``. When ``β_i ≤ U`` with

    U = min(ln(max) − ln N − ln max(1, max|v|) − 2,   −ln(tiny) − ln 2^{p} − 2)

(``max``, ``tiny``: the largest and the smallest normal number of the dtype, ``p`` its
significand bits; ``U ≈ 670`` in float64, ``≈ 69`` in float32, less for large ``N`` or values),
the unshifted sums ``Σ_j e^{l_ij} |v_j|`` cannot overflow, and every weight within ``2^{-p}`` of
the row's largest one is a normal number, so dropping the shift loses nothing beyond round-off
(the shifted reference itself rounds ``l − max`` to ``ε |l|``). A query block with any row over
the bound takes two passes instead: the exact row maximum ``m_i`` (GEMM and ``max`` per tile),
then the shifted logits ``l_ij − m_i`` from one GEMM of the augmented ``[q_i, −m_i]·[k_j; 1]``,
so every weight lies in ``(0, 1]``, the largest is 1 and nothing overflows for finite logits.

Reference: Milakov, Gimelshein, *Online normalizer calculation for softmax*, arXiv:1805.02867
(2018); Dao et al., *FlashAttention*, NeurIPS 2022 (tiling the softmax to stay in fast memory).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._jobs import cpus

AnyArray = NDArray[Any]

__all__ = [
    "BACKENDS",
    "TilePlan",
    "auto_backend",
    "numpy_softmax",
    "tile_plan",
    "unshifted_rows",
    "with_ones",
    "workers",
]

#: Backends of ``token_velocity(backend=...)``.
BACKENDS = ("auto", "numpy", "torch")
#: Logits per tile on a CPU: 256 KiB of float64, 128 queries × 256 keys. Small tiles keep the
#: logits in L2 for ``exp`` and both GEMMs, and keep each GEMM small enough that OpenBLAS runs
#: it on the calling thread, so no call waits at a BLAS thread barrier (docs/benchmarks.md). A
#: ``block_size`` above 128 makes tiles of ``block_size × 256`` logits, which OpenBLAS may
#: thread. Parallelism comes from :func:`workers`.
CPU_TILE = 2**15
#: Query rows and logits per tile of the numpy kernel when numpy's BLAS runs on one thread
#: (``threadpoolctl`` tells; :func:`gtcontrol.experiments.stabilize_model` sets it): 256 × 512.
#: No GEMM is threaded by OpenBLAS then, so a larger tile costs no barrier, and 2**17 logits
#: (0.5 MiB in float32, 1 MiB in float64) still fit a 2 MiB L2 (docs/benchmarks.md).
CPU_SINGLE_ROWS = 256
CPU_SINGLE_TILE = 2**17
#: Logits per tile with torch: 2 MiB of float64 on a CPU (torch's per-call overhead is higher
#: than numpy's), 256 MiB on a GPU (few enough kernel launches to hide their cost).
TORCH_CPU_TILE = 2**18
GPU_TILE = 2**25
#: Default query rows per block: numpy on a CPU, torch on a CPU, torch on a GPU.
CPU_ROWS = 128
TORCH_CPU_ROWS = 256
GPU_ROWS = 4096
#: Threads sharing the query blocks of the numpy kernel: ``None`` for the CPUs this process may
#: use (at most :data:`MAX_WORKERS`); benchmarks set it to compare equal thread counts.
WORKERS: int | None = None
MAX_WORKERS = 8
#: Smallest key tile (unless N is smaller), so that a tiny ``block_size`` keeps wide GEMMs.
MIN_COLS = 256
#: Smallest N for which ``backend="auto"`` sends the attention to a CUDA device.
AUTO_CUDA_MIN_N = 2048


@dataclass(frozen=True)
class TilePlan:
    """Query rows per block and keys per tile of one attention evaluation."""

    rows: int
    cols: int


def tile_plan(
    n: int, block_size: int | None, *, device: str = "numpy", single_threaded_blas: bool = False
) -> TilePlan:
    """The tiles for ``n`` tokens on ``device`` (``"numpy"``, ``"cpu"`` (torch) or ``"cuda"``).

    ``block_size`` query rows (default 128, 256 with numpy on a single-threaded BLAS or torch on
    a CPU, 4096 on a GPU) and ``max(256, tile / rows)`` keys, both at most ``n``.
    """
    rows0, tile = {
        "numpy": (
            (CPU_SINGLE_ROWS, CPU_SINGLE_TILE) if single_threaded_blas else (CPU_ROWS, CPU_TILE)
        ),
        "cpu": (TORCH_CPU_ROWS, TORCH_CPU_TILE),
        "cuda": (GPU_ROWS, GPU_TILE),
    }[device]
    rows = int(min(max(rows0 if block_size is None else block_size, 1), n))
    cols = int(min(n, max(MIN_COLS, tile // rows)))
    return TilePlan(rows, cols)


def shift_free_bound(n: int, dtype: np.dtype[Any], value_max: float) -> float:
    """``U``: rows whose logits are all within ``±U`` need no log-sum-exp shift (module doc)."""
    fi = np.finfo(dtype)
    upper = math.log(float(fi.max)) - math.log(n) - math.log(max(1.0, value_max)) - 2.0
    lower = -math.log(float(fi.smallest_normal)) - (fi.nmant + 1) * math.log(2.0) - 2.0
    return min(upper, lower)


def unshifted_rows(q: AnyArray, k_t: AnyArray, values: AnyArray) -> AnyArray:
    """Boolean per query: ``|q_i| max_j |k_j| ≤ U``, so ``e^{q_i·k_j}`` needs no shift."""
    with np.errstate(over="ignore", invalid="ignore"):
        # squares summed in float64 without a float64 copy of q and k (einsum casts in
        # buffered chunks): two fresh d × N copies cost more than the sums at d = 385
        q_norm = np.sqrt(np.einsum("ij,ij->i", q, q, dtype=np.float64))
        k_max = float(np.sqrt(np.max(np.einsum("ij,ij->j", k_t, k_t, dtype=np.float64))))
        v_max = float(np.max(np.abs(values))) if values.size else 0.0
        bound = shift_free_bound(k_t.shape[1], q.dtype, v_max)
        ok: AnyArray = q_norm * k_max <= bound  # NaN and inf compare False: shift those rows
    return ok


def auto_backend(n: int) -> str:
    """``"torch"`` when torch sees a CUDA device and ``n ≥ 2048``, else ``"numpy"``.

    On a CPU ``"auto"`` never takes torch: with one thread torch's float64 is only ~20 % faster
    than numpy here (its MKL GEMMs; benchmarks/bench_attention.py), its intra-op threads stall
    for seconds on a busy machine (per-tile barriers), and loading torch's OpenMP runtime next
    to OpenBLAS's threads slows numpy's BLAS elsewhere in the process
    (gtcontrol._blas.single_threaded_blas). Torch is imported only when it is
    installed and an NVIDIA driver is present, or when the caller has imported it already.
    """
    if n < AUTO_CUDA_MIN_N:
        return "numpy"
    torch = sys.modules.get("torch")
    if torch is None:
        driver = os.path.exists("/proc/driver/nvidia/version")
        if not driver or importlib.util.find_spec("torch") is None:
            return "numpy"
        try:
            torch = importlib.import_module("torch")
        except ImportError:  # pragma: no cover - a broken torch install
            return "numpy"
    try:
        cuda = bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - a torch build whose CUDA probe fails
        cuda = False
    return "torch" if cuda else "numpy"


# ---------------------------------------------------------------------------- numpy kernel
def _tile(buf: AnyArray, rows: int, cols: int) -> AnyArray:
    """A contiguous ``rows × cols`` view of the flat tile buffer (BLAS writes it directly)."""
    return buf[: rows * cols].reshape(rows, cols)


def _row_max(q: AnyArray, k_t: AnyArray, buf: AnyArray, cols: int) -> AnyArray:
    """``max_j q_i · k_j`` for every row of ``q``, by tiles of keys."""
    m = np.full(q.shape[0], -np.inf, dtype=q.dtype)
    n_keys = k_t.shape[1]
    for c in range(0, n_keys, cols):
        t = _tile(buf, q.shape[0], min(cols, n_keys - c))
        np.matmul(q, k_t[:, c : c + cols], out=t)
        np.maximum(m, t.max(axis=1), out=m)
    return m


def _accumulate(
    q: AnyArray, k_t: AnyArray, v1: AnyArray, buf: AnyArray, cols: int, acc: AnyArray
) -> None:
    """``acc = Σ_j e^{q_i·k_j} [v_j, 1]`` over key tiles (logits GEMM, exp, GEMM per tile)."""
    n_keys = k_t.shape[1]
    part = np.empty_like(acc) if n_keys > cols else acc
    for c in range(0, n_keys, cols):
        t = _tile(buf, q.shape[0], min(cols, n_keys - c))
        np.matmul(q, k_t[:, c : c + cols], out=t)
        np.exp(t, out=t)
        if c == 0:
            np.matmul(t, v1[c : c + cols], out=acc)
        else:
            np.matmul(t, v1[c : c + cols], out=part)
            acc += part


def with_ones(values: AnyArray) -> AnyArray:
    """``[values, 1]``: one GEMM then gives the softmax numerator and its denominator."""
    v1 = np.empty((values.shape[0], values.shape[1] + 1), dtype=values.dtype)
    v1[:, :-1] = values
    v1[:, -1] = 1.0
    return v1


@dataclass(frozen=True)
class _Problem:
    """One softmax evaluation, shared read-only by the worker threads."""

    q: AnyArray
    k_t: AnyArray
    k_aug: AnyArray | None  # [kᵀ; 1] when some block needs the shift
    v1: AnyArray
    free: AnyArray
    plan: TilePlan
    acc: AnyArray  # (N, d_v + 1), each block writes its own rows
    check: Callable[[], None] | None = None  # raises to stop between query blocks


_LOCAL = threading.local()


def _thread_buffer(size: int, dtype: np.dtype[Any]) -> AnyArray:
    """This thread's flat tile buffer (reused between calls; grown when too small)."""
    buf: AnyArray | None = getattr(_LOCAL, "buf", None)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = np.empty(size, dtype=dtype)
        _LOCAL.buf = buf
    return buf


def _run_block(p: _Problem, s: int) -> None:
    """Rows ``s : s + rows`` of the accumulator: shift-free, or exact row max then shifted."""
    if p.check is not None:
        p.check()  # a spent budget stops the evaluation between two query blocks
    e = min(s + p.plan.rows, p.q.shape[0])
    buf = _thread_buffer(p.plan.rows * p.plan.cols, p.q.dtype)
    # numpy's error state is per thread: set it here. Overflow and invalid values only arise from
    # logits beyond the dtype's range (tokens leaving it); the non-finite output is what the
    # token integrators detect and report, so numpy's warning would only repeat it.
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        if p.k_aug is None or p.free[s:e].all():
            _accumulate(p.q[s:e], p.k_t, p.v1, buf, p.plan.cols, p.acc[s:e])
            return
        q_aug = np.empty((e - s, p.q.shape[1] + 1), dtype=p.q.dtype)
        q_aug[:, :-1] = p.q[s:e]
        q_aug[:, -1] = -_row_max(p.q[s:e], p.k_t, buf, p.plan.cols)
        _accumulate(q_aug, p.k_aug, p.v1, buf, p.plan.cols, p.acc[s:e])


_POOL: list[ThreadPoolExecutor] = []  # one pool per process, created on first use


def workers() -> int:
    """Threads that share the query blocks: :data:`WORKERS`, or the CPUs this process may use
    right now (:func:`gtcontrol._jobs.cpus`: its affinity, or a cluster worker's share of the
    cores plus those idle), at most :data:`MAX_WORKERS`. Asked at every call: workers of a
    map that each split their blocks over every core would oversubscribe the cores, and the
    last worker running takes the cores the others left (docs/benchmarks.md)."""
    if WORKERS is not None:
        return max(1, WORKERS)
    return max(1, min(cpus(), MAX_WORKERS))


def numpy_softmax(
    q: AnyArray,
    k_t: AnyArray,
    values: AnyArray,
    plan: TilePlan,
    check: Callable[[], None] | None = None,
) -> AnyArray:
    """``Σ_j v_j e^{q_i·k_j} / Σ_j e^{q_i·k_j}`` for every query row, tiled (module doc).

    Query blocks are shared among :func:`workers` threads (numpy releases the GIL in ``matmul``
    and ``exp``); each thread reuses its own tile buffer. ``check`` is called before every
    query block (``O(rows · N · d)`` work, milliseconds): an exception it raises (a spent
    :class:`~gtcontrol._status.Budget`) ends the evaluation there, so no single evaluation
    outlasts a time limit by more than a block.
    """
    n = q.shape[0]
    v1 = with_ones(values)
    free = unshifted_rows(q, k_t, values)
    k_aug = None
    if not free.all():
        k_aug = np.vstack([k_t, np.ones((1, k_t.shape[1]), dtype=q.dtype)])
    acc = np.empty((n, v1.shape[1]), dtype=q.dtype)
    prob = _Problem(q, k_t, k_aug, v1, free, plan, acc, check)
    starts = range(0, n, plan.rows)
    n_workers = min(workers(), len(starts))
    if n_workers <= 1:
        for s in starts:
            _run_block(prob, s)
    else:
        if not _POOL or _POOL[0]._max_workers < n_workers:
            _POOL[:] = [ThreadPoolExecutor(n_workers, thread_name_prefix="gtcontrol-attn")]
        for _ in _POOL[0].map(partial(_run_block, prob), starts):
            pass
    out: AnyArray = acc[:, :-1] / acc[:, -1:]
    return out
