"""The ``sweep`` task: a design's layer analysed over a grid of parameters, on dask.distributed.

A sweep design names a base ``[layer]`` and ``[initial]`` Gaussian and, in ``[sweep]``, grid
axes that scale or shift parts of them (:data:`gtcontrol.cli.specs.SWEEP_AXES`); every point of
the cartesian grid runs ``analyze`` (or ``simulate``). The points run on a
:class:`distributed.LocalCluster` (worker processes on this machine) or on an existing cluster
(``gtcontrol run DESIGN --scheduler tcp://HOST:8786``), in batches (one dask
task each, a bounded number in flight) and each finished batch is stored at once as one small
Parquet file, every row keyed by a hash of the base design and the point
(:mod:`gtcontrol.cli._sweep_points`), so a killed run resumes where it stopped and a finished
sweep re-runs in seconds; at the end ``sweep.parquet`` holds one row per point,
``phase_diagram.png`` the regimes over the grid and ``result.json`` the record
(:mod:`gtcontrol.cli._sweep_store`; docs/sweeps.md).

Needs the ``sweep`` extra (``pip install 'gtcontrol[sweep]'``: dask[distributed], pandas,
pyarrow).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._cluster import ClusterError, check_address, dask_client, distributed
from .._output import run_summary
from .._progress import progress
from .._status import Status
from .._version import __version__
from ._sweep_points import (
    COLUMNS,
    BatchSizer,
    PointTask,
    SweepPlan,
    axis_values,
    failed_row,
    plan_sweep,
    reusable,
    run_points,
)
from ._sweep_store import FIGURE, TABLE, SweepFolder, batch_name, check_sweep_folder
from .schema import Design
from .specs import SWEEP_AXES

__all__ = ["SweepError", "SweepInterrupted", "run_sweep", "sweep_task"]

#: Seconds the sweep waits beyond its time_limit for points that stop cooperatively.
_GRACE = 5.0
_EXTRA_HINT = "install the 'sweep' extra: pip install 'gtcontrol[sweep]'"


class SweepError(ClusterError):
    """The sweep cannot run: the dask cluster is unreachable, has no usable worker, or the
    ``sweep`` extra is not installed."""


def _require_extra() -> None:
    """Raise :class:`SweepError` unless dask.distributed, pandas and pyarrow import."""
    try:
        import dask.distributed  # noqa: F401
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise SweepError(f"task 'sweep' needs {exc.name or 'dask'}: {_EXTRA_HINT}") from None


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C: its finished points stay in the folder; ``str()`` says so."""


def run_sweep(design: Design, outdir: str | Path, *, scheduler: str | None = None) -> Path:
    """Run a ``sweep`` design into ``outdir``, point by point; resume what a killed run left.

    Points already stored in ``outdir/points`` for the same base design are not computed again
    (the summary says how many were skipped); the others run on a local cluster of worker
    processes, or on the cluster of ``scheduler``. Every finished point is written at once;
    ``sweep.parquet``, ``phase_diagram.png`` and ``result.json`` are written at the end.

    Parameters
    ----------
    design
        A validated design with ``task = "sweep"``.
    outdir
        The output folder: absent, empty or a previous sweep's (a killed one included).
    scheduler
        Address of a running dask scheduler (``tcp://host:8786``); ``None``: a
        :class:`distributed.LocalCluster` of ``min(cores, points)`` worker processes (or the
        design's ``sweep.workers``).

    Returns
    -------
    pathlib.Path
        The output folder.

    Raises
    ------
    OutputError
        If ``outdir`` holds files a sweep did not write (nothing is touched then), or another
        sweep is writing it.
    SweepError
        If the ``sweep`` extra is missing, or the cluster cannot be reached or has no worker
        running this gtcontrol version.

    Examples
    --------
    >>> from gtcontrol.cli.schema import load_design
    >>> run_sweep(load_design("designs/sweep.toml"), "out/sweep")  # doctest: +SKIP
    PosixPath('out/sweep')
    """
    started = time.perf_counter()
    deadline = _points_deadline(design)
    _require_extra()
    plan = plan_sweep(design, deadline=deadline)
    folder = SweepFolder(check_sweep_folder(Path(outdir)))
    with folder.locked():
        try:
            res = _execute(design, plan, folder, scheduler=scheduler, deadline=deadline)
        except KeyboardInterrupt:
            kept = sum(len(rows or ()) for rows in folder.stored().values())
            if kept == 0:  # a folder this run made is removed on the way out (locked())
                where = "no output written" if folder.created else f"{folder.path} kept"
                raise SweepInterrupted(f"interrupted; no point had finished, {where}") from None
            raise SweepInterrupted(
                f"interrupted; {kept} finished point(s) kept in {folder.path}/points "
                "(run the same command again to compute only the missing ones)"
            ) from None
        seconds = time.perf_counter() - started
        res["summary"]["seconds"] = seconds
        doc: dict[str, Any] = {
            "gtcontrol_version": __version__,
            "task": design.task,
            "title": design.title,
            "design": design.source,
            "status": str(res["status"]),
            "summary": run_summary(design.task, res, seconds),
            "inputs": design.raw,
            "options": dict(design.options),
            "outputs": res["outputs"],
            "figures": res["figures"],
        }
        doc["files"] = folder.files()
        doc["seconds"] = seconds
        folder.write_result(doc)
    return folder.path


