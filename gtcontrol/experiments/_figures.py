"""Drawing code of the experiments: Gaussianity z-scores, surrogate errors, traces, closeness.

The conventions of :mod:`gtcontrol.model._figures` hold. Beside the results' ``.plot(ax)``, the
report's figures (:mod:`gtcontrol.experiments.report_figures`,
:func:`~gtcontrol.experiments.attention_flows.run_flows`) are built from these functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._display import legend
from .._linalg import FloatArray
from ..model._figures import readable_log_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "draw_closeness",
    "draw_flow_curves",
    "draw_layer_curves",
    "draw_trace_comparison",
    "draw_z_bars",
    "draw_z_by_layer",
]

_BAND = 3.0  # |z| below this is shaded: compatible with the Gaussian null


def draw_z_by_layer(
    ax: Axes, layers: Sequence[int], z: Mapping[str, Sequence[float]], *, title: str = ""
) -> None:
    """z-scores of the Gaussianity statistics against the layer (symlog), ``|z| < 3`` shaded.

    Parameters
    ----------
    ax
        The Axes.
    layers
        The depths diagnosed (0: the Gaussian input).
    z
        One z-score per layer, by statistic.
    title
        Axes title (plain text).
    """
    for name, values in z.items():
        ax.plot(layers, values, "o-", lw=1.3, label=name)
    ax.set_yscale("symlog", linthresh=_BAND)
    every = np.array([v for values in z.values() for v in values], dtype=float)
    every = every[np.isfinite(every)]
    if every.size:
        ax.set_ylim(min(-4.0, 1.5 * float(every.min())), max(4.0, 1.5 * float(every.max())))
    ax.axhspan(-_BAND, _BAND, color="0.9", zorder=0, label="|z| < 3")
    ax.set_xlabel("layer (0 = Gaussian input)")
    ax.set_ylabel("z against the Gaussian null")
    if title:
        ax.set_title(title, fontsize=9, parse_math=False)
    legend(ax, fontsize=7)


def draw_z_bars(ax: Axes, z: Mapping[str, float], *, title: str = "") -> None:
    """z-scores of the Gaussianity statistics of one sample as bars, ``|z| < 3`` shaded.

    Bars beyond the band are red.

    Parameters
    ----------
    ax
        The Axes.
    z
        z-score by statistic.
    title
        Axes title (plain text).
    """
    names = list(z)
    values = np.array([z[k] for k in names], dtype=float)
    ax.axvspan(-_BAND, _BAND, color="0.9", zorder=0, label="|z| < 3")
    colors = ["C3" if abs(v) >= _BAND else "C0" for v in values]
    ax.barh(names, np.nan_to_num(values), color=colors)  # horizontal: the names stay apart
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_xlabel("z against the Gaussian null")
    ax.tick_params(axis="y", labelsize=8)
    ax.invert_yaxis()  # the statistics in their order, top down
    if title:
        ax.set_title(title, fontsize=9, parse_math=False)


def draw_layer_curves(
    ax: Axes, layers: Sequence[int], curves: Mapping[str, Sequence[float]], *, title: str = ""
) -> None:
    """Positive quantities against the layer (log scale), one curve per label.

    Parameters
    ----------
    ax
        The Axes.
    layers
        The layers.
    curves
        One value per layer, by label.
    title
        Axes title (plain text).
    """
    for label, values in curves.items():
        v = np.asarray(values, dtype=float)
        ax.semilogy(layers, np.where(v > 0, v, np.nan), "o-", lw=1.3, label=label)
    readable_log_axis(ax.yaxis)
    ax.set_xlabel("layer")
    if title:
        ax.set_title(title, fontsize=9, parse_math=False)
    legend(ax, fontsize=7)


def draw_trace_comparison(
    ax: Axes,
    layers: FloatArray,
    tokens: FloatArray,
    moments: FloatArray,
    *,
    cap: float = math.inf,
    blowup_layer: float = math.inf,
    equilibrium_trace: float = math.nan,
    label: str = "",
    color: str | None = None,
) -> None:
    """``tr Σ`` of the tokens (markers) and of the moments (line) against the layer (log scale).

    Parameters
    ----------
    ax
        The Axes.
    layers, tokens, moments
        The layers and the two traces there.
    cap
        Values above it (past a blow-up, the moments reach ~1e300) are not drawn.
    blowup_layer
        The predicted blow-up layer ``T*/h`` (dashed), when finite.
    equilibrium_trace
        ``tr Σ*`` (dotted), when finite.
    label
        Prefix of the legend labels (e.g. the configuration).
    color
        One colour for the configuration (default: the Axes' cycle).
    """
    pre = f"{label}: " if label else ""
    shown_tok = np.where(np.isfinite(tokens) & (tokens <= cap), tokens, np.nan)
    shown_mom = np.where(np.isfinite(moments) & (moments <= cap), moments, np.nan)
    (dots,) = ax.semilogy(layers, shown_tok, "o", ms=3, color=color, label=f"{pre}tokens")
    same = dots.get_color()  # the moments and the marks in the colour of the tokens
    ax.semilogy(layers, shown_mom, "-", color=same, label=f"{pre}moments")
    readable_log_axis(ax.yaxis)
    if math.isfinite(blowup_layer):
        ax.axvline(blowup_layer, color=same, ls="--", lw=1, label=f"{pre}T*/h")
    if math.isfinite(equilibrium_trace):
        ax.axhline(equilibrium_trace, color=same, ls=":", lw=1, label=f"{pre}tr Σ*")
    ax.set_xlabel("layer")
    ax.set_ylabel("tr Σ")


def draw_closeness(
    ax: Axes,
    t: FloatArray,
    to_flow: FloatArray,
    to_own: FloatArray,
    *,
    activation: str,
    color: str | None = None,
) -> None:
    """Sliced W2 of the tokens to the Gaussian moment flow and to their own Gaussian.

    Parameters
    ----------
    ax
        The Axes.
    t
        Depths.
    to_flow, to_own
        The two distances (see :class:`~gtcontrol.experiments.closure.ClosenessCurve`).
    activation
        Named in the legend.
    color
        Colour of both curves (default: the Axes' cycle).
    """
    (line,) = ax.plot(t, to_flow, "o-", color=color, label=f"{activation}: SW to moment flow")
    ax.plot(
        t, to_own, "s--", color=line.get_color(), ms=3, label=f"{activation}: SW to own Gaussian"
    )
    ax.set_xlabel("depth t")
    ax.set_ylabel("sliced W2")
    legend(ax, fontsize=7)


def draw_flow_curves(
    ax: Axes, curves: Mapping[tuple[int, str], tuple[FloatArray, FloatArray]]
) -> None:
    """``1/λ_max Σ(t)`` of attention flows against depth (log scale): → 0 at a blow-up.

    Parameters
    ----------
    ax
        The Axes.
    curves
        ``(t, λ_max)`` by ``(layer, start)``; the start ``"identity"`` is drawn solid, the
        others dashed, one colour per layer.
    """
    for (k, start), (t, lam) in curves.items():
        ok = lam > 0
        ax.plot(
            t[ok],
            1.0 / lam[ok],
            "-" if start == "identity" else "--",
            color=f"C{k % 10}",
            lw=1.2,
            label=f"layer {k}, {start}",
        )
    ax.set_xlabel("depth t")
    ax.set_ylabel("1/λ_max Σ(t)")
    ax.set_yscale("log")
    ax.set_title("approach to the blow-up (1/λ_max → 0)", fontsize=9)
    if curves:
        legend(ax, fontsize=6, ncol=2)
