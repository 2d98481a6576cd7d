"""What sets the steps of a stabilized layer's token run: accuracy or stiffness.

Stabilizes one layer of a real model as the model map does (text target, the perturbed-target
start, no token check), then moves the token check's 1,024 tokens (same start and seed, float32)
to the check's depth by ``simulate_tokens`` with RK45 at several tolerances, DOP853, and a
candidate: a second-order Runge–Kutta–Chebyshev method (RKC2; Sommeijer, Shampine & Verwer,
*J. Comput. Appl. Math.* 88 (1998) 315–326), made for fields whose Jacobian has a large real
negative spectrum, with the same error-per-unit-step control as the package's pairs. Prints, for
each, the field evaluations, the seconds, W2 of the final tokens to the target and their RMS
distance to a reference run (RK45 at ``rtol`` 1e-4), relative to the tokens' RMS; then the
extreme eigenvalues of the token field's Jacobian at a sample of the target for the stabilized
and the given layer (Arnoldi, 40 products by central differences, float64).

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_token_steps.py [--layer 2]
[--depth 7.58]`` (needs the ``experiments`` extra). The table "Where the token check's steps
come from" of docs/benchmarks.md comes from it.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import gtcontrol as gt
from gtcontrol.experiments import data_tokens, text_target
from gtcontrol.interop import extract
from gtcontrol.model import attention

Field = Callable[[np.ndarray], np.ndarray]


def rms(z: Any) -> float:
    z64 = np.asarray(z, dtype=np.float64).ravel()
    return math.sqrt(float(z64 @ z64) / z64.size)


def rkc_coefficients(s: int, eps: float = 2.0 / 13.0) -> tuple[np.ndarray, ...]:
    """``μ, ν, μ̃, γ̃`` of the damped ``s``-stage RKC2 (Chebyshev polynomials at ``w0``)."""
    w0 = 1.0 + eps / s**2
    t, dt, ddt = np.zeros(s + 1), np.zeros(s + 1), np.zeros(s + 1)
    t[0], t[1], dt[1] = 1.0, w0, 1.0
    for j in range(2, s + 1):
        t[j] = 2 * w0 * t[j - 1] - t[j - 2]
        dt[j] = 2 * t[j - 1] + 2 * w0 * dt[j - 1] - dt[j - 2]
        ddt[j] = 4 * dt[j - 1] + 2 * w0 * ddt[j - 1] - ddt[j - 2]
    w1 = dt[s] / ddt[s]
    b = np.zeros(s + 1)
    b[2:] = ddt[2:] / dt[2:] ** 2
    b[0] = b[1] = b[2]
    a = 1.0 - b * t
    mu, nu, mu_t, gamma = (np.zeros(s + 1) for _ in range(4))
    mu_t[1] = b[1] * w1
    for j in range(2, s + 1):
        mu[j] = 2 * b[j] * w0 / b[j - 1]
        nu[j] = -b[j] / b[j - 2]
        mu_t[j] = 2 * b[j] * w1 / b[j - 1]
        gamma[j] = -a[j - 1] * mu_t[j]
    return mu, nu, mu_t, gamma


def spectral_radius(f: Field, y: np.ndarray, fy: np.ndarray, v: np.ndarray) -> tuple[float, Any]:
    """A nonlinear power estimate of the field's spectral radius at ``y`` (with 20 % margin)."""
    rho = 0.0
    for it in range(20):
        d = math.sqrt(float(np.finfo(np.float32).eps)) * max(rms(y), 1.0) / rms(v)
        new = (f((y + d * v).astype(y.dtype)).astype(np.float64) - fy) / d
        rho_new, v = rms(new) / rms(v), new
        if it > 2 and abs(rho_new - rho) <= 0.05 * rho_new:
            break
        rho = rho_new
    return 1.2 * rho_new, v


def rkc2(f: Field, x: np.ndarray, depth: float, rtol: float) -> tuple[np.ndarray, int, str]:
    """RKC2 to ``depth`` with the pairs' control (``q ≤ h / T``); tokens, evaluations, stages."""
    calls = [0]

    def field(y: np.ndarray) -> np.ndarray:
        calls[0] += 1
        return f(y)

    t, fx = 0.0, field(x).astype(np.float64)
    rho, v = spectral_radius(field, x, fx, fx + 1e-3)
    h, steps, stages = min(depth, 1.0 / rho), 0, set()
    while t < depth * (1 - 1e-12):
        if steps and steps % 25 == 0:
            rho, v = spectral_radius(field, x, fx, v)
        h = min(h, depth - t)
        s = 1 + int(math.sqrt(1 + 1.54 * h * rho))
        mu, nu, mu_t, gamma = rkc_coefficients(s)
        x0 = x.astype(np.float64)
        before, last = x0, x0 + mu_t[1] * h * fx
        for j in range(2, s + 1):
            fj = field(last.astype(x.dtype)).astype(np.float64)
            stage = (1 - mu[j] - nu[j]) * x0 + mu[j] * last + nu[j] * before
            before, last = last, stage + mu_t[j] * h * fj + gamma[j] * h * fx
        fn = field(last.astype(x.dtype)).astype(np.float64)
        est = (12 * (x0 - last) + 6 * h * (fx + fn)) / 15
        w = rtol * np.maximum(np.maximum(np.abs(x0), np.abs(last)), rms(x0))
        ratio = rms(est / w) * depth / h
        if ratio <= 1.0:
            x, fx, t, steps = last.astype(x.dtype), fn, t + h, steps + 1
            stages.add(s)
        h *= min(10.0, max(0.1, 0.8 / max(ratio, 1e-10) ** (1 / 3)))
    return x, calls[0], f"{min(stages)}–{max(stages)} stages" if stages else ""


