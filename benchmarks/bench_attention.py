"""Token attention against the machine's float64 matmul rate (issue 13 item 4), in one process.

What is measured
----------------
* **Attention rate.** One softmax head, ``token_velocity(Layer(B=B, V=1), x)`` with ``x`` of
  shape ``(N, d)``, counted the standard way: ``2 N² d`` flops for the logits ``Q Kᵀ`` plus
  ``2 N² d`` for the weighted sum ``P V``, i.e. ``4 N² d`` per head. The ``N²`` exponentials, the
  ``2 N²`` flops of the denominator column and the ``O(N d²)`` projections are *not* counted: they
  are work the kernel must do on top of the matmuls, so the ratio below is what fraction of
  pure-GEMM speed the whole softmax reaches.
* **Machine matmul rate.** float64 GEMMs of exactly the shapes the attention needs, with no
  softmax in between: ``(r × d)·(d × c)`` then ``(r × c)·(c × (d+1))`` over all ``N/r × N/c``
  tiles, for the kernel's own tile ``128 × 256``, ``64 × 256`` and wider blocks (``256 × 1024``,
  ``1024 × N``), with numpy's BLAS (query blocks shared by as many threads as the kernel uses)
  and, when installed, torch's (MKL in the x86 wheels; torch's own threads); the machine rate
  is the best of them in each repeat (the honest denominator: the fastest float64 GEMM this
  process has for these products). A square ``1024³`` GEMM is printed for context only (it
  runs at the BLAS's peak, which thin ``K = d`` products cannot reach).
* **Baselines.** The former kernel (query blocks × all keys in a 64 MiB buffer, max-shifted,
  commit 01381d6), copied here, and the torch backend (float64 and float32) when installed.

Every repeat times every candidate once (interleaved, so load changes hit all of them), and
the ratios are medians of per-repeat ratios. Thread counts: ``--threads k`` pins BLAS
(threadpoolctl), torch and the numpy kernel's worker threads to ``k`` for everything, GEMM
baselines included; without it every library keeps its defaults (one worker per CPU).

* ``--big-n`` (262,144): one evaluation's time and peak memory (tracemalloc: arrays allocated
  during the call; ru_maxrss: the process's resident peak).
* ``--sweep``: time by tile shape at ``--n``.

Run: ``.venv/bin/python benchmarks/bench_attention.py [--n 16384] [--d 16] [--repeats 5]
[--threads 1] [--big-n 262144 | --big-n 0] [--sweep] [--no-torch]``
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

from gtcontrol import Layer, token_velocity
from gtcontrol.model import _attention_kernels as kern

try:
    import torch
except ImportError:  # pragma: no cover - optional
    torch = None


def _former_softmax(q: np.ndarray, k_t: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The kernel before this change: ``block × N`` logits buffer of 64 MiB, max-shifted."""
    n = q.shape[0]
    block = max(1, min(n, 64 * 2**20 // (n * 8)))
    buf = np.empty((block, k_t.shape[1]))
    out = np.empty((n, v.shape[1]))
    for s in range(0, n, block):
        e = min(s + block, n)
        logits = buf[: e - s]
        np.matmul(q[s:e], k_t, out=logits)
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        den = logits.sum(axis=1)
        np.matmul(logits, v, out=out[s:e])
        out[s:e] /= den[:, None]
    return out


def _gemms(x: np.ndarray, q: np.ndarray, rows: int, cols: int) -> Callable[[], None]:
    """The attention's two GEMMs over every ``rows × cols`` tile, nothing else.

    Query blocks are shared by as many threads as the kernel uses (``kern.workers()``), each with
    its own tile, so that both sides of the ratio run with the same parallelism.
    """
    n, d = x.shape
    k_t = np.ascontiguousarray(x.T)
    v1 = np.hstack([x, np.ones((n, 1))])
    local = threading.local()

    def block(s: int) -> None:
        if not hasattr(local, "tile"):
            local.tile, local.out = np.empty((rows, cols)), np.empty((rows, d + 1))
        for c in range(0, n, cols):
            np.matmul(q[s : s + rows], k_t[:, c : c + cols], out=local.tile)
            np.matmul(local.tile, v1[c : c + cols], out=local.out)

    w = min(kern.workers(), n // rows)
    pool = ThreadPoolExecutor(w) if w > 1 else None

    def run() -> None:
        if pool is None:
            for s in range(0, n, rows):
                block(s)
        else:
            list(pool.map(block, range(0, n, rows)))

    return run


def _torch_gemms(x: np.ndarray, q: np.ndarray, rows: int, cols: int) -> Callable[[], None]:
    """:func:`_gemms` with torch's float64 GEMM (another BLAS: MKL in the x86 wheels)."""
    assert torch is not None
    n, d = x.shape
    tq, k_t = torch.from_numpy(q), torch.from_numpy(np.ascontiguousarray(x.T))
    v1 = torch.from_numpy(np.hstack([x, np.ones((n, 1))]))
    tile = torch.empty((rows, cols), dtype=torch.float64)
    out = torch.empty((rows, d + 1), dtype=torch.float64)

    def run() -> None:
        for s in range(0, n, rows):
            for c in range(0, n, cols):
                torch.matmul(tq[s : s + rows], k_t[:, c : c + cols], out=tile)
                torch.matmul(tile, v1[c : c + cols], out=out)

    return run


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@contextlib.contextmanager
def _threads(k: int | None) -> Iterator[None]:
    if k is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    if torch is not None:
        torch.set_num_threads(k)
    kern.WORKERS = k
    with threadpool_limits(limits=k):
        yield


def _rate_table(args: argparse.Namespace, rng: np.random.Generator) -> None:
    n, d = args.n, args.d
    x = rng.standard_normal((n, d))
    b = rng.standard_normal((d, d)) / d
    layer = Layer(B=b, V=1.0)
    q = x @ b.T
    flops = 4.0 * n * n * d
    gemm_shapes = [(64, 256), (128, 256), (256, 1024), (1024, n)]
    gemm = {f"GEMM {r}x{c} tiles": _gemms(x, q, r, c) for r, c in gemm_shapes}
    use_torch = torch is not None and not args.no_torch
    if use_torch:
        gemm |= {f"torch GEMM {r}x{c}": _torch_gemms(x, q, r, c) for r, c in gemm_shapes[1:]}
    cands: dict[str, Callable[[], object]] = {
        "numpy (this kernel)": lambda: token_velocity(layer, x, backend="numpy"),
        "former kernel": lambda: _former_softmax(q, x.T, x),
    }
    if use_torch:
        cands["torch float64"] = lambda: token_velocity(layer, x, backend="torch")
        cands["torch float32"] = lambda: token_velocity(layer, x, backend="torch", dtype=np.float32)
    cands["numpy float32"] = lambda: token_velocity(layer, x, backend="numpy", dtype=np.float32)
    ref = token_velocity(layer, x, backend="numpy")
    former = _former_softmax(q, x.T, x)
    print(f"[1] N={n}, d={d}: attention flops 4 N² d = {flops:.3e} per head")
    print(f"    numpy vs former kernel: max rel diff {_maxrel(ref, former):.1e}")
    for name in cands:
        if "former" not in name and "numpy (" not in name:
            print(
                f"    {name} vs numpy: max rel diff {_maxrel(np.asarray(cands[name]()), ref):.1e}"
            )
    times: dict[str, list[float]] = {k: [] for k in [*gemm, *cands]}
    for _ in range(args.repeats):
        for name, fn in [*gemm.items(), *cands.items()]:
            times[name].append(_time(fn))
    machine = [min(times[g][i] for g in gemm) for i in range(args.repeats)]
    sq = rng.standard_normal((1024, 1024))
    t_sq = statistics.median(_time(lambda: sq @ sq) for _ in range(5))
    print(f"    {'':24s} {'median s':>9s} {'GF/s':>7s} {'÷ machine':>9s}")
    for name, ts in times.items():
        ratio = statistics.median(m / t for m, t in zip(machine, ts))
        t = statistics.median(ts)
        print(f"    {name:24s} {t:9.3f} {flops / t / 1e9:7.2f} {ratio:9.2f}")
    tm = statistics.median(machine)
    sq_rate = 2 * 1024**3 / t_sq / 1e9
    print(f"    machine float64 matmul rate (best GEMM, per repeat): {flops / tm / 1e9:.2f} GF/s")
    print(f"    square 1024³ float64 GEMM (context, not the denominator): {sq_rate:.2f} GF/s")


def _maxrel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))


def _maxrss_mib() -> float:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: KiB on Linux, bytes on macOS
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def _big(args: argparse.Namespace, rng: np.random.Generator) -> None:
    n, d = args.big_n, args.d
    x = rng.standard_normal((n, d))
    layer = Layer(B=rng.standard_normal((d, d)) / d, V=1.0)
    rss0 = _maxrss_mib()
    tracemalloc.start()
    t = _time(lambda: token_velocity(layer, x, backend="numpy"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    flops = 4.0 * n * n * d
    print(
        f"[2] N={n}, d={d}, numpy float64, one evaluation: {t:.1f} s ({flops / t / 1e9:.2f} GF/s)"
    )
    mib = peak / 2**20, x.nbytes / 2**20
    print(f"    tracemalloc peak during the call: {mib[0]:.1f} MiB (tokens: {mib[1]:.0f} MiB)")
    print(f"    ru_maxrss: {rss0:.0f} MiB before, {_maxrss_mib():.0f} MiB after")
    print(f"    (the N×N logits would take {n * n * 8 / 2**30:.0f} GiB)")


def _sweep(args: argparse.Namespace, rng: np.random.Generator) -> None:
    n, d = args.n, args.d
    x = rng.standard_normal((n, d))
    layer = Layer(B=rng.standard_normal((d, d)) / d, V=1.0)
    flops = 4.0 * n * n * d
    default = kern.CPU_TILE
    print(f"[3] N={n}: numpy kernel time by tile (query rows × keys), best of 3")
    try:
        for tile in (2**13, 2**14, 2**15, 2**16, 2**18):
            kern.CPU_TILE = tile
            for rows in (64, 128, 256):
                plan = kern.tile_plan(n, rows)
                fn = partial(token_velocity, layer, x, block_size=rows, backend="numpy")
                t = min(_time(fn) for _ in range(3))
                print(
                    f"    {plan.rows:5d} × {plan.cols:5d}: {t:.3f} s  {flops / t / 1e9:6.2f} GF/s"
                )
    finally:
        kern.CPU_TILE = default


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16_384)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--big-n", type=int, default=262_144)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument(
        "--no-torch",
        action="store_true",
        help="leave torch out (its threads can stall for seconds per call on a busy machine)",
    )
    args = ap.parse_args()
    rng = np.random.default_rng(20260607)
    print(
        f"threads: {'as configured' if args.threads is None else args.threads}; torch: "
        f"{'absent' if torch is None else torch.__version__}"
    )
    with _threads(args.threads):
        _rate_table(args, rng)
        if args.big_n:
            _big(args, rng)
        if args.sweep:
            _sweep(args, rng)


if __name__ == "__main__":
    main()
