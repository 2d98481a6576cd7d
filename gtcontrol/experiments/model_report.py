"""The per-layer report of one model: Gaussianity, attention-flow blow-up, dominant head.

:func:`model_report` runs, on any model :func:`~gtcontrol.interop.extract` reads,

* :func:`~gtcontrol.experiments.pretrained_gaussianity` — ``N`` Gaussian tokens through the real
  network, the Gaussianity of the tokens after every layer;
* :func:`~gtcontrol.experiments.attention_flows` — every attention sublayer as a
  continuous-time flow from ``N(e, I ⊕ 0)`` (``"identity"``) and from the moments of what it
  reads on data (``"data"``; an ONNX file's graph runs the data, unless it cannot be fed token
  ids or an image, and then the report says why): the blow-up time, and the head that drives
  the blow-up from the identity.

It is the ``model`` task of a design file (``gtcontrol run``; docs/designs.md) and the guide
docs/own_model.md. Reference: the paper cited in :mod:`gtcontrol`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .._display import Axes, SummaryItems, legend
from .._status import Budget, Outcome, ResultFields, Status
from .._validation import as_positive_float, as_positive_int, as_seed, as_time_limit
from ..interop.extraction import ModelFields
from ._common import first_failure
from ._onnx_data import data_refusal
from .attention_flows import AttentionFlows, attention_flows
from .pretrained import (
    MAX_TOKENS,
    GaussianityTable,
    check_tokens,
    load_within,
    model_label,
    not_loaded,
    pretrained_gaussianity,
)
from .report_figures import Draw

__all__ = ["ModelLayerRow", "ModelReport", "model_report", "model_task_record"]


@dataclass(frozen=True)
class ModelLayerRow:
    """One layer of :class:`ModelReport`.

    Attributes
    ----------
    layer
        Layer index (from 0).
    rejected
        Whether Gaussianity is rejected for the tokens after this layer (``None``: not tested).
    p_value
        The Gaussianity test's combined p-value (``nan``: not tested).
    blowup_identity, blowup_data
        Blow-up time of the attention flow from the identity and from the data moments
        (``inf``: none up to the horizon; ``nan``: not run).
    dominant_head
        The head driving the blow-up from the identity (``-1``: not run).
    head_share
        Its share of the growth rate of ``λ_max`` (``nan``: not run).
    """

    layer: int
    rejected: bool | None
    p_value: float
    blowup_identity: float
    blowup_data: float
    dominant_head: int
    head_share: float


@dataclass(frozen=True, eq=False)
class ModelReport(ModelFields, ResultFields, Outcome):
    """Result of :func:`model_report`.

    Attributes
    ----------
    model, description, family, norm_placement
        What the model is (:class:`~gtcontrol.interop.ExtractedModel`).
    n_layers, dim, n_heads
        Its shape.
    notes
        What the Gaussian model keeps and drops for it.
    data
        What the ``"data"`` start was computed from (empty when not run; ``"not run: "`` and
        why for a model that cannot be fed data).
    rows
        One :class:`ModelLayerRow` per layer.
    gaussianity, flows
        The two experiments' own results (``None`` when a part did not run).
    status
        The first failure of the parts (``BUDGET_EXHAUSTED`` when the time ran out), else
        ``SUCCESS``.
    message, stats
        What ran; ``seconds``.
    """

    data: str
    rows: tuple[ModelLayerRow, ...]
    gaussianity: GaussianityTable | None = None
    flows: AttentionFlows | None = None

    def _summary_items(self) -> SummaryItems:
        first = next((r.layer for r in self.rows if r.rejected), None)
        fastest = min((r.blowup_identity for r in self.rows), default=math.nan)
        return [
            ("model", self.model),
            ("n_layers", self.n_layers),
            ("first_rejected_layer", first),
            ("fastest_blowup_identity", fastest),
        ]

    def _draw(self, ax: Axes) -> None:
        ks = [r.layer for r in self.rows]
        for attr, label in (("blowup_identity", "from the identity"), ("blowup_data", "from data")):
            ys = [getattr(r, attr) for r in self.rows]
            if any(math.isfinite(y) for y in ys):
                ax.plot(ks, ys, "o-", label=f"T* {label}")
        ax.set_xlabel("layer")
        ax.set_ylabel("blow-up time of the attention flow")
        ax.set_title(self.description, fontsize=8)
        legend(ax, fontsize=7)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per layer."""
        return [dict(r.__dict__) for r in self.rows]

    def markdown(self) -> str:
        """The report in Markdown: the model, what the Gaussian model drops, the table."""
        lines = [
            f"# {self.model}",
            "",
            f"{self.description}; read as {self.family}, {self.norm_placement}.",
            "",
            *[f"* {n}" for n in self.notes],
            *([f"* data start: {self.data}"] if self.data else []),
            "",
            "| layer | Gaussian after it? | p | T* identity | T* data | dominant head | share |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            verdict = "—" if r.rejected is None else ("rejected" if r.rejected else "kept")
            head = "—" if r.dominant_head < 0 else str(r.dominant_head)
            lines.append(
                f"| {r.layer} | {verdict} | {_num(r.p_value)} | {_num(r.blowup_identity)} | "
                f"{_num(r.blowup_data)} | {head} | {_num(r.head_share)} |"
            )
        return "\n".join(lines)


def _num(x: float) -> str:
    if math.isnan(x):
        return "—"
    return "none" if math.isinf(x) else f"{x:.4g}"


def model_report(
    model: Any = "minilm",
    T: float = 4.0,
    *,
    n_tokens: int | None = None,
    seed: int = 0,
    n_null: int = 16,
    flows: bool = True,
    time_limit: float | None = None,
) -> ModelReport:
    """Gaussianity, blow-up times and dominant heads of every layer of a model.

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads (a name of
        :data:`~gtcontrol.interop.MODELS`, a Hugging Face folder, an ONNX file, a
        ``transformers`` model).
    T
        Horizon of the attention flows.
    n_tokens
        Gaussian tokens fed to the network, at least ``max(20, d + 2)``; ``None``:
        ``max(512, d + 64)``.
    seed
        Seed of the tokens, of random weights (``random-*`` names) and of the nulls.
    n_null
        Monte Carlo replicates of each Gaussianity null (8 to 10 000).
    flows
        Run the attention flows (the slow part at large widths).
    time_limit
        Wall-clock limit in seconds for the whole report, loading the model included (``None``:
        none). The Gaussianity table runs first, then the flows, each within what is left; a
        row whose part did not run holds ``nan``, and the report is then
        ``Status.BUDGET_EXHAUSTED`` (with no rows when the model did not load in time).

    Returns
    -------
    ModelReport
        One row per layer, and the experiments' own results.

    Raises
    ------
    InvalidParametersError
        On bad options or a model that cannot be read
        (:class:`~gtcontrol.interop.ModelFileError`).

    Examples
    --------
    >>> rep = model_report("random-bert", n_tokens=400, T=0.5)  # doctest: +SKIP
    >>> len(rep.rows), rep.status  # doctest: +SKIP
    (6, <Status.SUCCESS: 'success'>)
    """
    clock = time.perf_counter()
    sd = as_seed("seed", seed)
    horizon = as_positive_float("T", T)
    n_req = None if n_tokens is None else as_positive_int("n_tokens", n_tokens, maximum=MAX_TOKENS)
    if n_req is not None:
        check_tokens(n_req)  # refused before the model loads
    budget = Budget(as_time_limit(time_limit))
    em = load_within(model, sd, budget)
    if em is None:
        return _not_loaded(model, budget, clock)
    n = max(512, em.dim + 64) if n_req is None else n_req
    check_tokens(n, em.dim, em.label)
    tab = pretrained_gaussianity(
        em, n_tokens=n, seed=sd, n_null=n_null, time_limit=budget.left_as_limit()
    )
    flow = None
    refusal = data_refusal(em)  # an ONNX graph without a token-ids input, say
    if flows and not budget.exhausted:
        starts = ("identity", "data") if refusal is None else ("identity",)
        flow = attention_flows(em, starts=starts, T=horizon, time_limit=budget.left_as_limit())
    rows = []
    for k in range(em.n_layers):
        g = next((r for r in tab.rows if r.layer == k + 1), None)
        ident = _flow(flow, k, "identity")
        data = _flow(flow, k, "data")
        rows.append(
            ModelLayerRow(
                layer=k,
                rejected=None if g is None else bool(g.result.rejected),
                p_value=math.nan if g is None else float(g.result.p_value),
                blowup_identity=math.nan if ident is None else ident.blowup_time,
                blowup_data=math.nan if data is None else data.blowup_time,
                dominant_head=-1 if ident is None else ident.dominant_head,
                head_share=math.nan if ident is None else ident.head_share,
            )
        )
    parts = [tab.status] + ([] if flow is None else [flow.status])
    status = first_failure(parts)
    if flows and flow is None:
        status = Status.BUDGET_EXHAUSTED
    blow = sum(math.isfinite(r.blowup_identity) for r in rows)
    message = (
        f"{em.label}: {tab.message}; "
        + (f"flows: {flow.message}" if flow is not None else "flows not run")
        + f"; {blow} of {em.n_layers} attention flows blow up from the identity"
    )
    return ModelReport(
        **ModelFields.of(em),
        data=(flow.data if flow is not None else "") if refusal is None else f"not run: {refusal}",
        rows=tuple(rows),
        gaussianity=tab,
        flows=flow,
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - clock, "n_tokens": n},
    )


