"""Steering by exact layer-to-layer flows, the ``method="flow"`` of :func:`gtcontrol.steer`.

The L-layer control is built between fixed nodes: the Bures–Wasserstein geodesic sampled at the
layer switches ``t_k = kT/L`` (its covariance, and its straight mean line, or for pure attention a
mean path that keeps away from 0). Every layer takes node ``k`` exactly to node ``k + 1``, so
layers can be chosen one at a time and any mix of them is a feasible control:

* ``"ffn"``: the exact constant layers of :func:`ffn_field` (docs/steering.md §4); this is the
  closed form :func:`gtcontrol.exact_layer_steering`.
* ``"full"``: the same layers are the baseline; for each layer a few attention gauges
  (:func:`curvature_gauge`) are shot onto the next node (:func:`shoot`) and the layer with the
  lowest kinetic energy is kept. The result is never worse than the exact construction, layer by
  layer.
* ``"attention"``: the baseline is the exact attention construction; the node-to-node layers of
  :func:`attention_gauge` replace it when every layer can be shot and the energy is lower.

There is no NLP: the cost is a few adaptive re-simulations per layer and candidate. The time
budget is checked between re-simulations; when it runs out the best feasible control so far (the
baseline, or layers improved so far) is returned with ``Status.BUDGET_EXHAUSTED``. Every returned
control is re-simulated and measured like any :class:`SteeringResult`.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._progress import progress
from .._status import Budget, Status
from ..errors import InvalidParametersError
from ..model.params import Layer, Schedule
from ._flow import (
    State,
    attention_gauge,
    curvature_gauge,
    ffn_field,
    layer_energy,
    shoot,
)
from ._steer_options import Plan
from ._steer_result import (
    SteeringResult,
    closed_form_estimate,
    finish,
    identity_result,
    measure,
    no_time_for_closed_form,
    verify,
)
from ._warm_starts import _mean_path
from .ot import ot_steering
from .realization import exact_layer_steering

__all__: list[str] = []

#: Attention gauges ``(θ, ε)`` of :func:`curvature_gauge` tried in every full-mode layer.
FULL_GAUGES: tuple[tuple[float, float], ...] = ((0.5, 0.1), (0.5, 0.3), (1.0, 0.3))
#: Mean-velocity weights ``θ`` of :func:`attention_gauge` tried in every attention layer
#: (measured on random pairs, d = 8 and 16: θ = 2 is usually best, 1 and 3 sometimes; the
#: scaled rotation, θ = 0, is tried only when none of them hits the next node).
ATTENTION_THETAS: tuple[float, ...] = (2.0, 1.0, 3.0)


@dataclass
class _Build:
    """Layers chosen so far, with what was tried."""

    layers: list[Layer]
    labels: list[str]
    energies: list[float]
    iterations: int = 0
    shots: int = 0
    failed_shots: int = 0
    path: str = "straight mean path"


def _geodesic_nodes(plan: Plan, means: Callable[[float], FloatArray] | None) -> list[State]:
    geo = ot_steering(plan.initial, plan.target, plan.T)
    h = plan.T / plan.n
    nodes = []
    for k in range(plan.n + 1):
        m = geo.mean_at(k * h) if means is None else means(k / plan.n)
        nodes.append((np.asarray(m, dtype=float), geo.cov_at(k * h)))
    nodes[0] = (plan.initial.mean, plan.initial.cov)
    nodes[-1] = (plan.target.mean, plan.target.cov)
    return nodes


def _ffn_layers(nodes: list[State], h: float, budget: Budget) -> list[Layer] | None:
    """The exact node-to-node feed-forward layers; ``None`` if the budget ran out first."""
    out = []
    for a, b in pairwise(nodes):
        left = budget.grace()  # the exact layers are the fallback: they may use the grace
        if left is not None and left <= 1e-9:
            return None
        m_mat, c = ffn_field(a, b, h)
        out.append(Layer(A=m_mat, b=c))
    return out


Maker = Callable[[FloatArray, FloatArray, State], Layer]


def _curvature_maker(theta: float, eps: float) -> Maker:
    def make(m_mat: FloatArray, c: FloatArray, mid: State) -> Layer:
        return curvature_gauge(m_mat, c, mid, theta, eps)

    return make


def _attention_maker(velocity: FloatArray, theta: float) -> Maker:
    def make(m_mat: FloatArray, c: FloatArray, mid: State) -> Layer:
        return attention_gauge(m_mat, c, mid, velocity, theta)

    return make


def _best_shot(
    build: _Build,
    k: int,
    candidates: Sequence[tuple[str, Maker]],
    ends: tuple[State, State],
    h: float,
    budget: Budget,
) -> bool:
    """Shoot every candidate gauge of layer ``k``; keep the lowest energy. False if none hit."""
    hit = False
    for label, make in candidates:
        if budget.exhausted:
            break
        build.shots += 1
        shot = shoot(make, ends[0], ends[1], h, expired=lambda: budget.exhausted)
        if shot is None:
            build.failed_shots += 1
            continue
        build.iterations += shot.iterations
        energy = layer_energy(shot.layer, ends[0], h, time_limit=budget.grace())
        if energy < build.energies[k]:
            build.layers[k], build.labels[k], build.energies[k] = shot.layer, label, energy
        hit = True
    return hit


def _full(plan: Plan, budget: Budget) -> tuple[_Build | None, bool]:
    """Exact feed-forward layers, each replaced by a cheaper attention gauge when one exists
    (``None`` when the budget ran out before the exact layers were built)."""
    h = plan.T / plan.n
    nodes = _geodesic_nodes(plan, None)
    base = _ffn_layers(nodes, h, budget)
    if base is None:
        return None, False
    build = _Build(list(base), ["ffn"] * plan.n, [math.inf] * plan.n)
    if plan.mode == "ffn":
        return build, True
    with progress("steer: flow layers", total=plan.n) as update:
        for k in range(plan.n):
            if budget.exhausted:
                return build, False
            build.energies[k] = layer_energy(base[k], nodes[k], h, time_limit=budget.grace())
            candidates = [
                (f"curvature θ={theta:g} ε={eps:g}", _curvature_maker(theta, eps))
                for theta, eps in FULL_GAUGES
            ]
            _best_shot(build, k, candidates, (nodes[k], nodes[k + 1]), h, budget)
            update(k + 1)
    return build, not budget.exhausted


def _mean_paths(plan: Plan) -> list[tuple[str, Callable[[float], FloatArray]]]:
    """The straight mean line, then paths that keep further away from 0 (attention)."""
    m0, m1 = plan.initial.mean, plan.target.mean
    paths: list[tuple[str, Callable[[float], FloatArray]]] = [
        ("straight mean path", lambda s: (1.0 - s) * m0 + s * m1)
    ]
    for share in (0.25, 0.5):
        path = _mean_path(m0, m1, share)
        if not np.allclose(path(0.5), paths[0][1](0.5), rtol=0.0, atol=1e-14):
            paths.append((f"mean path with clearance {share:g}·min(|m0|, |m1|)", path))
    return paths


def _attention(plan: Plan, budget: Budget) -> tuple[_Build | None, bool, list[str]]:
    """Node-to-node attention layers along each mean path; the cheapest complete one."""
    h = plan.T / plan.n
    best: _Build | None = None
    notes: list[str] = []
    for label, path in _mean_paths(plan):
        if budget.exhausted:
            return best, False, notes
        nodes = _geodesic_nodes(plan, path)
        zero = Layer(dim=plan.initial.dim)
        build = _Build([zero] * plan.n, ["none"] * plan.n, [math.inf] * plan.n, path=label)
        with progress("steer: flow layers (attention)", total=plan.n) as update:
            for k in range(plan.n):
                u = (nodes[k + 1][0] - nodes[k][0]) / h
                candidates = [
                    (f"mean weight θ={theta:g}", _attention_maker(u, theta))
                    for theta in (*ATTENTION_THETAS, 0.0)
                ]
                ends = (nodes[k], nodes[k + 1])
                if not _best_shot(build, k, candidates[:-1], ends, h, budget) and not _best_shot(
                    build, k, candidates[-1:], ends, h, budget
                ):
                    why = budget.reason() if budget.exhausted else "no gauge hit its end node"
                    notes.append(f"{label}: stopped at layer {k + 1} ({why})")
                    break
                update(k + 1)
            else:
                if best is None or sum(build.energies) < sum(best.energies):
                    best = build
    return best, not budget.exhausted, notes


def _baseline(plan: Plan, budget: Budget) -> tuple[Schedule | None, str]:
    if plan.mode != "attention":
        return None, "exact L-layer geodesic"
    if no_time_for_closed_form(plan, budget):
        return None, "exact attention construction not built (no time left)"
    try:
        return exact_layer_steering(
            plan.initial, plan.target, plan.T, plan.n, "attention"
        ), "exact attention construction"
    except InvalidParametersError as exc:
        return None, f"exact attention construction unavailable ({exc})"


def _result(
    plan: Plan,
    schedule: Schedule,
    label: str,
    complete: bool,
    budget: Budget,
    stats: dict[str, Any],
) -> SteeringResult:
    traj = verify(schedule, plan.initial, budget)
    reached = traj is not None and traj.status is Status.SUCCESS
    err = traj.final.bures_wasserstein(plan.target) if reached and traj is not None else math.inf
    if not reached:
        status = Status.FAILED if traj is None else traj.status
        message = "the re-simulated moments of the flow construction do not reach T"
        if traj is not None and traj.status is Status.BUDGET_EXHAUSTED:
            message = (
                f"the flow construction ({label}) is not verified: its re-simulation ran out "
                f"of time ({traj.message})"
            )
    elif err > plan.opts.terminal_tol:
        status, message = (
            Status.FAILED,
            (
                f"the re-simulated terminal error {err:.3g} of the flow construction exceeds "
                f"terminal_tol = {plan.opts.terminal_tol:g}"
            ),
        )
    elif not complete:
        status, message = (
            Status.BUDGET_EXHAUSTED,
            (
                f"{budget.reason()}; returning the best feasible control so far ({label}), "
                f"re-simulated terminal error {err:.3g}"
            ),
        )
    else:
        status = Status.SUCCESS
        message = f"flow construction ({label}); re-simulated terminal error {err:.3g}"
    return measure(plan, schedule, traj, status, message, {**stats, "warm_start": label}, budget)


def solve_flow(plan: Plan, budget: Budget, clock: float) -> SteeringResult | None:
    """Steer by exact node-to-node layers; ``None`` when no control could be built."""
    start = time.perf_counter()
    if no_time_for_closed_form(plan, budget):
        why = (
            f"the time limit of {budget.time_limit:g} s leaves {budget.remaining():.3g} s (and "
            f"a grace of {budget.grace():.3g} s for a fallback), less than the exact "
            f"construction's estimated {closed_form_estimate(plan):.3g} s"
        )
        return identity_result(plan, budget, clock, why, {"method": "flow"})
    baseline, base_label = _baseline(plan, budget)
    notes: list[str] = []
    if plan.mode == "attention":
        build, complete, notes = _attention(plan, budget)
    else:
        build, complete = _full(plan, budget)
    stats: dict[str, Any] = {
        "method": "flow",
        "ipopt_status": None,
        "converged": complete,
        "iterations": 0 if build is None else build.iterations,
        "corrections": 0,
        "build_seconds": 0.0,
        "cached": False,
        "nlp_objective": math.nan,
        "regularization": plan.reg_weight,
        "redundancy": plan.redundancy if plan.mode == "full" else None,
        "time_limit": budget.time_limit,
        "shots": 0 if build is None else build.shots,
        "failed_shots": 0 if build is None else build.failed_shots,
        "layer_gauges": None if build is None else list(build.labels),
        "solve_seconds": time.perf_counter() - start,
    }
    results = []
    if build is not None:
        schedule = Schedule(build.layers, plan.T)
        results.append(_result(plan, schedule, _label(plan, build), complete, budget, stats))
    if baseline is not None:
        results.append(_result(plan, baseline, base_label, complete, budget, stats))
    if not results:
        if budget.exhausted:
            return identity_result(plan, budget, clock, budget.reason(), stats)
        return None
    tol = plan.opts.terminal_tol
    best = min(results, key=lambda r: (not r.success, not r.terminal_error <= tol, r.cost))
    return finish(best, clock, notes)


def _label(plan: Plan, build: _Build) -> str:
    if plan.mode == "ffn":
        return "exact L-layer geodesic (flow)"
    if plan.mode == "full":
        improved = sum(lab != "ffn" for lab in build.labels)
        return f"exact L-layer geodesic, {improved} of {plan.n} layers with attention gauges"
    return f"node-to-node attention layers, {build.path}"
