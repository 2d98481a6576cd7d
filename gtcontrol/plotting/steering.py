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
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from .._display import legend
from .._docstring import fill
from .._linalg import FloatArray
from .._status import shown
from .._validation import MAX_SAMPLES, as_float_array, as_positive_int
from ..control._figures import draw_distance, draw_parameter_norms
from ..errors import InvalidParametersError
from ..model._figures import draw_eigenvalues, draw_mean, mark_depths
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory
from ..model.params import Schedule
from .core import FIGURE_DOCS, as_trajectory, finish, panels, with_gaps

__all__ = [
    "plot_added_control",
    "plot_base_against_steered",
    "plot_parameter_norms",
    "plot_steering_moments",
    "plot_steering_summary",
]


@fill(**FIGURE_DOCS)
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
    %(path)s
    ax
        Three Axes to draw on; ``None``: a new figure.
    breakpoints
        Layer switches ``0, h, ..., T`` (e.g. ``schedule.breakpoints``); the inner ones are drawn.
    %(figure_title)s

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The mean, eigenvalue and distance panels.

    Raises
    ------
    InvalidParametersError
        If ``traj`` is not a :class:`~gtcontrol.Trajectory`, ``target`` not a Gaussian of its
        dimension, or ``breakpoints`` not a 1-d array of finite depths.

    Examples
    --------
    >>> from gtcontrol import Gaussian, exact_layer_steering, simulate
    >>> g0 = Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, 0.5]])
    >>> g1 = Gaussian([1.0, 0.5], [[2.0, 0.3], [0.3, 1.0]])
    >>> schedule = exact_layer_steering(g0, g1, 1.0, n_layers=3, mode="ffn")
    >>> traj = simulate(schedule, g0, n_points=31)
    >>> from gtcontrol.plotting.steering import plot_steering_moments
    >>> axes = plot_steering_moments(traj, g1, breakpoints=schedule.breakpoints)
    >>> [a.get_title() for a in axes[:2]]
    ['mean (target dotted)', 'covariance eigenvalues']
    """
    _moments_and_target(traj, target)
    breakpoints = _depths(breakpoints)
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


@fill(**FIGURE_DOCS)
def plot_parameter_norms(
    schedule: Schedule, path: str | Path | None = None, *, ax: Axes | None = None, title: str = ""
) -> Axes:
    """Frobenius norms of ``A``, ``b``, ``V``, ``B`` per layer (heads summed in quadrature).

    Parameters
    ----------
    schedule
        The layers (e.g. ``SteeringResult.controls``).
    %(one_axes)s

    %(axes_returned)s

    Raises
    ------
    InvalidParametersError
        If ``schedule`` is not a :class:`~gtcontrol.Schedule`.

    Examples
    --------
    >>> from gtcontrol import Gaussian, exact_layer_steering
    >>> from gtcontrol.plotting.steering import plot_parameter_norms
    >>> g0, g1 = Gaussian([0.0], [[1.0]]), Gaussian([1.0], [[2.0]])
    >>> ax = plot_parameter_norms(exact_layer_steering(g0, g1, 1.0, n_layers=4, mode="ffn"))
    >>> len(ax.patches)  # four bars (|A|, |b|, |V|, |B|) per layer
    16
    """
    if not isinstance(schedule, Schedule):
        raise InvalidParametersError(
            f"schedule: expected a Schedule (e.g. SteeringResult.controls), got {shown(schedule)}"
        )
    (a,) = panels(ax, 1, width=6.0, height=3.4)
    draw_parameter_norms(a, schedule)
    finish([a], path, title=title)
    return a


def _moments_and_target(traj: Any, target: Any) -> None:
    """Refuse a ``traj`` that is no Trajectory, or a ``target`` that is no Gaussian of its
    dimension, naming the argument."""
    d = as_trajectory("traj", traj).dim
    if not isinstance(target, Gaussian) or target.dim != d:
        got = f"dimension {target.dim}" if isinstance(target, Gaussian) else shown(target)
        raise InvalidParametersError(
            f"target: expected a Gaussian of the trajectory's dimension {d}, got {got}"
        )


def _depths(breakpoints: Any) -> list[float] | None:
    """``breakpoints`` as a list of finite depths (``None`` stays ``None``), or refuse them."""
    if breakpoints is None:
        return None
    return [float(t) for t in as_float_array("breakpoints", breakpoints, ndim=1)]


def _spread(eigenvalues: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``λ_max`` and ``tr Σ`` of each row of covariance eigenvalues (NaN rows kept)."""
    lam = np.asarray(eigenvalues, dtype=float)
    return lam[:, -1], lam.sum(axis=1)


