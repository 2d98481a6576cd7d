"""The collocation NLP of steering through a fixed network, warm-started from the construction.

The NLP of :mod:`gtcontrol.control._transcription` with the base's heads and affine part as
fixed data of every layer (``M = A0 + A_k + Σ_h V_h Σ B_h``, ``c = b0 + b_k + Σ_h V_h m``) and the
additions ``A_k, b_k`` optimized for their own kinetic energy ``∫ E|A_k x + b_k|² dt``; in mode
``"full"`` also an added head's ``V_k`` (its ``B_k`` held at the construction's gauge, ``I``
where the construction added none), the energy then that of the whole added field
``(A_k + V_k Σ B_k) x + b_k + V_k m``. It
starts from the construction of :mod:`gtcontrol.control._steer_base` (its controls and its
re-simulated states), removes its discretization error by re-solving with the terminal data
shifted by the re-simulated miss, and is kept only when its verified control reaches the
target and costs less: :func:`gtcontrol.steer` never returns worse than the construction.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import numpy as np

from .._linalg import FloatArray, vech
from .._status import Budget, Status
from ..errors import SolverError
from ..model.params import Layer
from ._constructions import states_of
from ._steer_base import BaseLog, BaseProblem, added_layer, addition, verdict
from ._steer_problem import SteeringResult
from ._transcription import (
    Problem,
    SteeringBounds,
    base_size,
    build_estimate,
    pack,
    pack_base,
    transcription,
    unpack,
)

__all__: list[str] = []

#: Weight of the Tikhonov term on the additions: the columns of ``A_k`` on the null space of a
#: singular Σ act only through the mean, so without it the NLP has flat directions.
REGULARIZATION = 1e-9
#: The same in mode ``"full"``: the added head's ``B`` is held (so ``(αV, B/α)`` is no flat
#: direction), and ``A`` against ``VΣB`` is told apart only by the variation of ``Σ`` inside a
#: sublayer. Weights of 1e-6 and 1e-4 let ``V`` grow until the solution lived on the mesh's
#: error (re-simulated misses of 1e-3 relative, or a blow-up) at d = 5–6; 1e-3 costs about 0.2 %
#: of the added energy (the reported energy is the re-simulated one, without it).
HEAD_REGULARIZATION = 1e-3
#: Discretization corrections at least in mode ``"full"``: the added heads vary the field inside
#: a sublayer, so the first re-simulated miss is larger (up to 1e-2 relative at d = 5) and each
#: correction removes about 90 % of it (measured: 8.5e-3, 9.8e-4, 7.7e-5, 4.2e-6, ...).
HEAD_CORRECTIONS = 6


def _problem(prob: BaseProblem, n_base: int) -> Problem:
    opts = prob.opts
    return Problem(
        mode=prob.mode,
        fixed=("B",) if prob.mode == "full" else (),
        target=prob.target,
        logdet0=0.0,
        T=prob.T,
        L=prob.n,
        objective="kinetic",
        terminal="exact",
        terminal_weight=1.0,
        regularization=REGULARIZATION if prob.mode == "ffn" else HEAD_REGULARIZATION,
        bounds=SteeringBounds(),
        intervals=max(opts.intervals, 2),
        parallelization=opts.collocation.parallelization,
        ipopt=opts.ipopt,
        base_heads=n_base,
        held_rows=prob.frame.fixed,
    )


def _padded(base: Layer, n_base: int) -> FloatArray:
    """:func:`pack_base` with zero heads appended up to ``n_base`` (a schedule's layers may
    have different numbers of heads)."""
    d = base.dim
    data = pack_base(base)
    return np.concatenate([data, np.zeros(base_size(n_base, d) - data.size)])


def polish(prob: BaseProblem, construction: SteeringResult, budget: Budget) -> SteeringResult:
    """The NLP's control when it is verified and cheaper, else ``construction`` (with a note)."""
    clock = time.perf_counter()
    n_base = max(lay.n_heads for lay in prob.bases)
    problem = _problem(prob, n_base)
    note = ""
    estimate = build_estimate(problem, cache=prob.opts.cache)
    if estimate > budget.remaining():
        note = f"the NLP was not built (estimated {estimate:.3g} s, more than the time left)"
        return _noted(construction, note, {"nlp_seconds": time.perf_counter() - clock})
    try:
        found, stats = _solve(prob, construction, problem, n_base, budget)
    except (RuntimeError, SolverError) as exc:
        found, stats = None, {"nlp_note": f"the NLP failed ({exc})"}
    stats["nlp_seconds"] = time.perf_counter() - clock
    stats["construction_energy"] = construction.cost
    if found is not None and found.success and found.cost < construction.cost:
        stats["nlp_energy"] = found.cost
        kept = ("plan", "plan_energies", "sublayer_shots", "sublayer_errors")
        merged = {
            **found.stats,
            **{key: construction.stats[key] for key in kept},
            **stats,
            "method": "flow around the base, then collocation NLP",
            "seconds_by_part": {
                **construction.stats["seconds_by_part"],
                "nlp": stats["nlp_seconds"],
            },
        }
        return replace(
            found,
            message=f"{found.message} (collocation NLP from the construction, whose added "
            f"energy was {construction.cost:.6g})",
            stats=MappingProxyType(merged),
        )
    if found is not None:
        stats["nlp_energy"] = found.cost if found.success else math.nan
        note = (
            f"the collocation NLP gave added energy {found.cost:.6g} ({found.status.value}); "
            "the construction kept"
        )
    return _noted(construction, note or str(stats.get("nlp_note", "")), stats)


