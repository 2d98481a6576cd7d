"""Finite-N validity of a design: the predicted ``ESS/N`` on its path, and ``N`` real tokens.

**Predicted path** (:class:`PathEss`). A softmax head over ``N`` keys ``y ~ N(m, Σ)`` with
weights ``exp(yᵀu)``, ``u = B x``, has the effective sample size ``ESS/N = exp(−uᵀΣu)``
(docs/theory.md §2 "Finite N"; :mod:`gtcontrol.model.finite_n`, the one home of that formula).
The moment model is the ``N → ∞`` limit; ``N`` real tokens follow it only while ``uᵀΣu`` stays
moderate. A design with ``B = Σ*⁻¹`` and a target mean far from the origin has
``uᵀΣ*u = |Σ*^{-½}m* + z|²`` for a query ``m* + Σ*^{½}z``: tens, ``ESS/N`` below 1e-10, and
1,024 tokens stall far from the target although the moments converge.

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

**Token-level certificate** (:class:`TokenCertificate`, :func:`design_token_certificate`). The
moment certificate (:mod:`._certificates`) is the ``N → ∞`` statement. The token check runs the
token-level Transformer (:func:`gtcontrol.model.tokens.simulate_tokens`: fixed-step RK4 with a
step fine enough that its own error is negligible, or an error-controlled RK45 for token fields
stiffer than the moment model shows) on ``N`` tokens sampled from ``initial`` and measures,
independently of the moment model:

* ``w2``: the Bures–Wasserstein distance between the tokens' empirical moments at depth ``T``
  and the target;
* ``floor``: the sampling floor, the same distance for a fresh sample of ``N`` points from the
  target itself (median over ``floor_samples`` samples): no ``N``-token cloud is expected closer;
* ``min_ess``: the smallest *empirical* effective sample size per key of every head's softmax,
  ``(Σ_j w_ij)² / (N Σ_j w_ij²)`` with ``w_ij = exp(x_jᵀ B_h x_i)``, over every token and the
  snapshot depths (docs/theory.md §2 "Finite N" predicts ``exp(−uᵀΣu)``; ``predicted_min_ess``
  evaluates that formula, :func:`gtcontrol.model.finite_n.ess_fraction`, at the same tokens).

The design is token-valid when the tokens reach ``T``, ``w2 ≤ w2_factor · floor`` and
``min_ess ≥ min_token_ess``.

Reference: the paper cited in :mod:`gtcontrol`, §1, §2 and §4; A. Kong, *A note on importance
sampling using standardized weights* (1992).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._blas import calm_blas
from ..._display import Axes
from ..._linalg import FloatArray
from ..._status import DEFAULT_MAX_EVALS, Budget, Outcome, ResultFields, Status
from ..._validation import (
    MAX_ENTRY,
    as_choice,
    as_depth,
    as_float_dtype,
    as_nonnegative_float,
    as_positive_float,
    as_positive_int,
    as_seed,
    frozen,
    option_values,
    set_fields,
)
from ...analysis.equilibria import mean_matrix
from ...errors import InvalidGaussianError, InvalidParametersError
from ...model._token_integrators import ADAPTIVE_METHODS
from ...model.field import affine_velocity
from ...model.finite_n import ess_fraction, worst_ess_fraction
from ...model.gaussian import Gaussian, check_gaussian
from ...model.moments import Trajectory, simulate
from ...model.params import Layer
from ...model.tokens import TokenTrajectory, simulate_tokens
from .._design_kernel import MAX_TOKENS, check_layer, with_bias
from ._certificates import design_certificate

__all__ = [
    "PathEss",
    "TokenCertificate",
    "as_initial",
    "design_token_certificate",
    "ess_scaled_layer",
    "path_depth",
    "path_ess",
    "scale_heads",
]


#: Finite caps of the scale search: rounds of the fixed-point iteration and the largest scale.
_MAX_ROUNDS = 40
_MAX_SCALE = 1e6
#: Default depth in units of the slowest rate (errors ~e^{-12} of the initial ones); also the
#: default depth of the token check, in units of the certified rate.
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

    _summary_fields = ("worst_overall", "min_ess", "scale", "T", "n_std")

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_path_ess

        draw_path_ess(ax, self.t, self.worst, min_ess=self.min_ess, scale=self.scale)

    @property
    def worst_overall(self) -> float:
        """The smallest predicted ``ESS/N`` over all depths and heads (1 for no heads, ``nan``
        when the time limit left no depth bounded)."""
        if self.worst.size:
            return float(np.min(self.worst))
        return 1.0 if self.worst.ndim < 2 or self.worst.shape[1] == 0 else math.nan


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


def _bounds(
    layer: Layer, means: FloatArray, covs: FloatArray, n_std: float, budget: Budget
) -> FloatArray:
    """``(k, n_heads)`` lower bounds of ESS/N (:func:`worst_ess_fraction`) at the first ``k``
    Gaussians: all of them, or those evaluated before ``budget`` ran out (each costs a
    ``d×d`` square root; a path has up to 2,001 of them)."""
    out = []
    for m, c in zip(means, covs, strict=True):
        if budget.exhausted:
            break
        out.append(worst_ess_fraction(layer, Gaussian(m, c, name="path"), n_std=n_std))
    return np.array(out).reshape(len(out), layer.n_heads)


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
            time_limit=budget.left_as_limit(),
        )
        inner = slice(1, -1) if piece.status is Status.SUCCESS else slice(1, None)
        w = _bounds(layer, piece.mean[inner], piece.cov[inner], n_std, budget)
        ts.append((t[lo] + np.asarray(piece.t)[inner])[: len(w)])
        ws.append(w)
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
        time_limit=budget.left_as_limit(),
    )
    worst = _bounds(layer, traj.mean, traj.cov, n_std, budget)
    t = np.asarray(traj.t, dtype=float)
    path_status, path_message = traj.status, traj.message
    if len(worst) < len(t):
        # the bound is a minimum over the whole path: a part of it is no verdict
        path_status = Status.BUDGET_EXHAUSTED
        path_message = (
            f"the time limit ran out after the ESS bound at {len(worst)} of {len(t)} depths"
        )
        t = t[: len(worst)]
    elif traj.status is Status.SUCCESS and len(t) > 1:
        t, worst = _refine(layer, traj, worst, n_std, budget)
    status, message = _judge(t, worst, T, min_ess, path_status, path_message)
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
    if not len(t):
        return Status(traj_status), f"no ESS bound on the path: {traj_message}"
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


#: Caps: fixed steps, snapshot depths, fresh samples of the floor (the cap on tokens is
#: ``MAX_TOKENS`` of the design's ``token_check`` option).
_MAX_STEPS = 10**6
_MAX_SNAPSHOTS = 10_000
_MAX_FLOOR_SAMPLES = 1_000
#: RK4 step ``h`` with ``h · λ ≤ _STEP_RATE``, ``λ = ‖K*‖₂ + max(‖M(Σ0)‖₂, ‖M(Σ*)‖₂)``.
_STEP_RATE = 1.0
#: Methods of the token simulation (RK4 at fixed steps, or an embedded pair of
#: :func:`gtcontrol.simulate_tokens`), and the default snapshots of an embedded pair.
_METHODS = ("rk4", *ADAPTIVE_METHODS)
_ADAPTIVE_SNAPSHOTS = 33
#: Cap of an embedded pair: this many times the evaluations of the RK4 rule (``4 ⌈Tλ⌉``).
_ADAPTIVE_EVALS = 3
#: Recorded depths at which the distance to the target is measured (both ends included).
_W2_POINTS = 33
#: Memory for the token snapshots of the default ESS check (every step while they fit).
_SNAPSHOT_BYTES = 256 * 2**20
#: Query rows per block of the empirical-ESS pass: about 4·10⁶ weights at a time (32 MiB).
_ESS_BLOCK_WEIGHTS = 4_000_000


@dataclass(frozen=True, eq=False)
class TokenCertificate(ResultFields, Outcome):
    """``N`` tokens driven by a layer from ``initial``: distance to the target and softmax ESS.

    Attributes
    ----------
    n_tokens
        ``N``.
    T
        Depth of the token simulation.
    steps
        Fixed RK4 steps, or the accepted steps of an embedded pair (``"RK23"``, ``"RK45"``,
        ``"DOP853"``).
    initial
        The Gaussian the tokens were sampled from.
    w2
        Bures–Wasserstein distance between the tokens' empirical moments (``1/N`` covariance)
        at ``T`` and the target.
    floor
        Median over ``floor_samples`` fresh samples of ``N`` points from the target of the same
        distance: the sampling floor.
    min_ess
        Smallest empirical ``ESS/N`` of any head's softmax over every token and snapshot depth.
    predicted_min_ess
        ``exp(−uᵀΣu)`` (:func:`gtcontrol.model.finite_n.ess_fraction`) at the same tokens, with
        the tokens' empirical moments as the key distribution: the formula's view of ``min_ess``.
    t, w2_path
        Recorded depths (at most 33, evenly picked among the steps, both ends included) and the
        distance of the tokens' empirical moments to the target there.
    snapshot_t, ess_path
        Snapshot depths and the smallest empirical ``ESS/N`` over tokens and heads at each.
    w2_factor, min_token_ess
        The thresholds of ``success``.
    status
        ``SUCCESS`` when the tokens reached ``T``, ``w2 ≤ w2_factor · floor`` and
        ``min_ess ≥ min_token_ess`` (the design is token-valid); ``INFEASIBLE`` when the tokens
        reached ``T`` but a threshold fails (``message`` says which); otherwise the token
        simulation's status (``OVERFLOW``, ``BUDGET_EXHAUSTED``, ``FAILED``).
    message
        The figures, side by side.
    stats
        ``seconds``, the token simulation's ``seconds`` and ``n_velocity``, ``seed``.
    """

    n_tokens: int
    T: float
    steps: int
    initial: Gaussian
    w2: float
    floor: float
    min_ess: float
    predicted_min_ess: float
    t: FloatArray
    w2_path: FloatArray
    snapshot_t: FloatArray
    ess_path: FloatArray
    w2_factor: float
    min_token_ess: float

    _summary_fields = ("success", "n_tokens", "w2", "floor", "min_ess", "predicted_min_ess")

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_token_distance

        title = f"{self.n_tokens} tokens, min ESS/N = {self.min_ess:.3g}"
        limit = self.w2_factor * self.floor
        draw_token_distance(
            ax, self.t, self.w2_path, floor=self.floor, threshold=limit, title=title
        )


@dataclass(frozen=True, kw_only=True)
class _TokenCheckOptions:
    """Validated keywords of :func:`design_token_certificate` (private; documented there)."""

    n_tokens: int = 1024
    T: float | None = None
    steps: int | None = None
    method: str = "rk4"
    rtol: float | None = None
    seed: int = 0
    min_token_ess: float = 0.2
    w2_factor: float = 2.0
    n_points: int | None = None
    floor_samples: int = 8
    stop_factor: float | None = None
    dtype: Any = np.float64
    time_limit: float | None = None

    def __post_init__(self) -> None:
        set_fields(self, dtype=as_float_dtype("dtype", self.dtype))
        if as_positive_int("n_tokens", self.n_tokens, maximum=MAX_TOKENS) < 2:
            raise InvalidParametersError(f"n_tokens: expected at least 2, got {self.n_tokens!r}")
        if self.T is not None:
            as_depth("T", self.T)
        if self.steps is not None:
            as_positive_int("steps", self.steps, maximum=_MAX_STEPS)
        as_choice("method", self.method, _METHODS)
        if self.method != "rk4" and self.steps is not None:
            raise InvalidParametersError(
                f"steps: fixed steps are for method='rk4'; {self.method!r} chooses its own"
            )
        if self.rtol is not None:
            if self.method == "rk4":
                raise InvalidParametersError(
                    f"rtol: a tolerance is for an embedded pair {ADAPTIVE_METHODS}, not 'rk4'"
                )
            if not as_positive_float("rtol", self.rtol) <= 0.1:
                raise InvalidParametersError(
                    f"rtol: expected a number in (0, 0.1], got {self.rtol!r}"
                )
        as_seed("seed", self.seed)
        if not as_nonnegative_float("min_token_ess", self.min_token_ess) <= 1.0:
            raise InvalidParametersError(
                f"min_token_ess: expected a number in [0, 1], got {self.min_token_ess!r}"
            )
        as_positive_float("w2_factor", self.w2_factor)
        if (
            self.n_points is not None
            and as_positive_int("n_points", self.n_points, maximum=_MAX_SNAPSHOTS) < 2
        ):
            raise InvalidParametersError(
                f"n_points: expected at least 2 (both ends), got {self.n_points!r}"
            )
        as_positive_int("floor_samples", self.floor_samples, maximum=_MAX_FLOOR_SAMPLES)
        if self.stop_factor is not None:
            if not as_positive_float("stop_factor", self.stop_factor) >= self.w2_factor:
                raise InvalidParametersError(
                    f"stop_factor: expected a number at least w2_factor = {self.w2_factor:g} "
                    f"(a run stopped there must fail the check), got {self.stop_factor!r}"
                )
            if self.n_points not in (None, 2):
                raise InvalidParametersError(
                    "n_points: with stop_factor the ESS is checked at the start and at the "
                    f"depth reached; omit it or pass 2, got {self.n_points!r}"
                )


def _auto_steps(layer: Layer, target: Gaussian, initial: Gaussian, T: float) -> int:
    """``ceil(T λ / _STEP_RATE)``, ``λ`` the fastest rate of the token field near the path."""
    m_star, _ = affine_velocity(layer, target.mean, target.cov)
    m_0, _ = affine_velocity(layer, initial.mean, initial.cov)
    v_sum = sum((v for v, _ in layer.heads), np.zeros((layer.dim, layer.dim)))
    lam = float(np.linalg.norm(m_star + v_sum, 2)) + max(
        float(np.linalg.norm(m_star, 2)), float(np.linalg.norm(m_0, 2))
    )
    return int(min(max(math.ceil(T * lam / _STEP_RATE), 1), _MAX_STEPS))


def _empirical_ess(layer: Layer, x: FloatArray, budget: Budget | None = None) -> float:
    """``min_i (Σ_j w_ij)² / (N Σ_j w_ij²)``, ``w_ij = exp(x_jᵀ B_h x_i)``, over tokens, heads.

    ``nan`` when ``budget``'s grace runs out between two blocks of queries (``O(N² d)`` work).
    """
    n = x.shape[0]
    block = max(1, _ESS_BLOCK_WEIGHTS // n)
    low = 1.0
    for _, b in layer.heads:
        q = x @ b.T  # rows u_i = B x_i
        for i0 in range(0, n, block):
            if budget is not None and _spent(budget):
                return math.nan
            logits = q[i0 : i0 + block] @ x.T
            w = np.exp(logits - logits.max(axis=1, keepdims=True))
            ess = w.sum(axis=1) ** 2 / (n * np.einsum("ij,ij->i", w, w))
            low = min(low, float(ess.min()))
    return low


def _n_snapshot_depths(requested: int | None, steps: int, numbers: int) -> int:
    """Every step depth (``steps + 1``) unless given, within ``_SNAPSHOT_BYTES`` of copies."""
    if requested is not None:
        return requested
    return int(max(2, min(steps + 1, _SNAPSHOT_BYTES // (8 * numbers), _MAX_SNAPSHOTS)))


def _spent(budget: Budget) -> bool:
    """Whether the budget's grace (:meth:`Budget.grace`) is spent: no more measurements."""
    left = budget.grace()
    return left is not None and left <= 1e-9


