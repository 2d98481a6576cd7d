"""Token-level simulation of the continuous-depth Transformer: the ground truth of the moment model.

``N`` tokens ``x_i ∈ R^d`` with empirical measure ``μ = (1/N) Σ_j δ_{x_j}`` move by (theory.md §1)

    dx_i/dt = A x_i + b [+ W σ(U x_i + c)] + Σ_h V_h Attn_h(x_i; μ),
    Attn_h(x; μ) = Σ_j x_j e^{x_jᵀ B_h x} / Σ_j e^{x_jᵀ B_h x},

every token being both a query and a key; σ ∈ {identity, relu, gelu (exact erf form)}. For a
Gaussian cloud the empirical moments follow the moment ODE of :mod:`gtcontrol.moments` up to a
sampling error ``O(N^{-1/2})``; for ReLU/GELU feed-forwards and non-Gaussian clouds this simulator
is the reference the moment model is measured against.

Cost
----
One evaluation of the field costs ``O(N² d)`` per head with ``B_h ≠ 0`` (every query meets every
key: two ``N×N×d`` products and ``N²`` exponentials) plus ``O(N d²)`` for the matrices. The
moment field costs ``O(d³)`` (three ``d×d`` products per head) independently of ``N``: at
``N = 4096``, ``d = 16`` one token evaluation is ~1e9 flops and 1.7e7 exponentials against ~1.2e4
flops for the moments (see ``benchmarks/bench_moments_vs_tokens.py``). A head with ``B_h = 0``
attends uniformly and is evaluated in ``O(N d)`` as the empirical mean.

Blocked, stable softmax
-----------------------
The ``N×N`` weights, let alone an ``N×N×d`` tensor, are never stored. Per head, ``Q = X B_hᵀ``
(row ``i`` is ``B_h x_i``, so ``logit_ij = q_i · x_j = x_jᵀ B_h x_i``), then query blocks of
``block_size`` rows are processed in one reused ``block_size × N`` buffer: ``L = Q_blk Xᵀ``,
``L -= max_j L`` (the log-sum-exp shift: every weight is in ``(0, 1]`` and the largest is exactly
1, so the denominator is ``≥ 1`` and nothing overflows for any finite logits),
``P = exp(L)``, ``Attn_blk = (P X) / (P 1)``. Memory is ``O(N d + block_size · N)``.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026), §1 (model), §2 (Gaussian invariance), §6 (noisy tokens).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.integrate import solve_ivp
from scipy.special import erf

from .._linalg import FloatArray
from .._status import Status
from .._validation import as_float_array, as_positive_float, as_positive_int, frozen
from ..errors import InvalidParametersError, SolverError
from .gaussian import Gaussian
from .params import Control, Layer, Schedule, as_control

__all__ = ["TokenOptions", "TokenTrajectory", "simulate_tokens", "token_velocity"]

_METHODS = ("rk4", "euler", "discrete", "adaptive")
_IVP_METHODS = ("RK45", "DOP853")
_RECORDS = ("steps", "layers")
_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
#: Default size of the ``block_size × N`` logits buffer. Block sizes from 2 MiB to 512 MiB of
#: buffer measured within noise of each other (``bench_tokens.py --sweep``); 64 MiB keeps the
#: Python loop short while bounding memory independently of N.
_BUFFER_BYTES = 64 * 2**20
_DEFAULT_RK4_STEPS = 20
_SQRT_HALF = math.sqrt(0.5)

AnyArray = NDArray[Any]


# ---------------------------------------------------------------------------- options and result
@dataclass(frozen=True, kw_only=True)
class TokenOptions:
    """Options of :func:`simulate_tokens` (validated when built).

    Attributes
    ----------
    method
        ``"rk4"`` (classical fixed-step Runge–Kutta), ``"euler"`` / ``"discrete"`` (the residual
        network ``x ← x + h v(x)``, Euler–Maruyama with noise), or ``"adaptive"``
        (``scipy.integrate.solve_ivp`` on the flattened token array; fine for small ``N``).
    steps_per_layer
        Fixed steps per layer (per segment between breakpoints). ``None``: 20 for ``"rk4"``,
        1 for ``"euler"``/``"discrete"`` (a real L-layer network). Not used by ``"adaptive"``.
    block_size
        Query rows per attention block; ``None`` picks ``max(1, 64 MiB / (N · itemsize))``.
    record
        ``"steps"``: empirical moments after every step (every accepted step for
        ``"adaptive"``); ``"layers"``: only at the breakpoints.
    rtol, atol, ivp_method
        Error control of ``"adaptive"`` (``atol`` is scaled by ``max(max|x0|, 1)``); defaults
        ``1e-8``, ``1e-10``, ``"DOP853"``. Refused with the fixed-step methods.
    dtype
        ``float64`` (default) or ``float32`` for the token arithmetic; moments are always
        accumulated in float64.
    """

    method: str = "rk4"
    steps_per_layer: int | None = None
    block_size: int | None = None
    record: str = "steps"
    rtol: float | None = None
    atol: float | None = None
    ivp_method: str | None = None
    dtype: Any = np.float64

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise InvalidParametersError(f"method: expected one of {_METHODS}, got {self.method!r}")
        adaptive = self.method == "adaptive"
        if self.steps_per_layer is not None:
            as_positive_int("steps_per_layer", self.steps_per_layer)
            if adaptive:
                raise InvalidParametersError(
                    "steps_per_layer: not used by method 'adaptive' (it picks its own steps)"
                )
        if self.block_size is not None:
            as_positive_int("block_size", self.block_size)
        if self.record not in _RECORDS:
            raise InvalidParametersError(f"record: expected one of {_RECORDS}, got {self.record!r}")
        for name in ("rtol", "atol", "ivp_method"):
            if getattr(self, name) is not None and not adaptive:
                raise InvalidParametersError(
                    f"{name}: only used by method 'adaptive', got method {self.method!r}"
                )
        if self.rtol is not None:
            as_positive_float("rtol", self.rtol)
        if self.atol is not None:
            as_positive_float("atol", self.atol)
        if self.ivp_method is not None and self.ivp_method not in _IVP_METHODS:
            raise InvalidParametersError(
                f"ivp_method: expected one of {_IVP_METHODS}, got {self.ivp_method!r}"
            )
        try:
            dt = np.dtype(self.dtype)
        except TypeError:
            dt = None
        if dt not in _DTYPES:
            raise InvalidParametersError(
                f"dtype: expected numpy.float64 or numpy.float32, got {self.dtype!r}"
            )
        object.__setattr__(self, "dtype", dt)

    @property
    def steps(self) -> int:
        """Resolved fixed steps per layer."""
        if self.steps_per_layer is not None:
            return int(self.steps_per_layer)
        return _DEFAULT_RK4_STEPS if self.method == "rk4" else 1


@dataclass(frozen=True, eq=False)
class TokenTrajectory:
    """Tokens moved through depth, summarized by their empirical moments.

    Attributes
    ----------
    t
        Recorded depths ``(n,)``.
    mean, cov
        Empirical mean ``(n, d)`` and covariance ``(n, d, d)`` of the tokens at those depths,
        with the ``1/N`` normalization of :meth:`Gaussian.from_samples` (the covariance of the
        empirical measure, which is what the dynamics transports).
    snapshots
        ``((t, tokens), ...)`` at the requested snapshot depths, sorted by depth (for plotting
        clouds). Fixed-step methods snapshot at the step depth nearest to each request (``t``
        is that depth; the step grid is never altered to hit it); ``"adaptive"`` hits it exactly.
    final_tokens
        Tokens ``(N, d)`` at the last recorded depth (the last finite state after an overflow).
    status
        :class:`~gtcontrol.Status`: ``SUCCESS``, or ``OVERFLOW`` when the tokens became
        non-finite.
    blowup_time
        Depth of the step that produced non-finite tokens (for ``"adaptive"``: where the
        integrator stopped); ``math.inf`` when completed. (Formerly ``overflow_time``.)
    stats
        ``method``, ``steps`` (steps taken), ``n_velocity`` (field evaluations over all tokens),
        ``n_attention`` (softmax-head evaluations, the ``O(N² d)`` passes), ``block_size``,
        ``n_tokens``, ``seconds`` (and ``nfev`` for ``"adaptive"``).
    """

    t: FloatArray
    mean: FloatArray
    cov: FloatArray
    snapshots: tuple[tuple[float, AnyArray], ...]
    final_tokens: AnyArray
    status: Status
    blowup_time: float = math.inf
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""

    @property
    def success(self) -> bool:
        """Whether the tokens were carried to the horizon."""
        return self.status is Status.SUCCESS

    @property
    def overflow_time(self) -> float:
        """Deprecated alias of :attr:`blowup_time` (removed in 0.3)."""
        warnings.warn(
            "TokenTrajectory.overflow_time is deprecated; use blowup_time",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.blowup_time

    @property
    def dim(self) -> int:
        return int(self.mean.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.final_tokens.shape[0])

    def empirical(self, i: int) -> Gaussian:
        """The moment-matched Gaussian ``N(mean[i], cov[i])`` of the tokens at record ``i``."""
        return Gaussian(self.mean[i], self.cov[i], name="empirical")

    @property
    def final(self) -> Gaussian:
        """The moment-matched Gaussian at the last recorded depth."""
        return self.empirical(-1)

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def __repr__(self) -> str:
        return (
            f"TokenTrajectory(N={self.n_tokens}, dim={self.dim}, n={len(self)}, "
            f"t=[{self.t[0]:g}, {self.t[-1]:g}], status={self.status!r})"
        )


# ---------------------------------------------------------------------------- the token field
def _gelu(z: AnyArray) -> AnyArray:
    # Exact GELU z Φ(z) = z (1 + erf(z/√2)) / 2 (not the tanh approximation).
    return 0.5 * z * (1.0 + erf(z * _SQRT_HALF))


def _relu(z: AnyArray) -> AnyArray:
    return np.maximum(z, 0.0)


def _identity(z: AnyArray) -> AnyArray:
    return z


_ACTIVATION_FUNCS: dict[str, Callable[[AnyArray], AnyArray]] = {
    "identity": _identity,
    "relu": _relu,
    "gelu": _gelu,
}


@dataclass(frozen=True)
class _Prepared:
    """A layer's matrices, transposed for row-token products and cast to the working dtype."""

    a_t: AnyArray | None  # Aᵀ, None when A = 0
    b: AnyArray | None  # None when b = 0
    ffn: tuple[AnyArray, AnyArray, AnyArray, Callable[[AnyArray], AnyArray]] | None  # Uᵀ, c, Wᵀ
    mean_v_t: AnyArray | None  # (Σ_h V_h)ᵀ over heads with B_h = 0: they attend to the mean
    softmax_heads: tuple[tuple[AnyArray, AnyArray], ...]  # (B_hᵀ, V_hᵀ) with B_h ≠ 0, V_h ≠ 0
    noise_t: AnyArray | None  # Gᵀ of the layer's Brownian forcing (Layer.noise)


