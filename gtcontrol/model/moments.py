"""The Gaussian moment dynamics: the one home of the moment vector field.

For ``μ = N(m, Σ)`` the tilted law ``∝ e^{yᵀBx} N(y; m, Σ)`` is ``N(m + ΣBx, Σ)``, so each head's
attention is the affine map ``Attn_h(x) = m + Σ B_h x`` and the velocity is ``v(x) = M x + c`` with

    M = A + Σ_h V_h Σ B_h,        c = b + Σ_h V_h m.

An affine field keeps Gaussians Gaussian, with the moment ODE (docs/theory.md §2)

    dm/dt = M m + c,        dΣ/dt = M Σ + Σ Mᵀ,

and a discrete residual layer ``x ← x + h v(x)`` maps moments exactly by
``m⁺ = m + h (M m + c)``, ``Σ⁺ = (I + hM) Σ (I + hM)ᵀ``.

Everything in gtcontrol that needs the field calls :func:`affine_velocity` / :func:`moment_field`
(defined in :mod:`gtcontrol.model.field`, re-exported here). The parts of the adaptive
integrator live in :mod:`gtcontrol.model._moment_integrator`.
:func:`simulate` never raises on numerical trouble: a blow-up, an overflow, an integrator
failure or a spent budget (``time_limit``, ``max_evals``) is a :class:`Trajectory` whose
``status`` says which, holding the trajectory up to that point.

Reference: the paper cited in :mod:`gtcontrol`, §2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._display import Axes, SummaryItems
from .._docstring import fill, integrator_budget_doc
from .._linalg import FloatArray, numerical_ranks, sym
from .._progress import progress
from .._status import (
    DEFAULT_MAX_EVALS,
    Budget,
    BudgetExhausted,
    OutcomeOrBlowup,
    ResultFields,
    Status,
)
from .._validation import as_positive_int, as_time_limit, frozen, option_values
from ._blowup_detection import IntegrationEnd
from ._moment_integrator import (
    MAX_STEPS_PER_LAYER,
    IntegratorOptions,
    MomentRecord,
    check_exact,
    integrate,
    setup_run,
)
from .field import affine_velocity, moment_field
from .gaussian import Gaussian, check_gaussian
from .params import Control, Layer, Schedule, as_control

__all__ = ["Trajectory", "affine_velocity", "moment_field", "simulate", "simulate_discrete"]

NDArrayInt = np.ndarray


@dataclass(frozen=True, eq=False)
class Trajectory(ResultFields, OutcomeOrBlowup):
    """Moments along depth (the result of :func:`simulate` and :func:`simulate_discrete`).

    Also the result of :func:`~gtcontrol.model.gaussian_closure.simulate_closure`.

    Attributes
    ----------
    t
        Recorded depths, shape ``(n,)``.
    mean, cov
        Means ``(n, d)`` and covariances ``(n, d, d)`` at those depths.
    rank
        Numerical rank of each covariance, ``(n,)``.
    status
        :class:`~gtcontrol.Status`: ``SUCCESS`` (integrated to the horizon), ``BLOWUP`` (the
        covariance diverges in finite time, at ``blowup_time``), ``OVERFLOW`` (it left the
        floating-point range by exponential growth), ``BUDGET_EXHAUSTED`` (``time_limit`` or
        ``max_evals`` ran out) or ``FAILED`` (the integrator failed, e.g. its step collapsed).
        In every case but ``SUCCESS`` the arrays stop where the computation stopped.
    blowup_time
        Estimated blow-up time, ``math.inf`` when there is none.
    stats
        Integrator statistics. :func:`simulate`: ``nfev`` (right-hand-side evaluations, the
        Jacobians' included), ``njev`` (dense Jacobians), ``nsteps`` (accepted steps),
        ``method`` (the requested method), ``switched_to`` (the switches made on detected
        stiffness, in words with the depth), ``form`` (``"factor"`` and/or ``"entrywise"``),
        ``restarts`` (renormalizations of the factor) and ``seconds``.
        :func:`simulate_discrete`: ``steps`` and ``seconds``. The closure: ``nfev``, ``nsteps``,
        ``form`` (``"closure"``) and ``seconds``.
    message
        How the computation ended, in words.
    blowup_bracket
        For ``BLOWUP`` from :func:`simulate`: ``(lower, upper)`` with ``lower`` the last depth the
        integration reached (Σ is finite there) and ``upper`` an over-estimate of the blow-up
        time verified by two agreeing extrapolations of ``1/λ_max`` (or, after a step-size
        collapse, widened by the remaining time); ``None`` otherwise.
    factor
        In factor form (noise-free layers): factors ``L`` with ``cov[i] = L[i] L[i]ᵀ``, shape
        ``(n, d, r)`` with ``r = rank Σ0`` (Σ is positive semidefinite and of rank ``r`` by
        construction); ``None`` when any part was integrated entry-wise.
    success
        True for ``SUCCESS`` and ``BLOWUP`` (a blow-up is the answer, not a failure).
    """

    t: FloatArray
    mean: FloatArray
    cov: FloatArray
    rank: NDArrayInt
    blowup_time: float = math.inf
    blowup_bracket: tuple[float, float] | None = None
    factor: FloatArray | None = None

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return int(self.mean.shape[1])

    @property
    def final(self) -> Gaussian:
        """The Gaussian at the last recorded depth (just before blow-up if it blew up)."""
        return self.at(-1)

    def at(self, i: int) -> Gaussian:
        """The Gaussian at record ``i``."""
        return Gaussian(self.mean[i], self.cov[i])

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def _summary_items(self) -> SummaryItems:
        return [
            ("dim", self.dim),
            ("n", len(self)),
            ("t", (float(self.t[0]), float(self.t[-1]))),
            ("blowup_time", self.blowup_time),
            ("final_trace", float(np.trace(self.cov[-1]))),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_covariance

        stop = "" if self.success else f" (stopped early: {self.status.value})"
        title = f"covariance eigenvalues{stop}"
        draw_covariance(ax, self.t, self.cov, blowup_time=self.blowup_time, title=title)


def _ranks(covs: FloatArray, budget: Budget) -> tuple[NDArrayInt, int]:
    """``numerical_ranks`` of the recorded covariances, and how many were measured.

    They are measured in chunks (about 20 ms each) until the time limit: ``n_points``
    eigensolves of size d come after the integration's last budget check (minutes at
    d = 1024). Not into the wrap-up time (:meth:`Budget.grace`): a solver that verifies its
    answer by a re-simulation gives it that grace as its time limit, and ranks measured into
    that grace again would push the solver past its limit (docs/benchmarks.md). The flow is
    a congruence, Σ(t) = Φ Σ0 Φᵀ, so it keeps the rank: a record not measured repeats the rank
    last measured (``stats["ranks_measured"]`` says how many were).
    """
    n, d = covs.shape[0], covs.shape[-1]
    if budget.time_limit is None or n == 0:
        return numerical_ranks(covs), n
    ranks = np.empty(n, dtype=int)
    step = max(1, int(2e7 / max(d, 1) ** 3))
    done = 0
    while done < n and (done == 0 or budget.remaining() > 0.0):
        ranks[done : done + step] = numerical_ranks(covs[done : done + step])
        done = min(done + step, n)
    ranks[done:] = ranks[done - 1]
    return ranks, done


def _assemble(
    rec: MomentRecord, outcome: IntegrationEnd, stats: Mapping[str, Any], budget: Budget
) -> Trajectory:
    """The :class:`Trajectory` of the recorded states (ranks measured within ``budget``)."""
    ts, means, covs, factors = rec.arrays()
    ranks, measured = _ranks(covs, budget)
    if measured < len(ranks):
        stats = {**stats, "ranks_measured": measured}
    return Trajectory(
        t=frozen(ts),
        mean=frozen(means),
        cov=frozen(covs),
        rank=frozen(ranks),
        status=outcome.status,
        blowup_time=outcome.blowup_time,
        stats=stats,
        message=outcome.message,
        blowup_bracket=outcome.bracket,
        factor=None if factors is None else frozen(factors),
    )


@fill(budget=integrator_budget_doc("right-hand-side"))
def simulate(
    control: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    rtol: float = IntegratorOptions.rtol,
    atol: float = IntegratorOptions.atol,
    method: str = IntegratorOptions.method,
    n_points: int = IntegratorOptions.n_points,
    blowup_factor: float = IntegratorOptions.blowup_factor,
    max_step: float = IntegratorOptions.max_step,
    around: Gaussian | None = None,
    max_evals: int = DEFAULT_MAX_EVALS,
    time_limit: float | None = None,
) -> Trajectory:
    """Integrate the moment ODE ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (docs/theory.md §2).

    Noise-free layers integrate the factor form ``Σ = e^{2s} K Kᵀ`` (``dK/dt = M(Σ) K``, a
    congruence: Σ stays positive semi-definite and keeps its rank by construction, and stays
    relatively accurate when it decays; docs/theory.md §2), renormalizing ``K`` when its scale
    drifts; layers with Brownian forcing integrate the entries of Σ. The integrator restarts
    exactly at every layer switch of a schedule, so the piecewise-constant parameters never
    straddle a step; a stiff flow switches to a rotating frame or to Radau. Numerical trouble
    never raises: it is the trajectory's ``status``.

    Parameters
    ----------
    control
        A :class:`Layer` (needs ``T``), a :class:`Schedule`, or any control with ``.T``,
        ``.breakpoints`` and ``.layer_at(t)`` (e.g. a closed-form steering control).
    initial
        The initial Gaussian ``N(m0, Σ0)``; Σ0 may be singular (the rank is preserved).
    T
        Horizon; optional for controls that carry their own.
    rtol
        Relative tolerance of the Runge–Kutta error control (default ``1e-11``).
    atol
        Absolute tolerance, scaled by ``max(max|y0|, 1)`` of the initial state (default
        ``1e-14``).
    method
        A ``scipy.integrate.solve_ivp`` method: ``"DOP853"`` (default), ``"RK45"``,
        ``"Radau"``, ``"LSODA"`` or ``"BDF"``.
    n_points
        Number of recorded depths, spread over the layers (every layer switch is recorded);
        at most ``10**6``.
    blowup_factor
        Growth of ``‖Σ‖₂ = λ_max`` over ``max(‖Σ0‖₂, 1)`` (> 1) at which the blow-up watch
        starts: from there, at every tenfold growth of ``λ_max``, it extrapolates ``1/λ_max``
        to tell a finite-time blow-up (successive extrapolations agree and the remaining time
        shrinks) from exponential growth (the integration goes on).
    max_step
        Largest integrator step; ``inf`` (default) lets the error control decide.
    around
        A reference ``N(m̄, Σ̄)``, typically an equilibrium: integrate the distance
        ``(m − m̄, Σ − Σ̄)`` instead, renormalized to unit norm at every restart, so that
        ``rtol`` and ``atol`` are relative to the distance's own size. Near a stable
        equilibrium the distance falls by orders of magnitude while the moments stand still,
        and the factor form's error control, relative to Σ, takes steps for accuracy the
        distance no longer needs. Positive semidefiniteness is not built in (the factor form's
        is): take it for starts whose distance is small against the reference's smallest
        eigenvalue on their common range. ``stats["form"]`` is ``"deviation"``, ``factor``
        is ``None``.
    %(budget)s

    Returns
    -------
    Trajectory
        ``Status.SUCCESS`` when integrated to ``T``; ``Status.BLOWUP`` with ``blowup_time``
        when Σ diverges in finite time (located to ~1e-10 relative in the quadratic regime by
        extrapolating ``1/λ_max``, which is near-linear in depth at a Riccati singularity);
        ``Status.OVERFLOW`` when Σ grows past 1e250 without a finite-time singularity;
        ``Status.FAILED`` when the integrator fails (``message`` says why);
        ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` or ``max_evals`` runs out. The arrays
        always hold the trajectory up to where it stopped.

    Raises
    ------
    InvalidGaussianError
        If ``initial`` or ``around`` is not a Gaussian of the model's dimension.
    InvalidParametersError
        On a malformed model or option (naming it and the accepted range), a missing or
        conflicting ``T``, or a ReLU/GELU feed-forward.

    Examples
    --------
    Scalar layer ``dσ/dt = 2cσ²`` with ``c = vB = 1`` and ``σ0 = 1/2``: blow-up at
    ``T* = 1/(2cσ0) = 1`` (docs/theory.md §3).

    >>> from gtcontrol import Gaussian, Layer, simulate
    >>> traj = simulate(Layer(B=[[1.0]], V=1.0), Gaussian([0.0], [[0.5]]), T=2.0)
    >>> traj.status, traj.success
    (<Status.BLOWUP: 'blowup'>, True)
    >>> round(traj.blowup_time, 9)
    1.0

    With ``A = 1`` and ``vB = −1``, ``dσ/dt = 2σ(1 − σ)`` has the stable equilibrium ``σ* = 1``.
    From ``σ0 = 1.1`` the distance ``σ − 1 = q/(1 − q)``, ``q = e^{−2t}/11``, falls to
    1.8737760e-10 at depth 10; integrated as the distance it keeps its relative accuracy:

    >>> layer, star = Layer(A=[[1.0]], B=[[1.0]], V=-1.0), Gaussian([0.0], [[1.0]])
    >>> near = simulate(layer, Gaussian([0.0], [[1.1]]), T=10.0, method="RK45", rtol=1e-8,
    ...                 atol=1e-8, around=star)
    >>> near.stats["form"], f"{near.cov[-1, 0, 0] - 1.0:.5e}"
    ('deviation', '1.87378e-10')
    """
    opts = IntegratorOptions(**option_values(IntegratorOptions, locals()))
    budget = Budget(opts.time_limit)  # the wall clock of the whole call, set-up to ranks
    setup = setup_run(control, initial, T, opts, around)
    rec, outcome, stats = integrate(setup, opts)
    return _assemble(rec, outcome, stats, budget)


# ---------------------------------------------------------------------------- discrete layers
def _residual_step(
    layer: Layer, m: FloatArray, s: FloatArray, h: float
) -> tuple[FloatArray, FloatArray]:
    """Exact moments after ``x ← x + h v(x)`` (plus ``sqrt(h) G ξ`` for a noisy layer)."""
    m_mat, c = affine_velocity(layer, m, s)
    step = np.eye(m.shape[0]) + h * m_mat
    m_new = m + h * (m_mat @ m + c)
    s_new = step @ s @ step.T
    if layer.noise is not None:  # Euler–Maruyama: x⁺ = x + h v(x) + sqrt(h) G ξ
        s_new = s_new + h * (layer.noise @ layer.noise.T)
    return m_new, sym(s_new)


def simulate_discrete(
    control: Layer | Schedule,
    initial: Gaussian,
    T: float | None = None,
    *,
    steps_per_layer: int = 1,
    time_limit: float | None = None,
) -> Trajectory:
    """Exact moments of a discrete residual stack ``x ← x + h v(x)`` (docs/theory.md §2).

    Each step maps ``m⁺ = m + h (M m + c)`` and ``Σ⁺ = (I + hM) Σ (I + hM)ᵀ``, exactly what the
    step does to a Gaussian (and to the first two moments of any law for affine fields). A layer
    with noise ``G`` takes the Euler–Maruyama step ``x⁺ = x + h v(x) + sqrt(h) G ξ``, which adds
    ``h G Gᵀ`` to ``Σ⁺``. With a :class:`Schedule` of ``L`` layers and ``steps_per_layer = 1``
    this is a real L-layer network with residual step ``h = T/L``.

    Parameters
    ----------
    control
        A :class:`Layer` (needs ``T``), a :class:`Schedule`, or any control with ``.T``,
        ``.breakpoints`` and ``.layer_at(t)`` (the layer at each step's midpoint is used).
    initial
        The initial Gaussian ``N(m0, Σ0)``.
    T
        Horizon; optional for controls that carry their own.
    steps_per_layer
        Residual steps per segment between breakpoints (at most ``10**6``).
    time_limit
        Wall-clock limit in seconds (``None``: none); reaching it returns
        ``Status.BUDGET_EXHAUSTED`` with the steps done so far.

    Returns
    -------
    Trajectory
        Depths ``0, h, 2h, ...``; ``Status.OVERFLOW`` if the moments leave the floating-point
        range (the message gives the depth of the first non-finite step; the arrays stop before
        it): finitely many residual steps have no finite-time blow-up.

    Raises
    ------
    InvalidGaussianError
        If ``initial`` is not a Gaussian of the model's dimension.
    InvalidParametersError
        On a malformed model, ``T`` or ``steps_per_layer``, or a ReLU/GELU feed-forward.

    Examples
    --------
    One layer ``A = −1`` over depth 1 in two residual steps ``h = 0.5``: each step multiplies Σ by
    ``(1 + hM)² = 0.25``.

    >>> from gtcontrol import Gaussian, Layer, simulate_discrete
    >>> g0 = Gaussian([0.0], [[1.0]])
    >>> traj = simulate_discrete(Layer(A=[[-1.0]]), g0, 1.0, steps_per_layer=2)
    >>> traj.cov[:, 0, 0]
    array([1.    , 0.25  , 0.0625])
    """
    ctrl = as_control(control, T)
    steps = as_positive_int("steps_per_layer", steps_per_layer, maximum=MAX_STEPS_PER_LAYER)
    budget = Budget(as_time_limit(time_limit))
    d = ctrl.layer_at(0.0).dim
    g0 = check_gaussian(initial, d)
    check_exact(ctrl)
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    m, s = g0.mean.copy(), g0.cov.copy()
    ts, means, covs = [0.0], [m], [s]
    outcome = IntegrationEnd(Status.SUCCESS, "recursion completed")
    try:
        with (
            np.errstate(over="ignore", invalid="ignore"),
            progress("discrete layers", total=float(breaks[-1] - breaks[0])) as update,
        ):
            for k in range(len(breaks) - 1):
                t0, t1 = breaks[k], breaks[k + 1]
                h = (t1 - t0) / steps
                for j in range(steps):
                    budget.tick()
                    update(float(t0 + j * h - breaks[0]))
                    t = t0 + j * h
                    m, s = _residual_step(ctrl.layer_at(t + 0.5 * h), m, s, h)
                    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(m))):
                        # finitely many residual steps of a polynomial map cannot blow up in
                        # finite depth: leaving the floating-point range is an overflow
                        msg = (
                            f"the moments overflowed (left the floating-point range) at depth "
                            f"{float(t + h):.12g}; a finite recursion has no finite-time "
                            "blow-up; the arrays stop before that step"
                        )
                        raise _Stop(IntegrationEnd(Status.OVERFLOW, msg))
                    ts.append(t + h if j < steps - 1 else t1)
                    means.append(m)
                    covs.append(s)
    except BudgetExhausted as exc:
        msg = f"{exc.reason} at depth {ts[-1]:.6g}; the recursion stops there"
        outcome = IntegrationEnd(Status.BUDGET_EXHAUSTED, msg)
    except _Stop as stop:
        outcome = stop.outcome
    cov_arr = np.array(covs)
    ranks, _ = _ranks(cov_arr, budget)
    return Trajectory(
        t=frozen(np.array(ts)),
        mean=frozen(np.array(means)),
        cov=frozen(cov_arr),
        rank=frozen(ranks),
        status=outcome.status,
        blowup_time=outcome.blowup_time,
        stats={"steps": len(ts) - 1, "seconds": budget.elapsed},
        message=outcome.message,
    )


class _Stop(Exception):
    """Leaves the nested step loops of :func:`simulate_discrete` with an outcome."""

    def __init__(self, outcome: IntegrationEnd) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome
