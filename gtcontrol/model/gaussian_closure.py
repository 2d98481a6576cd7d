"""The moment-matched Gaussian flow of a layer with a ReLU/GELU feed-forward (Gaussian closure).

A feed-forward ``W_out σ(W_in x + b_in)`` with ``σ`` ReLU or GELU does not keep Gaussians
Gaussian, so the moment ODE of :mod:`gtcontrol.model.moments` does not apply (docs/theory.md
§2). The Gaussian closure keeps, at every depth, the Gaussian ``N(m, Σ)`` with the moments of
the current law and moves it with the exact moment derivatives *at* that Gaussian: with
``a = W_in x + b_in ~ N(W_in m + b_in, W_in Σ W_inᵀ)``, Stein's lemma gives
``E[σ(a) (x − m)ᵀ] = D W_in Σ`` with
``D = diag E σ'(a)``, so the feed-forward enters ``dm/dt`` and ``dΣ/dt`` exactly as its
statistical linearization

    W_out σ(W_in x + b_in)  →  W_out (E σ(a) + D (W_in x + b_in − E a)),

an affine layer (:func:`linearized_layer`), whose moment field is
:func:`gtcontrol.model.field.moment_field`. Closed forms for ``a ~ N(μ, s²)``:
ReLU ``E σ = μ Φ(μ/s) + s φ(μ/s)``, ``E σ' = Φ(μ/s)``; exact GELU ``σ(a) = a Φ(a)``:
``E σ = μ Φ(κ) + s² φ(κ)/√(1+s²)``, ``E σ' = Φ(κ) + μ φ(κ)/(1+s²)^{3/2}``, ``κ = μ/√(1+s²)``.
With the identity it is the exact moment ODE.

This is the reference that token clouds with a non-affine feed-forward are compared against
(:func:`gtcontrol.compare_tokens`): an assumed-density approximation, not an exact law, so a
finite-N comparison against it also measures how far the tokens leave the Gaussian family.

Reference: the paper cited in :mod:`gtcontrol`, §2; P. S. Maybeck, *Stochastic Models,
Estimation and Control* vol. 2 (1982), §12.7 (statistical linearization); C. Stein (1981).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from scipy.integrate import DOP853
from scipy.special import ndtr

from .._docstring import fill, integrator_budget_doc
from .._linalg import FloatArray, numerical_ranks, sym
from .._status import DEFAULT_MAX_EVALS, Budget, BudgetExhausted, Status
from .._validation import as_float_array, as_max_evals, as_positive_float, as_time_limit, frozen
from ..errors import InvalidParametersError
from .field import moment_field
from .gaussian import Gaussian
from .moments import Trajectory
from .params import BrokenControl, Control, Layer, Schedule, as_control

__all__ = ["activation_moments", "linearized_layer", "simulate_closure"]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def activation_moments(kind: str, mu: FloatArray, var: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``E σ(a)`` and ``E σ'(a)`` for ``a ~ N(μ, s²)`` elementwise, in closed form (one home).

    ReLU: ``E σ = μ Φ(k) + s φ(k)``, ``E σ' = Φ(k)``, ``k = μ/s`` (``s = 0``: the step).
    GELU ``σ(a) = a Φ(a)``: with ``q = 1 + s²``, ``κ = μ/√q``, ``E σ = μ Φ(κ) + s² φ(κ)/√q`` and
    ``E σ' = Φ(κ) + μ φ(κ)/q^{3/2}`` (Gaussian integrals of Φ). Identity: ``(μ, 1)``.

    Parameters
    ----------
    kind
        ``"identity"``, ``"relu"`` or ``"gelu"``.
    mu, var
        Means and variances of the pre-activations (same shape; variances ≥ 0).

    Returns
    -------
    tuple of numpy.ndarray
        ``(E σ(a), E σ'(a))``, the shape of ``mu``.

    Examples
    --------
    >>> import numpy as np
    >>> e, de = activation_moments("relu", np.zeros(1), np.ones(1))
    >>> round(float(e[0]), 6), float(de[0])
    (0.398942, 0.5)
    """
    if kind == "identity":
        return mu.copy(), np.ones_like(mu)
    s2 = np.maximum(var, 0.0)
    if kind == "relu":
        s = np.sqrt(s2)
        pos = s > 0
        k = np.divide(mu, s, out=np.where(mu >= 0, np.inf, -np.inf), where=pos)
        big = ndtr(k)
        pdf = np.where(pos, _INV_SQRT_2PI * np.exp(-0.5 * np.where(pos, k, 0.0) ** 2), 0.0)
        return mu * big + s * pdf, big
    q = 1.0 + s2  # gelu: a Φ(a)
    kappa = mu / np.sqrt(q)
    pdf = _INV_SQRT_2PI * np.exp(-0.5 * kappa * kappa)
    big = ndtr(kappa)
    return mu * big + s2 * pdf / np.sqrt(q), big + mu * pdf / q**1.5


