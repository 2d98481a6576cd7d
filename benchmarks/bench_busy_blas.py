"""Why numpy's BLAS runs on one thread on a busy machine (``gtcontrol._blas.calm_blas``).

Plain script: ``python benchmarks/bench_busy_blas.py [N] [REPEATS]`` (default N = 300, 7 repeats).

Times a dense ``scipy.linalg.eig`` of an ``N×N`` matrix (the kind of call inside
``stabilize``'s spectra and ``design_mean_matching``'s certificate, which no budget check can
interrupt) with numpy's BLAS on every core and on one thread, first on a quiet machine, then
beside one CPU-bound process per core. Prints the median and the worst time of each, and their
ratio: a multi-threaded OpenBLAS busy-waits for cores that others hold, so its worst case is
what a time limit has to survive.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits


def _hog() -> None:
    while True:
        pass


def _times(a: np.ndarray, threads: int | None, repeats: int) -> list[float]:
    out = []
    with threadpool_limits(threads, user_api="blas"):
        for _ in range(repeats):
            t = time.perf_counter()
            sla.eig(a)
            out.append(time.perf_counter() - t)
    return out


def _row(label: str, many: list[float], one: list[float]) -> None:
    m_many, m_one = statistics.median(many), statistics.median(one)
    print(
        f"{label:22s} all cores: median {m_many:7.3f} s, worst {max(many):7.3f} s | one thread: "
        f"median {m_one:7.3f} s, worst {max(one):7.3f} s | worst ratio {max(many) / max(one):6.1f}"
    )


def main(argv: list[str]) -> None:
    n = int(argv[1]) if len(argv) > 1 else 300
    repeats = int(argv[2]) if len(argv) > 2 else 7
    cores = os.cpu_count() or 1
    a = np.random.default_rng(0).standard_normal((n, n))
    print(f"eig of a {n}×{n} matrix, {repeats} repeats, {cores} cores")
    _row("quiet machine", _times(a, None, repeats), _times(a, 1, repeats))
    hogs = [mp.Process(target=_hog, daemon=True) for _ in range(cores)]
    for h in hogs:
        h.start()
    try:
        time.sleep(0.5)
        _row(f"beside {cores} busy processes", _times(a, None, repeats), _times(a, 1, repeats))
    finally:
        for h in hogs:
            h.kill()


if __name__ == "__main__":
    main(sys.argv)
