"""The report of a model map: ``model_map.md``, a self-contained ``model_map.html`` and figures.

The page is what a user reads before trusting a stabilized network: one table row per layer,
what the stabilized network does on real inputs, four figures (``λ_max`` over depth before and
after stabilization, the spectra at the equilibria and at the stabilized target, the head
shares, the function change against the rate), then every row's evidence in words. The HTML
embeds its figures (base64 PNG) and needs no network to open.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import numpy as np

from .._display import legend
from .._status import Status
from .model_map import LayerMap, ModelMap
from .report_figures import Draw

__all__ = ["FIGURES", "draw_figure", "map_html", "map_markdown", "model_map_record"]

#: The report's figures: file name and caption.
FIGURES = {
    "lambda_depth.png": "λ_max Σ(t) from N(e, I ⊕ 0): each layer as it is (dashed, until its "
    "blow-up) and stabilized (solid, integrated to the same depth)",
    "spectra.png": "Rightmost eigenvalues of the linearization: at the equilibria Newton found "
    "(circles) and at the stabilized data target (crosses)",
    "head_shares.png": "Each head's share of the growth of λ_max Σ from the identity, per layer",
    "function_change.png": "Function change of the smallest locally certified addition against "
    "the rate, per layer (the rate used is marked)",
}


def _num(x: float, fmt: str = ".4g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "none"
    return format(x, fmt)


def _row_cells(r: LayerMap) -> list[str]:
    reg_i, reg_d = r.regime("identity"), r.regime("data")
    st = r.stabilization
    tc = None if st is None else st.token_certificate
    eq = next((e for e in r.equilibria if e.start == "data"), None)
    eq_txt = (
        "—"
        if eq is None
        else (
            f"{eq.stability} ({eq.evidence}), α {_num(eq.abscissa)}"
            if eq.status is Status.SUCCESS
            else eq.status.value
        )
    )
    cert = "—"
    if st is not None:
        cert = ("local ✓" if st.local_certificate else "local ✗") + (
            ", global ✓" if st.global_certificate else ", global ✗"
        )
    tokens = "—" if tc is None else f"{tc.w2:.3g} / {tc.floor:.3g} ({'✓' if tc.success else '✗'})"
    return [
        str(r.layer),
        "—" if reg_i is None else f"{reg_i.kind}",
        "—" if reg_d is None else f"{reg_d.kind}",
        "—" if r.dominant_head < 0 else f"{r.dominant_head} ({r.head_share:.2f})",
        eq_txt,
        "—" if st is None else st.status.value,
        "—" if r.curve is None else f"{r.curve.chosen:g}",
        "—" if st is None else _num(st.c),
        cert,
        "—"
        if st is None or st.base is None or st.spectrum is None
        else f"{st.base.abscissa:.3g} → {st.spectrum.abscissa:.4g}",
        tokens,
        "—" if st is None else _num(st.function_change, ".3g"),
        ", ".join(r.cut) or "—",
    ]


_HEADER = [
    "layer",
    "regime from I ⊕ 0",
    "regime from data",
    "driving head (share)",
    "equilibrium near the data",
    "stabilization",
    "rate",
    "c",
    "certificates",
    "abscissa before → after",
    "tokens W2 / floor",
    "function change",
    "cut",
]


def _headline(m: ModelMap) -> tuple[str, str]:
    """The model (its shape named once: most descriptions already give it) and the data line,
    with the rate the map used."""
    shape = f"{m.n_layers} layers, d = {m.dim}, {m.n_heads} heads"
    model = m.description if f"d = {m.dim}" in m.description else f"{m.description} ({shape})"
    rate = m.rate if isinstance(m.rate, str) else f"{m.rate:g}"
    budget = f" (change budget {m.change_budget:g})" if m.rate == "auto" else ""
    return (
        f"{model}; read as {m.family}, {m.norm_placement}",
        f"Data: {m.data}. Rate: {rate}{budget}.",
    )


def _network_lines(m: ModelMap) -> list[str]:
    net = m.stabilized_network
    if net is None:
        return ["The stabilized network was not run (the time limit ran out before it)."]
    lines = [
        f"With the attention of layers {', '.join(map(str, net.stabilized_layers)) or 'none'} "
        f"replaced by their stabilized layers (one residual step of the stabilized velocity, "
        f"LayerNorms and feed-forwards kept), on {net.n_inputs} data inputs:",
        "",
        f"* the mean-pooled embedding keeps a cosine of **{_num(net.cosine_mean)}** with the "
        f"original on average (lowest {_num(net.cosine_min)});",
        f"* the final hidden states move by **{_num(net.relative_change, '.3g')}** of their size "
        f"(after each layer: {', '.join(_num(c, '.3g') for c in net.layer_change)});",
    ]
    if math.isfinite(net.reference_error):
        lines.append(
            f"* the extracted forward pass reproduces the real network's hidden states to "
            f"{net.reference_error:.2g} relative (what the comparison inherits);"
        )
    if net.p_original:
        lines.append(
            f"* Gaussianity p-values of {net.gaussian_tokens} Gaussian input tokens after each "
            f"layer, original: {', '.join(_num(p, '.2g') for p in net.p_original)}; "
            f"stabilized: {', '.join(_num(p, '.2g') for p in net.p_stabilized)}."
        )
    lines.extend(f"* {x}" for x in net.missing)
    return lines


def map_markdown(m: ModelMap, figures: list[str]) -> str:
    """The report in Markdown (figures referenced by file name).

    Parameters
    ----------
    m
        The map.
    figures
        The figure files written (of :data:`FIGURES`).

    Returns
    -------
    str
        The page.
    """
    model, data = _headline(m)
    lines = [
        f"# Model map: {m.model}",
        "",
        f"{model}. Status: **{m.status.value}**.",
        "",
        data,
        "",
        *[f"* {n}" for n in m.notes],
        "",
        "## The stabilized network on real inputs",
        "",
        *_network_lines(m),
        "",
        "## Layers",
        "",
        "| " + " | ".join(_HEADER) + " |",
        "|" + "---|" * len(_HEADER),
        *["| " + " | ".join(_row_cells(r)) + " |" for r in m.rows],
        "",
        *[f"* not mapped: {u}" for u in m.unmapped],
        "",
        "Certified means: the stabilization's local certificate (spectral abscissa of the "
        "linearization at the target ≤ −rate, by an exact shift of the base spectrum), its "
        "global bound (no blow-up from any start) where it holds, and the verifying "
        "simulations; an equilibrium's stability is *certified* only with a rounding bound "
        "(dense spectra), else an *estimate*.",
        "",
    ]
    for name in figures:
        lines += [f"![{FIGURES[name]}]({name})", "", f"*{FIGURES[name]}*", ""]
    lines += ["## Evidence per layer", ""]
    for r in m.rows:
        lines += [f"### Layer {r.layer} ({r.status.value})", "", "```text", r.message, "```", ""]
        if r.curve is not None:
            pts = ", ".join(
                f"{rho:g}: {f:.3g}"
                for rho, f in zip(r.curve.rates, r.curve.function_change, strict=True)
            )
            lines += [f"Rate → function change: {pts} ({r.curve.how}).", ""]
    timing = m.stats.get("timing", {})
    if timing:
        lines += [
            "## Where the time went",
            "",
            "| part | seconds |",
            "|---|---|",
            *[f"| {k} | {v:.1f} |" for k, v in timing.items()],
            "",
            f"Total {m.stats.get('seconds', math.nan):.1f} s ({m.stats.get('where', '')}).",
        ]
    return "\n".join(lines) + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
    "padding:3px 6px;text-align:left}th{background:#f3f3f3}img{max-width:100%}"
    "pre{background:#f7f7f7;padding:.6em;white-space:pre-wrap;font-size:12px}"
    "figcaption{font-size:13px;color:#555}"
)


def map_html(m: ModelMap, figures: dict[str, Path]) -> str:
    """The report as one self-contained HTML page (figures embedded as base64 PNG).

    Parameters
    ----------
    m
        The map.
    figures
        File name → path of each figure written.

    Returns
    -------
    str
        The page.
    """
    esc = html.escape
    model, data = _headline(m)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Model map: {esc(m.model)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Model map: {esc(m.model)}</h1>",
        f"<p>{esc(model)}. Status: <b>{esc(m.status.value)}</b>.</p>",
        f"<p>{esc(data)}</p>",
        "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in m.notes) + "</ul>",
        "<h2>The stabilized network on real inputs</h2>",
        "<p>"
        + "<br>".join(esc(x.lstrip("* ")).replace("**", "") for x in _network_lines(m))
        + "</p>",
        "<h2>Layers</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in _HEADER) + "</tr>",
        *["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _row_cells(r)) + "</tr>" for r in m.rows],
        "</table>",
        *[f"<p>not mapped: {esc(u)}</p>" for u in m.unmapped],
    ]
    for name, path in figures.items():
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        parts.append(
            f"<figure><img alt='{esc(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{esc(FIGURES.get(name, name))}</figcaption></figure>"
        )
    parts.append("<h2>Evidence per layer</h2>")
    for r in m.rows:
        parts.append(f"<h3>Layer {r.layer} ({esc(r.status.value)})</h3><pre>{esc(r.message)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def draw_figure(name: str, m: ModelMap, path: Path) -> None:
    """Draw the figure ``name`` of :data:`FIGURES` for ``m`` at ``path``."""
    from ..plotting.core import new_figure, save_figure  # matplotlib: only when drawing

    fig = new_figure(width=7.5, height=3.8)
    ax = fig.subplots()
    {
        "lambda_depth.png": _draw_lambda,
        "spectra.png": _draw_spectra,
        "head_shares.png": _draw_shares,
        "function_change.png": _draw_change,
    }[name](m, ax)
    save_figure(fig, path)


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]


def _draw_lambda(m: ModelMap, ax: Any) -> None:
    for r, col in zip(m.rows, _colors(len(m.rows)), strict=True):
        tb, lb = r.lam_before
        ta, la = r.lam_after
        if len(tb):
            ax.plot(tb, lb, "--", color=col)
        if len(ta):
            ax.plot(ta, la, "-", color=col, label=f"layer {r.layer}")
    ax.set_yscale("log")
    ax.set_xlabel("depth t")
    ax.set_ylabel("λ_max Σ(t)")
    legend(ax, fontsize=7)


def _draw_spectra(m: ModelMap, ax: Any) -> None:
    for r, col in zip(m.rows, _colors(len(m.rows)), strict=True):
        for e in r.equilibria:
            if e.eigenvalues:
                z = np.asarray(e.eigenvalues)
                ax.scatter(z.real, z.imag, marker="o", facecolors="none", edgecolors=[col], s=30)
        st = r.stabilization
        if st is not None and st.spectrum is not None and len(st.spectrum.eigenvalues):
            z = np.asarray(st.spectrum.eigenvalues)
            ax.scatter(z.real, z.imag, marker="x", color=col, s=30, label=f"layer {r.layer}")
    ax.axvline(0.0, color="0.6", lw=0.8, ls="--")
    ax.set_xlabel("Re λ")
    ax.set_ylabel("Im λ")
    legend(ax, fontsize=7)


def _draw_shares(m: ModelMap, ax: Any) -> None:
    rows = [r for r in m.rows if r.head_shares]
    if not rows:
        ax.text(0.5, 0.5, "no head shares computed", ha="center", transform=ax.transAxes)
        return
    width = max(len(r.head_shares) for r in rows)
    grid = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        grid[i, : len(r.head_shares)] = r.head_shares
    im = ax.imshow(grid, aspect="auto", cmap="magma")
    ax.set_yticks(range(len(rows)), [str(r.layer) for r in rows])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.figure.colorbar(im, ax=ax, label="share of dλ_max/dt")


def _draw_change(m: ModelMap, ax: Any) -> None:
    for r, col in zip(m.rows, _colors(len(m.rows)), strict=True):
        if r.curve is None:
            continue
        ax.plot(r.curve.rates, r.curve.function_change, "o-", color=col, label=f"layer {r.layer}")
        st = r.stabilization
        if st is not None and math.isfinite(st.function_change):
            ax.plot([r.curve.chosen], [st.function_change], "*", color=col, ms=12)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rate ρ")
    ax.set_ylabel("function change (relative)")
    legend(ax, fontsize=7)


def model_map_record(dest: Path, m: ModelMap, *, draw: Draw | None = None) -> dict[str, Any]:
    """Write the report of ``m`` into ``dest``: the figures, ``model_map.md`` and
    ``model_map.html``.

    Parameters
    ----------
    dest
        An existing directory.
    m
        The map.
    draw
        ``draw(name, make, panels)`` calls ``make()`` (a figure of ``panels`` axes) if the run
        affords it and returns whether it did (the design task's time limit); ``None``: draw
        all.

    Returns
    -------
    dict
        ``{"status", "outputs", "figures", "summary"}`` for ``result.json``.
    """
    dest = Path(dest)
    written: dict[str, Path] = {}
    if m.rows:
        for name in FIGURES:
            path = dest / name

            def make(name: str = name, path: Path = path) -> None:
                draw_figure(name, m, path)

            if draw is None:
                make()
            elif not draw(name, make, 1):  # each figure of the map is one Axes
                continue
            written[name] = path
    _write(dest / "model_map.md", map_markdown(m, list(written)))
    _write(dest / "model_map.html", map_html(m, written))
    net = m.stabilized_network
    summary = {
        "model": m.model,
        "layers_mapped": len(m.rows),
        "stabilized": sum(r.stabilization is not None and r.stabilization.success for r in m.rows),
        "pooled_cosine": math.nan if net is None else net.cosine_mean,
        "relative_change": math.nan if net is None else net.relative_change,
        "message": m.message,
    }
    return {
        "status": m.status,
        "outputs": {
            "model": m.model,
            "description": m.description,
            "family": m.family,
            "data": m.data,
            "notes": list(m.notes),
            "table": m.table(),
            "network": None
            if net is None
            else {k: v for k, v in net.__dict__.items() if k != "status"}
            | {"status": str(net.status)},
            "timing": dict(m.stats.get("timing", {})),
            "where": m.stats.get("where", ""),
            "reused": list(m.stats.get("reused", [])),
            "reused_halves": list(m.stats.get("reused_halves", [])),
            "unmapped": list(m.unmapped),
            "message": m.message,
        },
        "figures": [*written, "model_map.md", "model_map.html"],
        "summary": summary,
    }


def _write(path: Path, text: str) -> None:
    """Write atomically: a reader never sees half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, "utf-8")
    tmp.replace(path)
