"""The points of a ``sweep`` design: the grid, the stable point keys, and one point's run.

A sweep varies a base design (``[layer]`` and ``[initial]``) along the grid axes of
:data:`gtcontrol.cli.specs.SWEEP_AXES`; the grid is the cartesian product of the axes in the
order the design lists them (the first axis varies slowest). Every point has a stable key
(:func:`point_key`): a hash of the base design, what the point runs and the point's axis values,
so a changed design never reuses a stored point. :func:`run_point` runs one point on a dask
worker and returns its row of the sweep table; it never raises (a failure is a row with
``status = "failed"``).

This module is imported by the workers (``gtcontrol`` must be installed there, the same
version): it needs numpy and gtcontrol's public API only.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import Gaussian, Layer, analyze, equilibria, simulate
from .._status import Status
from .._version import __version__
from ..errors import GTControlError
from .records import final_moments
from .schema import Design
from .specs import SWEEP_AXES, range_values

__all__ = [
    "COLUMNS",
    "BatchSizer",
    "PointTask",
    "SweepPlan",
    "axis_values",
    "batch_size",
    "failed_row",
    "plan_sweep",
    "point_key",
    "point_model",
    "run_point",
    "run_points",
]

#: Columns of the sweep table after the axes, by what the points run, with their dtypes.
COLUMNS: dict[str, dict[str, str]] = {
    "analyze": {
        "point": "string",
        "status": "string",
        "regime": "string",
        "certificate": "string",
        "blowup_time": "float64",
        "equilibria": "Int64",
        "stable_equilibria": "Int64",
        "equilibria_status": "string",
        "message": "string",
        "seconds": "float64",
        "time_limit": "float64",
    },
    "simulate": {
        "point": "string",
        "status": "string",
        "blowup_time": "float64",
        "final_cov_trace": "float64",
        "final_cov_max_eigenvalue": "float64",
        "final_mean_norm": "float64",
        "steps": "Int64",
        "message": "string",
        "seconds": "float64",
        "time_limit": "float64",
    },
}
#: Length of a point key (hex digits of a SHA-256).
KEY_LENGTH = 20


def axis_values(spec: Any) -> tuple[float, ...]:
    """The values of a validated sweep axis: a list, or a range ``{start, stop, num[, log]}``.

    Parameters
    ----------
    spec
        The axis as the design gives it (checked by the schema).

    Returns
    -------
    tuple of float
        The values, ``-0.0`` written as ``0.0``.

    Examples
    --------
    >>> axis_values({"start": 0.0, "stop": 1.0, "num": 3})
    (0.0, 0.5, 1.0)
    >>> axis_values([1, 10, 100])
    (1.0, 10.0, 100.0)
    """
    if isinstance(spec, Mapping):
        return range_values(spec)
    return tuple(float(v) + 0.0 for v in spec)


def _canonical(obj: Any) -> Any:
    """Floats written the same on every machine (``-0.0`` as ``0.0``; NaN/inf as strings)."""
    if isinstance(obj, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)) or obj is None or isinstance(obj, str):
        return obj if not isinstance(obj, np.bool_) else bool(obj)
    if isinstance(obj, (int, float, np.integer, np.floating)):
        x = float(obj) + 0.0
        return repr(x) if not math.isfinite(x) else x
    return str(obj)


def point_key(base: Mapping[str, Any], params: Mapping[str, float]) -> str:
    """The stable key of a point: a hash of the base design and the point's axis values.

    Parameters
    ----------
    base
        What every point shares (the base layer and Gaussian, what the points run, the
        gtcontrol version): :attr:`SweepPlan.base`.
    params
        The point's axis values by axis name.

    Returns
    -------
    str
        :data:`KEY_LENGTH` hexadecimal digits of a SHA-256 of the canonical JSON text
        ``{"base": ..., "point": ...}`` (sorted keys).
    """
    return _Keys(base)(params)


class _Keys:
    """:func:`point_key` for many points of one base: the base's JSON text is hashed once.

    ``json.dumps({"base": b, "point": p}, sort_keys=True)`` is ``'{"base": ' + B + ', "point": '
    + P + '}'`` with ``B``, ``P`` the sorted JSON of each part, so the hash of the common prefix
    is computed once and copied (the keys are those of the text of the whole dictionary; a
    100,000-point plan no longer serializes the base layer 100,000 times).
    """

    def __init__(self, base: Mapping[str, Any]) -> None:
        prefix = '{"base": ' + json.dumps(_canonical(base), sort_keys=True) + ', "point": '
        self._head = hashlib.sha256(prefix.encode("utf-8"))

    def __call__(self, params: Mapping[str, float]) -> str:
        h = self._head.copy()
        h.update((_point_json(params) + "}").encode("utf-8"))
        return h.hexdigest()[:KEY_LENGTH]

    def grid(self, axes: Sequence[str], values: Mapping[str, Sequence[float]]) -> Iterator[str]:
        """The keys of the grid points in grid order (``itertools.product`` of the axes):
        each axis value's JSON text is written once, not once per point."""
        order = sorted(range(len(axes)), key=lambda i: axes[i])
        texts = [
            [_point_json({axes[i]: v})[1:-1] for v in values[axes[i]]] for i in range(len(axes))
        ]
        for combo in itertools.product(*(range(len(values[a])) for a in axes)):
            h = self._head.copy()
            text = "{" + ", ".join(texts[i][combo[i]] for i in order) + "}}"
            h.update(text.encode("utf-8"))
            yield h.hexdigest()[:KEY_LENGTH]


