"""What ``result.json`` records of each task's results (private to :mod:`gtcontrol.cli.tasks`).

The runners of :mod:`gtcontrol.cli.tasks` build their ``outputs`` and ``summary`` (the headline
figures shown at the end of ``gtcontrol run``) from these helpers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import Trajectory
from .._linalg import FloatArray
from .._status import Status
from ._run_budget import RunBudget, stack_eigenvalues

__all__ = [
    "CERTIFICATE_KEYS",
    "ROBUSTNESS_KEYS",
    "equilibrium_summary",
    "final_moments",
    "result",
    "spectral_norm",
    "trajectory_figures",
    "trajectory_summary",
]


def result(
    status: Status, outputs: dict[str, Any], figures: list[str], summary: dict[str, Any]
) -> dict[str, Any]:
    """What a runner returns for ``result.json`` (see the module docstring)."""
    return {"status": status, "outputs": outputs, "figures": figures, "summary": summary}


def trajectory_summary(traj: Trajectory, run: RunBudget | None = None) -> dict[str, Any]:
    """What ``result.json`` records of a moment trajectory.

    Parameters
    ----------
    traj
        A moment trajectory (:func:`gtcontrol.simulate`, :func:`gtcontrol.simulate_discrete`).
    run
        The run's budget: the eigenvalues of the recorded covariances are computed while it
        affords them (NaN past that, recorded as skipped); ``None``: all of them.

    Returns
    -------
    dict
        ``status`` (its string value), ``success``, ``message``, ``blowup_time``, ``t``,
        ``mean``, ``cov_eigenvalues``, ``rank``, ``final`` and ``stats``.
    """
    return {
        "status": str(traj.status),
        "success": traj.success,
        "message": traj.message,
        "blowup_time": traj.blowup_time,
        "t": traj.t,
        "mean": traj.mean,
        "cov_eigenvalues": stack_eigenvalues(traj.cov, run, "covariance eigenvalues"),
        "rank": traj.rank,
        "final": dict(zip(("mean", "cov"), final_moments(traj), strict=True)),
        "stats": dict(traj.stats),
    }


def trajectory_figures(traj: Trajectory) -> dict[str, Any]:
    """The headline figures of a moment trajectory for a run's ``summary``.

    Parameters
    ----------
    traj
        A moment trajectory.

    Returns
    -------
    dict
        ``depth`` (the last depth reached), ``blowup_time``, ``final_mean_norm`` (``|m|``) and
        ``final_cov_norm`` (``‖Σ‖₂``) at that depth.
    """
    mean, cov = final_moments(traj)
    return {
        "depth": float(traj.t[-1]),
        "blowup_time": float(traj.blowup_time),
        "final_mean_norm": float(np.linalg.norm(mean)),
        "final_cov_norm": spectral_norm(cov),
    }


def final_moments(traj: Trajectory) -> tuple[FloatArray, FloatArray]:
    """``(mean, cov)`` at the last recorded depth, as arrays.

    Not ``traj.final``: that is a :class:`~gtcontrol.Gaussian`, which refuses entries beyond
    ``MAX_ENTRY``, and an ``overflow`` trajectory ends just past them (its last record is the
    answer to report, not an input to refuse).
    """
    return np.asarray(traj.mean[-1], dtype=float), np.asarray(traj.cov[-1], dtype=float)


def spectral_norm(cov: FloatArray) -> float:
    """``‖cov‖₂``; ``inf`` when an entry is not finite (the SVD would not converge)."""
    return float(np.linalg.norm(cov, 2)) if np.isfinite(cov).all() else math.inf


def equilibrium_summary(eq: Any) -> dict[str, Any]:
    """What ``result.json`` records of one equilibrium (:func:`gtcontrol.equilibria`)."""
    poles = np.linalg.eigvals(eq.mean_matrix)
    return {
        "cov": eq.cov,
        "stable": eq.stable,
        "spectral_abscissa": eq.spectral_abscissa,
        "residual": eq.residual,
        "method": eq.method,
        "mean_matrix_eigenvalues_real": poles.real,
        "mean_matrix_eigenvalues_imag": poles.imag,
    }


#: The certificate fields of a mean-matching design recorded in ``result.json``.
CERTIFICATE_KEYS = (
    "kind",
    "success",
    "mean_rate",
    "cov_rate",
    "rate",
    "residual",
    "riccati",
    "r_min",
    "uniqueness_gap",
    "message",
)
#: The robustness fields of a mean-matching design recorded in ``result.json``.
ROBUSTNESS_KEYS = (
    "mean_radius",
    "cov_radius",
    "radius",
    "binding",
    "parameter_radius",
    "parameter_stable_fraction",
    "linear_stable_fraction",
    "worst_case_abscissa",
)
