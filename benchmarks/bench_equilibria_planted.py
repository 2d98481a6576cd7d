"""Planted equilibria: how often :func:`gtcontrol.equilibria` finds a known one, and how fast.

Each case plants a positive-definite equilibrium S in a general-V layer (issue 21's recipe):
``S = Q diag(e^u) Qᵀ`` with Q Haar-orthogonal and ``u ~ U(−1, 1)``; V, B with entries
``0.5·N(0, 1)``; K skew with entries ``0.5·N(0, 1)`` above the diagonal;
``A = (−Q(S)/2 + K) S⁻¹`` with ``Q(S) = VSBS + SBᵀSVᵀ``, so that ``F(S) = 0`` exactly.
A case succeeds when one returned equilibrium is within ``1e-8`` (relative, Frobenius) of S.
Each call gets ``time_limit=10`` s. Prints, per d, the success rate, the statuses, the mean
number of positive-definite equilibria found, the mean/max wall time per case and the load
average (timings on a shared machine are inflated by its load). The search finds the planted
equilibrium early (whitened Levenberg–Marquardt, :mod:`gtcontrol.analysis._whitened_search`)
and then keeps looking for others until saturation or the time limit, so the time per case is
that of the whole search.

Usage: ``python benchmarks/bench_equilibria_planted.py [--dims 3 4 6 8 12] [--cases 200]``
(run with ``OPENBLAS_NUM_THREADS=1`` on a loaded machine).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter

import numpy as np

import gtcontrol as gt


def planted(rng: np.random.Generator, d: int) -> tuple[gt.Layer, np.ndarray]:
    """A general-V layer with the known positive-definite equilibrium S."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    s = (q * np.exp(rng.uniform(-1.0, 1.0, d))) @ q.T
    s = 0.5 * (s + s.T)
    v = 0.5 * rng.standard_normal((d, d))
    b = 0.5 * rng.standard_normal((d, d))
    k = np.triu(0.5 * rng.standard_normal((d, d)), 1)
    k = k - k.T
    qs = v @ s @ b @ s + s @ b.T @ s @ v.T
    a = (-qs / 2 + k) @ np.linalg.inv(s)
    return gt.Layer(a, heads=[(v, b)]), s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[3, 4, 6, 8, 12])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"{'d':>3} {'cases':>6} {'found':>7} {'rate':>7} {'#eq':>5} {'mean s':>8} {'max s':>8} "
        f"{'load':>5}  statuses"
    )
    for d in args.dims:
        rng = np.random.default_rng([args.seed, d])
        found, times, statuses, counts = 0, [], Counter(), []
        for _ in range(args.cases):
            layer, s = planted(rng, d)
            t0 = time.perf_counter()
            res = gt.equilibria(layer, time_limit=args.time_limit)
            times.append(time.perf_counter() - t0)
            statuses[res.status.value] += 1
            counts.append(len(res))
            ns = np.linalg.norm(s)
            found += any(np.linalg.norm(e.cov - s) <= 1e-8 * ns for e in res)
        rate = found / args.cases
        print(
            f"{d:>3} {args.cases:>6} {found:>7} {rate:>7.1%} {np.mean(counts):>5.1f} "
            f"{np.mean(times):>8.2f} {np.max(times):>8.2f} {os.getloadavg()[0]:>5.2f}  "
            f"{dict(statuses)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