def linearized_layer(layer: Layer, mean: Any, cov: Any) -> Layer:
    """``layer`` with its feed-forward replaced by the statistical linearization at ``N(m, Σ)``.

    ``W_out σ(W_in x + b_in)`` becomes ``W_out D W_in x + W_out (E σ(a) − D W_in m)``,
    ``D = diag E σ'(a)``, ``a = W_in x + b_in ~ N(W_in m + b_in, W_in Σ W_inᵀ)`` (module
    docstring): the affine layer whose moment
    derivatives at ``N(m, Σ)`` equal the exact ones of ``layer`` there.

    Parameters
    ----------
    layer
        A layer (any activation; a layer without a feed-forward is returned as it is).
    mean
        The mean ``m``, shape ``(d,)``.
    cov
        The covariance ``Σ``, shape ``(d, d)``.

    Returns
    -------
    Layer
        An affine layer with the same heads and noise (``ffn`` removed, ``A`` and ``b`` updated).

    Raises
    ------
    InvalidParametersError
        If ``layer`` is not a Layer.

    Examples
    --------
    A ReLU of a centred unit Gaussian halves the slope: ``E σ'(a) = Φ(0) = 1/2``.

    >>> import numpy as np
    >>> from gtcontrol import FeedForward, Layer
    >>> lay = Layer(dim=1, ffn=FeedForward([[1.0]], [[1.0]], activation="relu"))
    >>> lin = linearized_layer(lay, np.zeros(1), np.eye(1))
    >>> float(lin.A[0, 0]), round(float(lin.b[0]), 6)
    (0.5, 0.398942)
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    ffn = layer.ffn
    if ffn is None:
        return layer
    m = np.asarray(mean, dtype=float)
    s = np.asarray(cov, dtype=float)
    mu_a = ffn.W_in @ m + ffn.b_in
    var_a = np.einsum("ij,jk,ik->i", ffn.W_in, s, ffn.W_in)
    e_s, e_ds = activation_moments(ffn.activation, mu_a, var_a)
    a_eff = layer.A + (ffn.W_out * e_ds) @ ffn.W_in
    b_eff = layer.b + ffn.W_out @ (e_s - e_ds * (ffn.W_in @ m))
    return layer.replace(A=a_eff, b=b_eff, ffn=None)


def _segments(ctrl: Control) -> list[tuple[float, float]]:
    bps = np.asarray(ctrl.breakpoints, dtype=float)
    return [(float(bps[k]), float(bps[k + 1])) for k in range(len(bps) - 1)]


def _check_times(times: Any, horizon: float) -> FloatArray | None:
    """``times`` as non-decreasing depths in ``[0, horizon]`` (``None`` stays ``None``)."""
    if times is None:
        return None
    pts = as_float_array("times", times, ndim=1)
    if pts.size and (pts[0] < 0 or pts[-1] > horizon or np.any(np.diff(pts) < 0)):
        raise InvalidParametersError(
            f"times: expected non-decreasing depths in [0, T] = [0, {horizon:g}], got {pts}"
        )
    return pts


class _Recorder:
    """The reported depths and states: every accepted step, or the requested ``points``.

    ``reached`` is the last depth the integration reached (a requested depth is reported once
    the integrator has stepped past it, from the step's dense output).
    """

    def __init__(self, y0: FloatArray, points: FloatArray | None) -> None:
        self.points = points
        self.ts: list[float] = []
        self.ys: list[FloatArray] = []
        self.next = 0
        self.reached = 0.0
        self.record(0.0, y0, None)

    def record(self, t: float, y: FloatArray, solver: DOP853 | None) -> None:
        """Report the state ``y`` reached at depth ``t`` at the end of ``solver``'s last step."""
        self.reached = t
        if self.points is None:
            self.ts.append(t)
            self.ys.append(y.copy())
            return
        pts, dense = self.points, None
        while self.next < pts.size and pts[self.next] <= t:
            p = float(pts[self.next])
            if p == t or solver is None:  # the step's end (or the start): the state itself
                self.ys.append(y.copy())
            else:
                dense = dense if dense is not None else solver.dense_output()
                self.ys.append(np.asarray(dense(p), dtype=float))
            self.ts.append(p)
            self.next += 1


@fill(budget=integrator_budget_doc("right-hand-side"))
def simulate_closure(
    control: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    times: Any = None,
    rtol: float = 1e-10,
    max_evals: int = DEFAULT_MAX_EVALS,
    time_limit: float | None = None,
) -> Trajectory:
    """Integrate the Gaussian-closure moment flow ``(dm/dt, dΣ/dt)`` of any layer or schedule.

    At every depth the layer's feed-forward is replaced by its statistical linearization at the
    current Gaussian (:func:`linearized_layer`), then :func:`~gtcontrol.model.field.moment_field`
    gives ``dm/dt = M m + c`` and ``dΣ/dt = M Σ + Σ Mᵀ`` (module docstring). For affine layers
    this is the moment ODE of :func:`gtcontrol.simulate`. Integrated by DOP853 on ``(m, Σ)``,
    restarting at every breakpoint; every accepted step is recorded, or the requested ``times``.

    Parameters
    ----------
    control
        A :class:`Layer` (needs ``T``), a :class:`Schedule` or any control.
    initial
        ``N(m0, Σ0)`` of the model's dimension.
    T
        Horizon; optional for controls that carry their own.
    times
        Non-decreasing depths in ``[0, T]`` at which to report the moments, interpolated by
        the integrator's dense output (a depth at a breakpoint is the state there, reported
        once; a repeated depth is reported as often as it is given); ``None``: every accepted
        step, ``0`` included.
    rtol
        Relative tolerance of the integrator (``atol = rtol · 1e-2`` times the initial scale).
    %(budget)s

    Returns
    -------
    Trajectory
        ``SUCCESS`` at the horizon; ``OVERFLOW`` when the moments leave the floating-point
        range; ``FAILED`` when the step size collapsed (a finite-time blow-up of the closure);
        ``BUDGET_EXHAUSTED`` when a cap ran out. The arrays hold the depths reached (with
        ``times``: the requested depths reached). ``stats``: ``nfev`` (right-hand-side
        evaluations, the dense output's included), ``nsteps`` (accepted steps), ``form``
        (``"closure"``) and ``seconds``.

    Raises
    ------
    InvalidParametersError
        On a Gaussian of the wrong dimension, a bad horizon, ``times`` or other options.

    Notes
    -----
    The closure is exact only while the law is Gaussian; ReLU/GELU feed-forwards make it
    non-Gaussian, and the token simulator (:func:`gtcontrol.simulate_tokens`) is the ground truth.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import FeedForward, Gaussian, Layer, Schedule
    >>> lay = Layer(A=-np.eye(2), ffn=FeedForward(np.eye(2), np.eye(2), activation="relu"))
    >>> tr = simulate_closure(lay, Gaussian(np.zeros(2), np.eye(2)), 1.0)
    >>> tr.status, tr.t[-1]
    (<Status.SUCCESS: 'success'>, np.float64(1.0))

    At chosen depths, across the breakpoint ``t = 1`` of a two-layer schedule:

    >>> net = Schedule([lay, Layer(B=np.eye(2), V=-0.5)], T=2.0)
    >>> tr = simulate_closure(net, Gaussian(np.zeros(2), np.eye(2)), times=[0.0, 1.0, 1.5, 2.0])
    >>> tr.t, tr.cov.shape
    (array([0. , 1. , 1.5, 2. ]), (4, 2, 2))
    """
    clock = time.perf_counter()
    ctrl = as_control(control, T)
    d = ctrl.layer_at(0.0).dim
    if not isinstance(initial, Gaussian) or initial.dim != d:
        raise InvalidParametersError(
            f"initial: expected a Gaussian of dimension {d}, got {initial!r}"
        )
    points = _check_times(times, float(ctrl.T))
    tol = as_positive_float("rtol", rtol)
    budget = Budget(as_time_limit(time_limit), max_evals=as_max_evals(max_evals))
    scale = max(float(np.max(np.abs(initial.mean))), float(np.max(np.abs(initial.cov))), 1e-300)
    y = np.concatenate([initial.mean, initial.cov.ravel()])
    rec = _Recorder(y, points)
    status, message, steps = Status.SUCCESS, "", 0
    piecewise = bool(getattr(ctrl, "piecewise_constant", False))
    for t0, t1 in _segments(ctrl):
        fixed = ctrl.layer_at(0.5 * (t0 + t1)) if piecewise else None

        def rhs(t: float, z: FloatArray, fixed: Layer | None = fixed) -> FloatArray:
            budget.tick()
            m, s = z[:d], sym(z[d:].reshape(d, d))
            lay = fixed if fixed is not None else ctrl.layer_at(t)
            dm, ds = moment_field(linearized_layer(lay, m, s), m, s)
            return np.concatenate([dm, ds.ravel()])

        status, message, n, y = _integrate(rhs, y, t0, t1, tol, tol * 1e-2 * scale, rec)
        steps += n
        if status is not Status.SUCCESS:
            break
    if status is Status.BUDGET_EXHAUSTED:
        message = f"{budget.reason()} at depth {rec.reached:.6g}"
    elif status is Status.SUCCESS:
        message = f"Gaussian closure carried to depth {rec.reached:.6g} in {steps} steps"
    arr = np.array(rec.ys).reshape(len(rec.ys), y.size)
    covs = np.array([sym(row[d:].reshape(d, d)) for row in arr]).reshape(len(rec.ys), d, d)
    return Trajectory(
        t=frozen(np.array(rec.ts, dtype=float)),
        mean=frozen(arr[:, :d].copy()),
        cov=frozen(covs),
        rank=frozen(numerical_ranks(covs)),
        status=status,
        stats={
            "nfev": budget.count,
            "nsteps": steps,
            "form": "closure",
            "seconds": time.perf_counter() - clock,
        },
        message=message,
    )


def _integrate(
    rhs: Any,
    y0: FloatArray,
    t0: float,
    t1: float,
    rtol: float,
    atol: float,
    rec: _Recorder,
) -> tuple[Status, str, int, FloatArray]:
    """DOP853 from ``t0`` to ``t1``, reporting every accepted step to ``rec``.

    Returns the status, a message, the number of accepted steps and the last finite state.
    """
    steps, y = 0, y0
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            solver = DOP853(rhs, t0, y0, t1, rtol=rtol, atol=atol)
            while solver.status == "running":
                msg = solver.step()
                if solver.status == "failed":
                    return (
                        Status.FAILED,
                        f"the closure's step size collapsed at depth {solver.t:.6g} ({msg})",
                        steps,
                        y,
                    )
                if not np.all(np.isfinite(solver.y)):
                    return (
                        Status.OVERFLOW,
                        f"the closure moments overflow at depth {solver.t:.6g}",
                        steps,
                        y,
                    )
                steps += 1
                y = solver.y.copy()
                rec.record(float(solver.t), y, solver)
    except BudgetExhausted:
        return Status.BUDGET_EXHAUSTED, "", steps, y
    except BrokenControl:
        raise
    except InvalidParametersError as exc:  # a linearized layer beyond the accepted magnitudes
        return (
            Status.OVERFLOW,
            f"the closure moments overflow at depth {rec.reached:.6g} ({exc})",
            steps,
            y,
        )
    return Status.SUCCESS, "", steps, y