def _floor(
    target: Gaussian,
    n: int,
    samples: int,
    rng: np.random.Generator,
    budget: Budget,
    *,
    first: bool = False,
) -> float:
    """Median ``W2`` of fresh ``n``-point target samples (those drawn within the budget's
    grace, or, ``first``, before the run, within its limit: the grace is for the measurements
    after it; ``nan`` when none was)."""
    dists = []
    for _ in range(samples):
        if budget.exhausted if first else _spent(budget):
            break
        dists.append(Gaussian.from_samples(target.sample(n, seed=rng)).bures_wasserstein(target))
    return float(np.median(dists)) if dists else math.nan


def _representable(mean: FloatArray, cov: FloatArray) -> bool:
    """Whether the tokens' moments are within the entry bound a :class:`Gaussian` takes."""
    with np.errstate(over="ignore", invalid="ignore"):  # tokens past float64 give inf, nan
        return bool(np.max(np.abs(mean)) <= MAX_ENTRY and np.max(np.abs(cov)) <= MAX_ENTRY)


def _w2(target: Gaussian, mean: FloatArray, cov: FloatArray) -> float:
    """``W2`` from the tokens' moments to ``target``; ``inf`` for moments past the entry bound
    (tokens that far off are certainly not at the target)."""
    if not _representable(mean, cov):
        return math.inf
    return Gaussian(mean, cov).bures_wasserstein(target)


