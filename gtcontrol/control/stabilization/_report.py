"""The result of one design of :func:`gtcontrol.stabilize`: what the checks found, said.

:func:`report` states each certificate and check in the message, decides the status
(``SUCCESS`` only when every certificate asked for holds and every check passed;
``BUDGET_EXHAUSTED`` when the time ran out before one ended; else ``FAILED`` with the first
reason) and builds the :class:`~._result.Stabilization`; :func:`result_without` is the result
when no extra was designed. :class:`Probes` holds the probe tokens of the function change.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..._linalg import FloatArray
from ..._status import Budget, Status
from ..._validation import frozen
from ...analysis.stability import LinearizationSpectrum
from ...model.attention import token_velocity
from ...model.finite_n import ess_fraction
from ...model.params import Layer
from .._design_kernel import scaled_norm
from ..design import TokenCertificate
from . import _spectra
from ._plan import Plan
from ._result import CheckPlan, Design, Stabilization, Verification

__all__ = ["Certificates", "Checked", "Probes", "report", "result_without"]

#: Probe tokens for the function change when none are given.
_PROBE_TOKENS = 512
#: The fields of a :class:`Stabilization` with no extra designed (:func:`result_without`):
#: no change, no certificate, no check.
_NO_DESIGN: dict[str, Any] = {
    "c": math.nan,
    "scale": math.nan,
    "mean_shift": math.nan,
    "gains": None,
    "change": math.nan,
    "spectrum": None,
    "local_certificate": False,
    "global_certificate": False,
    "global_bound": "",
    "q": math.nan,
    "basin_radius": math.nan,
    "verification": (),
    "function_change": math.nan,
}


@dataclass(frozen=True, eq=False)
class Certificates:
    """The analytic certificates of a design: whether the global bound holds and its
    sentence, the basin radius, and ``Σ*^{-½}`` on the active subspace (basin distances)."""

    holds: bool
    bound: str
    radius: float
    inv_root: FloatArray


@dataclass(frozen=True, eq=False)
class Checked:
    """What the checks of a design found: its spectrum, one verification per start, the
    stabilized layer's token check (``None``: not run, or stopped where ``c`` grows, which
    ``token_note`` then says), the given layer's tokens, and whether a token check was asked
    (and not refused by a failed local certificate)."""

    spectrum: LinearizationSpectrum
    verification: tuple[Verification, ...]
    tokens: TokenCertificate | None
    untouched: TokenCertificate | None
    token_note: str
    token_asked: bool


class ReportContext(Protocol):
    """What the result needs of one :func:`gtcontrol.stabilize` call."""

    plan: Plan
    budget: Budget
    base_layer: Layer
    probes: Probes


class Probes:
    """The probe tokens of one call (the given ones, or samples of the target drawn once):
    the function change of a design and the kept heads' ESS hint."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._sample: FloatArray | None = None

    def tokens(self) -> FloatArray:
        """The probe tokens."""
        if self.plan.probe is not None:
            return self.plan.probe
        if self._sample is None:  # drawn once: the function change and the ESS hint
            self._sample = self.plan.target.sample(
                _PROBE_TOKENS, seed=np.random.default_rng(self.plan.seed)
            )
        return self._sample

    def function_change(self, final: Layer) -> float:
        """Relative change of the token velocity of ``final`` against the given layer on the
        probe tokens."""
        x = self.tokens()
        old = token_velocity(self.plan.layer, x)
        new = token_velocity(final, x)
        size = scaled_norm(old)
        return scaled_norm(new - old) / size if size > 0 else math.inf

    def kept_heads_ess(self) -> tuple[float, str]:
        """The kept heads' finite-N regime at the target: the smallest, over heads, median
        predicted ``ESS/N = exp(−uᵀΣ*u)`` on the probe tokens, and a sentence when it is below
        ``1/N`` (that head's softmax over ``N`` tokens is then close to a hard maximum, which
        the Gaussian moment model need not describe). It is said only after a failed token
        check, as a hint, not a verdict: a kept head far below ``1/N`` can still leave the
        tokens within the floor (docs/benchmarks.md)."""
        n_tok = self.plan.n_tok
        if n_tok is None or not self.plan.layer.n_heads:
            return math.nan, ""
        frac = ess_fraction(self.plan.layer, self.plan.target, self.tokens())
        med = np.median(frac, axis=0)
        h = int(np.argmin(med))
        low = float(med[h])
        if not low < 1.0 / n_tok:
            return low, ""
        return low, (
            f"kept head {h} has a median predicted ESS/N of {low:.2g} at the target (below "
            f"1/N = {1.0 / n_tok:.2g}): over {n_tok} tokens its softmax is close to a hard "
            "maximum, which the Gaussian moment model need not describe (a hint, not a proof: "
            "such a head with a small V_h can leave the tokens near the moments)"
        )


