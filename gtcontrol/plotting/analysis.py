"""Figures of the ``analyze`` task: covariance eigenvalues against depth and the 2×2 cone.

Both take a :class:`gtcontrol.analysis.regime_figures.RegimeFigureData` (from
:func:`gtcontrol.analysis.regime_figures.regime_figure_data`) and a PNG path; they draw on detached
matplotlib figures (Agg canvas, no pyplot state) and return nothing.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..analysis.regime_figures import RegimeFigureData
from ..errors import InvalidParametersError
from .core import new_figure, save_figure

__all__ = ["plot_cone", "plot_covariance_eigenvalues"]


def plot_covariance_eigenvalues(data: RegimeFigureData, path: str | Path) -> None:
    """Eigenvalues of Σ(t) against depth (log scale), with the regime marked.

    The equilibrium/limit eigenvalues are dotted horizontal lines, the blow-up time a dashed
    vertical line; the title states the regime kind and certificate.

    Parameters
    ----------
    data
        The figure data of :func:`gtcontrol.analysis.regime_figures.regime_figure_data`.
    path
        Where to write the PNG.
    """
    fig = new_figure(6.4, 4.0)
    ax = fig.subplots()
    t = data.trajectory.t
    lam = np.where(data.eigenvalues > 0, data.eigenvalues, np.nan)
    for i in range(lam.shape[1]):
        ax.semilogy(t, lam[:, i], lw=1.5, label=f"λ{i + 1}" if lam.shape[1] <= 6 else None)
    if data.equilibrium_eigenvalues is not None:
        for i, w in enumerate(data.equilibrium_eigenvalues):
            if w > 0:
                ax.axhline(w, color="k", ls=":", lw=1.0, label="limit" if i == 0 else None)
    if math.isfinite(data.blowup_time):
        ax.axvline(data.blowup_time, color="tab:red", ls="--", lw=1.2, label="blow-up T*")
    ax.set_xlabel("depth t")
    ax.set_ylabel("eigenvalues of Σ(t)")
    reg = data.regime
    ax.set_title(f"{reg.kind} ({reg.certificate})", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    save_figure(fig, path)


def plot_cone(data: RegimeFigureData, path: str | Path) -> None:
    """For d = 2: Σ(t) in the PSD cone ``(a − b, 2c, a + b)``, and Σ/tr Σ in its unit disk.

    Left: the trajectory in the cone (its boundary ``z = √(x² + y²)`` drawn as a wireframe);
    for a blow-up the normalized trajectory ``Σ/tr Σ`` is drawn on the slice ``z = 1`` instead.
    Right: ``Σ/tr Σ`` in the unit disk (the circle is the singular matrices, the centre ``I/2``).

    Parameters
    ----------
    data
        The figure data of a 2-dimensional layer.
    path
        Where to write the PNG.

    Raises
    ------
    InvalidParametersError
        If the data is not two-dimensional.
    """
    if data.cone is None or data.cone_normalized is None:
        raise InvalidParametersError("data: the cone picture needs a 2-dimensional layer")
    fig = new_figure(9.0, 4.2)
    ax3 = fig.add_subplot(1, 2, 1, projection="3d")
    ax2 = fig.add_subplot(1, 2, 2)
    blow = data.regime.kind == "blowup"
    pts = data.cone_normalized if blow else data.cone
    top = float(np.nanmax(pts[:, 2])) if np.isfinite(pts[:, 2]).any() else 1.0
    top = max(top, 1e-12)
    th, z = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, top, 8))
    ax3.plot_wireframe(z * np.cos(th), z * np.sin(th), z, color="0.8", lw=0.5)
    ax3.plot(pts[:, 0], pts[:, 1], pts[:, 2], color="tab:blue", lw=1.6)
    ax3.scatter(*pts[0], color="tab:green", s=20, label="start")
    if data.equilibrium_cone is not None and not blow:
        ax3.scatter(*data.equilibrium_cone, color="k", marker="*", s=60, label="limit")
    ax3.set_xlabel("a − b")
    ax3.set_ylabel("2c")
    ax3.set_zlabel("a + b")
    ax3.set_title("Σ/tr Σ (blow-up)" if blow else "Σ(t) in the PSD cone", fontsize=10)
    ax3.legend(fontsize=8)
    circle = np.linspace(0, 2 * np.pi, 200)
    ax2.plot(np.cos(circle), np.sin(circle), color="0.6", lw=1.0)
    xn = data.cone_normalized
    ax2.plot(xn[:, 0] / xn[:, 2], xn[:, 1] / xn[:, 2], color="tab:blue", lw=1.6)
    ax2.plot(xn[0, 0] / xn[0, 2], xn[0, 1] / xn[0, 2], "o", color="tab:green")
    if data.equilibrium_cone is not None:
        e = data.equilibrium_cone
        if e[2] > 0:
            ax2.plot(e[0] / e[2], e[1] / e[2], "*", color="k", ms=10)
    ax2.set_aspect("equal")
    ax2.set_xlim(-1.05, 1.05)
    ax2.set_ylim(-1.05, 1.05)
    ax2.set_xlabel("(a − b)/tr Σ")
    ax2.set_ylabel("2c/tr Σ")
    ax2.set_title(f"shape Σ/tr Σ — {data.regime.kind}", fontsize=10)
    save_figure(fig, path)
