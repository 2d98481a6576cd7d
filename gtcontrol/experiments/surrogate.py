"""How well the Gaussian moment surrogate of a real Transformer predicts the network.

:mod:`~gtcontrol.interop.extraction` extracts every layer's matrices exactly (``B_h``,
``V_h``, the key-bias tilt, LayerNorms, the feed-forward) of any model
:func:`~gtcontrol.interop.extract` reads, post-LN or pre-LN, and carries a Gaussian through
the layer: attention exact in the mean-field limit, LayerNorm linearized by concentration, the
feed-forward by Gaussian moment matching. What the moment model does not have — GPT-2's causal
mask, ModernBERT's rotary positions and local windows — stays in the real network and shows in
the errors. :func:`moment_surrogate` runs the real network on Gaussian tokens and
reports, per layer, the predicted and measured moments both **propagated** from the input and
**local** (one layer, from the measured moments of that layer's input), next to what the layer
changes (the do-nothing prediction), the spread of the LayerNorm scale and the effective sample
size of the attention weights.

Reference: the paper cited in :mod:`gtcontrol`, §1–§2.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._blas import single_threaded_blas
from .._display import Axes, SummaryItems
from .._linalg import FloatArray
from .._status import Budget, Outcome, ResultFields, Status
from ..interop.extraction import ExtractedLayer
from ..model.gaussian import Gaussian
from ._common import stop_reason
from .pretrained import ModelTokens, gaussian_forward, with_cut

__all__ = ["SurrogateComparison", "SurrogateRow", "moment_surrogate"]


@dataclass(frozen=True)
class SurrogateRow:
    """Predicted against measured moments after one layer (a row of
    :class:`SurrogateComparison`).

    Errors are relative: the mean error to the cloud's RMS radius ``sqrt(tr Σ)``, the covariance
    error in Frobenius norm to ``‖Σ‖_F``, the Bures–Wasserstein distance to ``sqrt(tr Σ)`` (Σ the
    measured covariance). ``local_*`` start the surrogate from the measured moments of this layer's
    input; the others propagate from the network input. ``layer_change`` is the same covariance
    error for the do-nothing prediction ``Σ_out = Σ_in`` (measured): a local error well below it
    means the surrogate explains what the layer does to the covariance. (The surrogate starts from
    the empirical moments of the very tokens fed to the network, so the input's sampling noise is
    shared by both sides and is no floor for these errors.)
    ``ln_scale_cv`` is the measured coefficient of variation of the per-token LayerNorm scale
    (both LayerNorms, the larger), ``attention_ess`` the median over queries and heads of the
    softmax effective sample size ``1/Σ_j p_ij²`` as a fraction of N.

    Attributes
    ----------
    layer
        Encoder layer ``k ≥ 1``.
    mean_error, cov_error, bures_wasserstein
        Propagated errors of the mean, the covariance and the Bures–Wasserstein distance.
    trace_ratio
        ``tr Σ_predicted / tr Σ_measured`` (propagated).
    local_mean_error, local_cov_error, local_bures_wasserstein
        The same errors for one layer from the measured input moments.
    layer_change
        Covariance error of the do-nothing prediction.
    ln_scale_cv
        Coefficient of variation of the per-token LayerNorm scale.
    attention_ess
        Median effective sample size of the attention weights, over N.
    """

    layer: int
    mean_error: float
    cov_error: float
    bures_wasserstein: float
    trace_ratio: float
    local_mean_error: float
    local_cov_error: float
    local_bures_wasserstein: float
    layer_change: float
    ln_scale_cv: float
    attention_ess: float


@dataclass(frozen=True, eq=False)
class SurrogateComparison(ModelTokens, ResultFields, Outcome):
    """Result of :func:`moment_surrogate`: one :class:`SurrogateRow` per encoder layer.

    Attributes
    ----------
    model, description
        The model's short label and its description
        (:class:`~gtcontrol.interop.ExtractedModel`).
    n_tokens, seed
        Sequence length and seed of the input (with the same seed, the same states as
        :func:`~gtcontrol.experiments.pretrained_gaussianity` reads).
    rows
        One :class:`SurrogateRow` per encoder layer compared.
    predicted_mean, predicted_cov
        The surrogate's propagated moments, input first: ``(k + 1, d)`` and ``(k + 1, d, d)``
        for ``k`` rows.
    measured_mean, measured_cov
        The network's measured moments at every depth, input first.
    status
        ``Status.SUCCESS``; ``Status.BUDGET_EXHAUSTED`` when the ``time_limit`` ran out (the
        layers compared so far are kept); ``Status.OVERFLOW`` when the network's tokens or the
        surrogate's moments are not finite (the rows stop before that layer).
    message
        What was compared, or why the comparison stopped.
    stats
        ``seconds``, ``layers_done``.
    """

    rows: tuple[SurrogateRow, ...]
    predicted_mean: FloatArray = field(repr=False)
    predicted_cov: FloatArray = field(repr=False)
    measured_mean: FloatArray = field(repr=False)
    measured_cov: FloatArray = field(repr=False)

    def _summary_items(self) -> SummaryItems:
        worst = max((r.cov_error for r in self.rows), default=math.nan)
        return [
            ("model", self.model),
            ("n_tokens", self.n_tokens),
            ("n_layers", len(self.rows)),
            ("max_cov_error", worst),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_layer_curves

        labels = {
            "cov_error": "cov err (propagated)",
            "local_cov_error": "cov err (local)",
            "layer_change": "layer change (do-nothing)",
            "mean_error": "mean err (propagated)",
            "ln_scale_cv": "LN scale CV",
            "attention_ess": "attention ESS/N",
        }
        curves = {v: [getattr(r, k) for r in self.rows] for k, v in labels.items()}
        title = f"moment surrogate vs measured: {self.model}, N = {self.n_tokens}"
        draw_layer_curves(ax, [r.layer for r in self.rows], curves, title=title)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per layer."""
        return [dict(r.__dict__) for r in self.rows]


