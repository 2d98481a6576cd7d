"""Figures for gtcontrol runs (matplotlib's object API, no global pyplot state).

Each function draws one figure from result data on Axes that it is given (``ax=``) or on a new
detached figure, saves it as PNG when given a ``path``, and returns its Axes. The drawing code
itself lives with the results (``gtcontrol/model/_figures.py``, ``analysis/_figures.py``,
``control/_figures.py``), which the results' ``.plot(ax)`` use too; this package arranges the
panels and writes the files.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .._display import legend
from .._docstring import fill
from .._linalg import FloatArray
from .._result_file import OutputError, show_path
from .._status import landed, shown
from .._validation import MAX_SAMPLES, as_float_array, as_positive_float, as_positive_int
from ..analysis._figures import draw_convergence
from ..errors import InvalidParametersError
from ..model._figures import draw_eigenvalues, draw_mean, draw_token_cloud, mark_depths
from ..model.moments import Trajectory

__all__ = [
    "MAX_INCHES",
    "finish",
    "new_figure",
    "panels",
    "plot_convergence",
    "plot_moments",
    "plot_token_clouds",
    "save_figure",
]

#: Largest side of a figure in inches: Agg draws at most 2¹⁶ pixels a side (595 inches at the
#: 110 dpi of :func:`save_figure`).
MAX_INCHES = 500.0

_PATH_DOC = "path\n    Where to write the PNG (``None``: not saved)."
_AX_DOC = "ax\n    The Axes to draw on; ``None``: a new figure."
#: ``title`` as :func:`finish` (or the Axes itself) draws it: skipped when empty, no mathtext.
_TITLE_DOC = (
    "title\n    {} title (none when empty), drawn as plain text (no mathtext: a ``$`` is a "
    "dollar sign)."
)

#: The docstring entries every figure function shares (spliced in by `_docstring.fill`);
#: ``one_axes``: ``path, ax, title``, which a one-Axes figure function takes together.
FIGURE_DOCS = {
    "path": _PATH_DOC,
    "ax": _AX_DOC,
    "axes_returned": "Returns\n-------\nmatplotlib.axes.Axes\n    The Axes drawn on.",
    "figure_title": _TITLE_DOC.format("Figure"),
    "axes_title": _TITLE_DOC.format("Axes"),
    "one_axes": "\n".join((_PATH_DOC, _AX_DOC, _TITLE_DOC.format("Axes"))),
}


def new_figure(*, width: float = 8.0, height: float = 3.4) -> Figure:
    """A detached figure (attached to an Agg canvas, never to pyplot).

    Parameters
    ----------
    width, height
        Size in inches (positive, at most :data:`MAX_INCHES`).

    Returns
    -------
    matplotlib.figure.Figure
        The figure, with a constrained layout.

    Raises
    ------
    InvalidParametersError
        On a size that is not a positive number up to :data:`MAX_INCHES`.

    Examples
    --------
    >>> from gtcontrol.plotting.core import new_figure
    >>> fig = new_figure(width=4.0, height=3.0)
    >>> fig.get_size_inches().tolist(), type(fig.canvas).__name__
    ([4.0, 3.0], 'FigureCanvasAgg')
    """
    size = (_inches("width", width), _inches("height", height))
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _inches(name: str, value: Any) -> float:
    """A figure side: a positive number of inches up to :data:`MAX_INCHES`, or refuse it."""
    x = as_positive_float(name, value)
    if x > MAX_INCHES:
        raise InvalidParametersError(
            f"{name}: expected a size up to {MAX_INCHES:g} inches (Agg draws at most 2^16 "
            f"pixels a side), got {shown(value)}"
        )
    return x


def save_figure(fig: Figure, path: str | Path) -> None:
    """Save ``fig`` in the format its file name says (PNG without a suffix).

    Missing folders above ``path`` are created, as for every output of gtcontrol.

    Parameters
    ----------
    fig
        The figure.
    path
        Where to write it (a name without a suffix gets a PNG under that very name).

    Raises
    ------
    InvalidParametersError
        If ``fig`` is not a matplotlib Figure, ``path`` not a path, or its suffix names no
        format that matplotlib writes.
    OutputError
        If the file or a folder above it cannot be written (the message names the path).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from gtcontrol.plotting.core import new_figure, save_figure
    >>> fig = new_figure(width=2.0, height=2.0)
    >>> _ = fig.subplots().plot([0, 1], [0, 1])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     save_figure(fig, Path(tmp) / "line.png")
    ...     (Path(tmp) / "line.png").read_bytes()[:4]
    b'\x89PNG'
    """
    if not isinstance(fig, Figure):
        raise InvalidParametersError(f"fig: expected a matplotlib Figure, got {shown(fig)}")
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise InvalidParametersError(f"path: expected a file path, got {shown(path)}")
    out = Path(path)
    fmt = out.suffix[1:].lower() or "png"
    formats = FigureCanvasAgg.get_supported_filetypes()
    if fmt not in formats:
        raise InvalidParametersError(
            f"path: the suffix {out.suffix!r} of {show_path(out)} names no format matplotlib "
            f"writes; expected one of {tuple(sorted(formats))} (or none: PNG)"
        )
    # rendered first, written in one short step: a run that stopped waiting for this figure
    # (gtcontrol._status.WriteGate) drops it rather than let it appear after the run ended
    data = io.BytesIO()
    fig.savefig(data, dpi=110, format=fmt)
    landed(lambda: _write(out, data.getvalue()))


def _write(out: Path, data: bytes) -> None:
    """Write ``data`` to ``out``, creating the folders above it; a path the system refuses
    (no permission, a file in the way, too long, a NUL byte) is an OutputError."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise OutputError(f"path: cannot write {show_path(out)} ({reason})") from None