def _prepare(layer: Layer, dtype: np.dtype[Any]) -> _Prepared:
    def cast(a: FloatArray) -> AnyArray:
        return np.ascontiguousarray(a, dtype=dtype)

    ffn = None
    if layer.ffn is not None:
        f = layer.ffn
        ffn = (cast(f.U.T), cast(f.c), cast(f.W.T), _ACTIVATION_FUNCS[f.activation])
    mean_v = None
    soft = []
    for v_h, b_h in layer.heads:
        if not np.any(v_h):
            continue  # V_h = 0: the head contributes nothing
        if not np.any(b_h):
            # B_h = 0: every weight is e^0, attention is exactly the empirical mean.
            mean_v = v_h.copy() if mean_v is None else mean_v + v_h
        else:
            soft.append((cast(b_h.T), cast(v_h.T)))
    return _Prepared(
        a_t=cast(layer.A.T) if np.any(layer.A) else None,
        b=cast(layer.b) if np.any(layer.b) else None,
        ffn=ffn,
        mean_v_t=None if mean_v is None else cast(mean_v.T),
        softmax_heads=tuple(soft),
        noise_t=None if layer.noise is None else cast(layer.noise.T),
    )


class _Workspace:
    """The reused logits buffer and evaluation counters of one simulation."""

    def __init__(self, n: int, dtype: np.dtype[Any], block_size: int | None) -> None:
        if block_size is None:
            block_size = _BUFFER_BYTES // (n * dtype.itemsize)
        self.block = int(min(max(block_size, 1), n))
        self.dtype = dtype
        self.n = n
        self._buf: AnyArray | None = None  # allocated on the first softmax head
        self.n_velocity = 0
        self.n_attention = 0

    @property
    def buffer(self) -> AnyArray:
        if self._buf is None:
            self._buf = np.empty((self.block, self.n), dtype=self.dtype)
        return self._buf


