"""Fuzz ``extract`` with damaged model folders and ONNX files. Plain script.

Reproduce::

    .venv/bin/python benchmarks/fuzz_models.py 300 0          # N cases, seed
    .venv/bin/python benchmarks/fuzz_models.py 2000 1 --workers 4 --timeout 120

Builds one tiny random model per family (bert, roberta, distilbert, vit, gpt2; width 16 or 32,
2 layers, every parameter perturbed so biases and norms are non-zero), saves each with
``save_pretrained`` in float32 and float64 and exports the float64 one with ``torch.onnx.export``
with static and with dynamic shapes. Each of the ``N`` seeded cases derives one damaged copy:

* weights: truncated, empty, random bytes, flipped bytes, a tensor missing / renamed / added
  (inside the model; outside it; a task head's, with ``architectures`` naming the task model,
  the one addition that must read) / cast to another dtype / of another shape / holding NaN;
* config: any field set to a hostile value of every type (null, bools, negative, zero, huge,
  NaN, strings, lists), a field deleted, another or an unknown ``model_type``, a layer count
  that disagrees with the weights, no config, a config that is not JSON or not an object;
* ONNX: a clean static or dynamic export, truncated, empty, random bytes, a graph without
  attention, a node dropped, an initializer of another shape.

Every case runs ``extract`` in a worker process of a pool (one case at a time per worker, with a
timeout; a hung worker is killed and replaced) and ends as one of:

``ok``        extracted, and every layer's attention reproduces the reference on 6 random
              tokens to 1e-10 relative. The reference is computed here with numpy from the
              case's own safetensors tensors and config (heads, scale, causal mask, the
              config's dtype) — or, for an ONNX file, from the float64 model it was exported
              from — not from transformers' loading or gtcontrol's reading
``wrong``     extracted, but the attention (or the layer count, or causality) differs
``clean``     a ``GTControlError`` (``ModelFileError``) naming the input
``unnamed``   a ``GTControlError`` whose message does not name the file or folder (a defect)
``raw <T>``   any other exception (a defect)
``hang``      no answer within the timeout (a defect)
``crash``     the worker died (a defect)
``noisy``     anything written to stdout/stderr or any warning during ``extract`` (a defect),
              whatever the outcome; counted beside it

Prints the counts overall and per damage, one example of every defect and the wall time; exits
1 if any case is ``wrong``, ``unnamed``, ``raw``, ``hang``, ``crash`` or ``noisy``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np

FAMILIES = ("bert", "roberta", "distilbert", "vit", "gpt2")
TOL = 1e-10
N_TOKENS = 6
FOLDER_DAMAGES = (
    "clean", "truncated", "empty", "random_bytes", "flip_bytes", "missing_tensor",
    "renamed_tensor", "extra_inside", "extra_outside", "extra_head", "dtype", "shape", "nan_tensor",
    "config_field", "config_delete", "model_type", "n_layers", "no_config", "config_not_json",
    "config_not_object",
)  # fmt: skip
ONNX_DAMAGES = (
    "onnx_static", "onnx_dynamic", "onnx_truncated", "onnx_empty", "onnx_random_bytes",
    "onnx_no_attention", "onnx_drop_node", "onnx_init_shape",
)  # fmt: skip
#: The damages of a file's bytes, the same for weights and for an ONNX file (``onnx_`` first).
BYTE_DAMAGES = ("truncated", "empty", "random_bytes")
BAD = ("wrong", "unnamed", "raw", "hang", "crash", "noisy")


# ============================================================================ base models
def _config(family: str, width: int) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    heads, layers = 4, 2
    if family == "distilbert":
        cfg = {"dim": width, "n_layers": layers, "n_heads": heads, "hidden_dim": 2 * width}
        return "DistilBertConfig", "DistilBertModel", {**cfg, "vocab_size": 50}, {}
    if family == "gpt2":
        cfg = {"n_embd": width, "n_layer": layers, "n_head": heads, "n_positions": 32}
        return "GPT2Config", "GPT2Model", {**cfg, "vocab_size": 50}, {}
    common = {"hidden_size": width, "num_hidden_layers": layers, "num_attention_heads": heads}
    common["intermediate_size"] = 2 * width
    if family == "vit":
        return "ViTConfig", "ViTModel", {**common, "image_size": 8, "patch_size": 4}, {}
    extra = {"vocab_size": 50, "max_position_embeddings": 40}
    if family == "roberta":
        extra["type_vocab_size"] = 1
    names = (
        ("RobertaConfig", "RobertaModel") if family == "roberta" else ("BertConfig", "BertModel")
    )
    return names[0], names[1], {**common, **extra}, {"add_pooling_layer": False}


def _build(family: str, width: int, dtype: Any) -> Any:
    import torch
    import transformers as tr

    cfg_cls, model_cls, cfg, kw = _config(family, width)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        net = getattr(tr, model_cls)(getattr(tr, cfg_cls)(**cfg), **kw).eval()
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return net.to(dtype)


class _Wrap:  # a module returning the last hidden state, for torch.onnx.export
    @staticmethod
    def make(net: Any) -> Any:
        import torch

        class Wrap(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = net

            def forward(self, x: Any) -> Any:
                key = "pixel_values" if x.dim() == 4 else "input_ids"
                return self.net(**{key: x}).last_hidden_state

        return Wrap().eval()


def _export(net: Any, family: str, path: Path, dynamic: bool) -> None:
    import torch

    if family == "vit":
        x, axes = torch.zeros(1, 3, 8, 8, dtype=torch.float64), {"x": {0: "b"}}
    else:
        x, axes = torch.zeros(1, 7, dtype=torch.long), {"x": {1: "n"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Wrap.make(net), (x,), str(path), input_names=["x"], dynamo=False,
            opset_version=17, dynamic_axes=axes if dynamic else None,
        )  # fmt: skip


def build_bases(root: Path) -> dict[str, Path]:
    """Every base folder and ONNX file, built once: ``{name: path}``."""
    import torch
    import transformers as tr

    tr.logging.set_verbosity_error()
    tr.logging.disable_progress_bar()
    bases: dict[str, Path] = {}
    for family in FAMILIES:
        for dtype in (torch.float32, torch.float64):
            width = 16 if family == "distilbert" else 32
            net = _build(family, width, dtype)
            name = f"{family}-{str(dtype)[6:]}"
            net.save_pretrained(root / name)
            bases[name] = root / name
            if dtype == torch.float64:
                for dynamic in (False, True):
                    path = root / f"{family}-{'dynamic' if dynamic else 'static'}.onnx"
                    _export(net, family, path, dynamic)
                    bases[path.stem] = path
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
    path = root / "mlp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(mlp.eval(), (torch.zeros(1, 5, 8),), str(path), dynamo=False)
    bases["mlp"] = path
    return bases


# ============================================================================ damage
def _hostile(rng: np.random.Generator, value: Any) -> Any:
    pool: list[Any] = [None, True, False, -1, 0, 10**12, 10**30, -(10**9), 2.5, float("nan")]
    pool += [float("inf"), -1e308, "", "x", "gelu", [], [1, 2], {}, {"a": 1}]
    if isinstance(value, bool):
        pool += [1, "true"]
    elif isinstance(value, int):
        pool += [value + 1, value * 2, value - 1, str(value), float(value), value * 10**6]
    elif isinstance(value, float):
        pool += [-value, value * 1e6, 0.0, 1.0]
    elif isinstance(value, str):
        pool += [value.upper(), value + "_", "relu", "float16", "bert", "gpt2"]
    return pool[int(rng.integers(len(pool)))]


def _edit_config(folder: Path, change: Any) -> str:
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    detail = change(cfg)
    path.write_text(json.dumps(cfg))
    return detail


def _tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return dict(load_file(str(folder / "model.safetensors")))


def _save(folder: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _pick(rng: np.random.Generator, items: list[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def _damage_bytes(rng: np.random.Generator, raw: bytes, path: Path, damage: str, most: int) -> str:
    """Write the bytes ``raw`` to ``path`` damaged as one of :data:`BYTE_DAMAGES` says (random
    bytes: fewer than ``most``); a one-line description."""
    if damage == "truncated":
        cut = int(rng.integers(0, len(raw)))
        path.write_bytes(raw[:cut])
        return f"cut at {cut} of {len(raw)} bytes"
    if damage == "empty":
        path.write_bytes(b"")
        return ""
    if damage == "random_bytes":
        path.write_bytes(rng.bytes(int(rng.integers(1, most))))
        return ""
    raise ValueError(damage)


def damage_folder(rng: np.random.Generator, base: Path, case: Path, damage: str) -> str:
    """Copy ``base`` to ``case`` and damage it; a one-line description."""
    import torch

    shutil.copytree(base, case)
    weights = case / "model.safetensors"
    raw = weights.read_bytes()
    if damage == "clean":
        return ""
    if damage in BYTE_DAMAGES:
        return _damage_bytes(rng, raw, weights, damage, 4000)
    if damage == "flip_bytes":
        data = bytearray(raw)
        where = [int(i) for i in rng.integers(0, len(data), size=int(rng.integers(1, 8)))]
        for i in where:
            data[i] ^= 1 << int(rng.integers(8))
        weights.write_bytes(bytes(data))
        return f"bytes {where}"
    if damage == "extra_head":  # a task model's head, named by the config's architectures
        arch, head = _HEADS[json.loads((case / "config.json").read_text())["model_type"]]
        t = _tensors(case)
        d = _width(case)
        for name, shape in head.items():
            t[name] = torch.ones(tuple(d if n == "d" else n for n in shape))
        _save(case, t)
        _edit_config(case, lambda cfg: cfg.update(architectures=[arch]))
        return arch
    if damage.endswith("_tensor") or damage in ("extra_inside", "extra_outside", "dtype", "shape"):
        t = _tensors(case)
        name = _pick(rng, sorted(t))
        detail = _tensor_damage(rng, t, name, damage, torch)
        _save(case, t)
        return detail
    if damage == "config_field":

        def change(cfg: dict[str, Any]) -> str:
            key = _pick(rng, sorted(cfg))
            cfg[key] = _hostile(rng, cfg[key])
            return f"{key} = {cfg[key]!r}"

        return _edit_config(case, change)
    if damage == "config_delete":

        def delete(cfg: dict[str, Any]) -> str:
            key = _pick(rng, sorted(cfg))
            del cfg[key]
            return f"no {key}"

        return _edit_config(case, delete)
    if damage == "model_type":
        new = _pick(rng, [*FAMILIES, "electra", "deit", "modernbert", "albert", "llama", "zz"])
        return _edit_config(case, lambda cfg: f"{cfg.update(model_type=new) or new}")
    if damage == "n_layers":
        n = _pick(rng, [0, 1, 3, 5, 100, -1, 10**7])

        def layers(cfg: dict[str, Any]) -> str:
            key = next(k for k in ("num_hidden_layers", "n_layer", "n_layers") if k in cfg)
            cfg[key] = n
            return f"{key} = {n}"

        return _edit_config(case, layers)
    if damage == "no_config":
        (case / "config.json").unlink()
        return ""
    if damage == "config_not_json":
        (case / "config.json").write_bytes(rng.bytes(50))
        return ""
    if damage == "config_not_object":
        (case / "config.json").write_text(_pick(rng, ["[]", "3", '"bert"', "null", "[{}]"]))
        return ""
    raise ValueError(damage)


#: model_type → (a task class, its head's tensors: shapes with "d" for the width)
_HEADS: dict[str, tuple[str, dict[str, tuple[Any, ...]]]] = {
    "bert": ("BertForSequenceClassification", {"classifier.weight": (2, "d"),
             "classifier.bias": (2,)}),
    "roberta": ("RobertaForSequenceClassification", {"classifier.dense.weight": ("d", "d"),
                "classifier.dense.bias": ("d",), "classifier.out_proj.weight": (2, "d"),
                "classifier.out_proj.bias": (2,)}),
    "distilbert": ("DistilBertForSequenceClassification", {"pre_classifier.weight": ("d", "d"),
                   "pre_classifier.bias": ("d",), "classifier.weight": (2, "d"),
                   "classifier.bias": (2,)}),
    "vit": ("ViTForImageClassification", {"classifier.weight": (2, "d"),
            "classifier.bias": (2,)}),
    "gpt2": ("GPT2ForSequenceClassification", {"score.weight": (2, "d")}),
}  # fmt: skip


def _width(folder: Path) -> int:
    cfg = json.loads((folder / "config.json").read_text())
    return int(next(cfg[k] for k in ("hidden_size", "n_embd", "dim") if k in cfg))


def _tensor_damage(
    rng: np.random.Generator, t: dict[str, Any], name: str, damage: str, torch: Any
) -> str:
    if damage == "missing_tensor":
        del t[name]
        return name
    if damage == "renamed_tensor":
        new = name.replace("weight", "wieght") if "weight" in name else name + "_x"
        t[new] = t.pop(name)
        return f"{name} -> {new}"
    if damage == "extra_inside":
        layer = _pick(rng, sorted({n.rsplit(".", 2)[0] for n in t}))
        t[f"{layer}.extra.weight"] = torch.zeros(3, 3)
        return f"{layer}.extra.weight"
    if damage == "extra_outside":
        t["stray.weight"] = torch.ones(2, 4)
        return "stray.weight"
    if damage == "dtype":
        kind = _pick(rng, ["int64", "int8", "bool", "float16", "bfloat16", "float64"])
        t[name] = t[name].to(getattr(torch, kind))
        return f"{name} as {kind}"
    if damage == "shape":
        shape = tuple(int(n) for n in rng.integers(1, 40, size=int(rng.integers(1, 3))))
        t[name] = torch.ones(shape, dtype=t[name].dtype)
        return f"{name} of shape {shape}"
    if damage == "nan_tensor":
        v = t[name].clone()
        v.view(-1)[int(rng.integers(v.numel()))] = float(_pick(rng, [math.nan, math.inf]))
        t[name] = v
        return name
    raise ValueError(damage)


def damage_onnx(rng: np.random.Generator, bases: dict[str, Path], family: str, case: Path,
                damage: str) -> str:  # fmt: skip
    """Write the ONNX file of one case; a one-line description."""
    import onnx

    static = bool(rng.integers(2))
    base = bases[f"{family}-{'static' if static else 'dynamic'}"]
    raw = base.read_bytes()
    shape = "static" if static else "dynamic"
    if damage in ("onnx_static", "onnx_dynamic"):
        base = bases[f"{family}-{damage[5:]}"]
        shutil.copy(base, case)
        return ""
    if damage.removeprefix("onnx_") in BYTE_DAMAGES:
        detail = _damage_bytes(rng, raw, case, damage.removeprefix("onnx_"), 5000)
        return f"{shape}, {detail}" if detail else ""
    if damage == "onnx_no_attention":
        shutil.copy(bases["mlp"], case)
        return ""
    model = onnx.load(str(base))
    if damage == "onnx_drop_node":
        k = int(rng.integers(len(model.graph.node)))
        node = model.graph.node[k]
        detail = f"{shape}, {node.op_type} {node.name}"
        del model.graph.node[k]
    elif damage == "onnx_init_shape":
        inits = [t for t in model.graph.initializer if len(t.dims) >= 1]
        t = _pick(rng, inits)
        dims = [int(n) for n in rng.integers(1, 40, size=int(rng.integers(1, 3)))]
        new = onnx.numpy_helper.from_array(
            np.ones(dims, dtype=onnx.helper.tensor_dtype_to_np_dtype(t.data_type)), t.name
        )
        t.CopyFrom(new)
        detail = f"{shape}, {t.name} of shape {dims}"
    else:
        raise ValueError(damage)
    case.write_bytes(model.SerializeToString())
    return detail


# ============================================================================ reference
def _find(tensors: dict[str, Any], suffix: str) -> Any:
    hits = [k for k in tensors if k == suffix or k.endswith("." + suffix)]
    if len(hits) != 1:
        raise KeyError(f"{suffix}: {len(hits)} tensors")
    return np.asarray(tensors[hits[0]], dtype=float)


def _projections(tensors: dict[str, Any], layout: str, k: int, d: int) -> list[Any]:
    """``[(W (out, in), b), ...]`` for query, key, value and output of layer ``k``."""
    if layout == "gpt2":
        w, b = (
            _find(tensors, f"h.{k}.attn.c_attn.weight"),
            _find(tensors, f"h.{k}.attn.c_attn.bias"),
        )
        qkv = [(w[:, i * d : (i + 1) * d].T, b[i * d : (i + 1) * d]) for i in range(3)]
        out = (
            _find(tensors, f"h.{k}.attn.c_proj.weight").T,
            _find(tensors, f"h.{k}.attn.c_proj.bias"),
        )
        return [*qkv, out]
    names = {
        "bert": (f"encoder.layer.{k}.attention.self.", ("query", "key", "value"),
                 f"encoder.layer.{k}.attention.output.dense"),
        "vit": (f"encoder.layer.{k}.attention.attention.", ("query", "key", "value"),
                f"encoder.layer.{k}.attention.output.dense"),
        "distilbert": (f"transformer.layer.{k}.attention.", ("q_lin", "k_lin", "v_lin"),
                       f"transformer.layer.{k}.attention.out_lin"),
    }[layout]  # fmt: skip
    paths = [names[0] + p for p in names[1]] + [names[2]]
    return [(_find(tensors, p + ".weight"), _find(tensors, p + ".bias")) for p in paths]


def _attention(x: Any, proj: list[Any], heads: int, scale: float, causal: bool) -> Any:
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = proj
    n, dh = x.shape[0], wq.shape[0] // heads
    q, k, v = ((x @ w.T + b).reshape(n, heads, dh) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    s = np.einsum("ihd,jhd->hij", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones((n, n), bool), 1)[None], -np.inf, s)
    a = np.exp(s - s.max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", a, v).reshape(n, heads * dh) @ wo.T + bo


def reference(
    tensors: dict[str, Any], cfg: dict[str, Any], family: str, x: Any
) -> tuple[Any, bool]:
    """Every layer's attention output on ``x`` from the raw tensors, and whether it is causal."""
    layout = {"roberta": "bert", "electra": "bert", "deit": "vit"}.get(family, family)
    if layout not in ("bert", "vit", "distilbert", "gpt2"):
        raise KeyError(f"no reference for model_type {family!r}")
    d = x.shape[1]
    heads = next(cfg[k] for k in ("num_attention_heads", "n_head", "n_heads") if k in cfg)
    indices = set()
    for name in tensors:
        parts = name.split(".")
        for i, p in enumerate(parts[:-1]):
            if p in ("layer", "h") and parts[i + 1].isdigit():
                indices.add(int(parts[i + 1]))
    causal = layout == "gpt2" or cfg.get("is_decoder") is True
    outs = []
    for k in range(len(indices)):
        scale = 1.0 / math.sqrt(d // heads)
        if layout == "gpt2":
            scale = scale if cfg.get("scale_attn_weights", True) else 1.0
            scale /= (k + 1) if cfg.get("scale_attn_by_inverse_layer_idx") else 1
        outs.append(_attention(x, _projections(tensors, layout, k, d), heads, scale, causal))
    return outs, causal


def _case_reference(spec: dict[str, Any], d: int, x: Any) -> tuple[Any, bool]:
    import torch
    from safetensors import safe_open

    folder = Path(spec["reference"])
    cfg = json.loads((folder / "config.json").read_text())
    dtype = cfg.get("dtype", cfg.get("torch_dtype"))
    cast = getattr(torch, dtype) if dtype in ("float16", "bfloat16", "float32", "float64") else None
    tensors = {}
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)  # integers too: one read as a weight shows as a wrong number
            t = t.to(cast) if cast is not None else t  # transformers loads in the config's dtype
            tensors[name] = t.to(torch.float64).numpy()
    family = spec["family"] if spec["onnx"] else cfg.get("model_type")
    return reference(tensors, cfg, str(family), x)


