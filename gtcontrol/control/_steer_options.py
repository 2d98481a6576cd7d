"""Validation of a steering problem: the keyword options of :func:`gtcontrol.steer` (private).

:class:`_SteerOptions` is the frozen holder of the defaults and the validator; the public
interface is the keyword-only arguments of ``steer``, documented there. :func:`make_plan` checks
the end points and the options together and describes the NLP (:class:`Plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._validation import (
    _short,
    as_choice,
    as_nonnegative_float,
    as_positive_float,
    as_positive_int,
    as_seed,
)
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.params import Schedule
from ._ocp import PARAMS
from ._transcription import Problem
from .reachability import check_mode, check_pair, check_reachable

__all__: list[str] = []

OBJECTIVES = ("kinetic", "parameter")
TERMINALS = ("exact", "bw", "kl")
REDUNDANCY = ("fixed", "joint")
PARALLEL = ("serial", "thread", "openmp")
METHODS = ("auto", "flow", "collocation")
#: ``method="auto"`` uses the flow construction from these dimensions on (below them the
#: collocation NLP is fast and, for ``"ffn"``, lower in energy: it also optimizes the skew part of
#: each layer, which the exact node-to-node layers keep at zero).
FLOW_MIN_DIM = {"full": 5, "attention": 5, "ffn": 9}
#: Parameter names a bound may refer to.
BOUNDED = ("A", "b", "V", "B")


def _frozen_bounds(name: str, value: Any) -> Mapping[str, float]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise InvalidParametersError(f"{name}: expected a mapping of parameter name to bound")
    out: dict[str, float] = {}
    for key, bound in value.items():
        if key not in BOUNDED:
            raise InvalidParametersError(
                f"{name}: unknown parameter {key!r}; expected 'A', 'b', 'V' or 'B'"
            )
        out[key] = as_positive_float(f"{name}[{key!r}]", bound, allow_inf=True)
    return MappingProxyType(out)


#: Caps of the integer options (finite loops; larger values are refused as absurd).
MAX_ITER, MAX_INTERVALS, MAX_CORRECTIONS, MAX_VERIFY_TOKENS = 10**6, 64, 100, 10**6


def _nonnegative_int(name: str, value: Any, maximum: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not 0 <= value <= maximum
    ):
        raise InvalidParametersError(
            f"{name}: expected an integer from 0 to {maximum}, got {_short(value)}"
        )
    return int(value)


@dataclass(frozen=True, kw_only=True)
class _SteerOptions:
    """Validated keyword options of :func:`gtcontrol.steer` (see its ``Parameters``).

    Attributes
    ----------
    objective, terminal, terminal_weight, redundancy, regularization, entry_bounds, norm_bounds
        See :func:`gtcontrol.steer`.
    cov_bound, intervals, max_corrections, terminal_tol, max_iter, ipopt_options
        See :func:`gtcontrol.steer`.
    parallelization, initial_guess, verify_tokens, seed, cache, method
        See :func:`gtcontrol.steer`.
    """

    objective: str = "kinetic"
    terminal: str = "exact"
    terminal_weight: float = 1e4
    redundancy: str | None = None
    regularization: float | None = None
    entry_bounds: Mapping[str, float] = field(default_factory=dict)
    norm_bounds: Mapping[str, float] = field(default_factory=dict)
    cov_bound: float | None = None
    intervals: int = 1
    max_corrections: int = 3
    terminal_tol: float = 1e-6
    max_iter: int = 500
    ipopt_options: Mapping[str, Any] = field(default_factory=dict)
    parallelization: str = "serial"
    initial_guess: Schedule | None = None
    verify_tokens: int = 0
    seed: int = 0
    cache: bool = True
    method: str = "auto"

    def __post_init__(self) -> None:
        as_choice("method", self.method, METHODS)
        as_choice("objective", self.objective, OBJECTIVES)
        as_choice("terminal", self.terminal, TERMINALS)
        as_choice("parallelization", self.parallelization, PARALLEL)
        if self.redundancy is not None:
            as_choice("redundancy", self.redundancy, REDUNDANCY)
        as_positive_float("terminal_weight", self.terminal_weight)
        as_positive_float("terminal_tol", self.terminal_tol)
        if self.regularization is not None:
            as_nonnegative_float("regularization", self.regularization)
        if self.cov_bound is not None:
            as_positive_float("cov_bound", self.cov_bound)
        as_positive_int("intervals", self.intervals, maximum=MAX_INTERVALS)
        as_positive_int("max_iter", self.max_iter, maximum=MAX_ITER)
        _nonnegative_int("max_corrections", self.max_corrections, MAX_CORRECTIONS)
        _nonnegative_int("verify_tokens", self.verify_tokens, MAX_VERIFY_TOKENS)
        as_seed("seed", self.seed)
        if not isinstance(self.cache, (bool, np.bool_)):
            raise InvalidParametersError(f"cache: expected a bool, got {_short(self.cache)}")
        if self.initial_guess is not None and not isinstance(self.initial_guess, Schedule):
            raise InvalidParametersError(
                f"initial_guess: expected a Schedule, got {type(self.initial_guess).__name__}"
            )
        ipopt = {} if self.ipopt_options is None else self.ipopt_options
        if not isinstance(ipopt, Mapping):
            raise InvalidParametersError("ipopt_options: expected a mapping of IPOPT options")
        object.__setattr__(self, "entry_bounds", _frozen_bounds("entry_bounds", self.entry_bounds))
        object.__setattr__(self, "norm_bounds", _frozen_bounds("norm_bounds", self.norm_bounds))
        object.__setattr__(self, "ipopt_options", MappingProxyType(dict(ipopt)))

    @property
    def redundancy_for(self) -> str:
        """The redundancy actually used: ``"fixed"`` for kinetic, ``"joint"`` for parameter."""
        if self.redundancy is not None:
            return self.redundancy
        return "fixed" if self.objective == "kinetic" else "joint"


def _flow_obstacle(initial: Gaussian, mode: str, redundancy: str, opts: _SteerOptions) -> str:
    """Why the flow construction does not apply (empty when it does)."""
    if opts.objective != "kinetic":
        return "it minimizes the kinetic energy (objective='kinetic')"
    if opts.terminal != "exact":
        return "it reaches the target exactly (terminal='exact')"
    if opts.entry_bounds or opts.norm_bounds or opts.cov_bound is not None:
        return "it takes no bounds"
    if opts.initial_guess is not None:
        return "it takes no initial_guess"
    if mode == "full" and redundancy != "fixed":
        return "in mode 'full' it fixes the flat directions (redundancy='fixed')"
    if initial.rank < initial.dim:
        return "it needs a non-singular initial covariance"
    return ""


def _method(initial: Gaussian, mode: str, redundancy: str, opts: _SteerOptions) -> str:
    obstacle = _flow_obstacle(initial, mode, redundancy, opts)
    if opts.method == "flow" and obstacle:
        raise InvalidParametersError(f"method: 'flow' does not apply here: {obstacle}")
    if opts.method == "auto":
        return "flow" if not obstacle and initial.dim >= FLOW_MIN_DIM[mode] else "collocation"
    return opts.method


# ============================================================================ the plan
@dataclass(frozen=True, eq=False)
class Plan:
    """A validated steering problem: end points, horizon, mode, options and the NLP data."""

    initial: Gaussian
    target: Gaussian
    T: float
    n: int
    mode: str
    opts: _SteerOptions
    redundancy: str
    reg_weight: float
    problem: Problem
    method: str = "collocation"

    @property
    def best_of(self) -> bool:
        """Solve every fixed gauge of the flat directions and keep the lower energy."""
        return (
            self.mode == "full"
            and self.redundancy == "fixed"
            and self.opts.initial_guess is None
            and self.opts.terminal == "exact"
        )


def _check_bounds(mode: str, fixed: tuple[str, ...], opts: _SteerOptions) -> None:
    optimized = [p for p in PARAMS[mode] if p not in fixed]
    for name, bounds in (("entry_bounds", opts.entry_bounds), ("norm_bounds", opts.norm_bounds)):
        for key in bounds:
            if key not in optimized:
                raise InvalidParametersError(
                    f"{name}: parameter {key!r} is not optimized in mode {mode!r}"
                    + (" with redundancy='fixed' (use redundancy='joint')" if key in fixed else "")
                )
    if opts.objective == "parameter" and mode != "ffn" and opts.cov_bound is None:
        raise InvalidParametersError(
            "cov_bound: objective='parameter' with attention needs a bound on |Σ(t)|: a large Σ "
            "makes V Σ B large with small V and B (and attention can blow Σ up in finite time), "
            "so the parameter energy has infimum 0 without a minimizer"
        )


def make_plan(
    initial: Gaussian, target: Gaussian, T: Any, layers: Any, mode: Any, opts: _SteerOptions
) -> Plan:
    """Validate the problem against its options and build the NLP description."""
    check_pair(initial, target)
    mode = check_mode(mode)
    check_reachable(initial, target, mode)
    t_hor = as_positive_float("T", T)
    n = as_positive_int("layers", layers)
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
        d=d,
        T=t_hor,
        L=n,
        intervals=opts.intervals,
        fixed=fixed,
        cov1=target.cov,
        rank1=target.rank,
        objective=opts.objective,
        terminal=opts.terminal,
        terminal_weight=float(opts.terminal_weight),
        regularization=reg_weight,
        entry_bounds=opts.entry_bounds,
        norm_bounds=opts.norm_bounds,
        cov_bound=opts.cov_bound,
        logdet0=float(np.linalg.slogdet(initial.cov)[1]) if initial.rank == d else 0.0,
        parallelization=opts.parallelization,
        ipopt={"max_iter": opts.max_iter, **opts.ipopt_options},
    )
    method = _method(initial, mode, redundancy, opts)
    return Plan(initial, target, t_hor, n, mode, opts, redundancy, reg_weight, problem, method)