def panels(ax: Any, n: int, *, width: float, height: float) -> list[Axes]:
    """The ``n`` Axes to draw on: those given, or a row of ``n`` on a new figure.

    Parameters
    ----------
    ax
        ``None``, one Axes (``n == 1``) or a sequence of ``n`` Axes.
    n
        Number of panels.
    width, height
        Size in inches of a new figure.

    Returns
    -------
    list of matplotlib.axes.Axes
        The panels.

    Raises
    ------
    InvalidParametersError
        If ``n`` is not a positive integer, ``ax`` not ``None``, an Axes (for one panel) or
        ``n`` Axes, or a new figure's size is refused by :func:`new_figure`.

    Examples
    --------
    >>> from gtcontrol.plotting.core import new_figure, panels
    >>> axes = panels(None, 3, width=6.0, height=2.0)  # a new figure with three panels
    >>> len(axes), axes[0].figure is axes[2].figure
    (3, True)
    >>> given = new_figure().subplots(1, 2)
    >>> panels(given, 2, width=6.0, height=2.0) == list(given)
    True
    """
    n = as_positive_int("n", n)
    if ax is None:
        return list(np.atleast_1d(new_figure(width=width, height=height).subplots(1, n)).ravel())
    given = [ax] if isinstance(ax, Axes) else list(np.ravel(np.asarray(ax, dtype=object)))
    if len(given) != n or not all(isinstance(a, Axes) for a in given):
        what = "a matplotlib Axes" if n == 1 else f"a sequence of {n} matplotlib Axes"
        raise InvalidParametersError(f"ax: expected None or {what}, got {ax!r}")
    return given


def finish(axes: Sequence[Axes], path: str | Path | None, *, title: str = "") -> None:
    """Give the figure of ``axes`` its title (plain text) and save it when ``path`` is given.

    Parameters
    ----------
    axes
        The panels drawn.
    path
        Where to write the PNG, or ``None``.
    title
        Title over the panels (one Axes: its own title), none when empty.

    Examples
    --------
    >>> from gtcontrol.plotting.core import finish, panels
    >>> axes = panels(None, 2, width=6.0, height=2.0)
    >>> finish(axes, None, title="two panels")  # titled, not saved
    >>> axes[0].figure.get_suptitle()
    'two panels'
    """
    if title:
        if len(axes) == 1:
            axes[0].set_title(title, fontsize=10, parse_math=False)
        else:
            axes[0].figure.suptitle(title, fontsize=10, parse_math=False)
    if path is not None:
        fig = axes[0].figure
        while not isinstance(fig, Figure):  # a subfigure: save the whole figure
            fig = fig.figure
        save_figure(fig, path)


