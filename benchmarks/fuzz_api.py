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
``wrong``              a checkable answer that is false, or a ``success`` that contradicts its
                       own numbers or requirements (a defect)
``overtime``           a call with a finite ``time_limit`` that ended more than
                       ``max(1 s, 10 %)`` (plus 0.5 s of scheduling noise) after it (a defect)

The generators of the second hostile round (issue 22) add: ``time_limit`` at every size
(``d`` up to 256, up to 8192 tokens; tiny, ordinary and hostile limits: NaN, inf, bools, huge
and negative integers), extreme covariance scales (``10^±100``), rank-deficient steering, design
targets with condition numbers up to ``10¹²``, token checks, and hostile seeds.

The ``stabilize`` family (third hostile round) drives :func:`gtcontrol.stabilize` over target
scales ``1e-200 … 1e150`` (heads in the target's units or not), condition numbers up to
``1e12``, means up to ``1e12``, noisy layers, factored and dense heads, ``add`` = head, gains,
auto, several rates and time limits (small ones at ``d`` = 64 and 96). Its calls record warnings
instead of raising them: ``noisy <Category>`` counts a call that printed one (a defect). Each
``SUCCESS`` is checked independently (numpy, in units where ``Σ*`` is of order 1): the residual
of the equilibrium equations for the returned layer, the shift of its exact equilibrium from the
target (``L⁻¹F``, ``K⁻¹ṁ``), and the dense Kronecker spectrum's abscissa ``≤ −rate`` (``d ≤
16``). ``FUZZ_ONLY=stabilize`` draws every case from that family (any of the second-round kinds
may be named, comma-separated).

The ``planted`` family (third hostile round) starts ``blowup_analysis`` and ``analyze`` on and
near planted equilibria of the Riccati class (d = 2…6, repelling, attracting and saddle, starts
from exactly on the equilibrium to 1e-3 away, tests/_planted.py) and checks every certified
claim against an independent 50-digit computation on the same floats: a contradicted
certificate counts as ``wrong``.

Every call records warnings instead of printing them: ``noisy <Category>`` counts a call that
emitted one on its way (a defect: valid or hostile input gets an answer or a clean error, never
a raw warning).

