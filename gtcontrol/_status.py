"""The one result protocol of gtcontrol: :class:`Status`, :class:`Result` and :class:`Budget`.

Every public result object carries ``.success`` (bool), ``.status`` (a :class:`Status`),
``.message`` (str) and ``.stats`` (a mapping of solver statistics). A finite-time blow-up is a
result with ``Status.BLOWUP``, never an exception; running out of time or of the iteration cap
is ``Status.BUDGET_EXHAUSTED`` with the best iterate; only bad input raises.

Every solver entry point takes a keyword-only ``time_limit`` (seconds, ``None`` for no
wall-clock limit) and turns it into a :class:`Budget`, which its loops consult.
"""

from __future__ import annotations

import atexit
import contextvars
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from ._display import Displayable
from .errors import InvalidParametersError, Status

__all__ = [
    "DEFAULT_MAX_EVALS",
    "MAX_EVALS_LIMIT",
    "MAX_TIME_LIMIT",
    "Budget",
    "BudgetExhausted",
    "HandedLimit",
    "Outcome",
    "OutcomeOrBlowup",
    "OutcomeOrInfeasible",
    "Result",
    "ResultFields",
    "Status",
    "WriteGate",
    "abandoned_work",
    "as_time_limit",
    "import_fits",
    "landed",
    "shown",
    "within",
]


@runtime_checkable
class Result(Protocol):
    """What every public result object of gtcontrol provides."""

    @property
    def success(self) -> bool: ...

    @property
    def status(self) -> Status: ...

    @property
    def message(self) -> str: ...

    @property
    def stats(self) -> Mapping[str, Any]: ...


class Outcome(Displayable):
    """Base of result classes: ``success`` is derived from ``status``.

    A result is successful when its status is one of the class's ``ANSWERS`` (by default only
    ``Status.SUCCESS``). Subclasses are frozen dataclasses with a ``status`` field. As
    :class:`gtcontrol._display.Displayable`s they define ``_summary_items`` (their key figures,
    for ``repr`` and ``_repr_html_``) and ``_draw`` (their figure, for ``.plot(ax)``).
    """

    __slots__ = ()
    #: The statuses that answer the question the result was computed for.
    ANSWERS: ClassVar[frozenset[Status]] = frozenset({Status.SUCCESS})
    status: Status

    @property
    def success(self) -> bool:
        """Whether ``status`` answers the question (one of the class's ``ANSWERS``)."""
        return self.status in self.ANSWERS


class OutcomeOrBlowup(Outcome):
    """A result for which a finite-time blow-up is an answer (simulations, blow-up, regimes)."""

    __slots__ = ()
    ANSWERS: ClassVar[frozenset[Status]] = frozenset({Status.SUCCESS, Status.BLOWUP})


class OutcomeOrInfeasible(Outcome):
    """A result for which a proof that no solution exists is an answer (equilibria)."""

    __slots__ = ()
    ANSWERS: ClassVar[frozenset[Status]] = frozenset({Status.SUCCESS, Status.INFEASIBLE})


@dataclass(frozen=True, eq=False)
class ResultFields:
    """The protocol's fields, defined once: ``status``, ``message``, ``stats`` (keyword-only).

    Result dataclasses inherit them (with an :class:`Outcome` base for ``success``); being
    keyword-only, they follow the class's own fields in ``__init__``.
    """

    status: Status = field(default=Status.SUCCESS, kw_only=True)
    message: str = field(default="", kw_only=True)
    stats: Mapping[str, Any] = field(default_factory=dict, kw_only=True)


#: Longest finite wall-clock limit (seconds, about 30 years): a longer one, ``inf`` or an integer
#: past the float range means no limit (``None``), so no deadline arithmetic or timed wait (whose
#: timeouts overflow near 1e10 s in ``threading``) ever sees it.
MAX_TIME_LIMIT = 1e9