def _measured(values: list[float], count: int) -> FloatArray:
    """``values`` padded with ``nan`` to ``count`` entries (measurements cut by the budget)."""
    return np.array(values + [math.nan] * (count - len(values)), dtype=float)


def _default_depth(layer: Layer, target: Gaussian, budget: Budget) -> float | None:
    """``_DEPTH_RATES`` e-folds of the certified rate; ``None`` when ``budget`` ran out first."""
    cert = design_certificate(layer, target, time_limit=budget.left_as_limit())
    if cert.status is Status.BUDGET_EXHAUSTED:
        return None
    if not (cert.rate > 0 and math.isfinite(cert.rate)):
        raise InvalidParametersError(
            "T: the layer has no positive certified rate towards the target "
            f"({cert.message}); pass T explicitly"
        )
    return _DEPTH_RATES / cert.rate


def design_token_certificate(
    layer: Layer,
    target: Gaussian | tuple[Any, Any],
    T: float | None = None,
    *,
    n_tokens: int = 1024,
    initial: Any = None,
    steps: int | None = None,
    method: str = "rk4",
    rtol: float | None = None,
    seed: int = 0,
    min_token_ess: float = 0.2,
    w2_factor: float = 2.0,
    n_points: int | None = None,
    floor_samples: int = 8,
    stop_factor: float | None = None,
    dtype: Any = np.float64,
    time_limit: float | None = None,
) -> TokenCertificate:
    """Drive ``N`` real tokens with ``layer`` and measure how close they end to ``target``.

    Tokens ``x_i ~ initial`` (seeded) follow ``dx_i/dt = A x_i + b + Σ_h V_h Attn_h(x_i; μ_t)``
    with the softmax over the ``N`` tokens (:func:`gtcontrol.simulate_tokens`, ``method="rk4"``).
    At depth ``T`` the distance ``w2 = W2(N(m̂, Σ̂), N(m*, Σ*))`` of the tokens' empirical moments
    is compared with the sampling floor ``W2(N(m̂_ref, Σ̂_ref), N(m*, Σ*))`` of a fresh sample of
    ``N`` target points, and the empirical softmax effective sample size
    ``ESS_i/N = (Σ_j w_ij)² / (N Σ_j w_ij²)`` is checked for every token at ``n_points``
    depths. docs/theory.md §2 "Finite N" explains why it matters: where ``ESS/N`` is tiny the tokens
    stall although the moment model converges.

    Parameters
    ----------
    layer
        The layer (e.g. ``design_mean_matching(...).layer``).
    target
        ``N(m*, Σ*)`` (a :class:`Gaussian` or ``(mean, cov)``), Σ* ≻ 0; with ``T`` given,
        Σ* ⪰ 0 is enough (the target is then only compared with).
    T
        Depth; ``None``: ``12 / rate`` with ``rate`` the certified rate of
        :func:`design_certificate` (errors ``~e^{−12}`` of the initial ones).
    n_tokens
        ``N`` (``2 ≤ N ≤ 10⁶``; cost ``O(N² d)`` per field evaluation).
    initial
        Distribution of the input tokens: a :class:`Gaussian`, a ``(mean, cov)`` pair, or
        ``None`` for ``N(0, I)``.
    steps
        Fixed RK4 steps over ``[0, T]`` (``method="rk4"`` only); ``None``: ``ceil(T λ)`` with
        ``λ = ‖K*‖₂ + max(‖M(Σ0)‖₂, ‖M(Σ*)‖₂)`` (``h λ ≤ 1``; the tests check that halving
        the step changes ``w2`` by less than 1e-4 of the floor).
    method
        ``"rk4"`` (default): fixed steps. ``"RK23"``, ``"RK45"`` or ``"DOP853"``: that embedded
        Runge–Kutta pair of :func:`gtcontrol.simulate_tokens` (the lower the order, the cheaper
        at the loose tolerances of a check), whose error control also finds the steps a stiff
        token field needs (a finite-N stiffness the moment model does not show, e.g. a softmax
        head of large gain); ``steps`` is then the number of accepted steps. It is capped at
        three times the field evaluations of the RK4 rule below: a run that needs more (tokens
        that blow up, a very stiff field) ends ``BUDGET_EXHAUSTED`` and says so.
    rtol
        Tolerance of an embedded pair (in ``(0, 0.1]``; ``None``: the default of
        :func:`gtcontrol.simulate_tokens` for ``dtype``): the accepted local errors sum to at
        most ``rtol`` of the tokens' scale over ``[0, T]``.
    seed
        Seed of the tokens and of the floor's fresh samples.
    min_token_ess
        Required smallest empirical ``ESS/N`` (in ``[0, 1]``; default 0.2).
    w2_factor
        Required ``w2 ≤ w2_factor · floor`` (default 2).
    n_points
        Depths (evenly spaced on ``[0, T]``, both ends included, at the nearest step) where the
        empirical ``ESS/N`` of every token is evaluated (``≥ 2``); ``None``: every step (33
        depths with an embedded pair), as far as the copies of the tokens fit in 256 MiB (each
        costs one softmax pass per head, a quarter of an RK4 step).
    floor_samples
        Fresh target samples whose median distance is the floor.
    stop_factor
        For a layer expected to send the tokens away (e.g. the unstable layer a design
        replaces): one run to ``T`` whose ``w2`` is measured after the first step to reach
        each of ``T/16, T/8, T/4, T/2`` (RK4's step count is then a multiple of 16, so those
        very depths), and that stops at the first where ``w2 > stop_factor · floor`` (at least
        ``w2_factor``, so such a run fails the check). It costs the depth the tokens need to
        leave, not ``T``; ``T`` of the result is the depth reached, and the ESS is checked at
        the start and there. ``stop_factor = w2_factor`` requires ``w2 ≤ w2_factor · floor`` at
        each of these depths, not only at ``T``. ``None`` (default): to ``T``.
    dtype
        Working precision of the token arithmetic, ``numpy.float64`` (default) or
        ``numpy.float32`` (about twice as fast; its rounding, ``~1e-7`` relative per step, is
        far below the sampling floor ``~N^{-1/2}`` that ``w2`` is compared with). The
        measurements are in float64 either way.
    time_limit
        Wall-clock limit in seconds (``None``: none) for the token simulation, which stops at
        the next field evaluation once it is spent: ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    TokenCertificate
        ``Status.SUCCESS`` when token-valid, ``INFEASIBLE`` (which threshold fails, in
        ``message``), or the simulation's ``OVERFLOW`` / ``BUDGET_EXHAUSTED`` / ``FAILED``.

    Raises
    ------
    InvalidParametersError
        On a malformed layer or option, or ``T=None`` for a layer without a positive
        certified rate.
    InvalidGaussianError
        On a malformed target or initial Gaussian, or a dimension mismatch.

    Examples
    --------
    >>> from gtcontrol import Gaussian
    >>> from gtcontrol.control.design import design_mean_matching, design_token_certificate
    >>> target = Gaussian([1.0, -0.5], [[0.5, 0.1], [0.1, 0.4]])
    >>> res = design_mean_matching(target, robustness=False)
    >>> tc = design_token_certificate(res.layer, res.target, n_tokens=256, T=6.0)
    >>> tc.success, bool(tc.w2 <= 2 * tc.floor), bool(tc.min_ess >= 0.2)
    (True, True, True)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §1–§2; docs/theory.md §2 "Finite N".
    """
    clock = time.perf_counter()
    opts = _TokenCheckOptions(**option_values(_TokenCheckOptions, locals()))
    # with T given, the target is only compared with (W2): Σ* may be singular (S ⊕ 0 on an
    # extracted layer's frozen coordinate); the default T needs its certificate, on Σ*⁻¹
    layer, tgt = check_layer(layer, target, definite=opts.T is None)
    g0 = as_initial(initial, tgt.dim)
    # a multi-threaded BLAS stalls on a busy machine, inside calls no budget check interrupts
    with calm_blas():
        return _certify(layer, tgt, g0, opts, clock)


