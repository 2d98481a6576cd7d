"""Reading the layers of a ``transformers`` model, family by family.

Each family (:data:`FAMILIES`) names where its layers, projections, norms and feed-forward
live, how its layers are wired (post-LN or pre-LN) and what its attention has beyond
``softmax(s q·k)`` (the notes of :class:`~.extraction.ExtractedModel`). The weights are read
in float64 from the module's parameters: GPT-2's ``Conv1D`` stores ``(in, out)`` and is
transposed to ``nn.Linear``'s ``(out, in)``; fused projections (GPT-2 ``c_attn``, ModernBERT
``Wqkv``) are split in the order the module splits them (query, key, value).

A folder is loaded offline and checked, so that what is read is what the files hold
(:func:`load_folder`): the config's fields, the safetensors headers, the layer count and the
number of weights before anything is allocated, and after loading every weight the model needs
was in the files and every tensor of the files was read (or is a task head's). transformers
would fill a missing weight with random numbers; here it is a :class:`ModelFileError` naming it.
(Running the network is :mod:`gtcontrol.experiments._forward`'s.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._linalg import FloatArray
from ..errors import GTControlError
from ._deps import ModelFileError, quiet_transformers, require_torch, require_transformers
from ._weights import AttentionWeights, FeedForwardWeights, LayerNormWeights
from .extraction import ExtractedLayer, ExtractedModel

__all__ = [
    "FAMILIES",
    "eval_mode",
    "from_module",
    "layer_list",
    "load_folder",
    "query_module",
]

#: The families gtcontrol reads from ``transformers`` models (``kind`` of ``extract``).
FAMILIES: dict[str, str] = {
    "bert": "BERT (post-LN encoder; MiniLM is one)",
    "roberta": "RoBERTa (post-LN encoder, BERT's layers)",
    "electra": "ELECTRA (post-LN encoder, BERT's layers)",
    "distilbert": "DistilBERT (post-LN encoder)",
    "vit": "ViT (pre-LN vision encoder)",
    "deit": "DeiT (pre-LN vision encoder, ViT's layers)",
    "modernbert": "ModernBERT (pre-LN encoder, rotary positions, GeGLU, local/global attention)",
    "gpt2": "GPT-2 (pre-LN causal decoder)",
}
#: ``config.model_type`` → family.
_MODEL_TYPES = {name: name for name in FAMILIES}
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def _np(t: Any) -> FloatArray:
    return np.asarray(t.detach().to(require_torch().float64).cpu().numpy(), dtype=float)


def _get(obj: Any, paths: tuple[str, ...], where: str) -> Any:
    """The first of the dotted ``paths`` that exists under ``obj``, else a ModelFileError."""
    for path in paths:
        cur = obj
        for part in path.split("."):
            cur = getattr(cur, part, None)
            if cur is None:
                break
        if cur is not None:
            return cur
    names = " or ".join(paths)
    raise ModelFileError(f"{where}: expected a module {names}, found none (not this family?)")


def _linear(mod: Any) -> tuple[FloatArray, FloatArray | None]:
    """``(W (out, in), b)`` of an ``nn.Linear`` or a ``Conv1D`` (GPT-2: weight ``(in, out)``)."""
    w = _np(mod.weight)
    if type(mod).__name__ == "Conv1D":
        w = w.T
    bias = getattr(mod, "bias", None)
    return w, (None if bias is None else _np(bias))


def _norm(mod: Any, where: str) -> LayerNormWeights | None:
    if type(mod).__name__ == "Identity":
        return None
    shape = getattr(mod, "normalized_shape", None)
    if shape is None or not hasattr(mod, "eps"):
        raise ModelFileError(f"{where}: expected a LayerNorm, got {type(mod).__name__}")
    weight, bias = getattr(mod, "weight", None), getattr(mod, "bias", None)
    return LayerNormWeights(
        None if weight is None else _np(weight),
        None if bias is None else _np(bias),
        float(mod.eps),
        dim=int(shape[-1]),
    )


def _activation(cfg: Any, keys: tuple[str, ...], where: str) -> str:
    for key in keys:
        value = getattr(cfg, key, None)
        if value is not None:
            if isinstance(value, str) and value in _ACTIVATIONS:
                return _ACTIVATIONS[value]
            raise ModelFileError(
                f"{where}: activation {key} = {value!r} is not one gtcontrol reads "
                f"(expected one of {sorted(_ACTIVATIONS)})"
            )
    raise ModelFileError(f"{where}: the config names no activation ({' or '.join(keys)})")


def _attention(
    qkvo: list[tuple[FloatArray, FloatArray | None]], n_heads: int, scale: float | None
) -> AttentionWeights:
    """Query, key, value and output ``(W, b)`` as :class:`AttentionWeights`."""
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = qkvo
    return AttentionWeights(
        wq, wk, wv, wo, b_Q=bq, b_K=bk, b_V=bv, b_O=bo, n_heads=n_heads, scale=scale
    )


def _split3(w: FloatArray, b: FloatArray | None) -> list[tuple[FloatArray, FloatArray | None]]:
    """A fused ``(3d, d)`` projection as (query, key, value), in the module's own order."""
    n = w.shape[0] // 3
    return [
        (w[i * n : (i + 1) * n], None if b is None else b[i * n : (i + 1) * n]) for i in range(3)
    ]


