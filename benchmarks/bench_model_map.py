"""The model map of a real model against what it replaces, in one process.

Candidate: :func:`gtcontrol.experiments.model_map.model_map` (regimes, head shares, equilibria,
stabilization with its token check and rate curve, the stabilized network), rows inline or on
local worker processes (``--workers``). Baseline: the previous ``model`` task
(:func:`~gtcontrol.experiments.model_report`: Gaussianity of Gaussian tokens after every layer
and the attention flows from the identity and the data) plus
:func:`~gtcontrol.experiments.stabilize_model` of the text targets with the same token check:
together they answered part of what one map answers. Prints the per-part seconds of the map,
the baseline's two parts, and the ratio.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_model_map.py [--model minilm]
[--layers 0 1 ...] [--workers 2] [--tokens 1024] [--no-baseline] [--onnx-layers K]`` (needs the
``experiments`` extra). ``--onnx-layers K`` maps MiniLM's first ``K`` layers exported to an ONNX
file instead (``torch.onnx.export`` into a temporary folder, no tokenizer beside it: the map's data
are random ids). The numbers of docs/benchmarks.md come from it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from gtcontrol.experiments import model_report, stabilize_model
from gtcontrol.experiments.model_map import PARTS, model_map
from gtcontrol.interop import extract, load_model


def run_map(model: Any, layers: list[int] | None, workers: int, tokens: int) -> float:
    clock = time.perf_counter()
    m = model_map(model, layers=layers, token_check=tokens, workers=workers)
    wall = time.perf_counter() - clock
    timing = m.stats["timing"]
    print(f"model_map: {m.status.value} in {wall:.1f} s wall ({m.stats['where']})")
    print("| part | seconds (summed over rows) |\n|---|---|")
    for part in ("load", "data", *PARTS, "network"):
        print(f"| {part} | {timing.get(part, 0.0):.1f} |")
    print(
        "\n| layer | T* identity | T* data | head (share) | eq. data | c | abscissa | "
        "tokens W2/floor | change | s |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in m.rows:
        row = r.row()
        print(
            f"| {r.layer} | {row['blowup_identity']:.4g} | {row['blowup_data']:.4g} | "
            f"{r.dominant_head} ({r.head_share:.2f}) | {row['equilibrium_data']} | "
            f"{row['c']:.4g} | {row['abscissa_before']:.3g} → {row['abscissa_after']:.4g} | "
            f"{row['token_w2']:.3g}/{row['token_floor']:.3g} | {row['function_change']:.3g} | "
            f"{row['seconds']:.0f} |"
        )
    net = m.stabilized_network
    if net is not None:
        print(f"\nstabilized network: {net.message}")
    return wall


def run_baseline(model: Any, layers: list[int] | None, tokens: int) -> float:
    clock = time.perf_counter()
    rep = model_report(model, n_null=8)
    t_report = time.perf_counter() - clock
    tab = stabilize_model(model, layers=layers, targets=["text"], token_check=tokens)
    wall = time.perf_counter() - clock
    print(
        f"baseline: model_report {rep.status.value} {t_report:.1f} s + stabilize_model "
        f"{tab.status.value} {wall - t_report:.1f} s = {wall:.1f} s"
    )
    return wall


def export_minilm(n_layers: int, folder: Path) -> Path:
    """MiniLM's first ``n_layers`` layers as an ONNX graph (ids in, last hidden state out)."""
    import torch

    net = load_model("minilm")
    net.encoder.layer = net.encoder.layer[:n_layers]
    net.config.num_hidden_layers = n_layers

    class Ids(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, ids: Any) -> Any:
            return self.net(input_ids=ids).last_hidden_state

    path = folder / f"minilm-{n_layers}.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation
        torch.onnx.export(
            Ids(),
            (torch.ones(1, 16, dtype=torch.long),),
            str(path),
            input_names=["input_ids"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}},
            dynamo=False,
            opset_version=17,
        )
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--layers", type=int, nargs="*", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--onnx-layers", type=int, default=None)
    args = ap.parse_args()
    if args.onnx_layers is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = export_minilm(args.onnx_layers, Path(tmp))
            clock = time.perf_counter()
            m = model_map(str(path), token_check=args.tokens, workers=args.workers)
            wall = time.perf_counter() - clock
        timing = m.stats["timing"]
        print(f"model_map of {path.name}: {m.status.value} in {wall:.1f} s wall")
        print(", ".join(f"{k} {timing.get(k, 0.0):.1f} s" for k in ("load", "data", *PARTS)))
        print(f"network {timing.get('network', 0.0):.1f} s")
        for r in m.rows:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items())
            print(f"layer {r.layer}: {sum(r.seconds.values()):.1f} s ({parts})")
        print(m.stabilized_network.message if m.stabilized_network is not None else "no network")
        return
    clock = time.perf_counter()
    em = extract(args.model)  # loaded once: both sides start from the extracted model
    print(f"load: {time.perf_counter() - clock:.1f} s")
    t_map = run_map(em, args.layers, args.workers, args.tokens)
    if not args.no_baseline:
        t_base = run_baseline(em, args.layers, args.tokens)
        print(f"\nmap {t_map:.1f} s, baseline {t_base:.1f} s: ratio {t_base / t_map:.2f}")


if __name__ == "__main__":
    main()
