"""Plotting-free data for the figures of the CLI ``analyze`` task (see gtcontrol.plotting.analysis).

:func:`regime_figure_data` analyzes a layer (unless given the regime) and integrates the moments
over a depth that shows the regime; :func:`cone_coordinates` maps 2×2 covariances into the PSD
cone ``z ≥ √(x² + y²)``.

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._readonly import ReadOnlyArrays
from .._status import Budget
from .._validation import as_positive_float, as_positive_int, frozen
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Layer
from ._core import field_rate
from .blowup import default_horizon
from .regimes import Regime, analyze

__all__ = ["RegimeFigureData", "cone_coordinates", "regime_figure_data"]


def _descending_eigenvalues(covs: FloatArray, budget: Budget) -> FloatArray:
    """Descending eigenvalues of each covariance, in chunks while the budget's grace lasts
    (NaN rows after): ``n_points`` eigensolves of size d are minutes at d = 1024."""
    n, d = covs.shape[0], covs.shape[-1]
    lam = np.full((n, d), np.nan)
    step = max(1, int(2e7 / max(d, 1) ** 3))  # about 10–50 ms a chunk
    for i in range(0, n, step):
        grace = budget.grace()
        if grace is not None and grace <= 1e-6:
            break
        lam[i : i + step] = np.linalg.eigvalsh(covs[i : i + step])[:, ::-1]
    return lam


def cone_coordinates(cov: Any) -> FloatArray:
    """``(a − b, 2c, a + b)`` for ``Σ = [[a, c], [c, b]]`` (shape ``(..., 3)``).

    The map sends 2×2 PSD matrices onto the solid cone ``z ≥ √(x² + y²)`` (``z² − x² − y² =
    4 det Σ``); the boundary is the singular matrices, the axis the multiples of I.

    Parameters
    ----------
    cov
        One or more 2×2 matrices, shape ``(..., 2, 2)``.

    Returns
    -------
    ndarray
        Shape ``(..., 3)``.

    Raises
    ------
    InvalidParametersError
        If the trailing shape is not ``(2, 2)``.
    """
    c = np.asarray(cov, dtype=float)
    if c.shape[-2:] != (2, 2):
        raise InvalidParametersError(f"cov: expected 2×2 matrices, got shape {c.shape}")
    return np.stack(
        [c[..., 0, 0] - c[..., 1, 1], 2.0 * c[..., 0, 1], c[..., 0, 0] + c[..., 1, 1]], axis=-1
    )


@dataclass(frozen=True, eq=False)
class RegimeFigureData(ReadOnlyArrays):
    """What the ``analyze`` figures plot (no plotting here; see :mod:`gtcontrol.plotting.analysis`).

    Attributes
    ----------
    regime
        The :class:`Regime`.
    trajectory
        The integrated moments (:func:`gtcontrol.simulate`), up to just before blow-up.
    eigenvalues
        Covariance eigenvalues along the trajectory, ``(n, d)``, descending (NaN rows past
        the point where the time limit ran out).
    equilibrium_eigenvalues
        Eigenvalues of the equilibrium/limit covariance (``None`` when there is none).
    blowup_time
        T* (``inf`` if none).
    cone, cone_normalized
        For d = 2: cone coordinates of Σ(t) and of Σ(t)/tr Σ(t), ``(n, 3)``; else ``None``.
    equilibrium_cone
        For d = 2: cone coordinates of the limit covariance, ``(3,)``, else ``None``.
    """

    regime: Regime
    trajectory: Trajectory
    eigenvalues: FloatArray
    equilibrium_eigenvalues: FloatArray | None
    blowup_time: float
    cone: FloatArray | None
    cone_normalized: FloatArray | None
    equilibrium_cone: FloatArray | None


def regime_figure_data(
    layer: Layer,
    initial: Gaussian,
    *,
    T: float | None = None,
    n_points: int = 401,
    regime: Regime | None = None,
    time_limit: float | None = None,
) -> RegimeFigureData:
    """Analyze (unless ``regime`` is given) and integrate the moments for the figures.

    The depth T defaults to ``1.05 T*`` for a blow-up (the integrator stops at the event) and to
    20 time constants ``20 / rate`` otherwise (``rate`` as in
    :func:`gtcontrol.analysis.blowup.default_horizon`), extended to 8 time constants of the
    slowest mode ``1/|spectral abscissa|`` when the limit is a stable equilibrium.

    Parameters
    ----------
    layer, initial
        As in :func:`gtcontrol.analyze`.
    T
        Depth of the integration (``None``: as above).
    n_points
        Recorded depths.
    regime
        A regime already computed by :func:`gtcontrol.analyze` (``None``: analyze here).
    time_limit
        Wall-clock limit in seconds for all of it (``None``: none): the analysis and the
        integration stop with ``BUDGET_EXHAUSTED`` (the trajectory's status) and the
        eigenvalues not computed by then are NaN (within the solvers' tolerance).

    Returns
    -------
    RegimeFigureData

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On malformed input.
    """
    budget = Budget(time_limit)
    g0 = check_gaussian(initial, layer.dim)
    reg = regime if regime is not None else analyze(layer, g0, time_limit=time_limit)
    if T is None:
        if reg.kind == "blowup":
            T = 1.05 * reg.blowup_time
        else:
            T = 20.0 / field_rate(layer, g0.cov)
            eq = reg.equilibrium
            if eq is not None and eq.spectral_abscissa < 0:
                # show the approach to Σ*: 8 time constants of its slowest mode (e^-8 ≈ 3e-4)
                T = min(max(T, 8.0 / -eq.spectral_abscissa), default_horizon(layer, g0))
    T = as_positive_float("T", T)
    n_points = as_positive_int("n_points", n_points)
    left = budget.remaining()
    traj = simulate(layer, g0, T, n_points=n_points, time_limit=max(left, 1e-9))
    lam = _descending_eigenvalues(traj.cov, budget)
    eq_lam = None
    if reg.limit_cov is not None:
        eq_lam = frozen(np.asarray(np.linalg.eigvalsh(reg.limit_cov)[::-1], dtype=float).copy())
    cone = cone_n = eq_cone = None
    if layer.dim == 2:
        cone = frozen(cone_coordinates(traj.cov))
        tr = np.trace(traj.cov, axis1=1, axis2=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            cone_n = frozen(cone_coordinates(traj.cov / tr[:, None, None]))
        if reg.limit_cov is not None:
            eq_cone = frozen(cone_coordinates(reg.limit_cov))
    return RegimeFigureData(
        regime=reg,
        trajectory=traj,
        eigenvalues=frozen(lam),
        equilibrium_eigenvalues=eq_lam,
        blowup_time=reg.blowup_time,
        cone=cone,
        cone_normalized=cone_n,
        equilibrium_cone=eq_cone,
    )
