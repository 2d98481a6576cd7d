"""The checks of one design of :func:`gtcontrol.stabilize` (:func:`finish`), in three steps.

1. :func:`certificates`: the analytic ones, from the design's numbers: the global bound
   (``c > q``) and the basin radius ``−ω/β``;
2. :func:`check_jobs`: the independent jobs: one verifying simulation per start, the token runs
   (the stabilized layer's, and the given layer's unless it runs in the background) and, when
   the design has none, the spectrum;
3. :func:`run_checks`: the jobs, concurrently (:func:`~gtcontrol._jobs.concurrently`), and what
   they found.

:func:`~._report.report` turns the three into the result.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..._jobs import concurrently, in_turn
from ..._linalg import FloatArray, spd_sqrt_pair, sym
from ..._status import Budget, Status
from ...analysis.stability import LinearizationSpectrum
from ...model.params import Layer
from ..design import TokenCertificate
from . import _spectra
from ._plan import Plan
from ._report import Certificates, Checked, Probes, report
from ._result import CheckPlan, Design, Stabilization, Verification
from ._tokens import TokenRuns
from ._verify import Verifier

__all__ = ["CheckContext", "certificates", "check_jobs", "finish", "run_checks"]

#: float64's machine epsilon (rounding bounds of the certificates).
_EPS = float(np.finfo(np.float64).eps)


class CheckContext(Protocol):
    """What the checks need of one :func:`gtcontrol.stabilize` call."""

    plan: Plan
    budget: Budget
    base_layer: Layer
    tokens: TokenRuns
    verifier: Verifier
    probes: Probes


@dataclass(frozen=True)
class Jobs:
    """The independent checks of one design, before they run.

    Attributes
    ----------
    jobs
        One verification per start (in the starts' order), then the stabilized layer's token
        check and the given layer's token run (unless it runs in the background or was not
        asked for, ``untouched_tokens=False``).
    spectrum
        The design's spectrum, or ``None`` when the job at ``near`` computes it first.
    near
        The job that computes the spectrum (``-1``: none).
    given
        The given layer's token run (count and depth), ``None`` without a token check.
    in_background
        Whether that run is the background one.
    stuck
        Set when a start's verification ends unconverged at the local minimum ``c``.
    """

    jobs: list[Callable[[], Any]]
    spectrum: LinearizationSpectrum | None
    near: int
    given: tuple[int, float] | None
    in_background: bool
    stuck: threading.Event | None


def finish(
    ctx: CheckContext,
    design: Design,
    base: LinearizationSpectrum,
    plan: CheckPlan | None = None,
) -> Stabilization:
    """The checks of ``design`` and its result, run as ``plan`` says (:class:`CheckPlan`:
    the gains family and a first design pass none). The default depths of the given
    layer's tokens do not follow ``plan.design_rate``: that run is kept across designs.

    A design without its spectrum (the gains family; the head family on a dense base, or
    where the shift identity failed) gets it here, as one more job beside the verifying
    simulations, started from the base's rightmost mode: it runs before the verification
    of the start nearest the target, in the same thread, while the far start's longer one
    takes the other core (or the token run does); before the verification when that is
    the only job.
    """
    plan = CheckPlan() if plan is None else plan
    certs = certificates(ctx.plan, design)
    jobs = check_jobs(ctx, design, base, plan, certs)
    checked = run_checks(ctx, jobs, design, base)
    return report(ctx, design, base, plan, certs, checked)


def global_level(r: int, a: float, gamma: float, gap: float) -> float:
    """The level of the global bound: ``φ = tr(Σ*⁻¹Σ)`` obeys ``dφ/dt ≤ 2aφ − 2(c − q)φ²/r + γ``
    (``γ = tr(Σ*⁻¹GGᵀ)``, the noise's constant push; docs/theory.md, "A global bound"), whose
    right side is negative above its larger root ``r(a + √(a² + 2(c − q)γ/r)) / (2(c − q))``:
    ``r a⁺/(c − q)`` without noise."""
    return r * (a + math.sqrt(a * a + 2.0 * gap * gamma / r)) / (2.0 * gap)


def certificates(plan: Plan, design: Design) -> Certificates:
    """The global bound (``c > q``, beyond the rounding of ``q``) and the basin radius
    ``−ω/β``, ``β = 2(q + c)``, of ``design``."""
    q, omega = design.q, design.omega
    c_eff = design.c if design.c > 0 else 0.0
    root, inv_root = spd_sqrt_pair(plan.s_act)
    a_r = plan.basis.T @ design.layer.affine_ffn()[0] @ plan.basis
    a_top = float(np.linalg.eigvalsh(sym(inv_root @ a_r @ root))[-1])
    r = plan.basis.shape[1]
    # q is a sum of rounded 2-norms in Σ*-scaled coordinates: c must beat its rounding too
    kappa = float(np.linalg.cond(plan.s_act))
    holds = c_eff > q * (1.0 + 8.0 * r * _EPS * kappa)
    if holds:
        level = global_level(r, a_top, plan.noise_trace(), c_eff - q)
        bound = (
            f"global: c = {c_eff:.6g} > q = {q:.6g}, so for every Σ0 ⪰ 0 "
            f"tr(Σ*⁻¹Σ(t)) ≤ max(tr(Σ*⁻¹Σ0), {level:.6g}): no blow-up from any start"
        )
    else:
        bound = (
            f"no global bound: the added quadratic term (c = {c_eff:.6g}) does not dominate "
            f"the kept heads' (q = {q:.6g}); c > q would give one"
        )
    beta = 2.0 * (q + c_eff)
    radius = (-omega / beta if beta > 0 else math.inf) if omega < 0 else math.nan
    return Certificates(holds=holds, bound=bound, radius=radius, inv_root=inv_root)


def _flagging(flag: threading.Event, verify: Callable[[], Verification]) -> Verification:
    """``verify()``, setting ``flag`` as soon as it ends unconverged (its start failed)."""
    check = verify()
    if check.status is Status.SUCCESS and not check.converged:
        flag.set()
    return check


def _verifications(
    ctx: CheckContext, design: Design, plan: CheckPlan, certs: Certificates, t_end: float
) -> list[Callable[[], Any]]:
    """One verifying simulation per start; at the local minimum ``c`` (``plan.screen_at``)
    each sets ``stuck`` when it ends unconverged."""
    first = plan.first
    return [
        functools.partial(
            ctx.verifier.verify,
            design.layer,
            name,
            g0,
            t_end,
            certs.radius,
            certs.inv_root,
            extend=ctx.plan.depth is None,
            plan=plan,
            first=first[1] if first is not None and first[0] == i else None,
        )
        for i, (name, g0) in enumerate(ctx.plan.starts)
    ]


def check_jobs(
    ctx: CheckContext,
    design: Design,
    base: LinearizationSpectrum,
    plan: CheckPlan,
    certs: Certificates,
) -> Jobs:
    """The independent checks of ``design`` (:class:`Jobs`): the verifying simulations and
    the token runs share the cores; a missing spectrum runs first, here when it is alone,
    else in turn with the verification of the start nearest the target."""
    p, rate = ctx.plan, ctx.plan.rate
    t_end = p.depth if p.depth is not None else p.default_depth(rate=plan.design_rate)
    # At the local minimum c a start whose verification ends unconverged (halfway, when it
    # fails the screens' test there) fails this design, and c grows (the head family's
    # ladder) when the local certificate holds: the stabilized tokens at this c are then not
    # needed, and their run stops.
    stuck = threading.Event() if plan.screen_at is not None else None
    jobs = _verifications(ctx, design, plan, certs, t_end)
    if stuck is not None:
        # a start singular on the active subspace never converges, and c does not grow for
        # it (Plan.rank_gap): its verification does not stop the tokens
        jobs = [
            job if p.rank_gap(g0) else functools.partial(_flagging, stuck, job)
            for job, (_, g0) in zip(jobs, p.starts, strict=True)
        ]
    given = p.token_key()
    # the given layer's tokens (the same at every c): a job here unless already running
    background = ctx.tokens.in_background(given)
    if p.n_tok is not None and given is not None:
        t_tok = p.token_depth(plan.design_rate)
        jobs.append(functools.partial(ctx.tokens.check, design.layer, p.n_tok, t_tok, stuck))
        if not background and p.untouched:
            jobs.append(functools.partial(ctx.tokens.untouched, *given))
    spec, near = design.spectrum, -1
    if spec is not None and (
        spec.status is Status.FAILED
        or (spec.status is Status.SUCCESS and not spec.abscissa <= -rate)
    ):
        # the local certificate already fails (a design at the edge of float64's range):
        # no check could make this design certified
        jobs, given = [], None
    if spec is None and len(jobs) == 1:
        # first, here: a job alone gets every core's BLAS threads, and the Krylov products
        # are faster on the caller's one (docs/benchmarks.md)
        spec = _own_spectrum(ctx, design, base)()
    elif spec is None:
        near = min(range(len(p.starts)), key=lambda i: p.start_error(p.starts[i][1]))
        jobs[near] = functools.partial(in_turn, _own_spectrum(ctx, design, base), jobs[near])
    return Jobs(jobs, spec, near, given, background, stuck)


def _own_spectrum(
    ctx: CheckContext, design: Design, base: LinearizationSpectrum
) -> Callable[[], LinearizationSpectrum]:
    """The job of the design's spectrum, from the base's rightmost mode."""
    v0: FloatArray | None = _spectra.start_vector(ctx.plan, base)
    return functools.partial(
        _spectra.spectrum, ctx.plan, ctx.budget, design.layer, omega=False, k=1, v0=v0
    )


def run_checks(
    ctx: CheckContext, jobs: Jobs, design: Design, base: LinearizationSpectrum
) -> Checked:
    """Run ``jobs`` concurrently and sort what they found (:class:`~._report.Checked`)."""
    done = concurrently(jobs.jobs, alone=not ctx.tokens.running(), parallel=ctx.plan.parallel)
    spec = jobs.spectrum
    if spec is None:
        spec, done[jobs.near] = done[jobs.near]
    n_starts = len(ctx.plan.starts) if done else 0
    checks: list[Verification] = done[:n_starts]
    tc: TokenCertificate | None
    untouched: TokenCertificate | None
    tc, untouched = None, None
    if jobs.given is not None:
        tc = done[n_starts]
        if jobs.in_background:
            untouched = ctx.tokens.untouched(*jobs.given)
        elif ctx.plan.untouched:
            untouched = done[n_starts + 1]
    token_note = ""
    if jobs.stuck is not None and jobs.stuck.is_set() and tc is not None and not tc.success:
        # stopped (or failed) beside a start that failed its screen: c grows
        token_note = (
            "tokens: not checked to the end at this c, where a start's verification ended "
            f"unconverged (stopped at depth {tc.T:.4g}: {tc.message})"
        )
        tc = None
    return Checked(
        spectrum=spec,
        verification=tuple(checks),
        tokens=tc,
        untouched=untouched,
        token_note=token_note,
        token_asked=jobs.given is not None,
    )