Also prints the wall time used and, for every defect, one example call.
"""

from __future__ import annotations

import math
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
#: Share of the calls drawn from the generators of the second hostile round (issue 22).
HOSTILE2_SHARE = float(os.environ.get("FUZZ_HOSTILE2_SHARE", "0.5"))
#: Share of the calls drawn from the planted-equilibrium certificate family.
PLANTED_SHARE = float(os.environ.get("FUZZ_PLANTED_SHARE", "0.1"))
#: Only these second-round kinds (comma-separated; empty: the usual mix).
ONLY = tuple(k for k in os.environ.get("FUZZ_ONLY", "").split(",") if k)


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


#: Solvers driven by the ``budget`` generator, and the sizes they are driven at.
BUDGET_SOLVERS = (
    "simulate",
    "simulate_tokens",
    "steer",
    "design_mean_matching",
    "compare_tokens",
    "design_token_certificate",
    "design_robustness",
    "kinetic_energy",
    "equilibria",
    "analyze",
    "blowup_analysis",
)
SIZES = (2, 3, 4, 8, 16, 32, 64, 128, 256)
TOKENS = (64, 512, 2048, 8192)
#: Finite time limits, and hostile ones (refused, or no limit: only at small sizes).
LIMITS = (1e-9, 0.01, 0.1, 0.3, 1.0)
BAD_LIMITS: tuple[Any, ...] = (math.nan, -1.0, 0, True, -(10**400), "1", [1.0])
NO_LIMITS: tuple[Any, ...] = (math.inf, 10**400, 1e10, None)
#: Solvers whose case ends within seconds at d ≤ 4 without a time limit.
UNLIMITED_OK = ("simulate", "equilibria", "analyze", "blowup_analysis", "design_mean_matching")
SEEDS: tuple[Any, ...] = (0, 7, 2**63, 10**40, -1, True, 1.5, math.nan, "1", None)


def allowed(limit: float) -> float:
    """docs/architecture.md: a solver ends within ``max(1 s, 10 %)`` of its time limit."""
    return limit + max(1.0, 0.1 * limit)


def _ill_spd(rng: np.random.Generator, d: int, condition: float, scale: float = 1.0) -> Any:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return scale * (q * np.logspace(0, -math.log10(condition), d)) @ q.T


def _lowrank(rng: np.random.Generator, d: int, r: int, scale: float = 1.0) -> Any:
    m = rng.standard_normal((d, r))
    return scale * m @ m.T / max(r, 1)


def make_hostile2(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Arguments of the second-round generators (see the module docstring)."""
    args: dict[str, Any] = {"valid": True}
    if kind == "budget":
        solver = str(rng.choice(BUDGET_SOLVERS))
        d = int(rng.choice(SIZES))
        u = rng.random()
        if u < 0.15:
            limit: Any = BAD_LIMITS[int(rng.integers(0, len(BAD_LIMITS)))]
        elif u < 0.25 and d <= 4 and solver in UNLIMITED_OK:
            limit = NO_LIMITS[int(rng.integers(0, len(NO_LIMITS)))]
        else:
            limit = float(rng.choice(LIMITS))
        n_tok = int(rng.choice(TOKENS))
        if solver in ("simulate_tokens", "compare_tokens", "design_token_certificate"):
            d = min(d, 32)
        args.update(solver=solver, d=d, limit=limit, n=n_tok, seed=int(rng.integers(0, 99)))
    elif kind == "scale":
        d = int(rng.integers(1, 6))
        args.update(
            d=d,
            s0=float(10.0 ** rng.uniform(-100, 100)),
            s1=float(10.0 ** rng.uniform(-100, 100)),
            what=str(rng.choice(["steer", "simulate", "design", "analyze", "bures"])),
            seed=int(rng.integers(0, 99)),
        )
    elif kind == "rank_steer":
        d = int(rng.integers(1, 6))
        r = int(rng.integers(0, d + 1))
        args.update(
            d=d,
            r=r,
            r1=r if rng.random() < 0.8 else int(rng.integers(0, d + 1)),
            mode=str(rng.choice(["full", "ffn", "attention"])),
            method=str(rng.choice(["auto", "flow", "collocation"])),
            scale=float(10.0 ** rng.uniform(-6, 6)),
            seed=int(rng.integers(0, 99)),
        )
    elif kind == "ill_design":
        d = int(rng.integers(1, 9))
        args.update(
            d=d,
            condition=float(10.0 ** rng.uniform(0, 12)),
            scale=float(10.0 ** rng.uniform(-8, 8)),
            mean_scale=float(10.0 ** rng.uniform(-3, 8)),
            min_ess=[0.5, None, 0.9, 0.01][int(rng.integers(0, 4))],
            fixed_B=rng.random() < 0.25,
            token_check=[None, 64, 256][int(rng.integers(0, 3))],
            T=[None, 1.0, 1e3, 1e9][int(rng.integers(0, 4))],
            seed=int(rng.integers(0, 99)),
        )
    elif kind == "token_check":
        d = int(rng.integers(1, 5))
        args.update(
            d=d,
            n=int(rng.choice([2, 16, 128, 1024])),
            T=[None, 0.5, 10.0, 1e6][int(rng.integers(0, 4))],
            steps=[None, 1, 50][int(rng.integers(0, 3))],
            scale=float(10.0 ** rng.uniform(-4, 4)),
            seed=SEEDS[int(rng.integers(0, len(SEEDS)))],
        )
    elif kind == "seed":
        args.update(
            seed=SEEDS[int(rng.integers(0, len(SEEDS)))],
            what=str(rng.choice(["steer", "design", "compare", "robustness", "sample"])),
        )
    elif kind == "stabilize":
        args.update(_stabilize_args(rng))
    return args


#: Target scales, condition numbers and means of the ``stabilize`` family: hostile half the time.
STAB_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
STAB_LIMITS = (0.05, 0.3, 1.0, 5.0, 20.0)


