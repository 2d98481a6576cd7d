"""Benchmarks of the Riccati/Bernoulli tools (issue 3). Plain script: ``python bench_riccati.py``.

1. Exact blow-up time (certified march on G(t) = I + Fᵀ W(t) F) vs integrating the moment ODE to
   the blow-up event (DOP853, rtol 1e-11): time and error against the closed forms (theory §2–3).
2. Bernoulli equilibrium at d = 200 (``equilibria``: SB03MD solve, Cholesky inverse, residual,
   closed-form spectrum) vs a bare ``control.lyap`` call of the same size (target ≤ 2×, residual
   ≤ 1e-10); the SB02MD cross-check is timed separately.
3. Newton–Kantorovich at d = 50 on a general-V layer: iterations and time, GMRES with the
   Lyapunov preconditioner vs dense Kronecker steps.

Candidate and baseline run in the same process, interleaved, ``REPEATS`` times; medians and
ratios are printed. Timings on a shared machine are noisy; OpenBLAS threading on small matrices
can dominate (run with ``OPENBLAS_NUM_THREADS=1`` for the small-matrix parts).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import control
import numpy as np

from gtcontrol import Gaussian, Layer, Status, simulate
from gtcontrol.analysis.blowup import blowup_analysis
from gtcontrol.analysis.equilibria import equilibria
from gtcontrol.analysis.newton import NewtonSettings, newton_equilibrium
from gtcontrol.analysis.riccati import riccati_form

REPEATS = 7


def _median_time(fn: Callable[[], Any], repeats: int = REPEATS) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _spd(rng: np.random.Generator, d: int, lo: float, hi: float) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(lo, hi, d)) @ q.T


def _section(title: str, seed: int) -> np.random.Generator:
    """Print a benchmark's heading; return the generator its random data is drawn from."""
    print(f"== {title}")
    return np.random.default_rng(seed)


def bench_blowup() -> None:
    rng = _section("1. blow-up time: certified Riccati march vs integration to the event", seed=0)
    cases = []
    a, c, s0 = 1.0, 0.5, 0.3
    cases.append(
        (
            "d=1 scalar a>0",
            Layer(A=[[a]], B=[[c]], V=1.0),
            Gaussian([0.0], [[s0]]),
            math.log(1 + a / (c * s0)) / (2 * a),
        )
    )
    d = 8
    b = _spd(rng, d, 0.2, 1.0)
    cov = _spd(rng, d, 0.3, 1.5)
    lay = Layer(B=b, V=0.6, dim=d)
    r = riccati_form(lay).R
    w, u = np.linalg.eigh(cov)
    half = (u * np.sqrt(w)) @ u.T
    cases.append(
        (
            "d=8 A=0, R≺0",
            lay,
            Gaussian(np.zeros(d), cov),
            1.0 / np.linalg.eigvalsh(half @ (-r) @ half)[-1],
        )
    )
    d = 6
    av = rng.uniform(-1.0, 1.0, d)
    cv = rng.uniform(0.2, 1.0, d)
    sv = rng.uniform(0.5, 2.0, d)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    # Diagonal in a rotated basis: coordinates decouple, T* = min of the scalar closed forms.
    lay = Layer(A=q @ np.diag(av) @ q.T, B=q @ np.diag(cv) @ q.T, V=1.0)
    t_cf = min(
        math.log(1 + ai / (ci * si)) / (2 * ai) if ai != 0 else 1 / (2 * ci * si)
        for ai, ci, si in zip(av, cv, sv)
    )
    cases.append(("d=6 rotated diagonal", lay, Gaussian(np.zeros(d), q @ np.diag(sv) @ q.T), t_cf))
    print(
        f"{'case':24s} {'exact [ms]':>11s} {'integr. [ms]':>13s} {'ratio':>7s} "
        f"{'exact rel.err':>14s} {'integr. rel.err':>16s}"
    )
    for name, lay, g0, t_cf in cases:
        te, res = _median_time(lambda lay=lay, g0=g0: blowup_analysis(lay, g0))
        ti, traj = _median_time(
            lambda lay=lay, g0=g0, t_cf=t_cf: simulate(lay, g0, 1.5 * t_cf, n_points=2)
        )
        err_e = abs(res.blowup_time - t_cf) / t_cf
        err_i = abs(traj.blowup_time - t_cf) / t_cf
        print(
            f"{name:24s} {te * 1e3:11.2f} {ti * 1e3:13.2f} {te / ti:7.2f} "
            f"{err_e:14.2e} {err_i:16.2e}"
        )


