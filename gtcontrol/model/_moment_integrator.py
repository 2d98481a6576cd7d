"""The adaptive integrator behind :func:`gtcontrol.model.moments.simulate`.

Its parts, each named: the validated options (:class:`IntegratorOptions`), the setup of the
control and its recording grid (:func:`setup_run`), and one segment's integration between two
breakpoints of the control (:func:`_integrate_segment`), a step-by-step loop over a
``scipy.integrate`` solver that

* integrates the factor form ``Σ = e^{2s} K Kᵀ`` for noise-free layers and the entry-wise form
  for noisy ones, or the distance to a given reference (:mod:`gtcontrol.model._factor_form`),
  restarting (renormalizing ``K`` or the distance) whenever its scale drifts;
* watches ``‖Σ‖₂`` for a finite-time singularity (:mod:`gtcontrol.model._blowup_detection`) and
  classifies a step-size collapse the same way;
* detects stiffness (the explicit step is stability-limited: ``h ρ(∂f/∂y) ≳ 1`` while the
  projected number of steps is large) and switches to a rotating frame ``e^{Sτ}`` when the skew
  part ``S`` of ``A`` explains it (an exponential integrator for the rotation), otherwise to
  Radau with the exact dense Jacobian of the (polynomial) field.

Every right-hand-side evaluation ticks a :class:`~gtcontrol._status.Budget`; a spent budget, an
integrator failure, a blow-up or an overflow ends the run with an :class:`IntegrationEnd`, never an
exception.

Reference: the paper cited in :mod:`gtcontrol`, §2–§3.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.integrate import BDF, DOP853, LSODA, RK45, OdeSolver, Radau
from scipy.linalg import LinAlgWarning

from .._linalg import FloatArray
from .._progress import progress
from .._status import DEFAULT_MAX_EVALS, Budget, BudgetExhausted, Status
from .._validation import (
    as_choice,
    as_max_evals,
    as_positive_float,
    as_positive_int,
    as_time_limit,
    set_fields,
)
from ..errors import InvalidParametersError
from ._blowup_detection import OVERFLOW_LEVEL, BlowupWatch, IntegrationEnd
from ._factor_form import FactorForm, Form, exact_jacobian, initial_factor, make_form
from .gaussian import check_gaussian
from .params import BrokenControl, Control, Layer, Schedule, as_control

__all__: list[str] = []

_SOLVERS: dict[str, type[OdeSolver]] = {
    "DOP853": DOP853,
    "RK45": RK45,
    "Radau": Radau,
    "LSODA": LSODA,
    "BDF": BDF,
}
_METHODS = tuple(_SOLVERS)
_EXPLICIT = ("DOP853", "RK45")
#: Most recorded depths :func:`simulate` accepts (each holds a d×d covariance).
_MAX_POINTS = 10**6
#: Records reserved before a run (more grow the record by doubling).
_FIRST_CAPACITY = 4096
#: Largest ``steps_per_layer`` of :func:`simulate_discrete`.
MAX_STEPS_PER_LAYER = 10**6
#: Stiffness probe: every this many explicit steps ...
_PROBE = 50
#: ... if the projected number of steps to the segment's end exceeds this ...
_STIFF_STEPS = 5000
#: ... and the step times the Jacobian's spectral radius is at least this, the step is
#: stability-limited (DOP853's stability region reaches |hλ| ≈ 3–6).
_STIFF_H_RHO = 1.0
#: ... or the step resolves the rotation of ``A``'s skew part (``h ‖S‖₂`` at least this).
_ROTATION_H = 0.01
#: The horizontal gauge is tested every this many explicit steps (a cheap O(d r²) test) ...
_GAUGE_PROBE = 10
#: ... and switched on when at least this many steps remain (a restart costs an SVD of the
#: factor and one evaluation): few enough that a verification's large steps still leave that
#: many (docs/benchmarks.md).
_GAUGE_STEPS = 20
#: ... and at least this share of the factor's speed is gauge motion (Σ unchanged); at a
#: segment's start the gauge needs :data:`_GAUGE_SHARE_START` (a start at an equilibrium).
#: Far from one, where Σ itself moves or oscillates fast, the gauge can cost steps.
_GAUGE_SHARE = 0.95
_GAUGE_SHARE_START = 0.97
#: Largest packed state for which implicit methods get a dense Jacobian.
_MAX_DENSE_JACOBIAN = 2000


@dataclass(frozen=True, kw_only=True)
class IntegratorOptions:
    """Validator and defaults of the keywords of :func:`simulate` (private).

    Attributes
    ----------
    rtol, atol
        Relative and absolute error tolerances of the error control. In factor form ``atol``
        applies to the normalized factor ``K`` (unit Frobenius norm, so it is relative to Σ's
        own scale; per entry ``atol/√(dr)``) and to the mean scaled by ``max(|m0|, 1)``; in
        the entry-wise form it is scaled by the size of the initial state. The defaults give
        about 1e-8 relative accuracy or better on smooth trajectories.
    method
        A ``scipy.integrate`` method; the explicit 8th-order ``"DOP853"`` by default. An explicit
        method switches to a rotating frame or to Radau when it detects stiffness.
    n_points
        Number of recorded depths (spread over the layers, always including every layer
        switch); at most ``10**6``.
    blowup_factor
        Growth of ``‖Σ‖₂`` over ``max(‖Σ0‖₂, 1)`` at which the blow-up watch starts: from there,
        at every tenfold growth, it extrapolates ``1/λ_max`` to tell a finite-time blow-up
        (the extrapolations agree and the remaining time shrinks) from exponential growth
        (it goes on; past 1e250 it is an overflow). See
        :mod:`gtcontrol.model._blowup_detection`.
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
    blowup_factor: float = 1e4
    max_step: float = math.inf
    max_evals: int = DEFAULT_MAX_EVALS  # DOP853: 12 evaluations per step
    time_limit: float | None = None

    def __post_init__(self) -> None:
        norm = {
            "rtol": as_positive_float("rtol", self.rtol),
            "atol": as_positive_float("atol", self.atol),
            "n_points": as_positive_int("n_points", self.n_points, maximum=_MAX_POINTS),
            "max_step": as_positive_float("max_step", self.max_step, allow_inf=True),
            "max_evals": as_max_evals(self.max_evals),
            "time_limit": as_time_limit(self.time_limit),
            "method": as_choice("method", self.method, _METHODS),
        }
        if as_positive_float("blowup_factor", self.blowup_factor) <= 1.0:
            raise InvalidParametersError(
                f"blowup_factor: expected a number > 1, got {self.blowup_factor!r}"
            )
        set_fields(self, **norm)


