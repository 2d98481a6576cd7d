"""Moment-level verification of a design: its certificate and how far it is from losing stability.

**Certificate** (:class:`DesignCertificate`, :func:`design_certificate`). Recomputed from the
layer alone, whatever built it: the residual of the moment field at the target, the equilibria
and spectra of :mod:`gtcontrol.analysis.equilibria`, and (Riccati class) the sign of ``R`` and
slycot's unique positive-definite equilibrium.

**Robustness** (:class:`Robustness`, :func:`design_robustness`, options :class:`RobustnessCheck`).
Two measures: the complex stability radii of the linearization blocks at the target (mean
block ``K`` and covariance block ``DF(Σ*)``, in whitened coordinates), and the smallest relative
perturbation of the parameters found to destabilize the layer along seeded random directions.

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md §3–5.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._display import Axes
from ..._docstring import fill
from ..._linalg import FloatArray, identity_multiple, numerical_rank, sym
from ..._status import Budget, BudgetExhausted, Outcome, ResultFields, Status, as_time_limit
from ..._validation import as_positive_float, as_positive_int, as_seed, frozen
from ...analysis._core import lyapunov_certificate
from ...analysis.equilibria import equilibria, equilibrium_record, mean_matrix
from ...analysis.newton import newton_equilibrium
from ...analysis.riccati import RiccatiForm, is_riccati, model_error, riccati_form_or_none
from ...errors import InvalidParametersError, SolverError
from ...model.gaussian import Gaussian
from ...model.params import Layer
from .._design_kernel import (
    RESIDUAL_TOL,
    Whitening,
    abscissa,
    check_layer,
    is_normal,
    orthonormal_cov_jacobian,
    rel_residual,
)

__all__ = [
    "DesignCertificate",
    "Robustness",
    "RobustnessCheck",
    "design_certificate",
    "design_robustness",
]


#: Eigenvalues of ``Σ*^{1/2} R Σ*^{1/2}`` above ``−_PSD_RTOL ‖R̂‖`` count as non-negative, where
#: R's sign is not decided exactly (d > 16): the rounding of forming and whitening R.
_PSD_RTOL = 1e-13
#: Unique-equilibrium cross-check (Riccati class): Σ* must equal slycot's solution to this.
_UNIQUE_RTOL = 1e-8


@dataclass(frozen=True, eq=False)
class DesignCertificate(ResultFields, Outcome):
    """Verified convergence data of a layer towards a target ``N(m*, Σ*)``.

    Attributes
    ----------
    kind
        ``"global"``: every ``N(m0, Σ0)`` with ``Σ0 ≻ 0`` converges to the target (Riccati
        class, ``R ⪰ 0``, ``−A`` Hurwitz, Σ* the unique positive-definite equilibrium, K
        Hurwitz). ``"local"``: the target is a locally exponentially stable equilibrium.
        ``"none"``: not an equilibrium, or not stable.
    mean_rate
        ``−max Re λ(K)``, ``K = A + Σ_h V_h (I + Σ* B_h)``: the rate of the mean near Σ*.
    cov_rate
        ``−(spectral abscissa of DF(Σ*) on symmetric matrices)``: the covariance rate. In the
        Riccati class it is ``2 min Re λ(A)`` and it is exact for all times in the precision
        (``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}``).
    rate
        ``min(mean_rate, cov_rate)``: the mean and covariance errors are ``O(e^{−(rate−ε)t})``
        (``O(e^{−rate·t})`` unless the two rates coincide).
    residual
        Relative residual of the moment field ``(dm/dt, dΣ/dt)`` at the target.
    riccati
        True when every head has ``V_h = v_h I`` (and the layer has no noise).
    r_min
        ``λ_min(Σ*^{1/2} R Σ*^{1/2})`` (Riccati class; ``R ⪰ 0`` ⇔ ``r_min ≥ 0``), else ``None``.
    uniqueness_gap
        Relative distance between Σ* and slycot's unique positive-definite equilibrium
        (Riccati class), else ``None``.
    requested_rate, requested_cov_rate
        The rates that were asked for (``None`` when none were).
    mean_matrix
        K.
    message
        The statement, with its numbers.
    status
        ``Status.SUCCESS`` when the target is an equilibrium (relative residual ≤ 1e-9), both
        rates are positive and at least the requested ones (relative tolerance ``rate_rtol``),
        and the kind is ``"global"`` when that was required; ``Status.INFEASIBLE`` otherwise
        (``message`` names the condition that fails); ``Status.BUDGET_EXHAUSTED`` when the
        check was not made in the time left (rates and residual ``nan``).
    stats
        ``seconds``.
    success
        True for ``SUCCESS``: the certificate verifies.
    """

    kind: str
    mean_rate: float
    cov_rate: float
    rate: float
    residual: float
    riccati: bool
    r_min: float | None
    uniqueness_gap: float | None
    requested_rate: float | None
    requested_cov_rate: float | None
    mean_matrix: FloatArray

    _summary_fields = ("kind", "success", "rate", "mean_rate", "cov_rate", "residual")

    def _draw(self, ax: Axes) -> None:
        from ...analysis._figures import draw_spectrum

        title = f"{self.kind} certificate, rate {self.rate:.4g}: spectrum of K"
        rate = self.rate if self.rate > 0 else None
        draw_spectrum(ax, np.linalg.eigvals(self.mean_matrix), label="K", rate=rate, title=title)


@dataclass
class _Evidence:
    """What the spectra and equilibria say, before the requested rates are compared."""

    cov_abscissa: float
    mean_matrix: FloatArray
    r_min: float | None = None
    gap: float | None = None
    global_ok: bool = False
    reasons: list[str] = field(default_factory=list)


def _riccati_evidence(
    layer: Layer, form: RiccatiForm, s: FloatArray, residual: float, budget: Budget
) -> _Evidence:
    """Riccati class: ``R ⪰ 0``, ``−A`` Hurwitz and Σ* the unique equilibrium give ``global``."""
    wh = Whitening.of(s)
    w_r = np.linalg.eigvalsh(sym(wh.T @ form.R @ wh.T))
    r_min = float(w_r[0])
    reasons: list[str] = []
    gap: float | None = None
    eqs = equilibria(layer, cross_check=False, time_limit=budget.left_as_limit())
    if eqs.status is Status.BUDGET_EXHAUSTED:
        raise BudgetExhausted(budget.reason())
    if eqs.success and len(eqs) == 1:
        eq = eqs[0]
        top = float(np.max(np.abs(s)))  # scaled: ‖Σ‖ of a 1e-300 target underflows to 0
        with np.errstate(over="ignore"):  # a gap past the float range is inf, as it should be
            diff = np.linalg.norm((eq.cov - s) / top) if top else math.inf
            gap = float(diff / np.linalg.norm(s / top)) if top else math.inf
    else:
        eq = equilibrium_record(layer, s, budget=budget)
        reasons.append(f"slycot: {eqs.message}")
    min_re_a = float(np.min(np.linalg.eigvals(form.A).real))
    # both conditions of the global theorem must hold for the layer's own floats: R ⪰ 0 exactly
    # (rational arithmetic, d ≤ 16) or beyond its rounding, −A Hurwitz by a Lyapunov certificate
    budget.check()
    sign = model_error(layer, form).r_sign
    budget.check()
    if sign:
        psd = sign in ("pd", "psd")
    else:
        psd = r_min >= -_PSD_RTOL * max(float(np.max(np.abs(w_r))), 1e-300)
    anti_hurwitz = lyapunov_certificate(form.A, 1.0) is not None
    global_ok = bool(
        psd
        and anti_hurwitz
        and gap is not None
        and gap <= _UNIQUE_RTOL
        and residual <= RESIDUAL_TOL
    )
    if not psd:
        reasons.append(f"R is indefinite (λ_min(Σ*^½RΣ*^½) = {r_min:.3g})")
    if not anti_hurwitz:
        reasons.append(
            f"−A is not proved Hurwitz (min Re λ(A) = {min_re_a:.3g}; no Lyapunov certificate)"
        )
    return _Evidence(
        cov_abscissa=float(eq.spectral_abscissa),
        mean_matrix=np.asarray(eq.mean_matrix),
        r_min=r_min,
        gap=gap,
        global_ok=global_ok,
        reasons=reasons,
    )


def _local_evidence(layer: Layer, s: FloatArray, budget: Budget) -> _Evidence:
    """Outside the Riccati class: the linearization at Σ* only (a local certificate)."""
    eq = equilibrium_record(layer, s, budget=budget)
    return _Evidence(
        cov_abscissa=float(eq.spectral_abscissa),
        mean_matrix=np.asarray(eq.mean_matrix),
        reasons=["outside the noise-free Riccati class (V ≠ vI or noise): local certificate only"],
    )


def _headline(kind: str, gap: float | None) -> str:
    if kind == "global":
        return (
            "global: every N(m0, Σ0) with Σ0 ≻ 0 converges to the target (Riccati class, "
            f"R ⪰ 0, −A Hurwitz, unique equilibrium to {gap:.1e}); "
        )
    if kind == "local":
        return "local: the target is a locally exponentially stable equilibrium; "
    return "no certificate: "


def design_certificate(
    layer: Layer,
    target: Gaussian | tuple[Any, Any],
    *,
    rate: float | None = None,
    cov_rate: float | None = None,
    require_global: bool = False,
    rate_rtol: float = 1e-6,
    time_limit: float | None = None,
) -> DesignCertificate:
    """Verify that ``layer`` drives Gaussians to ``target`` and at which rates.

    Independent of how the layer was built: the residual of the moment field
    (:func:`gtcontrol.model.moments.moment_field`) at the target, and the equilibria and
    spectra of :mod:`gtcontrol.analysis.equilibria`. In the Riccati class (every
    ``V_h = v_h I``, no noise) the covariance dynamics is ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``; if Σ* is
    its unique positive-definite equilibrium (slycot), ``R ⪰ 0`` and ``−A`` is Hurwitz, then
    ``Ω(t) = Σ(t)⁻¹`` obeys ``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}`` and stays positive definite
    (``Ω(t) ⪰ e^{−Aᵀt}Ω0e^{−At} ≻ 0`` since R ⪰ 0), so every ``Σ0 ≻ 0`` converges (rate
    ``2 min Re λ(A)``), and the mean, driven by ``K(t) → K`` Hurwitz, converges too: the
    certificate is ``"global"``. Otherwise a stable linearization gives ``"local"``.

    Parameters
    ----------
    layer
        The layer.
    target
        ``N(m*, Σ*)`` (a :class:`Gaussian` or ``(mean, cov)``), Σ* ≻ 0.
    rate
        Requested mean rate to check (optional; positive).
    cov_rate
        Requested covariance rate to check (optional; positive).
    require_global
        ``success`` needs a global certificate.
    rate_rtol
        Relative tolerance of the rate comparison, in ``(0, 0.1)``.
    time_limit
        Wall-clock limit in seconds (``None``: none). Outside the Riccati class and above
        d = 50 the spectrum of ``DF(Σ*)`` is found by ARPACK, which can take many seconds at
        d in the hundreds; the equilibria of the Riccati class are found within the limit too.

    Returns
    -------
    DesignCertificate
        ``status`` is ``Status.SUCCESS`` when the layer is certified, else
        ``Status.INFEASIBLE`` with the failing condition in ``message``, or
        ``Status.BUDGET_EXHAUSTED`` (kind ``"none"``, rates ``nan``) when the time limit ran
        out first: nothing is certified then.

    Raises
    ------
    InvalidGaussianError
        On a malformed target or a dimension mismatch.
    InvalidParametersError
        If ``layer`` is not a :class:`Layer`, or on a bad rate, ``rate_rtol`` or
        ``time_limit``.

    Examples
    --------
    ``a = 1``, ``vB = −2``: ``σ* = −a/(vB) = 0.5`` is the unique equilibrium, ``R = −v(B + Bᵀ) = 4
    ⪰ 0`` and ``−A`` is Hurwitz, so the certificate is global; the mean matrix
    ``K = A + V(1 + σ*B) = −1`` gives the mean rate 1.

    >>> from gtcontrol import Gaussian, Layer, design_certificate
    >>> cert = design_certificate(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), Gaussian([0.0], [[0.5]]))
    >>> cert.kind, cert.success, round(cert.mean_rate, 12), round(cert.cov_rate, 12)
    ('global', True, 1.0, 2.0)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    clock = time.perf_counter()
    layer, tgt = check_layer(layer, target)
    rate = None if rate is None else as_positive_float("rate", rate)
    cov_rate = None if cov_rate is None else as_positive_float("cov_rate", cov_rate)
    if not as_positive_float("rate_rtol", rate_rtol) < 0.1:
        raise InvalidParametersError(f"rate_rtol: expected a number < 0.1, got {rate_rtol!r}")
    budget = Budget(time_limit)
    residual = rel_residual(layer, tgt)
    form = riccati_form_or_none(layer)
    riccati = form is not None and form.is_bernoulli
    try:
        budget.check()
        if form is not None and riccati:
            ev = _riccati_evidence(layer, form, tgt.cov, residual, budget)
        else:
            ev = _local_evidence(layer, tgt.cov, budget)
    except BudgetExhausted as exc:
        return uncertified(layer, tgt, rate, cov_rate, exc.reason, clock=clock)
    mean_rate = -abscissa(ev.mean_matrix)
    cov_rate_v = -ev.cov_abscissa
    is_eq = residual <= RESIDUAL_TOL
    stable = mean_rate > 0 and cov_rate_v > 0
    kind = "global" if ev.global_ok and stable else ("local" if is_eq and stable else "none")
    verified = is_eq and stable
    msgs: list[str] = []
    if not is_eq:
        msgs.append(f"the target is not an equilibrium (relative residual {residual:.3g})")
    if not stable:
        msgs.append(
            f"the linearization is not Hurwitz (mean rate {mean_rate:.6g}, covariance rate "
            f"{cov_rate_v:.6g})"
        )
    if rate is not None and mean_rate < rate * (1 - rate_rtol):
        verified = False
        msgs.append(f"mean rate {mean_rate:.9g} < requested {rate:.9g}")
    if cov_rate is not None and cov_rate_v < cov_rate * (1 - rate_rtol):
        verified = False
        msgs.append(f"covariance rate {cov_rate_v:.9g} < requested {cov_rate:.9g}")
    if require_global and kind != "global":
        verified = False
        msgs.append("a global certificate was required: " + "; ".join(ev.reasons or ["—"]))
    message = (
        _headline(kind, ev.gap)
        + f"mean rate {mean_rate:.6g}, covariance rate {cov_rate_v:.6g}, residual "
        + f"{residual:.2e}"
        + ("" if not msgs else "; " + "; ".join(msgs))
    )
    return DesignCertificate(
        kind=kind,
        mean_rate=mean_rate,
        cov_rate=cov_rate_v,
        rate=min(mean_rate, cov_rate_v),
        residual=residual,
        riccati=bool(riccati),
        r_min=ev.r_min,
        uniqueness_gap=ev.gap,
        requested_rate=rate,
        requested_cov_rate=cov_rate,
        mean_matrix=frozen(ev.mean_matrix.copy()),
        message=message,
        status=Status.SUCCESS if verified else Status.INFEASIBLE,
        stats={"seconds": time.perf_counter() - clock},
    )


