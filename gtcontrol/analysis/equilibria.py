"""Positive-definite equilibria of the covariance dynamics, their stability and the mean matrix.

A time-invariant layer moves the covariance by ``dΣ/dt = F(Σ) = MΣ + ΣMᵀ``,
``M = A + Σ_h V_h Σ B_h`` (docs/theory.md §2). :func:`equilibria` finds the positive-definite
solutions of ``F(Σ) = 0``. In the Riccati class (every ``V_h = v_h I``, no noise) the unique one
is ``Σ* = Ω⁻¹`` with ``AᵀΩ + ΩA = R`` (slycot SB03MD, :mod:`gtcontrol.analysis.bernoulli`),
cross-checked against the CARE route (SB02MD). For any V and d ≤ 4, every isolated root by
total-degree homotopy continuation (:mod:`gtcontrol.analysis._homotopy`): a complete list when
every path is accounted for. Otherwise Newton–Kantorovich (:mod:`gtcontrol.analysis.newton`)
from many kinds of starts — first (d ≤ ``newton.kron_max_dim``) Levenberg–Marquardt on the
whitened residual ``L⁻¹F(LLᵀ)L⁻ᵀ`` in the factor Σ = LLᵀ
(:mod:`gtcontrol.analysis._whitened_search`), then endpoints of the forward and reversed flows,
continuation from a Riccati-class layer, multiples of I, random matrices, Newton in Cholesky
coordinates — with deflation of every root already found (and of Σ = 0, always a root)
(:mod:`gtcontrol.analysis._deflated_search`); it finds roots but proves nothing, so finding
none is ``Status.NOT_FOUND``. Up to d = 24 each equilibrium returned carries a Kantorovich
radius: an exact equilibrium of the layer's own floats lies that close, and ``certified``
says whether it is positive definite beyond rounding. Each :class:`Equilibrium` carries its
residual, the spectrum of DF on symmetric matrices, its spectral abscissa, ``stable`` and the
mean matrix
``K = A + Σ_h V_h (I + Σ* B_h)`` (the mean obeys ``dm/dt = K m + b`` near Σ*).

Reference: the paper cited in :mod:`gtcontrol`, §4 (deflation: the reference in
:mod:`gtcontrol.analysis.newton`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigs

from .._blas import arpack_products, calm_blas, native_refusal
from .._display import Axes, Displayable, SummaryItems
from .._linalg import FloatArray, sym, unvech, vech
from .._status import Budget, BudgetExhausted, OutcomeOrInfeasible, ResultFields, Status
from .._validation import as_float_array, as_time_limit, frozen
from ..errors import InvalidParametersError, SolverError
from ..model.params import Layer
from ._certify import CERTIFY_MAX_DIM, RootBall, certified_root
from ._core import ComplexArray, slycot_lyapunov
from ._deflated_search import as_start_sequence, deflated_search
from ._field_kernel import (
    JacobianOperator,
    jacobian_matrix,
    jacobian_parts,
    mean_jacobian,
    relative_residual,
)
from ._homotopy import HOMOTOPY_MAX_DIM, homotopy_roots, refine_real
from .bernoulli import omega_decision, solve_bernoulli
from .newton import DEFAULT_MAX_WORK, NewtonSettings, SearchOptions
from .riccati import RiccatiForm, bernoulli_form, model_error

__all__ = [
    "EquilibriaResult",
    "Equilibrium",
    "equilibria",
    "equilibrium_at",
    "mean_matrix",
]

#: Spectra of DF are computed densely on Sym up to this dimension, by ARPACK beyond.
_DENSE_SPECTRUM_MAX_DIM = 50


#: The two slycot routes must agree to this relative difference (else ``Status.FAILED``, the
#: message naming the disagreement).
_CROSS_CHECK_RTOL = 1e-8

#: A Riccati-class equilibrium is returned as a SUCCESS only up to this relative residual (that
#: of :func:`gtcontrol.linearization_spectrum`'s check); a larger one means Ω is singular to
#: working precision and Σ* = Ω⁻¹ is not representable accurately.
_ACCURATE_RTOL = 1e-8


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
    radius
        In exact arithmetic on the layer's own floats, an equilibrium lies within this
        Frobenius distance of ``cov`` (a Kantorovich ball with every rounding bounded;
        ``nan`` when not certified: d > 24, or DF too ill-conditioned).
    certified
        True when that exact equilibrium is positive definite beyond the radius and rounding.
        False: ``cov`` is positive definite in floating point only (relative test
        ``λ_min > 1e-10 λ_max``), which the float data may not decide.
    """

    cov: FloatArray
    residual: float
    spectrum: ComplexArray
    spectral_abscissa: float
    stable: bool
    mean_matrix: FloatArray
    method: str
    iterations: int = 0
    radius: float = math.nan
    certified: bool = False

    @property
    def dim(self) -> int:
        return int(self.cov.shape[0])

    _summary_fields = ("dim", "stable", "spectral_abscissa", "residual", "certified", "method")

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        draw_spectrum(ax, self.spectrum, label="DF(Σ*)", title="spectrum at the equilibrium")


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
        If ``cov`` is not a finite ``d×d`` array, ``d`` the layer's dimension.

    Examples
    --------
    >>> from gtcontrol import Layer, mean_matrix
    >>> mean_matrix(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), [[0.5]])  # K = A + V(I + ΣB)
    array([[-1.]])
    """
    d = layer.dim
    return mean_jacobian(layer, sym(as_float_array("cov", cov, ndim=2, shape=(d, d))))


def _spectrum(
    layer: Layer,
    cov: FloatArray,
    form: RiccatiForm | None,
    eig_a: ComplexArray | None,
    budget: Budget | None = None,
) -> ComplexArray:
    d = layer.dim
    spec: ComplexArray
    if form is not None and eig_a is not None:
        # A − Σ*R = −Σ* Aᵀ Σ*⁻¹ at a positive-definite Riccati equilibrium: ν = −λ(A).
        nu = -eig_a
        i, j = np.triu_indices(d)
        spec = nu[i] + nu[j]
    elif d <= _DENSE_SPECTRUM_MAX_DIM:
        spec = np.linalg.eigvals(jacobian_matrix(*jacobian_parts(layer, cov)))
    else:
        jac = JacobianOperator(layer, cov)
        n = d * (d + 1) // 2

        def matvec(x: Any) -> FloatArray:
            if budget is not None:  # one product is O(d³): ARPACK's thousands of them are not
                budget.check()
            return vech(jac(unvech(np.asarray(x).ravel(), d)))

        try:
            with arpack_products(matvec) as product:
                op = LinearOperator((n, n), matvec=product, dtype=float)
                spec = eigs(
                    op, k=6, which="LR", return_eigenvectors=False, tol=1e-10, maxiter=20 * n
                )
        except ArpackNoConvergence as exc:
            if exc.eigenvalues.size == 0:
                raise SolverError(
                    "ARPACK did not converge on the linearization spectrum",
                    stats={"cause": "arpack"},
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
    return equilibrium_record(layer, cov, method=method, iterations=iterations)


def equilibrium_record(
    layer: Layer,
    cov: Any,
    *,
    method: str = "given",
    iterations: int = 0,
    budget: Budget | None = None,
) -> Equilibrium:
    """:func:`equilibrium_at` within ``budget``, for solvers that hold a time limit.

    Beyond the dense dimensions the spectrum of ``DF(Σ)`` takes ARPACK thousands of ``O(d³)``
    products (docs/benchmarks.md); each checks ``budget`` first.

    Raises
    ------
    BudgetExhausted
        When ``budget`` is spent before the spectrum is found (the caller reports it).
    InvalidParametersError
        If ``cov`` is not a finite ``d×d`` array.
    """
    d = layer.dim
    c = sym(as_float_array("cov", cov, ndim=2, shape=(d, d)))
    return _make_equilibrium(layer, c, method, iterations, None, None, budget=budget)


def _make_equilibrium(
    layer: Layer,
    cov: FloatArray,
    method: str,
    iterations: int,
    form: RiccatiForm | None,
    eig_a: ComplexArray | None,
    ball: RootBall | None = None,
    *,
    budget: Budget | None = None,
) -> Equilibrium:
    _, rel = relative_residual(layer, cov)
    spec = _spectrum(layer, cov, form, eig_a, budget)
    spec.setflags(write=False)
    abscissa = float(np.max(spec.real)) if spec.size else -math.inf
    return Equilibrium(
        cov=frozen(cov.copy()),
        residual=rel,
        spectrum=spec,
        spectral_abscissa=abscissa,
        stable=abscissa < 0,
        mean_matrix=frozen(mean_jacobian(layer, cov)),
        method=method,
        iterations=iterations,
        radius=math.nan if ball is None else ball.radius,
        certified=ball is not None and ball.definiteness == "pd",
    )


@dataclass(frozen=True, eq=False)
class EquilibriaResult(ResultFields, Sequence[Equilibrium], OutcomeOrInfeasible):
    """The positive-definite equilibria found, as a sequence of :class:`Equilibrium`.

    Attributes
    ----------
    equilibria
        Distinct positive-definite equilibria (possibly none).
    status
        ``Status.SUCCESS`` (equilibria found; the complete list when ``proved``);
        ``Status.INFEASIBLE`` (provably none for the layer's own floats, every rounding
        bounded: the unique solution Ω of AᵀΩ + ΩA = R of a layer exactly in the Riccati class
        is not positive definite beyond the solve's error bound, or in rational arithmetic;
        or a completed homotopy whose every real end point is certified indefinite or
        singular; always ``proved``); ``Status.NOT_FOUND`` (deflated Newton found none, which
        proves nothing: ``stats["start_log"]`` says how each start ended; or a layer within
        the class's tolerance of ``V_h = v_h I`` but not exactly in it, whose class layer
        has none); ``Status.FAILED`` (``degenerate``: a singular Lyapunov operator, e.g. A
        with eigenvalues on the imaginary axis, equilibria not isolated or absent; or the two
        slycot routes disagree, ``stats["cross_check"]["consistent"]`` false; or slycot
        failed; or undecided at double precision: λ_min Ω within its error bound; or an
        equilibrium that exists but is not accurate in double precision, returned with its
        residual and radius);
        ``Status.BUDGET_EXHAUSTED`` (``time_limit`` ran out: the equilibria found so far).
    message
        Explanation with the numbers.
    method
        ``"lyapunov"``, ``"homotopy"`` or ``"newton"`` (or ``"care"`` when forced).
    proved
        True when the list is complete and each equilibrium in it ``certified``: by the
        uniqueness argument (a layer exactly in the Riccati class whose Lyapunov operator is
        proved non-singular) or by a homotopy whose every path is accounted for and whose
        every end point is decided beyond rounding (non-real, or real and definite or
        indefinite: :attr:`Equilibrium.radius`; an end point within rounding of the boundary
        of the cone withholds the proof). The homotopy's completeness itself rests on its
        numerical path tracking (gamma trick, step control, end-game tolerances), which is
        not interval-certified.
    degenerate
        True when the Lyapunov operator ``Ω ↦ AᵀΩ + ΩA`` is singular (Riccati class).
    stats
        Cross-check differences; ``homotopy`` (paths tracked; finite, real, positive-definite,
        at-infinity, singular and unresolved end points; ``complete``); ``starts``,
        ``start_kinds``, ``outcomes`` and ``start_log`` (each start's kind and how each of its
        deflated runs ended); timings.
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
    n_random: int = 5,
    seed: int = 0,
    newton: NewtonSettings | None = None,
    max_work: float = DEFAULT_MAX_WORK,
    time_limit: float | None = None,
    start_time_limit: float | None = None,
) -> EquilibriaResult:
    """Positive-definite equilibria of the covariance dynamics ``F(Σ) = 0``.

    Riccati class (``method="auto"`` or ``"lyapunov"``): ``AΣ + ΣAᵀ − ΣRΣ = 0`` with Σ ≻ 0 iff
    ``Ω = Σ⁻¹`` solves ``AᵀΩ + ΩA = R`` (slycot SB03MD). If ``λ_i + λ_j ≠ 0`` for the
    eigenvalues of A the solution is unique: one equilibrium if Ω ≻ 0, provably none otherwise.
    ``cross_check`` (default: d ≤ 64) re-solves it as a CARE with zero constant term (SB02MD,
    ``G = R``) when −A or A is Hurwitz and requires agreement to 1e-8. If −A is Hurwitz and
    R ≻ 0 the equilibrium attracts every Σ0 ≻ 0 (see :func:`gtcontrol.analyze`). Whether Ω
    is positive definite is decided beyond the solve's error bound (a bound on the inverse
    Lyapunov operator and the residual, plus the rounding of forming A and R from the layer),
    in rational arithmetic for d ≤ 4 when that bound cannot decide, and otherwise reported as
    undecided (``Status.FAILED``), never as INFEASIBLE.

    Any V, d ≤ 4 (``method="homotopy"``; ``"auto"`` outside the class for d ≤ 3): all
    isolated roots of the ``d(d+1)/2`` quadratics by total-degree homotopy continuation (``2ⁿ``
    paths, :mod:`gtcontrol.analysis._homotopy`, docs/theory.md §4.4), the real ones refined
    by Newton to round-off. Each finite end point gets a Kantorovich ball on the layer's own
    F (every rounding bounded): non-real, or a real root whose definiteness holds beyond the
    radius (a root of lower rank is certified as such in a chart). When every path is
    accounted for and every end point so decided, the list is complete (``proved``;
    ``Status.INFEASIBLE`` if it has no positive-definite root); otherwise deflated Newton
    continues from the starts below, with the homotopy's roots deflated, and the message
    says what was left undecided.

    Any V (``method="newton"``, or ``"auto"`` outside the class for d ≥ 4): first, up to
    d = ``newton.kron_max_dim``, Levenberg–Marquardt on the whitened residual ``L⁻¹F(LLᵀ)L⁻ᵀ`` over
    the factor Σ = LLᵀ from random positive-definite starts, each converged end point polished
    by Newton (it reaches saddles, which the flows do not: random planted equilibria are
    found at d = 3–12, benchmarks/bench_equilibria_planted.py); then Newton–Kantorovich
    with deflation from the endpoints of short forward/reversed flows, ``starts``,
    ``s0·{1, 0.3, 3}·I`` and ``n_random`` random positive-definite matrices of size
    ``s0 = ‖A‖ / Σ_h‖V_h‖‖B_h‖``; Σ = 0 is deflated from the start. This finds equilibria, it
    cannot prove there are no others: finding none is ``Status.NOT_FOUND``.

    Every argument is validated whichever method runs (``starts=["x"]`` is refused for a
    Riccati-class layer too).

    Parameters
    ----------
    layer
        The layer.
    method
        ``"auto"``, ``"lyapunov"``, ``"care"`` (Riccati class), ``"homotopy"`` (d ≤ 4) or
        ``"newton"``.
    cross_check
        Run the second slycot route (Riccati class); default ``d ≤ 64``.
    starts
        Extra Newton starts (symmetric ``d×d``).
    n_random
        Newton: random positive-definite starts (0 to 10,000).
    seed
        Newton: seed of the random starts; homotopy: seed of γ and of the projective chart.
    newton
        The settings of every Newton run (:class:`~gtcontrol.NewtonSettings`: ``tol``,
        ``max_iter``, ``kron_max_dim``, and the deflation of the roots found); ``None``:
        ``NewtonSettings()``.
    max_work
        Newton: cap on the floating-point work of the whole search (flops of the Jacobian
        applications, Schur forms and flow starts; default ``2e11``, about 10–40 s on one
        core at any d). Reaching it returns the equilibria found so far with
        ``Status.BUDGET_EXHAUSTED``; at d in the hundreds it bounds a default call where the
        iteration caps alone would not (a GMRES Jacobian application costs ``O(d³)``).
    time_limit
        Wall-clock limit of the whole search in seconds (``None``: none); running out returns
        the equilibria found so far with ``Status.BUDGET_EXHAUSTED``. The Riccati route's
        slycot solves cannot be interrupted: from d = 256 their cost is estimated from this
        machine's ``d×d`` product first, and a solve that would pass the limit is not started
        (``BUDGET_EXHAUSTED``, no equilibrium).
    start_time_limit
        Wall-clock limit per Newton start and per flow-start integration (``None``: only the
        overall limit); a start that runs out is abandoned and the search goes on. Independent
        of both limits the work is capped, so that a default call ends in seconds: each
        flow-start integration gets 6,000 right-hand-side evaluations (a stiff or slow flow is
        skipped), each Newton run ``newton.max_iter`` iterations and the whole search 20,000
        Newton iterations, after which the equilibria found so far are returned with
        ``Status.BUDGET_EXHAUSTED``.

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
    >>> res = equilibria(Layer(A=[[1.0]], B=[[2.0]], V=-1.0))
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
    if method not in _METHODS:
        raise InvalidParametersError(
            f"method: expected 'auto', 'lyapunov', 'care', 'homotopy' or 'newton', got {method!r}"
        )
    # Every argument is validated, whichever method runs.
    opts = SearchOptions.of(newton, n_random=n_random, seed=seed, max_work=max_work)
    budget = Budget(as_time_limit(time_limit))
    per_start = as_time_limit(start_time_limit, "start_time_limit")
    if cross_check is not None and not isinstance(cross_check, (bool, np.bool_)):
        raise InvalidParametersError(f"cross_check: expected None or a bool, got {cross_check!r}")
    given = _validated_starts(layer, starts)
    form = riccati_form_of(layer)
    if method in ("lyapunov", "care") and form is None:
        raise InvalidParametersError(
            f"method: {method!r} needs the Riccati class (every head V_h = v_h I) without noise; "
            "use 'newton' or 'homotopy'"
        )
    if method == "homotopy" and layer.dim > HOMOTOPY_MAX_DIM:
        raise InvalidParametersError(
            f"method: 'homotopy' tracks 2^(d(d+1)/2) paths and is offered up to d = "
            f"{HOMOTOPY_MAX_DIM}, got d = {layer.dim}; use 'newton'"
        )
    # a multi-threaded BLAS stalls on a busy machine, inside calls no budget check interrupts
    with calm_blas():
        if form is not None and method in ("auto", "lyapunov", "care"):
            return _riccati_within(layer, form, method, cross_check, budget)
        if method == "homotopy" or (method == "auto" and layer.dim <= _AUTO_HOMOTOPY_MAX_DIM):
            return _complete_search(layer, given, opts, budget, per_start)
        return _newton_equilibria(layer, given, opts, budget, per_start)


_METHODS = ("auto", "lyapunov", "care", "homotopy", "newton")

#: ``method="auto"`` runs the complete homotopy search outside the Riccati class up to this d
#: (64 paths at d = 3, about 1 s; d = 4 has 1,024 paths, 10–30 s: ask for it by name).
_AUTO_HOMOTOPY_MAX_DIM = 3


def riccati_form_of(layer: Layer) -> RiccatiForm | None:
    """The layer's Riccati form, or ``None``; factored heads of rank ``d_head < d`` are never
    ``v_h I``, so they are refused without forming the d×d heads (seconds at d = 1024)."""
    fh = layer.factored_heads
    if fh is not None and fh.head_dim < layer.dim:
        return None
    return bernoulli_form(layer)


def _validated_starts(layer: Layer, starts: Any) -> list[FloatArray]:
    """The extra Newton starts as symmetric ``d×d`` arrays (checked even when unused)."""
    d = layer.dim
    return [
        sym(as_float_array(f"starts[{i}]", s, ndim=2, shape=(d, d)))
        for i, s in enumerate(as_start_sequence(starts))
    ]


def _complete_search(
    layer: Layer,
    given: list[FloatArray],
    opts: SearchOptions,
    budget: Budget,
    per_start: float | None,
) -> EquilibriaResult:
    """Homotopy (all isolated roots, d ≤ 4); deflated Newton on top when it is incomplete."""
    clock = time.perf_counter()
    try:
        hom = homotopy_roots(layer, budget, seed=opts.seed)
    except BudgetExhausted as exc:
        res = _newton_equilibria(layer, given, opts, budget, per_start)
        note = f"the homotopy stopped ({exc.reason}); "
        return replace(res, message=note + res.message, stats={**res.stats, "homotopy": None})
    counts = hom.summary()
    found = [
        replace(
            _make_equilibrium(layer, hom.real_roots[k], "homotopy", 0, None, None),
            radius=hom.radii[k],
            certified=hom.certified[k],
        )
        for k in hom.pd
    ]
    found.sort(key=lambda e: (not e.stable, -float(np.trace(e.cov))))
    tally = (
        f"{hom.paths} paths: {hom.finite} finite non-singular roots ({len(hom.real_roots)} real, "
        f"{len(hom.pd)} positive definite, {hom.undecided} undecided at double precision), "
        f"{hom.at_infinity} at infinity, {hom.singular} singular, {hom.failed} unresolved"
    )
    proved = (
        hom.complete
        and hom.singular_real_pd == 0
        and hom.undecided == 0
        and all(e.certified for e in found)
    )
    if proved:
        status = Status.SUCCESS if found else Status.INFEASIBLE
        what = (
            f"all {len(found)} positive-definite equilibria (each certified within its radius)"
            if found
            else "no positive-definite equilibrium (proved: every path is accounted for and "
            "every real end point is indefinite beyond rounding)"
        )
        stats = {"homotopy": counts, "seconds": time.perf_counter() - clock}
        return EquilibriaResult(
            equilibria=tuple(found),
            status=status,
            message=f"{what}, by total-degree homotopy continuation ({tally})",
            method="homotopy",
            proved=True,
            stats=stats,
        )
    # Incomplete: deflated Newton from the usual starts, with the homotopy's roots deflated.
    res = _newton_equilibria(
        layer, given, opts, budget, per_start, known=list(hom.real_roots), found=found
    )
    why = (
        f"{hom.failed} unresolved paths, {hom.jumped} path jumps"
        if not hom.complete
        else f"{hom.singular_real_pd} singular end points that may be positive semidefinite"
        if hom.singular_real_pd
        else f"{hom.undecided} end points whose reality or definiteness the float data cannot "
        "decide at double precision (an equilibrium within rounding of the boundary of the "
        "cone, or too ill-conditioned to certify)"
    )
    message = f"homotopy incomplete ({why}; {tally}); then {res.message}"
    return replace(res, message=message, stats={**res.stats, "homotopy": counts})


#: The Riccati route's solves and proofs (slycot, eigensolves, SVDs: native calls no budget
#: check interrupts) cost at most this many ``d×d`` products up to each ``d``: at least twice
#: the count measured on an idle machine (benchmarks/bench_certificate_cost.py).
_RICCATI_MATMULS = ((384, 600), (640, 280), (math.inf, 200))


def _riccati_within(
    layer: Layer, form: RiccatiForm, method: str, cross_check: bool | None, budget: Budget
) -> EquilibriaResult:
    """:func:`_riccati_equilibria`, or ``BUDGET_EXHAUSTED`` when its estimated cost passes what
    is left of the time limit (:func:`~gtcontrol._blas.native_refusal`)."""
    refusal = native_refusal(
        "the Riccati equilibrium's solve was", layer.dim, _RICCATI_MATMULS, budget
    )
    if refusal is None:
        return _riccati_equilibria(layer, form, method, cross_check)
    return EquilibriaResult(
        equilibria=(),
        status=Status.BUDGET_EXHAUSTED,
        message=refusal,
        method="care" if method == "care" else "lyapunov",
        stats={"seconds": budget.elapsed},
    )


def _riccati_equilibria(
    layer: Layer, form: RiccatiForm, method: str, cross_check: bool | None
) -> EquilibriaResult:
    clock = time.perf_counter()
    primary = solve_bernoulli(form, method="care" if method == "care" else "lyapunov")
    stats: dict[str, Any] = {"primary": dict(primary.stats)}
    proof = _RiccatiProof.of(layer, form, primary)
    stats["proof"] = proof.stats()
    if primary.cov is None or proof.sign == "not_pd":
        status, message = _riccati_none(primary, proof)
        stats["seconds"] = time.perf_counter() - clock
        return EquilibriaResult(
            equilibria=(),
            status=status,
            message=message,
            method=primary.method,
            proved=status is Status.INFEASIBLE,
            degenerate=primary.degenerate,
            stats=stats,
        )
    cov = np.asarray(primary.cov)
    ball = certified_root(layer, cov) if layer.dim <= CERTIFY_MAX_DIM else None
    eq = _make_equilibrium(layer, cov, primary.method, 0, form, primary.eigvals_a, ball)
    if proof.sign == "pd" and proof.exact_class:
        # Ω_exact ≻ 0, so Σ = Ω_exact⁻¹ is a PD equilibrium, within this distance of cov
        eq = replace(eq, radius=float(np.fmin(eq.radius, proof.radius(cov))), certified=True)
    do_check = cross_check if cross_check is not None else form.dim <= 64
    status, message = Status.SUCCESS, primary.message
    if do_check:
        status, message = _cross_check(layer, form, primary, eq, stats, message)
    if status is Status.SUCCESS and not eq.residual <= _ACCURATE_RTOL:
        status = Status.FAILED
        exists = f"a positive-definite equilibrium exists ({proof.how}), but " * eq.certified
        message = (
            f"{exists}Σ* = Ω⁻¹ is not accurate in double precision (relative residual "
            f"{eq.residual:.3g}, distance to the exact equilibrium ≤ {eq.radius:.3g}): Ω is "
            "nearly singular"
        )
    message += proof.note(eq.certified)
    stats["seconds"] = time.perf_counter() - clock
    return EquilibriaResult(
        equilibria=(eq,),
        status=status,
        message=message,
        method=primary.method,
        proved=status is Status.SUCCESS and eq.certified and proof.unique,
        stats=stats,
    )


@dataclass(frozen=True)
class _RiccatiProof:
    """What the layer's own floats prove about ``Ω_exact`` (``AᵀΩ + ΩA = R``).

    ``exact_class``: every head is exactly ``v_h I`` (so any PD equilibrium gives a solution
    Ω = Σ⁻¹); ``sign``: the definiteness of ``Ω_exact`` beyond every rounding (form-level solve
    error plus the rounding of forming A and R from the layer) or ``"undecided"``; ``unique``:
    the Lyapunov operator of the exact A is proved non-singular (at most one PD equilibrium).
    """

    exact_class: bool
    sign: str
    unique: bool
    error: float
    how: str
    omega: Any = None
    lowest: float = math.nan

    @classmethod
    def of(cls, layer: Layer, form: RiccatiForm, primary: Any) -> _RiccatiProof:
        omega = primary.omega
        if omega is None and not primary.degenerate:
            try:
                omega, _, _ = slycot_lyapunov(form.A, form.R)
            except SolverError:
                omega = None
        if omega is None:
            return cls(False, "undecided", False, math.inf, "no Lyapunov solution")
        me = model_error(layer, form)
        exact_class = me.v == 0.0 and layer.factored_heads is None

        def exact() -> tuple[Any, Any]:
            return layer.A, _exact_r(layer)

        known = primary.stats.get("lyapunov_inverse")
        dec = omega_decision(
            form.A, form.R, np.asarray(omega), np.asarray(primary.eigvals_a),
            a_err=me.a, r_err=me.r, exact=exact if exact_class and layer.ffn is None else None,
            inverse=float(known) if known is not None else None,
        )  # fmt: skip
        unique = exact_class and math.isfinite(dec.inverse)
        return cls(exact_class, dec.sign, unique, dec.error, dec.how, np.asarray(omega), dec.lowest)

    def radius(self, cov: FloatArray) -> float:
        """A bound on ``‖Ω_exact⁻¹ − cov‖_F`` (``inf``: none): ``‖Ω⁻¹‖²ε/(1 − ‖Ω⁻¹‖ε)`` from
        the solve's error ε, plus ``‖Ω⁻¹‖‖I − Ω·cov‖`` for the inversion (rounding included)."""
        om = self.omega
        if om is None or not math.isfinite(self.error):
            return math.inf
        d = om.shape[0]
        u = float(np.finfo(np.float64).eps) / 2
        low = self.lowest - 8.0 * d * u * float(np.linalg.norm(om))
        inv = 1.0 / low if low > 0 else math.inf
        if not inv * self.error < 1.0:
            return math.inf
        to_exact = inv * inv * self.error / (1.0 - inv * self.error)
        gap = float(np.linalg.norm(np.eye(d) - om @ cov))
        gap += 4.0 * (d + 2) * u * float(np.linalg.norm(np.abs(om) @ np.abs(cov)))
        return float(math.sqrt(d) * (to_exact + inv * gap) * (1.0 + 1e-12))

    def stats(self) -> dict[str, Any]:
        return {
            "exact_class": self.exact_class,
            "omega_sign": self.sign,
            "unique": self.unique,
            "omega_error": self.error,
        }

    def note(self, certified: bool) -> str:
        """What the SUCCESS message must add when the proof is partial."""
        if not self.exact_class:
            return (
                "; the layer is within the class's tolerance of V_h = v_h I but not exactly in "
                "it, so uniqueness is not proved"
            )
        if not certified:
            return "; positive definiteness of the exact equilibrium not certified beyond rounding"
        if not self.unique:
            return "; uniqueness not proved (no bound on the inverse Lyapunov operator)"
        return ""