def _attention(x: AnyArray, b_t: AnyArray, work: _Workspace) -> AnyArray:
    """Softmax attention of every token over all tokens, blocked over queries (stable)."""
    n = x.shape[0]
    q = x @ b_t  # row i is B x_i, so (q xᵀ)_ij = x_jᵀ B x_i
    out = np.empty_like(x)
    buf = work.buffer
    x_t = x.T
    for s in range(0, n, work.block):
        e = min(s + work.block, n)
        logits = buf[: e - s]
        np.matmul(q[s:e], x_t, out=logits)
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        den = logits.sum(axis=1)
        np.matmul(logits, x, out=out[s:e])
        out[s:e] /= den[:, None]
    work.n_attention += 1
    return out


def _velocity(p: _Prepared, x: AnyArray, work: _Workspace) -> AnyArray:
    """``v(x_i) = A x_i + b + W σ(U x_i + c) + Σ_h V_h Attn_h(x_i; μ)`` for all tokens (rows)."""
    out = x @ p.a_t if p.a_t is not None else np.zeros_like(x)
    if p.b is not None:
        out += p.b
    if p.ffn is not None:
        u_t, c, w_t, act = p.ffn
        out += act(x @ u_t + c) @ w_t
    if p.mean_v_t is not None:
        out += x.mean(axis=0) @ p.mean_v_t
    for b_t, v_t in p.softmax_heads:
        out += _attention(x, b_t, work) @ v_t
    work.n_velocity += 1
    return out


