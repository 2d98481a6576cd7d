"""Steering through a fixed network: keep a base's heads, add the least control.

:func:`gtcontrol.steer` with ``base=`` solves the steering problem of the paper with a drift:
every sublayer keeps the base's heads (dense and factored) and its affine part unchanged and adds
a constant affine control ``A_k, b_k`` (mode ``"ffn"``), or that and one added head
``(V_k, B_k)`` after the base's heads (mode ``"full"``); the total field on ``N(m, Σ)`` is

    M(t) = A_base + A_k + Σ_h V_h Σ(t) B_h [+ V_k Σ(t) B_k],
    c(t) = b_base + b_k + Σ_h V_h m(t) [+ V_k m(t)],

and the objective is the added field's energy ``∫ E|u|² dt``, ``u = (A_k + V_k Σ B_k) x + b_k +
V_k m`` (:func:`added_power`).

**Frame.** The flow is a congruence, so Σ keeps its rank ``r``. The initial and target
covariances must share their range ``U`` (``d × r``, orthonormal); ``N`` spans the rest. A state
is read in that frame as ``z = Uᵀm``, ``y = Nᵀm``, ``S = UᵀΣU`` (positive definite) and the
off-block ``X = NᵀΣU``, which the base's heads may create (MiniLM's heads move LayerNorm's null
direction) and the control must bring back to 0 by the end of every sublayer.

**Nodes.** Candidate plans, the one with the least predicted added energy kept (the open-loop
control of each sublayer, priced by Simpson's rule on the blank model's states): the
Bures–Wasserstein geodesic of the reduced covariances ``S_k = G_k S_0 G_k``,
``G_k = (1 − s_k) I + s_k C`` (``C`` the Bures–Wasserstein map ``S_0 → S_1``) with the straight
mean line; and the drift-aware plans (:func:`_drift_nodes`): the base's field on the active
subspace frozen per sublayer as a linear drift ``dz/dt = F_k z + f_k``, every token on the
least-energy path of that linear system, coupled by the Bures–Wasserstein map of the
Gramian-weighted end points (the optimal coupling for the cost ``(z1 − Φz0)ᵀW⁻¹(z1 − Φz0)``),
once with the drift read along the geodesic and once along that plan. With no drift it is the
geodesic; against a strong base it saves 10–40 % of the added energy (benchmarks).

**Model.** Between a start and an end state the blank network has an exact constant field
(:func:`model_field`): ``M = U M_r Uᵀ + N W Uᵀ``, with ``M_r = log(C)/h`` the exact node-to-node
feed-forward of the reduced covariances, ``W`` the coupling that produces the requested
off-block (the flow of ``M`` is block-triangular in ``(U, N)``, so the off-block is linear in
``W``), and the shift ``c`` that moves both parts of the mean.

**Sublayer.** From where the previous sublayer actually ended, the control starts as the
model field to the next node minus the base's field averaged (Simpson) along the planned
sub-path, then is corrected by the fixed point of :func:`gtcontrol.control._constructions.shoot`:
``control += model(start → node) − model(start → reached)``, each step one adaptive
re-simulation of the sublayer (through the factored heads, ``O(H d² d_head)`` per evaluation
and ``O(d² r)`` for the factor), until the reached state matches the node to ``1e-12``
relative. Coordinates that are constant in the problem (exactly zero variance and the same mean
at both ends: the affine coordinate of a layer on ``R^{d+1}``) are left alone by the control.

**Added heads** (mode ``"full"``). A constant ``A_k, b_k`` cannot follow the variation the least
added energy asks of the added field inside a sublayer (Pontryagin: ``dK/dt = −(K² + FᵀK + KF)``
and mean-field terms of the base's heads, :func:`head_gauge`); a head's field ``V Σ(t) B`` varies
with the state. Each sublayer is first shot with ``A_k, b_k`` alone; a head is designed at that
shot's midpoint to supply the variation, the sublayer is shot again with it (the heads' response
taken whole, :class:`Requested`), and the head is kept only when the re-simulated added energy of
the sublayer is lower (a shot that is already dearer, or stalls, stops early). So mode
``"full"`` is never dearer than ``"ffn"`` on the same nodes, sublayer by sublayer.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import scipy.linalg
from scipy.integrate import simpson

from .._blas import calm_blas
from .._linalg import FloatArray, sym
from .._status import Budget, Status, shown
from ..errors import InvalidParametersError, UnreachableTargetError
from ..model.field import affine_velocity
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Layer, Schedule
from ._constructions import bw_map, exp_integral, ffn_flow, layer_flow
from ._steer_problem import (
    RESIMULATION_ATOL,
    RESIMULATION_RTOL,
    SteeringResult,
    SteerOptions,
    energy_points,
)
from .reachability import check_pair, check_reachable, problem_scale

__all__: list[str] = []

#: Relative mismatch (of the mean and covariance blocks) at which a sublayer has hit its node.
SHOT_TOL = 1e-12
#: Fixed-point steps per sublayer before it is given up.
MAX_SHOTS = 30
#: Relative size of ``(I − P)Σ1`` (``P`` the projection on the initial's range) above which the
#: target is off the initial's active subspace.
SUPPORT_RTOL = 1e-9
#: Reserve kept for the verification, in units of its estimate (measured sublayer integrations).
VERIFY_RESERVE = 3.0


# ============================================================================ the problem
@dataclass(frozen=True, eq=False)
class Frame:
    """The active subspace ``U`` of the end points, its complement ``N`` and constant coordinates.

    ``N``'s first columns are the constant coordinates' unit vectors (their rows of every
    control are zero).
    """

    U: FloatArray
    N: FloatArray
    fixed: tuple[int, ...]

    def reduce(self, mean: FloatArray, cov: FloatArray) -> Reduced:
        """``(z, S, y, X)`` of ``N(mean, cov)``."""
        su = cov @ self.U
        return Reduced(self.U.T @ mean, sym(self.U.T @ su), self.N.T @ mean, self.N.T @ su)


@dataclass(frozen=True, eq=False)
class Reduced:
    """A state in the frame: ``z = Uᵀm``, ``S = UᵀΣU``, ``y = Nᵀm``, ``X = NᵀΣU``."""

    z: FloatArray
    S: FloatArray
    y: FloatArray
    X: FloatArray

    def mismatch(self, other: Reduced, scale: float) -> float:
        """Largest entry of the difference, over ``scale``."""
        parts = [self.z - other.z, self.S - other.S, self.y - other.y, self.X - other.X]
        return max((float(np.max(np.abs(p))) for p in parts if p.size), default=0.0) / scale


@dataclass(frozen=True, eq=False)
class BaseProblem:
    """A validated steering problem around a base."""

    initial: Gaussian
    target: Gaussian
    T: float
    n: int
    bases: tuple[Layer, ...]
    frame: Frame
    opts: SteerOptions
    #: ``"ffn"``: the additions are ``A_k, b_k``; ``"full"``: also an added head per sublayer.
    mode: str = "ffn"

    @property
    def terminal_tol(self) -> float:
        """Relative tolerance of the verified terminal error."""
        return self.opts.terminal_tol

    @property
    def token_check(self) -> int | None:
        """Tokens of the optional token check (``None``: none)."""
        return self.opts.token_check

    @property
    def seed(self) -> int:
        """Seed of the token sample."""
        return self.opts.seed

    @property
    def h(self) -> float:
        """Sublayer duration."""
        return self.T / self.n

    @property
    def scale(self) -> float:
        """``max(1, |m|, sqrt(tr Σ))`` of the end points."""
        return problem_scale(self.initial, self.target)


def check_base(base: Any, n: int, T: float, d: int) -> tuple[Layer, ...]:
    """The base layer of every sublayer, or :class:`InvalidParametersError` naming the input."""
    if isinstance(base, Layer):
        layers: tuple[Layer, ...] = (base,) * n
        names = ["base"] * n
    elif isinstance(base, Schedule):
        if base.n_layers != n or not math.isclose(base.T, T, rel_tol=1e-12):
            raise InvalidParametersError(
                f"base: a Schedule of {base.n_layers} layers over depth {base.T:g}; expected "
                f"n_layers = {n} layers over T = {T:g} (one base layer per sublayer)"
            )
        layers = base.layers
        names = [f"base.layers[{k}]" for k in range(n)]
    else:
        raise InvalidParametersError(
            f"base: expected a Layer or a Schedule, got {shown(base)} ({type(base).__name__})"
        )
    for lay, name in zip(layers, names, strict=True):
        if lay.dim != d:
            raise InvalidParametersError(
                f"{name}: dimension {lay.dim}, but the initial Gaussian has dimension {d}"
            )
        if lay.noise is not None:
            raise InvalidParametersError(
                f"{name}: Brownian forcing raises the covariance's rank; steering keeps it"
            )
        if not lay.is_gaussian_exact:
            raise InvalidParametersError(
                f"{name}: a {lay.ffn.activation if lay.ffn else ''} feed-forward is outside the "
                "exact moment model; give the base's attention sublayer"
            )
    return layers


def _frame(initial: Gaussian, target: Gaussian) -> Frame:
    """The common active subspace, or an error naming the target."""
    d, r = initial.dim, initial.rank
    _, u = np.linalg.eigh(initial.cov)
    big = u[:, d - r :]
    proj_off = target.cov - big @ (big.T @ target.cov)
    size = float(np.linalg.norm(target.cov))
    off = float(np.linalg.norm(proj_off))
    if off > SUPPORT_RTOL * max(size, np.finfo(float).tiny):
        raise UnreachableTargetError(
            f"target: its covariance leaves the initial's active subspace (|(I − P)Σ1| = "
            f"{off:.3g}, |Σ1| = {size:.3g}, P the projection on range Σ0 of rank {r}); steering "
            "around a base keeps the active subspace: give a target on the same subspace"
        )
    zero0 = np.diag(initial.cov) == 0.0
    zero1 = np.diag(target.cov) == 0.0
    fixed = tuple(int(j) for j in np.flatnonzero(zero0 & zero1 & (initial.mean == target.mean)))
    null = u[:, : d - r]
    if fixed:
        e = np.zeros((d, len(fixed)))
        e[list(fixed), range(len(fixed))] = 1.0
        rest = null - e @ (e.T @ null)
        q = np.linalg.svd(rest, full_matrices=False)[0]
        null = np.hstack([e, q[:, : d - r - len(fixed)]])
    return Frame(big, null, fixed)


def _moved_fixed(lay: Layer, fixed: tuple[int, ...]) -> int | None:
    """A constant coordinate that ``lay``'s heads or affine part move, else ``None``."""
    a, b = lay.affine_ffn()
    rows = list(fixed)
    moved = np.any(a[rows] != 0.0, axis=1) | (b[rows] != 0.0)
    fh = lay.factored_heads
    if fh is not None:
        moved |= np.any(fh.o_cat[rows] != 0.0, axis=1)
    for v_h, _ in lay.dense_heads:
        moved |= np.any(v_h[rows] != 0.0, axis=1)
    hit = np.flatnonzero(moved)
    return rows[int(hit[0])] if hit.size else None