def sweep_task(design: Design, out: Path) -> dict[str, Any]:
    """The runner of :data:`gtcontrol.cli.tasks.TASKS`: the whole sweep into a fresh folder.

    Used when a sweep runs like the other tasks (inside :func:`gtcontrol._output.write_run`,
    whose temporary folder is swapped in at the end): no resume, a local cluster.
    ``gtcontrol run`` uses :func:`run_sweep` instead.

    Parameters
    ----------
    design
        A validated design with ``task = "sweep"``.
    out
        The (empty) folder to write into.

    Returns
    -------
    dict
        ``{"status", "outputs", "figures", "summary"}``.
    """
    _require_extra()
    deadline = _points_deadline(design)
    plan = plan_sweep(design, deadline=deadline)
    folder = SweepFolder(out)
    folder.points.mkdir(parents=True, exist_ok=True)
    return _execute(design, plan, folder, scheduler=None, deadline=deadline)


def _execute(
    design: Design, plan: SweepPlan, folder: SweepFolder, *, scheduler: str | None, deadline: float
) -> dict[str, Any]:
    """Compute the missing points, then write the table and the figure; return the record."""
    clock = time.perf_counter()
    files = folder.stored()
    rows, origin = _reuse(files, plan)
    skipped = len(rows)
    missing = [t for t in plan if t.key not in rows]
    written: set[str] = set()
    computed = lost = 0
    where = "none needed"
    preload = threading.Thread(target=_preload, name="gtcontrol-sweep-preload", daemon=True)
    if missing:  # the table's and the figure's modules load while the points run
        preload.start()
    if missing and scheduler is not None:  # a malformed address: an error whatever the time left
        check_address(scheduler, label="sweep", error=SweepError)
    # no time left to start a cluster (a local one: time for its workers to start)
    if missing and time.time() >= deadline - (_CLUSTER_START if scheduler is None else 0.0):
        text = "not computed: the sweep's time_limit ran out"
        for t in missing:
            rows[t.key] = failed_row(t, Status.BUDGET_EXHAUSTED, text, time_limit=0.0)
    elif missing:
        # never more worker processes than points to compute
        n_workers = min(design.options["workers"] or _cores(), len(missing))
        cluster = dask_client(scheduler, n_workers, deadline, label="sweep", error=SweepError)
        with cluster as (client, where):
            grace = _grace(design.time_limit)
            workers = n_workers if scheduler is None else None
            run = _Run(client, folder, plan, rows, written, deadline, grace, workers=workers)
            computed, lost = run.compute(missing)
    table = _frame([rows[t.key] for t in plan], plan)
    folder.write_atomic(TABLE, lambda p: table.to_parquet(p, index=False))
    figures = [FIGURE]
    folder.write_atomic(FIGURE, lambda p: _draw(design, plan, table, p))
    stale = _compact(folder, files, origin, written, plan)
    statuses = Counter(str(r["status"]) for r in rows.values())
    regimes = Counter(str(r["regime"]) for r in rows.values() if r.get("regime") and _answered(r))
    status = Status.SUCCESS
    cut = sum(1 for r in rows.values() if _cut_short(r, design.options["point_time_limit"]))
    failed = statuses.get(str(Status.FAILED), 0)
    out_of_time = statuses.get(str(Status.BUDGET_EXHAUSTED), 0)
    if cut or (out_of_time and failed + out_of_time == len(plan)):  # no point has an answer
        status = Status.BUDGET_EXHAUSTED
    elif failed == len(plan):
        status = Status.FAILED
    parts = [
        f"{len(plan)} points: {computed} computed, {skipped} skipped (stored by an earlier run)"
    ]
    if lost:
        parts.append(f"{lost} lost with their worker (computed again by the next run)")
    if cut:
        parts.append(
            f"the time_limit of {design.time_limit:g} s ran out: {cut} points not finished "
            "(the next run computes them)"
        )
    counts = regimes if plan.run == "analyze" else statuses
    parts.append(
        ("regimes: " if plan.run == "analyze" else "statuses: ")
        + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none (no point answered)")
    )
    message = "; ".join(parts)
    summary: dict[str, Any] = {
        "points": len(plan),
        "computed": computed,
        "skipped": skipped,
        "failed": failed,
        "budget_exhausted": out_of_time,
        "regimes" if plan.run == "analyze" else "statuses": dict(sorted(counts.items())),
        "message": message,
        "seconds": time.perf_counter() - clock,
    }
    outputs = {
        "message": message,
        "table": TABLE,
        "points_folder": folder.points.name,
        "run": plan.run,
        "axes": {a: list(plan.values[a]) for a in plan.axes},
        "columns": list(table.columns),
        "statuses": dict(sorted(statuses.items())),
        "regimes": dict(sorted(regimes.items())),
        "cluster": where,
        "stale_points_removed": stale,
    }
    return {"status": status, "outputs": outputs, "figures": figures, "summary": summary}


