"""The adaptive integrator behind :func:`gtcontrol.model.moments.simulate` (private).

Its parts, each named: the validated options (:class:`_IntegratorOptions`), the setup of the
packed state ``[m, vech Σ]`` and its recording grid (:func:`_setup`), one segment's integration
between two breakpoints of the control (:func:`_integrate_segment`) and the classification of a
large covariance as finite-time blow-up, overflow or neither (:func:`_classify_event`). Every
right-hand-side evaluation ticks a :class:`~gtcontrol._status.Budget`; a spent budget, an
integrator failure, a blow-up or an overflow ends the run with an :class:`_Outcome`, never an
exception.

Reference: the paper cited in :mod:`gtcontrol`, §2–§3.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.integrate import solve_ivp

from .._linalg import FloatArray, vech, vech_index
from .._status import Budget, BudgetExhausted, Status
from .._validation import as_choice, as_positive_float, as_positive_int, as_time_limit
from ..errors import InvalidParametersError
from .field import moment_field
from .gaussian import check_gaussian
from .params import Control, Layer, Schedule, as_control

__all__: list[str] = []

_METHODS = ("DOP853", "RK45", "Radau", "LSODA", "BDF")
#: Most recorded depths :func:`simulate` accepts (each holds a d×d covariance).
_MAX_POINTS = 10**6
#: Default cap on right-hand-side evaluations of :func:`simulate` (DOP853: 12 per step).
_DEFAULT_MAX_EVALS = 10**6
#: Largest ``max_evals`` accepted (larger caps are refused as absurd).
_MAX_EVALS_LIMIT = 10**9
#: Largest ``steps_per_layer`` of :func:`simulate_discrete`.
_MAX_STEPS_PER_LAYER = 10**6
#: ``tr Σ`` past this without a finite-time singularity is reported as ``Status.OVERFLOW``.
_OVERFLOW_TRACE = 1e250


@dataclass(frozen=True, kw_only=True)
class _IntegratorOptions:
    """Validator and defaults of the keywords of :func:`simulate` (private).

    Attributes
    ----------
    rtol, atol
        Relative and absolute error tolerances of the Runge–Kutta error control; ``atol`` is
        scaled by the size of the initial state. The defaults give about 1e-8 relative accuracy
        or better on smooth trajectories.
    method
        A ``scipy.integrate.solve_ivp`` method; the explicit 8th-order ``"DOP853"`` by default.
    n_points
        Number of recorded depths (spread over the layers, always including every layer
        switch); at most ``10**6``.
    blowup_factor
        The integrator stops when ``tr Σ`` exceeds ``blowup_factor × max(tr Σ0, 1)``. It then tells
        finite-time blow-up (``tr Σ / (d tr Σ/dt)``, the remaining time, is tiny) from
        exponential growth (it is not) and goes on in the second case.
    max_step
        Largest step; ``inf`` lets the error control decide.
    max_evals
        Cap on right-hand-side evaluations (at most ``10**9``).
    time_limit
        Wall-clock limit in seconds, or ``None``.
    """

    rtol: float = 1e-11
    atol: float = 1e-14
    method: str = "DOP853"
    n_points: int = 201
    blowup_factor: float = 1e12
    max_step: float = math.inf
    max_evals: int = _DEFAULT_MAX_EVALS
    time_limit: float | None = None

    def __post_init__(self) -> None:
        norm = {
            "rtol": as_positive_float("rtol", self.rtol),
            "atol": as_positive_float("atol", self.atol),
            "n_points": as_positive_int("n_points", self.n_points, maximum=_MAX_POINTS),
            "max_step": as_positive_float("max_step", self.max_step, allow_inf=True),
            "max_evals": as_positive_int("max_evals", self.max_evals, maximum=_MAX_EVALS_LIMIT),
            "time_limit": as_time_limit(self.time_limit),
            "method": as_choice("method", self.method, _METHODS),
        }
        if as_positive_float("blowup_factor", self.blowup_factor) <= 1.0:
            raise InvalidParametersError(
                f"blowup_factor: expected a number > 1, got {self.blowup_factor!r}"
            )
        for name, value in norm.items():
            object.__setattr__(self, name, value)


def _check_exact(ctrl: Control) -> None:
    layers = ctrl.layers if isinstance(ctrl, Schedule) else (ctrl.layer_at(0.0),)
    for i, lay in enumerate(layers):
        if not lay.is_gaussian_exact:
            raise InvalidParametersError(
                f"layers[{i}].ffn: a {lay.ffn.activation if lay.ffn else ''} feed-forward is "
                "outside the exact Gaussian moment model; use simulate_tokens"
            )


def _record_grid(breaks: FloatArray, n_points: int) -> list[FloatArray]:
    """Per-segment recording depths: about ``n_points`` overall, both ends of every segment."""
    n_seg = len(breaks) - 1
    per = max(2, math.ceil((n_points - 1) / n_seg) + 1)
    return [np.linspace(breaks[k], breaks[k + 1], per) for k in range(n_seg)]


# ---------------------------------------------------------------------------- simulate's parts
@dataclass(frozen=True, eq=False)
class _Setup:
    """Everything :func:`simulate` integrates, validated: the control, the packed initial
    state ``[m, vech Σ]``, the recording grid and the index maps of the packed state."""

    ctrl: Control
    d: int
    breaks: FloatArray
    piecewise: bool
    y0: FloatArray
    atol: float
    tr0: float
    grids: list[FloatArray]
    flat_iu: NDArray[np.intp]
    diag_idx: NDArray[np.intp]
    full_pos: NDArray[np.intp]

    def unpack(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(m, Σ)`` of a packed state."""
        d = self.d
        return y[:d], y[d:][self.full_pos].reshape(d, d)

    def fixed_layer(self, k: int) -> Layer | None:
        """The layer of segment ``k`` of a piecewise-constant control (else ``None``)."""
        if not self.piecewise:
            return None
        return self.ctrl.layer_at(0.5 * float(self.breaks[k] + self.breaks[k + 1]))