def check_exact(ctrl: Control) -> None:
    layers = ctrl.layers if isinstance(ctrl, Schedule) else (ctrl.layer_at(0.0),)
    for i, lay in enumerate(layers):
        if not lay.is_gaussian_exact:
            raise InvalidParametersError(
                f"layers[{i}].ffn: a {lay.ffn.activation if lay.ffn else ''} feed-forward is "
                "outside the exact Gaussian moment model; use simulate_tokens"
            )


@dataclass(frozen=True, eq=False)
class _RecordGrid:
    """Per-segment recording depths: about ``n_points`` overall, both ends of every segment.

    Each segment's depths are made when its integration starts: a schedule of a million
    layers would otherwise spend seconds building them before the time limit is looked at.
    """

    breaks: FloatArray
    per: int

    @classmethod
    def of(cls, breaks: FloatArray, n_points: int) -> _RecordGrid:
        n_seg = len(breaks) - 1
        return cls(breaks, max(2, math.ceil((n_points - 1) / n_seg) + 1))

    def __len__(self) -> int:
        return len(self.breaks) - 1

    def __getitem__(self, k: int) -> FloatArray:
        return np.linspace(self.breaks[k], self.breaks[k + 1], self.per)

    @property
    def total(self) -> int:
        """The number of recording depths of all segments together."""
        return len(self) * self.per


# ---------------------------------------------------------------------------- simulate's parts
@dataclass(frozen=True, eq=False)
class _Setup:
    """Everything :func:`simulate` integrates, validated: the control, the initial moments and
    the recording grid."""

    ctrl: Control
    d: int
    breaks: FloatArray
    piecewise: bool
    mean0: FloatArray
    cov0: FloatArray
    grids: _RecordGrid
    #: The reference ``(m̄, Σ̄)`` whose distance is integrated (:class:`DeviationForm`), or None.
    around: tuple[FloatArray, FloatArray] | None = None

    def layer_at(self, k: int) -> Callable[[float], Layer]:
        """The layer lookup of segment ``k`` (one fixed layer for piecewise-constant controls)."""
        if not self.piecewise:
            return self.ctrl.layer_at
        fixed = self.ctrl.layer_at(0.5 * float(self.breaks[k] + self.breaks[k + 1]))
        return lambda _t: fixed


