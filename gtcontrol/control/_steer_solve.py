"""The solve attempts of :func:`gtcontrol.steer`: starts, IPOPT solves, corrections, budget.

``run`` builds (or reuses) the NLP and solves from each starting control in turn until one is
verified, within a :class:`~gtcontrol._status.Budget`: each IPOPT solve gets the remaining wall
time, and when the budget is spent the best iterate is returned with ``BUDGET_EXHAUSTED``.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._linalg import FloatArray, vech
from .._status import Budget, Status
from ..errors import SolverError
from ..model.moments import Trajectory
from ..model.params import Layer, Schedule
from ._flow_solve import solve_flow
from ._ocp import pack, to_layer
from ._steer_options import Plan, make_plan
from ._steer_result import (
    SteeringResult,
    classify,
    finish,
    identity_result,
    measure,
    no_time_for_closed_form,
    reached,
    verify,
)
from ._transcription import Solution, Transcription, build_estimate, transcription
from ._warm_starts import check_guess, states_of, warm_starts

__all__: list[str] = []


# ============================================================================ warm starts
def starts(plan: Plan, budget: Budget) -> Iterator[tuple[list[Layer], str]]:
    """The starting controls, lazily: the user's guess, or the closed forms of the mode.

    A penalty problem starts from the exact-terminal solution (itself warm-started from the
    closed form, within the same budget): far from the target the penalty's gradient dominates
    and IPOPT tends to leave the region where Σ stays positive semi-definite.
    """
    opts = plan.opts
    if opts.initial_guess is not None:
        d = plan.initial.dim
        yield check_guess(opts.initial_guess, plan.mode, plan.n, plan.T, d), "initial_guess"
        return
    if opts.terminal != "exact":
        exact = replace(opts, terminal="exact")
        pre_plan = make_plan(plan.initial, plan.target, plan.T, plan.n, plan.mode, exact)
        pre = run(pre_plan, budget, time.perf_counter())
        if math.isfinite(pre.terminal_error):
            yield list(pre.controls.layers), "exact-terminal solution"
    yield from warm_starts(plan.initial, plan.target, plan.T, plan.n, plan.mode, plan.redundancy)


# ============================================================================ solve attempts
def solve_from(
    plan: Plan,
    nlp: Transcription,
    guess: tuple[FloatArray, FloatArray, FloatArray],
    budget: Budget,
) -> tuple[Schedule, Trajectory | None, Solution, dict[str, Any]]:
    """One IPOPT solve plus discretization corrections, each within the remaining budget.

    After a converged exact-terminal solve the control is re-simulated, and the NLP's terminal
    data are shifted by the re-simulated terminal miss before re-solving from the last iterate
    (at most ``max_corrections`` times).
    """
    initial, d = plan.initial, plan.initial.dim
    x0 = np.concatenate([initial.mean, vech(initial.cov)])
    x1 = np.concatenate([plan.target.mean, vech(plan.target.cov)])
    params0, colloc, states = guess
    shift, aux = x1.copy(), None
    iterations, corrections, solve_seconds = 0, 0, 0.0
    scale = max(1.0, float(np.max(np.abs(x1))))
    while True:
        sol = nlp.solve(x0, shift, params0, colloc, states, aux, max_wall_time=budget.remaining())
        iterations += sol.iterations
        solve_seconds += sol.seconds
        schedule = Schedule([to_layer(p, plan.mode, d) for p in sol.params], plan.T)
        traj = verify(schedule, initial, budget)
        if not reached(traj) or not sol.success or plan.opts.terminal != "exact":
            break
        assert traj is not None
        miss = np.concatenate([traj.final.mean, vech(traj.final.cov)]) - x1
        done = corrections >= plan.opts.max_corrections or budget.exhausted
        if done or np.max(np.abs(miss)) <= 1e-11 * scale:
            break
        # The NLP's discretization error is a smooth function of the controls: aim the
        # collocation at target − miss and re-solve from the last iterate.
        shift = shift - miss
        params0, colloc, states, aux = sol.params, sol.colloc, sol.states, sol.aux
        corrections += 1
    stats = {
        "ipopt_status": sol.status,
        "converged": sol.success,
        "iterations": iterations,
        "corrections": corrections,
        "solve_seconds": solve_seconds,
        "nlp_objective": sol.objective,
    }
    return schedule, traj, sol, stats


def attempt(
    plan: Plan,
    nlp: Transcription,
    layers0: list[Layer],
    label: str,
    budget: Budget,
    common: dict[str, Any],
) -> SteeringResult | str:
    """Solve from one starting control; a note (str) when the start cannot be used."""
    n = plan.n
    start = Schedule(layers0, plan.T)
    try:
        times = nlp.collocation_times()
        colloc = states_of(start, plan.initial, times, budget.grace()).reshape(n, -1)
        ends = np.arange(1, n + 1, dtype=float) * (plan.T / n)
        states = states_of(start, plan.initial, ends, budget.grace())
    except SolverError as exc:
        return f"{label}: skipped ({exc})"
    params0 = np.array([pack(lay, plan.mode) for lay in layers0])
    try:
        schedule, traj, sol, stats = solve_from(plan, nlp, (params0, colloc, states), budget)
    except RuntimeError as exc:
        return f"{label}: CasADi/IPOPT failed ({exc})"
    status, message = classify(plan, sol, traj)
    stats = {**stats, **common, "warm_start": label}
    return measure(plan, schedule, traj, status, message, stats, budget)


@dataclass
class _Log:
    """What the attempts produced so far."""

    successes: list[SteeringResult]
    failures: list[SteeringResult]
    notes: list[str]
    starts: list[tuple[list[Layer], str]] = field(default_factory=list)


#: Collocation intervals per layer are doubled up to this many while IPOPT converges but the
#: re-simulated terminal error exceeds ``terminal_tol`` (the mesh was too coarse).
_MAX_INTERVALS = 8


def _mesh_too_coarse(plan: Plan, result: SteeringResult) -> bool:
    """IPOPT converged, the re-simulation is finite, but its terminal error is too large."""
    return (
        not result.success
        and bool(result.stats.get("converged"))
        and math.isfinite(result.terminal_error)
        and result.terminal_error > plan.opts.terminal_tol
    )


def run(plan: Plan, budget: Budget, clock: float) -> SteeringResult:
    """Solve; refine the collocation mesh while the converged control misses the target.

    The re-simulated terminal error (an adaptive integrator, independent of the collocation) is
    the judge: while IPOPT converges but that error exceeds ``terminal_tol``, the intervals per
    layer are doubled (up to ``_MAX_INTERVALS``) and the problem re-solved from the last
    control. A result that still misses says so (``success=False``, the error in ``message``).
    """
    fallback = ""
    if plan.method == "flow":
        flow = solve_flow(plan, budget, clock)
        if flow is not None:
            return flow
        plan = replace(plan, method="collocation")
        fallback = "the flow construction built no feasible control; collocation NLP: "
    result = _run_once(plan, budget, clock)
    if fallback:
        stats = {**result.stats, "flow_fallback": True}
        result = replace(result, message=fallback + result.message, stats=stats)
    tried = [plan.opts.intervals]
    cut = ""  # why a refinement the miss calls for did not run
    while _mesh_too_coarse(plan, result) and plan.opts.intervals * 2 <= _MAX_INTERVALS:
        if budget.exhausted:
            cut = budget.reason()
            break
        k = plan.opts.intervals * 2
        opts = replace(plan.opts, intervals=k, initial_guess=result.controls, method="collocation")
        plan = make_plan(plan.initial, plan.target, plan.T, plan.n, plan.mode, opts)
        refined = _run_once(plan, budget, clock)
        tried.append(k)
        if refined.success or refined.terminal_error < result.terminal_error:
            result = refined
        elif "build_estimate" in refined.stats:
            cut = (
                f"the NLP with {k} intervals per layer is estimated to take "
                f"{refined.stats['build_estimate']:.3g} s to build, more than the time left"
            )
            break
    if cut and _mesh_too_coarse(plan, result):
        result = replace(
            result,
            status=Status.BUDGET_EXHAUSTED,
            message=f"{cut} before the collocation mesh could be refined; {result.message}",
        )
    if len(tried) > 1:
        verdict = (
            ""
            if result.success
            else (
                f"; still {result.terminal_error:.3g} > terminal_tol = {plan.opts.terminal_tol:g} "
                "after refining"
            )
        )
        result = replace(
            result,
            message=f"{result.message} (collocation intervals per layer tried: {tried}{verdict})",
            stats={**result.stats, "intervals_tried": tried},
        )
    return result


def _run_once(plan: Plan, budget: Budget, clock: float) -> SteeringResult:
    """Build (or reuse) the NLP and solve from each start until one is verified."""
    common: dict[str, Any] = {
        "method": "collocation",
        "regularization": plan.reg_weight,
        "redundancy": plan.redundancy if plan.mode == "full" else None,
        "time_limit": budget.time_limit,
        "build_seconds": 0.0,
        "cached": False,
    }
    nlp: Transcription | None = None
    stop = budget.reason() if budget.exhausted else ""
    estimate = build_estimate(plan.problem, cache=plan.opts.cache)
    refused = not stop and estimate > budget.remaining()
    if refused:
        prob = plan.problem
        stop = (
            f"building the collocation NLP (d = {prob.d}, {prob.L} layers, mode {prob.mode!r}) "
            f"is estimated at {estimate:.3g} s, more than the {budget.remaining():.3g} s left of "
            f"the time limit of {budget.time_limit:g} s (the build cannot be interrupted; "
            "raise time_limit, or use method='flow')"
        )
        common["build_estimate"] = estimate
    if stop and no_time_for_closed_form(plan, budget):
        return identity_result(plan, budget, clock, stop, common)  # no time for a start either
    if not stop:
        try:
            nlp, cached = transcription(plan.problem, cache=plan.opts.cache)
        except RuntimeError as exc:
            stop = f"CasADi failed to build the NLP: {exc}"
        else:
            common.update(build_seconds=0.0 if cached else nlp.build_seconds, cached=cached)
    log = _Log([], [], [])
    first: tuple[list[Layer], str] | None = None
    for layers0, label in starts(plan, budget):
        first = first or (layers0, label)
        if nlp is None or budget.exhausted:
            log.notes.append(f"{label}: not solved ({stop or budget.reason()})")
            break
        log.starts.append((layers0, label))
        outcome = attempt(plan, nlp, layers0, label, budget, common)
        if isinstance(outcome, str):
            log.notes.append(outcome)
        elif outcome.success and not plan.best_of:
            return finish(outcome, clock, log.notes)
        elif outcome.success:
            log.successes.append(outcome)
        else:
            log.notes.append(f"{label}: {outcome.message}")
            log.failures.append(outcome)
    return conclude(plan, log, first, budget, clock, common, stop, refused)


def conclude(
    plan: Plan,
    log: _Log,
    first: tuple[list[Layer], str] | None,
    budget: Budget,
    clock: float,
    common: dict[str, Any],
    stop: str,
    refused: bool = False,
) -> SteeringResult:
    """The best verified result, else the best iterate with the reason the attempts ended.

    ``refused``: the NLP was not built because its estimated build time exceeds the time left
    (``stop`` says so); the starting control is returned with ``BUDGET_EXHAUSTED``.
    """
    if log.successes:
        best = min(log.successes, key=lambda r: r.cost)
        labels = [r.stats["warm_start"] for r in log.successes if r is not best]
        return finish(
            best, clock, log.notes + [f"{lab}: also solved, higher cost" for lab in labels]
        )
    if log.failures:
        best = min(log.failures, key=lambda r: (r.terminal_error, r.cost))
        if budget.exhausted:
            best = replace(
                best,
                status=Status.BUDGET_EXHAUSTED,
                message=f"{budget.reason()}; best iterate: {best.message}",
            )
        if not best.stats.get("converged") and not best.terminal_error <= plan.opts.terminal_tol:
            # IPOPT stopped short (budget, iterations, failure): a feasible start beats an
            # infeasible iterate. (A converged solve on too coarse a mesh is refined by run.)
            best = _feasible_start(plan, log, best, common, budget) or best
        return finish(best, clock, log.notes)
    if first is None:  # unreachable: every mode has a closed-form start
        raise SolverError("steer: no starting control", stats={"cause": "no_start"})
    # No solve ran (time limit, build failure) or every start was unusable: the first start.
    if refused:
        status, why = Status.BUDGET_EXHAUSTED, stop
    elif budget.exhausted:
        status, why = Status.BUDGET_EXHAUSTED, budget.reason()
    else:
        status, why = Status.FAILED, stop or "no start could be integrated"
    layers0, label = first
    schedule = Schedule(layers0, plan.T)
    traj = verify(schedule, plan.initial, budget)
    if status is Status.FAILED and not stop and not reached(traj):
        status = traj.status if traj is not None else Status.FAILED
    message = f"{why}; returning the starting control ({label}) without optimization"
    stats: dict[str, Any] = {
        "ipopt_status": None,
        "converged": False,
        "iterations": 0,
        "corrections": 0,
        "solve_seconds": 0.0,
        "nlp_objective": math.nan,
        "warm_start": label,
        **common,
    }
    result = measure(plan, schedule, traj, status, message, stats, budget)
    return finish(result, clock, log.notes)


def _feasible_start(
    plan: Plan, log: _Log, best: SteeringResult, common: dict[str, Any], budget: Budget
) -> SteeringResult | None:
    """The cheapest starting control that reaches the target, when no iterate does.

    The best feasible point is then a start (e.g. a flow construction passed as
    ``initial_guess``, or the exact construction among the closed-form starts); it keeps the
    failed solve's status and says so.
    """
    found: list[SteeringResult] = []
    for layers0, label in log.starts:
        schedule = Schedule(layers0, plan.T)
        stats = {**best.stats, **common, "warm_start": label, "feasible_start": True}
        message = (
            f"{best.message}; returning instead the feasible starting control ({label}) without "
            "its optimization"
        )
        traj = verify(schedule, plan.initial, budget)
        res = measure(plan, schedule, traj, best.status, message, stats, budget)
        if res.terminal_error <= plan.opts.terminal_tol:
            found.append(res)
    return min(found, key=lambda r: r.cost) if found else None
