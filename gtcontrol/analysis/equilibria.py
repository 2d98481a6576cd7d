"""Positive-definite equilibria of the covariance dynamics, their stability and the mean matrix.

A time-invariant layer moves the covariance by ``dΣ/dt = F(Σ) = MΣ + ΣMᵀ``,
``M = A + Σ_h V_h Σ B_h`` (docs/theory.md §2). :func:`equilibria` finds the positive-definite
solutions of ``F(Σ) = 0``. In the Riccati class (every ``V_h = v_h I``, no noise) the unique one
is ``Σ* = Ω⁻¹`` with ``AᵀΩ + ΩA = R`` (slycot SB03MD, :mod:`gtcontrol.analysis.bernoulli`),
cross-checked against the CARE route (SB02MD). For any V, Newton–Kantorovich
(:mod:`gtcontrol.analysis.newton`) from several starts — endpoints of the forward and reversed
flows, multiples of I, random matrices — with deflation of every root already found (and of
Σ = 0, always a root). Each :class:`Equilibrium` carries its residual, the spectrum of DF on
symmetric matrices, its spectral abscissa, ``stable`` and the mean matrix
``K = A + Σ_h V_h (I + Σ* B_h)`` (the mean obeys ``dm/dt = K m + b`` near Σ*).

Reference: the paper cited in :mod:`gtcontrol`, §4 (deflation: the reference in
:mod:`gtcontrol.analysis.newton`).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigs

from .._display import Axes, Displayable, SummaryItems
from .._linalg import FloatArray, sym, unvech, vech
from .._status import Budget, BudgetExhausted, OutcomeOrInfeasible, ResultFields, Status
from .._validation import as_float_array, as_time_limit, frozen, option_values
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import affine_velocity
from ..model.params import Layer
from ._core import ComplexArray, field_rate, is_pd, simulate_within
from .bernoulli import solve_bernoulli
from .newton import (
    DEFAULT_WORK_CAP,
    NewtonResult,
    WorkMeter,
    _Jacobian,
    _jacobian_parts,
    _kron_sym,
    _NewtonOptions,
    _rel_residual,
    _typical_scale,
    field_flops,
    newton_options,
    newton_run,
)
from .riccati import RiccatiForm, _bernoulli_form

__all__ = [
    "EquilibriaResult",
    "Equilibrium",
    "equilibria",
    "equilibrium_at",
    "mean_matrix",
]

#: Two equilibria closer than this (relative, Frobenius) are the same.
_DISTINCT_RTOL = 1e-6


#: Spectra of DF are computed densely on Sym up to this dimension, by ARPACK beyond.
_DENSE_SPECTRUM_MAX_DIM = 50


#: The two slycot routes must agree to this relative difference (else status "inconsistent").
_CROSS_CHECK_RTOL = 1e-8


#: Deflation retries one start at most this many times (once per new root found).
_MAX_ROOTS_PER_START = 8

#: At most this many user-given extra starts.
_MAX_STARTS = 64

#: Right-hand-side evaluations allowed to one flow-start integration (a stiff or slow flow is
#: abandoned, its start skipped; about 0.3 s at d = 3).
_FLOW_MAX_EVALS = 6_000

#: Newton iterations allowed to the whole search by default (all starts and deflation retries
#: together): a finite cap on total work independent of ``time_limit``.
_TOTAL_MAX_ITER = 1_500


@dataclass(frozen=True, eq=False)
class Equilibrium(Displayable):
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
    spectrum: ComplexArray
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

    def _summary_items(self) -> SummaryItems:
        return [
            ("dim", self.dim),
            ("stable", self.stable),
            ("spectral_abscissa", self.spectral_abscissa),
            ("residual", self.residual),
            ("method", self.method),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        draw_spectrum(ax, self.spectrum, label="DF(Σ*)", title="spectrum at the equilibrium")


def _mean_matrix(layer: Layer, cov: FloatArray) -> FloatArray:
    # K m + b = M m + c(m) with c(m) = b + Σ_h V_h m, so K = M + Σ_h V_h (M from the field).
    m_mat, _ = affine_velocity(layer, np.zeros(layer.dim), cov)
    for v_h, _ in layer.heads:
        m_mat = m_mat + v_h
    return m_mat


def mean_matrix(layer: Layer, cov: Any) -> FloatArray:
    """``K = A + Σ_h V_h (I + Σ B_h)``: with Σ held fixed the mean obeys ``dm/dt = K m + b``.

    Formed as ``M + Σ_h V_h`` with M from :func:`gtcontrol.affine_velocity`
    (docs/theory.md §3–5). If K is Hurwitz at a limit covariance, ``m(t) → −K⁻¹ b``.

    Parameters
    ----------
    layer
        The layer.
    cov
        The covariance Σ held fixed (symmetric ``d×d``).

    Returns
    -------
    ndarray
        K, ``(d, d)``.

    Raises
    ------
    InvalidParametersError
        If ``cov`` is not a finite ``d×d`` array.
    """
    d = layer.dim
    return _mean_matrix(layer, sym(as_float_array("cov", cov, ndim=2, shape=(d, d))))


def _spectrum(
    layer: Layer, cov: FloatArray, form: RiccatiForm | None, eig_a: ComplexArray | None
) -> ComplexArray:
    d = layer.dim
    spec: ComplexArray
    if form is not None and eig_a is not None:
        # A − Σ*R = −Σ* Aᵀ Σ*⁻¹ at a positive-definite Riccati equilibrium: ν = −λ(A).
        nu = -eig_a
        i, j = np.triu_indices(d)
        spec = nu[i] + nu[j]
    elif d <= _DENSE_SPECTRUM_MAX_DIM:
        spec = np.linalg.eigvals(_kron_sym(*_jacobian_parts(layer, cov)))
    else:
        jac = _Jacobian(layer, cov)
        n = d * (d + 1) // 2
        op = LinearOperator(
            (n, n), matvec=lambda x: vech(jac(unvech(np.asarray(x).ravel(), d))), dtype=float
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

    Parameters
    ----------
    layer
        The layer.
    cov
        The candidate Σ* (symmetric ``d×d``).
    method
        Recorded in :attr:`Equilibrium.method`.
    iterations
        Recorded in :attr:`Equilibrium.iterations`.

    Returns
    -------
    Equilibrium

    Raises
    ------
    InvalidParametersError
        If ``cov`` is not a finite ``d×d`` array.
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
    eig_a: ComplexArray | None,
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
class EquilibriaResult(ResultFields, Sequence[Equilibrium], OutcomeOrInfeasible):
    """The positive-definite equilibria found, as a sequence of :class:`Equilibrium`.

    Attributes
    ----------
    equilibria
        Distinct positive-definite equilibria (possibly none).
    status
        ``Status.SUCCESS`` (equilibria found); ``Status.INFEASIBLE`` (none: proved in the
        Riccati class, ``proved``; a search result for Newton, which cannot prove absence);
        ``Status.FAILED`` (``degenerate``: a singular Lyapunov operator, e.g. A with eigenvalues
        on the imaginary axis, equilibria not isolated or absent; or the two slycot routes
        disagree, ``stats["cross_check"]["consistent"]`` false; or slycot failed);
        ``Status.BUDGET_EXHAUSTED`` (``time_limit`` ran out: the equilibria found so far).
    message
        Explanation with the numbers.
    method
        ``"lyapunov"`` or ``"newton"`` (or ``"care"`` when forced).
    proved
        True when the list is complete by a uniqueness argument (Riccati class).
    degenerate
        True when the Lyapunov operator ``Ω ↦ AᵀΩ + ΩA`` is singular (Riccati class).
    stats
        Cross-check differences, starts and their outcomes, timings.
    """

    equilibria: tuple[Equilibrium, ...]
    method: str
    proved: bool = False
    degenerate: bool = False

    def __len__(self) -> int:
        return len(self.equilibria)

    def __getitem__(self, i: Any) -> Any:
        return self.equilibria[i]

    def __iter__(self) -> Iterator[Equilibrium]:
        return iter(self.equilibria)

    def _summary_items(self) -> SummaryItems:
        return [
            ("found", len(self.equilibria)),
            ("stable", len(self.stable)),
            ("method", self.method),
            ("proved", self.proved),
            ("abscissas", [e.spectral_abscissa for e in self.equilibria]),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        for k, e in enumerate(self.equilibria):
            tag = "stable" if e.stable else "unstable"
            draw_spectrum(ax, e.spectrum, label=f"Σ*{k + 1} ({tag})")
        if not self.equilibria:
            draw_spectrum(ax, [])
        where = f"{len(self)} equilibri{'um' if len(self) == 1 else 'a'}"
        ax.set_title(f"spectra of DF at {where} ({self.status.value})", fontsize=10)

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
    tol: float = 1e-12,
    max_iter: int = 60,
    n_random: int = 5,
    seed: int = 0,
    kron_max_dim: int = 16,
    deflation_power: float = 2.0,
    deflation_shift: float = 1.0,
    work_cap: float = DEFAULT_WORK_CAP,
    time_limit: float | None = None,
    start_time_limit: float | None = None,
    options: Any = None,
) -> EquilibriaResult:
    """Positive-definite equilibria of the covariance dynamics ``F(Σ) = 0``.

    Riccati class (``method="auto"`` or ``"lyapunov"``): ``AΣ + ΣAᵀ − ΣRΣ = 0`` with Σ ≻ 0 iff
    ``Ω = Σ⁻¹`` solves ``AᵀΩ + ΩA = R`` (slycot SB03MD). If ``λ_i + λ_j ≠ 0`` for the
    eigenvalues of A the solution is unique: one equilibrium if Ω ≻ 0, provably none otherwise.
    ``cross_check`` (default: d ≤ 64) re-solves it as a CARE with zero constant term (SB02MD,
    ``G = R``) when −A or A is Hurwitz and requires agreement to 1e-8. If −A is Hurwitz and
    R ≻ 0 the equilibrium attracts every Σ0 ≻ 0 (see :func:`gtcontrol.analyze`).

    Any V (``method="newton"``, or ``"auto"`` outside the class): Newton–Kantorovich with
    deflation from the endpoints of short forward/reversed flows, ``starts``,
    ``s0·{1, 0.3, 3}·I`` and ``n_random`` random positive-definite matrices of size
    ``s0 = ‖A‖ / Σ_h‖V_h‖‖B_h‖``; Σ = 0 is deflated from the start. This finds equilibria, it
    cannot prove there are no others.

    Parameters
    ----------
    layer
        The layer.
    method
        ``"auto"``, ``"lyapunov"``, ``"care"`` (Riccati class) or ``"newton"``.
    cross_check
        Run the second slycot route (Riccati class); default ``d ≤ 64``.
    starts
        Extra Newton starts (symmetric ``d×d``).
    tol
        Newton: relative residual to reach, in ``(0, 1)``.
    max_iter
        Newton: iteration cap per run.
    n_random
        Newton: random positive-definite starts (≥ 0).
    seed
        Newton: seed of the random starts.
    kron_max_dim
        Newton: dense Kronecker steps up to this d, preconditioned GMRES beyond.
    deflation_power, deflation_shift
        Newton: deflation ``m(Σ) = Π_i ((‖Σ − Σ_i‖/s0)^{−p} + shift)`` of the roots found.
    work_cap
        Newton: cap on the floating-point work of the whole search (flops of the Jacobian
        applications, Schur forms and flow starts; default ``2e11``, about 10–40 s on one
        core at any d). Reaching it returns the equilibria found so far with
        ``Status.BUDGET_EXHAUSTED``; at d in the hundreds it bounds a default call where the
        iteration caps alone would not (a GMRES Jacobian application costs ``O(d³)``).
    time_limit
        Wall-clock limit of the whole search in seconds (``None``: none); running out returns
        the equilibria found so far with ``Status.BUDGET_EXHAUSTED``.
    start_time_limit
        Wall-clock limit per Newton start and per flow-start integration (``None``: only the
        overall limit); a start that runs out is abandoned and the search goes on. Independent
        of both limits the work is capped, so that a default call ends in seconds: each
        flow-start integration gets 6,000 right-hand-side evaluations (a stiff or slow flow is
        skipped), each Newton run ``max_iter`` iterations and the whole search 1,500 Newton
        iterations, after which the equilibria found so far are returned with
        ``Status.BUDGET_EXHAUSTED``.
    options
        Deprecated (``DeprecationWarning``): a ``NewtonOptions``; use the keywords above.

    Returns
    -------
    EquilibriaResult
        A failure of slycot is ``Status.FAILED`` with its message, never an exception.

    Raises
    ------
    InvalidParametersError
        On malformed input, or a Riccati-only method for a layer outside the class.

    Examples
    --------
    Scalar layer ``dσ/dt = 2aσ + 2cσ²`` with ``a = 1``, ``c = vB = −2``: ``σ* = −a/c = 0.5``,
    stable because ``DF(σ*) = −2a < 0``.

    >>> from gtcontrol import Layer, equilibria
    >>> res = equilibria(Layer(A=[[1.0]], B=[[2.0]], v=-1.0))
    >>> res.status, len(res), res.proved
    (<Status.SUCCESS: 'success'>, 1, True)
    >>> round(float(res[0].cov[0, 0]), 12), res[0].stable
    (0.5, True)

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
    opts = newton_options("equilibria", options, **option_values(_NewtonOptions, locals()))
    budget = Budget(as_time_limit(time_limit))
    per_start = as_time_limit(start_time_limit, "start_time_limit")
    form = _bernoulli_form(layer)
    if method in ("lyapunov", "care") and form is None:
        raise InvalidParametersError(
            f"method: {method!r} needs the Riccati class (every head V_h = v_h I) without noise; "
            "use 'newton'"
        )
    if form is not None and method != "newton":
        return _riccati_equilibria(layer, form, method, cross_check)
    return _newton_equilibria(layer, starts, opts, budget, per_start)