def uncertified(
    layer: Layer,
    target: Gaussian,
    rate: float | None,
    cov_rate: float | None,
    why: str,
    *,
    clock: float | None = None,
) -> DesignCertificate:
    """The certificate of a layer that was not checked (``why``: the time limit): ``kind``
    ``"none"``, not verified, rates, residual and ``K`` ``nan``, ``Status.BUDGET_EXHAUSTED``;
    ``stats["seconds"]`` since ``clock`` when given."""
    return DesignCertificate(
        kind="none",
        mean_rate=math.nan,
        cov_rate=math.nan,
        rate=math.nan,
        residual=math.nan,
        riccati=is_riccati(layer),
        r_min=None,
        uniqueness_gap=None,
        requested_rate=rate,
        requested_cov_rate=cov_rate,
        mean_matrix=frozen(np.full((layer.dim, layer.dim), math.nan)),  # not formed either
        message=f"not checked ({why})",
        status=Status.BUDGET_EXHAUSTED,
        stats={} if clock is None else {"seconds": time.perf_counter() - clock},
    )


#: Finite caps on the sampling loops (a default call can never run unbounded).
_MAX_DIRECTIONS = 10_000
_MAX_SAMPLES = 100_000
#: Bisection steps along one direction (after the geometric bracket of 12 sizes).
_BISECTIONS = 12


