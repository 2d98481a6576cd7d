"""Private validation of user input at the API boundary (imports only private helpers, errors).

Every check names the offending input and says what was expected, and raises a
:class:`~gtcontrol.errors.GTControlError` subclass, never a raw numpy/Python exception.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ._linalg import FloatArray
from ._readonly import frozen, set_fields
from ._status import MAX_EVALS_LIMIT, as_time_limit, shown
from .errors import InvalidParametersError

__all__ = [
    "MAX_DIM",
    "MAX_ENTRY",
    "MAX_SAMPLES",
    "as_cap",
    "as_choice",
    "as_dim",
    "as_float_array",
    "as_float_dtype",
    "as_max_evals",
    "as_nonnegative_float",
    "as_nonnegative_int",
    "as_option_group",
    "as_positive_float",
    "as_positive_int",
    "as_rng",
    "as_seed",
    "as_time_limit",
    "frozen",
    "option_values",
    "set_fields",
]

_G = TypeVar("_G")


#: Largest accepted magnitude of an entry of a user array. The solvers form products of up to
#: two entries (``ΣBΣ``, ``S Sᵀ``, ``m mᵀ``, Gram matrices), so entries above ``1e150`` would
#: overflow float64 (``1e308``) and turn into ``inf``; such input is refused up front.
MAX_ENTRY = 1e150

#: Largest accepted dimension of a Gaussian: its dense eigen-decomposition costs ``O(d³)``
#: (d = 2048: a few seconds; d = 10,000 would take minutes), so larger inputs are refused
#: rather than left to hang.
MAX_DIM = 2048

#: Largest number of samples or tokens generated in one call (``n × d`` floats are allocated).
MAX_SAMPLES = 10**7


def _too_large(name: str, magnitude: str, bound: float) -> str:
    """The message refusing an entry of ``magnitude`` (as shown) above ``bound``."""
    return (
        f"{name}: an entry of magnitude {magnitude} exceeds the bound {bound:g} "
        "(gtcontrol._validation.MAX_ENTRY): products formed by the solvers would overflow float64"
    )


def _detached(value: Any) -> Any:
    """A torch tensor's values on the CPU, without its autograd graph, in a dtype numpy knows
    (``nn.Linear`` weights require grad, and numpy has no bfloat16); anything else as it is."""
    detach = getattr(value, "detach", None)
    if not callable(detach) or type(value).__module__.split(".")[0] != "torch":
        return value
    t = detach().cpu()
    return t if t.is_complex() or not t.is_floating_point() else t.double()


def _to_float64(name: str, value: Any, ndim: int | None, error: type[ValueError]) -> FloatArray:
    """``value`` as a new float64 array; refuse complex, object, string and ragged input
    (``ndim``: the dimension the message asks for; ``None``: any)."""
    what = "a real array" if ndim is None else f"a real {ndim}-d array"
    try:
        raw = np.asarray(_detached(value))
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
        raise error(
            f"{name}: expected {what}, got {shown(value)} (ragged or not numeric: {exc})"
        ) from None
    kind = raw.dtype.kind
    if kind == "c":
        raise error(
            f"{name}: expected real numbers, got a complex array (dtype {raw.dtype}); "
            "pass the real part explicitly if the imaginary part is zero"
        )
    if kind == "O":
        for x in raw.ravel().tolist():
            if isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_ENTRY:
                raise error(_too_large(name, f"~1e{len(str(abs(x))) - 1}", MAX_ENTRY))
            if not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, complex):
                raise error(
                    f"{name}: expected real numbers, got an entry {shown(x)} of type "
                    f"{type(x).__name__}"
                )
    elif kind not in "biuf":
        raise error(f"{name}: expected a real numeric array, got dtype {raw.dtype}")
    try:
        return np.array(raw, dtype=np.float64, copy=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise error(f"{name}: expected {what}, got {shown(value)} ({exc})") from None


def as_float_array(
    name: str,
    value: Any,
    *,
    ndim: int,
    shape: tuple[int | None, ...] | None = None,
    error: type[ValueError] = InvalidParametersError,
    max_abs: float = MAX_ENTRY,
) -> FloatArray:
    """Convert ``value`` to a finite real float64 array of ``ndim`` dimensions, or raise ``error``.

    Refused, with a message that names ``name``: complex input (never silently cast to real),
    object arrays of non-numbers, strings, ragged nesting, Python integers too large for float64,
    NaN/inf entries, entries above ``max_abs`` in magnitude (default :data:`MAX_ENTRY`, beyond
    which the products the solvers form overflow), a wrong number of dimensions, and shapes that
    differ from ``shape`` (whose ``None`` entries are free).

    Parameters
    ----------
    name
        How the message calls the input.
    value
        Anything array-like.
    ndim
        The required number of dimensions (a scalar is accepted for shape ``(1,)``/``(1, 1)``).
    shape
        The required shape; ``None`` entries are free.
    error
        The :class:`~gtcontrol.errors.GTControlError` subclass to raise.
    max_abs
        Largest accepted ``|entry|``.

    Returns
    -------
    numpy.ndarray
        A new float64 array (the caller owns it).

    Raises
    ------
    GTControlError
        ``error``, naming ``name`` and what was expected.
    """
    arr = _to_float64(name, value, ndim, error)
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
    if arr.size:
        top = float(np.max(np.abs(arr)))
        if top > max_abs:
            raise error(_too_large(name, f"{top:.3g}", max_abs))
    return arr


def as_real_array(name: str, value: Any, *, max_abs: float = MAX_ENTRY) -> FloatArray:
    """``value`` as a finite real float64 array of whatever dimension it has (see
    :func:`as_float_array` for what is refused; a ragged nesting is, by name)."""
    arr = _to_float64(name, value, None, InvalidParametersError)
    return as_float_array(name, arr, ndim=arr.ndim, max_abs=max_abs)


def as_depths(name: str, value: Any) -> FloatArray:
    """One depth or a sequence of depths as a finite 1-d float64 array (see
    :func:`as_float_array` for what is refused); order and sign are the caller's to check."""
    arr = as_real_array(name, value)
    return as_float_array(name, arr.reshape(1) if arr.ndim == 0 else arr, ndim=1)