def _ffn(w_in: Any, w_out: Any, act: str, *, gated: bool = False) -> FeedForwardWeights:
    (wi, bi), (wo, bo) = _linear(w_in), _linear(w_out)
    return FeedForwardWeights(wi, wo, b_in=bi, b_out=bo, activation=act, gated=gated)


def _scale(att: Any, dh: int) -> float:
    s = getattr(att, "scaling", None)
    return float(s) if isinstance(s, (int, float)) and s > 0 else 1.0 / math.sqrt(dh)


# ---------------------------------------------------------------------------- per family
def _bert(lay: Any, cfg: Any, k: int, where: str) -> ExtractedLayer:
    att = _get(lay, ("attention.self",), where)
    so = _get(lay, ("attention.output",), where)
    n_heads = int(cfg.num_attention_heads)
    qkvo = [
        _linear(_get(m, (p,), where))
        for m, p in ((att, "query"), (att, "key"), (att, "value"), (so, "dense"))
    ]
    dh = qkvo[0][0].shape[0] // n_heads
    return ExtractedLayer(
        _attention(qkvo, n_heads, _scale(att, dh)),
        _ffn(
            _get(lay, ("intermediate.dense",), where),
            _get(lay, ("output.dense",), where),
            _activation(cfg, ("hidden_act",), where),
        ),
        _norm(_get(so, ("LayerNorm",), where), where),
        _norm(_get(lay, ("output.LayerNorm",), where), where),
        "post-LN",
    )


def _distilbert(lay: Any, cfg: Any, k: int, where: str) -> ExtractedLayer:
    att = _get(lay, ("attention",), where)
    n_heads = int(cfg.n_heads)
    qkvo = [_linear(_get(att, (p,), where)) for p in ("q_lin", "k_lin", "v_lin", "out_lin")]
    dh = qkvo[0][0].shape[0] // n_heads
    return ExtractedLayer(
        _attention(qkvo, n_heads, _scale(att, dh)),
        _ffn(
            _get(lay, ("ffn.lin1",), where),
            _get(lay, ("ffn.lin2",), where),
            _activation(cfg, ("activation",), where),
        ),
        _norm(_get(lay, ("sa_layer_norm",), where), where),
        _norm(_get(lay, ("output_layer_norm",), where), where),
        "post-LN",
    )


def _vit(lay: Any, cfg: Any, k: int, where: str) -> ExtractedLayer:
    n_heads = int(cfg.num_attention_heads)
    # transformers 5: attention.{q,k,v,o}_proj, mlp.fc1/fc2; 4.x: attention.attention.query ...
    names = (
        ("attention.q_proj", "attention.attention.query"),
        ("attention.k_proj", "attention.attention.key"),
        ("attention.v_proj", "attention.attention.value"),
        ("attention.o_proj", "attention.output.dense"),
    )
    qkvo = [_linear(_get(lay, p, where)) for p in names]
    att = _get(lay, ("attention.attention", "attention"), where)
    dh = qkvo[0][0].shape[0] // n_heads
    return ExtractedLayer(
        _attention(qkvo, n_heads, _scale(att, dh)),
        _ffn(
            _get(lay, ("mlp.fc1", "intermediate.dense"), where),
            _get(lay, ("mlp.fc2", "output.dense"), where),
            _activation(cfg, ("hidden_act",), where),
        ),
        _norm(_get(lay, ("layernorm_before",), where), where),
        _norm(_get(lay, ("layernorm_after",), where), where),
        "pre-LN",
    )


