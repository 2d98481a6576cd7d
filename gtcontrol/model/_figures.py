"""Drawing code of the model layer: moments against depth, Gaussians and token clouds.

The conventions of every layer's drawing module (this one, and ``_figures`` in analysis, control
and experiments): each function draws plain data (arrays, numbers) on one matplotlib Axes that
it is given (it never creates figures and never touches pyplot state); the results'
``.plot(ax)`` (:mod:`gtcontrol._display`) and the figures of :mod:`gtcontrol.plotting` are built
from them, so that each drawing idea has one home. The functions take data rather than result
objects so that the result modules, which import them when drawing, are not imported back (no
cycles). Nothing here imports matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._display import legend
from .._linalg import FloatArray, psd_factor

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "draw_covariance",
    "draw_eigenvalues",
    "draw_gaussian",
    "draw_mean",
    "draw_token_cloud",
    "ellipse",
    "mark_depths",
    "readable_log_axis",
]


def readable_log_axis(axis: Any) -> None:
    """Label the minor ticks of a log axis as plain numbers (``0.6``, not ``6×10⁻¹``).

    matplotlib labels the minor ticks of a log axis only when it spans less than about a
    decade; written in scientific notation those labels are wide and crowd each other. The
    choice of which ticks get a label stays matplotlib's. Call it after the last ``semilogy``
    (setting a scale resets the formatters).

    Parameters
    ----------
    axis
        ``ax.xaxis`` or ``ax.yaxis`` of a log-scaled Axes.
    """
    from matplotlib.ticker import LogFormatterSciNotation

    class _PlainMinor(LogFormatterSciNotation):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:.3g}" if super().__call__(x, pos) else ""

    axis.set_minor_formatter(_PlainMinor(labelOnlyBase=False))


def mark_depths(
    ax: Axes,
    *,
    blowup_time: float = math.inf,
    breakpoints: Sequence[float] | FloatArray | None = None,
    blowup_label: str | None = "blow-up",
) -> None:
    """A dashed red line at a finite blow-up time and grey ticks at the inner layer switches.

    Parameters
    ----------
    ax
        The Axes.
    blowup_time
        Drawn when finite.
    breakpoints
        Layer switches ``0, ..., T`` (the first and last are not drawn).
    blowup_label
        Legend label of the blow-up line.
    """
    if math.isfinite(blowup_time):
        ax.axvline(blowup_time, color="tab:red", ls="--", lw=1.2, label=blowup_label)
    if breakpoints is not None and len(breakpoints) > 2:
        for tb in list(breakpoints)[1:-1]:
            ax.axvline(float(tb), color="0.85", lw=0.6, zorder=0)


def draw_mean(
    ax: Axes,
    t: FloatArray,
    mean: FloatArray,
    *,
    target: FloatArray | None = None,
    legend: bool = True,
) -> None:
    """Mean components against depth, with optional target values (dotted, same colours).

    Parameters
    ----------
    ax
        The Axes.
    t, mean
        Depths ``(n,)`` and means ``(n, d)``.
    target
        Target mean ``(d,)``.
    legend
        Label the components (up to six).
    """
    d = mean.shape[1]
    for i in range(d):
        color = f"C{i % 10}"
        label = f"m{i + 1}" if legend and d <= 6 else None
        ax.plot(t, mean[:, i], lw=1.4, color=color, label=label)
        if target is not None:
            ax.axhline(float(target[i]), color=color, ls=":", lw=1.0)
    ax.set_xlabel("depth t")


def draw_eigenvalues(
    ax: Axes,
    t: FloatArray,
    cov: FloatArray,
    *,
    limit: ArrayLike | None = None,
    limit_label: str | None = None,
    labels: bool = False,
) -> None:
    """Eigenvalues of covariances ``(n, d, d)`` against depth on a log scale.

    Non-positive eigenvalues (a collapse to rank deficiency) are left out of the log scale.

    Parameters
    ----------
    ax
        The Axes.
    t, cov
        Depths ``(n,)`` and covariances ``(n, d, d)``.
    limit
        Eigenvalues of a limit or target covariance, drawn as dotted black lines.
    limit_label
        Legend label of the first limit line.
    labels
        Label the curves ``λ1, λ2, ...`` (up to six).
    """
    eig = np.linalg.eigvalsh(cov) if cov.ndim == 3 else np.asarray(cov, dtype=float)
    positive = np.where(eig > 0, eig, np.nan)
    d = positive.shape[1]
    for i in range(d):
        ax.semilogy(t, positive[:, i], lw=1.5, label=f"λ{i + 1}" if labels and d <= 6 else None)
    readable_log_axis(ax.yaxis)
    if limit is not None:
        drawn = 0
        for w in np.atleast_1d(limit):
            if w > 0:
                ax.axhline(
                    float(w), color="k", ls=":", lw=1.0, label=limit_label if not drawn else None
                )
                drawn += 1
    ax.set_xlabel("depth t")


def draw_covariance(
    ax: Axes,
    t: FloatArray,
    cov: FloatArray,
    *,
    blowup_time: float = math.inf,
    blowup_label: str = "blow-up",
    breakpoints: Sequence[float] | FloatArray | None = None,
    limit: ArrayLike | None = None,
    limit_label: str | None = None,
    title: str = "covariance eigenvalues",
    ylabel: str = "eigenvalues of Σ(t)",
) -> None:
    """The covariance eigenvalues of a trajectory, labelled, with its depths marked.

    :func:`draw_eigenvalues` with the blow-up time and layer switches of :func:`mark_depths`,
    a title, an axis label and a legend: the figure of every moment trajectory.

    Parameters
    ----------
    ax
        The Axes.
    t, cov
        Depths ``(n,)`` and covariances ``(n, d, d)``.
    blowup_time, blowup_label, breakpoints
        See :func:`mark_depths`.
    limit, limit_label
        See :func:`draw_eigenvalues`.
    title, ylabel
        Axes title (plain text) and y label.
    """
    draw_eigenvalues(ax, t, cov, limit=limit, limit_label=limit_label, labels=True)
    mark_depths(ax, blowup_time=blowup_time, breakpoints=breakpoints, blowup_label=blowup_label)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, parse_math=False)
    legend(ax, fontsize=7, loc="best")


def ellipse(mean: FloatArray, cov: FloatArray, n_std: float = 2.0) -> FloatArray:
    """Points ``(200, 2)`` of the ``n_std`` ellipse of a 2-d Gaussian (degenerate: a segment).

    Parameters
    ----------
    mean, cov
        The 2-d mean and covariance.
    n_std
        Radius in standard deviations.

    Returns
    -------
    FloatArray
        The closed curve.
    """
    th = np.linspace(0.0, 2.0 * np.pi, 200)
    circle = np.stack([np.cos(th), np.sin(th)], axis=1)
    out: FloatArray = mean + n_std * circle @ psd_factor(cov).T
    return out


def draw_gaussian(
    ax: Axes, mean: FloatArray, cov: FloatArray, *, n_std: float = 2.0, **style: Any
) -> None:
    """A Gaussian: its ``n_std`` ellipse in the first two coordinates (its density in 1-d).

    Parameters
    ----------
    ax
        The Axes.
    mean, cov
        The mean ``(d,)`` and covariance ``(d, d)``.
    n_std
        Radius of the ellipse in standard deviations.
    **style
        Line style passed to ``ax.plot`` (e.g. ``color``).
    """
    style = {"color": "tab:red", "lw": 1.5, **style}
    if mean.shape[0] == 1:
        s = math.sqrt(max(float(cov[0, 0]), 0.0))
        m = float(mean[0])
        if s == 0.0:
            ax.axvline(m, **style)
        else:
            x = np.linspace(m - 4 * s, m + 4 * s, 200)
            ax.plot(x, np.exp(-0.5 * ((x - m) / s) ** 2) / (s * math.sqrt(2 * math.pi)), **style)
        ax.set_xlabel("x")
        ax.set_ylabel("density")
        return
    e = ellipse(mean[:2], cov[:2, :2], n_std)
    ax.plot(e[:, 0], e[:, 1], **style)
    ax.plot(mean[0], mean[1], "+", color=style["color"], ms=8)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")


def draw_token_cloud(
    ax: Axes,
    t: float,
    tokens: FloatArray,
    mean: FloatArray,
    cov: FloatArray,
    *,
    max_points: int = 2000,
) -> None:
    """Tokens (first two coordinates) at depth ``t`` with the predicted 2σ ellipse.

    Parameters
    ----------
    ax
        The Axes.
    t, tokens
        The depth and the tokens ``(N, d)`` there.
    mean, cov
        The predicted moments at ``t``.
    max_points
        Tokens drawn (the first ones).
    """
    pts = np.asarray(tokens)[:max_points, :2]
    ax.scatter(pts[:, 0], pts[:, 1], s=2, alpha=0.35, color="tab:blue", rasterized=True)
    e = ellipse(mean[:2], cov[:2, :2])
    ax.plot(e[:, 0], e[:, 1], color="tab:red", lw=1.5)
    ax.set_title(f"t = {t:.3g}", fontsize=9)
    ax.set_aspect("equal", adjustable="datalim")