def as_dim(name: str, d: int) -> int:
    """Refuse a dimension above :data:`MAX_DIM` (the dense factorizations would not end)."""
    if d > MAX_DIM:
        raise InvalidParametersError(
            f"{name}: dimension {d} exceeds the supported maximum {MAX_DIM} "
            "(gtcontrol._validation.MAX_DIM; the dense O(d³) factorizations would run for "
            "minutes or exhaust memory)"
        )
    return d


def as_seed(name: str, value: Any) -> int:
    """Validate a seed: a non-negative integer (bools, floats, NaN and negatives are refused).

    The one check of every ``seed`` argument; any size is accepted (numpy's ``SeedSequence``
    takes arbitrary non-negative integers).

    Examples
    --------
    >>> as_seed("seed", 7)
    7
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidParametersError(f"{name}: expected a non-negative integer, got {shown(value)}")
    return int(value)


def as_rng(name: str, value: Any) -> np.random.Generator:
    """``None``, a non-negative integer seed or a :class:`numpy.random.Generator`: a Generator."""
    if isinstance(value, np.random.Generator):
        return value
    if value is None:
        return np.random.default_rng()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidParametersError(
            f"{name}: expected None, a non-negative integer seed or a numpy Generator, "
            f"got {shown(value)}"
        )
    return np.random.default_rng(as_seed(name, value))


def _real(name: str, value: Any, expected: str) -> float:
    """``value`` as a float (an integer past the float range becomes ``±inf``), or refuse it:
    bools, strings and non-numbers raise, naming ``name`` and ``expected``."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise InvalidParametersError(f"{name}: expected {expected}, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        raise InvalidParametersError(f"{name}: expected {expected}, got {shown(value)}") from None


