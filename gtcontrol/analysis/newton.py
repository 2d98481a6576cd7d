"""Newton–Kantorovich for the covariance equilibria ``F(Σ) = 0`` of any layer.

A time-invariant layer moves the covariance by ``dΣ/dt = F(Σ) = MΣ + ΣMᵀ [+ GGᵀ]``,
``M = A + Σ_h V_h Σ B_h`` (docs/theory.md §2; F comes from :func:`gtcontrol.moment_field`). Its
Fréchet derivative is

    DF(Σ)[H] = M H + H Mᵀ + Σ_h (V_h H B_h Σ + Σ B_hᵀ H V_hᵀ),

and each Newton step solves the generalized Sylvester equation ``DF(Σ_k)[H] = −F(Σ_k)``: a dense
Kronecker solve on symmetric matrices for small d, matrix-free GMRES preconditioned by a
Lyapunov operator beyond. Known roots are deflated (Farrell, Birkisson, Funke 2015). F, DF and
the residual come from :mod:`gtcontrol.analysis._field_kernel`, shared with every other search.

Reference: the paper cited in :mod:`gtcontrol`, §4; P. E. Farrell, Á. Birkisson,
S. W. Funke, *Deflation techniques for finding distinct solutions of nonlinear PDEs*,
SIAM J. Sci. Comput. 37 (2015).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import LinearOperator, gmres

from .._blas import calm_blas
from .._display import Axes, SummaryItems
from .._linalg import FloatArray, schur_sylvester, sym, unvech, vech
from .._status import Budget, BudgetExhausted, Outcome, ResultFields, Status, shown
from .._validation import (
    as_cap,
    as_float_array,
    as_nonnegative_int,
    as_option_group,
    as_positive_float,
    as_positive_int,
    as_seed,
    as_time_limit,
    frozen,
)
from ..errors import InvalidParametersError, SolverError
from ..model.params import Layer
from ._field_kernel import (
    JacobianOperator,
    field_flops,
    jacobian_matrix,
    jacobian_parts,
    relative_residual,
    typical_scale,
)
from ._subspace import frozen_rows_basis, reduced_layer

__all__ = [
    "NewtonResult",
    "NewtonSettings",
    "newton_equilibrium",
]

#: Default work cap of a search (flops): about 10–40 s on a laptop core, whatever d is.
DEFAULT_MAX_WORK = 2e11

#: Largest ``n_random`` accepted (the search's own cap on random starts stops it sooner).
_MAX_RANDOM_STARTS = 10_000

#: GMRES per Newton step: inner iterations per restart cycle (the cycles are
#: ``NewtonSettings.krylov_cycles``); an unconverged solve is an inexact Newton direction the
#: line search checks.
_GMRES_RESTART = 60
#: A restart cycle that leaves more than this share of the residual it started from ends the
#: solve: restarted GMRES that stagnates over a whole cycle gains little from the next ones
#: (Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed., SIAM 2003, §6.5).
_GMRES_STAGNATION = 0.9

#: A Newton run whose deflated merit has not halved in this many iterations stops ("stalled").
_STALL_ITERATIONS = 12


class WorkMeter:
    """Floating-point work of an equilibrium search, with a finite cap shared by all its parts.

    A wall-clock ``time_limit`` is optional; this cap is not, so that a default call ends
    whatever d is. Work is counted in flops of the dominant products (Jacobian applications,
    Schur forms, flow-start field evaluations) plus a fixed per-operation overhead. With a
    ``budget`` every charge also checks its deadline, and refuses an operation whose predicted
    duration (at the speed measured so far) would run past it.
    """

    __slots__ = ("budget", "cap", "start", "used")

    #: Overhead of one operation in flop-equivalents (Python and LAPACK call costs at small d).
    OVERHEAD = 2e5

    #: Assumed speed (flop/s) until 0.05 s of work has been measured.
    SPEED = 1e9

    def __init__(self, cap: float = DEFAULT_MAX_WORK, budget: Budget | None = None) -> None:
        self.cap = cap
        self.used = 0.0
        self.budget = budget
        self.start = time.perf_counter()

    def left(self) -> float:
        """Work still allowed."""
        return max(self.cap - self.used, 0.0)

    def charge(self, flops: float, n: int = 1) -> None:
        """Count ``n`` operations of ``flops`` each; raise :class:`BudgetExhausted` past the cap."""
        done = self.used
        self.used += n * (flops + self.OVERHEAD)
        if self.used > self.cap:
            raise BudgetExhausted(
                f"the work cap of {self.cap:.3g} flops was reached (raise max_work= to search on)"
            )
        if self.budget is None:
            return
        # With a deadline, an operation that would run past it is not started: its duration
        # is predicted from the speed measured so far (one Schur form at d = 1024 takes s).
        self.budget.check()
        left = self.budget.remaining()
        if math.isfinite(left):
            elapsed = time.perf_counter() - self.start
            speed = done / elapsed if elapsed > 0.05 and done > 0 else self.SPEED
            if n * flops / speed > left:
                raise BudgetExhausted(
                    f"the time limit of {self.budget.given_limit:g} s would be passed by the "
                    f"next operation (about {n * flops / speed:.2g} s)"
                )


#: A triangular Lyapunov solve takes up to this many times the Schur form of the same matrix:
#: the prediction before the first solve, an upper bound for the recursive blocked solve
#: (``schur_sylvester``), so that no first solve overruns a time limit (docs/benchmarks.md).
_SOLVE_PER_SCHUR = 1.0


class _LyapunovPreconditioner:
    """``Y ↦ X`` solving ``N X + X Nᵀ = Y`` with one real Schur form of N
    (:func:`~gtcontrol._linalg.schur_sylvester`).

    ``seconds`` predicts one solve: the last one measured, and before any, the Schur form's
    time times :data:`_SOLVE_PER_SCHUR` (the work meter's flop count alone does not see how
    fast a machine runs either).
    """

    def __init__(self, m_mat: FloatArray) -> None:
        clock = time.perf_counter()
        self.t, self.u = sla.schur(m_mat, output="real")
        self.seconds = _SOLVE_PER_SCHUR * (time.perf_counter() - clock)
        self.ok = True

    def __call__(self, y: FloatArray) -> FloatArray:
        c = self.u.T @ y @ self.u
        clock = time.perf_counter()
        x = schur_sylvester(self.t, self.t, c)
        self.seconds = time.perf_counter() - clock
        if not np.all(np.isfinite(x)):
            self.ok = False
            return y
        return sym(self.u @ x @ self.u.T)


@dataclass(frozen=True, kw_only=True)
class NewtonSettings:
    """How each Newton–Kantorovich run iterates: the ``newton=`` option family of
    :func:`newton_equilibrium` and :func:`gtcontrol.equilibria`.

    Attributes
    ----------
    tol
        Stop when the relative residual ``‖F(Σ)‖ / (2‖AΣ‖ + 2Σ_h‖V_hΣB_hΣ‖)`` is below it, in
        ``(0, 1)``.
    max_iter
        Cap on the Newton iterations of one run (``Status.BUDGET_EXHAUSTED`` when reached).
    kron_max_dim
        Up to this d each step is a dense Kronecker solve on Sym (``d(d+1)/2`` unknowns, cost
        ``O(d⁶)``); beyond, matrix-free GMRES right-preconditioned by the Lyapunov operator
        ``H ↦ NH + HNᵀ``, ``N = M + Σ_h (tr V_h / d) Σ B_hᵀ`` (exact in the Riccati class).
        Measured crossover (benchmarks/bench_riccati.py): GMRES is faster from d ≈ 15 on
        (d = 40: 85 ms against 1.3 s a solve), hence the default 16.
    deflation_power, deflation_shift
        Deflation ``m(Σ) = Π_i ((‖Σ − Σ_i‖/s0)^{−p} + shift)`` of the roots already known
        (Farrell, Birkisson, Funke, SIAM J. Sci. Comput. 37 (2015)), ``p`` and ``shift``
        positive.
    krylov_cycles
        GMRES restart cycles of 60 Jacobian applications per Newton step at most (the GMRES
        route, ``d > kron_max_dim``; default 3). Fewer make each step cheaper and its
        direction less exact: 1 suits a probe step that only measures how fast Newton
        converges from a start.

    Raises
    ------
    InvalidParametersError
        When built with a value out of range, naming it.

    Examples
    --------
    >>> from gtcontrol import Layer, NewtonSettings, newton_equilibrium
    >>> fast = NewtonSettings(tol=1e-8, max_iter=20)
    >>> res = newton_equilibrium(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), [[0.3]], newton=fast)
    >>> res.status, abs(float(res.cov[0, 0]) - 0.5) < 1e-8
    (<Status.SUCCESS: 'success'>, True)
    """

    tol: float = 1e-12
    max_iter: int = 60
    kron_max_dim: int = 16
    deflation_power: float = 2.0
    deflation_shift: float = 1.0
    krylov_cycles: int = 3

    def __post_init__(self) -> None:
        if not 0 < as_positive_float("tol", self.tol) < 1:
            raise InvalidParametersError(f"tol: expected a number in (0, 1), got {self.tol!r}")
        as_cap("max_iter", self.max_iter)
        as_positive_int("kron_max_dim", self.kron_max_dim)
        as_positive_float("deflation_power", self.deflation_power)
        as_positive_float("deflation_shift", self.deflation_shift)
        as_positive_int("krylov_cycles", self.krylov_cycles, maximum=1000)


@dataclass(frozen=True, kw_only=True)
class SearchOptions(NewtonSettings):
    """The settings of every run and the options of an equilibrium search, as one value inside
    the package (not public: the functions take ``newton=`` and keywords).

    Attributes
    ----------
    n_random
        Random positive-definite starts (in addition to three multiples of I).
    seed
        Seed of the random starts.
    max_work
        Cap on the floating-point work of a search (:class:`WorkMeter`).
    """

    n_random: int = 5
    seed: int = 0
    max_work: float = DEFAULT_MAX_WORK

    def __post_init__(self) -> None:
        super().__post_init__()
        as_nonnegative_int("n_random", self.n_random, maximum=_MAX_RANDOM_STARTS)
        as_seed("seed", self.seed)
        as_positive_float("max_work", self.max_work)

    @classmethod
    def of(cls, newton: Any, **search: Any) -> SearchOptions:
        """The options of ``newton=`` (``None``: the defaults) and the search's ``search``."""
        settings = as_option_group("newton", newton, NewtonSettings)
        runs = {f.name: getattr(settings, f.name) for f in dataclasses.fields(NewtonSettings)}
        return cls(**runs, **search)


