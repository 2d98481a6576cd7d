"""Adaptive time stepping of the token ensemble: embedded Runge–Kutta pairs.

The default integrator of :func:`gtcontrol.model.tokens.simulate_tokens`. The whole ensemble
``X ∈ R^{N×d}`` is one state; each step of an explicit embedded pair (Dormand & Prince's 8(5,3)
``"DOP853"``, 12 field evaluations per step, 5(4) ``"RK45"``, 6, or Bogacki & Shampine's 3(2)
``"RK23"``, 3: the cheapest at loose tolerances) gives the new tokens and an
estimate ``e`` of the local error, measured in the weighted RMS norm

    q = rms(e_ij / w_ij),   w_ij = atol + rtol · max(|x_ij|, |x⁺_ij|, s),   s = rms(X),

so every coordinate is controlled relative to its own size, and coordinates smaller than the
typical token size ``s`` relative to ``s`` (a cloud that collapses or passes through zero keeps
a relative, not an absolute, accuracy). The step is accepted when ``q ≤ h / T`` (**error per
unit step**: the accepted local errors sum to at most ``rtol`` over the whole horizon ``T``,
whatever the number of steps), and the next step is ``h · 0.9 (h / (T q))^{1/p}`` with ``p``
the order of the error estimator, clipped to ``[0.2, 10]`` (to ``[0.2, 10⁴]`` after the first
step, whose size is only a guess).

``rtol · Σ q_k`` — the sum of the accepted local errors, relative to the token scale — is the
run's ``error_estimate``. It is the global relative error when errors are transported by the flow
no faster than the tokens themselves (the linear part of the field shrinks or grows both alike);
an expanding perturbation direction would amplify it. The tableaux are scipy's
(:class:`scipy.integrate.DOP853`, :class:`scipy.integrate.RK45`, :class:`scipy.integrate.RK23`;
Hairer, Nørsett & Wanner,
*Solving Ordinary Differential Equations I*, §II.4–II.10), applied to the ``(N, d)`` array
without flattening; nothing but the current step is stored (``13 N d`` numbers for DOP853).

Stops: a spent budget (``max_evals``, ``time_limit``) keeps the last accepted step; non-finite
tokens shrink the step tenfold until the step size collapses, then ``OVERFLOW``; a step size that
collapses on accuracy alone is ``FAILED``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.integrate import DOP853, RK23, RK45

from .._status import BudgetExhausted, Status
from ._token_integrators import (
    DONE,
    RunEnd,
    TokenRun,
    all_finite,
    in_range,
    layer_source,
    near_edge,
    overflow,
    stopped_at,
)
from .attention import prepared_velocity

__all__: list[str] = []

AnyArray = NDArray[Any]

_SAFETY = 0.9
_MIN_FACTOR = 0.2
_MAX_FACTOR = 10.0
#: Largest growth after the first accepted step, whose size is only a heuristic guess
#: (CVODE's ``ETAMX1``; Hindmarsh et al., ACM TOMS 31 (2005)).
_MAX_FIRST_FACTOR = 1e4
#: Smallest step, relative to the horizon (below it the step size has collapsed).
_H_MIN_REL = 1e-14


@dataclass(frozen=True)
class _Pair:
    """An explicit embedded pair: stages ``a, b, c`` and error weights over ``s + 1`` stages."""

    name: str
    a: AnyArray
    b: AnyArray
    c: AnyArray
    e: AnyArray  # RK45, RK23: E; DOP853: E5
    e3: AnyArray | None  # DOP853's third-order estimate (its error norm mixes both)
    est_order: int

    @property
    def stages(self) -> int:
        return int(self.b.shape[0])


_PAIRS = {
    "DOP853": _Pair(
        "DOP853", DOP853.A, DOP853.B, DOP853.C, DOP853.E5, DOP853.E3, DOP853.error_estimator_order
    ),
    "RK45": _Pair("RK45", RK45.A, RK45.B, RK45.C, RK45.E, None, RK45.error_estimator_order),
    "RK23": _Pair("RK23", RK23.A, RK23.B, RK23.C, RK23.E, None, RK23.error_estimator_order),
}


def _rms(z: AnyArray) -> float:
    z64 = np.asarray(z, dtype=np.float64).ravel()
    return math.sqrt(float(np.dot(z64, z64)) / max(z64.size, 1))


@dataclass
class _Stepper:
    """State of one adaptive run: the pair, tolerances, counters and the current step size."""

    run: TokenRun
    pair: _Pair
    rtol: float
    atol: float
    horizon: float
    k: AnyArray = field(init=False)
    h: float | None = None
    steps: int = 0
    rejected: int = 0
    nonfinite: int = 0
    error_sum: float = 0.0
    h_min: float = math.inf
    h_max: float = 0.0

    def __post_init__(self) -> None:
        self.k = np.empty((0,), dtype=self.run.work.dtype)  # sized on the first step

    # ------------------------------------------------------------------ field and norm
    def weights(self, x: AnyArray, x_new: AnyArray | None = None) -> AnyArray:
        """``w = atol + rtol · max(|x|, |x⁺|, rms(x))`` (float64)."""
        mag = np.abs(np.asarray(x, dtype=np.float64))
        if x_new is not None:
            np.maximum(mag, np.abs(np.asarray(x_new, dtype=np.float64)), out=mag)
        np.maximum(mag, _rms(x), out=mag)
        w = self.atol + self.rtol * mag
        return np.maximum(w, np.finfo(np.float64).tiny)

    def error_norm(self, h: float, w: AnyArray) -> float:
        """Hairer's normalized local error ``q`` of the step just taken (``k`` holds its stages)."""
        k, pair = self.k, self.pair
        err = np.tensordot(pair.e, k, axes=1).astype(np.float64, copy=False) / w
        if pair.e3 is None:
            return abs(h) * _rms(err)
        err3 = np.tensordot(pair.e3, k, axes=1).astype(np.float64, copy=False) / w
        n5 = float(np.vdot(err, err))
        n3 = float(np.vdot(err3, err3))
        if n5 == 0.0 and n3 == 0.0:
            return 0.0
        return abs(h) * n5 / math.sqrt((n5 + 0.01 * n3) * err.size)

    # ------------------------------------------------------------------ one step
    def attempt(
        self, get: Any, x: AnyArray, f: AnyArray, t: float, h: float, seg: tuple[float, float]
    ) -> AnyArray:
        """Stages of one step from ``(t, x)`` with ``f = v(t, x)``; returns the new tokens."""
        pair, work = self.pair, self.run.work
        s = pair.stages
        if self.k.shape != (s + 1, *x.shape):
            self.k = np.empty((s + 1, *x.shape), dtype=x.dtype)
        k = self.k
        k[0] = f
        t0, t1 = seg
        for i in range(1, s):
            xi = x + h * np.tensordot(pair.a[i, :i], k[:i], axes=1).astype(x.dtype, copy=False)
            k[i] = prepared_velocity(get(t + pair.c[i] * h, t0, t1), xi, work)
        x_new: AnyArray = x + h * np.tensordot(pair.b, k[:s], axes=1).astype(x.dtype, copy=False)
        return x_new

    def initial_step(
        self, get: Any, x: AnyArray, f: AnyArray, t: float, span: float, seg: tuple[float, float]
    ) -> float:
        """Hairer's starting step (one extra field evaluation), at most ``span``."""
        w = self.weights(x)
        d0 = _rms(np.asarray(x, dtype=np.float64) / w)
        d1 = _rms(np.asarray(f, dtype=np.float64) / w)
        h0 = 1e-6 * span if d0 < 1e-5 or d1 < 1e-5 else min(0.01 * d0 / d1, span)
        if not h0 > 0.0:  # a field past the float range: the first attempt finds the overflow
            return _H_MIN_REL * self.horizon
        f1 = prepared_velocity(get(t + h0, *seg), x + h0 * f, self.run.work)
        d2 = _rms((np.asarray(f1, dtype=np.float64) - f) / w) / h0
        if not math.isfinite(d2):
            return h0
        if max(d1, d2) == 0.0:
            return span  # a field that vanishes here: one step to the end of the piece
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (self.pair.est_order + 1))
        return float(min(100.0 * h0, h1, span))

    def factor(self, ratio: float) -> float:
        """Step-size factor for ``ratio = q T / h`` (1 is the tolerance)."""
        top = _MAX_FIRST_FACTOR if self.steps == 0 else _MAX_FACTOR
        if ratio == 0.0:
            return top
        grow = _SAFETY * float(ratio ** (-1.0 / self.pair.est_order))
        return min(top, max(_MIN_FACTOR, grow))


