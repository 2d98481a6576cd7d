"""Stabilizing a real pretrained attention sublayer (MiniLM-L6 by default) around data targets.

For each layer ``k`` of a model (any model :func:`~gtcontrol.interop.extract` reads with its
``transformers`` module; all-MiniLM-L6-v2 by default), the attention sublayer
``ExtractedLayer.attention_layer`` (``d = width + 1``, the affine coordinate last, factored
heads) is kept head for head and :func:`gtcontrol.stabilize` designs the smallest addition that
makes a target an exponentially stable equilibrium. Two targets per layer:

* ``"text"``: the tokens that enter the layer's attention when the real network reads
  :data:`~gtcontrol.experiments.SENTENCES` (pooled non-padding tokens, ``N ≈ 600``): their mean,
  and their covariance shrunk towards ``(tr Σ̂/d) I`` by the Ledoit–Wolf estimate (the sample
  covariance is singular: LayerNorm outputs have a null direction, and ``N`` is close to ``d``);
* ``"identity"``: ``N(e, I ⊕ 0)``, ``e`` the affine coordinate.

The function change is measured on the same real text tokens (their attention sublayer
velocity before and after, relative).

Reference: the paper cited in :mod:`gtcontrol`, §4; O. Ledoit, M. Wolf, *A well-conditioned
estimator for large-dimensional covariance matrices*, J. Multivariate Anal. 88 (2004).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._blas import single_threaded_blas
from .._display import Axes, SummaryItems
from .._linalg import FloatArray
from .._progress import progress
from .._status import Budget, Outcome, ResultFields, Status, as_time_limit, within
from .._validation import MAX_ENTRY, as_choice, as_positive_float, as_positive_int, as_seed
from ..control.stabilization import ADDITIONS, Stabilization, stabilize
from ..errors import InvalidParametersError
from ..interop.extraction import ExtractedModel
from ..interop.models import extract
from ..model.gaussian import Gaussian
from ._onnx_data import attention_tokens
from .attention_flows import SENTENCES
from .pretrained import load_within, model_label, not_loaded, serially
from .sample_statistics import as_samples

__all__ = [
    "TARGETS",
    "StabilizationRow",
    "StabilizationTable",
    "data_tokens",
    "ledoit_wolf",
    "stabilize_model",
    "text_target",
]

#: The targets of :func:`stabilize_model`.
TARGETS = ("text", "identity")


def ledoit_wolf(points: Any) -> tuple[FloatArray, FloatArray, float]:
    """Mean, Ledoit–Wolf shrunk covariance and shrinkage ``δ`` of the rows of ``points``.

    ``Σ_LW = (1 − δ) Σ̂ + δ μ I`` with ``Σ̂`` the ``1/N`` sample covariance, ``μ = tr Σ̂ / d`` and
    ``δ = min(1, b̄²/‖Σ̂ − μI‖_F²)``, ``b̄² = N⁻² Σ_k ‖x_k x_kᵀ − Σ̂‖_F²`` (centred ``x_k``): the
    consistent estimate of the optimal shrinkage (Ledoit & Wolf 2004).

    Parameters
    ----------
    points
        Samples as rows, ``(N, d)``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, float)
        The mean ``(d,)``, the shrunk covariance ``(d, d)`` and ``δ``.

    Raises
    ------
    InvalidParametersError
        If ``points`` is not a finite real ``(N, d)`` array with ``N, d ≥ 1``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).standard_normal((50, 40))
    >>> m, s, delta = ledoit_wolf(x)
    >>> bool(np.all(np.linalg.eigvalsh(s) > 0)), 0 < delta <= 1
    (True, True)
    """
    return _ledoit_wolf(as_samples(points, min_rows=1, name="points"))


def _ledoit_wolf(x: FloatArray) -> tuple[FloatArray, FloatArray, float]:
    """:func:`ledoit_wolf` of a checked sample."""
    n, d = x.shape
    mean = x.mean(axis=0)
    xc = x - mean
    # Centred points scaled into [-1, 1] by a power of two (exact): the shrinkage sums fourth
    # powers, which would overflow from |x| ~ 1e77 (and underflow below ~1e-77); Σ̂ scales
    # back by its square, δ not at all.
    scale = math.ldexp(1.0, math.frexp(float(np.max(np.abs(xc))))[1])
    xc = xc / scale
    s = xc.T @ xc / n
    mu = float(np.trace(s)) / d
    dev = s - mu * np.eye(d)
    d2 = float(np.sum(dev * dev))
    norms = np.einsum("ij,ij->i", xc, xc)
    # Σ_k ‖x_k x_kᵀ − Σ̂‖² = Σ_k |x_k|⁴ − N ‖Σ̂‖²  (the cross term sums to N‖Σ̂‖²)
    b2 = max(float(np.sum(norms**2)) - n * float(np.sum(s * s)), 0.0) / n**2
    delta = 1.0 if d2 == 0.0 else min(1.0, b2 / d2)
    return mean, ((1.0 - delta) * s + delta * mu * np.eye(d)) * scale * scale, delta


def data_tokens(
    model: Any = "minilm", sentences: Sequence[str] = SENTENCES, *, seed: int = 0
) -> tuple[list[FloatArray], str]:
    """The pooled tokens that enter every layer's attention on data, one ``(N, d)`` array each.

    The batch is that of :func:`~gtcontrol.experiments.data_moments` (the sentences through the
    model's tokenizer, random ids or random image-like inputs, said in the second value).

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads (an ONNX file's graph runs the
        data, as in :func:`~gtcontrol.experiments.data_moments`), or an
        :class:`~gtcontrol.interop.ExtractedModel`.
    sentences
        The texts (default :data:`~gtcontrol.experiments.SENTENCES`).
    seed
        Seed of random token ids or images.

    Returns
    -------
    (list of numpy.ndarray, str)
        The tokens per layer and what the data were.

    Raises
    ------
    ModelFileError
        For an ONNX graph that cannot be fed data, as
        :func:`~gtcontrol.experiments.data_moments`.

    Examples
    --------
    >>> tokens, what = data_tokens("minilm")  # doctest: +SKIP
    >>> len(tokens), tokens[2].shape[1]  # doctest: +SKIP
    (6, 384)
    """
    sd = as_seed("seed", seed)
    em = model if isinstance(model, ExtractedModel) else extract(model)
    return attention_tokens(em, sentences, sd)


def _augmented(mean: FloatArray, cov: FloatArray) -> Gaussian:
    d = mean.shape[0]
    s = np.zeros((d + 1, d + 1))
    s[:d, :d] = 0.5 * (cov + cov.T)
    return Gaussian(np.append(mean, 1.0), s, name="target")


def text_target(tokens: Any) -> tuple[Gaussian, float]:
    """``N(m̂, Σ_LW ⊕ 0)`` of data tokens on ``R^{d+1}`` (affine coordinate last) and ``δ``.

    Parameters
    ----------
    tokens
        The tokens, ``(N, d)`` (e.g. one entry of :func:`data_tokens`).

    Returns
    -------
    (Gaussian, float)
        The target and the Ledoit–Wolf shrinkage ``δ`` (:func:`ledoit_wolf`).

    Raises
    ------
    InvalidParametersError
        If ``tokens`` is not a finite real ``(N, d)`` array with ``N, d ≥ 1``, or their
        covariance has an entry above :data:`~gtcontrol._validation.MAX_ENTRY`.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol.experiments import text_target
    >>> tokens = np.random.default_rng(0).standard_normal((200, 3))
    >>> target, delta = text_target(tokens)
    >>> target.dim, float(target.mean[-1]), float(target.cov[-1, -1]), 0.0 <= delta <= 1.0
    (4, 1.0, 0.0, True)
    """
    mean, cov, delta = _ledoit_wolf(as_samples(tokens, min_rows=1, name="tokens"))
    top = float(np.max(np.abs(cov)))
    if top > MAX_ENTRY:  # the target is a Gaussian: refused there, under another name
        raise InvalidParametersError(
            f"tokens: their covariance has an entry of magnitude {top:.3g}, above the bound "
            f"{MAX_ENTRY:g} of a Gaussian (gtcontrol._validation.MAX_ENTRY); expected tokens "
            "spread over less than about 1e75"
        )
    return _augmented(mean, cov), delta


@dataclass(frozen=True)
class StabilizationRow(ResultFields, Outcome):
    """One (layer, target, family) of :func:`stabilize_model`.

    Attributes
    ----------
    layer, target, family
        The layer index, the target (``"text"`` or ``"identity"``) and the family used.
    change, c
        The size of the change (``c`` or ``‖1 − g‖₂``) and ``c`` (``nan`` for gains).
    design_rate
        The rate ``c`` was designed for: the one asked, or a doubling of it when the token
        check failed at that rate alone (``Stabilization.stats["design_rate"]``; ``nan`` for
        gains).
    base_abscissa, abscissa
        Spectral abscissa with the heads kept (``A, b`` designed), and stabilized.
    seconds
        Wall time of the call.
    function_change
        Relative change of the attention sublayer's velocity on the data tokens.
    token_w2, token_floor, untouched_w2
        With a token check: the tokens' W2 to the target, its sampling floor, and the
        untouched layer's W2 (``nan`` otherwise).
    status, message, stats
        The :class:`~gtcontrol.Stabilization`'s.
    success
        True for ``SUCCESS`` only (the layer is stabilized, with its certificates).
    """

    layer: int
    target: str
    family: str
    change: float
    c: float
    design_rate: float
    base_abscissa: float
    abscissa: float
    seconds: float
    function_change: float
    token_w2: float
    token_floor: float
    untouched_w2: float

    _summary_fields = ("layer", "target", "family", "change", "abscissa", "function_change")

    def _draw(self, ax: Axes) -> None:
        ax.bar(["heads kept, A, b designed", "stabilized"], [self.base_abscissa, self.abscissa])
        ax.axhline(0.0, color="0.6", lw=0.8, ls="--")
        ax.set_ylabel("spectral abscissa at the target")
        ax.set_title(f"layer {self.layer}, {self.target}, {self.family}", fontsize=8)

    def row(self) -> dict[str, Any]:
        """The row as a plain dict (for tables and ``result.json``)."""
        return {
            "layer": self.layer,
            "target": self.target,
            "family": self.family,
            "status": str(self.status),
            "change": self.change,
            "c": self.c,
            "design_rate": self.design_rate,
            "base_abscissa": self.base_abscissa,
            "abscissa": self.abscissa,
            "seconds": self.seconds,
            "function_change": self.function_change,
            "token_w2": self.token_w2,
            "token_floor": self.token_floor,
            "untouched_w2": self.untouched_w2,
        }


def _row(k: int, target: str, res: Stabilization, seconds: float) -> StabilizationRow:
    tc, un = res.token_certificate, res.untouched_tokens
    nan = math.nan
    return StabilizationRow(
        layer=k,
        target=target,
        family=res.family,
        status=res.status,
        change=res.change,
        c=res.c,
        design_rate=float(res.stats.get("design_rate", nan)),
        base_abscissa=nan if res.base is None else res.base.abscissa,
        abscissa=nan if res.spectrum is None else res.spectrum.abscissa,
        seconds=seconds,
        function_change=res.function_change,
        token_w2=nan if tc is None else tc.w2,
        token_floor=nan if tc is None else tc.floor,
        untouched_w2=nan if un is None else un.w2,
        message=res.message,
        stats=res.stats,
    )


@dataclass(frozen=True, eq=False)
class StabilizationTable(ResultFields, Outcome):
    """Every (layer, target) of a model stabilized: one :class:`StabilizationRow` each.

    Attributes
    ----------
    model
        The model's label.
    rows
        One :class:`StabilizationRow` per (layer, target).
    results
        The :class:`~gtcontrol.Stabilization` of every row (same order).
    data
        What the data tokens were.
    status, message, stats
        ``SUCCESS`` when every pair is stabilized; ``FAILED`` when one is not;
        ``BUDGET_EXHAUSTED`` when ``time_limit`` cut the table short. ``stats``: ``seconds``.
    """

    model: str
    rows: tuple[StabilizationRow, ...]
    results: tuple[Stabilization, ...]
    data: str

    def _summary_items(self) -> SummaryItems:
        return [
            ("model", self.model),
            ("rows", len(self.rows)),
            ("stabilized", sum(r.status is Status.SUCCESS for r in self.rows)),
        ]

    def _draw(self, ax: Axes) -> None:
        xs = [r.base_abscissa for r in self.rows]
        ys = [r.abscissa for r in self.rows]
        ax.scatter(xs, ys, s=18)
        ax.axhline(0.0, color="0.6", ls="--", lw=0.9)
        ax.set_xlabel("spectral abscissa, heads kept")
        ax.set_ylabel("spectral abscissa, stabilized")
        ax.set_title(f"{self.model}: stabilized attention sublayers")

    def table(self) -> list[dict[str, Any]]:
        """The rows as plain dicts."""
        return [r.row() for r in self.rows]

    def markdown(self) -> str:
        """The table in Markdown (one line per row)."""
        head = (
            "| layer | target | family | c or ‖1−g‖ | design rate | abscissa before → after | "
            "seconds | function change | tokens W2 / floor (untouched W2) | status |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
        )
        lines = []
        for r in self.rows:
            tokens = (
                "—"
                if math.isnan(r.token_w2)
                else f"{r.token_w2:.3g} / {r.token_floor:.3g} ({r.untouched_w2:.3g})"
            )
            lines.append(
                f"| {r.layer} | {r.target} | {r.family} | {r.change:.5g} | "
                f"{'—' if math.isnan(r.design_rate) else f'{r.design_rate:g}'} | "
                f"{r.base_abscissa:.4g} → {r.abscissa:.4g} | {r.seconds:.1f} | "
                f"{r.function_change:.3g} | {tokens} | {r.status.value} |"
            )
        return head + "\n".join(lines) + "\n"


def _not_ready(label: str, why: str, budget: Budget) -> StabilizationTable:
    """The table of a model (or its data) not ready within the time limit: no rows."""
    return StabilizationTable(
        model=label,
        rows=(),
        results=(),
        data="",
        status=Status.BUDGET_EXHAUSTED,
        message=f"{why}: nothing was stabilized",
        stats={"seconds": budget.elapsed},
    )


def stabilize_model(
    model: Any = "minilm",
    *,
    layers: Sequence[int] | None = None,
    targets: Sequence[str] = TARGETS,
    add: str = "head",
    rate: float = 1.0,
    token_check: int | None = None,
    seed: int = 0,
    time_limit: float | None = None,
) -> StabilizationTable:
    """Stabilize every attention sublayer of a model around data and identity targets.

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads with its ``transformers`` module
        (default ``"minilm"``), or an :class:`~gtcontrol.interop.ExtractedModel`.
    layers
        Layer indices (default: all).
    targets
        Subset of :data:`TARGETS`.
    add, rate, token_check
        As in :func:`gtcontrol.stabilize`.
    seed
        Seed of the data batch, the verification's perturbed start and the token check.
    time_limit
        Wall-clock limit in seconds for the whole table, loading the model and computing its
        data tokens included (``None``: none); each layer gets what is left, and a table cut
        short says so with ``Status.BUDGET_EXHAUSTED`` (with no rows when the model or its
        data were not ready in time).

    Returns
    -------
    StabilizationTable
        One row per (layer, target), with the :class:`~gtcontrol.Stabilization` results.

    Examples
    --------
    >>> table = stabilize_model("minilm", layers=[2], targets=["identity"])  # doctest: +SKIP
    >>> print(table.markdown())  # doctest: +SKIP
    """
    limit = as_time_limit(time_limit)
    as_choice("add", add, ADDITIONS)
    as_positive_float("rate", rate)
    as_seed("seed", seed)
    if token_check is not None:
        as_positive_int("token_check", token_check, maximum=10**6)
    for t in targets:
        as_choice("targets", t, TARGETS)
    budget = Budget(limit)
    em = load_within(model, 0, budget)
    if em is None:
        return _not_ready(model_label(model), not_loaded(model, budget), budget)
    picked = list(range(len(em.layers))) if layers is None else [int(k) for k in layers]
    for k in picked:
        if not 0 <= k < len(em.layers):
            raise InvalidParametersError(
                f"layers: {k} is not a layer of {em.label} (0 … {len(em.layers) - 1})"
            )
    data = within(budget, lambda: serially(lambda: data_tokens(em, seed=seed)))
    if data is None:
        why = f"{budget.reason()} before the data tokens of {em.label} were computed"
        return _not_ready(em.label, why, budget)
    tokens, what = data
    rows: list[StabilizationRow] = []
    results: list[Stabilization] = []
    status = Status.SUCCESS
    # torch is loaded: numpy's BLAS on one thread (gtcontrol._blas.single_threaded_blas)
    with single_threaded_blas(), progress("stabilize", total=len(picked) * len(targets)) as update:
        for k in picked:
            layer = em.layers[k].attention_layer
            probe = np.hstack([tokens[k], np.ones((tokens[k].shape[0], 1))])
            for name in targets:
                if budget.exhausted:
                    status = Status.BUDGET_EXHAUSTED
                    break
                if name == "text":
                    target, _ = text_target(tokens[k])
                else:
                    d = layer.dim
                    cov = np.eye(d)
                    cov[-1, -1] = 0.0
                    target = Gaussian(np.eye(d)[-1], cov, name="target")
                clock = time.perf_counter()
                res = stabilize(
                    layer,
                    target,
                    add=add,
                    rate=rate,
                    token_check=token_check,
                    tokens=probe,
                    seed=seed,
                    time_limit=budget.left_as_limit(1e-3),
                )
                rows.append(_row(k, name, res, time.perf_counter() - clock))
                results.append(res)
                update(len(rows))
    done = sum(r.status is Status.SUCCESS for r in rows)
    if status is Status.SUCCESS and any(r.status is Status.BUDGET_EXHAUSTED for r in rows):
        status = Status.BUDGET_EXHAUSTED  # a row cut by the time limit: not a failure
    elif status is Status.SUCCESS and done < len(rows):
        status = Status.FAILED
    msg = (
        f"{done} of {len(rows)} (layer, target) pairs of {em.label} stabilized "
        f"({add}, rate {rate:g}); data: {what}"
    )
    if status is Status.BUDGET_EXHAUSTED:
        msg += (
            f"; the time limit ran out in or after {len(rows)} of "
            f"{len(picked) * len(targets)} pairs"
        )
    return StabilizationTable(
        model=em.label,
        rows=tuple(rows),
        results=tuple(results),
        data=what,
        status=status,
        message=msg,
        stats={"seconds": budget.elapsed},
    )
