"""Local stability of a Gaussian equilibrium: the spectrum of the linearized moment flow, at scale.

At an equilibrium ``N(m*, Σ*)`` of a layer the moment ODE (docs/theory.md §2) linearizes to a
block-triangular system, because the covariance equation does not involve the mean:

    dH/dt = L(H) = M*H + HM*ᵀ + Σ_h (V_h H B_h Σ* + Σ* B_hᵀ H V_hᵀ),     (H symmetric)
    dδm/dt = K δm + (terms in H),         K = A + Σ_h V_h (I + Σ* B_h),

with ``M* = A + Σ_h V_h Σ* B_h``. ``L`` is the Fréchet derivative ``DF(Σ*)`` of the covariance
field (:func:`gtcontrol.covariance_jacobian`, the one home of that operator), so the
equilibrium is locally exponentially stable with rate ``ρ`` exactly when the spectral abscissa
of ``L`` on symmetric matrices and that of ``K`` are both ``≤ −ρ`` (docs/theory.md, "Stability
of a prescribed equilibrium").

**Active subspace.** A layer may never move some directions ``n`` (``nᵀA = 0``, ``nᵀb = 0``,
``nᵀV_h = 0``): then ``nᵀx`` is constant on every token, like the affine coordinate of an
extracted Transformer layer, which carries the query bias. An equilibrium may be singular along
such directions, ``Σ* = S ⊕ 0``; the flow then lives on the complement (the *active subspace*,
``r = rank Σ*``) and ``L``, ``K`` are taken there. A covariance singular along a direction the
layer moves is refused.

**At scale.** ``L`` acts on ``Sym(r)``, of dimension ``r(r+1)/2`` (73,920 at ``r = 384``): it is
never formed. Each product ``L(H)`` costs three ``r×r×r`` products with factored heads
(``V_h H B_h Σ* = W_O,h (s W_V,h H W_K,hᵀ)(W_Q,h Σ*)``), and implicitly restarted Arnoldi
(ARPACK) finds its rightmost eigenvalues. For ``r(r+1)/2 ≤ 1,500`` the matrix of ``L`` is formed
and all its eigenvalues computed (LAPACK), which is also the independent check of the Krylov
answer in the tests.

**Lyapunov bound.** In the coordinates ``G = Σ*^{-1/2} H Σ*^{-1/2}`` the rotation ``M*`` is
skew (at an equilibrium ``M*Σ* + Σ*M*ᵀ = 0``), so the numerical abscissa
``ω = λ_max(½(L̂ + L̂*))`` comes from the heads alone and bounds the spectral abscissa from
above. ``ω < 0`` is a Lyapunov certificate: ``‖G(t)‖_F ≤ e^{ωt} ‖G(0)‖_F`` for the
linearization, with no transient growth; it is computed by Lanczos on a symmetric operator.

Reference: the paper cited in :mod:`gtcontrol`, §4; R. B. Lehoucq, D. C. Sorensen, C. Yang,
*ARPACK Users' Guide* (SIAM, 1998); docs/theory.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse.linalg as sla

from .._blas import arpack_products
from .._display import Axes
from .._linalg import (
    FloatArray,
    power_of_two,
    scaled_norm,
    spd_sqrt_pair,
    sym,
    unvech,
    vech,
    vech_scale,
)
from .._status import Budget, BudgetExhausted, Outcome, ResultFields, Status, as_time_limit
from .._validation import as_choice, as_nonnegative_float, as_positive_int, frozen
from ..errors import InvalidParametersError
from ..model.field import affine_velocity, moment_field
from ..model.gaussian import Gaussian, check_gaussian
from ..model.params import Layer
from ._certify import evaluate_bounded
from ._field_kernel import JacobianOperator, relative_residual
from ._subspace import active_subspace, reduced_layer

__all__ = ["LinearizationSpectrum", "linearization_spectrum"]

ComplexArray = np.ndarray[Any, np.dtype[np.complex128]]


def _complex(a: Any) -> ComplexArray:
    out: ComplexArray = frozen(np.asarray(a, dtype=complex))
    return out


#: Largest ``r(r+1)/2`` for which the matrix of ``L`` is formed (method ``"auto"``).
DENSE_LIMIT = 1500
#: Largest ``r(r+1)/2`` accepted by ``method="dense"`` (memory ``8 n²`` bytes: 800 MB).
_DENSE_MAX = 10_000
#: A relative residual of the equilibrium equations above this is refused as "not an equilibrium".
EQUILIBRIUM_RTOL = 1e-8
#: Arnoldi: cap on restarts and the smallest basis size. 40 vectors, not ARPACK's customary 20:
#: fewer products on MiniLM's stabilized layers, whose edges are close real eigenvalues, and
#: each restart's orthogonalization, ``O(n · ncv²)``, stays below one product
#: (docs/benchmarks.md).
_ARPACK_MAXITER = 2000
_MIN_NCV = 40
#: The rightmost pairs are sought with a basis of ``_MIN_NCV`` vectors for at most
#: ``_FIRST_MAXITER`` restarts, then with ``_WIDE_NCV``: a tight cluster at the edge defeats a
#: small basis in any number of restarts, where a wide one converges (docs/benchmarks.md).
_FIRST_MAXITER = 150
_WIDE_NCV = 120
#: Largest ``r(r+1)/2`` for which the dense abscissa gets its error bound (an SVD of the
#: complex eigenvector matrix, about as costly as the eigendecomposition itself).
_BOUND_MAX_N = 500


def mean_block(layer: Layer, mean: FloatArray, cov: FloatArray, basis: FloatArray) -> FloatArray:
    """``K = A + Σ_h V_h (I + Σ* B_h)`` restricted to the active subspace."""
    m_mat, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
    fh = layer.factored_heads
    k_mat = m_mat.copy()
    if fh is not None:
        k_mat += fh.o_cat @ fh.flat("v")
    for v_h, _ in layer.dense_heads:
        k_mat += v_h
    out: FloatArray = basis.T @ k_mat @ basis
    return out


def equilibrium_residuals(layer: Layer, target: Gaussian) -> tuple[float, float]:
    """Relative residuals ``(covariance, mean)`` of the moment field at ``target``.

    Each is the size of the field relative to the sum of the sizes of its terms (for the
    covariance :func:`~._field_kernel.relative_residual`, the residual of the equilibrium
    searches), so ``1e-16`` is exact to round-off whatever the scale. The mean's norms are
    scaled (:func:`~gtcontrol._linalg.scaled_norm`): a term such as ``A m*`` reaches ``1e298``
    for entries at the accepted bound, whose square overflows.
    """
    _, rc = relative_residual(layer, np.asarray(target.cov, dtype=float))
    dm, _ = moment_field(layer, target.mean, target.cov)
    m_mat, c = affine_velocity(layer, target.mean, target.cov)
    a, b = layer.affine_ffn()
    mean = np.asarray(target.mean, dtype=float)
    mean_scale = (
        scaled_norm(a @ mean)
        + scaled_norm((m_mat - a) @ mean)
        + scaled_norm(b)
        + scaled_norm(c - b)
    )
    nm = scaled_norm(dm)
    return float(rc), (nm / mean_scale if mean_scale > 0 else nm)


class SymOperator:
    """``L = DF(Σ*)`` on ``Sym(r)`` in orthonormal coordinates (``√2`` off the diagonal).

    ``matvec`` maps the coordinates of ``H`` to those of ``L(H)``
    (:class:`~._field_kernel.JacobianOperator`, the one home of the operator), or of ``L*(H)``
    with ``adjoint=True``; the Frobenius product is the Euclidean one of the coordinates, so the
    numerical abscissa is the top eigenvalue of ``(J + Jᵀ)/2``. Every product ticks ``budget``.
    """

    def __init__(
        self, layer: Layer, cov: FloatArray, budget: Budget | None = None, *, adjoint: bool = False
    ) -> None:
        self.r = layer.dim
        self.n = self.r * (self.r + 1) // 2
        self.jac: Any = _AdjointJacobian(layer, cov) if adjoint else JacobianOperator(layer, cov)
        self.w = vech_scale(self.r)
        self.budget = budget
        self.count = 0

    def to_matrix(self, x: FloatArray) -> FloatArray:
        """The symmetric ``H`` of coordinates ``x``."""
        return unvech(x / self.w, self.r)

    def to_coords(self, h: FloatArray) -> FloatArray:
        """The coordinates of a symmetric ``H``."""
        out: FloatArray = vech(h) * self.w
        return out

    def matvec(self, x: Any) -> Any:
        """``L`` applied to coordinates (real; complex input is split into two products)."""
        if np.iscomplexobj(x):
            return self.matvec(x.real) + 1j * self.matvec(x.imag)
        self.count += 1
        if self.budget is not None:
            self.budget.tick()
        return self.to_coords(self.jac(self.to_matrix(np.asarray(x, dtype=float).ravel())))

    def linear_operator(self) -> sla.LinearOperator:
        """The operator for scipy's iterative eigensolvers."""
        return sla.LinearOperator((self.n, self.n), matvec=self.matvec, dtype=float)

    def dense(self) -> FloatArray:
        """The ``n×n`` matrix (``n`` products with the unit coordinate vectors)."""
        out = np.empty((self.n, self.n))
        e = np.zeros(self.n)
        for j in range(self.n):
            e[j] = 1.0
            out[:, j] = self.matvec(e)
            e[j] = 0.0
        return out