def result_without(
    plan: Plan,
    base_layer: Layer,
    base: LinearizationSpectrum | None,
    family: str,
    status: Status,
    message: str,
) -> Stabilization:
    """A result with no extra designed (refused, proven infeasible, or out of time)."""
    return Stabilization(
        layer=base_layer,
        original=plan.layer,
        base_layer=base_layer,
        target=plan.target,
        family=family,
        rate=plan.rate,
        base=base,
        starts=tuple(g for _, g in plan.starts),
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - plan.clock},
        **_NO_DESIGN,
    )


def _reasons(ctx: ReportContext, checked: Checked, local: bool) -> tuple[list[str], float]:
    """Why the design is not certified (empty: it is), and the kept heads' ESS hint."""
    spec, tc, budget, rate = checked.spectrum, checked.tokens, ctx.budget, ctx.plan.rate
    reasons = []
    if spec.status is not Status.SUCCESS:
        reasons.append(f"the local certificate was not computed: {spec.message}")
    elif not local:
        reasons.append(
            f"the local certificate fails (spectral abscissa {spec.abscissa:.6g} > −{rate:g})"
        )
    for v in checked.verification:
        if not v.converged:
            reasons.append(f"the simulation from the {v.name} start did not converge: {v.message}")
    kept_ess = math.nan
    if checked.token_asked and tc is None and not checked.token_note:
        # asked for and never run (the budget was spent before its turn): not a pass
        reasons.append(f"the token check did not run: {budget.reason()}")
    if tc is not None and tc.status is Status.BUDGET_EXHAUSTED and budget.exhausted:
        # the run saw what was left of the call's time: name the call's limit
        reasons.append(f"the token check was cut short: {budget.reason()} ({tc.message})")
    elif tc is not None and not tc.success:
        reasons.append(f"the token check fails: {tc.message}")
        if not budget.exhausted:
            kept_ess, why = ctx.probes.kept_heads_ess()
            if why:
                reasons.append(why)
    return reasons, kept_ess


def _status(budget: Budget, checked: Checked, reasons: list[str]) -> Status:
    """``SUCCESS`` without a reason, else ``BUDGET_EXHAUSTED`` when time ran out, else
    ``FAILED``."""
    tc = checked.tokens
    spent = (
        budget.exhausted
        or any(v.status is Status.BUDGET_EXHAUSTED for v in checked.verification)
        or (tc is not None and tc.status is Status.BUDGET_EXHAUSTED)
    )
    return Status.SUCCESS if not reasons else (Status.BUDGET_EXHAUSTED if spent else Status.FAILED)


def _verified(checks: tuple[Verification, ...]) -> str:
    """The verifications' sentence: each start's final errors and basin distance."""
    return "; ".join(
        f"{v.name}: relative error {float(v.cov_error[-1]):.2g} (Σ), "
        f"{float(v.mean_error[-1]):.2g} (m) at T = {float(v.t[-1]):.4g}"
        + (
            f", distance {v.basin_distance:.3g} × the basin radius"
            if math.isfinite(v.basin_distance)
            else ""
        )
        for v in checks
    )


