"""Gaussian invariance made visible: the token-level Transformer against the moment ODE.

Tokens are drawn from ``N(m0, Σ0)`` and moved by real softmax attention; the moment ODE moves
``N(m0, Σ0)`` itself. In the mean-field limit the empirical law stays Gaussian with exactly the
predicted moments (docs/theory.md §2), so every discrepancy at finite N is sampling error and should
fall like ``N^(-1/2)``. :func:`compare_tokens` measures it for several N and fits the slope.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §2.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._status import Status
from .._validation import as_positive_int
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Control, Layer, Schedule, as_control
from ..model.tokens import TokenTrajectory, simulate_tokens

__all__ = ["TokenComparison", "compare_tokens"]

_METRICS = ("mean_error", "cov_error", "bures_wasserstein")


@dataclass(frozen=True, eq=False, kw_only=True)
class TokenComparison:
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
        Least-squares slope of ``log(error)`` against ``log(N)`` per metric (theory: −1/2).
    predicted
        The moment trajectory.
    example
        The token trajectory of the largest N (first repeat), for figures.
    """

    n_tokens: tuple[int, ...]
    mean_error: FloatArray
    cov_error: FloatArray
    bures_wasserstein: FloatArray
    initial_bures_wasserstein: FloatArray
    slopes: dict[str, float]
    predicted: Trajectory
    example: TokenTrajectory
    repeats: int
    stats: dict[str, Any] = field(default_factory=dict)

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
    steps_per_layer: int = 20,
    snapshots: int = 4,
) -> TokenComparison:
    """Run the moment ODE and the token-level Transformer from the same Gaussian; measure errors.

    For each N and repeat, N tokens are sampled from ``initial`` with a seeded generator, moved by
    :func:`~gtcontrol.tokens.simulate_tokens`, and their empirical Gaussian at depth T is compared
    with :func:`~gtcontrol.moments.simulate` from ``initial``. The time-discretization error of
    the token integrator (RK4: O(h⁴)) is far below the sampling error for the defaults.

    Raises
    ------
    InvalidParametersError
        On fewer than two token counts, a non-positive count, or the usual model/initial errors.
    """
    ns = sorted({as_positive_int("n_tokens", n) for n in n_tokens})
    if len(ns) < 2:
        raise InvalidParametersError("n_tokens: expected at least two distinct token counts")
    reps = as_positive_int("repeats", repeats)
    ctrl = as_control(model, T)
    clock = time.perf_counter()
    predicted = simulate(ctrl, initial)
    if predicted.status is not Status.SUCCESS:
        raise InvalidParametersError(
            f"model: the moments blow up at t = {predicted.blowup_time:.6g} < T = {ctrl.T:g}; "
            "choose a shorter horizon to compare with tokens"
        )
    target = predicted.final
    snap_t = np.linspace(0.0, ctrl.T, max(as_positive_int("snapshots", snapshots), 2))
    errs = np.zeros((3, len(ns), reps))
    err0 = np.zeros((len(ns), reps))
    rng = np.random.default_rng(seed)
    example: TokenTrajectory | None = None
    for i, n in enumerate(ns):
        for r in range(reps):
            x0 = initial.sample(n, rng)
            err0[i, r] = Gaussian.from_samples(x0).bures_wasserstein(initial)
            traj = simulate_tokens(
                ctrl,
                x0,
                method=method,
                steps_per_layer=steps_per_layer,
                snapshot_times=snap_t if (i == len(ns) - 1 and r == 0) else None,
            )
            emp = traj.empirical(-1)
            errs[0, i, r] = float(np.linalg.norm(emp.mean - target.mean))
            errs[1, i, r] = float(np.linalg.norm(emp.cov - target.cov) / np.linalg.norm(target.cov))
            errs[2, i, r] = emp.bures_wasserstein(target)
            if i == len(ns) - 1 and r == 0:
                example = traj
    rms = np.sqrt(np.mean(errs**2, axis=2))
    logn = np.log(np.asarray(ns, dtype=float))
    slopes = {
        name: float(np.polyfit(logn, np.log(rms[k]), 1)[0]) for k, name in enumerate(_METRICS)
    }
    assert example is not None
    return TokenComparison(
        n_tokens=tuple(ns),
        mean_error=rms[0],
        cov_error=rms[1],
        bures_wasserstein=rms[2],
        initial_bures_wasserstein=np.sqrt(np.mean(err0**2, axis=1)),
        slopes=slopes,
        predicted=predicted,
        example=example,
        repeats=reps,
        stats={"seconds": time.perf_counter() - clock},
    )
