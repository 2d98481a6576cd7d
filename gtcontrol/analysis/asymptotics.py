"""Equilibria, stability and asymptotic regimes of a fixed layer acting on a Gaussian.

A time-invariant layer moves the covariance by ``dΣ/dt = F(Σ) = MΣ + ΣMᵀ``,
``M = A + Σ_h V_h Σ B_h`` (theory.md §2; F is computed by :func:`gtcontrol.moments.moment_field`).
This module answers what the layer does to ``N(m0, Σ0)`` in the long run:

* :func:`equilibria` — positive-definite solutions of ``F(Σ) = 0``. In the Riccati class
  (every ``V_h = v_h I``, see :mod:`gtcontrol.riccati`) the unique one is ``Σ* = Ω⁻¹`` with
  ``AᵀΩ + ΩA = R`` (slycot SB03MD), cross-checked against the CARE route (SB02MD). For any V,
  Newton–Kantorovich on F with the Fréchet derivative

      DF(Σ)[H] = M H + H Mᵀ + Σ_h (V_h H B_h Σ + Σ B_hᵀ H V_hᵀ),

  each step a generalized Sylvester solve (Kronecker form on symmetric matrices for small d,
  matrix-free GMRES preconditioned by a Lyapunov operator beyond), from
  several starts, with deflation (Farrell, Birkisson, Funke 2015) of every root already found
  (and of Σ = 0, always a root). Each equilibrium carries its residual, the spectrum of DF on
  symmetric matrices, its spectral abscissa and ``stable``.
* :func:`analyze` — the regime: ``"converges"`` (Σ(t) → Σ∞ of the same rank as Σ0, e.g. a
  positive-definite equilibrium), ``"collapses"`` (bounded, and Σ(t) loses rank asymptotically,
  e.g. Σ → 0), ``"blowup"`` (finite time), ``"unbounded"`` (‖Σ‖ → ∞ without finite-time blow-up)
  or ``"bounded"`` (none of these: bounded, full rank kept, no limit — oscillation). Exact
  certificates decide in the Riccati class wherever they apply; otherwise the linearization at
  the equilibria plus an integration of the moment ODE decide, with the numbers in ``reason``.
* :func:`mean_dynamics_ss` — the mean near an equilibrium, ``dm/dt = K m + b`` with
  ``K = A + Σ_h V_h (I + Σ* B_h)``, as a :class:`control.StateSpace` with input b.
* :func:`regime_figure_data` — plotting-free data for the figures of the CLI ``analyze`` task.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026), §4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigs, gmres

from .._linalg import FloatArray, sym, unvech, vech
from .._status import Status
from .._validation import as_float_array, as_positive_float, as_positive_int, frozen
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.moments import Trajectory, affine_velocity, moment_field, simulate
from ..model.params import Layer
from .riccati import (
    BlowupResult,
    RiccatiForm,
    _krylov_basis,
    _range_factor,
    _sign_split,
    _slycot_lyapunov,
    blowup_analysis,
    default_horizon,
    riccati_form,
    solve_bernoulli,
)

__all__ = [
    "EquilibriaResult",
    "Equilibrium",
    "NewtonOptions",
    "NewtonResult",
    "Regime",
    "RegimeFigureData",
    "analyze",
    "cone_coordinates",
    "covariance_jacobian",
    "equilibria",
    "equilibrium_at",
    "mean_dynamics_ss",
    "mean_matrix",
    "newton_equilibrium",
    "regime_figure_data",
]

KINDS = ("converges", "collapses", "blowup", "unbounded", "bounded")
#: Two equilibria closer than this (relative, Frobenius) are the same.
_DISTINCT_RTOL = 1e-6
#: A covariance is positive definite when λ_min > this × λ_max.
_PD_RTOL = 1e-10
#: Spectra of DF are computed densely on Sym up to this dimension, by ARPACK beyond.
_DENSE_SPECTRUM_MAX_DIM = 50
#: The two slycot routes must agree to this relative difference (else status "inconsistent").
_CROSS_CHECK_RTOL = 1e-8
#: A Newton run whose deflated merit has not halved in this many iterations stops ("stalled").
_STALL_ITERATIONS = 12
#: Deflation retries one start at most this many times (once per new root found).
_MAX_ROOTS_PER_START = 8


# ============================================================================ the field and DF


def _field(layer: Layer, cov: FloatArray) -> FloatArray:
    """``F(Σ) = dΣ/dt`` from the one home of the moment field (independent of the mean)."""
    return moment_field(layer, np.zeros(layer.dim), cov)[1]


def _residual_scale(layer: Layer, cov: FloatArray) -> float:
    """Size of the terms of F: ``2‖AΣ‖ + 2 Σ_h ‖V_h Σ B_h Σ‖ + ‖GGᵀ‖`` (Frobenius)."""
    a, _ = layer.affine_ffn()
    s = 2.0 * float(np.linalg.norm(a @ cov))
    for v_h, b_h in layer.heads:
        s += 2.0 * float(np.linalg.norm(v_h @ cov @ b_h @ cov))
    if layer.noise is not None:
        s += float(np.linalg.norm(layer.noise @ layer.noise.T))
    return s


def _rel_residual(layer: Layer, cov: FloatArray) -> tuple[FloatArray, float]:
    f = _field(layer, cov)
    nf = float(np.linalg.norm(f))
    scale = _residual_scale(layer, cov)
    return f, (nf / scale if scale > 0 else nf)


def _jacobian_parts(
    layer: Layer, cov: FloatArray
) -> tuple[FloatArray, list[tuple[FloatArray, FloatArray]]]:
    """``M = A + Σ_h V_h Σ B_h`` (from :func:`affine_velocity`) and the pairs ``(V_h, B_h Σ)``."""
    m_mat, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
    return m_mat, [(v_h, b_h @ cov) for v_h, b_h in layer.heads]


def _df_apply(
    m_mat: FloatArray, pairs: Sequence[tuple[FloatArray, FloatArray]], h: FloatArray
) -> FloatArray:
    """``DF(Σ)[H] = MH + HMᵀ + Σ_h (V_h H B_hΣ + (V_h H B_hΣ)ᵀ)`` for symmetric H."""
    p = m_mat @ h
    out = p + p.T
    for v_h, bs in pairs:
        q = v_h @ h @ bs
        out += q + q.T
    return out


def _sym_indices(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    iu = np.triu_indices(d)
    up = iu[0] * d + iu[1]
    lo = iu[1] * d + iu[0]
    return up, lo, iu[0] != iu[1]


def _kron_sym(m_mat: FloatArray, pairs: Sequence[tuple[FloatArray, FloatArray]]) -> FloatArray:
    """Matrix of DF(Σ) on symmetric H in the coordinates of :func:`vech`.

    Row-major ``vec(X Y Z) = (X ⊗ Zᵀ) vec(Y)``, so ``DF = M⊗I + I⊗M + Σ_h (V_h⊗(B_hΣ)ᵀ +
    (B_hΣ)ᵀ⊗V_h)``; the columns of ``H_ij = E_ij + E_ji`` are summed and the upper rows kept.
    """
    d = m_mat.shape[0]
    eye = np.eye(d)
    k = np.kron(m_mat, eye) + np.kron(eye, m_mat)
    for v_h, bs in pairs:
        k += np.kron(v_h, bs.T) + np.kron(bs.T, v_h)
    up, lo, off = _sym_indices(d)
    kd = k[:, up]
    kd[:, off] += k[:, lo[off]]
    return kd[up, :]


def covariance_jacobian(layer: Layer, cov: Any) -> FloatArray:
    """The Fréchet derivative ``DF(Σ)`` on symmetric matrices, as a dense matrix.

    ``DF(Σ)[H] = M H + H Mᵀ + Σ_h (V_h H B_h Σ + Σ B_hᵀ H V_hᵀ)``, ``M = A + Σ_h V_h Σ B_h``
    (docs/theory.md §3–5), in the coordinates of ``gtcontrol._arrays.vech`` (upper triangle,
    row-major; each off-diagonal pair ``H_ij = H_ji`` is one coordinate). Its eigenvalues are
    the linearization spectrum of the covariance dynamics at Σ. Size ``d(d+1)/2``.

    Raises
    ------
    InvalidParametersError
        If ``cov`` is not a finite ``d×d`` array.
    """
    c = sym(as_float_array("cov", cov, ndim=2, shape=(layer.dim, layer.dim)))
    return _kron_sym(*_jacobian_parts(layer, c))


class _LyapunovPreconditioner:
    """``Y ↦ X`` solving ``N X + X Nᵀ = Y`` with one real Schur form of N (LAPACK trsyl)."""

    def __init__(self, m_mat: FloatArray) -> None:
        self.t, self.u = sla.schur(m_mat, output="real")
        self.ok = True

    def __call__(self, y: FloatArray) -> FloatArray:
        c = self.u.T @ y @ self.u
        x, scale, info = lapack.dtrsyl(self.t, self.t, c, trana="N", tranb="T", isgn=1)
        if info < 0 or scale == 0 or not np.all(np.isfinite(x)):
            self.ok = False
            return y
        return sym(self.u @ (x / scale) @ self.u.T)


# ============================================================================ Newton


@dataclass(frozen=True, kw_only=True)
class NewtonOptions:
    """Options of the Newton–Kantorovich equilibrium search.

    Attributes
    ----------
    tol
        Stop when the relative residual ``‖F(Σ)‖ / (2‖AΣ‖ + 2Σ_h‖V_hΣB_hΣ‖)`` is below it.
    max_iter
        Newton iterations per start.
    n_random
        Random positive-definite starts (in addition to three multiples of I).
    seed
        Seed of the random starts.
    kron_max_dim
        Up to this d each step is a dense Kronecker solve on Sym (``d(d+1)/2`` unknowns, cost
        ``O(d⁶)``); beyond, matrix-free GMRES right-preconditioned by the Lyapunov operator
        ``H ↦ NH + HNᵀ``, ``N = M + Σ_h (tr V_h / d) Σ B_hᵀ`` (exact in the Riccati class).
        Measured crossover (benchmarks/bench_riccati.py): GMRES is faster from d ≈ 15 on
        (d = 40: 85 ms vs 1.3 s per solve), hence the default 16.
    deflation_power, deflation_shift
        Deflation ``m(Σ) = Π_i (‖Σ − Σ_i‖^{−p}/s0^{−p} + shift)`` of the roots already found.
    """

    tol: float = 1e-12
    max_iter: int = 60
    n_random: int = 5
    seed: int = 0
    kron_max_dim: int = 16
    deflation_power: float = 2.0
    deflation_shift: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < as_positive_float("tol", self.tol) < 1:
            raise InvalidParametersError(f"tol: expected a number in (0, 1), got {self.tol!r}")
        as_positive_int("max_iter", self.max_iter)
        if (
            isinstance(self.n_random, bool)
            or not isinstance(self.n_random, int)
            or self.n_random < 0
        ):
            raise InvalidParametersError(
                f"n_random: expected a non-negative integer, got {self.n_random!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InvalidParametersError(f"seed: expected an integer, got {self.seed!r}")
        as_positive_int("kron_max_dim", self.kron_max_dim)
        as_positive_float("deflation_power", self.deflation_power)
        as_positive_float("deflation_shift", self.deflation_shift)


@dataclass(frozen=True, eq=False)
class NewtonResult:
    """One Newton–Kantorovich run.

    Attributes
    ----------
    cov
        Last iterate (the equilibrium when ``success``).
    success, status, message
        ``status`` ∈ {``"converged"``, ``"max_iter"``, ``"stalled"``, ``"diverged"``,
        ``"singular"``}.
    iterations
        Newton steps taken.
    residuals
        Relative residual before each step and at the end (shows the quadratic convergence).
    stats
        ``linear_solver`` (``"kronecker"``/``"gmres"``), ``gmres_iterations``, ``seconds``.
    """

    cov: FloatArray
    success: bool
    status: str
    message: str
    iterations: int
    residuals: tuple[float, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)


def _typical_scale(layer: Layer) -> float:
    """A covariance size where the linear and quadratic terms of F balance."""
    a, _ = layer.affine_ffn()
    na = float(np.linalg.norm(a, 2))
    q = sum(float(np.linalg.norm(v, 2) * np.linalg.norm(b, 2)) for v, b in layer.heads)
    if q == 0 or na == 0:
        return 1.0
    return na / q


def _newton_step(
    layer: Layer, cov: FloatArray, f: FloatArray, rel: float, opts: NewtonOptions
) -> tuple[FloatArray, int, str]:
    """Solve ``DF(Σ)[H] = −F(Σ)`` on Sym; return ``(H, gmres_iterations, solver)``."""
    m_mat, pairs = _jacobian_parts(layer, cov)
    d = layer.dim
    rhs = -vech(f)
    if d <= opts.kron_max_dim:
        lmat = _kron_sym(m_mat, pairs)
        try:
            x = sla.solve(lmat, rhs, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            raise SolverError("Newton: DF(Σ) is singular", status="singular") from None
        if not np.all(np.isfinite(x)):
            raise SolverError("Newton: DF(Σ) is singular", status="singular")
        return unvech(x, d), 0, "kronecker"
    # Lyapunov preconditioner with N = M + Σ_h v̄_h Σ B_hᵀ, v̄_h = tr V_h / d: DF(Σ)[H] equals
    # NH + HNᵀ exactly when every V_h = v̄_h I. (H ↦ MH + HMᵀ itself is singular at every
    # positive-definite equilibrium: MΣ* + Σ*Mᵀ = 0 makes M similar to a skew matrix.)
    n_mat = m_mat.copy()
    for v_h, bs in pairs:
        n_mat += (float(np.trace(v_h)) / d) * bs.T
    pre = _LyapunovPreconditioner(n_mat)
    n = rhs.size

    def matvec(y: FloatArray) -> FloatArray:
        return vech(_df_apply(m_mat, pairs, pre(unvech(np.asarray(y).ravel(), d))))

    count = [0]

    def cb(_: Any) -> None:
        count[0] += 1

    op = LinearOperator((n, n), matvec=matvec, dtype=float)
    # Inexact Newton with forcing term ~ the residual keeps the convergence quadratic.
    eta = min(1e-4, max(1e-14, 0.1 * rel))
    y, info = gmres(
        op,
        rhs,
        rtol=eta,
        atol=0.0,
        restart=min(n, 80),
        maxiter=50,
        callback=cb,
        callback_type="pr_norm",
    )
    if info < 0 or not np.all(np.isfinite(y)):
        raise SolverError(f"Newton: GMRES failed (info {info})", status="singular")
    if not pre.ok:
        raise SolverError(
            "Newton: the Lyapunov preconditioner is singular (N has eigenvalues with "
            "λ_i + λ_j = 0)",
            status="singular",
        )
    return pre(unvech(y, d)), count[0], "gmres"


def newton_equilibrium(
    layer: Layer,
    start: Any,
    *,
    options: NewtonOptions | None = None,
    deflate: Sequence[Any] = (),
) -> NewtonResult:
    """Newton–Kantorovich for ``F(Σ) = 0`` from ``start``, optionally deflating known roots.

    Each step solves the generalized Sylvester equation ``DF(Σ_k)[H] = −F(Σ_k)`` (theory.md §3–5)
    and sets ``Σ_{k+1} = Σ_k + τ H``, where ``τ = 1 / (1 − ⟨∇ log m, H⟩)`` is the exact Newton
    step of the deflated system ``m(Σ) F(Σ) = 0`` (``τ = 1`` without deflation), so converged
    iterates keep Newton's quadratic rate.

    Parameters
    ----------
    layer
        Any layer of the exact moment model.
    start
        Initial symmetric matrix.
    options
        :class:`NewtonOptions`.
    deflate
        Roots to deflate (e.g. ``0`` and equilibria already found).

    Returns
    -------
    NewtonResult
        ``success=False`` with the best iterate when it does not converge.

    Raises
    ------
    InvalidParametersError
        On malformed input.
    """
    opts = options if options is not None else NewtonOptions()
    d = layer.dim
    cov = sym(as_float_array("start", start, ndim=2, shape=(d, d)))
    known = [sym(as_float_array("deflate[i]", k, ndim=2, shape=(d, d))) for k in deflate]
    return _newton(layer, cov, known, opts)


def _newton(
    layer: Layer, cov: FloatArray, known: Sequence[FloatArray], opts: NewtonOptions
) -> NewtonResult:
    clock = time.perf_counter()
    s0 = max(float(np.linalg.norm(cov)), _typical_scale(layer))
    hist: list[float] = []
    gm_its = 0
    solver = ""
    damped = 0
    status, message = "max_iter", f"no convergence in {opts.max_iter} iterations"
    f, rel = _rel_residual(layer, cov)
    best = (rel, cov)
    best_merit = (rel * _deflation_weight(cov, known, s0, opts), 0)
    for _ in range(opts.max_iter):
        hist.append(rel)
        if rel <= opts.tol:
            status, message = "converged", f"relative residual {rel:.3g} ≤ tol {opts.tol:g}"
            break
        try:
            h, its, solver = _newton_step(layer, cov, f, rel, opts)
        except SolverError as exc:
            status, message = "singular", str(exc)
            break
        gm_its += its
        if known:
            h = _deflation_factor(cov, h, known, s0, opts) * h
        # Backtracking on the deflated relative residual (Armijo); the full step is always
        # tried first, so the quadratic rate is kept near a root.
        merit = rel * _deflation_weight(cov, known, s0, opts)
        alpha = 1.0
        trial: tuple[float, FloatArray, FloatArray, float] | None = None
        for _k in range(10):
            cand = sym(cov + alpha * h)
            if np.all(np.isfinite(cand)):
                fc, rc = _rel_residual(layer, cand)
                mc = rc * _deflation_weight(cand, known, s0, opts)
                if trial is None or mc < trial[0]:
                    trial = (mc, cand, fc, rc)
                if mc <= (1.0 - 1e-4 * alpha) * merit:
                    break
            alpha *= 0.5
        if trial is None:
            status, message = "diverged", "Newton step produced non-finite values"
            break
        damped += alpha < 1.0
        step_norm = float(np.linalg.norm(trial[1] - cov))
        mval, cov, f, rel = trial
        if rel < best[0]:
            best = (rel, cov)
        # A deflated search that makes no progress for a while has no root nearby: give up.
        if mval < 0.5 * best_merit[0]:
            best_merit = (mval, len(hist))
        elif len(hist) - best_merit[1] >= _STALL_ITERATIONS:
            hist.append(rel)
            status, message = "stalled", f"no progress in {_STALL_ITERATIONS} iterations"
            break
        if float(np.linalg.norm(cov)) > 1e12 * s0:
            status, message = "diverged", "iterates diverged"
            break
        if step_norm <= 1e-15 * max(float(np.linalg.norm(cov)), 1e-300):
            hist.append(rel)
            ok = rel <= max(opts.tol, 1e-10)
            status = "converged" if ok else "max_iter"
            message = f"step stagnated at relative residual {rel:.3g}"
            break
    else:
        hist.append(rel)
        if rel <= opts.tol:
            status, message = "converged", f"relative residual {rel:.3g} ≤ tol {opts.tol:g}"
    final = cov if status == "converged" else best[1]
    return NewtonResult(
        cov=frozen(np.array(final)),
        success=status == "converged",
        status=status,
        message=message,
        iterations=max(len(hist) - 1, 0),
        residuals=tuple(hist),
        stats={
            "linear_solver": solver,
            "gmres_iterations": gm_its,
            "damped_steps": damped,
            "seconds": time.perf_counter() - clock,
        },
    )


def _deflation_weight(
    cov: FloatArray, known: Sequence[FloatArray], s0: float, opts: NewtonOptions
) -> float:
    """``m(Σ) = Π_i ((‖Σ − Σ_i‖/s0)^{−p} + shift)`` (1 without known roots)."""
    m = 1.0
    for k in known:
        x = float(np.linalg.norm(cov - k)) / s0
        m *= (x ** (-opts.deflation_power) if x > 0 else math.inf) + opts.deflation_shift
    return m


def _deflation_factor(
    cov: FloatArray, h: FloatArray, known: Sequence[FloatArray], s0: float, opts: NewtonOptions
) -> float:
    """``τ = 1/(1 − ⟨∇ log m, H⟩)`` for ``m = Π_i ((‖Σ−Σ_i‖/s0)^{−p} + shift)``."""
    p, shift = opts.deflation_power, opts.deflation_shift
    g = 0.0
    for k in known:
        e = cov - k
        ne = float(np.linalg.norm(e))
        if ne == 0.0:
            return 1.0
        x = ne / s0
        dlog = -p * x ** (-p - 1) / (x ** (-p) + shift)
        g += dlog * float(np.sum(e * h)) / (ne * s0)
    den = 1.0 - g
    if abs(den) < 1e-12:
        return 1.0
    return 1.0 / den


# ============================================================================ equilibria


@dataclass(frozen=True, eq=False)
class Equilibrium:
    """A positive-definite (or, where stated, singular) equilibrium ``F(Σ*) = 0``.

    Attributes
    ----------
    cov
        Σ*.
    residual
        Relative residual ``‖F(Σ*)‖ / (2‖AΣ*‖ + 2Σ_h‖V_hΣ*B_hΣ*‖)``.
    spectrum
        Eigenvalues of ``DF(Σ*)`` on symmetric matrices (complex, by decreasing real part);
        all ``d(d+1)/2`` of them up to d = 50 (in the Riccati class always: they are
        ``−(λ_i + λ_j)``, ``i ≤ j``, with λ the eigenvalues of A), the six rightmost beyond.
    spectral_abscissa
        ``max Re spectrum``.
    stable
        ``spectral_abscissa < 0``: Σ* is locally exponentially stable.
    mean_matrix
        ``K = A + Σ_h V_h (I + Σ* B_h)``: the mean obeys ``dm/dt = K m + b`` near Σ*.
    method
        How Σ* was found (``"lyapunov"``, ``"care"``, ``"newton"``, ``"exact"``).
    iterations
        Newton iterations (0 for direct solvers).
    """

    cov: FloatArray
    residual: float
    spectrum: np.ndarray
    spectral_abscissa: float
    stable: bool
    mean_matrix: FloatArray
    method: str
    iterations: int = 0

    @property
    def dim(self) -> int:
        return int(self.cov.shape[0])

    @property
    def mean_limit_exists(self) -> bool:
        """True when K is Hurwitz (the mean then converges to ``−K⁻¹ b``)."""
        return bool(np.max(np.linalg.eigvals(self.mean_matrix).real) < 0)

    def __repr__(self) -> str:
        return (
            f"Equilibrium(dim={self.dim}, stable={self.stable}, "
            f"spectral_abscissa={self.spectral_abscissa:.6g}, residual={self.residual:.3g}, "
            f"method={self.method!r})"
        )


def _mean_matrix(layer: Layer, cov: FloatArray) -> FloatArray:
    # K m + b = M m + c(m) with c(m) = b + Σ_h V_h m, so K = M + Σ_h V_h (M from the field).
    m_mat, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
    for v_h, _ in layer.heads:
        m_mat = m_mat + v_h
    return m_mat


def mean_matrix(layer: Layer, cov: Any) -> FloatArray:
    """``K = A + Σ_h V_h (I + Σ B_h)``: with Σ held fixed the mean obeys ``dm/dt = K m + b``.

    Formed as ``M + Σ_h V_h`` with M from :func:`gtcontrol.moments.affine_velocity`
    (docs/theory.md §3–5). If K is Hurwitz at a limit covariance, ``m(t) → −K⁻¹ b``.

    Raises
    ------
    InvalidParametersError
        If ``cov`` is not a finite ``d×d`` array.
    """
    d = layer.dim
    return _mean_matrix(layer, sym(as_float_array("cov", cov, ndim=2, shape=(d, d))))


def _spectrum(
    layer: Layer, cov: FloatArray, form: RiccatiForm | None, eig_a: np.ndarray | None
) -> np.ndarray:
    d = layer.dim
    if form is not None and eig_a is not None:
        # A − Σ*R = −Σ* Aᵀ Σ*⁻¹ at a positive-definite Riccati equilibrium: ν = −λ(A).
        nu = -eig_a
        i, j = np.triu_indices(d)
        spec = nu[i] + nu[j]
    elif d <= _DENSE_SPECTRUM_MAX_DIM:
        spec = np.linalg.eigvals(_kron_sym(*_jacobian_parts(layer, cov)))
    else:
        m_mat, pairs = _jacobian_parts(layer, cov)
        n = d * (d + 1) // 2
        op = LinearOperator(
            (n, n),
            matvec=lambda x: vech(_df_apply(m_mat, pairs, unvech(np.asarray(x).ravel(), d))),
            dtype=float,
        )
        try:
            spec = eigs(op, k=6, which="LR", return_eigenvectors=False, tol=1e-10, maxiter=20 * n)
        except ArpackNoConvergence as exc:
            if exc.eigenvalues.size == 0:
                raise SolverError(
                    "ARPACK did not converge on the linearization spectrum", status="arpack"
                ) from None
            spec = exc.eigenvalues
    spec = np.asarray(spec, dtype=complex)
    return spec[np.argsort(-spec.real, kind="stable")]


def equilibrium_at(
    layer: Layer, cov: Any, *, method: str = "given", iterations: int = 0
) -> Equilibrium:
    """Build the :class:`Equilibrium` record (residual, spectrum, stability, K) at ``cov``.

    No solving happens: use it to inspect a candidate (the residual says whether it is one).
    """
    d = layer.dim
    c = sym(as_float_array("cov", cov, ndim=2, shape=(d, d)))
    return _make_equilibrium(layer, c, method, iterations, None, None)


def _make_equilibrium(
    layer: Layer,
    cov: FloatArray,
    method: str,
    iterations: int,
    form: RiccatiForm | None,
    eig_a: np.ndarray | None,
) -> Equilibrium:
    _, rel = _rel_residual(layer, cov)
    spec = _spectrum(layer, cov, form, eig_a)
    spec.setflags(write=False)
    abscissa = float(np.max(spec.real)) if spec.size else -math.inf
    return Equilibrium(
        cov=frozen(cov.copy()),
        residual=rel,
        spectrum=spec,
        spectral_abscissa=abscissa,
        stable=abscissa < 0,
        mean_matrix=frozen(_mean_matrix(layer, cov)),
        method=method,
        iterations=iterations,
    )


@dataclass(frozen=True, eq=False)
class EquilibriaResult(Sequence[Equilibrium]):
    """The positive-definite equilibria found, as a sequence of :class:`Equilibrium`.

    Attributes
    ----------
    equilibria
        Distinct positive-definite equilibria (possibly none).
    success
        True when the answer is definite (found, or proved absent in the Riccati class).
    status
        ``"ok"``; ``"none"`` (proved: no positive-definite equilibrium, Riccati class);
        ``"none_found"`` (general V: no start converged to one — not a proof);
        ``"degenerate"`` (Riccati class with a singular Lyapunov operator, e.g. A with
        eigenvalues on the imaginary axis: equilibria not isolated or absent);
        ``"inconsistent"`` (the two slycot routes disagree).
    message
        Explanation with the numbers.
    method
        ``"lyapunov"`` or ``"newton"`` (or ``"care"`` when forced).
    stats
        Cross-check differences, starts and their outcomes, timings.
    """

    equilibria: tuple[Equilibrium, ...]
    success: bool
    status: str
    message: str
    method: str
    stats: Mapping[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.equilibria)

    def __getitem__(self, i: Any) -> Any:
        return self.equilibria[i]

    def __iter__(self) -> Iterator[Equilibrium]:
        return iter(self.equilibria)

    @property
    def stable(self) -> tuple[Equilibrium, ...]:
        """The locally stable equilibria."""
        return tuple(e for e in self.equilibria if e.stable)


def equilibria(
    layer: Layer,
    *,
    method: str = "auto",
    cross_check: bool | None = None,
    starts: Sequence[Any] = (),
    options: NewtonOptions | None = None,
) -> EquilibriaResult:
    """Positive-definite equilibria of the covariance dynamics ``F(Σ) = 0``.

    Riccati class (``method="auto"`` or ``"lyapunov"``): ``AΣ + ΣAᵀ − ΣRΣ = 0`` with Σ ≻ 0 iff
    ``Ω = Σ⁻¹`` solves ``AᵀΩ + ΩA = R`` (slycot SB03MD). If ``λ_i + λ_j ≠ 0`` for the
    eigenvalues of A the solution is unique: one equilibrium if Ω ≻ 0, provably none otherwise.
    ``cross_check`` (default: d ≤ 64) re-solves it as a CARE with zero constant term (SB02MD,
    ``G = R``) when −A or A is Hurwitz and requires agreement to 1e-8. If −A is Hurwitz and
    R ≻ 0 the equilibrium attracts every Σ0 ≻ 0 (see :func:`analyze`).

    Any V (``method="newton"``, or ``"auto"`` outside the class): Newton–Kantorovich with
    deflation from ``starts`` plus ``s0·{0.3, 1, 3}·I`` and ``options.n_random`` random
    positive-definite matrices of size ``s0 = ‖A‖ / Σ_h‖V_h‖‖B_h‖``; Σ = 0 is deflated from the
    start. This finds equilibria, it cannot prove there are no others.

    Parameters
    ----------
    layer
        The layer.
    method
        ``"auto"``, ``"lyapunov"``, ``"care"`` (Riccati class) or ``"newton"``.
    cross_check
        Run the second slycot route (Riccati class).
    starts
        Extra Newton starts (symmetric ``d×d``).
    options
        :class:`NewtonOptions`.

    Returns
    -------
    EquilibriaResult

    Raises
    ------
    InvalidParametersError
        On malformed input, or a Riccati-only method for a layer outside the class.
    SolverError
        If slycot fails unexpectedly.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; P. E. Farrell, Á. Birkisson, S. W. Funke,
    *Deflation techniques for finding distinct solutions of nonlinear PDEs*, SIAM J. Sci.
    Comput. 37 (2015).
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    if method not in ("auto", "lyapunov", "care", "newton"):
        raise InvalidParametersError(
            f"method: expected 'auto', 'lyapunov', 'care' or 'newton', got {method!r}"
        )
    opts = options if options is not None else NewtonOptions()
    form = _bernoulli_form(layer)
    if method in ("lyapunov", "care") and form is None:
        raise InvalidParametersError(
            f"method: {method!r} needs the Riccati class (every head V_h = v_h I) without noise; "
            "use 'newton'"
        )
    if form is not None and method != "newton":
        return _riccati_equilibria(layer, form, method, cross_check)
    return _newton_equilibria(layer, starts, opts)


