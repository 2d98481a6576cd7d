"""Token-level attention: time and memory at N = 65,536, d = 16, blocked vs dense softmax, and
the accuracy of the default (adaptive) token stepping against the former fixed RK4 stepping.

Issue item 8c and issue 13 item 2. Four measurements, in one process:

1. One field evaluation of a single softmax head (``token_velocity`` of ``Layer(B=B, V=1)``) at
   ``N = 65,536``, ``d = 16``: median time of ``--repeats`` runs, and peak memory two ways:
   ``tracemalloc`` (numpy registers its buffers with it, so this is the peak of the arrays
   allocated during the evaluation, above what already existed) and ``resource.getrusage``
   ``ru_maxrss`` (the whole process's peak resident set: interpreter, libraries, BLAS buffers;
   measured before anything larger is allocated, so it bounds the real footprint).
2. Blocked (default block) against a dense ``N × N`` softmax at ``--dense-n`` (4096): the largest
   relative difference and both median times.
3. Optional (``--sweep``): time per evaluation for several block sizes at N = 16,384.
4. ``simulate_tokens`` at T = 1, 8, 30 with its default (adaptive DOP853, error per unit step,
   ``rtol = 1e-7``) and with the former default (``method="rk4"``, 20 steps per layer): the
   relative error of the final tokens against a converged, independent integration (scipy's
   ``solve_ivp`` DOP853 at ``rtol = atol = 1e-13`` on the flattened tokens), field evaluations and
   median time side by side, with the estimate the adaptive run reports. Two layers: the mild 2-D
   layer of the tests and a seeded contracting 8-D one (``--acc-n`` tokens, default 256).
   ``--skip-big`` runs only this part.

The timings depend on the BLAS thread count: on a busy machine OpenBLAS threads can slow the
thin ``(block × d) · (d × N)`` products many times; compare with ``OPENBLAS_NUM_THREADS=1``.

Run: ``.venv/bin/python benchmarks/bench_tokens.py [--n 65536] [--repeats 3] [--sweep]
[--acc-n 256] [--skip-big]``
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from gtcontrol import Gaussian, Layer, simulate_tokens, token_velocity


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _maxrss_mib() -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def _dense_attention(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Reference: the full N×N logits matrix, stabilized row-wise."""
    logits = (x @ b.T) @ x.T
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return (p @ x) / p.sum(axis=1)[:, None]


