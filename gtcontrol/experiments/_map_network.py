"""The network with every stabilized attention sublayer in place, on real inputs.

What the map's rows stabilize is one sublayer at a time; :func:`network_check` puts them all
into the network's own forward pass (:meth:`ExtractedModel.forward`: the extracted weights,
LayerNorms and feed-forwards kept) and compares it with the original on the data the map read
(:func:`map_data`): how far the pooled embeddings and the hidden states move, and whether
Gaussian tokens stay Gaussian layer by layer (:func:`~gtcontrol.experiments.gaussianity`).
The replacement is one residual step of the stabilized layer's token velocity, as the network
steps: integrating its flow over a unit of depth would describe another network.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from .._display import Axes, SummaryItems
from .._jobs import concurrently
from .._linalg import FloatArray
from .._status import Budget, Outcome, ResultFields, Status, as_time_limit
from .._validation import as_seed
from ..interop._deps import require_torch
from ..interop._families import eval_mode
from ..interop.extraction import ExtractedModel
from ..model.params import Layer
from ._forward import data_batch
from ._onnx_data import onnx_sequences
from .attention_flows import SENTENCES
from .gaussianity import gaussianity
from .stabilization import data_tokens

__all__ = ["MapData", "NetworkCheck", "map_data", "network_check"]


@dataclass(frozen=True)
class NetworkCheck(ResultFields, Outcome):
    """The network with every attention sublayer stabilized, against the original.

    Attributes
    ----------
    stabilized_layers
        The layers whose attention was replaced (the others kept, ``missing`` says why).
    missing
        ``"layer k: why"`` for each layer kept as it was.
    n_inputs
        Data sequences compared.
    cosine_mean, cosine_min
        Cosine of the mean-pooled final hidden states, stabilized against original, over the
        sequences.
    relative_change
        ``‖H_stab − H‖_F / ‖H‖_F`` of the final hidden states, all tokens.
    layer_change
        The same after every layer.
    reference_error
        Largest relative difference between the extracted weights' forward pass and the real
        network's hidden states on the same inputs (``nan``: not compared): what the comparison
        inherits from the extraction.
    p_original, p_stabilized
        Gaussianity p-values (:func:`~gtcontrol.experiments.gaussianity`) of Gaussian input
        tokens after every layer, in each network (``nan``: not tested).
    gaussian_tokens
        The number of Gaussian input tokens.
    seconds
        Wall time.
    status, message
        ``SUCCESS``; ``BUDGET_EXHAUSTED`` when the Gaussianity tests were cut; ``FAILED``
        without data.
    stats
        ``seconds``.
    success
        True for ``SUCCESS`` only.
    """

    stabilized_layers: tuple[int, ...]
    missing: tuple[str, ...]
    n_inputs: int
    cosine_mean: float
    cosine_min: float
    relative_change: float
    layer_change: tuple[float, ...]
    reference_error: float
    p_original: tuple[float, ...]
    p_stabilized: tuple[float, ...]
    gaussian_tokens: int
    seconds: float

    def _summary_items(self) -> SummaryItems:
        return [
            ("stabilized_layers", len(self.stabilized_layers)),
            ("cosine_mean", self.cosine_mean),
            ("cosine_min", self.cosine_min),
            ("relative_change", self.relative_change),
            ("reference_error", self.reference_error),
        ]

    def _draw(self, ax: Axes) -> None:
        ax.plot(range(1, len(self.layer_change) + 1), self.layer_change, "o-")
        ax.set_xlabel("after layer")
        ax.set_ylabel("relative change of the hidden states")
        ax.set_title(f"{len(self.stabilized_layers)} layers stabilized", fontsize=8)


@dataclass(frozen=True)
class MapData:
    """What the real network read, for the targets and the network check.

    Attributes
    ----------
    tokens
        Per layer, the pooled tokens that enter its attention, ``(N, d)``.
    sequences
        The inputs of the first layer, one ``(n_i, d)`` array per data sequence (padding
        dropped); empty when they cannot be had (the network check then says why).
    reference
        The real network's output (``last_hidden_state``: after the final norm of a pre-LN
        model) on each sequence (``None`` when not run).
    what
        What the data were.
    """

    tokens: tuple[FloatArray, ...]
    sequences: tuple[FloatArray, ...]
    reference: tuple[FloatArray, ...] | None
    what: str


def map_data(em: ExtractedModel, seed: int = 0) -> MapData:
    """The data of a map: what every layer's attention reads, and the first layer's inputs.

    Parameters
    ----------
    em
        The model (with its ``transformers`` module, or an ONNX file).
    seed
        Seed of random token ids or images (a model without a tokenizer).

    Returns
    -------
    MapData
        The tokens per layer, the sequences and the real network's output on them.
    """
    if em.family == "onnx":
        per_layer, first, what = onnx_sequences(em, list(SENTENCES), as_seed("seed", seed))
        tokens = tuple(np.concatenate(seqs) for seqs in per_layer)
        return MapData(tokens, tuple(first), None, what)
    tokens_list, what = data_tokens(em, seed=seed)
    tokens = tuple(tokens_list)
    batch, mask, _ = data_batch(em, list(SENTENCES), as_seed("seed", seed))
    torch = require_torch()
    with torch.inference_mode(), eval_mode(em.network):
        out = em.network(**batch, output_hidden_states=True)
    first = out.hidden_states[0].to(torch.float64).numpy()
    last = out.last_hidden_state.to(torch.float64).numpy()  # after a pre-LN model's final norm
    keep = np.ones(first.shape[:2], bool) if mask is None else mask
    seqs = tuple(np.asarray(first[i][keep[i]]) for i in range(first.shape[0]))
    refs = tuple(np.asarray(last[i][keep[i]]) for i in range(last.shape[0]))
    return MapData(tokens, seqs, refs, what)


def _pooled(em: ExtractedModel, h: FloatArray) -> FloatArray:
    if em.final_norm is not None:
        h = em.final_norm(h)
    return np.asarray(h.mean(axis=0))


def _cosine(a: FloatArray, b: FloatArray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b) / (na * nb) if na > 0 and nb > 0 else math.nan


def network_check(
    em: ExtractedModel,
    stabilized: Mapping[int, Layer],
    data: MapData,
    *,
    kept: Mapping[int, str] | None = None,
    gaussian_tokens: int | None = None,
    n_null: int = 8,
    seed: int = 0,
    time_limit: float | None = None,
) -> NetworkCheck:
    """Run the network with every stabilized attention sublayer in place, against the original.

    In :meth:`ExtractedModel.forward` each layer's attention update ``x + v(x)`` becomes
    ``x + v_stab(x)`` (one residual step of the stabilized layer's token velocity, as the
    network steps); LayerNorms and feed-forwards are kept. On the data sequences: the cosine of
    the mean-pooled final hidden states (after the final norm of a pre-LN model) and the
    relative change of the hidden states after every layer. On ``n`` Gaussian input tokens
    (``n = max(512, d + 64)``): the Gaussianity p-value after every layer in each network.

    Parameters
    ----------
    em
        The model.
    stabilized
        Layer index → its stabilized attention layer (on ``R^{d+1}``, affine coordinate last);
        the other layers keep their attention.
    data
        :func:`map_data`.
    kept
        Layer index → why it keeps its attention (for the report; default "not stabilized").
    gaussian_tokens
        ``n`` (``None``: the default above).
    n_null
        Monte Carlo replicates of each Gaussianity null (8 to 10 000).
    seed
        Seed of the Gaussian tokens and of the Gaussianity nulls.
    time_limit
        Seconds (``None``: none); the Gaussianity tests are cut (the data sequences, run
        beside them where the cores allow, are not).

    Returns
    -------
    NetworkCheck
        The comparison.
    """
    budget = Budget(as_time_limit(time_limit))
    clock = time.perf_counter()
    swap: list[Layer | None] = [stabilized.get(k) for k in range(em.n_layers)]
    why = {} if kept is None else dict(kept)
    missing = [
        f"layer {k}: {why.get(k, 'not stabilized')}, kept as it is"
        for k in range(em.n_layers)
        if swap[k] is None
    ]
    done = tuple(k for k, s in enumerate(swap) if s is not None)
    nan = math.nan
    if not data.sequences:
        return NetworkCheck(
            done,
            tuple(missing),
            0,
            nan,
            nan,
            nan,
            (),
            nan,
            (),
            (),
            0,
            time.perf_counter() - clock,
            status=Status.FAILED,
            message="no data sequences to run the network on (no sentence gave a token)",
            stats={"seconds": time.perf_counter() - clock},
        )
    # the data sequences and the Gaussian tokens share nothing: side by side where cores allow
    jobs: list[Callable[[], Any]] = [
        partial(_on_data, em, swap, data),
        partial(_gaussian_layers, em, swap, gaussian_tokens, n_null, seed, budget),
    ]
    on_data, gaussian = concurrently(jobs)
    cosines, change, ref_err = on_data
    p_old, p_new, n_g, status = gaussian
    cos = np.asarray(cosines)
    msg = (
        f"{len(done)} of {em.n_layers} attention sublayers stabilized in the forward pass: "
        f"pooled-embedding cosine {np.mean(cos):.4f} (min {np.min(cos):.4f}) over "
        f"{len(cosines)} inputs, final hidden states changed by {change[-1]:.3g} relative"
    )
    if status is Status.BUDGET_EXHAUSTED:
        msg += "; the Gaussianity tests were cut by the time limit"
    return NetworkCheck(
        stabilized_layers=done,
        missing=tuple(missing),
        n_inputs=len(cosines),
        cosine_mean=float(np.mean(cos)),
        cosine_min=float(np.min(cos)),
        relative_change=change[-1],
        layer_change=change,
        reference_error=ref_err if data.reference is not None else nan,
        p_original=p_old,
        p_stabilized=p_new,
        gaussian_tokens=n_g,
        seconds=time.perf_counter() - clock,
        status=status,
        message=msg,
        stats={"seconds": time.perf_counter() - clock},
    )


def _on_data(
    em: ExtractedModel, swap: list[Layer | None], data: MapData
) -> tuple[list[float], tuple[float, ...], float]:
    """The pooled-embedding cosine of every data sequence, the relative change after every
    layer, and the largest error of the original forward pass against the model's own."""
    cosines, num, den = [], np.zeros(em.n_layers), np.zeros(em.n_layers)
    ref_err = 0.0
    for i, x0 in enumerate(data.sequences):
        old = em.forward(x0, causal=em.causal)
        new = em.forward(x0, causal=em.causal, attention=swap)
        cosines.append(_cosine(_pooled(em, old[-1]), _pooled(em, new[-1])))
        for k in range(em.n_layers):
            num[k] += float(np.sum((new[k + 1] - old[k + 1]) ** 2))
            den[k] += float(np.sum(old[k + 1] ** 2))
        if data.reference is not None:
            ref = data.reference[i]
            mine = old[-1] if em.final_norm is None else em.final_norm(old[-1])
            ref_err = max(ref_err, float(np.linalg.norm(mine - ref) / np.linalg.norm(ref)))
    change = tuple(
        float(math.sqrt(a / b)) if b > 0 else math.nan for a, b in zip(num, den, strict=True)
    )
    return cosines, change, ref_err


