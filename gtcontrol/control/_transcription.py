"""The CasADi/IPOPT nonlinear program of one steering problem, built and assembled.

Variables, per layer: the free parameters ``P``, the collocation states ``Z`` and the end state
``X`` (the blocks below); the initial state, the terminal data and the parameters held
fixed are NLP parameters, so one symbolic NLP serves every problem of the same structure (a
small LRU cache, :func:`transcription`). The objective is the kinetic or the parameter energy;
the terminal condition exact (reduced for a singular target) or a Bures–Wasserstein/KL penalty.

The problem is one :class:`Problem` value; its bounds are a :class:`SteeringBounds` (public as
``gtcontrol.SteeringBounds``, the ``bounds=`` of ``steer``), the constraints of this NLP.

IPOPT's options are fixed when CasADi builds the solver, and the solver is cached across calls,
so the wall-clock budget of a solve (``max_wall_time``) is enforced by an IPOPT iteration
callback that reads the deadline of the current solve; IPOPT then stops with
``User_Requested_Stop`` and returns its current iterate.

**The blocks.**

Per layer ``k = 0..L-1`` the NLP has the layer parameters ``p_k`` (mode-dependent:
``A, b`` / ``V, B`` / ``A, b, V, B``, packed by :func:`pack`), the moment states at the
collocation points, and the state ``x_{k+1} = (m, vech Σ)`` at the end of the layer (each
entry of the symmetric Σ stored once). Every layer is Gauss–Legendre collocation of degree 3
(order 6 at the interval ends) on one or more intervals; the energy ``∫ tr(MΣMᵀ) + |Mm + c|² dt``
and ``∫ 2 tr M dt = Δ ln det Σ`` are Gauss quadratures at the same points. The field is
evaluated by one CasADi function ``map``-ped over the collocation points of a layer, and the layer
function is ``map``-ped over the layers.

The right-hand side is *not* re-implemented here: it is
:func:`gtcontrol.model.moments.moment_field` and :func:`gtcontrol.model.moments.affine_velocity`,
evaluated on numpy object arrays whose entries are CasADi ``SX`` scalars, so the symbolic graph
is built by the very code that ``simulate`` integrates. CasADi then supplies exact first and
second derivatives to IPOPT.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import casadi as ca
import numpy as np

from .._linalg import FloatArray, psd_sqrt, unvech, vech, vech_index
from .._progress import progress
from .._validation import as_positive_float, set_fields
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.moments import affine_velocity, moment_field
from ..model.params import Layer
from ._ipopt import STOPPED, IpoptDeadline, casadi_options

__all__ = ["SteeringBounds"]


#: Up to this dimension the NLP is expanded to scalar (SX) form: faster iterations, and the
#: build stays well under a second. Above it, expansion costs tens of seconds at d = 8.
EXPAND_MAX_DIM = 4

#: Parameters that each mode optimizes; the others are exactly zero.
PARAMS: dict[str, tuple[str, ...]] = {
    "ffn": ("A", "b"),
    "attention": ("V", "B"),
    "full": ("A", "b", "V", "B"),
}


def param_shapes(mode: str, d: int) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the optimized parameters of one layer, in packing order."""
    return [(name, (d,) if name == "b" else (d, d)) for name in PARAMS[mode]]


def n_params(mode: str, d: int) -> int:
    return sum(int(np.prod(shape)) for _, shape in param_shapes(mode, d))


def pack(layer: Layer, mode: str) -> FloatArray:
    """Row-major parameter vector of a single-head (or head-less) layer."""
    d = layer.dim
    v, b_mat = layer.heads[0] if layer.heads else (np.zeros((d, d)), np.zeros((d, d)))
    if len(layer.heads) > 1:
        raise InvalidParametersError("pack: multi-head layers are not optimized")
    values = {"A": layer.A, "b": layer.b, "V": v, "B": b_mat}
    return np.concatenate([np.asarray(values[n]).ravel() for n in PARAMS[mode]])


def unpack(p: Any, mode: str, d: int) -> dict[str, Any]:
    """Split a parameter vector (numeric or an object array of SX) into named arrays."""
    out: dict[str, Any] = {}
    i = 0
    for name, shape in param_shapes(mode, d):
        size = int(np.prod(shape))
        out[name] = np.asarray(p[i : i + size]).reshape(shape)
        i += size
    return out


