"""The design problem: the validated request, the closed-form design and the analytic prechecks.

**Request.** The keyword options of :func:`~.mean_matching.design_mean_matching` are validated
into the frozen :class:`DesignOptions`; :func:`parse_request` adds the target, the rates, the
rotation, the fixed parts (in original coordinates), and the start and depth of the predicted
path of the finite-N check (:class:`DesignRequest`).

**The closed form** (Riccati class, :func:`constructive_layer`). Choose ``A = aI + S Σ*⁻¹``
with ``a > 0`` and ``S`` skew, and ``v < 0``. Then ``R := AᵀΩ* + Ω*A = 2a Ω*``
(``Ω* = Σ*⁻¹``) is positive definite, ``B = R / (−2v)`` gives ``R = −v (B + Bᵀ)``, and Σ* is
the equilibrium of

    dΣ/dt = AΣ + ΣAᵀ − ΣRΣ,       i.e.   dΩ/dt = −AᵀΩ − ΩA + R   for Ω = Σ⁻¹.

The precision ODE is linear, so ``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}`` exactly; with
``W = Σ*^{1/2}(Ω − Ω*)Σ*^{1/2}`` this is ``‖W(t)‖_F = e^{−2at}‖W(0)‖_F`` (the rotation
``S`` is orthogonal in the Σ*⁻¹ metric), and Ω(t) stays positive definite because R ≻ 0: every
``Σ0 ≻ 0`` converges, at rate ``2a``. The mean obeys ``dm/dt = K(t) m + b`` with
``K(t) → K = vI + ½(A − Σ*AᵀΣ*⁻¹) = vI + S Σ*⁻¹``, whose eigenvalues all have real part ``v``;
``b = −K m*`` puts the mean equilibrium at ``m*``, reached at rate ``min(|v|, 2a)``. With
``rate = r`` the defaults are ``v = −r`` and ``2a = 2r`` (so ``B = Σ*⁻¹``): mean rate ``r``,
covariance rate ``2r``. Exact and ``O(d³)`` (milliseconds at d = 50).

**Fixed parts** (:class:`Problem`, :func:`precheck`). A design with fixed parts is posed in
whitened coordinates. Before the NLP (:mod:`._nlp`) runs, necessary conditions that follow in
closed form from the fixed parts are checked; a request that violates one is invalid input and
raises :class:`~gtcontrol.errors.UnreachableTargetError` naming the constraint and its numbers
(e.g. a fixed B whose symmetric part is indefinite cannot give ``R ⪰ 0`` with ``V = vI`` and
``v < 0``).

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md §5.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg

from ..._linalg import FloatArray, sym
from ..._validation import (
    as_choice,
    as_float_array,
    as_nonnegative_float,
    as_option_group,
    as_positive_float,
    as_positive_int,
    as_seed,
    leading_size,
    set_fields,
)
from ...errors import InvalidParametersError, UnreachableTargetError
from ...model.gaussian import Gaussian
from ...model.params import Layer
from .._design_kernel import MAX_TOKENS, Whitening, coerce_target
from .._ipopt import IpoptSettings
from ._certificates import RobustnessCheck
from ._finite_n import as_initial

__all__ = [
    "DesignOptions",
    "DesignRequest",
    "Problem",
    "check_rotation",
    "constructive_layer",
    "parse_request",
    "precheck",
]


#: IPOPT's defaults in a design (``IpoptSettings`` fields left ``None``).
DEFAULT_MAX_ITER, DEFAULT_TOL = 3000, 1e-10


@dataclass(frozen=True, kw_only=True)
class DesignOptions:
    """Options of :func:`design_mean_matching` (validated when built; private).

    The fields are the keywords of the same names of :func:`design_mean_matching`, documented
    there (one home for their meaning).
    """

    require_global: bool | None = None
    V_structure: str = "scalar"
    max_condition: float = 100.0
    rate_rtol: float = 1e-6
    symbolic: str = "SX"
    solver: IpoptSettings = field(default_factory=IpoptSettings)
    robustness: bool | RobustnessCheck | None = True
    seed: int = 0
    min_ess: float | None = 0.5
    ess_n_std: float = 3.0
    token_check: int | None = None

    def __post_init__(self) -> None:
        if self.require_global not in (None, True, False):
            raise InvalidParametersError(
                f"require_global: expected None, True or False, got {self.require_global!r}"
            )
        as_choice("V_structure", self.V_structure, ("scalar", "full"))
        if as_positive_float("max_condition", self.max_condition) < 1.0:
            raise InvalidParametersError(
                f"max_condition: expected a number ≥ 1, got {self.max_condition!r}"
            )
        if not as_positive_float("rate_rtol", self.rate_rtol) < 0.1:
            raise InvalidParametersError(
                f"rate_rtol: expected a number < 0.1, got {self.rate_rtol!r}"
            )
        as_choice("symbolic", self.symbolic, ("SX", "MX"))
        set_fields(self, solver=as_option_group("solver", self.solver, IpoptSettings))
        check = self.robustness
        if isinstance(check, (bool, np.bool_)):
            check = RobustnessCheck() if check else None
        elif not isinstance(check, RobustnessCheck):
            raise InvalidParametersError(
                f"robustness: expected a bool or a RobustnessCheck, got {self.robustness!r}"
            )
        set_fields(self, robustness=check)  # the check to run, or None
        as_seed("seed", self.seed)
        if self.min_ess is not None and not 0.0 < as_positive_float("min_ess", self.min_ess) < 1.0:
            raise InvalidParametersError(
                f"min_ess: expected None or a number in (0, 1), got {self.min_ess!r}"
            )
        as_nonnegative_float("ess_n_std", self.ess_n_std)
        if self.token_check is not None and (
            as_positive_int("token_check", self.token_check, maximum=MAX_TOKENS) < 2
        ):
            raise InvalidParametersError(
                f"token_check: expected None or a number of tokens ≥ 2, got {self.token_check!r}"
            )

    @property
    def max_iter(self) -> int:
        """IPOPT's iteration limit per solve."""
        return DEFAULT_MAX_ITER if self.solver.max_iter is None else self.solver.max_iter

    @property
    def tol(self) -> float:
        """IPOPT's tolerance."""
        return DEFAULT_TOL if self.solver.tol is None else self.solver.tol

    @property
    def ipopt_options(self) -> Mapping[str, Any]:
        """The user's extra IPOPT options."""
        return self.solver.options


