"""The tables of the reproduction report (:func:`~gtcontrol.experiments.report.reproduce`),
as Markdown and HTML."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .closure import FeedForwardCloseness
from .gaussianity import STATISTICS
from .pretrained import MODELS, GaussianityTable
from .regimes import RegimeResult
from .surrogate import SurrogateComparison

__all__ = [
    "Table",
    "feedforward_table",
    "fmt",
    "gaussianity_table",
    "html_page",
    "markdown",
    "regime_table",
    "surrogate_table",
]


def fmt(v: Any) -> str:
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


Table = tuple[str, list[str], list[list[Any]]]


def gaussianity_table(tab: GaussianityTable) -> Table:
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


def surrogate_table(c: SurrogateComparison) -> Table:
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


def regime_table(r: RegimeResult) -> Table:
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


def feedforward_table(f: FeedForwardCloseness) -> Table:
    names = {"identity": "identity", "relu": "ReLU"}
    head = ["t"]
    for c in f.curves:
        lab = names.get(c.activation, c.activation)
        head += [f"{lab}: SW to flow", f"{lab}: SW to own Gaussian", f"{lab}: BW gap"]
    n = max((len(c.t) for c in f.curves), default=0)
    rows = []
    for i in range(n):
        row: list[Any] = [next(float(c.t[i]) for c in f.curves if i < len(c.t))]
        for c in f.curves:
            row += [c.to_flow[i], c.to_own[i], c.moment_gap[i]] if i < len(c.t) else [None] * 3
        rows.append(row)
    title = (
        f"Feed-forward: tokens vs Gaussian moment flow — d = {f.d}, N = {f.n_tokens}, seed {f.seed}"
    )
    return title, head, rows


def markdown(tables: Sequence[Table], intro: str) -> str:
    out = [intro]
    for title, head, rows in tables:
        out.append(f"\n### {title}\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        out.extend("| " + " | ".join(fmt(v) for v in row) + " |" for row in rows)
    return "\n".join(out) + "\n"


def html_page(tables: Sequence[Table], intro_lines: Sequence[str], figures: Sequence[str]) -> str:
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
            parts.append("<tr>" + "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row) + "</tr>")
        parts.append("</table>")
    parts.extend(f"<h3>{html.escape(f)}</h3><img src='{html.escape(f)}'>" for f in figures)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
