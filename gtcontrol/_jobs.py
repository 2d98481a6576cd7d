"""How :func:`gtcontrol.stabilize` runs its independent checks: side by side, or in turn.

A stabilize call has jobs that do not depend on one another: the verifying simulations (one per
start), the stabilized layer's token run, the given layer's token run, the spectrum of a design.
Each is BLAS-bound and releases the GIL, so with numpy's BLAS on one thread (as
:func:`gtcontrol.experiments.stabilize_model` sets it once torch is loaded, where a
multi-threaded OpenBLAS beside torch's OpenMP runtime is up to 50 times slower) they share the
cores in threads (:func:`concurrently`). With a multi-threaded BLAS, or without
``threadpoolctl`` to tell, they run one after the other, each using every core. A job whose
result may not be needed runs in the background (:func:`in_background`) and is cancelled by an
event, at its next budget check (:func:`gtcontrol._status.cancellable`). On a :func:`busy`
machine (more runnable threads than cores) no job gets a multi-threaded BLAS
(:func:`calm_blas`): its threads would stall, inside calls that no budget check interrupts.

Reference: :func:`gtcontrol.stabilize` (its ``token_check``); the tutorial "Stabilizing MiniLM's
layer 2" (docs/tutorials/stabilize-minilm.md); :mod:`concurrent.futures`.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ._blas import blas_single_threaded, busy, calm_blas, idle_cores
from ._status import cancellable

__all__ = [
    "concurrently",
    "cpus",
    "in_background",
    "in_turn",
    "threaded",
]

_T = TypeVar("_T")
_S = TypeVar("_S")
#: Threads of :func:`concurrently`.
_MAX_WORKERS = 8


#: Set by a local cluster in each of its worker processes: the worker's share of the cores.
CORES_VARIABLE = "GTCONTROL_CORES"


def cpus() -> int:
    """The CPUs this process may use: its affinity, or a local cluster worker's share of the
    cores (:data:`CORES_VARIABLE`) and the cores idle right now (:func:`idle_cores`). A worker
    with one core runs its jobs in turn while the other workers run, since threads sharing that
    core only add switching (docs/benchmarks.md, "The model map"); once they have no work left
    (the last rows of a map), it takes the cores they leave idle."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        n = os.cpu_count() or 1
    share = os.environ.get(CORES_VARIABLE, "")
    if not (share.isdigit() and int(share) > 0):
        return n
    return min(n, int(share) + idle_cores())


def threaded() -> bool:
    """Whether independent jobs run in threads (:func:`concurrently`)."""
    return cpus() > 1 and blas_single_threaded()


def concurrently(
    jobs: list[Callable[[], _T]], *, alone: bool = True, parallel: bool | None = None
) -> list[_T]:
    """``[job() for job in jobs]``, in threads when ``parallel`` (default :func:`threaded`).

    A single job gets the BLAS threads of every core instead, when it is ``alone`` (no
    background run beside it; MiniLM layer 3 at ``I ⊕ 0``, one verifying simulation of 226
    steps: 60.6 s on one thread, 40.8 s on two) and the machine is not :func:`busy` (then
    those threads would stall, and each step take many times longer than the budget's checks
    assume). Jobs in turn run under :func:`calm_blas`. Each job runs in a copy of the caller's
    context, so its progress bars (a context variable) show as they would in turn.
    """
    n_cpus = cpus()
    if not jobs or not (threaded() if parallel is None else parallel):
        with calm_blas():
            return [job() for job in jobs]
    if len(jobs) == 1 and (not alone or busy()):
        return [jobs[0]()]
    if len(jobs) == 1:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=n_cpus, user_api="blas"):
            return [jobs[0]()]
    # one thread per job even beyond the cores: the jobs differ in length (a far start takes
    # longer than a near one), and a core left idle by a short job is taken by a long one
    workers = min(len(jobs), _MAX_WORKERS)
    runs = [(contextvars.copy_context(), job) for job in jobs]
    with ThreadPoolExecutor(workers, thread_name_prefix="gtcontrol-verify") as pool:
        return list(pool.map(lambda run: run[0].run(run[1]), runs))


def in_turn(first: Callable[[], _T], then: Callable[[], _S]) -> tuple[_T, _S]:
    """``(first(), then())``: two jobs one after the other, in one of :func:`concurrently`'s
    threads."""
    return first(), then()


def in_background(job: Callable[[], _T], cancel: threading.Event, name: str) -> Future[_T]:
    """Start ``job`` in a thread of its own named ``name``, in a copy of the caller's context;
    setting ``cancel`` spends every budget it builds (:func:`gtcontrol._status.cancellable`),
    so it ends at its next budget check. The thread ends with the job."""
    run = contextvars.copy_context()

    def cancellable_job() -> _T:
        with cancellable(cancel):
            return job()

    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    future = pool.submit(run.run, cancellable_job)
    pool.shutdown(wait=False)
    return future
