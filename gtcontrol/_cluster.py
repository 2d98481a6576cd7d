"""A dask.distributed client: of an existing cluster at an address, or of a new local one.

Shared by the work that runs on dask (the ``sweep`` task, the layers of a model map): checking
a scheduler address before connecting, reaching the scheduler and its workers (which must run
this gtcontrol), starting a :class:`distributed.LocalCluster` of worker processes, keeping
dask's log lines off the terminal, and stopping the cluster within a bounded time. Needs
``dask[distributed]`` (the ``sweep`` extra), imported only when a client is made.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ._version import __version__
from .errors import GTControlError

__all__ = [
    "CLOSE_TIMEOUT",
    "ClusterError",
    "check_address",
    "dask_client",
    "distributed",
    "quiet_dask",
    "require_distributed",
    "worker_version",
]

#: Seconds to wait for an existing cluster's scheduler and first worker.
CONNECT_TIMEOUT = 30.0
#: Seconds a local cluster may take to stop its workers (they are killed with this process
#: if it takes longer; a graceful stop took 1-2.5 s on a loaded 2-core machine).
CLOSE_TIMEOUT = 3.0
_EXTRA_HINT = "install the 'sweep' extra: pip install 'gtcontrol[sweep]'"


class ClusterError(GTControlError):
    """A dask cluster cannot be used: a malformed or unreachable scheduler address, no usable
    worker, or dask.distributed not installed. The message names the address."""


def distributed() -> Any:
    """The ``dask.distributed`` module (imported on first use; it has no type hints)."""
    import dask.distributed

    return dask.distributed


def require_distributed(label: str, *, error: type[ClusterError] = ClusterError) -> None:
    """Raise ``error`` (``"LABEL: needs dask ..."``) unless dask.distributed imports."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError as exc:
        raise error(f"{label} needs {exc.name or 'dask'}: {_EXTRA_HINT}") from None


def worker_version() -> str:
    """The gtcontrol version installed where this runs (checked on every worker)."""
    return __version__


@contextmanager
def quiet_dask() -> Iterator[None]:
    """Keep dask's log lines (connection notes, shutdown chatter) off the terminal: what goes
    wrong reaches the caller through the client and its futures.

    After a ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM as ``gtcontrol`` handles it) they stay
    off: the process is ending, and dask's threads may still be stopping a cluster whose close
    timed out, logging as they go (``Nanny at ... closed``)."""
    logger = logging.getLogger("distributed")
    # dask's handler hangs here, but its config gives some children a level of their own
    # (distributed.client: warning), so the handler is quieted too
    quieted: list[logging.Logger | logging.Handler] = [logger, *logger.handlers]
    levels = [x.level for x in quieted]
    for x in quieted:
        x.setLevel(logging.CRITICAL)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        for x, level in zip(quieted, levels, strict=True):
            x.setLevel(level)
        raise
    else:
        for x, level in zip(quieted, levels, strict=True):
            x.setLevel(level)


@contextmanager
def dask_client(
    scheduler: str | None,
    n_workers: int,
    deadline: float,
    *,
    label: str,
    error: type[ClusterError] = ClusterError,
    worker_env: Mapping[str, str] | None = None,
) -> Iterator[tuple[Any, str]]:
    """A dask client: of the cluster at ``scheduler``, or of a new local cluster; closed after.

    A local cluster starts its scheduler at once and its ``n_workers`` worker processes (one
    thread each) in the background, so that work submitted while they start is not held past
    ``deadline`` by a slow start.

    Parameters
    ----------
    scheduler
        Address of a running scheduler (``tcp://host:8786``), or ``None`` for a local cluster.
    n_workers
        Worker processes of a local cluster (unused with ``scheduler``).
    deadline
        ``time.time()`` by which the work must end: bounds the wait for the scheduler and its
        first worker (at most :data:`CONNECT_TIMEOUT`, at least 1 s).
    label
        What uses the cluster, the start of every error message (``"sweep"``).
    error
        The :class:`ClusterError` subclass raised.
    worker_env
        Environment variables of a local cluster's worker processes, set before they start
        (e.g. ``OMP_NUM_THREADS``; dask sets the BLAS threads to 1 unless told otherwise).

    Yields
    ------
    tuple
        ``(client, where)``: ``where`` is the scheduler address or ``"local: N worker
        processes"``.

    Raises
    ------
    ClusterError
        ``error``: if the address is malformed or unreachable, its cluster has no worker or
        its workers run another gtcontrol, or a local cluster cannot start.
    """
    dd = distributed()
    with quiet_dask():
        if scheduler is not None:
            with _remote_client(dd, scheduler, deadline, label, error) as client:
                yield client, scheduler
            return
        with _worker_environ(worker_env):
            with _local_client(dd, n_workers, label, error) as client:
                yield client, f"local: {n_workers} worker processes"