@dataclass(frozen=True, eq=False)
class LinearizationSpectrum(ResultFields, Outcome):
    """The spectrum of the moment flow linearized at an equilibrium ``N(m*, Σ*)``.

    Attributes
    ----------
    abscissa
        ``max(cov_abscissa, mean_abscissa)``: the equilibrium is locally exponentially stable
        with rate ``ρ`` iff ``abscissa ≤ −ρ`` (``ρ > 0``).
    cov_abscissa
        Spectral abscissa of ``L = DF(Σ*)`` on symmetric matrices of the active subspace.
    mean_abscissa
        Spectral abscissa of ``K = A + Σ_h V_h (I + Σ* B_h)`` on the active subspace.
    eigenvalues
        The ``k`` rightmost eigenvalues of ``L`` found, by decreasing real part.
    modes
        Their eigenvectors as ``d×d`` complex symmetric matrices ``H`` (unit Frobenius norm),
        shape ``(k, d, d)``: where the covariance departs first.
    mean_eigenvalues
        Every eigenvalue of ``K`` (active subspace), by decreasing real part.
    numerical_abscissa
        ``ω = λ_max`` of the symmetric part of ``L`` in the ``Σ*``-normalized coordinates
        (``≥ cov_abscissa``); ``ω < 0`` means ``‖Σ*^{-1/2}H(t)Σ*^{-1/2}‖_F ≤ e^{ωt}·(same at
        0)`` for the linearized flow. An estimate, not a certificate: to rounding (no bound
        stated; the computed ``Σ*^{±1/2}`` are inverse to about ``κ(Σ*)·1e-16``) for
        ``r(r+1)/2 ≤ 1500``, a Lanczos Ritz value beyond (which can fall short of ω).
        ``nan`` when not computed.
    cov_abscissa_error
        A bound on ``|cov_abscissa − α|``, α the spectral abscissa of the exact ``L`` of the
        layer's own floats at the ``Σ*`` given (method ``"dense"``, ``r(r+1)/2 ≤ 500``):
        Bauer–Fike on the computed eigenvectors, with the rounding of forming L and of the
        bound. ``inf`` when the eigenvector matrix is numerically singular (a defective or
        nearly defective L: the computed abscissa may then be off by ``~‖L‖·u^{1/m}``);
        ``nan`` when not computed (Krylov, larger n, ``"shifted"``).
    residual
        Relative residuals ``(covariance, mean)`` of the equilibrium equations at the input.
    active_dim
        ``r``, the dimension of the active subspace.
    method
        ``"dense"`` (every eigenvalue of the formed ``n×n`` matrix), ``"krylov"`` (ARPACK), or
        ``"shifted"`` (:func:`gtcontrol.stabilize`'s added head: a base spectrum shifted by an
        exact identity ``L = L_base − 2cI``, checked on random directions; ``stats["shift"]``,
        ``stats["identity_residual"]``).
    status, message, stats
        ``SUCCESS``; ``BUDGET_EXHAUSTED`` when ``time_limit`` ran out (nothing computed is
        reported as known); ``FAILED`` when Arnoldi did not converge. ``stats``: ``matvecs``,
        ``seconds``, ``residuals`` (``‖LH − λH‖_F`` of each pair).
    """

    abscissa: float
    cov_abscissa: float
    mean_abscissa: float
    eigenvalues: ComplexArray
    modes: ComplexArray
    mean_eigenvalues: ComplexArray
    numerical_abscissa: float
    residual: tuple[float, float]
    active_dim: int
    method: str
    cov_abscissa_error: float = math.nan

    _summary_fields = (
        "abscissa",
        "cov_abscissa",
        "cov_abscissa_error",
        "mean_abscissa",
        "numerical_abscissa",
        "active_dim",
        "method",
    )

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        draw_spectrum(ax, self.eigenvalues, label="L = DF(Σ*)", title="linearization spectrum")


