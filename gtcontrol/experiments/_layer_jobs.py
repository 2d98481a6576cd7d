"""Independent work per layer of a model, run inline, on local worker processes or on a dask
cluster, each finished row stored at once so that a killed run resumes where it stopped.

:func:`run_layer_jobs` calls ``work(key)`` for every key (a layer index) whose row is not
stored yet and returns the rows by key. The store is a folder::

    STORE/manifest.json              {"format": 1, "fingerprint": ..., "gtcontrol_version": ...}
    STORE/rows/layer_003.pkl         the row of key 3 (a pickled record), written at once
    STORE/rows/layer_003.pkl.bad-1   an unreadable row file, set aside (never deleted)
    STORE/.lock                      locked while a run writes the store

Every row file is written to a hidden temporary beside it and renamed into place
(``os.replace``), so a row file is either absent or complete; the temporaries a killed run
left are removed by the next run (the lock makes any other writer's temporaries stale). The
fingerprint (the caller's description of the model and options) guards against mixing rows
of two different runs: a store written for another fingerprint is refused, never changed.

Row files are pickles: load a store only from a folder you wrote (as any pickle).

Where the work runs:

* one worker and no scheduler: inline, in this process, in key order (no start-up cost);
* several workers: a :class:`distributed.LocalCluster` of worker processes on this machine,
  each with ``cores // workers`` BLAS/OpenMP threads and that share of the cores for its own
  jobs (:func:`gtcontrol._jobs.cpus`), so that workers × threads ≤ cores; a worker also takes
  the cores that no runnable thread holds when it starts a step (the last keys, once the other
  workers have none left);
* a scheduler address: one dask task per missing key on that cluster; this process stores
  each row as its task completes.

On workers a key's task is submitted once a worker is free for it, so keys start in key
order: a caller puts its longest keys first.

The local pool is dask's, as the sweeps' is, rather than a :mod:`concurrent.futures` process
pool with the spawn context: their start-up costs are alike (to the first result of a
2-process pool on a 2-core machine loaded by other work: 5-6.5 s for the spawn pool, 3-9 s for
dask, either way mostly the imports in each worker), small beside a layer's minutes; and dask
gives one code path with a remote cluster, restarts a worker that dies and retries its task
(a process pool breaks with every pending task), and stops running tasks when it closes (a
process pool waits for them). Running a cluster is the ``sweep`` extra's dask[distributed].

A scheduler of a remote cluster unpickles the tasks too: ``work`` must be importable there
as on the workers (gtcontrol installed, the same version, which the workers are checked for).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import math
import operator
import os
import pickle
import re
import secrets
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from .._cluster import ClusterError, check_address, dask_client, distributed, require_distributed
from .._display import Axes, SummaryItems
from .._jobs import CORES_VARIABLE, cpus
from .._output import OutputError, lock_exclusive, open_lock_file
from .._result_file import show_path
from .._status import Outcome, ResultFields, as_time_limit
from .._version import __version__
from ..errors import InvalidParametersError, Status

__all__ = ["GRACE", "JobsOutcome", "KeyRun", "NotDone", "remove_store", "run_layer_jobs"]

#: Most seconds a pool or cluster run waits past its ``time_limit`` for work that ends on its
#: own limit, before it cancels the rest (5 % of the limit, at least 1 s); stopping a local
#: cluster then takes up to :data:`gtcontrol._cluster.CLOSE_TIMEOUT` more.
GRACE = 5.0
_MANIFEST = "manifest.json"
_ROWS = "rows"
_LOCK = ".lock"
_FORMAT = 1
_ROW = re.compile(r"layer_\d+(?:\.[a-z]+)?\.pkl")
_TMP = re.compile(r"\.layer_\d+(?:\.[a-z]+)?\.pkl\.tmp-\d+-[0-9a-f]+")
#: Seconds a local cluster's first worker process may take to start (3-8 s on a loaded
#: 2-core machine) before the run is an error rather than a wait for ever.
_START_TIMEOUT = 120.0
#: Seconds the other local workers may take to start after the first (they start together,
#: within a second or two of each other on an idle machine).
_OTHERS_WAIT = 15.0
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class KeyRun:
    """How one key's row was made.

    Attributes
    ----------
    seconds
        Wall-clock seconds of ``work(key)`` where it ran.
    worker
        Where it ran: a dask worker's address, or ``"HOST pid N"``.
    reused
        Whether the row was loaded from the store (made by an earlier run).
    """

    seconds: float
    worker: str
    reused: bool = False


@dataclass(frozen=True)
class NotDone:
    """Why a key has no row.

    Attributes
    ----------
    reason
        ``"time_limit"``: not started, or cancelled, when the run's time ran out;
        ``"raised"``: ``work(key)`` raised, or its task could not be unpickled where it runs
        (the scheduler of a cluster unpickles it too), or its row could not be sent back or
        stored;
        ``"lost"``: its worker died (dask gave up after retries), or the cluster's scheduler
        (the connection to it) was lost.
    message
        One line: for ``"raised"``, ``"TYPE: MESSAGE"`` of the exception.
    traceback
        The formatted traceback where ``work`` raised (else empty).
    """

    reason: Literal["time_limit", "raised", "lost"]
    message: str
    traceback: str = ""


@dataclass(frozen=True, eq=False)
class JobsOutcome(ResultFields, Outcome):
    """Result of :func:`run_layer_jobs`.

    Attributes
    ----------
    rows
        The row of every key done (loaded from the store or computed), in key order.
    not_done
        Every other key, with why (:class:`NotDone`); the next run computes them.
    runs
        For every key in ``rows``: its seconds and worker (:class:`KeyRun`).
    computed, reused
        The keys computed by this run, and those loaded from the store.
    where
        ``"inline"``, ``"local: N worker processes"``, the scheduler address, or
        ``"none needed"`` (every row was stored).
    seconds
        Wall-clock seconds of the whole run.
    notes
        What the caller should know: row files set aside, workers capped by the cores.
    status
        ``SUCCESS`` when every key is done; ``FAILED`` when a key raised or was lost;
        else ``BUDGET_EXHAUSTED`` (keys cut by the time limit).
    message, stats
        One line on what happened; counts (``computed``, ``reused``, ``raised``, ``lost``,
        ``cut``, ``set_aside``), ``workers``, ``threads_per_worker`` and ``seconds``.
    """

    rows: Mapping[int, Any]
    not_done: Mapping[int, NotDone]
    runs: Mapping[int, KeyRun]
    computed: tuple[int, ...]
    reused: tuple[int, ...]
    where: str
    seconds: float
    notes: tuple[str, ...] = ()

    def _summary_items(self) -> SummaryItems:
        return [
            ("rows", len(self.rows)),
            ("not_done", len(self.not_done)),
            ("where", self.where),
            ("seconds", self.seconds),
        ]

    def _draw(self, ax: Axes) -> None:
        keys = sorted(self.runs)
        secs = [self.runs[k].seconds for k in keys]
        colors = ["0.6" if self.runs[k].reused else "C0" for k in keys]
        ax.bar(keys, secs, color=colors)
        ax.set_xlabel("key (layer)")
        ax.set_ylabel("seconds (grey: reused from the store)")
        ax.set_title(f"{len(self.rows)} rows, {self.where}", fontsize=8)


@dataclass(frozen=True)
class _Landed:
    """What a task sends back: the row or the exception's text, with time and place."""

    key: int
    row: Any
    seconds: float
    worker: str
    error: str | None = None  # "TYPE: MESSAGE" of what work raised
    traceback: str = ""


