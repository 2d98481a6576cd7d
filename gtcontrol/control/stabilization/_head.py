"""The added-head family of :func:`gtcontrol.stabilize`: one Riccati-class head ``(−cI, Σ*⁻¹)``.

With ``A → A + cP`` the added head keeps the equilibrium and shifts the covariance
linearization by exactly ``−2c`` (docs/theory.md, "Stability of a prescribed equilibrium"), so
the smallest ``c`` of the local certificate is closed-form, ``c_loc = max(0, (α(L) + ρ)/2)``.
This module designs the head around it:

* **the token gauge** ``(sV₀, B₀/s)`` (:func:`_token_scale`) and a uniform companion head
  ``(κP, 0)`` that leaves the mean matrix shifted by exactly the ``σ`` it needs;
* **the ladder.** At ``c_loc`` a far start can settle at another equilibrium. Its first half
  runs alone before any other check (:meth:`HeadContext.first_segment`); when it settles
  elsewhere, ``c`` doubles until a screen passes and bisects to a factor ``2^(1/8)``
  (:func:`_smallest_verified_c`), and every check runs at the ``c`` chosen;
* **the token-valid design rate**, doubled while only the token check fails
  (:func:`_token_valid`).

The checks themselves (verifying simulations, token runs, certificates) are the caller's
(:class:`HeadContext`, implemented by :class:`~._call.Call`). The design of one call is a
:class:`_HeadDesign` (the gauge and what every ``c`` shares); :func:`_ladder` runs its steps.

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from ..._jobs import concurrently
from ..._linalg import FloatArray, psd_sqrt
from ..._status import Budget, Status
from ..._validation import MAX_ENTRY
from ...analysis._subspace import reduced_layer
from ...analysis.stability import LinearizationSpectrum
from ...model.gaussian import Gaussian
from ...model.moments import Trajectory, simulate
from ...model.params import Layer
from .._design_kernel import RATE_MARGIN, quadratic_growth, scaled_norm
from ._plan import Plan
from ._report import result_without
from ._result import CheckPlan, Design, Stabilization

__all__ = ["SCREEN_TOL", "HeadContext", "head_family"]

#: The screens that choose ``c`` when a start's verification fails at the local minimum
#: (:func:`_smallest_verified_c`): doublings, then geometric bisections (a bracket
#: ``[f, 2f]`` narrows to a factor ``2^(1/8) ≈ 1.09``); each screen integrates the starts that
#: failed to half the default verification depth at ``_SCREEN_RTOL`` and passes at relative error
#: ``≤ SCREEN_TOL``: a start that converges is far below it by then at the certified rate
#: (``e^{-ρT/2}``, ``ρT ≥ 17``), one that settled elsewhere far above. The screens keep
#: simulate's DOP853: RK45 is cheaper on stiff real layers, but its global error at the same rtol
#: can fail a screen that DOP853 passes (docs/benchmarks.md).
_C_DOUBLINGS = 6
_C_BISECTIONS = 3
#: Doublings of the design rate while only the token check fails
#: (:func:`_token_valid`).
_TOKEN_DOUBLINGS = 3
_SCREEN_RTOL = 1e-3
#: Absolute tolerance of the screens, on the factor normalized to unit Frobenius norm (and the
#: mean over its scale): ``1e-3`` of ``_SCREEN_RTOL``, so that entries far below the factor's
#: scale, which cannot move the screen's relative error, do not set the step
#: (docs/benchmarks.md).
_SCREEN_ATOL = 1e-6
SCREEN_TOL = 1e-2
#: The added head keeps ``ESS/N ≥ min_ess`` for all but ``exp(−n²/2)`` of the queries, ``n``
#: this, and a typical token's own logit within ``_OWN_LOGIT`` of a typical key's at the target
#: (:func:`_token_scale`).
_ESS_N_STD = 3.0
_OWN_LOGIT = 1.0
#: Share of the entry bound left to the added head at the local minimum ``c``: the ladder
#: grows ``c`` up to 64 times, and three doublings of the design rate (:func:`_fitted_scale`).
_ENTRY_ROOM = 1e-4
#: Largest rounding of the mean matrix by the gauge, ``eps·s·c``, relative to the rate, at
#: the local minimum ``c``: it moves the float layer's mean equilibrium by about that much
#: (relative), and the ladder may grow ``c`` 64 times, against the 1e-6 of the verification.
_MEAN_PRECISION = 1e-10


class HeadContext(Protocol):
    """What the head family needs of one :func:`gtcontrol.stabilize` call: the plan, its
    budget, and the checks of a design."""

    plan: Plan
    budget: Budget

    def fix_bias(self, layer: Layer) -> Layer: ...

    def spectrum(
        self, layer: Layer, *, omega: bool, k: int = 6, v0: FloatArray | None = None
    ) -> LinearizationSpectrum: ...

    def shifted(
        self, layer: Layer, base_layer: Layer, base: LinearizationSpectrum, shift: float
    ) -> LinearizationSpectrum | None: ...

    def start_vector(self, spec: LinearizationSpectrum) -> FloatArray | None: ...

    def function_change(self, final: Layer) -> float: ...

    def background_running(self) -> bool: ...

    def first_segment(
        self, final: Layer, screen_at: float
    ) -> tuple[int, Trajectory, str] | None: ...

    def finish(
        self, design: Design, base: LinearizationSpectrum, plan: CheckPlan | None = None
    ) -> Stabilization: ...


def _added_tilts(ctx: HeadContext) -> list[FloatArray]:
    """The added head's ``B₀ = Σ*⁺``, and ``Σ*⁺(I − C)``: its query centred on ``m*``.

    The softmax tilt of a query ``x`` is ``u = B₀x``, and ``ESS/N = exp(−uᵀΣu)`` falls
    with ``|x|`` in Σ*'s metric, mean included: a data target with ``|Σ*^{-½}m*| ≫ 1``
    needs a large token gauge ``s``, which multiplies the head's mean contraction
    (``−scI``) into a stiff mean flow and a large change of the layer's function. Where
    the layer has frozen directions on which the target mean is ``f ≠ 0`` (an extracted
    layer's affine coordinate), ``C = (Pm*) fᵀ/|f|²`` gives ``Cx = Pm*`` on every token
    (their frozen part is ``f``), so ``u = Σ*⁺(x − m*)`` there: a query bias. ``C`` acts
    only through frozen directions, which carry no variance, so the covariance dynamics
    and the mean matrix on the active subspace are unchanged; only the mean's constant
    term moves, and ``b`` absorbs it at the equilibrium. Centring helps when the starts lie
    near the target and hurts for a start far from ``m*`` (the identity start of a data
    target), so :func:`head_family` takes the tilt with the smaller gauge.
    """
    b0: FloatArray = ctx.plan.basis @ np.linalg.inv(ctx.plan.s_act) @ ctx.plan.basis.T
    mean = ctx.plan.target.mean
    f = mean - ctx.plan.proj @ mean
    pm = ctx.plan.proj @ mean
    size = float(f @ f)
    if size <= (1e-12 * max(float(np.linalg.norm(mean)), 1.0)) ** 2 or not np.any(pm):
        return [b0]
    return [b0, b0 - np.outer(b0 @ pm, f) / size]


def _token_scale(ctx: HeadContext, b0: FloatArray) -> float:
    """The added head's token gauge: the smallest ``s ≥ 1`` for which its softmax is near
    linear in two senses: its predicted ESS is at least ``min_ess`` for all but a
    ``e^{−n²/2}`` share of the queries of the target and of every start (``n`` =
    ``_ESS_N_STD``), and a typical token's own logit at the target, where the tokens
    settle, is within 1 of a typical key's.

    *Predicted ESS.* A query ``x = m + Σ^{1/2}z`` of ``N(m, Σ)`` has tilt ``u = B₀x/s``
    and ``uᵀΣu = |Rm + Wz|²/s²``, ``R = Σ^{1/2}B₀``, ``W = RΣ^{1/2}``. ``z ↦ |Wz|`` is
    ``‖W‖₂``-Lipschitz with mean at most ``‖W‖_F``, so by Gaussian concentration ``|Rm +
    Wz| ≤ |Rm| + ‖W‖_F + n‖W‖₂``, and ``ESS/N = exp(−uᵀΣu) ≥ min_ess`` needs ``s`` at least
    that over ``√ln(1/min_ess)``. The Frobenius term is what a typical query carries in
    high dimension (``√r`` for ``B₀ = Σ*⁻¹`` on an ``r``-dimensional target).

    *The token's own logit.* Over ``N`` tokens a query is also a key, and its own logit exceeds
    a typical key's by ``δ = (x − m)ᵀB₀x/s = (zᵀWz + zᵀRm)/s``, about ``r/s``: the predicted ESS
    above says nothing of it. Where ``δ ≫ 1`` every token attends to itself, and the head's
    value ``−scI`` drives each token at rate ``sc`` towards the others: a collapse in the first
    instants of depth and a stiff token field, far from the moments. With ``|δ| ≤ 1`` the
    softmax is close to its first-order expansion ``w_ij ≈ (1 + l_ij − l̄_i)/N``, under which
    the head moves the tokens as the moment model moves ``N(m, Σ)``, with the tokens' own
    empirical covariance for ``Σ`` (``−sc·x̄ − cΣ̂B₀x_i``, the ``−sc·x̄`` cancelled by the
    companion): no finite-N bias of its own. The mean of ``δ`` over the queries is
    ``tr W / s`` (``zᵀRm`` has mean 0), so ``s ≥ tr W`` keeps a typical token's own logit
    within 1 of a typical key's; its spread, ``√2‖W‖_F`` and ``|Rm|`` over ``s``, is smaller in
    high dimension. A tail bound instead (Laurent and Massart's
    ``zᵀWz ≤ tr W + √2 n‖W‖_F + n²‖W‖₂`` but for ``e^{−n²/2}``) makes ``s`` twice as large in low
    dimension, where the typical ``δ`` is already below 1, and a small layer's token run then
    reaches its evaluation cap. Only the target, where the tokens settle, enters this bound: a
    far start (the identity start of a data target, ``tr W = tr Σ*⁻¹``) would ask a gauge an
    order larger, under which the tokens did worse, not better (why, this rule does not
    explain). The measurements behind each choice: docs/benchmarks.md.
    """
    rho_req = math.sqrt(math.log(1.0 / ctx.plan.min_ess))
    s = 1.0
    for g in [ctx.plan.target] + [g for _, g in ctx.plan.starts]:
        root = psd_sqrt(g.cov)
        rb = root @ b0
        w = rb @ root
        w_f, w_2 = scaled_norm(w), float(np.linalg.norm(w, 2))
        rm = scaled_norm(rb @ g.mean)
        s = max(s, (rm + w_f + _ESS_N_STD * w_2) / rho_req)
        if g is ctx.plan.target:
            s = max(s, float(np.trace(w)) / _OWN_LOGIT)
    return (1.0 + 1e-9) * s


def _fitted_scale(s: float, b0: FloatArray, size: float, rate: float) -> tuple[float, str, str]:
    """The token gauge ``s`` moved, if needed, into the range where the added head ``(−scP,
    B₀/s)`` and its companion ``((sc − σ)P, 0)`` are faithful in float64; ``size`` is the
    larger of ``c`` and the mean's shift ``σ``. Returns ``s``, a note when it moved, and a
    sentence when no gauge fits (else ``""``).

    * ``s ≥ |B₀| / (room · MAX_ENTRY)``: ``B₀/s`` within a layer's entry bound;
    * ``s · size ≤ room · MAX_ENTRY``: the head's value and the companion within it;
    * ``s · size ≤ 1e-10 ρ / eps``: the two heads' mean terms, ``∓sc·m``, cancel to ``−σm``,
      and their rounding, ``eps·s·c`` of the mean matrix, must stay far below the rate (a
      gauge of ``1e10`` moved the float layer's mean equilibrium by a relative ``1e-5``).

    ``room`` (``_ENTRY_ROOM``) leaves ``c`` room to grow. A target scale far from 1, or a start
    far from the target in ``Σ*``'s metric, asks ``s`` beyond these; the gauge leaves the moment
    model unchanged, and only the predicted ESS of the head's softmax (the token check) may
    then fall short, which the note says.
    """
    low = float(np.max(np.abs(b0))) / (_ENTRY_ROOM * MAX_ENTRY)
    top = min(_ENTRY_ROOM * MAX_ENTRY, _MEAN_PRECISION * rate / float(np.finfo(float).eps))
    high = top / size if size > 0 else math.inf
    if low > high:
        return (
            s,
            "",
            (
                f"no token gauge s fits the added head in float64: B = Σ*⁻¹/s needs s ≥ {low:.3g} "
                f"(|Σ*⁻¹| up to {low * _ENTRY_ROOM * MAX_ENTRY:.3g} against the entry bound "
                f"{MAX_ENTRY:g}), and the mean's rounding (eps·s·c beside the rate) needs "
                f"s ≤ {high:.3g}"
            ),
        )
    fitted = min(max(s, low), high)
    if fitted == s:
        return s, "", ""
    why = (
        "so the predicted ESS/N of its softmax may fall below min_ess"
        if fitted < s
        else "a larger gauge only raises the predicted ESS/N"
    )
    return (
        fitted,
        (
            f" (the ESS rule asks s = {s:.4g}; moved into the range where the head is faithful "
            f"in float64: {why})"
        ),
        "",
    )


def head_family(ctx: HeadContext, base_layer: Layer, base: LinearizationSpectrum) -> Stabilization:
    """The added-head design (module docstring), with its rate curve in
    ``stats["rate_curve"]`` (:func:`_rate_curve`) when the design had a gauge."""
    res, curve = _head_design(ctx, base_layer, base)
    if curve is None or ctx.budget.exhausted:
        return res
    return replace(res, stats={**res.stats, "rate_curve": curve()})


@dataclass(frozen=True, eq=False)
class _HeadDesign:
    """The added head of one call at its token gauge: what every ``c`` of the ladder shares.

    ``s`` is the gauge, ``b0`` the tilt (``pick``: 1 when the query is centred on ``m*``),
    ``c_cov`` and ``c_loc`` the smallest ``c`` for the covariance and the one used (with the
    margin), ``need_mean`` and ``sigma`` the mean's shift needed and used, ``gauge_note`` a
    note when the gauge moved into float64's range, ``q`` the kept heads' quadratic growth.
    """

    ctx: HeadContext
    base_layer: Layer
    base: LinearizationSpectrum
    s: float
    b0: FloatArray
    pick: int
    c_cov: float
    c_loc: float
    need_mean: float
    sigma: float
    gauge_note: str
    q: float

    def build(self, c: float, shift: float | None = None) -> Layer:
        """The layer with the added head at ``c`` and the mean's shift (default: ``sigma``)."""
        shift = self.sigma if shift is None else shift
        return _head_layer(self.ctx, self.base_layer, c, self.s, self.b0, shift)

    def curve(self) -> list[dict[str, float]]:
        """The rate curve (:func:`_rate_curve`)."""
        return _rate_curve(self.ctx, self.base, self.build)

    def design_at(self, c: float, ladder: str, shift: float | None = None) -> Design:
        """The :class:`Design` at ``c``, its ``ladder`` sentence in what it says."""
        shift = self.sigma if shift is None else shift
        final = self.build(c, shift)
        kappa = self.s * c - shift
        parts = []
        if c > 0:
            parts.append(
                f"added head (−s·c·I, Σ*⁻¹/s) with c = {c:.6g} (minimal {self.c_cov:.6g} for the "
                f"covariance), token gauge s = {self.s:.4g}"
                + (", query centred on m*" if self.pick else "")
                + self.gauge_note
            )
        if ladder:
            parts.append(ladder)
        if kappa != 0.0:
            parts.append(
                f"uniform companion head (κI, 0) with κ = {kappa:.6g}: the mean matrix shifts "
                f"by −{shift:.6g} ("
                + (
                    f"minimal: the mean needs {self.need_mean:.6g})"
                    if shift > 0
                    else "none needed)"
                )
            )
        what = (
            "; ".join(parts) if parts else "no extra needed: the designed A, b alone give the rate"
        )
        return Design(
            layer=final,
            family="head" if c > 0 or shift != 0.0 else "none",
            # the base's shifted by −2c (checked) or, failing that, recomputed by finish
            spectrum=self.ctx.shifted(final, self.base_layer, self.base, -2.0 * c),
            what=what,
            change=c,
            q=self.q,
            omega=self.base.numerical_abscissa - 2.0 * c,
            c=c,
            scale=self.s,
            mean_shift=shift,
        )

    def attempt(
        self,
        c: float,
        ladder: str,
        stats: dict[str, Any],
        *,
        shift: float | None = None,
        screen_at: float | None = None,
        design_rate: float | None = None,
        design: Design | None = None,
        first: tuple[int, Trajectory] | None = None,
    ) -> Stabilization:
        """The checks of the design at ``c`` (or of ``design``) and its result, with the
        ladder's record in ``stats``."""
        record = {
            "c_local": self.c_loc,
            "c_screens": 0,
            "c_failed": math.nan,
            "design_rate": self.ctx.plan.rate,
            "token_doublings": 0,
            **stats,
        }
        return self.ctx.finish(
            design if design is not None else self.design_at(c, ladder, shift),
            self.base,
            CheckPlan(record, screen_at=screen_at, design_rate=design_rate, first=first),
        )


def _head_design(
    ctx: HeadContext, base_layer: Layer, base: LinearizationSpectrum
) -> tuple[Stabilization, Callable[[], list[dict[str, float]]] | None]:
    """The head family's result, and its rate curve (``None``: no gauge fits)."""
    head = _gauge(ctx, base_layer, base)
    if isinstance(head, Stabilization):
        return head, None
    return _ladder(head), head.curve


def _gauge(
    ctx: HeadContext, base_layer: Layer, base: LinearizationSpectrum
) -> _HeadDesign | Stabilization:
    """The added head's gauge, tilt, local minimum ``c`` and mean shift; a ``FAILED`` result
    when no gauge fits float64."""
    # both tilts give the same moment model; the smaller gauge s changes the layer less
    tilts = _added_tilts(ctx)
    s, pick = min((_token_scale(ctx, tilt), i) for i, tilt in enumerate(tilts))
    b0 = tilts[pick]
    c_cov, c_loc = _head_c(ctx, base, ctx.plan.rate)
    need_mean, sigma = _mean_shift(ctx, base, ctx.plan.rate)
    s, gauge_note, no_gauge = _fitted_scale(s, b0, max(c_loc, sigma), ctx.plan.rate)
    if no_gauge:
        return result_without(ctx.plan, base_layer, base, "head", Status.FAILED, no_gauge)
    red = reduced_layer(ctx.plan.layer, ctx.plan.basis)
    q = quadratic_growth(red, ctx.plan.s_act)
    return _HeadDesign(
        ctx, base_layer, base, s, b0, pick, c_cov, c_loc, need_mean, sigma, gauge_note, q
    )


def _certified(spec: LinearizationSpectrum | None, rate: float) -> bool:
    """Whether ``spec`` holds the local certificate at ``rate``."""
    return spec is not None and spec.status is Status.SUCCESS and spec.abscissa <= -rate


def _at_local_minimum(head: _HeadDesign, t_half: float | None) -> Design:
    """The design at the local minimum ``c``, with its spectrum when the ladder may follow:
    the local certificate decides whether ``c`` may grow."""
    ctx = head.ctx
    at_loc = head.design_at(head.c_loc, "")
    if t_half is not None and at_loc.spectrum is None:
        # here, not in finish (a dense base's spectrum, cheap; or a Krylov run where the shift
        # identity failed)
        at_loc = replace(
            at_loc,
            spectrum=ctx.spectrum(at_loc.layer, omega=False, k=1, v0=ctx.start_vector(head.base)),
        )
    return at_loc


def _stuck_verifications(
    ctx: HeadContext, res: Stabilization
) -> list[tuple[tuple[str, Gaussian], str]]:
    """The starts whose verification in ``res`` ended unconverged (not for want of rank),
    each with the ladder's sentence on it."""
    return [
        (
            (name, g0),
            _not_converging(
                v.name,
                max(float(v.cov_error[-1]), float(v.mean_error[-1])),
                float(v.t[-1]),
            ),
        )
        for v, (name, g0) in zip(res.verification, ctx.plan.starts, strict=False)
        if v.status is Status.SUCCESS and not v.converged and not ctx.plan.rank_gap(g0)
    ]  # no verification when the local certificate failed before any check


def _ladder(head: _HeadDesign) -> Stabilization:
    """The checks at the local minimum ``c``, and, when a start does not converge there, at
    the smallest ``c`` from which it does in a screen; then the token-valid design rate.

    ``c_loc`` is the smallest ``c`` of the local certificate; a far start can still settle at
    another equilibrium there (as on pretrained layers): then ``c`` grows, chosen by cheap
    screens, and the checks run again at the ``c`` chosen. So at ``c_loc`` each verification
    stops halfway when it fails a screen's test there, and the far start's first half runs
    before every other check (:meth:`HeadContext.first_segment`).
    """
    ctx, c_loc = head.ctx, head.c_loc
    t_half = _screen_depth(ctx) if c_loc > 0 else None
    at_loc = _at_local_minimum(head, t_half)
    local_loc = _certified(at_loc.spectrum, ctx.plan.rate)
    pre = None
    if t_half is not None and local_loc and not ctx.budget.exhausted:
        pre = ctx.first_segment(at_loc.layer, t_half)
    first = None if pre is None else (pre[0], pre[1])
    at_c_loc = functools.partial(
        head.attempt, c_loc, "", {}, screen_at=t_half, design=at_loc, first=first
    )
    res: Stabilization | None = None
    if pre is not None and pre[2]:
        # settled elsewhere: the other checks at c_loc would be wasted, and c grows
        name, g0 = ctx.plan.starts[pre[0]]
        end = pre[1]
        err = ctx.plan.relative_error(end.mean[-1], end.cov[-1])
        stuck = [((name, g0), _not_converging(name, err, float(end.t[-1])))]
    else:
        res = at_c_loc()
        stuck = _stuck_verifications(ctx, res)
    ladder, stats = "", {}
    if (
        stuck
        and c_loc > 0
        and (res.local_certificate if res is not None else local_loc)
        and not ctx.budget.exhausted
    ):
        c, c_failed, ladder, screens = _smallest_verified_c(
            ctx, head.build, c_loc, [start for start, _ in stuck], stuck[0][1]
        )
        stats = {"c_screens": screens, "c_failed": c_failed}
        if c == c_loc:
            # no c passed its screen: the checks at c_loc stand (out of time if the
            # screens ran out of it)
            return _no_c_passed(ctx, at_c_loc() if res is None else res, ladder, stats)
        res = head.attempt(c, ladder, stats)
    elif res is None:
        res = at_c_loc()
    return _token_valid(ctx, res, head.base, head.attempt, ladder, stats)


def _no_c_passed(
    ctx: HeadContext, res: Stabilization, ladder: str, stats: dict[str, Any]
) -> Stabilization:
    """The result at the local minimum ``c`` when no larger ``c`` passed its screen."""
    spent = ctx.budget.exhausted
    return replace(
        res,
        status=Status.BUDGET_EXHAUSTED if spent else res.status,
        message=res.message
        + "; "
        + ladder
        + ("; the time limit ended the screens" if spent else ""),
        stats=dict(res.stats, **stats),
    )


#: The rates of a head design's curve (``stats["rate_curve"]``), as multiples of the rate asked.
CURVE_FACTORS = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)


def _rate_curve(
    ctx: HeadContext, base: LinearizationSpectrum, build: Callable[[float, float], Layer]
) -> list[dict[str, float]]:
    """The price of each rate ``ρ = f·rate`` (``f`` in :data:`CURVE_FACTORS`): the smallest
    added head of the local certificate, ``c_loc(ρ) = (α(L) + ρ)/2`` and ``σ(ρ) = α(K) + ρ``
    (with the design's margin; exact by the shift identity), at the design's gauge ``s``, and
    its function change on the probe tokens. Not verified from far starts: the ladder can need a
    larger ``c`` (the rate asked has the verified point, the result itself)."""
    out = []
    for f in CURVE_FACTORS:
        if ctx.budget.exhausted:
            break
        rho = f * ctx.plan.rate
        c = _head_c(ctx, base, rho)[1]
        sigma = _mean_shift(ctx, base, rho)[1]
        change = ctx.function_change(build(c, sigma))
        out.append({"rate": rho, "c": c, "mean_shift": sigma, "function_change": change})
    return out


def _not_converging(name: str, err: float, depth: float) -> str:
    """The ladder's sentence on a start that failed at the local minimum."""
    return f"{name} start does not converge (relative error {err:.3g} at depth {depth:.4g})"


def _head_c(ctx: HeadContext, base: LinearizationSpectrum, rho: float) -> tuple[float, float]:
    """The smallest ``c`` for the covariance at rate ``rho`` (``(α(L) + ρ)/2``) and the
    ``c`` used: that, with the margin, or 0 when none is needed."""
    c_cov = (base.cov_abscissa + rho) / 2.0
    return c_cov, (c_cov * (1.0 + RATE_MARGIN) + 1e-12 * rho if c_cov > 0 else 0.0)


def _mean_shift(ctx: HeadContext, base: LinearizationSpectrum, rho: float) -> tuple[float, float]:
    """The shift the mean matrix needs at rate ``rho`` (``α(K) + ρ``) and the one used."""
    need = base.mean_abscissa + rho
    return need, (need * (1.0 + RATE_MARGIN) + 1e-12 * rho if need > 0 else 0.0)


def _token_valid(
    ctx: HeadContext,
    res: Stabilization,
    base: LinearizationSpectrum,
    attempt: Callable[..., Stabilization],
    ladder: str,
    stats: dict[str, Any],
) -> Stabilization:
    """``res``, or the design at a doubled rate when only its token check failed.

    A head's attention over ``N`` tokens is a ratio of sample averages, biased against the
    moment model, strongly so where a kept head of a pretrained layer is in its finite-N
    regime at the target (a softmax close to a hard maximum): a steady forcing, which holds
    the tokens off the moments by about that bias over the contraction rate. So the design
    rate ``ρ'`` (``c`` and the mean's shift at ``ρ'``, never below the ``c`` already
    verified) doubles, at most ``_TOKEN_DOUBLINGS`` times, until the tokens pass too; every
    check runs again at each ``ρ'``, to the default depths of the rate ``ρ'`` certified: a
    faster contraction holds the tokens closer (docs/benchmarks.md). The ``c`` found is the
    smallest token-valid one to a factor 2 in the rate, and the message says so. A time limit
    reached where a doubling was due ends the search as ``BUDGET_EXHAUSTED``: whether a larger
    rate passes is not known."""
    rho, tries, trail = ctx.plan.rate, 0, []
    while tries < _TOKEN_DOUBLINGS and _only_tokens_failed(res):
        tc = res.token_certificate
        assert tc is not None
        if ctx.budget.exhausted:
            # a doubled rate would have been tried: the search is unfinished, not failed
            return replace(
                res,
                status=Status.BUDGET_EXHAUSTED,
                message=res.message
                + f"; the time limit of {ctx.budget.given_limit:g} s was reached before the "
                f"design rate doubled from {rho:g} (the token check failed there; "
                f"{tries} of {_TOKEN_DOUBLINGS} doublings tried)",
            )
        trail.append(f"at design rate {rho:g} (c = {res.c:.6g}) W2 {tc.w2:.4g} at depth {tc.T:.4g}")
        rho *= 2.0
        tries += 1
        c = max(res.c, _head_c(ctx, base, rho)[1])
        shift = max(res.mean_shift, _mean_shift(ctx, base, rho)[1])
        note = (
            "the token check failed "
            + ", ".join(trail)
            + f" (floor {tc.floor:.4g}): the tokens' finite-N bias is held off by the "
            f"contraction, so the design rate doubled to {rho:g}"
        )
        res = attempt(
            c,
            "; ".join(x for x in (ladder, note) if x),
            {**stats, "design_rate": rho, "token_doublings": tries},
            shift=shift,
            design_rate=rho,
        )
    if tries and res.success:
        res = replace(
            res,
            message=res.message
            + f"; the design rate {rho:g} is the smallest token-valid one to a factor 2 "
            f"(at {rho / 2:g} the tokens failed)",
        )
    return res


def _only_tokens_failed(res: Stabilization) -> bool:
    """Whether ``res`` failed on its token check alone: certified locally, every far start
    verified, and the tokens off the moments (not cut short)."""
    return (
        res.status is Status.FAILED
        and bool(res.local_certificate)
        and all(v.converged for v in res.verification)
        and res.token_certificate is not None
        and res.token_certificate.status not in (Status.SUCCESS, Status.BUDGET_EXHAUSTED)
    )


def _head_layer(
    ctx: HeadContext, base_layer: Layer, c: float, s: float, b0: FloatArray, sigma: float
) -> Layer:
    """``base_layer`` with the added head ``(−s c P, B₀/s)``, ``A + cP``, and the uniform
    companion ``(κP, 0)``, ``κ = s c − σ``: the mean matrix shifts by exactly ``−σ``
    whatever the gauge ``s`` (it adds ``κm`` to the mean's velocity and nothing to the
    covariance's, attending to every token equally, ``ESS/N = 1``)."""
    added: list[tuple[FloatArray, FloatArray]] = []
    if c > 0:
        added.append((-s * c * ctx.plan.proj, b0 / s))
    kappa = s * c - sigma
    if kappa != 0.0:
        added.append((kappa * ctx.plan.proj, np.zeros_like(ctx.plan.proj)))
    if not added:
        return base_layer
    final = base_layer.replace(
        A=base_layer.A + c * ctx.plan.proj, heads=[*base_layer.head_groups, *added]
    )
    return ctx.fix_bias(final)


def _screen_depth(ctx: HeadContext) -> float:
    """Half the default verification depth (or of a longer ``T`` given): a short ``T``
    given for a quick look does not make the screens, which choose ``c``, fail."""
    return 0.5 * max(ctx.plan.default_depth(), ctx.plan.depth or 0.0)


def _smallest_verified_c(
    ctx: HeadContext,
    build: Callable[[float], Layer],
    c_loc: float,
    starts: list[tuple[str, Gaussian]],
    stuck: str,
) -> tuple[float, float, str, int]:
    """After ``starts`` failed their verification at ``c_loc`` (``stuck`` says which and
    how): the smallest ``c`` from which they all converge in a screen (``c_loc`` when none
    was found), the largest ``c`` whose screen failed, a sentence on how ``c`` was found,
    and the number of screens.

    A screen (:func:`_screen`) is a cheap simulation of those starts to
    :func:`_screen_depth`; the starts that converged at ``c_loc`` are not screened (a
    larger ``c`` only strengthens the local contraction), and a start singular on the
    active subspace never is (:meth:`~._plan.Plan.rank_gap`: no ``c`` helps it). ``c`` doubles from
    ``c_loc`` until a screen passes (at most ``_C_DOUBLINGS`` times), then
    ``_C_BISECTIONS`` geometric bisections narrow the bracket. The screen only chooses
    ``c``: the full verification of every start by :meth:`HeadContext.finish` at that ``c`` decides.
    A larger ``c`` never weakens the local certificate (the linearization shifts by
    exactly ``−2c``), and the global bound needs ``c > q``.
    """
    t_half = _screen_depth(ctx)
    how = f"each to depth {t_half:.4g} at rtol {_SCREEN_RTOL:g}, relative error ≤ {SCREEN_TOL:g}"
    lo, hi, screens = 1.0, math.nan, 0
    f = 1.0
    for _ in range(_C_DOUBLINGS):
        if ctx.budget.exhausted:
            break
        f *= 2.0
        screens += 1
        if _screen(ctx, build(f * c_loc), t_half, starts) is None:
            hi = f
            break
        lo = f
    if math.isnan(hi):
        note = (
            f"at the local minimum c = {c_loc:.6g} the {stuck}, nor in screens up to "
            f"{lo:g} × it ({screens} screens, doubling; {how}); c stays at the local minimum"
        )
        return c_loc, lo * c_loc, note, screens
    for _ in range(_C_BISECTIONS):
        if ctx.budget.exhausted:
            break
        mid = math.sqrt(lo * hi)
        screens += 1
        if _screen(ctx, build(mid * c_loc), t_half, starts) is None:
            hi = mid
        else:
            lo = mid
    note = (
        f"c = {hi:.4g} × the local minimum: at the minimum the {stuck}"
        + (f", at {lo:.4g} × it did not in a screen" if lo > 1.0 else "")
        + f" and at {hi:.4g} × it did (smallest verified c to a factor {hi / lo:.3g}; "
        f"{screens} screens, {how})"
    )
    return hi * c_loc, lo * c_loc, note, screens


def _screen(
    ctx: HeadContext, lay: Layer, depth: float, starts: list[tuple[str, Gaussian]]
) -> str | None:
    """``None`` when every start comes within ``SCREEN_TOL`` (relative, covariance and
    mean) of the target by ``depth`` under ``lay``, else the name of the worst start."""

    def end_error(g0: Gaussian) -> float:
        traj = simulate(
            lay,
            g0,
            depth,
            n_points=2,
            rtol=_SCREEN_RTOL,
            atol=_SCREEN_ATOL,
            time_limit=ctx.budget.left_as_limit(),
        )
        if traj.status is not Status.SUCCESS:
            return math.inf
        return ctx.plan.relative_error(traj.mean[-1], traj.cov[-1])

    errs = concurrently(
        [functools.partial(end_error, g0) for _, g0 in starts],
        alone=not ctx.background_running(),
        parallel=ctx.plan.parallel,
    )
    j = int(np.argmax(errs))
    return None if errs[j] <= SCREEN_TOL else starts[j][0]