def setup_run(
    model: Any, initial: Any, T: float | None, opts: IntegratorOptions, around: Any = None
) -> _Setup:
    ctrl = as_control(model, T)
    d = ctrl.layer_at(0.0).dim
    g0 = check_gaussian(initial, d)
    ref = None if around is None else check_gaussian(around, d, "around")
    check_exact(ctrl)
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    return _Setup(
        ctrl=ctrl,
        d=d,
        breaks=breaks,
        # Piecewise-constant controls get one fixed layer per segment (no per-call lookup).
        piecewise=bool(getattr(ctrl, "piecewise_constant", False)),
        mean0=np.asarray(g0.mean, dtype=float),
        cov0=np.asarray(g0.cov, dtype=float),
        grids=_RecordGrid.of(breaks, opts.n_points),
        around=None if ref is None else (np.asarray(ref.mean), np.asarray(ref.cov)),
    )


class MomentRecord:
    """The recorded depths and moments (and factors, in factor form), in increasing depth.

    The moments are written into arrays allocated once for ``capacity`` records (grown by
    doubling if a run records more), and the trajectory takes views of them: at d = 128 the
    513 records of a verifying re-simulation are 68 MB of covariances, and a list of
    per-record arrays copied into one array at the end touched twice that much fresh memory
    (0.3–0.4 s where page faults are slow, more than the integration itself under a tight
    time limit). The factors are kept only while every record has one of the same shape.
    """

    def __init__(
        self,
        t0: float,
        mean: FloatArray,
        cov: FloatArray,
        factor: FloatArray | None,
        *,
        capacity: int,
    ) -> None:
        cap, d = max(int(capacity), 1), mean.shape[0]
        self.n = 0
        self.ts = np.empty(cap)
        self.means = np.empty((cap, d))
        self.covs = np.empty((cap, d, d))
        self.factors: FloatArray | None = (
            None if factor is None else np.empty((cap, *np.shape(factor)))
        )
        self._put(t0, mean, cov, factor)

    @property
    def last_t(self) -> float:
        return float(self.ts[self.n - 1])

    def add(self, t: float, form: Form, y: FloatArray) -> None:
        """Record the state ``y`` of ``form`` at depth ``t`` if it lies beyond the last one."""
        if t > self.last_t:
            m, s, lf = form.moments(t, y)
            self._put(t, m, s, lf)

    def _put(self, t: float, m: FloatArray, s: FloatArray, lf: FloatArray | None) -> None:
        if self.n == len(self.ts):
            self._grow()
        i = self.n
        self.ts[i] = t
        self.means[i] = m
        np.add(s, s.T, out=self.covs[i])
        self.covs[i] *= 0.5
        if self.factors is not None:
            if lf is None or np.shape(lf) != self.factors.shape[1:]:
                self.factors = None
            else:
                self.factors[i] = lf
        self.n += 1

    def _grow(self) -> None:
        def grown(a: FloatArray) -> FloatArray:
            out = np.empty((2 * len(a), *a.shape[1:]))
            out[: self.n] = a[: self.n]
            return out

        self.ts, self.means, self.covs = grown(self.ts), grown(self.means), grown(self.covs)
        if self.factors is not None:
            self.factors = grown(self.factors)

    def arrays(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray | None]:
        """Views of the ``n`` records: depths, means, covariances and factors (or ``None``)."""
        n = self.n
        fac = None if self.factors is None else self.factors[:n]
        return self.ts[:n], self.means[:n], self.covs[:n], fac


@dataclass
class _Run:
    """The mutable state of one :func:`simulate` run shared by its segments."""

    opts: IntegratorOptions
    budget: Budget
    rec: MomentRecord
    watch: BlowupWatch
    nsteps: int = 0
    njev: int = 0
    restarts: int = 0
    #: Tolerance relaxation near a blow-up (:meth:`BlowupWatch.relaxation`; explicit methods).
    relax: float = 1.0
    #: ``λ_max/λ̇_max`` at the last accepted step (:meth:`_Segment.predict_step`).
    remaining: float = math.inf
    forms: set[str] = field(default_factory=set)
    switches: list[str] = field(default_factory=list)
    #: Progress report ``update(depth)`` (:func:`gtcontrol._progress.progress`; a no-op unless
    #: the command line shows bars), called once per accepted step.
    update: Callable[[float], None] = lambda depth: None


