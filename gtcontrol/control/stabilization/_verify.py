"""The verifying simulations of one :func:`gtcontrol.stabilize` call (:class:`Verifier`).

Each start is simulated under the designed layer to the verification's depth (extended while a
default depth's error still falls); at the local minimum ``c`` a start first stops halfway and
ends there when it is stuck (not within the screens' tolerance and too slow to close the gap),
and the far start's first half runs alone before every other check
(:meth:`Verifier.first_segment`). A start near the target is integrated as its distance to the
target, whose error control follows the distance as it falls (:meth:`~._plan.Plan.near`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..._jobs import concurrently
from ..._linalg import FloatArray, sym
from ..._status import Budget, Status
from ..._validation import frozen
from ...errors import InvalidGaussianError
from ...model.field import moment_field
from ...model.gaussian import Gaussian
from ...model.moments import Trajectory, simulate
from ...model.params import Layer
from .._design_kernel import scaled_norm
from ._head import SCREEN_TOL
from ._plan import Plan
from ._result import VERIFY_RTOL, CheckPlan, Verification
from ._tokens import TokenRuns

__all__ = ["Verifier"]

#: Relative tolerance of the verifying integration: the flow contracts near the target, so the
#: global error stays far below the 1e-6 required (tests/control/test_stabilize.py compares with
#: a 1e-10 integration); not 1e-6, which is cheaper but brings the error floor that the factor's
#: rotation at the equilibrium carries too close to what is verified (docs/benchmarks.md).
_VERIFY_INTEGRATOR_RTOL = 1e-7
#: Its absolute tolerance, on the factor normalized to unit Frobenius norm (and the mean over
#: its scale): ``1e-4`` of the ``1e-6`` verified, so that entries far below the factor's scale,
#: which cannot move the verified error, do not set the step (docs/benchmarks.md).
_VERIFY_INTEGRATOR_ATOL = 1e-10
#: Seconds the far start's first half waits for the given layer's background token run to
#: end before it starts (:meth:`Verifier.first_segment`): alone it gets every core's BLAS
#: threads, a gain larger than this wait; a run that goes the whole depth (a layer whose tokens
#: stay near the target) is not waited for (docs/benchmarks.md).
_BACKGROUND_WAIT = 3.0
#: A default depth is extended by this many e-folds at a time while the error still falls, up
#: to this multiple of the depth.
_EXTEND_EFOLDS = 3.0
_EXTEND_MAX = 2.0
#: A start near the target is integrated as its distance to it (``simulate(around=)``) by
#: RK45 at this relative and absolute tolerance, both relative to the distance's own size: it
#: falls from 0.1 to 1e-10 while the moments stand still, and the factor form's steps, set by
#: Σ's scale, are more than it needs (docs/benchmarks.md).
_DEVIATION_TOL = 1e-4
_DEVIATION_METHOD = "RK45"


@dataclass
class _Run:
    """A verifying integration's segments joined: depths, means and covariances, the last
    segment's trajectory, why it stopped halfway (``""``: it did not), its form and its
    evaluations."""

    form: str
    t_parts: list[FloatArray] = field(default_factory=list)
    means: list[FloatArray] = field(default_factory=list)
    covs: list[FloatArray] = field(default_factory=list)
    last: Trajectory | None = None
    stopped: str = ""
    nfev: int = 0

    @property
    def end(self) -> float:
        return float(self.t_parts[-1][-1]) if self.t_parts else 0.0

    def add(self, offset: float, traj: Trajectory, skip: int) -> None:
        self.t_parts.append(offset + np.asarray(traj.t, dtype=float)[skip:])
        self.means += list(traj.mean[skip:])
        self.covs += list(traj.cov[skip:])

    def errors(self, plan: Plan) -> tuple[FloatArray, FloatArray]:
        """Relative errors of the covariances and the means to the target."""
        cov_ref, mean_ref = scaled_norm(plan.target.cov), plan.mean_ref()
        cov_err = np.array([scaled_norm(c - plan.target.cov) / cov_ref for c in self.covs])
        mean_err = np.array([scaled_norm(m - plan.target.mean) / mean_ref for m in self.means])
        return cov_err, mean_err


class Verifier:
    """The verifying simulations of one call: its plan, its budget, and its token runs (the
    far start's first half waits briefly for the background one)."""

    def __init__(self, plan: Plan, budget: Budget, tokens: TokenRuns) -> None:
        self.plan = plan
        self.budget = budget
        self.tokens = tokens

    def verify(
        self,
        final: Layer,
        name: str,
        g0: Gaussian,
        t_end: float,
        radius: float,
        inv_root: FloatArray,
        *,
        extend: bool,
        plan: CheckPlan,
        first: Trajectory | None = None,
    ) -> Verification:
        """Simulate ``final`` from ``g0`` to ``t_end`` (extended while a default depth's error
        still falls). With ``plan.screen_at < t_end`` the integration first stops there, and
        ends unconverged when :meth:`stuck` says so. ``first``: that first segment, already
        integrated (:meth:`first_segment`).

        A start near the target (:meth:`Plan.near`) is integrated as its distance to the target
        (``simulate(around=)``), whose error control follows the distance as it falls; a
        verdict other than converged is then taken again in factor form, so that only a
        converged run rests on the distance form."""
        near = self.plan.near(g0) if first is None else first.stats.get("form") == "deviation"
        for around in [True, False] if near else [False]:
            run = self.trajectory(
                final, g0, t_end, extend=extend, plan=plan, first=first, around=around
            )
            first = None  # a verdict taken again starts afresh
            cov_err, mean_err = run.errors(self.plan)
            converged = cov_err[-1] <= VERIFY_RTOL and mean_err[-1] <= VERIFY_RTOL
            if converged or self.budget.exhausted:
                break
        return self.verdict(final, name, g0, run, t_end, radius, inv_root)

    def trajectory(
        self,
        final: Layer,
        g0: Gaussian,
        t_end: float,
        *,
        extend: bool,
        plan: CheckPlan,
        first: Trajectory | None,
        around: bool,
    ) -> _Run:
        """The verifying integration's segments, joined: to ``plan.screen_at`` first when the
        start is verified halfway (ending there when :meth:`stuck`), then to ``t_end``, then
        extended by ``_EXTEND_EFOLDS`` at a time while a default depth's error still falls."""
        screen_at, rate = plan.screen_at, plan.design_rate
        run = _Run(form="deviation" if around else "factor")
        halfway = self.plan.halfway(g0, t_end, screen_at)
        start, offset = g0, 0.0
        span, points = (screen_at, 17) if halfway and screen_at is not None else (t_end, 33)
        while True:
            if first is not None:
                traj, first = first, None
            else:
                traj = self.segment(final, start, span, points, around=around)
            run.nfev += int(traj.stats.get("nfev", 0))
            run.last = traj  # its status ends the run, whether or not it recorded a step
            skip = 0 if offset == 0.0 else 1  # a continuation's first point is the last one
            if len(traj.t) <= skip:  # stopped (out of time) before its first step
                break
            run.add(offset, traj, skip)
            errs = [
                self.plan.relative_error(m, c)
                for m, c in zip(run.means[-2:], run.covs[-2:], strict=True)
            ]
            offset = run.end
            if traj.status is not Status.SUCCESS or self.budget.exhausted:
                break
            if halfway:  # the first segment ended halfway
                halfway = False
                run.stopped = self.stuck(final, run.means[-1], run.covs[-1], offset, t_end, extend)
                if run.stopped:
                    break
                span, points = t_end - offset, 17
            # A default depth is extended while the flow still closes in: the certified rate
            # holds near the target, and a far start's transient can be slower.
            elif extend and VERIFY_RTOL < errs[-1] < errs[0] and offset < _EXTEND_MAX * t_end:
                span, points = _EXTEND_EFOLDS / (rate or self.plan.rate), 9
            else:
                break
            try:
                start = Gaussian(run.means[-1], run.covs[-1], name="the verification's end state")
            except InvalidGaussianError:
                break
        return run

    def verdict(
        self,
        final: Layer,
        name: str,
        g0: Gaussian,
        run: _Run,
        t_end: float,
        radius: float,
        inv_root: FloatArray,
    ) -> Verification:
        """The :class:`Verification` of a joined run: its errors, ``λ_max``, and in words how
        it ended (extended, stuck, still moving or settled elsewhere)."""
        traj = run.last
        assert traj is not None  # a run's first segment always records its start
        cov_err, mean_err = run.errors(self.plan)
        lam = np.array([float(np.linalg.eigvalsh(sym(c))[-1]) for c in run.covs])
        message = traj.message + run.stopped
        if run.end > t_end * (1.0 + 1e-12):
            message += (
                f"; the default depth {t_end:.4g} was extended to {run.end:.4g} while the error "
                "still fell (the start's transient is slower than the certified rate)"
            )
        if traj.status is Status.SUCCESS and not (
            cov_err[-1] <= VERIFY_RTOL and mean_err[-1] <= VERIFY_RTOL
        ):
            message += "; " + self.settled(final, run.means[-1], run.covs[-1], cov_err, mean_err)
            gap = self.plan.rank_gap(g0)
            if gap:
                message += f" ({gap})"
        dist = scaled_norm(
            inv_root @ (self.plan.basis.T @ g0.cov @ self.plan.basis - self.plan.s_act) @ inv_root
        )
        ratio = dist / radius if radius > 0 and math.isfinite(radius) else math.nan
        return Verification(
            name=name,
            t=frozen(np.concatenate(run.t_parts)),
            lam_max=frozen(lam),
            cov_error=frozen(cov_err),
            mean_error=frozen(mean_err),
            status=traj.status,
            message=message,
            stats={"form": run.form, "nfev": run.nfev},
            basin_distance=ratio,
        )

    def segment(
        self, final: Layer, start: Gaussian, span: float, points: int, *, around: bool = False
    ) -> Trajectory:
        """One segment of a verifying simulation, within what is left of the budget: in factor
        form, or (``around``) as the distance to the target."""
        if around:
            return simulate(
                final,
                start,
                span,
                n_points=points,
                method=_DEVIATION_METHOD,
                rtol=_DEVIATION_TOL,
                atol=_DEVIATION_TOL,
                time_limit=self.budget.left_as_limit(),
                around=self.plan.target,
            )
        return simulate(
            final,
            start,
            span,
            n_points=points,
            rtol=_VERIFY_INTEGRATOR_RTOL,
            atol=_VERIFY_INTEGRATOR_ATOL,
            time_limit=self.budget.left_as_limit(),
        )

    def stuck(
        self,
        final: Layer,
        mean: FloatArray,
        cov: FloatArray,
        offset: float,
        t_end: float,
        extend: bool,
    ) -> str:
        """Why a verification halfway at depth ``offset``, at ``N(mean, cov)``, stops there
        (``""``: it goes on). Stuck: not within the screens' ``SCREEN_TOL``, and at its speed
        there the gap would not close in the depth left to the verification. A start that
        still closes in goes on, however slowly (random-init ViT layer 4, text target, at the
        local minimum: 0.012 halfway, 1.4e-7 at the depth extended from 16.8 to 19.8)."""
        err = self.plan.relative_error(mean, cov)
        left = (_EXTEND_MAX if extend else 1.0) * t_end - offset
        speed = self.plan.speed(final, mean, cov)
        if err > SCREEN_TOL and err > speed * left:
            return (
                f"; stopped at depth {offset:.4g}, half the verification depth "
                f"{t_end:.4g}: relative error {err:.3g} > {SCREEN_TOL:g}, and at "
                f"its relative speed there ({speed:.2g}) the gap would take a depth of "
                f"{err / speed if speed > 0 else math.inf:.3g} to close, more than "
                f"the {left:.4g} left"
            )
        return ""

    def first_segment(self, final: Layer, screen_at: float) -> tuple[int, Trajectory, str] | None:
        """The far start's verification to ``screen_at`` under ``final`` (the layer at the
        local minimum ``c``), before any other check and alone on every core (beside the given
        layer's token run only if that outlasts ``_BACKGROUND_WAIT``): the start's index, the
        segment, and :meth:`stuck`'s sentence (``""``: it goes on).

        At the local minimum a far start can settle at another equilibrium, and then every
        other check at that ``c`` is wasted: ``c`` grows (``_head.head_family``). Alone, with
        every core's BLAS threads, the segment ends well before it would beside those checks
        (docs/benchmarks.md). A start that goes on continues from this segment in
        :func:`~._checks.finish`, so its verification is the same as without this step.
        ``None`` when there is no such segment: no start verified halfway, or nothing else to
        run beside it."""
        t_end = self.plan.depth if self.plan.depth is not None else self.plan.default_depth()
        far = [
            i
            for i, (_, g0) in enumerate(self.plan.starts)
            if self.plan.halfway(g0, t_end, screen_at)
        ]
        if not far or (len(self.plan.starts) == 1 and self.plan.n_tok is None):
            return None
        i = max(far, key=lambda j: self.plan.start_error(self.plan.starts[j][1]))
        if self.tokens.in_background(self.plan.token_key()):
            # the given layer's tokens usually leave soon after the spectrum, and then the
            # segment gets every core's BLAS threads; a run still going after _BACKGROUND_WAIT
            # goes on beside it, on one thread each
            self.tokens.wait(_BACKGROUND_WAIT)
        g0 = self.plan.starts[i][1]
        around = self.plan.near(g0)
        traj = concurrently(
            [functools.partial(self.segment, final, g0, screen_at, 17, around=around)],
            alone=not self.tokens.running(),
            parallel=self.plan.parallel,
        )[0]
        if traj.status is not Status.SUCCESS or self.budget.exhausted:
            return i, traj, ""
        end = float(traj.t[-1])
        return (
            i,
            traj,
            self.stuck(final, traj.mean[-1], traj.cov[-1], end, t_end, self.plan.depth is None),
        )

    def settled(
        self,
        final: Layer,
        mean: FloatArray,
        cov: FloatArray,
        cov_err: FloatArray,
        mean_err: FloatArray,
    ) -> str:
        """Why a verification that ended is not within ``1e-6``: still moving, or
        settled at another equilibrium (the field's relative size there is the evidence)."""
        dm, ds = moment_field(final, mean, cov)
        speed = max(
            scaled_norm(ds) / max(scaled_norm(cov), 1e-300),
            scaled_norm(dm) / self.plan.mean_ref(),
        )
        far = max(float(cov_err[-1]), float(mean_err[-1]))
        if speed <= 1e-6 * self.plan.rate:
            return (
                f"it settled at another equilibrium: relative speed {speed:.2g} there, at "
                f"relative distance {far:.3g} from the target (the target attracts locally "
                "but not from this start)"
            )
        return (
            f"still moving there (relative speed {speed:.2g}, error {far:.3g}: at that "
            f"speed the gap takes a depth of {far / speed:.2g} more to close)"
        )