def _riccati_equilibria(
    layer: Layer, form: RiccatiForm, method: str, cross_check: bool | None
) -> EquilibriaResult:
    clock = time.perf_counter()
    primary = solve_bernoulli(form, method="care" if method == "care" else "lyapunov")
    stats: dict[str, Any] = {"primary": dict(primary.stats)}
    if primary.cov is None:
        stats["seconds"] = time.perf_counter() - clock
        return EquilibriaResult(
            equilibria=(),
            status=primary.status,
            message=primary.message,
            method=primary.method,
            proved=primary.status is Status.INFEASIBLE,
            degenerate=primary.degenerate,
            stats=stats,
        )
    eq = _make_equilibrium(
        layer, np.asarray(primary.cov), primary.method, 0, form, primary.eigvals_a
    )
    do_check = cross_check if cross_check is not None else form.dim <= 64
    status, message = Status.SUCCESS, primary.message
    if do_check:
        other = solve_bernoulli(form, method="lyapunov" if primary.method == "care" else "care")
        check: dict[str, Any] = {"method": other.method, "status": other.status}
        stats["cross_check"] = check
        if other.cov is not None:
            diff = float(np.linalg.norm(other.cov - eq.cov) / np.linalg.norm(eq.cov))
            _, rel_other = _rel_residual(layer, np.asarray(other.cov))
            check.update({"rel_diff": diff, "residual": rel_other})
            if diff > _CROSS_CHECK_RTOL:
                status = Status.FAILED
                message = (
                    f"the Lyapunov (SB03MD) and CARE (SB02MD) routes disagree by {diff:.3g} "
                    "relative: the equilibrium is ill-conditioned"
                )
            else:
                message += f"; cross-checked by {other.method} to {diff:.2g} relative"
        elif other.status is Status.INFEASIBLE:
            status = Status.FAILED
            message = f"{primary.method} found an equilibrium but {other.method} did not"
        check["consistent"] = status is Status.SUCCESS
    stats["seconds"] = time.perf_counter() - clock
    return EquilibriaResult(
        equilibria=(eq,),
        status=status,
        message=message,
        method=primary.method,
        proved=status is Status.SUCCESS,
        stats=stats,
    )


