"""How a computation of gtcontrol ends: the :class:`Status` codes and the exception hierarchy.

Every result carries a :class:`Status` (the protocol of :mod:`gtcontrol._status`, which
re-exports it); every error that gtcontrol raises on purpose derives from
:class:`GTControlError`. Bad input raises a ``ValueError`` subclass whose message names the
offending input and what was expected; the few numerical failures that cannot be a result raise
:class:`SolverError`, which carries a :class:`Status` and stats. ``Status`` lives here, beside
the exceptions, so that both share it without an import cycle.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DesignFileError",
    "GTControlError",
    "InvalidGaussianError",
    "InvalidParametersError",
    "SolverError",
    "Status",
    "UnreachableTargetError",
]


class Status(enum.StrEnum):
    """How a computation ended (one enum for every result of gtcontrol).

    Members compare equal to their lower-case string values (``Status.BLOWUP == "blowup"``).

    Attributes
    ----------
    SUCCESS
        The question was answered to the requested tolerance.
    BLOWUP
        The covariance diverges in finite time; the result carries ``blowup_time``. For
        simulations and blow-up/regime analyses this *is* the answer (``success`` is true).
    BUDGET_EXHAUSTED
        The ``time_limit`` or a finite iteration/step cap ran out; the result holds the best
        iterate reached so far.
    INFEASIBLE
        A computation proved that the question has no solution (e.g. no positive-definite
        equilibrium, gains that cannot reach a rate, a certificate whose condition fails);
        ``message`` says which condition fails and why that is a proof. Never the outcome of a
        search that merely gave up. A request that is impossible on its face (an unreachable
        target, a design whose fixed parts contradict the rate) is bad input instead: it
        raises :class:`UnreachableTargetError` with the reason before any solve.
    NOT_FOUND
        A search ended without finding a solution but cannot prove that none exists (e.g.
        deflated Newton from many starts found no positive-definite equilibrium, or IPOPT, a
        local method, stopped infeasible);
        ``message`` and ``stats`` say how hard it looked: the starts and why each ended.
    OVERFLOW
        The state left the floating-point range without a finite-time singularity (e.g. fast
        exponential growth, or non-finite tokens); the result holds the last finite state.
    FAILED
        A numerical method failed for another reason, given in ``message``.
    """

    SUCCESS = "success"
    BLOWUP = "blowup"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INFEASIBLE = "infeasible"
    NOT_FOUND = "not_found"
    OVERFLOW = "overflow"
    FAILED = "failed"


class GTControlError(Exception):
    """Base class of every error raised by gtcontrol."""


class InvalidGaussianError(GTControlError, ValueError):
    """A mean or covariance is malformed (shape, NaN, asymmetry, indefiniteness)."""


class InvalidParametersError(GTControlError, ValueError):
    """Layer parameters, schedules or options are malformed or inconsistent."""


class DesignFileError(GTControlError, ValueError):
    """A design file is missing, unreadable or does not follow the schema."""


class UnreachableTargetError(GTControlError, ValueError):
    """The requested target cannot be reached; the message says why."""


class SolverError(GTControlError, RuntimeError):
    """A numerical solver failed.

    Parameters
    ----------
    message
        What failed and why.
    status
        The :class:`Status` of the failure (``Status.FAILED`` by default; a string is
        accepted only when it is a member's value). What failed in detail is in ``message``
        and, machine-readable, in ``stats["cause"]`` where the raiser gives one (e.g.
        ``"singular_lyapunov"``, ``"slycot"``).
    stats
        Solver statistics at the point of failure (iterations, residuals, times).

    Raises
    ------
    ValueError
        If ``status`` is not a :class:`Status`.

    Examples
    --------
    >>> from gtcontrol import SolverError, Status
    >>> err = SolverError("GMRES stalled", stats={"cause": "singular"})
    >>> err.status, err.stats["cause"]
    (<Status.FAILED: 'failed'>, 'singular')
    """

    def __init__(
        self,
        message: str,
        *,
        status: Status | str = Status.FAILED,
        stats: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status: Status = Status(status)
        self.stats: dict[str, Any] = dict(stats or {})