class _Segment:
    """One segment's solver: its form, method, frame and the stiffness probe's window."""

    def __init__(self, run: _Run, form: Form, t: float, t1: float) -> None:
        self.run, self.form, self.t1 = run, form, t1
        self.method = run.opts.method
        self.skew: FloatArray | None = None
        # the factor's horizontal gauge (:func:`._factor_form._vertical`), from the start when
        # the factor nearly only rotates there (a start at an equilibrium), else by the probe
        self.gauge = False
        if (
            isinstance(form, FactorForm)
            and form.vertical_share(form.y0, form.rhs(t, form.y0)) >= _GAUGE_SHARE_START
        ):
            form.gauge = self.gauge = True
            self.run.switches.append(f"horizontal gauge at {t:.6g}")
        self.solver = self._solver(t, form.y0)
        self.window = (t, 0)
        # the gauge probe's window, the mean step before a trial of the gauge (while it is
        # on trial), and whether a trial failed in this segment (:meth:`probe_gauge`)
        self.gauge_window = (t, run.nsteps)
        self.gauge_trial: float | None = None
        self.gauge_tried = False
        self.last_restart = -2  # the step count at the last restart (:meth:`renormalize`)

    def _solver(self, t: float, y: FloatArray, first_step: float | None = None) -> OdeSolver:
        opts, form = self.run.opts, self.form
        relax = self.run.relax if self.method in _EXPLICIT else 1.0
        kw: dict[str, Any] = {
            "rtol": opts.rtol * relax,
            "atol": form.atol(opts.atol * relax, y[: form.d]),
            "max_step": opts.max_step,
        }
        if first_step is not None:  # scipy's initial-step selection would cost an evaluation
            kw["first_step"] = first_step
        if self.method not in _EXPLICIT and form.n <= _MAX_DENSE_JACOBIAN:
            kw["jac"] = self._jacobian
        return _SOLVERS[self.method](form.rhs, t, y, self.t1, **kw)

    def _jacobian(self, t: float, y: FloatArray) -> FloatArray:
        self.run.njev += 1
        return exact_jacobian(self.form.rhs, t, y, self.form.scales(y))

    def relax(self, factor: float) -> None:
        """Loosen the explicit solver's tolerances to ``factor ×`` the requested ones (near a
        blow-up, :meth:`BlowupWatch.relaxation`); the step-size control adapts from there."""
        if self.method not in _EXPLICIT or factor <= self.run.relax:
            return
        self.run.relax = factor
        opts = self.run.opts
        self.solver.rtol = opts.rtol * factor
        self.solver.atol = self.form.atol(opts.atol * factor, self.form.y0[: self.form.d])

    def restart(self, t: float, y: FloatArray) -> None:
        """Renormalize the form at ``(t, y)`` and start a fresh solver there (an explicit
        solver keeps its step size: the renormalization does not change the dynamics' scale)."""
        h = getattr(self.solver, "h_abs", None)
        self.form = self.form.restart(t, y, self.skew, gauge=self.gauge)
        keep = self.method in _EXPLICIT and isinstance(h, float) and 0.0 < h < math.inf
        first = min(h, abs(self.t1 - t)) if keep and isinstance(h, float) else None
        self.solver = self._solver(t, self.form.y0, first_step=first or None)
        self.run.restarts += 1
        self.run.remaining = math.inf

    def renormalize(self, t: float, y: FloatArray) -> None:
        """The restart the form asks for (:meth:`FactorForm.needs_restart`); in the horizontal
        gauge, a second one on consecutive steps switches the gauge off for the segment.

        The gauge pays where ``K`` mostly rotates within it (near an equilibrium). Where its
        columns drift apart within a step, as near a blow-up, where ``Σ`` itself moves fast,
        every step would restart and pay an evaluation and a re-gauging SVD (docs/benchmarks.md).
        """
        if self.gauge and self.run.nsteps - self.last_restart <= 1:
            self.gauge, self.gauge_tried, self.gauge_trial = False, True, None
            self.run.switches.append(
                f"horizontal gauge off at {t:.6g} (its columns drift apart within a step)"
            )
        self.last_restart = self.run.nsteps
        self.restart(t, y)

    def predict_step(self, y: FloatArray) -> None:
        """Scale the explicit controller's next step by the shrink of the remaining time.

        Near a blow-up the solution is self-similar in ``τ = t* − t``: the error of a step of
        size ``h`` depends on ``h/τ``, so a step accepted at ``τ`` predicts the step ``h τ'/τ`` at
        the next depth, not ``h``; scipy's controller, which assumes a constant error constant,
        otherwise had about every second attempt rejected on MiniLM's layers. ``τ`` is
        estimated by ``λ_max/λ̇_max`` from one power step (:meth:`FactorForm.remaining`); the
        factor is applied only while that estimate shrinks (``[0.2, 1]``), so other dynamics
        keep scipy's controller.
        """
        if self.method not in _EXPLICIT:
            return
        remaining = self.form.remaining(y, self.derivative())
        prev, self.run.remaining = self.run.remaining, remaining
        if math.isfinite(prev) and 0.0 < remaining < prev:
            self.solver.h_abs *= max(remaining / prev, 0.2)

    def derivative(self) -> FloatArray:
        """The field at the solver's current state (cached by the explicit methods)."""
        f = getattr(self.solver, "f", None)
        if isinstance(f, np.ndarray):
            return f
        return self.form.rhs(self.solver.t, self.solver.y)

    def spectral_radius(self, t: float, y: FloatArray) -> float:
        """Power-iteration estimate of ``ρ(∂f/∂y)`` with exact (five-point) directional
        derivatives, in coordinates scaled by the components' typical sizes."""
        scale = self.form.scales(y)
        w = np.random.default_rng(0).standard_normal(y.size)
        rho = 0.0
        for _ in range(8):
            w /= np.linalg.norm(w)
            v = 0.25 * scale * w
            f = self.form.rhs
            jv = (-f(t, y + 2 * v) + 8 * f(t, y + v) - 8 * f(t, y - v) + f(t, y - 2 * v)) / 3.0
            w = jv / scale
            rho = float(np.linalg.norm(w))
            if rho == 0.0:
                break
        return rho

    def probe_gauge(self, t: float, y: FloatArray) -> bool:
        """Every :data:`_GAUGE_PROBE` explicit steps: switch the factor's horizontal gauge on
        (and restart) when the factor mostly rotates within its gauge, and off again when the
        steps taken in it were shorter than before; ``True`` if it restarted.

        The share of gauge motion predicts the gain, the steps measure it: far from an
        equilibrium, where Σ itself oscillates at the speed of the rotation, the share can
        pass while the gauge costs steps (a skew ``A`` of norm 40 at ``d = 6``: 56 steps
        against 37 to depth 0.5). Once switched off, it is not tried again in that segment.
        """
        t_w, n_w = self.gauge_window
        steps = self.run.nsteps - n_w
        if not isinstance(self.form, FactorForm) or steps < _GAUGE_PROBE:
            return False
        self.gauge_window = (t, self.run.nsteps)
        h = (t - t_w) / steps
        if self.gauge:
            before, self.gauge_trial = self.gauge_trial, None
            if before is None or h >= before:
                return False
            self.gauge, self.gauge_tried = False, True
            self.run.switches.append(
                f"horizontal gauge off at {t:.6g} (steps {h:.3g} in it, {before:.3g} before)"
            )
            self.restart(t, y)
            return True
        if (
            not self.gauge_tried
            and h > 0
            and (self.t1 - t) / h >= _GAUGE_STEPS
            and self.form.vertical_share(y, self.derivative()) >= _GAUGE_SHARE
        ):
            # the factor mostly rotates within its gauge (near an equilibrium, K̇ = M*K is
            # all rotation while Σ stands still): the horizontal gauge lets the steps grow
            self.gauge, self.gauge_trial = True, h
            self.run.switches.append(f"horizontal gauge at {t:.6g}")
            self.restart(t, y)
            return True
        return False

    def probe_stiffness(self, t: float, y: FloatArray) -> None:
        """Every :data:`_PROBE` explicit steps: switch method when the step is stability-limited."""
        if self.method not in _EXPLICIT or self.probe_gauge(t, y):
            return
        t_w, n_w = self.window
        steps = self.run.nsteps - n_w
        if steps < _PROBE:
            return
        self.window = (t, self.run.nsteps)
        h = (t - t_w) / steps
        if h <= 0:
            return
        if (self.t1 - t) / h < _STIFF_STEPS:
            return
        layer = self.form.layer_at(t)
        a, _ = layer.affine_ffn()
        skew = 0.5 * (a - a.T)
        fixed = self.form.layer_at(0.5 * (t + self.t1)) is layer
        if (
            isinstance(self.form, FactorForm)
            and self.skew is None
            and fixed
            and h * float(np.linalg.norm(skew, 2)) >= _ROTATION_H
        ):
            # the rotation limits the step: the rotating frame integrates it exactly
            self.skew = skew
            self.run.switches.append(f"rotating frame (exponential for skew A) at {t:.6g}")
        elif self.form.n <= _MAX_DENSE_JACOBIAN:
            rho = self.spectral_radius(t, y)
            smooth = self.form.rate(y, self.derivative()) <= 0.01 * rho
            if h * rho < _STIFF_H_RHO or not smooth:
                return  # accuracy-limited: the moments themselves move that fast
            self.method = "Radau"
            self.gauge = False  # the dense Jacobian of the plain factor field serves Radau best
            self.run.switches.append(f"Radau at {t:.6g}")
        else:
            return
        self.restart(t, y)