def _reversed(layer: Layer) -> Layer | None:
    """The layer whose covariance field is ``−F`` (negate A and every V_h), or ``None`` (noise).

    Its stable equilibria are the equilibria of ``layer`` whose linearization has every
    eigenvalue in the right half-plane, which the forward flow never reaches.
    """
    if layer.noise is not None and np.any(layer.noise):
        return None
    a, _ = layer.affine_ffn()
    return Layer(-a, heads=[(-v, b) for v, b in layer.heads], dim=layer.dim)


def _flow_start(
    layer: Layer, start: FloatArray, budget: Budget, work: WorkMeter
) -> FloatArray | None:
    """Endpoint of the moment flow from ``start`` after 20 time constants (None if it fails).

    At most ``_FLOW_MAX_EVALS`` field evaluations and 1/16 of the work left: at large d a flow
    start is cheap to skip, Newton is where the work pays.
    """
    cost = field_flops(layer) / 2 + WorkMeter.OVERHEAD
    max_evals = int(min(_FLOW_MAX_EVALS, work.left() / 16 / cost))
    if max_evals < 50:
        return None
    g = Gaussian(np.zeros(layer.dim), start)
    try:
        # Only a start for Newton is wanted: low accuracy is enough. A stiff flow may make the
        # integrator's LU warn; the start is then simply skipped, so the warning is not shown.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sla.LinAlgWarning)
            traj = simulate_within(
                layer,
                g,
                20.0 / field_rate(layer, start),
                budget,
                n_points=2,
                rtol=1e-5,
                atol=1e-10,
                method="RK45",
                max_evals=max_evals,
            )
    except (SolverError, InvalidParametersError, ValueError, BudgetExhausted):
        work.used += max_evals * cost
        return None
    work.used += int(traj.stats.get("nfev", max_evals)) * cost
    if traj.status is not Status.SUCCESS:
        return None
    end = np.asarray(traj.cov[-1])
    top = float(np.linalg.eigvalsh(end)[-1])
    if not np.all(np.isfinite(end)) or top <= 1e-8 * float(np.linalg.norm(start, 2)):
        return None
    return end


