"""Read-only arrays in the frozen values and results, when built and in copies.

The frozen values and results are really immutable: their arrays are read-only. The rule has
one home, :class:`ReadOnlyArrays`: a dataclass deriving it makes its array fields read-only when
built (``__post_init__``), a hand-written ``__init__`` stores its fields with
:func:`set_fields`, which does the same, and a copy made by ``pickle`` or ``copy`` (a Dask
worker's, a cached result), whose arrays numpy's pickle restores writable, is made read-only again
when restored. A construction site may still call :func:`frozen` on an array it builds (to
hand it on read-only before the value exists); it need not. The module imports nothing of
gtcontrol, so the lowest modules (:mod:`gtcontrol._display`, the model's values) can use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = ["ReadOnlyArrays", "frozen", "set_fields"]

_A = TypeVar("_A", bound=NDArray[Any])


def frozen(a: _A) -> _A:
    """Return ``a`` made read-only (so that frozen dataclasses are really immutable)."""
    a.setflags(write=False)
    return a


def _read_only(value: Any) -> Any:
    """``value`` with its arrays (and those of plain tuples in it) made read-only."""
    if isinstance(value, np.ndarray):
        return frozen(value)
    if type(value) is tuple:
        return tuple(_read_only(v) for v in value)
    return value


def set_fields(value: object, /, **fields: Any) -> None:
    """Store ``fields`` on the frozen ``value`` from its own ``__init__`` or ``__post_init__``.

    The one way the frozen values store what they validated: by ``object.__setattr__``, as
    :mod:`dataclasses` itself does for frozen classes, with every array (also those in plain
    tuples) made read-only (:func:`frozen`), so no value holds a writable array.

    Examples
    --------
    >>> import numpy as np
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Box:
    ...     a: np.ndarray
    ...     def __post_init__(self) -> None:
    ...         set_fields(self, a=np.array(self.a, dtype=float))
    >>> Box([1, 2]).a.flags.writeable
    False
    """
    for name, field_value in fields.items():
        object.__setattr__(value, name, _read_only(field_value))


class ReadOnlyArrays:
    """Mixin of the frozen values and results that hold arrays: their arrays are read-only,
    when a dataclass is built and when a copy is restored by ``pickle`` or ``copy``.

    A generated dataclass ``__init__`` calls :meth:`__post_init__`, which makes every array
    field (and the arrays of plain tuples in it) read-only; a hand-written ``__init__`` stores its
    fields with :func:`set_fields`, which does the same. So no construction site has to
    remember it.

    Examples
    --------
    >>> import pickle
    >>> from gtcontrol import Gaussian
    >>> g = pickle.loads(pickle.dumps(Gaussian([0.0], [[1.0]])))
    >>> g.cov.flags.writeable
    False
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Record(ReadOnlyArrays):
    ...     values: np.ndarray
    >>> Record(np.zeros(2)).values.flags.writeable
    False
    """

    __slots__ = ()

    def __post_init__(self) -> None:
        # Only a generated dataclass __init__ calls this, so ``self`` is a dataclass.
        names = [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]
        held = {k: getattr(self, k) for k in names}
        set_fields(self, **{k: v for k, v in held.items() if isinstance(v, (np.ndarray, tuple))})

    def __setstate__(self, state: Any) -> None:
        attrs, slots = state if isinstance(state, tuple) else (state, None)
        for part in (attrs, slots):
            set_fields(self, **(part or {}))