@fill(**FIGURE_DOCS)
def plot_moments(
    traj: Trajectory,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    title: str = "",
    equilibrium_eigs: FloatArray | None = None,
    breakpoints: Sequence[float] | None = None,
) -> tuple[Axes, Axes]:
    """Mean components and covariance eigenvalues against depth.

    Marks the blow-up time (dashed red), optional equilibrium eigenvalues (dotted) and layer
    switches (grey ticks). A trajectory that stopped early for another reason (overflow, a
    failed integration, a spent budget) says so in the title.

    Parameters
    ----------
    traj
        The moment trajectory.
    %(path)s
    ax
        Two Axes to draw on (mean, eigenvalues); ``None``: a new figure.
    title
        Figure title, drawn as plain text (no mathtext: a `$` is a dollar sign).
    equilibrium_eigs
        Eigenvalues of an equilibrium covariance, drawn as dotted lines.
    breakpoints
        Layer switches (the first and last entries, 0 and T, are not drawn).

    Returns
    -------
    tuple of matplotlib.axes.Axes
        The mean and the eigenvalue panels.

    Raises
    ------
    InvalidParametersError
        If ``traj`` is not a :class:`~gtcontrol.Trajectory`.

    Examples
    --------
    >>> from gtcontrol import Gaussian, Layer, simulate
    >>> from gtcontrol.plotting.core import plot_moments
    >>> g0 = Gaussian([1.0, 0.0], [[1.0, 0.0], [0.0, 2.0]])
    >>> traj = simulate(Layer(A=[[-1.0, 0.0], [0.0, -0.5]]), g0, 2.0, n_points=21)
    >>> ax_mean, ax_eig = plot_moments(traj, title="a contraction")
    >>> ax_mean.get_title(), len(ax_eig.lines) >= 2
    ('mean', True)
    """
    as_trajectory("traj", traj)
    ax_m, ax_s = panels(ax, 2, width=8.0, height=3.4)
    draw_mean(ax_m, traj.t, traj.mean)
    draw_eigenvalues(ax_s, traj.t, traj.cov, limit=equilibrium_eigs)
    for a in (ax_m, ax_s):
        mark_depths(a, blowup_time=traj.blowup_time, breakpoints=breakpoints)
    ax_m.set_title("mean")
    ax_s.set_title("covariance eigenvalues")
    legend(ax_m, fontsize=7, loc="best")
    if not traj.success:
        stop = traj.status.value
        title = f"{title} (stopped early: {stop})" if title else f"stopped: {stop}"
    finish([ax_m, ax_s], path, title=title)
    return ax_m, ax_s


@fill(**FIGURE_DOCS)
def plot_token_clouds(
    snapshots: Sequence[tuple[float, FloatArray]],
    predicted: Trajectory,
    path: str | Path | None = None,
    *,
    ax: Sequence[Axes] | None = None,
    max_points: int = 2000,
    title: str = "",
) -> list[Axes]:
    """Token clouds (first two coordinates) at a few depths with the predicted 2σ ellipse.

    Parameters
    ----------
    snapshots
        ``(t, tokens)`` pairs (e.g. :attr:`gtcontrol.TokenTrajectory.snapshots`).
    predicted
        The moment trajectory; the ellipse comes from its recorded depth closest to ``t``.
    %(path)s
    ax
        One Axes per snapshot; ``None``: a new figure.
    max_points
        Tokens drawn per panel (the first ones; positive).
    title
        Figure title, drawn as plain text (no mathtext: a `$` is a dollar sign).

    Returns
    -------
    list of matplotlib.axes.Axes
        One panel per snapshot.

    Raises
    ------
    InvalidParametersError
        If ``snapshots`` is not a non-empty sequence of ``(t, tokens)`` pairs (a finite depth
        and a real ``(N, d)`` array), ``predicted`` not a
        :class:`~gtcontrol.Trajectory` of the same dimension ``d ≥ 2``, or ``max_points`` not
        a positive integer.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Gaussian, Layer, simulate, simulate_tokens
    >>> from gtcontrol.plotting.core import plot_token_clouds
    >>> layer, g0 = Layer(A=-0.5 * np.eye(2)), Gaussian([1.0, 0.0], np.eye(2))
    >>> tokens = simulate_tokens(layer, g0.sample(200, seed=0), 1.0, times=[0.0, 1.0])
    >>> axes = plot_token_clouds(tokens.snapshots, simulate(layer, g0, 1.0, n_points=11))
    >>> len(axes)
    2
    """
    max_points = as_positive_int("max_points", max_points, maximum=MAX_SAMPLES)
    clouds = _clouds(snapshots, as_trajectory("predicted", predicted))
    n = len(clouds)
    axes = panels(ax, n, width=min(3.0 * n, MAX_INCHES), height=3.2)
    for a, (t, x) in zip(axes, clouds, strict=True):
        i = int(np.argmin(np.abs(predicted.t - t)))  # the recorded depth closest to t
        mean, cov = predicted.mean[i], predicted.cov[i]
        draw_token_cloud(a, t, x, mean, cov, max_points=max_points)
    if title and n == 1:
        axes[0].set_title(f"{title}, {axes[0].get_title()}", fontsize=9, parse_math=False)
        title = ""
    finish(axes, path, title=title)
    return axes