def _worker_name() -> str:
    """The dask worker's address when this runs in one, else ``"HOST pid N"``."""
    dd = sys.modules.get("distributed")
    if dd is not None:
        with contextlib.suppress(Exception):  # ValueError: not in a dask worker
            return str(dd.get_worker().address)
    return f"{socket.gethostname()} pid {os.getpid()}"


def _one_line(text: str, limit: int = 500) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _timed(work: Callable[[int], Any], key: int) -> _Landed:
    """``work(key)`` with its seconds and place; an exception comes back as text (its object
    may not survive pickling), so one key's failure is one key's report."""
    t0 = time.perf_counter()
    try:
        row = work(key)
    except Exception as exc:
        text = _one_line(f"{type(exc).__name__}: {exc}")
        tb = "".join(traceback.format_exception(exc))[-4000:]
        seconds = time.perf_counter() - t0
        return _Landed(key, None, seconds, _worker_name(), text, tb)
    return _Landed(key, row, time.perf_counter() - t0, _worker_name())


class _Store:
    """A folder of rows, locked while open (see the module docstring)."""

    def __init__(self, path: Path, fingerprint: str, label: Callable[[int], str]) -> None:
        self.path, self.fingerprint, self.label = path, fingerprint, label
        self.rows = path / _ROWS
        self._fd: int | None = None

    @contextlib.contextmanager
    def opened(self) -> Iterator[_Store]:
        """Create or check the store and hold its lock for the block."""
        if os.path.lexists(self.path) and not self.path.is_dir():
            raise OutputError(f"layer store: {show_path(self.path)} exists and is not a directory")
        if self.path.is_dir():
            self._refuse_foreign()  # before the lock file is made in it
        fd = open_lock_file(self.path / _LOCK, "layer store")
        try:
            lock_exclusive(
                fd,
                f"layer store: another run is writing {show_path(self.path)}; wait for it or "
                "choose another folder",
            )
            self._check_manifest()
            self.rows.mkdir(exist_ok=True)
            for p in self.rows.iterdir():  # a killed run's temporaries (the lock is ours)
                if _TMP.fullmatch(p.name):
                    p.unlink(missing_ok=True)
            yield self
        finally:
            os.close(fd)

    def _check_manifest(self) -> None:
        """Refuse a folder that is not a store of this fingerprint; write a new store's."""
        manifest = self.path / _MANIFEST
        if not manifest.exists():
            self._refuse_foreign()
            doc = {"format": _FORMAT, "fingerprint": self.fingerprint, "gtcontrol": __version__}
            self._write(manifest, json.dumps(doc, indent=1).encode())
            return
        try:
            doc = json.loads(manifest.read_text("utf-8"))
            found = doc["fingerprint"] if doc.get("format") == _FORMAT else None
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            found = None
        if not isinstance(found, str):
            raise OutputError(
                f"layer store: {show_path(self.path / _MANIFEST)} is not a layer store's manifest "
                "(unreadable, or of another format); choose another folder"
            )
        if found != self.fingerprint:
            raise OutputError(
                f"layer store: {show_path(self.path)} holds the rows of another run (fingerprint "
                f"{_cut(found)}, this run's {_cut(self.fingerprint)}); nothing was changed: "
                "choose another folder, or move that one away to start afresh"
            )

    def _refuse_foreign(self) -> None:
        """Refuse a folder without a manifest that holds anything (but a lock file)."""
        if (self.path / _MANIFEST).exists():
            return
        try:
            others = sorted(p.name for p in self.path.iterdir() if p.name != _LOCK)
        except OSError as exc:
            raise OutputError(
                f"layer store: cannot read {show_path(self.path)} ({exc.strerror or exc})"
            ) from None
        if others:
            raise OutputError(
                f"layer store: {show_path(self.path)} holds files that are not a layer store "
                f"({', '.join(repr(n) for n in others[:3])}); choose an empty or new folder"
            )

    def file(self, key: int) -> Path:
        return self.rows / f"{self.label(key)}.pkl"

    def load(self, keys: Iterable[int]) -> tuple[dict[int, dict[str, Any]], list[str]]:
        """The stored records of ``keys`` by key, and notes on the files set aside."""
        records: dict[int, dict[str, Any]] = {}
        notes: list[str] = []
        for key in keys:
            path = self.file(key)
            if not path.is_file():
                continue
            try:
                with path.open("rb") as f:
                    record = pickle.load(f)
                if not (isinstance(record, dict) and record.get("key") == key and "row" in record):
                    raise ValueError("not a row record of this key")
            except Exception as exc:  # truncated, damaged, or of a class no longer importable
                aside = self._set_aside(path)
                notes.append(
                    f"{self.label(key)}: its stored row was unreadable ({type(exc).__name__}: "
                    f"{_cut(str(exc), 120)}); set aside as {_ROWS}/{aside.name} and computed again"
                )
                continue
            records[key] = record
        return records, notes

    def _set_aside(self, path: Path) -> Path:
        for n in range(1, 10_000):
            aside = path.with_name(f"{path.name}.bad-{n}")
            if not os.path.lexists(aside):
                os.replace(path, aside)
                return aside
        raise OutputError(f"layer store: too many set-aside copies of {show_path(path)}")

    def write(self, key: int, landed: _Landed) -> None:
        """Store the row of ``key`` (pickled; raises what pickling raises)."""
        record = {"key": key, "row": landed.row, "seconds": landed.seconds}
        record["worker"] = landed.worker
        self._write(self.file(key), pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))

    def _write(self, target: Path, data: bytes) -> None:
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _default_label(key: int) -> str:
    return f"layer_{key:03d}"


