"""Optimal finite-time steering of Gaussians by ``L``-layer Transformers, verified.

:func:`steer` optimizes piecewise-constant layer parameters that move ``N(m0, Σ0)`` to
``N(m1, Σ1)`` in depth ``T`` with IPOPT through CasADi, and re-simulates every returned control
with the adaptive moment integrator. This module holds the entry point and the solve attempts:
``run`` builds (or reuses) the NLP and solves from each starting control in turn until one is
verified, within a :class:`~gtcontrol._status.Budget`: each IPOPT solve gets the remaining wall
time, and when the budget is spent the best iterate is returned with ``BUDGET_EXHAUSTED``.

The other parts of steering, one idea each:

* :mod:`.reachability`: which targets are reachable (``is_reachable``, ``check_reachable``);
* :mod:`.ot`: the closed-form geodesic (``ot_steering``) and ``kinetic_energy``;
* :mod:`.realization`: ``realize`` and ``exact_layer_steering``;
* :mod:`._steer_problem`: the validated options, the plan of the NLP, and the verified
  :class:`SteeringResult`;
* :mod:`._transcription`: the CasADi NLP (collocation blocks and their assembly);
* :mod:`._constructions`: the constructed controls (the warm starts, and the flow construction
  of exact node-to-node layers, ``method="flow"``, the default from ``d = 5`` on).

Reference: the paper cited in :mod:`gtcontrol`, §5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from .._blas import calm_blas
from .._linalg import FloatArray, vech
from .._status import Budget, Status, as_time_limit
from .._validation import as_positive_float, option_values
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory
from ..model.params import Layer, Schedule
from ._constructions import check_guess, solve_flow, states_of, warm_starts
from ._ipopt import IpoptSettings
from ._steer_base import make_problem, steer_base, wants_nlp
from ._steer_base_nlp import polish
from ._steer_problem import (
    Collocation,
    Plan,
    SteeringBounds,
    SteeringResult,
    SteerOptions,
    classify,
    finish,
    identity_result,
    make_plan,
    measure,
    no_solve_stats,
    no_time_for_closed_form,
    reached,
    verify,
)
from ._transcription import Solution, Transcription, build_estimate, pack, to_layer, transcription
from .reachability import check_mode, check_n_layers

__all__ = ["Collocation", "IpoptSettings", "SteeringBounds", "SteeringResult", "steer"]


def steer(
    initial: Gaussian,
    target: Gaussian,
    T: float,
    *,
    n_layers: int = 10,
    mode: str | None = None,
    objective: str = "kinetic",
    terminal: str = "exact",
    terminal_weight: float = 1e4,
    redundancy: str | None = None,
    regularization: float | None = None,
    bounds: SteeringBounds | None = None,
    terminal_tol: float = 1e-6,
    collocation: Collocation | None = None,
    solver: IpoptSettings | None = None,
    initial_guess: Schedule | None = None,
    token_check: int | None = None,
    seed: int = 0,
    method: str = "auto",
    base: Layer | Schedule | None = None,
    time_limit: float | None = None,
) -> SteeringResult:
    """Optimal ``L``-layer steering of ``initial`` to ``target`` in depth ``T``, verified.

    Parameters are constant on each layer ``[kh, (k+1)h)``, ``h = T/L``. Two methods (option
    ``method``). The flow construction (the default from ``d = 5`` on, when it applies) chains
    exact node-to-node layers between the geodesic's states at the layer switches: seconds at
    ``d = 64``, and in mode ``"full"`` a kinetic gap ~10× below the exact L-layer construction's.
    The collocation NLP covers every objective and bound: the moment dynamics
    ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (``M = A + V Σ B``, ``c = b + V m``, theory.md §2)
    are transcribed for IPOPT through CasADi by Gauss–Legendre collocation (degree 3 per interval;
    states ``(m, vech Σ)`` with each entry of Σ stored once; the layer function ``map``-ped over
    the layers; exact first and second derivatives). The objective is the kinetic energy
    ``∫ tr(MΣMᵀ) + |Mm + c|² dt ≥ W2²/T`` or the parameter energy; the terminal condition exact
    or a Bures–Wasserstein/KL penalty. The warm start is the closed-form geodesic realized in the
    requested mode (:func:`ot_steering`, :func:`exact_layer_steering`, :func:`realize`).

    Every returned control is re-simulated with :func:`gtcontrol.simulate` (adaptive,
    ``rtol = 1e-13``); the discretization error of the NLP is then removed by up to
    ``collocation.max_corrections`` re-solves with shifted terminal data. Every loop is capped
    (IPOPT's ``solver.max_iter``, ``collocation.max_corrections``, at most three starts; in
    the flow construction a fixed number of gauges per layer, each at most 40 re-simulations);
    ``time_limit`` bounds the wall time.

    Parameters
    ----------
    initial
        The starting Gaussian.
    target
        The Gaussian to reach, of the same dimension; it must be reachable in ``mode``.
    T
        Depth, positive.
    n_layers
        Number of layers ``L`` (1 to 1,000).
    mode
        ``"full"`` (``A, b, V, B``), ``"ffn"`` (``V = B = 0``) or ``"attention"``
        (``A = 0, b = 0`` exactly). ``None``: ``"full"``, or ``"ffn"`` with a ``base``. With a
        ``base`` it names what is added: ``"ffn"`` the affine part, ``"full"`` that and a head
        (``"attention"`` is refused; see ``base``).
    objective
        ``"kinetic"``: ``∫₀ᵀ E|v|² dt`` (bounded below by ``W2²/T``); ``"parameter"``: the depth-
        integrated parameter energy ``Σ_k h (|A_k|² + |b_k|² + |V_k|² + |B_k|²)``.
    terminal
        ``"exact"``: equality constraints ``m(T) = m1``, ``Σ(T) = Σ1`` (for a rank-r target in the
        reduced form ``U1ᵀ(Σ − Σ1)U1 = 0``, ``Q1ᵀ(Σ − Σ1)U1 = 0``); ``"bw"``: penalty
        ``terminal_weight · W2²(N(T), target)``; ``"kl"``: penalty
        ``terminal_weight · KL(N(T) ‖ target)`` (needs non-singular Σ0 and Σ1).
    terminal_weight
        Weight of a terminal penalty, positive.
    redundancy
        How ``mode="full"`` treats the flat directions (``A`` and ``V Σ B`` enter only through
        their sum): ``"fixed"`` eliminates them: ``V_k, B_k`` are held at a gauge and only
        ``A_k, b_k`` are optimized (they span every constant field, so nothing is lost for
        reachability). Two gauges are solved and the lower energy is returned: the
        curvature-matched attention of the closed form (``V Σ(t) B`` then reproduces the
        geodesic's field variation ``dM/dt = −M²`` inside each layer) and ``V = B = 0``; so the
        result is never worse than the ``"ffn"`` optimum. ``"joint"`` optimizes all four with the
        Tikhonov term of ``regularization``, from the minimum-norm split. ``None``: ``"fixed"``
        for the kinetic objective, ``"joint"`` for the parameter objective.
    regularization
        Weight ε ≥ 0 of ``ε Σ_k h |θ_k|²`` added to the kinetic objective over the optimized
        parameters: it gives the flat directions curvature ``2εh``. The reported ``cost`` excludes
        it. ``None``: ``1e-4``, or ``1e-3`` in attention mode with a singular Σ0.
    bounds
        A :class:`SteeringBounds`: bounds on the entries (``entry``) or the Frobenius norms
        (``norm``) of each layer's parameters, and on ``|Σ(t)|_F`` (``cov``, required for
        ``objective="parameter"`` with attention). ``None``: unbounded.
    terminal_tol
        ``success`` requires the re-simulated terminal Bures–Wasserstein error to be at most this.
    collocation
        A :class:`Collocation`: intervals per layer, discretization corrections,
        parallelization and caching of the collocation NLP. ``None``: ``Collocation()``.
    solver
        An :class:`IpoptSettings`: IPOPT's iteration limit per solve (default 500; running out
        gives ``Status.BUDGET_EXHAUSTED``), tolerance (default 1e-8) and extra options.
        ``None``: ``IpoptSettings()``.
    initial_guess
        A :class:`Schedule` of ``L`` single-head layers to start from instead of the closed form.
    token_check
        A number of tokens (``None``: no token check): also move that many tokens sampled
        from ``initial`` through the control with the token-level simulator; the terminal
        error of their empirical Gaussian is reported in ``stats["token_terminal_error"]`` (a
        finite-N check: it is ``O(N^{-1/2})``).
    seed
        Seed of the token sample of ``token_check``.
    method
        ``"collocation"``: the CasADi/IPOPT NLP above (every objective, terminal condition and
        bound). ``"flow"``: no NLP; exact node-to-node layers between the geodesic's states at the
        layer switches (docs/steering.md §5, "Flow construction"): ``"ffn"`` is the exact
        L-layer construction, ``"full"`` keeps per layer the lowest-energy of that layer and a
        few attention gauges shot onto the next node (never worse than the exact construction),
        ``"attention"`` shoots node-to-node attention layers (the exact attention construction
        is kept when cheaper). It needs the kinetic objective, the exact terminal condition, no
        bounds, no ``initial_guess``, ``redundancy="fixed"`` and a non-singular Σ0.
        ``"auto"``: ``"flow"`` where it applies from ``d ≥ 5`` (``"full"``, ``"attention"``) or
        ``d ≥ 9`` (``"ffn"``), else ``"collocation"``.
    base
        A network to steer through (``None``: a blank network): a :class:`Layer` used in every
        sublayer, or a :class:`Schedule` of ``n_layers`` layers over depth ``T``. Its heads
        (dense and factored) and affine part are kept unchanged in every sublayer (the returned
        layers hold the base's heads first, bitwise unchanged, then the additions); the control
        is what is added to them per sublayer: a constant affine ``A_k, b_k`` (mode ``"ffn"``,
        the default with a base), or that and one added dense head ``(V_k, B_k)`` after the
        base's heads (mode ``"full"``; a sublayer keeps the head only when it lowers that
        sublayer's measured added energy, so ``"full"`` is never dearer than ``"ffn"`` on the
        same plan; at most about twice its time). Mode ``"attention"`` (heads alone) is
        refused. ``cost`` is the added field's kinetic energy ``∫ E|u|² dt``,
        ``u = (A_k + V_k Σ B_k) x + b_k + V_k m``; ``kinetic_energy`` is the whole field's;
        ``stats["added_heads"]`` counts the added heads per sublayer. The initial and target
        covariances must share their range (the active
        subspace); a coordinate with zero variance and the same mean at both ends (the affine
        coordinate of a layer on ``R^{d+1}``) is held constant, so a base that moves one is
        refused. The flow construction (:mod:`gtcontrol.control._steer_base`) shoots every
        sublayer from where the previous one ended onto the next node of the cheapest plan
        (the geodesic, or the least-energy path of the base's field frozen per sublayer);
        ``method="auto"`` then polishes it with the collocation NLP (the base as fixed data)
        up to ``d = 6`` and keeps the cheaper verified control (``"flow"``: the construction
        only; ``"collocation"``: the NLP up to ``d = 12``). ``success`` needs the re-simulated
        terminal error to be at most ``terminal_tol · max(1, |m|, sqrt(tr Σ))`` of the end points
        (``stats["relative_terminal_error"]``); ``stats["seconds_by_part"]`` says where the time
        went. ``objective``, ``terminal``, ``redundancy``, ``regularization``, ``bounds`` and
        ``initial_guess`` keep their defaults.
    time_limit
        Wall-clock budget in seconds (``None``: no limit). Each IPOPT solve gets the remaining
        budget as its maximal wall time; when it is spent no further start or correction is
        tried, and the best iterate so far (the starting control if no solve ran, or a feasible
        ``initial_guess`` when no iterate reaches the target) is returned with
        ``Status.BUDGET_EXHAUSTED``. The flow construction checks it between re-simulations and
        returns the best feasible control built so far (at worst the exact construction).
        Building the NLP (CasADi's exact Hessian, one native call: seconds for ``d ≥ 8`` the
        first time, minutes for ``d ≥ 16``) cannot be interrupted: a cost model refuses it up
        front when its estimate exceeds the time left (the message names both), and the
        starting control is returned. The verifying re-simulations run within the budget, plus
        at most half of the ``max(1 s, 10 %)`` tolerance for the final verification; a control
        whose verification runs out is returned unverified with ``BUDGET_EXHAUSTED``. When not
        even a closed-form start fits (``d = 256``: seconds), the identity control is returned.

    Returns
    -------
    SteeringResult
        ``status`` is ``SUCCESS`` when the re-simulated control reaches the target within
        ``terminal_tol``; otherwise the best iterate with ``BUDGET_EXHAUSTED`` (``time_limit``
        or ``solver.max_iter``), ``INFEASIBLE`` (e.g. under bounds), ``BLOWUP``/``OVERFLOW`` or
        ``FAILED``; ``message`` says why and quotes IPOPT's return status.

    Raises
    ------
    UnreachableTargetError
        If the target is not reachable in ``mode`` (rank change; pure-attention invariants).
    InvalidParametersError, InvalidGaussianError
        On malformed input or options.

    Notes
    -----
    Around a base in mode ``"full"`` each sublayer is shot first with ``A_k, b_k`` alone; at
    that shot's midpoint ``F`` is the base's field matrix, ``K``, ``k`` the addition,
    ``u_m = K m + k``. The least added energy asks (Pontryagin) for
    ``dK/dt = −(K² + FᵀK + KF) − (Y + Yᵀ)``, ``Y = Σ_h V_hᵀ(u_m mᵀ + KΣ)B_hᵀ``, and
    ``du_m/dt = −Fᵀu_m − Σ_h V_hᵀu_m`` (the sums over the base's heads); an added head
    ``(V_k, β I)`` supplies that variation inside the sublayer (``V_k`` by Tikhonov least squares
    on ``V_k [βΣ̇ | ṁ]``), the sublayer is shot again with it onto the same node, and the head
    is kept only when the re-simulated added energy is lower. The NLP polish (``d ≤ 6``) then
    optimizes ``A_k, b_k, V_k`` with ``B_k`` held.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.

    Examples
    --------
    >>> from gtcontrol import Gaussian
    >>> g0, g1 = Gaussian([1.0], [[0.5]]), Gaussian([2.0], [[1.5]])
    >>> res = steer(g0, g1, 1.0, n_layers=3, mode="ffn")
    >>> res.status, res.stats["ipopt_status"]
    (<Status.SUCCESS: 'success'>, 'Solve_Succeeded')
    >>> bool(res.terminal_error < 1e-6), bool(res.kinetic_energy >= res.lower_bound)
    (True, True)

    Through a fixed head ``V = 0.5 I``, ``B = I``: the control is what is added to it.

    >>> from gtcontrol import Layer
    >>> base = Layer(V=0.5, B=[[1.0]])
    >>> res = steer(g0, g1, 1.0, n_layers=3, base=base, method="flow")
    >>> import numpy as np
    >>> kept = res.controls.layers[0].heads[0]
    >>> res.status, all(np.array_equal(x, y) for x, y in zip(kept, base.heads[0]))
    (<Status.SUCCESS: 'success'>, True)
    >>> bool(res.stats["relative_terminal_error"] < 1e-6), bool(res.cost > 0.0)
    (True, True)
    """
    clock = time.perf_counter()
    opts = SteerOptions(**option_values(SteerOptions, locals()))
    budget = Budget(as_time_limit(time_limit))
    if base is not None:
        around = "ffn" if mode is None else mode
        return _steer_around(initial, target, T, n_layers, around, opts, base, budget, clock)
    plan = make_plan(initial, target, T, n_layers, "full" if mode is None else mode, opts)
    with calm_blas():  # on a busy machine BLAS's threads stall inside calls no budget checks
        return run(plan, budget, clock)


def _steer_around(
    initial: Gaussian,
    target: Gaussian,
    T: float,
    n_layers: int,
    mode: str,
    opts: SteerOptions,
    base: Any,
    budget: Budget,
    clock: float,
) -> SteeringResult:
    """``steer`` with a base: validate, refuse what the construction does not cover, build."""
    if check_mode(mode) == "attention":
        raise InvalidParametersError(
            "mode: around a base the control is the added affine part A_k, b_k (mode 'ffn'), or "
            "that and an added head per sublayer (mode 'full'); added heads alone (mode "
            "'attention', A_k = b_k = 0) are not built: each sublayer is shot onto its node by "
            "correcting a constant affine part, which heads alone do not have (their field "
            f"V Σ(t) B, V m(t) moves with the state); got {mode!r}"
        )
    defaults = SteerOptions()
    for name in _BASE_FIXED_OPTIONS:
        if getattr(opts, name) != getattr(defaults, name):
            raise InvalidParametersError(
                f"{name}: steering around a base takes the default ({getattr(defaults, name)!r})"
            )
    prob = make_problem(
        initial,
        target,
        as_positive_float("T", T),
        check_n_layers(n_layers),
        base,
        opts,
        mode,
    )
    if opts.method == "collocation" and initial.dim > NLP_MAX_DIM_BASE:
        raise InvalidParametersError(
            f"method: 'collocation' around a base builds an NLP whose Hessian grows as d⁵; it "
            f"is offered up to d = {NLP_MAX_DIM_BASE}, got d = {initial.dim} (use 'flow')"
        )
    result = steer_base(prob, budget)
    if result.success and wants_nlp(prob):
        with calm_blas():
            result = polish(prob, result, budget)
    return replace(
        result, stats=MappingProxyType({**result.stats, "seconds": time.perf_counter() - clock})
    )


#: Largest dimension at which ``method="collocation"`` polishes a construction around a base.
NLP_MAX_DIM_BASE = 12
#: Options of the blank problem that steering around a base does not take.
_BASE_FIXED_OPTIONS = (
    "objective",
    "terminal",
    "redundancy",
    "regularization",
    "initial_guess",
    "bounds",
)


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
        colloc = states_of(start, plan.initial, times, budget.nested_limit()).reshape(n, -1)
        ends = np.arange(1, n + 1, dtype=float) * (plan.T / n)
        states = states_of(start, plan.initial, ends, budget.nested_limit())
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
        opts = replace(
            plan.opts,
            collocation=replace(plan.opts.collocation, intervals=k),
            initial_guess=result.controls,
            method="collocation",
        )
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
            f"the time limit of {budget.given_limit:g} s (the build cannot be interrupted; "
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
    stats: dict[str, Any] = {**no_solve_stats(label), **common}
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