def _as_start_sequence(starts: Any) -> Sequence[Any]:
    """``starts`` as a sequence of matrices (a single array or a non-sequence is refused)."""
    if isinstance(starts, np.ndarray) and starts.ndim == 3:
        return list(starts)
    if isinstance(starts, (str, bytes, np.ndarray)) or not isinstance(starts, Sequence):
        raise InvalidParametersError(
            f"starts: expected a sequence of symmetric d×d matrices, got {type(starts).__name__}"
        )
    if len(starts) > _MAX_STARTS:
        raise InvalidParametersError(
            f"starts: expected at most {_MAX_STARTS} extra starts, got {len(starts)}"
        )
    return starts


def _start_list(
    layer: Layer,
    starts: Sequence[Any],
    opts: _NewtonOptions,
    budget: Budget,
    per_start: float | None,
    work: WorkMeter,
) -> list[FloatArray]:
    """Newton starts: flow endpoints first, then the given starts, multiples of I, random."""
    d = layer.dim
    s0 = _typical_scale(layer)
    rng = np.random.default_rng(opts.seed)
    base = [
        sym(as_float_array(f"starts[{i}]", s, ndim=2, shape=(d, d)))
        for i, s in enumerate(_as_start_sequence(starts))
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
            if lay is not None and is_pd(st) and not budget.exhausted:
                end = _flow_start(lay, st, budget.sub(per_start), work)
                if end is not None:
                    start_list.append(end)
    return start_list + base


def _newton_equilibria(
    layer: Layer,
    starts: Sequence[Any],
    opts: _NewtonOptions,
    budget: Budget,
    per_start: float | None,
) -> EquilibriaResult:
    clock = time.perf_counter()
    d = layer.dim
    work = WorkMeter(opts.work_cap)
    start_list = _start_list(layer, starts, opts, budget, per_start, work)
    known: list[FloatArray] = [np.zeros((d, d))]
    found: list[Equilibrium] = []
    outcomes: dict[str, int] = {}
    stopped = ""
    total_iter = 0
    try:
        for st in start_list:
            budget.check()
            # Deflation proper: after each new root, retry the same start with it deflated.
            for _ in range(_MAX_ROOTS_PER_START):
                if total_iter >= _TOTAL_MAX_ITER:
                    raise BudgetExhausted(
                        f"the cap of {_TOTAL_MAX_ITER} Newton iterations over all starts "
                        "was reached"
                    )
                res = newton_run(layer, st, known, opts, budget.sub(per_start), work)
                total_iter += res.iterations
                if res.stats["termination"] == "time_limit" and work.left() == 0.0:
                    raise BudgetExhausted(res.message)
                key = _record_root(layer, res, known, found)
                key = key or str(res.stats["termination"])
                outcomes[key] = outcomes.get(key, 0) + 1
                if key not in ("new", "not_positive_definite"):
                    break
    except BudgetExhausted as exc:
        stopped = exc.reason
    found.sort(key=lambda e: (not e.stable, -float(np.trace(e.cov))))
    stats = {
        "starts": len(start_list),
        "outcomes": outcomes,
        "newton_iterations": total_iter,
        "work_flops": work.used,
        "work_cap": work.cap,
        "seconds": time.perf_counter() - clock,
    }
    if stopped:
        status = Status.BUDGET_EXHAUSTED
        message = (
            f"deflated Newton stopped ({stopped}) with {len(found)} positive-definite "
            f"equilibria found (outcomes {outcomes})"
        )
    elif found:
        status = Status.SUCCESS
        message = (
            f"{len(found)} positive-definite equilibria found by deflated Newton from "
            f"{len(start_list)} starts"
        )
    else:
        status = Status.INFEASIBLE
        message = (
            f"no positive-definite equilibrium found by deflated Newton from {len(start_list)} "
            f"starts (outcomes {outcomes}); this is a search result, not a proof"
        )
    return EquilibriaResult(
        equilibria=tuple(found), status=status, message=message, method="newton", stats=stats
    )


def _record_root(
    layer: Layer, res: NewtonResult, known: list[FloatArray], found: list[Equilibrium]
) -> str:
    """File a Newton outcome: ``"new"``, ``"duplicate"``, ``"not_positive_definite"`` or ``""``
    (not converged). New roots are appended to ``known`` (and PD ones to ``found``)."""
    if not res.success:
        return ""
    cov = np.asarray(res.cov)
    scale = max(float(np.linalg.norm(cov)), 1e-300)
    if any(np.linalg.norm(cov - k) <= _DISTINCT_RTOL * scale for k in known):
        return "duplicate"
    known.append(cov)
    if not is_pd(cov):
        return "not_positive_definite"
    found.append(_make_equilibrium(layer, cov, "newton", res.iterations, None, None))
    return "new"


def search_equilibria(layer: Layer, opts: _NewtonOptions, budget: Budget) -> EquilibriaResult:
    """:func:`equilibria` with ``method="auto"`` on validated options and a running budget."""
    form = _bernoulli_form(layer)
    if form is not None:
        return _riccati_equilibria(layer, form, "auto", None)
    return _newton_equilibria(layer, (), opts, budget, None)
