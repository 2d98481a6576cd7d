"""Layer parameters for a desired field, and exact steering by ``L`` constant layers.

A layer acts on ``N(m, Σ)`` through the affine field ``x ↦ M x + c`` with ``M = A + V Σ B`` and
``c = b + V m`` (docs/theory.md §2). :func:`realize` inverts this map in each parameter mode;
:func:`exact_layer_steering` builds an ``L``-layer Transformer that reaches a target exactly: the
Bures–Wasserstein geodesic sampled at the layer switches (``"ffn"``/``"full"``), or a precision
phase and a mean phase (``"attention"``). Both are closed forms (no iteration, no
``time_limit``); they also serve as warm starts of :func:`gtcontrol.steer`.

Reference: the paper cited in :mod:`gtcontrol`, §5.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import scipy.linalg

from .._linalg import FloatArray, sym
from .._validation import as_float_array, as_positive_float
from ..errors import InvalidGaussianError, InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.moments import simulate
from ..model.params import Layer, Schedule
from .ot import OTSteering, general_position, ot_steering, pinv_cols, range_basis
from .reachability import (
    ZERO_MEAN_RTOL,
    check_mode,
    check_n_layers,
    check_reachable,
    is_zero_mean,
    problem_scale,
)

__all__ = ["exact_layer_steering", "realize"]


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
    if m_norm <= ZERO_MEAN_RTOL * problem_scale(state):
        if c_norm > ZERO_MEAN_RTOL * (m_scale * problem_scale(state) + 1.0):
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
    zero = np.zeros((d, d))
    # the products square the data: past ~1e150 they leave the float range, and V = B = 0
    # (the feed-forward alone realizes M and c) is the answer kept
    with np.errstate(over="ignore", invalid="ignore"):
        f_old = objective(v, b)
        try:
            for _ in range(2000):
                vs = v @ cov
                b = np.linalg.solve(vs.T @ vs + eye, vs.T @ m_mat)
                sb = cov @ b
                lhs = sb @ sb.T + np.outer(m, m) + eye
                v = np.linalg.solve(lhs, (m_mat @ sb.T + np.outer(c, m)).T).T
                f_new = objective(v, b)
                if f_old - f_new <= 1e-13 * max(f_new, 1e-300):
                    break
                f_old = f_new
        except np.linalg.LinAlgError:
            return zero, zero
        best = objective(v, b)
        if not math.isfinite(best) or best >= objective(zero, zero):
            return zero, zero
    return v, b


def realize(M: Any, c: Any, state: Gaussian, *, mode: str = "full") -> Layer:
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
    M
        The linear part of the field, shape ``(d, d)``.
    c
        The shift of the field, shape ``(d,)``.
    state
        The Gaussian ``N(m, Σ)`` at which the field is realized.
    mode
        ``"full"``, ``"ffn"`` or ``"attention"``.

    Returns
    -------
    Layer
        One single-head layer. Its :func:`gtcontrol.moment_field` at ``state`` equals
        ``(M m + c, M Σ + Σ Mᵀ)``.

    Raises
    ------
    InvalidParametersError
        On malformed input, or when pure attention cannot realize the field at this state
        (singular Σ, ``c ≠ 0`` at ``m = 0``, or ``c = 0 ≠ M`` at ``m ≠ 0`` in ``d = 1``).
    InvalidGaussianError
        If ``state`` is not a :class:`Gaussian`.

    Examples
    --------
    A feed-forward layer (``mode="ffn"``) with the affine field ``v(x) = Mx + c`` at a state:

    >>> import numpy as np
    >>> from gtcontrol import Gaussian, affine_velocity, realize
    >>> state = Gaussian([1.0, 0.0], [[1.0, 0.2], [0.2, 0.5]])
    >>> M, c = np.array([[0.0, 1.0], [-1.0, 0.0]]), np.array([0.5, 0.0])
    >>> layer = realize(M, c, state, mode="ffn")
    >>> field = affine_velocity(layer, state.mean, state.cov)
    >>> bool(np.allclose(field[0], M) and np.allclose(field[1], c))
    True

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
    """
    if not isinstance(state, Gaussian):
        raise InvalidGaussianError(f"state: expected a Gaussian, got {type(state).__name__}")
    d = state.dim
    mm = as_float_array("M", M, ndim=2, shape=(d, d))
    cc = as_float_array("c", c, ndim=1, shape=(d,))
    mode = check_mode(mode)
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
    u0, _ = range_basis(initial.cov, r)
    u1, _ = range_basis(target.cov, r)
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