def _riccati_equilibria(
    layer: Layer, form: RiccatiForm, method: str, cross_check: bool | None
) -> EquilibriaResult:
    clock = time.perf_counter()
    primary = solve_bernoulli(form, method="care" if method == "care" else "lyapunov")
    stats: dict[str, Any] = {"primary": dict(primary.stats)}
    if primary.status in ("degenerate", "not_applicable") or primary.cov is None:
        stats["seconds"] = time.perf_counter() - clock
        return EquilibriaResult(
            equilibria=(),
            success=primary.success,
            status=primary.status if primary.status != "not_applicable" else "degenerate",
            message=primary.message,
            method=primary.method,
            stats=stats,
        )
    eig_a = primary.eigvals_a
    eq = _make_equilibrium(layer, np.asarray(primary.cov), primary.method, 0, form, eig_a)
    do_check = cross_check if cross_check is not None else form.dim <= 64
    status, success, message = "ok", True, primary.message
    if do_check:
        other = solve_bernoulli(form, method="lyapunov" if primary.method == "care" else "care")
        stats["cross_check"] = {"method": other.method, "status": other.status}
        if other.cov is not None:
            diff = float(np.linalg.norm(other.cov - eq.cov) / np.linalg.norm(eq.cov))
            _, rel_other = _rel_residual(layer, np.asarray(other.cov))
            stats["cross_check"].update({"rel_diff": diff, "residual": rel_other})
            if diff > _CROSS_CHECK_RTOL:
                status, success = "inconsistent", False
                message = (
                    f"the Lyapunov (SB03MD) and CARE (SB02MD) routes disagree by {diff:.3g} "
                    "relative: the equilibrium is ill-conditioned"
                )
            else:
                message += f"; cross-checked by {other.method} to {diff:.2g} relative"
        elif other.status == "none":
            status, success = "inconsistent", False
            message = f"{primary.method} found an equilibrium but {other.method} did not"
    stats["seconds"] = time.perf_counter() - clock
    return EquilibriaResult(
        equilibria=(eq,),
        success=success,
        status=status,
        message=message,
        method=primary.method,
        stats=stats,
    )


