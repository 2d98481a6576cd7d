"""Private numerics shared by the analysis modules (no public API).

Gramians ``W(h) = ∫₀ʰ e^{Aᵀs} Q e^{As} ds`` (Van Loan), their limits, Krylov bases, the slycot
Lyapunov solve (SB03MD), the sign split of R, range factors, SPD inverses, and the one home of
the rate scale of a layer's covariance field (:func:`field_rate`, :func:`default_horizon`).

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from .._linalg import RANK_RTOL, FloatArray, sym
from .._status import Budget, Status
from ..errors import SolverError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Layer
from ._field_kernel import head_norm_sum, norm2

__all__ = [
    "CERT_MARGIN",
    "EXACT_MAX_DIM",
    "PD_RTOL",
    "SEP_RTOL",
    "SIGN_RTOL",
    "exact_definiteness",
    "exact_solve",
    "field_rate",
    "gramian",
    "gramian_doublings",
    "gramian_limit",
    "inv_spd",
    "is_pd",
    "krylov_basis",
    "lmax",
    "lmin",
    "lyapunov_certificate",
    "lyapunov_error",
    "lyapunov_sep",
    "range_factor",
    "remaining_limit",
    "sign_split",
    "simulate_within",
    "slycot_lyapunov",
]

#: Eigenvalues (complex, or real when numpy returns a real array).
ComplexArray = NDArray[np.inexact[Any]]

#: Eigenvalues of R below this fraction of ``‖R‖`` are treated as zero in its sign split.
SIGN_RTOL = 1e-14


#: Relative margin kept by every positivity certificate (guards against rounding).
CERT_MARGIN = 1e-9


#: ``min |λ_i + λ_j|`` of A below this fraction of ``‖A‖`` makes the Lyapunov operator singular.
SEP_RTOL = 1e-10


def gramian(a: FloatArray, q: FloatArray, h: float) -> tuple[FloatArray, FloatArray]:
    """``(e^{Ah}, W(h))`` with ``W(h) = ∫₀ʰ e^{Aᵀs} Q e^{As} ds`` (Van Loan, then doubling).

    The block exponential ``expm([[−Aᵀ, Q], [0, A]] h0)`` gives ``e^{−Aᵀh0} W(h0)`` over a short
    step ``‖A‖₁ h0 ≤ 1/2`` (well conditioned); ``W(2s) = W(s) + e^{Aᵀs} W(s) e^{As}`` doubles it
    up to h without ever forming ``e^{−Aᵀh}``. With ``A = 0`` it is ``(I, hQ)``, formed directly
    (one rounding per entry, within the bound the march charges for the block exponential).
    """
    d = a.shape[0]
    if h <= 0.0:
        return np.eye(d), np.zeros((d, d))
    if not np.any(a):
        # an attention-only layer: the 2d × 2d exponential would cost O(d³) per trial step
        return np.eye(d), sym(q * h)
    k = gramian_doublings(a, h)
    h0 = h / 2.0**k
    c = np.zeros((2 * d, 2 * d))
    c[:d, :d] = -a.T * h0
    c[:d, d:] = q * h0
    c[d:, d:] = a * h0
    phi = sla.expm(c)
    e = phi[d:, d:]
    w = sym(e.T @ phi[:d, d:])
    for _ in range(k):
        w = sym(w + e.T @ w @ e)
        e = e @ e
    return e, w


def gramian_doublings(a: FloatArray, h: float) -> int:
    """How many doublings :func:`gramian` uses for depth ``h`` (``‖A‖₁ h0 ≤ 1/2``)."""
    na = float(np.linalg.norm(a, 1))
    return 0 if na * h <= 0.5 else math.ceil(math.log2(na * h / 0.5))


def lyapunov_certificate(a: FloatArray, sign: float) -> tuple[FloatArray, float] | None:
    """A proof that A is Hurwitz (``sign = −1``) or −A is (``sign = +1``), or ``None``.

    Solves ``AᵀP + PA = sign·I`` and keeps the computed ``P`` only if it proves the claim for
    the float A by itself: ``P ≻ 0`` and ``sign·(AᵀP + PA) ≻ 0`` beyond the rounding of forming
    them (Lyapunov's theorem then holds for ``xᵀPx``). Returns ``(P, ‖P_exact‖₂ bound)`` where
    ``P_exact`` solves the equation exactly; ``‖L⁻¹(Y)‖₂ ≤ ‖Y‖₂‖P_exact‖₂`` for the Lyapunov
    operator ``L(X) = AᵀX + XA`` (used by :func:`lyapunov_error`).
    """
    d = int(a.shape[0])
    try:
        p, _, _ = slycot_lyapunov(a, sign * np.eye(d))
    except SolverError:
        return None
    gam = 4.0 * d * float(np.finfo(np.float64).eps)
    w_p = np.linalg.eigvalsh(p)
    if not (w_p[0] > gam * w_p[-1] > 0):
        return None
    lhs = sign * sym(a.T @ p + p @ a)
    decay = float(np.linalg.eigvalsh(lhs)[0]) - gam * 2.0 * float(np.linalg.norm(a, 2)) * w_p[-1]
    if decay <= 0:
        return None
    # sign·L(P) ⪰ decay·I, so the exact solution of sign·L(X) = I is ⪯ P / decay
    return p, float(w_p[-1]) / decay * (1.0 + gam)


def lyapunov_error(a: FloatArray, x: FloatArray, c: FloatArray, p_norm: float) -> float:
    """Bound on ``‖X_exact − X‖₂`` for ``AᵀX + XA = C`` from the residual of the computed X.

    ``p_norm`` is the bound of :func:`lyapunov_certificate` for the same A (either sign);
    the residual's own rounding is included.
    """
    d = int(a.shape[0])
    gam = 4.0 * d * float(np.finfo(np.float64).eps)
    res = a.T @ x + x @ a - c
    top = float(np.linalg.norm(res, 2)) + gam * (
        2.0 * float(np.linalg.norm(a, 2)) * float(np.linalg.norm(x, 2))
        + float(np.linalg.norm(c, 2))
    )
    return p_norm * top * (1.0 + gam)


#: Largest dimension for which definiteness is decided in exact rational arithmetic.
EXACT_MAX_DIM = 16


def exact_definiteness(m: list[list[Fraction]]) -> str:
    """``"pd"``, ``"psd"`` (singular) or ``"indefinite"`` for a symmetric rational matrix, exactly.

    Symmetric Gaussian elimination in :class:`fractions.Fraction`: a negative pivot, or a zero
    pivot whose row is not zero (a 2×2 principal minor ``−a² < 0``), is indefinite. Used where
    a float test could not tell an exact zero eigenvalue from rounding (e.g. ``R ⪰ 0`` with
    structural zeros); affordable for ``d ≤ EXACT_MAX_DIM``.
    """
    a = [row[:] for row in m]
    n = len(a)
    singular = False
    for k in range(n):
        piv = a[k][k]
        if piv < 0:
            return "indefinite"
        if piv == 0:
            if any(a[k][j] != 0 for j in range(k + 1, n)):
                return "indefinite"
            singular = True
            continue
        for i in range(k + 1, n):
            if a[i][k] == 0:
                continue
            f = a[i][k] / piv
            for j in range(k + 1, n):
                a[i][j] -= f * a[k][j]
    return "psd" if singular else "pd"


def exact_solve(m: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """The solution of ``m x = rhs`` in rational arithmetic, or ``None`` if ``m`` is singular."""
    n = len(m)
    aug = [[*row, rhs[i]] for i, row in enumerate(m)]
    for k in range(n):
        piv = next((i for i in range(k, n) if aug[i][k] != 0), None)
        if piv is None:
            return None
        aug[k], aug[piv] = aug[piv], aug[k]
        for i in range(k + 1, n):
            if aug[i][k] != 0:
                f = aug[i][k] / aug[k][k]
                for j in range(k, n + 1):
                    aug[i][j] -= f * aug[k][j]
    x = [Fraction(0)] * n
    for i in range(n - 1, -1, -1):
        acc = aug[i][n] - sum((aug[i][j] * x[j] for j in range(i + 1, n)), Fraction(0))
        x[i] = acc / aug[i][i]
    return x


def krylov_basis(m: FloatArray, v0: FloatArray, rtol: float = 1e-10) -> FloatArray:
    """Orthonormal basis of the smallest ``M``-invariant subspace containing ``range(v0)``.

    Built by alternating ``V ← orth([V, M V])`` until the dimension stops growing; singular
    values below ``rtol`` times the largest count as zero (M is scaled to unit norm first, which
    leaves every invariant subspace unchanged).
    """
    d = m.shape[0]
    nm = float(np.linalg.norm(m, 2))
    ms = m / nm if nm > 0 else m
    v = _orth(v0, rtol)
    while v.shape[1] < d:
        w = _orth(np.hstack([v, ms @ v]), rtol)
        if w.shape[1] == v.shape[1]:
            break
        v = w
    return v


def _orth(x: FloatArray, rtol: float) -> FloatArray:
    if x.size == 0:
        return np.zeros((x.shape[0], 0))
    u, sv, _ = np.linalg.svd(x, full_matrices=False)
    if sv.size == 0 or sv[0] == 0:
        return np.zeros((x.shape[0], 0))
    return u[:, sv > rtol * sv[0]]


def gramian_limit(a: FloatArray, q: FloatArray, rtol: float = 1e-10) -> FloatArray | None:
    """``W(∞) = ∫₀^∞ e^{Aᵀs} Q e^{As} ds`` for ``Q ⪰ 0``, or ``None`` if it diverges.

    ``W(t)`` lives on the observable subspace of ``(Q^{1/2}, A)``, the smallest Aᵀ-invariant
    subspace containing ``range Q`` (basis ``Q_o``); there ``A_o = Q_oᵀ A Q_o`` and the integral
    converges iff ``A_o`` is Hurwitz, to the solution of ``A_oᵀ X + X A_o = −Q_oᵀ Q Q_o``.
    """
    qo = krylov_basis(a.T, q, rtol)
    if qo.shape[1] == 0:
        return np.zeros_like(q)
    ao = qo.T @ a @ qo
    if not np.all(np.linalg.eigvals(ao).real < 0):
        return None
    try:
        x, _, _ = slycot_lyapunov(ao, -(qo.T @ q @ qo))
    except SolverError:
        return None
    return sym(qo @ x @ qo.T)


def range_factor(cov: FloatArray) -> FloatArray:
    """``F`` (d×r, full column rank) with ``F Fᵀ = Σ`` on its numerical range."""
    w, u = np.linalg.eigh(sym(cov))
    top = float(w[-1]) if w.size else 0.0
    if top <= 0.0:
        return np.zeros((cov.shape[0], 0))
    keep = w > RANK_RTOL * top
    factor: FloatArray = u[:, keep] * np.sqrt(w[keep])
    return factor


def lmin(g: FloatArray) -> float:
    return float(np.linalg.eigvalsh(g)[0]) if g.size else 1.0


def lmax(g: FloatArray) -> float:
    return float(np.linalg.eigvalsh(g)[-1]) if g.size else 0.0


def _schur_eigvals(t: FloatArray) -> ComplexArray:
    """Eigenvalues of a real quasi-triangular Schur form, in float64 (1×1 and 2×2 blocks)."""
    n = t.shape[0]
    out = np.empty(n, dtype=complex)
    i = 0
    while i < n:
        if i + 1 < n and t[i + 1, i] != 0.0:
            out[i : i + 2] = np.linalg.eigvals(t[i : i + 2, i : i + 2])
            i += 2
        else:
            out[i] = t[i, i]
            i += 1
    return out


def lyapunov_sep(eig: ComplexArray) -> float:
    """``min_{i,j} |λ_i + λ_j|``: zero iff ``X ↦ AᵀX + XA`` is singular."""
    return float(np.min(np.abs(eig[:, None] + eig[None, :])))


def slycot_lyapunov(a: FloatArray, c: FloatArray) -> tuple[FloatArray, ComplexArray, float]:
    """Solve ``AᵀX + XA = C`` with slycot SB03MD; return ``(X, eig(A), scale)``.

    Raises
    ------
    SolverError
        If SB03MD fails (``stats["cause"] == "slycot"``) or A and −Aᵀ have (numerically)
        common eigenvalues (``stats["cause"] == "singular_lyapunov"``).
    """
    import slycot
    from slycot.exceptions import SlycotError, SlycotResultWarning

    # slycot casts the eigenvalues it returns (unused here) to complex64: past 3.4e38 that
    # cast overflows and numpy warns; the solution itself is float64
    with warnings.catch_warnings(), np.errstate(over="ignore"):
        warnings.simplefilter("error", SlycotResultWarning)
        try:
            t_schur, _, x, scale, _, _, _ = slycot.sb03md57(
                np.asfortranarray(a.copy()),
                C=np.asfortranarray(sym(c).copy()),
                dico="C",
                job="X",
                fact="N",
                trana="N",
            )
        except SlycotResultWarning as exc:
            raise SolverError(
                f"Lyapunov solve (slycot SB03MD) for AᵀΩ + ΩA = R: A and -Aᵀ have common or "
                f"very close eigenvalues, so the solution is not unique ({exc})",
                stats={"cause": "singular_lyapunov"},
            ) from None
        except (SlycotError, ValueError, ArithmeticError) as exc:
            # SB03MD reports A and −Aᵀ with (nearly) common eigenvalues as INFO = n+1.
            eig = np.linalg.eigvals(a)
            sep = lyapunov_sep(eig)
            if sep <= 1e3 * SEP_RTOL * max(float(np.linalg.norm(a, 1)), 1e-300):
                raise SolverError(
                    "Lyapunov solve (slycot SB03MD) for AᵀX + XA = C: A and -Aᵀ have common or "
                    f"very close eigenvalues (min |λ_i + λ_j| = {sep:.3g}), so the solution is "
                    f"not unique ({exc})",
                    stats={"cause": "singular_lyapunov"},
                ) from None
            raise SolverError(
                f"Lyapunov solve (slycot SB03MD) failed: {exc}", stats={"cause": "slycot"}
            ) from None
    if not (scale > 0 and np.all(np.isfinite(x))):
        raise SolverError(
            "Lyapunov solve (slycot SB03MD) returned a non-finite solution",
            stats={"cause": "slycot"},
        )
    return sym(np.asarray(x) / scale), _schur_eigvals(np.asarray(t_schur)), float(scale)


def sign_split(r: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(R₊, R₋)`` with ``R = R₊ − R₋``, both PSD; eigenvalues below 1e-14‖R‖ dropped."""
    w, u = np.linalg.eigh(r)
    cut = SIGN_RTOL * float(np.max(np.abs(w))) if w.size else 0.0
    wp = np.where(w > cut, w, 0.0)
    wm = np.where(w < -cut, -w, 0.0)
    return sym((u * wp) @ u.T), sym((u * wm) @ u.T)


def inv_spd(omega: FloatArray) -> FloatArray:
    try:
        c = sla.cho_factor(omega)
    except np.linalg.LinAlgError:
        raise SolverError(
            "the precision Ω(t) lost positive definiteness", status=Status.BLOWUP
        ) from None
    return sym(sla.cho_solve(c, np.eye(omega.shape[0])))


#: A covariance counts as positive definite (relative test) when λ_min > this × λ_max.
PD_RTOL = 1e-10


def is_pd(cov: FloatArray, rtol: float = PD_RTOL) -> bool:
    """Whether ``cov`` is positive definite *relative to its scale*: ``λ_min > rtol λ_max``.

    Stricter than :func:`gtcontrol._linalg.is_spd` (Cholesky succeeds): equilibria and Newton
    starts with condition number above ``1/rtol`` count as singular.
    """
    w = np.linalg.eigvalsh(sym(cov))
    return bool(w.size and w[-1] > 0 and w[0] > rtol * w[-1])


def field_rate(layer: Layer, cov: FloatArray) -> float:
    """Rate scale of the covariance field: ``‖A‖₂ + 2 Σ_h ‖V_h‖₂‖B_h‖₂ ‖Σ‖₂`` (1 if that is 0).

    ``1/field_rate`` is one time constant; the default search/integration depths, the first
    step of the certified march and the flow starts of the Newton search are multiples of it.
    The norms are :func:`~._field_kernel.norm2` (exact up to d = 64, an estimate
    beyond) and factored heads are never formed as d×d matrices, so that a d = 1024 layer does
    not spend seconds in SVDs before any budget check.
    """
    a, _ = layer.affine_ffn()
    rate = norm2(a) + 2.0 * head_norm_sum(layer) * norm2(cov)
    return rate if rate > 0 else 1.0


def simulate_within(
    model: Layer, initial: Gaussian, T: float, budget: Budget | None, **kw: Any
) -> Trajectory:
    """:func:`gtcontrol.simulate` with the time left in ``budget`` as its ``time_limit``.

    A spent budget gives a tiny limit (the trajectory then reports ``BUDGET_EXHAUSTED``).
    """
    if budget is not None:
        rem = budget.remaining()
        if math.isfinite(rem):
            kw["time_limit"] = max(rem, 1e-6)
    return simulate(model, initial, T, **kw)


def remaining_limit(budget: Budget) -> float | None:
    """The time left in ``budget`` as a ``time_limit`` argument (``None`` without a deadline).

    Raises :class:`~gtcontrol._status.BudgetExhausted` when the budget is already spent.
    """
    budget.check()
    return budget.left_as_limit(1e-9)
