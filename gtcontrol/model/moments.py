"""The Gaussian moment dynamics: the one home of the moment vector field.

For ``μ = N(m, Σ)`` the tilted law ``∝ e^{yᵀBx} N(y; m, Σ)`` is ``N(m + ΣBx, Σ)``, so each head's
attention is the affine map ``Attn_h(x) = m + Σ B_h x`` and the velocity is ``v(x) = M x + c`` with

    M = A + Σ_h V_h Σ B_h,        c = b + Σ_h V_h m.

An affine field keeps Gaussians Gaussian, with the moment ODE (docs/theory.md §2)

    dm/dt = M m + c,        dΣ/dt = M Σ + Σ Mᵀ,

and a discrete residual layer ``x ← x + h v(x)`` maps moments exactly by
``m⁺ = m + h (M m + c)``, ``Σ⁺ = (I + hM) Σ (I + hM)ᵀ``.

Everything in gtcontrol that needs the field calls :func:`affine_velocity` / :func:`moment_field`.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026), §2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

from .._linalg import FloatArray, numerical_ranks, vech, vech_index
from .._status import Status
from .._validation import as_positive_float, as_positive_int, frozen
from ..errors import InvalidParametersError, SolverError
from .gaussian import Gaussian, check_gaussian
from .params import Control, Layer, Schedule, as_control

__all__ = [
    "IntegratorOptions",
    "Trajectory",
    "affine_velocity",
    "moment_field",
    "simulate",
    "simulate_discrete",
]

NDArrayInt = np.ndarray

_METHODS = ("DOP853", "RK45", "Radau", "LSODA", "BDF")


def affine_velocity(
    layer: Layer, mean: FloatArray, cov: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The affine velocity ``v(x) = M x + c`` that ``layer`` induces on ``N(mean, cov)``.

    ``M = A + Σ_h V_h Σ B_h`` and ``c = b + Σ_h V_h m`` (docs/theory.md §2); ``A, b`` include an
    identity-activation feed-forward. One head costs two ``d×d`` products.

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward (outside the exact Gaussian theory).
    """
    a, b = layer.affine_ffn()
    m_mat = a.copy()
    c = b.copy()
    for v_h, b_h in layer.heads:
        m_mat += v_h @ (cov @ b_h)
        c += v_h @ mean
    return m_mat, c