def _point_json(params: Mapping[str, float]) -> str:
    """``json.dumps(_canonical(params), sort_keys=True)``, written directly for the usual point
    (plain axis names, finite floats): the same text, ten times faster (a 100,000-point plan in
    a fraction of a second)."""
    parts = []
    for name in sorted(params):
        x = params[name]
        if not (isinstance(name, str) and name.isidentifier() and name.isascii()):
            return json.dumps(_canonical(params), sort_keys=True)
        if type(x) is not float or not math.isfinite(x):
            return json.dumps(_canonical(params), sort_keys=True)
        parts.append(f'"{name}": {float.__repr__(x + 0.0)}')
    return "{" + ", ".join(parts) + "}"


def point_model(
    layer: Layer, initial: Gaussian, params: Mapping[str, float]
) -> tuple[Layer, Gaussian]:
    """The layer and initial Gaussian of one point (:data:`gtcontrol.cli.specs.SWEEP_AXES`).

    Parameters
    ----------
    layer
        The base ``[layer]``.
    initial
        The base ``[initial]``.
    params
        The point's axis values; an axis that is absent leaves its part as it is.

    Returns
    -------
    tuple
        ``(layer, initial)`` of the point.

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        If a scaled part leaves the floating-point range.
    """
    eye = np.eye(layer.dim)
    p = dict(params)
    with np.errstate(over="ignore", invalid="ignore"):  # the constructors refuse inf and NaN
        a = layer.A * p.get("A_scale", 1.0) + p.get("A_shift", 0.0) * eye
        vs, vshift, bs = p.get("V_scale", 1.0), p.get("V_shift", 0.0), p.get("B_scale", 1.0)
        heads = [(v * vs + vshift * eye, b * bs) for v, b in layer.heads]
        noise = None if layer.noise is None else layer.noise * p.get("noise_scale", 1.0)
        bias = layer.b * p.get("b_scale", 1.0)
        mean = initial.mean * p.get("mean_scale", 1.0)
        cov = initial.cov * p.get("cov_scale", 1.0)
    new = layer.replace(A=a, b=bias, heads=heads, noise=noise)
    return new, Gaussian(mean, cov, name="initial")


@dataclass(frozen=True)
class PointTask:
    """Everything a worker needs to run one point (pickled to the worker).

    Attributes
    ----------
    key
        The point key (:func:`point_key`).
    params
        The point's axis values.
    layer, initial
        The base layer and Gaussian.
    run
        ``"analyze"`` or ``"simulate"``.
    T
        ``analyze``: the blow-up search depth (``None``: automatic); ``simulate``: the depth.
    time_limit
        Seconds the point may take.
    deadline
        Wall-clock time (``time.time()``) at which the whole sweep's ``time_limit`` runs out.
    """

    key: str
    params: Mapping[str, float]
    layer: Layer
    initial: Gaussian
    run: str
    T: float | None
    time_limit: float
    deadline: float


@dataclass(frozen=True)
class SweepPlan:
    """The grid of a sweep design and the key of each point.

    Attributes
    ----------
    axes
        Axis names in the design's order (the first varies slowest).
    values
        The values of each axis.
    points
        One :class:`PointTask` per grid point, in grid order.
    base
        What every point shares; hashed into every key.
    run
        What each point runs.
    """

    axes: tuple[str, ...]
    values: Mapping[str, tuple[float, ...]]
    points: tuple[PointTask, ...]
    base: Mapping[str, Any] = field(repr=False)
    run: str = "analyze"

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Iterator[PointTask]:
        return iter(self.points)


