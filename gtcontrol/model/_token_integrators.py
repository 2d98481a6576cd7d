"""The token integrators behind :func:`gtcontrol.model.tokens.simulate_tokens`.

Fixed steps (classical RK4, or the residual network ``x ← x + h v(x)`` with an Euler–Maruyama
noise term), with the validation of the options of every method, the recorder of empirical
moments and snapshots, and the outcome of a run (reached the horizon, overflow, spent budget,
integrator failure). The adaptive default lives in :mod:`gtcontrol.model._token_adaptive`; the
velocity field in :mod:`gtcontrol.model.attention`.

Reference: the paper cited in :mod:`gtcontrol`, §1 and §6.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._linalg import FloatArray, sym
from .._status import DEFAULT_MAX_EVALS, BudgetExhausted, Status
from .._validation import (
    MAX_ENTRY,
    as_choice,
    as_depths,
    as_float_array,
    as_max_evals,
    as_nonnegative_float,
    as_positive_float,
    as_positive_int,
    as_rng,
    as_time_limit,
    frozen,
    set_fields,
)
from ..errors import InvalidParametersError
from ._attention_kernels import BACKENDS
from .attention import MAX_BLOCK, PreparedLayer, Workspace, prepare_layer, prepared_velocity
from .params import Control, Schedule

__all__: list[str] = []

#: The embedded pairs (error-controlled steps) and the fixed-step methods.
ADAPTIVE_METHODS = ("DOP853", "RK45", "RK23")
_METHODS = (*ADAPTIVE_METHODS, "rk4", "euler", "discrete")
_RECORDS = ("steps", "layers")
_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
_DEFAULT_RK4_STEPS = 20
#: Default ``rtol`` of the embedded pairs: the accepted local errors sum to at most this
#: (relative to the token scale) over the horizon, so the default run is within ~1e-6 of a
#: converged one.
_DEFAULT_RTOL = {np.dtype(np.float64): 1e-7, np.dtype(np.float32): 1e-4}
#: Smallest ``rtol``: 100 machine epsilons of the working dtype (below, rounding dominates).
_RTOL_FLOOR_EPS = 100.0
_RTOL_MAX = 0.1
#: Largest ``steps_per_layer`` of the fixed-step methods.
_MAX_STEPS_PER_LAYER = 10**6

AnyArray = NDArray[Any]


def rtol_floor(dtype: Any) -> float:
    """The smallest ``rtol`` of an embedded pair in ``dtype``: 100 machine epsilons."""
    return _RTOL_FLOOR_EPS * float(np.finfo(np.dtype(dtype)).eps)


def adaptive_rtol(rtol: float | None, dtype: Any) -> float:
    """``rtol`` of an embedded pair, or its default for ``dtype`` when ``None``."""
    return float(rtol) if rtol is not None else _DEFAULT_RTOL[np.dtype(dtype)]


# ---------------------------------------------------------------------------- options and result
@dataclass(frozen=True, kw_only=True)
class TokenOptions:
    """Validator and defaults of the keywords of :func:`simulate_tokens` (private).

    Attributes
    ----------
    method
        ``"DOP853"``, ``"RK45"`` or ``"RK23"`` (an embedded Runge–Kutta pair with error control
        on the whole token ensemble, :mod:`gtcontrol.model._token_adaptive`), ``"rk4"`` (classical
        fixed-step Runge–Kutta) or ``"euler"`` / ``"discrete"`` (the residual network
        ``x ← x + h v(x)``, Euler–Maruyama with noise). ``None``: ``"rk4"`` when
        ``steps_per_layer`` is given, else ``"DOP853"``.
    steps_per_layer
        Fixed steps per layer (per segment between breakpoints), at most ``10**6``. ``None``:
        20 for ``"rk4"``, 1 for ``"euler"``/``"discrete"`` (a real L-layer network). Refused by
        the embedded pairs.
    block_size
        Query rows per attention tile; ``None``: the kernel's default (128 rows × 256 keys).
    backend
        Attention backend: ``"auto"`` (default: torch on a CUDA device for N ≥ 2048, else
        numpy), ``"numpy"`` or ``"torch"``.
    record
        ``"steps"``: empirical moments after every (accepted) step; ``"layers"``: only at the
        breakpoints.
    rtol, atol
        Error control of the embedded pairs: the accepted local errors, each relative to
        ``max(|x|, rms of the tokens)`` plus ``atol / rtol``, sum to at most ``rtol`` over the
        horizon. Defaults ``1e-7`` (``1e-4`` in float32) and ``0``. ``rtol`` is at least 100
        machine epsilons of ``dtype``. Refused with the fixed-step methods.
    first_step
        First step of an embedded pair (``None``: Hairer's starting rule); a run's
        ``stats["next_step"]`` continues it. Refused with the fixed-step methods.
    dtype
        ``float64`` (default) or ``float32`` for the token arithmetic; moments are always
        accumulated in float64.
    max_evals
        Cap on velocity-field evaluations (default ``10**6``, at most ``10**9``).
    stop_when
        ``None`` or a callable ``stop_when(depth, tokens) -> bool`` asked after each step.
    time_limit
        Wall-clock limit in seconds, or ``None``.
    """

    method: str | None = None
    steps_per_layer: int | None = None
    block_size: int | None = None
    backend: str = "auto"
    record: str = "steps"
    rtol: float | None = None
    atol: float | None = None
    first_step: float | None = None
    dtype: Any = np.float64
    max_evals: int = DEFAULT_MAX_EVALS
    stop_when: Callable[[float, AnyArray], bool] | None = None
    time_limit: float | None = None

    def __post_init__(self) -> None:
        if self.stop_when is not None:
            _check_stop_when(self.stop_when)
        if self.method is None:
            auto = "rk4" if self.steps_per_layer is not None else "DOP853"
            set_fields(self, method=auto)
        as_choice("method", self.method, _METHODS)
        adaptive = self.adaptive
        if self.steps_per_layer is not None:
            as_positive_int("steps_per_layer", self.steps_per_layer, maximum=_MAX_STEPS_PER_LAYER)
            if adaptive:
                raise InvalidParametersError(
                    f"steps_per_layer: not used by method {self.method!r} (an embedded pair "
                    "picks its own steps)"
                )
        if self.block_size is not None:
            as_positive_int("block_size", self.block_size, maximum=MAX_BLOCK)
        as_choice("record", self.record, _RECORDS)
        as_choice("backend", self.backend, BACKENDS)
        for name in ("rtol", "atol", "first_step"):
            if getattr(self, name) is not None and not adaptive:
                raise InvalidParametersError(
                    f"{name}: only used by the embedded pairs {ADAPTIVE_METHODS}, got method "
                    f"{self.method!r}"
                )
        if self.atol is not None:
            as_nonnegative_float("atol", self.atol)
        if self.first_step is not None:
            as_positive_float("first_step", self.first_step)
        as_max_evals(self.max_evals)
        set_fields(self, time_limit=as_time_limit(self.time_limit))
        try:
            dt: np.dtype[Any] | None = np.dtype(self.dtype)
        except (TypeError, ValueError):
            dt = None
        # ``None in _DTYPES`` is true (numpy compares None as float64): test it first.
        if dt is None or self.dtype is None or dt not in _DTYPES:
            raise InvalidParametersError(
                f"dtype: expected numpy.float64 or numpy.float32, got {self.dtype!r}"
            )
        set_fields(self, dtype=dt)
        if self.rtol is not None:
            floor = rtol_floor(dt)
            if not floor <= as_positive_float("rtol", self.rtol) <= _RTOL_MAX:
                raise InvalidParametersError(
                    f"rtol: expected a tolerance in [{floor:.3g}, {_RTOL_MAX:g}] (at least 100 "
                    f"machine epsilons of {dt}), got {self.rtol!r}"
                )

    @property
    def adaptive(self) -> bool:
        """Whether the method is an embedded pair (error-controlled steps)."""
        return self.method in ADAPTIVE_METHODS

    @property
    def resolved_rtol(self) -> float:
        """``rtol`` of the embedded pair (its default depends on the dtype)."""
        return adaptive_rtol(self.rtol, self.dtype)

    @property
    def steps(self) -> int:
        """Resolved fixed steps per layer."""
        if self.steps_per_layer is not None:
            return int(self.steps_per_layer)
        return _DEFAULT_RK4_STEPS if self.method == "rk4" else 1


class Recorder:
    """Empirical moments (float64, 1/N covariance) and snapshots along depth."""

    def __init__(self, record: str) -> None:
        self.record = record
        self.t: list[float] = []
        self.mean: list[FloatArray] = []
        self.cov: list[FloatArray] = []
        self.snaps: list[tuple[float, AnyArray]] = []

    def add(self, t: float, x: AnyArray) -> None:
        x64 = np.asarray(x, dtype=np.float64)
        m = x64.mean(axis=0)
        xc = x64 - m
        s = (xc.T @ xc) / x64.shape[0]
        self.t.append(float(t))
        self.mean.append(m)
        self.cov.append(sym(s))

    def snapshot(self, t: float, x: AnyArray) -> None:
        if not self.snaps or self.snaps[-1][0] != t:
            self.snaps.append((float(t), frozen(x.copy())))


def check_times(times: Any, t_end: float) -> FloatArray:
    if times is None:
        return np.empty(0)
    ts = as_depths("times", times)
    bad = ts[(ts < 0.0) | (ts > t_end * (1.0 + 1e-12))]
    if bad.size:
        raise InvalidParametersError(
            f"times: expected depths in [0, {t_end:g}], got {bad.tolist()}"
        )
    return np.unique(np.clip(ts, 0.0, t_end))


def _check_noise(noise: Any, d: int, method: str) -> FloatArray | None:
    if noise is None:
        return None
    if method not in ("euler", "discrete"):
        raise InvalidParametersError(
            f"noise: the noisy-token model dx = v(x) dt + G dW needs method 'euler' "
            f"(Euler–Maruyama), got method {method!r}"
        )
    return as_float_array("noise", noise, ndim=2, shape=(d, None))


def has_layer_noise(ctrl: Control) -> bool:
    """Whether any layer of ``ctrl`` carries Brownian forcing (sampled at its breakpoints)."""
    if isinstance(ctrl, Schedule):
        return any(lay.noise is not None for lay in ctrl.layers)
    bps = np.asarray(ctrl.breakpoints, dtype=float)
    mids = 0.5 * (bps[:-1] + bps[1:])
    return any(ctrl.layer_at(float(t)).noise is not None for t in mids)


def layer_source(
    ctrl: Control, dtype: np.dtype[Any]
) -> Callable[[float, float, float], PreparedLayer]:
    """``get(t, t0, t1)``: the prepared layer at ``t`` within segment ``[t0, t1]``.

    Piecewise-constant controls get the segment's layer (looked up once at its midpoint and
    cached); others are looked up at every evaluation depth.
    """
    piecewise = bool(getattr(ctrl, "piecewise_constant", False))
    cache: dict[tuple[float, float], PreparedLayer] = {}

    def get(t: float, t0: float, t1: float) -> PreparedLayer:
        if piecewise:
            key = (t0, t1)
            if key not in cache:
                cache.clear()
                cache[key] = prepare_layer(ctrl.layer_at(0.5 * (t0 + t1)), dtype)
            return cache[key]
        return prepare_layer(ctrl.layer_at(t), dtype)

    return get


def all_finite(x: AnyArray) -> bool:
    """True when the entries of ``x`` (a velocity) and their sum of squares are finite."""
    x64 = np.asarray(x, dtype=np.float64).ravel()
    return math.isfinite(float(np.dot(x64, x64)))


#: :func:`mean_square_bound` of float32 tokens.
_FLOAT32_MEAN_SQUARE = 1e30


def mean_square_bound(dtype: Any) -> float:
    """The largest mean square ``Σ|x_i|²/N`` of tokens of ``dtype`` that :func:`in_range`
    accepts: :data:`gtcontrol._validation.MAX_ENTRY` (``1e150``) in float64, where the
    recorded moments stay valid Gaussians; ``1e30`` in float32, 8 decades below its largest
    number, so that the attention's scores ``xᵀB x'`` stay finite for ``‖B‖`` up to ``1e8``."""
    return MAX_ENTRY if np.dtype(dtype) == np.float64 else _FLOAT32_MEAN_SQUARE


def overflow(depth: float, dtype: Any) -> RunEnd:
    """The end of a run whose tokens of ``dtype`` left :func:`in_range` at ``depth``."""
    bound = mean_square_bound(dtype)
    where = (
        "gtcontrol._validation.MAX_ENTRY" if bound == MAX_ENTRY else f"{np.dtype(dtype)}'s range"
    )
    return RunEnd(Status.OVERFLOW, depth, f"{bound:.3g}, {where}")


def near_edge(x: AnyArray) -> bool:
    """True when the tokens' mean square is past 1 % of :func:`mean_square_bound`: a step
    from here that leaves :func:`in_range` marks where the run leaves it (exponential growth
    would otherwise creep to the edge in ever shorter steps)."""
    x64 = np.asarray(x, dtype=np.float64).ravel()
    return bool(float(np.dot(x64, x64)) > 0.01 * mean_square_bound(x.dtype) * x.shape[0])


def in_range(x: AnyArray) -> bool:
    """True when the tokens' empirical moments are within the range of a :class:`Gaussian`.

    The mean square ``Σ|x_i|² / N`` bounds every entry of the (centered, ``1/N``) empirical
    covariance and the square of every entry of the mean, so when it is at most
    :func:`mean_square_bound` of the tokens' dtype the recorded moments are valid Gaussians
    (``TokenTrajectory.empirical``) and the products the attention forms stay finite; beyond
    it the tokens have overflowed that range (in float32, long before its infinities, whose
    edge would otherwise take ever shorter steps), and the integration stops with ``OVERFLOW``.
    """
    x64 = np.asarray(x, dtype=np.float64).ravel()
    bound = mean_square_bound(x.dtype)
    return bool(float(np.dot(x64, x64)) <= bound * max(x.shape[0], 1))  # False: inf, NaN


@dataclass(frozen=True)
class RunEnd:
    """Where and how a token integration stopped."""

    status: Status
    depth: float = math.inf
    detail: str = ""

    def message(self) -> str:
        if self.status is Status.OVERFLOW:
            return (
                f"the tokens left the floating-point range at depth {self.depth:.12g} (non-finite, "
                f"or second moments above {self.detail})"
            )
        if self.status is Status.BUDGET_EXHAUSTED:
            return f"{self.detail} at depth {self.depth:.6g}; the tokens stop there"
        if self.status is Status.FAILED:
            return f"token integration failed at depth {self.depth:.6g}: {self.detail}"
        if self.detail:
            return f"stopped at depth {self.depth:.6g}: {self.detail}"
        return "tokens carried to the horizon"


def _check_stop_when(stop_when: Any) -> None:
    """Refuse a ``stop_when`` that is not a callable of ``(depth, tokens)`` (where Python can
    tell: a builtin's signature may be unknown)."""
    expected = "expected None or a callable stop_when(depth, tokens) -> bool"
    if not callable(stop_when):
        raise InvalidParametersError(f"stop_when: {expected}, got {type(stop_when).__name__}")
    try:
        signature = inspect.signature(stop_when)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(0.0, None)
    except TypeError:
        raise InvalidParametersError(
            f"stop_when: {expected}, got one whose signature is {signature}"
        ) from None


def _truth(answer: Any) -> bool:
    """``stop_when``'s answer as a bool: one truth value (an array of several is refused)."""
    if np.ndim(answer) != 0 and np.size(answer) != 1:
        raise InvalidParametersError(
            f"stop_when: expected one truth value from stop_when(depth, tokens), got an array "
            f"of shape {np.shape(answer)} (reduce it, e.g. with .any() or .all())"
        )
    return bool(answer)


def stopped_at(run: TokenRun, t: float, x: AnyArray) -> RunEnd | None:
    """Ask ``stop_when`` after a step that ended at ``t`` (its moments and any snapshot there
    kept): the end there, or ``None`` to go on. The moments are recorded at ``t`` whatever
    ``record`` asks (the run's last depth)."""
    if run.stop_when is None or not _truth(run.stop_when(t, x)):
        return None
    if run.rec.t[-1] < t:
        run.rec.add(t, x)
    return RunEnd(Status.SUCCESS, t, "stop_when was true there")


DONE = RunEnd(Status.SUCCESS)


def _step_grid(breaks: FloatArray, steps: int) -> FloatArray:
    """Depth 0, then the end of every fixed step (every breakpoint is hit exactly)."""
    parts = [np.array([float(breaks[0])])]
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        h = (t1 - t0) / steps
        ends = t0 + np.arange(steps) * h + h  # the same rounding as the steps' t + h
        ends[-1] = t1
        parts.append(ends)
    return np.concatenate(parts)


def _nearest(grid: FloatArray, times: FloatArray) -> set[int]:
    """Index of the grid point nearest to each time (the first one on a tie): ``O(n log n)``."""
    if len(times) == 0:
        return set()
    hi = np.clip(np.searchsorted(grid, times), 0, len(grid) - 1)
    lo = np.clip(hi - 1, 0, len(grid) - 1)
    pick = np.where(np.abs(grid[hi] - times) < np.abs(grid[lo] - times), hi, lo)
    return {int(i) for i in pick}


@dataclass(frozen=True)
class _Stepper:
    """One fixed step of ``"rk4"`` or of the residual (Euler–Maruyama) network."""

    get: Callable[[float, float, float], PreparedLayer]
    work: Workspace
    rk4: bool
    noise_t: AnyArray | None  # an explicit `noise` argument (overrides Layer.noise)
    gen: np.random.Generator | None
    dtype: np.dtype[Any]

    def __call__(self, x: AnyArray, t: float, h: float, t0: float, t1: float) -> AnyArray:
        get, work = self.get, self.work
        if self.rk4:
            k1 = prepared_velocity(get(t, t0, t1), x, work)
            pm = get(t + 0.5 * h, t0, t1)
            k2 = prepared_velocity(pm, x + (0.5 * h) * k1, work)
            k3 = prepared_velocity(pm, x + (0.5 * h) * k2, work)
            k4 = prepared_velocity(get(t + h, t0, t1), x + h * k3, work)
            k2 += k3
            k2 *= 2.0
            k1 += k2
            k1 += k4
            return x + (h / 6.0) * k1
        # Residual layer; the layer at the step midpoint, as simulate_discrete uses.
        prep = get(t + 0.5 * h, t0, t1)
        x_new = x + h * prepared_velocity(prep, x, work)
        g_step = self.noise_t if self.noise_t is not None else prep.noise_t
        if g_step is not None and self.gen is not None:
            xi = self.gen.standard_normal((x.shape[0], g_step.shape[0]), dtype=self.dtype)
            x_new += math.sqrt(h) * (xi @ g_step)
        return x_new


@dataclass(frozen=True)
class TokenRun:
    """What both integrators work with: the control, options, workspace, recorder, snapshots."""

    ctrl: Control
    opts: TokenOptions
    work: Workspace
    rec: Recorder
    snap_times: FloatArray
    #: Progress report ``update(depth)`` (:func:`gtcontrol._progress.progress`; a no-op unless
    #: the command line shows bars), called once per step.
    update: Callable[[float], None] = lambda depth: None
    #: ``stop_when(depth, tokens)`` of :func:`~gtcontrol.simulate_tokens`, asked after each
    #: step (:func:`stopped_at`).
    stop_when: Callable[[float, AnyArray], bool] | None = None


def run_fixed(
    run: TokenRun, x: AnyArray, noise: FloatArray | None, gen: np.random.Generator | None
) -> tuple[AnyArray, RunEnd, int]:
    """Fixed steps over every segment: the final tokens, how it ended, the steps taken."""
    ctrl, opts, work, rec, snap_times = run.ctrl, run.opts, run.work, run.rec, run.snap_times
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    steps = opts.steps
    grid = _step_grid(breaks, steps)  # decides which steps are snapshotted
    snap_idx = _nearest(grid, np.asarray(snap_times, dtype=float))
    g_t = None if noise is None else np.ascontiguousarray(noise.T, dtype=opts.dtype)
    step = _Stepper(
        layer_source(ctrl, opts.dtype), work, opts.method == "rk4", g_t, gen, opts.dtype
    )
    rec.add(float(grid[0]), x)
    if 0 in snap_idx:
        rec.snapshot(float(grid[0]), x)
    idx = 0
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        h = (t1 - t0) / steps
        for j in range(steps):
            t = t0 + j * h
            try:
                x_new = step(x, t, h, t0, t1)
            except BudgetExhausted as exc:
                t_now = float(grid[idx])
                if rec.t[-1] < t_now:
                    rec.add(t_now, x)
                return x, RunEnd(Status.BUDGET_EXHAUSTED, t_now, exc.reason), idx
            if not in_range(x_new):
                return x, overflow(t + h, x.dtype), idx
            x = x_new
            idx += 1
            t_now = t + h if j < steps - 1 else t1
            run.update(t_now)
            if opts.record == "steps" or j == steps - 1:
                rec.add(t_now, x)
            if idx in snap_idx:
                rec.snapshot(t_now, x)
            end = stopped_at(run, t_now, x)
            if end is not None:
                return x, end, idx
    return x, DONE, idx


def check_noise_sources(
    ctrl: Control, noise: Any, seed: Any, d: int, method: str
) -> tuple[FloatArray | None, np.random.Generator | None]:
    """The explicit noise matrix and the generator (``None`` when nothing is noisy)."""
    g = _check_noise(noise, d, method)
    layer_noise = has_layer_noise(ctrl)
    if layer_noise and method not in ("euler", "discrete"):
        raise InvalidParametersError(
            f"control: a layer with noise (dx = v(x) dt + G dW) needs method 'euler' "
            f"(Euler–Maruyama), got method {method!r}"
        )
    gen = as_rng("seed", seed)  # validated whether or not anything is noisy
    return g, (gen if (g is not None or layer_noise) else None)