def _setup(model: Any, initial: Any, T: float | None, opts: _IntegratorOptions) -> _Setup:
    ctrl = as_control(model, T)
    d = ctrl.layer_at(0.0).dim
    g0 = check_gaussian(initial, d)
    _check_exact(ctrl)
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    y0 = np.concatenate([g0.mean, vech(g0.cov)])
    iu, full_pos = vech_index(d)
    return _Setup(
        ctrl=ctrl,
        d=d,
        breaks=breaks,
        # Piecewise-constant controls get one fixed layer per segment (no per-call lookup).
        piecewise=bool(getattr(ctrl, "piecewise_constant", False)),
        y0=y0,
        atol=opts.atol * max(float(np.max(np.abs(y0))), 1.0),
        tr0=max(float(np.trace(g0.cov)), 1.0),
        grids=_record_grid(breaks, opts.n_points),
        flat_iu=iu[0] * d + iu[1],
        diag_idx=d + np.flatnonzero(iu[0] == iu[1]),  # positions of diag Σ in the packed state
        full_pos=full_pos,
    )


@dataclass(frozen=True)
class _Outcome:
    """How an integration ended (anything but reaching the horizon)."""

    status: Status
    message: str
    blowup_time: float = math.inf


class _Record:
    """The recorded depths and packed states, in increasing depth."""

    def __init__(self, t0: float, y0: FloatArray) -> None:
        self.ts: list[FloatArray] = [np.array([t0])]
        self.ys: list[FloatArray] = [y0[None, :]]
        self.last_t = t0

    def add(self, t: FloatArray, y: FloatArray) -> None:
        """Append states ``y`` (rows) at depths ``t``; a depth already passed is dropped later."""
        if t.size:
            self.ts.append(t)
            self.ys.append(y)
            self.last_t = float(t[-1])

    def add_point(self, t: float, y: FloatArray) -> None:
        """Append one state if it lies beyond the last recorded depth."""
        if t > self.last_t:
            self.add(np.array([t]), y[None, :])


class _TraceEvent:
    """Terminal event ``tr Σ = threshold`` (rising) that also remembers accepted states.

    ``solve_ivp`` evaluates events once per accepted step, so :attr:`last` is where the
    integration stood when a budget ran out inside the right-hand side (then ``solve_ivp``
    returns nothing). :attr:`passed` keeps the first accepted state past each recording depth,
    so that such an interrupted call still leaves a trajectory at about the grid's resolution
    (at most one state per recording depth: bounded memory).
    """

    terminal = True
    direction = 1.0

    def __init__(
        self, diag: NDArray[np.intp], threshold: float, t0: float, y0: FloatArray, grid: FloatArray
    ) -> None:
        self.diag = diag
        self.threshold = threshold
        self.last: tuple[float, FloatArray] = (t0, y0)
        self.grid = grid
        self.next = int(np.searchsorted(grid, t0, side="right"))
        self.passed: list[tuple[float, FloatArray]] = []

    def __call__(self, t: float, y: FloatArray) -> float:
        if t > self.last[0]:  # root finding revisits earlier depths: keep the furthest
            self.last = (float(t), np.array(y, dtype=float))
            if self.next < self.grid.size and t >= self.grid[self.next]:
                self.passed.append(self.last)
                self.next = int(np.searchsorted(self.grid, t, side="right"))
        return float(np.sum(y[self.diag])) - self.threshold

    def record_into(self, rec: _Record) -> tuple[float, FloatArray]:
        """Record the remembered states into ``rec``; return the last one."""
        for t, y in self.passed:
            rec.add_point(t, y)
        rec.add_point(*self.last)
        return self.last