def _modernbert(lay: Any, cfg: Any, k: int, where: str) -> ExtractedLayer:
    n_heads = int(cfg.num_attention_heads)
    q, kk, v = _split3(*_linear(_get(lay, ("attn.Wqkv",), where)))
    o = _linear(_get(lay, ("attn.Wo",), where))
    dh = q[0].shape[0] // n_heads
    return ExtractedLayer(
        _attention([q, kk, v, o], n_heads, 1.0 / math.sqrt(dh)),
        _ffn(
            _get(lay, ("mlp.Wi",), where),
            _get(lay, ("mlp.Wo",), where),
            _activation(cfg, ("hidden_activation",), where),
            gated=True,
        ),
        _norm(_get(lay, ("attn_norm",), where), where),
        _norm(_get(lay, ("mlp_norm",), where), where),
        "pre-LN",
    )


def _gpt2(lay: Any, cfg: Any, k: int, where: str) -> ExtractedLayer:
    att = _get(lay, ("attn",), where)
    n_heads = int(cfg.n_head)
    q, kk, v = _split3(*_linear(_get(att, ("c_attn",), where)))
    o = _linear(_get(att, ("c_proj",), where))
    dh = q[0].shape[0] // n_heads
    scale = getattr(att, "scaling", None)
    if not isinstance(scale, (int, float)):  # transformers 4.x computes it in the forward
        scale = 1.0 / math.sqrt(dh) if getattr(cfg, "scale_attn_weights", True) else 1.0
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            scale /= k + 1
    return ExtractedLayer(
        _attention([q, kk, v, o], n_heads, float(scale)),
        _ffn(
            _get(lay, ("mlp.c_fc",), where),
            _get(lay, ("mlp.c_proj",), where),
            _activation(cfg, ("activation_function",), where),
        ),
        _norm(_get(lay, ("ln_1",), where), where),
        _norm(_get(lay, ("ln_2",), where), where),
        "pre-LN",
    )


@dataclass(frozen=True)
class _Spec:
    read: Callable[[Any, Any, int, str], ExtractedLayer]
    layers: tuple[str, ...]
    query: tuple[str, ...]  # the module whose input is what the attention reads
    placement: str
    inputs: str = "text"
    final_norm: tuple[str, ...] = ()
    causal: bool = False


_BERT = _Spec(_bert, ("encoder.layer",), ("attention.self.query",), "post-LN")
_VIT = _Spec(
    _vit,
    ("layers", "encoder.layer"),
    ("attention.q_proj", "attention.attention.query"),
    "pre-LN",
    inputs="image",
    final_norm=("layernorm",),
)
_SPECS: dict[str, _Spec] = {
    "bert": _BERT,
    "roberta": _BERT,
    "electra": _BERT,
    "distilbert": _Spec(_distilbert, ("transformer.layer",), ("attention.q_lin",), "post-LN"),
    "vit": _VIT,
    "deit": _VIT,
    "modernbert": _Spec(
        _modernbert, ("layers",), ("attn.Wqkv",), "pre-LN", final_norm=("final_norm",)
    ),
    "gpt2": _Spec(_gpt2, ("h",), ("attn.c_attn",), "pre-LN", final_norm=("ln_f",), causal=True),
}


