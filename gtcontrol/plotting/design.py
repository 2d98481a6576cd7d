"""Figures of the ``design``, ``stabilize`` and ``filter`` tasks (matplotlib's object API).

Each function draws one figure from plain data on Axes that it is given (``ax=``) or on a new
detached figure, saves it as PNG when given a ``path``, and returns its Axes. The panels are
drawn by :mod:`gtcontrol.control._figures` and :mod:`gtcontrol.analysis._figures`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from .._display import legend
from .._docstring import fill
from .._linalg import FloatArray
from .._validation import as_positive_float
from ..analysis._figures import draw_filter_difference, draw_filter_entries
from ..control._figures import draw_design_errors, draw_lambda_paths, draw_stabilization
from .core import FIGURE_DOCS, finish, panels

__all__ = ["plot_design_convergence", "plot_filter_covariance", "plot_stabilization"]


@fill(**FIGURE_DOCS)
def plot_design_convergence(
    t: FloatArray,
    mean_error: FloatArray,
    cov_error: FloatArray,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    rate: float | None = None,
    cov_rate: float | None = None,
    title: str = "",
) -> tuple[Axes, Axes]:
    """Mean and covariance errors of a designed layer from several starts (log scale).

    ``mean_error`` and ``cov_error`` have shape ``(starts, len(t))`` (e.g. from
    :func:`gtcontrol.control.design.design_convergence`); dashed lines show ``e^{−rate·t}`` and
    ``e^{−cov_rate·t}`` scaled to the largest initial error.

    Parameters
    ----------
    t
        Depths ``(n,)``.
    mean_error, cov_error
        Errors ``(starts, n)``.
    %(path)s
    ax
        Two Axes to draw on (mean, covariance); ``None``: a new figure.
    rate, cov_rate
        Reference rates of the mean and the covariance (positive; ``None``: no line).
    %(figure_title)s

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The mean and covariance panels.

    Examples
    --------
    Two starts whose errors decay at the certified rates 1 (mean) and 2 (covariance):

    >>> import numpy as np
    >>> from gtcontrol.plotting.design import plot_design_convergence
    >>> t = np.linspace(0.0, 5.0, 51)
    >>> mean_error = np.array([np.exp(-t), 0.5 * np.exp(-t)])
    >>> cov_error = np.array([np.exp(-2 * t), 2.0 * np.exp(-2 * t)])
    >>> ax_m, ax_s = plot_design_convergence(t, mean_error, cov_error, rate=1.0, cov_rate=2.0)
    >>> ax_s.get_yscale()
    'log'
    """
    rate = None if rate is None else as_positive_float("rate", rate)
    cov_rate = None if cov_rate is None else as_positive_float("cov_rate", cov_rate)
    ax_m, ax_s = panels(ax, 2, width=8.0, height=3.4)
    draw_design_errors(ax_m, t, mean_error, rate=rate, title="mean error  |m − m*|")
    draw_design_errors(ax_s, t, cov_error, rate=cov_rate, title="covariance error  ‖Σ − Σ*‖")
    if np.atleast_2d(mean_error).shape[0] <= 8:
        legend(ax_m, fontsize=7, loc="best")
    finish([ax_m, ax_s], path, title=title)
    return ax_m, ax_s


@fill(**FIGURE_DOCS)
def plot_filter_covariance(
    t: FloatArray,
    filter_cov: FloatArray,
    transformer_cov: FloatArray,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    steady: FloatArray | None = None,
    title: str = "",
) -> tuple[Axes, Axes]:
    """Kalman–Bucy covariance ``P(t)`` against the Transformer's ``Σ(t)``.

    Left: the entries ``P_ij`` (lines) and ``Σ_ij`` (markers), ``i ≤ j`` (at most 10), with the
    steady state (dotted). Right: ``‖P(t) − Σ(t)‖_F / ‖Σ(t)‖_F``.

    Parameters
    ----------
    t
        Depths ``(n,)``.
    filter_cov, transformer_cov
        ``P(t)`` and ``Σ(t)``, ``(n, d, d)``.
    %(path)s
    ax
        Two Axes to draw on; ``None``: a new figure.
    steady
        The filter's steady state, drawn dotted.
    %(figure_title)s

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The entries and the difference panels.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol.plotting.design import plot_filter_covariance
    >>> t = np.linspace(0.0, 2.0, 21)
    >>> p = np.array([np.diag([1.0 + np.exp(-s), 0.5]) for s in t])  # P(t) → diag(1, 0.5)
    >>> ax_c, ax_e = plot_filter_covariance(t, p, p * (1 + 1e-9), steady=np.diag([1.0, 0.5]))
    >>> len(ax_e.lines) >= 1
    True
    """
    ax_c, ax_e = panels(ax, 2, width=8.0, height=3.4)
    draw_filter_entries(ax_c, t, filter_cov, transformer_cov, steady=steady)
    draw_filter_difference(ax_e, t, filter_cov, transformer_cov)
    finish([ax_c, ax_e], path, title=title)
    return ax_c, ax_e


@fill(**FIGURE_DOCS)
def plot_stabilization(
    curves: Mapping[str, tuple[FloatArray, FloatArray]],
    before: Any,
    after: Any,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    rate: float = 1.0,
    blowup: float | None = None,
    title: str = "",
) -> tuple[Axes, Axes]:
    """A stabilized layer: ``λ_max(Σ)`` over depth before and after, and the spectra.

    Left: ``λ_max(Σ(t))`` of each run in ``curves`` (label → ``(t, λ_max)``), with the given
    layer's blow-up depth. Right: the rightmost eigenvalues of the linearization at the target
    with the heads kept (``before``) and after stabilization (``after``), with ``Re λ = −rate``.

    Parameters
    ----------
    curves
        The runs to draw, e.g. from :class:`gtcontrol.Stabilization`'s ``verification``.
    before, after
        Eigenvalues (complex), or ``None``.
    %(path)s
    ax
        Two Axes to draw on; ``None``: a new figure.
    rate
        The certified rate (positive; dotted line).
    blowup
        The given layer's blow-up depth, if any.
    %(figure_title)s

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The λ_max and the spectrum panels.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol.plotting.design import plot_stabilization
    >>> t = np.linspace(0.0, 4.0, 41)
    >>> curves = {"identity start": (t, 1.0 + np.exp(-2 * t))}
    >>> before, after = np.array([0.3 + 0j, -0.5 + 0j]), np.array([-1.2 + 0.1j, -1.2 - 0.1j])
    >>> ax_l, ax_s = plot_stabilization(curves, before, after, rate=1.0, blowup=0.8)
    >>> len(ax_l.lines) >= 1 and len(ax_s.collections) + len(ax_s.lines) >= 2
    True
    """
    rate = as_positive_float("rate", rate)
    ax_l, ax_s = panels(ax, 2, width=9.0, height=3.6)
    draw_lambda_paths(ax_l, curves, blowup=blowup)
    draw_stabilization(ax_s, before, after, rate=rate)
    finish([ax_l, ax_s], path, title=title)
    return ax_l, ax_s
