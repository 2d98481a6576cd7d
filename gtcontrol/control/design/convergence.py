"""Data of the ``design`` figure: a design's moment trajectories from seeded random starts."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..._display import Axes, SummaryItems
from ..._linalg import FloatArray
from ..._progress import progress
from ..._status import Budget, Outcome, ResultFields, Status, as_time_limit
from ..._validation import as_positive_float, as_positive_int, frozen
from ...errors import InvalidParametersError
from ...model.gaussian import Gaussian
from ...model.moments import Trajectory, simulate
from ._common import Whitening
from .mean_matching import MeanMatchingDesign

__all__ = ["ConvergenceData", "design_convergence"]

#: Finite caps on the number of starts and of recorded depths.
_MAX_STARTS = 10_000
_MAX_POINTS = 10**6
#: Smallest wall-clock slice handed to one simulation (a spent budget still records ``t = 0``).
_MIN_SLICE = 1e-6
#: Cap on right-hand-side evaluations of one start's simulation (a stiff design with rates
#: 1e6 apart took 1e6 evaluations, 40 s): a start that reaches it keeps the depths it reached.
_START_MAX_EVALS = 200_000


@dataclass(frozen=True, eq=False)
class ConvergenceData(ResultFields, Outcome):
    """Errors of a design's moment trajectories from several random starts.

    Attributes
    ----------
    t
        Common recorded depths ``(n,)``.
    mean_error
        ``|m(t) − m*| / max(|m*|, 1)`` per start, ``(starts, n)``.
    cov_error
        ``‖Σ(t) − Σ*‖_F / ‖Σ*‖_F`` per start, ``(starts, n)``.
    rate, cov_rate
        The certified mean and covariance rates (for reference slopes).
    starts
        The initial Gaussians (fewer than requested when ``time_limit`` ran out; the last one
        may have been cut short, its errors NaN past the depth it reached).
    status
        ``Status.SUCCESS`` when every simulation succeeded; otherwise the status of the first
        one that did not (e.g. ``Status.BLOWUP``), or ``Status.BUDGET_EXHAUSTED`` when
        ``time_limit`` ran out before every start was simulated.
    message
        Final errors, or what went wrong.
    stats
        ``max_final_mean_error``, ``max_final_cov_error`` (over the starts that reached the
        final depth; NaN if none did), ``seconds``.
    """

    t: FloatArray
    mean_error: FloatArray
    cov_error: FloatArray
    rate: float
    cov_rate: float
    starts: tuple[Gaussian, ...]

    def _summary_items(self) -> SummaryItems:
        return [
            ("starts", len(self.starts)),
            ("t", (float(self.t[0]), float(self.t[-1])) if self.t.size else None),
            ("rate", self.rate),
            ("cov_rate", self.cov_rate),
            ("max_final_mean_error", self.stats.get("max_final_mean_error")),
            ("max_final_cov_error", self.stats.get("max_final_cov_error")),
        ]

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_mean_cov_errors

        rates = {"rate": self.rate, "cov_rate": self.cov_rate}
        draw_mean_cov_errors(ax, self.t, self.mean_error, self.cov_error, **rates)


def _random_start(tgt: Gaussian, wh: Whitening, rng: np.random.Generator) -> Gaussian:
    d = tgt.dim
    s = math.sqrt(float(np.linalg.norm(tgt.cov, 2)))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = np.exp(rng.uniform(-2.0, 2.0, d))
    return Gaussian(tgt.mean + 3.0 * s * rng.standard_normal(d), wh.T @ ((q * w) @ q.T) @ wh.T)


def _on_grid(traj: Trajectory, tgt: Gaussian, grid: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Relative mean and covariance errors of ``traj`` on ``grid`` (NaN where not reached).

    A trajectory stopped early (spent budget, blow-up) holds the grid depths it reached plus
    the depth where it stopped; only the grid depths are kept.
    """
    m_e = np.full(grid.size, np.nan)
    c_e = np.full(grid.size, np.nan)
    idx = np.clip(np.searchsorted(grid, traj.t), 0, grid.size - 1)
    hit = np.abs(grid[idx] - traj.t) <= 1e-12 * max(float(grid[-1]), 1.0)
    scale_m = max(float(np.linalg.norm(tgt.mean)), 1.0)
    m_e[idx[hit]] = np.linalg.norm(traj.mean[hit] - tgt.mean, axis=1) / scale_m
    c_e[idx[hit]] = np.linalg.norm(traj.cov[hit] - tgt.cov, axis=(1, 2)) / np.linalg.norm(tgt.cov)
    return m_e, c_e


def _nanmax(x: FloatArray) -> float:
    return float(np.nanmax(x)) if np.any(np.isfinite(x)) else math.nan


