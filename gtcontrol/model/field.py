"""The moment vector field: the affine velocity a layer induces on a Gaussian.

For ``μ = N(m, Σ)`` the tilted law ``∝ e^{yᵀBx} N(y; m, Σ)`` is ``N(m + ΣBx, Σ)``, so each head's
attention is the affine map ``Attn_h(x) = m + Σ B_h x`` and the velocity is ``v(x) = M x + c`` with

    M = A + Σ_h V_h Σ B_h,        c = b + Σ_h V_h m,

and the moments move by ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (docs/theory.md §2). This is
the one home of the field: everything in gtcontrol that needs it calls :func:`affine_velocity`
or :func:`moment_field` (re-exported by :mod:`gtcontrol.model.moments`).

Reference: the paper cited in :mod:`gtcontrol`, §2.
"""

from __future__ import annotations

import numpy as np

from .._linalg import FloatArray
from .params import Layer

__all__ = ["affine_velocity", "factor_field", "moment_field"]


def affine_velocity(
    layer: Layer, mean: FloatArray, cov: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The affine velocity ``v(x) = M x + c`` that ``layer`` induces on ``N(mean, cov)``.

    ``M = A + Σ_h V_h Σ B_h`` and ``c = b + Σ_h V_h m`` (docs/theory.md §2); ``A, b`` include an
    identity-activation feed-forward. One head costs two ``d×d`` products.

    Parameters
    ----------
    layer
        The layer; its feed-forward, if any, must be affine (identity activation).
    mean
        The mean ``m``, shape ``(d,)``.
    cov
        The covariance ``Σ``, shape ``(d, d)`` (not checked: this is the inner loop).

    Returns
    -------
    tuple of numpy.ndarray
        ``(M, c)`` of shapes ``(d, d)`` and ``(d,)``.

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward (outside the exact Gaussian theory).
    """
    a, b = layer.affine_ffn()
    m_mat = a.copy()
    c = b.copy()
    for v_h, b_h in layer.heads:
        m_mat += v_h @ (cov @ b_h)
        c += v_h @ mean
    return m_mat, c


def moment_field(layer: Layer, mean: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Right-hand side of the moment ODE: ``(dm/dt, dΣ/dt) = (M m + c, M Σ + Σ Mᵀ [+ G Gᵀ])``.

    The covariance derivative is formed as ``P + Pᵀ`` with ``P = M Σ``, so it is exactly symmetric
    and costs one more ``d×d`` product (three in all for one head). A layer with Brownian forcing
    ``G`` (``layer.noise``) adds ``G Gᵀ`` (docs/theory.md §6).

    Parameters
    ----------
    layer, mean, cov
        As in :func:`affine_velocity`.

    Returns
    -------
    tuple of numpy.ndarray
        ``(dm/dt, dΣ/dt)`` of shapes ``(d,)`` and ``(d, d)``; ``dΣ/dt`` is exactly symmetric.

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward (outside the exact Gaussian theory).
    """
    m_mat, c = affine_velocity(layer, mean, cov)
    p = m_mat @ cov
    ds = p + p.T
    if layer.noise is not None:
        ds += layer.noise @ layer.noise.T
    return m_mat @ mean + c, ds


def factor_field(
    layer: Layer, mean: FloatArray, factor: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Right-hand side of the moment ODE in factor form: ``(dm/dt, dL/dt) = (M m + c, M L)``.

    With ``Σ = L Lᵀ`` (``L`` of size ``d×r``), ``dL/dt = M(Σ) L`` reproduces ``dΣ/dt = MΣ + ΣMᵀ``
    (a congruence), so an integrator on ``L`` keeps Σ positive semidefinite and of rank ``r``
    by construction (docs/theory.md §2). Each head's ``V_h Σ B_h x`` is applied as
    ``V_h (L (Lᵀ (B_h x)))``: O(d² r) per head, never a d×d×d product. Brownian forcing is
    not expressible in factor form (it raises the rank).

    Parameters
    ----------
    layer
        The layer; affine feed-forward only, no noise.
    mean
        The mean ``m``, shape ``(d,)``.
    factor
        ``L``, shape ``(d, r)``.

    Returns
    -------
    tuple of numpy.ndarray
        ``(dm/dt, dL/dt)`` of shapes ``(d,)`` and ``(d, r)``.
    """
    a, b = layer.affine_ffn()
    x = np.column_stack([mean, factor])  # apply M to m and L in one pass
    mx = a @ x
    c = b.copy()
    for v_h, b_h in layer.heads:
        mx += v_h @ (factor @ (factor.T @ (b_h @ x)))
        c += v_h @ mean
    return mx[:, 0] + c, mx[:, 1:]