def _not_loaded(model: Any, budget: Budget, clock: float) -> ModelReport:
    """The report of a model not loaded within the time limit: no rows."""
    return ModelReport(
        **ModelFields.unloaded(model_label(model)),
        data="",
        rows=(),
        status=Status.BUDGET_EXHAUSTED,
        message=not_loaded(model, budget),
        stats={"seconds": time.perf_counter() - clock, "n_tokens": 0},
    )


def _flow(flows: AttentionFlows | None, k: int, start: str) -> Any:
    if flows is None:
        return None
    return next((r for r in flows.rows if r.layer == k and r.start == start), None)


def model_task_record(
    dest: Path,
    rep: ModelReport,
    *,
    draw: Draw | None = None,
) -> dict[str, Any]:
    """Write the files of the ``model`` design task for a :func:`model_report` into ``dest``.

    Writes ``model_report.md``, ``gaussianity.png`` and ``flows.png`` (each figure when its
    part has rows).

    Parameters
    ----------
    dest
        An existing directory.
    rep
        The report.
    draw
        ``draw(name, make, panels)`` calls ``make()`` to draw the figure ``name`` (of
        ``panels`` axes) if the run affords it and returns whether it did (the design task's
        time limit); ``None``: draw all.

    Returns
    -------
    dict
        ``{"status", "outputs", "figures", "summary"}`` for ``result.json``.
    """
    dest = Path(dest)
    (dest / "model_report.md").write_text(rep.markdown() + "\n", "utf-8")
    figures = []
    for name, part in (("gaussianity.png", rep.gaussianity), ("flows.png", rep.flows)):
        if part is not None and part.rows:
            make = partial(_draw_part, part, dest / name)
            if draw is None:
                make()
                figures.append(name)
            elif draw(name, make, 1):  # a part's figure is one Axes
                figures.append(name)
    first = next((r.layer for r in rep.rows if r.rejected), None)
    finite = [r.blowup_identity for r in rep.rows if math.isfinite(r.blowup_identity)]
    return {
        "status": rep.status,
        "outputs": {
            "model": rep.model,
            "description": rep.description,
            "family": rep.family,
            "norm_placement": rep.norm_placement,
            "notes": list(rep.notes),
            "data": rep.data,
            "table": rep.table(),
            "message": rep.message,
        },
        "figures": figures,
        "summary": {
            "model": rep.model,
            "n_layers": rep.n_layers,
            "first_rejected_layer": first,
            "fastest_blowup_identity": min(finite) if finite else math.inf,
            "message": rep.message,
        },
    }


def _draw_part(part: GaussianityTable | AttentionFlows, path: Path) -> None:
    """The figure of one part of the report (its ``.plot``), saved at ``path``."""
    from ..plotting.core import new_figure, save_figure  # matplotlib: only when drawing

    fig = new_figure(width=7.0, height=3.6)
    part.plot(fig.subplots())
    save_figure(fig, path)