def to_layer(p: FloatArray, mode: str, d: int) -> Layer:
    """The :class:`Layer` of a numeric parameter vector (omitted parameters exactly zero)."""
    parts = unpack(p, mode, d)
    if "V" in parts:
        return Layer(A=parts.get("A"), b=parts.get("b"), V=parts["V"], B=parts["B"], dim=d)
    return Layer(A=parts["A"], b=parts["b"])


class _SymbolicLayer:
    """Duck-typed :class:`Layer` holding object arrays of SX scalars.

    It offers exactly what :func:`affine_velocity` and :func:`moment_field` read: ``affine_ffn()``,
    ``heads`` and ``noise``.
    """

    noise = None

    def __init__(self, a: Any, b: Any, heads: tuple[tuple[Any, Any], ...]) -> None:
        self.A, self.b, self.heads = a, b, heads

    def affine_ffn(self) -> tuple[Any, Any]:
        return self.A, self.b


def _objects(v: Any, n: int) -> Any:
    return np.array([v[i] for i in range(n)], dtype=object)


def _zeros(shape: tuple[int, ...]) -> Any:
    out = np.empty(shape, dtype=object)
    out.fill(0.0)
    return out


def symbolic_layer(p: Any, mode: str, d: int) -> _SymbolicLayer:
    """The layer of an SX parameter vector (zeros where the mode fixes a parameter)."""
    parts = unpack(_objects(p, p.numel()), mode, d)
    a = parts.get("A", _zeros((d, d)))
    b = parts.get("b", _zeros((d,)))
    heads = ((parts["V"], parts["B"]),) if "V" in parts else ()
    return _SymbolicLayer(a, b, heads)


def ca_unvech(v: Any, d: int) -> Any:
    """The symmetric ``d × d`` CasADi matrix of a packed vector (inverse of :func:`ca_vech`)."""
    return ca.reshape(v[vech_index(d)[1].tolist()], d, d)


def ca_vech(mat: Any, d: int) -> Any:
    """Upper triangle (row-major, as :func:`gtcontrol._linalg.vech`) of a CasADi matrix."""
    iu = vech_index(d)[0]
    return ca.vec(mat)[(iu[0] + d * iu[1]).tolist()]


def base_size(n_base: int, d: int) -> int:
    """Entries of a fixed base layer's data: ``A0, b0`` and ``n_base`` dense heads."""
    return d * d + d + 2 * n_base * d * d if n_base >= 0 else 0


def pack_base(layer: Layer) -> FloatArray:
    """The NLP data of a fixed base layer: ``A0, b0``, then every head's ``V_h, B_h`` (dense)."""
    a, b = layer.affine_ffn()
    parts = [a.ravel(), b] + [np.concatenate([v.ravel(), bh.ravel()]) for v, bh in layer.heads]
    return np.concatenate(parts)


def _base_layer(
    p: Any, q: Any, mode: str, d: int, n_base: int
) -> tuple[_SymbolicLayer, _SymbolicLayer]:
    """The symbolic layer ``base + additions`` (the base's heads first) and the additions."""
    add = symbolic_layer(p, mode, d)
    qo = _objects(q, q.numel())
    a0, b0 = qo[: d * d].reshape(d, d), qo[d * d : d * d + d]
    heads = []
    off = d * d + d
    for _ in range(n_base):
        heads.append(
            (qo[off : off + d * d].reshape(d, d), qo[off + d * d : off + 2 * d * d].reshape(d, d))
        )
        off += 2 * d * d
    layer = _SymbolicLayer(add.A + a0, add.b + b0, tuple(heads) + add.heads)
    return layer, add