@fill(**FIGURE_DOCS)
def plot_steering_summary(
    traj: Trajectory,
    target: Gaussian,
    eigenvalues: FloatArray,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    breakpoints: Sequence[float] | None = None,
    n_distances: int = 26,
    title: str = "",
) -> tuple[Axes, Axes, Axes]:
    """Moments against depth on the way to ``target``, compact for a large dimension.

    Three panels: ``λ_max(Σ)`` and ``tr Σ`` (target values dotted, log scale), ``|m|`` (target
    dotted) and the Bures–Wasserstein distance to the target relative to
    ``max(1, |m1|, sqrt(tr Σ1))`` (log scale, at ``n_distances`` depths: each costs matrix
    square roots of size ``d``). Layer switches are grey ticks.

    Parameters
    ----------
    traj
        The moments along depth.
    target
        The Gaussian steered to.
    eigenvalues
        The covariance eigenvalues of each recorded depth, ascending, shape ``(len(traj), d)``
        (e.g. ``stack_eigenvalues(traj.cov)``: computed once for the record and the figure).
    %(path)s
    ax
        Three Axes to draw on; ``None``: a new figure.
    breakpoints
        Layer switches ``0, h, ..., T``; the inner ones are drawn.
    n_distances
        Number of depths at which the distance is computed (evenly spread, both ends kept;
        positive).
    %(figure_title)s

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The covariance, mean and distance panels.

    Raises
    ------
    InvalidParametersError
        If ``traj`` is not a :class:`~gtcontrol.Trajectory`, ``target`` not a Gaussian of its
        dimension, ``eigenvalues`` not a real array ``(len(traj), d)`` (NaN rows allowed),
        ``breakpoints`` not a 1-d array of finite depths, or ``n_distances`` not a positive
        integer.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Gaussian, exact_layer_steering, simulate
    >>> g0 = Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, 0.5]])
    >>> g1 = Gaussian([1.0, 0.5], [[2.0, 0.3], [0.3, 1.0]])
    >>> schedule = exact_layer_steering(g0, g1, 1.0, n_layers=3, mode="ffn")
    >>> traj = simulate(schedule, g0, n_points=31)
    >>> from gtcontrol.plotting.steering import plot_steering_summary
    >>> eigenvalues = np.linalg.eigvalsh(traj.cov)  # ascending, one row per depth
    >>> axes = plot_steering_summary(traj, g1, eigenvalues, n_distances=6)
    >>> axes[2].get_title()
    'relative W2 distance to target'
    """
    n_distances = as_positive_int("n_distances", n_distances, maximum=MAX_SAMPLES)
    _moments_and_target(traj, target)
    lam = with_gaps("eigenvalues", eigenvalues, (len(traj), traj.dim))
    breakpoints = _depths(breakpoints)
    ax_s, ax_m, ax_w = panels(ax, 3, width=11.0, height=3.4)
    lam_max, trace = _spread(lam)
    goal = np.linalg.eigvalsh(target.cov)
    ax_s.semilogy(traj.t, lam_max, color="tab:blue", label="λ_max")
    ax_s.semilogy(traj.t, trace, color="tab:orange", label="tr Σ")
    ax_s.axhline(max(float(goal[-1]), 1e-300), color="tab:blue", ls=":")
    ax_s.axhline(max(float(goal.sum()), 1e-300), color="tab:orange", ls=":")
    ax_m.plot(traj.t, np.linalg.norm(traj.mean, axis=1), color="k", label="|m|")
    ax_m.axhline(float(np.linalg.norm(target.mean)), color="k", ls=":")
    scale = max(1.0, float(np.linalg.norm(target.mean)), float(np.sqrt(max(goal.sum(), 0.0))))
    idx = np.unique(np.linspace(0, len(traj) - 1, max(int(n_distances), 2)).round().astype(int))
    dist = np.array([traj.at(int(i)).bures_wasserstein(target) for i in idx]) / scale
    ax_w.semilogy(traj.t[idx], np.clip(dist, 1e-16, None), "o-", ms=3, lw=1.2, color="k")
    for a in (ax_s, ax_m, ax_w):
        mark_depths(a, breakpoints=breakpoints)
        a.set_xlabel("depth t")
    ax_s.set_title("covariance (target dotted)")
    ax_m.set_title("|mean| (target dotted)")
    ax_w.set_title("relative W2 distance to target")
    legend(ax_s, fontsize=8, loc="best")
    finish([ax_s, ax_m, ax_w], path, title=title)
    return ax_s, ax_m, ax_w


