"""Asymptotic regimes of a fixed layer acting on a Gaussian, and the mean near an equilibrium.

:func:`analyze` says what a time-invariant layer does to ``N(m0, Σ0)`` in the long run:
``"converges"`` (Σ(t) → Σ∞ of the same rank as Σ0, e.g. a positive-definite equilibrium),
``"collapses"`` (bounded, and Σ(t) loses rank asymptotically, e.g. Σ → 0), ``"blowup"`` (finite
time), ``"unbounded"`` (‖Σ‖ → ∞ without finite-time blow-up) or ``"bounded"`` (none of these:
bounded, full rank kept, no limit — oscillation). Exact certificates decide in the Riccati class
wherever they apply (:mod:`gtcontrol.analysis._regime_rules`); otherwise the linearization at the
equilibria plus an integration of the moment ODE decide, with the numbers in ``message``.
:func:`mean_dynamics_ss` gives the mean near an equilibrium, ``dm/dt = K m + b`` with
``K = A + Σ_h V_h (I + Σ* B_h)``, as a :class:`control.StateSpace` with input b.

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._blas import calm_blas
from .._display import Axes
from .._linalg import FloatArray, sym
from .._status import Budget, BudgetExhausted, OutcomeOrBlowup, ResultFields, Status
from .._validation import as_float_array, as_positive_float, as_time_limit, frozen
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.moments import Trajectory
from ..model.params import Layer
from ._core import is_pd, remaining_limit, simulate_within
from ._field_kernel import covariance_field, mean_jacobian, residual_scale
from ._regime_rules import Verdict, blowup_verdict, hurwitz, riccati_verdict
from .blowup import BlowupResult, blowup_analysis, default_horizon
from .equilibria import (
    EquilibriaResult,
    Equilibrium,
    equilibrium_record,
    riccati_form_of,
    search_equilibria,
)
from .newton import SearchOptions, newton_run

__all__ = ["REGIME_KINDS", "Regime", "analyze", "mean_dynamics_ss"]

#: The regime kinds (``Regime.kind``; not a :class:`~gtcontrol.Status`).
REGIME_KINDS = ("converges", "collapses", "blowup", "unbounded", "bounded")


@dataclass(frozen=True, eq=False)
class Regime(ResultFields, OutcomeOrBlowup):
    """What a fixed layer does to ``N(m0, Σ0)`` as depth grows.

    Attributes
    ----------
    kind
        ``"converges"``: Σ(t) → Σ∞ with ``rank Σ∞ = rank Σ0`` (for Σ0 ≻ 0, a positive-definite
        equilibrium); ``"collapses"``: Σ(t) stays bounded and loses rank asymptotically (the
        smallest eigenvalue on the range of Σ0 → 0, e.g. Σ → 0); ``"blowup"``: finite-time
        blow-up; ``"unbounded"``: ‖Σ(t)‖ → ∞ without finite-time blow-up; ``"bounded"``: none of
        these (bounded, full rank kept, no limit — e.g. a rotation). Only meaningful when
        ``success``; an undecided analysis reports ``"bounded"`` with ``certificate="none"``.
    equilibrium
        The limit equilibrium when ``kind == "converges"`` to a positive-definite one.
    blowup_time
        ``T*`` for ``"blowup"``, otherwise ``math.inf``.
    mean_limit
        ``m* = −K⁻¹ b`` when Σ∞ is known and ``K = A + Σ_h V_h(I + Σ∞ B_h)`` is Hurwitz.
    message
        The condition or certificate that decided, with its numbers.
    certificate
        ``"exact"`` (closed form or proved bound), ``"global"`` (global convergence theorem),
        ``"linearization"`` (spectrum at an equilibrium plus the integrated trajectory),
        ``"integrator"`` (the integrated trajectory alone) or ``"none"`` (undecided).
    limit_cov
        Σ∞ when the covariance converges (for ``"converges"`` and most ``"collapses"``).
    mean_matrix
        K at Σ∞ (``None`` when Σ∞ is unknown).
    blowup
        The :class:`~gtcontrol.BlowupResult` of the blow-up search.
    equilibria
        The :class:`~gtcontrol.EquilibriaResult` consulted (``None`` when not needed).
    status
        ``Status.BLOWUP`` for a blow-up, ``Status.SUCCESS`` when another regime was decided,
        ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` ran out first, ``Status.FAILED`` when a
        solver failed in a way that left no answer (``message`` says which).
    stats
        Timings, the numbers used and ``evidence``: what decided the regime (``certificate``,
        the rule ``by`` which, and for the integrator its measured numbers and ``law``).
    """

    kind: str
    equilibrium: Equilibrium | None
    blowup_time: float
    mean_limit: FloatArray | None
    certificate: str
    limit_cov: FloatArray | None = None
    mean_matrix: FloatArray | None = None
    blowup: BlowupResult | None = None
    equilibria: EquilibriaResult | None = None

    _summary_fields = ("kind", "certificate", "blowup_time", "limit_cov", "mean_limit")

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        if self.kind == "blowup" and self.blowup is not None:
            self.blowup._draw(ax)
        else:  # the spectra that decided: DF(Σ∞) and the mean matrix K
            eq, k = self.equilibrium, self.mean_matrix
            draw_spectrum(ax, [] if eq is None else eq.spectrum, label="DF(Σ∞)")
            if k is not None:
                draw_spectrum(ax, np.linalg.eigvals(k), label="K", marker="x")
        ax.set_title(f"{self.kind} ({self.certificate})", fontsize=10)


def analyze(
    layer: Layer,
    initial: Gaussian,
    T: float | None = None,
    *,
    time_limit: float | None = None,
) -> Regime:
    """Classify the long-run behaviour of ``N(m0, Σ0)`` under a fixed layer, and say why.

    Riccati class (every ``V_h = v_h I``; ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``), exact certificates:

    * blow-up: the certified first singularity of :func:`gtcontrol.blowup_analysis`.
      Same-sign headline (v_h > 0, B_h + B_hᵀ ≻ 0, so R ≺ 0): every Σ0 ≻ 0 blows up iff A is
      not Hurwitz; if A is Hurwitz it blows up iff ``Σ0 ⋠ Σ*`` (Σ* the unstable equilibrium);
      from *every* nonzero Σ0 (any rank) iff no eigenvalue of A has negative real part.
      ``A = 0``: ``T* = 1/λ_max(Σ0^{1/2}(−R)Σ0^{1/2})``.
    * opposite-sign headline (v_h < 0, B_h + B_hᵀ ≻ 0, so R ≻ 0), Σ0 ≻ 0: never blows up;
      converges to ``Σ* = Ω*⁻¹`` (AᵀΩ* + Ω*A = R) from every Σ0 ≻ 0 iff every eigenvalue of A
      has positive real part (−A Hurwitz: ``Ω(t) = e^{−Aᵀt}(Ω0 − Ω*)e^{−At} + Ω*``); otherwise
      it collapses (an eigenvalue λ of A with Re λ ≤ 0 makes ``x*Ω(t)x ≥ λ_min(R)|x|²∫e^{−2Re λ s}``
      grow without bound, while ``Ω(t) ⪰ ∫₀¹ e^{−Aᵀs}Re^{−As}ds`` keeps Σ bounded).
    * −A Hurwitz, Σ0 ≻ 0, any R: Ω(t) → Ω*; Ω* ≻ 0 converges, Ω* singular is unbounded.
    * A Hurwitz, no blow-up: ``G(t) → I + Fᵀ W(∞) F``; if that is ≻ 0, Σ(t) → 0 (collapse).
    * ``A = 0``: ``Σ(t) = F(I + tFᵀRF)⁻¹Fᵀ`` exactly. ``R = 0``: ``Σ(t) = e^{At}Σ0e^{Aᵀt}``,
      classified by the eigenvalues of A on the smallest invariant subspace containing
      ``range Σ0``.

    Otherwise (general V, or the cases above do not apply): the equilibria and their
    linearization spectra (:func:`gtcontrol.equilibria`) plus an integration of the moment ODE
    up to ``T`` decide; the numbers are stated in ``message``. A trajectory that neither comes
    to rest nor reaches ``10⁻⁹`` is integrated on to ``10·T`` and its measured power law decides
    an algebraic collapse (``λ_max Σ(t) ∝ t^p``, p < 0, e.g. ``Σ → 0`` like ``1/t``); only a
    trajectory that stays bounded and keeps its rank without any such law is ``"bounded"``.
    ``stats["evidence"]`` holds what decided: the certificate and its rule, or the
    integrator's measured numbers and law.

    Parameters
    ----------
    layer
        The layer.
    initial
        ``N(m0, Σ0)``.
    T
        Depth for the blow-up search and the integration (default
        :func:`gtcontrol.analysis.blowup.default_horizon`, 200 time constants).
    time_limit
        Wall-clock limit in seconds (``None``: none); running out gives an undecided regime
        with ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    Regime
        A blow-up is ``Status.BLOWUP``, never an exception; a solver failure is
        ``Status.FAILED``.

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On malformed input or a ReLU/GELU feed-forward.

    Examples
    --------
    Opposite signs of V and B with −A Hurwitz: global convergence to ``σ* = 0.5``.

    >>> from gtcontrol import Gaussian, Layer, analyze
    >>> reg = analyze(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), Gaussian([0.0], [[0.2]]))
    >>> reg.kind, reg.status, reg.certificate
    ('converges', <Status.SUCCESS: 'success'>, 'global')
    >>> round(float(reg.limit_cov[0, 0]), 12)
    0.5

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §3–§4.
    """
    opts = SearchOptions()
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    g0 = check_gaussian(initial, layer.dim)
    if T is not None:
        as_positive_float("T", T)
    budget = Budget(as_time_limit(time_limit))
    clock = time.perf_counter()
    blow: BlowupResult | None = None
    # a multi-threaded BLAS stalls on a busy machine, inside calls no budget check interrupts
    try:
        with calm_blas():
            blow = blowup_analysis(layer, g0, T=T, time_limit=remaining_limit(budget))
            budget.check()
            if blow.stats.get("undetermined"):
                # no integrator guess either: its numbers would carry the same rounding
                why = f"undecided at double precision: {blow.message}"
                reg = _undecided(Status.FAILED, why, blow)
            else:
                reg = _build(layer, _decide(layer, g0, blow, T, opts, budget), blow)
    except BudgetExhausted as exc:
        reg = _undecided(Status.BUDGET_EXHAUSTED, f"undecided: {exc.reason}", blow)
    except SolverError as exc:
        reg = _undecided(Status.FAILED, f"undecided: {exc}", blow)
    return replace(reg, stats={**reg.stats, "seconds": time.perf_counter() - clock})


def _decide(
    layer: Layer,
    g0: Gaussian,
    blow: BlowupResult,
    T: float | None,
    opts: SearchOptions,
    budget: Budget,
) -> Verdict:
    form = riccati_form_of(layer)
    if blow.status is Status.BLOWUP:
        return blowup_verdict(form, g0, blow)
    if form is not None:
        verdict = riccati_verdict(layer, form, g0, blow)
        if verdict is not None:
            return verdict
    hz = T if T is not None else default_horizon(layer, g0)
    return _general_verdict(layer, g0, blow, hz, opts, budget)


def _undecided(status: Status, message: str, blow: BlowupResult | None) -> Regime:
    return Regime(
        kind="bounded",
        equilibrium=None,
        blowup_time=math.inf,
        mean_limit=None,
        message=message,
        certificate="none",
        blowup=blow,
        status=status,
        stats={"evidence": {"certificate": "none", "by": message}},
    )


def _mean_limit(
    layer: Layer, limit: FloatArray | None
) -> tuple[FloatArray | None, FloatArray | None, str]:
    if limit is None:
        return None, None, ""
    with np.errstate(over="ignore", invalid="ignore"):
        k = mean_jacobian(layer, limit)
    if not np.all(np.isfinite(k)):
        return None, None, "; the mean matrix K = A + Σ_h V_h(I + Σ∞B_h) overflows float64"
    eig = np.linalg.eigvals(k)
    _, b_eff = layer.affine_ffn()
    if hurwitz(eig):
        m_star = np.asarray(-np.linalg.solve(k, b_eff), dtype=np.float64)
        return (
            frozen(m_star),
            frozen(k),
            f"; K = A + Σ_h V_h(I + Σ∞B_h) is Hurwitz (abscissa {np.max(eig.real):.4g}), "
            "so m(t) → −K⁻¹b",
        )
    return (
        None,
        frozen(k),
        f"; K has spectral abscissa {np.max(eig.real):.4g} ≥ 0, the mean has no limit in general",
    )


def _build(layer: Layer, v: Verdict, blow: BlowupResult) -> Regime:
    """The :class:`Regime` of a verdict, with the mean limit for a converging covariance."""
    limit = v.limit
    m_star, k, note = (
        _mean_limit(layer, limit) if v.kind in ("converges", "collapses") else (None, None, "")
    )
    b = v.blowup if v.blowup is not None else blow
    # Every regime carries what decided it: the certificate's rule or the integrator's numbers.
    nums = {k: x for k, x in v.stats.items() if k != "evidence"}
    evidence = dict(v.stats.get("evidence") or {})
    evidence.setdefault("certificate", v.certificate)
    evidence.setdefault("by", v.message.split(":", 1)[0] if ":" in v.message else v.message)
    if nums:
        evidence.setdefault("numbers", nums)
    return Regime(
        kind=v.kind,
        equilibrium=v.equilibrium,
        blowup_time=b.blowup_time if v.kind == "blowup" else math.inf,
        mean_limit=m_star,
        message=v.message + note,
        certificate=v.certificate,
        limit_cov=frozen(np.asarray(limit, dtype=float).copy()) if limit is not None else None,
        mean_matrix=k,
        blowup=b,
        equilibria=v.eqs,
        status=Status.BLOWUP if v.kind == "blowup" else Status.SUCCESS,
        stats={**v.stats, "evidence": evidence},
    )


def _general_verdict(
    layer: Layer,
    g0: Gaussian,
    blow: BlowupResult,
    hz: float,
    opts: SearchOptions,
    budget: Budget,
) -> Verdict:
    """Linearization at the equilibria plus the integrated trajectory."""
    eqs = search_equilibria(layer, opts, budget)
    budget.check()
    traj = simulate_within(layer, g0, hz, budget, n_points=401)
    budget.check()
    if traj.status is Status.OVERFLOW:
        return Verdict(
            "unbounded", f"integration to depth {hz:g}: {traj.message}", "integrator", eqs=eqs
        )
    if traj.status is Status.BLOWUP:
        return Verdict(
            "blowup",
            f"integrator: blow-up at T* ≈ {traj.blowup_time:.10g}",
            "integrator",
            eqs=eqs,
            blowup=_integrator_blow(traj),
        )
    if traj.status is not Status.SUCCESS:
        raise SolverError(f"integration to depth {hz:g}: {traj.message}")
    return _trajectory_verdict(layer, g0, traj, eqs, hz, opts, budget)


def _trajectory_verdict(
    layer: Layer,
    g0: Gaussian,
    traj: Trajectory,
    eqs: EquilibriaResult,
    hz: float,
    opts: SearchOptions,
    budget: Budget,
) -> Verdict:
    """Classify an integrated trajectory by its covariance spectrum and the known equilibria."""
    d = layer.dim
    # Brownian forcing can raise the rank; without it the rank of Σ0 is invariant.
    rank = d if layer.noise is not None and np.any(layer.noise) else g0.rank
    lam = np.array([np.linalg.eigvalsh(c)[::-1] for c in traj.cov])
    top, low = lam[:, 0], lam[:, rank - 1]
    t = traj.t
    mid = int(np.searchsorted(t, 0.5 * t[-1]))
    s_end = np.asarray(traj.cov[-1])
    nums = {"T": hz, "lambda_max_end": float(top[-1]), "lambda_max_start": float(top[0])}
    if top[-1] > 1e6 * top[0] and top[-1] > top[mid]:
        rate = math.log(top[-1] / top[mid]) / (t[-1] - t[mid])
        return Verdict(
            "unbounded",
            f"integrator: λ_max Σ grew from {top[0]:.3g} to {top[-1]:.3g} by depth {t[-1]:.4g} "
            f"(rate {rate:.4g} over the second half) without finite-time blow-up",
            "integrator",
            eqs=eqs,
            stats=nums,
        )
    # Converging to a known positive-definite equilibrium?
    for eq in eqs.equilibria:
        dist = float(np.linalg.norm(s_end - eq.cov) / np.linalg.norm(eq.cov))
        if dist <= 1e-6 and rank == d:
            return Verdict(
                "converges",
                f"Σ(t) reaches the equilibrium Σ* to {dist:.2g} relative by depth {t[-1]:.4g}; "
                f"DF(Σ*) has spectral abscissa {eq.spectral_abscissa:.4g}"
                + (" < 0 (locally exponentially stable)" if eq.stable else ""),
                "linearization" if eq.stable else "integrator",
                limit=np.asarray(eq.cov),
                equilibrium=eq,
                eqs=eqs,
                stats=nums,
            )
    ratio_end = low[-1] / top[-1] if top[-1] > 0 else 0.0
    ratio_mid = low[mid] / top[mid] if top[mid] > 0 else 0.0
    if top[-1] <= 1e-9 * top[0]:
        return Verdict.collapse_to_zero(
            d,
            f"integrator: λ_max Σ decayed from {top[0]:.3g} to {top[-1]:.3g} by depth {t[-1]:.4g} "
            "(Σ → 0)",
            "integrator",
            eqs=eqs,
            stats=nums,
        )
    if ratio_end <= 1e-9 and ratio_end < ratio_mid:
        return Verdict(
            "collapses",
            f"integrator: the rank-{rank} part of Σ degenerates, λ_{rank}/λ_1 = {ratio_end:.3g} "
            f"at depth {t[-1]:.4g} (from {ratio_mid:.3g} at {t[mid]:.4g}) while Σ stays bounded",
            "integrator",
            eqs=eqs,
            stats=nums,
        )
    speed = float(np.linalg.norm(covariance_field(layer, s_end))) / max(
        float(np.linalg.norm(s_end)), 1e-300
    )
    rate = max(residual_scale(layer, s_end) / max(float(np.linalg.norm(s_end)), 1e-300), 1e-300)
    if speed <= 1e-7 * rate:
        return _stationary_verdict(layer, s_end, rank, speed, t[-1], eqs, nums, opts, budget)
    law = _decay_law(layer, traj, rank, budget)
    if law is not None and law[1]["evidence"]["quantity"] == "lambda_max":
        return Verdict.collapse_to_zero(d, law[0], "integrator", eqs=eqs, stats={**nums, **law[1]})
    if law is not None:
        return Verdict("collapses", law[0], "integrator", eqs=eqs, stats={**nums, **law[1]})
    return Verdict(
        "bounded",
        f"integrator: Σ(t) stays bounded (λ_max ≤ {float(np.max(top)):.3g}), keeps rank {rank} "
        f"(λ_{rank}/λ_1 ≥ {float(np.min(low / top)):.3g}) and is still moving at depth "
        f"{t[-1]:.4g} (‖dΣ/dt‖/‖Σ‖ = {speed:.3g}); no equilibrium is approached",
        "integrator",
        eqs=eqs,
        stats=nums,
    )


#: A power law is read off λ(t) at t = T, √10·T, 10·T: both log–log slopes at most this (Σ
#: decays at least like t^−¼) and within ``_LAW_RTOL`` of each other (or steepening).
_LAW_MAX_SLOPE = -0.25
_LAW_RTOL = 0.2


def _decay_law(
    layer: Layer, traj: Trajectory, rank: int, budget: Budget
) -> tuple[str, dict[str, Any]] | None:
    """Algebraic collapse: integrate on from depth T to 10·T and measure the power laws of
    ``λ_max Σ(t)`` (Σ → 0) and of ``λ_r/λ_1`` (rank loss); ``(message, stats)`` or ``None``.

    A slow collapse (e.g. ``Σ(t) ≈ Σ0/(1 + ct)``, the law of every Σ-contracting head with
    A = 0) neither reaches the ``10⁻⁹`` threshold nor comes to rest by the default depth. Its
    log–log slopes over ``[T, √10 T]`` and ``[√10 T, 10 T]`` agree (a power law t^p, p < 0) or
    steepen (faster than any power); either is a collapse, stated with the measured law.
    """
    t_end = float(traj.t[-1])
    start = Gaussian(np.asarray(traj.mean[-1]), np.asarray(traj.cov[-1]))
    ext = simulate_within(layer, start, 9.0 * t_end, budget, n_points=201)
    budget.check()
    if ext.status is not Status.SUCCESS:
        return None
    times = t_end + np.asarray(ext.t)
    lam = np.array([np.linalg.eigvalsh(c)[::-1] for c in ext.cov])
    marks = [int(np.argmin(np.abs(times - f * t_end))) for f in (1.0, math.sqrt(10.0), 10.0)]
    series = {"lambda_max": lam[:, 0], f"lambda_{rank}/lambda_1": lam[:, rank - 1] / lam[:, 0]}
    for name, y in series.items():
        if np.any(y[marks] <= 0) or not np.all(np.isfinite(y[marks])):
            continue
        p1, p2 = (
            math.log(y[marks[k + 1]] / y[marks[k]])
            / math.log(times[marks[k + 1]] / times[marks[k]])
            for k in (0, 1)
        )
        if max(p1, p2) > _LAW_MAX_SLOPE or (p2 > p1 and p2 - p1 > _LAW_RTOL * abs(p2)):
            continue
        t_last = float(times[-1])
        law = (
            f"∝ t^{p2:.3f} (log–log slopes {p1:.3f} over [{t_end:.4g}, {times[marks[1]]:.4g}] "
            f"and {p2:.3f} over [{times[marks[1]]:.4g}, {t_last:.4g}])"
            if abs(p2 - p1) <= _LAW_RTOL * abs(p2)
            else f"decays faster than any power (log–log slopes {p1:.3f}, then {p2:.3f})"
        )
        trace_t = float(np.trace(ext.cov[-1])) * t_last
        what = (
            f"Σ(t) → 0 algebraically: λ_max Σ(t) {law}; tr Σ(t)·t = {trace_t:.4g} at t = "
            f"{t_last:.4g}"
            if name == "lambda_max"
            else f"the rank-{rank} part of Σ degenerates algebraically: λ_{rank}/λ_1 {law}"
        )
        evidence = {
            "law": "power" if abs(p2 - p1) <= _LAW_RTOL * abs(p2) else "faster_than_power",
            "quantity": name,
            "exponent": p2,
            "slopes": (p1, p2),
            "window": (t_end, t_last),
            "trace_times_t": trace_t,
        }
        return f"integrator: {what}", {"evidence": evidence}
    return None


def _stationary_verdict(
    layer: Layer,
    s_end: FloatArray,
    rank: int,
    speed: float,
    t_end: float,
    eqs: EquilibriaResult,
    nums: Mapping[str, Any],
    opts: SearchOptions,
    budget: Budget,
) -> Verdict:
    """The trajectory came to rest: polish the end point by Newton and linearize there."""
    polished_eq: Equilibrium | None = None
    limit = s_end
    if rank == layer.dim and is_pd(s_end):
        polished = newton_run(layer, s_end, [], opts, budget)
        budget.check()
        if polished.success:
            limit = np.asarray(polished.cov)
            polished_eq = equilibrium_record(
                layer, limit, method="newton", iterations=polished.iterations, budget=budget
            )
    return Verdict(
        "converges",
        f"integrator: Σ(t) is stationary at depth {t_end:.4g} (‖dΣ/dt‖/‖Σ‖ = {speed:.3g})"
        + (
            f"; DF(Σ∞) has spectral abscissa {polished_eq.spectral_abscissa:.4g}"
            if polished_eq
            else ""
        ),
        "linearization" if polished_eq is not None and polished_eq.stable else "integrator",
        limit=limit,
        equilibrium=polished_eq,
        eqs=eqs,
        stats=nums,
    )


def _integrator_blow(traj: Trajectory) -> BlowupResult:
    lower, upper = traj.blowup_bracket or (0.0, math.inf)
    return BlowupResult(
        blowup_time=traj.blowup_time,
        lower=lower,
        upper=upper,
        status=Status.BLOWUP,
        certified=False,
        method="integrator",
        message=(
            f"adaptive integrator detected blow-up at T* ≈ {traj.blowup_time:.12g} in "
            f"[{lower:.15g}, {upper:.15g}] ({traj.message})"
        ),
        stats=dict(traj.stats),
    )


def mean_dynamics_ss(layer: Layer, equilibrium: Equilibrium | Regime | Any) -> Any:
    """The mean dynamics near an equilibrium as a :class:`control.StateSpace`.

    With Σ held at Σ*, the mean obeys ``dm/dt = K m + b``, ``K = A + Σ_h V_h (I + Σ* B_h)``
    (docs/theory.md §3–5). The returned system has state m, input b (d inputs) and output m:
    ``ss(K, I, I, 0)``. Poles are the eigenvalues of K; if K is Hurwitz the DC gain ``−K⁻¹``
    maps a constant bias b to the limit mean ``m* = −K⁻¹ b``.

    Parameters
    ----------
    layer
        The layer.
    equilibrium
        An :class:`~gtcontrol.Equilibrium`, a :class:`Regime` with a known limit, or a
        covariance matrix.

    Returns
    -------
    control.StateSpace

    Raises
    ------
    InvalidParametersError
        If no covariance can be taken from ``equilibrium``.

    Examples
    --------
    At ``σ* = 0.5`` of ``a = 1``, ``vB = −2`` the mean obeys ``dm/dt = K m + b`` with
    ``K = A + V(1 + σ*B) = −1``:

    >>> from gtcontrol import Layer, equilibria, mean_dynamics_ss
    >>> layer = Layer(A=[[1.0]], B=[[2.0]], V=-1.0)
    >>> sys = mean_dynamics_ss(layer, equilibria(layer)[0])
    >>> sys.A
    array([[-1.]])
    """
    import control

    if isinstance(equilibrium, Equilibrium):
        cov = np.asarray(equilibrium.cov)
    elif isinstance(equilibrium, Regime):
        if equilibrium.limit_cov is None:
            raise InvalidParametersError(
                f"equilibrium: the regime ({equilibrium.kind!r}) has no known limit covariance"
            )
        cov = np.asarray(equilibrium.limit_cov)
    else:
        cov = sym(as_float_array("equilibrium", equilibrium, ndim=2, shape=(layer.dim, layer.dim)))
    d = layer.dim
    k = mean_jacobian(layer, cov)
    return control.ss(k, np.eye(d), np.eye(d), np.zeros((d, d)))