def _converged(layer: Layer, x: np.ndarray, T: float) -> np.ndarray:
    """The tests' independent reference (tests/helpers.py: DOP853 at rtol = atol = 1e-13)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import converged_tokens

    return converged_tokens(layer, x, T)


def _accuracy_layers(rng: np.random.Generator) -> dict[str, tuple[Layer, Gaussian]]:
    mild = Layer(
        A=[[-0.2, 0.3], [0.0, -0.1]],
        B=[[0.6, 0.4], [-0.4, 0.5]],
        V=[[-0.5, 0.2], [0.1, -0.4]],
        b=[0.1, 0.0],
    )
    d = 8
    a = -0.3 * np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)
    eight = Layer(A=a, B=0.5 * rng.standard_normal((d, d)) / np.sqrt(d), V=-0.5, b=np.ones(d))
    f = rng.standard_normal((d, d))
    return {
        "mild d=2": (mild, Gaussian([0.5, -0.2], [[1.0, 0.3], [0.3, 0.5]])),
        "contracting d=8": (eight, Gaussian(rng.standard_normal(d), f @ f.T / d + 0.5 * np.eye(d))),
    }


def bench_accuracy(n: int, repeats: int) -> None:
    """Section 4: default (adaptive) against the former default (RK4 x 20) at T = 1, 8, 30."""
    rng = np.random.default_rng(20260613)
    print(f"[4] default stepping vs former fixed RK4 x 20 steps, N={n}, relative error of the")
    print("    final tokens against a converged solve_ivp (DOP853, 1e-13); medians of runs")
    head = f"    {'layer':16s} {'T':>4s} | {'adaptive err':>12s} {'estimate':>9s} {'evals':>5s}"
    print(f"{head} {'time':>7s} | {'rk4x20 err':>10s} {'evals':>5s} {'time':>7s} | time ratio")
    for name, (layer, g0) in _accuracy_layers(rng).items():
        x = g0.sample(n, seed=rng)
        for T in (1.0, 8.0, 30.0):
            ref = _converged(layer, x, T)
            scale = float(np.linalg.norm(ref))
            ad = simulate_tokens(layer, x, T)
            rk = simulate_tokens(layer, x, T, method="rk4")
            t_ad, t_rk = [], []
            for _ in range(repeats):  # interleaved so that load changes hit both
                t_ad.append(_median_time(partial(simulate_tokens, layer, x, T), 1))
                t_rk.append(_median_time(partial(simulate_tokens, layer, x, T, method="rk4"), 1))
            e_ad = float(np.linalg.norm(ad.final_tokens - ref)) / scale
            e_rk = float(np.linalg.norm(rk.final_tokens - ref)) / scale
            m_ad, m_rk = statistics.median(t_ad), statistics.median(t_rk)
            print(
                f"    {name:16s} {T:4.0f} | {e_ad:12.2e} {ad.stats['error_estimate']:9.1e} "
                f"{ad.stats['nfev']:5d} {m_ad:6.3f}s | {e_rk:10.2e} {rk.stats['n_velocity']:5d} "
                f"{m_rk:6.3f}s | {m_ad / m_rk:5.2f}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=65_536)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dense-n", type=int, default=4096)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--acc-n", type=int, default=256, help="tokens in the accuracy section")
    ap.add_argument("--skip-big", action="store_true", help="run only the accuracy section")
    args = ap.parse_args()
    if args.skip_big:
        bench_accuracy(args.acc_n, args.repeats)
        return
    rng = np.random.default_rng(20260607)
    d = args.d
    b = rng.standard_normal((d, d)) / d
    layer = Layer(B=b, V=1.0)

    # 1. Large N: time and memory.
    x_big = rng.standard_normal((args.n, d))
    rss_before = _maxrss_mib()
    tracemalloc.start()
    token_velocity(layer, x_big)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t_eval = _median_time(lambda: token_velocity(layer, x_big), args.repeats)
    rss_after = _maxrss_mib()
    entries = args.n**2
    print(f"[1] N={args.n}, d={d}, one softmax head, {args.repeats} repeats")
    print(
        f"    time per evaluation (median): {t_eval:.3f} s  ({t_eval / entries * 1e9:.2f} ns/pair)"
    )
    print(f"    tracemalloc peak during one evaluation: {peak / 2**20:.1f} MiB")
    print(f"    ru_maxrss: {rss_before:.1f} MiB before, {rss_after:.1f} MiB after")
    print(f"    (a dense N×N float64 matrix would take {entries * 8 / 2**30:.1f} GiB)")

    # 2. Blocked vs dense at small N.
    n = args.dense_n
    xs = rng.standard_normal((n, d))
    blocked = token_velocity(layer, xs)
    dense = _dense_attention(xs, b)
    rel = float(np.max(np.abs(blocked - dense)) / np.max(np.abs(dense)))
    t_dense, t_blocked = [], []
    for _ in range(max(args.repeats, 5)):  # interleaved so that load changes hit both sides
        t_blocked.append(_median_time(lambda: token_velocity(layer, xs), 1))
        t_dense.append(_median_time(lambda: _dense_attention(xs, b), 1))
    mb, md = statistics.median(t_blocked), statistics.median(t_dense)
    print(f"[2] N={n}, d={d}: blocked vs dense N×N softmax")
    print(f"    max relative difference: {rel:.2e}")
    print(
        f"    blocked median {mb * 1e3:.1f} ms, dense median {md * 1e3:.1f} ms, ratio {mb / md:.2f}"
    )

    # 3. Block-size sweep.
    if args.sweep:
        n = 16_384
        xs = rng.standard_normal((n, d))
        print(f"[3] N={n}, d={d}: time per evaluation by block size (buffer = block × N × 8 B)")
        for block in (16, 64, 128, 256, 512, 1024, 4096):
            t = _median_time(partial(token_velocity, layer, xs, block_size=block), 3)
            print(f"    block {block:5d} ({block * n * 8 / 2**20:6.1f} MiB): {t * 1e3:.0f} ms")

    # 4. Default stepping accuracy vs the former fixed stepping.
    bench_accuracy(args.acc_n, args.repeats)


if __name__ == "__main__":
    main()