def make_problem(
    initial: Gaussian,
    target: Gaussian,
    T: float,
    n: int,
    base: Any,
    opts: SteerOptions,
    mode: str = "ffn",
) -> BaseProblem:
    """Validate the end points against the base (refusals up front)."""
    check_pair(initial, target)
    check_reachable(initial, target, mode="ffn")  # a rank change
    bases = check_base(base, n, T, initial.dim)
    frame = _frame(initial, target)
    if frame.fixed:
        for k, lay in enumerate(bases):
            j = _moved_fixed(lay, frame.fixed)
            if j is not None:
                name = "base" if isinstance(base, Layer) else f"base.layers[{k}]"
                raise InvalidParametersError(
                    f"{name}: moves coordinate {j}, which has zero variance and the same mean "
                    "at both ends (the affine coordinate of a layer on R^{d+1} must stay "
                    "constant); its row of the heads' output and of A, b must be zero"
                )
    return BaseProblem(initial, target, T, n, bases, frame, opts, mode)


# ============================================================================ the model field
def _integral_phi(lam: FloatArray, h: float) -> FloatArray:
    """``∫₀ʰ (e^{λt} − 1)/λ dt = (φ(λ, h) − h)/λ`` entrywise (``h²/2`` at ``λ = 0``)."""
    x = lam * h
    small = np.abs(x) < 1e-4
    safe = np.where(small, 1.0, lam)
    series = h * h * (0.5 + x / 6.0 + x * x / 24.0)
    return np.where(small, series, (exp_integral(lam, h) - h) / safe)


@dataclass(frozen=True, eq=False)
class ModelField:
    """The blank network's exact constant field between two states, in the frame."""

    A: FloatArray
    c: FloatArray
    gam: FloatArray
    lam: FloatArray
    Q: FloatArray
    c_u: FloatArray


