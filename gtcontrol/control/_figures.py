"""Drawing code of the control layer: steering, the geodesic, designs and their certificates.

The conventions of :mod:`gtcontrol.model._figures` hold: one given Axes, plain data or model
objects in (never the control results, which import this module when they draw).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._display import legend
from .._linalg import FloatArray
from ..model._figures import readable_log_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from ..model.gaussian import Gaussian
    from ..model.moments import Trajectory
    from ..model.params import Schedule

__all__ = [
    "draw_design_errors",
    "draw_distance",
    "draw_mean_cov_errors",
    "draw_parameter_norms",
    "draw_path_ess",
    "draw_radii",
    "draw_token_distance",
]


def draw_distance(ax: Axes, traj: Trajectory, target: Gaussian) -> None:
    """The Bures–Wasserstein distance to ``target`` along a moment trajectory (log scale).

    Parameters
    ----------
    ax
        The Axes.
    traj
        The moments along depth.
    target
        The Gaussian steered to.
    """
    dist = np.array([traj.at(i).bures_wasserstein(target) for i in range(len(traj))])
    ax.semilogy(traj.t, np.clip(dist, 1e-16, None), lw=1.4, color="k")
    ax.set_xlabel("depth t")
    ax.set_title("W2 distance to target")


def draw_parameter_norms(ax: Axes, schedule: Schedule) -> None:
    """Frobenius norms of ``A``, ``b``, ``V``, ``B`` per layer (heads summed in quadrature).

    Parameters
    ----------
    ax
        The Axes.
    schedule
        The layers.
    """
    layers = schedule.layers
    idx = np.arange(1, len(layers) + 1)
    norms = {
        "|A|": [float(np.linalg.norm(lay.A)) for lay in layers],
        "|b|": [float(np.linalg.norm(lay.b)) for lay in layers],
        "|V|": [float(np.sqrt(sum(np.sum(v**2) for v, _ in lay.heads))) for lay in layers],
        "|B|": [float(np.sqrt(sum(np.sum(b**2) for _, b in lay.heads))) for lay in layers],
    }
    width = 0.2
    for j, (name, vals) in enumerate(norms.items()):
        ax.bar(idx + (j - 1.5) * width, vals, width=width, label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel("Frobenius norm")
    ax.set_xticks(idx)
    legend(ax, fontsize=8)


def draw_design_errors(
    ax: Axes,
    t: FloatArray,
    errors: FloatArray,
    *,
    rate: float | None = None,
    title: str = "",
    color: str | None = None,
    label: str = "start",
) -> None:
    """Errors of several starts against depth (log scale) with the reference ``e^{−rate·t}``.

    Parameters
    ----------
    ax
        The Axes.
    t
        Depths ``(n,)``.
    errors
        ``(starts, n)``.
    rate
        Reference rate: a dashed ``e^{−rate·t}`` scaled to the largest initial error.
    title
        Axes title.
    color
        One colour for every start (one legend entry, ``label``); by default one colour and
        entry per start (``label 1``, ``label 2``, ...).
    label
        Legend label.
    """
    tt = np.asarray(t, dtype=float)
    errs = np.atleast_2d(np.asarray(errors, dtype=float))
    for i, e in enumerate(errs):
        name = (label if i == 0 else None) if color else f"{label} {i + 1}"
        ax.semilogy(tt, np.where(e > 0, e, np.nan), lw=1.2, color=color, label=name)
    if rate is not None and math.isfinite(rate) and rate > 0 and errs.shape[1]:
        e0 = float(np.nanmax(errs[:, 0])) if np.isfinite(errs[:, 0]).any() else 1.0
        ax.semilogy(
            tt,
            e0 * np.exp(-rate * tt),
            "--",
            color=color or "k",
            lw=1.0,
            label=f"e^(−{rate:.3g} t)",
        )
    ax.set_xlabel("depth t")
    if title:
        ax.set_title(title, fontsize=9, parse_math=False)
    positive = errs[np.isfinite(errs) & (errs > 0)]
    if positive.size:
        ax.set_ylim(bottom=max(1e-16, float(np.min(positive)) / 10))


def draw_mean_cov_errors(
    ax: Axes,
    t: FloatArray,
    mean_error: FloatArray,
    cov_error: FloatArray,
    *,
    rate: float | None = None,
    cov_rate: float | None = None,
) -> None:
    """Mean (blue) and covariance (orange) errors of several starts on one Axes, with rates.

    Parameters
    ----------
    ax
        The Axes.
    t
        Depths ``(n,)``.
    mean_error, cov_error
        ``(starts, n)``.
    rate, cov_rate
        The reference rates of :func:`draw_design_errors`.
    """
    draw_design_errors(ax, t, mean_error, rate=rate, color="C0", label="mean")
    draw_design_errors(ax, t, cov_error, rate=cov_rate, color="C1", label="covariance")
    starts = np.atleast_2d(mean_error).shape[0]
    ax.set_title(f"relative errors of {starts} starts", fontsize=10)
    legend(ax, fontsize=7, loc="best")


def draw_path_ess(
    ax: Axes, t: FloatArray, worst: FloatArray, *, min_ess: float | None, scale: float = 1.0
) -> None:
    """The predicted worst ``ESS/N`` of every head along a design's path, with the bound.

    Parameters
    ----------
    ax
        The Axes.
    t, worst
        Depths ``(n,)`` and the worst ``ESS/N`` per head ``(n, heads)``.
    min_ess
        The required bound (dashed), or ``None``.
    scale
        The head scale applied (named in the title).
    """
    for h, w in enumerate(np.atleast_2d(np.asarray(worst, dtype=float).T)):
        ax.semilogy(t, np.where(w > 0, w, np.nan), lw=1.4, label=f"head {h + 1}")
    readable_log_axis(ax.yaxis)
    if min_ess is not None:
        ax.axhline(min_ess, color="tab:red", ls="--", lw=1.0, label="required")
    ax.set_xlabel("depth t")
    ax.set_ylabel("predicted worst ESS/N")
    ax.set_title(f"softmax ESS along the path (scale {scale:.3g})", fontsize=10)
    legend(ax, fontsize=7, loc="best")


def draw_token_distance(
    ax: Axes, t: FloatArray, w2: FloatArray, *, floor: float, threshold: float, title: str = ""
) -> None:
    """The tokens' distance to the target against depth, with the sampling floor.

    Parameters
    ----------
    ax
        The Axes.
    t, w2
        Depths and ``W2`` of the tokens' empirical moments to the target there.
    floor
        The sampling floor (dotted).
    threshold
        The accepted distance (dashed).
    title
        Axes title (plain text).
    """
    ax.semilogy(t, np.clip(w2, 1e-16, None), lw=1.4, label="W2(tokens, target)")
    ax.axhline(floor, color="k", ls=":", lw=1.0, label="sampling floor")
    ax.axhline(threshold, color="tab:red", ls="--", lw=1.0, label="threshold")
    ax.set_xlabel("depth t")
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)
    legend(ax, fontsize=7, loc="best")


def draw_radii(ax: Axes, radii: Mapping[str, float], *, title: str = "") -> None:
    """Stability radii as bars (``inf``, none found, as a hatched bar at the top).

    Parameters
    ----------
    ax
        The Axes.
    radii
        Radius by name.
    title
        Axes title (plain text).
    """
    names = list(radii)
    vals = np.array([radii[k] for k in names], dtype=float)
    finite = vals[np.isfinite(vals)]
    top = 1.2 * float(np.max(finite)) if finite.size and np.max(finite) > 0 else 1.0
    bars = ax.bar(
        names, np.where(np.isfinite(vals), vals, top), color=[f"C{i}" for i in range(len(names))]
    )
    for bar, v in zip(bars, vals, strict=True):
        if not math.isfinite(v):
            bar.set_hatch("//")
            bar.set_alpha(0.5)
    ax.set_ylabel("distance to instability")
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)


def draw_stabilization(ax: Axes, before: Any, after: Any, *, rate: float) -> None:
    """The rightmost eigenvalues of the linearization before and after stabilization."""
    from ..analysis._figures import draw_spectrum

    if before is not None and len(before):
        draw_spectrum(ax, before, label="heads kept, A designed", marker="o")
    if after is not None and len(after):
        draw_spectrum(
            ax, after, label="stabilized", marker="x", rate=rate, title="linearization spectrum"
        )
    legend(ax, loc="best", fontsize="small")


def draw_lambda_paths(
    ax: Axes,
    curves: Mapping[str, tuple[FloatArray, FloatArray]],
    *,
    blowup: float | None = None,
    title: str = "λ_max(Σ) over depth",
) -> None:
    """``λ_max(Σ(t))`` of several runs on a log scale (e.g. before and after stabilization).

    ``curves`` maps a label to ``(t, λ_max)``; ``blowup`` draws the given layer's blow-up depth.
    """
    for label, (t, lam) in curves.items():
        ok = np.asarray(lam) > 0
        ax.plot(np.asarray(t)[ok], np.asarray(lam)[ok], label=label, lw=1.4)
    if blowup is not None and math.isfinite(blowup):
        ax.axvline(blowup, color="C3", ls=":", lw=1.0, label=f"blow-up t* = {blowup:.4g}")
    ax.set_yscale("log")
    ax.set_xlabel("depth t")
    ax.set_ylabel("λ_max(Σ)")
    ax.set_title(title, parse_math=False)
    legend(ax, fontsize=7, loc="best")
