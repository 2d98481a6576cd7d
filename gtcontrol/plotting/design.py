"""Figures of the ``design`` and ``filter`` tasks (matplotlib, Agg, no global pyplot state).

Each function draws one figure from plain data and saves it as PNG to ``path``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .._linalg import FloatArray
from .core import new_figure, save_figure

__all__ = ["plot_design_convergence", "plot_filter_covariance"]


def plot_design_convergence(
    t: FloatArray,
    mean_error: FloatArray,
    cov_error: FloatArray,
    path: str | Path,
    *,
    rate: float | None = None,
    cov_rate: float | None = None,
    title: str = "",
) -> None:
    """Mean and covariance errors of a designed layer from several starts (log scale).

    ``mean_error`` and ``cov_error`` have shape ``(starts, len(t))`` (e.g. from
    :func:`gtcontrol.control.design.design_convergence`); dashed lines show ``e^{−rate·t}`` and
    ``e^{−cov_rate·t}`` scaled to the largest initial error.
    """
    tt = np.asarray(t, dtype=float)
    fig = new_figure()
    ax_m, ax_s = fig.subplots(1, 2)
    for ax, errs, r, name in (
        (ax_m, np.atleast_2d(mean_error), rate, "mean error  |m − m*|"),
        (ax_s, np.atleast_2d(cov_error), cov_rate, "covariance error  ‖Σ − Σ*‖"),
    ):
        for i, e in enumerate(errs):
            ax.semilogy(tt, np.where(e > 0, e, np.nan), lw=1.2, label=f"start {i + 1}")
        if r is not None and math.isfinite(r) and r > 0:
            e0 = float(np.max(errs[:, 0])) if errs.shape[1] else 1.0
            ax.semilogy(tt, e0 * np.exp(-r * tt), "k--", lw=1.0, label=f"e^(−{r:.3g} t)")
        ax.set_xlabel("depth t")
        ax.set_title(name, fontsize=9)
        ax.set_ylim(bottom=max(1e-16, float(np.nanmin(np.where(errs > 0, errs, np.nan))) / 10))
    if np.atleast_2d(mean_error).shape[0] <= 8:
        ax_m.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=10, parse_math=False)
    save_figure(fig, path)


def plot_filter_covariance(
    t: FloatArray,
    filter_cov: FloatArray,
    transformer_cov: FloatArray,
    path: str | Path,
    *,
    steady: FloatArray | None = None,
    title: str = "",
) -> None:
    """Kalman–Bucy covariance ``P(t)`` against the Transformer's ``Σ(t)``.

    Left: the entries ``P_ij`` (lines) and ``Σ_ij`` (markers), ``i ≤ j`` (at most 10), with the
    steady state (dotted). Right: ``‖P(t) − Σ(t)‖_F / ‖Σ(t)‖_F``.
    """
    tt = np.asarray(t, dtype=float)
    p = np.asarray(filter_cov, dtype=float)
    s = np.asarray(transformer_cov, dtype=float)
    d = p.shape[1]
    fig = new_figure()
    ax_c, ax_e = fig.subplots(1, 2)
    pairs = [(i, j) for i in range(d) for j in range(i, d)][:10]
    step = max(1, len(tt) // 25)
    for k, (i, j) in enumerate(pairs):
        color = f"C{k % 10}"
        ax_c.plot(tt, p[:, i, j], color=color, lw=1.3, label=f"P{i + 1}{j + 1}")
        ax_c.plot(tt[::step], s[::step, i, j], "o", color=color, ms=3.5, mfc="none")
        if steady is not None:
            ax_c.axhline(float(steady[i, j]), color=color, ls=":", lw=1.0)
    ax_c.set_xlabel("depth t")
    ax_c.set_title("filter P(t) (lines), Transformer Σ(t) (circles)", fontsize=9)
    if len(pairs) <= 6:
        ax_c.legend(fontsize=7, loc="best")
    rel = np.linalg.norm(p - s, axis=(1, 2)) / np.linalg.norm(s, axis=(1, 2))
    ax_e.semilogy(tt, np.where(rel > 0, rel, np.nan), lw=1.3)
    ax_e.set_xlabel("depth t")
    ax_e.set_title("relative difference ‖P − Σ‖ / ‖Σ‖", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10, parse_math=False)
    save_figure(fig, path)