def model_field(frame: Frame, start: Reduced, end: Reduced, h: float) -> ModelField:
    """The constant field ``x ↦ A x + c`` of the blank network that takes ``start`` to ``end``.

    ``A = U M_r Uᵀ + N W Uᵀ``: ``M_r = log(C)/h`` with ``C`` the Bures–Wasserstein map of the
    reduced covariances (exact for the ``U`` block); ``W = (X_e C⁻¹ − X_a) S_a⁻¹ Ψ⁻¹``,
    ``Ψ = ∫₀ʰ e^{M_r s} ds``, gives the off-block ``X_e`` (the flow is block-triangular);
    ``c = U c_U + N c_N`` moves ``z`` exactly and ``y`` by ``W ∫ z dt + h c_N``.
    """
    r = start.S.shape[0]
    gam, q = np.linalg.eigh(bw_map(start.S, end.S)) if r else (np.ones(0), np.eye(0))
    lam = np.log(gam) / h
    phi = exp_integral(lam, h)
    c_u = q @ ((q.T @ end.z - gam * (q.T @ start.z)) / phi)
    m_r = sym((q * lam) @ q.T)
    x_rhs = (end.X @ q / gam) @ q.T - start.X  # X_e C⁻¹ − X_a
    if x_rhs.size:
        w_mat = scipy.linalg.solve(start.S, x_rhs.T, assume_a="pos").T
        w_mat = (w_mat @ q / phi) @ q.T
        int_z = q @ (phi * (q.T @ start.z) + _integral_phi(lam, h) * (q.T @ c_u))
        c_n = (end.y - start.y - w_mat @ int_z) / h
    else:  # no null space (Σ ≻ 0), or no active one (Σ = 0: the mean moves alone)
        w_mat = np.zeros((frame.N.shape[1], r))
        c_n = (end.y - start.y) / h
    u, n = frame.U, frame.N
    a = (u @ m_r + n @ w_mat) @ u.T
    c = u @ c_u + n @ c_n
    return ModelField(a, c, gam, lam, q, c_u)


def _planned_states(
    frame: Frame, start: Reduced, end: Reduced, fld: ModelField, h: float
) -> list[tuple[FloatArray, FloatArray]]:
    """``(m, Σ)`` at ``0, h/2, h`` along the blank model's flow (off-block left out)."""
    out = []
    for t in (0.0, 0.5 * h, h):
        e = fld.gam ** (t / h)
        z = fld.Q @ (e * (fld.Q.T @ start.z) + exp_integral(fld.lam, t) * (fld.Q.T @ fld.c_u))
        s_half = (fld.Q * e) @ fld.Q.T
        cov_r = sym(s_half @ start.S @ s_half)
        y = start.y + (t / h) * (end.y - start.y)
        m = frame.U @ z + frame.N @ y
        uc = frame.U @ cov_r
        out.append((m, sym(uc @ frame.U.T)))
    return out


def base_average(
    base: Layer, states: list[tuple[FloatArray, FloatArray]]
) -> tuple[FloatArray, FloatArray]:
    """Simpson average of the base's field ``(M, c)`` over the three planned states."""
    fields = [affine_velocity(base, m, s) for m, s in states]
    m_avg = (fields[0][0] + 4.0 * fields[1][0] + fields[2][0]) / 6.0
    c_avg = (fields[0][1] + 4.0 * fields[1][1] + fields[2][1]) / 6.0
    return m_avg, c_avg


# ============================================================================ the construction
State = tuple[FloatArray, FloatArray]


@dataclass
class BaseLog:
    """Where the time went, and what each sublayer took."""

    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("plan", "model", "integrate", "verify", "measure"), 0.0
        )
    )
    shots: list[int] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cut: bool = False
    plan: str = "geodesic"
    plan_energies: dict[str, float] = field(default_factory=dict)
    #: mode "full": the integrations of the sublayers with an added head
    head_shots: int = 0

    def timed(self, key: str, clock: float) -> None:
        self.seconds[key] += time.perf_counter() - clock


Head = tuple[FloatArray, FloatArray]


def added_layer(
    base: Layer, a_add: FloatArray, b_add: FloatArray, heads: tuple[Head, ...] = ()
) -> Layer:
    """``base`` with ``A_k, b_k`` added to its affine part and ``heads`` after its own heads
    (which are kept as they are: a factored group is the same object)."""
    if not heads:
        return base.replace(A=base.A + a_add, b=base.b + b_add)
    return base.replace(A=base.A + a_add, b=base.b + b_add, heads=[*base.head_groups, *heads])


def addition(layer: Layer, base: Layer) -> Layer:
    """What ``layer`` adds to ``base``: ``A_k, b_k`` and the heads after the base's own."""
    added = layer.dense_heads[len(base.dense_heads) :]
    return Layer(A=layer.A - base.A, b=layer.b - base.b, heads=list(added), dim=base.dim)


def added_power(added: Layer, mean: FloatArray, cov: FloatArray) -> float:
    """``E|u|²`` of the added field ``u = M_a x + c_a`` (:func:`affine_velocity` of the
    addition: ``M_a = A_k + Σ V Σ B``, ``c_a = b_k + Σ V m`` over the added heads) on
    ``N(mean, cov)``: ``tr(M_a Σ M_aᵀ) + |M_a m + c_a|²``."""
    mm, c = affine_velocity(added, mean, cov)
    u = mm @ mean + c
    return float(np.sum((mm @ cov) * mm) + u @ u)


def _nodes(prob: BaseProblem) -> list[Reduced]:
    """The geodesic's reduced states at the sublayer switches (the target's own at the end)."""
    fr, g0, g1 = prob.frame, prob.initial, prob.target
    s0 = sym(fr.U.T @ g0.cov @ fr.U)
    r, dn = fr.U.shape[1], fr.N.shape[1]
    c = bw_map(s0, sym(fr.U.T @ g1.cov @ fr.U)) if r else np.eye(0)
    nodes = [fr.reduce(g0.mean, g0.cov)]
    for k in range(1, prob.n):
        s = k / prob.n
        g = (1.0 - s) * np.eye(r) + s * c
        m = (1.0 - s) * g0.mean + s * g1.mean
        nodes.append(Reduced(fr.U.T @ m, sym(g @ s0 @ g), fr.N.T @ m, np.zeros((dn, r))))
    nodes.append(fr.reduce(g1.mean, g1.cov))
    return nodes


# ============================================================================ drift-aware plans
def _base_drift(prob: BaseProblem, nodes: list[Reduced]) -> list[tuple[FloatArray, FloatArray]]:
    """The base's field on the active subspace per sublayer, ``(F_k, f_k)``: the mean of its
    values at the sublayer's two nodes (``dz/dt = F_k z + f_k`` is its linear model)."""
    fr = prob.frame
    at_nodes = []
    for k, nd in enumerate(nodes):
        m = fr.U @ nd.z + fr.N @ nd.y
        uc = fr.U @ nd.S
        pair = []
        for lay in {id(x): x for x in prob.bases[max(k - 1, 0) : k + 1]}.values():
            mm, c = affine_velocity(lay, m, sym(uc @ fr.U.T))
            pair.append((fr.U.T @ mm @ fr.U, fr.U.T @ (mm @ (fr.N @ nd.y) + c)))
        at_nodes.append(pair)
    out = []
    for k in range(prob.n):
        left, right = at_nodes[k][-1], at_nodes[k + 1][0]  # both with sublayer k's base
        out.append((0.5 * (left[0] + right[0]), 0.5 * (left[1] + right[1])))
    return out