def design_convergence(
    design: MeanMatchingDesign,
    *,
    n_starts: int = 5,
    T: float | None = None,
    n_points: int = 201,
    seed: int = 0,
    time_limit: float | None = None,
) -> ConvergenceData:
    """Simulate a design from ``n_starts`` seeded random Gaussians (the ``design`` figure data).

    Starts: means ``m* + 3 s z`` and covariances ``Σ*^{1/2} (Q diag(e^{u}) Qᵀ) Σ*^{1/2}`` with
    ``z`` standard normal, ``s = sqrt(‖Σ*‖₂)``, Q a random rotation and ``u ~ U(−2, 2)``.

    Parameters
    ----------
    design
        A :class:`MeanMatchingDesign` with a positive certified rate.
    n_starts
        Number of starts (at most 10 000).
    T
        Depth; default ``16 / certificate.rate`` (errors ~1e-7 of the initial ones).
    n_points
        Recorded depths (``2 ≤ n_points ≤ 10⁶``), evenly spaced on ``[0, T]``.
    seed
        Seed of the starts.
    time_limit
        Wall-clock limit in seconds (``None``: no limit) for the whole call: every simulation
        gets the time that is left (its integrator checks it at every right-hand-side
        evaluation), and no new start begins once it is spent. Running out gives
        ``Status.BUDGET_EXHAUSTED`` with the starts simulated so far; a start cut short keeps
        the depths it reached and NaN beyond (the figure leaves a gap).

    Returns
    -------
    ConvergenceData

    Raises
    ------
    InvalidParametersError
        If ``design`` is not a :class:`MeanMatchingDesign`, has no positive certified rate, or
        on malformed counts, depth or limit.

    Examples
    --------
    >>> from gtcontrol import Gaussian, design_convergence, design_mean_matching
    >>> design = design_mean_matching(Gaussian([1.0], [[0.5]]), robustness=False, min_ess=None)
    >>> data = design_convergence(design, n_starts=2, n_points=21)
    >>> data.status, data.mean_error.shape
    (<Status.SUCCESS: 'success'>, (2, 21))
    """
    clock = time.perf_counter()
    if not isinstance(design, MeanMatchingDesign):
        raise InvalidParametersError(
            f"design: expected a MeanMatchingDesign, got {type(design).__name__}"
        )
    cert = design.certificate
    if not cert.rate > 0:
        raise InvalidParametersError("design: the certificate has no positive rate")
    n = as_positive_int("n_starts", n_starts, maximum=_MAX_STARTS)
    depth = 16.0 / cert.rate if T is None else as_positive_float("T", T)
    budget = Budget(as_time_limit(time_limit))
    tgt = design.target
    rng = np.random.default_rng(seed)
    wh = Whitening.of(tgt.cov)
    n_pts = as_positive_int("n_points", n_points, maximum=_MAX_POINTS)
    if n_pts < 2:
        raise InvalidParametersError(f"n_points: expected at least 2 depths, got {n_points!r}")
    grid = np.linspace(0.0, depth, n_pts)
    starts: list[Gaussian] = []
    merr: list[FloatArray] = []
    cerr: list[FloatArray] = []
    status, message = Status.SUCCESS, ""
    with progress(f"design: {n} convergence starts", total=n) as update:
        for i in range(n):
            if i > 0 and budget.exhausted:
                status, message = Status.BUDGET_EXHAUSTED, f"{budget.reason()} after {i} starts"
                break
            g0 = _random_start(tgt, wh, rng)
            left = budget.remaining()
            traj = simulate(
                design.layer,
                g0,
                depth,
                n_points=grid.size,
                max_evals=_START_MAX_EVALS,
                time_limit=None if math.isinf(left) else max(left, _MIN_SLICE),
            )
            m_e, c_e = _on_grid(traj, tgt, grid)
            merr.append(m_e)
            cerr.append(c_e)
            starts.append(g0)
            if traj.status is Status.BUDGET_EXHAUSTED:
                status = Status.BUDGET_EXHAUSTED
                message = (
                    f"{budget.reason()}: start {i + 1} reached depth {float(traj.t[-1]):.6g} of "
                    f"{depth:.6g} (errors beyond it are NaN)"
                )
                break
            if traj.status is not Status.SUCCESS and status is Status.SUCCESS:
                status = Status(traj.status)
                message = f"start {i + 1}: the simulation ended with status {traj.status!s}"
            update(i + 1)
    mean_error, cov_error = np.array(merr), np.array(cerr)
    finals = mean_error[:, -1], cov_error[:, -1]
    stats = {
        "max_final_mean_error": _nanmax(finals[0]),
        "max_final_cov_error": _nanmax(finals[1]),
        "seconds": time.perf_counter() - clock,
    }
    if status is Status.SUCCESS:
        message = (
            f"{len(starts)} starts: final relative errors ≤ {stats['max_final_mean_error']:.2e} "
            f"(mean), {stats['max_final_cov_error']:.2e} (covariance) at depth {depth:.6g}"
        )
    return ConvergenceData(
        t=frozen(grid),
        mean_error=frozen(mean_error),
        cov_error=frozen(cov_error),
        rate=cert.mean_rate,
        cov_rate=cert.cov_rate,
        starts=tuple(starts),
        status=status,
        message=message,
        stats=stats,
    )