def _bernoulli_form(layer: Layer) -> RiccatiForm | None:
    """The Riccati data when the layer is in the noise-free (Bernoulli) class, else ``None``."""
    form = riccati_form(layer)
    return form if form is not None and form.is_bernoulli else None


def _is_pd(cov: FloatArray) -> bool:
    w = np.linalg.eigvalsh(cov)
    return bool(w[-1] > 0 and w[0] > _PD_RTOL * w[-1])


def _reversed(layer: Layer) -> Layer | None:
    """The layer whose covariance field is ``−F`` (negate A and every V_h), or ``None`` (noise).

    Its stable equilibria are the equilibria of ``layer`` whose linearization has every
    eigenvalue in the right half-plane, which the forward flow never reaches.
    """
    if layer.noise is not None and np.any(layer.noise):
        return None
    a, _ = layer.affine_ffn()
    return Layer(-a, heads=[(-v, b) for v, b in layer.heads], dim=layer.dim)


def _flow_start(layer: Layer, start: FloatArray) -> FloatArray | None:
    """Endpoint of the moment flow from ``start`` after 20 time constants (None if it fails)."""
    g = Gaussian(np.zeros(layer.dim), start)
    rate = _rate_of(layer, start)
    try:
        # Only a start for Newton is wanted: low accuracy is enough.
        traj = simulate(layer, g, 20.0 / rate, n_points=2, rtol=1e-5, atol=1e-10, method="RK45")
    except (SolverError, InvalidParametersError, ValueError):
        return None
    if traj.status is not Status.SUCCESS:
        return None
    end = np.asarray(traj.cov[-1])
    top = float(np.linalg.eigvalsh(end)[-1])
    if not np.all(np.isfinite(end)) or top <= 1e-8 * float(np.linalg.norm(start, 2)):
        return None
    return end