def field_function(mode: str, d: int, n_base: int = -1) -> ca.Function:
    """``f(x, p[, q]) -> (dx/dt, E|v|², 2 tr M)`` from the one moment field of gtcontrol.moments.

    With a fixed base (``n_base ≥ 0`` heads; its data ``q`` from :func:`pack_base`) the field is
    the base's plus the additions ``p``, and the energy is the additions' own: ``E|u|² =
    tr(M_a Σ M_aᵀ) + |M_a m + c_a|²`` for the added field ``u = M_a x + c_a`` (``A, b`` and, in
    mode ``"full"``, the added head's ``V Σ B`` and ``V m``).
    """
    nv = d * (d + 1) // 2
    x = ca.SX.sym("x", d + nv)
    p = ca.SX.sym("p", n_params(mode, d))
    q = ca.SX.sym("q", base_size(n_base, d))
    xo = _objects(x, d + nv)
    mean = xo[:d]
    cov = unvech(xo[d:], d)
    if n_base >= 0:
        layer, add = _base_layer(p, q, mode, d, n_base)
    else:
        layer = symbolic_layer(p, mode, d)
    dm, dcov = moment_field(layer, mean, cov)  # type: ignore[arg-type]
    m_mat, _ = affine_velocity(layer, mean, cov)  # type: ignore[arg-type]
    xdot = ca.vertcat(*dm, *vech(dcov))
    trace = ca.times(2.0, ca.sum1(ca.vertcat(*np.diag(m_mat))))
    if n_base >= 0:
        m_add, c_add = affine_velocity(add, mean, cov)  # type: ignore[arg-type]
        u = m_add @ mean + c_add
        energy = ca.sum1(ca.vertcat(*((m_add @ cov) * m_add).ravel())) + ca.sumsqr(ca.vertcat(*u))
        return ca.Function("field", [x, p, q], [xdot, energy, trace], {"cse": True})
    # E|v|² = tr(M Σ Mᵀ) + |M m + c|², and M m + c is dm/dt.
    energy = ca.sum1(ca.vertcat(*((m_mat @ cov) * m_mat).ravel())) + ca.sumsqr(ca.vertcat(*dm))
    return ca.Function("field", [x, p], [xdot, energy, trace], {"cse": True})