def _check_tokens(tokens: Any, d: int) -> FloatArray:
    x = as_float_array("tokens", tokens, ndim=2)
    if x.shape[0] < 1 or x.shape[1] != d:
        raise InvalidParametersError(
            f"tokens: expected shape (N, {d}) with N >= 1 and {d} the model dimension, "
            f"got shape {x.shape}"
        )
    return x


def token_velocity(layer: Layer, tokens: Any, *, block_size: int | None = None) -> FloatArray:
    """The token-level velocity of every token under one layer (float64).

    ``v(x_i) = A x_i + b + W σ(U x_i + c) + Σ_h V_h Attn_h(x_i; μ)`` with
    ``Attn_h(x; μ) = Σ_j x_j e^{x_jᵀ B_h x} / Σ_j e^{x_jᵀ B_h x}`` over the empirical measure
    ``μ`` of ``tokens`` (theory.md §1; Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026)). Softmax is
    evaluated by blocks of queries with the log-sum-exp shift, so it is finite for any finite
    logits; ``O(N² d)`` work per head, ``O(N d + block_size · N)`` memory.

    Parameters
    ----------
    layer
        The layer; any feed-forward activation (identity, relu, gelu) is allowed.
    tokens
        Finite array ``(N, d)``, ``N ≥ 1``, ``d = layer.dim``.
    block_size
        Query rows per block (see :class:`TokenOptions`).

    Returns
    -------
    numpy.ndarray
        Velocities ``(N, d)``.

    Raises
    ------
    InvalidParametersError
        If ``layer`` is not a Layer, ``tokens`` is malformed, or ``block_size`` is not positive.
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    x = _check_tokens(tokens, layer.dim)
    if block_size is not None:
        as_positive_int("block_size", block_size)
    work = _Workspace(x.shape[0], np.dtype(np.float64), block_size)
    return _velocity(_prepare(layer, work.dtype), x, work)


# ---------------------------------------------------------------------------- the integrators
class _Recorder:
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
        self.cov.append(0.5 * (s + s.T))

    def snapshot(self, t: float, x: AnyArray) -> None:
        if not self.snaps or self.snaps[-1][0] != t:
            self.snaps.append((float(t), frozen(x.copy())))


def _check_snapshot_times(snapshot_times: Any, t_end: float) -> FloatArray:
    if snapshot_times is None:
        return np.empty(0)
    ts = as_float_array("snapshot_times", np.atleast_1d(np.asarray(snapshot_times)), ndim=1)
    bad = ts[(ts < 0.0) | (ts > t_end * (1.0 + 1e-12))]
    if bad.size:
        raise InvalidParametersError(
            f"snapshot_times: expected depths in [0, {t_end:g}], got {bad.tolist()}"
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


def _has_layer_noise(ctrl: Control) -> bool:
    """Whether any layer of ``ctrl`` carries Brownian forcing (sampled at its breakpoints)."""
    if isinstance(ctrl, Schedule):
        return any(lay.noise is not None for lay in ctrl.layers)
    bps = np.asarray(ctrl.breakpoints, dtype=float)
    mids = 0.5 * (bps[:-1] + bps[1:])
    return any(ctrl.layer_at(float(t)).noise is not None for t in mids)


def _as_generator(rng: Any) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise InvalidParametersError(
        f"rng: expected a numpy.random.Generator, an integer seed or None, got {rng!r}"
    )


def _layer_source(
    ctrl: Control, dtype: np.dtype[Any]
) -> Callable[[float, float, float], _Prepared]:
    """``get(t, t0, t1)``: the prepared layer at ``t`` within segment ``[t0, t1]``.

    Piecewise-constant controls get the segment's layer (looked up once at its midpoint and
    cached); others are looked up at every evaluation depth.
    """
    piecewise = bool(getattr(ctrl, "piecewise_constant", False))
    cache: dict[tuple[float, float], _Prepared] = {}

    def get(t: float, t0: float, t1: float) -> _Prepared:
        if piecewise:
            key = (t0, t1)
            if key not in cache:
                cache.clear()
                cache[key] = _prepare(ctrl.layer_at(0.5 * (t0 + t1)), dtype)
            return cache[key]
        return _prepare(ctrl.layer_at(t), dtype)

    return get


def _finite(x: AnyArray) -> bool:
    """True when the tokens and their second moments are finite.

    A finite float64 sum of squares bounds every (centered) second moment, so the recorded
    empirical covariance cannot overflow either.
    """
    x64 = np.asarray(x, dtype=np.float64).ravel()
    return math.isfinite(float(np.dot(x64, x64)))


def _run_fixed(
    ctrl: Control,
    x: AnyArray,
    opts: TokenOptions,
    work: _Workspace,
    rec: _Recorder,
    snap_times: FloatArray,
    noise: FloatArray | None,
    gen: np.random.Generator | None,
) -> tuple[AnyArray, Status, float, int]:
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    steps = opts.steps
    get = _layer_source(ctrl, opts.dtype)
    # The step grid (0, then every step end) decides which steps are snapshotted.
    grid = [float(breaks[0])]
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        h = (t1 - t0) / steps
        grid += [t0 + j * h + h if j < steps - 1 else t1 for j in range(steps)]
    grid_arr = np.array(grid)
    snap_idx = {int(np.argmin(np.abs(grid_arr - s))) for s in snap_times}
    g_t = None if noise is None else np.ascontiguousarray(noise.T, dtype=opts.dtype)
    rk4 = opts.method == "rk4"

    rec.add(grid[0], x)
    if 0 in snap_idx:
        rec.snapshot(grid[0], x)
    idx = 0
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        h = (t1 - t0) / steps
        for j in range(steps):
            t = t0 + j * h
            if rk4:
                k1 = _velocity(get(t, t0, t1), x, work)
                pm = get(t + 0.5 * h, t0, t1)
                k2 = _velocity(pm, x + (0.5 * h) * k1, work)
                k3 = _velocity(pm, x + (0.5 * h) * k2, work)
                k4 = _velocity(get(t + h, t0, t1), x + h * k3, work)
                k2 += k3
                k2 *= 2.0
                k1 += k2
                k1 += k4
                x_new = x + (h / 6.0) * k1
            else:
                # Residual layer; the layer at the step midpoint, as simulate_discrete uses.
                prep = get(t + 0.5 * h, t0, t1)
                x_new = x + h * _velocity(prep, x, work)
                # An explicit `noise` argument overrides the layer's own Brownian forcing.
                g_step = g_t if g_t is not None else prep.noise_t
                if g_step is not None and gen is not None:
                    xi = gen.standard_normal((x.shape[0], g_step.shape[0]), dtype=opts.dtype)
                    x_new += math.sqrt(h) * (xi @ g_step)
            if not _finite(x_new):
                return x, Status.OVERFLOW, t + h, idx
            x = x_new
            idx += 1
            t_now = t + h if j < steps - 1 else t1
            if opts.record == "steps" or j == steps - 1:
                rec.add(t_now, x)
            if idx in snap_idx:
                rec.snapshot(t_now, x)
    return x, Status.SUCCESS, math.inf, idx


def _run_adaptive(
    ctrl: Control,
    x: AnyArray,
    opts: TokenOptions,
    work: _Workspace,
    rec: _Recorder,
    snap_times: FloatArray,
) -> tuple[AnyArray, Status, float, int, int]:
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    get = _layer_source(ctrl, opts.dtype)
    n, d = x.shape
    rtol = 1e-8 if opts.rtol is None else float(opts.rtol)
    atol = (1e-10 if opts.atol is None else float(opts.atol)) * max(float(np.max(np.abs(x))), 1.0)
    method = opts.ivp_method or "DOP853"
    nonfinite = [False]
    nfev = 0
    n_steps = 0

    rec.add(float(breaks[0]), x)
    if snap_times.size and snap_times[0] == breaks[0]:
        rec.snapshot(float(breaks[0]), x)
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        # Restart at snapshot depths inside the segment so that they are hit exactly.
        inner = snap_times[(snap_times > t0) & (snap_times < t1)]
        ends = [*inner.tolist(), t1]

        def fun(t: float, y: AnyArray, t0: float = t0, t1: float = t1) -> AnyArray:
            xs = y.reshape(n, d).astype(opts.dtype, copy=False)  # solve_ivp works in float64
            v = _velocity(get(t, t0, t1), xs, work).ravel()
            if not _finite(v):
                nonfinite[0] = True
            return v

        start = t0
        for end in ends:
            try:
                # Every accepted step is returned (t_eval=None): it is counted, checked for
                # overflow and, with record="steps", recorded.
                sol = solve_ivp(fun, (start, end), x.ravel(), method=method, rtol=rtol, atol=atol)
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                raise SolverError(
                    f"token integration failed at depth {start:g}: {exc}",
                    status="integrator_error",
                    stats={"nfev": nfev + work.n_velocity, "t": start},
                ) from None
            nfev += sol.nfev
            ys = sol.y.T.astype(opts.dtype, copy=False)
            for ti, yi in zip(sol.t[1:], ys[1:]):
                xi = yi.reshape(n, d)
                if not _finite(xi):
                    return x.copy(), Status.OVERFLOW, float(ti), nfev, n_steps
                x = xi
                n_steps += 1
                if opts.record == "steps" or ti == t1:
                    rec.add(float(ti), x)
            if sol.status == -1:
                if nonfinite[0]:
                    t_last = float(sol.t[-1]) if len(sol.t) else start
                    return x.copy(), Status.OVERFLOW, t_last, nfev, n_steps
                raise SolverError(
                    f"token integration failed at depth {start:g}: {sol.message}",
                    status="integrator_error",
                    stats={"nfev": nfev},
                )
            x = x.copy()  # detach from sol.y
            if end != t1 or (snap_times.size and np.any(snap_times == t1)):
                rec.snapshot(end, x)
            start = end
    return x, Status.SUCCESS, math.inf, nfev, n_steps


def simulate_tokens(
    model: Layer | Schedule | Control,
    tokens: Any,
    T: float | None = None,
    *,
    method: str = "rk4",
    steps_per_layer: int | None = None,
    block_size: int | None = None,
    record: str = "steps",
    snapshot_times: Any = None,
    noise: Any = None,
    rng: np.random.Generator | int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    ivp_method: str | None = None,
    dtype: Any = np.float64,
) -> TokenTrajectory:
    """Move ``N`` tokens through the continuous-depth Transformer with softmax attention.

    Each token follows ``dx/dt = A x + b [+ W σ(U x + c)] + Σ_h V_h Attn_h(x; μ_t)`` with ``μ_t``
    the empirical measure of the tokens and ``Attn_h(x; μ) = Σ_j x_j e^{x_jᵀB_h x} / Σ_j
    e^{x_jᵀB_h x}`` (docs/theory.md §1). With ``noise = G`` and ``method="euler"`` it is the noisy
    model ``dx = v(x) dt + G dW`` (independent Brownian motions per token, docs/theory.md §6), whose
    Gaussian counterpart is ``dΣ/dt = MΣ + ΣMᵀ + GGᵀ``. Fixed-step methods step exactly onto
    every breakpoint of a piecewise-constant model.

    Parameters
    ----------
    model
        A :class:`Layer` (needs ``T``; one segment), a :class:`Schedule`, or any control with
        ``.T``, ``.breakpoints`` and ``.layer_at(t)``. ReLU/GELU feed-forwards are allowed.
    tokens
        Finite array ``(N, d)``, ``N ≥ 1``, ``d`` the model dimension; it is not modified.
    T
        Horizon; optional for controls that carry their own.
    method
        ``"rk4"`` (default, 4th order), ``"euler"``/``"discrete"`` (residual steps
        ``x ← x + h v(x)`` with the layer at the step midpoint, ``h = segment/steps_per_layer``:
        with ``steps_per_layer=1`` on a Schedule a real L-layer residual Transformer, whose
        moments tend to :func:`gtcontrol.moments.simulate_discrete` as ``N → ∞``), or
        ``"adaptive"`` (``solve_ivp``; small ``N`` only: it works on ``N·d`` unknowns).
    steps_per_layer, block_size, record, rtol, atol, ivp_method, dtype
        See :class:`TokenOptions`.
    snapshot_times
        Depths at which to keep a copy of all tokens (see :attr:`TokenTrajectory.snapshots`).
    noise
        Noise matrix ``G``, shape ``(d, k)`` (usually ``(d, d)``); only with ``"euler"`` /
        ``"discrete"``: each step adds ``sqrt(h) ξ Gᵀ``, ``ξ`` standard normal ``(N, k)``.
        When omitted, each layer's own ``Layer.noise`` is used (the same Euler–Maruyama step;
        other methods refuse a layer with noise).
    rng
        Generator or seed for the noise (pass one for reproducible runs).

    Returns
    -------
    TokenTrajectory
        Empirical moments along depth, snapshots, final tokens; ``status="overflow"`` when the
        tokens became non-finite (the trajectory stops at the last finite state).

    Raises
    ------
    InvalidParametersError
        On malformed tokens (the message names ``tokens`` and both shapes), a non-positive ``T``,
        zero steps, an unknown method, noise with a method other than Euler–Maruyama, or
        snapshot depths outside ``[0, T]``.
    SolverError
        If the adaptive integrator fails while the tokens are still finite.

    Notes
    -----
    Cost per field evaluation: ``O(N² d)`` per head with ``B_h ≠ 0``, memory
    ``O(N d + block_size · N)``; see the module docstring. Reference: Alcalde, Ji, Zuazua,
    arXiv:2606.07600 (2026), §1–§2.
    """
    opts = TokenOptions(
        method=method,
        steps_per_layer=steps_per_layer,
        block_size=block_size,
        record=record,
        rtol=rtol,
        atol=atol,
        ivp_method=ivp_method,
        dtype=dtype,
    )
    ctrl = as_control(model, T)
    d = ctrl.layer_at(0.0).dim
    x = _check_tokens(tokens, d).astype(opts.dtype, copy=False)
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    snap_times = _check_snapshot_times(snapshot_times, float(breaks[-1]))
    g = _check_noise(noise, d, opts.method)
    layer_noise = _has_layer_noise(ctrl)
    if layer_noise and opts.method not in ("euler", "discrete"):
        raise InvalidParametersError(
            f"model: a layer with noise (dx = v(x) dt + G dW) needs method 'euler' "
            f"(Euler–Maruyama), got method {opts.method!r}"
        )
    gen = _as_generator(rng) if (g is not None or layer_noise) else None

    work = _Workspace(x.shape[0], opts.dtype, opts.block_size)
    rec = _Recorder(opts.record)
    clock = time.perf_counter()
    stats: dict[str, Any] = {"method": opts.method}
    # Overflow is detected and reported as a status; silence the intermediate inf/nan warnings.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if opts.method == "adaptive":
            x, status, t_over, nfev, n_steps = _run_adaptive(ctrl, x, opts, work, rec, snap_times)
            stats["nfev"] = nfev
        else:
            x, status, t_over, n_steps = _run_fixed(ctrl, x, opts, work, rec, snap_times, g, gen)
            stats["steps_per_layer"] = opts.steps
    stats.update(
        steps=n_steps,
        n_velocity=work.n_velocity,
        n_attention=work.n_attention,
        block_size=work.block,
        n_tokens=int(x.shape[0]),
        seconds=time.perf_counter() - clock,
    )
    return TokenTrajectory(
        t=frozen(np.array(rec.t)),
        mean=frozen(np.array(rec.mean)),
        cov=frozen(np.array(rec.cov)),
        snapshots=tuple(rec.snaps),
        final_tokens=frozen(x),
        status=status,
        blowup_time=t_over,
        stats=stats,
        message=(
            f"the tokens became non-finite at depth {t_over:.12g}"
            if status is Status.OVERFLOW
            else "tokens carried to the horizon"
        ),
    )
