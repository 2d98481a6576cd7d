"""Notebook-ready results: one readable ``repr``, one HTML table and one ``.plot(ax)`` for all.

Every public result of gtcontrol derives from :class:`Displayable` (through
:class:`gtcontrol._status.Outcome` for the results with a status) and provides two hooks:

``_summary_items()``
    The key figures, as ``[(name, value), ...]``: by default the attributes named in the class
    attribute ``_summary_fields``. ``repr`` shows them after the class name and
    the status (``Trajectory(status=success, dim=2, n=200, ...)``), ``_repr_html_`` shows them
    as a small table with the message (Jupyter). Values are formatted by :func:`format_value`:
    floats to four significant digits, arrays by their shape unless tiny, nested results by
    their class name and status.
``_draw(ax)``
    Draws the result on one matplotlib Axes. :meth:`Displayable.plot` creates a detached
    ``matplotlib.figure.Figure`` when no Axes is given (never pyplot state) and returns the
    Axes. The drawing code lives in the layer of the result (``model/_figures.py``,
    ``analysis/_figures.py``, ``control/_figures.py``), imported lazily so that matplotlib is
    loaded only when drawing; :mod:`gtcontrol.plotting` builds its figures from the same code.

A subclass gets the readable ``__repr__`` even when it is a dataclass: :meth:`__init_subclass__`
puts it into the class before ``@dataclass`` runs, which then keeps it (a class that defines
its own ``__repr__`` keeps that one).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ._readonly import ReadOnlyArrays
from .errors import InvalidParametersError

if TYPE_CHECKING:
    from matplotlib.axes import Axes as Axes  # re-exported for the annotations of the results
else:
    Axes = Any  # matplotlib is imported only when drawing

__all__ = [
    "Axes",
    "Displayable",
    "SummaryItems",
    "format_value",
    "new_axes",
]

#: The key figures of a result: ``(name, value)`` pairs, in display order.
SummaryItems = list[tuple[str, object]]

_LINE = 100  # a repr longer than this is written one item per line
_TEXT = 80  # strings in a repr are cut to this many characters
_SMALL = 6  # arrays and sequences with at most this many numbers are written out


def _number(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def _integer(n: int) -> str:
    """An integer: exact up to 64 bits, else four significant digits (never the thousands of
    digits that ``str`` refuses to write)."""
    if n.bit_length() <= 64:
        return str(n)
    try:
        return f"{float(n):.4g}"
    except OverflowError:
        return f"{'-' if n < 0 else ''}~2^{n.bit_length() - 1}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float, complex, np.number)) and not isinstance(v, bool)


def _nested(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_nested(v) for v in value) + "]"
    return format_value(value)


def format_value(value: object, *, quote: bool = True, width: int = _TEXT) -> str:
    """A short text for one value of a summary.

    Parameters
    ----------
    value
        Anything: numbers get four significant digits, arrays with more than six entries are
        shown by their shape (``<200×3×3 array>``), results by their class and status, long
        text is cut.
    quote
        Quote strings (for ``repr``; the HTML table shows them bare).
    width
        Longest text kept (longer text is cut with ``…``).

    Returns
    -------
    str
        The text.

    Examples
    --------
    >>> format_value(np.zeros((200, 3, 3)))
    '<200×3×3 array>'
    >>> format_value([1.0, 0.123456])
    '[1, 0.1235]'
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        return str(bool(value)) if value is not None else "None"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (int, np.integer)):
        return _integer(int(value))
    if isinstance(value, (float, np.floating)):
        return _number(float(value))
    if isinstance(value, (complex, np.complexfloating)):
        z = complex(value)
        sign = "-" if z.imag < 0 else "+"
        return f"{_number(z.real)}{sign}{_number(abs(z.imag))}j"
    if isinstance(value, str):
        return repr(_cut(value, width)) if quote else _cut(value, width)
    if isinstance(value, PurePath):
        return format_value(str(value), quote=quote, width=width)
    if isinstance(value, Displayable):
        return value._brief()
    if isinstance(value, np.ndarray):
        if 0 < value.size <= _SMALL:
            return _nested(value.tolist())
        return f"<{'×'.join(str(n) for n in value.shape)} array>"
    if isinstance(value, Mapping):
        if len(value) <= 4 and all(_is_number(v) or isinstance(v, str) for v in value.values()):
            inner = ", ".join(f"{k}: {format_value(v)}" for k, v in value.items())
            return _cut("{" + inner + "}", width)
        return f"<{len(value)} entries>"
    if isinstance(value, Sequence):
        if len(value) <= _SMALL and all(_is_number(v) or isinstance(v, str) for v in value):
            open_, close = ("(", ")") if isinstance(value, tuple) else ("[", "]")
            return _cut(open_ + ", ".join(format_value(v) for v in value) + close, width)
        kinds = {type(v).__name__ for v in value}
        what = kinds.pop() if len(kinds) == 1 else "items"
        return f"<{len(value)} {what}>"
    return _cut(repr(value), width)


def _header(obj: Displayable) -> SummaryItems:
    """``status`` (when the object has one) and the object's key figures."""
    items: SummaryItems = []
    status = getattr(obj, "status", None)
    if isinstance(status, Enum):
        items.append(("status", status))
    items.extend(obj._summary_items())
    return items


