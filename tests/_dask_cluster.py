"""A dask cluster started as separate processes (``dask scheduler``, ``dask worker``), for the
tests of work that runs on an existing cluster (sweeps, layer jobs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process group started by a test: SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def dask_cluster(
    folder: Path, *, n_workers: int = 1, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A scheduler and ``n_workers`` worker processes (one thread each) on this machine, each
    in its own session (stopped with its children after); yields the scheduler's address.

    ``env`` is added to the environment of every process (the scheduler unpickles the tasks
    too: their functions must be importable there); the logs go to ``folder/*.log``.
    """
    dask = Path(sys.executable).parent / "dask"
    if not dask.exists():
        pytest.skip("the dask command line is not installed")
    file = folder / "scheduler.json"
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str, extra: Mapping[str, str] | None = None) -> None:
        with open(folder / log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [str(dask), *args, "--scheduler-file", str(file), "--no-dashboard"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, **(extra or {})},
                )
            )

    try:
        start(["scheduler", "--host", "127.0.0.1", "--port", "0"], "scheduler.log", env)
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            assert procs[0].poll() is None, "the dask scheduler exited"
            time.sleep(0.05)
        address = json.loads(file.read_text())["address"]
        for i in range(n_workers):
            start(["worker", "--nworkers", "1", "--nthreads", "1"], f"worker{i}.log", env)
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)