def linearization_spectrum(
    layer: Layer,
    equilibrium: Gaussian,
    *,
    k: int = 6,
    method: str = "auto",
    tol: float = 1e-10,
    numerical_abscissa: bool = True,
    time_limit: float | None = None,
) -> LinearizationSpectrum:
    """Spectral abscissa and leading modes of the moment flow linearized at an equilibrium.

    The covariance part ``L(H) = M*H + HM*ᵀ + Σ_h (V_h H B_h Σ* + Σ* B_hᵀ H V_hᵀ)`` (``H``
    symmetric on the active subspace) and the mean part ``K = A + Σ_h V_h(I + Σ*B_h)`` decide
    local exponential stability: rate ``ρ`` iff both spectral abscissas are ``≤ −ρ``
    (docs/theory.md, "Stability of a prescribed equilibrium"). ``L`` is applied through the
    factored heads in ``O(r³ + H r² d_head)`` and never formed at scale.

    Parameters
    ----------
    layer
        The layer (dense or factored heads; affine feed-forward).
    equilibrium
        ``N(m*, Σ*)``, an equilibrium of ``layer`` (relative residual ``≤ 1e-8``). ``Σ*`` may be
        singular along directions the layer never moves (an affine coordinate).
    k
        Number of rightmost eigenvalues of ``L`` reported (``1 ≤ k``; default 6): at most
        ``n = r(r+1)/2`` (dense) or ``n − 2`` (Krylov; ``stats["k_capped"]`` says so).
    method
        ``"auto"`` (dense when ``r(r+1)/2 ≤ 1500``, else Krylov), ``"dense"`` or ``"krylov"``.
    tol
        Relative accuracy of the Krylov eigenvalues, in ``[0, 1)`` (ARPACK ``tol``: 0 means
        machine precision; default 1e-10).
    numerical_abscissa
        Also compute the numerical abscissa ``ω`` (Lanczos on the symmetric part; default
        true).
    time_limit
        Wall-clock limit in seconds (``None``: none); reaching it returns
        ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    LinearizationSpectrum
        The abscissas, the leading eigenvalues and modes, ``ω``, and the residuals.

    Raises
    ------
    InvalidParametersError
        If ``layer`` is not a Layer, an option is malformed, or ``equilibrium`` is not an
        equilibrium of ``layer`` (the residual is named).
    InvalidGaussianError
        If ``equilibrium`` is not a Gaussian of the layer's dimension, or is singular along a
        direction the layer moves.

    Examples
    --------
    The Riccati-class layer ``A = I``, ``V = −I``, ``B = I`` has the equilibrium ``Σ* = I``;
    its linearization is ``H ↦ −2H`` and the mean matrix is ``−I``:

    >>> import numpy as np, gtcontrol as gt
    >>> layer = gt.Layer(A=np.eye(2), V=-np.eye(2), B=np.eye(2))
    >>> spec = gt.linearization_spectrum(layer, gt.Gaussian(np.zeros(2), np.eye(2)))
    >>> spec.success, round(spec.cov_abscissa, 12), round(spec.mean_abscissa, 12)
    (True, -2.0, -1.0)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; Lehoucq, Sorensen, Yang, *ARPACK Users'
    Guide* (SIAM, 1998); docs/theory.md.
    """
    clock = time.perf_counter()
    limit = as_time_limit(time_limit)
    if not isinstance(layer, Layer):
        raise InvalidParametersError(
            f"layer: expected a gtcontrol Layer, got {type(layer).__name__}"
        )
    target = check_gaussian(equilibrium, layer.dim, "equilibrium")
    kk = as_positive_int("k", k, maximum=10_000)
    as_choice("method", method, ("auto", "dense", "krylov"))
    if not as_nonnegative_float("tol", tol) < 1.0:
        raise InvalidParametersError(f"tol: expected a number in [0, 1), got {tol!r}")
    if not isinstance(numerical_abscissa, bool):
        raise InvalidParametersError(
            f"numerical_abscissa: expected True or False, got {numerical_abscissa!r}"
        )
    layer.affine_ffn()  # refuses a non-affine feed-forward
    budget = Budget(limit)
    residual = equilibrium_residuals(layer, target)
    if not max(residual) <= EQUILIBRIUM_RTOL:
        raise InvalidParametersError(
            f"equilibrium: N(m, Σ) is not an equilibrium of the layer (relative residuals: "
            f"covariance {residual[0]:.3g}, mean {residual[1]:.3g}; expected ≤ "
            f"{EQUILIBRIUM_RTOL:g})"
        )
    basis = active_subspace(layer, target.cov)
    return spectrum_on_basis(
        layer, target, basis, kk, method, float(tol), numerical_abscissa, budget, residual, clock
    )


