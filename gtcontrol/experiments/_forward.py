"""Running a real network: layer by layer on given sequences, its attention inputs, and the
data it runs on (packaged text, random ids, smooth images).

The real network is run layer by layer on a given sequence (the embeddings bypassed): the
module's own layers, with what they need to behave as in the full model — GPT-2 a causal mask;
ModernBERT its rotary embeddings and local windows, built by the model itself (its forward runs
with the embedding output replaced by the tokens). Reading the weights is
:mod:`gtcontrol.interop`'s; this module only runs what was read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._status import Budget
from ..interop._deps import ModelFileError, quiet_transformers, require_torch, require_transformers
from ..interop._families import eval_mode, layer_list, query_module
from ..interop.extraction import ExtractedModel
from ._common import CAUTIOUS_FLOPS

__all__ = [
    "attention_inputs",
    "data_batch",
    "data_rng",
    "folder_tokenizer",
    "layer_seconds",
    "random_ids",
    "run_network",
    "sentences_what",
    "smooth_images",
]


@contextmanager
def _hooks(modules: list[Any], hook: Callable[..., Any]) -> Iterator[None]:
    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(modules)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def layer_seconds(n: int, d: int) -> float:
    """A cautious estimate of one encoder layer's seconds on N tokens of width d on one CPU:
    attention ``4 N² d`` and projections with a 4d feed-forward ``24 N d²`` flops at
    ``CAUTIOUS_FLOPS`` (2e10 flop/s; MiniLM at N = 8192: about 6.6 s estimated, 8 s measured on
    two loaded cores)."""
    return (4.0 * n * n * d + 24.0 * n * d * d) / CAUTIOUS_FLOPS


def run_network(
    em: ExtractedModel, tokens: FloatArray, budget: Budget | None = None
) -> list[FloatArray]:
    """The real network's layers on one sequence (embeddings bypassed); input and each output.

    With a ``budget``, a layer starts only if its estimated time fits in what is left (the last
    layer's measured time; :func:`layer_seconds` for the first); the list then stops early
    (input and the outputs computed). A ModernBERT runs whole (one call through its hooks).
    """
    torch = require_torch()
    net = em.network
    layers = layer_list(net, em.family)
    dtype = next(net.parameters()).dtype
    n = tokens.shape[0]
    h = torch.as_tensor(tokens, dtype=dtype)[None]
    out = [np.asarray(tokens, dtype=float).copy()]
    if em.family == "modernbert":
        got: list[Any] = [None] * len(layers)

        def keep(i: int) -> Callable[..., None]:
            def f(mod: Any, inp: Any, res: Any) -> None:
                got[i] = res[0] if isinstance(res, tuple) else res

            return f

        def embed(mod: Any, inp: Any, res: Any) -> Any:
            return h

        with torch.inference_mode(), eval_mode(net), _hooks(layers, keep):
            handle = net.embeddings.register_forward_hook(embed)
            try:
                net(input_ids=torch.zeros((1, n), dtype=torch.long))
            finally:
                handle.remove()
        return out + [g[0].to(torch.float64).numpy().copy() for g in got]
    kwargs: dict[str, Any] = {}
    if em.causal:
        mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)
        kwargs["attention_mask"] = mask[None, None]
    estimate = layer_seconds(n, tokens.shape[1])
    with torch.inference_mode(), eval_mode(net):
        for lay in layers:
            if (
                budget is not None
                and budget.time_limit is not None
                and estimate > budget.remaining()
            ):
                break
            clock = time.perf_counter()
            res = lay(h, **kwargs)
            # transformers 4.x returns a tuple (hidden, ...), 5.x the tensor itself.
            h = res[0] if isinstance(res, tuple) else res
            out.append(h[0].to(torch.float64).numpy().copy())
            estimate = time.perf_counter() - clock
    return out


def attention_inputs(em: ExtractedModel, inputs: dict[str, Any]) -> list[FloatArray]:
    """What every layer's attention reads when the full model runs on ``inputs`` (a batch).

    Returns one array ``(B, N, d)`` per layer (float64), captured at the input of the query
    projection (:func:`query_module`).
    """
    torch = require_torch()
    mods = [query_module(em, k) for k in range(em.n_layers)]
    got: list[Any] = [None] * len(mods)

    def keep(i: int) -> Callable[..., None]:
        def f(mod: Any, inp: Any, res: Any) -> None:
            got[i] = inp[0].detach().to(torch.float64).numpy().copy()

        return f

    with torch.inference_mode(), eval_mode(em.network), _hooks(mods, keep):
        em.network(**inputs)
    return [np.asarray(g) for g in got]


def folder_tokenizer(where: str | Path) -> Any:
    """The tokenizer saved in the folder ``where`` (offline), or ``None`` when it has none."""
    files = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model")
    if not str(where) or not any((Path(where) / f).is_file() for f in files):
        return None  # transformers would build an empty tokenizer (every word unknown)
    tr = require_transformers()
    try:
        with quiet_transformers():
            return tr.AutoTokenizer.from_pretrained(str(where), local_files_only=True)
    except Exception:  # no or an unreadable tokenizer: random token ids instead (said so)
        return None


def _tokenizer(net: Any) -> Any:
    """The model's own tokenizer from its folder, or ``None`` (random models have none)."""
    return folder_tokenizer(str(getattr(net.config, "name_or_path", "") or ""))


def data_rng(seed: int) -> np.random.Generator:
    """The generator of the random token ids or images of a data batch."""
    return np.random.default_rng([seed, 20260623])


def random_ids(rng: np.random.Generator, vocab: int, length: int = 16) -> tuple[np.ndarray, str]:
    """40 random token ids of ``length``, uniform over ``vocab``, and what they are."""
    ids = rng.integers(0, vocab, size=(40, length))
    what = (
        f"random token ids (40 sequences of {length}, uniform over the {vocab}-token "
        "vocabulary): the model has no tokenizer"
    )
    return ids, what


def smooth_images(
    rng: np.random.Generator, channels: int, size: int, n: int = 8
) -> tuple[FloatArray, str]:
    """``n`` image-like inputs and what they are: Gaussian noise low-passed (Gaussian kernel of
    width size/16), then per channel mean 0 and variance 1 — spatially correlated, not natural
    images."""
    noise = rng.standard_normal((n, channels, size, size))
    f = np.fft.fftfreq(size)
    width = size / 16.0
    kernel = np.exp(-2.0 * (np.pi * width) ** 2 * (f[:, None] ** 2 + f[None, :] ** 2))
    img = np.real(np.fft.ifft2(np.fft.fft2(noise) * kernel))
    img -= img.mean(axis=(2, 3), keepdims=True)
    img /= img.std(axis=(2, 3), keepdims=True)
    what = (
        f"{n} random image-like inputs ({channels}×{size}×{size} smooth Gaussian fields, not "
        "natural images) through the model's patch embedding"
    )
    return np.asarray(img), what


def sentences_what(n: int) -> str:
    """What a batch of ``n`` sentences through the model's tokenizer is."""
    return f"{n} English sentences through the model's tokenizer"


def data_batch(
    em: ExtractedModel, sentences: list[str], seed: int
) -> tuple[dict[str, Any], np.ndarray | None, str]:
    """A batch of data for the real network: ``(inputs, non-padding mask or None, what)``."""
    torch = require_torch()
    net = em.network
    if net is None:
        raise ModelFileError(
            f"{em.label}: data run the model's own network; it has no transformers module"
        )
    cfg = net.config
    rng = data_rng(seed)
    dtype = next(net.parameters()).dtype
    if em.inputs == "image":
        size, ch = int(cfg.image_size), int(getattr(cfg, "num_channels", 3))
        img, what = smooth_images(rng, ch, size)
        return {"pixel_values": torch.as_tensor(img, dtype=dtype)}, None, what
    tok = _tokenizer(net)
    if tok is not None:
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        batch = dict(tok(sentences, padding=True, return_tensors="pt"))
        mask = batch["attention_mask"].numpy().astype(bool)
        return batch, mask, sentences_what(len(sentences))
    ids, what = random_ids(rng, int(cfg.vocab_size))
    return {"input_ids": torch.as_tensor(ids, dtype=torch.long)}, np.ones(ids.shape, bool), what