def _certify(
    layer: Layer, tgt: Gaussian, g0: Gaussian, opts: _TokenCheckOptions, clock: float
) -> TokenCertificate:
    """The work of :func:`design_token_certificate` on validated inputs."""
    budget = Budget(opts.time_limit)
    if budget.exhausted:  # a spent limit: not even the depth's certificate is computed
        return _not_run(opts, math.nan if opts.T is None else float(opts.T), 0, g0, budget, clock)
    if opts.T is None:
        found = _default_depth(layer, tgt, budget)
        if found is None:
            return _not_run(opts, math.nan, 0, g0, budget, clock)
        depth = found
    else:
        depth = float(opts.T)
    adaptive = opts.method != "rk4"
    n_steps, max_evals = _step_rule(layer, tgt, g0, depth, opts)
    if budget.exhausted:  # the set-up took the time: no tokens are drawn
        return _not_run(opts, depth, n_steps, g0, budget, clock)
    rng = np.random.default_rng(int(opts.seed))
    x0 = g0.sample(opts.n_tokens, seed=rng)
    planned, stopped = depth, ""
    if opts.stop_factor is None:
        snap_steps = _ADAPTIVE_SNAPSHOTS - 1 if adaptive else n_steps
        snaps = np.linspace(0.0, depth, _n_snapshot_depths(opts.n_points, snap_steps, x0.size))
        tr = _move(layer, x0, depth, None if adaptive else n_steps, snaps, max_evals, opts, budget)
        cut = tr.status is Status.BUDGET_EXHAUSTED  # no grace for a simulation cut short
        floor = math.nan if cut else _floor(tgt, opts.n_tokens, opts.floor_samples, rng, budget)
    else:
        # the floor first (from the same draws as after a run to T): it decides where to stop
        floor = _floor(tgt, opts.n_tokens, opts.floor_samples, rng, budget, first=True)
        tr = _until_away(
            layer, tgt, x0, depth, n_steps, max_evals, opts.stop_factor * floor, opts, budget
        )
        cut = tr.status is Status.BUDGET_EXHAUSTED
        depth = float(tr.t[-1])
        n_steps = int(tr.stats.get("steps", n_steps))
        if tr.status is Status.SUCCESS and depth < planned * (1.0 - 1e-12):
            stopped = (
                f"; stopped at depth {depth:.4g} of {planned:.4g}, the first step to reach T/16, "
                f"T/8, … where W2 > {opts.stop_factor:g} × floor"
            )
    # The measurements run within the budget's grace; those cut short are nan (and the
    # certificate is then BUDGET_EXHAUSTED). The final distance first: it is the verdict.
    w2 = _w2(tgt, tr.mean[-1], tr.cov[-1])
    # the path at no more than _W2_POINTS recorded depths: each costs two O(d³) factorizations
    picks = np.unique(np.linspace(0, len(tr) - 1, min(len(tr), _W2_POINTS)).round().astype(int))
    w2_vals = []
    for i in picks[:-1]:
        if cut or _spent(budget):
            break
        w2_vals.append(_w2(tgt, tr.mean[int(i)], tr.cov[int(i)]))
    w2_path = _measured(w2_vals, len(picks))
    w2_path[-1] = w2
    snap_t = np.array([t for t, _ in tr.snapshots])
    ess_vals, predicted = [], 1.0
    for _, x in tr.snapshots:
        if cut or _spent(budget):
            break
        x64 = np.asarray(x, float)
        ess_vals.append(_empirical_ess(layer, x64, budget))
        mean = np.mean(x64, axis=0)  # Gaussian.from_samples's moments, checked before built
        xc = x64 - mean
        cov = xc.T @ xc / x64.shape[0]
        if _representable(mean, cov):  # else no Gaussian predicts these tokens' ESS
            fraction = ess_fraction(layer, Gaussian(mean, cov), x64)
            predicted = min(predicted, float(np.min(fraction)) if np.size(fraction) else 1.0)
    ess_path = _measured(ess_vals, len(tr.snapshots))
    low = float(np.min(ess_path)) if ess_path.size else 1.0  # nan if any was cut
    complete = not (math.isnan(floor) or np.isnan(w2_path).any() or np.isnan(ess_path).any())
    sim_status, sim_message = tr.status, tr.message
    if sim_status is Status.SUCCESS and not complete:
        sim_status = Status.BUDGET_EXHAUSTED
        sim_message = f"the measurements of the tokens were cut short: {budget.reason()}"
    status, message = _verdict(
        sim_status, sim_message, w2, floor, low, predicted, len(ess_vals), opts
    )
    message += stopped
    return TokenCertificate(
        n_tokens=opts.n_tokens,
        T=depth,
        steps=int(tr.stats.get("steps", n_steps)) if adaptive else n_steps,
        initial=g0,
        w2=w2,
        floor=floor,
        min_ess=low,
        predicted_min_ess=predicted,
        t=frozen(np.asarray(tr.t, dtype=float)[picks]),
        w2_path=frozen(w2_path),
        snapshot_t=frozen(snap_t),
        ess_path=frozen(ess_path),
        w2_factor=opts.w2_factor,
        min_token_ess=opts.min_token_ess,
        status=status,
        message=message,
        stats={
            "seconds": time.perf_counter() - clock,
            "simulation_seconds": tr.stats.get("seconds"),
            "n_velocity": tr.stats.get("n_velocity"),
            "seed": int(opts.seed),
        },
    )