def spectrum_on_basis(
    layer: Layer,
    target: Gaussian,
    basis: FloatArray,
    k: int,
    method: str,
    tol: float,
    want_omega: bool,
    budget: Budget,
    residual: tuple[float, float],
    clock: float,
    v0: FloatArray | None = None,
) -> LinearizationSpectrum:
    """The work of :func:`linearization_spectrum` on a validated input (also used by stabilize)."""
    part = _MeanPart.at(layer, target, basis, residual)
    red = reduced_layer(layer, basis)
    s_act = basis.T @ target.cov @ basis
    op = SymOperator(red, s_act, budget)
    n = op.n
    use_dense = (method == "auto" and n <= DENSE_LIMIT) or method == "dense"
    if method == "dense" and n > _DENSE_MAX:
        raise InvalidParametersError(
            f"method: 'dense' forms an n×n matrix with n = r(r+1)/2 = {n} > {_DENSE_MAX}; "
            "use 'krylov'"
        )
    k = min(k, n)
    nan = float("nan")
    stats: dict[str, Any] = {}
    try:
        if use_dense:
            vals, vecs, err = _dense_pairs(op, k, bound=(red, s_act))
            name = "dense"
        else:
            vals, vecs = _krylov_pairs(op, k, tol, v0)
            name, err = "krylov", nan
        stats["matvecs_eigs"] = op.count
        if vals.size < k:  # ARPACK returns at most n − 2 pairs (its k < n − 1)
            stats["k_capped"] = {"asked": k, "returned": int(vals.size)}
            k = int(vals.size)
        omega = _numerical_abscissa(red, s_act, tol, budget) if want_omega else nan
    except BudgetExhausted as exc:
        return part.unfinished(
            Status.BUDGET_EXHAUSTED,
            f"stopped before the spectrum of L was known: {exc.reason}",
            "dense" if use_dense else "krylov",
            {"matvecs": op.count, "seconds": time.perf_counter() - clock},
        )
    except sla.ArpackNoConvergence as exc:
        return part.unfinished(
            Status.FAILED,
            f"Arnoldi (ARPACK) did not converge: {exc}",
            "krylov",
            {"matvecs": op.count, "seconds": time.perf_counter() - clock},
        )
    modes = np.stack([basis @ op.to_matrix(v) @ basis.T for v in vecs.T]) if k else None
    residuals = [
        float(np.linalg.norm(op.matvec(vecs[:, j]) - vals[j] * vecs[:, j])) for j in range(k)
    ]
    alpha, mean_alpha = float(vals[0].real), part.mean_abscissa
    msg = (
        f"spectral abscissa {max(alpha, mean_alpha):.6g}: covariance part {alpha:.6g}"
        + (f" ± {err:.2g}" if math.isfinite(err) else "")
        + f" (rightmost λ = {_fmt(vals[0])}, {name}, n = {n}), mean part {mean_alpha:.6g}"
        + (f"; numerical abscissa ω = {omega:.6g}" if want_omega else "")
        + (
            f"; {k} of the {stats['k_capped']['asked']} eigenvalues asked (Krylov finds at most "
            f"n − 2 = {n - 2}; method='dense' gives all n)"
            if "k_capped" in stats
            else ""
        )
    )
    stats.update(matvecs=op.count, seconds=time.perf_counter() - clock, residuals=residuals, n=n)
    return part.spectrum(alpha, vals, modes, name, omega, err, message=msg, stats=stats)


