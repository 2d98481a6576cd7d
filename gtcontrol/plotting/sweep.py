"""The phase diagram of a parameter sweep: the regime of every grid point as a coloured cell.

:func:`plot_phase_diagram` draws one cell per point of a two-axis grid (or a strip for one
axis), coloured by the point's regime (``converges``, ``collapses``, ``bounded``,
``unbounded``, ``blowup``) or, for a point without one, its status (``budget_exhausted``,
``failed``, ...); blow-up cells carry the blow-up time. The grid may be uneven: each cell
spans half-way to its neighbours (geometrically on a log axis).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Patch

from .._docstring import fill
from .._linalg import FloatArray
from ..errors import InvalidParametersError
from .core import FIGURE_DOCS, finish, panels

__all__ = ["CATEGORY_COLORS", "plot_phase_diagram"]

#: Colour of each regime kind and status (others get the colours of the tab10 cycle).
CATEGORY_COLORS: dict[str, str] = {
    "converges": "#4daf4a",
    "collapses": "#377eb8",
    "bounded": "#984ea3",
    "unbounded": "#ff7f00",
    "blowup": "#e41a1c",
    "success": "#4daf4a",
    "overflow": "#ff7f00",
    "infeasible": "#a65628",
    "budget_exhausted": "#bdbdbd",
    "failed": "#525252",
}
_EXTRA = ("#17becf", "#bcbd22", "#e377c2", "#8c564b", "#7f7f7f", "#1f77b4")
#: Largest grid side whose cells get their blow-up time written in.
_ANNOTATE_MAX = 24


def _edges(values: FloatArray, log: bool) -> FloatArray:
    """Cell edges around sorted distinct ``values``: midpoints, half a step beyond the ends.

    The edges stay finite (positive on a log axis) and strictly increasing, also for values
    near the ends of the floating-point range or a single value far from 0.
    """
    big = np.finfo(float).max / 8  # spans and tick steps of the axis stay finite
    with np.errstate(all="ignore"):
        v = np.log(values) if log else values
        if v.size == 1:
            half = 0.5 * math.log(10.0) if log else max(0.5, 0.5 * abs(float(v[0])))
            e = np.array([v[0] - half, v[0] + half])
        else:
            mid = 0.5 * v[1:] + 0.5 * v[:-1]
            e = np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])
        e = np.exp(e) if log else e
        low = np.nextafter(0.0, 1.0) if log else min(-big, float(values[0]))
        # never inside the outer cells
        edges = np.asarray(np.clip(e, low, max(big, float(values[-1]))), dtype=np.float64)
    for i in range(1, edges.size):  # a span lost to rounding: the next representable number
        if edges[i] <= edges[i - 1]:
            edges[i] = np.nextafter(edges[i - 1], np.inf)
    return edges


def _as_values(name: str, values: Sequence[float] | FloatArray, n: int, log: bool) -> FloatArray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size != n:
        raise InvalidParametersError(f"{name}: expected {n} values (one per point), got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise InvalidParametersError(f"{name}: expected finite values")
    if log and np.any(arr <= 0):
        raise InvalidParametersError(f"{name}: a log axis needs positive values")
    return arr


@fill(**FIGURE_DOCS)
def plot_phase_diagram(
    x: Sequence[float] | FloatArray,
    y: Sequence[float] | FloatArray | None,
    category: Sequence[str],
    path: str | Path | None = None,
    *,
    blowup_time: Sequence[float] | FloatArray | None = None,
    xlabel: str = "",
    ylabel: str = "",
    xlog: bool = False,
    ylog: bool = False,
    title: str = "",
    ax: Axes | None = None,
) -> Axes:
    """A phase diagram: one cell per grid point, coloured by its regime (or status).

    Parameters
    ----------
    x
        The first axis value of every point.
    y
        The second axis value of every point; ``None`` for a one-axis sweep (one row of cells).
    category
        The regime kind (or status) of every point: the cell's colour
        (:data:`CATEGORY_COLORS`; unknown names get further colours). The legend lists the
        categories present.
    %(path)s
    blowup_time
        Blow-up time of every point (``inf`` or NaN: none); finite ones are written in their
        cells when the grid has at most 24 cells a side.
    xlabel, ylabel
        Axis labels (plain text).
    xlog, ylog
        Logarithmic axes (cells span geometric midpoints).
    %(axes_title)s
    %(ax)s

    Returns
    -------
    matplotlib.axes.Axes
        The Axes holding the diagram: ``ax`` when given, else that of a new figure.

    Raises
    ------
    InvalidParametersError
        If the arrays differ in length, hold non-finite coordinates, or two points share a
        cell; or ``ax`` is not an Axes.

    Examples
    --------
    >>> import math
    >>> from gtcontrol.plotting.sweep import plot_phase_diagram
    >>> ax = plot_phase_diagram([0, 1, 0, 1], [0, 0, 1, 1], ["converges", "blowup"] * 2,
    ...                         blowup_time=[math.inf, 0.5, math.inf, 0.7], xlabel="v")
    >>> ax.get_xlabel()
    'v'
    """
    cats = [str(c) for c in category]
    n = len(cats)
    if n == 0:
        raise InvalidParametersError("category: expected at least one point")
    xs = _as_values("x", x, n, xlog)
    ys = np.zeros(n) if y is None else _as_values("y", y, n, ylog)
    times = (
        np.full(n, np.nan) if blowup_time is None else np.asarray(blowup_time, dtype=float).ravel()
    )
    if times.size != n:
        raise InvalidParametersError(f"blowup_time: expected {n} values, got {times.size}")
    ux, uy = np.unique(xs), np.unique(ys)
    ix, iy = np.searchsorted(ux, xs), np.searchsorted(uy, ys)
    if len(set(zip(ix.tolist(), iy.tolist(), strict=True))) != n:
        raise InvalidParametersError("x, y: two points share a cell (give one point per cell)")
    names = list(dict.fromkeys(c for c in CATEGORY_COLORS if c in cats))
    names += sorted(set(cats) - set(names))
    extra = iter(_EXTRA * (1 + len(names) // len(_EXTRA)))
    colors = [CATEGORY_COLORS.get(c) or next(extra) for c in names]
    code = np.full((uy.size, ux.size), np.nan)
    code[iy, ix] = [names.index(c) for c in cats]
    # room for the labels, the title and the legend beside the cells also on a small grid
    width = max(4.8, 1.2 + min(0.6 * ux.size, 9.0))
    (a,) = panels(ax, 1, width=width, height=max(3.0, 1.4 + min(0.45 * uy.size, 6.0)))
    cmap = ListedColormap(colors)
    norm = BoundaryNorm(np.arange(len(names) + 1) - 0.5, len(names))
    ex, ey = _edges(ux, xlog), _edges(uy, ylog)
    a.pcolormesh(ex, ey, np.ma.masked_invalid(code), cmap=cmap, norm=norm, edgecolors="white")
    if xlog:
        a.set_xscale("log")
    if ylog:
        a.set_yscale("log")
    if ux.size <= _ANNOTATE_MAX and uy.size <= _ANNOTATE_MAX:
        size = max(5.0, 9.0 - 0.2 * max(ux.size, uy.size))
        for k in np.flatnonzero(np.isfinite(times)):
            a.text(
                ux[ix[k]],
                uy[iy[k]],
                f"{times[k]:.2g}",
                ha="center",
                va="center",
                fontsize=size,
                color="white",
            )
    if ux.size <= 12:
        a.set_xticks(ux, [f"{v:.3g}" for v in ux])
        a.minorticks_off()
    if y is None:
        a.set_yticks([])
    elif uy.size <= 12:
        a.set_yticks(uy, [f"{v:.3g}" for v in uy])
    a.set_xlim(ex[0], ex[-1])
    a.set_ylim(ey[0], ey[-1])
    a.set_xlabel(xlabel, parse_math=False)
    a.set_ylabel(ylabel, parse_math=False)
    handles = [Patch(facecolor=c, label=name) for name, c in zip(names, colors, strict=True)]
    if np.any(np.isfinite(times)) and ux.size <= _ANNOTATE_MAX and uy.size <= _ANNOTATE_MAX:
        handles.append(Patch(facecolor="none", edgecolor="none", label="numbers: blow-up time"))
    a.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish([a], path, title=title)
    return a