def _message(obj: object) -> str:
    """The object's ``message`` (``""`` when it has none)."""
    message = getattr(obj, "message", "")
    return message if isinstance(message, str) else ""


_CELL = 'style="text-align:left;padding:1px 8px;vertical-align:top"'


def legend(ax: Axes, **kwargs: Any) -> None:
    """``ax.legend(**kwargs)`` when some artist has a label (matplotlib warns otherwise: a figure
    of a run cut short may have drawn none of its labelled lines)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def new_axes(ax: Any = None, *, width: float = 6.4, height: float = 4.0) -> Axes:
    """``ax`` itself, or the Axes of a new detached figure (``matplotlib.figure.Figure``).

    Parameters
    ----------
    ax
        A matplotlib Axes, or ``None``.
    width, height
        Size in inches of a new figure.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes to draw on.

    Raises
    ------
    InvalidParametersError
        If ``ax`` is neither ``None`` nor a matplotlib Axes.
    """
    from matplotlib.axes import Axes as _Axes
    from matplotlib.figure import Figure

    if ax is None:
        return Figure(figsize=(width, height), layout="constrained").subplots()
    if not isinstance(ax, _Axes):
        raise InvalidParametersError(
            f"ax: expected a matplotlib Axes or None, got {type(ax).__name__}"
        )
    return ax


class Displayable(ReadOnlyArrays):
    """Base of the public results: readable ``repr``, ``_repr_html_`` and ``plot(ax)``.

    Subclasses implement :meth:`_summary_items` (the key figures) and :meth:`_draw` (the
    figure on one Axes); see the module docstring.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:  # before @dataclass, which then keeps it
            cls.__repr__ = Displayable.__repr__  # type: ignore[method-assign]

    #: The attributes that are the key figures, in order; a subclass whose figures are computed
    #: overrides :meth:`_summary_items` instead.
    _summary_fields: ClassVar[tuple[str, ...]] = ()

    def _summary_items(self) -> SummaryItems:
        """The key figures ``[(name, value), ...]`` (the status and message are added)."""
        if not self._summary_fields:
            raise NotImplementedError(f"{type(self).__name__} does not define its key figures")
        return [(name, getattr(self, name)) for name in self._summary_fields]

    def _draw(self, ax: Axes) -> None:
        """Draw the result on ``ax``."""
        raise NotImplementedError(f"{type(self).__name__} has no figure")

    def _brief(self) -> str:
        """The class name with the status, or the first key figure (inside other summaries)."""
        status = getattr(self, "status", None)
        if isinstance(status, Enum):
            return f"{type(self).__name__}({status.value})"
        items = self._summary_items()[:1]
        inner = ", ".join(f"{k}={format_value(v)}" for k, v in items)
        return f"{type(self).__name__}({inner})"

    def __repr__(self) -> str:
        """``Name(status=..., key=value, ..., message='...')``, wrapped at 100 characters.

        Continuation lines are indented under the first item.
        """
        parts = [f"{k}={format_value(v)}" for k, v in _header(self)]
        message = _message(self)
        if message:
            parts.append(f"message={format_value(message)}")
        name = type(self).__name__
        indent = " " * (len(name) + 1)
        lines = [f"{name}("]
        for i, part in enumerate(parts):
            text = part + ("," if i < len(parts) - 1 else ")")
            if len(lines[-1]) + 1 + len(text) > _LINE and not lines[-1].endswith("("):
                lines.append(indent + text)
            else:
                lines[-1] += ("" if lines[-1].endswith("(") else " ") + text
        if not parts:
            lines[-1] += ")"
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The key figures as a small, self-contained HTML table (shown by Jupyter).

        A ``<table>`` with a caption (the class name), one row per figure and the full message;
        every text is escaped.
        """
        rows = []
        success = getattr(self, "success", None)
        for key, value in _header(self):
            text = html.escape(format_value(value, quote=False, width=200))
            if key == "status" and isinstance(success, bool):
                color = "#1a7f37" if success else "#b42318"
                text = f'<span style="color:{color};font-weight:bold">{text}</span>'
            rows.append(f"<tr><th {_CELL}>{html.escape(key)}</th><td {_CELL}>{text}</td></tr>")
        message = _message(self)
        if message:
            text = html.escape(_cut(message, 2000))
            rows.append(f"<tr><th {_CELL}>message</th><td {_CELL}>{text}</td></tr>")
        caption = html.escape(type(self).__name__)
        return (
            '<table class="gtcontrol-result" style="border-collapse:collapse">'
            f'<caption style="text-align:left;font-weight:bold">{caption}</caption>'
            f"<tbody>{''.join(rows)}</tbody></table>"
        )

    def plot(self, ax: Axes | None = None) -> Axes:
        """Draw the result.

        Parameters
        ----------
        ax
            The matplotlib Axes to draw on; ``None`` creates a detached figure
            (``matplotlib.figure.Figure``, no pyplot state), reachable as ``ax.figure``.

        Returns
        -------
        matplotlib.axes.Axes
            The Axes drawn on.

        Raises
        ------
        InvalidParametersError
            If ``ax`` is not a matplotlib Axes.
        """
        target = new_axes(ax)
        self._draw(target)
        return target
