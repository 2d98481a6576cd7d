"""``design_certificate`` outside the Riccati class at d = 256: its time limit against no limit.

Plain script: ``python benchmarks/bench_certificate_time_limit.py [--busy]``.

The layer has eight factored heads (``Layer.from_projections`` of four seeded ``d×d`` Gaussian
matrices over ``√d``, ``A = −I/2``) and the target ``N(0.1 ξ, I)``, which is not its
equilibrium: the spectrum of ``DF(Σ*)`` then takes ARPACK thousands of ``O(d³)`` products. The
script runs the certificate once without a limit (the baseline) and with limits of 0.3, 1 and
3 s, and prints the wall seconds, the status and the ratio to the limit. ``--busy`` runs it all
beside one CPU-bound process per core.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import numpy as np

import gtcontrol as gt


def _hog() -> None:
    while True:
        pass


def _case(d: int = 256) -> tuple[gt.Layer, gt.Gaussian]:
    rng = np.random.default_rng(7)
    w = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
    layer = gt.Layer.from_projections(*w, n_heads=8, A=-0.5 * np.eye(d))
    return layer, gt.Gaussian(rng.standard_normal(d) * 0.1, np.eye(d))


def main(argv: list[str]) -> int:
    hogs = []
    if "--busy" in argv:
        hogs = [mp.Process(target=_hog, daemon=True) for _ in range(os.cpu_count() or 1)]
        for p in hogs:
            p.start()
    layer, target = _case()
    try:
        print(f"{'time_limit':>10} {'wall (s)':>9} {'ratio':>6}  status")
        for limit in (None, 0.3, 1.0, 3.0):
            clock = time.perf_counter()
            cert = gt.design_certificate(layer, target, time_limit=limit)
            wall = time.perf_counter() - clock
            ratio = "" if limit is None else f"{wall / limit:6.2f}"
            print(f"{limit!s:>10} {wall:9.2f} {ratio:>6}  {cert.status.value}", flush=True)
    finally:
        for p in hogs:
            p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