def plan_sweep(design: Design, *, deadline: float) -> SweepPlan:
    """The grid of a validated ``sweep`` design: its axes, points and point keys.

    Parameters
    ----------
    design
        The design (task ``sweep``).
    deadline
        Wall-clock time at which the sweep's ``time_limit`` runs out.

    Returns
    -------
    SweepPlan
        The plan.
    """
    o = design.options
    given = design.raw.get("sweep", {})
    axes = tuple(k for k in (given if isinstance(given, dict) else {}) if k in SWEEP_AXES)
    values = {a: axis_values(o[a]) for a in axes}
    layer, initial = design.model, design.initial
    assert isinstance(layer, Layer) and initial is not None
    run = str(o["run"])
    T = design.T if run == "simulate" else (o["T"] or None)
    base = {
        "gtcontrol": __version__,
        "run": run,
        "T": T,
        "layer": layer.to_dict(),
        "initial": {"mean": initial.mean.tolist(), "cov": initial.cov.tolist()},
    }
    keys = _Keys(base)
    limit = float(o["point_time_limit"])
    combos = list(itertools.product(*(values[a] for a in axes)))
    points = [
        PointTask(
            key=key,
            params=dict(zip(axes, combo, strict=True)),
            layer=layer,
            initial=initial,
            run=run,
            T=T,
            time_limit=limit,
            deadline=deadline,
        )
        for combo, key in zip(combos, keys.grid(axes, values), strict=True)
    ]
    return SweepPlan(axes, values, tuple(points), base, run)


def _empty_row(task: PointTask) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in COLUMNS[task.run]}
    row.update(task.params)
    row["point"] = task.key
    return row


def failed_row(
    task: PointTask,
    status: Status | str,
    message: str,
    *,
    seconds: float = 0.0,
    time_limit: float | None = None,
) -> dict[str, Any]:
    """The row of a point that has no result (a failure, or no time left).

    Parameters
    ----------
    task
        The point.
    status
        ``Status.FAILED`` or ``Status.BUDGET_EXHAUSTED``.
    message
        What happened.
    seconds
        Time spent on the point.
    time_limit
        The time the point had (``task.time_limit`` when ``None``; 0 when it never started,
        so that a later run computes it).

    Returns
    -------
    dict
        The row: the axis values, ``point``, ``status``, ``message``, ``seconds`` and
        ``time_limit``; every other column ``None``.
    """
    row = _empty_row(task)
    limit = task.time_limit if time_limit is None else time_limit
    row.update(status=str(status), message=message, seconds=seconds, time_limit=limit)
    return row


def _analyze_row(
    task: PointTask, layer: Layer, g0: Gaussian, limit: float, t0: float
) -> dict[str, Any]:
    regime = analyze(layer, g0, T=task.T, time_limit=limit)
    eqs = regime.equilibria
    if eqs is None:
        eqs = equilibria(layer, time_limit=max(limit - (time.perf_counter() - t0), 1e-3))
    row = _empty_row(task)
    row.update(
        status=str(regime.status),
        regime=regime.kind,
        certificate=regime.certificate,
        blowup_time=float(regime.blowup_time),
        equilibria=len(eqs),
        stable_equilibria=sum(bool(e.stable) for e in eqs),
        equilibria_status=str(eqs.status),
        message=regime.message,
    )
    return row


def _simulate_row(task: PointTask, layer: Layer, g0: Gaussian, limit: float) -> dict[str, Any]:
    assert task.T is not None
    traj = simulate(layer, g0, task.T, time_limit=limit)
    mean, cov = final_moments(traj)  # arrays: an overflow ends past a Gaussian's entry bound
    row = _empty_row(task)
    row.update(
        status=str(traj.status),
        blowup_time=float(traj.blowup_time),
        final_cov_trace=float(np.trace(cov)),
        final_cov_max_eigenvalue=float(np.linalg.eigvalsh(cov)[-1]),
        final_mean_norm=float(np.linalg.norm(mean)),
        steps=traj.stats.get("nsteps"),
        message=traj.message,
    )
    return row


def run_point(task: PointTask) -> dict[str, Any]:
    """Run one point of a sweep (on a dask worker) and return its row; never raises.

    The point may take ``min(task.time_limit, time left before task.deadline)`` seconds,
    shared by its solver calls (they stop cooperatively with ``budget_exhausted``).

    Parameters
    ----------
    task
        The point.

    Returns
    -------
    dict
        The row of the sweep table: the axis values and the columns of :data:`COLUMNS`
        for ``task.run``. A point whose model is invalid or whose solver raised is a row with
        ``status = "failed"`` and the error in ``message``.
    """
    t0 = time.perf_counter()
    limit = min(task.time_limit, task.deadline - time.time())
    if limit <= 0:
        text = "not started: the sweep's time_limit ran out"
        return failed_row(task, Status.BUDGET_EXHAUSTED, text, time_limit=0.0)
    try:
        layer, g0 = point_model(task.layer, task.initial, task.params)
        if task.run == "simulate":
            row = _simulate_row(task, layer, g0, limit)
        else:
            row = _analyze_row(task, layer, g0, limit, t0)
    except GTControlError as exc:
        spent = time.perf_counter() - t0
        return failed_row(task, Status.FAILED, str(exc), seconds=spent, time_limit=limit)
    except Exception as exc:  # a bug or a numerical library error: a row, never a crash
        text = f"{type(exc).__name__}: {exc}"
        spent = time.perf_counter() - t0
        return failed_row(task, Status.FAILED, text, seconds=spent, time_limit=limit)
    row["seconds"] = time.perf_counter() - t0
    row["time_limit"] = limit
    return row