#: The options of :func:`design_robustness`, documented once (``%(check)s``).
_CHECK_DOC = """\
n_directions
    Number of parameter directions searched (at most 10 000).
n_samples
    Number of sampled checks of each linearization block and of the parameter radius (at
    most 100 000).
max_relative
    Largest relative parameter perturbation searched."""


@fill(check=_CHECK_DOC)
@dataclass(frozen=True, kw_only=True)
class RobustnessCheck:
    """How hard :func:`design_robustness` looks: one validated value for the option family.

    :func:`gtcontrol.design_mean_matching` takes it as ``robustness=`` (``True`` is
    ``RobustnessCheck()``, ``False`` skips the check), as diffrax takes ``SaveAt``.

    Attributes
    ----------
    %(check)s

    Raises
    ------
    InvalidParametersError
        On a value out of its range (naming the field).

    Examples
    --------
    >>> from gtcontrol import RobustnessCheck
    >>> RobustnessCheck(n_directions=2, n_samples=4)
    RobustnessCheck(n_directions=2, n_samples=4, max_relative=1.0)
    """

    n_directions: int = 8
    n_samples: int = 16
    max_relative: float = 1.0

    def __post_init__(self) -> None:
        as_positive_int("n_directions", self.n_directions, maximum=_MAX_DIRECTIONS)
        as_positive_int("n_samples", self.n_samples, maximum=_MAX_SAMPLES)
        as_positive_float("max_relative", self.max_relative)