def _cut(text: str, limit: int = 60) -> str:
    text = repr(text)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _check_keys(keys: Iterable[int]) -> list[int]:
    try:
        given = list(keys)
    except TypeError:
        raise InvalidParametersError(
            f"keys: expected layer indices (non-negative integers), got {type(keys).__name__}"
        ) from None
    out: list[int] = []
    for k in given:
        try:
            value = operator.index(k)
        except TypeError:
            value = -1
        if isinstance(k, bool) or value < 0:
            raise InvalidParametersError(
                f"keys: expected non-negative integers (layer indices), got {k!r}"
            )
        out.append(value)
    if len(set(out)) < len(out):
        twice = sorted({k for k in out if out.count(k) > 1})
        raise InvalidParametersError(f"keys: each layer once, got {twice} more than once")
    return sorted(out)


def _check_options(
    work: Callable[[int], Any],
    store: str | os.PathLike[str] | None,
    fingerprint: str | None,
    scheduler: str | None,
    workers: int,
) -> None:
    if not callable(work):
        raise InvalidParametersError(f"work: expected a callable, got {type(work).__name__}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidParametersError(f"workers: expected a positive integer, got {workers!r}")
    if store is not None and not isinstance(fingerprint, str):
        raise InvalidParametersError(
            "fingerprint: a store needs the run's fingerprint (a string naming the model and "
            f"options), got {type(fingerprint).__name__}"
        )
    if scheduler is not None and not isinstance(scheduler, str):
        raise InvalidParametersError(
            f"scheduler: expected an address tcp://HOST:PORT, got {type(scheduler).__name__}"
        )
    if scheduler is not None or workers > 1:
        try:
            pickle.dumps(work)
        except Exception as exc:
            raise InvalidParametersError(
                "work: worker processes need a picklable callable (a module-level function or "
                f"a functools.partial of one), got {work!r} ({type(exc).__name__}: {exc})"
            ) from None


def run_layer_jobs(
    keys: Iterable[int],
    work: Callable[[int], Any],
    *,
    store: str | os.PathLike[str] | None = None,
    fingerprint: str | None = None,
    scheduler: str | None = None,
    workers: int = 1,
    time_limit: float | None = None,
    on_done: Callable[[int, Any], object] | None = None,
    stored: Callable[[Any], bool] | None = None,
    label: Callable[[int], str] | None = None,
) -> JobsOutcome:
    """``work(key)`` for every key whose row is not stored, inline or in parallel; every row
    stored as it lands.

    Parameters
    ----------
    keys
        The layer indices (distinct non-negative integers); started in increasing order
        (inline, one after the other; on workers, each as a worker is free for it).
    work
        ``work(key) -> row``: a module-level function or a :func:`functools.partial` of one
        (pickled to worker processes, so keep it small: paths and options, not weights), and
        importable where it runs. It bounds its own time (the caller puts a time limit into
        the partial). An exception it raises is that key's report; the other keys go on.
    store
        A folder: absent or empty (a store is made), or a store made with the same
        ``fingerprint``, whose rows are reused. ``None``: nothing is stored.
    fingerprint
        What the rows depend on (the model, the options, the gtcontrol version as the caller
        sees fit); required with ``store``, which it must match.
    scheduler
        Address of a running dask scheduler (``tcp://HOST:8786``): one task per missing key
        on its cluster. Its workers must run this gtcontrol and be able to import ``work``.
    workers
        Without ``scheduler``: 1 runs inline; more start a local cluster of
        ``min(workers, cores, missing keys)`` worker processes (the ``sweep`` extra).
    time_limit
        Seconds for the whole run (``None``: no limit). A pool or cluster run returns within
        the limit plus a grace of 5 % of it (1 to :data:`GRACE` s) plus up to 3 s to stop a
        local cluster, cancelling what has not finished; inline, no key starts after the
        limit, and the key running then ends on its own time limit. Rows done are kept.
    on_done
        ``on_done(key, row)``, called in this process as each computed row is stored (not
        for rows loaded from the store). What it raises ends the run (the rows stored so
        far are kept).
    stored
        ``stored(row)``: whether a computed row is stored (``None``: every row). A row cut short
        by its own time limit is returned but not stored, so that a resume computes it again.
    label
        ``label(key)``: the name of a key's row file (``STORE/rows/LABEL.pkl``) and of the key
        in notes, ``layer_`` and the key's digits (at least 3) optionally followed by a
        lower-case suffix (``layer_003.analysis``); default ``layer_003`` for key 3.

    Returns
    -------
    JobsOutcome
        The rows by key, the keys not done and why, where it ran, timings and notes.

    Raises
    ------
    InvalidParametersError
        If the keys or options are malformed, or ``work`` cannot be pickled for workers.
    OutputError
        If ``store`` is not a folder, holds other files, another run's rows (another
        fingerprint), or another run is writing it. Nothing in it is changed then.
    ClusterError
        If the scheduler address is malformed or unreachable, its cluster has no worker
        running this gtcontrol, or dask is missing for several workers.

    Examples
    --------
    >>> from gtcontrol.experiments._layer_jobs import run_layer_jobs
    >>> out = run_layer_jobs([0, 1, 2], abs)
    >>> dict(out.rows), out.where, out.status
    ({0: 0, 1: 1, 2: 2}, 'inline', <Status.SUCCESS: 'success'>)
    """
    started = time.monotonic()
    order = _check_keys(keys)
    _check_options(work, store, fingerprint, scheduler, workers)
    limit = as_time_limit(time_limit)
    if scheduler is not None:
        require_distributed("a layer run on --scheduler")
        check_address(scheduler, label="layers")
    run = _Run(order, work, limit, started, on_done, fingerprint, stored)
    if store is None:
        run.compute(scheduler, workers)
        return run.outcome()
    named = _default_label if label is None else label
    bad = [k for k in order if not _ROW.fullmatch(f"{named(k)}.pkl")]
    if bad:
        raise InvalidParametersError(
            f"label: expected 'layer_' and digits, optionally '.suffix' in lower case, for "
            f"every key; got {named(bad[0])!r} for key {bad[0]}"
        )
    if len({named(k) for k in order}) < len(order):
        raise InvalidParametersError("label: expected a distinct file name for every key")
    with _Store(Path(os.fspath(store)), str(fingerprint), named).opened() as opened:
        run.store = opened
        records, notes = opened.load(order)
        run.notes.extend(notes)
        run.set_aside = len(notes)
        for key, record in records.items():
            run.rows[key] = record["row"]
            seconds, worker = record.get("seconds", math.nan), record.get("worker", "")
            run.runs[key] = KeyRun(float(seconds), str(worker), reused=True)
        run.compute(scheduler, workers)
        return run.outcome()


@dataclass
class _Run:
    """The state of one :func:`run_layer_jobs` call."""

    order: list[int]
    work: Callable[[int], Any]
    limit: float | None
    started: float
    on_done: Callable[[int, Any], object] | None
    fingerprint: str | None
    keep: Callable[[Any], bool] | None = None
    store: _Store | None = None
    rows: dict[int, Any] = field(default_factory=dict)
    runs: dict[int, KeyRun] = field(default_factory=dict)
    not_done: dict[int, NotDone] = field(default_factory=dict)
    computed: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    set_aside: int = 0
    where: str = "none needed"
    n_workers: int = 0
    threads: int | None = None

    SHORT: ClassVar[str] = "the time_limit of {:g} s ran out"

    @property
    def deadline(self) -> float:
        return math.inf if self.limit is None else self.started + self.limit

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def compute(self, scheduler: str | None, workers: int) -> None:
        """Compute the keys without a row: inline, on a local cluster or on ``scheduler``."""
        missing = [k for k in self.order if k not in self.rows]
        if not missing:
            return
        env = None
        if scheduler is None:
            n_cores = cpus()
            if workers > n_cores:
                self.notes.append(f"workers: {workers} asked, {n_cores} used (the cores here)")
            self.n_workers = min(workers, n_cores, len(missing))
            if self.n_workers == 1:
                self.where = "inline"
                self._inline(missing)
                return
            require_distributed(f"layers on {self.n_workers} worker processes")
            self.threads = max(1, n_cores // self.n_workers)
            env = {v: str(self.threads) for v in (*_THREAD_VARIABLES, CORES_VARIABLE)}
        if self.left() <= 0:  # no time to start a cluster
            self._cut(missing, "not started")
            return
        wall_deadline = time.time() + min(self.left(), 1e9)
        cluster = dask_client(
            scheduler, self.n_workers, wall_deadline, label="layers", worker_env=env
        )
        with cluster as (client, self.where):
            if scheduler is not None:
                with contextlib.suppress(Exception):
                    self.n_workers = len(client.scheduler_info()["workers"])
            self._on_cluster(client, missing)

    def _inline(self, missing: list[int]) -> None:
        for i, key in enumerate(missing):
            if self.left() <= 0:
                self._cut(missing[i:], "not started")
                return
            self._land(_timed(self.work, key))

    def _on_cluster(self, client: Any, missing: list[int]) -> None:
        """Run the keys as tasks, in key order: a task is submitted when a worker is free for
        it (:meth:`_slots`), so the first keys start first (a cluster given every task at once
        spreads them over its workers' queues in an order of its own, and a long key started
        last leaves the other workers idle); store each row as its task completes; at the
        deadline (plus the grace) cancel the running tasks and start no other."""
        dd = distributed()
        # a fixed name per fingerprint, work and key: a rerun after a kill may take over the
        # task a worker still runs for the dead driver instead of starting it again
        seed = self.fingerprint if self.fingerprint is not None else secrets.token_hex(8)
        tag = hashlib.sha256(seed.encode() + pickle.dumps(self.work)).hexdigest()[:16]
        names = {f"gtcontrol-layer-{tag}-{k}": k for k in missing}
        end = math.inf  # when the waiting ends: the deadline and its grace
        if self.limit is not None:
            end = self.deadline + min(GRACE, max(1.0, 0.05 * self.limit))
        queue = list(names)
        pending: dict[str, Any] = {}
        try:
            self._first_worker(client, end)
            # the work (a partial holding every layer's data, say) goes to every worker once,
            # not inside each task: held by one worker only, it would draw every task there
            shared = self.work
            if len(missing) > 1:
                shared = client.scatter(self.work, hash=False, broadcast=True)
            timeout = None if end == math.inf else max(end - time.monotonic(), 0.0)
            landed = dd.as_completed(loop=client.loop, timeout=timeout)

            def feed() -> None:
                while queue and len(pending) < self._slots(client):
                    name = queue.pop(0)
                    fut = client.submit(_timed, shared, names[name], key=name, pure=False)
                    pending[fut.key] = fut
                    landed.add(fut)

            feed()
            for fut in landed:
                pending.pop(fut.key, None)
                self._finished(fut, names[fut.key], dd)
                feed()
        except TimeoutError:
            with contextlib.suppress(Exception):
                client.cancel(list(pending.values()))
            self._cut([names[k] for k in (*pending, *queue)], "cancelled")

    def _slots(self, client: Any) -> int:
        """How many tasks may run at once: the threads of the cluster's workers now (asked as
        each task lands: a worker that joins takes a task from the next landing on)."""
        with contextlib.suppress(Exception):
            workers = client.scheduler_info()["workers"].values()
            return max(1, sum(int(w.get("nthreads", 1)) for w in workers))
        return max(1, self.n_workers)

    def _first_worker(self, client: Any, end: float) -> None:
        """Wait until a worker of a local cluster is up (a worker process that cannot start
        would otherwise leave the run waiting for ever; ``TimeoutError`` at ``end``), then
        for the others, at most :data:`_OTHERS_WAIT` s more: the first keys go to the
        workers there are when the run starts."""
        if self.threads is None:  # a remote cluster: its worker was waited for
            return
        wait = min(_START_TIMEOUT, end - time.monotonic())
        if wait <= 0:  # (dask waits for ever when told 0 s)
            raise TimeoutError
        try:
            client.wait_for_workers(1, timeout=wait)
        except Exception:
            if time.monotonic() >= end - 0.1:
                raise TimeoutError from None
            raise ClusterError(
                f"layers: no local dask worker process started within {wait:g} s (a worker is "
                "a new Python process that imports the caller's script: a script that asks "
                'for workers must make its call under `if __name__ == "__main__":`)'
            ) from None
        others = min(_OTHERS_WAIT, end - time.monotonic())
        if self.n_workers > 1 and others > 0:
            with contextlib.suppress(Exception):  # the run goes on with the workers up
                client.wait_for_workers(self.n_workers, timeout=others)

    def _finished(self, fut: Any, key: int, dd: Any) -> None:
        try:
            landed = fut.result()
        except (Exception, asyncio.CancelledError) as exc:
            text = _one_line(f"{type(exc).__name__}: {exc}")
            lost = (dd.KilledWorker, asyncio.CancelledError, concurrent.futures.CancelledError)
            if isinstance(exc, lost):  # its worker died, or the cluster's scheduler
                self.not_done[key] = NotDone("lost", f"lost on the cluster ({text})")
            else:  # the row could not be sent back (pickling), or the task could not run
                self.not_done[key] = NotDone("raised", text)
            return
        self._land(landed)

    def _land(self, landed: _Landed) -> None:
        key = landed.key
        if landed.error is not None:
            self.not_done[key] = NotDone("raised", landed.error, landed.traceback)
            return
        if self.store is not None and (self.keep is None or self.keep(landed.row)):
            try:
                self.store.write(key, landed)
            except OSError:  # the disk: nothing more can be stored
                raise
            except Exception as exc:  # a row that cannot be pickled
                text = f"the row cannot be stored ({type(exc).__name__}: {exc})"
                self.not_done[key] = NotDone("raised", _one_line(text))
                return
        self.rows[key] = landed.row
        self.runs[key] = KeyRun(landed.seconds, landed.worker)
        self.computed.append(key)
        if self.on_done is not None:
            self.on_done(key, landed.row)

    def _cut(self, keys: list[int], how: str) -> None:
        text = f"{how}: " + self.SHORT.format(self.limit or 0.0)
        for key in keys:
            self.not_done[key] = NotDone("time_limit", text)

    def outcome(self) -> JobsOutcome:
        seconds = time.monotonic() - self.started
        reasons = [nd.reason for nd in self.not_done.values()]
        counts = {r: reasons.count(r) for r in ("raised", "lost", "time_limit")}
        status = Status.SUCCESS
        if counts["raised"] or counts["lost"]:
            status = Status.FAILED
        elif counts["time_limit"]:
            status = Status.BUDGET_EXHAUSTED
        reused = tuple(k for k in self.order if k in self.runs and self.runs[k].reused)
        parts = [
            f"{len(self.order)} layers: {len(self.computed)} computed ({self.where}), "
            f"{len(reused)} reused from the store"
        ]
        if counts["raised"]:
            first = min(k for k, nd in self.not_done.items() if nd.reason == "raised")
            parts.append(
                f"{counts['raised']} raised (layer {first}: {self.not_done[first].message})"
            )
        if counts["lost"]:
            parts.append(f"{counts['lost']} lost on the cluster (a worker or its scheduler died)")
        if counts["time_limit"]:
            parts.append(
                f"{counts['time_limit']} not done: " + self.SHORT.format(self.limit or 0.0)
            )
        stats = {
            "computed": len(self.computed),
            "reused": len(reused),
            "raised": counts["raised"],
            "lost": counts["lost"],
            "cut": counts["time_limit"],
            "set_aside": self.set_aside,
            "workers": self.n_workers,
            "threads_per_worker": self.threads,
            "seconds": seconds,
        }
        return JobsOutcome(
            rows={k: self.rows[k] for k in self.order if k in self.rows},
            not_done={k: self.not_done[k] for k in self.order if k in self.not_done},
            runs={k: self.runs[k] for k in self.order if k in self.runs},
            computed=tuple(sorted(self.computed)),
            reused=reused,
            where=self.where,
            seconds=seconds,
            notes=tuple(self.notes),
            status=status,
            message="; ".join(parts),
            stats=stats,
        )


def remove_store(store: str | os.PathLike[str]) -> bool:
    """Remove a store that holds only what :func:`run_layer_jobs` wrote there (its manifest,
    lock and row files); return whether it was removed. A store holding anything else (a row
    file set aside, a file of the user's) is left as it is.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp()) / "store"
    >>> out = run_layer_jobs([0, 1], abs, store=folder, fingerprint="demo")
    >>> remove_store(folder), folder.exists()
    (True, False)
    """
    root = Path(os.fspath(store))
    if not root.is_dir():
        return False
    top = {p.name for p in root.iterdir()}
    if not top <= {_MANIFEST, _LOCK, _ROWS}:
        return False
    rows = root / _ROWS
    files = list(rows.iterdir()) if rows.is_dir() else []
    if any(not _ROW.fullmatch(p.name) or not p.is_file() for p in files):
        return False
    for p in files:
        p.unlink()
    if rows.is_dir():
        rows.rmdir()
    for name in (_MANIFEST, _LOCK):
        (root / name).unlink(missing_ok=True)
    root.rmdir()
    return True