def _notes(family: str, cfg: Any) -> tuple[str, ...]:
    """What the Gaussian model keeps and drops for ``family`` (docs/own_model.md)."""
    if family in ("vit", "deit"):
        extra = " and DeiT's distillation token" if family == "deit" else ""
        return (
            "patch, class-token and absolute position embeddings (added before the first layer)"
            f"{extra} are bypassed: the layers see tokens without position",
        )
    if family == "gpt2":
        return (
            "causal: token i attends to tokens 1..i only; the moment model is the mean-field "
            "limit, where a token deep in an i.i.d. sequence sees the law of all tokens, so it "
            "equals the non-causal flow there and is wrong for the first few positions",
            "absolute position embeddings (wpe, added before the first layer) are bypassed",
        )
    if family == "modernbert":
        rope = getattr(cfg, "rope_parameters", None) or {}
        theta_g = (rope.get("full_attention") or {}).get(
            "rope_theta", getattr(cfg, "global_rope_theta", "?")
        )
        theta_l = (rope.get("sliding_attention") or {}).get(
            "rope_theta", getattr(cfg, "local_rope_theta", "?")
        )
        types = list(getattr(cfg, "layer_types", None) or [])
        local = [i for i, t in enumerate(types) if t == "sliding_attention"]
        half = int(getattr(cfg, "local_attention", 128)) // 2
        return (
            f"rotary positions (θ = {theta_g} global, {theta_l} local): the logit of key j for "
            "query i is (R_i q_i)ᵀ(R_j k_j) = s (W_Q x_i + b_Q)ᵀ R(j − i) W_K x_j, so B_h "
            "depends on the offset j − i; the extracted B_h = s W_K,hᵀ W_Q,h is offset 0 "
            "(no rotation): what a token sees of a key at its own position, and the "
            "position-free part of the attention",
            f"layers {local} attend within ±{half} tokens only (local attention); the mean-field "
            "model lets every token see every other",
            "layer 0 has no attention norm (its attention reads the embedding output)",
        )
    return (
        "absolute position (and token-type) embeddings are added before the first layer: "
        "bypassed, the layers see tokens without position",
    )


