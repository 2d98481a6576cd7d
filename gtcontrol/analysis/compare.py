"""Gaussian invariance made visible: the token-level Transformer against the moment ODE.

Tokens are drawn from ``N(m0, Σ0)`` and moved by real softmax attention; the moment ODE moves
``N(m0, Σ0)`` itself. In the mean-field limit the empirical law stays Gaussian with exactly the
predicted moments (docs/theory.md §2), so every discrepancy at finite N is sampling error and should
fall like ``N^(-1/2)``. :func:`compare_tokens` measures it for several N and fits the slope.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §2.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._linalg import FloatArray
from .._status import Budget, BudgetExhausted, Outcome, ResultFields, Status
from .._validation import as_positive_int, as_time_limit
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Control, Layer, Schedule, as_control
from ..model.tokens import TokenTrajectory, simulate_tokens
from ._core import remaining_limit

__all__ = ["TokenComparison", "compare_tokens"]

_METRICS = ("mean_error", "cov_error", "bures_wasserstein")


@dataclass(frozen=True, eq=False, kw_only=True)
class TokenComparison(ResultFields, Outcome):
    """Errors between empirical token moments and the moment-ODE prediction at depth ``T``.

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
        The moment trajectory.
    example
        The token trajectory of the largest N (first repeat), for figures (``None`` when the
        budget ran out before it).
    repeats
        Repeats per token count.
    status
        ``Status.SUCCESS``, or ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` ran out (the
        errors of the runs not done are ``nan``), or the status of a token run that did not
        reach T (e.g. ``Status.OVERFLOW``).
    message
        What was compared, or what stopped it.
    stats
        ``seconds``, ``completed_runs``.
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
    model: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    n_tokens: Sequence[int] = (256, 1024, 4096),
    repeats: int = 3,
    seed: int = 0,
    method: str = "rk4",
    steps_per_layer: int | None = None,
    snapshots: int = 4,
    time_limit: float | None = None,
) -> TokenComparison:
    """Run the moment ODE and the token-level Transformer from the same Gaussian; measure errors.

    For each N and repeat, N tokens are sampled from ``initial`` with a seeded generator, moved by
    :func:`gtcontrol.simulate_tokens`, and their empirical Gaussian at depth T is compared
    with :func:`gtcontrol.simulate` from ``initial``. The time-discretization error of
    the token integrator (RK4: O(h⁴)) is far below the sampling error for the defaults.

    Parameters
    ----------
    model
        A :class:`~gtcontrol.Layer`, :class:`~gtcontrol.Schedule` or any control.
    initial
        ``N(m0, Σ0)``.
    T
        Depth (optional for controls that carry their own).
    n_tokens
        At least two distinct token counts N.
    repeats
        Repeats per N (independent samples).
    seed
        Seed of the token samples.
    method
        Token integrator (see :func:`gtcontrol.simulate_tokens`).
    steps_per_layer
        Token integrator steps per layer; ``None`` (default) lets the method choose (20 RK4
        steps per layer, one ``"discrete"`` step; ``"adaptive"`` picks its own steps).
    snapshots
        Recorded depths of the example run (≥ 2).
    time_limit
        Wall-clock limit in seconds (``None``: none); running out returns the errors of the
        runs done so far with ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    TokenComparison

    Raises
    ------
    InvalidParametersError
        On fewer than two token counts, a non-positive count, moments that blow up before T,
        or the usual model/initial errors.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Gaussian, Layer, compare_tokens
    >>> layer = Layer(A=-0.5 * np.eye(2), B=0.5 * np.eye(2), v=-0.5)
    >>> cmp = compare_tokens(layer, Gaussian(np.zeros(2), np.eye(2)), T=0.5,
    ...                      n_tokens=(64, 256), repeats=2, steps_per_layer=4)
    >>> cmp.status, sorted(cmp.slopes)
    (<Status.SUCCESS: 'success'>, ['bures_wasserstein', 'cov_error', 'mean_error'])
    """
    ns = sorted({as_positive_int("n_tokens", n) for n in n_tokens})
    if len(ns) < 2:
        raise InvalidParametersError("n_tokens: expected at least two distinct token counts")
    reps = as_positive_int("repeats", repeats)
    ctrl = as_control(model, T)
    budget = Budget(as_time_limit(time_limit))
    clock = time.perf_counter()
    predicted = simulate(ctrl, initial, time_limit=remaining_limit(budget))
    if predicted.status is Status.BLOWUP:
        raise InvalidParametersError(
            f"model: the moments blow up at t = {predicted.blowup_time:.6g} < T = {ctrl.T:g}; "
            "choose a shorter horizon to compare with tokens"
        )
    target = predicted.final
    snap_t = np.linspace(0.0, ctrl.T, max(as_positive_int("snapshots", snapshots), 2))
    errs = np.full((3, len(ns), reps), np.nan)
    err0 = np.full((len(ns), reps), np.nan)
    rng = np.random.default_rng(seed)
    example: TokenTrajectory | None = None
    stop: Status = predicted.status
    done = 0
    try:
        if predicted.status is not Status.SUCCESS:
            raise BudgetExhausted(f"moment ODE: {predicted.message}")
        for i, n in enumerate(ns):
            for r in range(reps):
                x0 = initial.sample(n, rng)
                e0 = Gaussian.from_samples(x0).bures_wasserstein(initial)
                last = i == len(ns) - 1 and r == 0
                traj = simulate_tokens(
                    ctrl,
                    x0,
                    method=method,
                    steps_per_layer=steps_per_layer,
                    snapshot_times=snap_t if last else None,
                    time_limit=remaining_limit(budget),
                )
                if traj.status is not Status.SUCCESS:
                    stop = traj.status
                    raise BudgetExhausted(f"tokens (N = {n}): {traj.message}")
                emp = traj.empirical(-1)
                errs[0, i, r] = float(np.linalg.norm(emp.mean - target.mean))
                errs[1, i, r] = float(
                    np.linalg.norm(emp.cov - target.cov) / np.linalg.norm(target.cov)
                )
                errs[2, i, r] = emp.bures_wasserstein(target)
                err0[i, r] = e0
                done += 1
                if last:
                    example = traj
        status, message = Status.SUCCESS, f"{done} token runs compared with the moment ODE"
    except BudgetExhausted as exc:
        status = Status.BUDGET_EXHAUSTED if stop is Status.SUCCESS else stop
        message = f"stopped after {done} token runs: {exc.reason}"
    with warnings.catch_warnings():  # token counts without a completed run give nan
        warnings.simplefilter("ignore", RuntimeWarning)
        rms = np.sqrt(np.nanmean(errs**2, axis=2))
        rms0 = np.sqrt(np.nanmean(err0**2, axis=1))
    return TokenComparison(
        n_tokens=tuple(ns),
        mean_error=rms[0],
        cov_error=rms[1],
        bures_wasserstein=rms[2],
        initial_bures_wasserstein=rms0,
        slopes=_slopes(ns, rms),
        predicted=predicted,
        example=example,
        repeats=reps,
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - clock, "completed_runs": done},
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