@dataclass(frozen=True, eq=False)
class Robustness(ResultFields, Outcome):
    """How far a design is from losing stability.

    All linearization quantities are in whitened coordinates ``x̂ = Σ*^{-1/2} x`` (the target is
    ``N(m̂*, I)``), where the constructive designs have normal linearizations, so that their radii
    equal their rates.

    Attributes
    ----------
    mean_radius
        Distance to instability (complex stability radius) of the mean linearization ``K̂``:
        ``min_ω σ_min(K̂ − iωI)`` — the smallest spectral-norm perturbation of ``K̂`` that puts
        an eigenvalue on the imaginary axis.
    cov_radius
        The same for the covariance linearization ``DF(Σ*)`` as an operator on symmetric
        matrices with the Frobenius norm.
    radius
        ``min(mean_radius, cov_radius)``: the distance to instability of the linearization.
    binding
        ``"mean"`` or ``"covariance"``: the block that attains ``radius``.
    frequency
        The ``ω`` where ``radius`` is attained.
    linear_samples
        Number of seeded random perturbations of each block, of norm ``0.999 × its radius``.
    linear_stable_fraction
        Fraction of them that left the block Hurwitz (1.0 by the theory: a check of the radius).
    worst_case_abscissa
        Spectral abscissa after the worst-case perturbation of norm ``radius`` (≈ 0: the radius
        is attained), relative to ``radius``.
    parameter_radius
        Smallest relative perturbation of the parameters found to destabilize the layer: every
        matrix ``X`` of the layer (``A``, each ``B_h``, each ``V_h`` — a scalar ``V_h = v_h I``
        stays scalar) moves by ``δX`` with ``‖δX‖_F = ε ‖X‖_F`` along seeded random directions;
        along each, the first ``ε`` at which the (continued) equilibrium loses local stability
        or positive definiteness is bracketed and bisected. ``inf`` if none was found up to
        ``max_relative``. An upper bound on the true distance (directions are sampled).
    parameter_directions
        Number of directions searched (fewer than requested when the time limit ran out).
    parameter_stable_fraction
        Fraction of fresh random perturbations of relative size ``0.5 × parameter_radius``
        (``max_relative`` when none destabilized) that kept the layer stable (``nan`` when the
        time limit left none checked).
    destabilizing
        A perturbed layer of relative size ``parameter_radius × (1 + 1e-3)`` that is not stable
        (``None`` if none was found).
    status
        ``Status.SUCCESS``; ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` ran out during the
        parameter search (the fields hold what was found so far); ``Status.FAILED`` when a
        stability radius could not be computed (slycot), with the reason in ``message``.
    message
        What was measured, or why it is incomplete.
    stats
        ``evaluations`` (perturbed equilibria computed), ``seconds``.
    """

    mean_radius: float
    cov_radius: float
    radius: float
    binding: str
    frequency: float
    linear_samples: int
    linear_stable_fraction: float
    worst_case_abscissa: float
    parameter_radius: float
    parameter_directions: int
    parameter_stable_fraction: float
    destabilizing: Layer | None

    _summary_fields = (
        "radius",
        "binding",
        "mean_radius",
        "cov_radius",
        "parameter_radius",
        "parameter_stable_fraction",
    )

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_radii

        radii = {"mean": self.mean_radius, "covariance": self.cov_radius}
        radii["parameters (relative)"] = self.parameter_radius
        draw_radii(ax, radii, title=f"stability radii (binding: {self.binding})")


