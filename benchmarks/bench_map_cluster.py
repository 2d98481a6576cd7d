"""The model map on a dask cluster started as separate processes: 1 worker against 2.

A random 12-layer BERT (width ``--width``, 4 heads, query/key weights scaled so that the
attention is not uniform) is saved as a folder; for ``n`` = 1 and 2 a ``dask scheduler`` and
``n`` ``dask worker`` processes (one thread each) are started, and ``model_map`` maps every
layer on that cluster (one task per layer). Prints the wall time of each and the speed-up.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_map_cluster.py [--width 64]
[--tokens 256]`` (needs the ``experiments`` and ``sweep`` extras).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _model(folder: Path, width: int) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        hidden_size=width,
        num_hidden_layers=12,
        num_attention_heads=4,
        intermediate_size=2 * width,
        vocab_size=1000,
    )
    net = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "attention.self.query" in name or "attention.self.key" in name:
                p.mul_(8.0)
    net.save_pretrained(folder / "bert12")
    return folder / "bert12"


def _cluster(folder: Path, n: int) -> tuple[list[subprocess.Popen[bytes]], str]:
    dask = str(Path(sys.executable).parent / "dask")
    file = folder / f"scheduler{n}.json"
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
    ]  # fmt: skip
    while not file.exists():
        time.sleep(0.05)
    address = json.loads(file.read_text())["address"]
    for _ in range(n):
        procs.append(
            subprocess.Popen(
                [dask, "worker", "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                 "--scheduler-file", str(file)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
            )
        )  # fmt: skip
    return procs, address


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    from gtcontrol.experiments.model_map import model_map
    from gtcontrol.interop import extract

    folder = Path(tempfile.mkdtemp())
    em = extract(_model(folder, args.width))
    walls = {}
    for n in (1, 2):
        procs, address = _cluster(folder, n)
        try:
            clock = time.perf_counter()
            m = model_map(em, token_check=args.tokens, scheduler=address)
            walls[n] = time.perf_counter() - clock
            print(
                f"{n} worker(s): {m.status.value}, {len(m.rows)} rows in {walls[n]:.1f} s "
                f"({m.stats['where']}); parts {m.stats['timing']}"
            )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    print(f"speed-up 1 → 2 workers: {walls[1] / walls[2]:.2f}")


if __name__ == "__main__":
    main()
