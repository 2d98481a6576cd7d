"""Steering through a pretrained network: ``steer(..., base=layer)`` at d = 385, and its gaps.

Plain script, two parts (``--part minilm``, ``--part gaps``, or both by default):

* ``minilm``: MiniLM-L6's attention sublayers (``extract("minilm")``, d = 385 augmented: 384
  plus the affine coordinate; 12 factored heads of width 32), ``n_layers = 8``, ``T = 1``. From
  the moments of the packaged text that enter the layer (``map_data``; rank 383: LayerNorm's null
  direction and the affine coordinate) to a rotated and shifted copy on the same active subspace
  (``Σ1 = QΣ0Qᵀ``, ``Q = exp(0.3 K)`` on the subspace with ``K`` a random skew matrix scaled by
  ``1/sqrt(r)``, the mean rotated and shifted by ``0.5 sqrt(tr Σ0 / r)`` per coordinate of a
  random direction); and from ``N(e, I ⊕ 0)`` to a shifted copy with covariance ``R D Rᵀ ⊕ 0``
  (``log D`` normal with deviation 0.3), through the base's blow-up. Per row: wall seconds of
  ``steer`` (construction and verification), status, re-simulated relative terminal error, the
  added energy ``∫ E|A_k x + b_k|² dt`` through the base heads, and the energy of steering the
  same pair with no heads (a base with no heads: the exact L-layer geodesic on the active
  subspace; the blank ``steer`` needs a non-singular Σ0 for its flow construction).
* ``gaps``: 20 random fixed-base problems (d from 3 to 6, 2 or 3 dense heads with entries of
  deviation 0.3–0.5, a random affine part, random end points, ``n_layers = 4``, ``T = 1``): the
  construction's added energy against the collocation NLP's (``method="collocation"``,
  warm-started from the construction), and the gap ``construction / NLP − 1``; ``--mode full``
  with an added head per sublayer.
* ``full``: MiniLM's layer 2 from the text moments, ``mode="ffn"`` against ``mode="full"`` (an
  added head per sublayer where it lowers the measured added energy), in one process.

BLAS on one thread (``OPENBLAS_NUM_THREADS=1``, set below before numpy loads): on the shared
2-core machine a multi-threaded OpenBLAS stalls (an ``eigh`` of size 385 took 1.1 s instead of
15 ms beside other jobs).

Run: ``.venv/bin/python benchmarks/bench_steer_base.py [--part minilm|gaps|full] [--layers 0 1 2]
[--mode ffn|full]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import time

import numpy as np
import scipy.linalg

from gtcontrol import Gaussian, Layer, steer


def _rotated_copy(g0: Gaussian, seed: int) -> Gaussian:
    """A rotated and shifted copy of ``g0`` on its own active subspace."""
    rng = np.random.default_rng(seed)
    d, r = g0.dim, g0.rank
    u = np.linalg.eigh(g0.cov)[1][:, d - r :]
    k = rng.standard_normal((r, r))
    rot = scipy.linalg.expm(0.3 * (k - k.T) / np.sqrt(r))
    q = u @ rot @ u.T + (np.eye(d) - u @ u.T)
    step = 0.5 * np.sqrt(np.trace(g0.cov) / r) * rng.standard_normal(r)
    return Gaussian(q @ g0.mean + u @ step, q @ g0.cov @ q.T)


def _identity_pair(dim: int, seed: int) -> tuple[Gaussian, Gaussian]:
    from gtcontrol.experiments.model_map import _identity

    rng = np.random.default_rng(seed)
    k = rng.standard_normal((dim, dim))
    rot = scipy.linalg.expm(0.3 * (k - k.T) / np.sqrt(dim))
    cov = np.zeros((dim + 1, dim + 1))
    cov[:dim, :dim] = (rot * np.exp(0.3 * rng.standard_normal(dim))) @ rot.T
    mean = np.append(0.5 * rng.standard_normal(dim), 1.0)
    return _identity(dim), Gaussian(mean, cov)


def _row(label: str, k: int, g0: Gaussian, g1: Gaussian, layer: Layer) -> str:
    clock = time.perf_counter()
    res = steer(g0, g1, 1.0, n_layers=8, base=layer, mode="ffn")
    seconds = time.perf_counter() - clock
    heads = [(np.array(v), np.array(b)) for v, b in layer.dense_heads]
    kept = all(
        lay.factored_heads is layer.factored_heads
        and all(
            np.array_equal(v, v0) and np.array_equal(b, b0)
            for (v, b), (v0, b0) in zip(lay.dense_heads, heads, strict=True)
        )
        for lay in res.controls.layers
    )
    blank = steer(g0, g1, 1.0, n_layers=8, base=Layer(dim=g0.dim), mode="ffn")
    part = res.stats["seconds_by_part"]
    where = ", ".join(f"{key} {val:.1f}" for key, val in part.items())
    return (
        f"| {k} | {label} | {seconds:.1f} | {res.status.value} | "
        f"{res.stats['relative_terminal_error']:.2g} | {res.cost:.5g} | {res.kinetic_energy:.5g} | "
        f"{blank.cost:.5g} ({blank.status.value}) | {kept} | "
        f"{res.stats['sublayer_shots']} | {where} |"
    )


def minilm(layers: list[int]) -> None:
    from gtcontrol.experiments._map_network import map_data
    from gtcontrol.experiments.model_map import _data_start
    from gtcontrol.interop import extract

    em = extract("minilm")
    data = map_data(em)
    print(
        "| layer | start | seconds | status | rel. terminal error | added energy | "
        "total kinetic energy | energy without base heads | heads kept bitwise | "
        "shots per sublayer | seconds by part |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in layers:
        layer = em.layers[k].attention_layer
        g0 = _data_start(data.tokens[k])
        print(_row("text", k, g0, _rotated_copy(g0, k), layer), flush=True)
        i0, i1 = _identity_pair(layer.dim - 1, k)
        print(_row("N(e, I ⊕ 0)", k, i0, i1, layer), flush=True)


def _random_problem(seed: int) -> tuple[Gaussian, Gaussian, Layer]:
    rng = np.random.default_rng(seed)
    d = 3 + seed % 4
    size = rng.uniform(0.3, 0.5)
    heads = [
        (size * rng.standard_normal((d, d)), size * rng.standard_normal((d, d)))
        for _ in range(2 + seed % 2)
    ]
    base = Layer(A=0.1 * rng.standard_normal((d, d)), b=0.1 * rng.standard_normal(d), heads=heads)

    def spd() -> np.ndarray:
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        return (q * rng.uniform(0.5, 2.0, d)) @ q.T

    return Gaussian(rng.standard_normal(d), spd()), Gaussian(rng.standard_normal(d), spd()), base


def gaps(n: int = 20, mode: str = "ffn") -> None:
    print(f"mode {mode!r}")
    print("| seed | d | heads | construction | NLP | gap | NLP status | seconds (flow, NLP) |")
    print("|---|---|---|---|---|---|---|---|")
    found = []
    for seed in range(n):
        g0, g1, base = _random_problem(seed)
        clock = time.perf_counter()
        flow = steer(g0, g1, 1.0, n_layers=4, base=base, mode=mode, method="flow")
        t_flow = time.perf_counter() - clock
        clock = time.perf_counter()
        best = steer(g0, g1, 1.0, n_layers=4, base=base, mode=mode, method="collocation")
        t_nlp = time.perf_counter() - clock
        nlp = best.stats.get("nlp_energy", float("nan"))
        gap = flow.cost / nlp - 1.0 if nlp == nlp else float("nan")
        found.append(gap)
        print(
            f"| {seed} | {g0.dim} | {base.n_heads} | {flow.cost:.5g} | {nlp:.5g} | {gap:.3g} | "
            f"{best.stats.get('nlp_ipopt_status')} | {t_flow:.2f}, {t_nlp:.2f} |",
            flush=True,
        )
    ok = [g for g in found if g == g]
    print(
        f"\ngap construction/NLP − 1 over {len(ok)} solved of {n}: median "
        f"{float(np.median(ok)):.3g}, min {min(ok):.3g}, max {max(ok):.3g}"
    )


def full(k: int = 2) -> None:
    from gtcontrol.experiments import extract
    from gtcontrol.experiments._map_network import map_data
    from gtcontrol.experiments.model_map import _data_start

    em = extract("minilm")
    layer = em.layers[k].attention_layer
    g0 = _data_start(map_data(em).tokens[k])
    g1 = _rotated_copy(g0, k)
    print(
        "| layer | mode | seconds | status | rel. terminal error | added energy | "
        "heads added per sublayer | head integrations | seconds by part |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in ("ffn", "full"):
        clock = time.perf_counter()
        res = steer(g0, g1, 1.0, n_layers=8, base=layer, mode=mode, method="flow")
        seconds = time.perf_counter() - clock
        where = ", ".join(f"{key} {val:.1f}" for key, val in res.stats["seconds_by_part"].items())
        print(
            f"| {k} | {mode} | {seconds:.1f} | {res.status.value} | "
            f"{res.stats['relative_terminal_error']:.2g} | {res.cost:.6g} | "
            f"{res.stats['added_heads']} | {res.stats['head_shots']} | {where} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("minilm", "gaps", "full", "both"), default="both")
    parser.add_argument("--layers", type=int, nargs="*", default=list(range(6)))
    parser.add_argument("--mode", choices=("ffn", "full"), default="ffn")
    args = parser.parse_args()
    if args.part in ("gaps", "both"):
        gaps(mode=args.mode)
    if args.part in ("minilm", "both"):
        minilm(args.layers)
    if args.part == "full":
        full()


if __name__ == "__main__":
    main()