def moment_field(layer: Layer, mean: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Right-hand side of the moment ODE: ``(dm/dt, dΣ/dt) = (M m + c, M Σ + Σ Mᵀ [+ G Gᵀ])``.

    The covariance derivative is formed as ``P + Pᵀ`` with ``P = M Σ``, so it is exactly symmetric
    and costs one more ``d×d`` product (three in all for one head). A layer with Brownian forcing
    ``G`` (``layer.noise``) adds ``G Gᵀ`` (docs/theory.md §6).
    """
    m_mat, c = affine_velocity(layer, mean, cov)
    p = m_mat @ cov
    ds = p + p.T
    if layer.noise is not None:
        ds += layer.noise @ layer.noise.T
    return m_mat @ mean + c, ds


@dataclass(frozen=True, kw_only=True)
class IntegratorOptions:
    """Options of the adaptive moment integrator (validated when built).

    Attributes
    ----------
    rtol, atol
        Relative and absolute error tolerances of the Runge–Kutta error control; ``atol`` is
        scaled by the size of the initial state. The defaults give about 1e-8 relative accuracy
        or better on smooth trajectories.
    method
        A ``scipy.integrate.solve_ivp`` method; the explicit 8th-order ``"DOP853"`` by default.
    n_points
        Number of recorded depths (spread over the layers, always including every layer switch).
    blowup_factor
        The integrator stops when ``tr Σ`` exceeds ``blowup_factor × max(tr Σ0, 1)``. It then tells
        finite-time blow-up (``tr Σ / (d tr Σ/dt)``, the remaining time, is tiny) from
        exponential growth (it is not) and goes on in the second case.
    max_step
        Largest step; ``inf`` lets the error control decide.
    """

    rtol: float = 1e-11
    atol: float = 1e-14
    method: str = "DOP853"
    n_points: int = 201
    blowup_factor: float = 1e12
    max_step: float = math.inf

    def __post_init__(self) -> None:
        as_positive_float("rtol", self.rtol)
        as_positive_float("atol", self.atol)
        as_positive_int("n_points", self.n_points)
        as_positive_float("max_step", self.max_step, allow_inf=True)
        if as_positive_float("blowup_factor", self.blowup_factor) <= 1.0:
            raise InvalidParametersError(
                f"blowup_factor: expected a number > 1, got {self.blowup_factor!r}"
            )
        if self.method not in _METHODS:
            raise InvalidParametersError(f"method: expected one of {_METHODS}, got {self.method!r}")


@dataclass(frozen=True, eq=False)
class Trajectory:
    """Moments along depth.

    Attributes
    ----------
    t
        Recorded depths, shape ``(n,)``.
    mean, cov
        Means ``(n, d)`` and covariances ``(n, d, d)`` at those depths.
    rank
        Numerical rank of each covariance, ``(n,)``.
    status
        :class:`~gtcontrol.Status`: ``SUCCESS`` (integrated to the horizon), ``BLOWUP`` (the
        covariance diverges in finite time, at ``blowup_time``), ``OVERFLOW`` (it left the
        floating-point range by exponential growth) or ``BUDGET_EXHAUSTED``.
    blowup_time
        Estimated blow-up time, ``math.inf`` when there is none.
    stats
        Integrator statistics (``nfev``, ``seconds``).
    message
        How the integration ended, in words.
    success
        True for ``SUCCESS`` and ``BLOWUP`` (a blow-up is the answer, not a failure).
    """

    t: FloatArray
    mean: FloatArray
    cov: FloatArray
    rank: NDArrayInt
    status: Status
    blowup_time: float = math.inf
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""

    @property
    def success(self) -> bool:
        """Whether the trajectory answers the question (reached T, or found the blow-up)."""
        return self.status in (Status.SUCCESS, Status.BLOWUP)

    @property
    def dim(self) -> int:
        return int(self.mean.shape[1])

    @property
    def final(self) -> Gaussian:
        """The Gaussian at the last recorded depth (just before blow-up if it blew up)."""
        return self.at(-1)

    def at(self, i: int) -> Gaussian:
        """The Gaussian at record ``i``."""
        return Gaussian(self.mean[i], self.cov[i])

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def __repr__(self) -> str:
        return (
            f"Trajectory(dim={self.dim}, n={len(self)}, t=[{self.t[0]:g}, {self.t[-1]:g}], "
            f"status={self.status!r}, blowup_time={self.blowup_time:g})"
        )


def _model_dim(ctrl: Control) -> int:
    return ctrl.layer_at(0.0).dim


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


def simulate(
    model: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    rtol: float = IntegratorOptions.rtol,
    atol: float = IntegratorOptions.atol,
    method: str = IntegratorOptions.method,
    n_points: int = IntegratorOptions.n_points,
    blowup_factor: float = IntegratorOptions.blowup_factor,
    max_step: float = IntegratorOptions.max_step,
) -> Trajectory:
    """Integrate the moment ODE ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (docs/theory.md §2).

    The state is the mean and the upper triangle of Σ (each entry stored once). The integrator
    restarts exactly at every layer switch of a schedule, so the piecewise-constant parameters
    never straddle a step.

    Parameters
    ----------
    model
        A :class:`Layer` (needs ``T``), a :class:`Schedule`, or any control with ``.T``,
        ``.breakpoints`` and ``.layer_at(t)`` (e.g. a closed-form steering control).
    initial
        The initial Gaussian ``N(m0, Σ0)``; Σ0 may be singular (the rank is preserved).
    T
        Horizon; optional for controls that carry their own.
    rtol, atol, method, n_points, blowup_factor, max_step
        See :class:`IntegratorOptions`.

    Returns
    -------
    Trajectory
        ``status="blowup"`` with ``blowup_time`` when Σ diverges in finite time (located to
        ~1e-10 relative in the quadratic regime by extrapolating ``1/tr Σ``, which is linear
        near a Riccati singularity); otherwise ``SUCCESS``.

    Raises
    ------
    InvalidGaussianError, InvalidParametersError
        On malformed input, a dimension mismatch, or a ReLU/GELU feed-forward.
    SolverError
        If the integrator fails, or Σ grows past 1e250 without a finite-time singularity.
    """
    opts = IntegratorOptions(
        rtol=rtol,
        atol=atol,
        method=method,
        n_points=n_points,
        blowup_factor=blowup_factor,
        max_step=max_step,
    )
    ctrl = as_control(model, T)
    d = _model_dim(ctrl)
    g0 = check_gaussian(initial, d)
    _check_exact(ctrl)
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    # Piecewise-constant controls get one fixed layer per segment (no per-call lookup).
    piecewise = bool(getattr(ctrl, "piecewise_constant", False))
    n_m = d

    y = np.concatenate([g0.mean, vech(g0.cov)])
    scale = max(float(np.max(np.abs(y))), 1.0)
    tr0 = max(float(np.trace(g0.cov)), 1.0)
    atol_abs = opts.atol * scale
    iu, full_pos = vech_index(d)
    flat_iu = iu[0] * d + iu[1]

    def unpack(yv: FloatArray) -> tuple[FloatArray, FloatArray]:
        return yv[:n_m], yv[n_m:][full_pos].reshape(d, d)

    ts: list[FloatArray] = []
    ys: list[FloatArray] = []
    nfev = 0
    status, t_blow = Status.SUCCESS, math.inf
    message = "integrated to the horizon"
    clock = time.perf_counter()
    grids = _record_grid(breaks, opts.n_points)
    diag_idx = np.flatnonzero(iu[0] == iu[1])

    for k, grid in enumerate(grids):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        fixed = ctrl.layer_at(0.5 * (t0 + t1)) if piecewise else None

        def rhs(t: float, yv: FloatArray, fixed: Layer | None = fixed) -> FloatArray:
            lay = fixed if fixed is not None else ctrl.layer_at(t)
            m, s = unpack(yv)
            dm, ds = moment_field(lay, m, s)
            return np.concatenate([dm, ds.ravel()[flat_iu]])

        seg_start = t0
        threshold = opts.blowup_factor * tr0
        while True:

            def event(t: float, yv: FloatArray, thr: float = threshold) -> float:
                return float(np.sum(yv[n_m + diag_idx])) - thr

            event.terminal = True  # type: ignore[attr-defined]
            event.direction = 1.0  # type: ignore[attr-defined]
            t_eval = grid[grid >= seg_start]
            try:
                sol = solve_ivp(
                    rhs,
                    (seg_start, t1),
                    y,
                    method=opts.method,
                    t_eval=t_eval,
                    rtol=opts.rtol,
                    atol=atol_abs,
                    events=event,
                    max_step=opts.max_step,
                )
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                raise SolverError(
                    f"moment integration failed at depth {seg_start:g}: {exc}",
                    status="integrator_error",
                    stats={"nfev": nfev, "t": seg_start},
                ) from None
            nfev += sol.nfev
            if sol.status == -1:
                t_fail = sol.t[-1] if len(sol.t) else seg_start
                raise SolverError(
                    f"moment integration failed at depth {t_fail:g}: {sol.message}",
                    status="integrator_error",
                    stats={"nfev": nfev},
                )
            if sol.t.size:
                ts.append(sol.t)
                ys.append(sol.y.T)
            if sol.status != 1:  # reached t1
                y = sol.y[:, -1] if sol.t.size and sol.t[-1] == t1 else _endpoint(sol, y)
                break
            # The event fired: finite-time blow-up or fast exponential growth?
            t_e = float(sol.t_events[0][0])
            y_e = sol.y_events[0][0]
            m_e, s_e = unpack(y_e)
            _, ds_e = moment_field(fixed if fixed is not None else ctrl.layer_at(t_e), m_e, s_e)
            tr_e, dtr_e = float(np.trace(s_e)), float(np.trace(ds_e))
            remaining = tr_e / dtr_e if dtr_e > 0 else math.inf
            ts.append(np.array([t_e]))
            ys.append(y_e[None, :])
            if remaining <= 1e-6 * max(t_e, 1e-300) or remaining <= 1e-9:
                status, t_blow = Status.BLOWUP, t_e + remaining
                break
            if tr_e > 1e250:
                status = Status.OVERFLOW
                message = (
                    f"the covariance exceeded 1e250 at depth {t_e:g} without a finite-time "
                    "singularity (exponential growth); the trajectory stops there"
                )
                break
            seg_start, y, threshold = t_e, y_e, threshold * opts.blowup_factor
        if status is not Status.SUCCESS:
            break

    if status is Status.BLOWUP:
        message = f"finite-time blow-up at depth {t_blow:.12g}"
    t_all = np.concatenate(ts)
    y_all = np.concatenate(ys)
    # Drop duplicated depths at segment joins (keep the first: continuity of the state).
    keep = np.concatenate([[True], np.diff(t_all) > 0])
    t_all, y_all = t_all[keep], y_all[keep]
    means = y_all[:, :n_m]
    covs = y_all[:, n_m:][:, vech_index(d)[1]].reshape(-1, d, d)
    ranks = numerical_ranks(covs)
    stats = {"nfev": nfev, "seconds": time.perf_counter() - clock}
    return Trajectory(
        t=frozen(t_all),
        mean=frozen(means),
        cov=frozen(covs),
        rank=frozen(ranks),
        status=status,
        blowup_time=t_blow,
        stats=stats,
        message=message,
    )


def _endpoint(sol: Any, y: FloatArray) -> FloatArray:
    if sol.y.shape[1]:
        return np.asarray(sol.y[:, -1])
    return y


def simulate_discrete(
    model: Layer | Schedule,
    initial: Gaussian,
    T: float | None = None,
    *,
    steps_per_layer: int = 1,
) -> Trajectory:
    """Exact moments of a discrete residual stack ``x ← x + h v(x)`` (docs/theory.md §2).

    Each step maps ``m⁺ = m + h (M m + c)`` and ``Σ⁺ = (I + hM) Σ (I + hM)ᵀ``, exactly what the
    step does to a Gaussian (and to the first two moments of any law for affine fields). A layer
    with noise ``G`` takes the Euler–Maruyama step ``x⁺ = x + h v(x) + sqrt(h) G ξ``, which adds
    ``h G Gᵀ`` to ``Σ⁺``. With a
    :class:`Schedule` of ``L`` layers and ``steps_per_layer = 1`` this is a real L-layer network
    with residual step ``h = T/L``.

    Returns
    -------
    Trajectory
        Depths ``0, h, 2h, ...``; status ``"blowup"`` if the moments overflow (blow-up time is
        then the depth of the first non-finite step).
    """
    ctrl = as_control(model, T)
    steps = as_positive_int("steps_per_layer", steps_per_layer)
    d = _model_dim(ctrl)
    g0 = check_gaussian(initial, d)
    _check_exact(ctrl)
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    m, s = g0.mean.copy(), g0.cov.copy()
    ts, means, covs = [0.0], [m], [s]
    status, t_blow = Status.SUCCESS, math.inf
    eye = np.eye(d)
    clock = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(len(breaks) - 1):
            t0, t1 = breaks[k], breaks[k + 1]
            h = (t1 - t0) / steps
            for j in range(steps):
                t = t0 + j * h
                lay = ctrl.layer_at(t + 0.5 * h)
                m_mat, c = affine_velocity(lay, m, s)
                step = eye + h * m_mat
                m = m + h * (m_mat @ m + c)
                s = step @ s @ step.T
                if lay.noise is not None:  # Euler–Maruyama: x⁺ = x + h v(x) + sqrt(h) G ξ
                    s = s + h * (lay.noise @ lay.noise.T)
                s = 0.5 * (s + s.T)
                if not (np.all(np.isfinite(s)) and np.all(np.isfinite(m))):
                    status, t_blow = Status.BLOWUP, t + h
                    break
                ts.append(t + h if j < steps - 1 else t1)
                means.append(m)
                covs.append(s)
            if status is Status.BLOWUP:
                break
    cov_arr = np.array(covs)
    return Trajectory(
        t=frozen(np.array(ts)),
        mean=frozen(np.array(means)),
        cov=frozen(cov_arr),
        rank=frozen(numerical_ranks(cov_arr)),
        status=status,
        blowup_time=t_blow,
        stats={"steps": len(ts) - 1, "seconds": time.perf_counter() - clock},
        message=(
            f"the moments became non-finite at depth {t_blow:.12g}"
            if status is Status.BLOWUP
            else "recursion completed"
        ),
    )