#: glibc's trim threshold, which dask's nanny sets in its workers' environment.
_TRIM_VARIABLE = "MALLOC_TRIM_THRESHOLD_"


@contextmanager
def _worker_environ(env: Mapping[str, str] | None) -> Iterator[None]:
    """Put ``env`` into this process's environment while a local cluster lives, and restore
    the environment after.

    The workers are spawned with this process's environment (what a worker sets itself comes
    after numpy and its BLAS are loaded, too late for their thread counts), and dask sets its
    ``pre-spawn-environ`` (one BLAS thread) here before each spawn: without the restore, BLAS
    and torch loaded later by this process would run on one thread.

    That ``pre-spawn-environ`` also sets glibc's ``MALLOC_TRIM_THRESHOLD_``, and a trim
    threshold set by hand turns off glibc's adaptive ``mmap`` threshold: every temporary above
    128 KiB (a ``d × d`` product at d = 385 is 1.2 MB) is then mapped and unmapped, its pages
    zeroed by the kernel at each use. The workers here are spawned without it
    (docs/benchmarks.md, "The model map").
    """
    import dask

    pre = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    keys = {*(env or {}), *pre, "PYTHONHASHSEED"}
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(env or {})
    pre.pop(_TRIM_VARIABLE, None)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": pre}):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _local_client(dd: Any, n_workers: int, label: str, error: type[ClusterError]) -> Iterator[Any]:
    """A client of a new local cluster whose workers start in the background; closed after.

    The cluster's threads are started with SIGINT blocked (:func:`_without_sigint`), so that
    the worker processes they spawn never see the Ctrl-C meant for this process: it stops them
    itself, through the ``finally`` blocks here, without a traceback from each worker.
    """
    cluster = client = None
    before = set(multiprocessing.active_children())
    try:
        # a Ctrl-C that comes meanwhile is delivered at the end of this block, inside the try
        with _without_sigint():
            try:
                cluster = _new_cluster(dd)
            except Exception as exc:
                raise error(f"{label}: cannot start a local dask cluster ({exc})") from None
            client = dd.Client(cluster, set_as_default=False)  # before any worker: at once
            cluster.scale(n_workers)  # returns at once; the workers join when they are up
        yield client
    except KeyboardInterrupt:
        _kill_workers(before)
        raise
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=CLOSE_TIMEOUT)
        if cluster is not None:
            _close(cluster)


def _kill_workers(before: set[Any]) -> None:
    """Kill the worker processes started since ``before`` (:func:`multiprocessing.active_children`
    then): an interrupted run does not wait for their tasks. A worker inside a long native call
    (a layer of a model map) answers a graceful close only after it, so the close would run past
    :data:`CLOSE_TIMEOUT` and the exit wait on dask."""
    for process in set(multiprocessing.active_children()) - before:
        with contextlib.suppress(Exception):
            process.kill()


