"""The kernel both designs share: targets, whitening, residuals, spectra, the equilibrium's A.

Read by :mod:`gtcontrol.control.design` (mean matching) and
:mod:`gtcontrol.control.stabilization`; for the latter also the equilibrium's ``A`` nearest to
a layer's own and the heads' quadratic growth ``q``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._linalg import FloatArray, scaled_norm, spd_sqrt_pair, vech_scale
from .._validation import MAX_ENTRY, as_float_array
from ..analysis._field_kernel import covariance_jacobian
from ..analysis.equilibria import mean_matrix
from ..errors import InvalidGaussianError, InvalidParametersError
from ..model.gaussian import Gaussian
from ..model.moments import moment_field
from ..model.params import Layer

__all__ = [
    "MARGIN_SLACK",
    "MAX_TOKENS",
    "RATE_MARGIN",
    "RESIDUAL_TOL",
    "Whitening",
    "abscissa",
    "as_target",
    "check_layer",
    "coerce_target",
    "designed_a",
    "is_normal",
    "orthonormal_cov_jacobian",
    "param_norm",
    "quadratic_growth",
    "rel_residual",
    "residual_parts",
    "scaled_norm",
    "with_bias",
]

#: Relative margin on a stabilizing design's rate (the added head's ``c`` and ``σ``, the gains'
#: goal), so that the certificate holds despite round-off.
RATE_MARGIN = 1e-4

#: Relative inflation of the requested margins inside the NLP, so that the verified rates are
#: never below the request after IPOPT's tolerance and the final rounding.
MARGIN_SLACK = 1e-6
#: Relative residual of the moment field at the target accepted by the certificate.
RESIDUAL_TOL = 1e-9
#: Cap on the number of tokens of a token-level check (the design's ``token_check`` option and
#: :func:`~._finite_n.design_token_certificate`'s ``n_tokens``).
MAX_TOKENS = 10**6


def as_target(mean: Any, cov: Any, *, definite: bool = True) -> Gaussian:
    """The validated target ``N(m*, Σ*)`` (Σ* SPD, or only PSD with ``definite=False``)."""
    m = as_float_array("target.mean", mean, ndim=1, error=InvalidGaussianError)
    if m.shape[0] == 0:
        raise InvalidGaussianError("target.mean: expected at least one dimension, got 0")
    g = Gaussian(m, cov, name="target")
    return _definite(g) if definite else g


def _definite(g: Gaussian) -> Gaussian:
    if g.rank < g.dim:
        raise InvalidGaussianError(
            f"target.cov: expected a positive-definite covariance (rank {g.rank} < {g.dim}); "
            "the design and its certificate are built on Σ*⁻¹"
        )
    return g


def coerce_target(target: Any, *, definite: bool = True) -> Gaussian:
    """A target given as a :class:`Gaussian` or a ``(mean, cov)`` pair."""
    if isinstance(target, Gaussian):  # validated when built: only the definiteness is new
        return _definite(target) if definite else target
    if isinstance(target, (tuple, list)) and len(target) == 2:
        return as_target(target[0], target[1], definite=definite)
    raise InvalidGaussianError(
        f"target: expected a Gaussian or a (mean, cov) pair, got {type(target).__name__}"
    )


def check_layer(layer: Any, target: Any, *, definite: bool = True) -> tuple[Layer, Gaussian]:
    """Validate a ``(layer, target)`` pair of the same dimension."""
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    tgt = coerce_target(target, definite=definite)
    if tgt.dim != layer.dim:
        raise InvalidGaussianError(
            f"target: dimension {tgt.dim} does not match the layer dimension {layer.dim}"
        )
    return layer, tgt


@dataclass(frozen=True)
class Whitening:
    """``x = T x̂`` with ``T = Σ*^{1/2}``: the target becomes ``N(T⁻¹m*, I)``."""

    T: FloatArray
    Ti: FloatArray

    @classmethod
    def of(cls, cov: FloatArray) -> Whitening:
        """The whitening of ``cov``; the last one is reused for the same read-only array (a
        :class:`Gaussian`'s covariance), so a design whitens its target once, not three times
        (an eigensolve each: 0.1 s at d = 512, outside any budget check)."""
        for arr, wh in _LAST_WHITENING:
            if arr is cov:
                return wh
        t, ti = spd_sqrt_pair(cov)
        out = cls(T=t, Ti=ti)
        if not cov.flags.writeable:  # a read-only array cannot change under the cache
            _LAST_WHITENING[:] = [(cov, out)]
        return out

    def layer(self, layer: Layer) -> Layer:
        """The same dynamics in whitened coordinates."""
        a, b = layer.affine_ffn()
        t, ti = self.T, self.Ti
        heads = [(ti @ v_h @ t, t @ b_h @ t) for v_h, b_h in layer.heads]
        g = None if layer.noise is None else ti @ layer.noise
        return Layer(ti @ a @ t, b=ti @ b, heads=heads, noise=g, dim=layer.dim)


#: The last whitening and its (read-only) covariance: :meth:`Whitening.of`'s one-entry cache.
_LAST_WHITENING: list[tuple[FloatArray, Whitening]] = []


def orthonormal_cov_jacobian(layer: Layer, cov: FloatArray) -> FloatArray:
    """``DF(Σ)`` on Sym(d) in an orthonormal (Frobenius) basis.

    :func:`gtcontrol.covariance_jacobian` uses the :func:`vech`
    coordinates ``H_ij`` (i ≤ j); the orthonormal coordinates scale the off-diagonal ones by
    ``√2``: ``J_o = D J D⁻¹`` with ``D = vech_scale(d)``.
    """
    j = covariance_jacobian(layer, cov)
    dvec = vech_scale(layer.dim)
    return np.asarray((dvec[:, None] * j) / dvec[None, :])


def abscissa(x: FloatArray) -> float:
    """Spectral abscissa ``max Re λ(x)`` (``−inf`` for an empty matrix)."""
    return float(np.max(np.linalg.eigvals(x).real)) if x.size else -math.inf


def is_normal(x: FloatArray) -> bool:
    """Whether ``x xᴴ = xᴴ x`` to a relative 1e-10."""
    nx = float(np.linalg.norm(x))
    return bool(np.linalg.norm(x @ x.conj().T - x.conj().T @ x) <= 1e-10 * max(nx * nx, 1e-300))


def _head_terms(layer: Layer, mean: FloatArray, cov: FloatArray) -> tuple[float, float]:
    """``Σ_h ‖V_hΣB_hΣ‖`` and ``Σ_h (‖V_hΣB_hm‖ + ‖V_hm‖)``, head by head (factored heads
    through their factors: no ``d×d`` head is formed)."""
    cov_terms, mean_terms = 0.0, 0.0
    fh = layer.factored_heads
    if fh is not None:
        cores = np.matmul(np.matmul(fh.v, cov), fh.k.transpose(0, 2, 1)) * fh.scale
        q_cov = np.matmul(fh.q, cov)
        q_m = np.einsum("hij,j->hi", fh.q, mean)
        for h in range(fh.n_heads):
            cov_terms += scaled_norm(fh.o[h] @ (cores[h] @ q_cov[h]))
            mean_terms += scaled_norm(fh.o[h] @ (cores[h] @ q_m[h]))
            mean_terms += scaled_norm(fh.o[h] @ (fh.v[h] @ mean))
    for v_h, b_h in layer.dense_heads:
        vs = v_h @ cov
        cov_terms += scaled_norm(vs @ b_h @ cov)
        mean_terms += scaled_norm(vs @ (b_h @ mean)) + scaled_norm(v_h @ mean)
    return cov_terms, mean_terms


def residual_parts(layer: Layer, mean: FloatArray, cov: FloatArray) -> tuple[float, float]:
    """Relative sizes ``(covariance, mean)`` of ``(dΣ/dt, dm/dt)`` at ``N(mean, cov)``.

    Each is the field over the sum of the sizes of its terms, head by head (``2‖AΣ‖ + 2Σ_h
    ‖V_hΣB_hΣ‖ + ‖GGᵀ‖``; ``‖Am‖ + ‖b‖ + Σ_h (‖V_hΣB_hm‖ + ‖V_hm‖)``): the terms cancel at an
    equilibrium, so rounding makes the field a few units of round-off of that sum, and a head
    pair that cancels in the mean (:func:`gtcontrol.stabilize`'s gauge ``(−scI, B₀/s)`` and its
    companion ``(κI, 0)``) is counted at the size of each head, not of their sum. The norms are
    scaled (:func:`scaled_norm`), so any covariance scale accepted by a Gaussian works.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        dm, ds = moment_field(layer, mean, cov)
        a, b = layer.affine_ffn()
        head_s, head_m = _head_terms(layer, mean, cov)
        scale_s = 2.0 * scaled_norm(a @ cov) + 2.0 * head_s
        scale_m = scaled_norm(a @ mean) + scaled_norm(b) + head_m
        if layer.noise is not None:
            scale_s += scaled_norm(layer.noise @ layer.noise.T)
        ns, nm = scaled_norm(ds), scaled_norm(dm)
    rs = ns / scale_s if scale_s > 0 else ns
    rm = nm / scale_m if scale_m > 0 else nm
    return rs, rm


def rel_residual(layer: Layer, target: Gaussian) -> float:
    """Relative size of ``(dm/dt, dΣ/dt)`` at the target (the terms' sizes as the scale)."""
    return max(residual_parts(layer, target.mean, target.cov))


def param_norm(layer: Layer) -> float:
    """``sqrt(‖A‖² + ‖b‖² + Σ_h ‖V_h‖² + ‖B_h‖²)`` (Frobenius)."""
    a, b = layer.affine_ffn()
    s = float(np.sum(a * a) + np.sum(b * b))
    for v_h, b_h in layer.heads:
        s += float(np.sum(v_h * v_h) + np.sum(b_h * b_h))
    return math.sqrt(s)


def with_bias(layer: Layer, target: Gaussian) -> Layer:
    """The layer with ``b = −K m*`` (K does not depend on b).

    Raises
    ------
    InvalidGaussianError
        If ``b`` has an entry beyond :data:`~gtcontrol._validation.MAX_ENTRY` (or overflows):
        the target's mean is too large for the layer, and the refusal names ``target``, not the
        internal ``b``.
    """
    k = mean_matrix(layer, target.cov)
    # an overflow to inf is refused just below, by name
    with np.errstate(over="ignore", invalid="ignore"):
        bias = -k @ target.mean
    top = float(np.max(np.abs(bias)))
    if not top <= MAX_ENTRY:
        mean_top = float(np.max(np.abs(target.mean)))
        size = f"of magnitude {top:.3g}" if math.isfinite(top) else "past float64's range"
        raise InvalidGaussianError(
            f"target: the mean (largest entry {mean_top:.3g}) is too large for the designed "
            f"layer: its bias b = −K m* would have an entry {size}, beyond the bound "
            f"{MAX_ENTRY:g} on a layer's entries (gtcontrol._validation.MAX_ENTRY); shift or "
            "rescale the coordinates so that the target mean is smaller"
        )
    return layer.replace(b=bias)


#: Steps of iterative refinement of the designed ``A`` (:func:`designed_a`).
_REFINE_STEPS = 2


def _nearest_skew(e: FloatArray, s_act: FloatArray) -> FloatArray:
    """``KP`` for the skew ``K`` minimizing ``‖E + KP‖_F``, ``P = S⁻¹``: ``KP² + P²K = PEᵀ − EP``.

    In ``S``'s eigenbasis (eigenvalues ``w``) ``K_ij = (E_ji w_i w_j² − E_ij w_i² w_j) / (w_i² +
    w_j²)``, of degree 1 in ``w``: it is formed with ``w / max w``, so no power of ``w``
    overflows or underflows at any scale of ``S`` (``w⁻²`` does beyond ``1e±154``).
    """
    w, u = np.linalg.eigh(s_act)
    wn = w / w[-1]
    et = u.T @ e @ u
    wi, wj = wn[:, None], wn[None, :]
    k = (et.T * wi * wj * wj - et * wi * wi * wj) / (wi * wi + wj * wj)
    k = 0.5 * (k - k.T)
    out: FloatArray = u @ (k / wj) @ u.T
    return out


def designed_a(
    red: Layer, s_act: FloatArray, a_old: FloatArray, forcing: FloatArray | None = None
) -> FloatArray:
    """``A = (−(Q(S) + GGᵀ)/2 + K) S⁻¹`` nearest to ``a_old`` (reduced coordinates); ``forcing``
    is the noise's ``GGᵀ`` there (``None``: none). ``Q(S)`` includes ``red``'s own noise, if any."""
    q = moment_field(red.replace(A=np.zeros_like(a_old)), np.zeros(red.dim), s_act)[1]
    if forcing is not None:
        q = q + forcing
    p = np.linalg.inv(s_act)
    a0 = -0.5 * q @ p
    out: FloatArray = a0 + _nearest_skew(a0 - a_old, s_act)
    # The inverse leaves a residual of about eps·κ(S) (2e-5 of the terms at κ = 1e12); each
    # step A → A − RS⁻¹/2 of iterative refinement multiplies it by about eps·κ again.
    for _ in range(_REFINE_STEPS):
        res = out @ s_act
        out = out - 0.5 * (res + res.T + q) @ p
    return out


def _norm2_product(x: FloatArray, y: FloatArray) -> float:
    """``‖X Y‖₂`` for tall ``X`` (``r×p``) and wide ``Y`` (``p×r``) through two QRs."""
    _, rx = np.linalg.qr(x)
    _, ry = np.linalg.qr(y.T)
    return float(np.linalg.norm(rx @ ry.T, 2))


def quadratic_growth(red: Layer, s_act: FloatArray) -> float:
    """``q = Σ_h ‖S^{-½}V_hS^{½}‖₂ ‖S^{½}B_hS^{½}‖₂`` (factored heads through their factors)."""
    root, inv_root = spd_sqrt_pair(s_act)
    total = 0.0
    fh = red.factored_heads
    if fh is not None:
        for h in range(fh.n_heads):
            nv = _norm2_product(inv_root @ fh.o[h], fh.v[h] @ root)
            nb = fh.scale * _norm2_product((fh.k[h] @ root).T, fh.q[h] @ root)
            total += nv * nb
    for v_h, b_h in red.dense_heads:
        total += float(np.linalg.norm(inv_root @ v_h @ root, 2)) * float(
            np.linalg.norm(root @ b_h @ root, 2)
        )
    return total