def _collocation_coefficients(k: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Gauss–Legendre collocation of degree ``k`` on ``[0, 1]`` (order ``2k`` at the end point).

    Returns the roots ``τ``, the derivative matrix ``C`` (``C[i, j] = ℓ_i'(τ_j)`` over the
    Lagrange basis on ``(0, τ_1, ..., τ_k)``), the continuity weights ``D = ℓ_i(1)`` and the
    quadrature weights ``B = ∫₀¹ ℓ_i`` (``i ≥ 1``).
    """
    tau = np.concatenate([[0.0], (np.polynomial.legendre.leggauss(k)[0] + 1.0) / 2.0])
    c = np.zeros((k + 1, k + 1))
    dvec = np.zeros(k + 1)
    bvec = np.zeros(k + 1)
    for i in range(k + 1):
        basis = np.poly1d([1.0])
        for j in range(k + 1):
            if j != i:
                basis *= np.poly1d([1.0, -tau[j]]) / (tau[i] - tau[j])
        dvec[i] = basis(1.0)
        deriv = np.polyder(basis)
        for j in range(k + 1):
            c[i, j] = deriv(tau[j])
        bvec[i] = np.polyint(basis)(1.0)
    return tau, c, dvec, bvec[1:]


#: Collocation degree (Gauss–Legendre, order 6 at the interval ends).
DEGREE = 3


def layer_function(mode: str, d: int, h: float, n_int: int, n_base: int = -1) -> ca.Function:
    """Collocation equations of one layer of duration ``h`` split into ``n_int`` intervals.

    ``F(x_start, Z, p) -> (residuals, x_end, energy, logdet_increment, cov_sq_norms)``: ``Z``
    stacks the states at the ``DEGREE`` collocation points of every interval; ``residuals`` are
    the collocation equations (zero at a solution); ``energy`` and ``logdet_increment`` are the
    Gauss quadratures of ``E|v|²`` and ``2 tr M``; ``cov_sq_norms`` are ``|Σ|_F²`` at the
    collocation points (for the optional bound on Σ). With a fixed base (``n_base ≥ 0``) the
    function takes its data ``q`` last, ``F(x_start, Z, p, q)``.
    """
    f = field_function(mode, d, n_base)
    nv = d * (d + 1) // 2
    nx = d + nv
    k = DEGREE
    n_pts = k * n_int
    _, c, dvec, bvec = _collocation_coefficients(k)
    # MX around one mapped call of the (SX) field over the layer's collocation points: CasADi
    # then differentiates the small field function, not an unrolled layer.
    x = ca.MX.sym("x", nx)
    z = ca.MX.sym("z", nx * n_pts)
    p = ca.MX.sym("p", n_params(mode, d))
    q = ca.MX.sym("q", base_size(n_base, d))
    pts_all = ca.reshape(z, nx, n_pts)
    data = [ca.repmat(p, 1, n_pts)] + ([ca.repmat(q, 1, n_pts)] if n_base >= 0 else [])
    xd_all, e_all, tr_all = f.map(n_pts)(pts_all, *data)
    dt = h / n_int
    quad = np.tile(dt * bvec, n_int)
    iu = vech_index(d)[0]
    weights = ca.DM(np.where(iu[0] == iu[1], 1.0, 2.0)).T  # |Σ|_F² from the upper triangle
    res = []
    start = x
    for i in range(n_int):
        cols = slice(i * k, (i + 1) * k)
        pts = pts_all[:, cols]
        slopes = ca.mtimes(start, ca.DM(c[0:1, 1:])) + ca.mtimes(pts, ca.DM(c[1:, 1:]))
        res.append(ca.vec(slopes - dt * xd_all[:, cols]))
        start = dvec[0] * start + ca.mtimes(pts, ca.DM(dvec[1:]))
    return ca.Function(
        "layer",
        [x, z, p] + ([q] if n_base >= 0 else []),
        [
            ca.vertcat(*res),
            start,
            ca.mtimes(e_all, ca.DM(quad)),
            ca.mtimes(tr_all, ca.DM(quad)),
            ca.mtimes(weights, pts_all[d:, :] ** 2).T,
        ],
    )


#: Parameter names a bound may refer to.
BOUNDED = ("A", "b", "V", "B")


def _frozen_bounds(name: str, value: Any) -> Mapping[str, float]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise InvalidParametersError(f"{name}: expected a mapping of parameter name to bound")
    out: dict[str, float] = {}
    for key, bound in value.items():
        if key not in BOUNDED:
            raise InvalidParametersError(
                f"{name}: unknown parameter {key!r}; expected 'A', 'b', 'V' or 'B'"
            )
        out[key] = as_positive_float(f"{name}[{key!r}]", bound, allow_inf=True)
    return MappingProxyType(out)


@dataclass(frozen=True, kw_only=True)
class SteeringBounds:
    """Bounds of a collocation steering problem: one validated value for the option family.

    :func:`gtcontrol.steer` takes it as ``bounds=`` (``None``: unbounded), as diffrax takes
    ``SaveAt``. Bounds need the collocation method (the flow construction takes none).

    Attributes
    ----------
    entry
        Per parameter name (``"A"``, ``"b"``, ``"V"``, ``"B"``): a bound on the absolute value of
        every entry of each layer's parameter. Only optimized parameters may be bounded.
    norm
        Per parameter name: a bound on the Frobenius norm of each layer's matrix.
    cov
        Bound on ``|Σ(t)|_F`` at every collocation point (the re-simulated maximum is reported
        in ``stats["cov_norm_max"]``); required for ``objective="parameter"`` with attention.

    Raises
    ------
    InvalidParametersError
        On an unknown parameter name or a bound that is not positive (naming the field).

    Examples
    --------
    >>> from gtcontrol import SteeringBounds
    >>> b = SteeringBounds(entry={"A": 2.0}, cov=10.0)
    >>> dict(b.entry), dict(b.norm), b.cov
    ({'A': 2.0}, {}, 10.0)
    """

    entry: Mapping[str, float] = field(default_factory=dict)
    norm: Mapping[str, float] = field(default_factory=dict)
    cov: float | None = None

    def __post_init__(self) -> None:
        set_fields(
            self, entry=_frozen_bounds("entry", self.entry), norm=_frozen_bounds("norm", self.norm)
        )
        if self.cov is not None:
            as_positive_float("cov", self.cov)

    def __bool__(self) -> bool:
        """Whether any bound is set."""
        return bool(self.entry or self.norm or self.cov is not None)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Everything the transcription needs (validated by ``steer``).

    The end point and the bounds are held as the values ``steer`` validated (``target``,
    ``bounds``), not restated field by field; ``d``, ``cov1`` and ``rank1`` read the target.
    """

    mode: str
    fixed: tuple[str, ...]
    target: Gaussian
    logdet0: float
    T: float
    L: int
    objective: str
    terminal: str
    terminal_weight: float
    regularization: float
    bounds: SteeringBounds
    intervals: int
    parallelization: str
    ipopt: Mapping[str, Any]
    #: Heads of a fixed base (its data are NLP parameters), ``-1`` for none: the field is then
    #: the base's plus the optimized additions, and the kinetic objective is the additions' own.
    base_heads: int = -1
    #: Rows of ``A`` (and of an added head's ``V``) and entries of ``b`` held at their starting
    #: values (a constant coordinate).
    held_rows: tuple[int, ...] = ()

    @property
    def d(self) -> int:
        """The dimension."""
        return self.target.dim

    @property
    def cov1(self) -> FloatArray:
        """The target covariance."""
        return self.target.cov

    @property
    def rank1(self) -> int:
        """The target covariance's numerical rank."""
        return self.target.rank

    def key(self) -> tuple[Any, ...]:
        """Everything the symbolic NLP depends on (the data enter as NLP parameters)."""
        cov_key = b"" if self.terminal == "exact" and self.rank1 == self.d else self.cov1.tobytes()
        return (
            self.mode,
            self.d,
            self.T,
            self.L,
            self.intervals,
            self.fixed,
            cov_key,
            self.rank1,
            self.objective,
            self.terminal,
            self.terminal_weight,
            self.regularization,
            tuple(sorted(self.bounds.entry.items())),
            tuple(sorted(self.bounds.norm.items())),
            self.bounds.cov,
            self.parallelization,
            tuple(sorted(self.ipopt.items())),
            self.base_heads,
            self.held_rows,
        )


@dataclass(frozen=True)
class Solution:
    """Raw NLP result: parameters ``(L, n_params)``, node states ``(L, n_state)`` and IPOPT data.

    ``status`` is IPOPT's return status; ``timed_out`` is true when the deadline callback
    stopped the solve.
    """

    params: FloatArray
    states: FloatArray
    colloc: FloatArray
    aux: FloatArray
    objective: float
    status: str
    success: bool
    iterations: int
    seconds: float
    timed_out: bool = False


@dataclass
class _Constraints:
    """Constraint rows ``lbg ≤ g ≤ ubg`` collected block by block."""

    g: list[Any] = field(default_factory=list)
    lbg: list[FloatArray] = field(default_factory=list)
    ubg: list[FloatArray] = field(default_factory=list)

    def add(self, expr: Any, lower: float = 0.0, upper: float = 0.0) -> None:
        n = int(expr.numel())
        self.g.append(expr)
        self.lbg.append(np.full(n, lower))
        self.ubg.append(np.full(n, upper))


class Transcription:
    """The NLP of one steering problem; :meth:`solve` may be called again with a new target.

    Variables: per layer the parameters ``p_k``, the collocation states ``Z_k`` and the end
    state ``x_{k+1}``; the initial state and the terminal data are NLP parameters.
    """

    def __init__(self, prob: Problem) -> None:
        clock = time.perf_counter()
        self.prob = prob
        self._layout()
        cons = _Constraints()
        energy, logdet, norms = self._dynamics(cons)
        objective = self._objective(energy)
        objective = objective + self._terminal(cons, logdet)
        self._path_constraints(cons, norms)
        self._variable_bounds()
        self.lbg = np.concatenate(cons.lbg)
        self.ubg = np.concatenate(cons.ubg)
        self.solver = self._make_solver(objective, cons)
        self.build_seconds = time.perf_counter() - clock

    # ------------------------------------------------------------------ building blocks
    def _layout(self) -> None:
        """Sizes, the packing of parameters, and the rows that are free or held fixed."""
        prob = self.prob
        d = prob.d
        self.nx = d + d * (d + 1) // 2
        self.npar = n_params(prob.mode, d)
        self.nz = self.nx * DEGREE * prob.intervals
        shapes = param_shapes(prob.mode, d)
        self.names = [n for n, _ in shapes]
        self.offsets = np.cumsum([0] + [int(np.prod(sh)) for _, sh in shapes])
        free = [
            np.arange(self.offsets[i], self.offsets[i + 1])
            for i, n in enumerate(self.names)
            if n not in prob.fixed
        ]
        held = [  # the rows of A, b and V (an added head's output) of a held coordinate
            int(self.offsets[i]) + (j * d + k if n != "b" else j)
            for i, n in enumerate(self.names)
            if n in ("A", "b", "V") and n not in prob.fixed
            for j in prob.held_rows
            for k in range(d if n != "b" else 1)
        ]
        self.free_rows = np.setdiff1d(np.concatenate(free).astype(int), held)
        self.fixed_rows = np.setdiff1d(np.arange(self.npar), self.free_rows)
        self.nfree = len(self.free_rows)
        L = prob.L
        self.P = ca.MX.sym("P", self.nfree, L)
        self.Z = ca.MX.sym("Z", self.nz, L)
        self.X = ca.MX.sym("X", self.nx, L)
        self.x0 = ca.MX.sym("x0", self.nx)
        self.target = ca.MX.sym("target", self.nx)  # (m1, vech Σ1), shifted by corrections
        self.pfix = ca.MX.sym("pfix", len(self.fixed_rows), L)  # fixed parameters (NLP data)
        self.qbase = ca.MX.sym("qbase", base_size(prob.base_heads, d), L)  # a fixed base's data
        self.w: list[Any] = [ca.vec(self.P), ca.vec(self.Z), ca.vec(self.X)]  # layer by layer
        self.n_aux = 0
        self.k_mat = np.zeros((0, d))

    def _dynamics(self, cons: _Constraints) -> tuple[Any, Any, Any]:
        """Collocation equations and continuity of every layer (the layer function, mapped)."""
        prob = self.prob
        L = prob.L
        self.layer = layer_function(prob.mode, prob.d, prob.T / L, prob.intervals, prob.base_heads)
        mapped = self.layer.map(L, prob.parallelization)
        # Full parameter matrix: free and fixed rows interleaved back into packing order.
        perm = np.argsort(np.concatenate([self.free_rows, self.fixed_rows]))
        p_all = ca.vertcat(self.P, self.pfix)[perm.tolist(), :] if len(self.fixed_rows) else self.P
        xin = ca.horzcat(self.x0, self.X[:, : L - 1]) if L > 1 else self.x0
        base = [self.qbase] if prob.base_heads >= 0 else []
        res, xend, energy, logdet, norms = mapped(xin, self.Z, p_all, *base)
        cons.add(ca.vec(res))
        cons.add(ca.vec(xend - self.X))
        return energy, logdet, norms

    def _objective(self, energy: Any) -> Any:
        """Kinetic energy (plus ε × parameter energy) or the parameter energy."""
        prob = self.prob
        par_energy = (prob.T / prob.L) * ca.sumsqr(self.P)
        if prob.objective == "kinetic":
            return ca.sum2(energy) + prob.regularization * par_energy
        return par_energy

    def _terminal_basis(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Eigenvalues (descending) of Σ1 and bases of its range and kernel."""
        prob = self.prob
        w1, u1 = np.linalg.eigh(prob.cov1)
        order = np.argsort(w1)[::-1]
        u1, w1 = u1[:, order], w1[order]
        r = prob.rank1
        ur, uk = u1[:, :r], u1[:, r:]
        if prob.terminal == "exact" and r == prob.d:
            ur = np.eye(prob.d)  # any orthonormal basis; the identity keeps it target-independent
        return w1, ur, uk

    def _terminal(self, cons: _Constraints, logdet: Any) -> Any:
        """Terminal constraints (exact) or the terminal penalty (bw, kl), which is returned."""
        prob = self.prob
        d, r = prob.d, prob.rank1
        x_end = self.X[:, prob.L - 1]
        m_end, cov_end = x_end[:d], ca_unvech(x_end[d:], d)
        m1, cov1 = self.target[:d], ca_unvech(self.target[d:], d)
        w1, ur, uk = self._terminal_basis()
        if prob.terminal == "exact":
            # Reduced conditions for a rank-r target: U1ᵀ(Σ − Σ1)U1 = 0 and Q1ᵀ(Σ − Σ1)U1 = 0
            # (Q1 spans ker Σ1). Q1ᵀΣQ1 = 0 then follows from rank Σ = r; imposing it too would
            # make the constraint Jacobian rank-deficient (LICQ fails).
            diff = cov_end - cov1
            cons.add(m_end - m1)
            if r > 0:
                cons.add(ca_vech(ca.mtimes([ur.T, diff, ur]), r))
                if r < d:
                    cons.add(ca.vec(ca.mtimes([uk.T, diff, ur])))
            return 0.0
        if prob.terminal == "bw":
            # W2² = |Δm|² + tr Σ + tr Σ1 − 2 tr (K Σ Kᵀ)^{1/2}, K = D1^{1/2} U1ᵀ (r × d); the square
            # root is an auxiliary symmetric Y with Y² = K Σ Kᵀ, warm-started on the principal
            # root (minimizing −2 tr Y keeps it there).
            pen = ca.sumsqr(m_end - m1) + ca.trace(cov_end) + ca.trace(cov1)
            if r > 0:
                self.k_mat = (ur * np.sqrt(w1[:r])).T
                self.n_aux = r * (r + 1) // 2
                y_vech = ca.MX.sym("Y", self.n_aux)
                y = ca_unvech(y_vech, r)
                self.w.append(y_vech)
                inner = ca.mtimes([self.k_mat, cov_end, self.k_mat.T])
                cons.add(ca_vech(ca.mtimes(y, y) - inner, r))
                pen = pen - 2.0 * ca.trace(y)
            return prob.terminal_weight * pen
        # "kl": KL(N(m_T, Σ_T) ‖ N(m1, Σ1)) with ln det Σ_T = ln det Σ0 + ∫ 2 tr M dt
        prec1 = np.linalg.inv(prob.cov1)
        dm = m1 - m_end
        kl = 0.5 * (
            ca.trace(ca.mtimes(prec1, cov_end))
            + ca.dot(dm, ca.mtimes(prec1, dm))
            - d
            + float(np.linalg.slogdet(prob.cov1)[1])
            - (prob.logdet0 + ca.sum2(logdet))
        )
        return prob.terminal_weight * kl

    def _path_constraints(self, cons: _Constraints, norms: Any) -> None:
        """Per-layer Frobenius-norm bounds on parameters and the bound on ``|Σ|_F``."""
        prob = self.prob
        free_pos = {int(r): j for j, r in enumerate(self.free_rows)}
        for name, bound in prob.bounds.norm.items():
            i = self.names.index(name)
            rows = [free_pos[r] for r in range(int(self.offsets[i]), int(self.offsets[i + 1]))]
            cons.add(ca.sum1(self.P[rows, :] ** 2).T, -np.inf, bound**2)
        if prob.bounds.cov is not None:
            cons.add(ca.vec(norms), -np.inf, prob.bounds.cov**2)

    def _variable_bounds(self) -> None:
        """Entry bounds on the free parameters; the states are unbounded."""
        prob = self.prob
        L = prob.L
        lbx = np.full((self.npar, L), -np.inf)
        ubx = np.full((self.npar, L), np.inf)
        for name, bound in prob.bounds.entry.items():
            i = self.names.index(name)
            lbx[self.offsets[i] : self.offsets[i + 1], :] = -bound
            ubx[self.offsets[i] : self.offsets[i + 1], :] = bound
        lbx, ubx = lbx[self.free_rows], ubx[self.free_rows]
        n_states = (self.nz + self.nx) * L + self.n_aux
        self.lbx = np.concatenate([lbx.ravel(order="F"), np.full(n_states, -np.inf)])
        self.ubx = np.concatenate([ubx.ravel(order="F"), np.full(n_states, np.inf)])

    def _make_solver(self, objective: Any, cons: _Constraints) -> Any:
        """The IPOPT solver, with the deadline callback and the user's IPOPT options."""
        prob = self.prob
        x = ca.vertcat(*self.w)
        p = ca.vertcat(self.x0, self.target, ca.vec(self.pfix), ca.vec(self.qbase))
        g = ca.vertcat(*cons.g)
        self.deadline = IpoptDeadline(int(x.numel()), int(g.numel()), int(p.numel()))
        opts: dict[str, Any] = {
            "ipopt.print_level": 0,
            "ipopt.sb": "yes",
            "print_time": False,
            "show_eval_warnings": False,
            "ipopt.tol": 1e-8,
            "ipopt.constr_viol_tol": 1e-10,
            "ipopt.max_iter": 500,
            "expand": prob.d <= EXPAND_MAX_DIM,
            "iteration_callback": self.deadline,
        }
        opts.update(casadi_options(prob.ipopt))
        max_iter = opts["ipopt.max_iter"]
        self.max_iter = float(max_iter) if isinstance(max_iter, (int, float)) else None
        return ca.nlpsol("steer", "ipopt", {"x": x, "p": p, "f": objective, "g": g}, opts)

    # ------------------------------------------------------------------ solving
    def _initial_aux(self, states0: FloatArray) -> FloatArray:
        """Principal square root of ``K Σ Kᵀ`` at the guessed end state (BW penalty)."""
        d = self.prob.d
        cov_end = unvech(states0[-1, d:], d)
        return vech(psd_sqrt(self.k_mat @ cov_end @ self.k_mat.T))

    def solve(
        self,
        x0: FloatArray,
        target: FloatArray,
        params0: FloatArray,
        colloc0: FloatArray,
        states0: FloatArray,
        aux0: FloatArray | None = None,
        *,
        max_wall_time: float = math.inf,
        base: FloatArray | None = None,
    ) -> Solution:
        """Solve from ``x0 = (m0, vech Σ0)`` to ``target = (m1, vech Σ1)``.

        Guesses: parameters ``(L, npar)`` (the fixed rows are held at these values), collocation
        states ``(L, nz)``, end states ``(L, nx)``; ``aux0`` the BW square-root variable.
        ``max_wall_time`` (seconds) stops IPOPT after the iteration that exceeds it. ``base``:
        a fixed base's data per layer, ``(L, base_size)`` (:func:`pack_base`).
        """
        L = self.prob.L
        parts = [params0[:, self.free_rows].ravel(), colloc0.ravel(), states0.ravel()]
        if self.n_aux:
            parts.append(np.asarray(self._initial_aux(states0) if aux0 is None else aux0))
        clock = time.perf_counter()
        self.deadline.arm(max_wall_time)
        with progress(f"steer: IPOPT iterations, {L} layers", total=self.max_iter) as update:
            self.deadline.update = update
            try:
                sol = self.solver(
                    x0=np.concatenate(parts),
                    p=np.concatenate(
                        [
                            x0,
                            target,
                            params0[:, self.fixed_rows].ravel(),
                            np.zeros(0) if base is None else base.ravel(),
                        ]
                    ),
                    lbx=self.lbx,
                    ubx=self.ubx,
                    lbg=self.lbg,
                    ubg=self.ubg,
                )
            finally:
                self.deadline.disarm()
                self.deadline.update = lambda iterations: None
        seconds = time.perf_counter() - clock
        st = self.solver.stats()
        wopt = np.asarray(sol["x"]).ravel()
        nfree, nz, nx = self.nfree, self.nz, self.nx
        i1, i2, i3 = nfree * L, (nfree + nz) * L, (nfree + nz + nx) * L
        params = params0.copy()
        params[:, self.free_rows] = wopt[:i1].reshape(L, nfree)
        status = str(st.get("return_status", "unknown"))
        return Solution(
            params=params,
            colloc=wopt[i1:i2].reshape(L, nz),
            states=wopt[i2:i3].reshape(L, nx),
            aux=wopt[i3:],
            objective=float(sol["f"]),
            status=status,
            success=bool(st.get("success", False)),
            iterations=int(st.get("iter_count", -1)),
            seconds=seconds,
            timed_out=self.deadline.fired and status == STOPPED,
        )

    def collocation_times(self) -> FloatArray:
        """Depths of the collocation points, shape ``(L, intervals·DEGREE)``, in ``Z`` order."""
        prob = self.prob
        h = prob.T / prob.L
        dt = h / prob.intervals
        tau = _collocation_coefficients(DEGREE)[0][1:]
        local = np.concatenate([i * dt + dt * tau for i in range(prob.intervals)])
        return np.asarray(np.arange(prob.L)[:, None] * h + local[None, :], dtype=float)


_CACHE: OrderedDict[tuple[Any, ...], Transcription] = OrderedDict()
_CACHE_SIZE = 8

#: Cost model of building the NLP, per mode: ``(c, c_expanded, floor)`` in seconds. Building is
#: dominated by CasADi's ``nlpsol`` set-up (the exact Hessian of the Lagrangian), one native
#: call that cannot be interrupted, so a build that cannot fit the time left is refused up front
#: (:func:`build_estimate`). Fitted on the upper envelope of builds measured on a loaded 2-core
#: machine (L = 10, one interval; seconds): full 0.11/0.44/1.5/0.8/1.8/7.9/23 at
#: d = 2/3/4/5/6/8/10 (d ≤ 4 expanded to SX), attention 3.4/4.3/30 at d = 4/6/8, ffn
#: 1.3/1.3/1.6/2.8 at d = 4/6/8/10; L = 2 as L = 10, L = 30 about 3.7 times that.
_BUILD_COST = {"full": (9.0, 1.6, 0.1), "attention": (30.0, 3.5, 0.5), "ffn": (0.6, 0.2, 1.3)}


def build_estimate(prob: Problem, *, cache: bool = True) -> float:
    """Estimated seconds to build the NLP of ``prob`` (0 when ``cache`` and it is cached).

    ``c · (d/8)⁵ · max(1, L/10)^1.2 · intervals + floor`` (``c_expanded · (d/4)⁵ ...`` up to
    ``EXPAND_MAX_DIM``, where the NLP is expanded to scalar form): the Hessian has
    ``O(d⁴)`` entries, each an expression of ``O(d)`` terms.
    """
    if cache and prob.key() in _CACHE:
        return 0.0
    c, c_exp, floor = _BUILD_COST[prob.mode]
    size = c_exp * (prob.d / 4) ** 5 if prob.d <= EXPAND_MAX_DIM else c * (prob.d / 8) ** 5
    return float(size * max(1.0, prob.L / 10) ** 1.2 * prob.intervals + floor)


def transcription(prob: Problem, *, cache: bool = True) -> tuple[Transcription, bool]:
    """The NLP of ``prob``, reused from a small LRU cache when its structure was built before.

    Returns the transcription and whether it came from the cache. Building one (symbolic
    derivatives included) dominates the cost of small solves, and repeated solves with the same
    shapes and options but other end points share it.
    """
    key = prob.key()
    if cache and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    built = Transcription(prob)
    if cache:
        _CACHE[key] = built
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return built, False
