"""Moment model vs token simulation, and the cost of one moment-field evaluation.

Issue items 8a and 8b, in one process:

(a) ``gtcontrol.simulate`` to T = 1 at d = 16 (a seeded, contracting single-head layer)
    against ``simulate_tokens`` with N = 4096 tokens at the same T, with its default (adaptive
    DOP853, ``rtol = 1e-7``) and with the former default (RK4, 20 steps, 80 field evaluations).
    Target ratio tokens/moments ≥ 1000.
(b) One ``moment_field`` evaluation at d = 512 against the three d×d products it needs
    (``V @ (S @ B)``: two, ``M @ S``: one). Target ratio ≤ 1.5.

Candidate and baseline repeats are interleaved so that machine-load changes hit both.

Run: ``.venv/bin/python benchmarks/bench_moments_vs_tokens.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from gtcontrol import Gaussian, Layer, moment_field, simulate, simulate_tokens


def _once(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _spd(rng: np.random.Generator, d: int) -> np.ndarray:
    f = rng.standard_normal((d, d))
    return f @ f.T / d + 0.5 * np.eye(d)


def _layer(rng: np.random.Generator, d: int) -> Layer:
    a = -np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)
    return Layer(A=a, B=0.5 * rng.standard_normal((d, d)) / np.sqrt(d), V=-0.5, b=np.ones(d))


def bench_a(repeats: int) -> None:
    rng = np.random.default_rng(8)
    d, n, T = 16, 4096, 1.0
    layer = _layer(rng, d)
    g0 = Gaussian(rng.standard_normal(d), _spd(rng, d))
    x = g0.sample(n, seed=rng)
    t_mom, t_tok, t_rk4 = [], [], []
    for _ in range(repeats):  # interleaved so that load changes hit all three
        t_mom.append(_once(lambda: simulate(layer, g0, T)))
        t_tok.append(_once(lambda: simulate_tokens(layer, x, T)))
        t_rk4.append(_once(lambda: simulate_tokens(layer, x, T, method="rk4")))
    for _ in range(20):  # the moment side is cheap: more repeats for a stable median
        t_mom.append(_once(lambda: simulate(layer, g0, T)))
    mm, mt, mr = statistics.median(t_mom), statistics.median(t_tok), statistics.median(t_rk4)
    traj = simulate_tokens(layer, x, T)
    rk4 = simulate_tokens(layer, x, T, method="rk4")
    mom = simulate(layer, g0, T)
    if not (traj.success and mom.success and rk4.success):  # a status, never an exception
        raise SystemExit(f"unexpected status: tokens {traj.message}; moments {mom.message}")
    w2 = traj.final.bures_wasserstein(mom.final)
    print(f"(a) d={d}, T={T}: moments (DOP853, rtol 1e-11) vs tokens (N={n})")
    print(f"    moments median {mm * 1e3:.2f} ms over {len(t_mom)} runs")
    print(
        f"    tokens, default (adaptive) median {mt:.2f} s over {len(t_tok)} runs "
        f"({traj.stats['n_velocity']} evals, error estimate {traj.stats['error_estimate']:.1e})"
    )
    print(
        f"    tokens, RK4 x 20 (former default) median {mr:.2f} s "
        f"({rk4.stats['n_velocity']} evals); adaptive/RK4 time ratio {mt / mr:.2f}"
    )
    print(f"    ratio tokens/moments: {mt / mm:.0f}x (target >= 1000x)")
    print(f"    W2(tokens, moments) at T: {w2:.3e} (sampling error, ~N^-1/2)")


def bench_b(repeats: int) -> None:
    rng = np.random.default_rng(9)
    d = 512
    a, bm, v = (rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(3))
    layer = Layer(A=a, B=bm, V=v)
    m, s = rng.standard_normal(d), _spd(rng, d)

    def three_products() -> np.ndarray:
        mm = v @ (s @ bm)
        return mm @ s

    t_field, t_base = [], []
    for _ in range(repeats):
        t_field.append(_once(lambda: moment_field(layer, m, s)))
        t_base.append(_once(three_products))
    mf, mb = statistics.median(t_field), statistics.median(t_base)
    print(f"(b) d={d}: one moment_field evaluation vs its three d×d products ({repeats} runs)")
    print(f"    moment_field median {mf * 1e3:.2f} ms, three products median {mb * 1e3:.2f} ms")
    print(f"    ratio: {mf / mb:.2f} (target <= 1.5)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="token-simulation repeats in (a)")
    ap.add_argument("--field-repeats", type=int, default=51, help="repeats in (b)")
    args = ap.parse_args()
    bench_a(args.repeats)
    bench_b(args.field_repeats)


if __name__ == "__main__":
    main()
