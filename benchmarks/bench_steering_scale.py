"""Steering at the scale of real models (issue 14): solve time, gap and peak memory against d.

Plain script; each case runs in its own fresh process (cold: nothing cached), repeated, medians
printed. Timings on the shared 2-core machine are noisy (other jobs load it): read the medians
and the ratios, which are measured under the same load.

Problem: the random pair of ``bench_steering._problem(d, seed=d)`` (standard normal means,
covariance eigenvalues uniform in [0.4, 2]), T = 1, L = 8 layers, kinetic objective, exact
terminal condition. For every case: wall time of the call, status, re-simulated terminal W2 error,
kinetic gap ``E/(W2²/T) − 1``, and the process's peak resident memory (``ru_maxrss``) with the
resident memory before the call (the difference is what the solve added).

Side by side:

* ``flow``: ``steer(..., method="flow")`` (the default from d = 5 on), modes full, ffn, attention;
* ``exact``: the closed-form feasible point, ``exact_layer_steering`` (ffn layers; for attention
  the exact attention construction), re-simulated and measured the same way;
* ``collocation``: ``steer(..., method="collocation")``, the CasADi/IPOPT NLP (``--baselines``;
  minutes per case: building the NLP is not interrupted by ``time_limit``);
* ``solve_ocp``: python-control's ``control.optimal.solve_ocp`` in its documented default usage
  (``bench_steering._bench_python_control``, terminal equality constraint, collocation, SLSQP,
  ffn parameters as inputs; ``--baselines``, d = 8).

BLAS threads: the children run with ``OPENBLAS_NUM_THREADS=1`` (``--blas-threads N`` to change).
The matrices here are at most 128 × 128; on the shared, loaded 2-core machine OpenBLAS's second
thread only adds synchronization: the full-mode flow case at d = 32 took 1.5 s with one thread and
28 s with two in the same minute (measured; on an idle machine the difference is small).

Run: ``.venv/bin/python benchmarks/bench_steering_scale.py [--quick] [--baselines]
[--blas-threads N] [--plot docs/figures/steering_scale.png]``.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = 8


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """One case in this (fresh) process."""
    sys.path.insert(0, HERE)
    from bench_steering import _bench_python_control, _problem

    from gtcontrol import exact_layer_steering, kinetic_energy, simulate, steer

    d, mode, method = spec["d"], spec["mode"], spec["method"]
    g0, g1 = _problem(d, seed=d)
    bound = g0.bures_wasserstein(g1) ** 2
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if method == "exact":
        sched = exact_layer_steering(
            g0, g1, 1.0, n_layers=LAYERS, mode="ffn" if mode != "attention" else mode
        )
        final = simulate(sched, g0, rtol=1e-13, atol=1e-16).final
        energy = kinetic_energy(sched, g0, n_points=64 * LAYERS + 1).energy
        out.update(status="success", err=final.bures_wasserstein(g1), gap=energy / bound - 1)
    elif method == "solve_ocp":
        r = _bench_python_control(d, LAYERS, "constraint")
        out.update(
            status="converged" if r["success"] else "not converged",
            err=r["err"],
            gap=r["cost"] / bound - 1,
            note=r["message"][:80],
        )
    else:
        res = steer(
            g0, g1, 1.0, n_layers=LAYERS, mode=mode, method=method, time_limit=spec.get("limit")
        )
        out.update(status=str(res.status), err=res.terminal_error, gap=res.gap)
    out["seconds"] = time.perf_counter() - t0
    out["rss_before_mb"] = rss0 / 1024
    out["rss_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _run(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    threads = "1"
    if "--blas-threads" in sys.argv:
        threads = sys.argv[sys.argv.index("--blas-threads") + 1]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {timeout:g} s", "seconds": math.inf}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"status": f"error: {proc.stderr.strip().splitlines()[-1:]}", "seconds": math.nan}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _median(spec: dict[str, Any], repeats: int, timeout: float) -> dict[str, Any]:
    runs = [_run(spec, timeout) for _ in range(repeats)]
    best = runs[-1]
    for key in ("seconds", "rss_peak_mb", "rss_before_mb"):
        vals = [r[key] for r in runs if key in r]
        if vals:
            best[key] = statistics.median(vals)
    best["repeats"] = repeats
    return best


def _fmt(spec: dict[str, Any], r: dict[str, Any]) -> str:
    gap = r.get("gap", math.nan)
    err = r.get("err", math.nan)
    mem = (
        f"peak {r['rss_peak_mb']:6.0f} MB (+{r['rss_peak_mb'] - r['rss_before_mb']:5.0f})"
        if "rss_peak_mb" in r
        else ""
    )
    return (
        f"{spec['mode']:<9} d={spec['d']:<3} {spec['method']:<11} {r['seconds']:8.2f} s  "
        f"{r['status']:<17} gap {gap:9.2e}  err {err:8.1e}  {mem}  {r.get('note', '')}"
    )


def _plot(rows: list[tuple[dict[str, Any], dict[str, Any]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    styles = {"flow": "-o", "exact": ":s", "collocation": "--^"}
    for mode, color in (("full", "C0"), ("ffn", "C1"), ("attention", "C2")):
        for method, style in styles.items():
            pts = sorted(
                (s["d"], r["seconds"])
                for s, r in rows
                if s["mode"] == mode and s["method"] == method and math.isfinite(r["seconds"])
            )
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, style, color=color, label=f"{mode}, {method}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("dimension d")
    ax.set_ylabel("wall time of the call [s] (median, 2 shared cores)")
    ax.set_title(f"steer, {LAYERS} layers, kinetic objective: time against d")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    if "--child" in sys.argv:
        print(json.dumps(_child(json.loads(sys.argv[sys.argv.index("--child") + 1]))))
        return
    quick = "--quick" in sys.argv
    reps = 1 if quick else 3
    dims = {"full": [8, 16, 32, 64], "ffn": [8, 16, 32, 64], "attention": [8, 16, 32]}
    if quick:
        dims = {"full": [8, 16], "ffn": [8, 16], "attention": [8]}
    specs = [
        {"mode": mode, "d": d, "method": method}
        for mode, ds in dims.items()
        for d in ds
        for method in ("flow", "exact")
    ]
    if "--baselines" in sys.argv:
        specs += [
            {"mode": mode, "d": d, "method": "collocation", "limit": 300.0}
            for mode in ("full", "ffn", "attention")
            for d in (8, 16)
        ]
        specs.append({"mode": "ffn", "d": 8, "method": "solve_ocp"})
    print(f"== steer at scale, L = {LAYERS}, medians of fresh processes (shared 2-core machine) ==")
    rows = []
    for spec in specs:
        slow = spec["method"] in ("collocation", "solve_ocp")
        r = _median(spec, 1 if slow else reps, 900.0 if slow else 600.0)
        rows.append((spec, r))
        print(_fmt(spec, r), flush=True)
    if "--plot" in sys.argv:
        path = sys.argv[sys.argv.index("--plot") + 1]
        _plot(rows, path)
        print(f"figure: {path}")


if __name__ == "__main__":
    main()
