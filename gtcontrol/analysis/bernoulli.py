"""The algebraic Bernoulli equation ``AΣ + ΣAᵀ − ΣRΣ = 0``: positive-definite equilibria by slycot.

In the Riccati class (every head ``V_h = v_h I``, no noise; :mod:`gtcontrol.analysis.riccati`) a
positive-definite Σ solves the algebraic Bernoulli equation iff ``Ω = Σ⁻¹`` solves the Lyapunov
equation ``AᵀΩ + ΩA = R`` (slycot SB03MD), or, equivalently, Σ is the (anti-)stabilizing solution
of the CARE ``AΣ + ΣAᵀ − ΣRΣ + 0 = 0`` with ``G = R`` (slycot SB02MD). :func:`solve_bernoulli`
runs either route and says what it found.

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._display import Axes, SummaryItems
from .._linalg import RANK_RTOL, FloatArray, sym
from .._status import OutcomeOrInfeasible, ResultFields, Status
from .._validation import frozen
from ..errors import InvalidParametersError, SolverError
from ._core import SEP_RTOL, ComplexArray, lyapunov_sep, slycot_lyapunov
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
        ``Status.SUCCESS`` (the equilibrium, unique in the Lyapunov route);
        ``Status.INFEASIBLE`` (proved: no positive-definite equilibrium); ``Status.FAILED``
        with ``degenerate`` (the Lyapunov operator ``Ω ↦ AᵀΩ + ΩA`` is singular: A has
        eigenvalues with ``λ_i + λ_j = 0``, e.g. on the imaginary axis; equilibria are then not
        isolated or do not exist), or without it when the CARE route does not apply (neither A
        nor −A Hurwitz; ``stats["not_applicable"]``) or slycot failed (the message says so).
    message
        What was found and why.
    method
        ``"lyapunov"`` (SB03MD) or ``"care"`` (SB02MD).
    eigvals_a
        Eigenvalues of A (from the Schur form the solver computed).
    degenerate
        True when the Lyapunov operator is (numerically) singular.
    stats
        ``seconds``, ``sep`` (``min |λ_i + λ_j|``), ``rcond`` (CARE), ``scale`` (Lyapunov).
    """

    cov: FloatArray | None
    omega: FloatArray | None
    method: str
    eigvals_a: ComplexArray
    degenerate: bool = False

    def _summary_items(self) -> SummaryItems:
        return [
            ("method", self.method),
            ("cov", self.cov),
            ("degenerate", self.degenerate),
            ("eigvals_a", self.eigvals_a),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        draw_spectrum(ax, self.eigvals_a, label="A", title=f"eigenvalues of A ({self.method})")


def solve_bernoulli(form: RiccatiForm, *, method: str = "lyapunov") -> BernoulliSolution:
    """Solve the algebraic Bernoulli equation ``AΣ + ΣAᵀ − ΣRΣ = 0`` for Σ* ≻ 0 with slycot.

    ``method="lyapunov"``: a positive-definite Σ solves it iff ``Ω = Σ⁻¹`` solves the Lyapunov
    equation ``AᵀΩ + ΩA = R`` (multiply by Ω on both sides). When the Lyapunov operator is
    non-singular (``λ_i + λ_j ≠ 0`` for all eigenvalues of A) the solution is unique, so there is
    exactly one positive-definite equilibrium if Ω ≻ 0 and none otherwise. Solved by SB03MD.

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
    try:
        c = sla.cho_factor(omega)
    except np.linalg.LinAlgError:
        lo = float(np.linalg.eigvalsh(omega)[0])
        stats["seconds"] = time.perf_counter() - clock
        return _no_equilibrium(
            Status.INFEASIBLE,
            "no positive-definite equilibrium: the unique solution Ω of AᵀΩ + ΩA = R has "
            f"smallest eigenvalue {lo:.6g} ≤ 0",
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
        return _no_equilibrium(
            Status.INFEASIBLE,
            f"no positive-definite equilibrium: the {'anti-' if sort == 'U' else ''}"
            f"stabilizing CARE solution has smallest eigenvalue {w[0]:.6g}",
            "care",
            eig,
            stats,
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