# ----------------------------------------------------------------------------- linearization


def _stability_radius(x: FloatArray) -> tuple[float, float]:
    """``(min_ω σ_min(X − iωI), ω*)`` for Hurwitz X: the complex stability radius.

    Normal X: the distance of the spectrum to the imaginary axis. Otherwise slycot AB13DD
    computes ``‖(sI − X)⁻¹‖_∞`` and its peak frequency (the radius is its inverse).
    """
    eig = np.linalg.eigvals(x)
    if eig.size == 0:
        return math.inf, 0.0
    if np.max(eig.real) >= 0:
        k = int(np.argmax(eig.real))
        return 0.0, float(abs(eig[k].imag))
    if is_normal(x):
        k = int(np.argmax(eig.real))
        return float(-eig[k].real), float(abs(eig[k].imag))
    import slycot
    from slycot.exceptions import SlycotError

    n = x.shape[0]
    eye = np.eye(n)
    try:
        gpeak, fpeak = slycot.ab13dd(
            "C", "I", "N", "Z", n, n, n, x.copy(), eye, eye, eye, np.zeros((n, n))
        )
    except (SlycotError, ValueError, ArithmeticError) as exc:
        raise SolverError(
            f"H∞ norm of (sI − X)⁻¹ (slycot AB13DD) failed: {exc}",
            status=Status.FAILED,
            stats={"cause": "slycot"},
        ) from None
    return 1.0 / float(gpeak), float(fpeak)


class _Block:
    """A block of the linearization and how to perturb it (explicit or Lyapunov-structured)."""

    def __init__(self, name: str, x: FloatArray, lyapunov_of: FloatArray | None = None) -> None:
        self.name = name
        self.x = x
        self.n_mat = lyapunov_of  # X = (H ↦ N H + H Nᵀ) with N normal
        if lyapunov_of is not None:
            eig, vec = np.linalg.eig(lyapunov_of)
            k = int(np.argmax(eig.real))
            self.radius = float(-2.0 * eig[k].real)
            self.frequency = float(abs(2.0 * eig[k].imag))
            self._worst = (eig[k], vec[:, k] / np.linalg.norm(vec[:, k]))
        else:
            self.radius, self.frequency = _stability_radius(x)

    def abscissa(self, delta: np.ndarray) -> float:
        if self.n_mat is not None:
            return 2.0 * float(np.max(np.linalg.eigvals(self.n_mat + delta).real))
        return float(np.max(np.linalg.eigvals(self.x + delta).real))

    def random(self, size: float, rng: np.random.Generator) -> np.ndarray:
        base = self.n_mat if self.n_mat is not None else self.x
        n = base.shape[0]
        z = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
        # The Lyapunov operator of ΔN has norm ≤ 2‖ΔN‖: size/2 keeps ‖ΔX‖ ≤ size.
        scale = size / 2.0 if self.n_mat is not None else size
        return scale * z / np.linalg.norm(z, 2)

    def worst(self) -> np.ndarray:
        if self.n_mat is not None:
            lam, u = self._worst
            return np.asarray(-lam.real * np.outer(u, u.conj()))
        n = self.x.shape[0]
        u, sv, wh = np.linalg.svd(self.x - 1j * self.frequency * np.eye(n))
        return np.asarray(-sv[-1] * np.outer(u[:, -1], wh[-1, :]))