# ============================================================================ worker
def _run_case(spec: dict[str, Any]) -> dict[str, Any]:
    from gtcontrol.errors import GTControlError
    from gtcontrol.interop import extract

    out: dict[str, Any] = {"name": spec["name"], "damage": spec["damage"]}
    em, text = None, ""
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.stdout.flush(), sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(tmp.fileno(), 1), os.dup2(tmp.fileno(), 2)
        try:
            em = extract(spec["path"])
            out["outcome"] = "ok"
        except GTControlError as exc:
            named = Path(spec["path"]).name in str(exc)
            out["outcome"] = "clean" if named else "unnamed"
            out["message"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            out["outcome"], out["message"] = f"raw {type(exc).__name__}", str(exc)[:300]
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
        tmp.seek(0)
        text = tmp.read().decode("utf-8", "replace").strip()
    noise = [f"{w.category.__name__}: {w.message}" for w in caught]
    if text:
        noise.append(f"output: {text[:200]}")
    if noise:
        out["noisy"] = "; ".join(noise)[:400]
    if em is not None:
        out.update(_verify(em, spec))
    return out


def _verify(em: Any, spec: dict[str, Any]) -> dict[str, Any]:
    x = np.random.default_rng(5).standard_normal((N_TOKENS, em.dim))
    try:
        refs, causal = _case_reference(spec, em.dim, x)
    except Exception as exc:
        return {"outcome": "wrong", "message": f"no reference ({type(exc).__name__}: {exc})"}
    if len(refs) != em.n_layers:
        return {"outcome": "wrong", "message": f"{em.n_layers} layers, the files hold {len(refs)}"}
    if not spec["onnx"] and em.causal != causal:
        return {"outcome": "wrong", "message": f"causal {em.causal}, the config says {causal}"}
    err = 0.0
    for lay, ref in zip(em.layers, refs):
        got = lay.attention(x, causal=causal)
        err = max(err, float(np.linalg.norm(got - ref) / np.linalg.norm(ref)))
    if not err <= TOL:
        return {"outcome": "wrong", "message": f"attention error {err:.3g} > {TOL:g}"}
    return {"error": err}


def _worker(conn: Any) -> None:
    import torch
    import transformers as tr

    import gtcontrol.experiments  # noqa: F401  (imports before any case: no import noise)

    torch.set_num_threads(1)
    tr.logging.set_verbosity_error()
    conn.send("ready")
    while True:
        spec = conn.recv()
        if spec is None:
            return
        conn.send(_run_case(spec))


# ============================================================================ pool
class _Slot:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        self.ready, self.spec, self.deadline = False, None, math.inf

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()


def run_pool(specs: list[dict[str, Any]], workers: int, timeout: float) -> list[dict[str, Any]]:
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    slots = [_Slot(ctx) for _ in range(workers)]
    todo, results, respawns = list(specs), [], 0
    while todo or any(s.spec is not None for s in slots):
        for s in slots:
            if s.ready and s.spec is None and todo:
                s.spec = todo.pop(0)
                s.conn.send(s.spec)
                s.deadline = time.monotonic() + timeout
        left = min(s.deadline for s in slots) - time.monotonic()
        for conn in wait([s.conn for s in slots], timeout=max(0.0, min(left, 5.0))):
            s = next(s for s in slots if s.conn is conn)
            try:
                msg = s.conn.recv()
            except EOFError:
                msg = None
            if msg == "ready":
                s.ready = True
                continue
            if msg is None and s.spec is None:  # died before a case: start another, a few times
                s.kill()
                respawns += 1
                if respawns > 3 * workers:
                    raise RuntimeError(f"workers die before any case (exit {s.proc.exitcode})")
                slots[slots.index(s)] = _Slot(ctx)
                continue
            if msg is None:  # the worker died during a case
                s.kill()
                results.append({**_short(s.spec), "outcome": "crash",
                                "message": f"exit code {s.proc.exitcode}"})  # fmt: skip
                slots[slots.index(s)] = _Slot(ctx)
                continue
            results.append(msg)
            s.spec, s.deadline = None, math.inf
        now = time.monotonic()
        for i, s in enumerate(slots):
            if s.spec is not None and now > s.deadline:
                results.append({**_short(s.spec), "outcome": "hang",
                                "message": f"no answer in {timeout:g} s"})  # fmt: skip
                s.kill()
                slots[i] = _Slot(ctx)
    for s in slots:
        s.conn.send(None)
        s.proc.join(timeout=10)
        if s.proc.is_alive():
            s.kill()
    return results


def _short(spec: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": (spec or {}).get("name", "?"), "damage": (spec or {}).get("damage", "?")}


# ============================================================================ main
def make_cases(root: Path, bases: dict[str, Path], n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    damages = FOLDER_DAMAGES + ONNX_DAMAGES
    # config fields are the richest damage (every field, every type): drawn four times as often
    weighted = list(damages) + ["config_field"] * 3
    specs = []
    for i in range(n):
        damage = damages[i] if i < len(damages) else _pick(rng, weighted)
        family = _pick(rng, list(FAMILIES))
        is_onnx = damage.startswith("onnx")
        if is_onnx:
            path = root / f"case{i:05d}.onnx"
            detail = damage_onnx(rng, bases, family, path, damage)
            ref = bases[f"{family}-float64"]
        else:
            precision = _pick(rng, ["float32", "float64"])
            path = root / f"case{i:05d}"
            detail = damage_folder(rng, bases[f"{family}-{precision}"], path, damage)
            ref = path
        name = f"{family}/{damage}" + (f" ({detail})" if detail else "")
        specs.append({"name": name, "damage": damage, "family": family, "path": str(path),
                      "reference": str(ref), "onnx": is_onnx})  # fmt: skip
    return specs


def _kind(outcome: str) -> str:
    return "raw" if outcome.startswith("raw") else outcome


def report(results: list[dict[str, Any]], wall: float) -> int:
    counts = Counter(r["outcome"] for r in results)
    noisy = sum(1 for r in results if r.get("noisy"))
    print(f"\n{len(results)} cases in {wall:.1f} s wall")
    for outcome, c in sorted(counts.items()):
        print(f"  {outcome:<28} {c}")
    print(f"  {'noisy (beside the above)':<28} {noisy}")
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        per[r["damage"]][_kind(r["outcome"])] += 1
        if r.get("noisy"):
            per[r["damage"]]["noisy"] += 1
    print("\nper damage:")
    for damage, c in sorted(per.items()):
        print(f"  {damage:<20} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    shown: set[tuple[str, str]] = set()
    bad = 0
    for r in results:
        kinds = [_kind(r["outcome"])] + (["noisy"] if r.get("noisy") else [])
        for k in kinds:
            if k in BAD:
                bad += 1
                if (k, r["damage"]) not in shown:
                    shown.add((k, r["damage"]))
                    what = r.get("noisy") if k == "noisy" else r.get("message", "")
                    print(f"\n[{k}] {r['name']}\n    {what}")
    print(f"\nmax attention error of the ok cases: "
          f"{max((r.get('error', 0.0) for r in results), default=0.0):.3g}")  # fmt: skip
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=300)
    ap.add_argument("seed", nargs="?", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", type=Path, help="write every case's outcome and message here")
    args = ap.parse_args(argv)
    clock = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz_models_") as tmp:
        root = Path(tmp)
        bases = build_bases(root / "base")
        specs = make_cases(root / "cases", bases, args.n, args.seed)
        built = time.perf_counter() - clock
        print(f"{len(specs)} cases built in {built:.1f} s (seed {args.seed}); running "
              f"{args.workers} workers, {args.timeout:g} s per case")  # fmt: skip
        results = run_pool(specs, args.workers, args.timeout)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return report(results, time.perf_counter() - clock)


if __name__ == "__main__":
    sys.exit(main())