@fill(**FIGURE_DOCS)
def plot_added_control(
    added_A: Sequence[FloatArray],
    added_b: Sequence[FloatArray],
    path: str | Path | None = None,
    *,
    ax: Axes | None = None,
    title: str = "",
) -> Axes:
    """The size of the control added to a base, per sublayer: ``‖A_k‖_F`` and ``|b_k|``.

    Parameters
    ----------
    added_A, added_b
        The additions of each sublayer (the returned layers' ``A``, ``b`` less the base's).
    %(one_axes)s

    %(axes_returned)s

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol.plotting.steering import plot_added_control
    >>> added_A = [0.1 * k * np.eye(2) for k in (1, 2, 3)]
    >>> added_b = [np.array([0.2, -0.1])] * 3
    >>> ax = plot_added_control(added_A, added_b, title="additions")
    >>> len(ax.patches)  # a bar for ‖A_k‖_F and one for |b_k| per sublayer
    6
    """
    (a,) = panels(ax, 1, width=6.0, height=3.4)
    idx = np.arange(1, len(added_A) + 1)
    width = 0.38
    sizes_A = [float(np.linalg.norm(x)) for x in added_A]
    sizes_b = [float(np.linalg.norm(x)) for x in added_b]
    a.bar(idx - width / 2, sizes_A, width, label="‖A_k‖_F")
    a.bar(idx + width / 2, sizes_b, width, label="|b_k|")
    a.set_ylim(0.0, 1.3 * max([*sizes_A, *sizes_b, 1e-300]))  # room for the legend
    a.set_xlabel("sublayer k")
    a.set_ylabel("norm of the addition")
    a.set_xticks(idx)
    legend(a, fontsize=8)
    finish([a], path, title=title)
    return a


@fill(**FIGURE_DOCS)
def plot_base_against_steered(
    steered: tuple[FloatArray, FloatArray],
    base: tuple[FloatArray, FloatArray] | None,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    blowup_time: float = float("inf"),
    breakpoints: Sequence[float] | None = None,
    title: str = "",
) -> tuple[Axes, Axes]:
    """The base's own flow from the initial against the steered flow: ``λ_max`` and ``tr Σ``.

    Parameters
    ----------
    steered, base
        ``(t, covariance eigenvalues)`` of each flow (ascending eigenvalues, one row per
        depth); ``base`` may stop at its blow-up, marked at ``blowup_time``; ``None``: not drawn.
    %(path)s
    ax
        Two Axes to draw on; ``None``: a new figure.
    blowup_time
        The base flow's blow-up depth (drawn when finite).
    breakpoints
        Layer switches of the steered flow; the inner ones are drawn.
    %(figure_title)s

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The ``λ_max`` and ``tr Σ`` panels.

    Examples
    --------
    The base alone blows up at ``T* = 0.5``; the steered flow holds the covariance:

    >>> import numpy as np
    >>> from gtcontrol import Gaussian, Layer, simulate
    >>> from gtcontrol.plotting.steering import plot_base_against_steered
    >>> g0 = Gaussian([0.0], [[1.0]])
    >>> base = simulate(Layer(V=[[1.0]], B=[[1.0]]), g0, 1.0, n_points=21)
    >>> steered = simulate(Layer(A=[[-0.5]]), g0, 1.0, n_points=21)
    >>> ax_l, ax_t = plot_base_against_steered(
    ...     (steered.t, np.linalg.eigvalsh(steered.cov)),
    ...     (base.t, np.linalg.eigvalsh(base.cov)),
    ...     blowup_time=base.blowup_time,
    ... )
    >>> ax_l.get_title(), len(ax_t.lines) >= 2
    ('λ_max(Σ)', True)
    """
    ax_l, ax_t = panels(ax, 2, width=9.0, height=3.4)
    flows = [("steered", "k", steered)] + ([("base alone", "tab:red", base)] if base else [])
    for label, color, (t, lam) in flows:
        lam_max, trace = _spread(lam)
        ax_l.semilogy(t, lam_max, color=color, label=label)
        ax_t.semilogy(t, trace, color=color, label=label)
    for a, name in ((ax_l, "λ_max(Σ)"), (ax_t, "tr Σ")):
        mark_depths(a, blowup_time=blowup_time, breakpoints=breakpoints)
        a.set_xlabel("depth t")
        a.set_title(name)
    legend(ax_l, fontsize=8, loc="best")
    finish([ax_l, ax_t], path, title=title)
    return ax_l, ax_t
