"""The per-head gains family of :func:`gtcontrol.stabilize`: ``V_h → g_h V_h``, ``g ∈ [0, 1]ᴴ``.

With the heads' gains ``g`` and ``A`` re-designed for each ``g``, ``A(g)``, the covariance
linearization ``L(g)`` and the mean matrix ``K(g)`` are affine in ``g``
(docs/theory.md, "Per-head gains are affine"). Two facts follow:

* **a proof of infeasibility.** The spectral abscissa is at least the mean eigenvalue, and
  ``tr L(g)``, ``tr K(g)`` are affine: when their minima over the box exceed ``−ρ`` (a linear
  program solved by inspection, each gain at 0 or 1), no gains reach the rate, and the result
  is ``INFEASIBLE`` with that proof;
* **a local search.** Otherwise ``‖1 − g‖₂`` is minimized by sequential linear programming:
  the rightmost eigenvalues of ``L(g)`` (Arnoldi through the factored heads) and of ``K(g)``
  are linearized by their sensitivities ``∂λ/∂g_h = ψᴴ(∂L/∂g_h)φ / ψᴴφ`` (left and right
  eigenvectors), and each step solves the linearized problem in a trust region (SLSQP). It
  reports a local minimum, or ``NOT_FOUND`` with how far it got; it is not a proof that none
  exists.

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse.linalg as sla

from ..._blas import arpack_products
from ..._linalg import FloatArray, power_of_two
from ..._status import Budget, Status
from ...analysis._subspace import reduced_layer
from ...analysis.stability import LinearizationSpectrum, SymOperator, mean_block
from ...model.heads import FactoredHeads
from ...model.params import Layer
from .._design_kernel import RATE_MARGIN, designed_a, quadratic_growth
from ._plan import Plan
from ._result import Design, NoDesign

__all__ = ["GainsContext", "gains_family"]


class GainsContext(Protocol):
    """What the gains search needs of one :func:`gtcontrol.stabilize` call: the plan, its
    budget, the design of ``A, b`` and the spectrum."""

    plan: Plan
    budget: Budget

    def design_ffn(self, layer: Layer) -> Layer: ...

    def spectrum(
        self, layer: Layer, *, omega: bool, k: int = 6, v0: FloatArray | None = None
    ) -> LinearizationSpectrum: ...


#: The left eigenvector of the gains' sensitivities comes from the formed adjoint up to this
#: ``n = r(r+1)/2`` (an LAPACK solve of well under a second), from Arnoldi, with at most
#: ``_ADJOINT_MAXITER`` restarts, beyond.
_DENSE_ADJOINT = 300
_ADJOINT_MAXITER = 2000
#: Gains search: iterations, trust region, and the step below which it has converged.
_GAINS_MAX_ITER = 30
_GAINS_TRUST = 0.25
_GAINS_STEP_TOL = 1e-4


def _with_gains(layer: Layer, g: FloatArray) -> Layer:
    """``V_h → g_h V_h`` for every head (factored group first)."""
    groups: list[Any] = []
    i = 0
    fh = layer.factored_heads
    if fh is not None:
        o = fh.o * g[: fh.n_heads, None, None]
        groups.append(FactoredHeads(fh.q, fh.k, fh.v, o, scale=fh.scale))
        i = fh.n_heads
    for j, (v_h, b_h) in enumerate(layer.dense_heads):
        groups.append((g[i + j] * v_h, b_h))
    return layer.replace(heads=groups)


def _single_heads(layer: Layer) -> list[Layer]:
    """One layer per head (A = 0), factored heads kept factored."""
    out = []
    fh = layer.factored_heads
    if fh is not None:
        for h in range(fh.n_heads):
            sl = slice(h, h + 1)
            one = FactoredHeads(fh.q[sl], fh.k[sl], fh.v[sl], fh.o[sl], scale=fh.scale)
            out.append(Layer(heads=one, dim=layer.dim))
    out += [Layer(heads=[pair], dim=layer.dim) for pair in layer.dense_heads]
    return out


def gains_family(
    ctx: GainsContext, base_layer: Layer, base: LinearizationSpectrum
) -> Design | NoDesign:
    """The gains family for one :func:`gtcontrol.stabilize` call (module docstring).

    ``base_layer`` is the layer with its heads kept and ``A, b`` designed, ``base`` its
    spectrum. Returns a :class:`NoDesign`, ``INFEASIBLE`` with the trace proof or
    ``NOT_FOUND`` with how far the search got, or the :class:`Design` of the gained layer with
    the smallest ``‖1 − g‖₂`` that met the rate (the checks decide its status).
    """
    red = reduced_layer(ctx.plan.layer, ctx.plan.basis)
    singles = _single_heads(red)
    n_h = len(singles)
    s_act = ctx.plan.s_act
    # Affine pieces: A(g) = A_fix + Σ g_h A_h, L(g) = L_fix + Σ g_h L_h, K(g) likewise.
    a_heads = [designed_a(one, s_act, np.zeros_like(s_act)) for one in singles]
    ops = [
        SymOperator(one.replace(A=a_h), s_act) for one, a_h in zip(singles, a_heads, strict=True)
    ]
    k_heads = []
    tr_l = np.empty(n_h)
    tr_k = np.empty(n_h)
    r = s_act.shape[0]
    for h, (one, a_h) in enumerate(zip(singles, a_heads, strict=True)):
        v_h, b_h = one.heads[0]
        k_heads.append(a_h + v_h @ (np.eye(r) + s_act @ b_h))
        bs = b_h @ s_act
        tr_l[h] = float(np.trace(v_h)) * float(np.trace(bs)) + float(np.sum(v_h * bs))
        tr_k[h] = float(np.trace(v_h))
    # at an equilibrium M*Σ* + Σ*M*ᵀ = −GGᵀ for every g, so tr M* = −γ/2 with γ = tr(Σ*⁻¹GGᵀ)
    # (0 without noise): the trace of L(g) on Sym(r) has (r + 1) tr M*, that of K(g) tr M*
    tr_m = (
        0.0
        if ctx.plan.forcing is None
        else -0.5 * float(np.trace(np.linalg.solve(s_act, ctx.plan.forcing)))
    )
    n_sym = r * (r + 1) / 2.0
    best_l = ((r + 1) * tr_m + float(np.sum(np.minimum(tr_l, 0.0)))) / n_sym
    best_k = (tr_m + float(np.sum(np.minimum(tr_k, 0.0)))) / r
    if best_l > -ctx.plan.rate or best_k > -ctx.plan.rate:
        part, val = ("L", best_l) if best_l > -ctx.plan.rate else ("K", best_k)
        proof = (
            f"no gains g ∈ [0,1]^{n_h} reach rate {ctx.plan.rate:g}: the mean eigenvalue of "
            f"{part}(g) is affine in g and at least {val:.6g} > −{ctx.plan.rate:g} on the whole "
            "box, and the spectral abscissa is at least the mean eigenvalue"
        )
        return NoDesign(Status.INFEASIBLE, proof)
    g = np.ones(n_h)
    best: tuple[FloatArray, LinearizationSpectrum, Layer] | None = None
    v0: FloatArray | None = None
    history = []
    stopped: LinearizationSpectrum | None = None
    for _ in range(_GAINS_MAX_ITER):
        ctx.budget.check()
        lay = ctx.design_ffn(_with_gains(ctx.plan.layer, g))
        spec = ctx.spectrum(lay, omega=False, k=1, v0=v0)
        if spec.status is not Status.SUCCESS:
            stopped = spec
            break
        history.append((g.copy(), spec.abscissa))
        ok = spec.abscissa <= -ctx.plan.rate
        if ok and (best is None or np.linalg.norm(1 - g) < np.linalg.norm(1 - best[0])):
            best = (g.copy(), spec, lay)
        grad_l, lam_l, phi = _grad_cov(ctx, lay, ops, spec)
        v0 = np.real(phi) + np.imag(phi)
        kg = mean_block(lay, ctx.plan.target.mean, ctx.plan.target.cov, ctx.plan.basis)
        grad_k, lam_k = _grad_mean(kg, k_heads)
        g_new = _gains_step(g, lam_l, grad_l, lam_k, grad_k, -ctx.plan.rate * (1.0 + RATE_MARGIN))
        if g_new is None:
            break
        if np.max(np.abs(g_new - g)) < _GAINS_STEP_TOL and ok:
            break
        g = g_new
    if best is None and stopped is not None:
        # a spectrum that could not be computed (off its equilibrium, Arnoldi unconverged, out
        # of time): said as such, not as a search that found nothing
        spent = stopped.status is Status.BUDGET_EXHAUSTED
        return NoDesign(
            Status.BUDGET_EXHAUSTED if spent else Status.FAILED,
            f"the gains search stopped after {len(history)} steps: at g = "
            f"{np.array2string(g, precision=4)} {stopped.message}",
        )
    if best is None:
        tried = len(history)
        low = min((a for _, a in history), default=math.nan)
        msg = (
            f"no certified gains found in {tried} steps of the gains search (sequential "
            f"linear programming from g = 1; lowest spectral abscissa reached {low:.6g}, "
            f"required ≤ −{ctx.plan.rate:g}); this is not a proof that none exist"
        )
        return NoDesign(Status.NOT_FOUND, msg)
    g_best, spec_best, lay_best = best
    q = quadratic_growth(_with_gains(red, g_best), s_act)
    omega = ctx.spectrum(lay_best, omega=True, k=1).numerical_abscissa
    change = float(np.linalg.norm(1.0 - g_best))
    what = (
        f"gains ‖1 − g‖₂ = {change:.6g} (a local minimum of the gains search, "
        f"{len(history)} steps); g = {np.array2string(g_best, precision=4)}"
    )
    design = Design(
        layer=lay_best,
        family="gains",
        spectrum=spec_best,
        what=what,
        change=change,
        q=q,
        omega=omega,
        gains=g_best,
    )
    return design


def _grad_cov(
    ctx: GainsContext, lay: Layer, ops: list[SymOperator], spec: LinearizationSpectrum
) -> tuple[FloatArray, float, Any]:
    """``∂ Re λ / ∂g_h = Re(ψᴴ L_h φ / ψᴴ φ)`` at the rightmost eigenvalue λ of ``L(g)``."""
    red = reduced_layer(lay, ctx.plan.basis)
    lam = complex(spec.eigenvalues[0])
    fwd = SymOperator(red, ctx.plan.s_act, ctx.budget)
    phi = fwd.to_coords(ctx.plan.basis.T @ spec.modes[0] @ ctx.plan.basis)
    psi = _left_vector(SymOperator(red, ctx.plan.s_act, ctx.budget, adjoint=True), lam, phi)
    denom = np.vdot(psi, phi) if psi is not None else 0.0
    if psi is None or abs(denom) <= 1e-8 * float(np.linalg.norm(psi) * np.linalg.norm(phi)):
        # a defective or repeated eigenvalue (no derivative), or an adjoint eigenvector that
        # Arnoldi did not find: the Rayleigh quotient's derivative (exact for a normal L)
        psi, denom = phi, np.vdot(phi, phi)
    grad = np.array([float((np.vdot(psi, op.matvec(phi)) / denom).real) for op in ops])
    return grad, lam.real, phi


def _left_vector(adj: SymOperator, lam: complex, phi: Any) -> Any:
    """The eigenvector of ``L*`` for ``conj(lam)`` (the left one of ``L`` for ``lam``): every pair
    of the formed matrix for ``n ≤ _DENSE_ADJOINT``, else three by Arnoldi from ``phi``; ``None``
    when Arnoldi does not converge (the caller falls back to the Rayleigh quotient)."""
    if adj.n <= _DENSE_ADJOINT:
        mat = adj.dense()
        scale = power_of_two(mat)  # scipy's eig needs it beyond 1e±138 (as stability's dense pairs)
        vals, vecs = scipy.linalg.eig(mat / scale, check_finite=False)
        vals = vals * scale
    else:
        try:
            with arpack_products(adj.matvec) as product:
                vals, vecs = sla.eigs(
                    sla.LinearOperator((adj.n, adj.n), matvec=product, dtype=float),
                    k=min(3, adj.n - 2),
                    which="LR",
                    tol=1e-9,
                    v0=np.real(phi) + np.imag(phi),
                    maxiter=_ADJOINT_MAXITER,
                )
        except sla.ArpackError:  # ArpackNoConvergence included
            return None
    return vecs[:, int(np.argmin(np.abs(vals - np.conj(lam))))]


def _grad_mean(k_mat: FloatArray, k_heads: list[FloatArray]) -> tuple[FloatArray, float]:
    """``∂ Re λ / ∂g_h`` at the rightmost eigenvalue of ``K(g)`` (left and right eigenvectors)."""
    scale = power_of_two(k_mat)
    vals, left, right = scipy.linalg.eig(k_mat / scale, left=True, right=True)
    vals = vals * scale
    j = int(np.argmax(vals.real))
    y, x = left[:, j], right[:, j]
    denom = np.vdot(y, x)
    if abs(denom) <= 1e-8:  # a defective eigenvalue: the Rayleigh quotient's derivative
        y, denom = x, np.vdot(x, x)
    grad = np.array([float((np.vdot(y, k_h @ x) / denom).real) for k_h in k_heads])
    return grad, float(vals[j].real)


def _gains_step(
    g: FloatArray,
    lam_l: float,
    grad_l: FloatArray,
    lam_k: float,
    grad_k: FloatArray,
    goal: float,
) -> FloatArray | None:
    """One trust-region step of ``min ‖1 − g'‖²`` under the linearized abscissa constraints."""
    lo = np.maximum(0.0, g - _GAINS_TRUST)
    hi = np.minimum(1.0, g + _GAINS_TRUST)
    cons = [
        {
            "type": "ineq",
            "fun": lambda x: goal - (lam_l + grad_l @ (x - g)),
            "jac": lambda x: -grad_l,
        },
        {
            "type": "ineq",
            "fun": lambda x: goal - (lam_k + grad_k @ (x - g)),
            "jac": lambda x: -grad_k,
        },
    ]
    res = scipy.optimize.minimize(
        lambda x: float(np.sum((1.0 - x) ** 2)),
        np.clip(g, lo, hi),
        jac=lambda x: -2.0 * (1.0 - x),
        bounds=list(zip(lo, hi, strict=True)),
        constraints=cons,
        method="SLSQP",
        options={"maxiter": 200, "ftol": 1e-12},
    )
    x = np.clip(np.asarray(res.x, dtype=float), lo, hi)
    if not np.all(np.isfinite(x)):
        return None
    viol = max(lam_l + grad_l @ (x - g), lam_k + grad_k @ (x - g)) - goal
    if viol > 1e-9:
        # the linearization cannot reach the goal inside the trust region: steepest descent
        worst = grad_l if lam_l >= lam_k else grad_k
        step = -_GAINS_TRUST * worst / max(float(np.max(np.abs(worst))), 1e-300)
        x = np.clip(g + step, lo, hi)
    if np.max(np.abs(x - g)) == 0.0:
        return None
    out: FloatArray = x
    return out