def _step_rule(
    layer: Layer, tgt: Gaussian, g0: Gaussian, depth: float, opts: _TokenCheckOptions
) -> tuple[int, int]:
    """The token run's RK4 steps (0 for the embedded pair: its error control chooses them) and
    its cap on field evaluations."""
    if opts.method == "rk4":
        n_steps = _auto_steps(layer, tgt, g0, depth) if opts.steps is None else int(opts.steps)
        return n_steps, DEFAULT_MAX_EVALS
    # a field that needs far more evaluations than RK4's rule (tokens blowing up, a stiff
    # head) ends the run: capped at _ADAPTIVE_EVALS times that rule's evaluations, plus the
    # starting rule's evaluation and a step cut to land on T
    return 0, _ADAPTIVE_EVALS * 4 * _auto_steps(layer, tgt, g0, depth) + 16


def _move(
    layer: Layer,
    x0: FloatArray,
    depth: float,
    steps: int | None,
    snaps: FloatArray,
    max_evals: int,
    opts: _TokenCheckOptions,
    budget: Budget,
) -> TokenTrajectory:
    """The token simulation of the check: ``steps`` RK4 steps, or its embedded pair at its
    ``rtol`` when ``None``."""
    return simulate_tokens(
        layer,
        x0,
        depth,
        method="rk4" if steps is not None else opts.method,
        steps_per_layer=steps,
        rtol=opts.rtol,
        times=snaps,
        dtype=opts.dtype,
        max_evals=max_evals,
        time_limit=budget.left_as_limit(),
    )