def _drift_nodes(
    prob: BaseProblem, geodesic: list[Reduced], drift: list[tuple[FloatArray, FloatArray]]
) -> list[Reduced]:
    """The minimum-energy plan for a piecewise-constant linear drift ``dz/dt = F_k z + f_k + u``
    (the base's field, frozen per sublayer), at the sublayer switches.

    Each token takes the least-energy path of the linear system: ``z(t) = Φ(t,0)z0 + g(t) +
    W(t)Φ(T,t)ᵀW(T)⁻¹(z1 − Φ(T,0)z0 − g(T))`` (``g`` the free response of ``f``, ``W(t) =
    ∫₀ᵗ Φ(t,s)Φ(t,s)ᵀ ds`` the controllability Gramian), with the coupling that minimizes the
    expected cost ``(z1 − Φz0)ᵀW⁻¹(z1 − Φz0)``: the Bures–Wasserstein map between
    ``W^{-1/2}ΦΣ0ΦᵀW^{-1/2}`` and ``W^{-1/2}Σ1W^{-1/2}``. With ``F = 0`` it is the geodesic.
    """
    n, h = prob.n, prob.h
    r = geodesic[0].S.shape[0]
    steps = []
    for f_mat, f_vec in drift:
        block = np.zeros((2 * r + 1, 2 * r + 1))
        block[:r, :r] = -f_mat.T
        block[:r, r : 2 * r] = np.eye(r)
        block[r : 2 * r, r : 2 * r] = f_mat
        block[r : 2 * r, 2 * r] = f_vec
        e = scipy.linalg.expm(block * h)  # Van Loan: Φ_k, its Gramian and f_k's response
        phi = e[r : 2 * r, r : 2 * r]
        steps.append((phi, sym(phi @ e[:r, r : 2 * r]), e[r : 2 * r, 2 * r]))
    phis, grams, frees = [np.eye(r)], [np.zeros((r, r))], [np.zeros(r)]
    for phi, gram, free in steps:
        phis.append(phi @ phis[-1])
        grams.append(sym(phi @ grams[-1] @ phi.T + gram))
        frees.append(phi @ frees[-1] + free)
    to_end = [np.eye(r)]  # Φ(T, t_k), from the last switch back
    for phi, _, _ in reversed(steps):
        to_end.append(to_end[-1] @ phi)
    to_end.reverse()
    a0, a1 = geodesic[0], geodesic[-1]
    w_half, w_ihalf = _spd_sqrt_pair(grams[-1])
    sa = sym(w_ihalf @ phis[-1] @ a0.S @ phis[-1].T @ w_ihalf)
    k_map = w_half @ bw_map(sa, sym(w_ihalf @ a1.S @ w_ihalf)) @ w_ihalf @ phis[-1]
    w_inv = w_ihalf @ w_ihalf
    gap_cov = w_inv @ (k_map - phis[-1])
    gap_mean = w_inv @ (a1.z - phis[-1] @ a0.z - frees[-1])
    nodes = [a0]
    for k in range(1, n):
        steer_k = grams[k] @ to_end[k].T
        g = phis[k] + steer_k @ gap_cov
        z = phis[k] @ a0.z + frees[k] + steer_k @ gap_mean
        geo = geodesic[k]
        nodes.append(Reduced(z, sym(g @ a0.S @ g.T), geo.y, geo.X))
    nodes.append(a1)
    return nodes


def _spd_sqrt_pair(a: FloatArray) -> tuple[FloatArray, FloatArray]:
    w, u = np.linalg.eigh(sym(a))
    w = np.maximum(w, np.finfo(float).tiny)
    return (u * np.sqrt(w)) @ u.T, (u / np.sqrt(w)) @ u.T


def plan_energy(prob: BaseProblem, nodes: list[Reduced], log: BaseLog) -> float:
    """The added energy the open-loop plan between ``nodes`` predicts (Simpson per sublayer on
    the blank model's states; the shooting then corrects the control, not the nodes)."""
    total = 0.0
    for k in range(prob.n):
        fld, a_add, b_add = _planned_control(prob, k, nodes[k], nodes[k + 1], log)
        states = _planned_states(prob.frame, nodes[k], nodes[k + 1], fld, prob.h)
        vals = []
        for m, cov in states:
            u = a_add @ m + b_add
            vals.append(float(np.sum((a_add @ cov) * a_add) + u @ u))
        total += prob.h * (vals[0] + 4.0 * vals[1] + vals[2]) / 6.0
    return total


def plan(
    prob: BaseProblem, log: BaseLog, budget: Budget
) -> tuple[list[Reduced], str, dict[str, float]]:
    """The nodes of the candidate plan with the least predicted added energy: the geodesic,
    and the drift-aware plans of the base's field frozen along the geodesic, then along the
    first drift-aware plan (one refinement). A candidate is built only while the planning has
    used less than :data:`PLAN_SHARE` of the time left (its steps cannot be interrupted)."""
    geodesic = _nodes(prob)
    candidates = {"geodesic": geodesic}
    if prob.frame.U.shape[1] and any(lay.n_heads or np.any(lay.A) for lay in prob.bases):
        along = geodesic
        for label in DRIFT_PLANS:
            clock = time.perf_counter()
            if budget.exhausted:
                break
            nodes = _safe_drift_nodes(prob, geodesic, _base_drift(prob, along))
            if nodes is None:
                break
            candidates[label] = along = nodes
            # each candidate costs about as much again to build and to price
            if 3.0 * (time.perf_counter() - clock) > PLAN_SHARE * budget.remaining():
                break
    if len(candidates) == 1:
        return geodesic, "geodesic", {}
    energies = {}
    for label, nodes in candidates.items():
        with np.errstate(all="ignore"):
            try:
                e = plan_energy(prob, nodes, log)
            except (np.linalg.LinAlgError, ValueError):
                e = math.inf
        energies[label] = e if math.isfinite(e) else math.inf
    best = min(energies, key=lambda lab: energies[lab])
    return candidates[best], best, energies


#: The drift-aware plans tried after the geodesic (each freezes the base along the previous).
DRIFT_PLANS = ("drift-aware", "drift-aware, refined")
#: Share of the time left that the planning may take.
PLAN_SHARE = 0.25


def _safe_drift_nodes(
    prob: BaseProblem, geodesic: list[Reduced], drift: list[tuple[FloatArray, FloatArray]]
) -> list[Reduced] | None:
    """:func:`_drift_nodes`, or ``None`` when a node is not a positive definite state."""
    with np.errstate(all="ignore"):
        try:
            nodes = _drift_nodes(prob, geodesic, drift)
        except (np.linalg.LinAlgError, ValueError):
            return None
    for nd in nodes:
        if not (np.all(np.isfinite(nd.S)) and np.all(np.isfinite(nd.z))):
            return None
        if not np.all(np.linalg.eigvalsh(nd.S) > 0.0):
            return None
    return nodes


