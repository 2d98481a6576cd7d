"""Figures for steering runs (matplotlib, Agg, no global pyplot state).

Each function draws one figure from result data and saves it as PNG to ``path``. Token clouds
against the predicted ellipses are drawn by :func:`gtcontrol.plotting.core.plot_token_clouds`.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..model.gaussian import Gaussian
from ..model.moments import Trajectory
from ..model.params import Schedule
from .core import new_figure, save_figure

__all__ = ["plot_parameter_norms", "plot_steering_moments"]


def plot_steering_moments(
    traj: Trajectory,
    target: Gaussian,
    path: str | Path,
    *,
    breakpoints: Sequence[float] | None = None,
    title: str = "",
) -> None:
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
        Where the PNG is written.
    breakpoints
        Layer switches ``0, h, ..., T`` (e.g. ``schedule.breakpoints``); the inner ones are drawn.
    title
        Figure title (none when empty), drawn as plain text (no mathtext).
    """
    fig = new_figure(11.0, 3.4)
    ax_m, ax_s, ax_w = fig.subplots(1, 3)
    colors = [f"C{i % 10}" for i in range(traj.dim)]
    for i in range(traj.dim):
        ax_m.plot(traj.t, traj.mean[:, i], lw=1.4, color=colors[i], label=f"m{i + 1}")
        ax_m.axhline(float(target.mean[i]), color=colors[i], ls=":", lw=1.0)
    eig = np.linalg.eigvalsh(traj.cov)
    floor = max(float(np.max(eig)), 1e-300) * 1e-12
    for i in range(traj.dim):
        ax_s.semilogy(traj.t, np.clip(eig[:, i], floor, None), lw=1.4)
    for w in np.linalg.eigvalsh(target.cov):
        if w > floor:
            ax_s.axhline(float(w), color="k", ls=":", lw=1.0)
    dist = np.array([traj.at(i).bures_wasserstein(target) for i in range(len(traj))])
    ax_w.semilogy(traj.t, np.clip(dist, 1e-16, None), lw=1.4, color="k")
    for ax in (ax_m, ax_s, ax_w):
        if breakpoints is not None and len(breakpoints) > 2:
            for tb in breakpoints[1:-1]:
                ax.axvline(float(tb), color="0.85", lw=0.6, zorder=0)
        ax.set_xlabel("depth t")
    ax_m.set_title("mean (target dotted)")
    ax_s.set_title("covariance eigenvalues")
    ax_w.set_title("W2 distance to target")
    if traj.dim <= 6:
        ax_m.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=10, parse_math=False)
    save_figure(fig, path)


def plot_parameter_norms(schedule: Schedule, path: str | Path, *, title: str = "") -> None:
    """Frobenius norms of ``A``, ``b``, ``V``, ``B`` per layer (heads summed in quadrature).

    Parameters
    ----------
    schedule
        The layers (e.g. ``SteeringResult.controls``).
    path
        Where the PNG is written.
    title
        Figure title (none when empty), drawn as plain text (no mathtext).
    """
    layers = schedule.layers
    idx = np.arange(1, len(layers) + 1)
    norms = {
        "|A|": [float(np.linalg.norm(lay.A)) for lay in layers],
        "|b|": [float(np.linalg.norm(lay.b)) for lay in layers],
        "|V|": [float(np.sqrt(sum(np.sum(v**2) for v, _ in lay.heads))) for lay in layers],
        "|B|": [float(np.sqrt(sum(np.sum(b**2) for _, b in lay.heads))) for lay in layers],
    }
    fig = new_figure(6.0, 3.4)
    ax = fig.subplots()
    width = 0.2
    for j, (name, vals) in enumerate(norms.items()):
        ax.bar(idx + (j - 1.5) * width, vals, width=width, label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel("Frobenius norm")
    ax.set_xticks(idx)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)
    save_figure(fig, path)
