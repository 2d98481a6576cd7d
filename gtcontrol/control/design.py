"""Design of stable, time-invariant attention layers for asymptotic mean matching.

Given a target ``N(m*, Σ*)`` (Σ* ≻ 0), find one layer ``(A, B, V, b)`` whose moment dynamics
(docs/theory.md §2) converge to it from every Gaussian start, at a prescribed exponential rate, with
a certificate (docs/theory.md §3–5).

Constructive design (Riccati class, single head ``V = vI``). Choose ``A = aI + S Σ*⁻¹`` with
``a > 0`` and ``S`` skew, and ``v < 0``. Then ``R := AᵀΩ* + Ω*A = 2a Ω*`` (``Ω* = Σ*⁻¹``) is
positive definite, ``B = R / (−2v)`` gives ``R = −v (B + Bᵀ)``, and Σ* is the equilibrium of

    dΣ/dt = AΣ + ΣAᵀ − ΣRΣ,       i.e.   dΩ/dt = −AᵀΩ − ΩA + R   for Ω = Σ⁻¹.

The precision ODE is linear, so ``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}`` exactly; with
``W = Σ*^{1/2}(Ω − Ω*)Σ*^{1/2}`` this is ``‖W(t)‖_F = e^{−2at}‖W(0)‖_F`` (the rotation
``S`` is orthogonal in the Σ*⁻¹ metric), and Ω(t) stays positive definite because R ≻ 0: every
``Σ0 ≻ 0`` converges, at rate ``2a``. The mean obeys ``dm/dt = K(t) m + b`` with
``K(t) → K = vI + ½(A − Σ*AᵀΣ*⁻¹) = vI + S Σ*⁻¹``, whose eigenvalues all have real part ``v``;
``b = −K m*`` puts the mean equilibrium at ``m*``, reached at rate ``min(|v|, 2a)``. With
``rate = r`` the defaults are ``v = −r`` and ``2a = 2r`` (so ``B = Σ*⁻¹``): mean rate ``r``,
covariance rate ``2r``.

Designs with fixed parts (a pretrained ``B``, a fixed ``V``, a fixed ``A``) and minimum-norm
designs are solved with CasADi/IPOPT in *whitened* coordinates ``x̂ = Σ*^{-1/2} x`` (target
``N(m̂*, I)``; ``Â = Σ*^{-1/2}AΣ*^{1/2}``, ``B̂ = Σ*^{1/2}BΣ*^{1/2}``, ``V̂ = Σ*^{-1/2}VΣ*^{1/2}``,
which keeps every fixed part fixed). Constraints:

* equilibrium: ``F(Σ*) = M*Σ* + Σ*M*ᵀ = 0`` ⇔ ``sym(Â + V̂B̂) = 0`` (``M* = A + VΣ*B``);
* spectral-abscissa margins ``α(X) ≤ −r`` through the shifted Lyapunov equation (a smooth
  surrogate that is exact for the open condition ``α(X) < −r``):
  ``(X + rI)ᵀP + P(X + rI) + 2rI = 0`` with ``P = LLᵀ`` (L lower triangular) and
  ``tr P ≤ κ n`` (κ = ``max_condition``). A positive semi-definite solution exists iff
  ``X + rI`` is Hurwitz; it is then positive definite, L stays nonsingular at the optimum (full
  constraint rank for IPOPT), and ``d/dt xᵀPx ≤ −2r xᵀPx`` gives
  ``‖e^{Xt}‖ ≤ √cond(P) e^{−rt}``. The bound on P keeps the feasible set closed: for a normal X
  it means ``α(X) ≤ −r(1 + 1/κ)``, so a minimum-norm design overshoots the requested rate by
  about ``1/κ``. Each margin has an elastic slack (rate ``r(1 − s)``, ``s ≥ 0``, exact penalty
  in the objective): any start is feasible, and an unreachable margin is named with the best
  rate reached. Riccati class (``V = vI``): the mean matrix has spectrum ``v + iℝ`` exactly, so
  the mean margin is the bound ``v ≤ −rate``; the covariance linearization has spectrum
  ``−(λ_i + λ_j)(A)``, so its certificate is on ``X = −Â`` with rate ``r_c/2`` (``d×d``).
  General V: certificates on ``K̂ = Â + V̂ + V̂B̂`` (``d×d``) and on the matrix of ``DF(Σ*)`` on
  symmetric matrices (``d(d+1)/2`` square, orthonormal basis);
* global convergence (Riccati class): ``R̂ = 2 sym(Â) ⪰ 0`` (``= L_R L_Rᵀ``);
* objective: ``‖Â‖² + ‖B̂‖² + ‖V̂‖² + ‖b̂‖²`` (Frobenius, designed parts only, ``b = −K m*``):
  the parameter norm in the target's metric. It does not depend on the coordinates the user
  chose (it is invariant under ``x ↦ Qx`` with Q orthogonal, applied to target and layer alike)
  and equals the plain norm when ``Σ* = I``; it also keeps the NLP well conditioned (the plain
  norm couples every entry of A through Σ*^{±½}: a dense Hessian; measured at d = 10: 364
  IPOPT iterations against 9).

Infeasible requests: analytic necessary conditions are checked first and raise
:class:`~gtcontrol.errors.UnreachableTargetError` naming the constraint (e.g. a fixed B whose
symmetric part is indefinite cannot give ``R ⪰ 0`` with ``V = vI`` and ``v < 0``). IPOPT is
tried with two barrier strategies; if neither yields a verified design, the closed-form starting
design is returned when it verifies (``status="suboptimal"``), otherwise the result has
``success=False`` and the message names the binding margin (positive slack, with the best rate
reached) or the most violated constraint group.

Scale: the constructive design is ``O(d³)`` (milliseconds at d = 50). The NLP builds CasADi
expressions with ``O(d³)`` nodes for the ``V = vI`` class (a few seconds at d = 20) and
``O(d⁶)`` for a general V (the ``d(d+1)/2``-square covariance certificate: use d ≲ 6).

Every design is verified independently after construction (:func:`design_certificate`: residual
of the moment field at the target, equilibria and their spectra from
:mod:`gtcontrol.asymptotics`) and comes with a robustness report (:func:`design_robustness`).

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026), §4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._linalg import FloatArray, identity_multiple, sym
from .._validation import as_float_array, as_positive_float, as_positive_int, frozen
from ..analysis.asymptotics import (
    covariance_jacobian,
    equilibria,
    equilibrium_at,
    mean_matrix,
    newton_equilibrium,
)
from ..analysis.riccati import riccati_form
from ..errors import (
    InvalidGaussianError,
    InvalidParametersError,
    SolverError,
    UnreachableTargetError,
)
from ..model.gaussian import Gaussian
from ..model.moments import moment_field, simulate
from ..model.params import Layer

__all__ = [
    "Certificate",
    "ConvergenceData",
    "DesignOptions",
    "MeanMatchingDesign",
    "Robustness",
    "design_certificate",
    "design_convergence",
    "design_mean_matching",
    "design_robustness",
]

#: Relative inflation of the requested margins inside the NLP, so that the verified rates are
#: never below the request after IPOPT's tolerance and the final rounding.
_MARGIN_SLACK = 1e-6
#: Relative residual of the moment field at the target accepted by the certificate.
_RESIDUAL_TOL = 1e-9
#: Eigenvalues of ``Σ*^{1/2} R Σ*^{1/2}`` above ``−_PSD_RTOL ‖R̂‖`` count as non-negative.
_PSD_RTOL = 1e-10
#: Unique-equilibrium cross-check (Riccati class): Σ* must equal slycot's solution to this.
_UNIQUE_RTOL = 1e-8


# ============================================================================ options, results


@dataclass(frozen=True, kw_only=True)
class DesignOptions:
    """Options of :func:`design_mean_matching` (validated when built).

    Attributes
    ----------
    require_global
        ``None`` (default): global certificate in the Riccati class (``V = vI``, ``R ⪰ 0``),
        local otherwise. ``True``: fail unless a global certificate is possible (needs
        ``V = vI``). ``False``: only the local margins (allows e.g. a fixed B with indefinite
        symmetric part).
    V_structure
        How a *designed* V is parameterized: ``"scalar"`` (``V = vI``, Riccati class, default)
        or ``"full"`` (any ``d×d`` matrix; local certificate).
    max_condition
        κ: the Lyapunov weights P of the margin certificates (``(X + rI)ᵀP + P(X + rI) =
        −2rI``) satisfy ``tr P ≤ κ n``. This bounds the transient growth
        ``‖e^{Xt}‖ ≤ √cond(P) e^{−rt}`` and, for normal X, asks ``α(X) ≤ −r(1 + 1/κ)``.
    tol, max_iter
        IPOPT tolerance and iteration limit (per attempt).
    symbolic
        CasADi expression type of the NLP: ``"SX"`` (scalar graphs, default) or ``"MX"``
        (matrix graphs; builds faster for larger d).
    ipopt
        Extra IPOPT options (e.g. ``{"mu_strategy": "adaptive"}``). When given, they replace
        the built-in sequence of attempts (default barrier strategy, then adaptive).
    rate_rtol
        Relative tolerance when the certificate compares verified and requested rates.
    robustness
        Compute :func:`design_robustness` for the result.
    robustness_directions, robustness_samples, robustness_max, seed
        Passed to :func:`design_robustness`.
    """

    require_global: bool | None = None
    V_structure: str = "scalar"
    max_condition: float = 100.0
    tol: float = 1e-10
    max_iter: int = 3000
    rate_rtol: float = 1e-6
    symbolic: str = "SX"
    ipopt: Mapping[str, Any] = field(default_factory=dict)
    robustness: bool = True
    robustness_directions: int = 8
    robustness_samples: int = 16
    robustness_max: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.require_global not in (None, True, False):
            raise InvalidParametersError(
                f"require_global: expected None, True or False, got {self.require_global!r}"
            )
        if self.V_structure not in ("scalar", "full"):
            raise InvalidParametersError(
                f"V_structure: expected 'scalar' or 'full', got {self.V_structure!r}"
            )
        if as_positive_float("max_condition", self.max_condition) < 1.0:
            raise InvalidParametersError(
                f"max_condition: expected a number ≥ 1, got {self.max_condition!r}"
            )
        if not as_positive_float("tol", self.tol) < 1e-3:
            raise InvalidParametersError(f"tol: expected a number < 1e-3, got {self.tol!r}")
        as_positive_int("max_iter", self.max_iter)
        if not as_positive_float("rate_rtol", self.rate_rtol) < 0.1:
            raise InvalidParametersError(
                f"rate_rtol: expected a number < 0.1, got {self.rate_rtol!r}"
            )
        if self.symbolic not in ("SX", "MX"):
            raise InvalidParametersError(f"symbolic: expected 'SX' or 'MX', got {self.symbolic!r}")
        if not isinstance(self.ipopt, Mapping) or not all(isinstance(k, str) for k in self.ipopt):
            raise InvalidParametersError(
                f"ipopt: expected a mapping of IPOPT option names to values, got {self.ipopt!r}"
            )
        as_positive_int("robustness_directions", self.robustness_directions)
        as_positive_int("robustness_samples", self.robustness_samples)
        as_positive_float("robustness_max", self.robustness_max)
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise InvalidParametersError(f"seed: expected an integer, got {self.seed!r}")


@dataclass(frozen=True, eq=False)
class Certificate:
    """Verified convergence data of a layer towards a target ``N(m*, Σ*)``.

    Attributes
    ----------
    kind
        ``"global"``: every ``N(m0, Σ0)`` with ``Σ0 ≻ 0`` converges to the target (Riccati
        class, ``R ⪰ 0``, ``−A`` Hurwitz, Σ* the unique positive-definite equilibrium, K
        Hurwitz). ``"local"``: the target is a locally exponentially stable equilibrium.
        ``"none"``: not an equilibrium, or not stable.
    valid
        The target is an equilibrium (relative residual ≤ 1e-9), both rates are positive and
        at least the requested ones (relative tolerance ``rate_rtol``), and the kind is
        ``"global"`` when that was required.
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
    """

    kind: str
    valid: bool
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
    message: str


@dataclass(frozen=True, eq=False)
class Robustness:
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
        Number of directions searched.
    parameter_stable_fraction
        Fraction of fresh random perturbations of relative size ``0.5 × parameter_radius``
        (``max_relative`` when none destabilized) that kept the layer stable.
    destabilizing
        A perturbed layer of relative size ``parameter_radius × (1 + 1e-3)`` that is not stable
        (``None`` if none was found).
    stats
        ``evaluations``, ``seconds``.
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
    stats: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class MeanMatchingDesign:
    """Result of :func:`design_mean_matching`.

    Attributes
    ----------
    layer
        The designed time-invariant layer (single head).
    target
        ``N(m*, Σ*)``: the equilibrium the layer drives every admissible start to.
    success, status, message
        ``status``: ``"ok"``; ``"suboptimal"`` (certified, but IPOPT stopped before proving
        minimality); or, with ``success=False``, ``"solver_failed"`` / ``"not_certified"`` with
        the reason (``layer`` is then the best iterate).
    method
        ``"constructive"`` or ``"casadi"``.
    rate, cov_rate
        The requested mean and covariance rates.
    certificate
        :class:`Certificate` (verified independently of the construction).
    robustness
        :class:`Robustness` or ``None`` (when disabled).
    fixed
        Names of the parts that were fixed (``"A"``, ``"B"``, ``"V"``).
    norm
        ``sqrt(‖A‖² + ‖B‖² + ‖V‖² + ‖b‖²)`` (Frobenius).
    whitened_norm
        The same in whitened coordinates (the norm the NLP minimizes):
        ``sqrt(‖Â‖² + ‖B̂‖² + ‖V̂‖² + ‖b̂‖²)``, ``Â = Σ*^{-½}AΣ*^{½}``, ``B̂ = Σ*^{½}BΣ*^{½}``,
        ``V̂ = Σ*^{-½}VΣ*^{½}``, ``b̂ = Σ*^{-½}b``.
    stats
        ``seconds`` and, for CasADi designs, IPOPT's ``return_status``, ``iterations``,
        ``objective``, the certificate weights' condition numbers.
    """

    layer: Layer
    target: Gaussian
    success: bool
    status: str
    message: str
    method: str
    rate: float
    cov_rate: float
    certificate: Certificate
    robustness: Robustness | None
    fixed: tuple[str, ...]
    norm: float
    whitened_norm: float
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def equilibrium(self) -> Gaussian:
        """The equilibrium ``N(m*, Σ*)`` (the target)."""
        return self.target

    def __repr__(self) -> str:
        return (
            f"MeanMatchingDesign(dim={self.target.dim}, method={self.method!r}, "
            f"success={self.success}, rate={self.certificate.rate:.6g}, "
            f"kind={self.certificate.kind!r})"
        )


# ============================================================================ helpers


def _as_target(target_mean: Any, target_cov: Any) -> Gaussian:
    m = as_float_array("target_mean", target_mean, ndim=1, error=InvalidGaussianError)
    if m.shape[0] == 0:
        raise InvalidGaussianError("target_mean: expected at least one dimension, got 0")
    d = m.shape[0]
    cov = np.eye(d) if target_cov is None else target_cov
    g = Gaussian(m, cov, name="target")
    if g.rank < d:
        raise InvalidGaussianError(
            f"target_cov: expected a positive-definite covariance (rank {g.rank} < {d}); the "
            "design and its certificate are built on Σ*⁻¹"
        )
    return g


def _coerce_target(target: Any) -> Gaussian:
    if isinstance(target, Gaussian):
        return _as_target(target.mean, target.cov)
    if isinstance(target, (tuple, list)) and len(target) == 2:
        return _as_target(target[0], target[1])
    raise InvalidGaussianError(
        f"target: expected a Gaussian or a (mean, cov) pair, got {type(target).__name__}"
    )


@dataclass(frozen=True)
class _Whitening:
    """``x = T x̂`` with ``T = Σ*^{1/2}``: the target becomes ``N(T⁻¹m*, I)``."""

    T: FloatArray
    Ti: FloatArray

    @classmethod
    def of(cls, cov: FloatArray) -> _Whitening:
        w, u = np.linalg.eigh(sym(cov))
        return cls(T=(u * np.sqrt(w)) @ u.T, Ti=(u / np.sqrt(w)) @ u.T)

    def layer(self, layer: Layer) -> Layer:
        """The same dynamics in whitened coordinates."""
        a, b = layer.affine_ffn()
        t, ti = self.T, self.Ti
        heads = [(ti @ v_h @ t, t @ b_h @ t) for v_h, b_h in layer.heads]
        g = None if layer.noise is None else ti @ layer.noise
        return Layer(ti @ a @ t, b=ti @ b, heads=heads, noise=g, dim=layer.dim)


def _sym_basis(d: int) -> FloatArray:
    """Columns: ``vec`` (column-major) of an orthonormal basis of Sym(d), Frobenius product."""
    n = d * (d + 1) // 2
    p = np.zeros((d * d, n))
    k = 0
    for j in range(d):
        for i in range(j + 1):
            if i == j:
                p[i + d * j, k] = 1.0
            else:
                p[i + d * j, k] = p[j + d * i, k] = 1.0 / math.sqrt(2.0)
            k += 1
    return p


def _orthonormal_cov_jacobian(layer: Layer, cov: FloatArray) -> FloatArray:
    """``DF(Σ)`` on Sym(d) in an orthonormal (Frobenius) basis.

    :func:`gtcontrol.asymptotics.covariance_jacobian` uses the coordinates ``H_ij`` (i ≤ j);
    the orthonormal coordinates scale the off-diagonal ones by ``√2``: ``J_o = D J D⁻¹``.
    """
    j = covariance_jacobian(layer, cov)
    iu = np.triu_indices(layer.dim)
    dvec = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    return (dvec[:, None] * j) / dvec[None, :]


def _abscissa(x: FloatArray) -> float:
    return float(np.max(np.linalg.eigvals(x).real)) if x.size else -math.inf


def _is_normal(x: FloatArray) -> bool:
    nx = float(np.linalg.norm(x))
    return bool(np.linalg.norm(x @ x.conj().T - x.conj().T @ x) <= 1e-10 * max(nx * nx, 1e-300))


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
    if _is_normal(x):
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
            f"H∞ norm of (sI − X)⁻¹ (slycot AB13DD) failed: {exc}", status="slycot"
        ) from None
    return 1.0 / float(gpeak), float(fpeak)


def _rel_residual(layer: Layer, target: Gaussian) -> float:
    """Relative size of ``(dm/dt, dΣ/dt)`` at the target (the terms' sizes as the scale)."""
    m, s = target.mean, target.cov
    dm, ds = moment_field(layer, m, s)
    a, b = layer.affine_ffn()
    scale_s = 2.0 * float(np.linalg.norm(a @ s))
    scale_m = float(np.linalg.norm(a @ m)) + float(np.linalg.norm(b))
    for v_h, b_h in layer.heads:
        scale_s += 2.0 * float(np.linalg.norm(v_h @ s @ b_h @ s))
        scale_m += float(np.linalg.norm(v_h @ s @ b_h @ m)) + float(np.linalg.norm(v_h @ m))
    if layer.noise is not None:
        scale_s += float(np.linalg.norm(layer.noise @ layer.noise.T))
    rs = float(np.linalg.norm(ds)) / scale_s if scale_s > 0 else float(np.linalg.norm(ds))
    rm = float(np.linalg.norm(dm)) / scale_m if scale_m > 0 else float(np.linalg.norm(dm))
    return max(rs, rm)


def _param_norm(layer: Layer) -> float:
    a, b = layer.affine_ffn()
    s = float(np.sum(a * a) + np.sum(b * b))
    for v_h, b_h in layer.heads:
        s += float(np.sum(v_h * v_h) + np.sum(b_h * b_h))
    return math.sqrt(s)


def _with_bias(layer: Layer, target: Gaussian) -> Layer:
    """The layer with ``b = −K m*`` (K does not depend on b)."""
    k = mean_matrix(layer, target.cov)
    return layer.replace(b=-k @ target.mean)


# ============================================================================ certificate


def design_certificate(
    layer: Layer,
    target: Gaussian | tuple[Any, Any],
    *,
    rate: float | None = None,
    cov_rate: float | None = None,
    require_global: bool = False,
    rate_rtol: float = 1e-6,
) -> Certificate:
    """Verify that ``layer`` drives Gaussians to ``target`` and at which rates.

    Independent of how the layer was built: the residual of the moment field
    (:func:`gtcontrol.moments.moment_field`) at the target, and the equilibria and spectra of
    :mod:`gtcontrol.asymptotics`. In the Riccati class (every ``V_h = v_h I``, no noise) the
    covariance dynamics is ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``; if Σ* is its unique positive-definite
    equilibrium (slycot), ``R ⪰ 0`` and ``−A`` is Hurwitz, then ``Ω(t) = Σ(t)⁻¹`` obeys
    ``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}`` and stays positive definite (``Ω(t) ⪰
    e^{−Aᵀt}Ω0e^{−At} ≻ 0`` since R ⪰ 0), so every ``Σ0 ≻ 0`` converges (rate
    ``2 min Re λ(A)``), and the mean, driven by ``K(t) → K`` Hurwitz, converges too: the
    certificate is ``"global"``. Otherwise a stable linearization gives ``"local"``.

    Parameters
    ----------
    layer
        The layer.
    target
        ``N(m*, Σ*)`` (a :class:`Gaussian` or ``(mean, cov)``), Σ* ≻ 0.
    rate, cov_rate
        Requested mean and covariance rates to check (optional).
    require_global
        ``valid`` needs a global certificate.
    rate_rtol
        Relative tolerance of the rate comparison.

    Returns
    -------
    Certificate

    Raises
    ------
    InvalidGaussianError, InvalidParametersError
        On malformed input or a dimension mismatch.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    tgt = _coerce_target(target)
    if tgt.dim != layer.dim:
        raise InvalidGaussianError(
            f"target: dimension {tgt.dim} does not match the layer dimension {layer.dim}"
        )
    s = tgt.cov
    residual = _rel_residual(layer, tgt)
    form = riccati_form(layer)
    riccati = form is not None and form.is_bernoulli
    r_min: float | None = None
    gap: float | None = None
    reasons: list[str] = []
    global_ok = False
    if form is not None and riccati:
        wh = _Whitening.of(s)
        r_hat = sym(wh.T @ form.R @ wh.T)
        w_r = np.linalg.eigvalsh(r_hat)
        r_min = float(w_r[0])
        eqs = equilibria(layer, cross_check=False)
        if eqs.status == "ok" and len(eqs) == 1:
            eq = eqs[0]
            gap = float(np.linalg.norm(eq.cov - s) / np.linalg.norm(s))
        else:
            eq = equilibrium_at(layer, s)
            reasons.append(f"slycot: {eqs.message}")
        cov_abscissa = eq.spectral_abscissa
        k_mat = np.asarray(eq.mean_matrix)
        eig_a = np.linalg.eigvals(form.A)
        psd = r_min >= -_PSD_RTOL * max(float(np.max(np.abs(w_r))), 1e-300)
        global_ok = bool(
            psd
            and np.min(eig_a.real) > 0
            and gap is not None
            and gap <= _UNIQUE_RTOL
            and residual <= _RESIDUAL_TOL
        )
        if not psd:
            reasons.append(f"R is indefinite (λ_min(Σ*^½RΣ*^½) = {r_min:.3g})")
        if np.min(eig_a.real) <= 0:
            reasons.append(f"−A is not Hurwitz (min Re λ(A) = {np.min(eig_a.real):.3g})")
    else:
        eq = equilibrium_at(layer, s)
        cov_abscissa = eq.spectral_abscissa
        k_mat = np.asarray(eq.mean_matrix)
        reasons.append(
            "outside the noise-free Riccati class (V ≠ vI or noise): local certificate only"
        )
    mean_rate = -_abscissa(k_mat)
    cov_rate_v = -float(cov_abscissa)
    rate_v = min(mean_rate, cov_rate_v)
    is_eq = residual <= _RESIDUAL_TOL
    stable = mean_rate > 0 and cov_rate_v > 0
    global_ok = global_ok and stable
    kind = "global" if global_ok else ("local" if is_eq and stable else "none")
    valid = is_eq and stable
    msgs: list[str] = []
    if not is_eq:
        msgs.append(f"the target is not an equilibrium (relative residual {residual:.3g})")
    if not stable:
        msgs.append(
            f"the linearization is not Hurwitz (mean rate {mean_rate:.6g}, covariance rate "
            f"{cov_rate_v:.6g})"
        )
    if rate is not None and mean_rate < rate * (1 - rate_rtol):
        valid = False
        msgs.append(f"mean rate {mean_rate:.9g} < requested {rate:.9g}")
    if cov_rate is not None and cov_rate_v < cov_rate * (1 - rate_rtol):
        valid = False
        msgs.append(f"covariance rate {cov_rate_v:.9g} < requested {cov_rate:.9g}")
    if require_global and kind != "global":
        valid = False
        msgs.append("a global certificate was required: " + "; ".join(reasons or ["—"]))
    if kind == "global":
        head = (
            "global: every N(m0, Σ0) with Σ0 ≻ 0 converges to the target (Riccati class, "
            f"R ⪰ 0, −A Hurwitz, unique equilibrium to {gap:.1e}); "
        )
    elif kind == "local":
        head = "local: the target is a locally exponentially stable equilibrium; "
    else:
        head = "no certificate: "
    message = (
        head
        + f"mean rate {mean_rate:.6g}, covariance rate {cov_rate_v:.6g}, residual "
        + f"{residual:.2e}"
        + ("" if not msgs else "; " + "; ".join(msgs))
    )
    return Certificate(
        kind=kind,
        valid=bool(valid),
        mean_rate=mean_rate,
        cov_rate=cov_rate_v,
        rate=rate_v,
        residual=residual,
        riccati=bool(riccati),
        r_min=r_min,
        uniqueness_gap=gap,
        requested_rate=rate,
        requested_cov_rate=cov_rate,
        mean_matrix=frozen(k_mat.copy()),
        message=message,
    )


# ============================================================================ robustness


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
            return -lam.real * np.outer(u, u.conj())
        n = self.x.shape[0]
        u, sv, wh = np.linalg.svd(self.x - 1j * self.frequency * np.eye(n))
        return -sv[-1] * np.outer(u[:, -1], wh[-1, :])


def _cov_block(hat: Layer) -> _Block:
    form = riccati_form(hat)
    if form is not None and form.is_bernoulli:
        # At Σ̂ = I: DF[H] = N H + H Nᵀ with N = A − R (the Riccati linearization A − ΣR).
        n_mat = form.A - form.R
        if _is_normal(n_mat):
            return _Block("covariance", np.zeros((0, 0)), lyapunov_of=n_mat)
    return _Block("covariance", _orthonormal_cov_jacobian(hat, np.eye(hat.dim)))


def _perturbable(layer: Layer) -> list[tuple[str, FloatArray, bool]]:
    """``(name, matrix, scalar)`` for A and every head's V and B (scalar V stays scalar)."""
    a, _ = layer.affine_ffn()
    out = [("A", a, False)]
    for i, (v_h, b_h) in enumerate(layer.heads):
        out.append((f"V{i}", v_h, identity_multiple(v_h) is not None))
        out.append((f"B{i}", b_h, False))
    return out


def _perturbed(
    layer: Layer, blocks: list[tuple[str, FloatArray, bool]], dirs: list[FloatArray], eps: float
) -> Layer:
    mats = [x + eps * float(np.linalg.norm(x)) * z for (_, x, _), z in zip(blocks, dirs)]
    heads = [(mats[1 + 2 * i], mats[2 + 2 * i]) for i in range(len(layer.heads))]
    return Layer(mats[0], b=layer.affine_ffn()[1], heads=heads, noise=layer.noise, dim=layer.dim)


def _random_direction(
    blocks: list[tuple[str, FloatArray, bool]], rng: np.random.Generator
) -> list[FloatArray]:
    out = []
    for _, x, scalar in blocks:
        d = x.shape[0]
        z = np.eye(d) * rng.choice([-1.0, 1.0]) if scalar else rng.standard_normal(x.shape)
        out.append(z / np.linalg.norm(z))
    return out


def _stable_at(layer: Layer, start: FloatArray) -> bool:
    """Does ``layer`` have a positive-definite, locally stable equilibrium (continued from
    ``start``) with a Hurwitz mean matrix?"""
    form = riccati_form(layer)
    try:
        if form is not None and form.is_bernoulli:
            eqs = equilibria(layer, cross_check=False)
            if eqs.status != "ok" or len(eqs) != 1:
                return False
            eq = eqs[0]
        else:
            res = newton_equilibrium(layer, start)
            if not res.success:
                return False
            cov = np.asarray(res.cov)
            w = np.linalg.eigvalsh(cov)
            if w[0] <= 1e-10 * w[-1]:
                return False
            eq = equilibrium_at(layer, cov)
    except SolverError:
        return False
    return bool(eq.stable and _abscissa(np.asarray(eq.mean_matrix)) < 0)


def design_robustness(
    layer: Layer,
    target: Gaussian | tuple[Any, Any],
    *,
    directions: int = 8,
    samples: int = 16,
    max_relative: float = 1.0,
    seed: int = 0,
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
       ``directions`` seeded random directions; the first loss of stability along each is
       bracketed on a geometric grid and bisected; ``samples`` fresh perturbations at half the
       smallest such size are checked stable.

    Parameters
    ----------
    layer
        A layer with the target as equilibrium (e.g. a design).
    target
        ``N(m*, Σ*)``, Σ* ≻ 0.
    directions, samples
        Numbers of parameter directions and of sampled checks.
    max_relative
        Largest relative parameter perturbation searched.
    seed
        Seed of every random choice.

    Returns
    -------
    Robustness

    Raises
    ------
    InvalidParametersError
        If the target is not a stable equilibrium of the layer (there is nothing to measure).
    """
    clock = time.perf_counter()
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    tgt = _coerce_target(target)
    n_dir = as_positive_int("directions", directions)
    n_samp = as_positive_int("samples", samples)
    eps_max = as_positive_float("max_relative", max_relative)
    if tgt.dim != layer.dim:
        raise InvalidGaussianError(
            f"target: dimension {tgt.dim} does not match the layer dimension {layer.dim}"
        )
    if _rel_residual(layer, tgt) > _RESIDUAL_TOL:
        raise InvalidParametersError("layer: the target is not an equilibrium of the layer")
    rng = np.random.default_rng(seed)
    hat = _Whitening.of(tgt.cov).layer(layer)
    blocks = [_Block("mean", mean_matrix(hat, np.eye(hat.dim))), _cov_block(hat)]
    for blk in blocks:
        if blk.radius <= 0:
            raise InvalidParametersError(
                f"layer: the {blk.name} linearization at the target is not Hurwitz"
            )
    bind = min(blocks, key=lambda b: b.radius)
    stable_count = 0
    for blk in blocks:
        for _ in range(n_samp):
            if blk.abscissa(blk.random(0.999 * blk.radius, rng)) < 0:
                stable_count += 1
    worst = bind.abscissa(bind.worst()) / bind.radius

    # Parameter perturbations (original coordinates, relative per matrix).
    pblocks = _perturbable(layer)
    evaluations = 0

    def stable(dirs: list[FloatArray], eps: float) -> bool:
        nonlocal evaluations
        evaluations += 1
        return _stable_at(_perturbed(layer, pblocks, dirs, eps), tgt.cov)

    grid = eps_max * 2.0 ** -np.arange(11, -1, -1)
    best = math.inf
    best_dirs: list[FloatArray] | None = None
    for _ in range(n_dir):
        dirs = _random_direction(pblocks, rng)
        lo, hi = 0.0, math.inf
        for eps in grid:
            if eps >= best:
                break
            if stable(dirs, float(eps)):
                lo = float(eps)
            else:
                hi = float(eps)
                break
        if math.isinf(hi):
            continue
        for _ in range(12):
            mid = 0.5 * (lo + hi)
            if stable(dirs, mid):
                lo = mid
            else:
                hi = mid
        if hi < best:
            best, best_dirs = hi, dirs
    destab = None
    if best_dirs is not None:
        destab = _perturbed(layer, pblocks, best_dirs, best * (1 + 1e-3))
        if _stable_at(destab, tgt.cov):
            destab = None  # a non-monotone direction: keep the bracket, report no layer
    check_eps = 0.5 * best if math.isfinite(best) else eps_max
    ok = sum(stable(_random_direction(pblocks, rng), check_eps) for _ in range(n_samp))
    return Robustness(
        mean_radius=blocks[0].radius,
        cov_radius=blocks[1].radius,
        radius=bind.radius,
        binding=bind.name,
        frequency=bind.frequency,
        linear_samples=n_samp,
        linear_stable_fraction=stable_count / (2 * n_samp),
        worst_case_abscissa=worst,
        parameter_radius=best,
        parameter_directions=n_dir,
        parameter_stable_fraction=ok / n_samp,
        destabilizing=destab,
        stats={"evaluations": evaluations, "seconds": time.perf_counter() - clock},
    )


# ============================================================================ constructive


def _constructive(
    target: Gaussian, rate: float, cov_rate: float, rotation: FloatArray | None
) -> Layer:
    """``A = aI + SΣ*⁻¹``, ``V = −rate·I``, ``B = R/(2·rate)``, ``R = 2aΣ*⁻¹``, 2a = cov_rate."""
    d = target.dim
    w, u = np.linalg.eigh(target.cov)
    omega = sym((u / w) @ u.T)
    a = 0.5 * cov_rate
    a_mat = a * np.eye(d)
    if rotation is not None:
        a_mat = a_mat + rotation @ omega
    b_mat = (a / rate) * omega
    return _with_bias(Layer(a_mat, B=b_mat, v=-rate), target)


def _check_rotation(rotation: Any, d: int) -> FloatArray | None:
    if rotation is None:
        return None
    s = as_float_array("rotation", rotation, ndim=2, shape=(d, d))
    ns = float(np.linalg.norm(s))
    if float(np.linalg.norm(s + s.T)) > 1e-12 * max(ns, 1e-300):
        raise InvalidParametersError(
            f"rotation: expected a skew-symmetric matrix S = −Sᵀ, ‖S + Sᵀ‖ = "
            f"{np.linalg.norm(s + s.T):.3g}"
        )
    return 0.5 * (s - s.T)


# ============================================================================ CasADi design


@dataclass
class _Problem:
    """The design problem in whitened coordinates."""

    d: int
    target: Gaussian
    wh: _Whitening
    a_hat: FloatArray | None  # fixed parts (hat), None when designed
    b_hat: FloatArray | None
    v_fixed: FloatArray | None  # fixed V̂ (matrix)
    riccati: bool  # V = vI (fixed scalar or designed scalar)
    v_scalar: float | None  # the fixed scalar v when riccati and V is fixed
    r_m: float
    r_c: float
    require_global: bool
    opts: DesignOptions

    @property
    def m_hat(self) -> FloatArray:
        return self.wh.Ti @ self.target.mean

    @property
    def n_sym(self) -> int:
        return self.d * (self.d + 1) // 2


def _unreachable(msg: str) -> UnreachableTargetError:
    return UnreachableTargetError(f"design infeasible: {msg}")


def _precheck(p: _Problem) -> None:
    """Analytic necessary conditions; raise naming the constraint that makes it infeasible."""
    d, n = p.d, p.n_sym
    tol = 1e-12
    if p.riccati:
        v = p.v_scalar
        if v is not None and v >= 0:
            raise _unreachable(
                f"mean rate: fixed V = vI with v = {v:.6g} ≥ 0; at the equilibrium the mean "
                "matrix K has every eigenvalue with real part v (docs/theory.md §3–5), so the mean "
                "cannot converge"
            )
        if v is not None and -v < p.r_m * (1 - tol):
            raise _unreachable(
                f"mean rate: fixed V = vI gives mean rate |v| = {-v:.6g} < rate = {p.r_m:.6g} "
                "(the eigenvalues of K have real part exactly v)"
            )
        if p.b_hat is not None:
            w = np.linalg.eigvalsh(sym(p.b_hat))
            if p.require_global and w[0] < -tol * max(abs(w[-1]), 1e-300):
                raise _unreachable(
                    "global certificate (R ⪰ 0): the fixed B has an indefinite or negative "
                    f"symmetric part (eigenvalue {w[0]:.6g} of Σ*^½ sym(B) Σ*^½); R = −v(B + Bᵀ) "
                    "cannot be positive semi-definite with v < 0, and v < 0 is needed for the "
                    "mean to converge; use require_global=False for a local design"
                )
            if v is not None and -2.0 * v * float(np.sum(w)) < d * p.r_c * (1 - tol):
                raise _unreachable(
                    f"covariance rate: with fixed B and V = vI, tr R = {-2 * v * np.sum(w):.6g} "
                    f"< d·cov_rate = {d * p.r_c:.6g}; the covariance rates 2 Re λ(A) sum to "
                    "tr(R) at the equilibrium"
                )
        if p.a_hat is not None:
            eig = np.linalg.eigvals(p.a_hat)
            w = np.linalg.eigvalsh(sym(p.a_hat))
            if p.require_global and w[0] < -tol * max(abs(w[-1]), 1e-300):
                raise _unreachable(
                    "global certificate (R ⪰ 0): the fixed A makes R = AᵀΣ*⁻¹ + Σ*⁻¹A "
                    f"indefinite (eigenvalue {2 * w[0]:.6g} of Σ*^½RΣ*^½); no V = vI head makes "
                    "Σ* globally attracting; use require_global=False for a local design"
                )
            if 2.0 * float(np.min(eig.real)) < p.r_c * (1 - tol):
                raise _unreachable(
                    f"covariance rate: the fixed A has min Re λ(A) = {np.min(eig.real):.6g}; the "
                    "covariance linearization has spectrum −(λ_i + λ_j)(A), so its rate "
                    f"{2 * np.min(eig.real):.6g} < cov_rate = {p.r_c:.6g}"
                )
            if p.b_hat is not None:
                sa, sb = sym(p.a_hat), sym(p.b_hat)
                nb = float(np.sum(sb * sb))
                v_ls = -float(np.sum(sa * sb)) / nb if nb > 0 else 0.0
                v_use = v if v is not None else v_ls
                res = float(np.linalg.norm(sa + v_use * sb)) / max(
                    float(np.linalg.norm(sa)), 1e-300
                )
                if res > 1e-10:
                    raise _unreachable(
                        "equilibrium: with fixed A and B the equilibrium equation needs "
                        "sym(Σ*^-½AΣ*^½) = −v·sym(Σ*^½BΣ*^½) for a scalar v; the best v = "
                        f"{v_use:.6g} leaves a relative residual {res:.3g}"
                    )
                if v is None and -v_ls < p.r_m * (1 - tol):
                    raise _unreachable(
                        f"mean rate: fixed A and B force v = {v_ls:.6g}, mean rate "
                        f"{-v_ls:.6g} < rate = {p.r_m:.6g}"
                    )
    else:
        if p.require_global:
            raise _unreachable(
                "global certificate: it needs the Riccati class (V = vI); with a general V "
                "only a local certificate exists; use require_global=None or False"
            )
        if p.v_fixed is not None:
            tr_v = float(np.trace(p.v_fixed))
            if tr_v > -d * p.r_m * (1 - tol):
                raise _unreachable(
                    f"mean rate: tr V = {tr_v:.6g} > −d·rate = {-d * p.r_m:.6g}; at the "
                    "equilibrium K = M* + V with M*Σ* skew, so tr K = tr V and some eigenvalue "
                    "of K has real part ≥ tr V / d"
                )
            if p.b_hat is not None:
                vh, bh = p.v_fixed, p.b_hat
                tr_j = float(np.trace(vh) * np.trace(bh) + np.sum(vh * bh))
                if tr_j > -n * p.r_c * (1 - tol):
                    raise _unreachable(
                        f"covariance rate: with fixed V and B the trace of DF(Σ*) on symmetric "
                        f"matrices is tr V̂ tr B̂ + tr(V̂ᵀB̂) = {tr_j:.6g} > −n·cov_rate = "
                        f"{-n * p.r_c:.6g} (n = d(d+1)/2), so some eigenvalue has real part "
                        "> −cov_rate"
                    )


def _lower_factor(y: FloatArray) -> FloatArray:
    """Lower-triangular ``L`` with ``L Lᵀ = y₊`` (the PSD part of sym(y)), entries column-wise."""
    w, u = np.linalg.eigh(sym(y))
    f = u * np.sqrt(np.clip(w, 0.0, None))
    _, r = np.linalg.qr(f.T)
    low = r.T
    signs = np.where(np.diag(low) < 0, -1.0, 1.0)
    low = low * signs
    n = y.shape[0]
    return np.concatenate([low[j:, j] for j in range(n)])


def _lyapunov_factor(x_shift: FloatArray, scale: float) -> FloatArray:
    """Initial ``L`` (lower triangular, column-wise) with ``LLᵀ = P``, ``XₛᵀP + PXₛ = −2sI``.

    When ``Xₛ`` is not Hurwitz the solution is not positive definite; its positive part (plus a
    small multiple of I) is a starting point that IPOPT then corrects.
    """
    import scipy.linalg as sla

    k = x_shift.shape[0]
    try:
        pw = sla.solve_continuous_lyapunov(x_shift.T, -2.0 * scale * np.eye(k))
    except (np.linalg.LinAlgError, ValueError):
        pw = np.eye(k)
    w = np.linalg.eigvalsh(sym(pw))
    if not np.all(np.isfinite(pw)) or w[0] <= 1e-12 * max(abs(w[-1]), 1e-300):
        pw = sym(pw) if np.all(np.isfinite(pw)) else np.eye(k)
        pw = pw + (abs(min(w[0], 0.0)) + 1e-2 * max(abs(w[-1]), 1.0)) * np.eye(k)
    return _lower_factor(pw)


def _initial_guess(p: _Problem) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Feasible-leaning ``(Â, B̂, V̂)`` honoring the fixed parts (see the module docstring)."""
    d = p.d
    eye = np.eye(d)
    r_c = p.r_c * (1 + 1e-2)
    if p.riccati:
        if p.v_scalar is not None:
            v = p.v_scalar
        elif p.a_hat is not None and p.b_hat is not None:
            sa, sb = sym(p.a_hat), sym(p.b_hat)
            v = -float(np.sum(sa * sb)) / float(np.sum(sb * sb))
        elif p.b_hat is not None:
            lmin = float(np.linalg.eigvalsh(sym(p.b_hat))[0])
            v = -max(p.r_m, r_c / (2 * lmin) if lmin > 0 else p.r_m) * (1 + 1e-2)
        else:
            v = -p.r_m * (1 + 1e-2)
        if p.b_hat is not None:
            b_hat = p.b_hat
            a_hat = p.a_hat if p.a_hat is not None else -v * sym(b_hat)
        elif p.a_hat is not None:
            a_hat = p.a_hat
            b_hat = -sym(a_hat) / v
        else:
            a_hat = 0.5 * r_c * eye
            b_hat = -a_hat / v
        return a_hat, b_hat, v * eye
    v_hat = p.v_fixed if p.v_fixed is not None else -p.r_m * (1 + 1e-2) * eye
    if p.b_hat is not None:
        b_hat = p.b_hat
    else:
        smin = float(np.linalg.svd(v_hat, compute_uv=False)[-1])
        c = r_c / (2.0 * max(smin, 1e-3) ** 2) * (1 + 1e-2)
        b_hat = -c * v_hat.T
    a_hat = p.a_hat if p.a_hat is not None else -sym(v_hat @ b_hat)
    return a_hat, b_hat, v_hat


def _polish(
    p: _Problem, a_hat: FloatArray, b_hat: FloatArray, v_hat: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Make ``sym(Â + V̂B̂) = 0`` exact by a minimum-norm correction of one designed block.

    The equation is linear in each block separately, so one least-squares step is exact.
    """
    d = p.d
    iu = np.triu_indices(d)

    def eq(a: FloatArray, b: FloatArray, v: FloatArray) -> FloatArray:
        return sym(a + v @ b)[iu]

    res = eq(a_hat, b_hat, v_hat)
    if p.a_hat is None:
        return a_hat - _vec_sym(res, d), b_hat, v_hat
    if p.b_hat is None:
        cols = []
        for k in range(d * d):
            e = np.zeros(d * d)
            e[k] = 1.0
            cols.append(eq(np.zeros((d, d)), e.reshape(d, d), v_hat))
        jac = np.array(cols).T
        delta = np.linalg.lstsq(jac, -res, rcond=None)[0].reshape(d, d)
        return a_hat, b_hat + delta, v_hat
    if p.riccati and p.v_scalar is None:
        sb = sym(b_hat)
        v = -float(np.sum(sym(a_hat) * sb)) / float(np.sum(sb * sb))
        return a_hat, b_hat, v * np.eye(d)
    if p.v_fixed is None and not p.riccati:
        cols = []
        for k in range(d * d):
            e = np.zeros(d * d)
            e[k] = 1.0
            cols.append(eq(np.zeros((d, d)), b_hat, e.reshape(d, d)))
        jac = np.array(cols).T
        delta = np.linalg.lstsq(jac, -res, rcond=None)[0].reshape(d, d)
        return a_hat, b_hat, v_hat + delta
    return a_hat, b_hat, v_hat


def _vec_sym(upper: FloatArray, d: int) -> FloatArray:
    """Symmetric matrix from its upper triangle (row-major, as ``np.triu_indices``)."""
    out = np.zeros((d, d))
    iu = np.triu_indices(d)
    out[iu] = upper
    out[(iu[1], iu[0])] = upper
    return out


class _NLP:
    """The CasADi/IPOPT problem: variables, constraint groups, objective.

    Each margin certificate has an elastic slack ``s ≥ 0`` that lowers its rate to
    ``r (1 − s)``; the objective adds ``W Σ s`` (an exact penalty: for W above the multipliers
    the slacks vanish whenever the request is feasible). The slacks make any start feasible and,
    when a request is out of reach, say which margin and by how much.
    """

    def __init__(self, p: _Problem) -> None:
        import casadi as ca

        self.ca = ca
        self.p = p
        d, n = p.d, p.n_sym
        eye = ca.DM.eye(d)
        xs: list[Any] = []
        self.layout: dict[str, tuple[int, int]] = {}

        sym_t = ca.MX if p.opts.symbolic == "MX" else ca.SX

        def var(name: str, size: int) -> Any:
            x = sym_t.sym(name, size)
            start = sum(int(v.numel()) for v in xs)
            self.layout[name] = (start, start + size)
            xs.append(x)
            return x

        def lower(name: str, k: int) -> Any:
            # Nonzeros of the lower triangle, column by column (CasADi's storage order).
            return sym_t(ca.Sparsity.lower(k), var(name, k * (k + 1) // 2))

        def upper(y: Any, k: int) -> Any:
            idx = [i + k * j for j in range(k) for i in range(j + 1)]
            return ca.vec(y)[idx]

        a_h = ca.reshape(var("A", d * d), d, d) if p.a_hat is None else ca.DM(p.a_hat)
        b_h = ca.reshape(var("B", d * d), d, d) if p.b_hat is None else ca.DM(p.b_hat)
        if p.riccati:
            v_s = var("v", 1) if p.v_scalar is None else p.v_scalar
            v_h = v_s * eye
        else:
            v_h = ca.reshape(var("V", d * d), d, d) if p.v_fixed is None else ca.DM(p.v_fixed)
        groups: list[tuple[str, Any, float, float]] = []
        # Equilibrium F(Σ*) = 0 ⇔ sym(Â + V̂B̂) = 0 (the moment field of theory.md §2, whitened;
        # checked against gtcontrol.moments.moment_field after the solve).
        m_h = a_h + v_h @ b_h
        groups.append(("equilibrium", upper(0.5 * (m_h + m_h.T), d), 0.0, 0.0))
        kappa = p.opts.max_condition
        self.certs: list[tuple[str, Any, float, Any]] = []  # (name, X, rate, P)
        slacks: list[Any] = []

        def certificate(name: str, x_mat: Any, rate: float, k: int) -> None:
            """``(X + r(1−s)I)ᵀP + P(X + r(1−s)I) + 2rI = 0``, ``P = LLᵀ``, ``tr P ≤ κk``.

            A solution with ``P ⪰ 0`` exists iff ``X + r(1−s)I`` is Hurwitz (then P ≻ 0, L is
            nonsingular and the constraint Jacobian keeps full rank at the optimum, unlike a
            factorization of a semi-definite residual). Then ``‖e^{Xt}‖ ≤ √cond(P) e^{−r(1−s)t}``.
            """
            slack = var(f"{name}_s", 1)
            low = lower(f"{name}_L", k)
            pw = low @ low.T
            xs_ = x_mat + rate * (1 - slack) * ca.DM.eye(k)
            y = xs_.T @ pw + pw @ xs_ + 2.0 * rate * ca.DM.eye(k)
            groups.append((f"{name} margin", upper(y, k), 0.0, 0.0))
            groups.append((f"{name} certificate conditioning", ca.sumsqr(low), -ca.inf, kappa * k))
            self.certs.append((name, x_mat, rate, pw))
            slacks.append(slack)

        k_h = m_h + v_h  # K̂ = Â + V̂ + V̂B̂
        if p.riccati:
            # Mean: spectrum of K is v + iℝ at the equilibrium → the bound v ≤ −rate.
            # Covariance: spectrum −(λ_i + λ_j)(A) → certificate on −Â with rate r_c/2.
            certificate("covariance", -a_h, 0.5 * p.r_c * (1 + _MARGIN_SLACK), d)
            if p.require_global:
                lr = lower("R", d)
                groups.append(("global (R ⪰ 0)", upper(a_h + a_h.T - lr @ lr.T, d), 0.0, 0.0))
        else:
            certificate("mean", k_h, p.r_m * (1 + _MARGIN_SLACK), d)
            basis = ca.DM(_sym_basis(d))
            big = ca.kron(eye, m_h) + ca.kron(m_h, eye) + ca.kron(b_h.T, v_h) + ca.kron(v_h, b_h.T)
            certificate("covariance", basis.T @ big @ basis, p.r_c * (1 + _MARGIN_SLACK), n)
        # Objective: squared Frobenius norms of the designed parts and of b, whitened.
        obj: Any = 0
        if p.a_hat is None:
            obj += ca.sumsqr(a_h)
        if p.b_hat is None:
            obj += ca.sumsqr(b_h)
        if p.riccati and p.v_scalar is None:
            obj += d * v_s**2
        elif not p.riccati and p.v_fixed is None:
            obj += ca.sumsqr(v_h)
        obj += ca.sumsqr(k_h @ ca.DM(p.m_hat))
        self.x = ca.vertcat(*xs)
        self.weight = sym_t.sym("W")
        self.slack = ca.vertcat(*slacks)
        self.groups = groups
        self.g = ca.vertcat(*[g[1] for g in groups])
        self.obj = obj
        self.eval_parts = ca.Function("parts", [self.x], [a_h, b_h, v_h])
        self.eval_g = ca.Function("g", [self.x], [self.g])
        self.eval_obj = ca.Function("f", [self.x], [obj])
        self.eval_slack = ca.Function("s", [self.x], [self.slack])
        self.eval_weights = ca.Function("w", [self.x], [c[3] for c in self.certs])
        self.eval_certs = ca.Function("X", [self.x], [c[1] for c in self.certs])

    def bounds(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        nx = int(self.x.numel())
        lbx, ubx = np.full(nx, -np.inf), np.full(nx, np.inf)
        if "v" in self.layout:
            ubx[self.layout["v"][0]] = -self.p.r_m * (1 + _MARGIN_SLACK)
        for name, *_ in self.certs:
            lbx[self.layout[f"{name}_s"][0]] = 0.0
        # Cholesky factors keep a non-negative diagonal: the canonical branch, so that the
        # iterates never pass through a singular P (IPOPT keeps them strictly positive).
        for key in [f"{c[0]}_L" for c in self.certs] + (["R"] if "R" in self.layout else []):
            lo, hi = self.layout[key]
            k = round((math.sqrt(8 * (hi - lo) + 1) - 1) / 2)
            diag = lo + np.cumsum([0] + [k - j for j in range(k - 1)])
            lbx[diag] = 0.0
        lbg = np.concatenate([np.full(int(g[1].numel()), g[2]) for g in self.groups])
        ubg = np.concatenate([np.full(int(g[1].numel()), g[3]) for g in self.groups])
        return lbx, ubx, lbg, ubg

    def initial(self, a_hat: FloatArray, b_hat: FloatArray, v_hat: FloatArray) -> FloatArray:
        """Initial point: the parts, slacks that make every margin hold with room, and the
        Cholesky factors of the corresponding Lyapunov solutions."""
        x0 = np.zeros(int(self.x.numel()))

        def put(name: str, val: FloatArray) -> None:
            lo, hi = self.layout[name]
            x0[lo:hi] = val

        if "A" in self.layout:
            put("A", a_hat.ravel(order="F"))
        if "B" in self.layout:
            put("B", b_hat.ravel(order="F"))
        if "v" in self.layout:
            put("v", np.array([v_hat[0, 0]]))
        if "V" in self.layout:
            put("V", v_hat.ravel(order="F"))
        if "R" in self.layout:
            put("R", _lower_factor(a_hat + a_hat.T))
        out = self.eval_certs(x0)
        mats: list[FloatArray] = [
            np.asarray(m) for m in (out if isinstance(out, (list, tuple)) else [out])
        ]
        kappa = self.p.opts.max_condition
        for (name, _, rate, _), xm in zip(self.certs, mats):
            k = xm.shape[0]
            alpha = _abscissa(xm)
            # Room: a normal X + r(1−s)I = −δI has P = (r/δ) I, inside tr P ≤ κk iff δ ≥ r/κ.
            s0 = max(0.0, 1.0 + alpha / rate + 4.0 / kappa)
            put(f"{name}_s", np.array([s0]))
            put(f"{name}_L", _lyapunov_factor(xm + rate * (1 - s0) * np.eye(k), rate))
        return x0

    def violations(self, x: FloatArray) -> list[tuple[str, float]]:
        """Largest violation of each constraint group at ``x``."""
        gv = np.asarray(self.eval_g(x)).ravel()
        _, _, lbg, ubg = self.bounds()
        out = []
        start = 0
        for name, expr, _, _ in self.groups:
            k = int(expr.numel())
            seg = gv[start : start + k]
            viol = np.maximum(lbg[start : start + k] - seg, seg - ubg[start : start + k])
            out.append((name, float(np.max(np.clip(viol, 0.0, None)))))
            start += k
        return out


_GROUP_HINTS = {
    "equilibrium": "the target cannot be made an equilibrium with these fixed parts",
    "mean margin": "the mean linearization K",
    "covariance margin": "the covariance linearization DF(Σ*)",
    "mean certificate conditioning": "a mean-rate certificate needs a Lyapunov weight with a "
    "condition number above max_condition",
    "covariance certificate conditioning": "a covariance-rate certificate needs a Lyapunov "
    "weight with a condition number above max_condition",
    "global (R ⪰ 0)": "R = AᵀΣ*⁻¹ + Σ*⁻¹A cannot be positive semi-definite (no global certificate)",
}
#: Exact-penalty weights tried in turn (the objective is normalized to 1 at the start).
_SLACK_WEIGHTS = (1e2, 1e4)
#: Slacks above this fraction of the requested rate mean the request was not met.
_SLACK_TOL = 1e-7


#: IPOPT settings tried in turn when an attempt does not end optimal with a verified design
#: (the barrier strategies fail on different instances of these nonconvex problems).
_ATTEMPTS: tuple[dict[str, Any], ...] = ({}, {"ipopt.mu_strategy": "adaptive"})

_Builder = Callable[[FloatArray, FloatArray, FloatArray], tuple[Layer, Certificate]]


def _diagnose(p: _Problem, nlp: _NLP, x: FloatArray, st: Mapping[str, Any]) -> str:
    """Why an attempt is not a solution: the margin with a positive slack, or the most violated
    constraint group ('' when IPOPT succeeded with zero slacks)."""
    slack = np.asarray(nlp.eval_slack(x)).ravel()
    short = [(c[0], c[2], sv) for c, sv in zip(nlp.certs, slack) if sv > _SLACK_TOL]
    status = st.get("return_status", "")
    if short:
        name, rate, sv = max(short, key=lambda t: t[2])
        rate_req = rate / (1 + _MARGIN_SLACK) * (2 if p.riccati and name == "covariance" else 1)
        return (
            f"IPOPT: {status}; the binding constraint is the {name} margin: "
            f"{_GROUP_HINTS[name + ' margin']} reaches at best {(1 - sv) * rate_req:.6g} of the "
            f"requested {name} rate {rate_req:.6g} with the Lyapunov weights bounded by "
            f"max_condition = {p.opts.max_condition:g} (a local optimum)"
        )
    if st.get("success", False):
        return ""
    worst = max(nlp.violations(x), key=lambda kv: kv[1])
    if worst[1] > 1e-8:
        return (
            f"IPOPT: {status}; the most violated constraint is the {worst[0]} (violation "
            f"{worst[1]:.3g}): {_GROUP_HINTS.get(worst[0], '')}"
        )
    return f"IPOPT: {status} at a point satisfying the constraints"


def _solve_nlp(p: _Problem, build: _Builder) -> tuple[Layer, Certificate, dict[str, Any], str]:
    """Solve the NLP (with retries) and verify; return ``(layer, certificate, stats, diagnosis)``.

    Attempts follow :data:`_ATTEMPTS` until one ends optimal (zero slacks) with a verified
    design; otherwise the best attempt is kept (verified first, then optimal, then the smallest
    objective). If no attempt verifies but the starting design does (it is feasible by
    construction for a fixed B with positive symmetric part, a fixed A or v, or no fixed
    parts), that design is returned, certified but not minimal.
    """
    nlp = _NLP(p)
    ca = nlp.ca
    a0, b0, v0 = _initial_guess(p)
    x_init = nlp.initial(a0, b0, v0)
    f0 = max(float(nlp.eval_obj(x_init)), 1e-12)
    base = {
        "ipopt.print_level": 0,
        "ipopt.sb": "yes",
        "print_time": False,
        "ipopt.tol": p.opts.tol,
        "ipopt.constr_viol_tol": p.opts.tol,
        "ipopt.max_iter": p.opts.max_iter,
        "show_eval_warnings": False,
    }
    user = {f"ipopt.{k}": v for k, v in p.opts.ipopt.items()}
    lbx, ubx, lbg, ubg = nlp.bounds()
    problem = {
        "x": nlp.x,
        "p": nlp.weight,
        "f": nlp.obj / f0 + nlp.weight * ca.sum1(nlp.slack),
        "g": nlp.g,
    }
    best: tuple[tuple[bool, bool, float], Layer, Certificate, dict[str, Any], str] | None = None
    history: list[str] = []
    iterations = 0
    for extra in _ATTEMPTS if not user else ({},):
        x = x_init
        try:
            solver = ca.nlpsol("gtcontrol_design", "ipopt", problem, {**base, **extra, **user})
            for weight in _SLACK_WEIGHTS:
                sol = solver(x0=x, p=weight, lbx=lbx, ubx=ubx, lbg=lbg, ubg=ubg)
                st = solver.stats()
                iterations += int(st.get("iter_count", 0))
                x = np.asarray(sol["x"]).ravel()
                slack = np.asarray(nlp.eval_slack(x)).ravel()
                if not st.get("success", False) or np.max(slack) <= _SLACK_TOL:
                    break
        except RuntimeError as exc:
            raise SolverError(f"CasADi/IPOPT failed: {exc}", status="casadi") from None
        history.append(str(st.get("return_status", "")))
        w_out = nlp.eval_weights(x)
        weights = [np.asarray(w) for w in (w_out if isinstance(w_out, (list, tuple)) else [w_out])]
        stats: dict[str, Any] = {
            "return_status": st.get("return_status", ""),
            "objective": float(nlp.eval_obj(x)),
            "initial_objective": f0,
            "variables": int(nlp.x.numel()),
            "constraints": int(nlp.g.numel()),
            "slack": {c[0]: float(sv) for c, sv in zip(nlp.certs, slack)},
            "certificate_condition": {
                c[0]: float(np.linalg.cond(w)) for c, w in zip(nlp.certs, weights)
            },
        }
        stats["optimal"] = bool(st.get("success", False)) and float(np.max(slack)) <= _SLACK_TOL
        diagnosis = _diagnose(p, nlp, x, st)
        layer, cert = build(*_polish(p, *(np.asarray(m) for m in nlp.eval_parts(x))))
        key = (cert.valid, stats["optimal"], -stats["objective"])
        if best is None or key > best[0]:
            best = (key, layer, cert, stats, diagnosis)
        if cert.valid and stats["optimal"]:
            break
    assert best is not None
    _, layer, cert, stats, diagnosis = best
    if not cert.valid:
        layer0, cert0 = build(*_polish(p, a0, b0, v0))
        if cert0.valid:
            stats = {**stats, "optimal": False, "fallback": "initial"}
            diagnosis = (
                f"{diagnosis or 'IPOPT: ' + history[-1]}; the closed-form starting design "
                "verifies and is returned instead"
            )
            layer, cert = layer0, cert0
    stats["attempts"] = history
    stats["iterations"] = iterations
    return layer, cert, stats, diagnosis


def _as_fixed(name: str, value: Any, d: int) -> FloatArray | None:
    if value is None:
        return None
    if name == "V" and np.ndim(value) == 0:
        return float(as_float_array("fixed_V", value, ndim=0)) * np.eye(d)
    return as_float_array(f"fixed_{name}", value, ndim=2, shape=(d, d))


# ============================================================================ entry point


def design_mean_matching(
    target_mean: Any,
    target_cov: Any = None,
    *,
    rate: float = 1.0,
    cov_rate: float | None = None,
    rotation: Any = None,
    fixed_A: Any = None,
    fixed_B: Any = None,
    fixed_V: Any = None,
    minimum_norm: bool = False,
    options: DesignOptions | None = None,
) -> MeanMatchingDesign:
    """Design a time-invariant single-head layer that carries every Gaussian to a target.

    The layer has ``N(m*, Σ*)`` as an exponentially stable equilibrium of the moment dynamics
    (docs/theory.md §2), with mean rate ``≥ rate`` and covariance rate ``≥ cov_rate``: for
    Riccati-class designs (``V = vI``, the default) globally — every ``N(m0, Σ0)`` with
    ``Σ0 ≻ 0`` converges, and ``Σ(t)⁻¹ − Σ*⁻¹ = e^{−Aᵀt}(Σ0⁻¹ − Σ*⁻¹)e^{−At}``.

    * No fixed parts, ``minimum_norm=False``: the constructive design ``A = aI + SΣ*⁻¹``,
      ``v = −rate``, ``B = (a/rate)Σ*⁻¹``, ``b = −K m*`` with ``a = cov_rate/2`` (see the
      module docstring); exact, ``O(d³)``.
    * Fixed parts (``fixed_A``, ``fixed_B``, ``fixed_V``) or ``minimum_norm=True``: CasADi/IPOPT
      minimizes the parameter norm in the target's metric (``whitened_norm``: the Frobenius
      norm after ``x̂ = Σ*^{-½}x``) over the designed parts subject to the
      equilibrium equations and Lyapunov margin certificates (module docstring). Fixed parts
      are used exactly as given. A designed V is ``vI`` unless
      ``options.V_structure = "full"``; a fixed V that is not a multiple of I makes the design
      local.

    Parameters
    ----------
    target_mean
        m*, shape ``(d,)``.
    target_cov
        Σ* ≻ 0; ``None`` means the identity (any SPD choice works; the mean is the target).
    rate
        Mean rate (``|v|`` in the Riccati class); the promised rate of the whole state is
        ``min(rate, cov_rate)``.
    cov_rate
        Covariance rate, default ``2 × rate`` (then the mean converges at exactly ``rate``
        without the resonance ``t e^{−rate·t}`` of equal rates).
    rotation
        Skew ``S`` for the constructive design (``A = aI + SΣ*⁻¹``); rotates without changing
        the rates.
    fixed_A, fixed_B, fixed_V
        Parts to keep (original coordinates). ``fixed_V`` may be a scalar ``v`` (``V = vI``).
    minimum_norm
        Use the NLP even without fixed parts (minimum-norm parameters).
    options
        :class:`DesignOptions`.

    Returns
    -------
    MeanMatchingDesign
        ``success=False`` (with the best iterate and the most violated constraint in
        ``message``) when IPOPT does not find a certified design.

    Raises
    ------
    InvalidGaussianError
        If the target is malformed or Σ* is singular.
    InvalidParametersError
        On malformed rates, fixed parts or options.
    UnreachableTargetError
        When an analytic necessary condition fails; the message names the constraint (mean
        rate, covariance rate, equilibrium, global certificate) and the numbers.
    SolverError
        If CasADi itself fails.

    Examples
    --------
    >>> res = design_mean_matching([1.0, -2.0], [[1.0, 0.3], [0.3, 0.5]], rate=0.5)
    >>> res.certificate.kind, round(res.certificate.mean_rate, 12)
    ('global', 0.5)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    clock = time.perf_counter()
    opts = options if options is not None else DesignOptions()
    if not isinstance(opts, DesignOptions):
        raise InvalidParametersError(
            f"options: expected a DesignOptions, got {type(opts).__name__}"
        )
    tgt = _as_target(target_mean, target_cov)
    d = tgt.dim
    r_m = as_positive_float("rate", rate)
    r_c = 2.0 * r_m if cov_rate is None else as_positive_float("cov_rate", cov_rate)
    rot = _check_rotation(rotation, d)
    fa = _as_fixed("A", fixed_A, d)
    fb = _as_fixed("B", fixed_B, d)
    fv = _as_fixed("V", fixed_V, d)
    fixed = tuple(n for n, x in (("A", fa), ("B", fb), ("V", fv)) if x is not None)
    if not isinstance(minimum_norm, bool):
        raise InvalidParametersError(f"minimum_norm: expected a bool, got {minimum_norm!r}")
    if rot is not None and (fixed or minimum_norm):
        raise InvalidParametersError(
            "rotation: only the constructive design takes a rotation (no fixed parts, "
            "minimum_norm=False)"
        )
    stats: dict[str, Any] = {}
    if not fixed and not minimum_norm and opts.V_structure == "scalar":
        method = "constructive"
        layer = _constructive(tgt, r_m, r_c, rot)
        diagnosis = ""
        want_global = opts.require_global is not False
    else:
        method = "casadi"
        wh = _Whitening.of(tgt.cov)
        v_scalar = None if fv is None else identity_multiple(fv)
        riccati = (fv is None and opts.V_structure == "scalar") or v_scalar is not None
        want_global = riccati if opts.require_global is None else opts.require_global
        prob = _Problem(
            d=d,
            target=tgt,
            wh=wh,
            a_hat=None if fa is None else wh.Ti @ fa @ wh.T,
            b_hat=None if fb is None else wh.T @ fb @ wh.T,
            v_fixed=None if fv is None else wh.Ti @ fv @ wh.T,
            riccati=riccati,
            v_scalar=v_scalar,
            r_m=r_m,
            r_c=r_c,
            require_global=want_global,
            opts=opts,
        )
        _precheck(prob)

        def build(a_h: FloatArray, b_h: FloatArray, v_h: FloatArray) -> tuple[Layer, Certificate]:
            # Fixed parts are used exactly as given; designed parts leave whitened form.
            a_mat = fa if fa is not None else wh.T @ a_h @ wh.Ti
            b_mat = fb if fb is not None else wh.Ti @ b_h @ wh.Ti
            if fv is not None:
                layer0 = Layer(a_mat, B=b_mat, V=fv)
            elif riccati:
                layer0 = Layer(a_mat, B=b_mat, v=float(v_h[0, 0]))
            else:
                layer0 = Layer(a_mat, B=b_mat, V=wh.T @ v_h @ wh.Ti)
            lay = _with_bias(layer0, tgt)
            return lay, design_certificate(
                lay,
                tgt,
                rate=r_m,
                cov_rate=r_c,
                require_global=bool(want_global),
                rate_rtol=opts.rate_rtol,
            )

        layer, cert, stats, diagnosis = _solve_nlp(prob, build)
    if method == "constructive":
        cert = design_certificate(
            layer,
            tgt,
            rate=r_m,
            cov_rate=r_c,
            require_global=bool(want_global),
            rate_rtol=opts.rate_rtol,
        )
    optimal = method == "constructive" or bool(stats.get("optimal", False))
    if cert.valid and optimal:
        success, status, message = True, "ok", cert.message
    elif cert.valid:
        # IPOPT stopped early at a point that verifies: certified, maybe not norm-minimal.
        success, status = True, "suboptimal"
        message = (
            diagnosis or f"IPOPT: {stats.get('return_status')}"
        ) + f" (the norm may not be minimal); the design verifies: {cert.message}"
    else:
        success = False
        status = "not_certified" if optimal else "solver_failed"
        message = (f"{diagnosis}; " if diagnosis else "") + cert.message
    rob = None
    if opts.robustness and cert.kind != "none":
        rob = design_robustness(
            layer,
            tgt,
            directions=opts.robustness_directions,
            samples=opts.robustness_samples,
            max_relative=opts.robustness_max,
            seed=opts.seed,
        )
    stats["seconds"] = time.perf_counter() - clock
    return MeanMatchingDesign(
        layer=layer,
        target=tgt,
        success=success,
        status=status,
        message=message,
        method=method,
        rate=r_m,
        cov_rate=r_c,
        certificate=cert,
        robustness=rob,
        fixed=fixed,
        norm=_param_norm(layer),
        whitened_norm=_param_norm(_Whitening.of(tgt.cov).layer(layer)),
        stats=stats,
    )


# ============================================================================ figure data


@dataclass(frozen=True, eq=False)
class ConvergenceData:
    """Errors of a design's moment trajectories from several random starts.

    Attributes
    ----------
    t
        Common recorded depths ``(n,)``.
    mean_error
        ``|m(t) − m*| / max(|m*|, 1)`` per start, ``(starts, n)``.
    cov_error
        ``‖Σ(t) − Σ*‖_F / ‖Σ*‖_F`` per start, ``(starts, n)``.
    rate, cov_rate
        The certified mean and covariance rates (for reference slopes).
    starts
        The initial Gaussians.
    """

    t: FloatArray
    mean_error: FloatArray
    cov_error: FloatArray
    rate: float
    cov_rate: float
    starts: tuple[Gaussian, ...]


def design_convergence(
    design: MeanMatchingDesign,
    *,
    n_starts: int = 5,
    T: float | None = None,
    n_points: int = 201,
    seed: int = 0,
) -> ConvergenceData:
    """Simulate a design from ``n_starts`` seeded random Gaussians (the ``design`` figure data).

    Starts: means ``m* + 3 s z`` and covariances ``Σ*^{1/2} (Q diag(e^{u}) Qᵀ) Σ*^{1/2}`` with
    ``z`` standard normal, ``s = sqrt(‖Σ*‖₂)``, Q a random rotation and ``u ~ U(−2, 2)``.

    Parameters
    ----------
    design
        A successful :class:`MeanMatchingDesign`.
    n_starts
        Number of starts.
    T
        Depth; default ``16 / certificate.rate`` (errors ~1e-7 of the initial ones).
    n_points
        Recorded depths.
    seed
        Seed of the starts.

    Returns
    -------
    ConvergenceData

    Raises
    ------
    InvalidParametersError
        If the design has no positive certified rate.
    """
    if not isinstance(design, MeanMatchingDesign):
        raise InvalidParametersError(
            f"design: expected a MeanMatchingDesign, got {type(design).__name__}"
        )
    cert = design.certificate
    if not cert.rate > 0:
        raise InvalidParametersError("design: the certificate has no positive rate")
    n = as_positive_int("n_starts", n_starts)
    depth = 16.0 / cert.rate if T is None else as_positive_float("T", T)
    tgt = design.target
    d = tgt.dim
    rng = np.random.default_rng(seed)
    wh = _Whitening.of(tgt.cov)
    s = math.sqrt(float(np.linalg.norm(tgt.cov, 2)))
    starts, merr, cerr = [], [], []
    t_ref: FloatArray | None = None
    for _ in range(n):
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        w = np.exp(rng.uniform(-2.0, 2.0, d))
        g0 = Gaussian(tgt.mean + 3.0 * s * rng.standard_normal(d), wh.T @ ((q * w) @ q.T) @ wh.T)
        traj = simulate(design.layer, g0, depth, n_points=n_points)
        t_ref = traj.t if t_ref is None else t_ref
        merr.append(
            np.linalg.norm(traj.mean - tgt.mean, axis=1) / max(float(np.linalg.norm(tgt.mean)), 1.0)
        )
        cerr.append(np.linalg.norm(traj.cov - tgt.cov, axis=(1, 2)) / np.linalg.norm(tgt.cov))
        starts.append(g0)
    assert t_ref is not None
    return ConvergenceData(
        t=frozen(np.asarray(t_ref)),
        mean_error=frozen(np.array(merr)),
        cov_error=frozen(np.array(cerr)),
        rate=cert.mean_rate,
        cov_rate=cert.cov_rate,
        starts=tuple(starts),
    )