def _stop_at(
    seg: _Segment, t: float, y: FloatArray, outcome: IntegrationEnd
) -> tuple[Any, IntegrationEnd]:
    seg.run.rec.add(t, seg.form, y)
    return _state(seg.form, t, y), outcome


def _state(form: Form, t: float, y: FloatArray) -> tuple[FloatArray, FloatArray, Any]:
    m, s, lf = form.moments(t, y)
    return m, s, lf


def _collapse(seg: _Segment, t: float, y: FloatArray, why: str) -> tuple[Any, IntegrationEnd]:
    """The integrator cannot go on at ``(t, y)``: a blow-up (classified) or a failure."""
    outcome = None
    if np.all(np.isfinite(y)):
        try:
            f = seg.form.rhs(t, y)
            lam, dlam = seg.form.top(y, f)
            outcome = seg.run.watch.collapse(t, lam, dlam, why)
        except (BudgetExhausted, ValueError, ArithmeticError, np.linalg.LinAlgError):
            outcome = None
    if outcome is None:
        outcome = IntegrationEnd(
            Status.FAILED, f"moment integration failed at depth {t:.6g}: {why}"
        )
    return _stop_at(seg, t, y, outcome)


def _record_step(seg: _Segment, grid: FloatArray, t_old: float, t: float, y: FloatArray) -> None:
    """Record the grid depths in ``(t_old, t]`` from the step's dense output."""
    rec = seg.run.rec
    pts = grid[(grid > max(t_old, rec.last_t)) & (grid < t)]
    if pts.size:
        dense = seg.solver.dense_output()
        for tp in pts:
            rec.add(float(tp), seg.form, np.asarray(dense(tp)))
    if t in grid or t >= seg.t1:
        rec.add(t, seg.form, y)