def _basin(radius: float, omega: float) -> str:
    """The basin certificate's sentence."""
    if math.isfinite(radius):
        return f"basin: ‖Σ*^(-1/2)(Σ0 − Σ*)Σ*^(-1/2)‖_F < {radius:.4g} converges (ω = {omega:.6g})"
    if math.isnan(radius):
        return f"no basin from the Σ*-Frobenius Lyapunov function (ω = {omega:.6g} ≥ 0)"
    return "every start in the ball converges"


def _message(
    plan: Plan,
    design: Design,
    certs: Certificates,
    checked: Checked,
    reasons: list[str],
    local: bool,
    change_fn: float,
    n_probe: int,
    residual: tuple[float, float],
) -> str:
    """The message: the design, then each certificate and check (after the reasons when the
    design is not certified)."""
    spec, rate = checked.spectrum, plan.rate
    parts = [
        design.what,
        f"local: spectral abscissa {spec.abscissa:.6g} ≤ −{rate:g} at the target, an "
        f"equilibrium of this layer to relative residuals {residual[0]:.2g} (Σ), "
        f"{residual[1]:.2g} (m) (the design's rounding bound {plan.residual_bound:.2g}; "
        "the verifications bound how far its exact equilibrium lies)"
        if local
        else reasons[0],
        certs.bound,
        _basin(certs.radius, design.omega),
        _verified(checked.verification),
        f"function change {change_fn:.3g} on {n_probe} probe tokens",
    ]
    if checked.token_note:
        parts.append(checked.token_note)
    if checked.tokens is not None:
        parts.append(f"tokens: {checked.tokens.message}")
    if checked.untouched is not None:
        parts.append(f"untouched layer's tokens: {checked.untouched.message}")
    head = "stabilized" if not reasons else "not certified: " + "; ".join(reasons)
    return head + "; " + "; ".join(part for part in parts if part)


def report(
    ctx: ReportContext,
    design: Design,
    base: LinearizationSpectrum,
    plan: CheckPlan,
    certs: Certificates,
    checked: Checked,
) -> Stabilization:
    """The :class:`~._result.Stabilization` of ``design`` from its certificates and checks."""
    p, spec = ctx.plan, checked.spectrum
    local = spec.status is Status.SUCCESS and spec.abscissa <= -p.rate
    # out of time, the result reports what was computed (the change takes a token
    # evaluation of the probe tokens, seconds at scale)
    change_fn = math.nan if ctx.budget.exhausted else ctx.probes.function_change(design.layer)
    reasons, kept_ess = _reasons(ctx, checked, local)
    status = _status(ctx.budget, checked, reasons)
    residual = _spectra.residual(p, design.layer)
    n_probe = len(ctx.probes.tokens())
    message = _message(p, design, certs, checked, reasons, local, change_fn, n_probe, residual)
    return Stabilization(
        layer=design.layer,
        original=p.layer,
        base_layer=ctx.base_layer,
        target=p.target,
        family=design.family,
        rate=p.rate,
        c=design.c,
        scale=design.scale,
        mean_shift=design.mean_shift,
        gains=None if design.gains is None else frozen(design.gains),
        change=design.change,
        base=base,
        spectrum=spec,
        local_certificate=local,
        global_certificate=certs.holds,
        global_bound=certs.bound,
        q=design.q,
        basin_radius=certs.radius,
        starts=tuple(g for _, g in p.starts),
        verification=checked.verification,
        function_change=change_fn,
        token_certificate=checked.tokens,
        untouched_tokens=checked.untouched,
        status=status,
        message=message,
        stats={
            "seconds": time.perf_counter() - p.clock,
            "matvecs": int(base.stats.get("matvecs", 0)) + int(spec.stats.get("matvecs", 0)),
            "active_dim": p.basis.shape[1],
            "kept_head_ess": kept_ess,
            "residual": residual,
            "residual_bound": p.residual_bound,
            **plan.stats,
        },
    )