def as_time_limit(value: Any, name: str = "time_limit") -> float | None:
    """Validate a wall-clock limit in seconds: ``None`` (no limit) or a positive number.

    The one check of every ``time_limit`` (and ``Budget``): bools, strings, NaN, zero and
    negative numbers are refused with an :class:`~gtcontrol.errors.InvalidParametersError`
    naming ``name``; ``inf``, an integer too large for a float and anything above
    :data:`MAX_TIME_LIMIT` mean no limit and give ``None``.

    Examples
    --------
    >>> as_time_limit(2), as_time_limit(float("inf")), as_time_limit(10**400)
    (2.0, None, None)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidParametersError(
            f"{name}: expected None or a positive number of seconds, got {shown(value)}"
        )
    try:
        x = float(value)
    except OverflowError:  # an int past the float range: positive means "no limit"
        x = math.inf if value > 0 else -math.inf
    if math.isnan(x) or x <= 0:
        raise InvalidParametersError(
            f"{name}: expected None or a positive number of seconds, got {shown(value)}"
        )
    if x > MAX_TIME_LIMIT:
        return None
    return HandedLimit(x, value.given) if isinstance(value, HandedLimit) else x


class HandedLimit(float):
    """A ``time_limit`` that a :class:`Budget` hands to a nested solver: its seconds (a float,
    used as any limit) and ``given``, the limit the user gave the outer call.

    The nested solver's :class:`Budget` keeps ``given`` as its :attr:`Budget.given_limit`, so
    its messages name the limit the user gave, never a remainder or a floor (``1e-06 s``).
    Scaling keeps it (``0.5 * limit`` is still a share of the same limit); other arithmetic
    gives a plain float.

    Examples
    --------
    >>> outer = Budget(2.0)
    >>> inner = Budget(outer.left_as_limit() / 3)
    >>> inner.time_limit < 1, inner.given_limit
    (True, 2.0)
    """

    given: float

    def __new__(cls, seconds: float, given: float) -> HandedLimit:
        self = super().__new__(cls, seconds)
        self.given = float(given)
        return self

    def __reduce__(self) -> tuple[type[HandedLimit], tuple[float, float]]:
        return (HandedLimit, (float(self), self.given))

    def _same(self, value: Any) -> Any:
        return HandedLimit(value, self.given) if type(value) is float else value

    def __mul__(self, other: Any) -> Any:
        return self._same(float.__mul__(self, other))

    def __rmul__(self, other: Any) -> Any:
        return self._same(float.__rmul__(self, other))

    def __truediv__(self, other: Any) -> Any:
        return self._same(float.__truediv__(self, other))


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message, cut when long; a huge integer by its size (its ``repr``
    would have thousands of digits, or raise past Python's digit limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about 10^{int(value.bit_length() * math.log10(2))}"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


#: Default cap on the right-hand-side evaluations of an integrator (its ``max_evals``).
DEFAULT_MAX_EVALS = 10**6
#: Largest ``max_evals`` an integrator accepts (larger caps are refused as absurd).
MAX_EVALS_LIMIT = 10**9


class BudgetExhausted(Exception):
    """Raised inside a solver loop when its :class:`Budget` runs out (never leaves gtcontrol)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: The events (with their reasons) that, once one is set, spend every :class:`Budget` built
#: while they are the context's: the cancellation of a run whose result is no longer needed, or
#: that its caller stopped waiting for (:func:`cancellable`). Nested blocks add to the chain.
_CANCEL: ContextVar[tuple[tuple[threading.Event, str], ...]] = ContextVar(
    "gtcontrol_cancel", default=()
)
_CANCELLED = "the run was cancelled: its result was no longer needed"


@contextmanager
def cancellable(event: threading.Event, reason: str = _CANCELLED) -> Iterator[None]:
    """Inside the block, every :class:`Budget` built is spent once ``event`` is set.

    For work started in the background (:func:`gtcontrol.stabilize`'s run of the given layer's
    tokens, in a thread; :func:`within`): setting ``event`` ends it at its next budget check,
    the way a time limit would, with ``reason`` (by default "cancelled"). An enclosing block's
    event spends the budgets of an inner block too.

    Examples
    --------
    >>> import threading
    >>> stop = threading.Event()
    >>> with cancellable(stop):
    ...     b = Budget(None)
    >>> b.exhausted
    False
    >>> stop.set(); b.exhausted, b.reason()
    (True, 'the run was cancelled: its result was no longer needed')
    """
    token = _CANCEL.set((*_CANCEL.get(), (event, reason)))
    try:
        yield
    finally:
        _CANCEL.reset(token)