def constructive_layer(
    target: Gaussian, rate: float, cov_rate: float, rotation: FloatArray | None
) -> Layer:
    """``A = aI + SΣ*⁻¹``, ``V = −rate·I``, ``B = R/(2·rate)``, ``R = 2aΣ*⁻¹``, 2a = cov_rate.

    The bias is ``b = −K m*`` with the mean matrix in closed form: ``K = A + V(I + Σ*B) =
    aI + SΣ*⁻¹ − rate·I − aI = SΣ*⁻¹ − rate·I`` (no further ``d×d`` product; forming K from
    the field took a third of the time at d = 1024).
    """
    d = target.dim
    # Σ*⁻¹ by Cholesky: a third of an eigensolve's time (1 s at d = 1024), inside no budget check
    omega = sym(scipy.linalg.cho_solve(scipy.linalg.cho_factor(target.cov), np.eye(d)))
    a = 0.5 * cov_rate
    a_mat = a * np.eye(d)
    bias = rate * target.mean
    if rotation is not None:
        s_omega = rotation @ omega
        a_mat = a_mat + s_omega
        bias = bias - s_omega @ target.mean
    b_mat = (a / rate) * omega
    try:
        return Layer(a_mat, B=b_mat, V=-rate, b=bias)
    except InvalidParametersError as exc:  # the user's target, not an internal matrix, is why
        raise InvalidParametersError(
            f"target: the constructive layer for it is not representable in float64 (its "
            f"A = aI + SΣ*⁻¹, B = a Σ*⁻¹/rate, b = rate·m* − SΣ*⁻¹m*: {exc})"
        ) from None


def check_rotation(rotation: Any, d: int) -> FloatArray | None:
    """Validate the skew matrix ``S`` of the constructive design (``None`` passes)."""
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