def family_of(net: Any, kind: str | None, where: str) -> str:
    """The family of a ``transformers`` model (``kind`` forces it)."""
    if kind is not None:
        if kind not in FAMILIES:
            raise ModelFileError(f"kind: expected one of {tuple(FAMILIES)} or 'onnx', got {kind!r}")
        return kind
    cfg = getattr(net, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type in _MODEL_TYPES:
        return _MODEL_TYPES[str(model_type)]
    found = f"model_type {model_type!r}" if cfg is not None else "no transformers config"
    raise ModelFileError(
        f"{where}: unknown architecture ({type(net).__name__}, {found}); gtcontrol reads "
        f"{', '.join(FAMILIES)} (pass kind=... for a clone of one of them)"
    )


def _base(net: Any) -> Any:
    base = getattr(net, "base_model", None)
    return net if base is None else base


def layer_list(net: Any, family: str) -> list[Any]:
    """The layer modules of a model of ``family``."""
    return list(_get(_base(net), _SPECS[family].layers, f"{type(net).__name__} ({family})"))


def from_module(
    net: Any, *, kind: str | None, source: str, label: str, description: str | None = None
) -> ExtractedModel:
    """Every layer of a ``transformers`` model as an :class:`~.extraction.ExtractedModel`.

    The module is read, not changed: its train/eval mode stays as the caller set it (the
    package's own forward runs switch to eval mode for their duration, :func:`eval_mode`).
    """
    torch = require_torch()
    if not isinstance(net, torch.nn.Module):
        raise ModelFileError(
            f"{source}: expected a transformers model (torch.nn.Module), a folder, an .onnx file "
            f"or a model name, got {type(net).__name__}"
        )
    family = family_of(net, kind, source)
    spec = _SPECS[family]
    base = _base(net)
    cfg = base.config
    pos = getattr(cfg, "position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        raise ModelFileError(
            f"{source}: position_embedding_type {pos!r} puts positions inside the attention; "
            "gtcontrol reads 'absolute' only"
        )
    if any(p.is_meta for p in base.parameters()):
        raise ModelFileError(
            f"{source}: the model's weights are on the meta device (no data); expected a model "
            "with its weights loaded (from_pretrained, or to_empty and load_state_dict)"
        )
    modules = layer_list(base, family)
    if not modules:
        raise ModelFileError(
            f"{source}: the model has no layers ({type(base).__name__} with an empty "
            f"{' or '.join(spec.layers)}); expected at least one"
        )
    _check_finite(base, source)
    read = []
    for k, lay in enumerate(modules):
        with _named_refusal(f"{source}: layer {k}"):
            read.append(spec.read(lay, cfg, k, f"{source}: layer {k}"))
    layers = tuple(read)
    final = None
    if spec.final_norm:
        with _named_refusal(f"{source}: final norm"):
            final = _norm(_get(base, spec.final_norm, source), source)
    first = next(iter(base.parameters()), None)
    dtype = "float32" if first is None else str(first.dtype).removeprefix("torch.")
    shape = f"{len(layers)} layers, d = {layers[0].dim}, {layers[0].weights.n_heads} heads"
    return ExtractedModel(
        layers,
        family=family,
        norm_placement=spec.placement,
        final_norm=final,
        label=label,
        description=description or f"{FAMILIES[family].split(' (')[0]} {label} ({shape})",
        source=source,
        causal=spec.causal or bool(getattr(cfg, "is_decoder", False)),
        inputs=spec.inputs,
        notes=_notes(family, cfg),
        dtype=dtype,
        network=base,
    )


@contextmanager
def _named_refusal(where: str) -> Iterator[None]:
    """A weight the checks refuse (misshapen, too large) as a ModelFileError saying where."""
    try:
        yield
    except ModelFileError:
        raise
    except GTControlError as exc:
        raise ModelFileError(f"{where}: {exc}") from None


def _check_finite(base: Any, source: str) -> None:
    """Every parameter is finite: a NaN anywhere (an embedding too) poisons the real network."""
    torch = require_torch()
    with torch.no_grad():
        bad = [n for n, p in base.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise ModelFileError(
            f"{source}: parameters with NaN or infinite entries: {_names(bad)}; expected "
            "finite weights"
        )


@contextmanager
def eval_mode(net: Any) -> Iterator[None]:
    """``net`` in eval mode (no dropout) for the block; every submodule's mode restored after."""
    modes = [(m, m.training) for m in net.modules()]
    net.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelFileError(f"{path}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: expected a JSON object (a transformers config)")
    return data


#: Config fields that must be positive integers when present (widths, counts, sizes).
_POSITIVE_INTS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
    "max_position_embeddings", "type_vocab_size", "embedding_size", "n_embd", "n_layer",
    "n_head", "n_positions", "n_ctx", "dim", "n_layers", "n_heads", "hidden_dim", "image_size",
    "patch_size", "num_channels", "local_attention", "global_attn_every_n_layers",
)  # fmt: skip
_EPS = ("layer_norm_eps", "layer_norm_epsilon", "norm_eps")
_ACT_KEYS = ("hidden_act", "activation", "activation_function", "hidden_activation")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers")
#: A layer's index in a tensor name: ``encoder.layer.3.``, ``transformer.layer.3.``, ``h.3.``,
#: ``layers.3.`` (every family of :data:`FAMILIES`).
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers|h)\.(\d+)\.")
#: Tensors a file may hold that no model of today reads, with why that is harmless.
_OLD_CONSTANTS = {
    re.compile(r"(?:^|\.)attn\.masked_bias$"): "GPT-2's old mask constant (the model builds "
    "its own causal mask)",
}


def _check_fields(cfg: dict[str, Any], config: Path) -> None:
    """The fields gtcontrol reads have the types and ranges a model needs."""
    value: Any
    for key in _POSITIVE_INTS:
        value = cfg.get(key)
        if key in cfg and not (type(value) is int and value >= 1):
            raise ModelFileError(f"{config}: {key} = {value!r}; expected a positive integer")
    for key in _EPS:
        value = cfg.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in cfg and not (number and math.isfinite(value) and value >= 0):
            raise ModelFileError(f"{config}: {key} = {value!r}; expected a finite number >= 0")
    for key in _ACT_KEYS:
        if key in cfg and not isinstance(cfg[key], str):
            raise ModelFileError(
                f"{config}: {key} = {cfg[key]!r}; expected the name of an activation "
                f"(one of {sorted(_ACTIVATIONS)})"
            )
    _check_heads(cfg, config)