#: Largest covariance block built explicitly (``d(d+1)/2``-square: 134 MB at this size, reached
#: at d = 90); a larger one (outside the normal Riccati case, which is Lyapunov-structured) is
#: refused with a SolverError rather than left to exhaust memory.
_MAX_COV_BLOCK = 4096


def _cov_block(hat: Layer) -> _Block:
    form = riccati_form_or_none(hat)
    if form is not None and form.is_bernoulli:
        # At Σ̂ = I: DF[H] = N H + H Nᵀ with N = A − R (the Riccati linearization A − ΣR).
        n_mat = form.A - form.R
        if is_normal(n_mat):
            return _Block("covariance", np.zeros((0, 0)), lyapunov_of=n_mat)
    n_sym = hat.dim * (hat.dim + 1) // 2
    if n_sym > _MAX_COV_BLOCK:
        raise SolverError(
            f"the covariance linearization is a {n_sym} × {n_sym} matrix at d = {hat.dim}, "
            f"larger than the {_MAX_COV_BLOCK} rows its stability radius is computed for",
            status=Status.FAILED,
            stats={"cause": "too_large"},
        )
    return _Block("covariance", orthonormal_cov_jacobian(hat, np.eye(hat.dim)))


@dataclass
class _Linear:
    """Stability radii of the two blocks, checked by sampling."""

    blocks: list[_Block]
    bind: _Block
    stable_fraction: float
    worst: float


def _grace_check(budget: Budget) -> None:
    """Raise :class:`BudgetExhausted` when even the budget's grace is spent."""
    left = budget.grace()
    if left is not None and left <= 1e-9:
        raise BudgetExhausted(budget.reason())


def _linear_radii(
    layer: Layer, tgt: Gaussian, n_samp: int, rng: np.random.Generator, budget: Budget
) -> _Linear:
    """Both blocks' radii, checked by ``n_samp`` sampled perturbations each (``O(n³)`` each).

    The radii are the report's core: they are computed within the budget's grace
    (:meth:`Budget.grace`), and :class:`BudgetExhausted` is raised when even that is spent; the
    sampling stops when it runs out (the fraction is over the samples done).
    """
    hat = Whitening.of(tgt.cov).layer(layer)
    _grace_check(budget)
    blocks = [_Block("mean", mean_matrix(hat, np.eye(hat.dim)))]
    _grace_check(budget)
    blocks.append(_cov_block(hat))
    for blk in blocks:
        if blk.radius <= 0:
            raise InvalidParametersError(
                f"layer: the {blk.name} linearization at the target is not Hurwitz"
            )
    bind = min(blocks, key=lambda b: b.radius)
    _grace_check(budget)
    worst = bind.abscissa(bind.worst()) / bind.radius
    stable_count = done = 0
    for _ in range(n_samp):
        for blk in blocks:
            left = budget.grace()
            if left is not None and left <= 1e-9:
                break
            stable_count += blk.abscissa(blk.random(0.999 * blk.radius, rng)) < 0
            done += 1
    return _Linear(blocks, bind, stable_count / done if done else math.nan, worst)


# ----------------------------------------------------------------------------- parameters

_Blocks = list[tuple[str, FloatArray, bool]]


def _perturbable(layer: Layer) -> _Blocks:
    """``(name, matrix, scalar)`` for A and every head's V and B (scalar V stays scalar)."""
    a, _ = layer.affine_ffn()
    out = [("A", a, False)]
    for i, (v_h, b_h) in enumerate(layer.heads):
        out.append((f"V{i}", v_h, identity_multiple(v_h) is not None))
        out.append((f"B{i}", b_h, False))
    return out


def _perturbed(layer: Layer, blocks: _Blocks, dirs: list[FloatArray], eps: float) -> Layer:
    mats = [x + eps * float(np.linalg.norm(x)) * z for (_, x, _), z in zip(blocks, dirs)]
    heads = [(mats[1 + 2 * i], mats[2 + 2 * i]) for i in range(len(layer.heads))]
    return Layer(mats[0], b=layer.affine_ffn()[1], heads=heads, noise=layer.noise, dim=layer.dim)