def _exact_r(layer: Layer) -> list[list[Fraction]]:
    """``R = −Σ_h v_h (B_h + B_hᵀ)`` of an exact-class layer, in rational arithmetic."""
    d = layer.dim
    r_q = [[Fraction(0)] * d for _ in range(d)]
    for v_h, b_h in layer.heads:
        v_q = Fraction(float(v_h[0, 0]))
        for i in range(d):
            for j in range(d):
                r_q[i][j] -= v_q * (Fraction(float(b_h[i, j])) + Fraction(float(b_h[j, i])))
    return r_q


def _riccati_none(primary: Any, proof: _RiccatiProof) -> tuple[Status, str]:
    """Status and message when no equilibrium is returned: INFEASIBLE only with the proof."""
    if proof.sign == "not_pd" and proof.exact_class:
        return Status.INFEASIBLE, (
            "no positive-definite equilibrium: the unique solution Ω of AᵀΩ + ΩA = R (the "
            f"layer's exact A and R) is not positive definite ({proof.how})"
        )
    if proof.sign == "not_pd":
        return Status.NOT_FOUND, (
            "no positive-definite equilibrium of the Riccati-class layer with V_h = v_h I "
            f"({proof.how}); the layer is within the class's tolerance of it but not exactly "
            "in it, so this proves nothing about the layer itself"
        )
    if proof.sign == "pd" and proof.exact_class and not primary.degenerate:
        return Status.FAILED, (
            f"a positive-definite equilibrium exists (Ω ≻ 0: {proof.how}), but Ω is singular "
            "to working precision: Σ* = Ω⁻¹ cannot be formed in double precision"
        )
    if primary.status is Status.INFEASIBLE:
        return Status.FAILED, (
            f"{primary.message}; but not beyond the rounding of forming A and R from the layer "
            f"(error bound {proof.error:.3g}): undecided at double precision"
        )
    return primary.status, primary.message


