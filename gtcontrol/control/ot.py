"""The minimum-energy steering in closed form: the Bures–Wasserstein geodesic, and kinetic energy.

Every steering of ``N(m0, Σ0)`` to ``N(m1, Σ1)`` in time ``T`` has kinetic energy
``∫₀ᵀ E|v|² dt ≥ W2²/T`` (Benamou–Brenier). The Bures–Wasserstein geodesic attains it and is
realized exactly by a time-varying affine feed-forward (:func:`ot_steering`, docs/steering.md §2).
:func:`kinetic_energy` measures ``∫₀ᵀ E|v|² dt`` of any control.

Reference: the paper cited in :mod:`gtcontrol`, §5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray
from scipy.integrate import simpson

from .._display import Axes, SummaryItems
from .._linalg import FloatArray, polar, sym
from .._status import Outcome, ResultFields, Status
from .._validation import as_positive_float, as_positive_int, frozen
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, affine_velocity, simulate
from ..model.params import Control, Layer, Schedule, as_control
from .reachability import check_reachable

__all__ = ["KineticEnergy", "OTSteering", "kinetic_energy", "ot_steering"]


# ============================================================================ the transport map
def range_basis(cov: FloatArray, rank: int) -> tuple[FloatArray, FloatArray]:
    """Orthonormal bases ``(U, Q)`` of the range and the kernel of a PSD matrix of ``rank``."""
    w, u = np.linalg.eigh(sym(cov))
    order = np.argsort(w)[::-1]
    u = u[:, order]
    return u[:, :rank], u[:, rank:]


def general_position(initial: Gaussian, target: Gaussian) -> bool:
    """Whether ``rank Σ1^{1/2} Σ0^{1/2}`` equals the common rank (always for r ∈ {0, d})."""
    r = initial.rank
    if r in (0, initial.dim):
        return True
    dvals = np.linalg.svd(target.factor() @ initial.factor(), compute_uv=False)
    return bool(dvals[r - 1] > 1e-9 * max(dvals[0], np.finfo(float).tiny))


def pinv_cols(x: FloatArray) -> FloatArray:
    """Pseudo-inverse ``(xᵀx)⁻¹ xᵀ`` of a matrix with independent columns."""
    return np.asarray(np.linalg.solve(x.T @ x, x.T), dtype=float)


def _ot_map(initial: Gaussian, target: Gaussian) -> tuple[FloatArray, FloatArray | None]:
    """The linear part of the optimal transport map and, for singular Σ0, a basis of its support.

    Both cases use the polar decomposition ``S1 S0 = Q P`` (``S_i = Σ_i^{1/2}``, ``Q``
    orthogonal, ``P = (S0 Σ1 S0)^{1/2}``). Non-singular Σ0: the Bures–Wasserstein map
    ``C = S0⁻¹ P S0⁻¹ = Σ0^{-1/2}(Σ0^{1/2}Σ1Σ0^{1/2})^{1/2}Σ0^{-1/2}`` (symmetric positive
    definite), evaluated in the Procrustes form ``C = sym(S1 Q S0⁻¹)``, basis ``None``.
    Singular Σ0 (rank r = rank Σ1, ``0 < r < d``): the Procrustes map
    ``T = S1 Q S0⁺``, which pushes ``N(0, Σ0)`` onto ``N(0, Σ1)`` and is optimal when
    ``rank S1 S0 = r``; then ``⟨x, T x⟩ > 0`` on range Σ0, so ``(1 − s) I + s T`` is injective
    there for every ``s ∈ [0, 1]`` and the geodesic keeps the rank.
    """
    d = initial.dim
    r = initial.rank
    if r == 0:
        return np.eye(d), None
    s0, s1 = initial.factor(), target.factor()
    q, _ = polar(s1 @ s0)
    if r == d:
        w, u = np.linalg.eigh(initial.cov)
        s0_inv = (u / np.sqrt(w)) @ u.T
        # Procrustes form C = S1 Q S0⁻¹ (= S0⁻¹ P S0⁻¹ in exact arithmetic): one inverse factor
        # instead of two, so C Σ0 Cᵀ = S1 Q Qᵀ S1 = Σ1 holds to round-off even for
        # near-singular Σ0 (measured: W2 to the target 1e-12 instead of 3e-10 at variance 1e-8).
        return sym(s1 @ q @ s0_inv), None
    if not general_position(initial, target):
        raise InvalidParametersError(
            "target: the supports of the two degenerate Gaussians are not in general position "
            f"(rank of Σ1^(1/2) Σ0^(1/2) is below the common rank {r}); the Bures–Wasserstein "
            "geodesic then changes rank, so no flow attains W2²/T. Use exact_layer_steering or "
            "steer, which pass through an intermediate Gaussian"
        )
    u0, _ = range_basis(initial.cov, r)
    w0 = np.sort(np.linalg.eigvalsh(initial.cov))[::-1][:r]
    s0_pinv = (u0 / np.sqrt(w0)) @ u0.T
    return s1 @ q @ s0_pinv, u0


# ============================================================================ the geodesic
@dataclass(frozen=True, eq=False)
class OTSteering(ResultFields, Outcome):
    """The Bures–Wasserstein geodesic from ``initial`` to ``target`` as a time-varying control.

    With ``s = t/T``, ``G(s) = (1 − s) I + s C`` (``C`` the optimal transport map, see
    :func:`ot_steering`), ``m(s) = (1 − s) m0 + s m1``, the layer at depth ``t`` is the affine
    feed-forward ``A(t) = (C − I) G(s)⁻¹ / T``, ``b(t) = (m1 − m0)/T − A(t) m(s)`` (``V = 0``):
    every token moves on a straight line at constant speed, ``x(t) = G(s) (x0 − m0) + m(s)``. For a
    singular Σ0 with support basis ``U0``, ``G(s)⁻¹`` is replaced by ``U0 (G(s) U0)⁺``: the field
    is what moves the support and vanishes on its orthogonal complement.

    It is both a control (``.T``, ``.breakpoints``, ``.layer_at(t)``) and a result of the
    closed form: ``success`` is always true, ``status`` is ``Status.SUCCESS``.

    Attributes
    ----------
    initial
        The starting Gaussian.
    target
        The Gaussian reached at depth ``T``.
    T
        Horizon.
    transport_map
        ``C`` (read-only; for singular Σ0 the Procrustes map, zero on ker Σ0).
    support_basis
        ``None``, or for singular Σ0 an orthonormal basis ``U0`` of range Σ0.
    success
        Always true (a closed form).
    status
        ``Status.SUCCESS``.
    message
        What the control is, with its kinetic energy.
    stats
        ``kinetic_energy``, ``lower_bound`` (equal: the bound is attained) and ``singular``.
    """

    initial: Gaussian
    target: Gaussian
    T: float
    transport_map: FloatArray = field(repr=False)
    support_basis: FloatArray | None = field(default=None, repr=False)

    def _summary_items(self) -> SummaryItems:
        return [
            ("dim", self.dim),
            ("T", self.T),
            ("kinetic_energy", self.kinetic_energy),
            ("singular", self.support_basis is not None),
        ]

    def _draw(self, ax: Axes) -> None:
        from ..model._figures import draw_covariance

        t = np.linspace(0.0, self.T, 101)
        cov = np.array([self.cov_at(float(s)) for s in t])
        target = np.linalg.eigvalsh(self.target.cov)
        title = "covariance eigenvalues along the geodesic"
        draw_covariance(ax, t, cov, limit=target, limit_label="target", title=title)

    @property
    def breakpoints(self) -> FloatArray:
        """``[0, T]``: the control is smooth in between."""
        return frozen(np.array([0.0, self.T]))

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
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
            a = k @ u0 @ pinv_cols(g @ u0) / self.T
        u = (self.target.mean - self.initial.mean) / self.T
        return np.asarray(a, dtype=float), u - a @ self.mean_at(t)

    def layer_at(self, t: float) -> Layer:
        """The affine feed-forward layer ``(A(t), b(t))`` active at depth ``t``."""
        a, b = self.field_at(t)
        return Layer(A=a, b=b)

    @property
    def kinetic_energy(self) -> float:
        """``∫₀ᵀ E|v|² dt = (|m1 − m0|² + tr((C − I) Σ0 (C − I)ᵀ)) / T`` (constant speed)."""
        k = self.transport_map - np.eye(self.dim)
        dm = self.target.mean - self.initial.mean
        return float(dm @ dm + np.trace(k @ self.initial.cov @ k.T)) / self.T

    @property
    def lower_bound(self) -> float:
        """``W2²(initial, target) / T``: the Benamou–Brenier bound, attained by this control."""
        return self.initial.bures_wasserstein(self.target) ** 2 / self.T


def ot_steering(initial: Gaussian, target: Gaussian, T: float) -> OTSteering:
    """The closed-form minimum-energy steering: the Bures–Wasserstein geodesic.

    Every steering of ``N(m0, Σ0)`` to ``N(m1, Σ1)`` in time ``T`` has kinetic energy
    ``∫₀ᵀ E|v|² dt ≥ W2²/T`` (Benamou–Brenier), with
    ``W2² = |m0 − m1|² + tr(Σ0 + Σ1 − 2 (Σ0^{1/2} Σ1 Σ0^{1/2})^{1/2})``. The geodesic attains it and
    is realized exactly by the time-varying affine feed-forward (``V = 0``)

        A(t) = (C − I) G(s)⁻¹ / T,   b(t) = (m1 − m0)/T − A(t) m(s),   s = t/T,

    ``C = Σ0^{-1/2}(Σ0^{1/2} Σ1 Σ0^{1/2})^{1/2} Σ0^{-1/2}``, ``G(s) = (1 − s) I + s C``,
    ``m(s) = (1 − s) m0 + s m1`` (docs/steering.md). For a singular Σ0 (same rank as Σ1) ``C`` is
    replaced by the Procrustes transport map and ``G(s)⁻¹`` by a pseudo-inverse on the support
    (see :class:`OTSteering`). A closed form: no iteration, no ``time_limit``.

    Parameters
    ----------
    initial
        The starting Gaussian.
    target
        The Gaussian to reach: same dimension and covariance rank as ``initial``.
    T
        Horizon, positive.

    Returns
    -------
    OTSteering
        A control (``.T``, ``.breakpoints``, ``.layer_at(t)``) with ``.mean_at``, ``.cov_at``,
        ``.kinetic_energy`` (``= W2²/T``) and ``.lower_bound``; ``status`` is ``SUCCESS``.

    Raises
    ------
    UnreachableTargetError
        If the ranks differ.
    InvalidParametersError
        For degenerate Gaussians whose supports are not in general position
        (``rank Σ1^{1/2} Σ0^{1/2} < rank Σ0``): the geodesic changes rank there and the bound is
        not attained by any flow.
    InvalidGaussianError
        If an argument is not a :class:`Gaussian` or the dimensions differ.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.

    Examples
    --------
    >>> from gtcontrol import Gaussian, simulate
    >>> g0 = Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]])
    >>> g1 = Gaussian([1.0, 0.0], [[4.0, 0.0], [0.0, 1.0]])
    >>> geo = ot_steering(g0, g1, T=2.0)
    >>> geo.status, round(geo.kinetic_energy, 12), round(geo.lower_bound, 12)  # (1 + 1) / 2
    (<Status.SUCCESS: 'success'>, 1.0, 1.0)
    >>> final = simulate(geo, g0).final
    >>> bool(final.bures_wasserstein(g1) < 1e-6)
    True
    """
    check_reachable(initial, target, mode="ffn")
    t_hor = as_positive_float("T", T)
    t_map, basis = _ot_map(initial, target)
    geo = OTSteering(initial, target, t_hor, frozen(t_map), basis)
    kind = "SPD map" if basis is None else "Procrustes map on the support"
    message = (
        f"closed-form Bures–Wasserstein geodesic ({kind}); kinetic energy = W2²/T = "
        f"{geo.lower_bound:.6g}"
    )
    stats = {
        "kinetic_energy": geo.kinetic_energy,
        "lower_bound": geo.lower_bound,
        "singular": basis is not None,
    }
    return replace(geo, message=message, stats=stats)


# ============================================================================ kinetic energy
def _segment_layers(ctrl: Control, t0: float, t1: float) -> Callable[[float], Layer]:
    """A function ``t -> Layer`` valid on ``[t0, t1]`` (the segment's layer if piecewise)."""
    if getattr(ctrl, "piecewise_constant", False):
        fixed = ctrl.layer_at(0.5 * (t0 + t1))
        return lambda t: fixed
    return ctrl.layer_at


@dataclass(frozen=True, eq=False)
class KineticEnergy(ResultFields, Outcome):
    """The kinetic energy ``∫₀ᵀ E|v|² dt`` of a control from a Gaussian (:func:`kinetic_energy`).

    Attributes
    ----------
    energy
        The energy: measured when ``status`` is ``SUCCESS``; ``math.inf`` for ``BLOWUP`` and
        ``OVERFLOW`` (the moments leave every bound, or the float range, before ``T``);
        ``math.nan`` for ``BUDGET_EXHAUSTED`` and ``FAILED`` (not known).
    T
        The horizon.
    t, integrand
        The quadrature nodes and ``E|v(t)|²`` at them (empty unless ``SUCCESS``); a node on a
        breakpoint appears once for each segment it ends.
    status
        ``SUCCESS`` (the moments reached ``T``; the energy is Simpson's rule on every segment),
        ``BLOWUP`` or ``OVERFLOW`` (the re-simulation's), ``BUDGET_EXHAUSTED`` (``time_limit``
        or the evaluation cap ran out first) or ``FAILED`` (the integrator failed).
    message
        The energy, or why it is not known, in words.
    stats
        The re-simulation's statistics (``nfev``, ``nsteps``, ``seconds``, ...) and
        ``n_points``.
    success
        True for ``SUCCESS`` only: ``energy`` is then a finite, measured number.
    """

    energy: float
    T: float
    t: FloatArray = field(default_factory=lambda: np.zeros(0), repr=False)
    integrand: FloatArray = field(default_factory=lambda: np.zeros(0), repr=False)

    def _summary_items(self) -> SummaryItems:
        return [("energy", self.energy), ("T", self.T), ("nodes", len(self.t))]

    def _draw(self, ax: Axes) -> None:
        ax.plot(self.t, self.integrand)
        ax.set_xlabel("depth t")
        ax.set_ylabel("E|v(t)|²")
        ax.set_title(f"kinetic energy {self.energy:.6g} ({self.status.value})", fontsize=10)


def kinetic_energy(
    control: Layer | Schedule | Control,
    initial: Gaussian,
    T: float | None = None,
    *,
    n_points: int = 4001,
    time_limit: float | None = None,
) -> KineticEnergy:
    """Kinetic energy ``∫₀ᵀ E|v|² dt`` of a control started at ``initial``.

    For ``N(m, Σ)`` under ``v(x) = M x + c``, ``E|v|² = tr(M Σ Mᵀ) + |M m + c|²`` (steering.md).
    The moments come from :func:`gtcontrol.simulate` (adaptive, ``rtol = 1e-11``) recorded
    on about ``n_points`` depths; the integral is Simpson's rule on every segment between
    breakpoints (the integrand is smooth there), accurate to about ``1e-10`` relative with the
    default.

    Parameters
    ----------
    control
        A :class:`Layer` (needs ``T``), a :class:`Schedule` or any control with ``.T``,
        ``.breakpoints`` and ``.layer_at(t)``.
    initial
        The Gaussian at depth 0.
    T
        Horizon; only for a single :class:`Layer` (controls carry their own).
    n_points
        About how many depths the moments are recorded at (the quadrature nodes).
    time_limit
        Wall-clock limit in seconds of the re-simulation (``None``: none).

    Returns
    -------
    KineticEnergy
        ``energy`` with ``status`` ``SUCCESS``; ``BLOWUP`` or ``OVERFLOW`` when the moments do
        not reach ``T`` (``energy = inf``); ``BUDGET_EXHAUSTED`` when ``time_limit`` (or the
        evaluation cap) ran out first and ``FAILED`` when the integrator failed
        (``energy = nan``: not known).

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On malformed input.

    Examples
    --------
    The geodesic from ``N(0, 1)`` to ``N(1, 1)`` in depth 1 attains the Benamou–Brenier bound
    ``W2²/T = 1``:

    >>> from gtcontrol import Gaussian, Layer, kinetic_energy, ot_steering
    >>> g0, g1 = Gaussian([0.0], [[1.0]]), Gaussian([1.0], [[1.0]])
    >>> res = kinetic_energy(ot_steering(g0, g1, 1.0), g0)
    >>> res.status, round(res.energy, 9)
    (<Status.SUCCESS: 'success'>, 1.0)

    A layer whose covariance blows up before ``T`` has infinite energy:

    >>> res = kinetic_energy(Layer(V=[[1.0]], B=[[1.0]]), g0, 1.0)
    >>> res.status, res.energy, res.success
    (<Status.BLOWUP: 'blowup'>, inf, False)
    """
    ctrl = as_control(control, T)
    n = as_positive_int("n_points", n_points)
    traj = simulate(ctrl, initial, n_points=n, time_limit=time_limit)
    stats = {**traj.stats, "n_points": n}
    horizon = float(ctrl.T)
    if traj.status in (Status.BLOWUP, Status.OVERFLOW):
        why = f"the moments do not reach T = {horizon:.6g} ({traj.message}): the energy is infinite"
        return KineticEnergy(math.inf, horizon, status=traj.status, message=why, stats=stats)
    if traj.status is not Status.SUCCESS:
        why = f"the energy is not known: the re-simulation stopped ({traj.message})"
        return KineticEnergy(math.nan, horizon, status=traj.status, message=why, stats=stats)
    pieces = energy_records(ctrl, traj)
    energy = _energy(pieces)
    return KineticEnergy(
        energy,
        horizon,
        np.concatenate([t for t, _, _ in pieces]),
        np.concatenate([_unscaled(r, e) for _, r, e in pieces]),
        message=f"kinetic energy {energy:.12g} (Simpson's rule on {len(traj.t)} depths)",
        stats=stats,
    )


def trajectory_energy(ctrl: Control, traj: Trajectory) -> float:
    """``∫ E|v|² dt`` from a trajectory of ``ctrl`` recorded densely enough for Simpson's rule on
    every segment (as :func:`kinetic_energy` records it); ``inf`` unless it reached ``T``."""
    if traj.status is not Status.SUCCESS:
        return math.inf
    return _energy(energy_records(ctrl, traj))


#: One segment's records: the depths ``t`` and ``E|v(t)|² = r·2^e`` (see :func:`_scaled_power`).
EnergyRecords = tuple[FloatArray, FloatArray, NDArray[np.int_]]


def energy_records(ctrl: Control, traj: Trajectory) -> list[EnergyRecords]:
    """``(t, r, e)`` with ``E|v(t)|² = r·2^e`` on the records of every segment between ``ctrl``'s
    breakpoints (the integrand is smooth on each), from a trajectory of ``ctrl`` that reached
    ``T``. Scaled, because a long horizon makes the velocities small: at ``T = 1e300`` they are
    about ``1e-300``, whose squares underflow to zero."""
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    pieces = []
    for k in range(len(breaks) - 1):
        t0, t1 = float(breaks[k]), float(breaks[k + 1])
        idx = np.flatnonzero((traj.t >= t0 - 1e-14 * max(t1, 1.0)) & (traj.t <= t1 + 1e-14))
        layer_of = _segment_layers(ctrl, t0, t1)
        records = _batched_energy(ctrl, layer_of, traj.mean[idx], traj.cov[idx], t0, t1)
        if records is None:
            r, e = np.empty(len(idx)), np.zeros(len(idx), dtype=int)
            for j, i in enumerate(idx):
                m, s = traj.mean[i], traj.cov[i]
                mm, c = affine_velocity(layer_of(float(traj.t[i])), m, s)
                rj, ej = _scaled_power(mm[None], s[None], (mm @ m + c)[None])
                r[j], e[j] = rj[0], ej[0]
            records = (r, e)
        pieces.append((np.asarray(traj.t[idx], dtype=float), *records))
    return pieces


def _batched_energy(
    ctrl: Control,
    layer_of: Callable[[float], Layer],
    means: FloatArray,
    covs: FloatArray,
    t0: float,
    t1: float,
) -> tuple[FloatArray, NDArray[np.int_]] | None:
    """``E|v|²`` at every record of a constant segment in one batched product, or ``None``.

    Only for a piecewise-constant control whose layer has dense heads and no feed-forward term
    (the common case of steering schedules); anything else goes through
    :func:`gtcontrol.model.moments.affine_velocity` point by point. Same formula:
    ``tr(M Σ Mᵀ) + |M m + c|²``, ``M = A + Σ_h V_h Σ B_h``, ``c = b + Σ_h V_h m``; the records
    as :func:`_scaled_power` gives them.
    """
    if not getattr(ctrl, "piecewise_constant", False):
        return None
    lay = layer_of(0.5 * (t0 + t1))
    if lay.ffn is not None or lay.factored_heads is not None or not isinstance(lay.heads, tuple):
        return None
    mm = np.broadcast_to(lay.A, covs.shape).copy()
    cc = np.broadcast_to(lay.b, means.shape).copy()
    for v_h, b_h in lay.heads:
        mm += v_h @ covs @ b_h
        cc += means @ v_h.T
    vel = (mm @ means[:, :, None])[:, :, 0] + cc
    return _scaled_power(mm, covs, vel)


def _scaled_power(
    mm: FloatArray, covs: FloatArray, vel: FloatArray
) -> tuple[FloatArray, NDArray[np.int_]]:
    """``E|v|² = tr(M Σ Mᵀ) + |v|²`` of a stack of records as ``(r, e)``, ``E = r·2^e``.

    Each record's ``M`` and ``v`` are first divided by the power of two ``2^q`` nearest their
    largest entry (exact), so that neither small velocities (a long horizon) nor large ones
    square out of float64; then ``e = 2q``.
    """
    top = np.maximum(np.max(np.abs(mm), axis=(1, 2)), np.max(np.abs(vel), axis=1))
    usable = (top > 0.0) & np.isfinite(top)
    q = np.where(usable, np.frexp(np.where(usable, top, 1.0))[1] - 1, 0)
    ms = np.ldexp(mm, -q[:, None, None])
    vs = np.ldexp(vel, -q[:, None])
    r: FloatArray = np.sum((ms @ covs) * ms, axis=(1, 2)) + np.sum(vs * vs, axis=1)
    return r, 2 * q


def _unscaled(r: FloatArray, e: NDArray[np.int_]) -> FloatArray:
    """``r·2^e`` as floats: ``0`` below the float range, ``inf`` above it (the integrand shown)."""
    # a value past the float range is infinite: that is its float, not a fault
    with np.errstate(over="ignore"):
        out: FloatArray = np.ldexp(r, e)
    return out


def _energy(pieces: list[EnergyRecords]) -> float:
    """``∫ E|v|² dt``: Simpson's rule on every segment, in scaled form.

    On a segment of length ``L`` the depths are mapped to ``[0, 1]`` and the integrand divided by
    ``2^E``, ``E`` its largest exponent; the rule's value is then multiplied by ``L·2^E``. Exact
    to rounding where the plain rule's products of depth spacings (``h₀h₁``: ``1e598`` for a
    horizon of ``1e300``) overflow and its integrand underflows.
    """
    total = 0.0
    for t, r, e in pieces:
        length = float(t[-1] - t[0]) if len(t) > 1 else 0.0
        if length <= 0.0 or not np.any(r != 0.0):
            continue
        top = int(np.max(e[r != 0.0]))
        vals = np.ldexp(r, e - top)
        frac, exp_len = math.frexp(length)
        part = float(simpson(vals, x=(t - t[0]) / length)) * frac
        try:
            total += math.ldexp(part, top + exp_len)
        except OverflowError:  # an energy past the float range is infinite
            total += math.copysign(math.inf, part)
    return total