def _planned_control(
    prob: BaseProblem, k: int, start: Reduced, end: Reduced, log: BaseLog
) -> tuple[ModelField, FloatArray, FloatArray]:
    """The model field to ``end`` and the first control: that field minus the base's average."""
    clock = time.perf_counter()
    fld = model_field(prob.frame, start, end, prob.h)
    m_bar, c_bar = base_average(prob.bases[k], _planned_states(prob.frame, start, end, fld, prob.h))
    a_add, b_add = fld.A - m_bar, fld.c - c_bar
    _zero_rows(a_add, b_add, prob.frame.fixed)
    log.timed("model", clock)
    return fld, a_add, b_add


def _zero_rows(a: FloatArray, b: FloatArray, rows: tuple[int, ...]) -> None:
    if rows:
        a[list(rows)] = 0.0
        b[list(rows)] = 0.0


@dataclass
class _Shot:
    layer: Layer
    end: State | None
    error: float
    status: Status
    message: str = ""
    shots: int = 0
    #: The sublayer's added energy (Simpson on :data:`ENERGY_POINTS` records), when measured,
    #: and those records.
    energy: float = math.nan
    path: Trajectory | None = None
    #: The converged control less the first (planned) one.
    correction: tuple[FloatArray, FloatArray] | None = None


#: Corrections in which a shot with added heads must halve its mismatch, else it is given up.
STALL_SHOTS = 3
#: Mismatch from which a shot with a ``ceiling`` measures its energy, and the relative margin
#: per unit of mismatch by which it must exceed the ceiling to stop (a correction of relative
#: size ``ε`` changes the energy by about ``2ε``).
CHECK_ERROR = 1e-6
CHECK_MARGIN = 100.0
#: Records of a sublayer's final-precision integration in mode ``"full"``: the nodes of
#: Simpson's rule for its added energy, which picks the cheaper of its candidates.
ENERGY_POINTS = 9


def _end_of(
    layer: Layer, start: State, h: float, rtol: float, budget: Budget, n_points: int = 2
) -> tuple[State | None, Status, str, Trajectory | None]:
    traj = layer_flow(layer, start, h, rtol, time_limit=budget.nested_limit(), n_points=n_points)
    if traj.status is not Status.SUCCESS:
        return None, traj.status, traj.message, None
    end = (np.array(traj.mean[-1]), sym(np.array(traj.cov[-1])))
    return end, Status.SUCCESS, "", traj


def _sublayer_energy(added: Layer, traj: Trajectory) -> float:
    """Simpson's rule of :func:`added_power` on one sublayer's records."""
    vals = [added_power(added, m, c) for m, c in zip(traj.mean, traj.cov, strict=True)]
    return float(simpson(vals, x=traj.t))


class Feedback:
    """The base's first-order response to a change of the control, removed from a correction.

    A change ``(Δ, δ)`` of ``A_k, b_k`` moves the state on average by ``δΣ ≈ (h/2)(ΔΣ + ΣΔᵀ)``,
    ``δm ≈ (h/2)(Δm + δ)`` over the sublayer, and the heads answer with ``(Σ_h V_h δΣ B_h,
    Σ_h V_h δm)`` (linear in the state: one field evaluation through the factored heads). The
    effective field changes by the correction ``R`` when ``(I + L)(Δ, δ) = R``; a few Neumann
    steps solve it (``|L| ~ h |V Σ B|`` < 1 on sublayers shorter than the base's blow-up).
    """

    def __init__(
        self, base: Layer, state: tuple[FloatArray, FloatArray], h: float, fixed: tuple[int, ...]
    ) -> None:
        d = base.dim
        self.heads = (
            base.replace(A=np.zeros((d, d)), b=np.zeros(d), ffn=None) if base.n_heads else None
        )
        self.m, self.cov = state
        self.h = h
        self.fixed = fixed

    def response(self, da: FloatArray, db: FloatArray) -> tuple[FloatArray, FloatArray]:
        assert self.heads is not None
        p = da @ self.cov
        dm = 0.5 * self.h * (da @ self.m + db)
        return affine_velocity(self.heads, dm, 0.5 * self.h * (p + p.T))

    def solve(self, ra: FloatArray, rb: FloatArray) -> tuple[FloatArray, FloatArray]:
        if self.heads is None:
            return ra, rb
        da, db = ra, rb
        size = float(np.linalg.norm(ra)) + float(np.linalg.norm(rb))
        for _ in range(FEEDBACK_STEPS):
            la, lb = self.response(da, db)
            na, nb = ra - la, rb - lb
            _zero_rows(na, nb, self.fixed)
            step = float(np.linalg.norm(na - da)) + float(np.linalg.norm(nb - db))
            if not np.isfinite(step) or step > size:  # |L| ≥ 1: keep the plain correction
                return ra, rb
            da, db = na, nb
            if step <= 1e-3 * size:
                break
        return da, db


class Requested:
    """The affine control of a sublayer with strong heads, from the constant field it requests.

    The fixed point runs on the requested field ``(M, c)`` (:class:`Anderson` on the model's
    correction); the control is ``(M, c)`` minus the average field of the heads (the base's and
    the added ones) along the exact flow of ``(M, c)`` from the start (Simpson at ``0, h/2, h``),
    so the heads' response to a change of the control is taken whole, not to first order.
    """

    def __init__(
        self,
        heads: Layer,
        start: State,
        h: float,
        fixed: tuple[int, ...],
        field0: tuple[FloatArray, FloatArray],
    ) -> None:
        self.heads, self.start, self.h, self.fixed = heads, start, h, fixed
        self.a, self.c = field0

    def control(self) -> tuple[FloatArray, FloatArray]:
        path = [self.start] + [
            ffn_flow(self.a, self.c, self.start, t) for t in (0.5 * self.h, self.h)
        ]
        m_bar, c_bar = base_average(self.heads, path)
        a_add, b_add = self.a - m_bar, self.c - c_bar
        _zero_rows(a_add, b_add, self.fixed)
        return a_add, b_add

    def step(self, mixer: Anderson, fa: FloatArray, fb: FloatArray) -> None:
        self.a, self.c = mixer.step(self.a, self.c, fa, fb)


#: Neumann steps of :class:`Feedback`.
FEEDBACK_STEPS = 12


