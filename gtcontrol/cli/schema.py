"""Design files: a strict TOML schema for gtcontrol runs (docs/designs.md).

A design names a ``task`` and gives the inputs it needs::

    task = "simulate"
    [initial]            # a Gaussian: mean (list), cov (nested lists)
    [target]             # a Gaussian (steer, design)
    [layer]              # one time-invariant layer: A, B, V, b, v, heads, ffn
    [[schedule]]         # or an L-layer schedule, each entry with the [layer] keys
    [horizon]            # T, n_layers
    [base]               # steer: a fixed network (a [layer] table, or model = ...) steered through
    [<task>]             # the task's own options

The options each task accepts are :data:`gtcontrol.cli.specs.SPECS`. Every key is checked: an
unknown key, a ragged or non-numeric matrix, a wrong size or a missing file raises
:class:`~gtcontrol.errors.DesignFileError` whose one-line message names the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._status import MAX_TIME_LIMIT, Budget, within
from .._validation import as_float_array, as_positive_int
from ..errors import DesignFileError, GTControlError, InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.params import FeedForward, Layer, Schedule
from .specs import BASE_OPTIONS, SPECS, Option

__all__ = [
    "MAX_DESIGN_BYTES",
    "Design",
    "ModelBase",
    "Option",
    "UnreadDesign",
    "load_design",
    "parse_design",
    "read_design",
]

_T = TypeVar("_T")

_TOP_KEYS = {
    "task",
    "title",
    "seed",
    "time_limit",
    "initial",
    "target",
    "layer",
    "schedule",
    "horizon",
    "base",
}
#: Default wall-clock limit of a run in seconds (the top-level key ``time_limit``).
DEFAULT_TIME_LIMIT = 3600.0
_GAUSSIAN_KEYS = {"mean", "cov"}
_LAYER_KEYS = {"A", "B", "V", "b", "heads", "ffn", "noise"}
_HEAD_KEYS = {"V", "B"}
_FFN_KEYS = {"W_in", "W_out", "b_in", "activation"}
_HORIZON_KEYS = {"T", "n_layers"}
#: Largest integer accepted for counts such as ``horizon.n_layers`` (larger is absurd).
_MAX_INT = 10**6
#: Largest design file read (bytes); a larger file is refused before it is read.
MAX_DESIGN_BYTES = 10 * 2**20
#: Deepest nesting of arrays and tables accepted (matrices need 2; options 3).
_MAX_DEPTH = 32


@dataclass(frozen=True)
class ModelBase:
    """A ``[base]`` that names a model: its attention sublayer ``layer`` is steered through.

    Attributes
    ----------
    model
        A model of ``gtcontrol models``, a Hugging Face folder or an ``.onnx`` file.
    layer
        The layer index.
    start_from
        ``"text"`` (the moments of the packaged text entering the layer) or ``"identity"``.
    target
        ``"rotated"`` (generated from the initial) or ``"given"`` (the design's ``[target]``).
    angle, shift, stretch
        The rotated target's rotation angle, mean shift and log-stretch of the eigenvalues.
    """

    model: str
    layer: int
    start_from: str
    target: str
    angle: float
    shift: float
    stretch: float


@dataclass(frozen=True, eq=False)
class Design:
    """A parsed, validated design file.

    Attributes
    ----------
    task
        The task name.
    initial, target
        Gaussians, or ``None`` when the file has no such table.
    model
        A :class:`Layer` or :class:`Schedule`, or ``None``.
    base
        Task ``steer``'s ``[base]``: a :class:`Layer` (a table), a :class:`Schedule` (an array
        of tables), a :class:`ModelBase` (a table with ``model``), or ``None``.
    T, n_layers
        The ``[horizon]`` values (``None`` when absent).
    time_limit
        Wall-clock limit of the whole run in seconds, shared by its solver calls.
    options
        The task's options with defaults filled in.
    raw
        The TOML document as read (echoed in ``result.json``).
    started
        When :func:`load_design` began reading the file (``time.perf_counter()``; ``None`` for
        a design parsed from a string): the run's ``time_limit`` counts from there.
    """

    task: str
    initial: Gaussian | None
    target: Gaussian | None
    model: Layer | Schedule | None
    T: float | None
    n_layers: int | None
    options: Mapping[str, Any]
    seed: int
    title: str
    raw: Mapping[str, Any] = field(repr=False)
    source: str = "<string>"
    time_limit: float = DEFAULT_TIME_LIMIT
    started: float | None = field(default=None, repr=False)
    base: Layer | Schedule | ModelBase | None = None

    def refuse_unread(self, reads: tuple[str, ...]) -> None:
        """Raise :class:`DesignFileError` naming the first section the task would ignore."""
        given = {
            "initial": self.initial,
            "target": self.target,
            "model": self.model,
            "T": self.T,
            "n_layers": self.n_layers,
        }
        for name, value in given.items():
            if value is None or name in reads:
                continue
            where = {
                "model": "[layer] or [[schedule]]",
                "T": "'horizon.T'",
                "n_layers": "'horizon.n_layers'",
            }.get(name, f"[{name}]")
            hint = (
                f"its own depth is '{self.task}.T'"
                if name == "T" and "T" in self.options
                else "remove it"
            )
            raise DesignFileError(
                f"{self.source}: {where} is not read by task {self.task!r}, which would ignore "
                f"it; {hint}"
            )

    def require(self, *names: str) -> None:
        """Raise :class:`DesignFileError` naming the first missing section among ``names``."""
        for name in names:
            value = {"initial": self.initial, "target": self.target, "model": self.model}.get(
                name, getattr(self, name, None)
            )
            if value is None:
                where = {"model": "[layer] or [[schedule]]", "T": "[horizon] T"}.get(
                    name, f"[{name}]"
                )
                raise DesignFileError(f"{self.source}: task {self.task!r} needs {where}")


def load_design(path: str | Path) -> Design:
    """Read and validate a design file.

    Parameters
    ----------
    path
        The design file (TOML).

    Returns
    -------
    Design
        The validated design.

    Raises
    ------
    DesignFileError
        If the file is missing or unreadable, is not a regular file (a directory, FIFO or
        device), is larger than :data:`MAX_DESIGN_BYTES`, is not valid UTF-8 TOML, or breaks
        the schema.
    """
    started = time.perf_counter()  # reading and parsing count in the run's time_limit
    p = Path(path)
    return dataclasses.replace(parse_design(_read_text(p), source=str(p)), started=started)


#: Design files up to this size are parsed in the caller's thread (milliseconds); a larger one
#: (matrices at d = 256 are megabytes: 1.7 s of parsing) is parsed in a thread that the run
#: stops waiting for at its time limit.
_THREADED_PARSE_BYTES = 256 * 1024


@dataclass(frozen=True)
class UnreadDesign:
    """A design file that was not parsed within its own ``time_limit``.

    Parsing cannot be interrupted; the run stops waiting for it and writes a
    ``budget_exhausted`` result that says so (:func:`read_design`).

    Attributes
    ----------
    task, title
        From the file's top-level keys (read before its tables).
    time_limit
        The design's ``time_limit``.
    size
        The file's size in bytes.
    started
        When reading began (``time.perf_counter()``).
    """

    task: str
    title: str
    time_limit: float
    size: int
    started: float

    @property
    def message(self) -> str:
        """What the run's result says."""
        return (
            f"the design file ({self.size / 2**20:.1f} MiB of TOML) was not parsed within the "
            f"time limit of {self.time_limit:g} s: nothing was computed"
        )


