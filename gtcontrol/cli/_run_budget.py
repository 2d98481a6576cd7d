"""The ``time_limit`` of one run of a design file: one budget for all the run does.

A design's ``time_limit`` bounds the whole run (docs/designs.md): loading a model, the solver
calls, the verifications, the summaries of ``result.json``, the figures and the writing of the
folder. A run ends within ``max(1 s, 10 %)`` of it (docs/architecture.md, "Budgets").
:class:`RunBudget` holds the run's :class:`~gtcontrol._status.Budget` and shares it out:

- each solver call gets what is left before the deadline, less a reserve for the figures and
  the writing still to come (:meth:`RunBudget.solver_limit`);
- a figure is drawn only when its estimated cost (the last figure's measured cost, plus the
  import of matplotlib in a fresh process) fits in what is left of the run's tolerance, and
  in a thread waited for only while the tolerance leaves time to write: a drawing that runs
  late on a loaded machine is given up on and its file never lands
  (:meth:`RunBudget.draw`, :class:`~gtcontrol._status.WriteGate`); summaries computed from
  arrays (eigenvalues of every recorded covariance) stop the same way
  (:meth:`RunBudget.affords`);
- work that no check can interrupt (importing torch and transformers, loading a model, a
  forward pass) runs in a thread that the run stops waiting for at its deadline
  (:meth:`RunBudget.load`, :func:`gtcontrol._status.within`);
- what was left out is recorded: the run's status is then ``budget_exhausted`` (a run that
  reached its limit writes its best result, docs/designs.md), ``outputs.skipped`` and
  ``summary.skipped`` name what is missing (:meth:`RunBudget.finish`).

The limits handed to the solvers remember the design's (:class:`~gtcontrol._status.HandedLimit`),
so that their messages name the ``time_limit`` the user gave, not what was left of it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .._linalg import FloatArray
from .._status import Budget, BudgetExhausted, Status, WriteGate, within

__all__ = [
    "CONTROL_IMPORT_SECONDS",
    "EXPERIMENTS_IMPORT_SECONDS",
    "RunBudget",
    "import_seconds",
    "stack_eigenvalues",
]

#: Seconds kept for writing ``result.json`` and ``result.npz`` (compressed arrays).
WRITE_SECONDS = 0.25
#: Seconds to import matplotlib and gtcontrol.plotting in a fresh process (1.5–2.3 s measured
#: on two loaded cores; 0.6 s on an idle one).
IMPORT_SECONDS = 2.0
#: Estimated seconds of one figure (drawing and PNG) per panel, updated by every figure drawn:
#: 0.3 s on an idle core, 1.8 s measured on two loaded ones (a 7-panel figure of the
#: experiment's report: 3.7 s).
_FIGURE_SECONDS = [0.6]
#: Estimated seconds of ``eigvalsh`` per ``d³`` (refined by each chunk computed).
_EIG_SECONDS_PER_D3 = 2e-9
#: Statuses that answer the question; a run that left something out is ``BUDGET_EXHAUSTED``.
_ANSWERS = (Status.SUCCESS, Status.BLOWUP)
_R = TypeVar("_R")
#: Held while a figure draws: matplotlib draws one figure at a time, a late one included.
_DRAWING = threading.Lock()


#: Seconds to import gtcontrol.experiments in a fresh process (scipy.stats, the report's
#: figures: 0.7–1.1 s measured on two loaded cores), before torch.
EXPERIMENTS_IMPORT_SECONDS = 1.0
#: Seconds to import python-control in a fresh process (it imports scipy.signal and pyplot:
#: 3.1 s measured on two loaded cores).
CONTROL_IMPORT_SECONDS = 3.0


def import_seconds(module: str, cold: float) -> float:
    """``cold`` seconds when ``module`` is not imported yet, else 0."""
    return 0.0 if module in sys.modules else cold


def figure_seconds(n: int = 1) -> float:
    """Estimated seconds to draw ``n`` figures (or panels) now (the import of matplotlib
    included once)."""
    if n <= 0:
        return 0.0
    return import_seconds("gtcontrol.plotting.core", IMPORT_SECONDS) + n * _FIGURE_SECONDS[0]


class RunBudget:
    """The budget of one run: its deadline, shared by solver calls, summaries and figures.

    Parameters
    ----------
    time_limit
        The design's ``time_limit`` in seconds (``None``: no limit).
    start
        When the run began (``time.perf_counter()``; ``None``: now): the design's
        :attr:`~gtcontrol.cli.schema.Design.started`, so that reading the file counts.

    Examples
    --------
    A run that began a second ago with a millisecond's limit draws nothing and says so:

    >>> import time
    >>> run = RunBudget(1e-3, start=time.perf_counter() - 1.0)
    >>> run.draw("moments.png", lambda: None, panels=2) or run.skipped
    ['figure moments.png']
    >>> run.status(Status.SUCCESS)
    <Status.BUDGET_EXHAUSTED: 'budget_exhausted'>
    """

    def __init__(self, time_limit: float | None, start: float | None = None) -> None:
        self.budget = Budget(time_limit, start=start)
        #: What the run did not produce within its time limit (in words).
        self.skipped: list[str] = []

    def left(self) -> float:
        """Seconds left before the deadline (at least a millisecond: a spent budget returns at
        once); for the last solver call of a run that draws nothing."""
        return self.budget.hand(max(self.budget.remaining(), 1e-3))

    def solver_limit(self, figures: int = 0) -> float:
        """Seconds for the next solver call: what is left before the deadline, less the
        estimated cost of ``figures`` figures and of the writing (at most 30 % of the limit)."""
        limit = self.budget.time_limit
        if limit is None:
            return self.left()
        reserve = min(figure_seconds(figures) + WRITE_SECONDS, 0.3 * limit)
        return self.budget.hand(max(self.budget.remaining() - reserve, 1e-3))

    def load(self, what: str, work: Callable[[], _R]) -> _R | None:
        """``work()`` (importing torch, loading a model, a forward pass: nothing a budget check
        can interrupt) if it finishes before the deadline (:func:`gtcontrol._status.within`);
        else ``None`` and ``what`` is recorded as left out (the work finishes in the
        background, unused). Work that ends in the tolerance past the deadline is not used
        either: what would follow it has no time left."""
        try:
            value = within(self.budget, work, wait=self.budget.remaining())
        except BudgetExhausted as exc:  # an import or a load not begun: it would not fit
            self.skip(f"{what} ({exc.reason})")
            return None
        if value is None or self.budget.exhausted:
            self.skip(what)
            return None
        return value

    def compute(self, what: str, work: Callable[[], _R]) -> _R | None:
        """``work()`` (a solver handed a limit by :meth:`solver_limit`) in a thread waited for
        until a quarter of the tolerance ``max(1 s, 10 %)`` past the deadline; then its
        budgets are spent and it gets another quarter to return what it has
        (:func:`gtcontrol._status.within`). ``None`` and ``what`` recorded as left out when it
        does not: the run ends in time whatever the solver's own overrun."""
        limit = self.budget.time_limit
        if limit is None:
            return work()
        value = within(self.budget, work, settle=0.25 * max(1.0, 0.1 * limit))
        if value is None:
            self.skip(what)
        return value

    def affords(self, seconds: float) -> bool:
        """Whether work estimated at ``seconds`` (and the writing after it) still ends within
        the run's tolerance: at most half of ``max(1 s, 10 %)`` past the deadline, as the
        wrap-up of a solver (:meth:`gtcontrol._status.Budget.grace`)."""
        grace = self.budget.grace()
        return grace is None or seconds + WRITE_SECONDS <= grace

    def draw(self, name: str, draw: Callable[[], Any], panels: int) -> bool:
        """Draw the figure ``name`` (of ``panels`` axes) with ``draw()`` if it fits (see the
        module docstring); return whether it was drawn (if not, it is recorded in
        :attr:`skipped`). ``panels`` is required: a two-panel figure estimated as one ran
        1.1 s past a 2 s limit on a loaded machine."""
        panels = max(int(panels), 1)
        if not self.affords(figure_seconds(panels)):
            self.skip(f"figure {name}")
            return False
        warm = "gtcontrol.plotting.core" in sys.modules
        clock = time.perf_counter()
        if not self._drawn_in_time(draw):
            self.skip(f"figure {name} (its drawing ran past the time limit)")
            return False
        if warm:  # a cold figure also measured the import
            spent = (time.perf_counter() - clock) / panels
            _FIGURE_SECONDS[0] = max(spent, 0.7 * _FIGURE_SECONDS[0] + 0.3 * spent, 0.05)
        return True

    def _drawn_in_time(self, draw: Callable[[], Any]) -> bool:
        """``draw()`` in a thread waited for while the run's tolerance leaves time to write
        (drawing cannot be interrupted: under load a figure estimated at 0.3 s took 1.5 s);
        a drawing given up on writes nothing afterwards (:class:`WriteGate`)."""
        grace = self.budget.grace()
        if grace is None:
            draw()
            return True
        gate = WriteGate()

        def drawing() -> bool:
            with _DRAWING:  # one figure at a time, also beside one given up on
                draw()
            return True

        with gate.open():
            done = within(self.budget, drawing, wait=max(grace - WRITE_SECONDS, 0.0))
        return gate.close() or done is True

    def skip(self, what: str) -> None:
        """Record that ``what`` was not produced within the time limit."""
        self.skipped.append(what)

    def status(self, status: Status) -> Status:
        """The run's status: ``status``, or ``BUDGET_EXHAUSTED`` for an answer (``SUCCESS``,
        ``BLOWUP``) of a run that left something out."""
        return Status.BUDGET_EXHAUSTED if self.skipped and status in _ANSWERS else status

    def message(self) -> str:
        """What was left out, in words (empty when nothing was)."""
        if not self.skipped:
            return ""
        limit = self.budget.time_limit
        return (
            f"not produced within the time limit of {limit:g} s: {', '.join(self.skipped)}"
            if limit is not None
            else f"not produced: {', '.join(self.skipped)}"
        )

    def finish(self, record: dict[str, Any]) -> dict[str, Any]:
        """The runner's record with the run's status; what was left out in ``outputs.skipped``
        and ``summary.skipped``."""
        if not self.skipped:
            return record
        record["status"] = self.status(record["status"])
        record["outputs"]["skipped"] = list(self.skipped)
        record["summary"]["skipped"] = self.message()
        return record


def stack_eigenvalues(stack: FloatArray, run: RunBudget | None, what: str) -> FloatArray:
    """Ascending eigenvalues of every symmetric matrix of an ``(n, d, d)`` stack.

    With a ``run``, in chunks of about 50 ms while the run affords them; the rows not computed
    are NaN and recorded as ``what`` in :attr:`RunBudget.skipped` (at d = 1024, 401 recorded
    covariances take minutes).
    """
    stack = np.asarray(stack, dtype=float)
    if run is None or stack.shape[0] == 0:
        return np.asarray(np.linalg.eigvalsh(stack), dtype=float)
    n, d = stack.shape[0], stack.shape[-1]
    out = np.full((n, d), np.nan)
    per = _EIG_SECONDS_PER_D3 * d**3 + 2e-6
    i = 0
    while i < n:
        k = int(max(1, min(n - i, 0.05 / per)))
        if not run.affords(k * per):
            run.skip(f"{what} ({n - i} of {n})")
            break
        clock = time.perf_counter()
        out[i : i + k] = np.linalg.eigvalsh(stack[i : i + k])
        per = max((time.perf_counter() - clock) / k, 1e-7)
        i += k
    return out