#: Random symmetric directions on which :func:`shifted_spectrum` checks ``L = L_base + σI``,
#: and the relative residual it accepts (products of O(1) operators in float64: ~1e-15).
_SHIFT_PROBES = 3
_SHIFT_RTOL = 1e-10


def shifted_spectrum(
    layer: Layer,
    base_layer: Layer,
    target: Gaussian,
    basis: FloatArray,
    base: LinearizationSpectrum,
    shift: float,
    budget: Budget,
    residual: tuple[float, float],
    clock: float,
    seed: int = 0,
) -> LinearizationSpectrum | None:
    """The spectrum of ``layer`` at ``target`` when its covariance linearization is the base
    layer's shifted, ``L = L_base + σI`` (an added head ``(−cI, Σ*⁻¹)`` with ``A`` raised by
    ``cI`` gives ``σ = −2c`` exactly): the base's eigenpairs shifted by ``σ``, without a new
    Krylov run.

    The identity is checked, not assumed: ``‖L x − L_base x − σx‖ ≤ 1e-10 (‖L_base x‖ + |σ|‖x‖)``
    on :data:`_SHIFT_PROBES` seeded random symmetric directions ``x`` (a nonzero difference
    operator would show on a random direction with probability one), and each shifted pair's
    residual ``‖L H − (λ + σ) H‖`` on ``layer``'s own operator goes into ``stats["residuals"]``.
    The mean block is computed afresh. ``None`` when the identity does not hold (the caller
    then computes the spectrum itself); a budget that runs out gives ``BUDGET_EXHAUSTED``.
    """
    part = _MeanPart.at(layer, target, basis, residual)
    s_act = basis.T @ target.cov @ basis
    op = SymOperator(reduced_layer(layer, basis), s_act, budget)
    op_base = SymOperator(reduced_layer(base_layer, basis), s_act, budget)
    rng = np.random.default_rng(seed)
    try:
        gaps = []
        for _ in range(_SHIFT_PROBES):
            x = rng.standard_normal(op.n)
            lx, bx = op.matvec(x), op_base.matvec(x)
            scale = float(np.linalg.norm(bx)) + abs(shift) * float(np.linalg.norm(x))
            gaps.append(float(np.linalg.norm(lx - bx - shift * x)) / max(scale, 1e-300))
        if not max(gaps) <= _SHIFT_RTOL:
            return None
        vals = np.asarray(base.eigenvalues) + shift
        coords = [op.to_coords(basis.T @ h @ basis) for h in np.asarray(base.modes)]
        residuals = [
            float(np.linalg.norm(op.matvec(v) - lam * v))
            for v, lam in zip(coords, vals, strict=True)
        ]
    except BudgetExhausted as exc:
        return part.unfinished(
            Status.BUDGET_EXHAUSTED,
            f"stopped before the spectrum of L was known: {exc.reason}",
            "shifted",
            {"matvecs": op.count + op_base.count, "seconds": time.perf_counter() - clock},
        )
    alpha, mean_alpha = base.cov_abscissa + shift, part.mean_abscissa
    msg = (
        f"spectral abscissa {max(alpha, mean_alpha):.6g}: covariance part {alpha:.6g} (the "
        f"base's rightmost λ = {_fmt(complex(base.eigenvalues[0]))} ({base.method}) shifted by "
        f"{shift:.6g}: L = L_base + σI holds to {max(gaps):.1e} on {_SHIFT_PROBES} random "
        f"directions, n = {op.n}), mean part {mean_alpha:.6g}"
    )
    stats = {
        "matvecs": op.count + op_base.count,
        "seconds": time.perf_counter() - clock,
        "residuals": residuals,
        "n": op.n,
        "shift": shift,
        "identity_residual": max(gaps),
    }
    return part.spectrum(alpha, vals, base.modes, "shifted", math.nan, message=msg, stats=stats)


