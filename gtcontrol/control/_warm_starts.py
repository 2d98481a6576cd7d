"""Starting controls of :func:`gtcontrol.steer` and the state guesses that go with them (private).

Every start is a closed form of :mod:`.ot` / :mod:`.realization` realized in the requested
parameter mode; the NLP's state guesses are the moments of the starting control, so they satisfy
its dynamics.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from .._linalg import FloatArray, sym, vech_index
from .._status import Status
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import simulate
from ..model.params import Control, Layer, Schedule
from .ot import general_position, ot_steering
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
    ffn = exact_layer_steering(initial, target, T, n, "ffn")
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
                [realize(lay.A, lay.b, st, "full") for lay, st in pairs],
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