@dataclass
class DesignRequest:
    """Validated input of :func:`design_mean_matching`."""

    target: Gaussian
    r_m: float
    r_c: float
    rotation: FloatArray | None
    fa: FloatArray | None
    fb: FloatArray | None
    fv: FloatArray | None
    minimum_norm: bool
    opts: DesignOptions
    initial: Gaussian
    T: float | None

    @property
    def scalable(self) -> bool:
        """V and B are both designed: the scale split ``(sV, B/s)`` is free."""
        return self.fb is None and self.fv is None

    @property
    def fixed(self) -> tuple[str, ...]:
        return tuple(
            n for n, x in (("A", self.fa), ("B", self.fb), ("V", self.fv)) if x is not None
        )

    @property
    def constructive(self) -> bool:
        return not self.fixed and not self.minimum_norm and self.opts.V_structure == "scalar"


def _as_fixed(name: str, value: Any, d: int) -> FloatArray | None:
    if value is None:
        return None
    if name == "V" and leading_size("fixed_V", value) is None:
        return float(as_float_array("fixed_V", value, ndim=0)) * np.eye(d)
    return as_float_array(f"fixed_{name}", value, ndim=2, shape=(d, d))


def parse_request(
    target: Any,
    rate: Any,
    cov_rate: Any,
    rotation: Any,
    fixed: tuple[Any, Any, Any],
    minimum_norm: Any,
    opts: DesignOptions,
    path: tuple[Any, Any],
) -> DesignRequest:
    tgt = coerce_target(target)
    d = tgt.dim
    r_m = as_positive_float("rate", rate)
    r_c = 2.0 * r_m if cov_rate is None else as_positive_float("cov_rate", cov_rate)
    rot = check_rotation(rotation, d)
    fa, fb, fv = (_as_fixed(n, x, d) for n, x in zip("ABV", fixed))
    if not isinstance(minimum_norm, bool):
        raise InvalidParametersError(f"minimum_norm: expected a bool, got {minimum_norm!r}")
    g0 = as_initial(path[0], d)
    depth = None if path[1] is None else as_positive_float("T", path[1])
    req = DesignRequest(tgt, r_m, r_c, rot, fa, fb, fv, minimum_norm, opts, g0, depth)
    if rot is not None and (req.fixed or minimum_norm):
        raise InvalidParametersError(
            "rotation: only the constructive design takes a rotation (no fixed parts, "
            "minimum_norm=False)"
        )
    return req


#: Relative tolerance of the analytic necessary conditions.
_TOL = 1e-12


@dataclass
class Problem:
    """The design problem in whitened coordinates ``x̂ = Σ*^{-1/2} x``."""

    d: int
    target: Gaussian
    wh: Whitening
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


def precheck(p: Problem) -> None:
    """Analytic necessary conditions; raise naming the constraint that makes it infeasible."""
    if p.riccati:
        _check_scalar_v(p)
        if p.b_hat is not None:
            _check_fixed_b_riccati(p, p.b_hat)
        if p.a_hat is not None:
            _check_fixed_a_riccati(p, p.a_hat)
    else:
        _check_general_v(p)


def _check_scalar_v(p: Problem) -> None:
    v = p.v_scalar
    if v is not None and v >= 0:
        raise _unreachable(
            f"mean rate: fixed V = vI with v = {v:.6g} ≥ 0; at the equilibrium the mean "
            "matrix K has every eigenvalue with real part v (docs/theory.md §3–5), so the mean "
            "cannot converge"
        )
    if v is not None and -v < p.r_m * (1 - _TOL):
        raise _unreachable(
            f"mean rate: fixed V = vI gives mean rate |v| = {-v:.6g} < rate = {p.r_m:.6g} "
            "(the eigenvalues of K have real part exactly v)"
        )


def _global_spectrum(p: Problem, fixed: FloatArray, why: Callable[[float], str]) -> FloatArray:
    """The ascending spectrum of ``sym(fixed)``; with ``require_global``, raise if indefinite.

    The global certificate needs ``R ⪰ 0``, hence a semi-definite symmetric part of the fixed
    matrix; ``why(λ_min)`` says what an indefinite one means for it.
    """
    w: FloatArray = np.asarray(np.linalg.eigvalsh(sym(fixed)), dtype=float)
    if p.require_global and w[0] < -_TOL * max(abs(w[-1]), 1e-300):
        raise _unreachable(
            f"global certificate (R ⪰ 0): {why(float(w[0]))}; use require_global=False for a "
            "local design"
        )
    return w


