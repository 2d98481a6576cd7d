"""Benchmark of gtcontrol.steer (plain script; timings on a shared 2-core machine are
noisy: repeat and read the medians).

1. d = 3, L = 10 and d = 8, L = 16, kinetic objective, exact terminal: wall time of ``steer``
   (cold: the CasADi NLP is built in the call; warm: the cached NLP is reused), gap to W2²/T,
   re-simulated terminal error. Modes "full" (default) and "ffn".
2. Baseline: the same d = 3 problem in python-control, ``control.optimal.solve_ocp`` in its
   standard documented usage (an ``nlsys`` whose state is (m, vech Σ) and whose inputs are the
   feed-forward parameters (A, b) at the L + 1 time points, linearly interpolated; integral cost
   E|v|²; terminal constraint ``state_range_constraint(sys, x1, x1)``; the closed-form geodesic
   as initial guess; its default collocation method and SLSQP), and documented variants:
   ``trajectory_method="shooting"``, a quadratic terminal cost instead of the constraint, and
   (``--slow-baseline``) ``minimize_method="trust-constr"``.
   Its returned inputs are re-simulated with the adaptive integrator, and their kinetic energy is
   evaluated the same way as ours, so the costs compare like for like.

Targets (issue 4): ≤ 2 s (d = 3) and ≤ 20 s (d = 8) on 2 cores; ours ≥ 20× faster than
python-control at equal or lower cost. The collocation NLP is pinned (``method="collocation"``)
for these rows, plus one row of the flow construction (the default from d = 5 on); the study at
d = 8–64 is ``bench_steering_scale.py``.

Run: ``.venv/bin/python benchmarks/bench_steering.py [--quick] [--no-baseline]
[--slow-baseline]`` (the last adds solve_ocp with trust-constr, about 5 minutes).
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from typing import Any

import numpy as np

from gtcontrol import (
    Collocation,
    Gaussian,
    Layer,
    Status,
    kinetic_energy,
    ot_steering,
    simulate,
    steer,
)
from gtcontrol.model.moments import affine_velocity, moment_field


def _problem(d: int, seed: int) -> tuple[Gaussian, Gaussian]:
    rng = np.random.default_rng(seed)

    def cov() -> np.ndarray:
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        return (q * rng.uniform(0.4, 2.0, d)) @ q.T

    return Gaussian(rng.standard_normal(d), cov()), Gaussian(rng.standard_normal(d), cov())


def _bench_ours(
    d: int, n: int, mode: str, repeats: int, method: str = "collocation"
) -> dict[str, Any]:
    g0, g1 = _problem(d, seed=d)
    cold, warm = [], []
    res = None
    kw = {"layers": n, "mode": mode, "method": method}
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = steer(g0, g1, 1.0, collocation=Collocation(cache=False), **kw)
        cold.append(time.perf_counter() - t0)
    steer(g0, g1, 1.0, **kw)  # fill the cache
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = steer(g0, g1, 1.0, **kw)
        warm.append(time.perf_counter() - t0)
    assert res is not None
    return {
        "cold": statistics.median(cold),
        "warm": statistics.median(warm),
        "success": res.success,
        "status": str(res.status),
        "gap": res.gap,
        "cost": res.kinetic_energy,
        "bound": res.lower_bound,
        "err": res.terminal_error,
        "iterations": res.stats["iterations"],
        "method": method,
    }


class _Interpolated:
    """python-control's input trajectory (A, b linear between time points) as a control."""

    def __init__(self, timepts: np.ndarray, inputs: np.ndarray, d: int) -> None:
        self.timepts, self.inputs, self.d = timepts, inputs, d
        self.T = float(timepts[-1])
        self.breakpoints = timepts

    def layer_at(self, t: float) -> Layer:
        u = np.array([np.interp(t, self.timepts, row) for row in self.inputs])
        d = self.d
        return Layer(A=u[: d * d].reshape(d, d), b=u[d * d :])


