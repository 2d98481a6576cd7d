"""Data of the ``design`` figure: a design's moment trajectories from seeded random starts."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..._linalg import FloatArray
from ..._status import Budget, Outcome, ResultFields, Status, as_time_limit
from ..._validation import as_positive_float, as_positive_int, frozen
from ...errors import InvalidParametersError
from ...model.gaussian import Gaussian
from ...model.moments import simulate
from ._common import Whitening
from .mean_matching import MeanMatchingDesign

__all__ = ["ConvergenceData", "design_convergence"]

#: Finite cap on the number of starts.
_MAX_STARTS = 10_000


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
        The initial Gaussians (fewer than requested when ``time_limit`` ran out).
    status
        ``Status.SUCCESS`` when every simulation succeeded; otherwise the status of the first
        one that did not (e.g. ``Status.BLOWUP``), or ``Status.BUDGET_EXHAUSTED`` when
        ``time_limit`` ran out before every start was simulated.
    message
        Final errors, or what went wrong.
    stats
        ``max_final_mean_error``, ``max_final_cov_error``, ``seconds``.
    """

    t: FloatArray
    mean_error: FloatArray
    cov_error: FloatArray
    rate: float
    cov_rate: float
    starts: tuple[Gaussian, ...]


def _random_start(tgt: Gaussian, wh: Whitening, rng: np.random.Generator) -> Gaussian:
    d = tgt.dim
    s = math.sqrt(float(np.linalg.norm(tgt.cov, 2)))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = np.exp(rng.uniform(-2.0, 2.0, d))
    return Gaussian(tgt.mean + 3.0 * s * rng.standard_normal(d), wh.T @ ((q * w) @ q.T) @ wh.T)


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
        Recorded depths.
    seed
        Seed of the starts.
    time_limit
        Wall-clock limit in seconds (``None``: no limit), checked between starts; the first
        start is always simulated. Running out gives ``Status.BUDGET_EXHAUSTED`` with the
        starts simulated so far.

    Returns
    -------
    ConvergenceData

    Raises
    ------
    InvalidParametersError
        If ``design`` is not a :class:`MeanMatchingDesign`, has no positive certified rate, or
        on malformed counts, depth or limit.
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
    starts, merr, cerr = [], [], []
    t_ref: FloatArray | None = None
    status, message = Status.SUCCESS, ""
    for i in range(n):
        if i > 0 and budget.exhausted:
            status, message = Status.BUDGET_EXHAUSTED, f"{budget.reason()} after {i} starts"
            break
        g0 = _random_start(tgt, wh, rng)
        traj = simulate(design.layer, g0, depth, n_points=n_points)
        if traj.status is not Status.SUCCESS and status is Status.SUCCESS:
            status = Status(traj.status)
            message = f"start {i + 1}: the simulation ended with status {traj.status!s}"
        t_ref = traj.t if t_ref is None else t_ref
        merr.append(
            np.linalg.norm(traj.mean - tgt.mean, axis=1) / max(float(np.linalg.norm(tgt.mean)), 1.0)
        )
        cerr.append(np.linalg.norm(traj.cov - tgt.cov, axis=(1, 2)) / np.linalg.norm(tgt.cov))
        starts.append(g0)
    assert t_ref is not None
    mean_error, cov_error = np.array(merr), np.array(cerr)
    stats = {
        "max_final_mean_error": float(np.max(mean_error[:, -1])),
        "max_final_cov_error": float(np.max(cov_error[:, -1])),
        "seconds": time.perf_counter() - clock,
    }
    if status is Status.SUCCESS:
        message = (
            f"{len(starts)} starts: final relative errors ≤ {stats['max_final_mean_error']:.2e} "
            f"(mean), {stats['max_final_cov_error']:.2e} (covariance) at depth {depth:.6g}"
        )
    return ConvergenceData(
        t=frozen(np.asarray(t_ref)),
        mean_error=frozen(mean_error),
        cov_error=frozen(cov_error),
        rate=cert.mean_rate,
        cov_rate=cert.cov_rate,
        starts=tuple(starts),
        status=status,
        message=message,
        stats=stats,
    )
