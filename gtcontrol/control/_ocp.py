"""Building blocks of the CasADi steering NLP (private; assembled by :mod:`._transcription`).

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

from typing import Any

import casadi as ca
import numpy as np

from .._linalg import FloatArray, unvech, vech, vech_index
from ..errors import InvalidParametersError
from ..model.moments import affine_velocity, moment_field
from ..model.params import Layer

__all__: list[str] = []

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


def field_function(mode: str, d: int) -> ca.Function:
    """``f(x, p) -> (dx/dt, E|v|², 2 tr M)`` from the one moment field of gtcontrol.moments."""
    nv = d * (d + 1) // 2
    x = ca.SX.sym("x", d + nv)
    p = ca.SX.sym("p", n_params(mode, d))
    xo = _objects(x, d + nv)
    mean = xo[:d]
    cov = unvech(xo[d:], d)
    layer = symbolic_layer(p, mode, d)
    dm, dcov = moment_field(layer, mean, cov)  # type: ignore[arg-type]
    m_mat, _ = affine_velocity(layer, mean, cov)  # type: ignore[arg-type]
    xdot = ca.vertcat(*dm, *vech(dcov))
    # E|v|² = tr(M Σ Mᵀ) + |M m + c|², and M m + c is dm/dt.
    energy = ca.sum1(ca.vertcat(*((m_mat @ cov) * m_mat).ravel())) + ca.sumsqr(ca.vertcat(*dm))
    trace = ca.times(2.0, ca.sum1(ca.vertcat(*np.diag(m_mat))))
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


def layer_function(mode: str, d: int, h: float, n_int: int) -> ca.Function:
    """Collocation equations of one layer of duration ``h`` split into ``n_int`` intervals.

    ``F(x_start, Z, p) -> (residuals, x_end, energy, logdet_increment, cov_sq_norms)``: ``Z``
    stacks the states at the ``DEGREE`` collocation points of every interval; ``residuals`` are
    the collocation equations (zero at a solution); ``energy`` and ``logdet_increment`` are the
    Gauss quadratures of ``E|v|²`` and ``2 tr M``; ``cov_sq_norms`` are ``|Σ|_F²`` at the
    collocation points (for the optional bound on Σ).
    """
    f = field_function(mode, d)
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
    pts_all = ca.reshape(z, nx, n_pts)
    xd_all, e_all, tr_all = f.map(n_pts)(pts_all, ca.repmat(p, 1, n_pts))
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
        [x, z, p],
        [
            ca.vertcat(*res),
            start,
            ca.mtimes(e_all, ca.DM(quad)),
            ca.mtimes(tr_all, ca.DM(quad)),
            ca.mtimes(weights, pts_all[d:, :] ** 2).T,
        ],
    )
