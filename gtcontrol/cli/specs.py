"""What each task of a design file accepts: its needed sections and its options.

The per-task option specifications (:class:`Option`, :class:`TaskSpec`, :data:`SPECS`) and their
validators. This module imports no task runner (and nothing else of :mod:`gtcontrol.cli`), so
the schema (:mod:`gtcontrol.cli.schema`) validates a design against it and the runners
(:mod:`gtcontrol.cli.tasks`) build on both, without an import cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis.compare import DEFAULT_MAX_WORK

__all__ = ["BASE_OPTIONS", "SPECS", "SWEEP_AXES", "Option", "TaskSpec", "range_values"]


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
    reads
        The sections it also reads when present (``"n_layers"`` too); a design that gives one
        a task neither needs nor reads is refused, naming it (it would be silently ignored).
    options
        The task's options by name (the keys of its ``[<task>]`` table).
    summary
        One line shown by ``gtcontrol --help``.
    check
        ``check(options, document)`` checks the options together (with the TOML document for
        the other sections); returns ``None`` when they are fine, else the problem in words,
        naming the key.
    closure
        The task compares tokens with the Gaussian closure, so it takes a feed-forward outside
        the exact moment model (``relu``, ``gelu``); every other task refuses one.
    """

    needs: tuple[str, ...]
    options: Mapping[str, Option] = field(default_factory=dict)
    summary: str = ""
    check: Callable[[Mapping[str, Any], Mapping[str, Any]], str | None] | None = None
    reads: tuple[str, ...] = ()
    closure: bool = False

    def __post_init__(self) -> None:
        # every section a task needs is one it reads
        object.__setattr__(self, "reads", tuple(dict.fromkeys((*self.needs, *self.reads))))


def _positive(x: Any) -> str | None:
    return None if x > 0 else "must be positive"


def _unit_interval_or_zero(x: Any) -> str | None:
    return None if 0 <= x < 1 else "must be in [0, 1)"


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


#: Fewest Gaussian tokens of the ``model`` task: the Gaussianity statistics take
#: ``max(20, d + 2)`` (the width ``d`` is checked when the model has loaded).
_MIN_MODEL_TOKENS = 20


def _model_tokens(x: Any) -> str | None:
    """0 (automatic) or from 20 to the cap (``max(20, d + 2)`` is checked with the model)."""
    if x == 0:
        return None
    if not _MIN_MODEL_TOKENS <= x <= _MAX_TOKENS:
        return (
            f"must be 0 (automatic) or from {_MIN_MODEL_TOKENS} to {_MAX_TOKENS} (the "
            "Gaussianity statistics take at least max(20, d + 2) tokens, d the model's width)"
        )
    return None


def _layer_list(x: Any) -> str | None:
    if not x or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in x):
        return "must be a non-empty list of layer indices (integers from 0)"
    return None


def _rate(x: Any) -> str | None:
    if isinstance(x, str):
        return None if x == "auto" else "must be a positive number or 'auto'"
    return None if x > 0 else "must be positive"


def _nonempty(x: Any) -> str | None:
    return None if x.strip() else "must not be empty"


def _between(lo: int, hi: int) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        return None if lo <= x <= hi else f"must be from {lo} to {hi}"

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

#: The grid axes of a ``sweep`` (docs/sweeps.md): what each value does to the base design.
SWEEP_AXES: dict[str, str] = {
    "V_scale": "multiplies every head's V (or v)",
    "V_shift": "adds s·I to every head's V (after V_scale)",
    "B_scale": "multiplies every head's B",
    "A_scale": "multiplies A",
    "A_shift": "adds s·I to A (after A_scale)",
    "b_scale": "multiplies b",
    "noise_scale": "multiplies the noise G",
    "cov_scale": "multiplies the initial covariance (>= 0)",
    "mean_scale": "multiplies the initial mean",
}
#: Most values of one sweep axis, and most points of a sweep grid (more is refused as absurd).
MAX_AXIS_VALUES = 1000
MAX_SWEEP_POINTS = 100_000
_RANGE = "a range {start, stop, num} (log = true: geometric)"


