"""Equilibrium search beyond the Kronecker size: capped GMRES + work cap vs the former settings.

Runs, in one process, :func:`gtcontrol.equilibria` on random factored general-V layers with
the current Newton inner solver (≤ 3 restarts × 60 GMRES iterations per step, factored
Jacobian, a shared flop cap) and with the former one (50 restarts × 80, dense heads), and
prints time, status and outcome of both, plus the ratio. The former setting is limited by
``--baseline-limit`` seconds (it took 268 s at d = 24 on a loaded 2-core machine).

Usage: ``python benchmarks/bench_equilibria.py [--dims 20 24] [--baseline-limit 120]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gtcontrol as gt
from gtcontrol.analysis import newton


def _layer(d: int, dense: bool) -> gt.Layer:
    rng = np.random.default_rng(0)
    n_heads = 4
    dh = max(1, d // n_heads)
    fh = gt.FactoredHeads(
        *(rng.standard_normal((n_heads, dh, d)) / np.sqrt(d) for _ in range(3)),
        rng.standard_normal((n_heads, d, dh)) / np.sqrt(dh),
    )
    a = -np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)
    return gt.Layer(a, heads=list(fh.dense()) if dense else fh)


def _run(d: int, former: bool, limit: float | None) -> tuple[float, gt.EquilibriaResult]:
    saved = (newton._GMRES_RESTART, newton._GMRES_RESTARTS)
    if former:
        newton._GMRES_RESTART, newton._GMRES_RESTARTS = 80, 50
    try:
        t0 = time.perf_counter()
        res = gt.equilibria(
            _layer(d, dense=former), time_limit=limit, max_work=1e18 if former else 2e11
        )
        return time.perf_counter() - t0, res
    finally:
        newton._GMRES_RESTART, newton._GMRES_RESTARTS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[20, 24])
    parser.add_argument("--baseline-limit", type=float, default=120.0)
    args = parser.parse_args()
    head = ("d", "former s", "former status", "now s", "now status", "ratio")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (4, 10, 18, 8, 18, 7), strict=True)))
    for d in args.dims:
        t_old, old = _run(d, True, args.baseline_limit)
        t_new, new = _run(d, False, None)
        print(
            f"{d:>4} {t_old:>10.1f} {old.status.value:>18} {t_new:>8.1f} {new.status.value:>18} "
            f"{t_old / t_new:>7.1f}"
        )
        print(f"     former: {old.stats.get('outcomes')}  now: {new.stats.get('outcomes')}")


if __name__ == "__main__":
    main()
