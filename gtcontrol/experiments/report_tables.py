"""The tables of the reproduction report (:func:`~gtcontrol.experiments.report.reproduce`),
as Markdown and HTML."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .closure import FeedForwardCloseness
from .gaussianity import STATISTICS
from .pretrained import GaussianityTable
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


#: The columns of :func:`surrogate_table`: header, attribute of a :class:`SurrogateRow`.
_SURROGATE_COLUMNS = (
    ("layer", "layer"),
    ("mean err", "mean_error"),
    ("cov err", "cov_error"),
    ("BW", "bures_wasserstein"),
    ("tr ratio", "trace_ratio"),
    ("local mean err", "local_mean_error"),
    ("local cov err", "local_cov_error"),
    ("local BW", "local_bures_wasserstein"),
    ("layer change", "layer_change"),
    ("LN scale CV", "ln_scale_cv"),
    ("attn ESS/N", "attention_ess"),
)
#: The columns of :func:`regime_table`: header, attribute of a :class:`RegimeRow`.
_REGIME_COLUMNS = (
    ("config", "name"),
    ("V, B, A", "description"),
    ("predicted", "predicted"),
    ("T*", "blowup_time"),
    ("T*/h (layer)", "blowup_layer_theory"),
    ("blow-up layer (moments)", "moment_layer"),
    ("blow-up layer (tokens)", "token_layer"),
    ("max cov err", "max_cov_error"),
    ("agrees ≤10% to layer", "agree_until"),
    ("final tr Σ tokens", "final_trace_tokens"),
    ("final tr Σ moments", "final_trace_moments"),
    ("tr Σ*", "equilibrium_trace"),
    ("final Gaussianity p", "final_gaussianity_p"),
)


def _attribute_columns(
    title: str, items: Iterable[Any], columns: Sequence[tuple[str, str]]
) -> Table:
    """A table with one row per item and one column per ``(header, attribute)``."""
    head = [h for h, _ in columns]
    rows = [[getattr(x, attr) for _, attr in columns] for x in items]
    return title, head, rows


def surrogate_table(c: SurrogateComparison) -> Table:
    title = f"Moment surrogate vs measured — {c.description}, N = {c.n_tokens}, seed {c.seed}"
    return _attribute_columns(title, c.rows, _SURROGATE_COLUMNS)


def regime_table(r: RegimeResult) -> Table:
    title = (
        f"Prescribed attention regimes — d = {r.d}, N = {r.n_tokens}, {r.n_layers} layers, "
        f"blow-up threshold tr Σ > {r.threshold:g} tr Σ0, seed {r.seed}"
    )
    return _attribute_columns(title, r.rows, _REGIME_COLUMNS)


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