def _piece(
    st: _Stepper,
    get: Any,
    x: AnyArray,
    f: AnyArray | None,
    t: float,
    end: float,
    seg: tuple[float, float],
) -> tuple[AnyArray, AnyArray | None, float, RunEnd | None]:
    """Step from ``t`` to ``end`` inside segment ``seg``; return tokens, FSAL field, depth, stop."""
    rec, work = st.run.rec, st.run.work
    record_steps = st.run.opts.record == "steps"
    h_floor = _H_MIN_REL * st.horizon
    while t < end:
        try:
            if f is None:
                f = prepared_velocity(get(t, *seg), x, work)
            if st.h is None:
                st.h = st.initial_step(get, x, f, t, end - t, seg)
            h_free = st.h
            h = min(h_free, end - t)
            if end - t - h <= 1e-12 * st.horizon:
                h = end - t  # land on the end exactly instead of leaving a sliver
            x_new = st.attempt(get, x, f, t, h, seg)
            t_new = end if h == end - t else t + h
            f_new = prepared_velocity(get(t_new, *seg), x_new, work) if in_range(x_new) else None
        except BudgetExhausted as exc:
            if rec.t[-1] < t:
                rec.add(t, x)
            return x, f, t, RunEnd(Status.BUDGET_EXHAUSTED, t, exc.reason)
        q = math.inf
        if f_new is not None and all_finite(f_new):
            st.k[-1] = f_new
            q = st.error_norm(h, st.weights(x, x_new))
        if not math.isfinite(q):
            st.nonfinite += 1
            st.rejected += 1
            st.h = 0.1 * h
            if st.h < h_floor or near_edge(x):  # out of range from the start: at ``t``
                return x, f, t, overflow(t + h if in_range(x) else t, x.dtype)
            continue
        ratio = q * st.horizon / h
        if ratio > 1.0:
            st.rejected += 1
            st.h = h * min(1.0, st.factor(ratio))
            if st.h < h_floor:
                detail = f"the step size collapsed below {h_floor:.3g}"
                return x, f, t, RunEnd(Status.FAILED, t, detail)
            continue
        # A step shortened to land on ``end`` says nothing about the free step size.
        st.h = max(h * st.factor(ratio), h_free if h < h_free else 0.0)
        st.steps += 1
        st.error_sum += q
        st.h_min, st.h_max = min(st.h_min, h), max(st.h_max, h)
        x, f, t = x_new, f_new, t_new
        st.run.update(t)
        if record_steps or t == seg[1]:
            rec.add(t, x)
        if t < end:  # the step landing on ``end`` is asked by the caller
            stop = stopped_at(st.run, t, x)
            if stop is not None:
                return x, f, t, stop
    return x, f, t, None