def _moments(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    g = Gaussian.from_samples(x)
    return np.array(g.mean), np.array(g.cov)


def _errors(
    m_pred: FloatArray, s_pred: FloatArray, m_meas: FloatArray, s_meas: FloatArray
) -> tuple[float, float, float]:
    radius = math.sqrt(float(np.trace(s_meas)))
    me = float(np.linalg.norm(m_pred - m_meas)) / radius
    ce = float(np.linalg.norm(s_pred - s_meas) / np.linalg.norm(s_meas))
    bw = Gaussian(m_pred, s_pred).bures_wasserstein(Gaussian(m_meas, s_meas)) / radius
    return me, ce, bw


def _attention_ess(ex: ExtractedLayer, x: FloatArray) -> float:
    """Median over heads and queries of ``1/(N Σ_j p_ij²)`` for the layer's softmax weights.

    ``x`` are the tokens the attention reads; logits ``s (W_Q,h x_i + b_Q,h)ᵀ W_K,h x_j`` (the
    key bias cancels in the softmax).
    """
    w = ex.weights
    n, dh = int(x.shape[0]), w.head_dim
    q = (x @ w.W_Q.T + w.b_Q).reshape(n, w.n_heads, dh)
    k = (x @ w.W_K.T).reshape(n, w.n_heads, dh)
    out = []
    for h in range(w.n_heads):
        logits = w.scale * (q[:, h] @ k[:, h].T)  # row i: query i against every key
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        out.append(1.0 / np.sum(p * p, axis=1))
    return float(np.median(np.concatenate(out))) / n


def _scale_cv(y: FloatArray, eps: float) -> float:
    s = np.sqrt(y.var(axis=1) + eps)
    return float(s.std() / s.mean())


def moment_surrogate(
    model: Any = "minilm",
    *,
    n_tokens: int = 1024,
    seed: int = 0,
    time_limit: float | None = None,
) -> SurrogateComparison:
    """Run a Transformer on Gaussian tokens and compare every layer with the moment surrogate.

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads (default ``"minilm"``): post-LN
        and pre-LN layers, plain or gated feed-forwards.
    n_tokens
        Sequence length N of ``x_i ~ N(0, I_d)`` (the same input as
        :func:`~gtcontrol.experiments.pretrained.pretrained_gaussianity` with the same seed).
    seed
        Seed of the input tokens (and of the weights of the ``random-*`` models).
    time_limit
        Wall-clock limit in seconds for loading the model, the forward pass and the
        layer-by-layer comparison (``None``: none); the forward pass starts no layer estimated
        not to fit in what is left. When it runs out the layers compared so far are returned
        with ``Status.BUDGET_EXHAUSTED`` (none when the model did not load in time).

    Returns
    -------
    SurrogateComparison
        Per-layer predicted vs measured errors (see :class:`SurrogateRow`), and the moments.

    Raises
    ------
    InvalidParametersError
        On a model that cannot be read (:class:`~gtcontrol.interop.ModelFileError`), too
        few tokens or a bad seed.
    ExperimentDependencyError
        Without the ``experiments`` extra.

    Examples
    --------
    >>> res = moment_surrogate("random-bert", n_tokens=400)  # doctest: +SKIP
    >>> len(res.rows), res.status  # doctest: +SKIP
    (6, <Status.SUCCESS: 'success'>)
    """
    clock = time.perf_counter()
    run = gaussian_forward(model, n_tokens, seed, time_limit, None)
    rows: list[SurrogateRow] = []
    pm: list[FloatArray] = []
    ps: list[FloatArray] = []
    meas: list[tuple[FloatArray, FloatArray]] = []
    if run.em is None:  # not loaded in time: nothing to compare
        status, message = Status.BUDGET_EXHAUSTED, run.cut
    else:
        with single_threaded_blas():
            reached = run.em.layers[: len(run.states) - 1]  # the layers the forward pass ran
            rows, pm, ps, meas, status, message = _compare_layers(reached, run.states, run.budget)
        status, message = with_cut(status, message, run.cut)
    return SurrogateComparison(
        **run.fields(),
        rows=tuple(rows),
        predicted_mean=np.array(pm),
        predicted_cov=np.array(ps),
        measured_mean=np.array([a for a, _ in meas]),
        measured_cov=np.array([b for _, b in meas]),
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - clock, "layers_done": len(rows)},
    )