def _rate_of(layer: Layer, cov: FloatArray) -> float:
    a, _ = layer.affine_ffn()
    s = float(np.linalg.norm(cov, 2))
    rate = float(np.linalg.norm(a, 2)) + sum(
        2.0 * float(np.linalg.norm(v, 2) * np.linalg.norm(b, 2)) * s for v, b in layer.heads
    )
    return rate if rate > 0 else 1.0


def _newton_equilibria(
    layer: Layer, starts: Sequence[Any], opts: NewtonOptions
) -> EquilibriaResult:
    clock = time.perf_counter()
    d = layer.dim
    s0 = _typical_scale(layer)
    rng = np.random.default_rng(opts.seed)
    base = [
        sym(as_float_array(f"starts[{i}]", s, ndim=2, shape=(d, d))) for i, s in enumerate(starts)
    ]
    base += [c * s0 * np.eye(d) for c in (1.0, 0.3, 3.0)]
    n_flow = len(base)
    for _ in range(opts.n_random):
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        w = s0 * np.exp(rng.uniform(-1.5, 1.5, d))
        base.append(sym((q * w) @ q.T))
    # Flow endpoints first (from the given starts and the multiples of I): the forward flow
    # leads to stable equilibria, the reversed flow to fully unstable ones; then the raw starts
    # (saddles and the rest).
    rev = _reversed(layer)
    start_list: list[FloatArray] = []
    for st in base[:n_flow]:
        for lay in (layer, rev):
            if lay is not None and _is_pd(st):
                end = _flow_start(lay, st)
                if end is not None:
                    start_list.append(end)
    start_list += base
    known: list[FloatArray] = [np.zeros((d, d))]
    found: list[Equilibrium] = []
    outcomes: dict[str, int] = {}
    for st in start_list:
        # Deflation proper: after each new root, retry the same start with it deflated.
        for _ in range(_MAX_ROOTS_PER_START):
            res = _newton(layer, st, known, opts)
            key = res.status
            new_root = False
            if res.success:
                cov = np.asarray(res.cov)
                scale = max(float(np.linalg.norm(cov)), 1e-300)
                if any(np.linalg.norm(cov - k) <= _DISTINCT_RTOL * scale for k in known):
                    key = "duplicate"
                elif not _is_pd(cov):
                    key = "not_positive_definite"
                    known.append(cov)
                    new_root = True
                else:
                    key = "new"
                    known.append(cov)
                    new_root = True
                    found.append(
                        _make_equilibrium(layer, cov, "newton", res.iterations, None, None)
                    )
            outcomes[key] = outcomes.get(key, 0) + 1
            if not new_root:
                break
    found.sort(key=lambda e: (not e.stable, -float(np.trace(e.cov))))
    stats = {
        "starts": len(start_list),
        "outcomes": outcomes,
        "seconds": time.perf_counter() - clock,
    }
    if found:
        return EquilibriaResult(
            equilibria=tuple(found),
            success=True,
            status="ok",
            message=f"{len(found)} positive-definite equilibria found by deflated Newton from "
            f"{len(start_list)} starts",
            method="newton",
            stats=stats,
        )
    return EquilibriaResult(
        equilibria=(),
        success=True,
        status="none_found",
        message=(
            f"no positive-definite equilibrium found by deflated Newton from {len(start_list)} "
            f"starts (outcomes {outcomes}); this is a search result, not a proof"
        ),
        method="newton",
        stats=stats,
    )


