"""The values of :func:`gtcontrol.stabilize`: a family's :class:`Design` (or
:class:`NoDesign`) and how its checks run (:class:`CheckPlan`), read by the families and the
checks alike, and the result, :class:`Stabilization`, with its verifications.

A :class:`Stabilization` carries the stabilized layer, each certificate (local, global,
basin) and each check (the verifying simulations, one :class:`Verification` per start, and
the token check) with its figures; docs/theory.md derives them.

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..._display import Axes, SummaryItems, legend
from ..._linalg import FloatArray
from ..._status import Outcome, ResultFields, Status
from ...analysis.stability import LinearizationSpectrum
from ...model.gaussian import Gaussian
from ...model.moments import Trajectory
from ...model.params import Layer
from ..design import TokenCertificate

__all__ = ["VERIFY_RTOL", "CheckPlan", "Design", "NoDesign", "Stabilization", "Verification"]

#: Required relative error of the verifying simulations at depth ``T``.
VERIFY_RTOL = 1e-6


@dataclass(frozen=True)
class Design:
    """A family's designed layer, before :func:`gtcontrol.stabilize` checks it.

    ``spectrum`` is its linearization's (``None``: the checks compute it, beside the
    verifying simulations); ``what`` says in words what was added; ``change``
    is the family's size of the change (``c`` or ``‖1 − g‖₂``); ``q`` the kept heads'
    quadratic growth (for the global bound) and ``omega`` the numerical abscissa at the
    target (for the basin). The head family sets ``c``, ``scale`` (the token gauge ``s``) and
    ``mean_shift``; the gains family sets ``gains``.
    """

    layer: Layer
    family: str
    spectrum: LinearizationSpectrum | None
    what: str
    change: float
    q: float
    omega: float
    c: float = math.nan
    scale: float = math.nan
    mean_shift: float = math.nan
    gains: FloatArray | None = None


@dataclass(frozen=True)
class CheckPlan:
    """How :func:`~._checks.finish` runs the checks of one design of the ``c`` ladder.

    Attributes
    ----------
    stats
        Entries added to the result's ``stats`` (the ladder's record).
    screen_at
        Each verification stops at this depth when a screen would fail there: ``c`` is about to
        grow, and the rest of the depth would be wasted. ``None``: it runs to its depth.
    design_rate
        A certified design rate above the rate asked for (the head family's token-valid
        rate): the default depths of the verifications and of the stabilized layer's tokens
        follow it.
    first
        A start's index and its first segment, already integrated
        (:meth:`~._verify.Verifier.first_segment`): its verification continues from it.
    """

    stats: Mapping[str, Any] = field(default_factory=dict)
    screen_at: float | None = None
    design_rate: float | None = None
    first: tuple[int, Trajectory] | None = None


@dataclass(frozen=True)
class NoDesign:
    """A family that designed nothing: ``INFEASIBLE`` with its proof, or ``NOT_FOUND`` with
    how far the search got (``message``)."""

    status: Status
    message: str


@dataclass(frozen=True, eq=False)
class Verification(ResultFields, Outcome):
    """One verifying simulation: depths, ``λ_max(Σ)`` and the relative errors to the target.

    Attributes
    ----------
    name
        The start, in words.
    t
        Recorded depths.
    lam_max
        ``λ_max Σ(t)``.
    cov_error, mean_error
        Relative errors of the covariance and the mean to the target.
    basin_distance
        The start's distance to the target over the certified basin's radius (``< 1``: inside).
    status, message
        The simulation's (``SUCCESS``: it reached ``T``; :attr:`converged` says whether the
        errors fell to ``VERIFY_RTOL``), with what was found.
    stats
        ``form``: ``"deviation"`` when the start was integrated as its distance to the target
        (a start near it), ``"factor"`` otherwise; ``nfev``: the field evaluations.
    success
        True for ``SUCCESS`` only.
    """

    name: str
    t: FloatArray
    lam_max: FloatArray
    cov_error: FloatArray
    mean_error: FloatArray
    basin_distance: float

    def _summary_items(self) -> SummaryItems:
        return [
            ("name", self.name),
            ("converged", self.converged),
            ("cov_error", float(self.cov_error[-1]) if len(self.cov_error) else math.nan),
            ("mean_error", float(self.mean_error[-1]) if len(self.mean_error) else math.nan),
            ("basin_distance", self.basin_distance),
        ]

    def _draw(self, ax: Axes) -> None:
        ax.semilogy(self.t, self.cov_error, label="covariance")
        ax.semilogy(self.t, self.mean_error, label="mean")
        ax.axhline(VERIFY_RTOL, color="0.6", lw=0.8, ls="--")
        ax.set_xlabel("depth t")
        ax.set_ylabel("relative error to the target")
        ax.set_title(self.name, fontsize=8)
        legend(ax, fontsize=7)

    @property
    def converged(self) -> bool:
        """The simulation reached ``T`` with both relative errors ``≤ 1e-6``."""
        return (
            self.status is Status.SUCCESS
            and float(self.cov_error[-1]) <= VERIFY_RTOL
            and float(self.mean_error[-1]) <= VERIFY_RTOL
        )


@dataclass(frozen=True, eq=False)
class Stabilization(ResultFields, Outcome):
    """A layer whose given heads are kept and whose target is a certified stable equilibrium.

    Attributes
    ----------
    layer
        The stabilized layer: the given heads first, unchanged and in order (a factored group
        stays factored), then the added heads (``family == "head"``); ``A`` and ``b`` designed.
    original
        The layer that was given.
    base_layer
        The given heads with ``A, b`` designed and no extra: ``target`` is its equilibrium.
    target
        ``N(m*, Σ*)``.
    family
        ``"head"``, ``"gains"``, or ``"none"`` when the designed ``A, b`` alone already give the
        rate (no extra needed).
    rate
        The requested rate ``ρ``.
    c, scale, mean_shift
        Head family: the added head is ``(−s c P, P Σ*⁺ P / s)`` with ``P`` the projection on the
        active subspace, ``c`` minimal for the covariance's local certificate (or, when a start
        settles elsewhere there, the smallest ``c`` found from which every start converges;
        ``stats["c_local"]`` is the local minimum) and ``s`` the token gauge; with it a
        uniform companion head ``(κP, 0)``, ``κ = s c − σ``, so that the mean matrix shifts by
        exactly ``−σ``, ``σ = mean_shift`` minimal for the mean (the companion is left out when
        ``κ = 0``). When only the token check fails, ``c`` and ``σ`` are those of a doubled
        design rate (``stats["design_rate"]``). ``nan`` for other families.
    gains
        Gains family: ``g`` (one per head); ``None`` otherwise.
    change
        The size of the change in its family: ``c`` or ``‖1 − g‖₂``.
    base
        Spectrum of the linearization with the heads kept and ``A, b`` designed, before any
        extra (:class:`~gtcontrol.analysis.stability.LinearizationSpectrum`).
    spectrum
        The same for the stabilized layer: the local certificate is ``spectrum.abscissa ≤ −rate``
        (``method == "shifted"``: ``base`` shifted by ``−2c``, the identity checked).
    local_certificate
        ``spectrum.abscissa ≤ −rate``.
    global_certificate
        Whether the global no-blow-up bound holds (``c > q``).
    global_bound
        The global statement in words, with its bound (or what ``c`` it would need).
    q
        ``Σ_h ‖Σ*^{-½}V_hΣ*^{½}‖₂ ‖Σ*^{½}B_hΣ*^{½}‖₂`` of the kept (gained) heads.
    basin_radius
        ``−ω/β`` in the ``Σ*``-normalized Frobenius norm (``nan`` when ``ω ≥ 0``).
    starts
        The initial Gaussians of the verification (the token check starts from the first one
        given, or by default from the perturbed target).
    verification
        One :class:`Verification` per initial.
    function_change
        ``‖v_new(X) − v_old(X)‖_F / ‖v_old(X)‖_F``: the relative change of the layer's token
        velocity (attention output plus feed-forward) on the probe tokens ``X``.
    token_certificate, untouched_tokens
        With ``token_check=N``: ``N`` tokens under the stabilized layer, and under the given
        layer from the same start, each against the target (``None`` otherwise).
    candidates
        ``add="auto"``: the results of both families, which were compared (else empty).
    status
        ``SUCCESS`` when every requirement holds (local certificate, every verification, the
        token check when asked); ``INFEASIBLE`` when the family provably cannot reach the rate
        (the proof in ``message``); ``NOT_FOUND`` when the gains search found no certified
        gains; ``FAILED`` when a verification or the token check contradicts the certificate,
        or when the design cannot be held in float64 (the target not an equilibrium of the
        designed layer to the design's rounding bound, an added head or ``A`` beyond the entry
        bound, no token gauge that keeps the mean's rounding below the rate): the message
        says which, with its numbers; ``BUDGET_EXHAUSTED`` when ``time_limit`` ran out.
    message
        What was designed, every certificate and check with its figures, or why it failed.
    stats
        ``seconds``, ``matvecs`` (operator products of the spectra), ``active_dim``,
        ``residual`` (the relative residuals ``(Σ, m)`` of the target under ``layer``, head by
        head) and ``residual_bound`` (the design's rounding bound ``8·eps·(r + κ(Σ*))`` they
        must lie within),
        ``kept_head_ess``: after a failed token check, the smallest over the kept heads of the
        median predicted ``ESS/N`` on the probe tokens at the target (below ``1/N`` the message
        says that head's softmax is close to a hard maximum; ``nan`` otherwise). Head family:
        ``c_local`` (the smallest ``c`` of the local certificate), ``c_screens`` (cheap
        simulations of the starts that chose ``c``: doubling, then geometric bisection to a
        factor ``2^(1/8)``), ``c_failed`` (the largest ``c`` whose screen failed; ``nan``
        when the local minimum passed), ``design_rate`` (the rate ``c`` and ``σ`` were designed
        for: ``rate``, or a doubling of it when the token check failed at ``rate`` alone) and
        ``token_doublings`` (how many times it doubled).
    """

    layer: Layer
    original: Layer
    base_layer: Layer
    target: Gaussian
    family: str
    rate: float
    c: float
    scale: float
    mean_shift: float
    gains: FloatArray | None
    change: float
    base: LinearizationSpectrum | None
    spectrum: LinearizationSpectrum | None
    local_certificate: bool
    global_certificate: bool
    global_bound: str
    q: float
    basin_radius: float
    starts: tuple[Gaussian, ...]
    verification: tuple[Verification, ...]
    function_change: float
    token_certificate: TokenCertificate | None = None
    untouched_tokens: TokenCertificate | None = None
    candidates: tuple[Stabilization, ...] = field(default=())

    def _summary_items(self) -> SummaryItems:
        return [
            ("family", self.family),
            ("change", self.change),
            ("mean_shift", None if math.isnan(self.mean_shift) else self.mean_shift),
            ("abscissa", None if self.spectrum is None else self.spectrum.abscissa),
            ("rate", self.rate),
            ("local_certificate", self.local_certificate),
            ("global_certificate", self.global_certificate),
            ("function_change", self.function_change),
            ("token_check", None if self.token_certificate is None else self.token_certificate),
        ]

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_stabilization

        draw_stabilization(
            ax,
            None if self.base is None else self.base.eigenvalues,
            None if self.spectrum is None else self.spectrum.eigenvalues,
            rate=self.rate,
        )