@dataclass(frozen=True)
class _MeanPart:
    """What a spectrum at ``N(m*, Σ*)`` holds besides ``L``'s part, known before ``L`` is solved.

    The eigenvalues of the mean block ``K`` by decreasing real part (``r ≥ 1`` of them: a zero
    ``Σ*`` is refused), the equilibrium residuals and the active subspace's dimensions.
    """

    mean_eigs: ComplexArray
    residual: tuple[float, float]
    active_dim: int
    dim: int

    @classmethod
    def at(
        cls, layer: Layer, target: Gaussian, basis: FloatArray, residual: tuple[float, float]
    ) -> _MeanPart:
        """The mean part of ``layer`` at ``target`` on the active subspace ``basis``."""
        eigs = np.linalg.eigvals(mean_block(layer, target.mean, target.cov, basis))
        eigs = eigs[np.argsort(-eigs.real, kind="stable")]
        return cls(_complex(eigs), residual, basis.shape[1], layer.dim)

    @property
    def mean_abscissa(self) -> float:
        """The spectral abscissa of ``K``."""
        return float(self.mean_eigs[0].real)

    def spectrum(
        self,
        cov_abscissa: float,
        eigenvalues: Any,
        modes: Any,
        method: str,
        numerical_abscissa: float,
        cov_abscissa_error: float = math.nan,
        *,
        status: Status = Status.SUCCESS,
        message: str,
        stats: dict[str, Any],
    ) -> LinearizationSpectrum:
        """The spectrum with ``L``'s part as given (``modes``: ``None`` for none)."""
        if modes is None:
            modes = np.zeros((0, self.dim, self.dim))
        return LinearizationSpectrum(
            abscissa=max(cov_abscissa, self.mean_abscissa),  # max keeps a first nan
            cov_abscissa=cov_abscissa,
            mean_abscissa=self.mean_abscissa,
            eigenvalues=_complex(eigenvalues),
            modes=_complex(modes),
            mean_eigenvalues=self.mean_eigs,
            numerical_abscissa=numerical_abscissa,
            residual=self.residual,
            active_dim=self.active_dim,
            method=method,
            cov_abscissa_error=cov_abscissa_error,
            status=status,
            message=message,
            stats=stats,
        )

    def unfinished(
        self, status: Status, message: str, method: str, stats: dict[str, Any]
    ) -> LinearizationSpectrum:
        """A spectrum whose covariance part is unknown (spent budget, no convergence)."""
        nan = math.nan
        empty = np.zeros(0)
        return self.spectrum(
            nan, empty, None, method, nan, status=status, message=message, stats=stats
        )


def _fmt(z: complex) -> str:
    return f"{z.real:.6g}" if abs(z.imag) <= 1e-12 * max(abs(z), 1.0) else f"{z:.6g}"