def bench_bernoulli(d: int = 200) -> None:
    rng = _section(f"2. Bernoulli equilibrium at d = {d} vs a bare control.lyap", seed=1)
    a = rng.standard_normal((d, d)) / np.sqrt(d) + 2.0 * np.eye(d)
    b = _spd(rng, d, 0.5, 1.5)
    v = -0.5
    lay = Layer(A=a, B=b, V=v)
    r = -v * (b + b.T)
    t_eq, t_ly = [], []
    res = None
    for _ in range(REPEATS):  # interleaved
        t = time.perf_counter()
        x = control.lyap(a.T, -r)
        t_ly.append(time.perf_counter() - t)
        t = time.perf_counter()
        res = equilibria(lay, cross_check=False)
        t_eq.append(time.perf_counter() - t)
    m_eq, m_ly = statistics.median(t_eq), statistics.median(t_ly)
    assert res is not None and res.status is Status.SUCCESS
    ly_res = np.linalg.norm(a.T @ x + x @ a - r) / (2 * np.linalg.norm(a.T @ x))
    print(
        f"equilibria(cross_check=False) {m_eq * 1e3:8.1f} ms   control.lyap {m_ly * 1e3:8.1f} ms"
        f"   ratio {m_eq / m_ly:.2f} (target ≤ 2)"
    )
    print(
        f"relative residual of Σ*: {res[0].residual:.2e} (target ≤ 1e-10); "
        f"lyap residual {ly_res:.2e}; stable={res[0].stable}, "
        f"abscissa {res[0].spectral_abscissa:.4f}"
    )
    t_cc, res_cc = _median_time(lambda: equilibria(lay, cross_check=True), repeats=3)
    cc = res_cc.stats["cross_check"]
    print(
        f"with the SB02MD cross-check: {t_cc * 1e3:.1f} ms, SB03MD vs SB02MD rel. diff "
        f"{cc['rel_diff']:.2e}, SB02MD residual {cc['residual']:.2e}"
    )


def bench_newton(d: int = 50) -> None:
    rng = _section(f"3. Newton–Kantorovich at d = {d} (general V)", seed=2)
    s = _spd(rng, d, 0.4, 2.5)
    p = _spd(rng, d, 0.4, 1.5)
    si = np.linalg.inv(s)
    # Known stable equilibrium s of the unperturbed layer (M* = 0, DF = −2PHP); the perturbation
    # of A moves it to an unknown nearby one.
    lay = Layer(A=p @ s @ p @ si + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d), B=p @ si, V=-p)
    for label, kmax in (("GMRES + Lyapunov precond.", 40), ("dense Kronecker", 60)):
        reps = 5 if kmax == 40 else 2
        t, res = _median_time(
            lambda kmax=kmax: newton_equilibrium(lay, s, newton=NewtonSettings(kron_max_dim=kmax)),
            repeats=reps,
        )
        hist = ", ".join(f"{x:.1e}" for x in res.residuals)
        print(
            f"{label:27s} {t * 1e3:9.1f} ms  {res.iterations} iterations, "
            f"{res.stats['gmres_iterations']} GMRES its, status {res.status}"
        )
        print(f"   residuals: {hist}")


if __name__ == "__main__":
    bench_blowup()
    bench_bernoulli()
    bench_newton()
