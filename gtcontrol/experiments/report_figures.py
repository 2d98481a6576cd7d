"""The figures of the reproduction report (:func:`~gtcontrol.experiments.report.reproduce`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from scipy import stats as _st

from .._display import Displayable
from ..plotting.core import new_figure, save_figure
from .closure import FeedForwardCloseness
from .pretrained import GaussianityTable
from .regimes import RegimeResult
from .sample_statistics import whiten
from .surrogate import SurrogateComparison

__all__ = ["Evidence", "write_figures"]


def _plot_one(result: Displayable, path: Path, width: float, height: float) -> None:
    """The result's own figure (its ``.plot``) alone on a ``width × height`` inch figure."""
    fig = new_figure(width=width, height=height)
    result.plot(fig.subplots())
    save_figure(fig, path)


def _plot_projections(tab: GaussianityTable, path: Path, seed: int) -> None:
    """Per layer diagnosed: a random 1-D projection of the whitened tokens against N(0, 1)."""
    n = len(tab.rows)
    cols = min(n, 7)
    rows = math.ceil(n / cols)
    fig = new_figure(width=2.2 * cols, height=2.0 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    grid = np.linspace(-4.5, 4.5, 200)
    for k, ax in enumerate(axes):
        if k >= n:
            ax.set_axis_off()
            continue
        z = whiten(tab.states[k], 1e-9)
        th = np.random.default_rng([seed, z.shape[1], 3]).standard_normal(z.shape[1])
        y = z @ (th / np.linalg.norm(th))
        ax.hist(y, bins=40, range=(-4.5, 4.5), density=True, color="tab:blue", alpha=0.6)
        ax.plot(grid, _st.norm.pdf(grid), "k-", lw=1.0)
        rej = tab.rows[k].result.rejected
        ax.set_title(f"layer {k}{' (rejected)' if rej else ''}", fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{tab.model}: whitened tokens on a random direction vs N(0,1)", fontsize=9)
    save_figure(fig, path)


def _plot_regimes(r: RegimeResult, path: Path) -> None:
    fig = new_figure(width=3.3 * max(len(r.rows), 1), height=3.2)
    axes = np.atleast_1d(fig.subplots(1, max(len(r.rows), 1)))
    for ax, row in zip(axes, r.rows, strict=False):
        r._draw(ax, rows=(row,))  # one configuration per panel
        ax.set_title(f"{row.name}: {row.description}", fontsize=8)
    save_figure(fig, path)


@dataclass(frozen=True)
class Evidence:
    """The results of the stages of a run (``None``: the stage was skipped)."""

    tabs: Sequence[GaussianityTable]
    surs: Sequence[SurrogateComparison]
    reg: RegimeResult | None
    ff: FeedForwardCloseness | None


#: ``draw(name, make, panels)``: draw the figure ``name`` (``make()``, ``panels`` axes) if the
#: run affords it; whether it was drawn (the ``experiment`` design task's time limit).
Draw = Callable[[str, Callable[[], None], int], bool]


def _always(name: str, make: Callable[[], None], panels: int) -> bool:
    make()
    return True


def write_figures(dest: Path, ev: Evidence, seed: int, draw: Draw | None = None) -> list[str]:
    """Write every figure of the results that have rows (each if ``draw`` affords it; ``None``:
    all); return the file names written."""
    tabs, surs, reg, ff = ev.tabs, ev.surs, ev.reg, ev.ff
    ask = draw or _always
    todo: list[tuple[str, Callable[[], None], int]] = []
    for t in (t for t in tabs if t.rows):
        name = f"gaussianity_{t.model}.png"
        todo.append((name, partial(_plot_one, t, dest / name, 7.0, 3.6), 1))
        name = f"projections_{t.model}.png"
        todo.append((name, partial(_plot_projections, t, dest / name, seed), len(t.rows)))
    for c in (c for c in surs if c.rows):
        name = f"surrogate_{c.model}.png"
        todo.append((name, partial(_plot_one, c, dest / name, 7.0, 3.4), 1))
    if reg is not None and reg.rows:
        todo.append(
            ("regimes.png", partial(_plot_regimes, reg, dest / "regimes.png"), len(reg.rows))
        )
    if ff is not None and ff.curves:
        todo.append(
            ("feedforward.png", partial(_plot_one, ff, dest / "feedforward.png", 6.5, 3.4), 1)
        )
    return [name for name, make, panels in todo if ask(name, make, panels)]