def _after_step(seg: _Segment, t: float, y: FloatArray) -> IntegrationEnd | None:
    """The blow-up watch and the overflow test at an accepted state."""
    form, watch = seg.form, seg.run.watch
    log_tr = form.log_scale(y)
    if not watch.due(math.exp(min(log_tr, 700.0))):
        return None
    lam, dlam = form.top(y, seg.derivative())
    outcome = watch.observe(t, lam, dlam)
    if outcome is None and log_tr > math.log(OVERFLOW_LEVEL):
        return watch.overflow(t)
    if outcome is None:
        seg.relax(watch.relaxation())
    return outcome


def _integrate_segment(
    run: _Run, setup: _Setup, k: int, state: tuple[FloatArray, FloatArray, Any]
) -> tuple[tuple[FloatArray, FloatArray, Any], IntegrationEnd | None]:
    """Integrate segment ``k`` of the control from ``state = (m, Σ, L or None)``.

    Returns the state at the segment's end and ``None``, or the last state and the outcome
    that stopped the integration (blow-up, overflow, integrator failure, spent budget).
    """
    t0, t1 = float(setup.breaks[k]), float(setup.breaks[k + 1])
    layer_at = setup.layer_at(k)
    m, s, lf = state
    noisy = layer_at(0.5 * (t0 + t1)).noise is not None
    grid = setup.grids[k]
    try:
        form = make_form(
            layer_at, run.budget, t0, m, s, None if noisy else lf, noisy=noisy, around=setup.around
        )
        run.forms.add(form.kind)
        seg = _Segment(run, form, t0, t1)
    except BudgetExhausted as exc:
        return state, IntegrationEnd(Status.BUDGET_EXHAUSTED, f"{exc.reason} at depth {t0:.6g}")
    while seg.solver.status == "running":
        t_prev, y_prev = float(seg.solver.t), np.array(seg.solver.y)
        try:
            # Radau's Newton solves meet singular iteration matrices near a blow-up; it then
            # shrinks the step by itself, so scipy's LinAlgWarning is expected and handled.
            # LSODA warns ("repeated convergence failures") before it fails: the warning is
            # the reason, so it goes into the result's message instead of the user's terminal.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                message = seg.solver.step()
            if seg.solver.status == "failed":
                notes = [
                    str(w.message).strip()
                    for w in caught
                    if not issubclass(w.category, LinAlgWarning)
                ]
                why = "; ".join([str(message), *dict.fromkeys(notes)])
                return _collapse(seg, t_prev, y_prev, why)
            t, y = float(seg.solver.t), np.asarray(seg.solver.y)
            if not np.all(np.isfinite(y)):
                return _collapse(seg, t_prev, y_prev, "the state became non-finite")
            run.nsteps += 1
            run.update(t)
            _record_step(seg, grid, t_prev, t, y)
            outcome = _after_step(seg, t, y)
            if outcome is not None:
                return _stop_at(seg, t, y, outcome)
            seg.predict_step(y)
            if seg.solver.status == "running":
                if seg.form.needs_restart(y):
                    seg.renormalize(t, y)
                else:
                    seg.probe_stiffness(t, y)
        except BudgetExhausted as exc:
            t_s, y_s = float(seg.solver.t), np.array(seg.solver.y)
            cov_s = _state(seg.form, t_s, y_s)[1]
            msg = (
                f"{exc.reason} at depth {t_s:.6g}; the trajectory stops there"
                f"{seg.run.watch.growth_note()}"
                f"{seg.run.watch.null_cone_note(layer_at(t_s), cov_s)}"
            )
            return _stop_at(seg, t_s, y_s, IntegrationEnd(Status.BUDGET_EXHAUSTED, msg))
        except BrokenControl:
            raise
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            return _collapse(seg, t_prev, y_prev, f"{type(exc).__name__}: {exc}")
    y_end = np.asarray(seg.solver.y)
    seg.run.rec.add(t1, seg.form, y_end)
    return _state(seg.form, t1, y_end), None