def _stabilize_args(rng: np.random.Generator) -> dict[str, Any]:
    """Arguments of one ``stabilize`` case (module docstring)."""
    large = rng.random() < 0.12
    d = int(rng.choice([64, 96])) if large else int(rng.choice(STAB_SIZES))
    hostile = rng.random() < 0.6
    return {
        "d": d,
        "factored": bool(rng.random() < 0.5),
        "n_heads": int(rng.integers(1, 5)),
        "head_scale": float(10.0 ** rng.uniform(-1, 1)),
        "a_shift": float(rng.uniform(-1.5, 1.5)),
        "scale": float(10.0 ** (rng.uniform(-200, 150) if hostile else rng.uniform(-3, 3))),
        "cond": float(10.0 ** (rng.uniform(0, 12) if rng.random() < 0.5 else rng.uniform(0, 2))),
        "mean_scale": float(10.0 ** rng.uniform(-3, 12)),
        "mean_absolute": bool(rng.random() < 0.3),
        "unit_heads": bool(rng.random() < 0.6),
        "noise": float(10.0 ** rng.uniform(-2, 0)) if rng.random() < 0.2 else None,
        "add": str(rng.choice(["head", "gains", "auto"])),
        "rate": float(rng.choice([0.1, 0.5, 1.0, 3.0])),
        "limit": float(rng.choice(STAB_LIMITS[:3] if large else STAB_LIMITS)),
        "seed": int(rng.integers(0, 10_000)),
    }


def make_case(i: int, seed: int) -> tuple[str, dict[str, Any]]:
    """The ``i``-th call: an entry-point name and its arguments."""
    rng = np.random.default_rng([seed, i])
    if ONLY:
        kind2 = str(rng.choice(ONLY))
        if kind2 == "planted":
            return kind2, {"seed": int(rng.integers(0, 2**31)), "index": int(rng.integers(0, 240))}
        return kind2, make_hostile2(rng, kind2)
    if ONLY == () and rng.random() < PLANTED_SHARE:
        return "planted", {"seed": int(rng.integers(0, 2**31)), "index": int(rng.integers(0, 240))}
    if rng.random() < HOSTILE2_SHARE:
        kinds2 = ["budget", "scale", "rank_steer", "ill_design", "token_check", "seed", "stabilize"]
        w2 = np.array([4.0, 1.5, 1.5, 1.5, 1.0, 0.5, 1.5])
        kind2 = str(rng.choice(kinds2, p=w2 / w2.sum()))
        return kind2, make_hostile2(rng, kind2)
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
HOSTILE2 = ("budget", "scale", "rank_steer", "ill_design", "token_check", "seed", "stabilize")


def _contradiction(res: Any) -> str:
    """Why a ``success`` contradicts its own numbers or requirements ('' when it does not)."""
    import gtcontrol as gc

    if not getattr(res, "success", False):
        return ""
    name = type(res).__name__
    if isinstance(res, gc.SteeringResult):
        if not res.terminal_error <= 1e-6:
            return f"{name}: success with terminal error {res.terminal_error:.3g}"
        scale = 1e-6 * max(res.lower_bound, 1e-300)
        if res.gap == res.gap and res.kinetic_energy < res.lower_bound - scale:
            return f"{name}: kinetic energy {res.kinetic_energy:.6g} below W2²/T"
    if isinstance(res, gc.MeanMatchingDesign):
        if not res.certificate.success:
            return f"{name}: success without a valid certificate"
        if res.ess is not None and res.ess.min_ess is not None and not res.ess.success:
            return f"{name}: success although min_ess is not met ({res.ess.message})"
        if res.token_certificate is not None and not res.token_certificate.success:
            return f"{name}: success with a failed token check"
    if isinstance(res, gc.TokenCertificate):
        if not res.w2 <= res.w2_factor * res.floor:
            return f"{name}: success but not token-valid"
    if isinstance(res, gc.Trajectory) and not np.all(np.isfinite(res.cov)):
        return f"{name}: success with non-finite moments"
    if isinstance(res, gc.KineticEnergy) and not np.isfinite(res.energy):
        return f"{name}: success with energy {res.energy}"
    return ""