def _cross_check(
    layer: Layer,
    form: RiccatiForm,
    primary: Any,
    eq: Equilibrium,
    stats: dict[str, Any],
    message: str,
) -> tuple[Status, str]:
    """The second slycot route: SUCCESS when it agrees to ``_CROSS_CHECK_RTOL``."""
    status = Status.SUCCESS
    other = solve_bernoulli(form, method="lyapunov" if primary.method == "care" else "care")
    check: dict[str, Any] = {"method": other.method, "status": other.status}
    stats["cross_check"] = check
    if other.cov is not None:
        diff = float(np.linalg.norm(other.cov - eq.cov) / np.linalg.norm(eq.cov))
        _, rel_other = relative_residual(layer, np.asarray(other.cov))
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
    return status, message


def _newton_equilibria(
    layer: Layer,
    given: list[FloatArray],
    opts: SearchOptions,
    budget: Budget,
    per_start: float | None,
    *,
    known: list[FloatArray] | None = None,
    found: list[Equilibrium] | None = None,
) -> EquilibriaResult:
    """Deflated Newton from every kind of start; ``known``/``found`` carry earlier roots."""
    clock = time.perf_counter()
    out = deflated_search(layer, given, opts, budget, per_start, list(known or []))
    found = list(found or [])
    dropped = unlinearized = 0
    stopped = out.stopped
    for root, its in out.roots:
        cov = root
        ball = None
        if layer.dim <= CERTIFY_MAX_DIM and not budget.exhausted:
            cov, _ = refine_real(layer, root)  # to round-off: Newton stops at its tolerance
            ball = certified_root(layer, cov)
        if ball is not None and ball.definiteness == "not_pd":
            dropped += 1  # positive definite in floating point only
            continue
        try:
            found.append(
                _make_equilibrium(layer, cov, "newton", its, None, None, ball, budget=budget)
            )
        except BudgetExhausted as exc:  # an equilibrium without its stability is not reported
            unlinearized += 1
            stopped = stopped or exc.reason
    found.sort(key=lambda e: (not e.stable, -float(np.trace(e.cov))))
    kinds = out.kinds()
    stats = {
        "starts": len(out.log),
        "start_kinds": kinds,
        "outcomes": out.outcomes,
        "start_log": out.log,
        "newton_iterations": out.newton_iterations,
        "work_flops": out.work_flops,
        "max_work": out.max_work,
        "seconds": time.perf_counter() - clock,
    }
    tried = f"{len(out.log)} starts ({kinds}; outcomes {out.outcomes})" + _certified_note(
        found, dropped
    )
    if unlinearized:
        tried += f"; {unlinearized} more root(s) found, their spectra not computed in time"
    if stopped:
        status = Status.BUDGET_EXHAUSTED
        message = (
            f"deflated Newton stopped ({stopped}) with {len(found)} positive-definite "
            f"equilibria found from {tried}"
        )
    elif found:
        status = Status.SUCCESS
        message = f"{len(found)} positive-definite equilibria found by deflated Newton from {tried}"
    else:
        status = Status.NOT_FOUND
        message = (
            f"no positive-definite equilibrium found by deflated Newton from {tried}; a search "
            "result, not a proof that none exists"
        )
    return EquilibriaResult(
        equilibria=tuple(found), status=status, message=message, method="newton", stats=stats
    )


def _certified_note(found: list[Equilibrium], dropped: int) -> str:
    """How many of the equilibria found are certified positive definite beyond rounding."""
    note = ""
    if found:
        note = f"; {sum(e.certified for e in found)} of {len(found)} certified positive definite"
    if dropped:
        note += f"; {dropped} root(s) positive definite in floating point only, dropped"
    return note


def search_equilibria(layer: Layer, opts: SearchOptions, budget: Budget) -> EquilibriaResult:
    """:func:`equilibria` with ``method="auto"`` on validated options and a running budget."""
    form = riccati_form_of(layer)
    if form is not None:
        return _riccati_within(layer, form, "auto", None, budget)
    if layer.dim <= _AUTO_HOMOTOPY_MAX_DIM:
        return _complete_search(layer, [], opts, budget, None)
    return _newton_equilibria(layer, [], opts, budget, None)
