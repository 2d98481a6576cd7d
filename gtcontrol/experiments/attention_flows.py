"""Every attention sublayer of a Transformer as a continuous-time attention flow.

For each layer ``k`` of a model (by default all-MiniLM-L6-v2; any model
:func:`~gtcontrol.interop.extract` reads) the attention sublayer alone,
``ExtractedLayer.attention_layer`` (width ``d`` plus the affine coordinate that carries the
query bias, the heads factored; :mod:`.extraction`), is taken as a *time-invariant* vector field
``dx/dt = Σ_h V_h Attn_h(x; μ_t) + bias`` and a Gaussian ``N(m0, Σ0)`` is moved by it
(:func:`gtcontrol.simulate`, the factor form, to ``T`` or to the blow-up). Two initial laws per
layer:

* ``"identity"``: ``N(e, I_d ⊕ 0)`` (``e`` the affine coordinate);
* ``"data"``: the empirical mean and covariance of the tokens the attention of layer ``k``
  *reads* (the layer's input in a post-LN model, its LayerNorm's output in a pre-LN one) when the
  real network reads data, all non-padding tokens pooled, with the affine coordinate appended
  (variance 0). The data are :data:`SENTENCES` through the model's own tokenizer when the model
  has one (MiniLM: ``N ≈ 600``), else random token ids from its vocabulary; for a vision model,
  random image-like inputs (spatially smooth Gaussian fields, not natural images). Each run says
  which (``AttentionFlows.data``). An ONNX file's own graph runs the data (its embeddings
  included), with the tokenizer saved beside the file if there is one.

What is reported per (layer, start): the regime (``"blowup"`` from the integrator, or no
blow-up up to the horizon ``T``; :func:`gtcontrol.analyze` would add an equilibrium search,
which is slow at these widths, so it is not run), the blow-up time and its bracket, and the
blow-up *direction*: ``u``, the top eigenvector of Σ at the last recorded depth. The **dominant
head** is the head whose term contributes most to the growth rate of ``λ_max`` along ``u``: with
``Σu = λu``, ``dλ/dt = uᵀΣ̇u = 2λ uᵀMu`` and ``uᵀMu = Σ_h c_h``, ``c_h = uᵀ V_h Σ B_h u``; the
dominant head maximizes ``c_h`` and ``share = c_h / Σ_h c_h``. Its alignment is ``|cos|``
between ``u`` and the head's *output* subspace ``range W_O,h`` (where the head writes) and its
*value* subspace ``range W_V,hᵀ`` (what it reads): the norm of the orthogonal projection of
``u``. A random unit vector of ``R^d`` has about ``sqrt(d_head/d)`` (MiniLM:
``sqrt(32/384) ≈ 0.29``).

What it does not say: the trained network is a residual stack, each layer applied once (depth
``h = 1``), not a flow, with LayerNorms that keep the token scale bounded, so the network itself
never blows up; the flow is the attention sublayer alone, iterated as a continuous-depth vector
field, without what the Gaussian model drops (positions, causal masks, windows:
``ExtractedModel.notes``). The blow-up time is the depth at which this field, on its own, would
concentrate the tokens' covariance on one direction without bound.

Reference: the paper cited in :mod:`gtcontrol`, §2–§3; docs/minilm_flows.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._blas import single_threaded_blas
from .._display import Axes, SummaryItems, legend
from .._linalg import FloatArray
from .._progress import progress
from .._readonly import ReadOnlyArrays
from .._status import Budget, Outcome, OutcomeOrBlowup, ResultFields, Status
from .._validation import as_positive_float, as_seed, as_time_limit
from ..errors import InvalidParametersError
from ..interop.extraction import ExtractedModel
from ..interop.models import extract
from ..model._factor_form import top_eigenpair
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Layer
from ._common import stop_reason
from ._onnx_data import attention_tokens

__all__ = [
    "SENTENCES",
    "AttentionFlows",
    "DataMoments",
    "FlowRow",
    "attention_flows",
    "data_moments",
    "run_flows",
]

#: Plain English sentences whose tokens give the ``"data"`` covariance of a text model.
SENTENCES = (
    "The cat sat on the warm mat and watched the birds outside the window.",
    "Stock markets fell sharply on Monday after the central bank raised interest rates.",
    "She opened the old wooden box and found a bundle of letters tied with ribbon.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The committee will meet next Thursday to review the annual budget proposal.",
    "A gentle rain fell over the hills as the shepherd led his flock home.",
    "Quantum computers exploit superposition to explore many states at once.",
    "He forgot his umbrella again, so he arrived at the office soaking wet.",
    "The museum's new exhibit features paintings from the early Renaissance.",
    "Regular exercise improves sleep, mood and long-term cardiovascular health.",
    "The train to Edinburgh was delayed by forty minutes because of a signal fault.",
    "Children laughed as the clown juggled five bright red balls at the fair.",
    "Researchers sequenced the genome of a rare orchid found only in Madagascar.",
    "Please remember to water the tomatoes while I am away this weekend.",
    "The novel follows three generations of a family living on a small island.",
    "Engineers tested the bridge under loads far heavier than it will ever carry.",
    "A sudden gust of wind scattered the papers across the courtyard.",
    "The recipe calls for two cups of flour, one egg and a pinch of salt.",
    "Volcanic ash grounded hundreds of flights across northern Europe.",
    "Our neighbour's dog barks every time the postman walks up the path.",
    "The orchestra rehearsed the symphony for weeks before the premiere.",
    "Machine translation has improved dramatically over the last decade.",
    "The river froze solid during the coldest winter anyone could remember.",
    "A small bakery on the corner sells the best croissants in town.",
    "The judge postponed the hearing until new evidence could be examined.",
    "Astronomers detected water vapour in the atmosphere of a distant planet.",
    "He spent the afternoon repairing the fence that the storm had knocked down.",
    "The software update fixed the bug that crashed the application on startup.",
    "Tourists crowded the narrow streets to see the festival's lantern parade.",
    "Bees communicate the location of flowers through an intricate waggle dance.",
    "The teacher asked the students to write an essay about their summer holidays.",
    "After years of drought, the reservoir finally filled to its highest level.",
    "The detective noticed a faint smell of tobacco in the locked room.",
    "Electric cars are becoming cheaper as battery technology improves.",
    "The mountain path was steep, rocky and covered in loose gravel.",
    "She practised the violin every morning before breakfast for ten years.",
    "The city council approved plans for a new park along the waterfront.",
    "Ancient traders carried silk and spices along routes across the desert.",
    "The baby finally fell asleep after an hour of gentle rocking.",
    "Heavy snow closed the schools and kept most people at home all day.",
)
_STARTS = ("identity", "data")


@dataclass(frozen=True, eq=False)
class FlowRow(ResultFields, OutcomeOrBlowup):
    """One (layer, initial law) of :func:`attention_flows`.

    Attributes
    ----------
    layer
        Layer index (from 0).
    start
        ``"identity"`` (``N(e, I ⊕ 0)``) or ``"data"`` (the empirical moments of the tokens the
        attention reads on data).
    regime
        ``"blowup"`` (a finite-time blow-up: the kind of :func:`gtcontrol.analyze`),
        ``"no blow-up to T = ..."`` (integrated to the horizon, which decides no long-run regime
        of ``analyze``; ``lam_final`` then says whether Σ grew), or the status of an
        integration that stopped otherwise.
    blowup_time
        ``T*`` (``inf`` without blow-up).
    bracket
        The integrator's ``blowup_bracket`` (``None`` without blow-up).
    trace0
        ``tr Σ0``.
    lam_final
        ``λ_max Σ`` at the last recorded depth.
    dominant_head
        The head with the largest ``c_h = uᵀ V_h Σ B_h u`` (module docstring).
    head_share
        ``c_h / Σ_g c_g`` of the dominant head.
    output_alignment, value_alignment
        ``|cos|`` between ``u`` and ``range W_O,h`` / ``range W_V,hᵀ`` of the dominant head.
    seconds, nfev
        Wall time and right-hand-side evaluations of the simulation.
    status, message, stats
        Those of :func:`gtcontrol.simulate` (``BLOWUP``, ``SUCCESS`` to ``T``, ...).
    success
        True for ``SUCCESS`` and ``BLOWUP`` (a blow-up is the answer).
    """

    layer: int
    start: str
    regime: str
    blowup_time: float
    bracket: tuple[float, float] | None
    trace0: float
    lam_final: float
    dominant_head: int
    head_share: float
    output_alignment: float
    value_alignment: float
    seconds: float
    nfev: int

    _summary_fields = ("layer", "start", "regime", "blowup_time", "lam_final", "dominant_head")

    def _draw(self, ax: Axes) -> None:
        names = ("share", "|cos| W_O", "|cos| W_V")
        ax.bar(names, [self.head_share, self.output_alignment, self.value_alignment])
        ax.set_ylabel(f"dominant head {self.dominant_head}")
        ax.set_title(f"layer {self.layer}, {self.start}: {self.regime}", fontsize=8)

    def row(self) -> dict[str, Any]:
        """The row as a plain dict (for tables)."""
        return {
            "layer": self.layer,
            "start": self.start,
            "regime": self.regime,
            "blowup_time": self.blowup_time,
            "tr Σ0": self.trace0,
            "λ_max (last)": self.lam_final,
            "dominant head": self.dominant_head,
            "share": self.head_share,
            "|cos| W_O": self.output_alignment,
            "|cos| W_V": self.value_alignment,
            "seconds": self.seconds,
        }


@dataclass(frozen=True, eq=False)
class AttentionFlows(ResultFields, Outcome):
    """Result of :func:`attention_flows`.

    Attributes
    ----------
    rows
        One :class:`FlowRow` per (layer, start) done, in order.
    curves
        ``curves[(layer, start)] = (t, λ_max)`` along the recorded depths (for figures).
    T
        The horizon.
    model, description
        The model's short label and description (:class:`~.extraction.ExtractedModel`).
    data
        What the ``"data"`` start was computed from (empty when it was not run).
    figure
        The PNG written (``None`` when no ``figure`` path was given).
    status
        ``Status.SUCCESS`` when every (layer, start) ran (a blow-up is a row, not a status);
        ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` ran out (the rows done are kept).
    message, stats
        What ran; ``seconds`` and ``n_tokens`` (the data tokens pooled).
    """

    rows: tuple[FlowRow, ...]
    curves: dict[tuple[int, str], tuple[FloatArray, FloatArray]] = field(repr=False)
    T: float
    model: str = "minilm"
    description: str = ""
    data: str = ""
    figure: Path | None = None

    def _summary_items(self) -> SummaryItems:
        blowups = sum(math.isfinite(r.blowup_time) for r in self.rows)
        return [
            ("model", self.model),
            ("flows", len(self.rows)),
            ("blowups", blowups),
            ("T", self.T),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_flow_curves

        draw_flow_curves(ax, self.curves)

    def table(self) -> list[dict[str, Any]]:
        """The rows as dicts."""
        return [r.row() for r in self.rows]

    def markdown(self) -> str:
        """The table in Markdown."""
        lines = [
            "| layer | start | regime | T* | tr Σ0 | λ_max (last) | dominant head | share "
            "| cos W_O | cos W_V | s |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            t_star = "—" if math.isinf(r.blowup_time) else f"{r.blowup_time:.6g}"
            lines.append(
                f"| {r.layer} | {r.start} | {r.regime} | {t_star} | {r.trace0:.4g} | "
                f"{r.lam_final:.3g} | "
                f"{r.dominant_head} | {r.head_share:.2f} | {r.output_alignment:.2f} | "
                f"{r.value_alignment:.2f} | {r.seconds:.0f} |"
            )
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class DataMoments(ReadOnlyArrays):
    """The empirical moments of what every layer's attention reads on data (:func:`data_moments`).

    Attributes
    ----------
    mean
        Per layer, the empirical mean of the tokens its attention reads, ``(L, d)``.
    cov
        Per layer, their covariance (``1/N`` normalization), ``(L, d, d)``.
    n_tokens
        The number ``N`` of tokens pooled (non-padding positions of the batch).
    source
        What the data were (the sentences through the model's tokenizer, random token ids, or
        random images), in words.
    """

    mean: FloatArray
    cov: FloatArray
    n_tokens: int
    source: str

    @property
    def n_layers(self) -> int:
        """The number ``L`` of layers."""
        return int(self.mean.shape[0])


def data_moments(
    model: Any = "minilm", sentences: Sequence[str] = SENTENCES, *, seed: int = 0
) -> DataMoments:
    """Empirical ``(mean, covariance)`` of what every layer's attention reads on data.

    The real network (its embeddings, then its layers; padding masked) reads a batch, and the
    tokens entering each attention — the layer's input in a post-LN model, its LayerNorm's
    output in a pre-LN one — are pooled over the non-padding positions; covariances use
    ``1/N``. The batch is ``sentences`` through the model's own tokenizer when its folder has
    one (MiniLM), else random token ids uniform over its vocabulary (40 sequences of 16), and
    for a vision model 8 random image-like inputs (spatially smooth Gaussian fields, per channel
    mean 0 and variance 1 — not natural images). ``source`` says which.

    The real network is the ``transformers`` module, or for an ONNX file its graph: run as it
    is (onnxruntime when installed, else onnx's reference evaluator) with the tensor that each
    layer's projections read captured, fed the ids (its tokenizer is one saved beside the file;
    its vocabulary the rows of the embedding table the ids index), an attention mask, token
    type ids 0 and position ids ``0 … n-1`` as its inputs ask. A graph with a fixed batch or
    length runs in batches of its shape, sequences padded or cut to its length (said in
    ``source``).

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads.
    sentences
        The texts (default :data:`SENTENCES`).
    seed
        Seed of the random token ids or images.

    Returns
    -------
    DataMoments
        ``mean (L, d)`` and ``cov (L, d, d)``, one entry per layer, the number ``n_tokens`` of
        tokens pooled, and ``source``, what the data were.

    Raises
    ------
    ModelFileError
        For an ONNX graph that cannot be fed data (no input of integer token ids indexing an
        embedding table, an input that is none of ids, attention mask, token types, positions
        or one image) or that fails on them; the message names the file and what was expected.

    Examples
    --------
    >>> from gtcontrol.experiments import data_moments
    >>> moments = data_moments("random-bert")  # doctest: +SKIP
    >>> moments.n_layers, moments.cov[0].shape  # doctest: +SKIP
    (6, (384, 384))
    """
    sd = as_seed("seed", seed)
    em = extract(model)
    tokens, what = attention_tokens(em, sentences, sd)
    means, covs = [], []
    n = 0
    for pts in tokens:
        mean = pts.mean(axis=0)
        xc = pts - mean
        means.append(mean)
        covs.append(xc.T @ xc / pts.shape[0])
        n = int(pts.shape[0])
    d = em.dim
    return DataMoments(
        mean=np.array(means).reshape(len(means), d),
        cov=np.array(covs).reshape(len(covs), d, d),
        n_tokens=n,
        source=what,
    )


def _augmented(mean: FloatArray, cov: FloatArray) -> Gaussian:
    d = mean.shape[0]
    s = np.zeros((d + 1, d + 1))
    s[:d, :d] = 0.5 * (cov + cov.T)
    return Gaussian(np.append(mean, 1.0), s)


def _subspace_cos(u: FloatArray, basis: FloatArray) -> float:
    q, _ = np.linalg.qr(basis)
    return float(np.linalg.norm(q.T @ u))


def head_growth(layer: Layer, factor: Any) -> tuple[float, FloatArray, FloatArray]:
    """Each head's part in the growth of ``λ_max Σ`` at ``Σ = LLᵀ``.

    ``dλ_max/dt = uᵀ(dΣ/dt)u`` with ``u`` the top eigenvector of ``Σ``; head ``h`` contributes
    ``2 c_h``, ``c_h = uᵀ V_h Σ B_h u = s (uᵀW_O,h)(W_V,h L)(W_K,h L)ᵀ(W_Q,h u)`` (factored heads
    ``V_h = W_O,h W_V,h``, ``B_h = s W_Q,hᵀ W_K,h``), computed through the factors in
    ``O(H d_head d r)``.

    Parameters
    ----------
    layer
        A layer with factored heads (an extracted attention sublayer).
    factor
        ``L``, ``(d, r)``, with ``Σ = LLᵀ`` (a factor-form trajectory's record).

    Returns
    -------
    (float, numpy.ndarray, numpy.ndarray)
        ``λ_max Σ``, ``u`` and ``c`` (one entry per factored head; ``c_h / Σ_g c_g`` is the
        head's share).

    Raises
    ------
    InvalidParametersError
        Without factored heads.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import FactoredHeads, Layer
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, o = (rng.standard_normal((2, 1, 3)) for _ in range(4))
    >>> lay = Layer(heads=FactoredHeads(q, k, v, o.transpose(0, 2, 1)))
    >>> lam, u, c = head_growth(lay, np.eye(3))
    >>> c.shape, bool(np.isclose(lam, 1.0))
    ((2,), True)
    """
    fh = layer.factored_heads
    if fh is None:
        raise InvalidParametersError("layer: expected factored heads")
    lf = np.asarray(factor, dtype=float)
    g, q = top_eigenpair(lf.T @ lf)
    u = lf @ q / math.sqrt(g)
    vl = np.matmul(fh.v, lf)  # (H, dh, r)
    kl = np.matmul(fh.k, lf)
    cores = np.matmul(vl, kl.transpose(0, 2, 1))
    ou = np.einsum("hdj,d->hj", fh.o, u)
    qu = np.matmul(fh.q, u)
    return g, u, fh.scale * np.einsum("hi,hij,hj->h", ou, cores, qu)


def _direction(layer: Layer, traj: Trajectory) -> tuple[float, int, float, float, float]:
    """``(λ_max, dominant head, share, |cos| W_O, |cos| W_V)`` at the last record."""
    fh = layer.factored_heads
    if fh is None or traj.factor is None:
        raise InvalidParametersError("layer: expected factored heads and a factor-form trajectory")
    g, u, c = head_growth(layer, traj.factor[-1])
    h = int(np.argmax(c))
    total = float(np.sum(c))
    share = float(c[h] / total) if total != 0 else math.nan
    return g, h, share, _subspace_cos(u, fh.o[h]), _subspace_cos(u, fh.v[h].T)


def _lam_curve(traj: Trajectory) -> tuple[FloatArray, FloatArray]:
    lams = []
    if traj.factor is not None:
        for lf in traj.factor:
            lams.append(top_eigenpair(lf.T @ lf)[0] if lf.shape[1] else 0.0)
    return np.asarray(traj.t, dtype=float), np.asarray(lams, dtype=float)


def _flow_row(
    k: int, start: str, layer: Layer, g0: Gaussian, T: float, budget: Budget
) -> tuple[FlowRow, tuple[FloatArray, FloatArray]]:
    clock = time.perf_counter()
    traj = simulate(layer, g0, T, time_limit=budget.left_as_limit())
    regime = {Status.BLOWUP: "blowup", Status.SUCCESS: f"no blow-up to T = {T:g}"}.get(
        traj.status, str(traj.status)
    )
    lam, head, share, cos_o, cos_v = _direction(layer, traj)
    row = FlowRow(
        layer=k,
        start=start,
        status=traj.status,
        regime=regime,
        blowup_time=traj.blowup_time,
        bracket=traj.blowup_bracket,
        trace0=float(np.trace(g0.cov)),
        lam_final=lam,
        dominant_head=head,
        head_share=share,
        output_alignment=cos_o,
        value_alignment=cos_v,
        seconds=time.perf_counter() - clock,
        nfev=int(traj.stats.get("nfev", 0)),
        message=traj.message,
        stats=traj.stats,
    )
    return row, _lam_curve(traj)


def attention_flows(
    model: Any = "minilm",
    T: float = 4.0,
    *,
    layers: Sequence[int] | None = None,
    starts: Sequence[str] = _STARTS,
    figure: str | Path | None = None,
    time_limit: float | None = None,
) -> AttentionFlows:
    """The continuous-time flow of every attention sublayer of a model (module docstring).

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads (default ``"minilm"``).
    T
        Horizon of each flow (positive; default 4).
    layers
        Layer indices to run (from 0); ``None``: all.
    starts
        Initial laws: ``"identity"`` (``N(e, I ⊕ 0)``) and/or ``"data"`` (the empirical moments
        of what the attention reads on data, :func:`data_moments`).
    figure
        Path of a PNG to write (``1/λ_max`` against depth per layer and start), or ``None``.
    time_limit
        Wall-clock limit in seconds for all the flows together (``None``: none); each flow gets
        what is left. Running out keeps the finished rows and ends ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    AttentionFlows
        One row per (layer, start), the ``λ_max`` curves, the figure's path.

    Raises
    ------
    InvalidParametersError
        On a layer the model does not have, an unknown start, a bad ``T``/``time_limit``, or a
        model that cannot be read (or, with a ``"data"`` start, fed data:
        :func:`data_moments`).
    ExperimentDependencyError
        Without torch/transformers or the MiniLM files (the ``experiments`` extra).

    Examples
    --------
    >>> from gtcontrol.experiments import attention_flows
    >>> flows = attention_flows(  # doctest: +SKIP
    ...     "random-bert", layers=[0], starts=["identity"], T=1.0
    ... )
    >>> len(flows.rows), flows.status  # doctest: +SKIP
    (1, <Status.SUCCESS: 'success'>)
    """
    if not starts or any(s not in _STARTS for s in starts):
        raise InvalidParametersError(f"starts: expected 'identity' and/or 'data', got {starts!r}")
    horizon = as_positive_float("T", T)
    budget = Budget(as_time_limit(time_limit))
    clock = time.perf_counter()
    em = extract(model)
    lay_ids = list(range(em.n_layers)) if layers is None else [int(k) for k in layers]
    if not lay_ids or any(k < 0 or k >= em.n_layers for k in lay_ids):
        raise InvalidParametersError(
            f"layers: expected indices in 0..{em.n_layers - 1}, got {layers!r}"
        )
    data = _LazyData(em)
    rows: list[FlowRow] = []
    curves: dict[tuple[int, str], tuple[FloatArray, FloatArray]] = {}
    with single_threaded_blas():
        status = _run_all(em, lay_ids, starts, data, horizon, budget, rows, curves)
    n_tok, what = data.info()
    if status is Status.BUDGET_EXHAUSTED:
        message = f"stopped after {len(rows)} flows: {stop_reason(budget)}"
    else:
        blow = sum(r.regime == "blowup" for r in rows)
        message = f"{len(rows)} flows, {blow} blow up before T = {horizon:g}"
    path = None
    if figure is not None and rows:
        path = Path(figure)
        _plot(em, rows, curves, path)
    return AttentionFlows(
        rows=tuple(rows),
        curves=curves,
        T=horizon,
        model=em.label,
        description=em.description,
        data=what,
        figure=path,
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - clock, "n_tokens": n_tok},
    )


class _LazyData:
    """The moments of what each layer's attention reads on data (:func:`data_moments`), computed
    when a ``"data"`` start is first reached: a forward pass of the model on the sentences (1 s
    with its tokenizer) is not begun for a budget already spent."""

    def __init__(self, em: ExtractedModel) -> None:
        self.em = em
        self.value: DataMoments | None = None

    def __getitem__(self, k: int) -> tuple[FloatArray, FloatArray]:
        if self.value is None:
            self.value = data_moments(self.em)
        return self.value.mean[k], self.value.cov[k]

    def info(self) -> tuple[int, str]:
        """Tokens of the batch and what it is (``0, ""`` when no data start ran)."""
        return (0, "") if self.value is None else (self.value.n_tokens, self.value.source)


def _run_all(
    em: ExtractedModel,
    lay_ids: Sequence[int],
    starts: Sequence[str],
    data: _LazyData,
    horizon: float,
    budget: Budget,
    rows: list[FlowRow],
    curves: dict[tuple[int, str], tuple[FloatArray, FloatArray]],
) -> Status:
    """Every (layer, start) in order, appending to ``rows``/``curves``; the overall status."""
    for k in lay_ids:
        layer = em.layers[k].attention_layer
        for start in starts:
            if budget.exhausted or budget.remaining() <= 0:
                return Status.BUDGET_EXHAUSTED
            if start == "identity":
                d = layer.dim - 1
                g0 = _augmented(np.zeros(d), np.eye(d))
            else:
                g0 = _augmented(*data[k])
            with progress(f"{em.label} layer {k}, start {start}"):
                row, curve = _flow_row(k, start, layer, g0, horizon, budget)
            if row.status is Status.BUDGET_EXHAUSTED:
                return Status.BUDGET_EXHAUSTED
            rows.append(row)
            curves[(k, start)] = curve
    return Status.SUCCESS


def _plot(
    em: ExtractedModel,
    rows: Sequence[FlowRow],
    curves: dict[tuple[int, str], tuple[FloatArray, FloatArray]],
    path: Path,
) -> None:
    from ..plotting.core import new_figure, save_figure
    from ._figures import draw_flow_curves

    fig = new_figure(width=9.0, height=3.6)
    ax1, ax2 = fig.subplots(1, 2)
    draw_flow_curves(ax1, curves)
    for j, start in enumerate(_STARTS):
        sel = [r for r in rows if r.start == start]
        if sel:
            ax2.bar(
                [r.layer + (j - 0.5) * 0.38 for r in sel],
                [r.output_alignment for r in sel],
                width=0.36,
                label=f"|cos(u, range W_O,h*)|, {start}",
            )
    level = math.sqrt(em.layers[0].weights.head_dim / em.dim)
    ax2.axhline(level, color="k", lw=0.8, ls=":", label="random direction")
    ax2.set_xlabel("layer")
    ax2.set_ylabel("alignment with the dominant head")
    ax2.set_ylim(0, 1)
    legend(ax2, fontsize=6)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)


def run_flows(
    dest: Path, *, model: Any = "minilm", time_limit: float | None = None
) -> dict[str, Any]:
    """Run :func:`attention_flows` for the ``experiment`` design task (``flows = true``).

    Writes ``<label>_flows.png`` and ``<label>_flows.md`` (the table) into ``dest``
    (MiniLM: ``minilm_flows.*``).

    Parameters
    ----------
    dest
        An existing directory to write into.
    model
        Anything :func:`~gtcontrol.interop.extract` reads (default ``"minilm"``).
    time_limit
        Wall-clock limit in seconds (``None``: none).

    Returns
    -------
    dict
        ``{"status": str, "outputs": {"table", "message", "seconds"}, "figures": [...]}``.
    """
    em = extract(model)
    png = f"{em.label}_flows.png"
    res = attention_flows(em, figure=Path(dest) / png, time_limit=time_limit)
    (Path(dest) / f"{em.label}_flows.md").write_text(res.markdown() + "\n", "utf-8")
    return {
        "status": str(res.status),
        "outputs": {
            "table": res.table(),
            "message": res.message,
            "seconds": res.stats.get("seconds"),
        },
        "figures": [png] if res.figure is not None else [],
    }