class Budget:
    """A wall-clock deadline plus an evaluation counter with a finite cap.

    Parameters
    ----------
    time_limit
        Seconds from now, or ``None`` for no wall-clock limit.
    max_evals
        Finite cap on :meth:`tick` calls (right-hand-side evaluations, iterations), or ``None``.
    start
        When the time limit began (a ``time.perf_counter()`` value; ``None``: now), for work
        done before the budget could be built (reading the file that holds the limit).

    Attributes
    ----------
    time_limit
        The seconds of this budget (``None``: no limit).
    given_limit
        The limit the user gave: ``time_limit``, or for the budget of a nested solver the outer
        call's (a :class:`HandedLimit` from :meth:`left_as_limit`, :meth:`nested_limit`,
        :meth:`hand` or :meth:`sub`). Messages name it (:meth:`reason`).

    Examples
    --------
    >>> b = Budget(None, max_evals=2)
    >>> b.tick(); b.tick(); b.exhausted
    False
    >>> try:
    ...     b.tick()
    ... except BudgetExhausted as exc:
    ...     print(exc.reason)
    the cap of 2 evaluations was reached
    """

    __slots__ = ("_cancel", "_deadline", "count", "given_limit", "max_evals", "start", "time_limit")

    def __init__(
        self,
        time_limit: float | None = None,
        *,
        max_evals: int | None = None,
        start: float | None = None,
    ) -> None:
        self.time_limit = as_time_limit(time_limit)
        self.given_limit = (
            self.time_limit.given if isinstance(self.time_limit, HandedLimit) else self.time_limit
        )
        self.start = time.perf_counter() if start is None else float(start)
        self._deadline = math.inf if self.time_limit is None else self.start + self.time_limit
        self.max_evals = max_evals
        self.count = 0
        self._cancel = _CANCEL.get()

    @property
    def elapsed(self) -> float:
        """Seconds since the budget was created."""
        return time.perf_counter() - self.start

    def left_as_limit(self, floor: float = 1e-6) -> float | None:
        """What is left of the deadline as the ``time_limit`` of a nested solver: ``None``
        without one, else the seconds left but at least ``floor`` (a limit must be positive;
        the nested solver then stops at its first check), as a :class:`HandedLimit`."""
        left = self.remaining()
        return None if math.isinf(left) else self.hand(max(left, floor))

    def hand(self, seconds: float) -> float:
        """``seconds`` as the ``time_limit`` of a nested solver: a :class:`HandedLimit` that
        remembers :attr:`given_limit` (a plain float without one)."""
        given = self.given_limit
        return float(seconds) if given is None else HandedLimit(seconds, given)

    def remaining(self) -> float:
        """Seconds left before the deadline (``inf`` without a time limit, never negative)."""
        return max(self._deadline - time.perf_counter(), 0.0)

    @property
    def exhausted(self) -> bool:
        """Whether the deadline has passed, the evaluation cap was reached or the run was
        cancelled (:func:`cancellable`)."""
        if self.max_evals is not None and self.count > self.max_evals:
            return True
        if any(event.is_set() for event, _ in self._cancel):
            return True
        return time.perf_counter() > self._deadline

    def reason(self) -> str:
        """Why the budget is exhausted, in words (for ``message``)."""
        if self.max_evals is not None and self.count > self.max_evals:
            return f"the cap of {self.max_evals} evaluations was reached"
        for event, why in self._cancel:
            if event.is_set():
                return why
        return f"the time limit of {self.given_limit:g} s was reached"

    def tick(self, n: int = 1) -> None:
        """Count ``n`` evaluations; raise :class:`BudgetExhausted` when the budget is spent."""
        self.count += n
        if self.exhausted:
            raise BudgetExhausted(self.reason())

    def check(self) -> None:
        """Raise :class:`BudgetExhausted` if the budget is spent (does not count)."""
        if self.exhausted:
            raise BudgetExhausted(self.reason())

    def grace(self) -> float | None:
        """Seconds left for wrap-up work (verifying, measuring the best iterate).

        A solver honours its ``time_limit`` to within ``max(1 s, 10 %)``; the work that turns
        its best iterate into a verified result may run until half of that tolerance past the
        deadline, so a solver stopped by its deadline still returns a verified answer.
        ``None`` without a time limit; at least ``1e-9`` (a spent grace stops the next check).
        """
        if self.time_limit is None:
            return None
        slack = 0.5 * max(1.0, 0.1 * self.time_limit)
        return max(self._deadline + slack - time.perf_counter(), 1e-9)

    def nested_limit(self) -> float | None:
        """The ``time_limit`` to hand a nested public solver run as wrap-up work.

        The time left and half the grace (:meth:`grace`): the nested solver honours its own
        limit only to within its own ``max(1 s, 10 %)``, so handing it the whole grace let the
        two tolerances add up (``steer(time_limit=1e-9)`` at d = 128: up to 1.57 s, its verifying
        re-simulation then measuring into its own grace). The other half is kept for what
        follows the nested call. ``None`` without a time limit; at least ``1e-9``.
        """
        grace = self.grace()
        if grace is None:
            return None
        left = self.remaining()
        return self.hand(max(left + 0.5 * max(grace - left, 0.0), 1e-9))

    def sub(self, time_limit: float | None = None, *, max_evals: int | None = None) -> Budget:
        """A child budget that ends no later than this one (for per-start budgets)."""
        rem = self.remaining()
        limit = rem if time_limit is None else min(rem, time_limit)
        if math.isinf(limit):
            return Budget(None, max_evals=max_evals)
        seconds = max(limit, 1e-9)
        handed = seconds if self.given_limit is None else self.hand(seconds)
        return Budget(handed, max_evals=max_evals)


_R = TypeVar("_R")
#: The threads of work that :func:`within` gave up on (they may still run).
_ABANDONED: list[threading.Thread] = []


