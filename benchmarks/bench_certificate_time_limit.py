"""``design_certificate`` outside the Riccati class at d = 256: its time limit against no limit.

Plain script: ``python benchmarks/bench_certificate_time_limit.py [--busy]``.

The layer has eight factored heads (``Layer.from_projections`` of four seeded ``d×d`` Gaussian
matrices over ``√d``, ``A = −I/2``) and the target ``N(0.1 ξ, I)``, which is not its
equilibrium: the spectrum of ``DF(Σ*)`` then takes ARPACK thousands of ``O(d³)`` products.

First, without a limit, the candidate (ARPACK's own work on one BLAS thread, the products on
the caller's threads: ``gtcontrol._blas.arpack_products``) against the baseline (everything on
the caller's threads), with the covariance rates both find. Then the candidate with limits of
0.3, 1 and 3 s: the wall seconds, the status and the ratio to the limit. ``--busy`` runs it all
beside one CPU-bound process per core.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import gtcontrol as gt
from gtcontrol.analysis import equilibria as equilibria_module


def _hog() -> None:
    while True:
        pass


def _case(d: int = 256) -> tuple[gt.Layer, gt.Gaussian]:
    rng = np.random.default_rng(7)
    w = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
    layer = gt.Layer.from_projections(*w, n_heads=8, A=-0.5 * np.eye(d))
    return layer, gt.Gaussian(rng.standard_normal(d) * 0.1, np.eye(d))


@contextlib.contextmanager
def _same_threads(product: Callable[[Any], Any]) -> Iterator[Callable[[Any], Any]]:
    yield product


def _unlimited(layer: gt.Layer, target: gt.Gaussian) -> tuple[float, float]:
    clock = time.perf_counter()
    cert = gt.design_certificate(layer, target)
    return time.perf_counter() - clock, cert.cov_rate


def _compare(layer: gt.Layer, target: gt.Gaussian) -> None:
    new, new_rate = _unlimited(layer, target)
    real = equilibria_module.arpack_products
    equilibria_module.arpack_products = _same_threads  # type: ignore[assignment]
    try:
        old, old_rate = _unlimited(layer, target)
    finally:
        equilibria_module.arpack_products = real
    print(f"no limit: candidate {new:.2f} s, baseline {old:.2f} s, ratio {old / new:.2f}")
    print(f"covariance rate: candidate {new_rate!r}, baseline {old_rate!r}", flush=True)


def main(argv: list[str]) -> int:
    hogs = []
    if "--busy" in argv:
        hogs = [mp.Process(target=_hog, daemon=True) for _ in range(os.cpu_count() or 1)]
        for p in hogs:
            p.start()
    layer, target = _case()
    try:
        _compare(layer, target)
        print(f"{'time_limit':>10} {'wall (s)':>9} {'ratio':>6}  status")
        for limit in (0.3, 1.0, 3.0):
            clock = time.perf_counter()
            cert = gt.design_certificate(layer, target, time_limit=limit)
            wall = time.perf_counter() - clock
            print(f"{limit:>10} {wall:9.2f} {wall / limit:6.2f}  {cert.status.value}", flush=True)
    finally:
        for p in hogs:
            p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