# ============================================================================ regimes


@dataclass(frozen=True, eq=False)
class Regime:
    """What a fixed layer does to ``N(m0, Σ0)`` as depth grows.

    Attributes
    ----------
    kind
        ``"converges"``: Σ(t) → Σ∞ with ``rank Σ∞ = rank Σ0`` (for Σ0 ≻ 0, a positive-definite
        equilibrium); ``"collapses"``: Σ(t) stays bounded and loses rank asymptotically (the
        smallest eigenvalue on the range of Σ0 → 0, e.g. Σ → 0); ``"blowup"``: finite-time
        blow-up; ``"unbounded"``: ‖Σ(t)‖ → ∞ without finite-time blow-up; ``"bounded"``: none of
        these (bounded, full rank kept, no limit — e.g. a rotation).
    equilibrium
        The limit equilibrium when ``kind == "converges"`` to a positive-definite one.
    blowup_time
        ``T*`` for ``"blowup"``, otherwise ``math.inf``.
    mean_limit
        ``m* = −K⁻¹ b`` when Σ∞ is known and ``K = A + Σ_h V_h(I + Σ∞ B_h)`` is Hurwitz.
    reason
        The condition or certificate that decided, with its numbers.
    certificate
        ``"exact"`` (closed form or proved bound), ``"global"`` (global convergence theorem),
        ``"linearization"`` (spectrum at an equilibrium plus the integrated trajectory) or
        ``"integrator"`` (the integrated trajectory alone).
    limit_cov
        Σ∞ when the covariance converges (for ``"converges"`` and most ``"collapses"``).
    mean_matrix
        K at Σ∞ (``None`` when Σ∞ is unknown).
    blowup
        The :class:`~gtcontrol.riccati.BlowupResult` of the blow-up search.
    equilibria
        The :class:`EquilibriaResult` consulted (``None`` when not needed).
    stats
        Timings and the numbers used.
    """

    kind: str
    equilibrium: Equilibrium | None
    blowup_time: float
    mean_limit: FloatArray | None
    reason: str
    certificate: str
    limit_cov: FloatArray | None = None
    mean_matrix: FloatArray | None = None
    blowup: BlowupResult | None = None
    equilibria: EquilibriaResult | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"Regime(kind={self.kind!r}, certificate={self.certificate!r}, reason={self.reason!r})"
        )


def _hurwitz(eig: np.ndarray) -> bool:
    return bool(eig.size and np.all(eig.real < 0))


def _fmt_eigs(eig: np.ndarray) -> str:
    parts = []
    for x in np.asarray(eig, dtype=complex):
        parts.append(f"{x.real:.4g}" + (f"{x.imag:+.4g}j" if x.imag != 0 else ""))
    return "[" + ", ".join(parts) + "]"


