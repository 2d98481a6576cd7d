"""Levenberg–Marquardt on the whitened residual in factor coordinates.

At a positive-definite equilibrium ``MΣ* + Σ*Mᵀ = 0`` says that M is Σ*-skew: with
``Σ = LLᵀ`` the congruent matrix ``N = L⁻¹ M L`` is skew. The search therefore drives the
*whitened* residual

    R(L) = L⁻¹ F(LLᵀ) L⁻ᵀ = N + Nᵀ (+ L⁻¹GGᵀL⁻ᵀ with noise)

to zero, not F itself. Two properties make it the strongest kind of start for general V
(random planted equilibria are saddles with about half of ``DF`` unstable, so flows do not
reach them):

* ``R`` does not vanish at singular Σ: Σ = 0 and the rank-deficient roots of F, which attract a
  least-squares search on F, are no minima of ``‖R‖`` (near Σ = 0, ``R ≈ A + Aᵀ``);
* the steps are congruence-invariant: ``L ← L(I + E)`` with E symmetric, so
  ``Σ ← L(I + E)²Lᵀ`` stays positive semidefinite and a step is measured relative to Σ.

The Jacobian of ``R`` in E is, with ``W = 2N − R``, ``Ṽ_h = L⁻¹V_hL`` and ``B̃_h = LᵀB_hL``,

    dR[E] = W E + E Wᵀ + 2 Σ_h (Ṽ_h E B̃_h + B̃_hᵀ E Ṽ_hᵀ),

a dense ``d(d+1)/2`` square matrix (:func:`~._field_kernel.jacobian_matrix`), used for d up to
``kron_max_dim``. Each start is a random positive-definite matrix at the layer's scale;
a run ends converged (relative residual of F ≤ ``LM_TOL``), stalled, stuck (the damping
cannot reduce the merit) or at its iteration cap. Converged points are polished by Newton on
F (:func:`gtcontrol.analysis.newton.newton_run`) and kept if positive definite and new.

Reference: K. Levenberg (1944), D. W. Marquardt (1963); the whitening is the affine-invariant
geometry of the positive-definite cone (R. Bhatia, *Positive Definite Matrices*, 2007, ch. 6).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from .._linalg import FloatArray, sym, unvech, vech, vech_scale
from .._status import Budget
from ..model.moments import affine_velocity
from ..model.params import Layer
from ._field_kernel import covariance_field, field_flops, jacobian_matrix, relative_residual
from .newton import WorkMeter

__all__ = ["LM_TOL", "LMRun", "whitened_lm"]

#: A run has converged when the relative residual of F is at most this (then Newton polishes).
LM_TOL = 1e-10

#: Iteration cap of one run.
LM_MAX_ITER = 80

#: Consecutive rejected steps (damping raised fourfold each) after which a run is stuck.
_MAX_REJECTS = 25

#: A run whose merit has not halved in this many iterations has stalled (a local minimum).
_STALL = 15

#: Start and bounds of the Marquardt damping λ (relative to ``diag JᵀJ``).
_LAMBDA0, _LAMBDA_MIN, _LAMBDA_MAX = 1e-2, 1e-12, 1e10


@dataclass
class LMRun:
    """How one Levenberg–Marquardt run ended.

    Attributes
    ----------
    cov
        The last iterate Σ (positive semidefinite by construction).
    rel
        Relative residual of F at ``cov`` (:func:`~._field_kernel.relative_residual`).
    iterations
        Accepted plus rejected steps' iterations (Jacobian evaluations).
    end
        ``"converged"``, ``"stalled"``, ``"stuck"``, ``"singular"`` (L lost rank) or
        ``"max_iter"``.
    """

    cov: FloatArray
    rel: float
    iterations: int
    end: str


def _whitened(
    layer: Layer, lmat: FloatArray
) -> tuple[FloatArray, FloatArray, list[tuple[FloatArray, FloatArray]]] | None:
    """``(R, W, [(2Ṽ_h, B̃_h)])`` at ``Σ = LLᵀ`` (``None`` if L is numerically singular)."""
    d = lmat.shape[0]
    cov = lmat @ lmat.T
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", sla.LinAlgWarning)
            linv = sla.solve_triangular(lmat, np.eye(d), lower=True, check_finite=False)
    except (np.linalg.LinAlgError, sla.LinAlgWarning, ValueError):
        return None
    if not np.all(np.isfinite(linv)):
        return None
    r = sym(linv @ covariance_field(layer, cov) @ linv.T)
    m_mat, _ = affine_velocity(layer, np.zeros(d), cov)
    w = 2.0 * (linv @ m_mat @ lmat) - r
    pairs = [(2.0 * (linv @ v @ lmat), lmat.T @ b @ lmat) for v, b in layer.heads]
    return r, w, pairs


def whitened_lm(
    layer: Layer,
    cov0: FloatArray,
    budget: Budget,
    work: WorkMeter,
    max_iter: int = LM_MAX_ITER,
) -> LMRun:
    """One Levenberg–Marquardt run on ``‖L⁻¹F(LLᵀ)L⁻ᵀ‖_F`` from ``Σ0 = cov0`` (module docstring).

    Parameters
    ----------
    layer
        The layer (dense heads; d small enough for a dense ``d(d+1)/2`` Jacobian).
    cov0
        A positive-definite start.
    budget
        Checked every iteration (raises :class:`gtcontrol._status.BudgetExhausted`).
    work
        The search's work meter, charged every iteration.
    max_iter
        Iteration cap of the run.

    Returns
    -------
    LMRun
    """
    d = layer.dim
    n = d * (d + 1) // 2
    wts = np.asarray(vech_scale(d))  # Frobenius weights of vech coordinates
    cost = n**3 / 3 + 8.0 * float(d) ** 4 + 4 * field_flops(layer) * (1 + len(layer.heads))
    chol = _cholesky(sym(cov0))
    parts = None if chol is None else _whitened(layer, chol)
    if chol is None or parts is None:
        return LMRun(cov0, float("inf"), 0, "singular")
    lmat = chol
    r, w, pairs = parts
    merit = float(np.sum(r * r))
    lam = _LAMBDA0
    best_merit, best_it = merit, 0
    cov = lmat @ lmat.T
    for it in range(max_iter):
        _, rel = relative_residual(layer, cov)
        if rel <= LM_TOL:
            return LMRun(cov, rel, it, "converged")
        if it - best_it >= _STALL:
            return LMRun(cov, rel, it, "stalled")
        budget.check()
        work.charge(cost)
        jac = jacobian_matrix(w, pairs) * (wts[:, None] / wts[None, :])
        rv = wts * vech(r)
        g = jac.T @ rv
        h = jac.T @ jac
        dh = np.diag(h).copy() + 1e-12 * max(float(np.trace(h)) / n, 1e-300)
        for _ in range(_MAX_REJECTS):
            try:
                step = np.linalg.solve(h + lam * np.diag(dh), -g)
            except np.linalg.LinAlgError:
                lam *= 4.0
                continue
            e = unvech(step / wts, d)
            cand = lmat + lmat @ e
            c_chol = _cholesky(cand @ cand.T)
            c_parts = None if c_chol is None else _whitened(layer, c_chol)
            if c_chol is not None and c_parts is not None:
                c_merit = float(np.sum(c_parts[0] * c_parts[0]))
                if np.isfinite(c_merit) and c_merit < merit:
                    lmat = c_chol
                    cov, merit = lmat @ lmat.T, c_merit
                    r, w, pairs = c_parts
                    lam = max(lam / 3.0, _LAMBDA_MIN)
                    if merit < 0.25 * best_merit:
                        best_merit, best_it = merit, it
                    break
            lam *= 4.0
            if lam > _LAMBDA_MAX:
                break
        else:
            lam = _LAMBDA_MAX * 2
        if lam > _LAMBDA_MAX:
            _, rel = relative_residual(layer, cov)
            return LMRun(cov, rel, it + 1, "converged" if rel <= LM_TOL else "stuck")
    _, rel = relative_residual(layer, cov)
    return LMRun(cov, rel, max_iter, "converged" if rel <= LM_TOL else "max_iter")


def _cholesky(cov: FloatArray) -> FloatArray | None:
    """The Cholesky factor of ``cov``, or ``None`` (not finite, not numerically definite)."""
    if not np.all(np.isfinite(cov)):
        return None
    try:
        return np.asarray(np.linalg.cholesky(cov), dtype=float)
    except np.linalg.LinAlgError:
        return None
