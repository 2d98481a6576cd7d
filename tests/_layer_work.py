"""Work functions for tests/experiments/test_layer_jobs.py, importable by dask worker processes
(the tests put this folder, tests/, on their PYTHONPATH), and the driver script run as a
subprocess (and killed).

``python _layer_work.py STORE CALLS ADDRESS [SECONDS]`` maps six keys with :func:`record` on the
dask cluster at ADDRESS into STORE and prints the outcome as one JSON line.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _threads() -> int | None:
    """The BLAS threads of this process (threadpoolctl; ``None`` without it)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    import numpy  # noqa: F401  (its BLAS is what the work would use)

    found = [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(found, default=None)


def once(key: int, *, calls: str, fail: tuple[int, ...] = (), seconds: float = 0.0) -> dict:
    """The row of ``key``; creates ``CALLS/KEY`` with O_EXCL first, so that a second
    computation of a key in the same folder raises ``FileExistsError``."""
    os.close(os.open(Path(calls) / str(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    if key in fail:
        raise ValueError(f"layer {key} refuses")
    time.sleep(seconds)
    return row_of(key)


def row_of(key: int) -> dict:
    """The row that :func:`once` returns for ``key`` (what inline and pools must agree on)."""
    return {"key": key, "value": key * key + 0.5, "name": f"layer {key}"}


def once_and_probe(key: int, *, calls: str, fail: tuple[int, ...] = ()) -> dict:
    """:func:`once`'s row, and where it ran: the process, its thread variable and BLAS
    threads."""
    row = once(key, calls=calls, fail=fail)
    from gtcontrol._jobs import cpus

    where = {
        "pid": os.getpid(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "blas": _threads(),
        "cores": os.environ.get("GTCONTROL_CORES"),
        "trim": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        "cpus": cpus(),
    }
    return {"row": row, "where": where}


def slow(key: int, *, seconds: float, quick: tuple[int, ...] = ()) -> dict:
    """Sleeps ``seconds`` (but not for the ``quick`` keys)."""
    if key not in quick:
        time.sleep(seconds)
    return row_of(key)


def span(key: int, *, seconds: tuple[float, ...]) -> dict:
    """Sleeps ``seconds[key]``; returns when it started and ended (``time.time``)."""
    start = time.time()
    time.sleep(seconds[key])
    return {**row_of(key), "span": (start, time.time())}


def record(key: int, *, calls: str, seconds: float) -> dict:
    """Records each call as ``CALLS/KEY-PID-NS`` (start time in ns), then sleeps."""
    start = time.time_ns()
    os.close(os.open(Path(calls) / f"{key}-{os.getpid()}-{start}", os.O_CREAT | os.O_EXCL))
    time.sleep(seconds)
    return {**row_of(key), "started": start}


def main(argv: list[str]) -> int:
    # the work by its module's name, as a model map's: not __main__'s (pickled by value)
    import _layer_work

    from gtcontrol.experiments._layer_jobs import run_layer_jobs

    store, calls, address = argv[:3]
    seconds = float(argv[3]) if len(argv) > 3 else 1.0
    work = functools.partial(_layer_work.record, calls=calls, seconds=seconds)
    out = run_layer_jobs(
        range(6), work, store=Path(store), fingerprint="tcp test", scheduler=address
    )
    doc: dict[str, Any] = {
        "rows": sorted(out.rows),
        "computed": list(out.computed),
        "reused": list(out.reused),
        "not_done": {str(k): nd.message for k, nd in out.not_done.items()},
        "where": out.where,
        "workers": {str(k): r.worker for k, r in out.runs.items()},
    }
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