def analyze(
    layer: Layer,
    initial: Gaussian,
    *,
    horizon: float | None = None,
    options: NewtonOptions | None = None,
) -> Regime:
    """Classify the long-run behaviour of ``N(m0, Σ0)`` under a fixed layer, and say why.

    Riccati class (every ``V_h = v_h I``; ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``), exact certificates:

    * blow-up: the certified first singularity of :func:`gtcontrol.riccati.blowup_analysis`.
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
    linearization spectra (:func:`equilibria`) plus an integration of the moment ODE up to
    ``horizon`` decide; the numbers are stated in ``reason``.

    Parameters
    ----------
    layer, initial
        The layer and ``N(m0, Σ0)``.
    horizon
        Depth for the blow-up search and the integration (default
        :func:`gtcontrol.riccati.default_horizon`, 200 time constants).
    options
        :class:`NewtonOptions` for the general equilibrium search.

    Returns
    -------
    Regime

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On malformed input or a ReLU/GELU feed-forward.
    SolverError
        If a solver fails in a way that leaves no answer.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §3–§4.
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    g0 = check_gaussian(initial, layer.dim)
    if horizon is not None:
        as_positive_float("horizon", horizon)
    clock = time.perf_counter()
    form = _bernoulli_form(layer)
    blow = blowup_analysis(layer, g0, horizon=horizon)
    reg: Regime | None = None
    if blow.status == "blowup":
        reg = _blowup_regime(layer, form, g0, blow)
    elif form is not None:
        reg = _riccati_regime(layer, form, g0, blow)
    if reg is None:
        reg = _general_regime(layer, form, g0, blow, horizon, options)
    stats = dict(reg.stats)
    stats["seconds"] = time.perf_counter() - clock
    return _with(reg, stats=stats)


def _with(reg: Regime, **changes: Any) -> Regime:
    kw = {f: getattr(reg, f) for f in reg.__dataclass_fields__}
    kw.update(changes)
    return Regime(**kw)


def _mean_limit(
    layer: Layer, limit: FloatArray | None
) -> tuple[FloatArray | None, FloatArray | None, str]:
    if limit is None:
        return None, None, ""
    k = _mean_matrix(layer, limit)
    eig = np.linalg.eigvals(k)
    _, b_eff = layer.affine_ffn()
    if _hurwitz(eig):
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


def _regime(
    layer: Layer,
    kind: str,
    reason: str,
    certificate: str,
    blow: BlowupResult,
    *,
    limit: FloatArray | None = None,
    equilibrium: Equilibrium | None = None,
    eqs: EquilibriaResult | None = None,
    stats: Mapping[str, Any] | None = None,
) -> Regime:
    m_star, k, note = (
        _mean_limit(layer, limit) if kind in ("converges", "collapses") else (None, None, "")
    )
    return Regime(
        kind=kind,
        equilibrium=equilibrium,
        blowup_time=blow.time if kind == "blowup" else math.inf,
        mean_limit=m_star,
        reason=reason + note,
        certificate=certificate,
        limit_cov=frozen(np.asarray(limit, dtype=float).copy()) if limit is not None else None,
        mean_matrix=k,
        blowup=blow,
        equilibria=eqs,
        stats=dict(stats or {}),
    )


def _blowup_regime(
    layer: Layer, form: RiccatiForm | None, g0: Gaussian, blow: BlowupResult
) -> Regime:
    if form is None:
        return _regime(layer, "blowup", blow.message, "integrator", blow)
    reason = f"finite-time blow-up at T* = {blow.time:.12g} ({blow.message})"
    w_r = np.linalg.eigvalsh(form.R)
    if w_r[-1] < 0:
        eig_a = np.linalg.eigvals(form.A)
        head = "R = −Σ_h v_h(B_h + B_hᵀ) ≺ 0 (V and B of the same sign)"
        if not np.any(form.A):
            h = sla.sqrtm(g0.cov).real if g0.rank == g0.dim else None
            extra = ""
            if h is not None:
                t_cf = 1.0 / float(np.linalg.eigvalsh(sym(h @ (-form.R) @ h))[-1])
                extra = f"; closed form 1/λ_max(Σ0^½(−R)Σ0^½) = {t_cf:.12g}"
            reason = f"{head} and A = 0: Ω(t) = Ω0 + tR reaches singularity; {reason}{extra}"
        elif not _hurwitz(eig_a):
            where = (
                "so Σ0 ≻ 0 always blows up"
                if g0.rank == g0.dim
                else "and range Σ0 leaves the stable subspace of A"
            )
            reason = (
                f"{head} and A is not Hurwitz (eigenvalues {_fmt_eigs(eig_a)}): ∫|e^{{As}}x|²ds "
                f"diverges off the stable subspace, {where}; {reason}"
            )
        else:
            reason = f"{head}, A Hurwitz and Σ0 ⋠ Σ* (the unstable equilibrium); {reason}"
    return _regime(layer, "blowup", reason, "exact", blow)


def _riccati_regime(
    layer: Layer, form: RiccatiForm, g0: Gaussian, blow: BlowupResult
) -> Regime | None:
    """Exact classification in the Riccati class when a certificate applies, else ``None``."""
    a, r = form.A, form.R
    d = form.dim
    f = _range_factor(g0.cov)
    rank = f.shape[1]
    full = rank == d
    never = blow.status == "never"
    if rank == 0:
        return _regime(
            layer,
            "converges",
            "Σ0 = 0 is an equilibrium (Σ ≡ 0)",
            "exact",
            blow,
            limit=np.zeros((d, d)),
        )
    if not np.any(r):
        return _linear_regime(layer, a, f, blow)
    if not np.any(a) and never:
        n = sym(f.T @ r @ f)
        w, u = np.linalg.eigh(n)
        ker = u[:, w <= 1e-12 * max(float(np.max(np.abs(w))), 1e-300)]
        limit = sym(f @ ker @ ker.T @ f.T)
        if ker.shape[1] == rank:
            return _regime(
                layer,
                "converges",
                "A = 0 and FᵀRF = 0: Σ(t) = Σ0 is constant",
                "exact",
                blow,
                limit=limit,
            )
        return _regime(
            layer,
            "collapses",
            f"A = 0: Σ(t) = F(I + tFᵀRF)⁻¹Fᵀ with FᵀRF ⪰ 0 of rank {rank - ker.shape[1]}, so "
            f"Σ(t) → a limit of rank {ker.shape[1]} < {rank} at the algebraic rate 1/t",
            "exact",
            blow,
            limit=limit,
        )
    eig_a = np.linalg.eigvals(a)
    _, rm = _sign_split(r)
    r_pd = not np.any(rm) and bool(np.linalg.eigvalsh(r)[0] > 0)
    eqs = equilibria(layer)
    if full and np.all(eig_a.real > 0) and never:
        if eqs.status == "ok" and eqs.equilibria:
            eq = eqs.equilibria[0]
            if r_pd:
                reason = (
                    "global convergence: R = −Σ_h v_h(B_h + B_hᵀ) ≻ 0 (V and B of opposite sign) "
                    f"and −A is Hurwitz (eigenvalues of A {_fmt_eigs(eig_a)}), so Ω(t) = "
                    "e^{−Aᵀt}(Ω0 − Ω*)e^{−At} + Ω* → Ω* ≻ 0 from every Σ0 ≻ 0 at rate "
                    f"{2 * float(np.min(eig_a.real)):.4g}"
                )
                cert = "global"
            else:
                reason = (
                    f"−A is Hurwitz (eigenvalues of A {_fmt_eigs(eig_a)}), no blow-up is certified "
                    "and Ω(t) = e^{−Aᵀt}(Ω0 − Ω*)e^{−At} + Ω* → Ω* ≻ 0"
                )
                cert = "exact"
            return _regime(
                layer,
                "converges",
                reason,
                cert,
                blow,
                limit=np.asarray(eq.cov),
                equilibrium=eq,
                eqs=eqs,
            )
        if eqs.status == "none":
            try:
                omega, _, _ = _slycot_lyapunov(a, r)
            except SolverError:
                return None
            w_om = np.linalg.eigvalsh(omega)
            if w_om[0] >= -1e-12 * max(abs(w_om[-1]), 1e-300):
                return _regime(
                    layer,
                    "unbounded",
                    f"−A is Hurwitz and Ω(t) → Ω* (AᵀΩ* + Ω*A = R) which is singular (λ_min = "
                    f"{w_om[0]:.3g}), with no blow-up certified: λ_max Σ(t) → ∞ exponentially",
                    "exact",
                    blow,
                    eqs=eqs,
                )
        return None
    if full and r_pd:
        return _regime(
            layer,
            "collapses",
            "R ≻ 0 (V and B of opposite sign) but A has eigenvalues with Re ≤ 0 "
            f"({_fmt_eigs(eig_a)}): along such an eigenvector Ω(t) grows without bound while "
            "Ω(t) ⪰ ∫₀¹e^{−Aᵀs}Re^{−As}ds keeps Σ bounded, so λ_min Σ(t) → 0 (no positive-definite "
            "limit; stabilization needs every eigenvalue of A in the right half-plane)",
            "exact",
            blow,
            limit=np.zeros((d, d)) if _hurwitz(eig_a) else None,
            eqs=eqs,
        )
    if _hurwitz(eig_a) and never:
        try:
            w_inf, _, _ = _slycot_lyapunov(a, -r)
        except SolverError:
            return None
        g_inf = np.linalg.eigvalsh(sym(np.eye(rank) + f.T @ w_inf @ f))
        if g_inf[0] > 1e-9:
            return _regime(
                layer,
                "collapses",
                f"A is Hurwitz (abscissa {float(np.max(eig_a.real)):.4g}) and G(∞) = I + FᵀW(∞)F "
                f"≻ 0 (λ_min {g_inf[0]:.4g}): Σ(t) = e^{{At}}F G(t)⁻¹Fᵀe^{{Aᵀt}} → 0 exponentially",
                "exact",
                blow,
                limit=np.zeros((d, d)),
                eqs=eqs,
            )
    return None


def _linear_regime(layer: Layer, a: FloatArray, f: FloatArray, blow: BlowupResult) -> Regime:
    """R = 0: Σ(t) = e^{At} Σ0 e^{Aᵀt}; classify by A on the invariant subspace of range Σ0."""
    d = a.shape[0]
    rank = f.shape[1]
    q = _krylov_basis(a, f)
    ar = q.T @ a @ q
    eig = np.linalg.eigvals(ar)
    na = max(float(np.linalg.norm(a, 2)), 1e-300)
    tol = 1e-10 * na
    top = float(np.max(eig.real))
    if top > tol:
        return _regime(
            layer,
            "unbounded",
            f"no attention growth (R = 0): Σ(t) = e^{{At}}Σ0e^{{Aᵀt}} and A has the eigenvalue(s) "
            f"with Re = {top:.4g} > 0 on the invariant subspace of range Σ0: exponential growth",
            "exact",
            blow,
        )
    if top < -tol:
        return _regime(
            layer,
            "collapses",
            f"A is Hurwitz on the invariant subspace of range Σ0 (abscissa {top:.4g}) and R = 0: "
            "Σ(t) = e^{At}Σ0e^{Aᵀt} → 0 exponentially",
            "exact",
            blow,
            limit=np.zeros((d, d)),
        )
    # Centre modes present: ordered real Schur form Zᵀ A_r Z = [[T_ss, T_sc], [0, T_cc]].
    t_s, z, k = sla.schur(ar, output="real", sort=lambda x, y: x < -tol)
    t_ss, t_sc, t_cc = t_s[:k, :k], t_s[:k, k:], t_s[k:, k:]
    # e^{T_cc t} must stay bounded: a defective imaginary-axis eigenvalue grows polynomially.
    probe = 1e3 / na
    growth = float(np.linalg.norm(sla.expm(t_cc * probe), 2))
    if growth > 10.0 * max(float(np.linalg.norm(sla.expm(t_cc * probe / 10), 2)), 1.0):
        return _regime(
            layer,
            "unbounded",
            "R = 0 and A has defective eigenvalues on the imaginary axis on the invariant "
            f"subspace of range Σ0: ‖e^{{At}}‖ grows polynomially ({growth:.3g} at t = "
            f"{probe:.3g})",
            "exact",
            blow,
        )
    # The centre eigenspace is spanned by E = Q Z [X; I] with T_ss X − X T_cc = −T_sc; the part
    # of Σ0 that persists is its oblique projection there: Σ(t) − E e^{T_cc t} Y e^{T_ccᵀ t} Eᵀ
    # → 0 with Y = y_c y_cᵀ, y_c the centre Schur coordinates of F.
    zq = q @ z
    x = sla.solve_sylvester(t_ss, -t_cc, -t_sc) if k else np.zeros((0, t_cc.shape[0]))
    e = zq[:, :k] @ x + zq[:, k:]
    yc = (zq.T @ f)[k:, :]
    y = yc @ yc.T
    lost = np.linalg.matrix_rank(yc, tol=1e-9 * max(float(np.linalg.norm(f, 2)), 1e-300)) < rank
    moving = float(np.linalg.norm(t_cc @ y + y @ t_cc.T)) > 1e-9 * na * max(
        float(np.linalg.norm(y)), 1e-300
    )
    limit = None if moving else sym(e @ y @ e.T)
    if lost:
        return _regime(
            layer,
            "collapses",
            f"R = 0: A has {k} stable and {t_cc.shape[0]} imaginary-axis eigenvalues on the "
            "invariant subspace of range Σ0; the stable part decays and the rest has rank "
            f"{np.linalg.matrix_rank(yc)} < {rank}: rank is lost"
            + ("" if moving else " (Σ(t) converges)"),
            "exact",
            blow,
            limit=limit,
        )
    if moving:
        return _regime(
            layer,
            "bounded",
            "R = 0 and A acts on range Σ0 through non-defective imaginary-axis eigenvalues "
            f"{_fmt_eigs(np.linalg.eigvals(t_cc))}: Σ(t) = e^{{At}}Σ0e^{{Aᵀt}} stays bounded, "
            "keeps its rank and oscillates",
            "exact",
            blow,
        )
    return _regime(
        layer,
        "converges",
        "R = 0 and the persistent (imaginary-axis) part of Σ0 is invariant: Σ(t) converges "
        "without rank loss",
        "exact",
        blow,
        limit=limit,
    )


def _general_regime(
    layer: Layer,
    form: RiccatiForm | None,
    g0: Gaussian,
    blow: BlowupResult,
    horizon: float | None,
    options: NewtonOptions | None,
) -> Regime:
    """Linearization at the equilibria plus the integrated trajectory."""
    d = layer.dim
    hz = horizon if horizon is not None else default_horizon(layer, g0)
    eqs = equilibria(layer, options=options) if form is None else equilibria(layer)
    # Brownian forcing can raise the rank; without it the rank of Σ0 is invariant.
    rank = d if layer.noise is not None and np.any(layer.noise) else g0.rank
    traj = simulate(layer, g0, hz, n_points=401)
    if traj.status is Status.OVERFLOW:
        return _regime(
            layer,
            "unbounded",
            f"integration to depth {hz:g}: {traj.message}",
            "integrator",
            blow,
            eqs=eqs,
        )
    if traj.status is Status.BLOWUP:
        return _regime(
            layer,
            "blowup",
            f"integrator: blow-up at T* ≈ {traj.blowup_time:.10g}",
            "integrator",
            _replace_blow(blow, traj),
            eqs=eqs,
        )
    lam = np.array([np.linalg.eigvalsh(c)[::-1] for c in traj.cov])
    top, low = lam[:, 0], lam[:, rank - 1]
    t = traj.t
    mid = int(np.searchsorted(t, 0.5 * t[-1]))
    s_end = np.asarray(traj.cov[-1])
    nums = {"horizon": hz, "lambda_max_end": float(top[-1]), "lambda_max_start": float(top[0])}
    if top[-1] > 1e6 * top[0] and top[-1] > top[mid]:
        rate = math.log(top[-1] / top[mid]) / (t[-1] - t[mid])
        return _regime(
            layer,
            "unbounded",
            f"integrator: λ_max Σ grew from {top[0]:.3g} to {top[-1]:.3g} by depth {t[-1]:.4g} "
            f"(rate {rate:.4g} over the second half) without finite-time blow-up",
            "integrator",
            blow,
            eqs=eqs,
            stats=nums,
        )
    # Converging to a known positive-definite equilibrium?
    for eq in eqs.equilibria:
        dist = float(np.linalg.norm(s_end - eq.cov) / np.linalg.norm(eq.cov))
        if dist <= 1e-6 and rank == d:
            cert = "linearization" if eq.stable else "integrator"
            return _regime(
                layer,
                "converges",
                f"Σ(t) reaches the equilibrium Σ* to {dist:.2g} relative by depth {t[-1]:.4g}; "
                f"DF(Σ*) has spectral abscissa {eq.spectral_abscissa:.4g}"
                + (" < 0 (locally exponentially stable)" if eq.stable else ""),
                cert,
                blow,
                limit=np.asarray(eq.cov),
                equilibrium=eq,
                eqs=eqs,
                stats=nums,
            )
    ratio_end = low[-1] / top[-1] if top[-1] > 0 else 0.0
    ratio_mid = low[mid] / top[mid] if top[mid] > 0 else 0.0
    if top[-1] <= 1e-9 * top[0]:
        return _regime(
            layer,
            "collapses",
            f"integrator: λ_max Σ decayed from {top[0]:.3g} to {top[-1]:.3g} by depth {t[-1]:.4g} "
            "(Σ → 0)",
            "integrator",
            blow,
            limit=np.zeros((d, d)),
            eqs=eqs,
            stats=nums,
        )
    if ratio_end <= 1e-9 and ratio_end < ratio_mid:
        return _regime(
            layer,
            "collapses",
            f"integrator: the rank-{rank} part of Σ degenerates, λ_{rank}/λ_1 = {ratio_end:.3g} "
            f"at depth {t[-1]:.4g} (from {ratio_mid:.3g} at {t[mid]:.4g}) while Σ stays bounded",
            "integrator",
            blow,
            eqs=eqs,
            stats=nums,
        )
    speed = float(np.linalg.norm(_field(layer, s_end))) / max(float(np.linalg.norm(s_end)), 1e-300)
    rate = max(_residual_scale(layer, s_end) / max(float(np.linalg.norm(s_end)), 1e-300), 1e-300)
    if speed <= 1e-7 * rate:
        polished_eq: Equilibrium | None = None
        limit = s_end
        if rank == d and _is_pd(s_end):
            polished = _newton(layer, s_end, [], options or NewtonOptions())
            if polished.success:
                limit = np.asarray(polished.cov)
                polished_eq = _make_equilibrium(
                    layer, limit, "newton", polished.iterations, None, None
                )
        return _regime(
            layer,
            "converges",
            f"integrator: Σ(t) is stationary at depth {t[-1]:.4g} (‖dΣ/dt‖/‖Σ‖ = {speed:.3g})"
            + (
                f"; DF(Σ∞) has spectral abscissa {polished_eq.spectral_abscissa:.4g}"
                if polished_eq
                else ""
            ),
            "linearization" if polished_eq is not None and polished_eq.stable else "integrator",
            blow,
            limit=limit,
            equilibrium=polished_eq,
            eqs=eqs,
            stats=nums,
        )
    return _regime(
        layer,
        "bounded",
        f"integrator: Σ(t) stays bounded (λ_max ≤ {float(np.max(top)):.3g}), keeps rank {rank} "
        f"(λ_{rank}/λ_1 ≥ {float(np.min(low / top)):.3g}) and is still moving at depth "
        f"{t[-1]:.4g} (‖dΣ/dt‖/‖Σ‖ = {speed:.3g}); no equilibrium is approached",
        "integrator",
        blow,
        eqs=eqs,
        stats=nums,
    )


def _replace_blow(blow: BlowupResult, traj: Trajectory) -> BlowupResult:
    return BlowupResult(
        time=traj.blowup_time,
        lower=0.0,
        upper=math.inf,
        status="blowup",
        certified=False,
        method="integrator",
        message=f"adaptive integrator detected blow-up at T* ≈ {traj.blowup_time:.12g}",
        stats=dict(traj.stats),
    )


# ============================================================================ interop


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
        An :class:`Equilibrium`, a :class:`Regime` with a known limit, or a covariance matrix.

    Returns
    -------
    control.StateSpace

    Raises
    ------
    InvalidParametersError
        If no covariance can be taken from ``equilibrium``.
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
    k = _mean_matrix(layer, cov)
    return control.ss(k, np.eye(d), np.eye(d), np.zeros((d, d)))


# ============================================================================ figure data


def cone_coordinates(cov: Any) -> FloatArray:
    """``(a − b, 2c, a + b)`` for ``Σ = [[a, c], [c, b]]`` (shape ``(..., 3)``).

    The map sends 2×2 PSD matrices onto the solid cone ``z ≥ √(x² + y²)`` (``z² − x² − y² =
    4 det Σ``); the boundary is the singular matrices, the axis the multiples of I.
    """
    c = np.asarray(cov, dtype=float)
    if c.shape[-2:] != (2, 2):
        raise InvalidParametersError(f"cov: expected 2×2 matrices, got shape {c.shape}")
    return np.stack(
        [c[..., 0, 0] - c[..., 1, 1], 2.0 * c[..., 0, 1], c[..., 0, 0] + c[..., 1, 1]], axis=-1
    )


@dataclass(frozen=True, eq=False)
class RegimeFigureData:
    """What the ``analyze`` figures plot (no plotting here; see :mod:`gtcontrol.plots_analysis`).

    Attributes
    ----------
    regime
        The :class:`Regime`.
    trajectory
        The integrated moments (``gtcontrol.moments.simulate``), up to just before blow-up.
    eigenvalues
        Covariance eigenvalues along the trajectory, ``(n, d)``, descending.
    equilibrium_eigenvalues
        Eigenvalues of the equilibrium/limit covariance (``None`` when there is none).
    blowup_time
        T* (``inf`` if none).
    cone, cone_normalized
        For d = 2: cone coordinates of Σ(t) and of Σ(t)/tr Σ(t), ``(n, 3)``; else ``None``.
    equilibrium_cone
        For d = 2: cone coordinates of the limit covariance, ``(3,)``, else ``None``.
    """

    regime: Regime
    trajectory: Trajectory
    eigenvalues: FloatArray
    equilibrium_eigenvalues: FloatArray | None
    blowup_time: float
    cone: FloatArray | None
    cone_normalized: FloatArray | None
    equilibrium_cone: FloatArray | None


def regime_figure_data(
    layer: Layer,
    initial: Gaussian,
    *,
    T: float | None = None,
    n_points: int = 401,
    regime: Regime | None = None,
) -> RegimeFigureData:
    """Analyze (unless ``regime`` is given) and integrate the moments for the figures.

    The depth T defaults to ``1.05 T*`` for a blow-up (the integrator stops at the event) and to
    20 time constants ``20 / rate`` otherwise (``rate`` as in
    :func:`gtcontrol.riccati.default_horizon`), extended to 8 time constants of the slowest
    mode ``1/|spectral abscissa|`` when the limit is a stable equilibrium.
    """
    g0 = check_gaussian(initial, layer.dim)
    reg = regime if regime is not None else analyze(layer, g0)
    if T is None:
        if reg.kind == "blowup":
            T = 1.05 * reg.blowup_time
        else:
            T = 20.0 / max(_rate_for(layer, g0), 1e-300)
            eq = reg.equilibrium
            if eq is not None and eq.spectral_abscissa < 0:
                # show the approach to Σ*: 8 time constants of its slowest mode (e^-8 ≈ 3e-4)
                T = min(max(T, 8.0 / -eq.spectral_abscissa), default_horizon(layer, g0))
    T = as_positive_float("T", T)
    traj = simulate(layer, g0, T, n_points=as_positive_int("n_points", n_points))
    lam = np.array([np.linalg.eigvalsh(c)[::-1] for c in traj.cov])
    eq_lam = None
    if reg.limit_cov is not None:
        eq_lam = frozen(np.asarray(np.linalg.eigvalsh(reg.limit_cov)[::-1], dtype=float).copy())
    cone = cone_n = eq_cone = None
    if layer.dim == 2:
        cone = frozen(cone_coordinates(traj.cov))
        tr = np.trace(traj.cov, axis1=1, axis2=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            cone_n = frozen(cone_coordinates(traj.cov / tr[:, None, None]))
        if reg.limit_cov is not None:
            eq_cone = frozen(cone_coordinates(reg.limit_cov))
    return RegimeFigureData(
        regime=reg,
        trajectory=traj,
        eigenvalues=frozen(lam),
        equilibrium_eigenvalues=eq_lam,
        blowup_time=reg.blowup_time,
        cone=cone,
        cone_normalized=cone_n,
        equilibrium_cone=eq_cone,
    )


def _rate_for(layer: Layer, g0: Gaussian) -> float:
    return 200.0 / default_horizon(layer, g0)