def _top_level(text: str) -> dict[str, Any]:
    """The keys before the first table header (``{}`` if they do not parse alone)."""
    head = []
    for line in text.splitlines():
        if line.lstrip().startswith("["):
            break
        head.append(line)
    try:
        return tomllib.loads("\n".join(head))
    except tomllib.TOMLDecodeError:
        return {}


def read_design(path: str | Path) -> Design | UnreadDesign:
    """:func:`load_design` within the design's own ``time_limit``.

    A file larger than :data:`_THREADED_PARSE_BYTES` whose top-level keys give a ``task`` and a
    ``time_limit`` is parsed in a thread waited for until that limit plus a quarter of its
    tolerance ``max(1 s, 10 %)``; a parse that has not finished then is given up on and
    returned as an :class:`UnreadDesign`. Sweeps are always parsed to the end (their output
    folder holds the points of earlier runs).

    Parameters
    ----------
    path
        The design file (TOML).

    Returns
    -------
    Design or UnreadDesign
        The validated design, or what is known of one not parsed in time.

    Raises
    ------
    DesignFileError
        As :func:`load_design`, for errors found in time.
    """
    started = time.perf_counter()
    p = Path(path)
    text = _read_text(p)
    head = _top_level(text) if len(text) > _THREADED_PARSE_BYTES else {}
    limit, task = head.get("time_limit"), head.get("task")
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        limit = None
    timed = limit is not None and 0 < limit <= MAX_TIME_LIMIT and task in SPECS and task != "sweep"
    if not timed or limit is None:
        return dataclasses.replace(parse_design(text, source=str(p)), started=started)
    parsed = within(Budget(float(limit), start=started), lambda: parse_design(text, source=str(p)))
    if parsed is None:
        title = head.get("title")
        return UnreadDesign(
            task=str(task),
            title=title if isinstance(title, str) else str(task),
            time_limit=float(limit),
            size=len(text.encode("utf-8")),
            started=started,
        )
    return dataclasses.replace(parsed, started=started)


