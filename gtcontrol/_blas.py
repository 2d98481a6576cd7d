"""BLAS threads: how many numpy's BLAS uses, one thread for a block, and ARPACK's split.

``threadpoolctl`` (a dependency of the ``experiments`` extra) reads and sets the thread count of
the BLAS libraries loaded in the process; without it every function here leaves the threads as
they are (and :func:`blas_single_threaded` says ``False``: unknown). The setting is process-wide,
so a limit set in one thread holds for BLAS calls from every thread until it is restored.

Reference: threadpoolctl's documentation (https://github.com/joblib/threadpoolctl); OpenBLAS's
FAQ on its threads' busy-waiting between calls.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from ._status import Budget

__all__ = [
    "arpack_products",
    "blas_single_threaded",
    "busy",
    "calm_blas",
    "idle_cores",
    "native_refusal",
    "single_threaded_blas",
]

#: Below this d a native step is never refused: it takes well under a budget's tolerance.
NATIVE_PROBE_DIM = 256

_T = TypeVar("_T")


def _blas_controller() -> Any:
    """threadpoolctl's controller of the loaded BLAS libraries, or ``None`` without it."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl comes with the experiments extra
        return None
    return ThreadpoolController().select(user_api="blas")


def blas_single_threaded() -> bool:
    """Whether every BLAS library numpy uses runs on one thread (``False`` when unknown)."""
    ctl = _blas_controller()
    if ctl is None:  # pragma: no cover - threadpoolctl comes with the experiments extra
        return False
    info = ctl.info()
    return bool(info) and all(int(p.get("num_threads", 0)) == 1 for p in info)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run numpy's BLAS/LAPACK on one thread inside the block (restored after).

    Once torch (with its OpenMP runtime) is loaded in the process, OpenBLAS's own threads and
    torch's compete for the same cores: on a 2-core machine an ``eigh`` of size 384 was measured
    up to 50x slower, and a 512×384 Gaussianity test 6x slower, than with one BLAS thread
    (benchmarks/bench_experiments.py). The torch-side code keeps its threads. Without
    ``threadpoolctl`` this is a no-op.
    """
    ctl = _blas_controller()
    if ctl is None:  # pragma: no cover - threadpoolctl comes with the experiments extra
        yield
        return
    with ctl.limit(limits=1):
        yield


@contextlib.contextmanager
def arpack_products(
    product: Callable[[Any], _T],
) -> Iterator[Callable[[Any], _T]]:
    """Inside the block ARPACK's own work runs on one BLAS thread; ``product``, as yielded,
    on the threads the caller had.

    ARPACK's reverse-communication loop calls level-2 BLAS on its ``n × ncv`` basis between two
    products. With a multi-threaded OpenBLAS those calls, and the wake-ups of the threads that
    slept through them, cost more than the products themselves: MiniLM layer 4's linearization
    at d = 385 (n = 73,920, 40 vectors, 486 products) took 11.1 s on two threads, 5.6 s on one,
    and 3.7 s (7.7 ms a product) with ARPACK on one and the products on two; a random factored
    layer at d = 768: 97, 70 and 50 ms a product. The caller's setting is restored after.
    """
    ctl = _blas_controller()
    info = ctl.info() if ctl is not None else []
    threads = max((int(p.get("num_threads", 1)) for p in info), default=1)
    if ctl is None or threads <= 1:
        yield product
        return

    def on_caller_threads(x: Any) -> _T:
        with ctl.limit(limits=threads):
            return product(x)

    with ctl.limit(limits=1):
        yield on_caller_threads


def _load() -> tuple[float, int] | None:
    """``(one-minute load, threads runnable now)`` from ``/proc/loadavg`` (the runnable count
    includes the reading thread); ``(load, 0)`` from :func:`os.getloadavg` elsewhere; ``None``
    when neither can be read."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            fields = f.read().split()
        return float(fields[0]), int(fields[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0], 0
        except (OSError, AttributeError):  # pragma: no cover - no load average to read
            return None


def busy() -> bool:
    """Whether the machine has more work than cores: more threads runnable right now than it
    has CPUs (``/proc/loadavg``, this process's included), or a one-minute load above them.

    A multi-threaded OpenBLAS then stalls: its threads busy-wait for cores that others hold,
    and no budget check can fall inside one call (docs/benchmarks.md).
    """
    n = os.cpu_count() or 1
    got = _load()
    if got is None:  # pragma: no cover - no load average to read
        return False
    load, running = got
    return running > n or load > n + 0.5


def idle_cores() -> int:
    """Cores that no runnable thread holds right now: the CPUs less the threads runnable at
    this instant (``/proc/loadavg``, the calling thread included), at least 0; 0 where that
    count cannot be read. The one-minute load is not used: it lags by a minute."""
    n = os.cpu_count() or 1
    got = _load()
    if got is None or got[1] <= 0:
        return 0
    return max(0, n - got[1])


@contextlib.contextmanager
def calm_blas() -> Iterator[None]:
    """numpy's BLAS on one thread inside the block when the machine is :func:`busy` (its
    threads would stall), else as it is; restored after."""
    if busy() and not blas_single_threaded():
        with single_threaded_blas():
            yield
    else:
        yield


def native_refusal(
    what: str, d: int, products: Sequence[tuple[float, int]], budget: Budget
) -> str | None:
    """Why a native step is not started, or ``None`` when it fits.

    For work that is a few native LAPACK/slycot calls, which no budget check can interrupt.
    Its cost is the machine's own speed (the fastest of three ``d×d`` products timed here: one
    can be stalled by the scheduler) times the count of ``products`` for ``d`` (pairs ``(top
    dimension, count)``, the first whose top is at least ``d``); the step is refused when that
    would pass the budget's wrap-up time (:meth:`Budget.grace`). ``what`` opens the sentence
    (``"the certificate was"``). Never refused without a time limit or below
    :data:`NATIVE_PROBE_DIM`.

    Examples
    --------
    >>> native_refusal("the solve was", 512, ((math.inf, 10**9),), Budget(0.1))[:40]
    'the solve was not started: at d = 512 th'
    >>> native_refusal("the solve was", 512, ((math.inf, 10**9),), Budget(None)) is None
    True
    """
    left = budget.grace()
    if left is None or d < NATIVE_PROBE_DIM:
        return None
    x = np.ones((d, d))
    product = math.inf
    for _ in range(3):
        clock = time.perf_counter()
        x @ x
        product = min(product, time.perf_counter() - clock)
    estimate = next(n for top, n in products if d <= top) * product
    if estimate <= left:
        return None
    return (
        f"{what} not started: at d = {d} the cost is about {estimate:.2g} s (from "
        f"this machine's d×d product), more than the {max(left, 0.0):.2g} s left of the time "
        f"limit of {budget.given_limit:g} s"
    )