@dataclass(frozen=True, eq=False)
class NewtonResult(ResultFields, Outcome):
    """One Newton–Kantorovich run.

    Attributes
    ----------
    cov
        Last iterate (the equilibrium when ``success``; the best iterate otherwise).
    status
        ``Status.SUCCESS`` (converged), ``Status.BUDGET_EXHAUSTED`` (``max_iter`` or
        ``time_limit`` ran out) or ``Status.FAILED`` (stalled, diverged or a singular DF);
        ``stats["termination"]`` is one of ``"converged"``, ``"max_iter"``, ``"time_limit"``,
        ``"stalled"``, ``"diverged"``, ``"singular"``.
    message
        How the run ended, with the numbers.
    iterations
        Newton steps taken.
    residuals
        Relative residual before each step and at the end (shows the quadratic convergence).
    stats
        ``termination``, ``linear_solver`` (``"kronecker"``/``"gmres"``), ``gmres_iterations``,
        ``damped_steps``, ``seconds``.
    """

    cov: FloatArray
    iterations: int
    residuals: tuple[float, ...]

    def _summary_items(self) -> SummaryItems:
        last = self.residuals[-1] if self.residuals else math.nan
        return [("dim", self.cov.shape[0]), ("iterations", self.iterations), ("residual", last)]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_residuals

        draw_residuals(ax, self.residuals, title=f"Newton–Kantorovich ({self.status.value})")