def _check_heads(cfg: dict[str, Any], path: Path) -> None:
    width = next((cfg[k] for k in ("hidden_size", "n_embd", "dim") if k in cfg), None)
    heads = next((cfg[k] for k in ("num_attention_heads", "n_head", "n_heads") if k in cfg), None)
    if not isinstance(width, int) or not isinstance(heads, int) or heads <= 0 or width % heads:
        raise ModelFileError(
            f"{path}: the attention's head count ({heads!r}) must be a positive divisor of the "
            f"width ({width!r}): expected num_attention_heads dividing hidden_size"
        )


def _weight_files(path: Path) -> list[Path]:
    """The safetensors files transformers loads: the shards an index names, or the one file."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        data = _read_json(index)
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise ModelFileError(f"{index}: expected a weight_map of tensor names to shard files")
        files = [path / name for name in sorted(set(weight_map.values()))]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise ModelFileError(f"{index}: names shards that are not in the folder: {absent[:3]}")
        return files
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    others = sorted(p.name for p in path.glob("*.safetensors"))
    found = f" (found {', '.join(others[:3])})" if others else ""
    raise ModelFileError(
        f"{path}: no model.safetensors beside config.json{found}; expected the weights "
        "save_pretrained writes (model.safetensors, or shards with model.safetensors.index.json)"
    )


def _headers(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor of the folder's weight files: name → (dtype, shape), header only."""
    require_transformers()
    from safetensors import safe_open

    files = _weight_files(path)
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    piece = f.get_slice(name)
                    out[name] = (str(piece.get_dtype()), tuple(int(n) for n in piece.get_shape()))
        except Exception as exc:  # safetensors raises its own error types on a damaged file
            line = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ModelFileError(
                f"{file}: not a readable safetensors file ({line}); expected the weights "
                "save_pretrained writes"
            ) from None
    return out


def _check_layer_count(
    cfg: dict[str, Any], tensors: dict[str, tuple[str, tuple[int, ...]]], config: Path
) -> None:
    """The config's layer count is the number of layers whose tensors the files hold."""
    key = next((k for k in _LAYER_KEYS if k in cfg), None)
    if key is None:
        return
    n = int(cfg[key])
    held = {int(m.group(1)) for name in tensors for m in [_LAYER_INDEX.search(name)] if m}
    if not held:
        if n <= len(tensors):
            return  # a clone naming its layers otherwise: the loading check below decides
        held_text = "no tensor of a numbered layer"
    elif len(held) == n and max(held) == n - 1:  # exactly layers 0..n-1
        return
    else:
        held_text = f"the tensors of layers {_ranges(sorted(held))}"
    missing = sorted(set(range(min(n, 10**6))) - held)
    tail = f" (no tensors of layers {_ranges(missing)})" if missing and held else ""
    raise ModelFileError(
        f"{config}: {key} = {n}, but the safetensors weights hold {held_text}{tail}; expected "
        "the config.json saved with these weights"
    )


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0..2, 5"`` (at most five runs)."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    text = [str(a) if a == b else f"{a}..{b}" for a, b in runs[:5]]
    return ", ".join(text) + (", ..." if len(runs) > 5 else "")


