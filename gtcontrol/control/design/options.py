"""Validation and defaults of the keyword options of :func:`design_mean_matching`.

:class:`_DesignOptions` is the private, frozen holder the keywords are validated into.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from ..._validation import (
    as_choice,
    as_nonnegative_float,
    as_positive_float,
    as_positive_int,
    as_seed,
)
from ...errors import InvalidParametersError
from .robustness import RobustnessCheck

__all__ = ["_DesignOptions"]

#: Finite caps on user-set iteration counts (no default call can run unbounded).
_MAX_ITER_CAP = 1_000_000
_MAX_TOKENS = 10**6


@dataclass(frozen=True, kw_only=True)
class _DesignOptions:
    """Options of :func:`design_mean_matching` (validated when built; private).

    The fields are the keywords of the same names of :func:`design_mean_matching`, documented
    there (one home for their meaning).
    """

    require_global: bool | None = None
    V_structure: str = "scalar"
    max_condition: float = 100.0
    tol: float = 1e-10
    max_iter: int = 3000
    rate_rtol: float = 1e-6
    symbolic: str = "SX"
    ipopt_options: Mapping[str, Any] = field(default_factory=dict)
    robustness: bool | RobustnessCheck | None = True
    seed: int = 0
    min_ess: float | None = 0.5
    ess_n_std: float = 3.0
    token_check: int | None = None

    def __post_init__(self) -> None:
        if self.require_global not in (None, True, False):
            raise InvalidParametersError(
                f"require_global: expected None, True or False, got {self.require_global!r}"
            )
        as_choice("V_structure", self.V_structure, ("scalar", "full"))
        if as_positive_float("max_condition", self.max_condition) < 1.0:
            raise InvalidParametersError(
                f"max_condition: expected a number ≥ 1, got {self.max_condition!r}"
            )
        if not as_positive_float("tol", self.tol) < 1e-3:
            raise InvalidParametersError(f"tol: expected a number < 1e-3, got {self.tol!r}")
        as_positive_int("max_iter", self.max_iter, maximum=_MAX_ITER_CAP)
        if not as_positive_float("rate_rtol", self.rate_rtol) < 0.1:
            raise InvalidParametersError(
                f"rate_rtol: expected a number < 0.1, got {self.rate_rtol!r}"
            )
        as_choice("symbolic", self.symbolic, ("SX", "MX"))
        given = self.ipopt_options
        if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
            raise InvalidParametersError(
                f"ipopt_options: expected a mapping of IPOPT option names to values, got {given!r}"
            )
        object.__setattr__(self, "ipopt_options", MappingProxyType(dict(given)))
        check = self.robustness
        if isinstance(check, (bool, np.bool_)):
            check = RobustnessCheck() if check else None
        elif not isinstance(check, RobustnessCheck):
            raise InvalidParametersError(
                f"robustness: expected a bool or a RobustnessCheck, got {self.robustness!r}"
            )
        object.__setattr__(self, "robustness", check)  # the check to run, or None
        as_seed("seed", self.seed)
        if self.min_ess is not None and not 0.0 < as_positive_float("min_ess", self.min_ess) < 1.0:
            raise InvalidParametersError(
                f"min_ess: expected None or a number in (0, 1), got {self.min_ess!r}"
            )
        as_nonnegative_float("ess_n_std", self.ess_n_std)
        if self.token_check is not None and (
            as_positive_int("token_check", self.token_check, maximum=_MAX_TOKENS) < 2
        ):
            raise InvalidParametersError(
                f"token_check: expected None or a number of tokens ≥ 2, got {self.token_check!r}"
            )