def _gaussian_layers(
    em: ExtractedModel,
    swap: list[Layer | None],
    n: int | None,
    n_null: int,
    seed: int,
    budget: Budget,
) -> tuple[tuple[float, ...], tuple[float, ...], int, Status]:
    """Gaussianity p-values of Gaussian input tokens after every layer, original and
    stabilized (``nan`` where the time ran out)."""
    d = em.dim
    n_tok = max(512, d + 64) if n is None else n
    x0 = np.random.default_rng([seed, 7]).standard_normal((n_tok, d))
    p: dict[str, list[float]] = {}
    status = Status.SUCCESS
    for name, att in (("original", None), ("stabilized", swap)):
        p[name] = []
        if budget.exhausted:
            status = Status.BUDGET_EXHAUSTED
            p[name] = [math.nan] * em.n_layers
            continue
        states = em.forward(x0, causal=em.causal, attention=att)
        for h in states[1:]:
            if budget.exhausted:
                status = Status.BUDGET_EXHAUSTED
                p[name].append(math.nan)
                continue
            res = gaussianity(h, n_null=n_null, seed=seed, time_limit=budget.left_as_limit())
            p[name].append(float(res.p_value) if res.success else math.nan)
    return tuple(p["original"]), tuple(p["stabilized"]), n_tok, status