def as_positive_float(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Validate a strictly positive (finite unless ``allow_inf``) real number.

    Like every numeric check here: bools, NaN, strings and non-numbers are refused; an integer
    too large for a float counts as ``inf``. A subnormal (below ``sys.float_info.min``) is
    refused too: no quantity of gtcontrol is meaningful at that scale.
    """
    x = _real(name, value, "a positive number")
    if math.isnan(x) or x <= 0 or (math.isinf(x) and not allow_inf):
        raise InvalidParametersError(f"{name}: expected a positive number, got {shown(value)}")
    if x < sys.float_info.min:  # a subnormal: its reciprocal overflows, its ratios are noise
        raise InvalidParametersError(
            f"{name}: expected a positive number of at least {sys.float_info.min:.4g} (the "
            f"smallest normal float; a subnormal's reciprocal overflows), got {shown(value)}"
        )
    return x


def as_depth(name: str, value: Any) -> float:
    """A horizon that also becomes an entry of an array of depths: positive (see
    :func:`as_positive_float`) and at most :data:`MAX_ENTRY`."""
    t = as_positive_float(name, value)
    if t > MAX_ENTRY:
        raise InvalidParametersError(_too_large(name, f"{t:.3g}", MAX_ENTRY))
    return t


def as_nonnegative_float(name: str, value: Any) -> float:
    """Validate a finite real number ``>= 0`` (see :func:`as_positive_float`)."""
    x = _real(name, value, "a non-negative number")
    if not math.isfinite(x) or x < 0:
        raise InvalidParametersError(f"{name}: expected a non-negative number, got {shown(value)}")
    return x


def as_max_evals(value: Any) -> int:
    """Validate an integrator's ``max_evals``: a positive integer up to ``MAX_EVALS_LIMIT``.

    The one check of every evaluation cap (the default, ``DEFAULT_MAX_EVALS``, and the ceiling
    live in :mod:`gtcontrol._status`).

    Examples
    --------
    >>> as_max_evals(1000)
    1000
    """
    return as_cap("max_evals", value)


def as_cap(name: str, value: Any) -> int:
    """Validate an iteration or step cap (``max_iter``, ``max_steps``): a positive integer up to
    ``MAX_EVALS_LIMIT`` (a larger cap is no cap, and is refused as absurd, as ``max_evals``).

    Examples
    --------
    >>> as_cap("max_steps", 500)
    500
    """
    return as_positive_int(name, value, maximum=MAX_EVALS_LIMIT)


def as_positive_int(name: str, value: Any, *, maximum: int | None = None) -> int:
    """Validate a strictly positive integer (bools are refused), at most ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InvalidParametersError(f"{name}: expected a positive integer, got {shown(value)}")
    if maximum is not None and value > maximum:
        raise InvalidParametersError(
            f"{name}: expected a positive integer at most {maximum}, got {shown(value)}"
        )
    return int(value)


def as_nonnegative_int(name: str, value: Any, *, maximum: int) -> int:
    """Validate an integer from 0 to ``maximum`` (a count where 0 means none; bools are refused).

    Examples
    --------
    >>> as_nonnegative_int("n_random", 0, maximum=10)
    0
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not 0 <= value <= maximum
    ):
        raise InvalidParametersError(
            f"{name}: expected an integer from 0 to {maximum}, got {shown(value)}"
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


def as_option_group(name: str, value: Any, cls: type[_G]) -> _G:
    """An option family's value (``robustness=``-style groups): an instance of ``cls``.

    ``None`` means the family's defaults, ``cls()``; anything else but an instance of ``cls`` is
    refused, naming ``name``.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, kw_only=True)
    ... class Grid:
    ...     n: int = 8
    >>> as_option_group("grid", None, Grid)
    Grid(n=8)
    """
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise InvalidParametersError(
            f"{name}: expected a {cls.__name__}, got {type(value).__name__}"
        )
    return value


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


def leading_size(name: str, value: Any) -> int | None:
    """The leading size of an array-like, or ``None`` for a scalar.

    Ragged nesting is refused here, naming ``name``, before numpy can raise its own error.
    """
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return len(value)
    try:
        shape = np.shape(value)
    except (TypeError, ValueError):
        raise InvalidParametersError(f"{name}: expected a numeric array, got {value!r}") from None
    return int(shape[0]) if shape else None


#: Working dtypes of token arithmetic.
_FLOAT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def as_float_dtype(name: str, value: Any) -> np.dtype[Any]:
    """``float64`` or ``float32`` as a numpy dtype, or raise naming ``name``."""
    try:
        dt: np.dtype[Any] | None = np.dtype(value) if value is not None else None
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt not in _FLOAT_DTYPES:
        raise InvalidParametersError(
            f"{name}: expected numpy.float64 or numpy.float32, got {value!r}"
        )
    return dt
