"""Figures for gtcontrol runs (matplotlib, Agg, no global pyplot state).

Each function draws one figure from result data and saves it as PNG to ``path``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .._linalg import FloatArray, psd_factor
from .._status import Status
from ..model.moments import Trajectory

__all__ = [
    "new_figure",
    "plot_convergence",
    "plot_moments",
    "plot_token_clouds",
    "save_figure",
]


def new_figure(width: float = 8.0, height: float = 3.4) -> Figure:
    """A detached figure (attached to an Agg canvas, never to pyplot).

    Parameters
    ----------
    width, height
        Size in inches.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, with a constrained layout.
    """
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path) -> None:
    """Save ``fig`` as a PNG.

    Parameters
    ----------
    fig
        The figure.
    path
        Where to write the PNG.
    """
    fig.savefig(path, dpi=110)


def plot_moments(
    traj: Trajectory,
    path: str | Path,
    *,
    title: str = "",
    equilibrium_eigs: FloatArray | None = None,
    breakpoints: Sequence[float] | None = None,
) -> None:
    """Mean components and covariance eigenvalues against depth.

    Marks the blow-up time (dashed red), optional equilibrium eigenvalues (dotted) and layer
    switches (grey ticks). A trajectory that stopped early for another reason (overflow, a
    failed integration, a spent budget) says so in the title.

    Parameters
    ----------
    traj
        The moment trajectory.
    path
        Where to write the PNG.
    title
        Figure title, drawn as plain text (no mathtext: a `$` is a dollar sign).
    equilibrium_eigs
        Eigenvalues of an equilibrium covariance, drawn as dotted lines.
    breakpoints
        Layer switches (the first and last entries, 0 and T, are not drawn).
    """
    fig = new_figure()
    ax_m, ax_s = fig.subplots(1, 2)
    for i in range(traj.dim):
        ax_m.plot(traj.t, traj.mean[:, i], lw=1.4, label=f"m{i + 1}" if traj.dim <= 6 else None)
    eig = np.linalg.eigvalsh(traj.cov)
    positive = np.where(eig > 0, eig, np.nan)
    for i in range(traj.dim):
        ax_s.semilogy(traj.t, positive[:, i], lw=1.4)
    if equilibrium_eigs is not None:
        for w in np.atleast_1d(equilibrium_eigs):
            ax_s.axhline(float(w), color="k", ls=":", lw=1.0)
    for ax in (ax_m, ax_s):
        if math.isfinite(traj.blowup_time):
            ax.axvline(traj.blowup_time, color="tab:red", ls="--", lw=1.2, label="blow-up")
        if breakpoints is not None and len(breakpoints) > 2:
            for tb in breakpoints[1:-1]:
                ax.axvline(tb, color="0.85", lw=0.6, zorder=0)
        ax.set_xlabel("depth t")
    ax_m.set_title("mean")
    ax_s.set_title("covariance eigenvalues")
    if traj.dim <= 6 or math.isfinite(traj.blowup_time):
        ax_m.legend(fontsize=7, loc="best")
    if traj.status not in (Status.SUCCESS, Status.BLOWUP):
        title = f"{title} (stopped early: {traj.status})" if title else f"stopped: {traj.status}"
    if title:
        fig.suptitle(title, fontsize=10, parse_math=False)
    save_figure(fig, path)


def _ellipse(mean: FloatArray, cov: FloatArray, n_std: float = 2.0) -> FloatArray:
    """Points of the ``n_std`` ellipse of a 2-d Gaussian (degenerate ones become segments)."""
    th = np.linspace(0.0, 2.0 * np.pi, 200)
    circle = np.stack([np.cos(th), np.sin(th)], axis=1)
    return mean + n_std * circle @ psd_factor(cov).T


def plot_token_clouds(
    snapshots: Sequence[tuple[float, FloatArray]],
    predicted: Trajectory,
    path: str | Path,
    *,
    max_points: int = 2000,
    title: str = "",
) -> None:
    """Token clouds (first two coordinates) at a few depths with the predicted 2σ ellipse.

    Parameters
    ----------
    snapshots
        ``(t, tokens)`` pairs (e.g. :attr:`gtcontrol.TokenTrajectory.snapshots`).
    predicted
        The moment trajectory; the ellipse comes from its recorded depth closest to ``t``.
    path
        Where to write the PNG.
    max_points
        Tokens drawn per panel (the first ones).
    title
        Figure title, drawn as plain text (no mathtext: a `$` is a dollar sign).
    """
    n = len(snapshots)
    fig = new_figure(3.0 * n, 3.2)
    axes = np.atleast_1d(fig.subplots(1, n))
    for ax, (t, x) in zip(axes, snapshots):
        i = int(np.argmin(np.abs(predicted.t - t)))
        pts = x[:max_points, :2]
        ax.scatter(pts[:, 0], pts[:, 1], s=2, alpha=0.35, color="tab:blue", rasterized=True)
        e = _ellipse(predicted.mean[i, :2], predicted.cov[i, :2, :2])
        ax.plot(e[:, 0], e[:, 1], color="tab:red", lw=1.5)
        ax.set_title(f"t = {t:.3g}", fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
    if title:
        fig.suptitle(title, fontsize=10, parse_math=False)
    save_figure(fig, path)


def plot_convergence(
    n_tokens: Sequence[int],
    errors: Mapping[str, Sequence[float] | FloatArray],
    path: str | Path,
    *,
    title: str = "",
) -> None:
    """Log-log errors against the number of tokens with an ``N^(-1/2)`` reference line.

    Parameters
    ----------
    n_tokens
        The token counts ``N``.
    errors
        Error curves by label, one value per ``N``.
    path
        Where to write the PNG.
    title
        Axes title, drawn as plain text (no mathtext: a `$` is a dollar sign).
    """
    fig = new_figure(5.0, 3.8)
    ax = fig.subplots()
    ns = np.asarray(n_tokens, dtype=float)
    for name, err in errors.items():
        ax.loglog(ns, err, "o-", lw=1.4, label=name)
    ref0 = max(float(np.max(e)) for e in errors.values())
    ax.loglog(ns, ref0 * np.sqrt(ns[0] / ns), "k--", lw=1.0, label=r"$\propto N^{-1/2}$")
    ax.set_xlabel("number of tokens N")
    ax.set_ylabel("error at depth T")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)
    save_figure(fig, path)
