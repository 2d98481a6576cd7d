"""Read-only arrays in copies of frozen values.

The frozen values and results make their arrays read-only when built
(:func:`frozen`, the one home of that rule), so that they are really immutable. numpy's pickle does
not keep that flag, so a copy made by ``pickle`` or ``copy`` (a Dask worker's, a cached result)
held writable arrays: ``pickle.loads(pickle.dumps(gaussian)).cov`` could be changed in place.
:class:`ReadOnlyOnLoad` makes them read-only again when such a copy is restored. It imports
nothing of gtcontrol, so the lowest modules (:mod:`gtcontrol._display`, the model's values) can
use it.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = ["ReadOnlyOnLoad", "frozen", "set_fields"]

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


class ReadOnlyOnLoad:
    """Mixin of the frozen values and results that hold arrays: a copy restored by ``pickle``
    or ``copy`` holds read-only arrays again, as the original does.

    Examples
    --------
    >>> import pickle
    >>> from gtcontrol import Gaussian
    >>> g = pickle.loads(pickle.dumps(Gaussian([0.0], [[1.0]])))
    >>> g.cov.flags.writeable
    False
    """

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        attrs, slots = state if isinstance(state, tuple) else (state, None)
        for part in (attrs, slots):
            set_fields(self, **(part or {}))
