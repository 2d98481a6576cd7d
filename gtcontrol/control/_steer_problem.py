"""The steering problem of :func:`gtcontrol.steer`: its validated options and plan, and its result.

:class:`SteerOptions` is the frozen holder of the defaults and the validator; the public
interface is the keyword-only arguments of ``steer``, documented there, with two option
families as one validated value each: :class:`~gtcontrol.control._transcription.SteeringBounds`
(``bounds=``, defined beside the NLP whose constraints it sets) and :class:`Collocation`
(``collocation=``); IPOPT's settings are
:class:`~gtcontrol.control._ipopt.IpoptSettings` (``solver=``, shared with the designs).
:func:`make_plan` checks the end points and the options together and describes the NLP
(:class:`Plan`).

Every control that ``steer`` returns is re-simulated with the adaptive moment integrator; its
status combines IPOPT's verdict with that re-simulation (:func:`classify`), and every number of
:class:`SteeringResult` is measured on it (:func:`measure`).

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from .._display import Axes, SummaryItems
from .._linalg import frobenius_norms, scaled_norm
from .._status import Budget, Outcome, ResultFields, Status, shown
from .._validation import (
    as_choice,
    as_nonnegative_float,
    as_nonnegative_int,
    as_option_group,
    as_positive_float,
    as_positive_int,
    as_seed,
    set_fields,
)
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Layer, Schedule
from ..model.tokens import simulate_tokens
from ._ipopt import IpoptSettings
from ._transcription import PARAMS, Problem, Solution, SteeringBounds
from .ot import trajectory_energy
from .reachability import (
    check_mode,
    check_n_layers,
    check_pair,
    check_reachable,
    problem_scale,
)

__all__ = ["Collocation", "SteeringBounds", "SteeringResult"]


OBJECTIVES = ("kinetic", "parameter")
TERMINALS = ("exact", "bw", "kl")
REDUNDANCY = ("fixed", "joint")
PARALLEL = ("serial", "thread", "openmp")
METHODS = ("auto", "flow", "collocation")
#: ``method="auto"`` uses the flow construction from these dimensions on (below them the
#: collocation NLP is fast and, for ``"ffn"``, lower in energy: it also optimizes the skew part of
#: each layer, which the exact node-to-node layers keep at zero).
FLOW_MIN_DIM = {"full": 5, "attention": 5, "ffn": 9}
#: Caps of the integer options (finite loops; larger values are refused as absurd).
MAX_INTERVALS, MAX_CORRECTIONS, MAX_TOKEN_CHECK = 64, 100, 10**6
#: IPOPT's defaults in steering (``IpoptSettings`` fields left ``None``).
DEFAULT_MAX_ITER, DEFAULT_TOL = 500, 1e-8


@dataclass(frozen=True, kw_only=True)
class Collocation:
    """How the collocation NLP of :func:`gtcontrol.steer` is discretized, corrected and built.

    One validated value for the option family, taken as ``collocation=`` (as diffrax takes
    ``SaveAt``); the flow construction does not use it.

    Attributes
    ----------
    intervals
        Collocation intervals per layer (Gauss–Legendre, degree 3, order 6; at most 64). When
        IPOPT converges but the re-simulated terminal error exceeds ``terminal_tol``, ``steer``
        doubles them (the mesh was too coarse).
    max_corrections
        Number ``≥ 0`` (at most 100) of discretization corrections: after each converged solve
        the control is re-simulated and the NLP's terminal data are shifted by the re-simulated
        terminal miss (exact terminal only) before re-solving from the last iterate.
    parallelization
        CasADi ``map`` evaluation of the layers: ``"serial"``, ``"thread"`` or ``"openmp"``.
    cache
        Reuse the symbolic NLP of an earlier call with the same structure.

    Raises
    ------
    InvalidParametersError
        On ``intervals`` outside 1 … 64, ``max_corrections`` outside 0 … 100, an unknown
        ``parallelization`` or a ``cache`` that is not a bool.

    Examples
    --------
    >>> from gtcontrol import Collocation
    >>> Collocation(intervals=2, max_corrections=0)
    Collocation(intervals=2, max_corrections=0, parallelization='serial', cache=True)
    """

    intervals: int = 1
    max_corrections: int = 3
    parallelization: str = "serial"
    cache: bool = True

    def __post_init__(self) -> None:
        as_positive_int("intervals", self.intervals, maximum=MAX_INTERVALS)
        as_nonnegative_int("max_corrections", self.max_corrections, maximum=MAX_CORRECTIONS)
        as_choice("parallelization", self.parallelization, PARALLEL)
        if not isinstance(self.cache, (bool, np.bool_)):
            raise InvalidParametersError(f"cache: expected a bool, got {shown(self.cache)}")


@dataclass(frozen=True, kw_only=True)
class SteerOptions:
    """Validated keyword options of :func:`gtcontrol.steer` (see its ``Parameters``).

    Attributes
    ----------
    objective, terminal, terminal_weight, redundancy, regularization, bounds, collocation
        See :func:`gtcontrol.steer`.
    terminal_tol, solver, initial_guess, token_check, seed, method
        See :func:`gtcontrol.steer`.
    """

    objective: str = "kinetic"
    terminal: str = "exact"
    terminal_weight: float = 1e4
    redundancy: str | None = None
    regularization: float | None = None
    bounds: SteeringBounds = field(default_factory=SteeringBounds)
    collocation: Collocation = field(default_factory=Collocation)
    terminal_tol: float = 1e-6
    solver: IpoptSettings = field(default_factory=IpoptSettings)
    initial_guess: Schedule | None = None
    token_check: int | None = None
    seed: int = 0
    method: str = "auto"

    def __post_init__(self) -> None:
        as_choice("method", self.method, METHODS)
        as_choice("objective", self.objective, OBJECTIVES)
        as_choice("terminal", self.terminal, TERMINALS)
        if self.redundancy is not None:
            as_choice("redundancy", self.redundancy, REDUNDANCY)
        as_positive_float("terminal_weight", self.terminal_weight)
        as_positive_float("terminal_tol", self.terminal_tol)
        if self.regularization is not None:
            as_nonnegative_float("regularization", self.regularization)
        if self.token_check is not None:
            as_positive_int("token_check", self.token_check, maximum=MAX_TOKEN_CHECK)
        as_seed("seed", self.seed)
        if self.initial_guess is not None and not isinstance(self.initial_guess, Schedule):
            raise InvalidParametersError(
                f"initial_guess: expected a Schedule, got {type(self.initial_guess).__name__}"
            )
        set_fields(
            self,
            bounds=as_option_group("bounds", self.bounds, SteeringBounds),
            collocation=as_option_group("collocation", self.collocation, Collocation),
            solver=as_option_group("solver", self.solver, IpoptSettings),
        )

    @property
    def intervals(self) -> int:
        """Collocation intervals per layer."""
        return self.collocation.intervals

    @property
    def max_corrections(self) -> int:
        """Discretization corrections."""
        return self.collocation.max_corrections

    @property
    def cache(self) -> bool:
        """Whether to reuse a symbolic NLP."""
        return bool(self.collocation.cache)

    @property
    def ipopt(self) -> dict[str, Any]:
        """IPOPT's options of the NLP: the settings with steering's defaults, then the extras."""
        s = self.solver
        max_iter = DEFAULT_MAX_ITER if s.max_iter is None else s.max_iter
        tol = DEFAULT_TOL if s.tol is None else s.tol
        return {"max_iter": max_iter, "tol": tol, **s.options}

    @property
    def redundancy_for(self) -> str:
        """The redundancy actually used: ``"fixed"`` for kinetic, ``"joint"`` for parameter."""
        if self.redundancy is not None:
            return self.redundancy
        return "fixed" if self.objective == "kinetic" else "joint"


def _flow_obstacle(initial: Gaussian, mode: str, redundancy: str, opts: SteerOptions) -> str:
    """Why the flow construction does not apply (empty when it does)."""
    if opts.objective != "kinetic":
        return "it minimizes the kinetic energy (objective='kinetic')"
    if opts.terminal != "exact":
        return "it reaches the target exactly (terminal='exact')"
    if opts.bounds:
        return "it takes no bounds"
    if opts.initial_guess is not None:
        return "it takes no initial_guess"
    if mode == "full" and redundancy != "fixed":
        return "in mode 'full' it fixes the flat directions (redundancy='fixed')"
    if initial.rank < initial.dim:
        return "it needs a non-singular initial covariance"
    return ""


def _method(initial: Gaussian, mode: str, redundancy: str, opts: SteerOptions) -> str:
    obstacle = _flow_obstacle(initial, mode, redundancy, opts)
    if opts.method == "flow" and obstacle:
        raise InvalidParametersError(f"method: 'flow' does not apply here: {obstacle}")
    if opts.method == "auto":
        return "flow" if not obstacle and initial.dim >= FLOW_MIN_DIM[mode] else "collocation"
    return opts.method


# ============================================================================ the plan
@dataclass(frozen=True, eq=False)
class Plan:
    """A validated steering problem: the initial law, the options and the NLP data.

    The target, horizon, depth, mode and regularization weight live in ``problem`` once; the
    properties below read them there.
    """

    initial: Gaussian
    opts: SteerOptions
    redundancy: str
    problem: Problem
    method: str = "collocation"

    @property
    def target(self) -> Gaussian:
        """The target law."""
        return self.problem.target

    @property
    def T(self) -> float:
        """The horizon."""
        return self.problem.T

    @property
    def n(self) -> int:
        """The number of layers."""
        return self.problem.L

    @property
    def mode(self) -> str:
        """Which parameters are controls."""
        return self.problem.mode

    @property
    def reg_weight(self) -> float:
        """The regularization weight the NLP uses (the option, or its default for the mode)."""
        return self.problem.regularization

    @property
    def best_of(self) -> bool:
        """Solve every fixed gauge of the flat directions and keep the lower energy."""
        return (
            self.mode == "full"
            and self.redundancy == "fixed"
            and self.opts.initial_guess is None
            and self.opts.terminal == "exact"
        )


def _check_bounds(mode: str, fixed: tuple[str, ...], opts: SteerOptions) -> None:
    optimized = [p for p in PARAMS[mode] if p not in fixed]
    b = opts.bounds
    for name, bounds in (("bounds.entry", b.entry), ("bounds.norm", b.norm)):
        for key in bounds:
            if key not in optimized:
                raise InvalidParametersError(
                    f"{name}: parameter {key!r} is not optimized in mode {mode!r}"
                    + (" with redundancy='fixed' (use redundancy='joint')" if key in fixed else "")
                )
    if opts.objective == "parameter" and mode != "ffn" and b.cov is None:
        raise InvalidParametersError(
            "bounds.cov: objective='parameter' with attention needs a bound on |Σ(t)|: a large Σ "
            "makes V Σ B large with small V and B (and attention can blow Σ up in finite time), "
            "so the parameter energy has infimum 0 without a minimizer"
        )


def make_plan(
    initial: Gaussian, target: Gaussian, T: Any, n_layers: Any, mode: Any, opts: SteerOptions
) -> Plan:
    """Validate the problem against its options and build the NLP description."""
    check_pair(initial, target)
    mode = check_mode(mode)
    check_reachable(initial, target, mode=mode)
    t_hor = as_positive_float("T", T)
    n = check_n_layers(n_layers)
    d = initial.dim
    if opts.terminal == "kl" and (initial.rank < d or target.rank < d):
        raise InvalidParametersError(
            "terminal: the KL penalty needs non-singular initial and target covariances; "
            "use terminal='bw' or 'exact'"
        )
    redundancy = opts.redundancy_for
    fixed: tuple[str, ...] = ("V", "B") if mode == "full" and redundancy == "fixed" else ()
    _check_bounds(mode, fixed, opts)
    if opts.regularization is not None:
        reg_weight = float(opts.regularization)
    else:
        # Singular Σ with attention: the rows of B acting on ker Σ (and the matching columns of
        # V) are exactly flat, and 1e-4 curvature leaves IPOPT crawling along them.
        reg_weight = 1e-3 if mode == "attention" and initial.rank < d else 1e-4
    problem = Problem(
        mode=mode,
        fixed=fixed,
        target=target,
        logdet0=float(np.linalg.slogdet(initial.cov)[1]) if initial.rank == d else 0.0,
        T=t_hor,
        L=n,
        objective=opts.objective,
        terminal=opts.terminal,
        terminal_weight=float(opts.terminal_weight),
        regularization=reg_weight,
        bounds=opts.bounds,
        intervals=opts.intervals,
        parallelization=opts.collocation.parallelization,
        ipopt=opts.ipopt,
    )
    method = _method(initial, mode, redundancy, opts)
    return Plan(initial, opts, redundancy, problem, method)


#: IPOPT return statuses that mean "stopped by a cap" (iterations, CPU or wall time, deadline).
_IPOPT_BUDGET = frozenset(
    {
        "Maximum_Iterations_Exceeded",
        "Maximum_CpuTime_Exceeded",
        "Maximum_WallTime_Exceeded",
        "User_Requested_Stop",
    }
)
#: IPOPT return statuses that mean "the constraints cannot hold".
_IPOPT_INFEASIBLE = frozenset({"Infeasible_Problem_Detected"})


@dataclass(frozen=True, eq=False)
class SteeringResult(ResultFields, Outcome):
    """Outcome of :func:`steer`; every number is measured on the re-simulated control.

    Attributes
    ----------
    controls
        The optimized ``L``-layer :class:`Schedule` (the best iterate when not successful).
    status
        ``Status.SUCCESS``: IPOPT converged, the re-simulation reached ``T`` and its terminal
        Bures–Wasserstein error is at most ``terminal_tol``. ``BUDGET_EXHAUSTED``: the
        ``time_limit`` or IPOPT's ``max_iter`` ran out (the best iterate is returned).
        ``NOT_FOUND``: IPOPT found the constraints locally infeasible (e.g. tight bounds; a
        local method, so no proof that no control exists).
        ``BLOWUP`` / ``OVERFLOW``: the re-simulated moments diverge. ``FAILED``: IPOPT failed
        otherwise, or converged but the re-simulated terminal error exceeds ``terminal_tol``.
        IPOPT's own return status is in ``stats["ipopt_status"]`` and in ``message``.
    message
        The reason, with IPOPT's return status.
    cost
        The objective (kinetic or parameter energy) of the re-simulated control, without the
        regularization term or terminal penalty.
    kinetic_energy
        ``∫₀ᵀ E|v|² dt`` of the control (``inf`` after a blow-up).
    parameter_energy
        ``Σ_k h (|A_k|² + |b_k|² + |V_k|² + |B_k|²)``, ``h = T/L``.
    lower_bound
        ``W2²(initial, target) / T``.
    gap
        ``(kinetic_energy − lower_bound) / lower_bound`` (the kinetic energy itself when the end
        points coincide to rounding, ``W2 ≤ 1e-12`` times the problem scale).
    terminal_error
        ``W2(N(T), target)`` of the re-simulated control.
    trajectory
        The re-simulated moments (:func:`gtcontrol.simulate`), ``None`` unless they reach ``T``.
    stats
        ``ipopt_status`` (``None`` when no solve ran), ``converged`` (IPOPT's own verdict),
        ``iterations`` (all solves), ``corrections``, ``seconds`` (wall, total),
        ``solve_seconds``, ``build_seconds``, ``cached``, ``nlp_objective``, ``mean_error``,
        ``cov_error`` (Frobenius), ``cov_norm_max``, ``warm_start``, ``redundancy``,
        ``regularization`` (the weight used), ``regularization_energy``, ``attempts``,
        ``time_limit`` and, when requested, ``token_terminal_error``.
    success
        ``status is Status.SUCCESS``.
    """

    controls: Schedule
    cost: float
    kinetic_energy: float
    parameter_energy: float
    lower_bound: float
    gap: float
    terminal_error: float
    trajectory: Trajectory | None

    def _summary_items(self) -> SummaryItems:
        return [
            ("n_layers", self.controls.n_layers),
            ("dim", self.controls.dim),
            ("cost", self.cost),
            ("kinetic_energy", self.kinetic_energy),
            ("lower_bound", self.lower_bound),
            ("gap", self.gap),
            ("terminal_error", self.terminal_error),
        ]

    def _draw(self, ax: Axes) -> None:
        from ..model._figures import draw_covariance
        from ._figures import draw_parameter_norms

        if self.trajectory is None:  # the moments did not reach T
            draw_parameter_norms(ax, self.controls)
            ax.set_title(f"parameter norms per layer ({self.status.value})", fontsize=10)
            return
        t, cov, bps = self.trajectory.t, self.trajectory.cov, self.controls.breakpoints
        title = f"covariance eigenvalues, {self.controls.n_layers} layers"
        draw_covariance(ax, t, cov, breakpoints=bps, title=title)


#: Tolerances of the verifying re-simulation: tighter than simulate's defaults because the
#: Bures–Wasserstein distance to a singular target is only Hölder-1/2 in Σ (an integration
#: error ε off the support shows up as sqrt(ε)).
RESIMULATION_RTOL, RESIMULATION_ATOL = 1e-13, 1e-16


#: Memory for the records of the verifying re-simulation (each a ``d × d`` covariance).
_RECORD_BYTES = 64 * 2**20


def energy_points(n_layers: int, d: int) -> int:
    """Records of the verifying re-simulation, the nodes of the kinetic energy's Simpson rule:
    64 intervals per layer, at least 512, at most what fits in 64 MiB (at least 8 per layer).

    Measured on steering schedules (d = 8 and 32, L = 8): 64 per layer agree with 16,000 records
    to 1e-13 relative; more records only cost time at large ``d`` (each is a ``d × d`` matrix:
    4,001 records took 3 s of re-simulation at d = 64).
    """
    fits = _RECORD_BYTES // (8 * d * d)
    return max(min(max(64 * n_layers, 512), fits), 8 * n_layers) + 1


def verify(schedule: Schedule, initial: Gaussian, budget: Budget) -> Trajectory | None:
    """Re-simulate with the adaptive integrator; ``None`` if the integrator fails.

    The re-simulation runs within :meth:`Budget.nested_limit` (the time left and half the
    grace; the other half is kept for assembling its records and measuring the control: at
    d = 128, 523 records, about 0.3 s). When it runs out, the trajectory's status is
    ``BUDGET_EXHAUSTED`` and the control is not verified.
    """
    try:
        return simulate(
            schedule,
            initial,
            rtol=RESIMULATION_RTOL,
            atol=RESIMULATION_ATOL,
            n_points=energy_points(schedule.n_layers, schedule.dim),
            time_limit=budget.nested_limit(),
        )
    except SolverError:
        return None


def _traj_message(traj: Trajectory | None) -> str:
    return "" if traj is None else traj.message


def reached(traj: Trajectory | None) -> bool:
    return traj is not None and traj.status is Status.SUCCESS


# ============================================================================ the result
def _parameter_energy(schedule: Schedule) -> float:
    """``h Σ_layers (‖A‖² + ‖b‖² + Σ_h ‖V_h‖² + ‖B_h‖²)`` from scaled norms: over a long horizon
    the parameters are small (about ``1/T``) and their squares underflow to zero."""
    norms = []
    for lay in schedule.layers:
        norms += [scaled_norm(lay.A), scaled_norm(lay.b)]
        for v, b_mat in lay.heads:
            norms += [scaled_norm(v), scaled_norm(b_mat)]
    total = scaled_norm(np.asarray(norms))
    return schedule.duration * total * total


def classify(plan: Plan, sol: Solution, traj: Trajectory | None) -> tuple[Status, str]:
    """Status and message of a solve from IPOPT's verdict and the re-simulation."""
    if not reached(traj):
        status = Status.FAILED if traj is None else traj.status
        if status is Status.BUDGET_EXHAUSTED:
            return status, (
                f"the verifying re-simulation ran out of time ({_traj_message(traj)}); the last "
                f"iterate is not verified (IPOPT: {sol.status})"
            )
        return status, (
            f"the re-simulated moments blow up or cannot be integrated (IPOPT: {sol.status})"
        )
    assert traj is not None
    err = traj.final.bures_wasserstein(plan.target)
    if not sol.success:
        if sol.status in _IPOPT_BUDGET:
            status = Status.BUDGET_EXHAUSTED
        elif sol.status in _IPOPT_INFEASIBLE:
            status = Status.NOT_FOUND
        else:
            status = Status.FAILED
        why = "the time limit was reached" if sol.timed_out else f"IPOPT: {sol.status}"
        return status, (
            f"IPOPT did not converge ({why}); returning the last iterate, whose "
            f"re-simulated terminal error is {err:.3g}"
        )
    if err > plan.opts.terminal_tol:
        return Status.FAILED, (
            f"IPOPT converged ({sol.status}) but the re-simulated terminal error "
            f"{err:.3g} exceeds terminal_tol = {plan.opts.terminal_tol:g}"
        )
    return Status.SUCCESS, f"IPOPT converged ({sol.status}); re-simulated terminal error {err:.3g}"


def measure(
    plan: Plan,
    schedule: Schedule,
    traj: Trajectory | None,
    status: Status,
    message: str,
    run_stats: dict[str, Any],
    budget: Budget,
) -> SteeringResult:
    """Measure the re-simulated control: energies, terminal error, optional token check.

    The kinetic energy is Simpson's rule on the records of the verifying re-simulation (no
    second one); the optional token check runs within the budget's grace.
    """
    initial, target, opts = plan.initial, plan.target, plan.opts
    stats: dict[str, Any] = dict(run_stats)
    lower = initial.bures_wasserstein(target) ** 2 / plan.T
    par_energy = _parameter_energy(schedule)
    reached = traj if traj is not None and traj.status is Status.SUCCESS else None
    terminal_error, kin = math.inf, math.inf
    if reached is not None:
        final = reached.final
        terminal_error = final.bures_wasserstein(target)
        stats["mean_error"] = float(np.linalg.norm(final.mean - target.mean))
        stats["cov_error"] = float(np.linalg.norm(final.cov - target.cov))
        stats["cov_norm_max"] = float(np.max(frobenius_norms(reached.cov)))
        kin = trajectory_energy(schedule, reached)  # the verifying re-simulation's records
        if opts.token_check is not None:
            x = initial.sample(int(opts.token_check), seed=np.random.default_rng(opts.seed))
            tok = simulate_tokens(schedule, x, time_limit=budget.nested_limit())
            stats["token_terminal_error"] = (
                tok.final.bures_wasserstein(target) if tok.status is Status.SUCCESS else math.inf
            )
    stats["regularization_energy"] = (
        stats["regularization"] * par_energy if opts.objective == "kinetic" else 0.0
    )
    # Coincident end points (W2 at rounding level): the bound is 0 and the gap is absolute.
    coincident = lower * plan.T <= (1e-12 * problem_scale(initial, target)) ** 2
    return SteeringResult(
        controls=schedule,
        status=status,
        message=message,
        cost=kin if opts.objective == "kinetic" else par_energy,
        kinetic_energy=kin,
        parameter_energy=par_energy,
        lower_bound=lower,
        gap=kin if coincident else (kin - lower) / lower,
        terminal_error=terminal_error,
        trajectory=reached,
        stats=MappingProxyType(stats),
    )


#: Seconds per layer of the closed-form starts (eigen-decompositions and polar factors of
#: ``d × d`` matrices) at d = 256, measured on a loaded 2-core machine; ``O(d³)``.
_CLOSED_FORM_SECONDS_D256 = 0.15


def closed_form_estimate(plan: Plan) -> float:
    """Estimated seconds to build a closed-form start (``L`` layers of ``O(d³)`` work)."""
    return plan.n * _CLOSED_FORM_SECONDS_D256 * (plan.initial.dim / 256) ** 3


def no_time_for_closed_form(plan: Plan, budget: Budget) -> bool:
    """Whether even a closed-form start would outlast the budget's grace (:meth:`Budget.grace`:
    the start is the best iterate a spent budget returns, so it may use the grace)."""
    left = budget.grace()
    return left is not None and closed_form_estimate(plan) > left


def no_solve_stats(warm_start: str) -> dict[str, Any]:
    """The solver entries of the ``stats`` of a control returned without an IPOPT solve.

    One home for what a result reports when no NLP iterate was taken (the identity control,
    or a starting control returned without optimization): no IPOPT status, not converged, no
    iterations or corrections, no solve time, no NLP objective.

    Parameters
    ----------
    warm_start
        The label of the control returned (``stats["warm_start"]``).

    Returns
    -------
    dict
        The entries ``ipopt_status`` … ``nlp_objective`` and ``warm_start``, in that order.
    """
    return {
        "ipopt_status": None,
        "converged": False,
        "iterations": 0,
        "corrections": 0,
        "solve_seconds": 0.0,
        "nlp_objective": math.nan,
        "warm_start": warm_start,
    }


def identity_result(
    plan: Plan, budget: Budget, clock: float, why: str, stats: dict[str, Any]
) -> SteeringResult:
    """No control could be built in time: the ``L`` zero layers, ``BUDGET_EXHAUSTED``.

    The identity control leaves the initial Gaussian in place, so its numbers are exact
    without a re-simulation (which at large ``d`` would itself outlast the limit): energies 0,
    terminal error ``W2(initial, target)``, ``gap`` undefined (``nan``: nothing was steered).
    """
    schedule = Schedule([Layer(dim=plan.initial.dim)] * plan.n, plan.T)
    message = (
        f"{why}; no control was built: returning the identity control ({plan.n} zero layers, "
        "which leave the initial Gaussian in place)"
    )
    lower = plan.initial.bures_wasserstein(plan.target) ** 2 / plan.T
    all_stats: dict[str, Any] = {
        **no_solve_stats("identity (no time to build a start)"),
        "regularization": plan.reg_weight,
        "regularization_energy": 0.0,
        "redundancy": plan.redundancy if plan.mode == "full" else None,
        "time_limit": budget.time_limit,
        "build_seconds": 0.0,
        "cached": False,
        **stats,
    }
    result = SteeringResult(
        controls=schedule,
        status=Status.BUDGET_EXHAUSTED,
        message=message,
        cost=0.0,
        kinetic_energy=0.0,
        parameter_energy=0.0,
        lower_bound=lower,
        gap=math.nan,
        terminal_error=math.sqrt(lower * plan.T),
        trajectory=None,
        stats=MappingProxyType(all_stats),
    )
    return finish(result, clock, [])


def finish(result: SteeringResult, clock: float, notes: list[str]) -> SteeringResult:
    stats = dict(result.stats)
    stats["seconds"] = time.perf_counter() - clock
    stats["attempts"] = len(notes) + (1 if result.success else 0)
    message = result.message
    if notes and not result.success:
        message += " [starts tried: " + "; ".join(notes) + "]"
    elif notes:
        message += " [other starts: " + "; ".join(notes) + "]"
    return replace(result, message=message, stats=MappingProxyType(stats))
