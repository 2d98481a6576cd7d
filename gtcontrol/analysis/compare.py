"""Gaussian invariance made visible: the token-level Transformer against the moment ODE, honestly.

Tokens are drawn from ``N(m0, Σ0)`` and moved by real softmax attention; the moment ODE moves
``N(m0, Σ0)`` itself. In the mean-field limit the empirical law stays Gaussian with exactly the
predicted moments (docs/theory.md §2), so at finite N every discrepancy should be sampling error,
falling like ``N^(-1/2)``. :func:`compare_tokens` measures it for several N, fits the slope, and
says whether the tokens are **consistent** with the moment model, and if not, why:

* the token **integration error** (the run's tokens against a converged integration of the same
  tokens) must be below a tenth of the statistical error at the largest N, or the comparison
  measures the integrator;
* the **effective sample size** of each softmax along the predicted path, ``ESS/N =
  exp(−uᵀΣu)`` (:mod:`gtcontrol.model.finite_n`): when ``N · ESS/N`` is tiny for queries two
  standard deviations out, a few keys carry each softmax, finite-N attention is not the tilted
  mean ``m + ΣBx`` of the theory, and the error is a finite-N *bias* that does not fall like
  ``N^(-1/2)`` (for ``V = −0.5 I``, ``B = 5 I`` from ``N(0, I)`` it even grows with N);
* a ReLU/GELU feed-forward has no exact moment ODE: its tokens are compared against the Gaussian
  closure (the moment-matched Gaussian flow, :mod:`gtcontrol.model.gaussian_closure`), which the
  tokens leave as their law stops being Gaussian.

The work of the token runs is counted in token pairs (``N²`` per softmax head per field
evaluation, plus a fixed cost of an evaluation that dominates at small ``N``) against
``max_work``; a comparison that needs more than that even at its cheapest is
refused up front, and one that runs out returns ``BUDGET_EXHAUSTED`` with the runs done.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §2.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from .._blas import calm_blas
from .._display import Axes
from .._linalg import FloatArray
from .._progress import progress
from .._status import Budget, BudgetExhausted, Outcome, ResultFields, Status
from .._validation import (
    as_choice,
    as_positive_float,
    as_positive_int,
    as_seed,
    option_values,
    set_fields,
)
from ..errors import InvalidParametersError
from ..model._token_integrators import ADAPTIVE_METHODS, has_layer_noise
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory
from ..model.params import Control, Layer, Schedule, as_control
from ..model.tokens import TokenTrajectory, simulate_tokens
from ._compare_checks import (
    ESS_N_STD,
    Verdict,
    cost_per_eval,
    ess_along,
    kurtosis_ratio,
    min_evals,
    out_of_range,
    reference_flow,
    spread_ratio,
)
from ._core import remaining_limit

__all__ = ["TokenComparison", "compare_tokens"]

_METRICS = ("mean_error", "cov_error", "bures_wasserstein")
_METHODS = (*ADAPTIVE_METHODS, "rk4", "euler", "discrete")
#: Default cap on the token work, in token pairs (``N²`` per softmax head per field evaluation):
#: about a minute of softmax at ~10 ns per pair. The shipped comparison (N = 256, 1024, 4096,
#: three repeats, two heads, d = 3, T = 1: 26 evaluations per run, 50 for the run that stops at
#: the snapshot depths of the figure) needs 4.0e9.
DEFAULT_MAX_WORK = 6 * 10**9
_MAX_WORK_LIMIT = 10**15
#: Tolerance of the converged integration the token runs are checked against.
_REFERENCE_RTOL = 1e-8


@dataclass(frozen=True, kw_only=True)
class _CompareOptions:
    """Validator of the keywords of :func:`compare_tokens` (private); see its docstring."""

    n_tokens: Any = (256, 1024, 4096)
    repeats: int = 3
    seed: int = 0
    method: str | None = None
    steps_per_layer: int | None = None
    rtol: float | None = None
    n_points: int = 4
    slope_tol: float = 0.25
    max_work: int = DEFAULT_MAX_WORK
    time_limit: float | None = None

    def __post_init__(self) -> None:
        try:
            raw = list(self.n_tokens)
        except TypeError:
            raise InvalidParametersError(
                f"n_tokens: expected a sequence of token counts, got {self.n_tokens!r}"
            ) from None
        ns = sorted({as_positive_int("n_tokens", n, maximum=10**6) for n in raw})
        if len(ns) < 2:
            raise InvalidParametersError("n_tokens: expected at least two distinct token counts")
        set_fields(self, n_tokens=tuple(ns))
        as_positive_int("repeats", self.repeats, maximum=1000)
        as_seed("seed", self.seed)
        if self.steps_per_layer is not None:
            as_positive_int("steps_per_layer", self.steps_per_layer, maximum=10**6)
        method = self.method
        if method is None:
            method = "rk4" if self.steps_per_layer is not None else "DOP853"
        set_fields(self, method=as_choice("method", method, _METHODS))
        if self.rtol is not None and method not in ADAPTIVE_METHODS:
            raise InvalidParametersError(
                f"rtol: only used by the embedded pairs {ADAPTIVE_METHODS}, got {method!r}"
            )
        as_positive_int("n_points", self.n_points, maximum=10**4)
        tol = as_positive_float("slope_tol", self.slope_tol)
        if tol > 2.0:
            raise InvalidParametersError(f"slope_tol: expected at most 2, got {self.slope_tol!r}")
        as_positive_int("max_work", self.max_work, maximum=_MAX_WORK_LIMIT)


@dataclass(frozen=True, eq=False, kw_only=True)
class TokenComparison(ResultFields, Outcome):
    """Errors between empirical token moments and the moment-model prediction at depth ``T``.

    Attributes
    ----------
    n_tokens
        The token counts N, increasing.
    mean_error
        Root-mean-square over repeats of ``|m_tokens(T) − m(T)|``, one entry per N.
    cov_error
        Same for ``‖Σ_tokens(T) − Σ(T)‖_F / ‖Σ(T)‖_F``.
    bures_wasserstein
        Same for the Bures–Wasserstein distance between the empirical and predicted Gaussians.
    initial_bures_wasserstein
        The same distance at depth 0 (pure sampling error, for reference).
    slopes
        Least-squares slope of ``log(error)`` against ``log(N)`` per metric (theory: −1/2;
        ``nan`` with fewer than two completed token counts).
    predicted
        The moment trajectory (the Gaussian closure for a ReLU/GELU feed-forward).
    example
        The token trajectory of the largest N (first repeat), for figures (``None`` when the
        budget ran out before it).
    repeats
        Repeats per token count.
    consistent
        The verdict: the comparison completed, the Bures–Wasserstein slope is within
        ``slope_tol`` of −1/2, and the integration error is below a tenth of the statistical
        error. ``message`` gives the reason either way.
    integration_error
        Bures–Wasserstein distance at T between the empirical Gaussians of one run (smallest N,
        first repeat) and of a converged integration (``rtol = 1e-8``) of the same tokens.
    statistical_error
        ``bures_wasserstein`` at the largest completed N (the smallest sampling error).
    ess_t, ess
        Depths along the predicted path and the worst ``ESS/N`` there: the minimum over heads of
        :func:`~gtcontrol.model.finite_n.worst_ess_fraction` for queries within two standard
        deviations (``exp(−uᵀΣu)``, ``u = B_h x``).
    reference
        ``"moment ODE"`` or ``"Gaussian closure"`` (a non-affine feed-forward).
    slope_tol
        The stated tolerance of the slope around −1/2.
    status
        ``Status.SUCCESS`` when every run completed (whatever the verdict), else
        ``Status.BUDGET_EXHAUSTED`` (``time_limit`` or ``max_work``; the errors of the runs not
        done are ``nan``) or the status of a token run that did not reach T (e.g. ``OVERFLOW``).
    message
        The verdict and its reason, with the numbers, or what stopped the comparison.
    stats
        ``seconds``, ``completed_runs``, ``work`` (token pairs spent), ``max_work``,
        ``method``, ``rtol`` (adaptive runs), ``max_error_estimate`` (largest
        ``error_estimate`` of the adaptive runs), ``ess_min``, ``ess_min_t``,
        ``effective_keys`` (``N_max · ess_min``), ``kurtosis_ratio`` (Mardia's kurtosis of the
        largest-N cloud at T over its Gaussian value: 1 for Gaussian tokens).
    """

    n_tokens: tuple[int, ...]
    mean_error: FloatArray
    cov_error: FloatArray
    bures_wasserstein: FloatArray
    initial_bures_wasserstein: FloatArray
    slopes: dict[str, float]
    predicted: Trajectory
    example: TokenTrajectory | None
    repeats: int
    consistent: bool = False
    integration_error: float = math.nan
    statistical_error: float = math.nan
    ess_t: FloatArray | None = None
    ess: FloatArray | None = None
    reference: str = "moment ODE"
    slope_tol: float = 0.25

    _summary_fields = (
        "n_tokens",
        "consistent",
        "bures_wasserstein",
        "slopes",
        "statistical_error",
        "integration_error",
        "reference",
    )

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_convergence

        errors = {"|mean error|": self.mean_error, "relative cov error": self.cov_error}
        errors["Bures-Wasserstein"] = self.bures_wasserstein
        title = f"tokens vs {self.reference} at depth T"
        draw_convergence(ax, self.n_tokens, errors, title=title)

    @property
    def ess_min(self) -> float:
        """Smallest worst-case ``ESS/N`` along the predicted path (``nan`` if not computed)."""
        return float(np.min(self.ess)) if self.ess is not None and self.ess.size else math.nan

    def table(self) -> list[dict[str, float]]:
        """One row per N (for reports and ``result.json``)."""
        return [
            {
                "n_tokens": n,
                "mean_error": float(self.mean_error[i]),
                "cov_error": float(self.cov_error[i]),
                "bures_wasserstein": float(self.bures_wasserstein[i]),
                "initial_bures_wasserstein": float(self.initial_bures_wasserstein[i]),
            }
            for i, n in enumerate(self.n_tokens)
        ]


def compare_tokens(
    control: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    n_tokens: Sequence[int] = (256, 1024, 4096),
    repeats: int = 3,
    seed: int = 0,
    method: str | None = None,
    steps_per_layer: int | None = None,
    rtol: float | None = None,
    n_points: int = 4,
    slope_tol: float = 0.25,
    max_work: int = DEFAULT_MAX_WORK,
    time_limit: float | None = None,
) -> TokenComparison:
    """Run the moment model and the token-level Transformer from the same Gaussian; judge them.

    For each N and repeat, N tokens are sampled from ``initial`` with a seeded generator, moved by
    :func:`gtcontrol.simulate_tokens`, and their empirical Gaussian at depth T is compared with
    :func:`gtcontrol.simulate` from ``initial`` (with a ReLU/GELU feed-forward: with the
    Gaussian closure, :func:`~gtcontrol.model.gaussian_closure.simulate_closure`). The verdict
    ``.consistent`` needs the Bures–Wasserstein error to fall like ``N^(-1/2)`` (fitted slope
    within ``slope_tol``) and the token integration error to be below a tenth of the statistical
    error; ``message`` says why not (integration error, softmax starvation measured by
    ``ESS/N = exp(−uᵀΣu)`` along the path, or the Gaussian closure). See the module docstring.

    Parameters
    ----------
    control
        A :class:`~gtcontrol.Layer`, :class:`~gtcontrol.Schedule` or any control.
    initial
        ``N(m0, Σ0)``.
    T
        Depth (optional for controls that carry their own).
    n_tokens
        At least two distinct token counts N (each at most ``10**6``).
    repeats
        Repeats per N (independent samples; at most 1000).
    seed
        Seed of the token samples.
    method
        Token integrator (see :func:`gtcontrol.simulate_tokens`): ``"DOP853"``, ``"RK45"``,
        ``"RK23"``, ``"rk4"``, ``"euler"`` or ``"discrete"``. ``None``: ``"rk4"`` when
        ``steps_per_layer`` is given, else ``"DOP853"``.
    steps_per_layer
        Steps per layer of the fixed-step methods (``None``: the method's default).
    rtol
        Tolerance of an embedded pair; ``None`` sizes it from the statistical error,
        ``clip(0.05 ρ / sqrt(N_max), 1e-9, 1e-3)`` with ``ρ ≤ 1`` the smallest ratio of the
        cloud's spread to its size along the path (the DOP853 error estimate is conservative by
        about 5; the integration check measures the real error).
    n_points
        Recorded depths of the example run (≥ 2).
    slope_tol
        Accepted distance of the fitted Bures–Wasserstein slope from −1/2 (default 0.25: with
        three repeats over a 16-fold range of N the slope scatters by about ±0.1).
    max_work
        Cap on the token work in token pairs, ``N²`` per softmax head per field evaluation
        plus 25,000 for the fixed cost of an evaluation, summed over all runs (default
        ``6·10⁹``, about a minute; at most ``10¹⁵``).
    time_limit
        Wall-clock limit in seconds (``None``: none), held to within ``max(1 s, 10 %)``: it
        bounds the moment reference, the sizing of the runs and the runs; the predicted ESS
        along the path (``O(d³)`` per depth) is wrap-up work within that tolerance. Running out
        returns the errors of the runs done so far with ``Status.BUDGET_EXHAUSTED`` (also when
        only the ESS pass was cut: ``ess`` then holds the depths done).

    Returns
    -------
    TokenComparison

    Raises
    ------
    InvalidParametersError
        On fewer than two token counts, a non-positive or absurd count, a comparison whose
        cheapest run already needs more than ``max_work`` (the message names it and the
        estimate), moments that blow up before T, a layer with noise (the integration error
        is measured against a deterministic reference run of the same tokens, which Brownian
        forcing does not have), or the usual model/initial errors.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Gaussian, Layer, compare_tokens
    >>> layer = Layer(A=-0.5 * np.eye(2), B=0.5 * np.eye(2), V=-0.5)
    >>> cmp = compare_tokens(layer, Gaussian(np.zeros(2), np.eye(2)), T=0.5,
    ...                      n_tokens=(64, 256), repeats=2)
    >>> cmp.status, sorted(cmp.slopes), cmp.integration_error < 1e-6
    (<Status.SUCCESS: 'success'>, ['bures_wasserstein', 'cov_error', 'mean_error'], True)
    """
    opts = _CompareOptions(**option_values(_CompareOptions, locals()))
    ctrl = as_control(control, T)
    if has_layer_noise(ctrl):
        raise InvalidParametersError(
            "control: a layer with noise (dx = v(x) dt + G dW) is not compared: the integration "
            "error is measured against a DOP853 reference run of the same tokens, which has no "
            "Brownian forcing; run its tokens with simulate_tokens(method='euler')"
        )
    budget = Budget(opts.time_limit)
    clock = time.perf_counter()
    _work_needed(ctrl, None, opts)  # absurd sizes are refused before anything is computed
    # on a busy machine a multi-threaded BLAS stalls inside calls no budget check interrupts
    with calm_blas():
        return _compare(ctrl, initial, opts, budget, clock)


def _compare(
    ctrl: Control, initial: Gaussian, opts: _CompareOptions, budget: Budget, clock: float
) -> TokenComparison:
    """:func:`compare_tokens` once its inputs are checked."""
    # the time left, never raising: a budget spent already gives a BUDGET_EXHAUSTED reference
    left = None if budget.time_limit is None else max(budget.remaining(), 1e-9)
    predicted, reference = reference_flow(ctrl, initial, left)
    if predicted.status is Status.BLOWUP:
        raise InvalidParametersError(
            f"control: the moments blow up at t = {predicted.blowup_time:.6g} < T = {ctrl.T:g}; "
            "choose a shorter horizon to compare with tokens"
        )
    plan = _plan(ctrl, predicted, opts, budget)
    run = _Runner(ctrl, initial, opts, plan, budget)
    runs = len(opts.n_tokens) * opts.repeats
    work = float(opts.repeats * sum(plan.cost[n] for n in opts.n_tokens))
    with progress(f"compare-tokens: {runs} token runs", total=work) as run.update:
        run.all(predicted)
    return run.result(predicted, reference, clock)


@dataclass(frozen=True)
class _Plan:
    """What the runs cost: token pairs per field evaluation, evaluations, the adaptive rtol."""

    cost: dict[int, int]
    rtol: float | None
    min_evals: int


def _count(n: int) -> str:
    """A count in three significant digits, also one past float64's range (``1e+450``: a long
    horizon times a fast rate, in steps)."""
    return f"{n:.3g}" if n < 10**308 else format(Decimal(n), ".3g")


def _work_needed(
    ctrl: Control,
    predicted: Trajectory | None,
    opts: _CompareOptions,
    budget: Budget | None = None,
) -> tuple[dict[int, int], int]:
    """Token pairs per field evaluation by N and the least evaluations of a run; refuse a
    comparison that needs more than ``max_work`` even at its cheapest (sized from N, the
    repeats, the number of sizes and, once the path is known, T times the field's rate)."""
    ns: tuple[int, ...] = opts.n_tokens
    cost = {n: cost_per_eval(ctrl, n) for n in ns}
    evals = min_evals(ctrl, predicted, str(opts.method), opts.steps_per_layer, budget)
    # the reference run is adaptive: the same bound when the runs are (up to 64 eigenproblems)
    ref = evals if opts.method == "DOP853" else min_evals(ctrl, predicted, "DOP853", None, budget)
    need = opts.repeats * sum(cost[n] for n in ns) * evals + cost[ns[0]] * ref
    if need > opts.max_work:
        per = ", ".join(f"N = {n}: {_count(opts.repeats * cost[n] * evals)}" for n in ns)
        raise InvalidParametersError(
            f"n_tokens, repeats: this comparison needs at least {_count(need)} token pairs "
            f"(N² per softmax head per field evaluation, at least {_count(evals)} evaluations per "
            f"run with method {opts.method!r}; {per}), more than max_work = {opts.max_work:.3g}; "
            "use fewer or smaller token counts, fewer repeats, a shorter T, or raise max_work"
        )
    return cost, evals


def _plan(ctrl: Control, predicted: Trajectory, opts: _CompareOptions, budget: Budget) -> _Plan:
    """Size the runs (refusing them beyond ``max_work``) and the adaptive tolerance; the rates
    along the path that sharpen the size are computed while ``budget`` lasts."""
    cost, evals = _work_needed(ctrl, predicted, opts, budget)
    rtol = opts.rtol
    if opts.method in ADAPTIVE_METHODS and rtol is None:
        ratio = spread_ratio(predicted)
        rtol = float(np.clip(0.05 * ratio / math.sqrt(opts.n_tokens[-1]), 1e-9, 1e-3))
    return _Plan(cost, rtol, evals)


class _Runner:
    """The token runs of one comparison, with their work and time budget."""

    def __init__(
        self, ctrl: Control, initial: Gaussian, opts: _CompareOptions, plan: _Plan, budget: Budget
    ) -> None:
        self.ctrl, self.initial, self.opts, self.plan, self.budget = (
            ctrl,
            initial,
            opts,
            plan,
            budget,
        )
        ns, reps = opts.n_tokens, opts.repeats
        self.errs = np.full((3, len(ns), reps), np.nan)
        self.err0 = np.full((len(ns), reps), np.nan)
        self.example: TokenTrajectory | None = None
        self.integration_error = math.nan
        self.max_estimate = 0.0
        self.kurtosis = math.nan
        self.work = 0
        self.done = 0
        #: Progress report ``update(runs done, weighted by their cost per evaluation)``.
        self.update: Callable[[float], None] = lambda done: None
        self.weighted = 0.0
        self.status = Status.SUCCESS
        self.stop = ""

    def _tokens(self, x0: Any, n: int, *, snaps: Any = None, ref: bool = False) -> TokenTrajectory:
        """One token run, its evaluations capped by the work left."""
        left = self.opts.max_work - self.work
        cap = left // self.plan.cost[n]
        if cap < 1:
            raise BudgetExhausted(f"the work cap max_work = {self.opts.max_work:.3g} was reached")
        kw: dict[str, Any] = (
            {"method": "DOP853", "rtol": _REFERENCE_RTOL}
            if ref
            else {
                "method": self.opts.method,
                "steps_per_layer": self.opts.steps_per_layer,
                "rtol": self.plan.rtol,
            }
        )
        traj = simulate_tokens(
            self.ctrl,
            x0,
            times=snaps,
            max_evals=int(min(cap, 10**9)),
            time_limit=remaining_limit(self.budget),
            **kw,
        )
        self.work += int(traj.stats["n_velocity"]) * self.plan.cost[n]
        if traj.status is not Status.SUCCESS:
            if traj.status is not Status.BUDGET_EXHAUSTED:
                self.status = traj.status
            elif int(traj.stats["n_velocity"]) >= cap:
                raise BudgetExhausted(
                    f"the work cap max_work = {self.opts.max_work:.3g} was reached (N = {n})"
                )
            raise BudgetExhausted(f"tokens (N = {n}): {traj.message}")
        if not ref:
            self.max_estimate = max(self.max_estimate, float(traj.stats.get("error_estimate", 0)))
        return traj

    def all(self, predicted: Trajectory) -> None:
        """Every run, smallest N first; the integration check right after the first."""
        ns = self.opts.n_tokens
        snap_t = np.linspace(0.0, self.ctrl.T, max(self.opts.n_points, 2))
        rng = np.random.default_rng(self.opts.seed)
        try:
            if predicted.status is not Status.SUCCESS:
                self.status = predicted.status
                raise BudgetExhausted(f"{predicted.message} (moment reference)")
            overflow = out_of_range(predicted)
            if overflow:
                self.status = Status.OVERFLOW
                raise BudgetExhausted(overflow)
            target = predicted.final
            for i, n in enumerate(ns):
                for r in range(self.opts.repeats):
                    x0 = self.initial.sample(n, seed=rng)
                    last = i == len(ns) - 1 and r == 0
                    traj = self._tokens(x0, n, snaps=snap_t if last else None)
                    emp = traj.empirical(-1)
                    self.errs[:, i, r] = _errors(emp, target)
                    self.err0[i, r] = Gaussian.from_samples(x0).bures_wasserstein(self.initial)
                    self.done += 1
                    self.weighted += self.plan.cost[n]
                    self.update(self.weighted)
                    if last:
                        self.example = traj
                        self.kurtosis = kurtosis_ratio(traj.final_tokens)
                    if i == 0 and r == 0:
                        ref = self._tokens(x0, n, ref=True)
                        self.integration_error = emp.bures_wasserstein(ref.empirical(-1))
        except BudgetExhausted as exc:
            if self.status is Status.SUCCESS:
                self.status = Status.BUDGET_EXHAUSTED
            self.stop = f"stopped after {self.done} token runs: {exc.reason}"

    def result(self, predicted: Trajectory, reference: str, clock: float) -> TokenComparison:
        """The comparison, its verdict and message (``clock``: when the comparison began)."""
        with warnings.catch_warnings():  # token counts without a completed run give nan
            warnings.simplefilter("ignore", RuntimeWarning)
            rms = np.sqrt(np.nanmean(self.errs**2, axis=2))
            rms0 = np.sqrt(np.nanmean(self.err0**2, axis=1))
        ns, opts = self.opts.n_tokens, self.opts
        slopes = _slopes(ns, rms)
        done_bw = rms[2][np.isfinite(rms[2])]
        stat = float(done_bw[-1]) if done_bw.size else math.nan
        n_max = ns[int(np.flatnonzero(np.isfinite(rms[2]))[-1])] if done_bw.size else ns[-1]
        ess_t, ess, ess_complete = ess_along(self.ctrl, predicted, self.budget)
        if not ess_complete and self.status is Status.SUCCESS:
            self.status = Status.BUDGET_EXHAUSTED
            self.stop = (
                f"{self.budget.reason()} while predicting the ESS along the path "
                f"({ess.size} depths done); the token runs are complete"
            )
        k = int(np.argmin(ess)) if ess.size else -1
        ess_min = float(ess[k]) if ess.size else math.nan
        verdict = Verdict(
            slope=slopes["bures_wasserstein"],
            slope_tol=opts.slope_tol,
            integration=self.integration_error,
            statistical=stat,
            n_max=n_max,
            ess_min=ess_min,
            ess_t=float(ess_t[k]) if ess.size else math.nan,
            reference=reference,
            kurtosis=self.kurtosis,
        )
        consistent = self.status is Status.SUCCESS and verdict.consistent
        head = (
            f"{self.done} token runs (N = {', '.join(map(str, ns))}; {opts.repeats} repeats; "
            f"method {opts.method}) against the {reference}"
        )
        text = verdict.text() if self.status is Status.SUCCESS else self.stop
        return TokenComparison(
            n_tokens=tuple(ns),
            mean_error=rms[0],
            cov_error=rms[1],
            bures_wasserstein=rms[2],
            initial_bures_wasserstein=rms0,
            slopes=slopes,
            predicted=predicted,
            example=self.example,
            repeats=opts.repeats,
            consistent=consistent,
            integration_error=self.integration_error,
            statistical_error=stat,
            ess_t=ess_t,
            ess=ess,
            reference=reference,
            slope_tol=opts.slope_tol,
            status=self.status,
            message=f"{head}: {text}",
            stats={
                "seconds": time.perf_counter() - clock,
                "completed_runs": self.done,
                "work": self.work,
                "max_work": opts.max_work,
                "method": opts.method,
                "rtol": self.plan.rtol,
                "max_error_estimate": self.max_estimate,
                "ess_min": ess_min,
                "ess_min_t": verdict.ess_t,
                "effective_keys": n_max * ess_min,
                "ess_n_std": ESS_N_STD,
                "kurtosis_ratio": self.kurtosis,
            },
        )


def _errors(emp: Gaussian, target: Gaussian) -> FloatArray:
    """Mean error, relative covariance error, Bures–Wasserstein distance."""
    return np.array(
        [
            float(np.linalg.norm(emp.mean - target.mean)),
            float(np.linalg.norm(emp.cov - target.cov))
            / max(float(np.linalg.norm(target.cov)), 1e-300),
            emp.bures_wasserstein(target),
        ]
    )


def _slopes(ns: Sequence[int], rms: FloatArray) -> dict[str, float]:
    """Least-squares slope of ``log(error)`` against ``log(N)`` over the completed counts."""
    out: dict[str, float] = {}
    logn = np.log(np.asarray(ns, dtype=float))
    for k, name in enumerate(_METRICS):
        ok = np.isfinite(rms[k]) & (rms[k] > 0)
        out[name] = (
            float(np.polyfit(logn[ok], np.log(rms[k][ok]), 1)[0]) if ok.sum() >= 2 else math.nan
        )
    return out