def _check_size(
    conf: Any, tensors: dict[str, tuple[str, tuple[int, ...]]], path: Path, where: Path
) -> None:
    """Before anything is allocated: the model the config describes (built on the meta device)
    has no more weights than the files hold (else some would be random)."""
    tr, torch = require_transformers(), require_torch()
    try:
        with torch.device("meta"), quiet_transformers():
            meta = tr.AutoModel.from_config(conf)
    except Exception as exc:  # transformers raises anything on a config it cannot build
        raise ModelFileError(
            f"{where}: transformers cannot build this model ({_line(exc)})"
        ) from None
    params = {n: tuple(p.shape) for n, p in meta.named_parameters() if not n.startswith("pooler.")}
    needed = sum(math.prod(s) for s in params.values())
    held = sum(math.prod(s) for _, s in tensors.values())
    if needed > held:
        prefix = f"{getattr(meta, 'base_model_prefix', '')}."
        found = {n: tensors.get(n) or tensors.get(prefix + n) for n in params}
        absent = [n for n, t in found.items() if t is None]
        other = [
            f"{n} {t[1]} in the files, {params[n]} in the config's model"
            for n, t in found.items()
            if t is not None and t[1] != params[n]
        ]
        parts = [f"not in the files: {_names(absent)}"] if absent else []
        parts += [f"other shapes: {_names(other, 2)}"] if other else []
        what = "; ".join(parts)
        raise ModelFileError(
            f"{path}: config.json describes a model of {needed:,} weights, the safetensors "
            f"files hold {held:,} values, so some weights would be random "
            f"({what or 'no weight matches by name'}). Expected the config.json saved with "
            "these weights"
        )


def _names(keys: list[str], k: int = 4) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - k} more" if len(keys) > k else ""
    return ", ".join(keys[:k]) + more if keys else "(none by name)"


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _task_names(conf: Any) -> set[str] | None:
    """The parameter and buffer names of the task model(s) the config's ``architectures`` name
    (built on the meta device), or ``None`` when it names none that transformers has."""
    tr, torch = require_transformers(), require_torch()
    archs = getattr(conf, "architectures", None)
    if not isinstance(archs, list) or not archs:
        return None
    names: set[str] = set()
    for arch in archs:
        cls = getattr(tr, arch, None) if isinstance(arch, str) else None
        if not (isinstance(cls, type) and issubclass(cls, tr.PreTrainedModel)):
            return None
        try:
            with torch.device("meta"), quiet_transformers():
                task = cls(conf)
        except Exception:  # a task class that cannot be built from this config: not known
            return None
        names |= {n for n, _ in task.named_parameters()} | {n for n, _ in task.named_buffers()}
    return names


def _unread(net: Any, keys: Any, heads: set[str] | None) -> list[str]:
    """The tensors of the files that the model did not read and that are not harmless.

    Harmless: a buffer the model rebuilds (an old ``position_ids``), an old constant
    (:data:`_OLD_CONSTANTS`), and a task head's weight — a name of the task model that
    ``architectures`` names (``heads``), or without one, a name outside the base model's modules
    and of no numbered layer (a classifier beside a BERT).
    """
    prefix = f"{getattr(net, 'base_model_prefix', '')}."
    children = {n for n, _ in net.named_children()}
    buffers = {n for n, _ in net.named_buffers()}
    out = []
    for key in sorted(keys):
        inner = key.removeprefix(prefix)
        if inner in buffers or any(r.search(inner) for r in _OLD_CONSTANTS):
            continue
        if heads is not None:
            head = key in heads or f"{prefix}{key}" in heads
        else:
            head = inner.split(".")[0] not in children and not _LAYER_INDEX.search(inner)
        if not head:
            out.append(key)
    return out


def _check_dtypes(tensors: dict[str, tuple[str, tuple[int, ...]]], path: Path) -> None:
    """Weights are floating point; integers only in index buffers (``position_ids``)."""
    bad = [
        f"{name} ({dtype})"
        for name, (dtype, _) in tensors.items()
        if not dtype.startswith(("F", "BF")) and not name.endswith(("_ids", "num_batches_tracked"))
    ]
    if bad:
        raise ModelFileError(
            f"{path}: tensors stored as integers or booleans: {_names(bad)}; expected "
            "floating-point weights (integers only in index buffers such as position_ids)"
        )


