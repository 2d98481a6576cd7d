"""Token-level distance of mean-matching designs to their target, before/after (issue 13 item 1).

Targets like the issue's: d = 4, |m*| = 3.8, Σ* eigenvalues 0.3 … 3 (geometric), random
orientation; tokens from N(0, I); depth T = 12; N = 1024 tokens.

* baseline ("before"): the exact closed-form design ``design_mean_matching(m*, Σ*,
  min_ess=None)``: v = −1, B = Σ*⁻¹.
* candidate ("after"): the default design, whose head is rescaled (sV, B/s) until the predicted
  softmax ESS/N ≥ 0.5 along the path from N(0, I) (queries within 3 standard deviations).

For each: W2 of the tokens' empirical moments to the target at T, beside the sampling floor
(median W2 of the empirical moments of 8 fresh 1024-point target samples), the predicted worst
ESS/N along the moment path, the smallest empirical ESS/N of any token at 25 depths, the moment
certificate, and the wall-clock times (design and token simulation, same process). The token
integration is fixed-step RK4; the "before" tokens stall where the field is stiff in a way the
step does not see, so they get ``--steps-before`` steps (default 960, h = 0.0125) and a run at
half that count shows the change; the "after" tokens use the automatic step (h·λ ≤ 1) and a run
at twice the count bounds its error.

The machine is shared: treat the times as indicative; ratios are measured in one process.

Run: ``.venv/bin/python benchmarks/bench_design_tokens.py [--targets 4] [--n 1024]``
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from gtcontrol import Gaussian
from gtcontrol.control.design import design_mean_matching, design_token_certificate


def _target(seed: int, d: int = 4, norm: float = 3.8) -> Gaussian:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    m = rng.standard_normal(d)
    return Gaussian(norm * m / np.linalg.norm(m), (q * np.geomspace(0.3, 3.0, d)) @ q.T)


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--T", type=float, default=12.0)
    ap.add_argument("--steps-before", type=int, default=960)
    args = ap.parse_args()
    n, depth = args.n, args.T
    print(f"N = {n} tokens from N(0, I), T = {depth:g}, d = 4, |m*| = 3.8, eig Σ* 0.3…3")
    for seed in range(args.targets):
        tgt = _target(seed)
        tb_d, before = _timed(
            design_mean_matching, tgt.mean, tgt.cov, robustness=False, min_ess=None, T=depth
        )
        tc_d, after = _timed(design_mean_matching, tgt.mean, tgt.cov, robustness=False, T=depth)
        tb_s, tok_b = _timed(
            design_token_certificate,
            before.layer,
            tgt,
            n_tokens=n,
            T=depth,
            steps=args.steps_before,
            seed=seed,
        )
        tok_b2 = design_token_certificate(
            before.layer, tgt, n_tokens=n, T=depth, steps=args.steps_before // 2, seed=seed
        )
        tc_s, tok_a = _timed(
            design_token_certificate, after.layer, tgt, n_tokens=n, T=depth, seed=seed
        )
        tok_a2 = design_token_certificate(
            after.layer, tgt, n_tokens=n, T=depth, steps=2 * tok_a.steps, seed=seed
        )
        cb, ca = before.certificate, after.certificate
        assert before.ess is not None and after.ess is not None
        print(
            f"target seed {seed} (tokens and floor samples seeded {seed}): floor "
            f"{tok_a.floor:.4f} (2 × floor {2 * tok_a.floor:.4f})"
        )
        print(
            f"    before: token W2 {tok_b.w2:8.4f} (ratio to floor {tok_b.w2 / tok_b.floor:7.2f}; "
            f"{tok_b2.steps} steps: {tok_b2.w2:.4f})  path ESS ≥ {before.ess.worst_overall:.2e}  "
            f"token ESS ≥ {tok_b.min_ess:.2e}  cert {cb.kind} mean/cov rate "
            f"{cb.mean_rate:.3g}/{cb.cov_rate:.3g}"
        )
        print(
            f"    after:  token W2 {tok_a.w2:8.4f} (ratio to floor {tok_a.w2 / tok_a.floor:7.2f}; "
            f"{tok_a2.steps} steps: Δ {abs(tok_a2.w2 - tok_a.w2):.1e})  path ESS ≥ "
            f"{after.ess.worst_overall:.3f}  token ESS ≥ {tok_a.min_ess:.3f}  cert {ca.kind} "
            f"mean/cov rate {ca.mean_rate:.3g}/{ca.cov_rate:.3g}  s = {after.ess.scale:.3g}"
        )
        print(
            f"    time: design {tb_d * 1e3:.1f} ms before, {tc_d * 1e3:.1f} ms after "
            f"(after/before {tc_d / tb_d:.1f}); tokens {tb_s:.2f} s before "
            f"({tok_b.steps} steps), {tc_s:.2f} s after ({tok_a.steps} steps)"
        )


if __name__ == "__main__":
    main()
