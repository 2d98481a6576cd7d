"""Benchmark of gtcontrol.experiments (plain script; timings on a shared 2-core machine are noisy).

1. Mardia skewness at N = 10⁴, d = 384: blocked upper-triangle pass (candidate) against the naive
   full ``N×N`` Gram matrix (baseline, 800 MB), in one process before torch is loaded; medians
   and the ratio.
2. ``pretrained_gaussianity`` on all-MiniLM-L6-v2 at n_tokens = 1024 and 4096 (median of warm
   runs; the first call, which loads the model and simulates the nulls, is reported separately).
3. The one-thread BLAS guard: a 1024×384 ``gaussianity`` after torch is loaded, with and without
   :func:`gtcontrol._blas.single_threaded_blas`.

Run: ``.venv/bin/python benchmarks/bench_experiments.py [--quick] [--mardia-only]``.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from gtcontrol._blas import single_threaded_blas
from gtcontrol.experiments import gaussianity, mardia, pretrained_gaussianity
from gtcontrol.experiments.gaussianity import clear_null_cache
from gtcontrol.experiments.sample_statistics import whiten


def _median_time(fn, repeats: int) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def _naive_skewness(x: np.ndarray) -> float:
    z = whiten(x, 1e-9)
    g = z @ z.T  # the full N×N Gram matrix
    return float(np.mean(g * g * g))


def main() -> None:
    quick = "--quick" in sys.argv
    reps = 1 if quick else 3

    # Before torch is loaded (see section 3 for what torch does to BLAS).
    print("== Mardia skewness, N = 10^4, d = 384 ==")
    x = np.random.default_rng(0).standard_normal((10_000, 384))
    blocked = mardia(x).skewness
    naive = _naive_skewness(x)
    print(
        f"blocked {blocked:.10g}  naive {naive:.10g}  rel diff {abs(blocked - naive) / naive:.2e}"
    )
    med_b, _ = _median_time(lambda: mardia(x), reps)
    med_n, _ = _median_time(lambda: _naive_skewness(x), reps)
    print(
        f"blocked median {med_b:.2f} s, naive median {med_n:.2f} s, ratio naive/blocked "
        f"{med_n / med_b:.2f} (memory: blocked 512×N = 41 MB, naive N×N = 800 MB)"
    )
    med_g, _ = _median_time(lambda: gaussianity(x, n_null=8), 1)
    print(f"gaussianity(N=10^4, d=384, n_null=8) incl. null simulation: {med_g:.1f} s")
    if "--mardia-only" in sys.argv:
        return

    print("== pretrained_gaussianity (all-MiniLM-L6-v2) ==")
    t0 = time.perf_counter()
    pretrained_gaussianity(n_tokens=1024, seed=0)
    print(f"first call n_tokens=1024 (load + nulls): {time.perf_counter() - t0:.2f} s")
    for n in (1024,) if quick else (1024, 4096):
        pretrained_gaussianity(n_tokens=n, seed=0)  # warm: model loaded, nulls for (n, rank) cached
        med, ts = _median_time(lambda n=n: pretrained_gaussianity(n_tokens=n, seed=0), reps)
        print(f"n_tokens={n}: median {med:.2f} s over {reps} warm runs {[f'{t:.2f}' for t in ts]}")
        clear_null_cache()
        med, ts = _median_time(lambda n=n: pretrained_gaussianity(n_tokens=n, seed=0), 1)
        print(f"n_tokens={n}: cold nulls {med:.2f} s")

    print("== one-thread BLAS guard with torch loaded ==")
    import torch

    torch.ones(256, 256) @ torch.ones(256, 256)
    y = np.random.default_rng(1).standard_normal((1024, 384))

    def plain() -> None:
        clear_null_cache()
        gaussianity(y, n_null=8)

    def guarded() -> None:
        clear_null_cache()
        with single_threaded_blas():
            gaussianity(y, n_null=8)

    med_p, _ = _median_time(plain, reps)
    med_s, _ = _median_time(guarded, reps)
    print(
        f"default BLAS threads {med_p:.2f} s, one BLAS thread {med_s:.2f} s, "
        f"ratio {med_p / med_s:.2f}"
    )


if __name__ == "__main__":
    main()
