"""The layer runner's own costs (gtcontrol.experiments._layer_jobs): start-up and per key.

Plain script: ``python benchmarks/bench_layer_jobs.py [--keys N] [--repeat R]``.

On trivial work (``abs``: nothing to compute, importable by any worker) it measures, for each
way of running (inline; a local cluster of 2 worker processes; a cluster of a scheduler and 2
workers started here as separate processes, reached at its ``tcp://`` address), with a store:

* ``start``: seconds from the call to the first stored row (a pool's start-up: importing
  dask.distributed, the scheduler, the worker processes, the first task);
* ``per key``: seconds per key from the first stored row to the last (the runner's overhead
  per key once running: submission, scheduling, sending the row back, pickling it, the atomic
  write);
* ``total``: the whole call, stopping the cluster included.

Numbers depend on the machine's load; the script prints ``os.getloadavg()`` with them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _dask_cluster import dask_cluster

from gtcontrol.experiments._layer_jobs import run_layer_jobs


def measure(keys: int, **options: object) -> dict[str, float]:
    landed: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = run_layer_jobs(
            range(keys),
            abs,
            store=Path(tmp) / "s",
            fingerprint="bench",
            on_done=lambda k, row: landed.append(time.perf_counter()),
            **options,  # type: ignore[arg-type]
        )
        total = time.perf_counter() - t0
    assert out.success and len(out.rows) == keys, out.message
    return {
        "start": landed[0] - t0,
        "per_key": (landed[-1] - landed[0]) / max(1, keys - 1),
        "total": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load {os.getloadavg()}, {os.cpu_count()} CPUs, {args.keys} keys")
    rows = []
    for _ in range(args.repeat):
        rows.append(("inline", measure(args.keys)))
        rows.append(("local, 2 processes", measure(args.keys, workers=2)))
    with tempfile.TemporaryDirectory() as tmp, dask_cluster(Path(tmp), n_workers=2) as address:
        run_layer_jobs([0], abs, scheduler=address)  # the workers are up
        for _ in range(args.repeat):
            rows.append(("tcp, 2 workers", measure(args.keys, scheduler=address)))
    print(f"{'where':<20} {'start s':>9} {'per key ms':>11} {'total s':>9}")
    for name, m in rows:
        print(f"{name:<20} {m['start']:9.3f} {1e3 * m['per_key']:11.2f} {m['total']:9.2f}")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