def _pack(added: Layer, mode: str) -> FloatArray:
    """The NLP's parameters of one sublayer's addition: in mode ``"full"`` with its one added
    head, ``(0, I)`` where the construction added none (``B`` is held, ``V`` starts at 0)."""
    if mode == "ffn" or added.n_heads:
        return pack(added, mode)
    d = added.dim
    return pack(Layer(A=added.A, b=added.b, V=np.zeros((d, d)), B=np.eye(d)), mode)


def _unpack(p: FloatArray, base: Layer, mode: str) -> Layer:
    """``base`` plus the addition of the NLP's parameters ``p`` (its heads kept first)."""
    d = base.dim
    parts = unpack(p, mode, d)
    heads = ((parts["V"], parts["B"]),) if mode == "full" else ()
    return added_layer(base, parts["A"], parts["b"], heads)


def _noted(result: SteeringResult, note: str, stats: dict[str, Any]) -> SteeringResult:
    merged = {**result.stats, **stats}
    message = f"{result.message} [{note}]" if note else result.message
    return replace(result, message=message, stats=MappingProxyType(merged))


def _solve(
    prob: BaseProblem,
    construction: SteeringResult,
    problem: Problem,
    n_base: int,
    budget: Budget,
) -> tuple[SteeringResult | None, dict[str, Any]]:
    """IPOPT from the construction, plus discretization corrections (re-simulated misses)."""
    nlp, cached = transcription(problem, cache=prob.opts.cache)
    n = prob.n
    start = construction.controls
    params0 = np.array(
        [
            _pack(addition(lay, b), prob.mode)
            for lay, b in zip(start.layers, prob.bases, strict=True)
        ]
    )
    colloc = states_of(start, prob.initial, nlp.collocation_times(), budget.nested_limit())
    ends = np.arange(1, n + 1, dtype=float) * prob.h
    states = states_of(start, prob.initial, ends, budget.nested_limit())
    data = np.array([_padded(b, n_base) for b in prob.bases])
    x0 = np.concatenate([prob.initial.mean, vech(prob.initial.cov)])
    x1 = np.concatenate([prob.target.mean, vech(prob.target.cov)])
    shift, guess = x1.copy(), (params0, colloc.reshape(n, -1), states)
    stats: dict[str, Any] = {"nlp_build_seconds": 0.0 if cached else nlp.build_seconds}
    result: SteeringResult | None = None
    iterations = 0
    corrections = prob.opts.max_corrections
    if prob.mode == "full":
        corrections = max(corrections, HEAD_CORRECTIONS)
    for correction in range(corrections + 1):
        if budget.exhausted:
            break
        sol = nlp.solve(x0, shift, *guess, max_wall_time=budget.remaining(), base=data)
        iterations += sol.iterations
        layers = [_unpack(p, b, prob.mode) for p, b in zip(sol.params, prob.bases, strict=True)]
        status = Status.SUCCESS if sol.success else Status.NOT_FOUND
        why = "" if sol.success else f"IPOPT: {sol.status}"
        run_stats: dict[str, Any] = {
            "method": "collocation NLP around the base",
            "ipopt_status": sol.status,
            "converged": sol.success,
            "iterations": iterations,
            "corrections": correction,
            "time_limit": budget.time_limit,
        }
        result = verdict(prob, layers, (status, why), budget, BaseLog(), run_stats)
        if not sol.success or result.trajectory is None:
            break
        final = result.trajectory.final
        miss = np.concatenate([final.mean, vech(final.cov)]) - x1
        if result.stats["relative_terminal_error"] <= 1e-3 * prob.terminal_tol:
            break
        shift = shift - miss  # aim the collocation at target − miss
        guess = (sol.params, sol.colloc, sol.states)
    stats["nlp_ipopt_status"] = None if result is None else result.stats.get("ipopt_status")
    return result, stats
