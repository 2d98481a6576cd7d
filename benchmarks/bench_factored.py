"""Factored against dense attention heads at Transformer scale (issue 11).

One layer with ``--heads`` heads of width ``d/heads`` at ``d = --d`` (768, 12 × 64: BERT-base),
weights scaled like a trained layer (``W_Q, W_K, W_V ~ N(0, 1/d)``, ``W_O ~ N(0, 1/(H d_head))``).
The candidate is ``Layer.from_projections`` (factored heads), the baseline the dense layer built
from the same heads (``Layer(heads=layer.heads)``). In one process, candidate and baseline runs
are interleaved (so load on a shared machine hits both alike), and for each quantity the script
prints both medians, the speed-up and the relative difference (Frobenius norm):

1. ``moment_field`` at ``Σ = L Lᵀ`` of full rank (target: ≥ 5× faster, equal to 1e-12);
2. ``factor_field`` at ``r = d`` (the factor-form right-hand side of the integrator);
3. ``token_velocity`` at ``N = --tokens`` (4096) Gaussian tokens.

The timings depend on the BLAS thread count and on the load of the machine: on a shared, busy
machine multi-threaded OpenBLAS can slow mid-size products many times and erratically; compare
with ``--threads 1`` (threadpoolctl). The flop counts of ``moment_field`` are ``(2H + 1) d³``
(dense) against ``3 d² H d_head`` (factored): 8.3× at ``H d_head = d``.

Run: ``.venv/bin/python benchmarks/bench_factored.py [--d 768] [--heads 12] [--repeats 7]
[--threads 1] [--skip-tokens]``
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from gtcontrol import Layer, moment_field, token_velocity
from gtcontrol.model.field import factor_field


def _interleaved(
    candidate: Callable[[], Any], baseline: Callable[[], Any], repeats: int
) -> tuple[float, float, Any, Any]:
    """Medians of ``repeats`` alternating runs, and the last results of each."""
    t_c: list[float] = []
    t_b: list[float] = []
    out_c = out_b = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out_c = candidate()
        t1 = time.perf_counter()
        out_b = baseline()
        t2 = time.perf_counter()
        t_c.append(t1 - t0)
        t_b.append(t2 - t1)
    return statistics.median(t_c), statistics.median(t_b), out_c, out_b


def _rel(a: Any, b: Any) -> float:
    if isinstance(a, tuple):
        return max(_rel(x, y) for x, y in zip(a, b, strict=True))
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _report(name: str, t_c: float, t_b: float, rel: float) -> None:
    print(
        f"{name:<28} factored {t_c * 1e3:9.1f} ms   dense {t_b * 1e3:9.1f} ms   "
        f"speed-up {t_b / t_c:6.1f}x   rel. diff {rel:.1e}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--token-repeats", type=int, default=3)
    ap.add_argument("--skip-tokens", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="BLAS threads (threadpoolctl)")
    args = ap.parse_args()
    if args.threads is not None:
        threadpool_limits(limits=args.threads, user_api="blas")
        print(f"BLAS threads limited to {args.threads}")
    d, h = args.d, args.heads
    dh = d // h
    rng = np.random.default_rng(20260611)
    inner = h * dh
    wq, wk, wv = (rng.standard_normal((inner, d)) / math.sqrt(d) for _ in range(3))
    wo = rng.standard_normal((d, inner)) / math.sqrt(inner)
    b = 0.1 * rng.standard_normal(d)
    fac = Layer.from_projections(wq, wk, wv, wo, n_heads=h, b=b)
    t0 = time.perf_counter()
    dense = Layer(heads=fac.heads, b=b)
    print(f"d = {d}, {h} heads x {dh}; dense heads formed in {time.perf_counter() - t0:.2f} s")

    m = rng.standard_normal(d)
    factor = rng.standard_normal((d, d)) / math.sqrt(d)
    cov = factor @ factor.T

    t_c, t_b, r_c, r_b = _interleaved(
        lambda: moment_field(fac, m, cov), lambda: moment_field(dense, m, cov), args.repeats
    )
    _report("moment_field", t_c, t_b, _rel(r_c, r_b))
    t_c, t_b, r_c, r_b = _interleaved(
        lambda: factor_field(fac, m, factor),
        lambda: factor_field(dense, m, factor),
        args.repeats,
    )
    _report(f"factor_field (r = {d})", t_c, t_b, _rel(r_c, r_b))
    if not args.skip_tokens:
        x = rng.standard_normal((args.tokens, d)) @ factor.T + m
        t_c, t_b, r_c, r_b = _interleaved(
            lambda: token_velocity(fac, x), lambda: token_velocity(dense, x), args.token_repeats
        )
        _report(f"token_velocity (N = {args.tokens})", t_c, t_b, _rel(r_c, r_b))


if __name__ == "__main__":
    main()