class WriteGate:
    """Whether the files of work that :func:`within` may give up on still land.

    A figure drawn in a thread is waited for only until the run's tolerance ends; the drawing
    cannot be interrupted, and if it is given up on it must not write into the output folder
    afterwards (the result would name a figure as missing that then appears). Work run under
    :meth:`open` writes through :func:`landed`; :meth:`close` shuts the gate and says whether
    a write landed before it did. The lock makes the two exclusive: a write either lands before
    the gate closes or never.

    Examples
    --------
    >>> gate = WriteGate()
    >>> with gate.open():
    ...     landed(lambda: None)
    True
    >>> gate.close()
    True
    >>> with gate.open():  # closed: the write is dropped
    ...     landed(lambda: None)
    False
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._wrote = False

    @contextmanager
    def open(self) -> Iterator[None]:
        """Inside the block (and in threads started there by :func:`within`), writes go
        through this gate."""
        token = _GATE.set(self)
        try:
            yield
        finally:
            _GATE.reset(token)

    def write(self, write: Callable[[], object]) -> bool:
        """``write()`` unless the gate is closed; whether it ran."""
        with self._lock:
            if self._closed:
                return False
            write()
            self._wrote = True
            return True

    def close(self) -> bool:
        """Shut the gate (later writes are dropped); whether a write landed before."""
        with self._lock:
            self._closed = True
            return self._wrote


_GATE: ContextVar[WriteGate | None] = ContextVar("gtcontrol_write_gate", default=None)


def landed(write: Callable[[], object]) -> bool:
    """``write()`` (the last, short step of writing a file) through the context's
    :class:`WriteGate`, or at once outside one; whether it ran."""
    gate = _GATE.get()
    if gate is None:
        write()
        return True
    return gate.write(write)


def abandoned_work() -> bool:
    """Whether work that :func:`within` gave up on still runs in this process (a command
    ending then exits at once: the interpreter's exit would stop that thread in the middle of
    torch's C code, which aborts the process)."""
    _ABANDONED[:] = [t for t in _ABANDONED if t.is_alive()]
    return bool(_ABANDONED)


@atexit.register
def _finish_abandoned_work() -> None:
    """At the exit of a process that gave up on work, let it end first (at most a minute per
    thread): a daemon thread stopped inside torch's C code aborts the interpreter's exit."""
    for thread in list(_ABANDONED):
        thread.join(timeout=60.0)


def import_fits(budget: Budget, module: str, seconds: float) -> None:
    """Raise :class:`BudgetExhausted` when ``module`` is not imported yet and importing it
    (``seconds`` in a fresh process) would not fit in what is left of ``budget``.

    For work run by :func:`within`: an import whose C extension initializes for a second holds
    the interpreter, so the caller waiting in another thread could not end in time meanwhile;
    an import that cannot fit is not begun.
    """
    if module in sys.modules:
        return
    left = budget.remaining()
    if left < seconds:
        raise BudgetExhausted(
            f"importing {module} (about {seconds:g} s in a fresh process) would not fit in the "
            f"{left:.2g} s left of the time limit of {budget.given_limit:g} s"
        )


def within(
    budget: Budget, work: Callable[[], _R], *, wait: float | None = None, settle: float = 0.0
) -> _R | None:
    """``work()`` if it returns in time for ``budget``, else ``None`` (the caller gave up on it).

    For work that no budget check can interrupt: importing torch and transformers (2–8 s in a
    fresh process), loading or building a model, a forward pass; or work whose own overrun the
    caller cannot afford. Without a time limit it runs here. With one it runs in a daemon
    thread, waited for ``wait`` seconds: by default until the deadline plus a quarter of the
    tolerance ``max(1 s, 10 %)`` (:meth:`Budget.nested_limit`: a model already loaded still
    returns for a spent budget). Then its budgets are spent (:func:`cancellable`, with the
    reason of ``budget``'s time limit) and it is waited for ``settle`` seconds more, time for a
    budget-aware loop to return what it has. Work given up on finishes in the background and
    its result or error is dropped; an error raised in time is raised here.

    Examples
    --------
    >>> import time
    >>> within(Budget(5.0), lambda: 42)
    42
    >>> within(Budget(1e-3), lambda: time.sleep(2.0)) is None  # given up on after 0.25 s
    True
    """
    if budget.time_limit is None:
        return work()
    stop = threading.Event()
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        with cancellable(stop, f"the time limit of {budget.given_limit:g} s was reached"):
            try:
                box.append((True, work()))
            except BaseException as exc:  # handed to the caller if it still waits
                box.append((False, exc))

    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(run,), name="gtcontrol-within", daemon=True
    )
    thread.start()
    thread.join(budget.nested_limit() if wait is None else max(wait, 0.0))
    if not box and settle > 0:
        stop.set()
        thread.join(settle)
    if not box:
        stop.set()
        _ABANDONED.append(thread)
        return None
    done, value = box[0]
    if not done:
        raise value
    return value  # type: ignore[no-any-return]
