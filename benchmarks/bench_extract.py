"""Extraction of every family (issue 23): time, reproduction error, attention-flow blow-up.

For each family a small random model (width 32, 2–3 layers, 4 heads, every parameter perturbed by
0.3·N(0, 1) so that biases and norms are non-zero; the shapes of
tests/interop/test_extract_families.py) is extracted from the module, from a ``save_pretrained``
folder and from a ``torch.onnx.export`` file; the extracted attention layers reproduce the model's
own attention sublayer (hooks on the query and output projections during the model's own forward, 12
tokens; ModernBERT at position 0; GPT-2 with each token's prefix) — the largest relative error over
the three sources, in float32 and float64 (ModernBERT's own rotary step rounds to float32; for
float64 it runs the same formula in float64). Then every attention sublayer's flow from
``N(e, I ⊕ 0)`` to ``T = 4`` (``attention_flows``, 60 s per model): the blow-up times.

``--paper`` adds the shipped and paper-shape models (MiniLM, random DeiT-tiny, random GPT-2
small, random ModernBERT-base): extraction time, the float32 reproduction on 16 tokens and the
identity flows of their first ``--layers`` layers (default 2) with ``--flow-limit`` seconds.

Usage::

    .venv/bin/python benchmarks/bench_extract.py [--paper] [--layers 2] [--flow-limit 120]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers as tr

from gtcontrol.experiments import attention_flows
from gtcontrol.interop import extract, load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _families import BUILD, PATHS, get

warnings.filterwarnings("ignore")


def build(family: str, dtype: Any) -> Any:
    cfg_cls, model_cls, cfg, kw = BUILD[family]
    torch.manual_seed(7)
    net = getattr(tr, model_cls)(getattr(tr, cfg_cls)(**cfg), **kw).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return net.to(dtype)


def inputs(family: str, n: int, vocab: int = 100, image: int = 16) -> dict[str, Any]:
    g = torch.Generator().manual_seed(3)
    if family in ("vit", "deit"):
        return {"pixel_values": torch.randn(1, 3, image, image, generator=g)}
    out = {"input_ids": torch.randint(3, vocab, (1, n), generator=g)}
    if family == "modernbert":
        out["position_ids"] = torch.zeros(1, n, dtype=torch.long)
    return out


def own_io(net: Any, family: str, inp: dict[str, Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    layers, q, o = PATHS[family]
    caps, hs = [], []
    for lay in get(net, layers):
        c: dict[str, Any] = {}
        hs.append(get(lay, q).register_forward_hook(lambda m, a, r, c=c: c.__setitem__("x", a[0])))
        hs.append(get(lay, o).register_forward_hook(lambda m, a, r, c=c: c.__setitem__("y", r)))
        caps.append(c)
    dtype = next(net.parameters()).dtype
    with torch.no_grad():
        net(**{k: v.to(dtype) if v.is_floating_point() else v for k, v in inp.items()})
    for h in hs:
        h.remove()
    return [(c["x"][0].double().numpy(), c["y"][0].double().numpy()) for c in caps]


def error(em: Any, io: list[tuple[np.ndarray, np.ndarray]], causal: bool) -> float:
    return max(
        float(np.max(np.abs(lay.attention(x, causal=causal) - y)) / np.max(np.abs(y)))
        for lay, (x, y) in zip(em.layers, io, strict=True)
    )


class Wrap(torch.nn.Module):
    def __init__(self, net: Any, key: str) -> None:
        super().__init__()
        self.net, self.key = net, key

    def forward(self, x: Any) -> Any:
        return self.net(**{self.key: x}).last_hidden_state


def export(net: Any, family: str, path: Path) -> float:
    dtype = next(net.parameters()).dtype
    if family in ("vit", "deit"):
        key, x, dyn = "pixel_values", torch.zeros(1, 3, 16, 16, dtype=dtype), {0: "b"}
    else:
        key, x, dyn = "input_ids", torch.zeros(1, 7, dtype=torch.long), {0: "b", 1: "n"}
    t = time.perf_counter()
    torch.onnx.export(
        Wrap(net, key), (x,), str(path), input_names=["x"], dynamic_axes={"x": dyn},
        dynamo=False, opset_version=17,
    )  # fmt: skip
    return time.perf_counter() - t


def rotary64(on: bool) -> None:
    mm = __import__("transformers.models.modernbert.modeling_modernbert", fromlist=["x"])
    if not hasattr(mm, "_orig_rope"):
        mm._orig_rope = mm.apply_rotary_pos_emb

    def rope(q, k, cos, sin, unsqueeze_dim=1):  # type: ignore[no-untyped-def]
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos + mm.rotate_half(q) * sin, k * cos + mm.rotate_half(k) * sin

    mm.apply_rotary_pos_emb = rope if on else mm._orig_rope


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def fmt_times(flows: Any, n_layers: int) -> str:
    by = {r.layer: r.blowup_time for r in flows.rows}
    cells = []
    for k in range(n_layers):
        t = by.get(k)
        cells.append("…" if t is None else ("none" if math.isinf(t) else f"{t:.3g}"))
    return ", ".join(cells)


def small(tmp: Path) -> None:
    print(
        "| family | layers | d | heads | extract: module / folder / onnx (s) | rel. error "
        "float32 | rel. error float64 | T* from the identity, per layer |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for family in BUILD:
        errs, times = {}, {}
        for prec in ("float32", "float64"):
            rotary64(family == "modernbert" and prec == "float64")
            net = build(family, getattr(torch, prec))
            io = own_io(net, family, inputs(family, 12))
            folder = tmp / f"{family}_{prec}"
            net.save_pretrained(folder)
            export(net, family, tmp / f"{family}_{prec}.onnx")
            errs[prec] = 0.0
            for name, src in (("module", net), ("folder", folder),
                              ("onnx", tmp / f"{family}_{prec}.onnx")):  # fmt: skip
                em, dt = timed(extract, src)
                times.setdefault(name, dt)
                errs[prec] = max(errs[prec], error(em, io, family == "gpt2"))
            rotary64(False)
        em = extract(build(family, torch.float32))
        flows = attention_flows(em, starts=["identity"], T=4.0, time_limit=60)
        t = " / ".join(f"{times[k]:.3f}" for k in ("module", "folder", "onnx"))
        print(
            f"| {family} | {em.n_layers} | {em.dim} | {em.n_heads} | {t} | "
            f"{errs['float32']:.1e} | {errs['float64']:.1e} | {fmt_times(flows, em.n_layers)} |"
        )


def paper(layers: int, limit: float) -> None:
    print(
        "\n| model | layers | d | heads | extract (s) | rel. error float32 | "
        f"T* from the identity, layers 0..{layers - 1} (limit {limit:g} s each) |"
    )
    print("|---|---|---|---|---|---|---|")
    fam = {"minilm": "bert", "random-deit": "deit", "random-gpt2": "gpt2",
           "random-modernbert": "modernbert"}  # fmt: skip
    for name, family in fam.items():
        net = load_model(name)
        em, dt = timed(extract, name)
        cfg = net.config
        img = int(getattr(cfg, "image_size", 16))
        io = own_io(net, family, inputs(family, 16, int(getattr(cfg, "vocab_size", 100)), img))
        err = error(em, io, family == "gpt2")
        flows = attention_flows(
            em, layers=range(layers), starts=["identity"], T=4.0, time_limit=limit * layers
        )
        print(
            f"| {name} | {em.n_layers} | {em.dim} | {em.n_heads} | {dt:.2f} | {err:.1e} | "
            f"{fmt_times(flows, layers)} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", action="store_true")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--flow-limit", type=float, default=120.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small(Path(tmp))
    if args.paper:
        paper(args.layers, args.flow_limit)


if __name__ == "__main__":
    main()
