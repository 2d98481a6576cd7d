"""The design NLP with fixed parts: its CasADi transcription and the IPOPT attempts.

**Transcription** (:class:`NLP`).
Variables are the designed parts in whitened coordinates ``x̂ = Σ*^{-1/2} x`` (target
``N(m̂*, I)``; ``Â = Σ*^{-1/2}AΣ*^{1/2}``, ``B̂ = Σ*^{1/2}BΣ*^{1/2}``, ``V̂ = Σ*^{-1/2}VΣ*^{1/2}``,
which keeps every fixed part fixed), the Cholesky factors of the certificate weights and one
elastic slack per margin. Constraints:

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
  symmetric matrices (``d(d+1)/2`` square, orthonormal basis :func:`~gtcontrol._linalg.sym_basis`);
* global convergence (Riccati class): ``R̂ = 2 sym(Â) ⪰ 0`` (``= L_R L_Rᵀ``);
* objective: ``‖Â‖² + ‖B̂‖² + ‖V̂‖² + ‖b̂‖²`` (Frobenius, designed parts only, ``b = −K m*``):
  the parameter norm in the target's metric. It does not depend on the coordinates the user
  chose (it is invariant under ``x ↦ Qx`` with Q orthogonal, applied to target and layer alike)
  and equals the plain norm when ``Σ* = I``; it also keeps the NLP well conditioned (the plain
  norm couples every entry of A through Σ*^{±½}: a dense Hessian; measured at d = 10: 364
  IPOPT iterations against 9).

Scale: ``O(d³)`` expression nodes for the ``V = vI`` class (a few seconds at d = 20) and
``O(d⁶)`` for a general V (the ``d(d+1)/2``-square covariance certificate: use d ≲ 6).

**Solving** (:func:`solve_nlp`). IPOPT is tried with two barrier strategies (each with two
exact-penalty weights on the margin slacks); the best attempt is kept (verified first, then
optimal, then the smallest objective). If no attempt verifies but the closed-form starting
design does, that design is returned (certified, not norm-minimal). A ``time_limit`` reaches
IPOPT as ``max_wall_time`` (the remaining budget) and stops the attempts; the best iterate so
far is returned.

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._linalg import FloatArray, psd_factor, sym, sym_basis, unvech, vech
from ..._status import Budget
from ...model.params import Layer
from .._design_kernel import MARGIN_SLACK, abscissa
from .._ipopt import IpoptDeadline, casadi_options
from ._certificates import DesignCertificate
from ._problem import Problem

__all__ = [
    "NLP",
    "Builder",
    "DesignAttempt",
    "initial_guess",
    "lower_factor",
    "lyapunov_factor",
    "polish",
    "solve_nlp",
]


def lower_factor(y: FloatArray) -> FloatArray:
    """Lower-triangular ``L`` with ``L Lᵀ = y₊`` (the PSD part of sym(y)), entries column-wise."""
    _, r = np.linalg.qr(psd_factor(y).T)
    low = r.T
    signs = np.where(np.diag(low) < 0, -1.0, 1.0)
    low = low * signs
    n = y.shape[0]
    return np.concatenate([low[j:, j] for j in range(n)])


def lyapunov_factor(x_shift: FloatArray, scale: float) -> FloatArray:
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
    return lower_factor(pw)


class NLP:
    """The CasADi/IPOPT problem: variables, constraint groups, objective.

    Each margin certificate has an elastic slack ``s ≥ 0`` that lowers its rate to
    ``r (1 − s)``; the objective adds ``W Σ s`` (an exact penalty: for W above the multipliers
    the slacks vanish whenever the request is feasible). The slacks make any start feasible and,
    when a request is out of reach, say which margin and by how much.
    """

    def __init__(self, p: Problem) -> None:
        import casadi as ca

        self.ca = ca
        self.p = p
        self._sym_t = ca.MX if p.opts.symbolic == "MX" else ca.SX
        self._xs: list[Any] = []
        self.layout: dict[str, tuple[int, int]] = {}
        self.groups: list[tuple[str, Any, float, float]] = []
        self.certs: list[tuple[str, Any, float, Any]] = []  # (name, X, rate, P)
        self._slacks: list[Any] = []
        self._v_s: Any = None  # the scalar v (variable or fixed) in the Riccati class
        a_h, b_h, v_h = self._parts()
        # Equilibrium F(Σ*) = 0 ⇔ sym(Â + V̂B̂) = 0 (the moment field of theory.md §2, whitened;
        # checked against gtcontrol.model.moments.moment_field after the solve).
        m_h = a_h + v_h @ b_h
        self.groups.append(("equilibrium", self._upper(0.5 * (m_h + m_h.T), p.d), 0.0, 0.0))
        k_h = m_h + v_h  # K̂ = Â + V̂ + V̂B̂
        self._margins(a_h, b_h, v_h, m_h, k_h)
        obj = self._objective(a_h, b_h, v_h, k_h)
        self.x = ca.vertcat(*self._xs)
        self.weight = self._sym_t.sym("W")
        self.slack = ca.vertcat(*self._slacks)
        self.g = ca.vertcat(*[g[1] for g in self.groups])
        self.obj = obj
        self.eval_parts = ca.Function("parts", [self.x], [a_h, b_h, v_h])
        self.eval_g = ca.Function("g", [self.x], [self.g])
        self.eval_obj = ca.Function("f", [self.x], [obj])
        self.eval_slack = ca.Function("s", [self.x], [self.slack])
        self.eval_weights = ca.Function("w", [self.x], [c[3] for c in self.certs])
        self.eval_certs = ca.Function("X", [self.x], [c[1] for c in self.certs])

    # -- building blocks

    def _var(self, name: str, size: int) -> Any:
        x = self._sym_t.sym(name, size)
        start = sum(int(v.numel()) for v in self._xs)
        self.layout[name] = (start, start + size)
        self._xs.append(x)
        return x

    def _lower(self, name: str, k: int) -> Any:
        # Nonzeros of the lower triangle, column by column (CasADi's storage order).
        return self._sym_t(self.ca.Sparsity.lower(k), self._var(name, k * (k + 1) // 2))

    def _upper(self, y: Any, k: int) -> Any:
        idx = [i + k * j for j in range(k) for i in range(j + 1)]
        return self.ca.vec(y)[idx]

    def _parts(self) -> tuple[Any, Any, Any]:
        """``(Â, B̂, V̂)``: variables for the designed parts, constants for the fixed ones."""
        ca, p, d = self.ca, self.p, self.p.d
        a_h = ca.reshape(self._var("A", d * d), d, d) if p.a_hat is None else ca.DM(p.a_hat)
        b_h = ca.reshape(self._var("B", d * d), d, d) if p.b_hat is None else ca.DM(p.b_hat)
        if p.riccati:
            self._v_s = self._var("v", 1) if p.v_scalar is None else p.v_scalar
            v_h = self._v_s * ca.DM.eye(d)
        else:
            v_var = self._var("V", d * d) if p.v_fixed is None else None
            v_h = ca.reshape(v_var, d, d) if v_var is not None else ca.DM(p.v_fixed)
        return a_h, b_h, v_h

    def _certificate(self, name: str, x_mat: Any, rate: float, k: int) -> None:
        """``(X + r(1−s)I)ᵀP + P(X + r(1−s)I) + 2rI = 0``, ``P = LLᵀ``, ``tr P ≤ κk``.

        A solution with ``P ⪰ 0`` exists iff ``X + r(1−s)I`` is Hurwitz (then P ≻ 0, L is
        nonsingular and the constraint Jacobian keeps full rank at the optimum, unlike a
        factorization of a semi-definite residual). Then ``‖e^{Xt}‖ ≤ √cond(P) e^{−r(1−s)t}``.
        """
        ca = self.ca
        slack = self._var(f"{name}_s", 1)
        low = self._lower(f"{name}_L", k)
        pw = low @ low.T
        xs_ = x_mat + rate * (1 - slack) * ca.DM.eye(k)
        y = xs_.T @ pw + pw @ xs_ + 2.0 * rate * ca.DM.eye(k)
        kappa = self.p.opts.max_condition
        self.groups.append((f"{name} margin", self._upper(y, k), 0.0, 0.0))
        self.groups.append((f"{name} certificate conditioning", ca.sumsqr(low), -ca.inf, kappa * k))
        self.certs.append((name, x_mat, rate, pw))
        self._slacks.append(slack)

    def _margins(self, a_h: Any, b_h: Any, v_h: Any, m_h: Any, k_h: Any) -> None:
        ca, p, d = self.ca, self.p, self.p.d
        if p.riccati:
            # Mean: spectrum of K is v + iℝ at the equilibrium → the bound v ≤ −rate.
            # Covariance: spectrum −(λ_i + λ_j)(A) → certificate on −Â with rate r_c/2.
            self._certificate("covariance", -a_h, 0.5 * p.r_c * (1 + MARGIN_SLACK), d)
            if p.require_global:
                lr = self._lower("R", d)
                r_gap = self._upper(a_h + a_h.T - lr @ lr.T, d)
                self.groups.append(("global (R ⪰ 0)", r_gap, 0.0, 0.0))
            return
        eye = ca.DM.eye(d)
        self._certificate("mean", k_h, p.r_m * (1 + MARGIN_SLACK), d)
        basis = ca.DM(np.array(sym_basis(d)))
        big = ca.kron(eye, m_h) + ca.kron(m_h, eye) + ca.kron(b_h.T, v_h) + ca.kron(v_h, b_h.T)
        self._certificate("covariance", basis.T @ big @ basis, p.r_c * (1 + MARGIN_SLACK), p.n_sym)

    def _objective(self, a_h: Any, b_h: Any, v_h: Any, k_h: Any) -> Any:
        """Squared Frobenius norms of the designed parts and of ``b̂ = −K̂ m̂*``, whitened."""
        ca, p = self.ca, self.p
        obj: Any = 0
        if p.a_hat is None:
            obj += ca.sumsqr(a_h)
        if p.b_hat is None:
            obj += ca.sumsqr(b_h)
        if p.riccati and p.v_scalar is None:
            obj += p.d * self._v_s**2
        elif not p.riccati and p.v_fixed is None:
            obj += ca.sumsqr(v_h)
        return obj + ca.sumsqr(k_h @ ca.DM(p.m_hat))

    # -- evaluation

    def bounds(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """``(lbx, ubx, lbg, ubg)``."""
        nx = int(self.x.numel())
        lbx, ubx = np.full(nx, -np.inf), np.full(nx, np.inf)
        if "v" in self.layout:
            ubx[self.layout["v"][0]] = -self.p.r_m * (1 + MARGIN_SLACK)
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
            put("R", lower_factor(a_hat + a_hat.T))
        out = self.eval_certs(x0)
        mats: list[FloatArray] = [
            np.asarray(m) for m in (out if isinstance(out, (list, tuple)) else [out])
        ]
        kappa = self.p.opts.max_condition
        for (name, _, rate, _), xm in zip(self.certs, mats):
            k = xm.shape[0]
            alpha = abscissa(xm)
            # Room: a normal X + r(1−s)I = −δI has P = (r/δ) I, inside tr P ≤ κk iff δ ≥ r/κ.
            s0 = max(0.0, 1.0 + alpha / rate + 4.0 / kappa)
            put(f"{name}_s", np.array([s0]))
            put(f"{name}_L", lyapunov_factor(xm + rate * (1 - s0) * np.eye(k), rate))
        return x0

    def weights(self, x: FloatArray) -> list[FloatArray]:
        """The certificate weights ``P`` at ``x``."""
        out = self.eval_weights(x)
        return [np.asarray(w) for w in (out if isinstance(out, (list, tuple)) else [out])]

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


Builder = Callable[[FloatArray, FloatArray, FloatArray], tuple[Layer, DesignCertificate]]

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
#: IPOPT return statuses that mean a cap (iterations, time) ran out.
_CAPS = ("Maximum_Iterations_Exceeded", "Maximum_WallTime_Exceeded", "Maximum_CpuTime_Exceeded")
#: Cost model of setting up one IPOPT solver (CasADi's ``nlpsol``: the exact Hessian of the
#: Lagrangian, one native call that cannot be interrupted): ``c · (d / d0)^p`` seconds, per
#: class. Fitted on the upper envelope of set-ups measured on a loaded 2-core machine: Riccati
#: class (V = vI: a fixed B, A or v, or minimum_norm) 0.38/2.3/11.6/36 s at d = 8/12/16/20;
#: a general V (the d(d+1)/2-square covariance certificate) 0.9/3.4/13.8 s at d = 4/5/6.
_SETUP_COST = {True: (0.4, 8.0, 5.3), False: (14.0, 6.0, 7.5)}


def setup_estimate(p: Problem) -> float:
    """Estimated seconds to set up one IPOPT solver of the design NLP of ``p``."""
    c, d0, power = _SETUP_COST[bool(p.riccati)]
    return float(c * (p.d / d0) ** power)


# ----------------------------------------------------------------------------- start, polish


def initial_guess(p: Problem) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Feasible-leaning ``(Â, B̂, V̂)`` honoring the fixed parts (closed forms of the
    constructive design where the fixed parts allow them)."""
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