def _read_text(p: Path) -> str:
    """The text of a design file: a regular file of at most :data:`MAX_DESIGN_BYTES`.

    The file is opened without blocking (a FIFO never hangs) and checked with ``fstat`` on the
    opened descriptor, so a directory, a device (``/dev/zero``), a FIFO or a socket is refused
    before anything is read.
    """
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise DesignFileError(f"{p}: design file not found") from None
    except IsADirectoryError:
        raise DesignFileError(f"{p}: is a directory, not a design file") from None
    except OSError as exc:
        raise DesignFileError(f"{p}: cannot read design file ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):  # checked before fdopen, which refuses a directory itself
        os.close(fd)
        raise DesignFileError(f"{p}: is a directory, not a design file")
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(st.st_mode):
            raise DesignFileError(
                f"{p}: is not a regular file (a FIFO, device or socket); give a TOML file"
            )
        if st.st_size > MAX_DESIGN_BYTES:
            raise DesignFileError(
                f"{p}: design file has {st.st_size} bytes, more than the limit of "
                f"{MAX_DESIGN_BYTES}"
            )
        try:
            data = fh.read(MAX_DESIGN_BYTES + 1)
        except OSError as exc:
            raise DesignFileError(f"{p}: cannot read design file ({exc.strerror or exc})") from None
    if len(data) > MAX_DESIGN_BYTES:
        raise DesignFileError(f"{p}: design file is larger than {MAX_DESIGN_BYTES} bytes")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Windows editors write one) is dropped
    except UnicodeDecodeError as exc:
        raise DesignFileError(f"{p}: design file is not UTF-8 text ({exc.reason})") from None