def _budget_call(a: dict[str, Any]) -> Any:
    """The inputs of a ``budget`` case, built untimed; returns the timed call."""
    import gtcontrol as gc

    d, tl, rng = a["d"], a["limit"], np.random.default_rng(a["seed"])
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    cov = (q * np.linspace(0.5, 2.0, d)) @ q.T
    g = gc.Gaussian(rng.standard_normal(d), cov)
    skew = rng.standard_normal((d, d))
    lay = gc.Layer(A=5.0 * (skew - skew.T) / math.sqrt(d) - 0.1 * np.eye(d), B=0.3 * cov, V=-1.0)
    solver = a["solver"]
    if solver == "simulate":
        return lambda: gc.simulate(lay, g, T=100.0, time_limit=tl)
    if solver == "simulate_tokens":
        x = rng.standard_normal((a["n"], d))
        strong = lay.replace(heads=[(-np.eye(d), 20.0 * rng.standard_normal((d, d)) / d)])
        return lambda: gc.simulate_tokens(strong, x, T=5.0, time_limit=tl)
    if solver == "steer":
        g1 = gc.Gaussian(np.ones(d), np.eye(d))
        return lambda: gc.steer(g, g1, 1.0, n_layers=6, time_limit=tl)
    if solver == "design_mean_matching":
        mean = rng.standard_normal(d)
        return lambda: gc.design_mean_matching(gc.Gaussian(mean, cov), time_limit=tl)
    if solver == "compare_tokens":
        n = min(a["n"], 2048)
        return lambda: gc.compare_tokens(
            lay, g, T=1.0, n_tokens=(n // 2, n), repeats=1, time_limit=tl
        )
    if solver == "kinetic_energy":
        sched = gc.Schedule([lay] * 8, T=8.0)
        return lambda: gc.kinetic_energy(sched, g, time_limit=tl)
    if solver == "equilibria":
        return lambda: gc.equilibria(lay, time_limit=tl)
    if solver == "analyze":
        return lambda: gc.analyze(lay, g, time_limit=tl)
    if solver == "blowup_analysis":
        return lambda: gc.blowup_analysis(lay, g, T=100.0, time_limit=tl)
    design = gc.design_mean_matching(
        gc.Gaussian(rng.standard_normal(d), cov), robustness=False, min_ess=None, time_limit=2.0
    )
    if solver == "design_token_certificate":
        return lambda: gc.design_token_certificate(
            design.layer, design.target, n_tokens=a["n"], time_limit=tl
        )
    return lambda: gc.design_robustness(design.layer, design.target, time_limit=tl)


def _hostile2_call(kind: str, a: dict[str, Any]) -> Any:
    """Run one call of the second-round generators; return its result."""
    import gtcontrol as gc

    rng = np.random.default_rng(a["seed"] if kind not in ("seed", "token_check") else 0)
    if kind == "scale":
        d = a["d"]
        c0 = _ill_spd(rng, d, 10.0, a["s0"])
        c1 = _ill_spd(rng, d, 10.0, a["s1"])
        g0, g1 = gc.Gaussian(np.zeros(d), c0), gc.Gaussian(np.ones(d), c1)
        if a["what"] == "steer":
            return gc.steer(g0, g1, 1.0, n_layers=4, time_limit=5.0)
        if a["what"] == "simulate":
            lay = gc.Layer(A=-np.eye(d), B=np.linalg.inv(c1) if d else np.eye(d), V=-1.0)
            return gc.simulate(lay, g0, T=2.0, time_limit=5.0)
        if a["what"] == "design":
            return gc.design_mean_matching(
                gc.Gaussian(np.ones(d) * a["s0"] ** 0.5, c1), time_limit=5.0
            )
        if a["what"] == "analyze":
            return gc.analyze(gc.Layer(A=-np.eye(d), B=np.eye(d), V=-1.0), g0, time_limit=5.0)
        w = g0.bures_wasserstein(g1)
        assert w >= 0 and math.isfinite(w), w
        return None
    if kind == "rank_steer":
        d = a["d"]
        g0 = gc.Gaussian(rng.standard_normal(d), _lowrank(rng, d, a["r"], a["scale"]))
        g1 = gc.Gaussian(rng.standard_normal(d), _lowrank(rng, d, a["r1"], a["scale"]))
        return gc.steer(g0, g1, 1.0, n_layers=4, mode=a["mode"], method=a["method"], time_limit=5.0)
    if kind == "ill_design":
        d = a["d"]
        cov = _ill_spd(rng, d, a["condition"], a["scale"])
        fixed = None
        if a["fixed_B"]:
            m = rng.standard_normal((d, d))
            fixed = m @ m.T / d + np.eye(d)
        return gc.design_mean_matching(
            gc.Gaussian(a["mean_scale"] * rng.standard_normal(d), cov),
            fixed_B=fixed,
            min_ess=a["min_ess"],
            token_check=a["token_check"],
            T=a["T"],
            robustness=False,
            time_limit=10.0,
        )
    if kind == "token_check":
        d = a["d"]
        cov = _ill_spd(rng, d, 10.0, a["scale"])
        design = gc.design_mean_matching(
            gc.Gaussian(np.ones(d), cov), robustness=False, min_ess=None
        )
        return gc.design_token_certificate(
            design.layer,
            design.target,
            n_tokens=a["n"],
            T=a["T"],
            steps=a["steps"],
            seed=a["seed"],
            time_limit=5.0,
        )
    s, g = a["seed"], gc.Gaussian([0.0, 1.0], [[1.0, 0.2], [0.2, 0.5]])
    lay = gc.Layer(A=-np.eye(2), B=np.eye(2), V=-1.0)
    if a["what"] == "steer":
        return gc.steer(g, g, 1.0, n_layers=2, mode="ffn", seed=s, token_check=8)
    if a["what"] == "design":
        return gc.design_mean_matching(
            gc.Gaussian([1.0, 2.0], g.cov), seed=s, robustness=gc.RobustnessCheck(n_samples=2)
        )
    if a["what"] == "compare":
        return gc.compare_tokens(lay, g, T=0.3, n_tokens=(16, 32), repeats=1, seed=s)
    if a["what"] == "robustness":
        design = gc.design_mean_matching(gc.Gaussian([1.0, 2.0], g.cov), robustness=False)
        return gc.design_robustness(design.layer, design.target, seed=s, n_samples=2)
    return g.sample(3, seed=s)


def _stabilize_inputs(a: dict[str, Any]) -> tuple[Any, Any]:
    """The layer and target of a ``stabilize`` case, built untimed (every input valid)."""
    import gtcontrol as gc

    rng = np.random.default_rng(a["seed"])
    d, h, size = a["d"], a["n_heads"], a["head_scale"]
    scale = a["scale"]
    cov = _ill_spd(rng, d, a["cond"], scale)
    # heads in the target's units (B·Σ* of order 1) unless the case says otherwise
    unit = min(1.0 / scale, 1e140) if a["unit_heads"] else 1.0
    a_mat = rng.standard_normal((d, d)) / math.sqrt(d) + a["a_shift"] * np.eye(d)
    bias = rng.standard_normal(d)
    dh = max(1, d // h)

    def w(r: int, c: int) -> Any:
        return size * rng.standard_normal((r, c)) / math.sqrt(c)

    noise = None
    if a["noise"] is not None:
        noise = a["noise"] * math.sqrt(scale) * rng.standard_normal((d, d)) / math.sqrt(d)
    if a["factored"]:
        heads: Any = gc.FactoredHeads.from_projections(
            unit * w(h * dh, d), w(h * dh, d), w(h * dh, d), w(d, h * dh), n_heads=h
        )
    else:
        heads = [(w(d, d), unit * w(d, d)) for _ in range(h)]
    layer = gc.Layer(A=a_mat, b=bias, heads=heads, noise=noise)
    z = rng.standard_normal(d)
    mean = a["mean_scale"] * z * (1.0 if a["mean_absolute"] else math.sqrt(scale))
    mean = np.clip(mean, -1e149, 1e149)
    return layer, gc.Gaussian(mean, cov)


def _stabilize_check(res: Any, target: Any, rate: float) -> str:
    """Why a ``SUCCESS`` of :func:`gtcontrol.stabilize` does not hold up ('' when it does), in
    units where ``Σ*`` is of order 1 (tokens ``x = √t x̃``: ``B → tB``, ``m, b, G → /√t``)."""
    if not res.success:
        return ""
    s, m = np.array(target.cov), np.array(target.mean)
    t = 2.0 ** round(math.log2(float(np.max(np.abs(s)))))
    st, mt = s / t, m / math.sqrt(t)
    lay = res.layer
    a_mat = np.array(lay.A)
    heads = [(np.array(v), np.array(b) * t) for v, b in lay.heads]
    mm = a_mat + sum((v @ st @ b for v, b in heads), np.zeros_like(st))
    c = np.array(lay.b) / math.sqrt(t) + sum((v @ mt for v, _ in heads), np.zeros_like(mt))
    ds = mm @ st + st @ mm.T
    size_s = 2.0 * np.linalg.norm(a_mat @ st)
    size_m = np.linalg.norm(a_mat @ mt) + np.linalg.norm(np.array(lay.b)) / math.sqrt(t)
    for v, b in heads:
        size_s += 2.0 * np.linalg.norm(v @ st @ b @ st)
        size_m += np.linalg.norm(v @ st @ b @ mt) + np.linalg.norm(v @ mt)
    if lay.noise is not None:
        gg = np.array(lay.noise) @ np.array(lay.noise).T / t
        ds, size_s = ds + gg, size_s + np.linalg.norm(gg)
    dm = mm @ mt + c
    rc = float(np.linalg.norm(ds) / size_s)
    rm = float(np.linalg.norm(dm) / size_m) if size_m > 0 else float(np.linalg.norm(dm))
    if not (rc <= 1e-6 and rm <= 1e-6):
        return f"stabilize: SUCCESS with equilibrium residuals {rc:.3g} (Σ), {rm:.3g} (m)"
    d = s.shape[0]
    if d > 16:
        return ""
    eye = np.eye(d)
    jac = np.kron(eye, mm) + np.kron(mm, eye)
    for v, b in heads:
        jac += np.kron((b @ st).T, v) + np.kron(v, (b @ st).T)
    cols = [(i, k) for k in range(d) for i in range(k, d)]
    dup = np.zeros((d * d, len(cols)))
    for n, (i, k) in enumerate(cols):
        dup[i + k * d, n] = dup[k + i * d, n] = 1.0
    lin = np.linalg.pinv(dup) @ jac @ dup
    k_mat = a_mat + sum((v @ (eye + st @ b) for v, b in heads), np.zeros_like(st))
    alpha = max(
        float(np.max(np.linalg.eigvals(lin).real)), float(np.max(np.linalg.eigvals(k_mat).real))
    )
    tol = 1e-7 * max(1.0, rate) + 1e-12 * float(np.linalg.norm(lin))
    if alpha > -rate + tol:
        return f"stabilize: SUCCESS with a dense spectral abscissa {alpha:.8g} > −{rate:g}"
    h = dup @ np.linalg.solve(lin, -np.linalg.pinv(dup) @ ds.reshape(-1, order="F"))
    shift_s = float(np.linalg.norm(h) / np.linalg.norm(st))
    ref = max(float(np.linalg.norm(mt)), math.sqrt(float(np.trace(st))))
    shift_m = float(np.linalg.norm(np.linalg.solve(k_mat, dm))) / ref
    if not max(shift_s, shift_m) <= 1e-5:
        return (
            f"stabilize: SUCCESS whose exact equilibrium lies {shift_s:.3g} (Σ), {shift_m:.3g} "
            "(m) from the target"
        )
    return ""


def _raw(i: int, kind: str, exc: Exception) -> tuple[int, str, str]:
    """The outcome of case ``i`` of ``kind`` that raised ``exc``, not a ``GTControlError``: its
    type, message and the line it rose from."""
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return (
        i,
        f"raw {type(exc).__name__}",
        f"{kind}: {exc!s:.120} at {where.filename}:{where.lineno}",
    )


def _run_stabilize(i: int, a: dict[str, Any]) -> tuple[int, str, str]:
    """One ``stabilize`` case: warnings are recorded (``noisy``), not raised."""
    import gtcontrol as gc

    layer, target = _stabilize_inputs(a)
    limit = a["limit"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            t0 = time.perf_counter()
            res = gc.stabilize(
                layer, target, add=a["add"], rate=a["rate"], seed=a["seed"], time_limit=limit
            )
            wall = time.perf_counter() - t0
        except gc.GTControlError as exc:
            return i, "GTControlError", f"stabilize: {exc!s:.120}"
        except Exception as exc:  # counting raw exceptions is the point
            return _raw(i, "stabilize", exc)
    if caught:
        w = caught[0]
        return i, f"noisy {w.category.__name__}", f"stabilize: {w.message!s:.100} ({w.filename})"
    if wall > allowed(limit) + 0.5:
        return i, "overtime", f"stabilize: d={a['d']} {wall:.2f} s > {limit} ({res.status.value})"
    wrong = _stabilize_check(res, target, a["rate"])
    if wrong:
        return i, "wrong", f"{wrong} (case args {a})"
    return i, "ok", f"stabilize-{res.status.value}"


def _w2_check(a: Any, b: Any, tol: float) -> str:
    w = a.bures_wasserstein(b)
    return "" if w <= tol else f"W2 {w:.3g} > {tol:.3g}"


def run_case(i: int, seed: int) -> tuple[int, str, str]:
    """Run one call: ``(i, outcome, detail)``."""
    kind, a = make_case(i, seed)
    if kind == "stabilize":
        return _run_stabilize(i, a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", DeprecationWarning)
        out = _run_call(i, kind, a)
    if caught and out[1] in ("ok", "GTControlError"):
        w = caught[0]
        return i, f"noisy {w.category.__name__}", f"{kind}: {w.message!s:.100} ({w.filename})"
    return out


def _run_planted(a: dict[str, Any]) -> str:
    """A planted-equilibrium case (tests/_planted.py), every certified claim checked at 50
    digits: the contradiction, or ``""``."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from _planted import check_case, default_cases

    case = default_cases(a["index"] + 1, a["seed"])[a["index"]]
    chk = check_case(case)
    return f"{case.name}: {chk.contradicted}" if chk.contradicted else ""


def _run_call(i: int, kind: str, a: dict[str, Any]) -> tuple[int, str, str]:
    """One call of the usual mix: ``(i, outcome, detail)``."""
    import gtcontrol as gc
    from gtcontrol import Gaussian, Layer

    wrong = ""
    try:
        if kind == "planted":
            wrong = _run_planted(a)
        elif kind in HOSTILE2:
            call = _budget_call(a) if kind == "budget" else lambda: _hostile2_call(kind, a)
            t0 = time.perf_counter()
            res = call()
            wall = time.perf_counter() - t0
            limit = a.get("limit")
            finite = isinstance(limit, float) and 0 < limit < 1e9 and limit == limit
            if kind == "budget" and finite and wall > allowed(limit) + 0.5:
                return i, "overtime", f"{kind}: {a['solver']} d={a['d']} {wall:.2f} s > {limit}"
            wrong = _contradiction(res)
        elif kind == "gaussian":
            g = Gaussian(a["m0"], a["c0"])
            if not np.all(np.isfinite(g.cov)) or np.linalg.eigvalsh(g.cov)[0] < -1e-6 * max(
                1.0, float(np.abs(g.cov).max())
            ):
                wrong = "accepted a non-finite or non-PSD covariance"
        elif kind == "sample":
            x = Gaussian([0.0], [[1.0]]).sample(a["n"], seed=a["rng"])
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
            tol = a["rtol"] if not a["valid"] else 1e-12
            res = gc.equilibria(lay, newton=gc.NewtonSettings(tol=tol))
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
            sched = gc.exact_layer_steering(g0, g1, T=1.0, n_layers=4)
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
                n_layers=3,
                objective=a["objective"],
                bounds=gc.SteeringBounds(cov=a["cov_bound"]),
                time_limit=15.0,
            )
            if res.success and not res.terminal_error <= 1e-6:
                wrong = f"success with terminal error {res.terminal_error:.3g}"
    except gc.GTControlError:
        return i, "GTControlError", kind
    except Exception as exc:  # counting raw exceptions is the point
        return _raw(i, kind, exc)
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
