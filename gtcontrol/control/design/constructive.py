"""The closed-form (Riccati-class) mean-matching design.

Choose ``A = aI + S Σ*⁻¹`` with ``a > 0`` and ``S`` skew, and ``v < 0``. Then
``R := AᵀΩ* + Ω*A = 2a Ω*`` (``Ω* = Σ*⁻¹``) is positive definite, ``B = R / (−2v)`` gives
``R = −v (B + Bᵀ)``, and Σ* is the equilibrium of

    dΣ/dt = AΣ + ΣAᵀ − ΣRΣ,       i.e.   dΩ/dt = −AᵀΩ − ΩA + R   for Ω = Σ⁻¹.

The precision ODE is linear, so ``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}`` exactly; with
``W = Σ*^{1/2}(Ω − Ω*)Σ*^{1/2}`` this is ``‖W(t)‖_F = e^{−2at}‖W(0)‖_F`` (the rotation
``S`` is orthogonal in the Σ*⁻¹ metric), and Ω(t) stays positive definite because R ≻ 0: every
``Σ0 ≻ 0`` converges, at rate ``2a``. The mean obeys ``dm/dt = K(t) m + b`` with
``K(t) → K = vI + ½(A − Σ*AᵀΣ*⁻¹) = vI + S Σ*⁻¹``, whose eigenvalues all have real part ``v``;
``b = −K m*`` puts the mean equilibrium at ``m*``, reached at rate ``min(|v|, 2a)``. With
``rate = r`` the defaults are ``v = −r`` and ``2a = 2r`` (so ``B = Σ*⁻¹``): mean rate ``r``,
covariance rate ``2r``. Exact and ``O(d³)`` (milliseconds at d = 50).

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md §5.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._linalg import FloatArray, sym
from ..._validation import as_float_array
from ...errors import InvalidParametersError
from ...model.gaussian import Gaussian
from ...model.params import Layer
from ._common import with_bias

__all__ = ["check_rotation", "constructive_layer"]


def constructive_layer(
    target: Gaussian, rate: float, cov_rate: float, rotation: FloatArray | None
) -> Layer:
    """``A = aI + SΣ*⁻¹``, ``V = −rate·I``, ``B = R/(2·rate)``, ``R = 2aΣ*⁻¹``, 2a = cov_rate."""
    d = target.dim
    w, u = np.linalg.eigh(target.cov)
    omega = sym((u / w) @ u.T)
    a = 0.5 * cov_rate
    a_mat = a * np.eye(d)
    if rotation is not None:
        a_mat = a_mat + rotation @ omega
    b_mat = (a / rate) * omega
    return with_bias(Layer(a_mat, B=b_mat, V=-rate), target)


def check_rotation(rotation: Any, d: int) -> FloatArray | None:
    """Validate the skew matrix ``S`` of the constructive design (``None`` passes)."""
    if rotation is None:
        return None
    s = as_float_array("rotation", rotation, ndim=2, shape=(d, d))
    ns = float(np.linalg.norm(s))
    if float(np.linalg.norm(s + s.T)) > 1e-12 * max(ns, 1e-300):
        raise InvalidParametersError(
            f"rotation: expected a skew-symmetric matrix S = −Sᵀ, ‖S + Sᵀ‖ = "
            f"{np.linalg.norm(s + s.T):.3g}"
        )
    return 0.5 * (s - s.T)