class Anderson:
    """Anderson mixing of the fixed point ``x ← x + f(x)`` (``f``: the model's correction).

    The plain step converges linearly, at the rate the model misses the base's response to the
    control (about 0.5 per step for strong heads); mixing the last :data:`ANDERSON_DEPTH` steps
    (a least-squares secant on ``O(d²)`` vectors, no extra integration) makes it superlinear.
    """

    def __init__(self) -> None:
        self.xs: list[FloatArray] = []
        self.fs: list[FloatArray] = []

    def step(
        self, a: FloatArray, b: FloatArray, fa: FloatArray, fb: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        d = b.shape[0]
        x, f = np.concatenate([a.ravel(), b]), np.concatenate([fa.ravel(), fb])
        self.xs.append(x)
        self.fs.append(f)
        if len(self.xs) > ANDERSON_DEPTH + 1:
            self.xs.pop(0)
            self.fs.pop(0)
        new = x + f
        if len(self.xs) > 1:
            df = np.stack([self.fs[i + 1] - self.fs[i] for i in range(len(self.fs) - 1)], 1)
            dx = np.stack([self.xs[i + 1] - self.xs[i] for i in range(len(self.xs) - 1)], 1)
            gamma = np.linalg.lstsq(df, f, rcond=1e-10)[0]
            if np.all(np.isfinite(gamma)):
                new = new - (dx + df) @ gamma
        return new[: d * d].reshape(d, d), new[d * d :].copy()


#: Steps of :class:`Anderson`'s memory.
ANDERSON_DEPTH = 4


def _sublayer(
    prob: BaseProblem,
    k: int,
    start: State,
    node: Reduced,
    budget: Budget,
    log: BaseLog,
    reserve: float,
    heads: tuple[Head, ...] = (),
    ceiling: float = math.inf,
    shift: tuple[FloatArray, FloatArray] | None = None,
) -> _Shot:
    """Shoot sublayer ``k`` from the state where the previous one ended onto ``node``: the
    affine part ``A_k, b_k`` is corrected, the base's heads and the added ``heads`` are held.
    In mode ``"full"`` the final-precision integrations also measure the added energy, and so
    do those from a mismatch of :data:`CHECK_ERROR` on when a ``ceiling`` is given: the shot
    stops once its energy exceeds it by more than the remaining corrections could change. With
    ``heads``, the field requested first is the model's plus ``shift`` (the correction the
    affine shot of the same sublayer converged to: the model's miss there)."""
    frame, h, scale = prob.frame, prob.h, prob.scale
    red = frame.reduce(*start)
    fld, a_add, b_add = _planned_control(prob, k, red, node, log)
    planned = (a_add, b_add)
    mid = _planned_states(frame, red, node, fld, h)[1]
    requested = None
    if heads:
        clock = time.perf_counter()
        requested = Requested(
            added_layer(prob.bases[k], 0.0 * a_add, np.zeros_like(b_add), heads),
            start,
            h,
            frame.fixed,
            (fld.A, fld.c) if shift is None else (fld.A + shift[0], fld.c + shift[1]),
        )
        a_add, b_add = requested.control()
        log.timed("model", clock)
    best: _Shot | None = None
    err = math.inf
    history: list[float] = []
    mixer = Anderson()
    feedback = Feedback(prob.bases[k], mid, h, frame.fixed)
    measure = prob.mode == "full"
    for it in range(MAX_SHOTS):
        if budget.exhausted or budget.remaining() <= reserve:
            log.cut = True
            break
        rtol = min(max(1e-3 * err, RESIMULATION_RTOL), 1e-8)
        layer = added_layer(prob.bases[k], a_add, b_add, heads)
        checked = math.isfinite(ceiling) and err <= CHECK_ERROR
        points = ENERGY_POINTS if measure and (rtol <= RESIMULATION_RTOL or checked) else 2
        clock = time.perf_counter()
        end, status, message, traj = _end_of(layer, start, h, rtol, budget, points)
        log.timed("integrate", clock)
        if end is None:
            return replace(best or _Shot(layer, None, math.inf, status, message), shots=it + 1)
        reached = frame.reduce(*end)
        new_err = reached.mismatch(node, scale)
        if best is None or new_err <= best.error or rtol <= RESIMULATION_RTOL:
            energy, path = math.nan, None
            if points > 2:
                assert traj is not None
                clock = time.perf_counter()
                energy = _sublayer_energy(addition(layer, prob.bases[k]), traj)
                path = traj
                log.timed("measure", clock)
            fix = (a_add - planned[0], b_add - planned[1]) if requested is None else None
            best = _Shot(
                layer, end, new_err, Status.SUCCESS, energy=energy, path=path, correction=fix
            )
            if energy > ceiling * (1.0 + CHECK_MARGIN * new_err):
                break  # dearer than the affine control already; the last corrections barely move it
        if new_err <= SHOT_TOL and rtol <= RESIMULATION_RTOL:
            break
        if new_err > 10.0 * err or not np.all(np.linalg.eigvalsh(reached.S) > 0.0):
            if not heads:  # a head candidate that does not converge is simply not taken
                log.notes.append(f"sublayer {k + 1}: the correction diverged at {new_err:.3g}")
            break
        history.append(new_err)
        if heads and len(history) > STALL_SHOTS and new_err > 0.5 * history[-1 - STALL_SHOTS]:
            break  # a head candidate stalls: not halved in STALL_SHOTS corrections
        err = new_err
        clock = time.perf_counter()
        got = model_field(frame, red, reached, h)
        if requested is None:
            fa, fb = feedback.solve(fld.A - got.A, fld.c - got.c)
            a_add, b_add = mixer.step(a_add, b_add, fa, fb)
            _zero_rows(a_add, b_add, frame.fixed)
        else:
            requested.step(mixer, fld.A - got.A, fld.c - got.c)
            a_add, b_add = requested.control()
        log.timed("model", clock)
    assert best is not None or log.cut
    if best is None:
        layer = added_layer(prob.bases[k], a_add, b_add, heads)
        return _Shot(layer, None, math.inf, Status.BUDGET_EXHAUSTED, shots=it + 1)
    return replace(best, shots=it + 1)


# ============================================================================ added heads
def head_gauge(prob: BaseProblem, k: int, affine: _Shot) -> Head | None:
    """An added head ``(V, βI)`` for sublayer ``k``, designed around its converged affine shot.

    At the shot's state halfway through the sublayer: ``F`` is the base's field matrix, ``K``,
    ``k`` the added affine part (``u = K x + k``, ``u_m = K m + k`` at the mean), ``M = F + K``,
    ``ṁ`` the mean's velocity and ``Σ̇ = MΣ + ΣMᵀ``. The least added energy
    ``∫ tr(KΣKᵀ) + |u_m|² dt`` has (Pontryagin, costates ``P`` of ``Σ`` and ``p`` of ``m``)
    ``K = −P`` and ``u_m = −p/2``, so along the optimum

        dK/dt = R = −(K² + FᵀK + KF) − (Y + Yᵀ),   Y = Σ_h V_hᵀ (u_m mᵀ + KΣ) B_hᵀ,
        du_m/dt = r = −Fᵀu_m − Σ_h V_hᵀ u_m

    (the sums over the base's heads: their dependence on ``Σ`` and ``m``; with no base it is
    the geodesic's ``dM/dt = −M²``). A constant ``K, k`` misses that variation. Inside the
    sublayer a head ``(V, βI)`` adds ``dK/dt = βVΣ̇`` and ``du_m/dt = βVΣ̇m + Vṁ`` (besides
    ``Kṁ``), so ``V`` is the Tikhonov least-squares solution of
    ``V [βΣ̇ | ṁ] = [R | r − Kṁ − Rm]``, ``β = (|RΣ̇⁺|_F/√d)^{1/2}`` balancing ``|V|_F`` against
    ``|B|_F``. The rows of the constant coordinates are zero. ``None`` when there is no
    variation to supply or it is not finite.
    """
    assert affine.path is not None
    half = len(affine.path.t) // 2
    m, cov = affine.path.mean[half], affine.path.cov[half]
    base = prob.bases[k]
    d = base.dim
    f_mat = affine_velocity(base, m, cov)[0]
    k_mat = affine.layer.A - base.A
    total, c_tot = affine_velocity(affine.layer, m, cov)
    m_dot = total @ m + c_tot
    u_m = k_mat @ m + affine.layer.b - base.b
    y_adj = _heads_adjoint(base, np.outer(u_m, m) + k_mat @ cov)
    rate = -(k_mat @ k_mat + f_mat.T @ k_mat + k_mat @ f_mat) - (y_adj + y_adj.T)
    mean_rate = -(f_mat.T @ u_m) - _heads_adjoint_vec(base, u_m)
    s_dot = sym(total @ cov + cov @ total.T)
    w, u = np.linalg.eigh(s_dot)
    reg = HEAD_EPS * max(float(np.max(np.abs(w))), np.finfo(float).tiny)
    beta = math.sqrt(float(np.linalg.norm(rate @ ((u * (w / (w * w + reg * reg))) @ u.T))) / d**0.5)
    if not (math.isfinite(beta) and beta > 0.0):
        return None
    y = np.hstack([beta * s_dot, m_dot[:, None]])
    z = np.hstack([rate, (mean_rate - k_mat @ m_dot - rate @ m)[:, None]])
    gram = y @ y.T
    tikhonov = HEAD_EPS * float(np.linalg.norm(gram, 2))
    v = scipy.linalg.solve(gram + tikhonov * np.eye(d), y @ z.T, assume_a="pos").T
    if prob.frame.fixed:
        v[list(prob.frame.fixed)] = 0.0
    return (v, beta * np.eye(d)) if np.all(np.isfinite(v)) else None


def _heads_adjoint(base: Layer, x: FloatArray) -> FloatArray:
    """``Σ_h V_hᵀ X B_hᵀ`` over the base's heads (factored ones in ``O(H d² d_head)``)."""
    out = np.zeros_like(x)
    fh = base.factored_heads
    if fh is not None:
        t = np.matmul(fh.o.transpose(0, 2, 1), x)  # o_hᵀ X, (H, d_head, d)
        core = np.matmul(np.matmul(t, fh.q.transpose(0, 2, 1)), fh.k)  # o_hᵀ X q_hᵀ k_h
        out += fh.scale * fh.flat("v").T @ core.reshape(-1, x.shape[1])
    for v_h, b_h in base.dense_heads:
        out += v_h.T @ x @ b_h.T
    return out


def _heads_adjoint_vec(base: Layer, u: FloatArray) -> FloatArray:
    """``Σ_h V_hᵀ u`` over the base's heads."""
    out = np.zeros_like(u)
    fh = base.factored_heads
    if fh is not None:
        out += fh.flat("v").T @ (fh.o_cat.T @ u)
    for v_h, _ in base.dense_heads:
        out += v_h.T @ u
    return out


#: Tikhonov weight of :func:`head_gauge` (relative to ``|Σ̇|₂`` for ``β``, to ``|YYᵀ|₂`` for
#: ``V``): the head supplies the variation where ``Σ̇`` and ``ṁ`` can carry it.
HEAD_EPS = 0.1


def _with_head(
    prob: BaseProblem,
    k: int,
    start: State,
    node: Reduced,
    affine: _Shot,
    budget: Budget,
    log: BaseLog,
    reserve: float,
) -> _Shot:
    """The cheaper of sublayer ``k``'s affine shot and the same sublayer with an added head
    (:func:`head_gauge`) shot onto ``node``: their added energies measured on re-simulations."""
    if budget.exhausted or budget.remaining() <= reserve:
        log.cut = True
        return affine
    clock = time.perf_counter()
    with np.errstate(all="ignore"):
        head = head_gauge(prob, k, affine)
    log.timed("model", clock)
    if head is None:
        return affine
    shot = _sublayer(
        prob, k, start, node, budget, log, reserve, (head,), affine.energy, affine.correction
    )
    log.head_shots += shot.shots
    better = shot.end is not None and shot.error <= SHOT_TOL and shot.energy < affine.energy
    return shot if better else affine


def build(prob: BaseProblem, budget: Budget, log: BaseLog) -> tuple[list[Layer], Status, str]:
    """The sublayers, each from where the previous one actually ended."""
    clock = time.perf_counter()
    nodes, label, energies = plan(prob, log, budget)
    log.plan = label
    log.plan_energies = energies
    log.timed("plan", clock)
    layers: list[Layer] = []
    state: State | None = (prob.initial.mean, prob.initial.cov)
    status, why = Status.SUCCESS, ""
    for k in range(prob.n):
        # keep time to verify: about one sublayer integration per sublayer, VERIFY_RESERVE times
        per = log.seconds["integrate"] / max(sum(log.shots) + log.head_shots, 1)
        reserve = VERIFY_RESERVE * per * prob.n if layers else 0.0
        if state is None or budget.exhausted or budget.remaining() <= reserve:
            break
        shot = _sublayer(prob, k, state, nodes[k + 1], budget, log, reserve)
        log.shots.append(shot.shots)
        if prob.mode == "full" and shot.path is not None and shot.error <= SHOT_TOL:
            shot = _with_head(prob, k, state, nodes[k + 1], shot, budget, log, reserve)
        layers.append(shot.layer)
        log.errors.append(shot.error)
        state = shot.end
        if shot.end is None and shot.status is not Status.BUDGET_EXHAUSTED:
            status, why = shot.status, f"sublayer {k + 1}: {shot.message}"
            break
    if len(layers) < prob.n:
        # the rest, planned between the nodes without correction (a complete control), or
        # the base alone once not even that fits in the grace
        fill = 0.0
        for k in range(len(layers), prob.n):
            grace = budget.grace()
            if grace is not None and grace <= 2.0 * fill:
                layers.append(prob.bases[k])
                continue
            clock = time.perf_counter()
            _, a_add, b_add = _planned_control(prob, k, nodes[k], nodes[k + 1], log)
            layers.append(added_layer(prob.bases[k], a_add, b_add))
            fill = time.perf_counter() - clock
        if status is Status.SUCCESS:
            status = Status.BUDGET_EXHAUSTED
            why = (
                budget.reason()
                if budget.exhausted
                else (
                    "the sublayer corrections stopped to keep time for the verification within the "
                    f"time limit of {budget.given_limit:g} s"
                )
            )
            log.cut = True
    elif log.cut and status is Status.SUCCESS:
        status = Status.BUDGET_EXHAUSTED
        why = (
            budget.reason()
            if budget.exhausted
            else "a sublayer's corrections stopped to keep time for the verification within the "
            f"time limit of {budget.given_limit:g} s"
        )
    return layers, status, why


# ============================================================================ verification
def _energies(schedule: Schedule, additions: list[Layer], traj: Trajectory) -> tuple[float, float]:
    """``(∫ E|u|² dt, ∫ E|v|² dt)``: the added control's (:func:`added_power`) and the whole
    field's kinetic energy, Simpson's rule on the verifying re-simulation's records, per
    sublayer."""
    breaks = np.asarray(schedule.breakpoints, dtype=float)
    added, total = 0.0, 0.0
    for k, add in enumerate(additions):
        t0, t1 = breaks[k], breaks[k + 1]
        idx = np.flatnonzero((traj.t >= t0 - 1e-14 * max(t1, 1.0)) & (traj.t <= t1 + 1e-14))
        lay = schedule.layers[k]
        va, vt = np.empty(len(idx)), np.empty(len(idx))
        for j, i in enumerate(idx):
            m, s = traj.mean[i], traj.cov[i]
            va[j] = added_power(add, m, s)
            mm, c = affine_velocity(lay, m, s)
            v = mm @ m + c
            vt[j] = float(np.sum((mm @ s) * mm) + v @ v)
        added += float(simpson(va, x=traj.t[idx]))
        total += float(simpson(vt, x=traj.t[idx]))
    return added, total


def _verify(prob: BaseProblem, schedule: Schedule, budget: Budget) -> Trajectory | None:
    try:
        return simulate(
            schedule,
            prob.initial,
            rtol=RESIMULATION_RTOL,
            atol=RESIMULATION_ATOL,
            n_points=energy_points(prob.n, prob.initial.dim),
            time_limit=budget.nested_limit(),
        )
    except InvalidParametersError:
        return None


def verdict(
    prob: BaseProblem,
    layers: list[Layer],
    built: tuple[Status, str],
    budget: Budget,
    log: BaseLog,
    stats: dict[str, Any],
) -> SteeringResult:
    """Re-simulate the control and measure it: the one judge of ``success``."""
    schedule = Schedule(layers, prob.T)
    additions = [addition(lay, base) for lay, base in zip(layers, prob.bases, strict=True)]
    clock = time.perf_counter()
    traj = _verify(prob, schedule, budget)
    log.timed("verify", clock)
    clock = time.perf_counter()
    lower = prob.initial.bures_wasserstein(prob.target) ** 2 / prob.T
    h = prob.h
    par = h * sum(
        float(
            np.sum(a.A**2) + np.sum(a.b**2) + sum(np.sum(v**2) + np.sum(b**2) for v, b in a.heads)
        )
        for a in additions
    )
    reached = traj is not None and traj.status is Status.SUCCESS
    err, added, kin = math.inf, math.inf, math.inf
    if reached:
        assert traj is not None
        err = traj.final.bures_wasserstein(prob.target)
        added, kin = _energies(schedule, additions, traj)
        stats["mean_error"] = float(np.linalg.norm(traj.final.mean - prob.target.mean))
        stats["cov_error"] = float(np.linalg.norm(traj.final.cov - prob.target.cov))
        if prob.token_check is not None:
            from ..model.tokens import simulate_tokens

            x = prob.initial.sample(prob.token_check, seed=np.random.default_rng(prob.seed))
            tok = simulate_tokens(schedule, x, time_limit=budget.nested_limit())
            stats["token_terminal_error"] = (
                tok.final.bures_wasserstein(prob.target)
                if tok.status is Status.SUCCESS
                else math.inf
            )
    rel = err / prob.scale
    status, why = built
    if not reached:
        status = Status.FAILED if traj is None else traj.status
        message = (
            "the verifying re-simulation of the control did not reach T"
            + ("" if traj is None else f" ({traj.message})")
            + (f"; {why}" if why else "")
        )
    elif status is not Status.SUCCESS:
        message = f"{why}; returning the control built, relative terminal error {rel:.3g}"
    elif rel > prob.terminal_tol:
        status = Status.FAILED
        message = (
            f"the re-simulated relative terminal error {rel:.3g} exceeds terminal_tol = "
            f"{prob.terminal_tol:g} (sublayer misses {', '.join(f'{e:.2g}' for e in log.errors)})"
        )
    else:
        with_heads = sum(a.n_heads > 0 for a in additions)
        heads = (
            f", heads added in {with_heads} of {prob.n} sublayers" if prob.mode == "full" else ""
        )
        message = (
            f"steered around the base's heads{heads}; re-simulated relative terminal error "
            f"{rel:.3g}"
        )
    if log.notes:
        message += " [" + "; ".join(log.notes) + "]"
    log.timed("measure", clock)
    stats.update(
        added_energy=added,
        relative_terminal_error=rel,
        sublayer_shots=list(log.shots),
        sublayer_errors=list(log.errors),
        seconds_by_part=dict(log.seconds),
        active_dim=prob.frame.U.shape[1],
        plan=log.plan,
        plan_energies=dict(log.plan_energies),
        constant_coordinates=list(prob.frame.fixed),
        mode=prob.mode,
        added_heads=[a.n_heads for a in additions],
        head_shots=log.head_shots,
    )
    coincident = lower * prob.T <= (1e-12 * prob.scale) ** 2
    return SteeringResult(
        controls=schedule,
        status=status,
        message=message,
        cost=added,
        kinetic_energy=kin,
        parameter_energy=par,
        lower_bound=lower,
        gap=kin if coincident else (kin - lower) / lower,
        terminal_error=err,
        trajectory=traj if reached else None,
        stats=MappingProxyType(stats),
    )


def steer_base(prob: BaseProblem, budget: Budget) -> SteeringResult:
    """The construction around the base, verified (BLAS on one thread on a busy machine)."""
    log = BaseLog()
    with calm_blas(), np.errstate(all="ignore"):
        layers, status, why = build(prob, budget, log)
        stats: dict[str, Any] = {
            "method": "flow around the base",
            "ipopt_status": None,
            "converged": status is Status.SUCCESS,
            "iterations": sum(log.shots),
            "time_limit": budget.time_limit,
            "base_heads": prob.bases[0].n_heads,
        }
        return verdict(prob, layers, (status, why), budget, log, stats)


#: ``method="auto"`` polishes the construction with the collocation NLP up to this dimension
#: (its build grows as d⁵: about 2 s at d = 6).
NLP_MAX_DIM = 6


def wants_nlp(prob: BaseProblem) -> bool:
    """Whether the options ask for the NLP after the construction."""
    method = prob.opts.method
    return method == "collocation" or (method == "auto" and prob.initial.dim <= NLP_MAX_DIM)