def _newton_step(
    layer: Layer,
    cov: FloatArray,
    f: FloatArray,
    rel: float,
    opts: SearchOptions,
    budget: Budget,
    work: WorkMeter,
) -> tuple[FloatArray, int, str]:
    """Solve ``DF(Σ)[H] = −F(Σ)`` on Sym; return ``(H, gmres_iterations, solver)``."""
    d = layer.dim
    rhs = -vech(f)
    if d <= opts.kron_max_dim:
        work.charge(float(d) ** 6 / 12)
        lmat = jacobian_matrix(*jacobian_parts(layer, cov))
        try:
            with warnings.catch_warnings():
                # An ill-conditioned DF is handled (the line search, the singular status).
                warnings.simplefilter("ignore", sla.LinAlgWarning)
                x = sla.solve(lmat, rhs, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            raise SolverError("Newton: DF(Σ) is singular", stats={"cause": "singular"}) from None
        if not np.all(np.isfinite(x)):
            raise SolverError("Newton: DF(Σ) is singular", stats={"cause": "singular"})
        return unvech(x, d), 0, "kronecker"
    jac = JacobianOperator(layer, cov)
    # Lyapunov preconditioner with N = M + Σ_h v̄_h Σ B_hᵀ, v̄_h = tr V_h / d: DF(Σ)[H] equals
    # NH + HNᵀ exactly when every V_h = v̄_h I. (H ↦ MH + HMᵀ itself is singular at every
    # positive-definite equilibrium: MΣ* + Σ*Mᵀ = 0 makes M similar to a skew matrix.)
    work.charge(25.0 * d**3)  # the real Schur form
    pre = _LyapunovPreconditioner(jac.lyapunov_matrix())
    n = rhs.size
    matvec_flops = jac.flops + 10.0 * d**3  # plus the Schur-basis changes and the solve

    def matvec(y: FloatArray) -> FloatArray:
        budget.check()
        if pre.seconds > budget.remaining():
            raise BudgetExhausted(
                f"the time limit of {budget.given_limit:g} s would be passed by the next "
                f"Lyapunov solve (about {pre.seconds:.2g} s)"
            )
        work.charge(matvec_flops)
        return vech(jac(pre(unvech(np.asarray(y).ravel(), d))))

    count = [0]
    left = [1.0]  # the residual left, relative to the right side (GMRES's own estimate)

    def cb(r: Any) -> None:
        count[0] += 1
        left[0] = float(r)

    op = LinearOperator((n, n), matvec=matvec, dtype=float)
    # Inexact Newton with forcing term ~ the residual keeps the convergence quadratic.
    eta = min(1e-4, max(1e-14, 0.1 * rel))
    y, info, before = np.zeros_like(rhs), 1, 1.0
    for _cycle in range(opts.krylov_cycles):
        y, info = gmres(
            op,
            rhs,
            x0=y,
            rtol=eta,
            atol=0.0,
            restart=min(n, _GMRES_RESTART),
            maxiter=1,
            callback=cb,
            callback_type="pr_norm",
        )
        if info <= 0 or not np.all(np.isfinite(y)) or left[0] > _GMRES_STAGNATION * before:
            break
        before = left[0]
    if info < 0 or not np.all(np.isfinite(y)):
        raise SolverError(f"Newton: GMRES failed (info {info})", stats={"cause": "singular"})
    if not pre.ok:
        raise SolverError(
            "Newton: the Lyapunov preconditioner is singular (N has eigenvalues with "
            "λ_i + λ_j = 0)",
            stats={"cause": "singular"},
        )
    return pre(unvech(y, d)), count[0], "gmres"


def _roots(deflate: Any, d: int) -> list[Any]:
    """The entries of ``deflate`` (a sequence of ``(d, d)`` matrices), or refuse it by name."""
    try:
        if isinstance(deflate, (str, bytes)):
            raise TypeError
        return list(deflate)
    except TypeError:
        raise InvalidParametersError(
            f"deflate: expected a sequence of ({d}, {d}) matrices, got {shown(deflate)}"
        ) from None


def newton_equilibrium(
    layer: Layer,
    start: Any,
    *,
    deflate: Sequence[Any] = (),
    newton: NewtonSettings | None = None,
    time_limit: float | None = None,
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
        Initial symmetric matrix. Zero rows and columns along directions the layer never moves
        (``nᵀA = 0``, ``nᵀb = 0``, ``nᵀV_h = 0``: an extracted layer's affine coordinate) stay
        zero: the iteration runs on the active subspace (``stats["active_dim"]``), where
        ``DF`` is not singular.
    deflate
        Roots to deflate (e.g. ``0`` and equilibria already found).
    newton
        The iteration's settings (:class:`NewtonSettings`: ``tol``, ``max_iter``,
        ``kron_max_dim``, the deflation's ``deflation_power`` and ``deflation_shift``);
        ``None``: ``NewtonSettings()``.
    time_limit
        Wall-clock limit in seconds (``None``: none); running out returns the best iterate
        with ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    NewtonResult
        ``success=False`` with the best iterate when it does not converge.

    Raises
    ------
    InvalidParametersError
        On malformed input (``deflate``: not a sequence of ``(d, d)`` matrices).

    Examples
    --------
    From ``σ = 0.3`` to the equilibrium ``σ* = −a/(vB) = 0.5`` of ``a = 1``, ``vB = −2``:

    >>> from gtcontrol import Layer, newton_equilibrium
    >>> res = newton_equilibrium(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), [[0.3]])
    >>> res.status, round(float(res.cov[0, 0]), 12)
    (<Status.SUCCESS: 'success'>, 0.5)
    """
    opts = SearchOptions.of(newton)
    budget = Budget(as_time_limit(time_limit))
    d = layer.dim
    cov = sym(as_float_array("start", start, ndim=2, shape=(d, d)))
    known = [
        sym(as_float_array(f"deflate[{i}]", k, ndim=2, shape=(d, d)))
        for i, k in enumerate(_roots(deflate, d))
    ]
    # a multi-threaded BLAS stalls on a busy machine, inside calls no budget check interrupts
    with calm_blas():
        return _newton_on_active(layer, cov, known, opts, budget)


def _newton_on_active(
    layer: Layer, cov: FloatArray, known: list[FloatArray], opts: SearchOptions, budget: Budget
) -> NewtonResult:
    """Newton on the directions the layer moves: zero rows (an extracted layer's affine
    coordinate) make DF singular on Sym(d), so it solves on the active subspace and embeds
    ``Σ = U S Uᵀ``."""
    basis = frozen_rows_basis(layer, cov)
    if basis is None:
        return newton_run(layer, cov, known, opts, budget)
    reduced = newton_run(
        reduced_layer(layer, basis),
        basis.T @ cov @ basis,
        [basis.T @ k @ basis for k in known],
        opts,
        budget,
    )
    return dataclasses.replace(
        reduced,
        cov=frozen(basis @ reduced.cov @ basis.T),
        stats={**reduced.stats, "active_dim": basis.shape[1]},
    )


class _Run:
    """State of one Newton run: iterate, residual history, best iterate, counters."""

    def __init__(
        self,
        layer: Layer,
        cov: FloatArray,
        known: Sequence[FloatArray],
        opts: SearchOptions,
        work: WorkMeter,
    ) -> None:
        self.layer = layer
        self.work = work
        self.field_flops = 2.0 * field_flops(layer)  # F(Σ) and its scale
        self.known = known
        self.opts = opts
        self.s0 = max(float(np.linalg.norm(cov)), typical_scale(layer))
        self.cov = cov
        self.f, self.rel = relative_residual(layer, cov)
        self.hist: list[float] = []
        self.best = (self.rel, cov)
        self.best_merit = (self.rel * self.weight(cov), 0)
        self.gm_its = 0
        self.solver = ""
        self.damped = 0

    def weight(self, cov: FloatArray) -> float:
        return deflation_weight(cov, self.known, self.s0, self.opts)

    def line_search(self, h: FloatArray) -> tuple[float, FloatArray, FloatArray, float] | None:
        """Backtracking (Armijo) on the deflated relative residual; the full step first."""
        merit = self.rel * self.weight(self.cov)
        alpha = 1.0
        trial: tuple[float, FloatArray, FloatArray, float] | None = None
        for _k in range(10):
            cand = sym(self.cov + alpha * h)
            self.work.charge(self.field_flops)
            if np.all(np.isfinite(cand)):
                fc, rc = relative_residual(self.layer, cand)
                mc = rc * self.weight(cand)
                if trial is None or mc < trial[0]:
                    trial = (mc, cand, fc, rc)
                if mc <= (1.0 - 1e-4 * alpha) * merit:
                    break
            alpha *= 0.5
        self.damped += alpha < 1.0
        return trial

    def step(self, budget: Budget) -> tuple[str, str] | None:
        """One Newton step; ``(termination, message)`` when the run ends, else ``None``."""
        opts = self.opts
        try:
            h, its, self.solver = _newton_step(
                self.layer, self.cov, self.f, self.rel, opts, budget, self.work
            )
        except SolverError as exc:
            return "singular", str(exc)
        self.gm_its += its
        if self.known:
            h = deflation_factor(self.cov, h, self.known, self.s0, opts) * h
        trial = self.line_search(h)
        if trial is None:
            return "diverged", "Newton step produced non-finite values"
        step_norm = float(np.linalg.norm(trial[1] - self.cov))
        mval, self.cov, self.f, self.rel = trial
        if self.rel < self.best[0]:
            self.best = (self.rel, self.cov)
        # A deflated search that makes no progress for a while has no root nearby: give up.
        if mval < 0.5 * self.best_merit[0]:
            self.best_merit = (mval, len(self.hist))
        elif len(self.hist) - self.best_merit[1] >= _STALL_ITERATIONS:
            self.hist.append(self.rel)
            return "stalled", f"no progress in {_STALL_ITERATIONS} iterations"
        if float(np.linalg.norm(self.cov)) > 1e12 * self.s0:
            return "diverged", "iterates diverged"
        if step_norm <= 1e-15 * max(float(np.linalg.norm(self.cov)), 1e-300):
            self.hist.append(self.rel)
            ok = self.rel <= max(opts.tol, 1e-10)
            return ("converged" if ok else "max_iter"), (
                f"step stagnated at relative residual {self.rel:.3g}"
            )
        return None


_TERMINATION_STATUS = {
    "converged": Status.SUCCESS,
    "max_iter": Status.BUDGET_EXHAUSTED,
    "time_limit": Status.BUDGET_EXHAUSTED,
    "stalled": Status.FAILED,
    "diverged": Status.FAILED,
    "singular": Status.FAILED,
}


def newton_run(
    layer: Layer,
    cov: FloatArray,
    known: Sequence[FloatArray],
    opts: SearchOptions,
    budget: Budget,
    work: WorkMeter | None = None,
) -> NewtonResult:
    """The Newton iteration on validated input (shared by :func:`gtcontrol.equilibria`).

    ``work`` is the search's shared :class:`WorkMeter` (a fresh one with the default cap if
    ``None``); running past it ends the run like the time limit.
    """
    clock = time.perf_counter()
    work = work if work is not None else WorkMeter(opts.max_work)
    try:  # the first residual costs two field evaluations (seconds at d = 1024)
        budget.check()
        work.charge(2.0 * field_flops(layer))
    except BudgetExhausted as exc:
        return NewtonResult(
            cov=frozen(np.array(cov)),
            status=Status.BUDGET_EXHAUSTED,
            message=f"{exc.reason} before the first iteration",
            iterations=0,
            residuals=(),
            stats={"termination": "time_limit", "seconds": time.perf_counter() - clock},
        )
    run = _Run(layer, cov, known, opts, work)
    term, message = "max_iter", f"no convergence in {opts.max_iter} iterations"
    try:
        for _ in range(opts.max_iter):
            run.hist.append(run.rel)
            if run.rel <= opts.tol:
                term, message = "converged", f"relative residual {run.rel:.3g} ≤ tol {opts.tol:g}"
                break
            budget.check()
            ended = run.step(budget)
            if ended is not None:
                term, message = ended
                break
        else:
            run.hist.append(run.rel)
            if run.rel <= opts.tol:
                term = "converged"
                message = f"relative residual {run.rel:.3g} ≤ tol {opts.tol:g}"
    except BudgetExhausted as exc:
        term, message = "time_limit", f"{exc.reason} after {len(run.hist)} iterations"
    final = run.cov if term == "converged" else run.best[1]
    return NewtonResult(
        cov=frozen(np.array(final)),
        status=_TERMINATION_STATUS[term],
        message=message,
        iterations=max(len(run.hist) - 1, 0),
        residuals=tuple(run.hist),
        stats={
            "termination": term,
            "linear_solver": run.solver,
            "gmres_iterations": run.gm_its,
            "damped_steps": run.damped,
            "seconds": time.perf_counter() - clock,
        },
    )


def deflation_weight(
    cov: FloatArray, known: Sequence[FloatArray], s0: float, opts: SearchOptions
) -> float:
    """``m(Σ) = Π_i ((‖Σ − Σ_i‖/s0)^{−p} + shift)`` (1 without known roots)."""
    m = 1.0
    for k in known:
        x = float(np.linalg.norm(cov - k)) / s0
        m *= (x ** (-opts.deflation_power) if x > 0 else math.inf) + opts.deflation_shift
    return m


def deflation_factor(
    cov: FloatArray, h: FloatArray, known: Sequence[FloatArray], s0: float, opts: SearchOptions
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