def _order(vals: ComplexArray, vecs: Any) -> tuple[ComplexArray, Any]:
    idx = np.lexsort((-np.abs(vals.imag), -vals.real))
    return vals[idx], vecs[:, idx]


def _dense_pairs(
    op: SymOperator, k: int, bound: tuple[Layer, FloatArray] | None = None
) -> tuple[ComplexArray, ComplexArray, float]:
    """The k rightmost pairs of the formed matrix, and (with ``bound``: the reduced layer and
    Σ*) the error bound of the abscissa (:func:`_abscissa_error`; ``nan`` without)."""
    import scipy.linalg

    mat = op.dense()
    # scipy's eig returns wrongly scaled eigenvalues for a matrix beyond about 1e±138 (its
    # internal scaling is not undone: diag(1e150) gave 1.49e138); a power of two is exact
    scale = power_of_two(mat)
    vals, vecs = scipy.linalg.eig(mat / scale, check_finite=False)
    vals = vals * scale
    vals, vecs = _order(vals, vecs)
    err = math.nan
    if bound is not None and op.n <= _BOUND_MAX_N:
        err = _abscissa_error(mat, vals, vecs, *bound)
    return vals[:k], vecs[:, :k], err


def _abscissa_error(
    mat: FloatArray, vals: ComplexArray, vecs: ComplexArray, red: Layer, s_act: FloatArray
) -> float:
    """Bound on ``|max Re vals − α(L)|`` for the exact L of ``red``'s floats at ``s_act``.

    With ``R = L̃X − XΛ`` and ``E = L − L̃`` (forming, bounded via the independent dense
    Jacobian of :mod:`~gtcontrol.analysis._certify`), ``X⁻¹LX = Λ + X⁻¹(R + EX)``, so every
    eigenvalue of L lies in the union of discs of radius ``δ = ‖X⁻¹‖(‖R‖ + ‖E‖‖X‖)`` about the
    computed ones (Bauer–Fike), and each connected component of m discs holds exactly m of them
    (continuity). Hence ``α ≤ α̃ + δ`` and ``α ≥ min Re`` over the rightmost disc's component
    ``− δ``. The rounding of R and of the SVD of X is included.
    """
    n = mat.shape[0]
    u = float(np.finfo(np.float64).eps) / 2
    ev = evaluate_bounded(red, s_act)
    if ev is None or not np.all(np.isfinite(vecs)):
        return math.inf
    gam = 4.0 * (n + 2) * u
    form_err = ev.jac_err + float(np.linalg.norm(ev.jac - mat)) * (1.0 + gam)
    form_err += gam * float(np.linalg.norm(mat))
    res = mat @ vecs - vecs * vals
    abs_v = np.abs(vecs)
    res_err = gam * float(np.linalg.norm(np.abs(mat) @ abs_v + abs_v * np.abs(vals)))
    sv = np.linalg.svd(vecs, compute_uv=False)
    s_min = float(sv[-1]) - 4.0 * n * u * float(sv[0])
    if not s_min > 0:
        return math.inf
    delta = (float(np.linalg.norm(res)) + res_err + form_err * float(sv[0])) / s_min
    delta *= 1.0 + gam
    # the component of the rightmost disc: discs whose centres chain within 2δ
    inside = np.zeros(n, dtype=bool)
    inside[0] = True
    frontier = [0]
    while frontier:
        near = np.abs(vals - vals[frontier.pop()]) <= 2.0 * delta
        new = np.flatnonzero(near & ~inside)
        inside[new] = True
        frontier.extend(new.tolist())
    spread = float(vals[0].real) - float(np.min(vals[inside].real))
    return float(spread + delta)


