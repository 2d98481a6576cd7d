"""Drawing code of the analysis layer: spectra, blow-up brackets, token convergence, filters.

The conventions of :mod:`gtcontrol.model._figures` hold; matplotlib is imported only inside the
function that needs its tickers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._display import legend
from .._docstring import fill
from .._linalg import FloatArray, frobenius_norms
from ..model._figures import readable_log_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "draw_blowup",
    "draw_convergence",
    "draw_filter_difference",
    "draw_filter_entries",
    "draw_residuals",
    "draw_spectrum",
]

#: The docstring entry of the data both filter panels take (for :func:`~gtcontrol._docstring.fill`).
_FILTER_DATA = """\
ax
    The Axes.
t
    Depths ``(n,)``.
filter_cov, transformer_cov
    ``P(t)`` and ``Σ(t)``, ``(n, d, d)``."""


def draw_spectrum(
    ax: Axes,
    values: Any,
    *,
    label: str | None = None,
    marker: str = "o",
    rate: float | None = None,
    title: str = "",
) -> None:
    """Eigenvalues in the complex plane, with the imaginary axis (the stability boundary).

    Parameters
    ----------
    ax
        The Axes.
    values
        The eigenvalues (complex or real).
    label
        Legend label of the points.
    marker
        Marker of the points.
    rate
        When given, the line ``Re λ = −rate`` (a certified decay rate), dotted.
    title
        Axes title (plain text).
    """
    z = np.atleast_1d(np.asarray(values, dtype=complex))
    # round-off imaginary parts of real eigenvalues (1e-17) would set the axis scale
    scale = float(np.max(np.abs(z), initial=1.0))
    z = np.where(np.abs(z.imag) <= 1e-12 * scale, z.real + 0j, z)
    ax.axvline(0.0, color="0.6", ls="--", lw=0.9, zorder=0)
    if rate is not None and math.isfinite(rate):
        ax.axvline(-rate, color="tab:green", ls=":", lw=1.0, label=f"Re λ = −{rate:.3g}")
    ax.scatter(z.real, z.imag, marker=marker, s=28, label=label, zorder=3)
    ax.set_xlabel("Re λ")
    ax.set_ylabel("Im λ")
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)
    if label is not None or rate is not None:
        legend(ax, fontsize=7, loc="best")


def draw_blowup(
    ax: Axes,
    *,
    lower: float,
    upper: float,
    blowup_time: float,
    proved_never: bool = False,
    note: str = "",
) -> None:
    """A blow-up search on the depth axis: the certified interval, the bracket and T*.

    Parameters
    ----------
    ax
        The Axes.
    lower, upper
        No blow-up on ``[0, lower]`` (shaded green); T* in ``[lower, upper]`` (shaded red).
    blowup_time
        T* (dashed), ``inf`` when none was found.
    proved_never
        No blow-up at any depth was proved.
    note
        Added to the title in parentheses (e.g. the method and status).
    """
    ends = [x for x in (lower, upper, blowup_time) if math.isfinite(x)]
    right = 1.15 * max(ends) if ends and max(ends) > 0 else 1.0
    ax.axvspan(0.0, lower, color="tab:green", alpha=0.25, label="no blow-up")
    if math.isfinite(upper) and upper > lower:
        ax.axvspan(lower, upper, color="tab:red", alpha=0.25, label="bracket of T*")
    if math.isfinite(blowup_time):
        ax.axvline(blowup_time, color="tab:red", ls="--", lw=1.4, label="T*")
        title = f"blow-up at T* = {blowup_time:.6g}"
    elif proved_never:
        title = "no blow-up at any depth (proved)"
    else:
        title = f"no blow-up found up to depth {lower:.4g}"
    ax.set_xlim(0.0, right)
    ax.set_yticks([])
    ax.set_xlabel("depth t")
    ax.set_title(f"{title} ({note})" if note else title, fontsize=10, parse_math=False)
    legend(ax, fontsize=7, loc="upper left")


def draw_residuals(ax: Axes, residuals: Sequence[float], *, title: str = "") -> None:
    """Relative residuals against the iteration (log scale).

    Parameters
    ----------
    ax
        The Axes.
    residuals
        One residual per iteration.
    title
        Axes title (plain text).
    """
    r = np.asarray(residuals, dtype=float)
    ax.semilogy(np.arange(r.size), np.where(r > 0, r, np.nan), "o-", lw=1.3)
    ax.set_xlabel("iteration")
    ax.set_ylabel("relative residual")
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)


def _token_axis(ax: Axes, ns: FloatArray) -> None:
    """Readable ticks on a log axis of token counts: the counts themselves when few and apart.

    matplotlib labels the minor ticks of a log axis that spans less than a decade or two
    (``3×10²``, ``4×10²``, ...), and those labels overlap; here they are never labelled.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    ratios = ns[1:] / ns[:-1] if ns.size > 1 else np.array([math.inf])
    if ns.size <= 8 and float(np.min(ratios)) >= 1.6:
        ax.xaxis.set_major_locator(FixedLocator(ns.tolist()))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:.0f}"))
    else:
        ax.xaxis.set_major_locator(LogLocator(base=10.0, numticks=6))
    ax.xaxis.set_minor_formatter(NullFormatter())