def _check_fixed_b_riccati(p: Problem, b_hat: FloatArray) -> None:
    v = p.v_scalar
    w = _global_spectrum(
        p,
        b_hat,
        lambda low: (
            "the fixed B has an indefinite or negative symmetric part (eigenvalue "
            f"{low:.6g} of Σ*^½ sym(B) Σ*^½); R = −v(B + Bᵀ) cannot be positive semi-definite "
            "with v < 0, and v < 0 is needed for the mean to converge"
        ),
    )
    if v is not None and -2.0 * v * float(np.sum(w)) < p.d * p.r_c * (1 - _TOL):
        raise _unreachable(
            f"covariance rate: with fixed B and V = vI, tr R = {-2 * v * np.sum(w):.6g} "
            f"< d·cov_rate = {p.d * p.r_c:.6g}; the covariance rates 2 Re λ(A) sum to "
            "tr(R) at the equilibrium"
        )


def _check_fixed_a_riccati(p: Problem, a_hat: FloatArray) -> None:
    v = p.v_scalar
    eig = np.linalg.eigvals(a_hat)
    _global_spectrum(
        p,
        a_hat,
        lambda low: (
            f"the fixed A makes R = AᵀΣ*⁻¹ + Σ*⁻¹A indefinite (eigenvalue {2 * low:.6g} "
            "of Σ*^½RΣ*^½); no V = vI head makes Σ* globally attracting"
        ),
    )
    if 2.0 * float(np.min(eig.real)) < p.r_c * (1 - _TOL):
        raise _unreachable(
            f"covariance rate: the fixed A has min Re λ(A) = {np.min(eig.real):.6g}; the "
            "covariance linearization has spectrum −(λ_i + λ_j)(A), so its rate "
            f"{2 * np.min(eig.real):.6g} < cov_rate = {p.r_c:.6g}"
        )
    if p.b_hat is None:
        return
    sa, sb = sym(a_hat), sym(p.b_hat)
    nb = float(np.sum(sb * sb))
    v_ls = -float(np.sum(sa * sb)) / nb if nb > 0 else 0.0
    v_use = v if v is not None else v_ls
    res = float(np.linalg.norm(sa + v_use * sb)) / max(float(np.linalg.norm(sa)), 1e-300)
    if res > 1e-10:
        raise _unreachable(
            "equilibrium: with fixed A and B the equilibrium equation needs "
            "sym(Σ*^-½AΣ*^½) = −v·sym(Σ*^½BΣ*^½) for a scalar v; the best v = "
            f"{v_use:.6g} leaves a relative residual {res:.3g}"
        )
    if v is None and -v_ls < p.r_m * (1 - _TOL):
        raise _unreachable(
            f"mean rate: fixed A and B force v = {v_ls:.6g}, mean rate "
            f"{-v_ls:.6g} < rate = {p.r_m:.6g}"
        )


def _check_general_v(p: Problem) -> None:
    d, n = p.d, p.n_sym
    if p.require_global:
        raise _unreachable(
            "global certificate: it needs the Riccati class (V = vI); with a general V "
            "only a local certificate exists; use require_global=None or False"
        )
    if p.v_fixed is None:
        return
    tr_v = float(np.trace(p.v_fixed))
    if tr_v > -d * p.r_m * (1 - _TOL):
        raise _unreachable(
            f"mean rate: tr V = {tr_v:.6g} > −d·rate = {-d * p.r_m:.6g}; at the "
            "equilibrium K = M* + V with M*Σ* skew, so tr K = tr V and some eigenvalue "
            "of K has real part ≥ tr V / d"
        )
    if p.b_hat is not None:
        vh, bh = p.v_fixed, p.b_hat
        tr_j = float(np.trace(vh) * np.trace(bh) + np.sum(vh * bh))
        if tr_j > -n * p.r_c * (1 - _TOL):
            raise _unreachable(
                f"covariance rate: with fixed V and B the trace of DF(Σ*) on symmetric "
                f"matrices is tr V̂ tr B̂ + tr(V̂ᵀB̂) = {tr_j:.6g} > −n·cov_rate = "
                f"{-n * p.r_c:.6g} (n = d(d+1)/2), so some eigenvalue has real part "
                "> −cov_rate"
            )