def integrate(
    setup: _Setup, opts: IntegratorOptions
) -> tuple[MomentRecord, IntegrationEnd, dict[str, Any]]:
    """Integrate every segment of the control; return the record, the outcome and the stats."""
    budget = Budget(opts.time_limit, max_evals=opts.max_evals)
    lam_ref = max(float(np.linalg.eigvalsh(setup.cov0)[-1]), 1.0)
    lf0 = initial_factor(setup.cov0) if setup.around is None else None
    run = _Run(
        opts=opts,
        budget=budget,
        rec=MomentRecord(
            float(setup.breaks[0]),
            setup.mean0,
            setup.cov0,
            lf0,
            # every grid depth, a stop inside a segment and the last step's end (a longer
            # record grows by doubling: a million-layer schedule reserves no gigabytes)
            capacity=min(setup.grids.total, _FIRST_CAPACITY) + 2,
        ),
        watch=BlowupWatch(lam_ref, opts.blowup_factor, max(0.01 * opts.rtol, 1e-15)),
    )
    state: tuple[FloatArray, FloatArray, Any] = (setup.mean0, setup.cov0, lf0)
    outcome = IntegrationEnd(Status.SUCCESS, "integrated to the horizon")
    t_start, t_end = float(setup.breaks[0]), float(setup.breaks[-1])
    with (
        np.errstate(over="ignore", invalid="ignore"),
        progress(f"moments, depth {t_end:g}", total=t_end - t_start) as update,
    ):
        run.update = lambda t: update(t - t_start)
        for k in range(len(setup.grids)):
            state, stop = _integrate_segment(run, setup, k, state)
            if stop is not None:
                outcome = stop
                break
    stats: dict[str, Any] = {
        "nfev": budget.count,
        "njev": run.njev,
        "nsteps": run.nsteps,
        "method": opts.method,
        "switched_to": list(run.switches),
        "form": "+".join(sorted(run.forms)) or "factor",
        "restarts": run.restarts,
        "relaxation": run.relax,
        "seconds": budget.elapsed,
        "growth_samples": run.watch.growth_samples(),
    }
    return run.rec, outcome, stats