def _jacobian(d: int, column: Callable[[FloatArray], FloatArray]) -> FloatArray:
    """Matrix of a linear map on ``d×d`` matrices, one unit matrix (column-major) at a time."""
    cols = []
    for k in range(d * d):
        e = np.zeros(d * d)
        e[k] = 1.0
        cols.append(column(e.reshape(d, d)))
    return np.array(cols).T


def polish(
    p: Problem, a_hat: FloatArray, b_hat: FloatArray, v_hat: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Make ``sym(Â + V̂B̂) = 0`` exact by a minimum-norm correction of one designed block.

    The equation is linear in each block separately, so one least-squares step is exact.
    """
    d = p.d

    def eq(a: FloatArray, b: FloatArray, v: FloatArray) -> FloatArray:
        return vech(sym(a + v @ b))

    res = eq(a_hat, b_hat, v_hat)
    if p.a_hat is None:
        return a_hat - unvech(res, d), b_hat, v_hat
    if p.b_hat is None:
        jac = _jacobian(d, lambda e: eq(np.zeros((d, d)), e, v_hat))
        delta = np.linalg.lstsq(jac, -res, rcond=None)[0].reshape(d, d)
        return a_hat, b_hat + delta, v_hat
    if p.riccati and p.v_scalar is None:
        sb = sym(b_hat)
        v = -float(np.sum(sym(a_hat) * sb)) / float(np.sum(sb * sb))
        return a_hat, b_hat, v * np.eye(d)
    if p.v_fixed is None and not p.riccati:
        jac = _jacobian(d, lambda e: eq(np.zeros((d, d)), b_hat, e))
        delta = np.linalg.lstsq(jac, -res, rcond=None)[0].reshape(d, d)
        return a_hat, b_hat, v_hat + delta
    return a_hat, b_hat, v_hat


# ----------------------------------------------------------------------------- attempts


def _diagnose(p: Problem, nlp: NLP, x: FloatArray, st: Mapping[str, Any]) -> str:
    """Why an attempt is not a solution: the margin with a positive slack, or the most violated
    constraint group ('' when IPOPT succeeded with zero slacks)."""
    slack = np.asarray(nlp.eval_slack(x)).ravel()
    short = [(c[0], c[2], sv) for c, sv in zip(nlp.certs, slack) if sv > _SLACK_TOL]
    status = st.get("return_status", "")
    if short:
        name, rate, sv = max(short, key=lambda t: t[2])
        rate_req = rate / (1 + MARGIN_SLACK) * (2 if p.riccati and name == "covariance" else 1)
        if st.get("success", False):
            return (
                f"IPOPT: {status}; the binding constraint is the {name} margin: "
                f"{_GROUP_HINTS[name + ' margin']} reaches at best {(1 - sv) * rate_req:.6g} of "
                f"the requested {name} rate {rate_req:.6g} with the Lyapunov weights bounded by "
                f"max_condition = {p.opts.max_condition:g} (a local optimum)"
            )
        return (
            f"IPOPT: {status}; at the last iterate the {name} margin is not met: "
            f"{_GROUP_HINTS[name + ' margin']} reaches {(1 - sv) * rate_req:.6g} of the requested "
            f"{name} rate {rate_req:.6g}"
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


@dataclass
class _Attempt:
    """One IPOPT attempt, built into a layer and verified."""

    layer: Layer
    certificate: DesignCertificate
    stats: dict[str, Any]
    diagnosis: str
    short: bool  # IPOPT converged, but a margin slack stayed positive (request out of reach)

    @property
    def key(self) -> tuple[bool, bool, float]:
        return (self.certificate.success, bool(self.stats["optimal"]), -self.stats["objective"])


class _Runner:
    """Runs IPOPT attempts on one NLP from one starting point."""

    def __init__(self, p: Problem, nlp: NLP, x_init: FloatArray) -> None:
        self.p = p
        self.nlp = nlp
        self.x_init = x_init
        self.f0 = max(float(nlp.eval_obj(x_init)), 1e-12)
        self.bounds = nlp.bounds()
        ca = nlp.ca
        self.problem = {
            "x": nlp.x,
            "p": nlp.weight,
            "f": nlp.obj / self.f0 + nlp.weight * ca.sum1(nlp.slack),
            "g": nlp.g,
        }
        self.iterations = 0
        self._stop: Any = None  # the budget callback (kept alive while its solver runs)

    def _solver(self, extra: Mapping[str, Any], budget: Budget) -> Any:
        opts = self.p.opts
        base: dict[str, Any] = {
            "ipopt.print_level": 0,
            "ipopt.sb": "yes",
            "print_time": False,
            "ipopt.tol": opts.tol,
            "ipopt.constr_viol_tol": opts.tol,
            "ipopt.max_iter": opts.max_iter,
            "show_eval_warnings": False,
        }
        if budget.time_limit is not None:
            # max_wall_time bounds each solve by the time left now; the callback stops IPOPT
            # as soon as the shared budget is spent (later solves of the same solver included).
            base["ipopt.max_wall_time"] = max(budget.remaining(), 1e-3)
            nlp = self.nlp
            self._stop = IpoptDeadline(
                int(nlp.x.numel()),
                int(nlp.g.numel()),
                1,
                name="gtcontrol_design_budget",
                stop=lambda: budget.exhausted,
            )
            base["iteration_callback"] = self._stop
        user = casadi_options(opts.ipopt_options)
        options = {**base, **extra, **user}
        return self.nlp.ca.nlpsol("gtcontrol_design", "ipopt", self.problem, options)

    def attempt(self, extra: Mapping[str, Any], budget: Budget, build: Builder) -> _Attempt:
        """Solve with the penalty weights in turn (stopping when the slacks vanish)."""
        lbx, ubx, lbg, ubg = self.bounds
        x = self.x_init
        st: dict[str, Any] = {}
        try:
            solver = self._solver(extra, budget)
            for i, weight in enumerate(_SLACK_WEIGHTS):
                if i > 0 and budget.exhausted:
                    break
                sol = solver(x0=x, p=weight, lbx=lbx, ubx=ubx, lbg=lbg, ubg=ubg)
                st = dict(solver.stats())
                self.iterations += int(st.get("iter_count", 0))
                x = np.asarray(sol["x"]).ravel()
                slack = np.asarray(self.nlp.eval_slack(x)).ravel()
                if not st.get("success", False) or np.max(slack) <= _SLACK_TOL:
                    break
        except RuntimeError as exc:
            st = {"return_status": f"CasADi error ({exc})", "success": False}
        return self.evaluate(x, st, build)

    def evaluate(self, x: FloatArray, st: Mapping[str, Any], build: Builder) -> _Attempt:
        nlp = self.nlp
        slack = np.asarray(nlp.eval_slack(x)).ravel()
        converged = bool(st.get("success", False))
        stats: dict[str, Any] = {
            "return_status": str(st.get("return_status", "")),
            "objective": float(nlp.eval_obj(x)),
            "initial_objective": self.f0,
            "variables": int(nlp.x.numel()),
            "constraints": int(nlp.g.numel()),
            "slack": {c[0]: float(sv) for c, sv in zip(nlp.certs, slack)},
            "certificate_condition": {
                c[0]: float(np.linalg.cond(w)) for c, w in zip(nlp.certs, nlp.weights(x))
            },
            "optimal": converged and float(np.max(slack)) <= _SLACK_TOL,
        }
        layer, cert = build(*polish(self.p, *(np.asarray(m) for m in nlp.eval_parts(x))))
        short = converged and float(np.max(slack)) > _SLACK_TOL
        return _Attempt(layer, cert, stats, _diagnose(self.p, nlp, x, st), short)


# ----------------------------------------------------------------------------- driver


@dataclass
class DesignAttempt:
    """What :func:`solve_nlp` returns."""

    layer: Layer
    certificate: DesignCertificate
    stats: dict[str, Any]
    diagnosis: str
    exhausted: str | None  # why a budget (time limit, IPOPT cap) ran out; None if none did
    short: bool  # IPOPT converged with a margin out of reach (see :class:`_Attempt`)

    @property
    def optimal(self) -> bool:
        return bool(self.stats.get("optimal", False))


def _starting_design(
    p: Problem, build: Builder, guess: tuple[FloatArray, FloatArray, FloatArray]
) -> tuple[Layer, DesignCertificate]:
    return build(*polish(p, *guess))


def _cap_reason(p: Problem, return_status: str, budget: Budget) -> str | None:
    if return_status == "Maximum_Iterations_Exceeded":
        return f"IPOPT's iteration cap max_iter = {p.opts.max_iter} was reached"
    if return_status == "Maximum_WallTime_Exceeded" and budget.time_limit is not None:
        return budget.reason()
    if return_status in _CAPS:
        return f"IPOPT stopped at its limit ({return_status})"
    return None


def _refusal(p: Problem, estimate: float, budget: Budget, what: str) -> str:
    return (
        f"setting up {what} (d = {p.d}) is estimated at {estimate:.3g} s, more than the "
        f"{budget.remaining():.3g} s left of the time limit of {budget.given_limit:g} s (the "
        "set-up cannot be interrupted; raise time_limit)"
    )


def solve_nlp(p: Problem, build: Builder, budget: Budget) -> DesignAttempt:
    """Solve the NLP (with retries, within ``budget``) and verify the result.

    Attempts follow :data:`_ATTEMPTS` until one ends optimal (zero slacks) with a verified
    design; otherwise the best attempt is kept (verified first, then optimal, then the smallest
    objective). If no attempt verifies but the starting design does (it is feasible by
    construction for a fixed B with positive symmetric part, a fixed A or v, or no fixed
    parts), that design is returned, certified but not minimal. When the budget runs out
    before IPOPT starts, or setting up an IPOPT solver is estimated (:func:`setup_estimate`)
    to take longer than the time left, the (polished) starting design is the best iterate.
    """
    clock = time.perf_counter()
    guess = initial_guess(p)
    best: _Attempt | None = None
    history: list[str] = []
    runner: _Runner | None = None
    exhausted: str | None = None
    estimate = setup_estimate(p)
    refused = ""
    if not budget.exhausted and estimate <= budget.remaining():
        nlp = NLP(p)
        runner = _Runner(p, nlp, nlp.initial(*guess))
        for extra in _ATTEMPTS if not p.opts.ipopt_options else ({},):
            if budget.exhausted:
                break
            if estimate > budget.remaining():
                refused = _refusal(p, estimate, budget, "another IPOPT attempt")
                break
            att = runner.attempt(extra, budget, build)
            history.append(att.stats["return_status"])
            if best is None or att.key > best.key:
                best = att
            if att.certificate.success and att.stats["optimal"]:
                break
    elif not budget.exhausted:
        refused = _refusal(p, estimate, budget, "the NLP")
    if best is None:
        exhausted = refused or budget.reason()
        layer, cert = _starting_design(p, build, guess)
        stats: dict[str, Any] = {"return_status": "", "optimal": False}
        diagnosis = "IPOPT did not run"
        short = False
    else:
        layer, cert, stats, diagnosis, short = (
            best.layer,
            best.certificate,
            best.stats,
            best.diagnosis,
            best.short,
        )
        if not (cert.success and stats["optimal"]):
            if budget.exhausted or refused:
                exhausted = refused or budget.reason()
            else:
                exhausted = _cap_reason(p, stats["return_status"], budget)
        if not cert.success:
            layer0, cert0 = _starting_design(p, build, guess)
            if cert0.success:
                stats = {**stats, "optimal": False, "fallback": "initial"}
                diagnosis = (
                    f"{diagnosis or 'IPOPT: ' + history[-1]}; the closed-form starting design "
                    "verifies and is returned instead"
                )
                layer, cert = layer0, cert0
    stats["attempts"] = history
    stats["setup_estimate"] = estimate
    stats["iterations"] = 0 if runner is None else runner.iterations
    stats["nlp_seconds"] = time.perf_counter() - clock
    return DesignAttempt(layer, cert, stats, diagnosis, exhausted, short)
