"""Figures of the ``analyze`` task: covariance eigenvalues against depth and the 2×2 cone.

Both take a :class:`gtcontrol.analysis.regime_figures.RegimeFigureData` (from
:func:`gtcontrol.analysis.regime_figures.regime_figure_data`); they draw on Axes that they are
given (``ax=``) or on a new detached figure (no pyplot state), save it as PNG when given a
``path``, and return the Axes. The eigenvalue curves are drawn by
:func:`gtcontrol.model._figures.draw_eigenvalues`, as for every trajectory.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from .._display import legend
from .._docstring import fill
from ..analysis.regime_figures import RegimeFigureData
from ..errors import InvalidParametersError
from ..model._figures import draw_covariance
from .core import FIGURE_DOCS, finish, new_figure, panels

__all__ = ["plot_cone", "plot_covariance_eigenvalues"]


@fill(**FIGURE_DOCS)
def plot_covariance_eigenvalues(
    data: RegimeFigureData, path: str | Path | None = None, *, ax: Axes | None = None
) -> Axes:
    """Eigenvalues of Σ(t) against depth (log scale), with the regime marked.

    The equilibrium/limit eigenvalues are dotted horizontal lines, the blow-up time a dashed
    vertical line; the title states the regime kind and certificate.

    Parameters
    ----------
    data
        The figure data of :func:`gtcontrol.analysis.regime_figures.regime_figure_data`.
    %(path)s
    %(ax)s

    %(axes_returned)s

    Examples
    --------
    >>> from gtcontrol import Gaussian, Layer
    >>> from gtcontrol.analysis.regime_figures import regime_figure_data
    >>> from gtcontrol.plotting.analysis import plot_covariance_eigenvalues
    >>> layer = Layer(A=[[0.5, 0.0], [0.0, 0.5]], B=[[1.0, 0.0], [0.0, 1.0]], V=-1.0)
    >>> data = regime_figure_data(layer, Gaussian([0.5, 0.0], [[1.0, 0.2], [0.2, 0.6]]),
    ...                           n_points=41)
    >>> plot_covariance_eigenvalues(data).get_title()  # Σ(t) → I/2 from every Σ0 ≻ 0
    'converges (global)'
    """
    (a,) = panels(ax, 1, width=6.4, height=4.0)
    draw_covariance(
        a,
        data.trajectory.t,
        data.eigenvalues,
        blowup_time=data.blowup_time,
        blowup_label="blow-up T*",
        limit=data.equilibrium_eigenvalues,
        limit_label="limit",
        title=f"{data.regime.kind} ({data.regime.certificate})",
    )
    finish([a], path)
    return a


@fill(**FIGURE_DOCS)
def plot_cone(
    data: RegimeFigureData, path: str | Path | None = None, *, ax: Sequence[Axes] | None = None
) -> tuple[Axes, Axes]:
    """For d = 2: Σ(t) in the PSD cone ``(a − b, 2c, a + b)``, and Σ/tr Σ in its unit disk.

    Left: the trajectory in the cone (its boundary ``z = √(x² + y²)`` drawn as a wireframe);
    for a blow-up the normalized trajectory ``Σ/tr Σ`` is drawn on the slice ``z = 1`` instead.
    Right: ``Σ/tr Σ`` in the unit disk (the circle is the singular matrices, the centre ``I/2``).

    Parameters
    ----------
    data
        The figure data of a 2-dimensional layer.
    %(path)s
    ax
        Two Axes to draw on, the first a 3-d one (``projection="3d"``); ``None``: a new figure.

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The cone (3-d) and the disk panels.

    Raises
    ------
    InvalidParametersError
        If the data is not two-dimensional.

    Examples
    --------
    >>> from gtcontrol import Gaussian, Layer
    >>> from gtcontrol.analysis.regime_figures import regime_figure_data
    >>> from gtcontrol.plotting.analysis import plot_cone
    >>> layer = Layer(A=[[0.2, 0.0], [0.0, 0.2]], B=[[1.0, 0.0], [0.0, 1.0]], V=1.0)
    >>> data = regime_figure_data(layer, Gaussian([0.5, 0.0], [[1.0, 0.2], [0.2, 0.6]]),
    ...                           n_points=41)
    >>> cone, disk = plot_cone(data)  # a blow-up: Σ/tr Σ on the slice z = 1
    >>> cone.name, disk.get_title()
    ('3d', 'shape Σ/tr Σ — blowup')
    """
    if data.cone is None or data.cone_normalized is None:
        raise InvalidParametersError("data: the cone picture needs a 2-dimensional layer")
    if ax is None:
        fig = new_figure(width=9.0, height=4.2)
        ax3, ax2 = fig.add_subplot(1, 2, 1, projection="3d"), fig.add_subplot(1, 2, 2)
    else:
        ax3, ax2 = panels(ax, 2, width=9.0, height=4.2)
        if ax3.name != "3d":
            raise InvalidParametersError("ax: the first Axes must be 3-d (projection='3d')")
    blow = data.regime.kind == "blowup"
    pts = data.cone_normalized if blow else data.cone
    top = float(np.nanmax(pts[:, 2])) if np.isfinite(pts[:, 2]).any() else 1.0
    top = max(top, 1e-12)
    th, z = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, top, 8))
    ax3.plot_wireframe(z * np.cos(th), z * np.sin(th), z, color="0.8", lw=0.5)
    ax3.plot(pts[:, 0], pts[:, 1], pts[:, 2], color="tab:blue", lw=1.6)
    ax3.scatter(*pts[0], color="tab:green", s=20, label="start")
    if data.equilibrium_cone is not None and not blow:
        ax3.scatter(*data.equilibrium_cone, color="k", marker="*", s=60, label="limit")
    ax3.set_xlabel("a − b")
    ax3.set_ylabel("2c")
    ax3.set_zlabel("a + b")
    ax3.set_title("Σ/tr Σ (blow-up)" if blow else "Σ(t) in the PSD cone", fontsize=10)
    legend(ax3, fontsize=8)
    circle = np.linspace(0, 2 * np.pi, 200)
    ax2.plot(np.cos(circle), np.sin(circle), color="0.6", lw=1.0)
    xn = data.cone_normalized
    ax2.plot(xn[:, 0] / xn[:, 2], xn[:, 1] / xn[:, 2], color="tab:blue", lw=1.6)
    ax2.plot(xn[0, 0] / xn[0, 2], xn[0, 1] / xn[0, 2], "o", color="tab:green")
    if data.equilibrium_cone is not None:
        e = data.equilibrium_cone
        if e[2] > 0:
            ax2.plot(e[0] / e[2], e[1] / e[2], "*", color="k", ms=10)
    ax2.set_aspect("equal")
    ax2.set_xlim(-1.05, 1.05)
    ax2.set_ylim(-1.05, 1.05)
    ax2.set_xlabel("(a − b)/tr Σ")
    ax2.set_ylabel("2c/tr Σ")
    ax2.set_title(f"shape Σ/tr Σ — {data.regime.kind}", fontsize=10)
    finish([ax3, ax2], path)
    return ax3, ax2