def _preload() -> None:
    """Import what the end of a sweep needs (pandas, pyarrow, matplotlib and the phase
    diagram's module: 1-3 s on a loaded machine), so that the table and figure are written
    within the sweep's reserve; run in a thread while the points run. An interrupt stops it
    (:func:`gtcontrol.cli.main._stop_background` raises ``KeyboardInterrupt`` in it), quietly."""
    with contextlib.suppress(BaseException):
        import pandas  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        from ..plotting import sweep  # noqa: F401


def _answered(row: Mapping[str, Any]) -> bool:
    """Whether a row's regime is an answer (not a cut-short or failed point)."""
    return row.get("status") in (str(Status.SUCCESS), str(Status.BLOWUP))


def _cut_short(row: Mapping[str, Any], point_time_limit: float) -> bool:
    """Whether a point ran out of time because the sweep's ``time_limit`` cut its own short."""
    used = row.get("time_limit")
    short = not isinstance(used, (int, float)) or used < point_time_limit * (1 - 1e-9)
    return row.get("status") == str(Status.BUDGET_EXHAUSTED) and short


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _reuse(
    files: Mapping[str, list[dict[str, Any]] | None], plan: SweepPlan
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The stored rows that answer a point of ``plan``: ``(rows by key, file id by key)``.

    A row is used when it has the columns of this sweep and answers its point
    (:func:`reusable`); a point stored twice (a row cut short, then computed again) uses its
    row with an answer, else the one that had the most time.
    """
    by_key = {t.key: t for t in plan}
    wanted = [*plan.axes, *COLUMNS[plan.run]]
    rows: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    for name, stored in files.items():
        for row in stored or ():
            task = by_key.get(row.get("point"))  # type: ignore[arg-type]
            if task is None or set(row) != set(wanted) or not reusable(row, task, plan.axes):
                continue
            old = rows.get(task.key)
            if old is None or _preference(row) > _preference(old):
                rows[task.key], origin[task.key] = {k: row[k] for k in wanted}, name
    return rows, origin


def _preference(row: Mapping[str, Any]) -> tuple[bool, float]:
    limit = row.get("time_limit")
    used = float(limit) if isinstance(limit, (int, float)) else 0.0
    return row.get("status") != str(Status.BUDGET_EXHAUSTED), used


def _compact(
    folder: SweepFolder,
    files: Mapping[str, list[dict[str, Any]] | None],
    origin: Mapping[str, str],
    written: set[str],
    plan: SweepPlan,
) -> int:
    """Drop the stored rows no point of ``plan`` uses; return how many were dropped.

    A file written by this run holds only rows in use; an older file whose rows are all unused
    (another design, a damaged file, rows computed again) is removed, one with some unused rows
    is rewritten with the others.
    """
    used: dict[str, set[str]] = {}
    for key, name in origin.items():
        used.setdefault(name, set()).add(key)
    dropped = 0
    for name, stored in files.items():
        if name in written:
            continue
        keep = used.get(name, set())
        if stored is None or not keep:
            folder.remove_point_file(name)
            dropped += 1 if stored is None else len(stored)
            continue
        kept: list[dict[str, Any]] = []
        seen: set[Any] = set()
        for row in stored:
            point = row.get("point")
            if point in keep and point not in seen:
                kept.append(row)
                seen.add(point)
        if len(kept) < len(stored):
            folder.write_rows(name, kept, plan.axes, COLUMNS[plan.run])
            dropped += len(stored) - len(kept)
    return dropped


def _frame(rows: list[dict[str, Any]], plan: SweepPlan) -> Any:
    """The rows as a pandas DataFrame: the axes (float64), then :data:`COLUMNS` with dtypes."""
    import pandas as pd

    columns = COLUMNS[plan.run]
    df = pd.DataFrame.from_records(rows, columns=[*plan.axes, *columns])
    for a in plan.axes:
        df[a] = df[a].astype("float64")
    for name, dtype in columns.items():
        df[name] = df[name].astype(dtype)
    return df


#: Seconds a local cluster's worker processes take to start and take a point (fresh Python
#: processes importing numpy, scipy, dask and gtcontrol; docs/benchmarks.md): with less time
#: left before the points' deadline a sweep starts no local cluster, since no point could
#: start on it and stopping its half-started workers would overrun the time_limit.
_CLUSTER_START = 1.5
#: Seconds kept from a sweep's time_limit for what follows the points (at most a quarter of
#: it): stopping the cluster (up to :data:`gtcontrol._cluster.CLOSE_TIMEOUT`), the table, the
#: figure and the record; 3 s plus 60 µs a point (measured on a loaded 2-core machine:
#: 2.5-3.5 s at 10⁴ points, 6.4 s at 10⁵).
_WRAP_UP, _WRAP_UP_PER_POINT, _WRAP_UP_SHARE = 3.0, 60e-6, 0.25


def _points_deadline(design: Design) -> float:
    """When the points must end (``time.time()``): the time_limit from now, less the wrap-up."""
    limit = design.time_limit
    o = design.options
    given = design.raw.get("sweep", {})
    axes = [k for k in (given if isinstance(given, dict) else {}) if k in SWEEP_AXES]
    n_points = math.prod(len(axis_values(o[a])) for a in axes)
    reserve = min(_WRAP_UP + _WRAP_UP_PER_POINT * n_points, _WRAP_UP_SHARE * limit)
    return time.time() + limit - reserve


def _grace(time_limit: float) -> float:
    """Seconds the sweep waits past its deadline for points that stop cooperatively.

    Each point's solvers end within ``max(1 s, 10 %)`` of their own limit, which the deadline
    bounds; the sweep waits a fraction of that (at most :data:`_GRACE`), then cancels.
    """
    return min(_GRACE, max(0.5, 0.05 * time_limit))


class _Run:
    """The points of one sweep on a dask cluster: submitted in batches, stored as they finish.

    At most ``2 × workers`` batches are in flight, so the scheduler never holds more than that
    many tasks whatever the size of the grid; a new batch is submitted whenever one finishes,
    until the deadline. The first batches hold one point each, later ones about a second of
    work (:class:`~gtcontrol.cli._sweep_points.BatchSizer`). Each finished batch is stored at
    once as one file (its points not cut short by the deadline).
    """

    def __init__(
        self,
        client: Any,
        folder: SweepFolder,
        plan: SweepPlan,
        rows: dict[str, dict[str, Any]],
        written: set[str],
        deadline: float,
        grace: float,
        *,
        workers: int | None = None,
    ) -> None:
        self.client, self.folder, self.plan = client, folder, plan
        self.rows, self.written, self.deadline, self.grace = rows, written, deadline, grace
        self.token = secrets.token_hex(4)
        self.inflight: dict[str, tuple[Any, list[PointTask]]] = {}  # by key: (future, batch)
        self.computed = self.lost = self.done = 0
        self.workers = workers  # None: ask the scheduler
        self.sizer = BatchSizer(0, 1)
        self.pending: list[PointTask] = []
        self.next = 0
        self.first_stored: float | None = None  # time.time() of the first stored point

    def _workers(self) -> int:
        if self.workers is not None:
            return max(1, self.workers)
        try:
            return max(1, sum(int(n) for n in self.client.nthreads().values()))
        except Exception:  # a scheduler that does not answer: one batch at a time
            return 1

    def compute(self, missing: list[PointTask]) -> tuple[int, int]:
        """Run the points; return ``(computed, lost)``: points stored, and points whose
        worker died (not stored: the next run computes them). Points cut short by the sweep's
        time_limit are not stored; those never started, or still running when the deadline
        and its grace are past (cancelled), get a ``budget_exhausted`` row with
        ``time_limit = 0``."""
        dd = distributed()
        workers = self._workers()
        self.sizer = BatchSizer(len(missing), workers)
        self.pending, self.next = missing, 0
        timeout = max(self.deadline - time.time(), 0.0) + self.grace
        done = dd.as_completed(loop=self.client.loop, timeout=timeout)
        for _ in range(2 * workers):
            if not self._submit(done):
                break
        with progress(f"sweep: {len(missing)} points", total=len(missing)) as update:
            try:
                for fut in done:
                    self._finished(fut)
                    update(self.done)
                    self._submit(done)
            except TimeoutError:
                with contextlib.suppress(Exception):
                    self.client.cancel([fut for fut, _ in self.inflight.values()])
                for _, batch in self.inflight.values():
                    self._not_computed(batch)
        self._not_computed(missing[self.next :])  # never submitted: the deadline came first
        return self.computed, self.lost

    def _submit(self, done: Any) -> bool:
        """Submit the next batch (:class:`BatchSizer`); ``False`` when none is left or the
        deadline has passed."""
        if time.time() >= self.deadline or self.next >= len(self.pending):
            return False
        size = self.sizer.next()
        batch = self.pending[self.next : self.next + size]
        self.next += len(batch)
        key = f"gtcontrol-sweep-{batch[0].key}-{len(batch)}-{self.token}"
        fut = self.client.submit(run_points, batch, key=key, pure=False)
        self.inflight[fut.key] = (fut, batch)
        done.add(fut)
        return True

    def _finished(self, fut: Any) -> None:
        _, batch = self.inflight.pop(fut.key)
        try:
            got = fut.result()
        except (Exception, asyncio.CancelledError) as exc:  # the worker died
            text = f"the point's worker failed ({type(exc).__name__}: {exc})"
            got = [failed_row(t, Status.FAILED, text) for t in batch]
            self.lost += len(batch)
        else:
            spent = [r.get("seconds") for r in got]
            self.sizer.done(len(got), sum(x for x in spent if isinstance(x, (int, float))))
            keep = [r for r, t in zip(got, batch, strict=True) if not _cut_short(r, t.time_limit)]
            if keep:  # the others are computed by the next run
                name = batch_name([r["point"] for r in keep])
                self.folder.write_rows(name, keep, self.plan.axes, COLUMNS[self.plan.run])
                self.written.add(name)
                self.computed += len(keep)
                if self.first_stored is None:
                    self.first_stored = time.time()
        for row, task in zip(got, batch, strict=True):
            self.rows[task.key] = row
        self.done += len(batch)

    def _not_computed(self, batch: list[PointTask]) -> None:
        text = "not computed: the sweep's time_limit ran out"
        for task in batch:
            self.rows[task.key] = failed_row(task, Status.BUDGET_EXHAUSTED, text, time_limit=0.0)


def _draw(design: Design, plan: SweepPlan, table: Any, path: Path) -> None:
    """The phase diagram of the first two axes with several values (others: first value)."""
    from ..plotting.sweep import plot_phase_diagram

    multi = [a for a in plan.axes if len(plan.values[a]) > 1] or [plan.axes[0]]
    xa = multi[0]
    ya = multi[1] if len(multi) > 1 else None
    part = table
    fixed = [a for a in plan.axes if a not in (xa, ya)]
    for a in fixed:
        part = part[part[a] == plan.values[a][0]]
    answered = part["status"].isin([str(Status.SUCCESS), str(Status.BLOWUP)])
    if plan.run == "analyze":
        category = part["regime"].where(answered & part["regime"].notna(), part["status"])
    else:
        category = part["status"]
    note = ", ".join(f"{a} = {plan.values[a][0]:.3g}" for a in fixed if len(plan.values[a]) > 1)
    title = design.title + (f" (at {note})" if note else "")

    def log(axis: str | None) -> bool:
        spec = design.options.get(axis) if axis else None
        return isinstance(spec, Mapping) and bool(spec.get("log", False))

    plot_phase_diagram(
        part[xa].to_numpy(),
        None if ya is None else part[ya].to_numpy(),
        [str(c) for c in category],
        path,
        blowup_time=part["blowup_time"].to_numpy(dtype=float, na_value=float("nan")),
        xlabel=xa,
        ylabel=ya or "",
        xlog=log(xa),
        ylog=log(ya),
        title=title,
    )