def _real_log(c: FloatArray) -> FloatArray:
    """Principal real logarithm of a matrix with no eigenvalue on the closed negative axis.

    A layer's transport map is close to the identity when the layers are many; a map without an
    accurate real logarithm means the steps are too large, so the error names ``n_layers``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # accuracy is checked below instead
        log_c = scipy.linalg.logm(c)
    scale = max(1.0, float(np.max(np.abs(log_c))))
    if np.iscomplexobj(log_c):
        if float(np.max(np.abs(np.imag(log_c)))) > 1e-10 * scale:
            raise InvalidParametersError(
                "n_layers: a layer transport map of exact_layer_steering has no real logarithm; "
                "use more layers"
            )
        log_c = np.real(log_c)
    err = float(np.linalg.norm(scipy.linalg.expm(log_c) - c, 1) / np.linalg.norm(c, 1))
    if err > 1e-10:
        raise InvalidParametersError(
            "n_layers: the matrix logarithm of a layer transport map of exact_layer_steering is "
            f"inaccurate (relative error {err:.2g}); use more layers"
        )
    return np.asarray(log_c, dtype=float)


def ffn_layers(geo: OTSteering, n: int, means: FloatArray | None = None) -> list[Layer]:
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
            p0 = gu0 @ pinv_cols(gu0)
            p1 = gu1 @ pinv_cols(gu1)
            c_k = gu1 @ pinv_cols(gu0) + (np.eye(d) - p1) @ (np.eye(d) - p0)
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
    (integrated by :func:`gtcontrol.simulate`; it never reaches 0), along which
    ``q(m) = (U0ᵀm)ᵀ Σ̃⁻¹ (U0ᵀm) + |(I − U0U0ᵀ) m|²`` grows like ``e^{2vt}``: ``v`` is the rate that
    brings ``q`` to the target's, but at least ``1/T_cov`` in magnitude (a small ``v`` makes
    ``B = −R/(2v)`` large). With ``m0 = 0``, ``v = (|R|_F/2)^{1/2} d^{-1/4}`` balances
    ``|V|_F = |B|_F``. Mean phase (last layer): :func:`_mean_layer`.
    """
    d = initial.dim
    h = T / n
    zero = is_zero_mean(initial, problem_scale(initial, target))
    r = initial.rank
    if r == 0:  # Σ0 = Σ1 = 0: only the mean moves, dm/dt = V m with B = 0
        if zero:
            return [Layer(V=np.zeros((d, d)), B=np.zeros((d, d)))] * n
        return [_mean_layer(initial.mean, target.mean, T)] * n
    u0, _ = range_basis(initial.cov, r)
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
            "n_layers: attention-mode constructive steering with a non-zero mean needs at least "
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
    T: float,
    *,
    n_layers: int = 10,
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

    A closed form (no iteration, no ``time_limit``).

    Parameters
    ----------
    initial
        The starting Gaussian.
    target
        The Gaussian to reach; it must be reachable in ``mode`` (see :func:`is_reachable`).
    T
        Depth, positive.
    n_layers
        Number ``L`` of constant layers (1 to 1,000).
    mode
        ``"full"``, ``"ffn"`` or ``"attention"``.

    Returns
    -------
    Schedule
        ``L`` layers over depth ``T``; :func:`gtcontrol.simulate` reaches ``target`` to
        integration accuracy.

    Raises
    ------
    UnreachableTargetError
        If the target is not reachable in ``mode`` (see :func:`is_reachable`).
    InvalidParametersError
        On malformed input or a case listed above that needs more layers (including a layer
        transport map without an accurate real logarithm) or a target with the range of a
        singular Σ0.
    InvalidGaussianError
        If an argument is not a :class:`Gaussian` or the dimensions differ.

    Examples
    --------
    Four constant layers carry ``N(1, 0.5)`` to ``N(2, 1.5)`` in depth 1, exactly:

    >>> from gtcontrol import Gaussian, exact_layer_steering, simulate
    >>> g0, g1 = Gaussian([1.0], [[0.5]]), Gaussian([2.0], [[1.5]])
    >>> sched = exact_layer_steering(g0, g1, 1.0, n_layers=4)
    >>> sched.n_layers, bool(simulate(sched, g0).final.bures_wasserstein(g1) < 1e-8)
    (4, True)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
    """
    mode = check_mode(mode)
    check_reachable(initial, target, mode=mode)
    t_hor = as_positive_float("T", T)
    n = check_n_layers(n_layers)
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # refused below if it overflows
            return _exact_schedule(initial, target, t_hor, n, mode)
    except InvalidParametersError as exc:
        if not str(exc).startswith(("A:", "b:", "V:", "B:")):
            raise
        raise InvalidParametersError(
            f"T: the exact layers for depth T = {t_hor:g} are not representable in float64 "
            f"({exc}); rescale the depth"
        ) from None


def _exact_schedule(
    initial: Gaussian, target: Gaussian, t_hor: float, n: int, mode: str
) -> Schedule:
    """:func:`exact_layer_steering`'s schedule, its arguments checked."""
    if mode == "attention":
        return Schedule(_attention_layers(initial, target, t_hor, n), t_hor)
    if general_position(initial, target):
        return Schedule(ffn_layers(ot_steering(initial, target, t_hor), n), t_hor)
    if n < 2:
        raise InvalidParametersError(
            "n_layers: degenerate end points whose supports are not in general position need at "
            "least 2 layers (one leg to an intermediate Gaussian, one from it)"
        )
    mid = _grassmann_midpoint(initial, target)
    n1 = n // 2
    h = t_hor / n
    first = ffn_layers(ot_steering(initial, mid, n1 * h), n1)
    second = ffn_layers(ot_steering(mid, target, (n - n1) * h), n - n1)
    return Schedule([*first, *second], t_hor)