def _rhs(setup: _Setup, fixed: Layer | None, budget: Budget) -> Callable[..., FloatArray]:
    """The packed right-hand side ``[dm/dt, vech dΣ/dt]``; every call ticks ``budget``."""
    ctrl, flat_iu = setup.ctrl, setup.flat_iu

    def rhs(t: float, y: FloatArray) -> FloatArray:
        budget.tick()
        m, s = setup.unpack(y)
        dm, ds = moment_field(fixed if fixed is not None else ctrl.layer_at(t), m, s)
        return np.concatenate([dm, ds.ravel()[flat_iu]])

    return rhs


def _classify_event(setup: _Setup, layer: Layer, t_e: float, y_e: FloatArray) -> _Outcome | None:
    """At ``tr Σ = threshold``: finite-time blow-up, overflow, or neither (go on)?

    Near a Riccati singularity ``1/tr Σ`` is linear in depth, so the remaining time is
    ``tr Σ / (d tr Σ/dt)``; when it is tiny compared with the depth, the blow-up time is
    ``t_e`` plus it (accurate to ~1e-10 relative). Otherwise the growth is exponential.
    """
    m_e, s_e = setup.unpack(y_e)
    _, ds_e = moment_field(layer, m_e, s_e)
    tr_e, dtr_e = float(np.trace(s_e)), float(np.trace(ds_e))
    remaining = tr_e / dtr_e if dtr_e > 0 else math.inf
    if remaining <= 1e-6 * max(t_e, 1e-300) or remaining <= 1e-9:
        t_blow = t_e + remaining
        return _Outcome(Status.BLOWUP, f"finite-time blow-up at depth {t_blow:.12g}", t_blow)
    if tr_e > _OVERFLOW_TRACE:
        return _Outcome(
            Status.OVERFLOW,
            f"the covariance exceeded {_OVERFLOW_TRACE:g} at depth {t_e:g} without a finite-time "
            "singularity (exponential growth); the trajectory stops there",
        )
    return None


def _integrate_segment(
    setup: _Setup, k: int, y: FloatArray, opts: _IntegratorOptions, budget: Budget, rec: _Record
) -> tuple[FloatArray, _Outcome | None]:
    """Integrate segment ``k`` of the control from state ``y``, recording into ``rec``.

    Returns the state at the segment's end and ``None``, or the last state and the outcome
    that stopped the integration (blow-up, overflow, integrator failure, spent budget).
    """
    t0, t1 = float(setup.breaks[k]), float(setup.breaks[k + 1])
    fixed = setup.fixed_layer(k)
    rhs = _rhs(setup, fixed, budget)
    grid = setup.grids[k]
    start, threshold = t0, opts.blowup_factor * setup.tr0
    while True:
        t_eval = grid[grid >= start]
        event = _TraceEvent(setup.diag_idx, threshold, start, y, t_eval)
        try:
            sol = solve_ivp(
                rhs,
                (start, t1),
                y,
                method=opts.method,
                t_eval=t_eval,
                rtol=opts.rtol,
                atol=setup.atol,
                events=event,
                max_step=opts.max_step,
            )
        except BudgetExhausted as exc:
            t_s, y_s = event.record_into(rec)
            msg = f"{exc.reason} at depth {t_s:.6g}; the trajectory stops there"
            return y_s, _Outcome(Status.BUDGET_EXHAUSTED, msg)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            t_s, y_s = event.record_into(rec)
            return y_s, _Outcome(
                Status.FAILED, f"moment integration failed at depth {t_s:.6g}: {exc}"
            )
        rec.add(sol.t, sol.y.T)
        if sol.status == -1:  # e.g. "Required step size is less than spacing between numbers"
            rec.add_point(*event.last)
            msg = f"moment integration failed at depth {event.last[0]:.6g}: {sol.message}"
            return event.last[1], _Outcome(Status.FAILED, msg)
        if sol.status != 1:  # reached t1 (the grid always holds t1)
            return (np.asarray(sol.y[:, -1]) if sol.t.size else y), None
        t_e, y_e = float(sol.t_events[0][0]), np.asarray(sol.y_events[0][0])
        rec.add_point(t_e, y_e)
        layer = fixed if fixed is not None else setup.ctrl.layer_at(t_e)
        outcome = _classify_event(setup, layer, t_e, y_e)
        if outcome is not None:
            return y_e, outcome
        start, y, threshold = t_e, y_e, threshold * opts.blowup_factor