def _bench_python_control(d: int, n: int, variant: str) -> dict[str, Any]:
    """One solve_ocp run; ``variant``: "constraint" (terminal equality constraint, default
    collocation and SLSQP), "shooting" (the same with trajectory_method="shooting"),
    "trust-constr" (the same with minimize_method="trust-constr") or "penalty" (quadratic
    terminal cost 1e4 |x(T) − x1|², default collocation)."""
    import control as ct
    import control.optimal as opt

    g0, g1 = _problem(d, seed=d)
    iu = np.triu_indices(d)
    nv = len(iu[0])

    def unpack(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.zeros((d, d))
        s[iu] = x[d:]
        s[(iu[1], iu[0])] = x[d:]
        return x[:d], s

    def layer(u: np.ndarray) -> Layer:
        return Layer(A=u[: d * d].reshape(d, d), b=u[d * d :])

    def updfcn(t: float, x: np.ndarray, u: np.ndarray, params: Any) -> np.ndarray:
        m, s = unpack(x)
        dm, ds = moment_field(layer(u), m, s)
        return np.concatenate([dm, ds[iu]])

    def cost(x: np.ndarray, u: np.ndarray) -> float:
        m, s = unpack(x)
        mm, c = affine_velocity(layer(u), m, s)
        v = mm @ m + c
        return float(np.trace(mm @ s @ mm.T) + v @ v)

    sys_ = ct.nlsys(updfcn, None, states=d + nv, inputs=d * d + d, outputs=d + nv, name="moments")
    timepts = np.linspace(0.0, 1.0, n + 1)
    x0 = np.concatenate([g0.mean, g0.cov[iu]])
    x1 = np.concatenate([g1.mean, g1.cov[iu]])
    geo = ot_steering(g0, g1, 1.0)
    guess = np.array([np.concatenate([a.ravel(), b]) for a, b in map(geo.field_at, timepts)]).T
    kwargs: dict[str, Any] = {"initial_guess": guess, "print_summary": False}
    if variant == "penalty":
        kwargs["terminal_cost"] = opt.quadratic_cost(sys_, 1e4 * np.eye(d + nv), None, x0=x1)
    else:
        kwargs["terminal_constraints"] = opt.state_range_constraint(sys_, x1, x1)
    if variant == "shooting":
        kwargs["trajectory_method"] = "shooting"
    if variant == "trust-constr":
        kwargs["minimize_method"] = "trust-constr"
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = opt.solve_ocp(sys_, timepts, x0, cost, **kwargs)
    except Exception as exc:  # python-control raises when its iterate cannot be simulated
        return {
            "time": time.perf_counter() - t0,
            "success": False,
            "message": repr(exc),
            "own_cost": float("nan"),
            "cost": float("nan"),
            "err": float("nan"),
        }
    elapsed = time.perf_counter() - t0
    ctrl = _Interpolated(timepts, np.asarray(out.inputs), d)
    traj = simulate(ctrl, g0)
    ok = traj.status is Status.SUCCESS
    return {
        "time": elapsed,
        "success": bool(out.success),
        "message": str(out.message),
        "own_cost": float(out.cost),
        "cost": kinetic_energy(ctrl, g0).energy if ok else float("inf"),
        "err": traj.final.bures_wasserstein(g1) if ok else float("inf"),
    }


def _row(name: str, r: dict[str, Any]) -> str:
    return (
        f"{name:<22} cold {r['cold']:7.2f} s  warm {r['warm']:7.2f} s  success {r['success']!s:5}"
        f"  gap {r['gap']:.2e}  cost {r['cost']:.6f}  W2²/T {r['bound']:.6f}  "
        f"terminal err {r['err']:.1e}  iterations {r['iterations']}"
    )


def main() -> None:
    quick = "--quick" in sys.argv
    reps = 1 if quick else 3
    print("== steer, kinetic objective, exact terminal (medians; shared 2-core machine) ==")
    rows = {}
    for d, n in ((3, 10), (8, 16)):
        for mode in ("full", "ffn"):
            r = _bench_ours(d, n, mode, reps if d == 3 else max(1, reps - 1))
            rows[(d, mode)] = r
            print(_row(f"d={d} L={n} {mode}", r), flush=True)
        # The flow construction (no NLP; the default from d = 5 on; see bench_steering_scale.py).
        r = _bench_ours(d, n, "full", reps, method="flow")
        print(_row(f"d={d} L={n} full flow", r), flush=True)
    if "--no-baseline" in sys.argv:
        return
    print("\n== python-control solve_ocp, the same d = 3, L = 10 problem (mode ffn: A, b) ==")
    bound = rows[(3, "ffn")]["bound"]
    variants = ["constraint", "shooting", "penalty"]
    if "--slow-baseline" in sys.argv:
        variants.append("trust-constr")  # about 5 minutes
    for variant in variants:
        base = _bench_python_control(3, 10, variant)
        print(
            f"solve_ocp [{variant}]: {base['time']:.2f} s  converged {base['success']}  "
            f"({base['message'][:90]})\n  own (trapezoidal) cost {base['own_cost']:.6f}; "
            f"re-simulated kinetic energy {base['cost']:.6f} (W2²/T {bound:.6f}); "
            f"terminal err {base['err']:.1e}",
            flush=True,
        )
        for mode in ("ffn", "full"):
            ours = rows[(3, mode)]
            print(
                f"  ours [{mode}] {ours['cold']:.2f} s cold / {ours['warm']:.2f} s warm: "
                f"speed-up {base['time'] / ours['cold']:.1f}× cold, "
                f"{base['time'] / ours['warm']:.1f}× warm; cost {ours['cost']:.6f} vs "
                f"{base['cost']:.6f}; terminal err {ours['err']:.1e} vs {base['err']:.1e}"
            )


if __name__ == "__main__":
    main()
