"""The design of ``A, b`` and the spectra at the target, for one :func:`gtcontrol.stabilize` call.

``A`` is the solution of the equilibrium equation nearest to the layer's own (the noise's
``GGᵀ`` included), ``b`` makes ``m*`` the mean's equilibrium; a spectrum is ``FAILED`` when
the target is not an equilibrium of the layer to the design's rounding
(:attr:`~._plan.Plan.residual_bound`).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..._linalg import FloatArray
from ..._status import Budget, Status
from ..._validation import frozen
from ...analysis._subspace import reduced_layer
from ...analysis.stability import LinearizationSpectrum, shifted_spectrum, spectrum_on_basis
from ...model.field import affine_velocity
from ...model.params import Layer
from .._design_kernel import designed_a, residual_parts
from ._plan import ROUNDING, Plan

__all__ = ["design_ffn", "fix_bias", "residual", "shifted", "spectrum", "start_vector"]


def design_ffn(plan: Plan, layer: Layer) -> Layer:
    """``layer`` with ``A`` (nearest solution of the equilibrium equation, the noise's
    ``GGᵀ`` included) and ``b`` set."""
    red = reduced_layer(layer, plan.basis)
    a_r = designed_a(red, plan.s_act, plan.a_old_r, plan.forcing)
    # A outside the active block kept, that block replaced: A − PAP is exactly zero on a
    # coordinate subspace (A + P(A_r − A_old)P lost eps·|A_old| beside a small A_r)
    old = plan.layer.A
    a_full = old - plan.proj @ old @ plan.proj + plan.basis @ a_r @ plan.basis.T
    lay = layer.replace(A=a_full, b=plan.layer.b)
    return fix_bias(plan, lay)


def fix_bias(plan: Plan, layer: Layer) -> Layer:
    """``layer`` with the ``b`` that makes ``m*`` its mean's equilibrium: ``−P`` times the
    velocity of ``m*`` without a bias (the frozen part of ``b`` kept). Not ``b − P·v``:
    beside a large ``b`` that lost a small ``Mm*`` (a target mean of ``1e-59``) entirely."""
    unbiased = layer.replace(b=np.zeros_like(layer.b))
    m_mat, c = affine_velocity(unbiased, plan.target.mean, plan.target.cov)
    v = m_mat @ plan.target.mean + c
    return unbiased.replace(b=(layer.b - plan.proj @ layer.b) - plan.proj @ v)


def residual(plan: Plan, layer: Layer) -> tuple[float, float]:
    """The relative residuals ``(covariance, mean)`` of the target under a designed
    ``layer``, head by head (:func:`~gtcontrol.control._design_kernel.residual_parts`)."""
    return residual_parts(layer, plan.target.mean, plan.target.cov)


def _at_target(
    plan: Plan, layer: Layer
) -> tuple[tuple[float, float], LinearizationSpectrum | None]:
    """The target's residuals under ``layer`` (:func:`residual`) and, when the target is not
    an equilibrium of the layer to the design's rounding (:attr:`~._plan.Plan.residual_bound`),
    a ``FAILED`` spectrum that says so (``None`` when it is)."""
    res = residual(plan, layer)
    return res, _off_equilibrium(plan, res)


def _off_equilibrium(plan: Plan, residual: tuple[float, float]) -> LinearizationSpectrum | None:
    """A ``FAILED`` spectrum when ``residual`` is above the design's rounding bound, else
    ``None``."""
    if max(residual) <= plan.residual_bound:
        return None
    message = (
        f"the designed layer does not hold the target as an equilibrium to its rounding: "
        f"relative residuals {residual[0]:.3g} (covariance), {residual[1]:.3g} (mean), "
        f"above the design's rounding bound {plan.residual_bound:.3g} "
        f"({ROUNDING:g}·eps·(r + κ(Σ*)), r = {plan.basis.shape[1]})"
    )
    nan = math.nan
    return LinearizationSpectrum(
        abscissa=nan,
        cov_abscissa=nan,
        mean_abscissa=nan,
        eigenvalues=frozen(np.zeros(0, dtype=complex)),
        modes=frozen(np.zeros((0, plan.layer.dim, plan.layer.dim), dtype=complex)),
        mean_eigenvalues=frozen(np.zeros(0, dtype=complex)),
        numerical_abscissa=nan,
        residual=residual,
        active_dim=plan.basis.shape[1],
        method="none",
        status=Status.FAILED,
        message=message,
        stats={"matvecs": 0, "seconds": 0.0},
    )


def spectrum(
    plan: Plan,
    budget: Budget,
    layer: Layer,
    *,
    omega: bool,
    k: int = 6,
    v0: FloatArray | None = None,
) -> LinearizationSpectrum:
    """The linearization's spectrum of ``layer`` at the target (``FAILED`` when the target
    is not its equilibrium to the design's rounding)."""
    res, off = _at_target(plan, layer)
    if off is not None:
        return off
    return spectrum_on_basis(
        layer,
        plan.target,
        plan.basis,
        k,
        "auto",
        1e-10,
        omega,
        budget,
        res,
        time.perf_counter(),
        v0,
    )


def shifted(
    plan: Plan,
    budget: Budget,
    layer: Layer,
    base_layer: Layer,
    base: LinearizationSpectrum,
    shift: float,
) -> LinearizationSpectrum | None:
    """The spectrum of ``layer`` as ``base`` (of ``base_layer``) shifted by ``shift``
    (:func:`~gtcontrol.analysis.stability.shifted_spectrum`: the identity checked on random
    directions, the pairs' residuals on ``layer``), when ``base`` came from Krylov; ``None``
    otherwise (a dense base is cheap to recompute, and that stays wholly independent) or
    when the identity does not hold. At d = 385 a new Krylov run took 3–34 s a row."""
    if base.method != "krylov" or base.status is not Status.SUCCESS:
        return None
    res, off = _at_target(plan, layer)
    if off is not None:
        return off
    return shifted_spectrum(
        layer,
        base_layer,
        plan.target,
        plan.basis,
        base,
        shift,
        budget,
        res,
        time.perf_counter(),
        plan.seed,
    )


def start_vector(plan: Plan, spec: LinearizationSpectrum) -> FloatArray | None:
    """The rightmost mode of ``spec`` (real coordinates), plus a little seeded noise."""
    if spec.modes.shape[0] == 0 or plan.basis.shape[1] * (plan.basis.shape[1] + 1) // 2 <= 1500:
        return None
    h = plan.basis.T @ spec.modes[0] @ plan.basis
    r = h.shape[0]
    w = np.where(np.eye(r, dtype=bool), 1.0, np.sqrt(2.0))[np.triu_indices(r)]
    x = (np.real(h) + np.imag(h))[np.triu_indices(r)] * w
    x = x / max(float(np.linalg.norm(x)), 1e-300)
    noise = np.random.default_rng(plan.seed).standard_normal(x.size)
    out: FloatArray = x + 1e-3 * noise / np.linalg.norm(noise)
    return out
