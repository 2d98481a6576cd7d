"""The CasADi transcription of a design with fixed parts (the NLP solved by IPOPT).

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

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..._linalg import FloatArray, psd_factor, sym, sym_basis
from ._common import MARGIN_SLACK, abscissa
from .problem import Problem

__all__ = ["NLP", "lower_factor", "lyapunov_factor"]


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