@contextmanager
def _without_sigint() -> Iterator[None]:
    """Block SIGINT in this thread for the block (then deliver one that came meanwhile).

    The signal mask is inherited by the threads started in the block (dask's event loop, the
    threads that spawn the worker processes) and by the processes they spawn, through their
    ``exec`` (as :mod:`multiprocessing.resource_tracker` does for its own process): a Ctrl-C
    at the terminal, sent to the whole process group, then reaches only this process, which
    stops the workers itself. Without it every worker printed a ``KeyboardInterrupt``
    traceback. SIGTERM is left alone: a worker stopped by it ends silently, and the nanny
    stops its worker with it.
    """
    block = getattr(signal, "pthread_sigmask", None)
    if block is None:  # pragma: no cover - not POSIX
        yield
        return
    # multiprocessing starts its resource tracker (on the first semaphore the workers' nanny
    # makes) with SIGINT blocked and *unblocks* it after, in the thread that spawns the
    # workers: started now, here, it leaves the mask of dask's threads alone
    from multiprocessing import resource_tracker

    with contextlib.suppress(Exception):
        resource_tracker.ensure_running()
    old = block(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        block(signal.SIG_SETMASK, old)


def _new_cluster(dd: Any) -> Any:
    """A :class:`distributed.LocalCluster` with no worker yet (see :func:`_local_client`)."""
    return dd.LocalCluster(
        n_workers=0,
        threads_per_worker=1,
        processes=True,
        # no dashboard; the scheduler's HTTP endpoint on a free local port (not 8787,
        # which another cluster may hold)
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
        # the workers' own (a worker stopped while it starts or runs logs errors)
        silence_logs=logging.CRITICAL,
    )


@contextmanager
def _remote_client(
    dd: Any, scheduler: str, deadline: float, label: str, error: type[ClusterError]
) -> Iterator[Any]:
    """A client of the cluster at ``scheduler``, with a worker running this gtcontrol."""
    check_address(scheduler, label=label, error=error)
    timeout = max(1.0, min(CONNECT_TIMEOUT, deadline - time.time()))
    client = dd.Client.__new__(dd.Client)
    try:
        client.__init__(scheduler, timeout=timeout, set_as_default=False)
    except Exception as exc:
        _discard(client)
        raise error(
            f"{label}: cannot reach the dask scheduler at {_short(scheduler)} "
            f"({type(exc).__name__}: {exc})"
        ) from None
    try:
        _check_workers(client, scheduler, timeout, label, error)
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=CLOSE_TIMEOUT)


def _close(cluster: Any) -> None:
    """Stop a local cluster within :data:`CLOSE_TIMEOUT` (a slow stop is not an error)."""
    with contextlib.suppress(Exception):
        cluster.close(timeout=CLOSE_TIMEOUT)


def _short(address: str, limit: int = 80) -> str:
    """``repr(address)``, cut in the middle when long (for one-line messages)."""
    text = repr(address)
    return text if len(text) <= limit else f"{text[: limit // 2]}…{text[-limit // 2 :]}"


def check_address(scheduler: str, *, label: str, error: type[ClusterError] = ClusterError) -> None:
    """Refuse what is not a scheduler address ``[PROTOCOL://]HOST:PORT`` before connecting.

    Raises ``error`` (``"LABEL: --scheduler ADDRESS is not a dask scheduler address ..."``).
    """
    from distributed.comm.addressing import get_address_host_port, parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, _ = parse_address(scheduler)
        get_backend(scheme)
        host, port = get_address_host_port(scheduler)
        if not host or not 0 < int(port) < 65536:
            raise ValueError("no host, or a port outside 1-65535")
    except Exception as exc:
        raise error(
            f"{label}: --scheduler {_short(scheduler)} is not a dask scheduler address "
            f"(expected tcp://HOST:PORT; {_short(str(exc), 160)[1:-1]})"
        ) from None


def _discard(client: Any) -> None:
    """Release a client whose construction failed, so that its finalizer neither waits for
    the lost connection nor prints a traceback at exit."""
    client.status = "closed"
    runner = getattr(client, "_loop_runner", None)
    if runner is not None:
        with contextlib.suppress(Exception):
            runner.stop()


def _check_workers(
    client: Any, scheduler: str, timeout: float, label: str, error: type[ClusterError]
) -> None:
    """Wait for a worker of the cluster and check that every worker runs this gtcontrol."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except Exception:
        raise error(
            f"{label}: the dask scheduler at {scheduler!r} has no worker (waited {timeout:g} s); "
            f"start one with: dask worker {scheduler}"
        ) from None
    try:
        versions = client.run(worker_version)
    except Exception as exc:
        raise error(
            f"{label}: the workers of {scheduler!r} cannot run gtcontrol ({type(exc).__name__}: "
            f"{exc}); install gtcontrol {__version__} with the 'sweep' extra on every worker"
        ) from None
    wrong = {addr: v for addr, v in versions.items() if v != __version__}
    if wrong:
        addr, v = next(iter(wrong.items()))
        raise error(
            f"{label}: worker {addr} of {scheduler!r} runs gtcontrol {v}, not {__version__} "
            f"({len(wrong)} of {len(versions)} workers differ); install the same version"
        )
