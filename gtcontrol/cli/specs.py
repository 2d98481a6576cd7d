"""What each task of a design file accepts: its needed sections and its options.

The per-task option specifications (:class:`Option`, :class:`TaskSpec`, :data:`SPECS`) and their
validators. This module imports no task runner (and nothing else of :mod:`gtcontrol.cli`), so
the schema (:mod:`gtcontrol.cli.schema`) validates a design against it and the runners
(:mod:`gtcontrol.cli.tasks`) build on both, without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SPECS", "Option", "TaskSpec"]


@dataclass(frozen=True)
class Option:
    """One task option: its type, default and an optional check returning an error text.

    Attributes
    ----------
    kind
        The accepted TOML type(s); an integer is accepted where ``float`` is.
    default
        The value when the design omits the option.
    check
        ``check(value)`` returns ``None`` when the value is fine, else the problem in words
        (e.g. ``"must be positive"``).
    help
        One line for the documentation and ``--help``.
    """

    kind: type | tuple[type, ...]
    default: Any
    check: Callable[[Any], str | None] | None = None
    help: str = ""


@dataclass(frozen=True)
class TaskSpec:
    """What a task needs from a design: its sections, its options and a summary line.

    Attributes
    ----------
    needs
        Design sections that must be present (``"initial"``, ``"target"``, ``"model"``, ``"T"``).
    options
        The task's options by name (the keys of its ``[<task>]`` table).
    summary
        One line shown by ``gtcontrol --help``.
    """

    needs: tuple[str, ...]
    options: Mapping[str, Option] = field(default_factory=dict)
    summary: str = ""


def _positive(x: Any) -> str | None:
    return None if x > 0 else "must be positive"


def _nonneg(x: Any) -> str | None:
    return None if x >= 0 else "must be >= 0"


def _int_list(x: Any) -> str | None:
    if not x or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in x):
        return "must be a non-empty list of positive integers"
    if len(x) > 20 or max(x) > _MAX_TOKENS:
        return f"must hold at most 20 counts, each at most {_MAX_TOKENS}"
    return None


#: Most tokens a task moves (softmax attention costs N² per step; more is refused as absurd).
_MAX_TOKENS = 20000


def _at_most(limit: int, *, zero: bool = False) -> Callable[[Any], str | None]:
    """A positive (``zero``: non-negative) integer up to ``limit`` (larger: refused as absurd)."""

    def check(x: Any) -> str | None:
        if x < 0 or (x == 0 and not zero):
            return "must be >= 0" if zero else "must be positive"
        return None if x <= limit else f"must be at most {limit}"

    return check


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    """One of ``choices`` (the names the called function accepts)."""

    def check(x: Any) -> str | None:
        return None if x in choices else f"must be one of {', '.join(map(repr, choices))}"

    return check


_INTEGRATOR_OPTIONS: dict[str, Option] = {
    "rtol": Option(float, 1e-11, _positive, "relative tolerance of the moment integrator"),
    "atol": Option(float, 1e-14, _positive, "absolute tolerance (scaled by the initial state)"),
    "n_points": Option(int, 201, _at_most(10**6), "number of recorded depths"),
    "method": Option(
        str,
        "DOP853",
        _one_of("DOP853", "RK45", "Radau", "LSODA", "BDF"),
        "scipy solve_ivp method",
    ),
}

#: Every task a design file can name, with what it needs and accepts.
SPECS: dict[str, TaskSpec] = {
    "simulate": TaskSpec(
        needs=("initial", "model", "T"),
        options={
            **_INTEGRATOR_OPTIONS,
            "discrete": Option(bool, False, None, "also run the exact discrete-layer recursion"),
            "steps_per_layer": Option(
                int, 1, _at_most(10**6), "residual steps per layer (discrete)"
            ),
            "tokens": Option(
                int,
                2000,
                _at_most(_MAX_TOKENS, zero=True),
                "tokens drawn for the cloud figure (0: none)",
            ),
        },
        summary="integrate the moment ODE",
    ),
    "compare-tokens": TaskSpec(
        needs=("initial", "model", "T"),
        options={
            "n_tokens": Option(list, [256, 1024, 4096], _int_list, "token counts N"),
            "repeats": Option(int, 3, _at_most(100), "independent samples per N"),
            "method": Option(
                str,
                "adaptive",
                _one_of("rk4", "discrete", "adaptive"),
                "token integrator: adaptive (error-controlled), rk4, discrete",
            ),
            "steps_per_layer": Option(
                int, 20, _at_most(10**6), "token steps per layer for rk4/discrete (not adaptive)"
            ),
        },
        summary="token-level Transformer vs moment ODE, error against N",
    ),
    "analyze": TaskSpec(
        needs=("initial", "model"),
        options={
            "horizon": Option(float, 0.0, _nonneg, "blow-up search depth (0: automatic)"),
            "plot_T": Option(float, 0.0, _nonneg, "depth shown in the figures (0: automatic)"),
            "n_points": Option(int, 401, _at_most(10**6), "recorded depths for the figures"),
        },
        summary="regime of a fixed layer: equilibria, stability, exact blow-up",
    ),
    "steer": TaskSpec(
        needs=("initial", "target", "T"),
        options={
            "mode": Option(
                str,
                "full",
                _one_of("full", "ffn", "attention"),
                "'full', 'ffn' (V = 0) or 'attention' (A = b = 0)",
            ),
            "objective": Option(
                str, "kinetic", _one_of("kinetic", "parameter"), "'kinetic' or 'parameter'"
            ),
            "terminal": Option(
                str, "exact", _one_of("exact", "bw", "kl"), "'exact', 'bw' or 'kl' (penalty)"
            ),
            "cov_bound": Option(float, 0.0, _nonneg, "bound on ‖Σ(t)‖ (0: none)"),
            "max_iter": Option(int, 500, _at_most(10**5), "IPOPT iterations"),
            "tokens": Option(
                int,
                2000,
                _at_most(_MAX_TOKENS, zero=True),
                "tokens run through the result (0: none)",
            ),
        },
        summary="optimal L-layer steering between Gaussians (CasADi/IPOPT), verified",
    ),
    "design": TaskSpec(
        needs=("target",),
        options={
            "rate": Option(float, 1.0, _positive, "mean convergence rate |v|"),
            "cov_rate": Option(float, 0.0, _nonneg, "covariance rate (0: twice the rate)"),
            "minimum_norm": Option(bool, False, None, "minimum-norm parameters (CasADi)"),
            "V_structure": Option(
                str, "scalar", _one_of("scalar", "full"), "'scalar' (V = vI) or 'full'"
            ),
            "max_condition": Option(float, 100.0, _positive, "conditioning bound (CasADi)"),
            "robustness": Option(bool, True, None, "report the distance to instability"),
            "n_starts": Option(int, 5, _at_most(100), "random starts in the convergence figure"),
            "T": Option(float, 0.0, _nonneg, "depth of the convergence figure (0: automatic)"),
        },
        summary="design a stable layer carrying every Gaussian to a target mean/covariance",
    ),
    "filter": TaskSpec(
        needs=("initial", "T"),
        options={
            "F": Option(list, None, None, "filter drift (instead of [layer])"),
            "H": Option(list, None, None, "observation matrix"),
            "R": Option(list, None, None, "observation noise covariance R_n"),
            "Q": Option(list, None, None, "process noise covariance (optional)"),
            "n_points": Option(int, 101, _at_most(10**6), "recorded depths"),
        },
        summary="Kalman–Bucy filter vs the corresponding Transformer",
    ),
    "experiment": TaskSpec(
        needs=(),
        options={
            "n_tokens": Option(
                int, 1024, _at_most(_MAX_TOKENS), "Gaussian tokens fed to the encoders"
            ),
            "quick": Option(bool, False, None, "reduced smoke run (MiniLM only, < 60 s)"),
            "flows": Option(
                bool, False, None, "MiniLM attention sublayers as flows (docs/minilm_flows.md)"
            ),
        },
        summary="the paper's evidence on real pretrained models (extra 'experiments')",
    ),
}
