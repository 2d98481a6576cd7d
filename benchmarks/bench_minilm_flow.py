"""Every MiniLM-L6 attention sublayer as a continuous-depth flow: speed and truth (issue 11).

For each of the 6 attention sublayers of all-MiniLM-L6-v2 (``ExtractedLayer.attention_layer``:
``d = 385`` with the affine coordinate last, 12 factored heads of width 32) and the initial law
``N(e, I_384 ⊕ 0)`` (``e`` the affine coordinate) the script runs, in one process:

1. ``gt.simulate(layer, g0, T=1)``: wall time, status, ``blowup_time``, ``blowup_bracket``, nfev;
2. an **independent dense reference** written here: ``scipy.integrate.solve_ivp`` (DOP853,
   rtol 1e-10) on the full 384×384 covariance block ``S`` with the dense heads ``(V_h, B_h)``
   of ``ExtractedLayer.heads``: ``dS/dt = M S + S Mᵀ``, ``M = Σ_h V_h S B_h`` (the key tilt and
   the mean do not enter the covariance), stopped by an event on ``tr S`` (1e6 then 1e7) and
   extrapolated by the tangent of ``1/tr S`` (``t* ≈ t + tr/(d tr/dt)``); the difference of the
   two extrapolations is the reference's own error estimate. Nothing of gtcontrol's field or
   integrator is used;
3. ``gt.analyze(layer, g0)`` (time, status, kind) and ``gt.equilibria(layer)`` with its
   default budget (time, status).

The reference costs ``2 H d³`` per evaluation (≈ 1.4 GFLOP·2), far more than the factored field,
so its t* values are cached in ``benchmarks/minilm_reference.json`` (recomputed with
``--recompute``; missing layers are computed). Targets (issue 11): simulate ≤ 20 s per layer
(hard ceiling 60 s), t* within 1e-4 relative of the reference, analyze ≤ 60 s, equilibria
returns within its default budget.

BLAS runs on ``--threads`` threads (default 1, threadpoolctl): once torch is loaded, OpenBLAS's
threads compete with torch's on small machines (an ``eigh`` of size 384 was measured 6× slower
with 2 threads than with 1).

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_minilm_flow.py [--layers 0 1 2 3 4 5]
[--threads 1] [--recompute] [--reference-only] [--skip-analyze] [--skip-equilibria]``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp
from threadpoolctl import threadpool_limits

import gtcontrol as gt
from gtcontrol.interop import extract

CACHE = Path(__file__).with_name("minilm_reference.json")


def initial(d: int) -> gt.Gaussian:
    """``N(e, I ⊕ 0)`` on ``R^d`` (the affine coordinate last)."""
    m0 = np.zeros(d)
    m0[-1] = 1.0
    s0 = np.eye(d)
    s0[-1, -1] = 0.0
    return gt.Gaussian(m0, s0)


def dense_reference(heads: Any, *, rtol: float = 1e-10, T: float = 1.0) -> dict[str, Any]:
    """Independent t*: DOP853 on the full covariance block with dense heads (module doc)."""
    v_cat = np.concatenate([np.asarray(v) for v, _ in heads], axis=1)  # (d, H d)
    b_cat = np.concatenate([np.asarray(b) for _, b in heads], axis=1)  # (d, H d)
    d, n_heads = v_cat.shape[0], len(heads)
    nfev = 0

    def rhs(_t: float, y: np.ndarray) -> np.ndarray:
        nonlocal nfev
        nfev += 1
        s = y.reshape(d, d)
        sb = (s @ b_cat).reshape(d, n_heads, d).transpose(1, 0, 2).reshape(n_heads * d, d)
        m = v_cat @ sb  # Σ_h V_h S B_h
        p = m @ s
        return np.asarray((p + p.T).ravel())

    def trace_event(level: float, terminal: bool) -> Any:
        def ev(_t: float, y: np.ndarray) -> float:
            return float(np.trace(y.reshape(d, d))) - level

        ev.terminal = terminal  # type: ignore[attr-defined]
        ev.direction = 1  # type: ignore[attr-defined]
        return ev

    clock = time.perf_counter()
    sol = solve_ivp(
        rhs,
        (0.0, T),
        np.eye(d).ravel(),
        method="DOP853",
        rtol=rtol,
        atol=rtol * 1e-3,
        events=[trace_event(1e6, False), trace_event(1e7, True)],
    )
    seconds = time.perf_counter() - clock
    estimates = []
    for k in range(2):
        if len(sol.t_events[k]) == 0:
            continue
        t_e, y_e = float(sol.t_events[k][0]), sol.y_events[k][0]
        tr = float(np.trace(y_e.reshape(d, d)))
        dtr = float(np.trace(rhs(t_e, y_e).reshape(d, d)))
        estimates.append(t_e + tr / dtr)
    info = {"seconds": seconds, "nfev": nfev, "message": str(sol.message)}
    info["trace_end"] = float(np.trace(sol.y[:, -1].reshape(d, d)))
    info["t_end"] = float(sol.t[-1])
    if not estimates:
        return {"t_star": math.inf, "error": math.nan, **info}
    err = abs(estimates[-1] - estimates[0]) if len(estimates) == 2 else math.nan
    return {"t_star": estimates[-1], "error": err, **info}


def _load_cache() -> dict[str, Any]:
    if CACHE.is_file():
        data: dict[str, Any] = json.loads(CACHE.read_text("utf-8"))
        return data
    return {}


def _fmt(x: float, spec: str = ".10g") -> str:
    return "inf" if math.isinf(x) else format(x, spec)


def bench_layer(k: int, ext: Any, ref: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One layer: simulate (and analyze, equilibria) against the cached dense reference."""
    layer = ext.attention_layer
    g0 = initial(layer.dim)
    clock = time.perf_counter()
    traj = gt.simulate(layer, g0, T=1.0)
    row: dict[str, Any] = {
        "layer": k,
        "sim_s": time.perf_counter() - clock,
        "status": str(traj.status),
        "t_star": traj.blowup_time,
        "bracket": traj.blowup_bracket,
        "nfev": traj.stats["nfev"],
        "ref_t_star": ref["t_star"],
        "ref_err": ref["error"],
        "ref_s": ref["seconds"],
        "ref_nfev": ref["nfev"],
    }
    t_ref = ref["t_star"]
    br = traj.blowup_bracket
    if math.isfinite(t_ref):
        row["rel"] = abs(traj.blowup_time - t_ref) / t_ref
        # the reference's own error estimate widens the bracket on both sides
        err = ref["error"]
        row["in_bracket"] = bool(br is not None and br[0] - err <= t_ref <= br[1] + err)
    else:  # no blow-up before T: compare tr Σ(T)
        tr_end = float(np.trace(traj.cov[-1]))
        row["rel"] = abs(tr_end - ref["trace_end"]) / ref["trace_end"]
        row["in_bracket"] = "n/a (tr Σ(T))"
    if not args.skip_analyze:
        clock = time.perf_counter()
        reg = gt.analyze(layer, g0)
        row["analyze_s"] = time.perf_counter() - clock
        row["analyze"] = f"{reg.status}/{reg.kind}"
    if not args.skip_equilibria:
        clock = time.perf_counter()
        eqs = gt.equilibria(layer)
        row["eq_s"] = time.perf_counter() - clock
        row["eq"] = f"{eqs.status} ({len(eqs)} found)"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=list(range(6)))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--recompute", action="store_true")
    parser.add_argument("--skip-analyze", action="store_true")
    parser.add_argument("--skip-equilibria", action="store_true")
    parser.add_argument("--reference-only", action="store_true", help="only fill the cache")
    args = parser.parse_args()
    layers = extract("minilm").layers
    cache = {} if args.recompute else _load_cache()
    rows = []
    with threadpool_limits(args.threads, user_api="blas"):
        for k in args.layers:
            key = f"layer{k}"
            if key not in cache:
                ext = layers[k]
                cache[key] = dense_reference(ext.heads)
                CACHE.write_text(json.dumps(cache, indent=1) + "\n", "utf-8")
                print(key, cache[key], flush=True)
            if args.reference_only:
                continue
            row = bench_layer(k, layers[k], cache[key], args)
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    print()
    print(
        "| layer | status | t* (ours) | t* (dense ref.) | rel. diff | bracket ∋ ref. (± its err.) "
        "| simulate s | nfev | ref. s | ref. nfev | ratio | analyze | analyze s "
        "| equilibria | eq. s |"
    )
    print("|" + "---|" * 15)
    for r in rows:
        print(
            f"| {r['layer']} | {r['status']} | {_fmt(r['t_star'], '.12g')} | "
            f"{_fmt(r['ref_t_star'], '.12g')} | {r['rel']:.1e} | {r['in_bracket']} | "
            f"{r['sim_s']:.1f} | {r['nfev']} | {r['ref_s']:.0f} | {r['ref_nfev']} | "
            f"{r['ref_s'] / r['sim_s']:.1f}× | {r.get('analyze', '-')} | "
            f"{r.get('analyze_s', math.nan):.1f} | {r.get('eq', '-')} | "
            f"{r.get('eq_s', math.nan):.1f} |"
        )


if __name__ == "__main__":
    main()