def _random_direction(blocks: _Blocks, rng: np.random.Generator) -> list[FloatArray]:
    out = []
    for _, x, scalar in blocks:
        d = x.shape[0]
        z = np.eye(d) * rng.choice([-1.0, 1.0]) if scalar else rng.standard_normal(x.shape)
        out.append(z / np.linalg.norm(z))
    return out


def _stable_at(layer: Layer, start: FloatArray, budget: Budget) -> bool:
    """Does ``layer`` have a positive-definite, locally stable equilibrium (continued from
    ``start``) with a Hurwitz mean matrix? Raises :class:`BudgetExhausted` when the budget
    runs out before the equilibrium is known."""
    form = riccati_form_or_none(layer)
    left = budget.grace()
    try:
        if form is not None and form.is_bernoulli:
            eqs = equilibria(layer, cross_check=False, time_limit=left)
            if eqs.status is Status.BUDGET_EXHAUSTED:
                raise BudgetExhausted(budget.reason())
            if not eqs.success or len(eqs) != 1:
                return False
            eq = eqs[0]
        else:
            res = newton_equilibrium(layer, start, time_limit=left)
            if res.status is Status.BUDGET_EXHAUSTED:
                raise BudgetExhausted(budget.reason())
            if not res.success:
                return False
            cov = np.asarray(res.cov)
            if numerical_rank(cov, rtol=1e-10) < layer.dim:
                return False
            eq = equilibrium_record(
                layer, cov, budget=Budget(None if left is None else budget.hand(left))
            )
    except SolverError:
        return False
    return bool(eq.stable and abscissa(np.asarray(eq.mean_matrix)) < 0)


class _ParameterSearch:
    """Bracket and bisect the first loss of stability along random directions (budgeted)."""

    def __init__(self, layer: Layer, start: FloatArray, budget: Budget) -> None:
        self.layer = layer
        self.start = start
        self.budget = budget
        self.blocks = _perturbable(layer)
        self.evaluations = 0
        self.best = math.inf
        self.best_dirs: list[FloatArray] | None = None
        self.directions = 0

    def stable(self, dirs: list[FloatArray], eps: float) -> bool:
        self.budget.check()
        self.evaluations += 1
        return _stable_at(_perturbed(self.layer, self.blocks, dirs, eps), self.start, self.budget)

    def along(self, dirs: list[FloatArray], eps_max: float) -> None:
        """Search one direction; keep it if it destabilizes earlier than the best so far."""
        lo, hi = 0.0, math.inf
        for eps in eps_max * 2.0 ** -np.arange(11, -1, -1):
            if eps >= self.best:
                break
            if self.stable(dirs, float(eps)):
                lo = float(eps)
            else:
                hi = float(eps)
                break
        if not math.isinf(hi):
            for _ in range(_BISECTIONS):
                mid = 0.5 * (lo + hi)
                if self.stable(dirs, mid):
                    lo = mid
                else:
                    hi = mid
            if hi < self.best:
                self.best, self.best_dirs = hi, dirs
        self.directions += 1

    def destabilizing(self) -> Layer | None:
        if self.best_dirs is None:
            return None
        bad = _perturbed(self.layer, self.blocks, self.best_dirs, self.best * (1 + 1e-3))
        # A non-monotone direction: keep the bracket, report no layer.
        try:
            return None if _stable_at(bad, self.start, self.budget) else bad
        except BudgetExhausted:  # not confirmed in time: no layer
            return None

    def stable_fraction(self, eps: float, n_samp: int, rng: np.random.Generator) -> float:
        ok = done = 0
        for _ in range(n_samp):
            dirs = _random_direction(self.blocks, rng)
            try:
                ok += self.stable(dirs, eps)
            except BudgetExhausted:
                break
            done += 1
        return ok / done if done else math.nan


def no_radii(n_samples: int, status: Status, message: str, seconds: float = 0.0) -> Robustness:
    """The robustness report with no radius computed: not started, cut short or failed."""
    nan = math.nan
    return Robustness(
        mean_radius=nan,
        cov_radius=nan,
        radius=nan,
        binding="",
        frequency=nan,
        linear_samples=n_samples,
        linear_stable_fraction=nan,
        worst_case_abscissa=nan,
        parameter_radius=nan,
        parameter_directions=0,
        parameter_stable_fraction=nan,
        destabilizing=None,
        stats={"evaluations": 0, "seconds": seconds},
        status=status,
        message=message,
    )