#: ``stop_factor``'s depths are ``T / 2**_STOP_DEPTHS, …, T/4, T/2, T``.
_STOP_DEPTHS = 4


def _until_away(
    layer: Layer,
    tgt: Gaussian,
    x0: FloatArray,
    depth: float,
    n_steps: int,
    max_evals: int,
    threshold: float,
    opts: _TokenCheckOptions,
    budget: Budget,
) -> TokenTrajectory:
    """The run of ``stop_factor``: one integration to ``T`` that ends, W2 measured after the
    first step to reach each of ``T/16, T/8, T/4, T/2``, at the first where the tokens are
    ``W2 > threshold`` from the target (a nan ``threshold``, a floor cut by the budget, never
    stops it); snapshots at the start and at the depth reached. RK4 takes the whole run's
    steps rounded up to a multiple of 16, so that those depths are step ends; the embedded
    pair's steps do not land on them: a step cut to land costs a step, as much again as the
    checks save where the tokens stay near (:func:`gtcontrol.simulate_tokens`,
    ``stop_when``)."""
    adaptive = opts.method != "rk4"
    grid = 2**_STOP_DEPTHS
    pending = [depth / 2.0**k for k in range(_STOP_DEPTHS, 0, -1)]

    def away(t: float, x: FloatArray) -> bool:
        if not pending or t < pending[0]:
            return False
        while pending and t >= pending[0]:
            pending.pop(0)
        cloud = Gaussian.from_samples(np.asarray(x, dtype=float))
        return bool(cloud.bures_wasserstein(tgt) > threshold)

    tr = simulate_tokens(
        layer,
        x0,
        depth,
        method=opts.method,
        steps_per_layer=None if adaptive else grid * math.ceil(n_steps / grid),
        rtol=opts.rtol if adaptive else None,
        times=np.array([0.0, depth]),
        dtype=opts.dtype,
        max_evals=max_evals,
        stop_when=away,
        time_limit=budget.left_as_limit(),
    )
    end = float(tr.t[-1])
    if end < depth and tr.status is not Status.OVERFLOW:
        # the depth reached is the run's last snapshot, as for a run to T
        last = (end, frozen(np.array(tr.final_tokens)))
        tr = dataclasses.replace(tr, snapshots=(*tr.snapshots[:1], last))
    if tr.status is Status.BUDGET_EXHAUSTED and budget.exhausted:
        # the run's own limit is what was left of the call's: say the call's
        why = budget.reason()
        tr = dataclasses.replace(tr, message=f"{why} at depth {end:.6g}; the tokens stop there")
    return tr