def extreme_eigenvalues(layer: gt.Layer, x: np.ndarray, m: int = 40) -> np.ndarray:
    """Ritz values of the token field's Jacobian at ``x`` (Arnoldi, central differences)."""
    prep = attention.prepare_layer(layer, np.dtype(np.float64))
    work = attention.Workspace(x.shape[0], np.float64, None)
    eps = 1e-4 * rms(x) * math.sqrt(x.size)
    q = np.zeros((m + 1, x.size))
    hess = np.zeros((m + 1, m))
    q[0] = np.random.default_rng(1).standard_normal(x.size)
    q[0] /= np.linalg.norm(q[0])
    for j in range(m):
        v = q[j].reshape(x.shape)
        plus = attention.prepared_velocity(prep, x + eps * v, work)
        u = ((plus - attention.prepared_velocity(prep, x - eps * v, work)) / (2 * eps)).ravel()
        for i in range(j + 1):
            hess[i, j] = q[i] @ u
            u -= hess[i, j] * q[i]
        hess[j + 1, j] = np.linalg.norm(u)
        q[j + 1] = u / hess[j + 1, j]
    return np.linalg.eigvals(hess[:m, :m])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--layer", type=int, default=2)
    ap.add_argument("--depth", type=float, default=7.58)
    args = ap.parse_args()
    em = extract(args.model)
    tokens, _ = data_tokens(em, seed=0)
    given = em.layers[args.layer].attention_layer
    target, _ = text_target(tokens[args.layer])
    probe = np.hstack([tokens[args.layer], np.ones((tokens[args.layer].shape[0], 1))])
    with threadpool_limits(1):
        res = gt.stabilize(
            given, target, rate=1.0, initial="perturbed", tokens=probe, seed=0, add="head"
        )
        x0 = res.starts[-1].sample(1024, seed=np.random.default_rng(0)).astype(np.float32)
        prep = attention.prepare_layer(res.layer, np.dtype(np.float32))
        work = attention.Workspace(1024, np.float32, None)
        finals: dict[str, tuple[np.ndarray, int, float]] = {}
        for method, rtol in (("RK45", 1e-2), ("RK45", 3e-2), ("RK45", 1e-1), ("DOP853", 1e-2)):
            clock = time.perf_counter()
            tr = gt.simulate_tokens(
                res.layer, x0, args.depth, method=method, rtol=rtol, dtype=np.float32
            )
            evals = int(tr.stats.get("n_velocity", 0))
            finals[f"{method}, {rtol:g}"] = (tr.final_tokens, evals, time.perf_counter() - clock)
        clock = time.perf_counter()
        x, evals, stages = rkc2(
            lambda y: attention.prepared_velocity(prep, y, work), x0, args.depth, 1e-2
        )
        finals[f"RKC2, 1e-2 ({stages})"] = (x, evals, time.perf_counter() - clock)
        clock = time.perf_counter()
        ref = gt.simulate_tokens(
            res.layer, x0, args.depth, method="RK45", rtol=1e-4, dtype=np.float32
        )
        ref_x = np.asarray(ref.final_tokens, dtype=np.float64)
        finals["RK45, 1e-4 (reference)"] = (
            ref.final_tokens,
            int(ref.stats.get("n_velocity", 0)),
            time.perf_counter() - clock,
        )
        print(f"MiniLM layer {args.layer}, c = {res.c:.4g}, depth {args.depth:g}, 1,024 tokens")
        print("| integrator, rtol | evaluations | seconds | W2 | RMS distance / RMS |")
        print("|---|---|---|---|---|")
        for name, (xf, evals, secs) in finals.items():
            w2 = gt.Gaussian.from_samples(np.asarray(xf, dtype=np.float64)).bures_wasserstein(
                target
            )
            dist = rms(np.asarray(xf, dtype=np.float64) - ref_x) / rms(ref_x)
            print(f"| {name} | {evals} | {secs:.1f} | {w2:.5g} | {dist:.2g} |")
        sample = target.sample(1024, seed=np.random.default_rng(1))
        for name, layer in (("stabilized", res.layer), ("given", given)):
            ev = extreme_eigenvalues(layer, sample)
            lo, hi = ev[np.argmin(ev.real)], ev[np.argmax(ev.real)]
            print(f"{name} layer's token Jacobian: leftmost {lo:.3g}, rightmost {hi:.3g}")


if __name__ == "__main__":
    main()
