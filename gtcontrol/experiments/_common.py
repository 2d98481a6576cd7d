"""Validation, budget plumbing and shared fields of the experiments (no public names).

Every experiment validates its keyword-only options at the call, turns ``time_limit`` into one
:class:`~gtcontrol._status.Budget` and hands what is left of it to the experiments it runs, so
that running out anywhere returns what is done with ``Status.BUDGET_EXHAUSTED``. The experiments
on synthetic Gaussian tokens take ``d, n_tokens, seed`` (checked by :func:`check_sizes`, described
once by :data:`SIZES_PARAMETERS`) and record them in a result deriving :class:`TokenSizes`
(:data:`SIZES_ATTRIBUTES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._docstring import fill
from .._linalg import FloatArray
from .._status import Budget, Status
from .._validation import as_positive_int, as_seed
from ..errors import InvalidParametersError

__all__ = [
    "SIZES_ATTRIBUTES",
    "SIZES_PARAMETERS",
    "TokenSizes",
    "check_sizes",
    "first_failure",
    "random_spd",
    "stop_reason",
]


#: A cautious flop rate of one loaded CPU, for estimating work that no budget check can
#: interrupt before starting it (a forward pass, a whitening).
CAUTIOUS_FLOPS = 2e10


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


#: The docstring entry of the ``d, n_tokens`` parameters checked by :func:`check_sizes` (for
#: :func:`gtcontrol._docstring.fill`).
SIZES_PARAMETERS = """\
d, n_tokens
    Token dimension and number of tokens (``n_tokens ≥ 2d + 2``)."""


def check_sizes(d: Any, n_tokens: Any, seed: Any) -> tuple[int, int, int]:
    """Validate a dimension, a number of tokens (``≥ 2d + 2``) and a seed."""
    dd = as_positive_int("d", d, maximum=1000)
    n = as_positive_int("n_tokens", n_tokens, maximum=1_000_000)
    if n < 2 * dd + 2:
        raise InvalidParametersError(f"n_tokens: expected at least 2d + 2 = {2 * dd + 2}, got {n}")
    return dd, n, as_seed("seed", seed)


def random_spd(rng: np.random.Generator, d: int, lo: float, hi: float) -> FloatArray:
    """A random SPD matrix with eigenvalues uniform in ``[lo, hi]`` (Haar eigenvectors)."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return np.asarray((q * rng.uniform(lo, hi, d)) @ q.T)


#: The docstring entry of the fields of :class:`TokenSizes`, for the results deriving it.
SIZES_ATTRIBUTES = """\
d, n_tokens, seed
    Dimension, number of tokens and seed."""


@fill(sizes=SIZES_ATTRIBUTES)
@dataclass(frozen=True, eq=False)
class TokenSizes:
    """The sizes a result on synthetic Gaussian tokens records (its first fields).

    Attributes
    ----------
    %(sizes)s
    """

    d: int
    n_tokens: int
    seed: int