def _not_run(
    opts: _TokenCheckOptions,
    depth: float,
    n_steps: int,
    g0: Gaussian,
    budget: Budget,
    clock: float,
) -> TokenCertificate:
    """The certificate of a token check whose time ran out before any token moved."""
    nan = math.nan
    empty = frozen(np.empty(0))
    return TokenCertificate(
        n_tokens=opts.n_tokens,
        T=depth,
        steps=n_steps,
        initial=g0,
        w2=nan,
        floor=nan,
        min_ess=nan,
        predicted_min_ess=nan,
        t=empty,
        w2_path=empty,
        snapshot_t=empty,
        ess_path=empty,
        w2_factor=opts.w2_factor,
        min_token_ess=opts.min_token_ess,
        status=Status.BUDGET_EXHAUSTED,
        message=f"no token was moved: {budget.reason()} before the token simulation",
        stats={"seconds": time.perf_counter() - clock, "n_velocity": 0, "seed": int(opts.seed)},
    )


def _verdict(
    sim_status: Status,
    sim_message: str,
    w2: float,
    floor: float,
    low: float,
    predicted: float,
    n_depths: int,
    opts: _TokenCheckOptions,
) -> tuple[Status, str]:
    figures = (
        f"{opts.n_tokens} tokens: W2 to the target {w2:.4g} (sampling floor {floor:.4g}, "
        f"ratio {w2 / floor:.3g}); smallest softmax ESS/N {low:.3g} over every token and "
        f"{n_depths} depths (formula exp(−uᵀΣu): {predicted:.3g})"
    )
    if sim_status is not Status.SUCCESS:
        return Status(sim_status), f"the token simulation stopped: {sim_message}; {figures}"
    fails = []
    if not w2 <= opts.w2_factor * floor:
        fails.append(f"W2 {w2:.4g} > {opts.w2_factor:g} × floor")
    if not low >= opts.min_token_ess:
        fails.append(f"ESS/N {low:.3g} < {opts.min_token_ess:g}")
    if fails:
        return Status.INFEASIBLE, "not token-valid: " + "; ".join(fails) + "; " + figures
    return Status.SUCCESS, "token-valid: " + figures
