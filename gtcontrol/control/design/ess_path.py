"""Finite-N validity of a design along its predicted path, and the V/B scale split that keeps it.

A softmax head over ``N`` keys ``y ~ N(m, Σ)`` with weights ``exp(yᵀu)``, ``u = B x``, has the
effective sample size ``ESS/N = exp(−uᵀΣu)`` (docs/theory.md §2 "Finite N";
:mod:`gtcontrol.model.finite_n`, the one home of that formula). The moment model is the
``N → ∞`` limit; ``N`` real tokens follow it only while ``uᵀΣu`` stays moderate. A design with
``B = Σ*⁻¹`` and a target mean far from the origin has ``uᵀΣ*u = |Σ*^{-½}m* + z|²`` for a query
``m* + Σ*^{½}z``: tens, ``ESS/N`` below 1e-10, and 1,024 tokens stall far from the target
although the moments converge.

**The scale split.** The moments see a head only through ``V_h Σ B_h`` (in
``M = A + Σ_h V_h Σ B_h``) and ``V_h m`` (in ``c = b + Σ_h V_h m``). Replacing
``(V_h, B_h)`` by ``(s V_h, B_h / s)``, ``s ≥ 1``, keeps ``M(Σ)`` for every Σ — the covariance
dynamics are unchanged, so are ``R = −Σ_h v_h(B_h + B_hᵀ)``, the global certificate and the
covariance rate — and adds ``(s − 1) Σ_h V_h`` to the mean matrix ``K``: with ``V = vI`` the
mean rate grows from ``|v|`` to ``s|v|`` (``b = −K m*`` is recomputed). Meanwhile ``uᵀΣu``
falls by ``s²``. :func:`ess_scaled_layer` picks the smallest ``s`` (by a fixed-point iteration
on the predicted path, whose mean part depends on ``s``) with the predicted worst ``ESS/N``
along the path at least ``min_ess``; such an ``s`` exists, since as ``s → ∞`` the path tends to
a limit and the tilt vanishes like ``1/s``.

Reference: the paper cited in :mod:`gtcontrol`, §2 and §4; A. Kong, *A note on importance
sampling using standardized weights* (1992).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._display import Axes, SummaryItems
from ..._linalg import FloatArray
from ..._status import Budget, Outcome, ResultFields, Status
from ..._validation import frozen
from ...analysis.equilibria import mean_matrix
from ...errors import InvalidGaussianError
from ...model.field import affine_velocity
from ...model.finite_n import worst_ess_fraction
from ...model.gaussian import Gaussian, check_gaussian
from ...model.moments import Trajectory, simulate
from ...model.params import Layer
from ._common import with_bias

__all__ = [
    "PathEss",
    "as_initial",
    "ess_scaled_layer",
    "path_depth",
    "path_ess",
    "scale_heads",
]

#: Finite caps of the scale search: rounds of the fixed-point iteration and the largest scale.
_MAX_ROUNDS = 40
_MAX_SCALE = 1e6
#: Default depth in units of the slowest rate (errors ~e^{-12} of the initial ones); also the
#: default depth of :mod:`.token_check`, in units of the certified rate.
_DEPTH_RATES = 12.0
#: Coarse depths per unit of ``T × (fastest rate)``, their bounds, and the refinement: the
#: ``_REFINE_PEAKS`` lowest local minima of the coarse ESS are resampled at ``_REFINE_POINTS``
#: depths between their neighbours (the ESS bound changes on the time scale ``1/rate``).
_POINTS_PER_RATE = 2.0
_MIN_POINTS, _MAX_POINTS = 51, 2_001
_REFINE_PEAKS, _REFINE_POINTS = 3, 21
#: Integrator of the predicted path: the bound needs a few digits, and designs with extreme
#: rate ratios (mean rate 0.01, covariance rate 50) are stiff, where LSODA switches to BDF.
_PATH_METHOD, _PATH_RTOL = "LSODA", 1e-8
#: LSODA stores a dense Jacobian of the moment state (``n = d + d(d+1)/2`` unknowns, ``n²``
#: floats: 8.8 GB at d = 256); above this state size the path is integrated by the default
#: explicit pair instead (no Jacobian; a stiff path then runs into the evaluation cap).
_LSODA_MAX_STATE = 2_000


#: Cap on right-hand-side evaluations of one path integration: a design whose predicted path
#: needs more (a target with eigenvalues 1e6 apart, measured 1e6 evaluations and 25 s) gets its
#: ESS report from the depths reached, with the integrator's BUDGET_EXHAUSTED status.
_PATH_MAX_EVALS = 400_000
#: Overshoot of each scale update (the path moves with s; a bare fixed point converges slowly).
_OVERSHOOT = 1.02


def _path_method(d: int) -> str:
    """LSODA while its dense Jacobian is small, else the explicit DOP853 (simulate's default)."""
    return _PATH_METHOD if d + d * (d + 1) // 2 <= _LSODA_MAX_STATE else "DOP853"


@dataclass(frozen=True, eq=False)
class PathEss(ResultFields, Outcome):
    """Predicted ``ESS/N`` of every head along the moment path of a design.

    Attributes
    ----------
    t
        Recorded depths ``(n,)`` of the predicted moment path from ``initial``.
    worst
        ``(n, n_heads)``: at each depth, the lower bound of ``ESS/N = exp(−uᵀΣu)`` over queries
        within ``n_std`` standard deviations of the tokens' Gaussian ``N(m(t), Σ(t))``
        (:func:`gtcontrol.model.finite_n.worst_ess_fraction`, keys = queries = tokens).
    initial
        The start of the path.
    T
        Depth of the path.
    n_std
        Radius of the query ball in standard deviations.
    min_ess
        The required bound (``None``: only reported).
    scale
        The scale ``s`` applied to the heads, ``(V_h, B_h) → (s V_h, B_h / s)`` (1: none).
    status
        ``SUCCESS``: the path was simulated to ``T`` and (when required) the bound holds
        everywhere. ``INFEASIBLE``: the bound fails (``message`` says where and why).
        ``BLOWUP``, ``OVERFLOW``, ``FAILED``: the predicted path itself ended so.
        ``BUDGET_EXHAUSTED``: ``time_limit`` ran out.
    message
        The worst value, where it occurs, and the scale.
    stats
        ``rounds`` of the scale search, ``n_points``, ``seconds``.
    """

    t: FloatArray
    worst: FloatArray
    initial: Gaussian
    T: float
    n_std: float
    min_ess: float | None
    scale: float

    def _summary_items(self) -> SummaryItems:
        return [
            ("worst_overall", self.worst_overall),
            ("min_ess", self.min_ess),
            ("scale", self.scale),
            ("T", self.T),
            ("n_std", self.n_std),
        ]

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_path_ess

        draw_path_ess(ax, self.t, self.worst, min_ess=self.min_ess, scale=self.scale)

    @property
    def worst_overall(self) -> float:
        """The smallest predicted ``ESS/N`` over all depths and heads (1 for no heads)."""
        return float(np.min(self.worst)) if self.worst.size else 1.0

    @property
    def ok(self) -> bool:
        """Whether the path reached ``T`` and the bound (if any) holds everywhere."""
        return self.status is Status.SUCCESS


def as_initial(value: Any, d: int) -> Gaussian:
    """The start of the predicted path: a Gaussian, a ``(mean, cov)`` pair or ``None`` (N(0, I))."""
    if value is None:
        return Gaussian.standard(d)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        value = Gaussian(value[0], value[1], name="initial")
    if not isinstance(value, Gaussian):
        raise InvalidGaussianError(
            f"initial: expected a Gaussian, a (mean, cov) pair or None, got {type(value).__name__}"
        )
    return check_gaussian(value, d, "initial")


def scale_heads(layer: Layer, s: float, target: Gaussian) -> Layer:
    """``(V_h, B_h) → (s V_h, B_h / s)`` with ``b = −K m*`` recomputed (``s = 1``: the layer)."""
    if s == 1.0:
        return layer
    return with_bias(layer.replace(heads=[(s * v, b / s) for v, b in layer.heads]), target)


def path_depth(layer: Layer, target: Gaussian, cov_rate: float) -> float:
    """``12 / min(mean rate, cov_rate)``: the mean rate ``−max Re λ(K)`` of this layer at Σ*."""
    k = mean_matrix(layer, target.cov)
    rate = min(-float(np.max(np.linalg.eigvals(k).real)), cov_rate)
    return _DEPTH_RATES / rate if rate > 0 else math.inf


def _n_points(layer: Layer, target: Gaussian, T: float) -> int:
    """Coarse depths: ``~2`` per unit of ``T × max(‖K‖₂, ‖M*‖₂)`` (the path's fastest rates)."""
    m_mat, _ = affine_velocity(layer, target.mean, target.cov)
    k = mean_matrix(layer, target.cov)
    rate = max(float(np.linalg.norm(k, 2)), float(np.linalg.norm(m_mat, 2)), 1e-300)
    n = math.ceil(_POINTS_PER_RATE * T * rate) + 1
    return int(min(max(n, _MIN_POINTS), _MAX_POINTS))


def _bounds(layer: Layer, means: FloatArray, covs: FloatArray, n_std: float) -> FloatArray:
    """``(n, n_heads)`` lower bounds of ESS/N (:func:`worst_ess_fraction`) at each Gaussian."""
    out = [
        worst_ess_fraction(layer, Gaussian(m, c, name="path"), n_std=n_std)
        for m, c in zip(means, covs, strict=True)
    ]
    return np.array(out).reshape(len(out), layer.n_heads)


def _time_left(budget: Budget) -> float | None:
    left = budget.remaining()
    return None if math.isinf(left) else max(left, 1e-6)


def _refine(
    layer: Layer, traj: Trajectory, worst: FloatArray, n_std: float, budget: Budget
) -> tuple[FloatArray, FloatArray]:
    """Resample the lowest local minima of the coarse bound between their neighbours."""
    t = np.asarray(traj.t, dtype=float)
    flat = worst.min(axis=1)
    n = flat.size
    minima = [
        i
        for i in range(n)
        if (i == 0 or flat[i] <= flat[i - 1]) and (i == n - 1 or flat[i] <= flat[i + 1])
    ]
    ts, ws = [t], [worst]
    for i in sorted(minima, key=lambda j: float(flat[j]))[:_REFINE_PEAKS]:
        lo, hi = max(i - 1, 0), min(i + 1, n - 1)
        if hi == lo or budget.exhausted:
            continue
        start = Gaussian(traj.mean[lo], traj.cov[lo], name="path")
        piece = simulate(
            layer,
            start,
            t[hi] - t[lo],
            n_points=_REFINE_POINTS,
            method=_path_method(layer.dim),
            rtol=_PATH_RTOL,
            max_evals=_PATH_MAX_EVALS,
            time_limit=_time_left(budget),
        )
        inner = slice(1, -1) if piece.status is Status.SUCCESS else slice(1, None)
        ts.append(t[lo] + np.asarray(piece.t)[inner])
        ws.append(_bounds(layer, piece.mean[inner], piece.cov[inner], n_std))
    tt = np.concatenate(ts)
    order = np.argsort(tt, kind="stable")
    return tt[order], np.concatenate(ws)[order]


def path_ess(
    layer: Layer,
    target: Gaussian,
    initial: Gaussian,
    T: float,
    *,
    n_std: float,
    min_ess: float | None,
    budget: Budget,
    scale: float = 1.0,
) -> PathEss:
    """Simulate the moment path from ``initial`` and bound ``ESS/N`` of every head along it.

    The bound is evaluated at coarse depths (about 2 per unit of ``T`` times the fastest rate
    of the moment field), then resampled finely around its three lowest local minima. The path
    is integrated by LSODA to a relative 1e-8 (stiff designs stay cheap; from ``d = 62`` on,
    where LSODA's dense Jacobian would not fit in memory, by simulate's default method).
    """
    n_points = _n_points(layer, target, T)
    traj = simulate(
        layer,
        initial,
        T,
        n_points=n_points,
        method=_path_method(layer.dim),
        rtol=_PATH_RTOL,
        max_evals=_PATH_MAX_EVALS,
        time_limit=_time_left(budget),
    )
    worst = _bounds(layer, traj.mean, traj.cov, n_std)
    t = np.asarray(traj.t, dtype=float)
    if traj.status is Status.SUCCESS and len(t) > 1:
        t, worst = _refine(layer, traj, worst, n_std, budget)
    status, message = _judge(t, worst, T, min_ess, traj.status, traj.message)
    return PathEss(
        t=frozen(t),
        worst=frozen(worst),
        initial=initial,
        T=T,
        n_std=n_std,
        min_ess=min_ess,
        scale=scale,
        status=status,
        message=message + (f" (heads scaled by s = {scale:.6g})" if scale != 1.0 else ""),
        stats={"n_points": int(t.size), "rounds": 1, "seconds": budget.elapsed},
    )


def _judge(
    t: FloatArray,
    worst: FloatArray,
    T: float,
    min_ess: float | None,
    traj_status: Status,
    traj_message: str,
) -> tuple[Status, str]:
    flat = worst.min(axis=1) if worst.size else np.ones(len(t))
    i = int(np.argmin(flat))
    low = float(flat[i])
    head = f"predicted worst ESS/N {low:.3g} at depth {float(t[i]):.4g} of {T:.4g}"
    if traj_status is not Status.SUCCESS:
        return Status(traj_status), f"{head}; the predicted path stopped: {traj_message}"
    if min_ess is not None and low < min_ess:
        return Status.INFEASIBLE, f"{head} < min_ess = {min_ess:.3g}"
    return Status.SUCCESS, head + ("" if min_ess is None else f" ≥ min_ess = {min_ess:.3g}")


def _start_scale(
    layer: Layer, target: Gaussian, initial: Gaussian, n_std: float, rho: float
) -> float:
    """The scale that the two ends of the path need (a lower bound of the answer, ≥ 1).

    At a fixed Gaussian the tilt radius scales like ``1/s`` exactly; the start and the
    target do not move with ``s``.
    """
    if layer.n_heads == 0:
        return 1.0
    probe = 1.0
    while probe < _MAX_SCALE:
        lay = scale_heads(layer, probe, target)
        low = min(float(np.min(worst_ess_fraction(lay, g, n_std=n_std))) for g in (initial, target))
        if low > 0.0:
            return max(1.0, (1.0 + 1e-9) * probe * math.sqrt(-math.log(low)) / rho)
        probe *= 10.0
    return _MAX_SCALE


def ess_scaled_layer(
    layer: Layer,
    target: Gaussian,
    initial: Gaussian,
    T: float | None,
    *,
    cov_rate: float,
    n_std: float,
    min_ess: float,
    budget: Budget,
) -> tuple[Layer, PathEss]:
    """The smallest scale ``s ≥ 1`` of the heads whose predicted path keeps ``ESS/N ≥ min_ess``.

    Start from the scale that the path's two ends need (exact there: the tilt radius ``ρ``
    at a fixed Gaussian scales like ``1/s``), then iterate: at a given path
    ``ESS/N = exp(−ρ_s²)``, so ``s`` is multiplied by ``max(1.05, 1.02 ρ_s / ρ_req)``,
    ``ρ_req = sqrt(ln(1/min_ess))``, and the path is recomputed, until the bound holds on the
    recomputed path (at most 40 rounds, ``s ≤ 10⁶``). ``T = None``: each round's path runs to
    :func:`path_depth` of its layer (``cov_rate`` is the certified covariance rate, which the
    scaling keeps). Returns the last layer tried and its report (status ``INFEASIBLE`` when the
    caps ran out, ``BUDGET_EXHAUSTED`` on time).
    """
    rho_req = math.sqrt(math.log(1.0 / min_ess))
    s = _start_scale(layer, target, initial, n_std, rho_req)
    rounds = 0
    while True:
        rounds += 1
        lay = scale_heads(layer, s, target)
        depth = path_depth(lay, target, cov_rate) if T is None else T
        rep = path_ess(
            lay, target, initial, depth, n_std=n_std, min_ess=min_ess, budget=budget, scale=s
        )
        if rep.status is not Status.INFEASIBLE or rounds >= _MAX_ROUNDS:
            break
        low = rep.worst_overall
        factor = 10.0 if low <= 0.0 else _OVERSHOOT * math.sqrt(-math.log(low)) / rho_req
        if s * max(factor, 1.05) > _MAX_SCALE:
            break
        s *= max(factor, 1.05)
    stats = dict(rep.stats, rounds=rounds)
    if rep.status is Status.INFEASIBLE:
        msg = f"{rep.message}; the scale search stopped after {rounds} rounds at s = {s:.6g}"
        return lay, dataclasses.replace(rep, message=msg, stats=stats)
    return lay, dataclasses.replace(rep, stats=stats)
