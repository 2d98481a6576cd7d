"""Private validation of user input at the API boundary (imports only private helpers, errors).

Every check names the offending input and says what was expected, and raises a
:class:`~gtcontrol.errors.GTControlError` subclass, never a raw numpy/Python exception.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from ._linalg import FloatArray
from ._status import as_time_limit
from .errors import InvalidParametersError

__all__ = [
    "as_choice",
    "as_float_array",
    "as_nonnegative_float",
    "as_positive_float",
    "as_positive_int",
    "as_time_limit",
    "deprecated_module_attribute",
    "frozen",
    "option_values",
]

_A = TypeVar("_A", bound=NDArray[Any])


def frozen(a: _A) -> _A:
    """Return ``a`` made read-only (so that frozen dataclasses are really immutable)."""
    a.setflags(write=False)
    return a


def as_float_array(
    name: str,
    value: Any,
    *,
    ndim: int,
    shape: tuple[int | None, ...] | None = None,
    error: type[ValueError] = InvalidParametersError,
) -> FloatArray:
    """Convert ``value`` to a finite float64 array of ``ndim`` dimensions, or raise ``error``.

    ``shape`` entries that are ``None`` are free. The message names ``name`` and both shapes.
    """
    try:
        arr = np.array(value, dtype=np.float64, copy=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise error(f"{name}: expected a numeric {ndim}-d array, got {value!r} ({exc})") from None
    if ndim == 2 and arr.ndim == 0 and shape is not None and shape[0] == shape[1] == 1:
        arr = arr.reshape(1, 1)
    if ndim == 1 and arr.ndim == 0 and shape is not None and shape[0] == 1:
        arr = arr.reshape(1)
    if arr.ndim != ndim:
        raise error(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if shape is not None:
        for want, got in zip(shape, arr.shape, strict=True):
            if want is not None and want != got:
                expected = tuple("*" if s is None else s for s in shape)
                raise error(f"{name}: expected shape {expected}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise error(f"{name}: contains NaN or infinite entries")
    return arr


def as_positive_float(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Validate a strictly positive (finite unless ``allow_inf``) real number."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidParametersError(f"{name}: expected a positive number, got {value!r}") from None
    if isinstance(value, bool) or math.isnan(x) or x <= 0 or (math.isinf(x) and not allow_inf):
        raise InvalidParametersError(f"{name}: expected a positive number, got {value!r}")
    return x


def as_nonnegative_float(name: str, value: Any) -> float:
    """Validate a finite real number ``>= 0``."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidParametersError(
            f"{name}: expected a non-negative number, got {value!r}"
        ) from None
    if isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise InvalidParametersError(f"{name}: expected a non-negative number, got {value!r}")
    return x


def as_positive_int(name: str, value: Any, *, maximum: int | None = None) -> int:
    """Validate a strictly positive integer (bools are refused), at most ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InvalidParametersError(f"{name}: expected a positive integer, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidParametersError(
            f"{name}: expected a positive integer at most {maximum}, got {value!r}"
        )
    return int(value)


_C = TypeVar("_C")


def as_choice(name: str, value: _C, choices: Sequence[_C]) -> _C:
    """Validate that ``value`` is one of ``choices``."""
    try:
        ok = value in choices
    except TypeError:
        ok = False
    if not ok:
        raise InvalidParametersError(f"{name}: expected one of {tuple(choices)}, got {value!r}")
    return value


def deprecated_module_attribute(
    module: str, name: str, aliases: Mapping[str, tuple[Any, str]]
) -> Any:
    """The body of a module ``__getattr__`` that serves deprecated names.

    ``aliases`` maps a deprecated name to ``(object, warning message)``: the object is returned
    with a :class:`DeprecationWarning` pointing at the caller; other names raise
    :class:`AttributeError` as a module does.
    """
    if name in aliases:
        obj, message = aliases[name]
        warnings.warn(message, DeprecationWarning, stacklevel=3)
        return obj
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def option_values(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of an entry point that the options dataclass ``cls`` validates.

    Entry points take their options as keyword-only arguments and build one frozen options
    dataclass from them, which validates every value when built (docs/architecture.md):
    ``opts = _Options(**option_values(_Options, locals()))`` passes each init field of ``cls``
    by name, so the field list is written once, in the dataclass.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, kw_only=True)
    ... class _Opts:
    ...     rtol: float = 1e-9
    >>> option_values(_Opts, {"rtol": 1e-6, "model": None})
    {'rtol': 1e-06}
    """
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    return {name: values[name] for name in names if name in values}