def run_adaptive(run: TokenRun, x: AnyArray) -> tuple[AnyArray, RunEnd, dict[str, Any]]:
    """Adaptive steps over every segment, landing exactly on breakpoints and snapshot depths:
    the final tokens, how it ended, and the statistics (``steps``, ``rejected``, ...)."""
    opts, rec, snap_times = run.opts, run.rec, run.snap_times
    breaks = np.asarray(run.ctrl.breakpoints, dtype=float)
    horizon = float(breaks[-1] - breaks[0])
    st = _Stepper(
        run,
        _PAIRS[str(opts.method)],
        rtol=opts.resolved_rtol,
        atol=float(opts.atol or 0.0),
        horizon=horizon,
        h=opts.first_step,
    )
    get = layer_source(run.ctrl, opts.dtype)
    rec.add(float(breaks[0]), x)
    if snap_times.size and snap_times[0] == breaks[0]:
        rec.snapshot(float(breaks[0]), x)
    stop: RunEnd | None = None
    t = float(breaks[0])
    for j in range(len(breaks) - 1):
        seg = (float(breaks[j]), float(breaks[j + 1]))
        inner = snap_times[(snap_times > seg[0]) & (snap_times < seg[1])]
        f: AnyArray | None = None  # a new layer: the field is evaluated afresh
        for end in [*inner.tolist(), seg[1]]:
            x, f, t, stop = _piece(st, get, x, f, t, end, seg)
            if stop is not None:
                break
            if end != seg[1] or (snap_times.size and np.any(snap_times == seg[1])):
                rec.snapshot(end, x)
            stop = stopped_at(run, end, x)  # after the landing step, its snapshot kept
            if stop is not None:
                break
        if stop is not None:
            break
    stats: dict[str, Any] = {
        "method": st.pair.name,
        "rtol": st.rtol,
        "atol": st.atol,
        "steps": st.steps,
        "rejected": st.rejected,
        "nonfinite_rejections": st.nonfinite,
        "error_estimate": st.rtol * st.error_sum,
        "min_step": st.h_min if st.steps else math.nan,
        "max_step": st.h_max if st.steps else math.nan,
        # the controller's next step (a continuation's first_step); nan before any step
        "next_step": float(st.h) if st.h is not None else math.nan,
    }
    return x, stop or DONE, stats
