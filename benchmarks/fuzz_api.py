"""Fuzz the public API (issue 12). Plain script: ``python benchmarks/fuzz_api.py [N] [SEED]``.

Generates ``N`` (default 2,000) seeded API calls — hostile arrays (complex, object, huge Python
ints, 1e308 entries, NaN/inf, ragged, empty, wrong shapes, strings), wrong option types,
extreme magnitudes — over the public entry points, runs each in a worker process of a pool with
a per-call timeout, and prints the counts by outcome:

``ok``                 a result (checked where a check is cheap: finite PSD covariances, W2 ≥ 0,
                       OT exactness, ``success`` consistent with the re-simulated error)
``GTControlError``     a clean error naming the input
``raw <Type>``         any other exception (a defect)
``hang``               no answer within the timeout (a defect; the worker is killed)
``wrong``              a checkable answer that is false (a defect)

Also prints the wall time used and, for every defect, one example call.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings
from collections import Counter
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

#: Seconds a call may take before it counts as a hang.
TIMEOUT = 30.0


# ============================================================================ generators
def _matrix(rng: np.random.Generator, d: int) -> Any:
    """A d×d matrix argument: mostly valid, often hostile."""
    k = int(rng.integers(0, 16))
    a = rng.standard_normal((d, d))
    hostile: list[Any] = [
        a,
        a @ a.T + 0.1 * np.eye(d),
        a.astype(complex) + 1j,
        np.array(a, dtype=object),
        [[10**400] * d] * d,
        np.full((d, d), 1e308),
        np.full((d, d), 1e200),
        np.full((d, d), np.nan),
        np.full((d, d), np.inf),
        [[1.0] * d, [1.0]] if d > 1 else [[1.0], []],
        np.zeros((0, 0)),
        rng.standard_normal((d + 1, d)),
        "abc",
        None,
        -np.eye(d),
        np.diag(10.0 ** rng.uniform(-300, 150, d)),
    ]
    return hostile[k]


def _vector(rng: np.random.Generator, d: int) -> Any:
    k = int(rng.integers(0, 11))
    v = rng.standard_normal(d)
    hostile: list[Any] = [
        v,
        v * 1e100,
        v + 1j,
        [10**400] + [0] * (d - 1),
        np.full(d, np.nan),
        np.zeros(0),
        np.zeros(d + 1),
        ["x"] * d,
        [None] * d,
        [1e308] * d,
        rng.standard_normal((d, 1)),
    ]
    return hostile[k]


def _option(rng: np.random.Generator) -> Any:
    k = int(rng.integers(0, 12))
    return [
        1e-8,
        "x",
        -1.0,
        0.0,
        float("nan"),
        float("inf"),
        10**400,
        True,
        None,
        [1.0],
        1e-300,
        2,
    ][k]


def _spd(rng: np.random.Generator, d: int, scale: float = 1.0) -> Any:
    a = rng.standard_normal((d, d))
    return scale * (a @ a.T + 0.1 * np.eye(d))


def make_case(i: int, seed: int) -> tuple[str, dict[str, Any]]:
    """The ``i``-th call: an entry-point name and its arguments."""
    rng = np.random.default_rng([seed, i])
    d = int(rng.integers(1, 4))
    kinds = [
        "gaussian",
        "sample",
        "bures",
        "layer",
        "simulate",
        "tokens",
        "equilibria",
        "ot",
        "kalman",
        "layer_at",
        "exact",
        "steer",
        "analyze",
    ]
    weights = np.array([3, 2, 2, 3, 3, 2, 2, 2, 2, 1, 1, 0.3, 1.5])
    kind = str(rng.choice(kinds, p=weights / weights.sum()))
    valid = rng.random() < 0.3  # a share of fully valid calls, checked for wrong answers
    args: dict[str, Any] = {"d": d, "valid": valid}
    mat = (lambda: _spd(rng, d)) if valid else (lambda: _matrix(rng, d))
    vec = (lambda: rng.standard_normal(d)) if valid else (lambda: _vector(rng, d))
    opt = (lambda: 1e-8) if valid else (lambda: _option(rng))
    if kind in ("gaussian", "bures", "ot", "exact"):
        args.update(m0=vec(), c0=mat(), m1=vec(), c1=mat())
        if kind in ("ot", "exact"):
            args["c1"] = _spd(rng, d, float(10.0 ** rng.uniform(-8, 3))) if valid else args["c1"]
    elif kind == "sample":
        args.update(
            n=[3, 0, -1, 2.5, 10**12, "3", True][int(rng.integers(0, 7))] if not valid else 3,
            rng=[None, 1, "x", -1, 1.5, np.random.default_rng(0)][int(rng.integers(0, 6))]
            if not valid
            else 0,
        )
    elif kind in ("layer", "simulate", "tokens", "equilibria", "analyze"):
        a_mat = rng.standard_normal((d, d)) if valid else _matrix(rng, d)
        b_mat = rng.standard_normal((d, d)) if valid else _matrix(rng, d)
        v_mat = rng.standard_normal((d, d)) if valid else _matrix(rng, d)
        args.update(
            A=a_mat,
            B=b_mat,
            V=v_mat,
            m0=vec(),
            c0=mat(),
            rtol=opt(),
            T=float(rng.uniform(0.1, 2)) if valid else _option(rng),
            dtype=["float64", "bogus", np.float32, None, 3][int(rng.integers(0, 5))],
        )
    elif kind == "kalman":
        args.update(
            F=mat() if valid else _matrix(rng, d),
            H=np.eye(d) if valid else _matrix(rng, d),
            R=np.eye(d) if valid else _matrix(rng, d),
            Q=mat(),
        )
    elif kind == "layer_at":
        args["t"] = [0.5, float("nan"), float("inf"), -1.0, "x", None, 1e308][
            int(rng.integers(0, 7))
        ]
    elif kind == "steer":
        args.update(
            m0=rng.standard_normal(d),
            c0=_spd(rng, d),
            m1=rng.standard_normal(d),
            c1=_spd(rng, d),
            objective=str(rng.choice(["kinetic", "parameter"])),
            cov_bound=[None, 10.0, "x", -1.0][int(rng.integers(0, 4))],
        )
    return kind, args


# ============================================================================ execution
def _w2_check(a: Any, b: Any, tol: float) -> str:
    w = a.bures_wasserstein(b)
    return "" if w <= tol else f"W2 {w:.3g} > {tol:.3g}"


def run_case(i: int, seed: int) -> tuple[int, str, str]:
    """Run one call: ``(i, outcome, detail)``."""
    import gtcontrol as gc
    from gtcontrol import Gaussian, Layer

    kind, a = make_case(i, seed)
    wrong = ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("error", RuntimeWarning)
            if kind == "gaussian":
                g = Gaussian(a["m0"], a["c0"])
                if not np.all(np.isfinite(g.cov)) or np.linalg.eigvalsh(g.cov)[0] < -1e-6 * max(
                    1.0, float(np.abs(g.cov).max())
                ):
                    wrong = "accepted a non-finite or non-PSD covariance"
            elif kind == "sample":
                x = Gaussian([0.0], [[1.0]]).sample(a["n"], a["rng"])
                wrong = "" if np.all(np.isfinite(x)) else "non-finite samples"
            elif kind == "bures":
                g0, g1 = Gaussian(a["m0"], a["c0"]), Gaussian(a["m1"], a["c1"])
                w = g0.bures_wasserstein(g1)
                w_self = g0.bures_wasserstein(g0)
                scale = float(np.sqrt(np.trace(g0.cov))) + 1.0
                if not (np.isfinite(w) and w >= 0 and w_self <= 1e-12 * scale):
                    wrong = f"W2 = {w}, W2(g, g) = {w_self}"
            elif kind == "layer":
                Layer(A=a["A"], heads=[(a["V"], a["B"])])
            elif kind == "simulate":
                lay = Layer(A=a["A"], heads=[(a["V"], a["B"])])
                tr = gc.simulate(
                    lay, Gaussian(a["m0"], a["c0"]), T=a["T"], rtol=a["rtol"], time_limit=10.0
                )
                if (
                    tr.success
                    and tr.status is gc.Status.SUCCESS
                    and not np.all(np.isfinite(tr.final.cov))
                ):
                    wrong = "SUCCESS with a non-finite covariance"
            elif kind == "tokens":
                lay = Layer(A=a["A"], heads=[(a["V"], a["B"])])
                x0 = np.random.default_rng(i).standard_normal((8, a["d"]))
                gc.simulate_tokens(lay, x0, T=a["T"], dtype=a["dtype"], time_limit=10.0)
            elif kind == "equilibria":
                lay = Layer(A=a["A"], heads=[(a["V"], a["B"])])
                res = gc.equilibria(lay, tol=a["rtol"] if not a["valid"] else 1e-12)
                if res.status is gc.Status.SUCCESS and any(e.residual > 1e-6 for e in res):
                    wrong = "SUCCESS with a large residual"
            elif kind == "analyze":
                lay = Layer(A=a["A"], heads=[(a["V"], a["B"])])
                gc.analyze(lay, Gaussian(a["m0"], a["c0"]), time_limit=10.0)
            elif kind == "ot":
                g0, g1 = Gaussian(a["m0"], a["c0"]), Gaussian(a["m1"], a["c1"])
                geo = gc.ot_steering(g0, g1, T=1.0)
                end = Gaussian(geo.mean_at(1.0), geo.cov_at(1.0))
                wrong = _w2_check(end, g1, 1e-9 * (1 + float(np.sqrt(np.trace(g1.cov)))))
            elif kind == "exact":
                g0, g1 = Gaussian(a["m0"], a["c0"]), Gaussian(a["m1"], a["c1"])
                sched = gc.exact_layer_steering(g0, g1, T=1.0, layers=4)
                fin = gc.simulate(sched, g0, time_limit=10.0)
                if fin.success:
                    scale = 1 + float(np.sqrt(np.trace(g1.cov)))
                    wrong = _w2_check(fin.final, g1, 1e-6 * scale)
            elif kind == "kalman":
                gc.from_kalman(a["F"], a["H"], a["R"], a["Q"])
            elif kind == "layer_at":
                gc.Schedule([Layer(dim=1), Layer(dim=1)], T=1.0).layer_at(a["t"])
            elif kind == "steer":
                g0, g1 = Gaussian(a["m0"], a["c0"]), Gaussian(a["m1"], a["c1"])
                res = gc.steer(
                    g0,
                    g1,
                    1.0,
                    layers=3,
                    objective=a["objective"],
                    cov_bound=a["cov_bound"],
                    time_limit=15.0,
                )
                if res.success and not res.terminal_error <= 1e-6:
                    wrong = f"success with terminal error {res.terminal_error:.3g}"
    except gc.GTControlError:
        return i, "GTControlError", kind
    except Exception as exc:  # counting raw exceptions is the point
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return (
            i,
            f"raw {type(exc).__name__}",
            f"{kind}: {exc!s:.120} at {where.filename}:{where.lineno}",
        )
    if wrong:
        return i, "wrong", f"{kind}: {wrong}"
    return i, "ok", kind


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    workers = int(os.environ.get("FUZZ_WORKERS", max(1, (os.cpu_count() or 2))))
    clock = time.perf_counter()
    counts: Counter[str] = Counter()
    by_kind: Counter[tuple[str, str]] = Counter()
    examples: dict[str, str] = {}
    ctx = mp.get_context("fork")
    pool = ctx.Pool(workers, maxtasksperchild=200)
    pending = {i: pool.apply_async(run_case, (i, seed)) for i in range(n)}
    for i in range(n):
        try:
            _, outcome, detail = pending[i].get(timeout=TIMEOUT)
        except mp.TimeoutError:
            outcome, detail = "hang", f"{make_case(i, seed)[0]} (case {i})"
            pool.terminate()
            pool = ctx.Pool(workers, maxtasksperchild=200)
            pending.update({j: pool.apply_async(run_case, (j, seed)) for j in range(i + 1, n)})
        counts[outcome] += 1
        kind = detail.split(":")[0].split(" ")[0]
        by_kind[(kind, outcome)] += 1
        if outcome not in ("ok", "GTControlError") and outcome not in examples:
            examples[outcome] = f"case {i}: {detail}"
    pool.terminate()
    seconds = time.perf_counter() - clock
    print(f"{n} API calls, seed {seed}, {workers} workers, timeout {TIMEOUT:g} s per call")
    for outcome, c in counts.most_common():
        print(f"  {outcome:28s} {c:6d}")
    print(f"time used: {seconds:.1f} s")
    for outcome, ex in examples.items():
        print(f"  example {outcome}: {ex}")
    print("by entry point:", dict(sorted(by_kind.items())))


if __name__ == "__main__":
    main()
