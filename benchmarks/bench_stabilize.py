"""Stabilizing MiniLM-L6's attention sublayers: the spectral abscissa at scale and the table.

Part 1 (``--spectrum``, default): the spectral abscissa of the 73,920-dimensional linearization
``L = DF(Σ*)`` of layer ``k`` at ``Σ* = I ⊕ 0`` (``A`` designed), in one process:

* gtcontrol's :func:`gtcontrol.linearization_spectrum` (ARPACK ``which="LR"`` with one wanted
  pair, a 40-vector basis and a fixed start, ARPACK's own work on one BLAS thread and the
  products on the caller's; ``k=1``);
* the baseline, a plain ARPACK ``eigs(which="LR")`` (``k=6``, default basis and tolerance) on
  the same factored-head matvec;
* a dense ``eigvals`` of the formed matrix at the largest ``r`` that fits in a few seconds (on
  the leading ``r`` coordinates of the same layer), against the Krylov answer there.

Part 2 (``--table``): ``stabilize`` for every layer × target (text, identity) × family, with the
smallest verified ``c`` (``stats["c_local"]`` is the local minimum) or ``‖1 − g‖``, the
abscissas, seconds, token check and function change.

Part 3 (``--newton``): Newton–Krylov (:func:`gtcontrol.newton_equilibrium`, GMRES through the
factored Jacobian) returns the stabilized layer's equilibrium from a 1 % perturbation.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_stabilize.py [--layer K] [--newton]
[--table [--layers K ...] [--families head gains] [--tokens N] [--row-limit SECONDS]
[--no-spectrum]]``
(needs the ``experiments`` extra); table rows are printed as they finish.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse.linalg as sla
from threadpoolctl import threadpool_info

import gtcontrol as gt
from gtcontrol.analysis._subspace import active_subspace, reduced_layer
from gtcontrol.analysis.stability import SymOperator
from gtcontrol.control.stabilization._plan import make_plan
from gtcontrol.control.stabilization._spectra import design_ffn
from gtcontrol.experiments.stabilization import stabilize_model
from gtcontrol.interop import extract


def identity_target(d: int) -> gt.Gaussian:
    cov = np.eye(d)
    cov[-1, -1] = 0.0
    return gt.Gaussian(np.eye(d)[-1], cov)


def designed(layer: gt.Layer, target: gt.Gaussian) -> gt.Layer:
    plan = make_plan(
        layer,
        target,
        None,
        add="head",
        rate=1.0,
        initial=None,
        token_check=None,
        min_ess=0.5,
        tokens=None,
        seed=0,
        clock=time.perf_counter(),
        parallel=False,
    )
    return design_ffn(plan, layer)


def spectrum_part(k: int) -> None:
    em = extract("minilm")
    layer = em.layers[k].attention_layer
    target = identity_target(layer.dim)
    base = designed(layer, target)
    t0 = time.perf_counter()
    ours = gt.linearization_spectrum(base, target, k=1, numerical_abscissa=False)
    t_ours = time.perf_counter() - t0
    basis = active_subspace(base, np.asarray(target.cov))
    op = SymOperator(reduced_layer(base, basis), basis.T @ np.asarray(target.cov) @ basis)
    t0 = time.perf_counter()
    vals = sla.eigs(op.linear_operator(), k=6, which="LR", return_eigenvectors=False)
    t_arpack = time.perf_counter() - t0
    base_alpha = float(np.max(vals.real))
    print(f"layer {k}, Σ* = I ⊕ 0, n = r(r+1)/2 = {op.n}")
    print(
        f"  gtcontrol linearization_spectrum: α = {ours.cov_abscissa:.12g}  "
        f"{t_ours:.2f} s  ({ours.stats['matvecs']} matvecs)"
    )
    print(
        f"  plain ARPACK eigs(k=6, LR):       α = {base_alpha:.12g}  {t_arpack:.2f} s  "
        f"({op.count} matvecs)"
    )
    print(
        f"  ratio (ARPACK / gtcontrol): {t_arpack / t_ours:.2f}×, |Δα| = "
        f"{abs(base_alpha - ours.cov_abscissa):.2e}"
    )
    # dense reference at the largest r whose n×n matrix fits in seconds
    r = 40
    fh = layer.factored_heads
    assert fh is not None
    sub_heads = gt.FactoredHeads(
        fh.q[:, :, :r], fh.k[:, :, :r], fh.v[:, :, :r], fh.o[:, :r, :], scale=fh.scale
    )
    sub = gt.Layer(heads=sub_heads, dim=r)
    sub_target = gt.Gaussian(np.zeros(r), np.eye(r))
    sub_base = designed(sub, sub_target)
    t0 = time.perf_counter()
    dense = gt.linearization_spectrum(sub_base, sub_target, method="dense", k=1)
    t_dense = time.perf_counter() - t0
    t0 = time.perf_counter()
    kry = gt.linearization_spectrum(sub_base, sub_target, method="krylov", k=1)
    t_kry = time.perf_counter() - t0
    print(
        f"  r = {r} (n = {r * (r + 1) // 2}): dense eigvals α = {dense.cov_abscissa:.12g} "
        f"{t_dense:.2f} s; Krylov α = {kry.cov_abscissa:.12g} {t_kry:.2f} s; |Δ| = "
        f"{abs(dense.cov_abscissa - kry.cov_abscissa):.1e}"
    )


def newton_part(k: int) -> None:
    """Newton–Krylov (issue 21) on the stabilized layer ``k`` at ``Σ* = I ⊕ 0``, on its active
    subspace (``r = 384``), from a 1 % perturbation; beside it the machine's ``r×r×r`` matmul
    time, the unit of its cost."""
    em = extract("minilm")
    layer = em.layers[k].attention_layer
    target = identity_target(layer.dim)
    res = gt.stabilize(layer, target, add="head", T=0.01)
    basis = active_subspace(res.layer, np.asarray(target.cov))
    red = reduced_layer(res.layer, basis)
    r = red.dim
    rng = np.random.default_rng(0)
    e = rng.standard_normal((r, r))
    e = (e + e.T) / np.linalg.norm(e + e.T, 2)
    start = np.eye(r) + 0.01 * e
    a, b = rng.standard_normal((2, r, r))
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    t_mm = (time.perf_counter() - t0) / 10
    t0, c0 = time.perf_counter(), time.process_time()
    nr = gt.newton_equilibrium(red, start, time_limit=120)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    err = float(np.linalg.norm(nr.cov - np.eye(r)) / np.linalg.norm(np.eye(r)))
    print(
        f"layer {k}, Newton–Krylov at r = {r} (n = {r * (r + 1) // 2}) from a 1 % perturbation: "
        f"{nr.status.value}, {wall:.2f} s wall, {cpu:.2f} s CPU, "
        f"{nr.stats['gmres_iterations']} GMRES iterations, {nr.iterations} Newton steps, "
        f"relative error to Σ* {err:.1e}; one {r}³ matmul {t_mm * 1e3:.1f} ms "
        f"(Newton = {wall / t_mm:.0f} matmuls)"
    )


def table_part(
    layers: list[int], tokens: int | None, families: list[str], limit: float | None
) -> None:
    """One (layer, target, family) at a time, each row printed as soon as it is done."""
    em = extract("minilm")
    header = None
    for add in families:
        for k in layers:
            for name in ("text", "identity"):
                tab = stabilize_model(
                    em, layers=[k], targets=[name], add=add, token_check=tokens, time_limit=limit
                )
                lines = tab.markdown().splitlines()
                if header is None:
                    header = lines[:2]
                    print("\n".join(header), flush=True)
                print(lines[-1], flush=True)
                print(f"    {tab.results[0].message}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, default=2)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--layers", type=int, nargs="*", default=None)
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--families", nargs="*", default=["head", "gains"])
    ap.add_argument("--row-limit", type=float, default=None, help="seconds per row")
    ap.add_argument("--no-spectrum", action="store_true")
    ap.add_argument("--newton", action="store_true", help="Newton–Krylov at d = 385")
    args = ap.parse_args()
    blas = [f"{i['internal_api']} {i['num_threads']} threads" for i in threadpool_info()]
    print("BLAS:", ", ".join(blas))
    if not args.no_spectrum:
        spectrum_part(args.layer)
    if args.newton:
        newton_part(args.layer)
    if args.table:
        table_part(args.layers or list(range(6)), args.tokens, args.families, args.row_limit)


if __name__ == "__main__":
    main()
