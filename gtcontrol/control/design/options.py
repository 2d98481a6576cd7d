"""Validation and defaults of the keyword options of :func:`design_mean_matching`.

:class:`_DesignOptions` is the private, frozen holder the keywords are validated into. The
former public ``DesignOptions`` (passed as ``options=``) is accepted for one release with a
:class:`DeprecationWarning`.
"""

from __future__ import annotations

import dataclasses
import warnings
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

__all__ = ["_DesignOptions", "resolve_options"]

#: Finite caps on user-set iteration counts (no default call can run unbounded).
_MAX_ITER_CAP = 1_000_000
_MAX_DIRECTIONS = 10_000
_MAX_SAMPLES = 100_000
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
    ipopt: Mapping[str, Any] = field(default_factory=dict)
    robustness: bool = True
    robustness_directions: int = 8
    robustness_samples: int = 16
    robustness_max: float = 1.0
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
        if not isinstance(self.ipopt, Mapping) or not all(isinstance(k, str) for k in self.ipopt):
            raise InvalidParametersError(
                f"ipopt: expected a mapping of IPOPT option names to values, got {self.ipopt!r}"
            )
        object.__setattr__(self, "ipopt", MappingProxyType(dict(self.ipopt)))
        if not isinstance(self.robustness, (bool, np.bool_)):
            raise InvalidParametersError(f"robustness: expected a bool, got {self.robustness!r}")
        as_positive_int(
            "robustness_directions", self.robustness_directions, maximum=_MAX_DIRECTIONS
        )
        as_positive_int("robustness_samples", self.robustness_samples, maximum=_MAX_SAMPLES)
        as_positive_float("robustness_max", self.robustness_max)
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


_FIELDS = tuple(f.name for f in dataclasses.fields(_DesignOptions))
_DEFAULT_OPTIONS = _DesignOptions()
_DEFAULTS: dict[str, Any] = {k: getattr(_DEFAULT_OPTIONS, k) for k in _FIELDS}


def resolve_options(options: Any, given: Mapping[str, Any]) -> _DesignOptions:
    """Validate the keyword options ``given``; map a deprecated ``options=`` object onto them.

    ``given`` holds every option keyword of :func:`design_mean_matching` (``ipopt=None``
    meaning no extra options). Passing ``options=`` together with a non-default keyword is an
    error (which one would win is not obvious).
    """
    kw = {k: ({} if k == "ipopt" and v is None else v) for k, v in given.items()}
    if options is None:
        return _DesignOptions(**kw)
    warnings.warn(
        "design_mean_matching(options=DesignOptions(...)) is deprecated and will be removed in "
        "the next release; pass the options as keyword arguments instead: "
        f"design_mean_matching(..., {', '.join(k + '=...' for k in _FIELDS)})",
        DeprecationWarning,
        stacklevel=3,
    )
    if not isinstance(options, _DesignOptions):
        raise InvalidParametersError(
            f"options: expected a DesignOptions, got {type(options).__name__}"
        )
    clash = [k for k in _FIELDS if k in kw and _differs(kw[k], _DEFAULTS[k])]
    if clash:
        raise InvalidParametersError(
            f"options: pass either options= (deprecated) or the keywords, not both (got "
            f"options= and {', '.join(clash)}=)"
        )
    return options


def _differs(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except (TypeError, ValueError):
        return True
