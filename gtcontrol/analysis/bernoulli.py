"""The algebraic Bernoulli equation ``AΣ + ΣAᵀ − ΣRΣ = 0``: positive-definite equilibria by slycot.

In the Riccati class (every head ``V_h = v_h I``, no noise; :mod:`gtcontrol.analysis.riccati`) a
positive-definite Σ solves the algebraic Bernoulli equation iff ``Ω = Σ⁻¹`` solves the Lyapunov
equation ``AᵀΩ + ΩA = R`` (slycot SB03MD), or, equivalently, Σ is the (anti-)stabilizing solution
of the CARE ``AΣ + ΣAᵀ − ΣRΣ + 0 = 0`` with ``G = R`` (slycot SB02MD). :func:`solve_bernoulli`
runs either route and says what it found.

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._display import Axes
from .._linalg import RANK_RTOL, FloatArray, sym
from .._status import OutcomeOrInfeasible, ResultFields, Status
from .._validation import frozen
from ..errors import InvalidParametersError, SolverError
from ._core import (
    SEP_RTOL,
    ComplexArray,
    exact_definiteness,
    exact_solve,
    lyapunov_certificate,
    lyapunov_sep,
    slycot_lyapunov,
)
from .riccati import RiccatiForm

__all__ = ["BernoulliSolution", "solve_bernoulli"]


@dataclass(frozen=True, eq=False)
class BernoulliSolution(ResultFields, OutcomeOrInfeasible):
    """Positive-definite solution of ``AΣ + ΣAᵀ − ΣRΣ = 0`` from one slycot solver.

    Attributes
    ----------
    cov
        Σ* (``None`` when there is no positive-definite solution or the problem is degenerate).
    omega
        The precision ``Ω* = Σ*⁻¹`` (Lyapunov method: the Lyapunov solution even when indefinite).
    status
        ``Status.SUCCESS`` (the equilibrium, unique in the Lyapunov route; there Ω ≻ 0 holds
        beyond the solve's error bound ``stats["omega_error"]``, or in rational arithmetic);
        ``Status.INFEASIBLE`` (proved for the form's floats: Ω is not positive definite beyond
        that bound, or in rational arithmetic for d ≤ 4; the CARE route claims it only with
        the Lyapunov route's proof); ``Status.FAILED`` with ``degenerate`` (the Lyapunov
        operator ``Ω ↦ AᵀΩ + ΩA`` is singular: A has eigenvalues with ``λ_i + λ_j = 0``, e.g.
        on the imaginary axis; equilibria are then not isolated or do not exist), or without
        it when the CARE route does not apply (neither A nor −A Hurwitz;
        ``stats["not_applicable"]``), slycot failed, or the float data cannot decide
        (``stats["undecided"]``: λ_min Ω within the error bound; or Ω ≻ 0 exactly but
        singular to working precision).
    message
        What was found and why.
    method
        ``"lyapunov"`` (SB03MD) or ``"care"`` (SB02MD).
    eigvals_a
        Eigenvalues of A (from the Schur form the solver computed).
    degenerate
        True when the Lyapunov operator is (numerically) singular.
    stats
        ``seconds``, ``sep`` (``min |λ_i + λ_j|``), ``rcond`` (CARE), ``scale`` (Lyapunov),
        ``omega_error`` (bound on ``‖Ω_exact − Ω‖₂``; ``inf``: none) and ``omega_decided``.
    """

    cov: FloatArray | None
    omega: FloatArray | None
    method: str
    eigvals_a: ComplexArray
    degenerate: bool = False

    _summary_fields = ("method", "cov", "degenerate", "eigvals_a")

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        draw_spectrum(ax, self.eigvals_a, label="A", title=f"eigenvalues of A ({self.method})")


def solve_bernoulli(form: RiccatiForm, *, method: str = "lyapunov") -> BernoulliSolution:
    """Solve the algebraic Bernoulli equation ``AΣ + ΣAᵀ − ΣRΣ = 0`` for Σ* ≻ 0 with slycot.

    ``method="lyapunov"``: a positive-definite Σ solves it iff ``Ω = Σ⁻¹`` solves the Lyapunov
    equation ``AᵀΩ + ΩA = R`` (multiply by Ω on both sides). When the Lyapunov operator is
    non-singular (``λ_i + λ_j ≠ 0`` for all eigenvalues of A) the solution is unique, so there is
    exactly one positive-definite equilibrium if Ω ≻ 0 and none otherwise. Solved by SB03MD;
    the sign of Ω is decided beyond a bound on the solve's error (:func:`omega_decision`).

    ``method="care"``: SB02MD solves ``QₛAₛ``-form CAREs ``Aₛᵀ X + X Aₛ − X G X + Q = 0``;
    with ``Aₛ = Aᵀ``, ``G = R``, ``Q = 0`` this is the Bernoulli equation. Its invariant-subspace
    solution with ``Aᵀ − RΣ`` having the spectrum of ``−A`` is Σ*; SB02MD returns it with
    ``sort="S"`` when −A is Hurwitz and ``sort="U"`` when A is Hurwitz (otherwise the sorted
    subspace mixes and gives a different, singular equilibrium: ``Status.FAILED`` with
    ``stats["not_applicable"]``).

    Parameters
    ----------
    form
        The Riccati data of a noise-free layer (:func:`gtcontrol.riccati_form`).
    method
        ``"lyapunov"`` (SB03MD) or ``"care"`` (SB02MD).

    Returns
    -------
    BernoulliSolution
        A slycot failure is ``Status.FAILED`` with slycot's message, never an exception.

    Raises
    ------
    InvalidParametersError
        If ``form`` is not a :class:`RiccatiForm`, has noise, or the method is unknown.

    Examples
    --------
    The positive-definite equilibrium of ``a = 1``, ``vB = −2``: ``σ* = 0.5``.

    >>> from gtcontrol import Layer, riccati_form, solve_bernoulli
    >>> sol = solve_bernoulli(riccati_form(Layer(A=[[1.0]], B=[[2.0]], V=-1.0)))
    >>> sol.status, round(float(sol.cov[0, 0]), 12)
    (<Status.SUCCESS: 'success'>, 0.5)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    if not isinstance(form, RiccatiForm):
        raise InvalidParametersError(f"form: expected a RiccatiForm, got {type(form).__name__}")
    if not form.is_bernoulli:
        raise InvalidParametersError(
            "form.Q: the Bernoulli equation needs Q = G Gᵀ = 0 (a layer without noise); with "
            "noise it is the filter ARE (gtcontrol filtering) or use equilibria(method='newton')"
        )
    if method not in ("lyapunov", "care"):
        raise InvalidParametersError(f"method: expected 'lyapunov' or 'care', got {method!r}")
    clock = time.perf_counter()
    try:
        return _bernoulli_lyapunov(form) if method == "lyapunov" else _bernoulli_care(form)
    except SolverError as exc:
        return _no_equilibrium(
            Status.FAILED,
            str(exc),
            method,
            np.linalg.eigvals(form.A),
            {"seconds": time.perf_counter() - clock, "cause": exc.stats.get("cause")},
        )


def _no_equilibrium(
    status: Status,
    message: str,
    method: str,
    eig: ComplexArray,
    stats: Mapping[str, Any],
    *,
    omega: FloatArray | None = None,
    degenerate: bool = False,
) -> BernoulliSolution:
    """A solution without Σ* (``cov=None``): why, from which route, with its statistics."""
    return BernoulliSolution(
        cov=None,
        omega=None if omega is None else frozen(omega),
        status=status,
        message=message,
        method=method,
        eigvals_a=eig,
        degenerate=degenerate,
        stats=stats,
    )


def _degenerate(
    form: RiccatiForm, eig: ComplexArray, method: str, sep: float, clock: float
) -> BernoulliSolution:
    bad = eig[np.argmin(np.min(np.abs(eig[:, None] + eig[None, :]), axis=1))]
    return _no_equilibrium(
        Status.FAILED,
        "the Lyapunov operator Ω ↦ AᵀΩ + ΩA is singular: A has eigenvalues with "
        f"λ_i + λ_j ≈ 0 (e.g. {bad:.6g}; min |λ_i + λ_j| = {sep:.3g}), such as eigenvalues "
        "on the imaginary axis; positive-definite equilibria are then not isolated or do "
        "not exist",
        method,
        eig,
        {"sep": sep, "seconds": time.perf_counter() - clock},
        degenerate=True,
    )


def _bernoulli_lyapunov(form: RiccatiForm) -> BernoulliSolution:
    clock = time.perf_counter()
    a, r = form.A, form.R
    na = float(np.linalg.norm(a, 1))
    try:
        omega, eig, scale = slycot_lyapunov(a, r)
    except SolverError as exc:
        if exc.stats.get("cause") != "singular_lyapunov":
            raise
        eig = np.linalg.eigvals(a)
        return _degenerate(form, eig, "lyapunov", lyapunov_sep(eig), clock)
    sep = lyapunov_sep(eig)
    if na == 0.0 or sep <= SEP_RTOL * na:
        return _degenerate(form, eig, "lyapunov", sep, clock)
    stats: dict[str, Any] = {"sep": sep, "scale": scale}
    dec = omega_decision(a, r, omega, eig, exact=lambda: (a, r))
    stats.update(omega_error=dec.error, omega_decided=dec.how, lyapunov_inverse=dec.inverse)
    lo = dec.lowest
    if dec.sign == "not_pd":
        stats["seconds"] = time.perf_counter() - clock
        return _no_equilibrium(
            Status.INFEASIBLE,
            "no positive-definite equilibrium: the unique solution Ω of AᵀΩ + ΩA = R has "
            f"smallest eigenvalue {lo:.6g} ≤ 0 ({dec.how})",
            "lyapunov",
            eig,
            stats,
            omega=omega,
        )
    if dec.sign != "pd":
        stats["seconds"] = time.perf_counter() - clock
        return _no_equilibrium(
            Status.FAILED,
            f"undecided at double precision: the solution Ω of AᵀΩ + ΩA = R has smallest "
            f"eigenvalue {lo:.3g}, within the solve's error bound {dec.error:.3g}, so whether a "
            "positive-definite equilibrium exists is not decided by the float data",
            "lyapunov",
            eig,
            {**stats, "undecided": True},
            omega=omega,
        )
    try:
        c = sla.cho_factor(omega)
    except np.linalg.LinAlgError:  # Ω ≻ 0 in exact arithmetic, but not to working precision
        c = None
    if c is None:
        stats["seconds"] = time.perf_counter() - clock
        return _no_equilibrium(
            Status.FAILED,
            "a positive-definite equilibrium exists (Ω ≻ 0, "
            f"{dec.how}) but Ω is singular to working precision (smallest eigenvalue "
            f"{lo:.3g}): Σ* = Ω⁻¹ cannot be formed in double precision",
            "lyapunov",
            eig,
            stats,
            omega=omega,
        )
    with np.errstate(over="ignore", invalid="ignore"):
        cov = sym(sla.cho_solve(c, np.eye(form.dim)))
    stats["seconds"] = time.perf_counter() - clock
    if not np.all(np.isfinite(cov)):
        lo = float(np.linalg.eigvalsh(omega)[0])
        return _no_equilibrium(
            Status.FAILED,
            "the positive-definite equilibrium Σ* = Ω⁻¹ exists but overflows float64 "
            f"(smallest eigenvalue of Ω: {lo:.3g}); rescale the layer",
            "lyapunov",
            eig,
            stats,
            omega=omega,
        )
    return BernoulliSolution(
        cov=frozen(cov),
        omega=frozen(omega),
        status=Status.SUCCESS,
        message="unique positive-definite equilibrium Σ* = Ω⁻¹, AᵀΩ + ΩA = R (slycot SB03MD)",
        method="lyapunov",
        eigvals_a=eig,
        stats=stats,
    )


def _bernoulli_care(form: RiccatiForm) -> BernoulliSolution:
    import slycot
    from slycot.exceptions import SlycotError

    clock = time.perf_counter()
    a, r = form.A, form.R
    d = form.dim
    eig = np.linalg.eigvals(a)
    sep = lyapunov_sep(eig)
    na = float(np.linalg.norm(a, 1))
    if na == 0.0 or sep <= SEP_RTOL * na:
        return _degenerate(form, eig, "care", sep, clock)
    if np.all(eig.real > 0):
        sort = "S"
    elif np.all(eig.real < 0):
        sort = "U"
    else:
        return _no_equilibrium(
            Status.FAILED,
            "CARE route not applicable: A has eigenvalues on both sides of the imaginary axis, "
            "so neither the stabilizing nor the anti-stabilizing CARE solution is the "
            "positive-definite equilibrium",
            "care",
            eig,
            {"sep": sep, "not_applicable": True, "seconds": time.perf_counter() - clock},
        )
    try:
        x, rcond, _, _, _, _ = slycot.sb02md(
            d,
            np.asfortranarray(a.T.copy()),
            np.asfortranarray(r.copy()),
            np.zeros((d, d), order="F"),
            "C",
            sort=sort,
        )
    except (SlycotError, ValueError, ArithmeticError) as exc:
        raise SolverError(
            f"CARE solve (slycot SB02MD, G = R, Q = 0) failed: {exc}", stats={"cause": "slycot"}
        ) from None
    x = sym(np.asarray(x))
    stats = {"sep": sep, "rcond": float(rcond), "sort": sort}
    if not np.all(np.isfinite(x)):
        raise SolverError(
            "CARE solve (slycot SB02MD) returned a non-finite solution", stats={"cause": "slycot"}
        )
    w = np.linalg.eigvalsh(x)
    stats["seconds"] = time.perf_counter() - clock
    if w[0] <= RANK_RTOL * max(w[-1], 0.0):
        # The CARE solution carries no error bound of its own: the proof is the Lyapunov one.
        lyap = _bernoulli_lyapunov(form)
        proved = lyap.status is Status.INFEASIBLE
        return _no_equilibrium(
            Status.INFEASIBLE if proved else Status.FAILED,
            f"{'no' if proved else 'undecided at double precision whether there is a'} "
            f"positive-definite equilibrium: the {'anti-' if sort == 'U' else ''}"
            f"stabilizing CARE solution has smallest eigenvalue {w[0]:.6g}"
            + ("" if proved else f", and the Lyapunov route says: {lyap.message}"),
            "care",
            eig,
            {**stats, "omega_error": lyap.stats.get("omega_error", math.inf)},
        )
    return BernoulliSolution(
        cov=frozen(x),
        omega=None,
        status=Status.SUCCESS,
        message=(
            f"positive-definite equilibrium from the {'anti-' if sort == 'U' else ''}stabilizing "
            "CARE solution (slycot SB02MD, G = R, Q = 0)"
        ),
        method="care",
        eigvals_a=eig,
        stats=stats,
    )


#: Largest d for which the solution of ``AᵀΩ + ΩA = R`` is decided in rational arithmetic when
#: the float bound cannot decide (a Kronecker system of d² unknowns).
_EXACT_LYAPUNOV_MAX_DIM = 4

#: Largest d for which the eigenvector bound on the inverse Lyapunov operator is formed (an
#: eigendecomposition and an SVD of A's eigenvectors) when neither A nor −A is Hurwitz.
_EIGVEC_BOUND_MAX_DIM = 1024


@dataclass(frozen=True)
class OmegaDecision:
    """Definiteness of the exact solution of ``AᵀΩ + ΩA = R`` for given float data.

    ``sign``: ``"pd"``, ``"not_pd"`` or ``"undecided"``; ``error``: a bound on
    ``‖Ω_exact − Ω‖₂`` for the computed Ω (``inf``: none, e.g. no bound on the inverse
    Lyapunov operator could be proved); ``inverse``: the bound on ``‖L⁻¹‖₂`` it used
    (``inf``: none, so the solution is not proved unique); ``how``: in words; ``lowest``: the
    computed λ_min Ω.
    """

    sign: str
    error: float
    inverse: float
    how: str
    lowest: float = math.nan


def lyapunov_inverse_bound(a: FloatArray, eig: ComplexArray) -> float:
    """A bound ``p`` on the inverse of ``L(X) = AᵀX + XA``: ``‖L⁻¹(Y)‖₂ ≤ p‖Y‖₂`` (``inf``: none).

    A (or −A) Hurwitz: the Lyapunov certificate (:func:`lyapunov_certificate`). Otherwise, for
    ``d ≤ 1024``, from A's computed eigenvectors X: ``X⁻¹AX = Λ + Δ`` with ``‖Δ‖ ≤ δ`` (the
    residual, rounding included) gives ``‖L⁻¹‖_F ≤ κ(X)²/(min|λ_i + λ_j| − 2δ)``.
    """
    d = int(a.shape[0])
    for sign, side in ((-1.0, eig.real < 0), (1.0, eig.real > 0)):
        if np.all(side):
            cert = lyapunov_certificate(a, sign)
            if cert is not None:
                return cert[1]
    if d > _EIGVEC_BOUND_MAX_DIM:
        return math.inf
    u = float(np.finfo(np.float64).eps) / 2
    gam = 4.0 * (d + 2) * u
    lam, vec = np.linalg.eig(a)
    if not np.all(np.isfinite(vec)):
        return math.inf
    res = a @ vec - vec * lam
    res_err = gam * float(np.linalg.norm(np.abs(a) @ np.abs(vec) + np.abs(vec) * np.abs(lam)))
    sv = np.linalg.svd(vec, compute_uv=False)
    s_min = float(sv[-1]) - 4.0 * d * u * float(sv[0])
    if not s_min > 0:
        return math.inf
    inv_norm = (1.0 + gam) / s_min
    delta = inv_norm * (float(np.linalg.norm(res)) + res_err)
    sums = np.abs(lam[:, None] + lam[None, :])
    sep = float(np.min(sums)) - 2.0 * u * float(np.max(np.abs(lam)))
    if not sep > 2.0 * delta:
        return math.inf
    kappa2 = (float(sv[0]) * (1.0 + gam) * inv_norm) ** 2
    return math.sqrt(d) * kappa2 / (sep - 2.0 * delta) * (1.0 + gam)


def omega_decision(
    a: FloatArray,
    r: FloatArray,
    omega: FloatArray,
    eig: ComplexArray,
    *,
    a_err: float = 0.0,
    r_err: float = 0.0,
    exact: Callable[[], tuple[Any, Any]] | None = None,
    inverse: float | None = None,
) -> OmegaDecision:
    """Whether ``Ω_exact`` (``AᵀΩ + ΩA = R`` with A, R within ``a_err``, ``r_err`` of the floats
    given, spectral norm) is positive definite, beyond the solve's rounding.

    The computed Ω is within ``p(‖AᵀΩ + ΩA − R‖ + rounding)`` of the float data's solution (p
    from :func:`lyapunov_inverse_bound`, or ``inverse`` when already known for this A), and
    that solution within ``p'(r_err + 2 a_err‖Ω‖)``, ``p' = p/(1 − 2 a_err p)``, of the exact
    data's. When the bound cannot decide, ``exact()`` (the exact data, as floats or Fraction
    matrices) is solved in rational arithmetic for ``d ≤ 4``.
    """
    d = int(a.shape[0])
    p = lyapunov_inverse_bound(a, eig) if inverse is None else inverse
    err = math.inf
    if math.isfinite(p) and 2.0 * a_err * p < 1.0:
        base = _solve_error(a, omega, r, p)
        p_exact = p / (1.0 - 2.0 * a_err * p)
        err = base + p_exact * (r_err + 2.0 * a_err * (float(np.linalg.norm(omega)) + base))
        p = p_exact
    else:
        p = math.inf
    lo = float(np.linalg.eigvalsh(omega)[0])
    margin = err + 8.0 * d * float(np.finfo(np.float64).eps) * float(np.linalg.norm(omega))
    how = f"λ_min Ω beyond the solve's error bound {err:.2g}"
    if lo > margin:
        return OmegaDecision("pd", err, p, how, lo)
    if lo < -margin:
        return OmegaDecision("not_pd", err, p, how, lo)
    if exact is not None and d <= _EXACT_LYAPUNOV_MAX_DIM:
        sign = exact_lyapunov_definiteness(*exact())
        if sign is not None:
            how = "decided in rational arithmetic on the float data"
            return OmegaDecision("pd" if sign == "pd" else "not_pd", err, p, how, lo)
    return OmegaDecision("undecided", err, p, f"λ_min Ω within the error bound {err:.2g}", lo)


def _solve_error(a: FloatArray, x: FloatArray, c: FloatArray, p_norm: float) -> float:
    """Bound on ``‖X_exact − X‖₂`` for ``AᵀX + XA = C`` from the residual (Frobenius norms,
    which bound the spectral ones without an SVD; the residual's own rounding included)."""
    d = int(a.shape[0])
    gam = 4.0 * (d + 2) * float(np.finfo(np.float64).eps)
    res = a.T @ x + x @ a - c
    abs_a, abs_x = np.abs(a), np.abs(x)
    rounding = abs_a.T @ abs_x + abs_x @ abs_a + np.abs(c)
    top = float(np.linalg.norm(res)) + gam * float(np.linalg.norm(rounding))
    return p_norm * top * (1.0 + gam)


def exact_lyapunov_definiteness(a: Any, r: Any) -> str | None:
    """``"pd"``, ``"psd"`` or ``"indefinite"`` for the exact solution of ``AᵀΩ + ΩA = R``
    (entries floats or Fractions), or ``None`` when the operator is exactly singular."""
    d = len(a)
    aq = [
        [Fraction(x) if isinstance(x, Fraction) else Fraction(float(x)) for x in row] for row in a
    ]
    rq = [
        [Fraction(x) if isinstance(x, Fraction) else Fraction(float(x)) for x in row] for row in r
    ]
    n = d * d
    kron = [[Fraction(0)] * n for _ in range(n)]
    for i in range(d):
        for j in range(d):
            for k in range(d):
                kron[i * d + j][k * d + j] += aq[k][i]
                kron[i * d + j][i * d + k] += aq[k][j]
    sol = exact_solve(kron, [rq[i][j] for i in range(d) for j in range(d)])
    if sol is None:
        return None
    return exact_definiteness([[sol[i * d + j] for j in range(d)] for i in range(d)])