def run_points(tasks: Sequence[PointTask]) -> list[dict[str, Any]]:
    """Run a batch of points one after the other (one dask task); their rows, in order.

    A sweep submits its points in batches (:class:`BatchSizer`): one task per point costs the
    scheduler about a millisecond and the client one file per point, more than a point of a
    small model takes. Every point keeps its own time limit and the sweep's deadline
    (:func:`run_point`), so a batch ends soon after the deadline whatever its size.

    Parameters
    ----------
    tasks
        The points.

    Returns
    -------
    list of dict
        One row per point (:func:`run_point`).
    """
    return [run_point(task) for task in tasks]


#: Largest batch of points per dask task, and batches per worker a sweep aims for at least.
MAX_BATCH, BATCHES_PER_WORKER = 256, 16
#: Seconds of work a batch aims for once the points' cost is known (:class:`BatchSizer`).
BATCH_SECONDS = 1.0


def batch_size(n_points: int, n_workers: int) -> int:
    """The largest batch: ``n_points / (16 n_workers)``, from 1 to :data:`MAX_BATCH`.

    Small sweeps run one point per task (one stored file per point, as they finish), so every
    worker has work to the end; :class:`BatchSizer` keeps batches below this.

    Examples
    --------
    >>> batch_size(8, 2), batch_size(1000, 2), batch_size(10**5, 2)
    (1, 31, 256)
    """
    return int(min(MAX_BATCH, max(1, n_points // (BATCHES_PER_WORKER * max(n_workers, 1)))))


class BatchSizer:
    """The size of the next batch: one point at first, then about :data:`BATCH_SECONDS` of work.

    The first batches hold one point each, so the first points are stored as soon as a worker
    is up; each finished batch reports its points' mean cost, and the next batch holds
    ``BATCH_SECONDS / cost`` points, at most twice the largest batch so far (a ramp: a few
    cheap points do not launch a batch of minutes) and at most :func:`batch_size`.

    Parameters
    ----------
    n_points, n_workers
        The points to compute and the workers computing them.

    Examples
    --------
    >>> s = BatchSizer(10**4, 2)
    >>> s.next(), s.done(1, 0.01), s.next(), s.done(2, 0.02), s.next()
    (1, None, 2, None, 4)
    """

    def __init__(self, n_points: int, n_workers: int) -> None:
        self.cap = batch_size(n_points, n_workers)
        self.largest = 1
        self.points = 0
        self.seconds = 0.0

    def next(self) -> int:
        """Points in the next batch."""
        if self.points == 0:
            return 1
        cost = self.seconds / self.points
        want = self.cap if cost <= 0 else max(1, int(BATCH_SECONDS / cost))
        return max(1, min(want, 2 * self.largest, self.cap))

    def done(self, points: int, seconds: float) -> None:
        """Record a finished batch: its number of points and the seconds they took."""
        self.points += points
        self.seconds += max(0.0, seconds)
        self.largest = max(self.largest, points)


def reusable(row: Mapping[str, Any], task: PointTask, axes: Sequence[str]) -> bool:
    """Whether a stored row answers ``task``: same key and values, and not cut short.

    A row whose point ran out of time is computed again when the point now has more time
    (a larger ``point_time_limit``, or the sweep's ``time_limit`` had cut it short).

    Parameters
    ----------
    row
        The stored row.
    task
        The point.
    axes
        The axis names.

    Returns
    -------
    bool
        ``True`` when the row can be reused.
    """
    if row.get("point") != task.key:
        return False
    for a in axes:
        value = row.get(a)
        if not isinstance(value, (int, float)) or float(value) != task.params[a]:
            return False
    if row.get("status") == str(Status.BUDGET_EXHAUSTED):
        used = row.get("time_limit")
        return isinstance(used, (int, float)) and float(used) >= task.time_limit * (1 - 1e-9)
    return row.get("status") in {str(s) for s in Status}
