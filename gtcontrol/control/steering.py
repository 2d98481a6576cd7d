"""Finite-time steering of Gaussians by Transformers: reachability, closed forms, optimal controls.

With time-varying parameters the moment dynamics (docs/theory.md §2)

    dm/dt = M m + c,   dΣ/dt = M Σ + Σ Mᵀ,   M = A + Σ_h V_h Σ B_h,   c = b + Σ_h V_h m,

moves ``N(m0, Σ0)`` to any ``N(m1, Σ1)`` with ``rank Σ1 = rank Σ0`` in any time ``T > 0``
(Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5). This module turns the theorem into controls:

* :func:`is_reachable` / :func:`check_reachable`: the reachable sets of the three parameter modes
  (``"full"``, ``"ffn"``: ``V = 0``, ``"attention"``: ``A = 0, b = 0``), with the reason when a
  target is not reachable.
* :func:`ot_steering`: the Bures–Wasserstein geodesic, realized exactly by a time-varying affine
  feed-forward; its kinetic energy ``∫ E|v|² dt`` equals ``W2²/T``, the Benamou–Brenier lower bound
  for any steering in time ``T``.
* :func:`realize`: layer parameters in a given mode that produce a desired affine field at a state.
* :func:`exact_layer_steering`: an exact steering by ``L`` constant layers in every mode.
* :func:`steer`: optimal piecewise-constant parameters (IPOPT through CasADi, see
  :mod:`gtcontrol._ocp`), re-simulated and verified.
* :func:`kinetic_energy` and :func:`schedule_to_dict` (the JSON form of docs/designs.md).

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import scipy.linalg
from scipy.integrate import simpson

from .._linalg import FloatArray, psd_sqrt, sym
from .._status import Status
from .._validation import as_float_array, as_positive_float, as_positive_int, frozen
from ..errors import (
    InvalidGaussianError,
    InvalidParametersError,
    SolverError,
    UnreachableTargetError,
)
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, affine_velocity, simulate
from ..model.params import Control, Layer, Schedule, as_control

__all__ = [
    "MODES",
    "OTSteering",
    "SteerOptions",
    "SteeringResult",
    "check_reachable",
    "exact_layer_steering",
    "is_reachable",
    "kinetic_energy",
    "ot_steering",
    "realize",
    "schedule_to_dict",
    "steer",
]

#: Parameter modes: which layer parameters may be non-zero.
#: ``"full"``: ``A, b, V, B``; ``"ffn"``: ``A, b`` (``V = 0``); ``"attention"``: ``V, B``
#: (``A = 0``, ``b = 0``).
MODES = ("full", "ffn", "attention")

#: A mean whose norm is at most this fraction of the problem scale counts as zero in the
#: pure-attention reachability test (a zero mean is invariant there).
_ZERO_MEAN_RTOL = 1e-12


# ============================================================================ validation helpers
def _check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise InvalidParametersError(f"mode: expected one of {MODES}, got {mode!r}")
    return str(mode)


def _check_pair(initial: Any, target: Any) -> tuple[Gaussian, Gaussian]:
    for name, g in (("initial", initial), ("target", target)):
        if not isinstance(g, Gaussian):
            raise InvalidGaussianError(f"{name}: expected a Gaussian, got {type(g).__name__}")
    if initial.dim != target.dim:
        raise InvalidGaussianError(
            f"target: dimension {target.dim} does not match the initial dimension {initial.dim}"
        )
    return initial, target


def _scale(*gs: Gaussian) -> float:
    return max(
        [1.0]
        + [float(np.linalg.norm(g.mean)) for g in gs]
        + [math.sqrt(float(np.trace(g.cov))) for g in gs]
    )


def _is_zero_mean(g: Gaussian, scale: float) -> bool:
    return float(np.linalg.norm(g.mean)) <= _ZERO_MEAN_RTOL * scale


# ============================================================================ reachability
def _unreachable_reason(initial: Gaussian, target: Gaussian, mode: str) -> str | None:
    """Why ``target`` is not reachable from ``initial`` in ``mode``, or ``None`` if it is."""
    r0, r1 = initial.rank, target.rank
    if r0 != r1:
        return (
            f"target covariance has rank {r1} but the initial covariance has rank {r0}: "
            "every Transformer flow keeps the rank (Σ(t) = Φ(t) Σ0 Φ(t)ᵀ with Φ(t) invertible, "
            "docs/theory.md §2), so a rank change is unreachable in any mode and any time"
        )
    if mode != "attention":
        return None
    scale = _scale(initial, target)
    z0, z1 = _is_zero_mean(initial, scale), _is_zero_mean(target, scale)
    if z0 and not z1:
        return (
            "pure attention (A = 0, b = 0) keeps a zero mean at zero: dm/dt = V (I + Σ B) m, "
            f"so the target mean {target.mean.tolist()} is unreachable from mean 0"
        )
    if z1 and not z0:
        return (
            "pure attention (A = 0, b = 0) cannot bring a non-zero mean to zero in finite time: "
            "m(t) = Ψ(t) m0 with Ψ(t) invertible since dm/dt = V (I + Σ B) m is linear in m"
        )
    if initial.dim == 1 and not z0 and np.sign(initial.mean[0]) != np.sign(target.mean[0]):
        return (
            "in d = 1 pure attention (A = 0, b = 0) cannot change the sign of the mean "
            f"(dm/dt = v (1 + σ B) m): initial mean {initial.mean[0]:g}, "
            f"target mean {target.mean[0]:g}"
        )
    return None


def is_reachable(initial: Gaussian, target: Gaussian, mode: str = "full") -> bool:
    """Whether some time-varying Transformer moves ``initial`` to ``target`` in finite time.

    Reachable sets from ``N(m0, Σ0)`` in any time ``T > 0`` (Alcalde, Ji, Zuazua,
    arXiv:2606.07600 (2026), §5; proofs for the modes in docs/steering.md):

    * ``"full"`` and ``"ffn"`` (``V = 0``): every ``N(m1, Σ1)`` with ``rank Σ1 = rank Σ0``.
    * ``"attention"`` (``A = 0``, ``b = 0``): the same, and in addition ``m1 = 0`` exactly when
      ``m0 = 0`` (``dm/dt = V (I + ΣB) m`` is linear in ``m``), and in ``d = 1``
      ``sign m1 = sign m0``. Means below ``1e-12`` times the problem scale count as zero.

    Parameters
    ----------
    initial, target
        Gaussians of equal dimension (covariances may be singular).
    mode
        ``"full"``, ``"ffn"`` or ``"attention"``.

    Raises
    ------
    InvalidGaussianError
        If an argument is not a :class:`Gaussian` or the dimensions differ.
    InvalidParametersError
        On an unknown ``mode``.
    """
    _check_pair(initial, target)
    return _unreachable_reason(initial, target, _check_mode(mode)) is None


def check_reachable(initial: Gaussian, target: Gaussian, mode: str = "full") -> None:
    """Raise :class:`UnreachableTargetError` with the reason when ``target`` is unreachable.

    See :func:`is_reachable` for the reachable sets.
    """
    _check_pair(initial, target)
    reason = _unreachable_reason(initial, target, _check_mode(mode))
    if reason is not None:
        raise UnreachableTargetError(f"target unreachable in mode {mode!r}: {reason}")


# ============================================================================ the OT geodesic
def _range_basis(cov: FloatArray, rank: int) -> tuple[FloatArray, FloatArray]:
    """Orthonormal bases ``(U, Q)`` of the range and the kernel of a PSD matrix of ``rank``."""
    w, u = np.linalg.eigh(sym(cov))
    order = np.argsort(w)[::-1]
    u = u[:, order]
    return u[:, :rank], u[:, rank:]


def _ot_map(initial: Gaussian, target: Gaussian) -> tuple[FloatArray, FloatArray | None]:
    """The linear part of the optimal transport map and, for singular Σ0, a basis of its support.

    Non-singular Σ0: the Bures–Wasserstein map ``C = Σ0^{-1/2}(Σ0^{1/2}Σ1Σ0^{1/2})^{1/2}Σ0^{-1/2}``
    (symmetric positive definite), basis ``None``. Singular Σ0 (rank r = rank Σ1, ``0 < r < d``):
    the Procrustes map ``T = S1 Q S0⁺`` (``S_i = Σ_i^{1/2}``, ``Q = P Wᵀ`` from ``S1 S0 = P D Wᵀ``),
    which pushes ``N(0, Σ0)`` onto ``N(0, Σ1)`` and is optimal when ``rank D = r``; then
    ``⟨x, T x⟩ > 0`` on range Σ0, so ``(1 − s) I + s T`` is injective there for every
    ``s ∈ [0, 1]`` and the geodesic keeps the rank.
    """
    d = initial.dim
    r = initial.rank
    if r == 0:
        return np.eye(d), None
    s0 = initial.factor()
    if r == d:
        w, u = np.linalg.eigh(initial.cov)
        s0_inv = (u / np.sqrt(w)) @ u.T
        return sym(s0_inv @ psd_sqrt(s0 @ target.cov @ s0) @ s0_inv), None
    if not _general_position(initial, target):
        raise InvalidParametersError(
            "target: the supports of the two degenerate Gaussians are not in general position "
            f"(rank of Σ1^(1/2) Σ0^(1/2) is below the common rank {r}); the Bures–Wasserstein "
            "geodesic then changes rank, so no flow attains W2²/T. Use exact_layer_steering or "
            "steer, which pass through an intermediate Gaussian"
        )
    p, _, wt = np.linalg.svd(target.factor() @ s0)
    u0, _ = _range_basis(initial.cov, r)
    w0 = np.sort(np.linalg.eigvalsh(initial.cov))[::-1][:r]
    s0_pinv = (u0 / np.sqrt(w0)) @ u0.T
    return target.factor() @ (p @ wt) @ s0_pinv, u0


def _pinv_cols(x: FloatArray) -> FloatArray:
    """Pseudo-inverse ``(xᵀx)⁻¹ xᵀ`` of a matrix with independent columns."""
    return np.asarray(np.linalg.solve(x.T @ x, x.T), dtype=float)


@dataclass(frozen=True, eq=False)
class OTSteering:
    """The Bures–Wasserstein geodesic from ``initial`` to ``target`` as a time-varying control.

    With ``s = t/T``, ``G(s) = (1 − s) I + s C`` (``C`` the optimal transport map, see
    :func:`ot_steering`), ``m(s) = (1 − s) m0 + s m1``, the layer at depth ``t`` is the affine
    feed-forward ``A(t) = (C − I) G(s)⁻¹ / T``, ``b(t) = (m1 − m0)/T − A(t) m(s)`` (``V = 0``):
    every token moves on a straight line at constant speed, ``x(t) = G(s) (x0 − m0) + m(s)``. For a
    singular Σ0 with support basis ``U0``, ``G(s)⁻¹`` is replaced by ``U0 (G(s) U0)⁺``: the field
    is what moves the support and vanishes on its orthogonal complement.

    Attributes
    ----------
    initial, target
        The end points.
    T
        Horizon.
    transport_map
        ``C`` (read-only; for singular Σ0 the Procrustes map, zero on ker Σ0).
    support_basis
        ``None``, or for singular Σ0 an orthonormal basis ``U0`` of range Σ0.
    """

    initial: Gaussian
    target: Gaussian
    T: float
    transport_map: FloatArray = field(repr=False)
    support_basis: FloatArray | None = field(default=None, repr=False)

    @property
    def breakpoints(self) -> FloatArray:
        """``[0, T]``: the control is smooth in between."""
        return frozen(np.array([0.0, self.T]))

    @property
    def dim(self) -> int:
        return self.initial.dim

    def _s(self, t: float) -> float:
        return min(max(float(t) / self.T, 0.0), 1.0)

    def _g(self, s: float) -> FloatArray:
        return (1.0 - s) * np.eye(self.dim) + s * self.transport_map

    def mean_at(self, t: float) -> FloatArray:
        """Mean ``m(t) = (1 − s) m0 + s m1`` on the geodesic."""
        s = self._s(t)
        return (1.0 - s) * self.initial.mean + s * self.target.mean

    def cov_at(self, t: float) -> FloatArray:
        """Covariance ``Σ(t) = G(s) Σ0 G(s)ᵀ`` on the geodesic."""
        g = self._g(self._s(t))
        return sym(g @ self.initial.cov @ g.T)

    def state_at(self, t: float) -> Gaussian:
        """The Gaussian on the geodesic at depth ``t``."""
        return Gaussian(self.mean_at(t), self.cov_at(t))

    def field_at(self, t: float) -> tuple[FloatArray, FloatArray]:
        """The affine field ``(M(t), c(t))`` of the geodesic (``M = A``, ``c = b``)."""
        g = self._g(self._s(t))
        k = self.transport_map - np.eye(self.dim)
        if self.support_basis is None:
            a = np.linalg.solve(g.T, k.T).T / self.T
        else:
            u0 = self.support_basis
            a = k @ u0 @ _pinv_cols(g @ u0) / self.T
        u = (self.target.mean - self.initial.mean) / self.T
        return np.asarray(a, dtype=float), u - a @ self.mean_at(t)

    def layer_at(self, t: float) -> Layer:
        """The affine feed-forward layer ``(A(t), b(t))`` active at depth ``t``."""
        a, b = self.field_at(t)
        return Layer(A=a, b=b)

    @property
    def kinetic_energy(self) -> float:
        """``∫₀ᵀ E|v|² dt = (|m1 − m0|² + tr((T̃ − I) Σ0 (T̃ − I)ᵀ)) / T`` (constant speed)."""
        k = self.transport_map - np.eye(self.dim)
        dm = self.target.mean - self.initial.mean
        return float(dm @ dm + np.trace(k @ self.initial.cov @ k.T)) / self.T

    @property
    def lower_bound(self) -> float:
        """``W2²(initial, target) / T``: the Benamou–Brenier bound, attained by this control."""
        return self.initial.bures_wasserstein(self.target) ** 2 / self.T


def ot_steering(initial: Gaussian, target: Gaussian, T: float = 1.0) -> OTSteering:
    """The closed-form minimum-energy steering: the Bures–Wasserstein geodesic.

    Every steering of ``N(m0, Σ0)`` to ``N(m1, Σ1)`` in time ``T`` has kinetic energy
    ``∫₀ᵀ E|v|² dt ≥ W2²/T`` (Benamou–Brenier), with
    ``W2² = |m0 − m1|² + tr(Σ0 + Σ1 − 2 (Σ0^{1/2} Σ1 Σ0^{1/2})^{1/2})``. The geodesic attains it and
    is realized exactly by the time-varying affine feed-forward (``V = 0``)

        A(t) = (C − I) G(s)⁻¹ / T,   b(t) = (m1 − m0)/T − A(t) m(s),   s = t/T,

    ``C = Σ0^{-1/2}(Σ0^{1/2} Σ1 Σ0^{1/2})^{1/2} Σ0^{-1/2}``, ``G(s) = (1 − s) I + s C``,
    ``m(s) = (1 − s) m0 + s m1`` (docs/steering.md). For a singular Σ0 (same rank as Σ1) ``C`` is
    replaced by the Procrustes transport map and ``G(s)⁻¹`` by a pseudo-inverse on the support
    (see :class:`OTSteering`).

    Parameters
    ----------
    initial, target
        Gaussians of equal dimension and equal covariance rank.
    T
        Horizon, positive.

    Returns
    -------
    OTSteering
        A control (``.T``, ``.breakpoints``, ``.layer_at(t)``) with ``.mean_at``, ``.cov_at``,
        ``.kinetic_energy`` (``= W2²/T``) and ``.lower_bound``.

    Raises
    ------
    UnreachableTargetError
        If the ranks differ.
    InvalidParametersError
        For degenerate Gaussians whose supports are not in general position
        (``rank Σ1^{1/2} Σ0^{1/2} < rank Σ0``): the geodesic changes rank there and the bound is
        not attained by any flow.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
    """
    check_reachable(initial, target, "ffn")
    t_hor = as_positive_float("T", T)
    t_map, basis = _ot_map(initial, target)
    return OTSteering(initial, target, t_hor, frozen(t_map), basis)


# ============================================================================ kinetic energy
def _segment_layers(ctrl: Control, t0: float, t1: float) -> Any:
    """A function ``t -> Layer`` valid on ``[t0, t1]`` (the segment's layer if piecewise)."""
    if getattr(ctrl, "piecewise_constant", False):
        fixed = ctrl.layer_at(0.5 * (t0 + t1))
        return lambda t: fixed
    return ctrl.layer_at


def kinetic_energy(
    control: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    n_points: int = 4001,
) -> float:
    """Kinetic energy ``∫₀ᵀ E|v|² dt`` of a control started at ``initial``.

    For ``N(m, Σ)`` under ``v(x) = M x + c``, ``E|v|² = tr(M Σ Mᵀ) + |M m + c|²`` (steering.md).
    The moments come from :func:`gtcontrol.moments.simulate` (adaptive, ``rtol = 1e-11``) recorded
    on about ``n_points`` depths; the integral is Simpson's rule on every segment between
    breakpoints (the integrand is smooth there), accurate to about ``1e-10`` relative with the
    default.

    Raises
    ------
    SolverError
        If the moments blow up before ``T`` (the energy is then infinite).
    """
    ctrl = as_control(control, T)
    n = as_positive_int("n_points", n_points)
    traj = simulate(ctrl, initial, n_points=n)
    if traj.status is not Status.SUCCESS:
        raise SolverError(
            f"kinetic_energy: the moments blow up at depth {traj.blowup_time:g}",
            status="blowup",
            stats={"blowup_time": traj.blowup_time},
        )
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    total = 0.0
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        idx = np.flatnonzero((traj.t >= t0 - 1e-14 * max(t1, 1.0)) & (traj.t <= t1 + 1e-14))
        layer_of = _segment_layers(ctrl, t0, t1)
        vals = np.empty(len(idx))
        for j, i in enumerate(idx):
            m, s = traj.mean[i], traj.cov[i]
            mm, c = affine_velocity(layer_of(float(traj.t[i])), m, s)
            u = mm @ m + c
            vals[j] = float(np.sum((mm @ s) * mm) + u @ u)
        total += float(simpson(vals, x=traj.t[idx]))
    return total


# ============================================================================ realization
def _rotation_plane(u: FloatArray, w: FloatArray) -> tuple[float, FloatArray]:
    """Angle ``θ ∈ [0, π]`` and unit ``e ⊥ u`` with ``w = cos θ u + sin θ e`` (unit u, w; d ≥ 2).

    For ``w = ±u`` the plane is spanned by ``u`` and the coordinate axis least aligned with it.
    """
    cos = float(np.clip(u @ w, -1.0, 1.0))
    perp = w - cos * u
    if float(np.linalg.norm(perp)) < 1e-12:
        e = np.zeros(u.shape[0])
        e[int(np.argmin(np.abs(u)))] = 1.0
        perp = e - (e @ u) * u
    return math.acos(cos), perp / np.linalg.norm(perp)


def _rotation_to(u: FloatArray, w: FloatArray) -> FloatArray:
    """The rotation in the plane of the unit vectors ``u, w`` taking ``u`` to ``w``.

    In ``d = 1`` it is ``sign(u w)``.
    """
    if u.shape[0] == 1:
        return np.array([[1.0 if u[0] * w[0] > 0 else -1.0]])
    theta, e = _rotation_plane(u, w)
    # I + (cos θ − 1)(u uᵀ + e eᵀ) + sin θ (e uᵀ − u eᵀ).
    return (
        np.eye(u.shape[0])
        + (math.cos(theta) - 1.0) * (np.outer(u, u) + np.outer(e, e))
        + math.sin(theta) * (np.outer(e, u) - np.outer(u, e))
    )


def _realize_attention(m_mat: FloatArray, c: FloatArray, state: Gaussian) -> Layer:
    d = state.dim
    if state.rank < d:
        raise InvalidParametersError(
            "state.cov: attention-mode realization needs a non-singular covariance "
            f"(rank {state.rank} < {d}): the field V Σ B then has rank at most {state.rank}"
        )
    m = state.mean
    m_norm, c_norm = float(np.linalg.norm(m)), float(np.linalg.norm(c))
    m_scale = float(np.linalg.norm(m_mat, 2))
    sigma_inv = np.linalg.inv(state.cov)
    if m_norm <= _ZERO_MEAN_RTOL * _scale(state):
        if c_norm > _ZERO_MEAN_RTOL * (m_scale * _scale(state) + 1.0):
            raise InvalidParametersError(
                f"c: pure attention gives c = V m = 0 at a zero mean, got c = {c.tolist()}"
            )
        v = np.eye(d)
    else:
        if c_norm <= 1e-2 * m_scale * m_norm:
            if m_scale == 0.0:
                return Layer(V=np.zeros((d, d)), B=np.zeros((d, d)))
            if d == 1:
                raise InvalidParametersError(
                    "c: in d = 1 pure attention needs c = v m ≠ 0 to realize M ≠ 0 at a "
                    f"non-zero mean (M = {m_mat[0, 0]:g}, c = {c[0]:g})"
                )
            # Gauge: M + S Σ⁻¹ (S skew) gives the same dΣ; keeping M m + c shifts c by
            # −S Σ⁻¹ m, any vector orthogonal to y = Σ⁻¹ m. Shift by |M| |m| so that V is O(|M|).
            y = sigma_inv @ m
            e = np.zeros(d)
            e[int(np.argmin(np.abs(y)))] = 1.0
            z = e - (e @ y) / (y @ y) * y
            z /= np.linalg.norm(z)
            skew = (m_scale * m_norm / (y @ y)) * (np.outer(z, y) - np.outer(y, z))
            m_mat = m_mat + skew @ sigma_inv
            c = c - skew @ y
            c_norm = float(np.linalg.norm(c))
        v = (c_norm / m_norm) * _rotation_to(m / m_norm, c / c_norm)
    b = sigma_inv @ np.linalg.solve(v, m_mat)
    return Layer(V=v, B=b)


def _min_norm_split(
    m_mat: FloatArray, c: FloatArray, m: FloatArray, cov: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``(V, B)`` minimizing ``F = |M − VΣB|² + |c − Vm|² + |V|² + |B|²`` (a local minimizer).

    Alternating exact minimization (each step is a ridge regression, so ``F`` never increases):
    ``B ← ((VΣ)ᵀ(VΣ) + I)⁻¹ (VΣ)ᵀ M``, ``V ← (M BᵀΣ + c mᵀ)(ΣB BᵀΣ + m mᵀ + I)⁻¹``. Start: with
    ``Σ ≈ λ I`` and no mean term the problem is ``|M − Z|² + (2/λ)|Z|_*`` over ``Z = λ V B``,
    solved by soft-thresholding the singular values of ``M`` at ``1/λ``; ``V = B = 0`` (always a
    stationary point) is kept when it is no worse.
    """
    d = m.shape[0]
    eye = np.eye(d)

    def objective(v: Any, b: Any) -> float:
        r = m_mat - v @ cov @ b
        rb = c - v @ m
        return float(np.sum(r**2) + rb @ rb + np.sum(v**2) + np.sum(b**2))

    lam = max(float(np.trace(cov)) / d, 1e-300)
    u, sv, wt = np.linalg.svd(m_mat)
    g = np.sqrt(np.clip(sv - 1.0 / lam, 0.0, None) / lam)
    if not np.any(g):
        g[0] = 0.5 * math.sqrt(sv[0] / lam)  # leave the saddle at 0 along the top pair
    v, b = u * g, g[:, None] * wt
    f_old = objective(v, b)
    for _ in range(2000):
        vs = v @ cov
        b = np.linalg.solve(vs.T @ vs + eye, vs.T @ m_mat)
        sb = cov @ b
        v = np.linalg.solve(sb @ sb.T + np.outer(m, m) + eye, (m_mat @ sb.T + np.outer(c, m)).T).T
        f_new = objective(v, b)
        if f_old - f_new <= 1e-13 * max(f_new, 1e-300):
            break
        f_old = f_new
    if objective(v, b) >= objective(np.zeros((d, d)), np.zeros((d, d))):
        return np.zeros((d, d)), np.zeros((d, d))
    return v, b


def realize(M: Any, c: Any, state: Gaussian, mode: str = "full") -> Layer:
    """Layer parameters in ``mode`` whose affine field at ``state = N(m, Σ)`` is ``x ↦ M x + c``.

    A layer acts on ``N(m, Σ)`` through ``M = A + V Σ B`` and ``c = b + V m`` (docs/theory.md §2):

    * ``"ffn"``: ``A = M``, ``b = c``, ``V = B = 0``.
    * ``"attention"`` (``A = 0``, ``b = 0``): ``V = (|c|/|m|) R`` with ``R`` the rotation taking
      ``m/|m|`` to ``c/|c|`` (so ``V m = c``), then ``B = Σ⁻¹ V⁻¹ M``. Needs Σ ≻ 0 and ``c = 0``
      exactly when ``m = 0``. When ``c ≈ 0`` at ``m ≠ 0`` (``d ≥ 2``) the field is changed in a
      gauge that leaves the moment velocity unchanged: ``M + S Σ⁻¹``, ``c − S Σ⁻¹ m`` with
      ``S`` skew (``dΣ`` and ``dm`` are the same), so the layer's ``(dm/dt, dΣ/dt)`` equals the
      requested one.
    * ``"full"``: the minimum-norm split, ``(V, B)`` minimizing
      ``|A|² + |b|² + |V|² + |B|²`` subject to ``A + V Σ B = M``, ``b + V m = c`` (a local minimizer
      by alternating ridge regressions from a singular-value-thresholding start; ``V = B = 0``
      when that is no worse).

    Parameters
    ----------
    M, c
        The affine field, shapes ``(d, d)`` and ``(d,)``.
    state
        The Gaussian at which the field is realized.
    mode
        ``"full"``, ``"ffn"`` or ``"attention"``.

    Returns
    -------
    Layer
        One single-head layer. Its :func:`gtcontrol.moments.moment_field` at ``state`` equals
        ``(M m + c, M Σ + Σ Mᵀ)``.

    Raises
    ------
    InvalidParametersError
        On malformed input, or when pure attention cannot realize the field at this state
        (singular Σ, ``c ≠ 0`` at ``m = 0``, or ``c = 0 ≠ M`` at ``m ≠ 0`` in ``d = 1``).

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
    """
    if not isinstance(state, Gaussian):
        raise InvalidGaussianError(f"state: expected a Gaussian, got {type(state).__name__}")
    d = state.dim
    mm = as_float_array("M", M, ndim=2, shape=(d, d))
    cc = as_float_array("c", c, ndim=1, shape=(d,))
    mode = _check_mode(mode)
    if mode == "ffn":
        return Layer(A=mm, b=cc)
    if mode == "attention":
        return _realize_attention(mm, cc, state)
    v, b_mat = _min_norm_split(mm, cc, state.mean, state.cov)
    return Layer(A=mm - v @ state.cov @ b_mat, b=cc - v @ state.mean, V=v, B=b_mat)


# ======================================================================= exact L-layer steering
def _grassmann_midpoint(initial: Gaussian, target: Gaussian) -> Gaussian:
    """A Gaussian whose support is in general position with both degenerate end points.

    Its range is the midpoint of the Grassmann geodesic between the two ranges (principal
    angles halved, so all are below π/2 with each end), its covariance eigenvalues the geometric
    means of the two spectra, its mean the midpoint.
    """
    r = initial.rank
    u0, _ = _range_basis(initial.cov, r)
    u1, _ = _range_basis(target.cov, r)
    y, cos, zt = np.linalg.svd(u0.T @ u1)
    cos = np.clip(cos, -1.0, 1.0)
    theta = np.arccos(cos)
    a = u0 @ y
    resid = u1 @ zt.T - a * cos
    tilde = np.zeros_like(resid)
    for i in range(r):
        n = float(np.linalg.norm(resid[:, i]))
        if n > 1e-12:
            tilde[:, i] = resid[:, i] / n
    u_mid = a * np.cos(theta / 2) + tilde * np.sin(theta / 2)
    w0 = np.sort(np.linalg.eigvalsh(initial.cov))[::-1][:r]
    w1 = np.sort(np.linalg.eigvalsh(target.cov))[::-1][:r]
    cov = (u_mid * np.sqrt(w0 * w1)) @ u_mid.T
    return Gaussian(0.5 * (initial.mean + target.mean), sym(cov))


def _general_position(initial: Gaussian, target: Gaussian) -> bool:
    r = initial.rank
    if r in (0, initial.dim):
        return True
    dvals = np.linalg.svd(target.factor() @ initial.factor(), compute_uv=False)
    return bool(dvals[r - 1] > 1e-9 * max(dvals[0], np.finfo(float).tiny))


def _real_log(c: FloatArray) -> FloatArray:
    """Principal real logarithm of a matrix with no eigenvalue on the closed negative axis."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # accuracy is checked below instead
        log_c = scipy.linalg.logm(c)
    scale = max(1.0, float(np.max(np.abs(log_c))))
    if np.iscomplexobj(log_c):
        if float(np.max(np.abs(np.imag(log_c)))) > 1e-10 * scale:
            raise SolverError(
                "exact_layer_steering: a layer transport map has no real logarithm; "
                "use more layers",
                status="logm",
            )
        log_c = np.real(log_c)
    err = float(np.linalg.norm(scipy.linalg.expm(log_c) - c, 1) / np.linalg.norm(c, 1))
    if err > 1e-10:
        raise SolverError(
            f"exact_layer_steering: matrix logarithm inaccurate (relative error {err:.2g})",
            status="logm",
        )
    return np.asarray(log_c, dtype=float)


def _ffn_layers(geo: OTSteering, n: int, means: FloatArray | None = None) -> list[Layer]:
    """``n`` constant affine layers of duration ``h = T/n`` following ``geo`` exactly at the nodes.

    Layer k uses ``M_k = log(C_k)/h`` with ``C_k = G(s_{k+1}) G(s_k)⁻¹``, the transport map from
    node k to node k+1, and ``c_k`` from ``m_{k+1} = e^{M_k h} m_k + (∫₀ʰ e^{M_k s} ds) c_k``. For
    Σ0 ≻ 0, ``C_k`` is a rational function of the SPD map ``C`` (eigenvalues
    ``g_{k+1}/g_k > 0``), so ``M_k`` is real symmetric in closed form. For a singular Σ0, ``C_k`` is
    ``G_{k+1} U0 (G_k U0)⁺`` on the support, extended by the projection onto the next support's
    complement (close to the identity for small steps), with a principal real logarithm.
    ``means`` (``n + 1`` nodes) replaces the geodesic's straight mean path.
    """
    d = geo.dim
    h = geo.T / n
    basis = geo.support_basis
    if basis is None:
        gam, u = np.linalg.eigh(geo.transport_map)
    layers = []
    for k in range(n):
        s0, s1 = k / n, (k + 1) / n
        if basis is None:
            g0, g1 = (1 - s0) + s0 * gam, (1 - s1) + s1 * gam
            m_k = (u * (np.log(g1 / g0) / h)) @ u.T
        else:
            gu0, gu1 = geo._g(s0) @ basis, geo._g(s1) @ basis
            p0 = gu0 @ _pinv_cols(gu0)
            p1 = gu1 @ _pinv_cols(gu1)
            c_k = gu1 @ _pinv_cols(gu0) + (np.eye(d) - p1) @ (np.eye(d) - p0)
            m_k = _real_log(c_k) / h
        block = np.zeros((2 * d, 2 * d))
        block[:d, :d] = m_k * h
        block[:d, d:] = np.eye(d) * h
        e = scipy.linalg.expm(block)
        if means is None:
            m_a, m_b = geo.mean_at(s0 * geo.T), geo.mean_at(s1 * geo.T)
        else:  # any sequence of mean nodes (the covariance still follows the geodesic)
            m_a, m_b = means[k], means[k + 1]
        shift = np.linalg.solve(e[:d, d:], m_b - e[:d, :d] @ m_a)
        layers.append(Layer(A=m_k, b=shift))
    return layers


def _mean_layer(m_a: FloatArray, m_b: FloatArray, h: float) -> Layer:
    """A pure-attention layer with ``B = 0`` (Σ frozen, ``dm/dt = V m``) taking ``m_a`` to ``m_b``.

    ``V = (ln ρ I + θ J)/h`` with ``ρ = |m_b|/|m_a|`` and ``J`` the rotation generator in the plane
    of ``m_a, m_b`` (angle θ), so ``e^{Vh} m_a = m_b`` exactly (same sign in ``d = 1``).
    """
    d = m_a.shape[0]
    rho = math.log(float(np.linalg.norm(m_b)) / float(np.linalg.norm(m_a)))
    if d == 1:
        return Layer(V=np.array([[rho / h]]), B=np.zeros((1, 1)))
    u = m_a / np.linalg.norm(m_a)
    theta, e = _rotation_plane(u, m_b / np.linalg.norm(m_b))
    v = (rho * np.eye(d) + theta * (np.outer(e, u) - np.outer(u, e))) / h
    return Layer(V=v, B=np.zeros((d, d)))


def _attention_layers(initial: Gaussian, target: Gaussian, T: float, n: int) -> list[Layer]:
    """Exact pure-attention steering by ``n`` constant layers (Σ1 with the range of Σ0).

    Covariance phase (``n − 1`` layers, all ``n`` if ``m0 = 0``): ``V = v I``, ``B = −R/(2v)`` with
    ``R`` symmetric makes ``dΣ/dt = −Σ R Σ``, i.e. ``d(Σ⁻¹)/dt = R``: the precision moves on the
    straight line from ``Σ0⁻¹`` to ``Σ1⁻¹`` (positive definite throughout). For a singular Σ0
    the same holds on its range ``U0`` (``Σ̃ = U0ᵀΣU0``, ``R = U0 R̃ U0ᵀ``), which stays fixed, so
    Σ1 must have the same range. The mean follows the linear ODE ``dm/dt = v(I + ΣB) m``
    (integrated by :func:`gtcontrol.moments.simulate`; it never reaches 0), along which
    ``q(m) = (U0ᵀm)ᵀ Σ̃⁻¹ (U0ᵀm) + |(I − U0U0ᵀ) m|²`` grows like ``e^{2vt}``: ``v`` is the rate that
    brings ``q`` to the target's, but at least ``1/T_cov`` in magnitude (a small ``v`` makes
    ``B = −R/(2v)`` large). With ``m0 = 0``, ``v = (|R|_F/2)^{1/2} d^{-1/4}`` balances
    ``|V|_F = |B|_F``. Mean phase (last layer): :func:`_mean_layer`.
    """
    d = initial.dim
    h = T / n
    zero = _is_zero_mean(initial, _scale(initial, target))
    r = initial.rank
    if r == 0:  # Σ0 = Σ1 = 0: only the mean moves, dm/dt = V m with B = 0
        if zero:
            return [Layer(V=np.zeros((d, d)), B=np.zeros((d, d)))] * n
        return [_mean_layer(initial.mean, target.mean, T)] * n
    u0, _ = _range_basis(initial.cov, r)
    p0 = u0 @ u0.T
    leak = float(np.linalg.norm(target.cov - p0 @ target.cov @ p0))
    if leak > 1e-9 * float(np.linalg.norm(target.cov)):
        raise InvalidParametersError(
            "target.cov: the constructive attention-mode steering of a singular covariance "
            "keeps its range (V = vI), and the target's range differs; "
            "steer(..., mode='attention') tries numerically"
        )
    n_cov = n if zero else n - 1
    if n_cov == 0:
        raise InvalidParametersError(
            "layers: attention-mode constructive steering with a non-zero mean needs at least "
            "2 layers (covariance phase, then mean phase)"
        )
    om0 = np.linalg.inv(sym(u0.T @ initial.cov @ u0))
    om1 = np.linalg.inv(sym(u0.T @ target.cov @ u0))
    t_cov = n_cov * h
    r_mat = u0 @ sym(om1 - om0) @ u0.T / t_cov
    r_norm = float(np.linalg.norm(r_mat))
    if r_norm == 0.0:
        cov_layer = Layer(V=np.zeros((d, d)), B=np.zeros((d, d)))
    else:
        v = math.sqrt(r_norm / 2.0) / d**0.25
        if not zero:

            def q(m: FloatArray, om: Any) -> float:
                y = u0.T @ m
                k = m - u0 @ y
                return float(y @ om @ y + k @ k)

            needed = 0.5 * math.log(q(target.mean, om1) / q(initial.mean, om0)) / t_cov
            # |v| below 1/T_cov would make B = −R/(2v) large and the layer stiff; then q
            # overshoots by at most e² and the mean layer corrects it.
            v = needed if abs(needed) * t_cov >= 1.0 else math.copysign(1.0 / t_cov, needed)
        cov_layer = Layer(V=v * np.eye(d), B=-r_mat / (2.0 * v))
    layers = [cov_layer] * n_cov
    if zero:
        return layers
    m_a = simulate(Schedule(layers, t_cov), initial, n_points=2).final.mean
    return [*layers, _mean_layer(m_a, target.mean, h)]


def exact_layer_steering(
    initial: Gaussian,
    target: Gaussian,
    T: float = 1.0,
    layers: int = 10,
    mode: str = "full",
) -> Schedule:
    """An ``L``-layer Transformer (constant parameters per layer) that steers exactly.

    ``"ffn"`` and ``"full"`` (``V = 0`` suffices: ``A`` alone realizes any constant field): the
    geodesic of :func:`ot_steering` sampled at ``t_k = kT/L``; layer k uses the constant field
    ``M_k = log(C_k)/h``, ``h = T/L``, with ``C_k`` the transport map from node k to node k+1
    (symmetric positive definite for Σ0 ≻ 0, so the logarithm is real), hence ``e^{M_k h} = C_k``
    and ``Σ_{k+1} = C_k Σ_k C_kᵀ``; the constant shift ``c_k`` solves
    ``m_{k+1} = e^{M_k h} m_k + (∫₀ʰ e^{M_k s} ds) c_k`` (steering.md). The kinetic energy tends
    to ``W2²/T`` as ``L`` grows. Degenerate end points whose supports are not in general position
    go through an intermediate Gaussian (:func:`ot_steering` refuses them), with ``⌊L/2⌋`` layers
    per leg (``L ≥ 2``).

    ``"attention"`` (``A = 0``, ``b = 0``): a covariance phase in which ``V = v I`` makes the
    precision ``Σ⁻¹`` move linearly, then one mean layer with ``B = 0`` (``e^{Vh}`` a scaled
    rotation), see docs/steering.md. Needs ``L ≥ 2`` unless ``m0 = 0``, and for a singular Σ0
    a target covariance with the same range.

    Returns
    -------
    Schedule
        ``L`` layers over depth ``T``; :func:`gtcontrol.moments.simulate` reaches ``target`` to
        integration accuracy.

    Raises
    ------
    UnreachableTargetError
        If the target is not reachable in ``mode`` (see :func:`is_reachable`).
    InvalidParametersError
        On malformed input or a case listed above that needs more layers or a target with the
        range of a singular Σ0.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
    """
    mode = _check_mode(mode)
    check_reachable(initial, target, mode)
    t_hor = as_positive_float("T", T)
    n = as_positive_int("layers", layers)
    if mode == "attention":
        return Schedule(_attention_layers(initial, target, t_hor, n), t_hor)
    if _general_position(initial, target):
        return Schedule(_ffn_layers(ot_steering(initial, target, t_hor), n), t_hor)
    if n < 2:
        raise InvalidParametersError(
            "layers: degenerate end points whose supports are not in general position need at "
            "least 2 layers (one leg to an intermediate Gaussian, one from it)"
        )
    mid = _grassmann_midpoint(initial, target)
    n1 = n // 2
    h = t_hor / n
    first = _ffn_layers(ot_steering(initial, mid, n1 * h), n1)
    second = _ffn_layers(ot_steering(mid, target, (n - n1) * h), n - n1)
    return Schedule([*first, *second], t_hor)


# ============================================================================ optimal steering
_OBJECTIVES = ("kinetic", "parameter")
_TERMINALS = ("exact", "bw", "kl")
_REDUNDANCY = ("fixed", "joint")
_PARALLEL = ("serial", "thread", "openmp")


def _frozen_bounds(name: str, value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise InvalidParametersError(f"{name}: expected a mapping of parameter name to bound")
    out: dict[str, float] = {}
    for key, bound in value.items():
        if key not in ("A", "b", "V", "B"):
            raise InvalidParametersError(
                f"{name}: unknown parameter {key!r}; expected 'A', 'b', 'V' or 'B'"
            )
        out[key] = as_positive_float(f"{name}[{key!r}]", bound, allow_inf=True)
    return MappingProxyType(out)


@dataclass(frozen=True, kw_only=True)
class SteerOptions:
    """Options of :func:`steer` (validated when built).

    Attributes
    ----------
    objective
        ``"kinetic"``: ``∫₀ᵀ E|v|² dt`` (bounded below by ``W2²/T``); ``"parameter"``: the depth-
        integrated parameter energy ``Σ_k h (|A_k|² + |b_k|² + |V_k|² + |B_k|²)``, ``h = T/L``.
    terminal
        ``"exact"``: equality constraints ``m(T) = m1``, ``Σ(T) = Σ1`` (for a rank-r target in the
        reduced form ``U1ᵀ(Σ − Σ1)U1 = 0``, ``Q1ᵀ(Σ − Σ1)U1 = 0``); ``"bw"``: penalty
        ``terminal_weight · W2²(N(T), target)``; ``"kl"``: penalty
        ``terminal_weight · KL(N(T) ‖ target)`` (needs non-singular Σ0 and Σ1).
    terminal_weight
        Weight of a terminal penalty.
    redundancy
        How ``mode="full"`` treats the flat directions (``A`` and ``V Σ B`` enter only through
        their sum): ``"fixed"`` eliminates them: ``V_k, B_k`` are held at a gauge and only
        ``A_k, b_k`` are optimized (they span every constant field, so nothing is lost for
        reachability). Two gauges are solved and the lower energy is returned: the
        curvature-matched attention of the closed form (``V Σ(t) B`` then reproduces the
        geodesic's field variation ``dM/dt = −M²`` inside each layer) and ``V = B = 0``; so the
        result is never worse than the ``"ffn"`` optimum. ``"joint"`` optimizes all four with the
        Tikhonov term below, from the minimum-norm split (many more iterations; it can use the
        within-layer variation of ``V Σ(t) B`` freely and usually reaches the lowest energy).
        ``None``: ``"fixed"`` for the kinetic objective, ``"joint"`` for the parameter objective
        (which is itself strictly convex along the flat directions).
    regularization
        Weight ε of ``ε Σ_k h |θ_k|²`` added to the kinetic objective over the optimized
        parameters: it gives the flat directions curvature ``2εh``. The reported ``cost`` excludes
        it; near a non-degenerate kinetic minimizer it raises the energy only at second order in
        ε. ``None``: ``1e-4``, or ``1e-3`` in attention mode with a singular Σ0 (there the rows of
        ``B`` acting on ker Σ are exactly flat and a weaker curvature stalls IPOPT).
    entry_bounds, norm_bounds
        Per parameter name (``"A"``, ``"b"``, ``"V"``, ``"B"``): a bound on the absolute value of
        every entry, or on the Frobenius norm of each layer's matrix. Only optimized parameters
        may be bounded.
    cov_bound
        Bound on ``|Σ(t)|_F``, imposed at every collocation point (the re-simulated maximum is
        reported in ``stats["cov_norm_max"]``).
    intervals
        Collocation intervals per layer (Gauss–Legendre, degree 3, order 6).
    max_corrections
        Discretization corrections: after each solve the control is re-simulated with
        :func:`gtcontrol.moments.simulate`, and the NLP's terminal data are shifted by the
        re-simulated terminal miss (exact terminal only) before re-solving from the last iterate.
    terminal_tol
        ``success`` requires the re-simulated terminal Bures–Wasserstein error to be at most this.
    max_iter, ipopt_options
        IPOPT iteration limit and extra options (names with or without the ``ipopt.`` prefix).
    parallelization
        CasADi ``map`` evaluation of the layers: ``"serial"``, ``"thread"`` or ``"openmp"``.
    initial_guess
        A :class:`Schedule` of ``L`` single-head layers to start from instead of the closed form.
    verify_tokens, seed
        When positive, also move that many tokens sampled from ``initial`` (seeded) through the
        control with the token-level simulator; the terminal error of their empirical Gaussian is
        reported in ``stats["token_terminal_error"]`` (a finite-N check: it is ``O(N^{-1/2})``).
    cache
        Reuse the symbolic NLP of an earlier call with the same structure.
    """

    objective: str = "kinetic"
    terminal: str = "exact"
    terminal_weight: float = 1e4
    redundancy: str | None = None
    regularization: float | None = None
    entry_bounds: Mapping[str, float] = field(default_factory=dict)
    norm_bounds: Mapping[str, float] = field(default_factory=dict)
    cov_bound: float | None = None
    intervals: int = 1
    max_corrections: int = 3
    terminal_tol: float = 1e-6
    max_iter: int = 500
    ipopt_options: Mapping[str, Any] = field(default_factory=dict)
    parallelization: str = "serial"
    initial_guess: Schedule | None = None
    verify_tokens: int = 0
    seed: int = 0
    cache: bool = True

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("objective", self.objective, _OBJECTIVES),
            ("terminal", self.terminal, _TERMINALS),
            ("parallelization", self.parallelization, _PARALLEL),
        ):
            if value not in allowed:
                raise InvalidParametersError(f"{name}: expected one of {allowed}, got {value!r}")
        if self.redundancy is not None and self.redundancy not in _REDUNDANCY:
            raise InvalidParametersError(
                f"redundancy: expected one of {_REDUNDANCY} or None, got {self.redundancy!r}"
            )
        as_positive_float("terminal_weight", self.terminal_weight)
        as_positive_float("terminal_tol", self.terminal_tol)
        reg = self.regularization
        if reg is not None and not (
            isinstance(reg, (int, float)) and not isinstance(reg, bool) and 0 <= reg < math.inf
        ):
            raise InvalidParametersError(
                f"regularization: expected a number >= 0, got {self.regularization!r}"
            )
        if self.cov_bound is not None:
            as_positive_float("cov_bound", self.cov_bound)
        as_positive_int("intervals", self.intervals)
        as_positive_int("max_iter", self.max_iter)
        if isinstance(self.max_corrections, bool) or not isinstance(self.max_corrections, int):
            raise InvalidParametersError(
                f"max_corrections: expected an integer >= 0, got {self.max_corrections!r}"
            )
        if self.max_corrections < 0:
            raise InvalidParametersError(
                f"max_corrections: expected an integer >= 0, got {self.max_corrections!r}"
            )
        if (
            isinstance(self.verify_tokens, bool)
            or not isinstance(self.verify_tokens, (int, np.integer))
            or self.verify_tokens < 0
        ):
            raise InvalidParametersError(
                f"verify_tokens: expected an integer >= 0, got {self.verify_tokens!r}"
            )
        if self.initial_guess is not None and not isinstance(self.initial_guess, Schedule):
            raise InvalidParametersError(
                f"initial_guess: expected a Schedule, got {type(self.initial_guess).__name__}"
            )
        if not isinstance(self.ipopt_options, Mapping):
            raise InvalidParametersError("ipopt_options: expected a mapping of IPOPT options")
        object.__setattr__(self, "entry_bounds", _frozen_bounds("entry_bounds", self.entry_bounds))
        object.__setattr__(self, "norm_bounds", _frozen_bounds("norm_bounds", self.norm_bounds))
        object.__setattr__(self, "ipopt_options", MappingProxyType(dict(self.ipopt_options)))


@dataclass(frozen=True, eq=False)
class SteeringResult:
    """Outcome of :func:`steer`; every number is measured on the re-simulated control.

    Attributes
    ----------
    controls
        The optimized ``L``-layer :class:`Schedule` (the best iterate when not successful).
    success
        True only when IPOPT converged, the re-simulation completed and its terminal
        Bures–Wasserstein error is at most ``terminal_tol``.
    status
        ``"success"``, ``"not_converged"`` (IPOPT stopped early or found the problem
        infeasible), ``"terminal_error"`` (converged, but the re-simulated terminal error exceeds
        the tolerance) or ``"blowup"`` (the re-simulated moments diverge).
    message
        The reason, with IPOPT's own return status.
    cost
        The objective (kinetic or parameter energy) of the re-simulated control, without the
        regularization term or terminal penalty.
    kinetic_energy, parameter_energy
        Both energies of the control (``inf`` after a blow-up).
    lower_bound
        ``W2²(initial, target) / T``.
    gap
        ``(kinetic_energy − lower_bound) / lower_bound`` (the kinetic energy itself when the end
        points coincide to rounding, ``W2 ≤ 1e-12`` times the problem scale).
    terminal_error
        ``W2(N(T), target)`` of the re-simulated control.
    trajectory
        The re-simulated moments (:func:`gtcontrol.moments.simulate`).
    stats
        ``ipopt_status``, ``iterations`` (all solves), ``corrections``, ``seconds`` (wall, total),
        ``solve_seconds``, ``build_seconds``, ``cached``, ``nlp_objective``, ``mean_error``,
        ``cov_error`` (Frobenius), ``cov_norm_max``, ``warm_start``, ``redundancy``,
        ``regularization`` (the weight used), ``regularization_energy``, ``attempts`` and, when
        requested, ``token_terminal_error``.
    """

    controls: Schedule
    success: bool
    status: str
    message: str
    cost: float
    kinetic_energy: float
    parameter_energy: float
    lower_bound: float
    gap: float
    terminal_error: float
    trajectory: Trajectory | None
    stats: Mapping[str, Any]


def _parameter_energy(schedule: Schedule) -> float:
    h = schedule.duration
    total = 0.0
    for lay in schedule.layers:
        total += float(np.sum(lay.A**2) + np.sum(lay.b**2))
        for v, b_mat in lay.heads:
            total += float(np.sum(v**2) + np.sum(b_mat**2))
    return h * total


def _mean_path(m0: FloatArray, m1: FloatArray) -> Any:
    """A mean path from ``m0`` to ``m1`` that keeps away from 0 (pure attention cannot cross it).

    The straight line when it stays at distance ``≥ r = min(|m0|, |m1|)/2`` from the origin;
    otherwise the line plus the bump ``4 s (1 − s) w``, ``|w| = 4r``, orthogonal to ``m1 − m0`` and
    pointing away from the origin (any orthogonal direction for antipodal means, ``d ≥ 2``).
    """
    r = 0.5 * min(float(np.linalg.norm(m0)), float(np.linalg.norm(m1)))
    delta = m1 - m0
    dn = float(np.linalg.norm(delta))
    if dn == 0.0 or m0.shape[0] == 1:
        return lambda s: (1.0 - s) * m0 + s * m1
    s_star = min(max(-float(m0 @ delta) / dn**2, 0.0), 1.0)
    closest = m0 + s_star * delta
    if float(np.linalg.norm(closest)) >= r:
        return lambda s: (1.0 - s) * m0 + s * m1
    perp = closest - (closest @ delta) / dn**2 * delta
    if float(np.linalg.norm(perp)) <= 1e-12 * max(r, 1e-300):
        e = np.zeros(m0.shape[0])
        e[int(np.argmin(np.abs(delta)))] = 1.0
        perp = e - (e @ delta) / dn**2 * delta
    w = 4.0 * r * perp / np.linalg.norm(perp)
    return lambda s: (1.0 - s) * m0 + s * m1 + 4.0 * s * (1.0 - s) * w


def _curvature_split(m_mat: FloatArray, c: FloatArray, state: Gaussian) -> Layer:
    """A full layer whose field at ``state`` is ``(M, c)`` and whose attention term reproduces the
    geodesic's field variation inside the layer.

    Along the Bures–Wasserstein geodesic the field ``M(t)`` obeys ``dM/dt = −M²``. In a constant
    layer ``M(t) = A + V Σ(t) B`` changes at the rate ``V (MΣ + ΣMᵀ) B``; with ``B = βI`` and
    ``V = −M² S⁺/β``, ``S = MΣ + ΣMᵀ`` (regularized pseudo-inverse), the two rates agree, so the
    layer follows the time-varying optimal field to second order in the layer depth. ``β``
    balances ``|V|_F = |B|_F``; ``A = M − VΣB`` and ``b = c − V m`` restore the field at ``state``.
    """
    d = state.dim
    s_dot = m_mat @ state.cov + state.cov @ m_mat.T
    w, u = np.linalg.eigh(sym(s_dot))
    eps = 1e-6 * max(float(np.max(np.abs(w))), np.finfo(float).tiny)
    x = -m_mat @ m_mat @ ((u * (w / (w * w + eps * eps))) @ u.T)
    beta = math.sqrt(float(np.linalg.norm(x)) / math.sqrt(d))
    if beta == 0.0:
        return Layer(A=m_mat, b=c, V=np.zeros((d, d)), B=np.zeros((d, d)))
    v, b_mat = x / beta, beta * np.eye(d)
    return Layer(A=m_mat - v @ state.cov @ b_mat, b=c - v @ state.mean, V=v, B=b_mat)


def _warm_starts(
    initial: Gaussian, target: Gaussian, T: float, n: int, mode: str, redundancy: str
) -> Iterator[tuple[list[Layer], str]]:
    """Starting layers for :func:`steer` (generated lazily), with a label.

    The closed form in the requested mode: ``"ffn"`` the exact L-layer geodesic steering;
    ``"full"`` and ``"attention"`` its fields ``(M_k, c_k)`` realized at the geodesic's state in
    the middle of each layer: ``"full"`` with ``redundancy="fixed"`` by
    :func:`_curvature_split`, then the exact geodesic layers (``V = B = 0``), both solved (the
    lower energy wins); ``"full"`` with ``"joint"`` by the minimum-norm split (:func:`realize`),
    then ``V = B = 0`` as a fallback; ``"attention"`` by :func:`realize` along a mean path that
    keeps away from 0 (:func:`_mean_path`), then as fallbacks the exact attention construction
    and (singular Σ, ``d ≥ 2``) a realization at ``Σ + εI``.
    """
    ffn = exact_layer_steering(initial, target, T, n, "ffn")
    if mode == "ffn":
        yield list(ffn.layers), "closed form (exact L-layer geodesic)"
        return
    h = T / n
    general = _general_position(initial, target)
    if general:
        geo = ot_steering(initial, target, T)
        states = [geo.state_at((k + 0.5) * h) for k in range(n)]
    else:  # the two-leg path of exact_layer_steering, sampled by simulation
        traj = simulate(ffn, initial, n_points=2 * n + 1)
        states = [traj.at(int(np.argmin(np.abs(traj.t - (k + 0.5) * h)))) for k in range(n)]
    pairs = list(zip(ffn.layers, states, strict=True))
    if mode == "full":
        if redundancy == "fixed":
            yield (
                [_curvature_split(lay.A, lay.b, st) for lay, st in pairs],
                "closed form with curvature-matched attention",
            )
        else:
            yield (
                [realize(lay.A, lay.b, st, "full") for lay, st in pairs],
                "closed form realized (minimum-norm split)",
            )
        yield list(ffn.layers), "closed form (exact L-layer geodesic, V = B = 0)"
        return
    if initial.rank == initial.dim and general:
        path = _mean_path(initial.mean, target.mean)
        nodes = np.array([path(k / n) for k in range(n + 1)])
        curved = _ffn_layers(geo, n, nodes)
        try:
            layers = [
                realize(lay.A, lay.b, Gaussian(path((k + 0.5) / n), st.cov), "attention")
                for k, (lay, st) in enumerate(zip(curved, states, strict=True))
            ]
        except InvalidParametersError:
            pass
        else:
            yield layers, "closed form realized in attention mode"
    try:
        exact = exact_layer_steering(initial, target, T, n, "attention")
    except InvalidParametersError:
        pass
    else:
        yield list(exact.layers), "exact attention construction"
        return
    approx = []
    for lay, st in pairs:
        eps = 1e-3 * max(float(np.trace(st.cov)) / st.dim, 1e-12)
        reg = Gaussian(st.mean, st.cov + eps * np.eye(st.dim))
        try:
            approx.append(realize(lay.A, lay.b, reg, "attention"))
        except InvalidParametersError:
            approx.append(Layer(V=np.eye(st.dim), B=np.zeros((st.dim, st.dim))))
    yield approx, "closed form realized at Σ + εI (approximate, singular Σ)"


def _states_of(control: Control, initial: Gaussian, times: FloatArray) -> FloatArray:
    """Moment vectors ``(m, vech Σ)`` of ``control`` at ``times`` (any shape), as guesses.

    Taken from :func:`gtcontrol.moments.simulate` (linear interpolation between 32 records per
    layer), so that the guess satisfies the dynamics of the starting control.
    """
    flat = np.asarray(times, dtype=float).ravel()
    iu = np.triu_indices(initial.dim)
    n_seg = len(control.breakpoints) - 1
    traj = simulate(control, initial, n_points=32 * n_seg + 1)
    if traj.status is not Status.SUCCESS:
        raise SolverError("the starting control blows up", status="warm_start_blowup")
    data = np.concatenate([traj.mean, traj.cov[:, iu[0], iu[1]]], axis=1)
    cols = [np.interp(flat, traj.t, data[:, j]) for j in range(data.shape[1])]
    return np.stack(cols, axis=1).reshape(*np.shape(times), -1)


def _check_guess(guess: Schedule, mode: str, n: int, T: float, d: int) -> list[Layer]:
    if guess.n_layers != n or not math.isclose(guess.T, T, rel_tol=1e-12):
        raise InvalidParametersError(
            f"initial_guess: expected {n} layers over depth {T:g}, got {guess.n_layers} over "
            f"{guess.T:g}"
        )
    if guess.dim != d:
        raise InvalidParametersError(f"initial_guess: dimension {guess.dim}, expected {d}")
    for i, lay in enumerate(guess.layers):
        if len(lay.heads) > 1 or not lay.is_gaussian_exact or lay.ffn is not None:
            raise InvalidParametersError(
                f"initial_guess.layers[{i}]: expected at most one head and no feed-forward term"
            )
        zero_attn = not lay.heads or not (np.any(lay.heads[0][0]) or np.any(lay.heads[0][1]))
        if mode == "ffn" and not zero_attn:
            raise InvalidParametersError(f"initial_guess.layers[{i}]: mode 'ffn' needs V = B = 0")
        if mode == "attention" and (np.any(lay.A) or np.any(lay.b)):
            raise InvalidParametersError(
                f"initial_guess.layers[{i}]: mode 'attention' needs A = 0 and b = 0"
            )
    return list(guess.layers)


def steer(
    initial: Gaussian,
    target: Gaussian,
    T: float = 1.0,
    *,
    layers: int = 10,
    mode: str = "full",
    objective: str = "kinetic",
    **options: Any,
) -> SteeringResult:
    """Optimal ``L``-layer steering of ``initial`` to ``target`` in depth ``T``, verified.

    Parameters are constant on each layer ``[kh, (k+1)h)``, ``h = T/L``; the moment dynamics
    ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (``M = A + V Σ B``, ``c = b + V m``, theory.md §2)
    are transcribed for IPOPT through CasADi by Gauss–Legendre collocation (degree 3 per interval,
    one interval per layer by default; states ``(m, vech Σ)`` with each entry of Σ stored once;
    the layer function ``map``-ped over the layers; exact first and second derivatives). The
    objective is the kinetic energy ``∫ tr(MΣMᵀ) + |Mm + c|² dt ≥ W2²/T`` or the parameter energy;
    the terminal condition exact or a Bures–Wasserstein/KL penalty (see :class:`SteerOptions`).
    The warm start is the closed-form geodesic realized in the requested mode.

    Every returned control is re-simulated with :func:`gtcontrol.moments.simulate` (adaptive,
    ``rtol = 1e-11``); the discretization error of the NLP is then removed by up to
    ``max_corrections`` re-solves with shifted terminal data.

    Parameters
    ----------
    initial, target
        Gaussians of equal dimension; the target must be reachable in ``mode``.
    T
        Depth, positive.
    layers
        Number of layers ``L``.
    mode
        ``"full"`` (``A, b, V, B``), ``"ffn"`` (``V = B = 0``) or ``"attention"``
        (``A = 0, b = 0`` exactly).
    objective
        ``"kinetic"`` or ``"parameter"``.
    **options
        Keyword options of :class:`SteerOptions`.

    Returns
    -------
    SteeringResult
        With ``success=False`` (and the best iterate) when IPOPT does not converge, the problem
        is infeasible (e.g. under bounds), or the re-simulated terminal error exceeds
        ``terminal_tol``; ``message`` says why.

    Raises
    ------
    UnreachableTargetError
        If the target is not reachable in ``mode`` (rank change; pure-attention invariants).
    InvalidParametersError, InvalidGaussianError
        On malformed input or options.
    SolverError
        If CasADi fails to build or evaluate the NLP.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
    """
    from . import _ocp

    clock = time.perf_counter()
    _check_pair(initial, target)
    mode = _check_mode(mode)
    opts = SteerOptions(objective=objective, **options)
    check_reachable(initial, target, mode)
    t_hor = as_positive_float("T", T)
    n = as_positive_int("layers", layers)
    d = initial.dim
    if opts.terminal == "kl" and (initial.rank < d or target.rank < d):
        raise InvalidParametersError(
            "terminal: the KL penalty needs non-singular initial and target covariances; "
            "use terminal='bw' or 'exact'"
        )
    redundancy = opts.redundancy or ("fixed" if opts.objective == "kinetic" else "joint")
    fixed: tuple[str, ...] = ("V", "B") if mode == "full" and redundancy == "fixed" else ()
    optimized = [p for p in _ocp.PARAMS[mode] if p not in fixed]
    for name, bounds in (("entry_bounds", opts.entry_bounds), ("norm_bounds", opts.norm_bounds)):
        for key in bounds:
            if key not in optimized:
                raise InvalidParametersError(
                    f"{name}: parameter {key!r} is not optimized in mode {mode!r}"
                    + (" with redundancy='fixed' (use redundancy='joint')" if key in fixed else "")
                )

    if opts.objective == "parameter" and mode != "ffn" and opts.cov_bound is None:
        raise InvalidParametersError(
            "cov_bound: objective='parameter' with attention needs a bound on |Σ(t)|: a large Σ "
            "makes V Σ B large with small V and B (and attention can blow Σ up in finite time), "
            "so the parameter energy has infimum 0 without a minimizer"
        )

    if opts.regularization is not None:
        reg_weight = float(opts.regularization)
    else:
        # Singular Σ with attention: the rows of B acting on ker Σ (and the matching columns of
        # V) are exactly flat, and 1e-4 curvature leaves IPOPT crawling along them.
        reg_weight = 1e-3 if mode == "attention" and initial.rank < d else 1e-4
    iu = np.triu_indices(d)
    x0 = np.concatenate([initial.mean, initial.cov[iu]])
    x1 = np.concatenate([target.mean, target.cov[iu]])
    prob = _ocp.Problem(
        mode=mode,
        d=d,
        T=t_hor,
        L=n,
        intervals=opts.intervals,
        fixed=fixed,
        cov1=target.cov,
        rank1=target.rank,
        objective=opts.objective,
        terminal=opts.terminal,
        terminal_weight=float(opts.terminal_weight),
        regularization=reg_weight,
        entry_bounds=opts.entry_bounds,
        norm_bounds=opts.norm_bounds,
        cov_bound=opts.cov_bound,
        logdet0=float(np.linalg.slogdet(initial.cov)[1]) if initial.rank == d else 0.0,
        parallelization=opts.parallelization,
        ipopt={"max_iter": opts.max_iter, **opts.ipopt_options},
    )

    starts: Iterator[tuple[list[Layer], str]]
    if opts.initial_guess is not None:
        starts = iter([(_check_guess(opts.initial_guess, mode, n, t_hor, d), "initial_guess")])
    elif opts.terminal != "exact":
        # A penalty problem starts from the exact-terminal solution (itself warm-started from
        # the closed form): far from the target the penalty's gradient dominates and IPOPT
        # tends to leave the region where Σ stays positive semi-definite.
        pre = steer(
            initial,
            target,
            t_hor,
            layers=n,
            mode=mode,
            objective=opts.objective,
            **{**options, "terminal": "exact"},
        )
        first = [(list(pre.controls.layers), "exact-terminal solution")]
        if not math.isfinite(pre.terminal_error):
            first = []
        starts = itertools.chain(first, _warm_starts(initial, target, t_hor, n, mode, redundancy))
    else:
        starts = _warm_starts(initial, target, t_hor, n, mode, redundancy)
    # Fixed gauges of the flat directions: solve each and keep the lower energy.
    best_of = (
        mode == "full"
        and redundancy == "fixed"
        and opts.initial_guess is None
        and opts.terminal == "exact"
    )

    try:
        nlp, cached = _ocp.transcription(prob, cache=opts.cache)
    except RuntimeError as exc:
        raise SolverError(
            f"steer: CasADi failed to build the NLP: {exc}", status="casadi_error"
        ) from None
    common = {
        "regularization": reg_weight,
        "build_seconds": 0.0 if cached else nlp.build_seconds,
        "cached": cached,
        "redundancy": redundancy if mode == "full" else None,
    }
    failures: list[SteeringResult] = []
    successes: list[SteeringResult] = []
    notes: list[str] = []
    for layers0, label in starts:
        params0 = np.array([_ocp.pack(lay, mode) for lay in layers0])
        start_ctrl = Schedule(layers0, t_hor)
        try:
            colloc = _states_of(start_ctrl, initial, nlp.collocation_times()).reshape(n, -1)
            ends = np.arange(1, n + 1, dtype=float) * (t_hor / n)
            states = _states_of(start_ctrl, initial, ends)
        except SolverError as exc:
            notes.append(f"{label}: skipped ({exc})")
            continue
        res = _solve_from(nlp, initial, target, x0, x1, params0, colloc, states, opts, mode)
        result = _result(initial, target, t_hor, *res, opts, {**common, "warm_start": label})
        if result.success and not best_of:
            return _finish(result, clock, notes)
        if result.success:
            successes.append(result)
            continue
        notes.append(f"{label}: {result.message}")
        failures.append(result)
    if successes:
        best = min(successes, key=lambda r: r.cost)
        labels = [r.stats["warm_start"] for r in successes if r is not best]
        notes += [f"{lab}: also solved, higher cost" for lab in labels]
        return _finish(best, clock, notes)
    if not failures:
        raise SolverError(
            "steer: no usable starting control (" + "; ".join(notes) + ")", status="no_start"
        )
    best = min(failures, key=lambda r: (r.terminal_error, r.cost))
    return _finish(best, clock, notes)


def _solve_from(
    nlp: Any,
    initial: Gaussian,
    target: Gaussian,
    x0: FloatArray,
    x1: FloatArray,
    params0: FloatArray,
    colloc: FloatArray,
    states: FloatArray,
    opts: SteerOptions,
    mode: str,
) -> tuple[Schedule, Trajectory | None, Any, dict[str, Any]]:
    """One IPOPT solve plus discretization corrections; returns the re-simulated result."""
    from . import _ocp

    d = initial.dim
    iu = np.triu_indices(d)
    t_hor = nlp.prob.T
    shift = x1.copy()
    aux = None
    iterations, corrections, solve_seconds = 0, 0, 0.0
    scale = max(1.0, float(np.max(np.abs(x1))))
    while True:
        try:
            sol = nlp.solve(x0, shift, params0, colloc, states, aux)
        except RuntimeError as exc:
            raise SolverError(f"steer: CasADi/IPOPT failed: {exc}", status="casadi_error") from None
        iterations += sol.iterations
        solve_seconds += sol.seconds
        schedule = Schedule([_ocp.to_layer(p, mode, d) for p in sol.params], t_hor)
        traj = _verify(schedule, initial)
        if traj is None or not sol.success or opts.terminal != "exact":
            break
        miss = np.concatenate([traj.final.mean, traj.final.cov[iu]]) - x1
        if corrections >= opts.max_corrections or np.max(np.abs(miss)) <= 1e-11 * scale:
            break
        # The NLP's discretization error is a smooth function of the controls: aim the
        # collocation at target − miss and re-solve from the last iterate.
        shift = shift - miss
        params0, colloc, states, aux = sol.params, sol.colloc, sol.states, sol.aux
        corrections += 1
    stats = {
        "ipopt_status": sol.status,
        "iterations": iterations,
        "corrections": corrections,
        "solve_seconds": solve_seconds,
        "nlp_objective": sol.objective,
    }
    return schedule, traj, sol, stats


#: Tolerances of the verifying re-simulation: tighter than simulate's defaults because the
#: Bures–Wasserstein distance to a singular target is only Hölder-1/2 in Σ (an integration
#: error ε off the support shows up as sqrt(ε)).
_VERIFY_RTOL, _VERIFY_ATOL = 1e-13, 1e-16


def _verify(schedule: Schedule, initial: Gaussian) -> Trajectory | None:
    """Re-simulate with the adaptive integrator; ``None`` if it blows up or the integrator fails."""
    try:
        traj = simulate(schedule, initial, rtol=_VERIFY_RTOL, atol=_VERIFY_ATOL)
    except SolverError:
        return None
    return traj if traj.status is Status.SUCCESS else None


def _finish(result: SteeringResult, clock: float, notes: list[str]) -> SteeringResult:
    stats = dict(result.stats)
    stats["seconds"] = time.perf_counter() - clock
    stats["attempts"] = len(notes) + (1 if result.success else 0)
    message = result.message
    if notes and not result.success:
        message += " [starts tried: " + "; ".join(notes) + "]"
    elif notes:
        message += " [after failed starts: " + "; ".join(notes) + "]"
    return replace(result, message=message, stats=MappingProxyType(stats))


def _result(
    initial: Gaussian,
    target: Gaussian,
    T: float,
    schedule: Schedule,
    traj: Trajectory | None,
    sol: Any,
    run_stats: dict[str, Any],
    opts: SteerOptions,
    extra: dict[str, Any],
) -> SteeringResult:
    stats: dict[str, Any] = {**run_stats, **extra}
    lower = initial.bures_wasserstein(target) ** 2 / T
    par_energy = _parameter_energy(schedule)
    if traj is not None:
        final = traj.final
        terminal_error = final.bures_wasserstein(target)
        stats["mean_error"] = float(np.linalg.norm(final.mean - target.mean))
        stats["cov_error"] = float(np.linalg.norm(final.cov - target.cov))
        stats["cov_norm_max"] = float(np.max(np.linalg.norm(traj.cov, axis=(1, 2))))
        try:
            kin = kinetic_energy(schedule, initial)
        except SolverError:
            kin = math.inf
    else:
        terminal_error, kin = math.inf, math.inf
    stats["regularization_energy"] = (
        stats["regularization"] * par_energy if opts.objective == "kinetic" else 0.0
    )
    if opts.verify_tokens and traj is not None:
        from ..model.tokens import simulate_tokens

        x = initial.sample(int(opts.verify_tokens), np.random.default_rng(opts.seed))
        tok = simulate_tokens(schedule, x)
        stats["token_terminal_error"] = (
            tok.final.bures_wasserstein(target) if tok.status is Status.SUCCESS else math.inf
        )
    # Coincident end points (W2 at rounding level): the bound is 0 and the gap is absolute.
    coincident = lower * T <= (1e-12 * _scale(initial, target)) ** 2
    gap = kin if coincident else (kin - lower) / lower
    cost = kin if opts.objective == "kinetic" else par_energy
    if traj is None:
        status = "blowup"
        message = f"the re-simulated moments blow up or cannot be integrated (IPOPT: {sol.status})"
    elif not sol.success:
        status = "not_converged"
        message = (
            f"IPOPT did not converge ({sol.status}); returning the last iterate, whose "
            f"re-simulated terminal error is {terminal_error:.3g}"
        )
    elif terminal_error > opts.terminal_tol:
        status = "terminal_error"
        message = (
            f"IPOPT converged ({sol.status}) but the re-simulated terminal error "
            f"{terminal_error:.3g} exceeds terminal_tol = {opts.terminal_tol:g}"
        )
    else:
        status = "success"
        message = (
            f"IPOPT converged ({sol.status}); re-simulated terminal error {terminal_error:.3g}"
        )
    return SteeringResult(
        controls=schedule,
        success=status == "success",
        status=status,
        message=message,
        cost=cost,
        kinetic_energy=kin,
        parameter_energy=par_energy,
        lower_bound=lower,
        gap=gap,
        terminal_error=terminal_error,
        trajectory=traj,
        stats=MappingProxyType(stats),
    )


# ============================================================================ JSON form
def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    """The JSON-ready form of a schedule (docs/designs.md).

    ``{"T": T, "layers": [{"A": [[...]], "B": [[...]], "V": [[...]], "b": [...],
    "duration": h}, ...]}``. A layer without heads has ``V = B = 0``; a multi-head layer has
    ``"heads": [{"V": ..., "B": ...}, ...]`` instead of ``V`` and ``B``; a feed-forward term adds
    ``"ffn": {"W", "U", "c", "activation"}`` and Brownian forcing ``"noise"``.

    Raises
    ------
    InvalidParametersError
        If ``schedule`` is not a :class:`Schedule`.
    """
    if not isinstance(schedule, Schedule):
        raise InvalidParametersError(
            f"schedule: expected a Schedule, got {type(schedule).__name__}"
        )
    return schedule.to_dict()
