"""Constructed controls of :func:`gtcontrol.steer`: the warm starts and the flow construction.

**Warm starts.** Every start is a closed form of :mod:`.ot` / :mod:`.realization` realized in the
requested parameter mode; the NLP's state guesses are the moments of the starting control, so
they satisfy its dynamics.

**Exact constant layers and shooting.** A constant feed-forward layer ``x ↦ M x + c`` has an exact
flow: ``Σ(t) = e^{Mt} Σ e^{Mᵀt}`` and ``m(t) = e^{Mt} m + (∫₀ᵗ e^{Ms} ds) c``. Between two
Gaussians ``N(m_a, Σ_a)`` and ``N(m_b, Σ_b)`` (``Σ_a, Σ_b ≻ 0``) the layer of duration ``h``
with ``e^{Mh} = C``, ``C`` the Bures–Wasserstein map
``Σ_a^{-1/2}(Σ_a^{1/2} Σ_b Σ_a^{1/2})^{1/2} Σ_a^{-1/2}`` (symmetric positive definite, so
``M = log C / h`` is real symmetric), moves one onto the other exactly (:func:`ffn_field`, the
exact L-layer construction of docs/steering.md §4, layer by layer). Layers with attention
(``M(t) = A + V Σ(t) B`` changes inside the layer) have no closed-form flow. :func:`shoot` makes
such a layer hit a prescribed end state anyway: the field the layer should realize is corrected
by the difference of two exact feed-forward fields, the one that reaches the target and the one
that reaches where the re-simulated layer actually went. This fixed point converges linearly
(typically 1e-1 per step), because the exact feed-forward flow is a close model of the layer's;
each step is one adaptive re-simulation (:func:`gtcontrol.simulate`). The gauges
(:func:`curvature_gauge`, :func:`attention_gauge`) choose the attention parameters that realize
a requested field at a state, so that inside the layer the field varies like the
Bures–Wasserstein geodesic's (``dM/dt = −M²`` and a mean moving on a straight line).

**The flow construction** (``method="flow"``). The L-layer control is built between fixed nodes:
the Bures–Wasserstein geodesic sampled at the layer switches ``t_k = kT/L`` (its covariance, and
its straight mean line, or for pure attention a mean path that keeps away from 0). Every layer
takes node ``k`` exactly to node ``k + 1``, so layers can be chosen one at a time and any mix of
them is a feasible control:

* ``"ffn"``: the exact constant layers of :func:`ffn_field` (docs/steering.md §4); this is the
  closed form :func:`gtcontrol.exact_layer_steering`.
* ``"full"``: the same layers are the baseline; for each layer a few attention gauges
  (:func:`curvature_gauge`) are shot onto the next node (:func:`shoot`) and the layer with the
  lowest kinetic energy is kept. The result is never worse than the exact construction, layer by
  layer.
* ``"attention"``: the baseline is the exact attention construction; the node-to-node layers of
  :func:`attention_gauge` replace it when every layer can be shot and the energy is lower.

There is no NLP: the cost is a few adaptive re-simulations per layer and candidate. The time
budget is checked between re-simulations; when it runs out the best feasible control so far (the
baseline, or layers improved so far) is returned with ``Status.BUDGET_EXHAUSTED``. Every returned
control is re-simulated and measured like any :class:`SteeringResult`.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import scipy.linalg

from .._linalg import FloatArray, is_spd, polar, spd_sqrt_pair, sym, vech_index
from .._progress import progress
from .._status import Budget, Status
from ..errors import GTControlError, InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Control, Layer, Schedule
from ._steer_problem import (
    Plan,
    SteeringResult,
    closed_form_estimate,
    finish,
    identity_result,
    measure,
    no_time_for_closed_form,
    verify,
)
from .ot import general_position, kinetic_energy, ot_steering
from .realization import exact_layer_steering, ffn_layers, realize

__all__: list[str] = []


def _mean_path(
    m0: FloatArray, m1: FloatArray, clearance: float = 0.5
) -> Callable[[float], FloatArray]:
    """A mean path from ``m0`` to ``m1`` that keeps away from 0 (pure attention cannot cross it).

    The straight line when it stays at distance ``≥ r = clearance · min(|m0|, |m1|)`` from the
    origin; otherwise the line plus the bump ``4 s (1 − s) w``, ``|w| = 4r``, orthogonal to
    ``m1 − m0`` and pointing away from the origin (any orthogonal direction for antipodal means,
    ``d ≥ 2``).
    """
    r = clearance * min(float(np.linalg.norm(m0)), float(np.linalg.norm(m1)))
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
    top = float(np.max(np.abs(w)))
    if not top > 0.0:  # Σ̇ = 0 (e.g. Σ = 0): no field variation to reproduce, no attention
        return Layer(A=m_mat, b=c, V=np.zeros((d, d)), B=np.zeros((d, d)))
    r = w / top  # the regularized inverse w/(w² + ε²), ε = 1e-6 top, without underflow
    x = -m_mat @ m_mat @ ((u * (r / (r * r + 1e-12) / top)) @ u.T)
    beta = math.sqrt(float(np.linalg.norm(x)) / math.sqrt(d))
    if beta == 0.0:
        return Layer(A=m_mat, b=c, V=np.zeros((d, d)), B=np.zeros((d, d)))
    v, b_mat = x / beta, beta * np.eye(d)
    return Layer(A=m_mat - v @ state.cov @ b_mat, b=c - v @ state.mean, V=v, B=b_mat)


def warm_starts(
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
    ffn = exact_layer_steering(initial, target, T, n_layers=n, mode="ffn")
    if mode == "ffn":
        yield list(ffn.layers), "closed form (exact L-layer geodesic)"
        return
    h = T / n
    general = general_position(initial, target)
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
                [realize(lay.A, lay.b, st, mode="full") for lay, st in pairs],
                "closed form realized (minimum-norm split)",
            )
        yield list(ffn.layers), "closed form (exact L-layer geodesic, V = B = 0)"
        return
    if initial.rank == initial.dim and general:
        path = _mean_path(initial.mean, target.mean)
        nodes = np.array([path(k / n) for k in range(n + 1)])
        curved = ffn_layers(geo, n, nodes)
        try:
            layers = [
                realize(lay.A, lay.b, Gaussian(path((k + 0.5) / n), st.cov), mode="attention")
                for k, (lay, st) in enumerate(zip(curved, states, strict=True))
            ]
        except InvalidParametersError:
            pass
        else:
            yield layers, "closed form realized in attention mode"
    try:
        exact = exact_layer_steering(initial, target, T, n_layers=n, mode="attention")
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
            approx.append(realize(lay.A, lay.b, reg, mode="attention"))
        except InvalidParametersError:
            approx.append(Layer(V=np.eye(st.dim), B=np.zeros((st.dim, st.dim))))
    yield approx, "closed form realized at Σ + εI (approximate, singular Σ)"


def states_of(
    control: Control, initial: Gaussian, times: FloatArray, time_limit: float | None = None
) -> FloatArray:
    """Moment vectors ``(m, vech Σ)`` of ``control`` at ``times`` (any shape), as guesses.

    Taken from :func:`gtcontrol.simulate` (linear interpolation between 32 records per
    layer), so that the guess satisfies the dynamics of the starting control; a
    :class:`SolverError` when that simulation blows up or runs out of ``time_limit``.
    """
    flat = np.asarray(times, dtype=float).ravel()
    iu = vech_index(initial.dim)[0]
    n_seg = len(control.breakpoints) - 1
    traj = simulate(control, initial, n_points=32 * n_seg + 1, time_limit=time_limit)
    if traj.status is Status.BUDGET_EXHAUSTED and time_limit is not None:
        raise SolverError(
            f"its moments ran out of time ({traj.message})", status=Status.BUDGET_EXHAUSTED
        )
    if traj.status is not Status.SUCCESS:
        raise SolverError("the starting control blows up", status=traj.status)
    data = np.concatenate([traj.mean, traj.cov[:, iu[0], iu[1]]], axis=1)
    cols = [np.interp(flat, traj.t, data[:, j]) for j in range(data.shape[1])]
    return np.stack(cols, axis=1).reshape(*np.shape(times), -1)


def check_guess(guess: Schedule, mode: str, n: int, T: float, d: int) -> list[Layer]:
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


#: A moment state ``(m, Σ)`` (Σ symmetric positive definite).
State = tuple[FloatArray, FloatArray]


# ============================================================================ exact feed-forward
def bw_map(cov_a: FloatArray, cov_b: FloatArray) -> FloatArray:
    """The Bures–Wasserstein map ``C`` (SPD, ``C Σ_a C = Σ_b``) in Procrustes form.

    ``C = sym(S_b Q S_a⁻¹)`` with ``S = Σ^{1/2}`` and ``Q`` the orthogonal polar factor of
    ``S_b S_a`` (as :func:`gtcontrol.ot_steering`: one inverse factor instead of two).
    """
    s_a, s_a_inv = spd_sqrt_pair(cov_a)
    s_b, _ = spd_sqrt_pair(cov_b)
    q, _ = polar(s_b @ s_a)
    return sym(s_b @ q @ s_a_inv)


def exp_integral(lam: FloatArray, h: float) -> FloatArray:
    """``∫₀ʰ e^{λs} ds = (e^{λh} − 1)/λ`` entrywise (``h`` at ``λ = 0``)."""
    x = lam * h
    small = np.abs(x) < 1e-8
    safe = np.where(small, 1.0, lam)
    return np.where(small, h * (1.0 + 0.5 * x), np.expm1(x) / safe)


def ffn_field(start: State, end: State, h: float) -> tuple[FloatArray, FloatArray]:
    """The constant field ``(M, c)`` whose exact flow takes ``start`` to ``end`` in time ``h``.

    ``M = log(C)/h`` (``C`` :func:`bw_map`, so ``M`` is symmetric) and
    ``c = Φ⁻¹ (m_b − C m_a)``, ``Φ = ∫₀ʰ e^{Ms} ds``.
    """
    (m_a, cov_a), (m_b, cov_b) = start, end
    gam, u = np.linalg.eigh(bw_map(cov_a, cov_b))
    lam = np.log(gam) / h
    m_mat = sym((u * lam) @ u.T)
    c = u @ ((u.T @ m_b - gam * (u.T @ m_a)) / exp_integral(lam, h))
    return m_mat, c


def ffn_flow(m_mat: FloatArray, c: FloatArray, start: State, t: float) -> State:
    """Exact state after time ``t`` under the constant field ``x ↦ M x + c``."""
    d = c.shape[0]
    block = np.zeros((d + 1, d + 1))
    block[:d, :d] = m_mat * t
    block[:d, d] = c * t
    e = scipy.linalg.expm(block)
    m_a, cov_a = start
    flow = e[:d, :d]
    return flow @ m_a + e[:d, d], sym(flow @ cov_a @ flow.T)


# ============================================================================ gauges
def curvature_gauge(
    m_mat: FloatArray, c: FloatArray, state: State, theta: float, eps: float
) -> Layer:
    """A full layer with field ``(M, c)`` at ``state`` whose attention bends the field in time.

    Inside a constant layer ``M(t) = A + V Σ(t) B`` changes at the rate ``V (MΣ + ΣMᵀ) B``;
    along the geodesic the field obeys ``dM/dt = −M²``. With ``B = βI`` and
    ``V = −θ M² S_ε⁺ / β`` (``S = MΣ + ΣMᵀ``, ``S_ε⁺`` its Tikhonov pseudo-inverse with
    ``ε = eps · |S|₂``) the rate is ``θ`` times the geodesic's where ``S`` is well conditioned;
    ``β`` balances ``|V|_F = |B|_F``; ``A = M − VΣB`` and ``b = c − V m`` restore the field at
    ``state``. ``θ = 0`` is the plain feed-forward layer.
    """
    m, cov = state
    d = c.shape[0]
    w, u = np.linalg.eigh(sym(m_mat @ cov + cov @ m_mat.T))
    reg = eps * max(float(np.max(np.abs(w))), np.finfo(float).tiny)
    x = -theta * m_mat @ m_mat @ ((u * (w / (w * w + reg * reg))) @ u.T)
    beta = math.sqrt(float(np.linalg.norm(x)) / math.sqrt(d))
    if beta == 0.0:
        return Layer(A=m_mat, b=c, V=np.zeros((d, d)), B=np.zeros((d, d)))
    v, b_mat = x / beta, beta * np.eye(d)
    return Layer(A=m_mat - v @ cov @ b_mat, b=c - v @ m, V=v, B=b_mat)


#: Above this condition number the mean-matched ``V`` of :func:`attention_gauge` is not used.
_MAX_COND_V = 1e8


def attention_gauge(
    m_mat: FloatArray, c: FloatArray, state: State, velocity: FloatArray, theta: float
) -> Layer:
    """A pure-attention layer (``A = 0, b = 0``) with field ``(M, c)`` at ``state``.

    ``V m = c`` fixes ``V`` on the mean; ``θ > 0`` also asks ``V u = θ (M² m − M u)`` for the
    mean velocity ``u``: then ``dc/dt = V u`` is ``θ`` times the geodesic's
    ``d(u − M m)/dt = M² m − M u`` (a mean that keeps moving on a straight line at constant
    speed). On the complement of ``span(m, u)``, ``V = α I`` with ``α = |c|/|m|``. Then
    ``B = Σ⁻¹ V⁻¹ M``. ``θ = 0``, ``d = 1``, parallel ``m, u`` or an ill-conditioned ``V``: the
    scaled rotation of :func:`gtcontrol.realize`.
    """
    m, cov = state
    d = c.shape[0]
    if theta == 0.0 or d == 1:
        return realize(m_mat, c, Gaussian(m, cov), mode="attention")
    y = np.stack([m, velocity], axis=1)
    z = np.stack([c, theta * (m_mat @ (m_mat @ m) - m_mat @ velocity)], axis=1)
    sv = np.linalg.svd(y, compute_uv=False)
    if sv[1] <= 1e-8 * sv[0]:
        return realize(m_mat, c, Gaussian(m, cov), mode="attention")
    y_pinv = np.linalg.pinv(y)
    alpha = float(np.linalg.norm(c) / np.linalg.norm(m))
    v = z @ y_pinv + alpha * (np.eye(d) - y @ y_pinv)
    if not np.isfinite(alpha) or alpha == 0.0 or np.linalg.cond(v) > _MAX_COND_V:
        return realize(m_mat, c, Gaussian(m, cov), mode="attention")
    return Layer(V=v, B=np.linalg.solve(cov, np.linalg.solve(v, m_mat)))


# ============================================================================ shooting
#: Right-hand-side evaluations allowed to one re-simulated layer while shooting: a layer that
#: needs more is too stiff to be a good candidate (a regular one needs a few hundred).
MAX_LAYER_EVALS = 20_000


def layer_flow(
    layer: Layer,
    start: State,
    h: float,
    rtol: float,
    *,
    time_limit: float | None = None,
    n_points: int = 2,
) -> Trajectory:
    """One layer's adaptive re-simulation from ``start`` over depth ``h`` (``n_points`` records:
    the ends only by default), its absolute tolerance tied to ``rtol``; at most
    :data:`MAX_LAYER_EVALS` evaluations."""
    return simulate(
        layer,
        Gaussian(*start),
        T=h,
        rtol=rtol,
        atol=1e-16 * rtol / 1e-13,
        n_points=n_points,
        max_evals=MAX_LAYER_EVALS,
        time_limit=time_limit,
    )


def end_state(layer: Layer, start: State, h: float, rtol: float) -> State | None:
    """The state after one layer (adaptive re-simulation); ``None`` if it does not get there."""
    traj = layer_flow(layer, start, h, rtol)
    if traj.status is not Status.SUCCESS:
        return None
    return traj.mean[-1], sym(traj.cov[-1])


def layer_energy(
    layer: Layer, start: State, h: float, n_points: int = 33, time_limit: float | None = None
) -> float:
    """``∫₀ʰ E|v|² dt`` of one layer from ``start`` (:func:`gtcontrol.kinetic_energy`; ``nan``
    when the budget runs out first, ``inf`` when it is not measured finite, so that any layer
    measured is cheaper)."""
    res = kinetic_energy(layer, Gaussian(*start), h, n_points=n_points, time_limit=time_limit)
    return res.energy if res.success or res.status is Status.BUDGET_EXHAUSTED else math.inf


@dataclass(frozen=True)
class Shot:
    """A layer that takes its start state to its end state, and what it cost to find."""

    layer: Layer
    iterations: int
    error: float


#: Fixed-point steps of :func:`shoot` before a layer is given up.
MAX_SHOT_ITERATIONS = 40


def _mismatch(reached: State, end: State, scale: float) -> float:
    return (
        max(float(np.max(np.abs(reached[0] - end[0]))), float(np.max(np.abs(reached[1] - end[1]))))
        / scale
    )


def shoot(
    make_layer: Callable[[FloatArray, FloatArray, State], Layer],
    start: State,
    end: State,
    h: float,
    *,
    tol: float = 1e-12,
    max_iter: int = MAX_SHOT_ITERATIONS,
    expired: Callable[[], bool] = lambda: False,
) -> Shot | None:
    """A layer ``make_layer(M, c, mid)`` that takes ``start`` to ``end`` in time ``h``.

    ``make_layer`` realizes the field ``(M, c)`` at ``mid``, the exact feed-forward state halfway
    through the layer. Starting from the exact feed-forward field ``(M*, c*)`` of
    :func:`ffn_field`, the requested field is corrected by ``(M*, c*) − ffn_field(start,
    reached)`` after each re-simulation until the reached state matches ``end`` to ``tol``
    (relative to the largest entry of ``end``, at least 1). Early steps re-simulate with a
    looser tolerance (a thousandth of the current mismatch), the last with ``rtol = 1e-13``.
    ``None`` when the iteration diverges, a layer blows up or cannot be realized, or
    ``max_iter`` steps or ``expired()`` end it first.
    """
    scale = max(1.0, float(np.max(np.abs(end[0]))), float(np.max(np.abs(end[1]))))
    target = ffn_field(start, end, h)
    field = target
    err = math.inf
    for it in range(max_iter):
        if expired():
            return None
        rtol = min(max(1e-3 * err, 1e-13), 1e-8)
        with np.errstate(all="ignore"):
            try:
                layer = make_layer(*field, ffn_flow(*field, start, 0.5 * h))
                reached = end_state(layer, start, h, rtol)
                new_err = math.inf if reached is None else _mismatch(reached, end, scale)
                got = None
                if reached is not None and tol < new_err <= 10.0 * err and is_spd(reached[1]):
                    got = ffn_field(start, reached, h)
            except (GTControlError, np.linalg.LinAlgError, ValueError):
                return None
        if new_err <= tol and rtol <= 1e-13:
            return Shot(layer, it + 1, new_err)
        if new_err > tol and (got is None or not all(np.all(np.isfinite(g)) for g in got)):
            return None  # diverging, blown up, left the cone, or not realizable
        err = new_err
        if got is not None:
            field = (field[0] + target[0] - got[0], field[1] + target[1] - got[1])
    return None


#: Attention gauges ``(θ, ε)`` of :func:`curvature_gauge` tried in every full-mode layer.
FULL_GAUGES: tuple[tuple[float, float], ...] = ((0.5, 0.1), (0.5, 0.3), (1.0, 0.3))
#: Mean-velocity weights ``θ`` of :func:`attention_gauge` tried in every attention layer
#: (measured on random pairs, d = 8 and 16: θ = 2 is usually best, 1 and 3 sometimes; the
#: scaled rotation, θ = 0, is tried only when none of them hits the next node).
ATTENTION_THETAS: tuple[float, ...] = (2.0, 1.0, 3.0)


@dataclass
class _Build:
    """Layers chosen so far, with what was tried."""

    layers: list[Layer]
    labels: list[str]
    energies: list[float]
    iterations: int = 0
    shots: int = 0
    failed_shots: int = 0
    path: str = "straight mean path"
    #: whether the time (or the reserve kept for the verification) ended a layer's shots
    cut: bool = False


def _geodesic_nodes(plan: Plan, means: Callable[[float], FloatArray] | None) -> list[State]:
    geo = ot_steering(plan.initial, plan.target, plan.T)
    h = plan.T / plan.n
    nodes = []
    for k in range(plan.n + 1):
        m = geo.mean_at(k * h) if means is None else means(k / plan.n)
        nodes.append((np.asarray(m, dtype=float), geo.cov_at(k * h)))
    nodes[0] = (plan.initial.mean, plan.initial.cov)
    nodes[-1] = (plan.target.mean, plan.target.cov)
    return nodes


def _ffn_layers(
    nodes: list[State], h: float, budget: Budget, first: float = 0.0
) -> list[Layer] | None:
    """The exact node-to-node feed-forward layers; ``None`` if the budget ran out first.

    ``first`` is the expected cost of the first layer (the geodesic's own ``O(d³)`` work is a
    fair guess: the same eigen-decompositions and polar factors), later ones that of the last.
    """
    out = []
    last = first
    for a, b in pairwise(nodes):
        left = budget.grace()  # the exact layers are the fallback: they may use the grace
        # the next layer costs about what the last one did (a busy machine included)
        if left is not None and left <= max(1e-9, 1.5 * last):
            return None
        clock = time.perf_counter()
        m_mat, c = ffn_field(a, b, h)
        out.append(Layer(A=m_mat, b=c))
        last = time.perf_counter() - clock
    return out


Maker = Callable[[FloatArray, FloatArray, State], Layer]


def _curvature_maker(theta: float, eps: float) -> Maker:
    def make(m_mat: FloatArray, c: FloatArray, mid: State) -> Layer:
        return curvature_gauge(m_mat, c, mid, theta, eps)

    return make


def _attention_maker(velocity: FloatArray, theta: float) -> Maker:
    def make(m_mat: FloatArray, c: FloatArray, mid: State) -> Layer:
        return attention_gauge(m_mat, c, mid, velocity, theta)

    return make


def _best_shot(
    build: _Build,
    k: int,
    candidates: Sequence[tuple[str, Maker]],
    ends: tuple[State, State],
    h: float,
    budget: Budget,
    reserve: float = 0.0,
) -> bool:
    """Shoot every candidate gauge of layer ``k``; keep the lowest energy. False if none hit.
    No shot starts, and a shot stops, once no more than ``reserve`` seconds are left."""

    def expired() -> bool:
        return budget.exhausted or budget.remaining() <= reserve

    hit = False
    for label, make in candidates:
        if expired():
            build.cut = True
            break
        build.shots += 1
        shot = shoot(make, ends[0], ends[1], h, expired=expired)
        if shot is None:
            build.failed_shots += 1
            build.cut = build.cut or expired()
            continue
        build.iterations += shot.iterations
        energy = layer_energy(shot.layer, ends[0], h, time_limit=budget.nested_limit())
        if energy < build.energies[k]:
            build.layers[k], build.labels[k], build.energies[k] = shot.layer, label, energy
        hit = True
    return hit


#: The gauge search of the flow construction stops while this many times the estimated
#: verification is left (:func:`_full`): the estimate is the speed measured earlier, and a
#: machine whose load rises meanwhile slows the verification (docs/benchmarks.md).
_VERIFY_RESERVE = 3.0


def _full(plan: Plan, budget: Budget) -> tuple[_Build | None, bool]:
    """Exact feed-forward layers, each replaced by a cheaper attention gauge when one exists
    (``None`` when the budget ran out before the exact layers were built).

    Every layer is a feasible control as built, so the gauge search stops while the time left
    is :data:`_VERIFY_RESERVE` × the verifying re-simulation's estimated cost (the layers'
    energy simulations so far, scaled to ``L`` layers): the control found is then verified
    within the limit, where a search run to the deadline would leave it unverified
    (docs/benchmarks.md).
    """
    h = plan.T / plan.n
    clock = time.perf_counter()
    nodes = _geodesic_nodes(plan, None)
    base = _ffn_layers(nodes, h, budget, first=time.perf_counter() - clock)
    if base is None:
        return None, False
    build = _Build(list(base), ["ffn"] * plan.n, [math.inf] * plan.n)
    if plan.mode == "ffn":
        return build, True
    energy_seconds = 0.0
    with progress("steer: flow layers", total=plan.n) as update:
        for k in range(plan.n):
            if budget.exhausted:
                return build, False
            clock = time.perf_counter()
            build.energies[k] = layer_energy(base[k], nodes[k], h, time_limit=budget.nested_limit())
            energy_seconds += time.perf_counter() - clock
            reserve = _VERIFY_RESERVE * plan.n * energy_seconds / (k + 1)
            if budget.exhausted or budget.remaining() <= reserve:
                return build, False
            candidates = [
                (f"curvature θ={theta:g} ε={eps:g}", _curvature_maker(theta, eps))
                for theta, eps in FULL_GAUGES
            ]
            _best_shot(build, k, candidates, (nodes[k], nodes[k + 1]), h, budget, reserve)
            update(k + 1)
    return build, not (budget.exhausted or build.cut)


def _mean_paths(plan: Plan) -> list[tuple[str, Callable[[float], FloatArray]]]:
    """The straight mean line, then paths that keep further away from 0 (attention)."""
    m0, m1 = plan.initial.mean, plan.target.mean
    paths: list[tuple[str, Callable[[float], FloatArray]]] = [
        ("straight mean path", lambda s: (1.0 - s) * m0 + s * m1)
    ]
    for share in (0.25, 0.5):
        path = _mean_path(m0, m1, share)
        if not np.allclose(path(0.5), paths[0][1](0.5), rtol=0.0, atol=1e-14):
            paths.append((f"mean path with clearance {share:g}·min(|m0|, |m1|)", path))
    return paths


def _attention(plan: Plan, budget: Budget) -> tuple[_Build | None, bool, list[str]]:
    """Node-to-node attention layers along each mean path; the cheapest complete one."""
    h = plan.T / plan.n
    best: _Build | None = None
    notes: list[str] = []
    for label, path in _mean_paths(plan):
        if budget.exhausted:
            return best, False, notes
        nodes = _geodesic_nodes(plan, path)
        zero = Layer(dim=plan.initial.dim)
        build = _Build([zero] * plan.n, ["none"] * plan.n, [math.inf] * plan.n, path=label)
        with progress("steer: flow layers (attention)", total=plan.n) as update:
            for k in range(plan.n):
                u = (nodes[k + 1][0] - nodes[k][0]) / h
                candidates = [
                    (f"mean weight θ={theta:g}", _attention_maker(u, theta))
                    for theta in (*ATTENTION_THETAS, 0.0)
                ]
                ends = (nodes[k], nodes[k + 1])
                if not _best_shot(build, k, candidates[:-1], ends, h, budget) and not _best_shot(
                    build, k, candidates[-1:], ends, h, budget
                ):
                    why = budget.reason() if budget.exhausted else "no gauge hit its end node"
                    notes.append(f"{label}: stopped at layer {k + 1} ({why})")
                    break
                update(k + 1)
            else:
                if best is None or sum(build.energies) < sum(best.energies):
                    best = build
    return best, not budget.exhausted, notes


def _baseline(plan: Plan, budget: Budget) -> tuple[Schedule | None, str]:
    if plan.mode != "attention":
        return None, "exact L-layer geodesic"
    if no_time_for_closed_form(plan, budget):
        return None, "exact attention construction not built (no time left)"
    try:
        return exact_layer_steering(
            plan.initial, plan.target, plan.T, n_layers=plan.n, mode="attention"
        ), "exact attention construction"
    except InvalidParametersError as exc:
        return None, f"exact attention construction unavailable ({exc})"


def _result(
    plan: Plan,
    schedule: Schedule,
    label: str,
    complete: bool,
    budget: Budget,
    stats: dict[str, Any],
) -> SteeringResult:
    traj = verify(schedule, plan.initial, budget)
    reached = traj is not None and traj.status is Status.SUCCESS
    err = traj.final.bures_wasserstein(plan.target) if reached and traj is not None else math.inf
    if not reached:
        status = Status.FAILED if traj is None else traj.status
        message = "the re-simulated moments of the flow construction do not reach T"
        if traj is not None and traj.status is Status.BUDGET_EXHAUSTED:
            message = (
                f"the flow construction ({label}) is not verified: its re-simulation ran out "
                f"of time ({traj.message})"
            )
    elif err > plan.opts.terminal_tol:
        status, message = (
            Status.FAILED,
            (
                f"the re-simulated terminal error {err:.3g} of the flow construction exceeds "
                f"terminal_tol = {plan.opts.terminal_tol:g}"
            ),
        )
    elif not complete:
        why = (
            budget.reason()
            if budget.exhausted
            else f"the gauge search stopped to keep time for the verification within the "
            f"time limit of {budget.given_limit:g} s"
        )
        status, message = (
            Status.BUDGET_EXHAUSTED,
            (
                f"{why}; returning the best feasible control so far ({label}), "
                f"re-simulated terminal error {err:.3g}"
            ),
        )
    else:
        status = Status.SUCCESS
        message = f"flow construction ({label}); re-simulated terminal error {err:.3g}"
    return measure(plan, schedule, traj, status, message, {**stats, "warm_start": label}, budget)


def solve_flow(plan: Plan, budget: Budget, clock: float) -> SteeringResult | None:
    """Steer by exact node-to-node layers; ``None`` when no control could be built."""
    start = time.perf_counter()
    if no_time_for_closed_form(plan, budget):
        why = (
            f"the time limit of {budget.given_limit:g} s leaves {budget.remaining():.3g} s (and "
            f"a grace of {budget.grace():.3g} s for a fallback), less than the exact "
            f"construction's estimated {closed_form_estimate(plan):.3g} s"
        )
        return identity_result(plan, budget, clock, why, {"method": "flow"})
    baseline, base_label = _baseline(plan, budget)
    notes: list[str] = []
    if plan.mode == "attention":
        build, complete, notes = _attention(plan, budget)
    else:
        build, complete = _full(plan, budget)
    stats: dict[str, Any] = {
        "method": "flow",
        "ipopt_status": None,
        "converged": complete,
        "iterations": 0 if build is None else build.iterations,
        "corrections": 0,
        "build_seconds": 0.0,
        "cached": False,
        "nlp_objective": math.nan,
        "regularization": plan.reg_weight,
        "redundancy": plan.redundancy if plan.mode == "full" else None,
        "time_limit": budget.time_limit,
        "shots": 0 if build is None else build.shots,
        "failed_shots": 0 if build is None else build.failed_shots,
        "layer_gauges": None if build is None else list(build.labels),
        "solve_seconds": time.perf_counter() - start,
    }
    results = []
    if build is not None:
        schedule = Schedule(build.layers, plan.T)
        results.append(_result(plan, schedule, _label(plan, build), complete, budget, stats))
    if baseline is not None:
        results.append(_result(plan, baseline, base_label, complete, budget, stats))
    if not results:
        if budget.exhausted:
            return identity_result(plan, budget, clock, budget.reason(), stats)
        return None
    tol = plan.opts.terminal_tol
    best = min(results, key=lambda r: (not r.success, not r.terminal_error <= tol, r.cost))
    return finish(best, clock, notes)


def _label(plan: Plan, build: _Build) -> str:
    if plan.mode == "ffn":
        return "exact L-layer geodesic (flow)"
    if plan.mode == "full":
        improved = sum(lab != "ffn" for lab in build.labels)
        return f"exact L-layer geodesic, {improved} of {plan.n} layers with attention gauges"
    return f"node-to-node attention layers, {build.path}"
