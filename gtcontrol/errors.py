"""Exception hierarchy of gtcontrol.

Every error that gtcontrol raises on purpose derives from :class:`GTControlError`.
Bad input raises a ``ValueError`` subclass whose message names the offending input and what
was expected; numerical failures raise :class:`SolverError`, which carries a status and stats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "DesignFileError",
    "GTControlError",
    "GTControlWarning",
    "InvalidGaussianError",
    "InvalidParametersError",
    "SolverError",
    "UnreachableTargetError",
]


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
        A short machine-readable status (e.g. ``"max_iter"``, ``"singular"``).
    stats
        Solver statistics at the point of failure (iterations, residuals, times).
    """

    def __init__(
        self, message: str, *, status: str = "failed", stats: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.stats: dict[str, Any] = dict(stats or {})


class GTControlWarning(UserWarning):
    """Warnings issued by gtcontrol (the test suite turns them into errors)."""