def parse_design(text: str, *, source: str = "<string>") -> Design:
    """Parse a design from TOML text (see :func:`load_design`).

    Parameters
    ----------
    text
        The TOML document.
    source
        Where it came from (prefixes every error message).

    Returns
    -------
    Design
        The validated design, task options filled in with their defaults.

    Raises
    ------
    DesignFileError
        If the text is not valid TOML or breaks the schema; the one-line message names the key.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DesignFileError(f"{source}: invalid TOML ({exc})") from None
    except RecursionError:
        raise DesignFileError(f"{source}: invalid TOML (nested too deeply)") from None
    if _depth(doc) > _MAX_DEPTH:
        raise DesignFileError(f"{source}: arrays or tables nested deeper than {_MAX_DEPTH}")
    task = doc.get("task")
    if not isinstance(task, str):
        raise DesignFileError(f"{source}: key 'task' is required, one of {sorted(SPECS)}")
    if task not in SPECS:
        raise DesignFileError(f"{source}: task {_short(task)} is not one of {sorted(SPECS)}")
    spec = SPECS[task]
    unknown = set(doc) - _TOP_KEYS - {task}
    if unknown:
        raise DesignFileError(
            f"{source}: unknown key {_short(sorted(unknown)[0])} at top level "
            f"(allowed: {sorted(_TOP_KEYS | {task})})"
        )
    ctx = _Ctx(source)
    # the task's options first: its own refusal of a section beats the sections' demands
    options = ctx.options(doc.get(task, {}), task, spec.options)
    problem = spec.check(options, doc) if spec.check is not None else None
    if problem:
        raise DesignFileError(f"{source}: {problem}")
    if "layer" in doc and "schedule" in doc:
        raise DesignFileError(f"{source}: give either [layer] or [[schedule]], not both")
    horizon = ctx.table(doc.get("horizon", {}), "horizon", _HORIZON_KEYS)
    T = ctx.positive_float(horizon["T"], "horizon.T") if "T" in horizon else None
    n_layers = (
        ctx.positive_int(horizon["n_layers"], "horizon.n_layers") if "n_layers" in horizon else None
    )
    model: Layer | Schedule | None = None
    if "layer" in doc:
        model = ctx.layer(doc["layer"], "layer")
    elif "schedule" in doc:
        entries = doc["schedule"]
        if not isinstance(entries, list) or not entries:
            raise DesignFileError(f"{source}: 'schedule' must be a non-empty array of tables")
        lays = [ctx.layer(e, f"schedule[{i}]") for i, e in enumerate(entries)]
        if T is None:
            raise DesignFileError(f"{source}: [[schedule]] needs [horizon] T")
        model = ctx.wrap(lambda: Schedule(lays, T), "schedule")
    if model is not None and not spec.closure:
        _refuse_inexact(model, source, task)
    initial = ctx.gaussian(doc["initial"], "initial") if "initial" in doc else None
    target = ctx.gaussian(doc["target"], "target") if "target" in doc else None
    for name, g in (("initial", initial), ("target", target)):
        if g is not None and model is not None and g.dim != model.dim:
            raise DesignFileError(
                f"{source}: [{name}] has dimension {g.dim} but the model has dimension {model.dim}"
            )
    base = ctx.base(doc["base"], task, T, doc) if "base" in doc else None
    if isinstance(base, (Layer, Schedule)):
        for name, g in (("initial", initial), ("target", target)):
            if g is not None and g.dim != base.dim:
                raise DesignFileError(
                    f"{source}: [{name}] has dimension {g.dim} but the [base] has dimension "
                    f"{base.dim}"
                )
    seed = doc.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DesignFileError(
            f"{source}: key 'seed' must be a non-negative integer, got {_short(seed)}"
        )
    time_limit = (
        ctx.positive_float(doc["time_limit"], "time_limit")
        if "time_limit" in doc
        else DEFAULT_TIME_LIMIT
    )
    title = doc.get("title", task)
    if not isinstance(title, str):
        raise DesignFileError(f"{source}: key 'title' must be a string")
    design = Design(
        task=task,
        initial=initial,
        target=target,
        model=model,
        T=T,
        n_layers=n_layers,
        options=options,
        seed=seed,
        title=title,
        raw=doc,
        source=source,
        time_limit=time_limit,
        base=base,
    )
    design.require(*spec.needs)
    design.refuse_unread(spec.reads)
    return design


def _refuse_inexact(model: Layer | Schedule, source: str, task: str) -> None:
    """Refuse, by its key, a feed-forward outside the exact Gaussian moment model: only the token
    comparison runs one (against the Gaussian closure)."""
    layers = model.layers if isinstance(model, Schedule) else (model,)
    for i, lay in enumerate(layers):
        if lay.ffn is not None and not lay.is_gaussian_exact:
            where = "layer" if isinstance(model, Layer) else f"schedule[{i}]"
            raise DesignFileError(
                f"{source}: '{where}.ffn.activation' = {lay.ffn.activation!r} is outside the "
                f"exact Gaussian moment model that task {task!r} runs; use 'identity', or task "
                "'compare-tokens' to compare its tokens with the Gaussian closure"
            )


class _Ctx:
    """Parsing helpers that prefix every error with the file and key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, msg: str) -> DesignFileError:
        return DesignFileError(f"{self.source}: {msg}")

    def wrap(self, build: Callable[[], _T], where: str) -> _T:
        try:
            return build()
        except GTControlError as exc:
            raise self.fail(f"[{where}] {exc}") from None

    def table(self, value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"'{where}' must be a table")
        unknown = set(value) - allowed
        if unknown:
            raise self.fail(
                f"unknown key '{where}.{sorted(unknown)[0]}' (allowed: {sorted(allowed)})"
            )
        return value

    def array(self, value: Any, where: str, ndim: int) -> np.ndarray:
        if isinstance(value, (str, bool)) or _has_non_numeric(value):
            raise self.fail(f"'{where}' must be numeric, got {_short(value)}")
        if _has_huge(value):
            raise self.fail(f"'{where}' has an entry beyond the floating-point range")
        try:
            return as_float_array(f"'{where}'", value, ndim=ndim, error=DesignFileError)
        except DesignFileError as exc:
            raise self.fail(str(exc)) from None

    def scalar(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"'{where}' must be a number, got {_short(value)}")
        if _has_huge(value):
            raise self.fail(f"'{where}' is beyond the floating-point range")
        if not math.isfinite(value):
            raise self.fail(f"'{where}' must be finite, got {_short(value)}")
        return float(value)

    def positive_float(self, value: Any, where: str) -> float:
        x = self.scalar(value, where)
        if x <= 0:
            raise self.fail(f"'{where}' must be positive, got {_short(value)}")
        return x

    def positive_int(self, value: Any, where: str) -> int:
        try:
            return as_positive_int(where, value, maximum=_MAX_INT)
        except InvalidParametersError:
            raise self.fail(
                f"'{where}' must be a positive integer at most {_MAX_INT}, got {_short(value)}"
            ) from None

    def gaussian(self, value: Any, where: str) -> Gaussian:
        t = self.table(value, where, _GAUSSIAN_KEYS)
        for key in ("mean", "cov"):
            if key not in t:
                raise self.fail(f"'{where}.{key}' is required")
        mean = self.array(t["mean"], f"{where}.mean", 1)
        cov = self.array(t["cov"], f"{where}.cov", 2)
        return self.wrap(lambda: Gaussian(mean, cov, name=where), where)

    def matrix_or_scalar(self, value: Any, where: str) -> Any:
        """A ``V``: a matrix, or a number meaning that multiple of the identity."""
        if isinstance(value, list):
            return self.array(value, where, 2)
        return self.scalar(value, where)

    def layer(self, value: Any, where: str) -> Layer:
        t = self.table(value, where, _LAYER_KEYS)
        kw: dict[str, Any] = {}
        for key in ("A", "B"):
            if key in t:
                kw[key] = self.array(t[key], f"{where}.{key}", 2)
        if "V" in t:
            kw["V"] = self.matrix_or_scalar(t["V"], f"{where}.V")
        if "b" in t:
            kw["b"] = self.array(t["b"], f"{where}.b", 1)
        if "noise" in t:
            kw["noise"] = self.array(t["noise"], f"{where}.noise", 2)
        if "heads" in t:
            heads = t["heads"]
            if not isinstance(heads, list) or not heads:
                raise self.fail(f"'{where}.heads' must be a non-empty array of tables")
            pairs = []
            for i, h in enumerate(heads):
                hw = f"{where}.heads[{i}]"
                ht = self.table(h, hw, _HEAD_KEYS)
                vh = self.matrix_or_scalar(ht["V"], f"{hw}.V") if "V" in ht else None
                bh = self.array(ht["B"], f"{hw}.B", 2) if "B" in ht else None
                pairs.append((vh, bh))
            kw["heads"] = pairs
        if "ffn" in t:
            ft = self.table(t["ffn"], f"{where}.ffn", _FFN_KEYS)
            for key in ("W_in", "W_out"):
                if key not in ft:
                    raise self.fail(f"'{where}.ffn.{key}' is required")
            act = ft.get("activation", "relu")
            if not isinstance(act, str):
                raise self.fail(f"'{where}.ffn.activation' must be a string")
            w_in = self.array(ft["W_in"], f"{where}.ffn.W_in", 2)
            w_out = self.array(ft["W_out"], f"{where}.ffn.W_out", 2)
            b_in = self.array(ft["b_in"], f"{where}.ffn.b_in", 1) if "b_in" in ft else None
            kw["ffn"] = self.wrap(
                lambda: FeedForward(w_in, w_out, b_in=b_in, activation=act), f"{where}.ffn"
            )
        if not kw:
            raise self.fail(f"'[{where}]' is empty: give at least one of {sorted(_LAYER_KEYS)}")
        return self.wrap(lambda: Layer(**kw), where)

    def base(
        self, value: Any, task: str, T: float | None, doc: Mapping[str, Any]
    ) -> Layer | Schedule | ModelBase:
        """Task ``steer``'s ``[base]``: a layer table, an array of them, or a model's layer."""
        if task != "steer":
            raise self.fail(f"[base] is read by task 'steer' only; task {task!r} does not take it")
        if isinstance(value, list):
            if not value or not all(isinstance(e, dict) for e in value):
                raise self.fail("'base' must be a table, or a non-empty array of layer tables")
            lays = [self.layer(e, f"base[{i}]") for i, e in enumerate(value)]
            if T is None:
                raise self.fail("[[base]] needs [horizon] T")
            return self.wrap(lambda: Schedule(lays, T), "base")
        if not isinstance(value, dict) or "model" not in value:
            named = sorted(set(value) & set(BASE_OPTIONS)) if isinstance(value, dict) else []
            if named:
                raise self.fail(
                    f"'base.{named[0]}' needs 'base.model' (a [base] without model is a layer: "
                    f"the keys {sorted(_LAYER_KEYS)})"
                )
            return self.layer(value, "base")
        mb = ModelBase(**self.options(value, "base", BASE_OPTIONS))
        rotated = mb.target == "rotated"
        shaping = [k for k in ("angle", "shift", "stretch") if k in value]
        if shaping and not rotated:
            raise self.fail(
                f"'base.{shaping[0]}' shapes the rotated target; with base.target = 'given' "
                "remove it"
            )
        if "initial" in doc:
            raise self.fail(
                "[initial]: with [base] model the initial is the layer's own moments "
                "('base.start_from'); remove [initial]"
            )
        if rotated and "target" in doc:
            raise self.fail(
                "[target] is given but 'base.target' = 'rotated' generates the target; set "
                "base.target = 'given' to steer to [target], or remove [target]"
            )
        if not rotated and "target" not in doc:
            raise self.fail(
                "'base.target' = 'given' needs [target] (a Gaussian of the layer's width d + 1)"
            )
        return mb

    def options(self, value: Any, task: str, spec: Mapping[str, Option]) -> dict[str, Any]:
        t = self.table(value, task, set(spec))
        out: dict[str, Any] = {}
        for name, opt in spec.items():
            if name not in t:
                out[name] = opt.default
                continue
            v = t[name]
            kinds = opt.kind if isinstance(opt.kind, tuple) else (opt.kind,)
            ok = isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)
            if float in kinds and isinstance(v, int) and not isinstance(v, bool):
                if _has_huge(v):
                    raise self.fail(f"'{task}.{name}' is beyond the floating-point range")
                v, ok = float(v), True
            if isinstance(v, float) and not math.isfinite(v):
                raise self.fail(f"'{task}.{name}' must be finite, got {_short(t[name])}")
            if not ok:
                names = "/".join(k.__name__ for k in kinds)
                raise self.fail(f"'{task}.{name}' must be of type {names}, got {_short(t[name])}")
            if opt.check is not None:
                problem = opt.check(v)
                if problem:
                    raise self.fail(f"'{task}.{name}' {problem}, got {_short(t[name])}")
            out[name] = v
        return out


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a one-line message, shortened when long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


def _depth(value: Any) -> int:
    """Nesting depth of a TOML value (iterative: no recursion limit is hit)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > _MAX_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _has_huge(value: Any) -> bool:
    """Whether a number (or a nested list) holds an integer too large for a float.

    That is an integer that rounds to 2**1024 or beyond (from 2**1024 - 2**970 on), the point
    where ``float()`` raises ``OverflowError``.
    """
    if isinstance(value, list):
        return any(_has_huge(v) for v in value)
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _has_non_numeric(value: Any) -> bool:
    if isinstance(value, list):
        return any(_has_non_numeric(v) for v in value)
    return isinstance(value, (str, bool, dict))