def draw_convergence(
    ax: Axes, n_tokens: Sequence[int], errors: Mapping[str, Any], *, title: str = ""
) -> None:
    """Log-log errors against the number of tokens with an ``N^(-1/2)`` reference line.

    Parameters
    ----------
    ax
        The Axes.
    n_tokens
        The token counts ``N``.
    errors
        Error curves by label, one value per ``N`` (NaN where not computed).
    title
        Axes title, drawn as plain text (no mathtext: a `$` is a dollar sign).
    """
    ns = np.asarray(n_tokens, dtype=float)
    for name, err in errors.items():
        ax.loglog(ns, np.asarray(err, dtype=float), "o-", lw=1.4, label=name)
    finite = [float(np.nanmax(e)) for e in errors.values() if np.isfinite(e).any()]
    if finite:
        ref0 = max(finite)
        ax.loglog(ns, ref0 * np.sqrt(ns[0] / ns), "k--", lw=1.0, label=r"$\propto N^{-1/2}$")
    _token_axis(ax, ns)
    readable_log_axis(ax.yaxis)
    ax.set_xlabel("number of tokens N")
    ax.set_ylabel("error at depth T")
    legend(ax, fontsize=8)
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)


@fill(filter_data=_FILTER_DATA)
def draw_filter_entries(
    ax: Axes,
    t: FloatArray,
    filter_cov: FloatArray,
    transformer_cov: FloatArray,
    *,
    steady: FloatArray | None = None,
) -> None:
    """The entries ``P_ij(t)`` (lines) and ``Σ_ij(t)`` (circles), ``i ≤ j`` (at most 10).

    Parameters
    ----------
    %(filter_data)s
    steady
        The steady state of the filter, drawn dotted.
    """
    tt = np.asarray(t, dtype=float)
    p = np.asarray(filter_cov, dtype=float)
    s = np.asarray(transformer_cov, dtype=float)
    d = p.shape[1]
    pairs = [(i, j) for i in range(d) for j in range(i, d)][:10]
    step = max(1, len(tt) // 25)
    for k, (i, j) in enumerate(pairs):
        color = f"C{k % 10}"
        ax.plot(tt, p[:, i, j], color=color, lw=1.3, label=f"P{i + 1}{j + 1}")
        ax.plot(tt[::step], s[::step, i, j], "o", color=color, ms=3.5, mfc="none")
        if steady is not None:
            ax.axhline(float(steady[i, j]), color=color, ls=":", lw=1.0)
    ax.set_xlabel("depth t")
    ax.set_title("filter P(t) (lines), Transformer Σ(t) (circles)", fontsize=9)
    if len(pairs) <= 6:
        legend(ax, fontsize=7, loc="best")


@fill(filter_data=_FILTER_DATA)
def draw_filter_difference(
    ax: Axes, t: FloatArray, filter_cov: FloatArray, transformer_cov: FloatArray
) -> None:
    """``‖P(t) − Σ(t)‖_F / ‖Σ(t)‖_F`` against depth (log scale).

    Parameters
    ----------
    %(filter_data)s
    """
    p = np.asarray(filter_cov, dtype=float)
    s = np.asarray(transformer_cov, dtype=float)
    rel = frobenius_norms(p - s) / frobenius_norms(s)
    ax.semilogy(np.asarray(t, dtype=float), np.where(rel > 0, rel, np.nan), lw=1.3)
    ax.set_xlabel("depth t")
    ax.set_title("relative difference ‖P − Σ‖ / ‖Σ‖", fontsize=9)
