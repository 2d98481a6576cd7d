"""The design problem with fixed parts, in whitened coordinates, and its analytic prechecks.

Before the NLP runs, necessary conditions that follow in closed form from the fixed parts are
checked; a request that violates one is invalid input and raises
:class:`~gtcontrol.errors.UnreachableTargetError` naming the constraint and its numbers (e.g. a
fixed B whose symmetric part is indefinite cannot give ``R ⪰ 0`` with ``V = vI`` and ``v < 0``).

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md §5.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..._linalg import FloatArray, sym
from ...errors import UnreachableTargetError
from ...model.gaussian import Gaussian
from ._common import Whitening
from .options import _DesignOptions

__all__ = ["Problem", "precheck"]

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
    opts: _DesignOptions

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
