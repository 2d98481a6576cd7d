"""Figures for steering runs (matplotlib's object API, no global pyplot state).

Each function draws one figure from result data on Axes that it is given (``ax=``) or on a new
detached figure, saves it as PNG when given a ``path``, and returns its Axes. The panels are
drawn by :mod:`gtcontrol.control._figures` and :mod:`gtcontrol.model._figures`; token clouds
against the predicted ellipses are :func:`gtcontrol.plotting.core.plot_token_clouds`.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from .._display import legend
from ..control._figures import draw_distance, draw_parameter_norms
from ..model._figures import draw_eigenvalues, draw_mean, mark_depths
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory
from ..model.params import Schedule
from .core import finish, panels

__all__ = ["plot_parameter_norms", "plot_steering_moments"]


def plot_steering_moments(
    traj: Trajectory,
    target: Gaussian,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    breakpoints: Sequence[float] | None = None,
    title: str = "",
) -> tuple[Axes, Axes, Axes]:
    """Moments against depth on the way to ``target``.

    Three panels: mean components (target values dotted), covariance eigenvalues (target
    eigenvalues dotted, log scale) and the Bures–Wasserstein distance to the target (log scale).
    Layer switches are grey ticks.

    Parameters
    ----------
    traj
        The moments along depth (e.g. ``SteeringResult.trajectory``).
    target
        The Gaussian steered to.
    path
        Where the PNG is written (``None``: not saved).
    ax
        Three Axes to draw on; ``None``: a new figure.
    breakpoints
        Layer switches ``0, h, ..., T`` (e.g. ``schedule.breakpoints``); the inner ones are drawn.
    title
        Figure title (none when empty), drawn as plain text (no mathtext).

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The mean, eigenvalue and distance panels.
    """
    ax_m, ax_s, ax_w = panels(ax, 3, width=11.0, height=3.4)
    draw_mean(ax_m, traj.t, traj.mean, target=target.mean)
    draw_eigenvalues(ax_s, traj.t, traj.cov, limit=np.linalg.eigvalsh(target.cov))
    draw_distance(ax_w, traj, target)
    for a in (ax_m, ax_s, ax_w):
        mark_depths(a, breakpoints=breakpoints)
    ax_m.set_title("mean (target dotted)")
    ax_s.set_title("covariance eigenvalues")
    if traj.dim <= 6:
        legend(ax_m, fontsize=7, loc="best")
    finish([ax_m, ax_s, ax_w], path, title=title)
    return ax_m, ax_s, ax_w


def plot_parameter_norms(
    schedule: Schedule, path: str | Path | None = None, *, ax: Axes | None = None, title: str = ""
) -> Axes:
    """Frobenius norms of ``A``, ``b``, ``V``, ``B`` per layer (heads summed in quadrature).

    Parameters
    ----------
    schedule
        The layers (e.g. ``SteeringResult.controls``).
    path
        Where the PNG is written (``None``: not saved).
    ax
        The Axes to draw on; ``None``: a new figure.
    title
        Axes title (none when empty), drawn as plain text (no mathtext).

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.
    """
    (a,) = panels(ax, 1, width=6.0, height=3.4)
    draw_parameter_norms(a, schedule)
    finish([a], path, title=title)
    return a