def _krylov_pairs(
    op: SymOperator, k: int, tol: float, v0: FloatArray | None
) -> tuple[ComplexArray, ComplexArray]:
    """Rightmost pairs by ARPACK (``which="LR"``), from a deterministic start vector.

    Two more pairs than asked are computed (ARPACK's ``k < n − 1`` and the conjugate of a
    complex pair at the edge), with a basis of ``max(2k + 1, 20)`` vectors, and, if that has
    not converged in ``_FIRST_MAXITER`` restarts, of ``max(2k + 1, 120)`` vectors.
    """
    n = op.n
    kk = min(k + 2, n - 2)
    if kk < 1:
        vals, vecs, _ = _dense_pairs(op, k)
        return vals, vecs
    start = v0 if v0 is not None else _default_start(op)
    narrow = min(n, max(2 * kk + 1, _MIN_NCV))
    wide = min(n, max(2 * kk + 1, _WIDE_NCV))

    def arnoldi(ncv: int, maxiter: int) -> tuple[ComplexArray, ComplexArray]:
        """One ARPACK run with a basis of ``ncv`` vectors and at most ``maxiter`` restarts."""
        with arpack_products(op.matvec) as product:
            lin = sla.LinearOperator((n, n), matvec=product, dtype=float)
            vals, vecs = sla.eigs(
                lin, k=kk, which="LR", ncv=ncv, tol=tol, v0=start, maxiter=maxiter
            )
        return vals, vecs

    try:
        vals, vecs = arnoldi(narrow, _FIRST_MAXITER if wide > narrow else _ARPACK_MAXITER)
    except sla.ArpackNoConvergence:
        if wide <= narrow:
            raise
        # a cluster at the edge: a wider basis separates it (_WIDE_NCV)
        vals, vecs = arnoldi(wide, _ARPACK_MAXITER)
    vals, vecs = _order(vals, vecs)
    return vals[:k], vecs[:, :k]


def _default_start(op: SymOperator) -> FloatArray:
    """A fixed start mixing the identity with a seeded random symmetric matrix (reproducible)."""
    rng = np.random.default_rng(20240611)
    x = rng.standard_normal(op.n) + op.to_coords(np.eye(op.r))
    out: FloatArray = x / np.linalg.norm(x)
    return out


def _numerical_abscissa(red: Layer, s_act: FloatArray, tol: float, budget: Budget) -> float:
    """``λ_max`` of the symmetric part of ``L`` in ``G = S^{-1/2} H S^{-1/2}`` coordinates."""
    root, inv_root = spd_sqrt_pair(s_act)
    # L̂(G) = S^{-1/2} L(S^{1/2} G S^{1/2}) S^{-1/2}; its adjoint (Frobenius) is
    # S^{1/2} L*(S^{-1/2} G S^{-1/2}) S^{1/2} with L* applied as the transposed Jacobian.
    op = SymOperator(red, s_act, budget)
    adj = _AdjointJacobian(red, s_act)
    r = red.dim

    def half_sum(x: FloatArray) -> FloatArray:
        budget.tick()
        g = op.to_matrix(x)
        forward = inv_root @ op.jac(root @ g @ root) @ inv_root
        backward = root @ adj(inv_root @ g @ inv_root) @ root
        return op.to_coords(0.5 * (forward + backward))

    n = op.n
    if n <= DENSE_LIMIT:
        mat = np.empty((n, n))
        e = np.zeros(n)
        with np.errstate(over="ignore", invalid="ignore"):
            for j in range(n):
                e[j] = 1.0
                mat[:, j] = half_sum(e)
                e[j] = 0.0
        if not np.all(np.isfinite(mat)):  # the rescaled operator leaves the float range
            return math.nan
        return float(np.linalg.eigvalsh(sym(mat))[-1])
    start = op.to_coords(np.eye(r))
    with arpack_products(half_sum) as product:
        val = sla.eigsh(
            sla.LinearOperator((n, n), matvec=product, dtype=float),
            k=1,
            which="LA",
            v0=start / np.linalg.norm(start),
            tol=tol,
            maxiter=_ARPACK_MAXITER,
            return_eigenvectors=False,
            ncv=min(n, _MIN_NCV),
        )
    return float(val[0])


class _AdjointJacobian:
    """The Frobenius adjoint of ``DF(Σ)`` on ``Sym``: ``L*(G) = P* + P*ᵀ``,
    ``P* = MᵀG + Σ_h V_hᵀ G (B_hΣ)ᵀ`` (factored: ``s W_V,hᵀ (W_O,hᵀ G Σ W_Q,hᵀ) W_K,h``)."""

    def __init__(self, layer: Layer, cov: FloatArray) -> None:
        self.m_t, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
        self.m_t = self.m_t.T
        self.fh = layer.factored_heads
        if self.fh is not None:
            self.sq_t = np.matmul(cov, self.fh.q.transpose(0, 2, 1)) * self.fh.scale  # (H, d, dh)
        self.pairs = [(v_h.T, (b_h @ cov).T) for v_h, b_h in layer.dense_heads]

    def __call__(self, g: FloatArray) -> FloatArray:
        p = self.m_t @ g
        fh = self.fh
        if fh is not None:
            og = np.matmul(fh.o.transpose(0, 2, 1), g)  # (H, dh, d): W_O,hᵀ G
            cores = np.matmul(og, self.sq_t)  # (H, dh, dh)
            p += np.einsum("hai,hab,hbj->ij", fh.v, cores, fh.k, optimize=True)
        for v_t, y_t in self.pairs:
            p += v_t @ g @ y_t
        out: FloatArray = p + p.T
        return out