@fill(**FIGURE_DOCS)
def plot_convergence(
    n_tokens: Sequence[int],
    errors: Mapping[str, Sequence[float] | FloatArray],
    path: str | Path | None = None,
    *,
    ax: Axes | None = None,
    title: str = "",
) -> Axes:
    """Log-log errors against the number of tokens with an ``N^(-1/2)`` reference line.

    Parameters
    ----------
    n_tokens
        The token counts ``N`` (positive).
    errors
        Error curves by label, one value per ``N`` (NaN where not computed).
    %(one_axes)s

    %(axes_returned)s

    Raises
    ------
    InvalidParametersError
        If ``n_tokens`` is not a non-empty 1-d array of positive finite numbers, or ``errors``
        not a mapping of curves with one real number per ``N`` (NaN and inf are not drawn).

    Examples
    --------
    >>> from gtcontrol.plotting.core import plot_convergence
    >>> ax = plot_convergence([64, 256, 1024], {"W2": [0.25, 0.12, 0.063]}, title="errors")
    >>> ax.get_xscale(), ax.get_yscale()
    ('log', 'log')
    """
    ns = as_float_array("n_tokens", n_tokens, ndim=1)
    if not ns.size or not np.all(ns > 0):
        raise InvalidParametersError(
            f"n_tokens: expected positive token counts (log axis), got {shown(n_tokens)}"
        )
    if not isinstance(errors, Mapping):
        raise InvalidParametersError(
            f"errors: expected a mapping of label to error curve, got {shown(errors)}"
        )
    curves = {k: with_gaps(f"errors[{k!r}]", v, ns.shape) for k, v in errors.items()}
    (a,) = panels(ax, 1, width=5.0, height=3.8)
    draw_convergence(a, ns.tolist(), curves, title=title)
    finish([a], path)
    return a


def as_trajectory(name: str, traj: Any) -> Trajectory:
    """``traj`` if it is a :class:`~gtcontrol.Trajectory`, or refuse it naming ``name``."""
    if not isinstance(traj, Trajectory):
        raise InvalidParametersError(
            f"{name}: expected a Trajectory (e.g. of gtcontrol.simulate), got {shown(traj)}"
        )
    return traj


def _clouds(snapshots: Any, predicted: Trajectory) -> list[tuple[float, FloatArray]]:
    """The ``(t, tokens)`` pairs of :func:`plot_token_clouds`, checked against ``predicted``."""
    d = predicted.dim
    if d < 2:
        raise InvalidParametersError(
            f"predicted: expected a trajectory of dimension >= 2 (clouds show two coordinates), "
            f"got dimension {d}"
        )
    if isinstance(snapshots, (str, bytes)) or not isinstance(snapshots, Sequence):
        raise InvalidParametersError(
            f"snapshots: expected a sequence of (t, tokens) pairs, got {shown(snapshots)}"
        )
    if not snapshots:
        raise InvalidParametersError("snapshots: expected at least one (t, tokens) pair, got none")
    clouds = []
    for i, pair in enumerate(snapshots):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidParametersError(
                f"snapshots[{i}]: expected a (t, tokens) pair, got {shown(pair)}"
            )
        t = float(as_float_array(f"snapshots[{i}][0] (t)", pair[0], ndim=0))
        x = with_gaps(f"snapshots[{i}][1] (tokens)", pair[1], (None, d))
        clouds.append((t, x))
    return clouds


def with_gaps(name: str, value: Any, shape: tuple[int | None, ...]) -> FloatArray:
    """Data of a figure: a real array of ``shape`` (``None`` entries free), checked by
    ``as_float_array`` but for its values: NaN and ±inf (not computed, overflowed) are kept
    and simply not drawn, and no magnitude is too large to draw."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):  # ragged: as_float_array names it
        raw = None
    if raw is None or raw.dtype.kind != "f":  # not floats: refused or converted as they are
        return as_float_array(name, value, ndim=len(shape), shape=shape, max_abs=math.inf)
    gaps = ~np.isfinite(raw)
    clean = np.where(gaps, 0.0, raw)
    out = as_float_array(name, clean, ndim=len(shape), shape=shape, max_abs=math.inf)
    out[gaps.reshape(out.shape)] = raw[gaps]
    return out
