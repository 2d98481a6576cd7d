"""The one result protocol of gtcontrol: :class:`Status`, :class:`Result` and :class:`Budget`.

Every public result object carries ``.success`` (bool), ``.status`` (a :class:`Status`),
``.message`` (str) and ``.stats`` (a mapping of solver statistics). A finite-time blow-up is a
result with ``Status.BLOWUP``, never an exception; running out of time or of the iteration cap
is ``Status.BUDGET_EXHAUSTED`` with the best iterate; only bad input raises.

Every solver entry point takes a keyword-only ``time_limit`` (seconds, ``None`` for no
wall-clock limit) and turns it into a :class:`Budget`, which its loops consult.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ._display import Displayable
from .errors import InvalidParametersError, Status

__all__ = [
    "DEFAULT_MAX_EVALS",
    "MAX_EVALS_LIMIT",
    "MAX_TIME_LIMIT",
    "Budget",
    "BudgetExhausted",
    "Outcome",
    "OutcomeOrBlowup",
    "OutcomeOrInfeasible",
    "Result",
    "ResultFields",
    "Status",
    "as_time_limit",
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
            f"{name}: expected None or a positive number of seconds, got {_shown(value)}"
        )
    try:
        x = float(value)
    except OverflowError:  # an int past the float range: positive means "no limit"
        x = math.inf if value > 0 else -math.inf
    if math.isnan(x) or x <= 0:
        raise InvalidParametersError(
            f"{name}: expected None or a positive number of seconds, got {_shown(value)}"
        )
    return None if x > MAX_TIME_LIMIT else x


def _shown(value: Any, limit: int = 80) -> str:
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


#: An event that, once set, spends every :class:`Budget` built while it is the context's: the
#: cancellation of a run whose result is no longer needed (:func:`cancellable`).
_CANCEL: ContextVar[threading.Event | None] = ContextVar("gtcontrol_cancel", default=None)


@contextmanager
def cancellable(event: threading.Event) -> Iterator[None]:
    """Inside the block, every :class:`Budget` built is spent once ``event`` is set.

    For work started in the background (:func:`gtcontrol.stabilize`'s run of the given layer's
    tokens, in a thread): setting ``event`` ends it at its next budget check, the way a time
    limit would, with the reason "cancelled".

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
    token = _CANCEL.set(event)
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

    __slots__ = ("_cancel", "_deadline", "count", "max_evals", "start", "time_limit")

    def __init__(
        self,
        time_limit: float | None = None,
        *,
        max_evals: int | None = None,
        start: float | None = None,
    ) -> None:
        self.time_limit = as_time_limit(time_limit)
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
        the nested solver then stops at its first check)."""
        left = self.remaining()
        return None if math.isinf(left) else max(left, floor)

    def remaining(self) -> float:
        """Seconds left before the deadline (``inf`` without a time limit, never negative)."""
        return max(self._deadline - time.perf_counter(), 0.0)

    @property
    def exhausted(self) -> bool:
        """Whether the deadline has passed, the evaluation cap was reached or the run was
        cancelled (:func:`cancellable`)."""
        if self.max_evals is not None and self.count > self.max_evals:
            return True
        if self._cancel is not None and self._cancel.is_set():
            return True
        return time.perf_counter() > self._deadline

    def reason(self) -> str:
        """Why the budget is exhausted, in words (for ``message``)."""
        if self.max_evals is not None and self.count > self.max_evals:
            return f"the cap of {self.max_evals} evaluations was reached"
        if self._cancel is not None and self._cancel.is_set():
            return "the run was cancelled: its result was no longer needed"
        return f"the time limit of {self.time_limit:g} s was reached"

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
        return max(left + 0.5 * max(grace - left, 0.0), 1e-9)

    def sub(self, time_limit: float | None = None, *, max_evals: int | None = None) -> Budget:
        """A child budget that ends no later than this one (for per-start budgets)."""
        rem = self.remaining()
        limit = rem if time_limit is None else min(rem, time_limit)
        return Budget(None if math.isinf(limit) else max(limit, 1e-9), max_evals=max_evals)