def _compare_layer(
    k: int,
    ex: ExtractedLayer,
    propagated: tuple[FloatArray, FloatArray],
    meas: list[tuple[FloatArray, FloatArray]],
    x_in: FloatArray,
) -> SurrogateRow:
    """Row ``k``: the propagated and the local prediction of layer ``k`` against its measurement."""
    m, s = propagated
    lm, ls = ex.propagate(*meas[k - 1])
    m_meas, s_meas = meas[k]
    me, ce, bw = _errors(m, s, m_meas, s_meas)
    lme, lce, lbw = _errors(lm, ls, m_meas, s_meas)
    change = float(np.linalg.norm(s_meas - meas[k - 1][1]) / np.linalg.norm(s_meas))
    inter = ex.forward(x_in)
    norms = (("ln1_in", ex.ln1), ("ln2_in", ex.ln2))
    cv = max((_scale_cv(inter[key], ln.eps) for key, ln in norms if ln is not None), default=0.0)
    return SurrogateRow(
        layer=k,
        mean_error=me,
        cov_error=ce,
        bures_wasserstein=bw,
        trace_ratio=float(np.trace(s)) / float(np.trace(s_meas)),
        local_mean_error=lme,
        local_cov_error=lce,
        local_bures_wasserstein=lbw,
        layer_change=change,
        ln_scale_cv=cv,
        attention_ess=_attention_ess(ex, inter["attention_in"]),
    )


def _compare_layers(
    extracted: tuple[ExtractedLayer, ...], states: list[FloatArray], budget: Budget
) -> tuple[
    list[SurrogateRow],
    list[FloatArray],
    list[FloatArray],
    list[tuple[FloatArray, FloatArray]],
    Status,
    str,
]:
    total = len(extracted)
    for k, x in enumerate(states):
        if not np.all(np.isfinite(x)):
            states = states[:k]
            break
    meas = [_moments(x) for x in states]
    m, s = meas[0]
    pm, ps = [m], [s]
    rows: list[SurrogateRow] = []
    last = 0.0  # seconds of the last layer: the estimate of the next (as forward_within's)
    for k, ex in enumerate(extracted, start=1):
        if k >= len(states):
            return rows, pm, ps, meas, Status.OVERFLOW, f"the tokens after layer {k} are not finite"
        left = budget.remaining()
        if budget.exhausted or last > left:
            why = (
                stop_reason(budget)
                if budget.exhausted
                else f"the time limit of {budget.given_limit:g} s (the next layer, about "
                f"{last:.2g} s as the last, would not fit in the {left:.2g} s left)"
            )
            msg = f"{why}: {k - 1} of {total} layers compared"
            return rows, pm, ps, meas, Status.BUDGET_EXHAUSTED, msg
        clock = time.perf_counter()
        m, s = ex.propagate(m, s)
        if not (np.all(np.isfinite(m)) and np.all(np.isfinite(s))):
            msg = f"the surrogate's moments after layer {k} are not finite"
            return rows, pm, ps, meas, Status.OVERFLOW, msg
        pm.append(m)
        ps.append(s)
        rows.append(_compare_layer(k, ex, (m, s), meas, states[k - 1]))
        last = time.perf_counter() - clock
    worst = max(r.local_cov_error for r in rows) if rows else math.nan
    msg = f"{len(rows)} layers compared; largest local covariance error {worst:.3g}"
    return rows, pm, ps, meas, Status.SUCCESS, msg