def _check_loaded(net: Any, info: dict[str, Any], heads: set[str] | None, path: Path) -> None:
    """Every weight of the model came from the files (transformers fills the others with random
    numbers), and every tensor of the files was read or belongs to a task head (:func:`_unread`)."""
    missing = sorted(info.get("missing_keys") or ())
    pooler = [k for k in missing if k.startswith("pooler.")]
    pooler_params = [n for n, _ in net.named_parameters() if n.startswith("pooler.")]
    if pooler and sorted(pooler) == sorted(pooler_params):
        net.pooler = None  # the file has no pooler; gtcontrol never reads it: none, not random
        missing = [k for k in missing if not k.startswith("pooler.")]
    unexpected = _unread(net, info.get("unexpected_keys") or (), heads)
    mismatched = sorted(info.get("mismatched_keys") or ())
    errors = [str(e) for e in info.get("error_msgs") or ()]
    problems = []
    if missing:
        problems.append(
            f"{len(missing)} weights of the model are not in the files ({_names(missing)})"
        )
    if unexpected:
        problems.append(
            f"{len(unexpected)} tensors of the files are not read ({_names(unexpected)})"
        )
    if mismatched:
        shapes = [
            f"{k}: {tuple(a)} in the file, {tuple(b)} in the model" for k, a, b in mismatched[:3]
        ]
        problems.append(f"{len(mismatched)} tensors have another shape ({'; '.join(shapes)})")
    if errors:
        problems.append(f"loading errors ({'; '.join(errors)[:300]})")
    if problems:
        raise ModelFileError(
            f"{path}: the weights do not match the config: {'; '.join(problems)}. Expected "
            "the config.json saved with these weights (transformers would fill what is missing "
            "with random numbers)"
        )


def _folder_config(path: Path, kind: str | None) -> tuple[Path, dict[str, Any]]:
    """The folder's config.json, read and checked (``kind`` admits a clone's model_type)."""
    config = path / "config.json"
    if not config.is_file():
        weights = sorted(p.name for p in path.glob("*.safetensors"))
        held = f"holds {', '.join(weights)} but " if weights else ""
        raise ModelFileError(
            f"{path}: {held}no config.json: a safetensors file holds weights only; expected the "
            "config.json that save_pretrained writes beside model.safetensors"
        )
    cfg = _read_json(config)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or (kind is None and model_type not in _MODEL_TYPES):
        raise ModelFileError(
            f"{config}: unknown architecture (model_type {model_type!r}); gtcontrol reads "
            f"{', '.join(FAMILIES)} (pass kind=... for a clone of one of them)"
        )
    _check_fields(cfg, config)
    return config, cfg


def load_folder(path: Path, kind: str | None = None) -> Any:
    """A ``transformers`` model from a local folder (config.json + safetensors), offline.

    Checked before anything is allocated — the config's fields, the safetensors headers, the
    layer count and the number of weights against the files — and after loading: a weight the
    files lack, a tensor inside the model that is not read, a tensor of another shape or an
    integer weight is a :class:`ModelFileError` naming them (transformers would otherwise fill
    the gaps with random numbers). A missing pooler is dropped (``None``): gtcontrol never
    reads it. ``kind`` (a family of :data:`FAMILIES`) admits a clone's ``model_type``.
    """
    config, cfg = _folder_config(path, kind)
    tensors = _headers(path)
    _check_dtypes(tensors, path)
    _check_layer_count(cfg, tensors, config)
    tr = require_transformers()
    torch = require_torch()
    try:
        with quiet_transformers():
            conf = tr.AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers validates fields with its own error types
        raise ModelFileError(f"{config}: transformers refuses the config ({_line(exc)})") from None
    _check_size(conf, tensors, path, config)
    try:
        with quiet_transformers():
            net, info = tr.AutoModel.from_pretrained(
                str(path),
                config=conf,
                local_files_only=True,
                use_safetensors=True,
                dtype="auto",
                output_loading_info=True,
                ignore_mismatched_sizes=True,
            )
    except Exception as exc:  # transformers and safetensors raise many types on bad files
        raise ModelFileError(
            f"{path}: transformers could not load the model ({_line(exc)})"
        ) from None
    if not isinstance(net, torch.nn.Module):  # pragma: no cover - AutoModel returns modules
        raise ModelFileError(f"{path}: transformers returned {type(net).__name__}, not a model")
    _check_loaded(net, info, _task_names(conf), path)
    return net.eval()


def query_module(em: ExtractedModel, k: int) -> Any:
    """The module of layer ``k`` whose input is what the attention reads (a query projection)."""
    spec = _SPECS[em.family]
    return _get(layer_list(em.network, em.family)[k], spec.query, f"{em.label}: layer {k}")
