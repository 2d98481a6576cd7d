"""The cost of a design's certificate, its robustness radii and the Riccati equilibria, in products.

Plain script: ``python benchmarks/bench_certificate_cost.py [D ...]`` (default 128 256 512 768).

None of these calls can be interrupted by a budget check (each is a few native LAPACK/slycot
calls), so a design under a time limit estimates their cost before starting them: the fastest
of three ``d×d`` products timed then, times a count per ``d``
(``gtcontrol.control.design.mean_matching._CERTIFICATE_MATMULS``); ``equilibria`` does the same
for its Riccati route (``gtcontrol.analysis.equilibria._RICCATI_MATMULS``). This script measures
those counts on one BLAS thread, as the design runs: the median of five certificates (global,
rates 1 and 1), of five radii computations and of five ``equilibria`` of the designed layer,
each over the fastest of ten products timed in the same process, first on a quiet machine, then
beside one CPU-bound process per core (where a short product still gets a core of its own and
the long call shares one). It prints the counts and the tables' counts beside them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

import gtcontrol as gt
from gtcontrol._status import Budget
from gtcontrol.analysis.equilibria import _RICCATI_MATMULS
from gtcontrol.control.design._certificates import _linear_radii, design_certificate
from gtcontrol.control.design.mean_matching import _CERTIFICATE_MATMULS


def _hog() -> None:
    while True:
        pass


def _target(d: int) -> gt.Gaussian:
    """The target of the contract test's hard case: eigenvalues from 1e-3 to 10."""
    rng = np.random.default_rng(13)
    q, _ = np.linalg.qr(np.random.default_rng(14).standard_normal((d, d)))
    return gt.Gaussian(rng.standard_normal(d), (q * np.linspace(1e-3, 10.0, d)) @ q.T)


def _median(f: Callable[[], object], repeats: int = 5) -> float:
    out = []
    for _ in range(repeats):
        clock = time.perf_counter()
        f()
        out.append(time.perf_counter() - clock)
    return statistics.median(out)


def _row(d: int, label: str) -> None:
    target = _target(d)
    layer = gt.design_mean_matching(target, robustness=False, min_ess=None).layer
    x = np.ones((d, d))
    product = min(_median(lambda: x @ x, 1) for _ in range(10))
    cert = _median(lambda: design_certificate(layer, target, require_global=True))
    radii = _median(lambda: _linear_radii(layer, target, 0, np.random.default_rng(0), Budget()))
    riccati = _median(lambda: gt.equilibria(layer))
    table = next(n for top, n in _CERTIFICATE_MATMULS if d <= top)
    table_eq = next(n for top, n in _RICCATI_MATMULS if d <= top)
    print(
        f"{label:24s} d = {d:4d}: product {1e3 * product:7.2f} ms | certificate {cert:6.3f} s "
        f"= {cert / product:5.0f} products | radii {radii:6.3f} s = {radii / product:5.0f} "
        f"products | table {table} | equilibria {riccati:6.3f} s = {riccati / product:5.0f} "
        f"products | table {table_eq}"
    )


def main(argv: list[str]) -> None:
    dims = [int(a) for a in argv[1:]] or [128, 256, 512, 768]
    cores = os.cpu_count() or 1
    with threadpool_limits(1, user_api="blas"):
        for d in dims:
            _row(d, "quiet machine")
        hogs = [mp.Process(target=_hog, daemon=True) for _ in range(cores)]
        for h in hogs:
            h.start()
        try:
            time.sleep(0.5)
            for d in dims:
                _row(d, f"beside {cores} busy processes")
        finally:
            for h in hogs:
                h.kill()


if __name__ == "__main__":
    main(sys.argv)