def _finite(x: Any) -> bool:
    """A TOML number within the floating-point range (not a bool, NaN or infinity)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x))  # an integer from 2**1024 - 2**970 on overflows
    except OverflowError:
        return False


def range_values(spec: Mapping[str, Any]) -> tuple[float, ...]:
    """The values of a sweep range ``{start, stop, num[, log]}`` (``-0.0`` written as ``0.0``).

    ``num`` evenly spaced values from ``start`` to ``stop``, both included (``log = true``:
    geometrically spaced). The schema (:func:`_axis`) refuses a range whose values leave the
    floating-point range or repeat.

    Parameters
    ----------
    spec
        The range table, with numbers ``start`` and ``stop`` and an integer ``num``.

    Returns
    -------
    tuple of float
        The values.

    Examples
    --------
    >>> range_values({"start": 0.0, "stop": 1.0, "num": 3})
    (0.0, 0.5, 1.0)
    >>> range_values({"start": 1, "stop": 100, "num": 3, "log": True})
    (1.0, 10.0, 100.0)
    """
    make = np.geomspace if spec.get("log", False) else np.linspace
    with np.errstate(all="ignore"):  # an overflowing span gives inf or NaN: refused by _axis
        vals = make(float(spec["start"]), float(spec["stop"]), int(spec["num"]))
    return tuple(float(v) + 0.0 for v in vals)


def _axis(x: Any) -> str | None:
    """A sweep axis: a list of distinct finite numbers, or a range table."""
    if isinstance(x, dict):
        extra = sorted(set(x) - {"start", "stop", "num", "log"})
        if extra or not {"start", "stop", "num"} <= set(x):
            return f"must be {_RANGE}" + (f"; unknown key {extra[0]!r}" if extra else "")
        num, log = x["num"], x.get("log", False)
        if not (_finite(x["start"]) and _finite(x["stop"])):
            return "must have finite numbers 'start' and 'stop'"
        if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MAX_AXIS_VALUES:
            return f"must have an integer 'num' from 1 to {MAX_AXIS_VALUES}"
        if not isinstance(log, bool):
            return "must have 'log' true or false"
        if log and (x["start"] <= 0 or x["stop"] <= 0):
            return "must have positive 'start' and 'stop' when log = true"
        if num > 1 and x["start"] == x["stop"]:
            return "must have start != stop when num > 1 (a value would repeat)"
        values = range_values(x)
        if not all(math.isfinite(v) for v in values):
            return "must have 'start' and 'stop' closer together (the values overflow)"
        if len(set(values)) != num:
            return (
                f"must have 'start' and 'stop' further apart for num = {num} "
                "(the values round to the same number and would repeat)"
            )
        return None
    if not x or len(x) > MAX_AXIS_VALUES or not all(_finite(v) for v in x):
        return f"must be a non-empty list of at most {MAX_AXIS_VALUES} finite numbers, or {_RANGE}"
    if len({float(v) for v in x}) != len(x):
        return "must not repeat a value"
    return None


def _axis_size(x: Any) -> int:
    return int(x["num"]) if isinstance(x, dict) else len(x)


def _axis_min(x: Any) -> float:
    return float(min(x["start"], x["stop"])) if isinstance(x, dict) else float(min(x))


def _stabilize_check(options: Mapping[str, Any], doc: Mapping[str, Any]) -> str | None:
    """``model`` names a model, or the design has a ``[layer]`` and a ``[target]``."""
    model = options.get("model")
    if model:
        return None
    missing = [name for name in ("layer", "target") if name not in doc]
    if missing:
        return (
            "stabilize: give model = '<name or path>' in [stabilize], or the sections "
            + " and ".join(f"[{m}]" for m in missing)
        )
    return None


#: The keys of a ``[base]`` table that names a model (task ``steer``); a ``[base]`` without
#: ``model`` is an explicit layer (the keys of ``[layer]``).
BASE_OPTIONS: dict[str, Option] = {
    "model": Option(
        str,
        "",
        _nonempty,
        "a model of `gtcontrol models`, a Hugging Face folder or an .onnx file (extra "
        "experiments): its attention sublayer `layer` is the base",
    ),
    "layer": Option(int, 0, _at_most(10_000, zero=True), "the layer index"),
    "start_from": Option(
        str,
        "text",
        _one_of("text", "identity"),
        "the initial: 'text' (the moments of the packaged text's tokens entering the layer) or "
        "'identity' (N(e, I ⊕ 0))",
    ),
    "target": Option(
        str,
        "rotated",
        _one_of("rotated", "given"),
        "'rotated' (the initial rotated, stretched and shifted on its active subspace, seeded "
        "by `seed`) or 'given' (the design's [target], of the layer's width d + 1)",
    ),
    "angle": Option(
        float, 0.4, _nonneg, "rotated: root-mean-square angle (radians) of the rotation"
    ),
    "shift": Option(
        float,
        0.5,
        _nonneg,
        "rotated: mean shift per active coordinate, in units of sqrt(tr Σ0 / rank)",
    ),
    "stretch": Option(
        float,
        0.0,
        _nonneg,
        "rotated: deviation of the log-factors multiplying the covariance's eigenvalues",
    ),
}
#: Options of the blank steering problem that a base does not take (their defaults are kept).
_BASE_FIXED = ("objective", "terminal", "cov_bound")


def _steer_check(options: Mapping[str, Any], doc: Mapping[str, Any]) -> str | None:
    """``[initial]`` and ``[target]`` unless ``[base]`` names a model; what a base takes."""
    base = doc.get("base")
    model = isinstance(base, dict) and "model" in base
    missing = [] if model else [s for s in ("initial", "target") if s not in doc]
    if missing:
        return "task 'steer' needs " + " and ".join(f"[{m}]" for m in missing)
    if base is None:
        return None
    table = doc.get("steer")
    given: Mapping[str, Any] = table if isinstance(table, dict) else {}
    if given.get("mode", "ffn") == "attention":
        return (
            "'steer.mode': around a [base] the control is the added affine part (mode 'ffn') "
            "or that and an added head per sublayer (mode 'full'); added heads alone are not "
            "built, got 'attention'"
        )
    for name in _BASE_FIXED:
        if name in given and given[name] != SPECS["steer"].options[name].default:
            return f"'steer.{name}': steering around a [base] takes the default; remove it"
    return None


def _compare_check(options: Mapping[str, Any], doc: Mapping[str, Any]) -> str | None:
    """The token comparison takes no noisy layer: its reference run has no Brownian forcing."""
    schedule = doc.get("schedule")
    tables = [doc.get("layer"), *(schedule if isinstance(schedule, list) else [])]
    for i, table in enumerate(tables):
        if isinstance(table, dict) and "noise" in table:
            where = "layer" if i == 0 else f"schedule[{i - 1}]"
            return (
                f"'{where}.noise': task 'compare-tokens' measures the tokens' integration error "
                "against a deterministic run of the same tokens, which a noisy layer does not "
                "have; task 'simulate' integrates its moments"
            )
    return None


def _sweep_check(options: Mapping[str, Any], doc: Mapping[str, Any]) -> str | None:
    """The sweep's options together: at least one axis, a bounded grid, axes the model has."""
    axes = [a for a in SWEEP_AXES if options.get(a) is not None]
    if not axes:
        return f"[sweep] needs at least one grid axis, one of {', '.join(SWEEP_AXES)}"
    points = math.prod(_axis_size(options[a]) for a in axes)
    if points > MAX_SWEEP_POINTS:
        return f"[sweep] grid has {points} points, more than the limit of {MAX_SWEEP_POINTS}"
    if "schedule" in doc:
        return "task 'sweep' varies a single [layer], not a [[schedule]]"
    if options.get("cov_scale") is not None and _axis_min(options["cov_scale"]) < 0:
        return "'sweep.cov_scale' must be >= 0 (it multiplies the covariance)"
    horizon = doc.get("horizon", {})
    no_depth = isinstance(horizon, dict) and "T" not in horizon  # a malformed one: the schema's
    if options.get("run") == "simulate" and no_depth:
        return "task 'sweep' with run = 'simulate' needs [horizon] T"
    layer = doc.get("layer")
    if not isinstance(layer, dict):
        return None  # the missing [layer] is reported by the schema
    has_head = any(k in layer for k in ("B", "V", "heads"))
    needs = {"V_scale": has_head, "V_shift": has_head, "B_scale": has_head}
    needs |= {"A_scale": "A" in layer, "b_scale": "b" in layer, "noise_scale": "noise" in layer}
    what = {"A_scale": "A", "b_scale": "b", "noise_scale": "noise"}
    for axis in axes:
        if not needs.get(axis, True):
            part = what.get(axis, "attention head (B, V, v or heads)")
            return f"'sweep.{axis}' varies the [layer]'s {part}, which the layer does not have"
    return None


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
                "DOP853",
                _one_of("DOP853", "RK45", "RK23", "rk4", "discrete"),
                "token integrator: DOP853, RK45 or RK23 (error-controlled), rk4, discrete",
            ),
            "steps_per_layer": Option(
                int,
                20,
                _at_most(10**6),
                "token steps per layer for rk4/discrete (not DOP853/RK45)",
            ),
            "max_work": Option(
                int,
                DEFAULT_MAX_WORK,
                _at_most(10**15),
                "token pairs (N² per field evaluation) the comparison may spend",
            ),
        },
        summary="token-level Transformer vs moment ODE, error against N",
        check=_compare_check,
        closure=True,
    ),
    "analyze": TaskSpec(
        needs=("initial", "model"),
        options={
            "T": Option(float, 0.0, _nonneg, "blow-up search depth (0: automatic)"),
            "plot_T": Option(float, 0.0, _nonneg, "depth shown in the figures (0: automatic)"),
            "n_points": Option(int, 401, _at_most(10**6), "recorded depths for the figures"),
        },
        summary="regime of a fixed layer: equilibria, stability, exact blow-up",
    ),
    "steer": TaskSpec(
        needs=("T",),
        reads=("initial", "target", "model", "n_layers"),
        options={
            "mode": Option(
                str,
                "full",
                _one_of("full", "ffn", "attention"),
                "'full', 'ffn' (V = 0) or 'attention' (A = b = 0); with a [base]: 'ffn' (the "
                "default there: an added A, b) or 'full' (and an added head)",
            ),
            "objective": Option(
                str, "kinetic", _one_of("kinetic", "parameter"), "'kinetic' or 'parameter'"
            ),
            "terminal": Option(
                str, "exact", _one_of("exact", "bw", "kl"), "'exact', 'bw' or 'kl' (penalty)"
            ),
            "cov_bound": Option(float, 0.0, _nonneg, "bound on ‖Σ(t)‖ (0: none)"),
            "method": Option(
                str,
                "auto",
                _one_of("auto", "flow", "collocation"),
                "'auto', 'flow' (layer-by-layer construction, large d) or 'collocation' (IPOPT)",
            ),
            "max_iter": Option(int, 500, _at_most(10**5), "IPOPT iterations"),
            "tokens": Option(
                int,
                2000,
                _at_most(_MAX_TOKENS, zero=True),
                "tokens run through the result (0: none)",
            ),
            "blank_energy": Option(
                bool,
                True,
                None,
                "with a [base]: also steer the same pair with no base, for the energy the base "
                "costs",
            ),
        },
        summary="optimal L-layer steering between Gaussians (CasADi/IPOPT), verified; or the "
        "least added control through a fixed network ([base])",
        check=_steer_check,
    ),
    "design": TaskSpec(
        needs=("target",),
        reads=("initial", "model", "T"),
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
            "min_ess": Option(
                float,
                0.5,
                _unit_interval_or_zero,
                "smallest predicted ESS/N of the softmax along the path (0: no token bound)",
            ),
            "token_check": Option(
                int,
                0,
                _at_most(_MAX_TOKENS, zero=True),
                "tokens run through the designed layer to certify it (0: none)",
            ),
        },
        summary="design a stable layer carrying every Gaussian to a target mean/covariance",
    ),
    "stabilize": TaskSpec(
        needs=(),
        reads=("initial", "model", "target"),
        options={
            "model": Option(
                str,
                "",
                None,
                "a model of `gtcontrol models`, a Hugging Face folder or an .onnx file (extra "
                "experiments); empty: the design's [layer] and [target]",
            ),
            "layer": Option(int, 0, _at_most(10_000, zero=True), "with model: the layer index"),
            "target_from": Option(
                str,
                "text",
                _one_of("text", "identity"),
                "with model: 'text' (the tokens entering the layer on real text, Ledoit–Wolf; "
                "random token ids without a tokenizer) or 'identity' (no data)",
            ),
            "add": Option(str, "head", _one_of("auto", "head", "gains"), "the family of the extra"),
            "rate": Option(float, 1.0, _positive, "required exponential rate"),
            "token_check": Option(
                int,
                0,
                _at_most(_MAX_TOKENS, zero=True),
                "tokens run through the stabilized and the given layer (0: none), to depth T "
                "or until the moments are within 1e-3 of the target",
            ),
            "T": Option(
                float, 0.0, _nonneg, "depth of the verification (0: from the rate and the starts)"
            ),
            "before": Option(
                bool, True, None, "simulate the given layer from the first start (figure)"
            ),
        },
        summary="keep a layer's heads and make a target a certified stable equilibrium",
        check=_stabilize_check,
    ),
    "filter": TaskSpec(
        needs=("initial", "T"),
        reads=("model",),
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
    "model": TaskSpec(
        needs=(),
        options={
            "model": Option(
                str,
                "minilm",
                _nonempty,
                "a name of `gtcontrol models`, a Hugging Face folder or an .onnx file",
            ),
            "layers": Option(list, None, _layer_list, "layer indices to map (default: all)"),
            "T": Option(float, 4.0, _positive, "depth of the regimes and of the blow-up search"),
            "rate": Option(
                (float, str),
                1.0,
                _rate,
                "stabilization rate, or 'auto': the largest rate of the rate curve whose "
                "function change is within change_budget",
            ),
            "change_budget": Option(
                float, 1.0, _positive, "rate = 'auto': the largest function change accepted"
            ),
            "token_check": Option(
                int,
                1024,
                _at_most(_MAX_TOKENS, zero=True),
                "tokens of each stabilization's token check (0: none)",
            ),
            "n_tokens": Option(
                int,
                0,
                _model_tokens,
                "Gaussian tokens of the network's Gaussianity check (0: max(512, d + 64); "
                "at least max(20, d + 2))",
            ),
            "n_null": Option(int, 8, _between(8, 10000), "replicates of each Gaussianity null"),
            "workers": Option(
                int,
                1,
                _at_most(64),
                "local worker processes mapping layers in parallel; ignored with --scheduler",
            ),
        },
        summary="the map of any Transformer: regime, equilibria and certified stabilization per "
        "layer, and the stabilized network on real inputs",
    ),
    "sweep": TaskSpec(
        needs=("initial", "model"),
        reads=("T",),
        options={
            "run": Option(
                str,
                "analyze",
                _one_of("analyze", "simulate"),
                "what each point runs: 'analyze' (regime) or 'simulate' (to [horizon] T)",
            ),
            "T": Option(float, 0.0, _nonneg, "analyze: blow-up search depth (0: automatic)"),
            "point_time_limit": Option(float, 60.0, _positive, "seconds one point may take"),
            "workers": Option(
                int,
                0,
                _at_most(1024, zero=True),
                "local worker processes (0: min(cores, points)); ignored with --scheduler",
            ),
            **{name: Option((list, dict), None, _axis, text) for name, text in SWEEP_AXES.items()},
        },
        summary="parameter sweep on dask.distributed: one Parquet row per point (extra 'sweep')",
        check=_sweep_check,
    ),
}
