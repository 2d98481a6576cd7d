"""Sweep throughput on a LocalCluster against the per-point cost (issue 22).

Plain script: ``python benchmarks/bench_sweep.py [N_POINTS ...] [--workers W] [--limit S]``.

For each grid size (default 10³ and 10⁴ points of the hostile reproducer's design: ``analyze``
over ``V_scale × A_shift`` of a 2-d rotation layer) it measures, side by side:

* the per-point cost ``c``: ``run_point`` called serially in this process on 200 points of the
  grid (after a warm-up, with one BLAS thread as in the workers), the work one worker does per
  point; the mean ``seconds`` of the stored rows (the cost inside the workers) is printed too;
* the sweep: ``gtcontrol run`` semantics (``run_sweep`` into a fresh folder) with ``W`` local
  worker processes, split into the cluster's start, the points (from the first submitted batch
  to the last stored one) and the wrap-up (table, figure, record, stopping the cluster);
* points/s of the points phase (worker start-up included) against the ideal ``W / c``, and
  its ratio (the target is within 2×: ratio ≥ 0.5), the same over the whole run (cluster
  start, table and figure included), and the time from the start to the first stored point.

With ``--limit`` below the time the grid needs (10⁵ points on two workers: about 25 min), the
sweep stops at its time_limit and the rates are those of the points it stored.

Numbers depend on the machine's load; the script prints ``os.getloadavg()`` with them.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import ROTATION_TABLES

DESIGN = (
    'task = "sweep"\ntime_limit = {limit}\n'
    + ROTATION_TABLES
    + """\
[sweep]
run = "analyze"
workers = {workers}
point_time_limit = 10.0
V_scale = {{ start = -2.0, stop = 2.0, num = {nx} }}
A_shift = {{ start = -1.0, stop = 1.0, num = {ny} }}
"""
)


def _grid(n: int) -> tuple[int, int]:
    """``(nx, ny)`` with ``nx · ny == n`` and ``nx`` the divisor of ``n`` nearest its root."""
    nx = min((k for k in range(1, n + 1) if n % k == 0), key=lambda k: abs(k - math.sqrt(n)))
    return nx, n // nx


def per_point_cost(text: str, sample: int = 200) -> float:
    """Seconds per point of ``run_point`` in this process (mean over a strided sample)."""
    from threadpoolctl import threadpool_limits

    from gtcontrol.cli._sweep_points import plan_sweep, run_point
    from gtcontrol.cli.schema import parse_design

    plan = plan_sweep(parse_design(text), deadline=time.time() + 3600)
    points = plan.points[:: max(1, len(plan) // sample)][:sample]
    # one BLAS thread, as in the dask workers (distributed sets OMP/OPENBLAS_NUM_THREADS=1)
    with threadpool_limits(1):
        for p in points[:10]:  # warm-up: imports, caches
            run_point(p)
        t0 = time.perf_counter()
        for p in points:
            run_point(p)
        return (time.perf_counter() - t0) / len(points)


def measure(n: int, workers: int, limit: float) -> dict[str, Any]:
    import gtcontrol.cli.sweep as sw
    from gtcontrol.cli._sweep_store import SweepFolder
    from gtcontrol.cli.schema import parse_design

    nx, ny = _grid(n)
    text = DESIGN.format(limit=limit, workers=workers, nx=nx, ny=ny)
    cost = per_point_cost(text)
    marks: dict[str, float] = {}
    stored = [0]
    write_rows = SweepFolder.write_rows

    def timed_write(self: Any, name: str, rows: Any, *args: Any) -> None:
        write_rows(self, name, rows, *args)
        stored[0] += len(rows)
        marks.setdefault("first_stored", time.perf_counter())
        marks["last_stored"] = time.perf_counter()

    client = sw.dask_client

    @contextmanager
    def timed_client(*args: Any, **kwargs: Any) -> Any:
        with client(*args, **kwargs) as c:
            marks["cluster_up"] = time.perf_counter()
            yield c
            marks["points_done"] = time.perf_counter()

    SweepFolder.write_rows = timed_write  # type: ignore[method-assign]
    sw.dask_client = timed_client
    out = Path(tempfile.mkdtemp(prefix="gtcontrol-bench-sweep-"))
    try:
        t0, cpu0 = time.perf_counter(), time.process_time()
        sw.run_sweep(parse_design(text), out / "out")
        end, client_cpu = time.perf_counter(), time.process_time() - cpu0
        import pandas as pd

        in_workers = float(pd.read_parquet(out / "out" / "sweep.parquet")["seconds"].mean())
    finally:
        SweepFolder.write_rows = write_rows  # type: ignore[method-assign]
        sw.dask_client = client
        shutil.rmtree(out, ignore_errors=True)
    points_s = marks.get("points_done", end) - marks.get("cluster_up", t0)
    rate = stored[0] / points_s if points_s > 0 else math.nan
    total_rate = stored[0] / (end - t0)
    return {
        "points": nx * ny,
        "stored": stored[0],
        "cost_ms": 1e3 * cost,
        "total_s": end - t0,
        "cluster_start_s": marks.get("cluster_up", t0) - t0,
        "points_s": points_s,
        "first_stored_s": marks.get("first_stored", math.nan) - t0,
        "wrap_up_s": end - marks.get("points_done", end),
        "points_per_s": rate,
        "ideal_per_s": workers / cost,
        "ratio": rate * cost / workers,
        "total_ratio": total_rate * cost / workers,
        "worker_ratio": rate * in_workers / workers,
        "worker_ms": 1e3 * in_workers,
        "client_cpu_s": client_cpu,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int, nargs="*", default=[1000, 10_000])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--limit", type=float, default=3600.0, help="the sweep's time_limit")
    args = p.parse_args()
    for n in args.n:
        r = measure(n, args.workers, args.limit)
        print(
            f"{r['points']:>7d} points, {args.workers} workers (load {os.getloadavg()[0]:.1f}): "
            f"per point {r['cost_ms']:.1f} ms -> ideal {r['ideal_per_s']:.0f}/s; measured "
            f"{r['points_per_s']:.0f}/s (ratio {r['ratio']:.2f}; {r['total_ratio']:.2f} over "
            f"the whole run); stored {r['stored']}; cluster start {r['cluster_start_s']:.1f} s, "
            f"points {r['points_s']:.1f} s, first stored {r['first_stored_s']:.1f} s after the "
            f"start, wrap-up {r['wrap_up_s']:.1f} s, total {r['total_s']:.1f} s; a point took "
            f"{r['worker_ms']:.1f} ms in the workers (ratio against it {r['worker_ratio']:.2f}), "
            f"the client used {r['client_cpu_s']:.1f} s of CPU",
            flush=True,
        )


if __name__ == "__main__":
    main()
