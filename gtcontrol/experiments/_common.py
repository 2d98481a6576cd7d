"""Validation and budget plumbing shared by the experiments (no public names).

Every experiment validates its keyword-only options at the call, turns ``time_limit`` into one
:class:`~gtcontrol._status.Budget` and hands what is left of it to the experiments it runs, so
that running out anywhere returns what is done with ``Status.BUDGET_EXHAUSTED``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._status import Budget, Status
from .._validation import as_positive_int
from ..errors import InvalidParametersError

__all__ = ["as_seed", "check_sizes", "first_failure", "random_spd", "stop_reason", "time_left"]


def as_seed(value: Any, name: str = "seed") -> int:
    """Validate a non-negative integer seed (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidParametersError(f"{name}: expected a non-negative integer, got {value!r}")
    return int(value)


def time_left(budget: Budget) -> float | None:
    """The ``time_limit`` to give a sub-experiment: what is left of ``budget`` (``None``: none)."""
    if budget.time_limit is None:
        return None
    return max(budget.remaining(), 1e-9)


def stop_reason(budget: Budget) -> str:
    """Why a run stopped early: the budget's reason, or an inner cap if the budget is not spent."""
    if budget.exhausted:
        return budget.reason()
    return "an inner step or evaluation cap was reached"


def first_failure(statuses: Iterable[Status]) -> Status:
    """The first status that is not ``SUCCESS`` (``SUCCESS`` when there is none)."""
    for s in statuses:
        if s is not Status.SUCCESS:
            return s
    return Status.SUCCESS


def check_sizes(d: Any, n_tokens: Any, seed: Any) -> tuple[int, int, int]:
    """Validate a dimension, a number of tokens (``≥ 2d + 2``) and a seed."""
    dd = as_positive_int("d", d, maximum=1000)
    n = as_positive_int("n_tokens", n_tokens, maximum=1_000_000)
    if n < 2 * dd + 2:
        raise InvalidParametersError(f"n_tokens: expected at least 2d + 2 = {2 * dd + 2}, got {n}")
    return dd, n, as_seed(seed)


def random_spd(rng: np.random.Generator, d: int, lo: float, hi: float) -> FloatArray:
    """A random SPD matrix with eigenvalues uniform in ``[lo, hi]`` (Haar eigenvectors)."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return np.asarray((q * rng.uniform(lo, hi, d)) @ q.T)
