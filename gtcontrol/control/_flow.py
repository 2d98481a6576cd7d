"""Exact constant layers and layer-by-layer shooting for :func:`gtcontrol.steer` (private).

A constant feed-forward layer ``x ↦ M x + c`` has an exact flow: ``Σ(t) = e^{Mt} Σ e^{Mᵀt}`` and
``m(t) = e^{Mt} m + (∫₀ᵗ e^{Ms} ds) c``. Between two Gaussians ``N(m_a, Σ_a)`` and
``N(m_b, Σ_b)`` (``Σ_a, Σ_b ≻ 0``) the layer of duration ``h`` with ``e^{Mh} = C``, ``C`` the
Bures–Wasserstein map ``Σ_a^{-1/2}(Σ_a^{1/2} Σ_b Σ_a^{1/2})^{1/2} Σ_a^{-1/2}`` (symmetric positive
definite, so ``M = log C / h`` is real symmetric), moves one onto the other exactly
(:func:`ffn_field`, the exact L-layer construction of docs/steering.md §4, layer by layer).

Layers with attention (``M(t) = A + V Σ(t) B`` changes inside the layer) have no closed-form flow.
:func:`shoot` makes such a layer hit a prescribed end state anyway: the field the layer should
realize is corrected by the difference of two exact feed-forward fields, the one that reaches the
target and the one that reaches where the re-simulated layer actually went. This fixed point
converges linearly (typically 1e-1 per step), because the exact feed-forward flow is a close
model of the layer's; each step is one adaptive re-simulation (:func:`gtcontrol.simulate`).

The gauges (:func:`curvature_gauge`, :func:`attention_gauge`) choose the attention parameters
that realize a requested field at a state, so that inside the layer the field varies like the
Bures–Wasserstein geodesic's (``dM/dt = −M²`` and a mean moving on a straight line).

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .._linalg import FloatArray, is_spd, polar, spd_sqrt_pair, sym
from .._status import Status
from ..errors import GTControlError
from ..model.gaussian import Gaussian
from ..model.moments import simulate
from ..model.params import Layer
from .ot import kinetic_energy
from .realization import realize

__all__: list[str] = []

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


def _phi(lam: FloatArray, h: float) -> FloatArray:
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
    c = u @ ((u.T @ m_b - gam * (u.T @ m_a)) / _phi(lam, h))
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
        return realize(m_mat, c, Gaussian(m, cov), "attention")
    y = np.stack([m, velocity], axis=1)
    z = np.stack([c, theta * (m_mat @ (m_mat @ m) - m_mat @ velocity)], axis=1)
    sv = np.linalg.svd(y, compute_uv=False)
    if sv[1] <= 1e-8 * sv[0]:
        return realize(m_mat, c, Gaussian(m, cov), "attention")
    y_pinv = np.linalg.pinv(y)
    alpha = float(np.linalg.norm(c) / np.linalg.norm(m))
    v = z @ y_pinv + alpha * (np.eye(d) - y @ y_pinv)
    if not np.isfinite(alpha) or alpha == 0.0 or np.linalg.cond(v) > _MAX_COND_V:
        return realize(m_mat, c, Gaussian(m, cov), "attention")
    return Layer(V=v, B=np.linalg.solve(cov, np.linalg.solve(v, m_mat)))


# ============================================================================ shooting
#: Right-hand-side evaluations allowed to one re-simulated layer while shooting: a layer that
#: needs more is too stiff to be a good candidate (a regular one needs a few hundred).
MAX_LAYER_EVALS = 20_000


def end_state(layer: Layer, start: State, h: float, rtol: float) -> State | None:
    """The state after one layer (adaptive re-simulation); ``None`` if it does not get there."""
    traj = simulate(
        layer,
        Gaussian(*start),
        T=h,
        rtol=rtol,
        atol=1e-16 * rtol / 1e-13,
        n_points=2,
        max_evals=MAX_LAYER_EVALS,
    )
    if traj.status is not Status.SUCCESS:
        return None
    return traj.mean[-1], sym(traj.cov[-1])


def layer_energy(
    layer: Layer, start: State, h: float, n_points: int = 33, time_limit: float | None = None
) -> float:
    """``∫₀ʰ E|v|² dt`` of one layer from ``start`` (:func:`gtcontrol.kinetic_energy`; ``nan``
    when ``time_limit`` runs out first)."""
    return kinetic_energy(layer, Gaussian(*start), h, n_points=n_points, time_limit=time_limit)


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
