"""Design time of gtcontrol.control.design (issue 5), candidate and baseline in one process.

(a) ``design_mean_matching`` at d = 10 and d = 50, constructive route (closed form plus the
    independent certificate: slycot equilibrium, spectra): candidate. Baseline: the same call
    with the robustness report (stability radii, sampled and bisected parameter perturbations),
    i.e. the default output.
(b) At d = 10: the constructive design against the CasADi/IPOPT minimum-norm design (the NLP
    route with the equilibrium constraints and the Lyapunov margin certificates).
(c) The CasADi design with a fixed (pretrained) B at d = 8: candidate. Baseline: the closed-form
    feasible design for that B (``v = −max(rate, cov_rate / (2 λ_min(Σ*^½ sym(B) Σ*^½)))``,
    ``A = Σ*^½ (R̂/2) Σ*^{-½}``), certified the same way; the NLP buys a smaller norm.

(d) The finite-N step at d = 10 and d = 50 (issue 13): the default design, whose head is
    rescaled (sV, B/s) until the predicted softmax ESS/N ≥ 0.5 along the moment path from
    N(0, I) (LSODA path, ``worst_ess_fraction`` at every recorded depth): candidate. Baseline:
    the same design with ``min_ess=None`` (the closed form plus its certificate and the ESS
    report of one path). Token-level distances: ``benchmarks/bench_design_tokens.py``.

Repeats of candidate and baseline are interleaved so that load changes hit both. The machine
is shared: treat the figures as indicative. On a loaded 2-core machine OpenBLAS threads make
small (d ≤ 50) factorizations up to ~30× slower; ``OPENBLAS_NUM_THREADS=1`` gives the
single-thread figures.

Run: ``.venv/bin/python benchmarks/bench_design.py [--repeats 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gtcontrol import Gaussian, Layer
from gtcontrol.control.design import design_certificate, design_mean_matching

# (a)–(c) time the moment-level design: no robustness report, no finite-N scale search.
NO_ROB: dict[str, Any] = {"robustness": False, "min_ess": None}


def _once(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _target(d: int, seed: int) -> Gaussian:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((d, d))
    return Gaussian(rng.standard_normal(d), x @ x.T / d + 0.5 * np.eye(d))


def _compare(label: str, cand: Callable[[], Any], base: Callable[[], Any], repeats: int) -> None:
    tc, tb = [], []
    for _ in range(repeats):
        tc.append(_once(cand)[0])
        tb.append(_once(base)[0])
    mc, mb = statistics.median(tc), statistics.median(tb)
    print(f"{label}")
    print(
        f"    candidate median {mc * 1e3:10.2f} ms   baseline median {mb * 1e3:10.2f} ms   "
        f"baseline/candidate {mb / mc:8.2f}"
    )


def bench_a(repeats: int) -> None:
    for d in (10, 50):
        g = _target(d, d)
        res = design_mean_matching(g, rate=1.0)
        rob = res.robustness
        assert res.success and rob is not None
        print(
            f"(a) d = {d}: certificate {res.certificate.kind}, rates "
            f"{res.certificate.mean_rate:.6g}/{res.certificate.cov_rate:.6g}, radius "
            f"{rob.radius:.6g}, parameter radius {rob.parameter_radius:.4g} "
            f"({rob.stats['evaluations']} perturbed equilibria)"
        )
        _compare(
            f"    constructive design (candidate) vs + robustness report (baseline), d = {d}",
            lambda g=g: design_mean_matching(g, rate=1.0, **NO_ROB),
            lambda g=g: design_mean_matching(g, rate=1.0),
            repeats,
        )


def bench_b(repeats: int) -> None:
    d = 10
    g = _target(d, 1)
    ref = design_mean_matching(g, rate=1.0, **NO_ROB)
    nlp = design_mean_matching(g, rate=1.0, minimum_norm=True, **NO_ROB)
    print(
        f"(b) d = {d}: whitened norms constructive {ref.whitened_norm:.6g}, NLP "
        f"{nlp.whitened_norm:.6g} ({nlp.status}, {nlp.stats['iterations']} IPOPT iterations)"
    )
    _compare(
        "    constructive (candidate) vs CasADi minimum-norm NLP (baseline)",
        lambda: design_mean_matching(g, rate=1.0, **NO_ROB),
        lambda: design_mean_matching(g, rate=1.0, minimum_norm=True, **NO_ROB),
        repeats,
    )


def _closed_form_fixed_b(g: Gaussian, b_fixed: np.ndarray, rate: float, cov_rate: float) -> Any:
    w, u = np.linalg.eigh(g.cov)
    t, ti = (u * np.sqrt(w)) @ u.T, (u / np.sqrt(w)) @ u.T
    b_hat = t @ b_fixed @ t
    bs = 0.5 * (b_hat + b_hat.T)
    v = -max(rate, cov_rate / (2.0 * float(np.linalg.eigvalsh(bs)[0])))
    a = t @ (-v * bs) @ ti  # Â = R̂/2 with R̂ = −2v sym(B̂)
    layer = Layer(a, B=b_fixed, V=v)
    k = design_certificate(layer, g).mean_matrix  # K does not depend on b
    layer = layer.replace(b=-k @ g.mean)
    return layer, design_certificate(layer, g, rate=rate, cov_rate=cov_rate)


def _whitened_norm(layer: Layer, g: Gaussian) -> float:
    """``sqrt(‖Â‖² + ‖B̂‖² + ‖V̂‖² + ‖b̂‖²)`` in ``x̂ = Σ*^{-½}x`` (the norm the NLP minimizes)."""
    w, u = np.linalg.eigh(g.cov)
    t, ti = (u * np.sqrt(w)) @ u.T, (u / np.sqrt(w)) @ u.T
    total = np.sum((ti @ layer.A @ t) ** 2) + np.sum((ti @ layer.b) ** 2)
    for v_h, b_h in layer.heads:
        total += np.sum((ti @ v_h @ t) ** 2) + np.sum((t @ b_h @ t) ** 2)
    return float(np.sqrt(total))


def bench_c(repeats: int) -> None:
    d = 8
    g = _target(d, 8)
    rng = np.random.default_rng(80)
    y = rng.standard_normal((d, d))
    s = rng.standard_normal((d, d))
    b_fixed = y @ y.T / d + 0.2 * np.eye(d) + 0.2 * (s - s.T)
    res = design_mean_matching(g, rate=1.0, fixed_B=b_fixed, **NO_ROB)
    layer, cert = _closed_form_fixed_b(g, b_fixed, 1.0, 2.0)
    base_norm = _whitened_norm(layer, g)
    print(
        f"(c) d = {d}, fixed B: NLP {res.status} ({res.stats['iterations']} IPOPT iterations, "
        f"whitened norm {res.whitened_norm:.6g}, rates {res.certificate.mean_rate:.4g}/"
        f"{res.certificate.cov_rate:.4g}); closed form {cert.kind} (whitened norm "
        f"{base_norm:.6g}, rates {cert.mean_rate:.4g}/{cert.cov_rate:.4g})"
    )
    _compare(
        "    CasADi fixed-B design (candidate) vs closed-form fixed-B design (baseline)",
        lambda: design_mean_matching(g, rate=1.0, fixed_B=b_fixed, **NO_ROB),
        lambda: _closed_form_fixed_b(g, b_fixed, 1.0, 2.0),
        repeats,
    )


def bench_d(repeats: int) -> None:
    for d in (10, 50):
        g = _target(d, d)
        res = design_mean_matching(g, rate=1.0, robustness=False)
        assert res.success and res.ess is not None
        print(
            f"(d) d = {d}: scale s = {res.ess.scale:.4g} (mean rate "
            f"{res.certificate.mean_rate:.4g}, covariance rate {res.certificate.cov_rate:.4g}), "
            "predicted worst ESS/N "
            f"{res.ess.worst_overall:.3f}, {res.ess.stats['rounds']} rounds, "
            f"{res.ess.stats['n_points']} depths"
        )
        _compare(
            f"    design with min_ess=0.5 (candidate) vs min_ess=None (baseline), d = {d}",
            lambda g=g: design_mean_matching(g, rate=1.0, robustness=False),
            lambda g=g: design_mean_matching(g, rate=1.0, **NO_ROB),
            repeats,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    bench_a(args.repeats)
    bench_b(args.repeats)
    bench_c(args.repeats)
    bench_d(args.repeats)


if __name__ == "__main__":
    main()