def robustness_within(
    layer: Layer,
    tgt: Gaussian,
    *,
    n_directions: int,
    n_samples: int,
    max_relative: float,
    seed: int,
    budget: Budget,
) -> Robustness:
    """:func:`design_robustness` on validated input, within ``budget``."""
    clock = time.perf_counter()
    rng = np.random.default_rng(seed)
    try:
        lin = _linear_radii(layer, tgt, n_samples, rng, budget)
    except (SolverError, BudgetExhausted) as exc:
        cut = isinstance(exc, BudgetExhausted)
        return no_radii(
            n_samples,
            Status.BUDGET_EXHAUSTED if cut else Status.FAILED,
            f"incomplete: {exc}" if cut else str(exc),
            time.perf_counter() - clock,
        )
    search = _ParameterSearch(layer, tgt.cov, budget)
    exhausted: str | None = None
    try:
        for _ in range(n_directions):
            search.along(_random_direction(search.blocks, rng), max_relative)
    except BudgetExhausted as exc:
        exhausted = exc.reason
    check_eps = 0.5 * search.best if math.isfinite(search.best) else max_relative
    fraction = search.stable_fraction(check_eps, n_samples, rng) if exhausted is None else math.nan
    if exhausted is None and math.isnan(fraction):
        exhausted = budget.reason()
    message = (
        f"stability radius {lin.bind.radius:.6g} ({lin.bind.name} block); parameter radius "
        f"{search.best:.4g} over {search.directions} directions"
    )
    if exhausted is not None:
        message += f"; incomplete: {exhausted}"
    return Robustness(
        mean_radius=lin.blocks[0].radius,
        cov_radius=lin.blocks[1].radius,
        radius=lin.bind.radius,
        binding=lin.bind.name,
        frequency=lin.bind.frequency,
        linear_samples=n_samples,
        linear_stable_fraction=lin.stable_fraction,
        worst_case_abscissa=lin.worst,
        parameter_radius=search.best,
        parameter_directions=search.directions,
        parameter_stable_fraction=fraction,
        destabilizing=search.destabilizing(),
        stats={"evaluations": search.evaluations, "seconds": time.perf_counter() - clock},
        status=Status.SUCCESS if exhausted is None else Status.BUDGET_EXHAUSTED,
        message=message,
    )


@fill(check=_CHECK_DOC)
def design_robustness(
    layer: Layer,
    target: Gaussian | tuple[Any, Any],
    *,
    n_directions: int = 8,
    n_samples: int = 16,
    max_relative: float = 1.0,
    seed: int = 0,
    time_limit: float | None = None,
) -> Robustness:
    """Distance to instability of a design, confirmed by sampled perturbations.

    1. The linearization of the moment dynamics at the target is block triangular: the mean
       block ``K`` and the covariance block ``DF(Σ*)`` (on symmetric matrices). For each (in
       whitened coordinates) the complex stability radius ``min_ω σ_min(X − iωI)`` is computed
       (exactly for normal blocks; by slycot AB13DD's H∞ norm of ``(sI − X)⁻¹`` otherwise).
       Seeded random perturbations of norm ``0.999 ×`` radius must leave the block Hurwitz, and
       the worst-case rank-one perturbation ``−σ_min u wᴴ`` (at the peak frequency) puts an
       eigenvalue on the imaginary axis.
    2. Parameters: relative perturbations of every matrix (see :class:`Robustness`) along
       ``n_directions`` seeded random directions; the first loss of stability along each is
       bracketed on a geometric grid and bisected; ``n_samples`` fresh perturbations at half the
       smallest such size are checked stable.

    Parameters
    ----------
    layer
        A layer with the target as equilibrium (e.g. a design).
    target
        ``N(m*, Σ*)`` (a :class:`Gaussian` or ``(mean, cov)``), Σ* ≻ 0.
    %(check)s
    seed
        Seed of every random choice.
    time_limit
        Wall-clock limit in seconds for the parameter search (``None``: no limit; the loops
        are finite anyway). When it runs out the result holds what was found so far, with
        ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    Robustness

    Raises
    ------
    InvalidParametersError
        If the target is not a stable equilibrium of the layer (there is nothing to measure),
        or on malformed counts, sizes or limits.
    InvalidGaussianError
        On a malformed target or a dimension mismatch.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Gaussian, design_mean_matching, design_robustness
    >>> target = Gaussian([1.0, 0.0], np.eye(2))
    >>> design = design_mean_matching(target, robustness=False, min_ess=None)
    >>> rob = design_robustness(design.layer, design.target, n_directions=2, n_samples=4)
    >>> rob.status, bool(rob.cov_radius > 0)
    (<Status.SUCCESS: 'success'>, True)
    """
    layer, tgt = check_layer(layer, target)
    check = RobustnessCheck(
        n_directions=n_directions, n_samples=n_samples, max_relative=max_relative
    )
    budget = Budget(as_time_limit(time_limit))
    as_seed("seed", seed)
    if rel_residual(layer, tgt) > RESIDUAL_TOL:
        raise InvalidParametersError("layer: the target is not an equilibrium of the layer")
    return robustness_within(
        layer,
        tgt,
        n_directions=check.n_directions,
        n_samples=check.n_samples,
        max_relative=check.max_relative,
        seed=int(seed),
        budget=budget,
    )
