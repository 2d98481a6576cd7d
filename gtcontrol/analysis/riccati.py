"""The Riccati/Bernoulli structure of a layer and its exact covariance flows.

When every attention head has ``V_h = v_h I`` the covariance equation (docs/theory.md §2) becomes
the matrix Bernoulli (zero-constant Riccati) equation

    dΣ/dt = A Σ + Σ Aᵀ − Σ R Σ,        R = −Σ_h v_h (B_h + B_hᵀ)        (symmetric)

because ``V_h Σ B_h Σ + Σ B_hᵀ Σ V_hᵀ = v_h Σ (B_h + B_hᵀ) Σ``. This module exploits it:

* :func:`riccati_form` detects the structure and returns ``(A, R)`` (and ``Q = GGᵀ`` for a layer
  with Brownian forcing, the full Riccati equation of the Kalman–Bucy filter).
* :func:`riccati_flow` evaluates Σ(t) exactly, either by Radon's linearization ``Σ = X Y⁻¹`` with
  ``[X; Y](t) = expm(t H) [Σ0; I]``, ``H = [[A, Q], [R, −Aᵀ]]``, or through the linear Lyapunov
  ODE ``dΩ/dt = −AᵀΩ − ΩA + R`` of the precision ``Ω = Σ⁻¹``.

The certified blow-up search lives in :mod:`gtcontrol.analysis.blowup`, the algebraic equation
``AΣ + ΣAᵀ − ΣRΣ = 0`` in :mod:`gtcontrol.analysis.bernoulli`.

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._display import Axes, Displayable, SummaryItems
from .._linalg import FloatArray, identity_multiple, sym
from .._status import Budget, Status
from .._validation import as_float_array, frozen
from ..errors import InvalidGaussianError, InvalidParametersError, SolverError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.moments import simulate
from ..model.params import Layer
from ._core import SIGN_RTOL, gramian, inv_spd
from ._march import march_blowup

__all__ = ["RiccatiForm", "riccati_flow", "riccati_form"]


@dataclass(frozen=True, eq=False)
class RiccatiForm(Displayable):
    """Riccati data of a layer whose heads all have ``V_h = v_h I``.

    Attributes
    ----------
    A
        The effective feed-forward matrix (including an identity-activation ``ffn``).
    R
        ``−Σ_h v_h (B_h + B_hᵀ)``, symmetric; the covariance obeys
        ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``.
    v
        The scalars ``v_h``, one per head.
    Q
        ``G Gᵀ`` for a layer with Brownian forcing ``G`` (zero otherwise): the equation is then
        the full Riccati equation ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ + Q`` (Kalman–Bucy, docs/theory.md §6).
    """

    A: FloatArray
    R: FloatArray
    v: tuple[float, ...]
    Q: FloatArray

    @property
    def dim(self) -> int:
        return int(self.A.shape[0])

    @property
    def is_bernoulli(self) -> bool:
        """True when ``Q = 0`` (no noise): the zero-constant (matrix Bernoulli) case."""
        return not np.any(self.Q)

    @property
    def hamiltonian(self) -> FloatArray:
        """``H = [[A, Q], [R, −Aᵀ]]``: ``[X; Y]' = H [X; Y]`` linearizes the Riccati flow."""
        d = self.dim
        h = np.zeros((2 * d, 2 * d))
        h[:d, :d] = self.A
        h[:d, d:] = self.Q
        h[d:, :d] = self.R
        h[d:, d:] = -self.A.T
        return h

    def _summary_items(self) -> SummaryItems:
        return [
            ("dim", self.dim),
            ("heads", len(self.v)),
            ("bernoulli", self.is_bernoulli),
            ("inertia_R", self.inertia()),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        eig = np.linalg.eigvals(self.hamiltonian)
        draw_spectrum(ax, eig, label="H", title="eigenvalues of the Hamiltonian")

    def inertia(self) -> tuple[int, int, int]:
        """Numbers of positive, zero and negative eigenvalues of R (zero: ``≤ 1e-14 ‖R‖``)."""
        w = np.linalg.eigvalsh(self.R)
        cut = SIGN_RTOL * max(float(np.max(np.abs(w))), 0.0)
        return int(np.sum(w > cut)), int(np.sum(np.abs(w) <= cut)), int(np.sum(w < -cut))


def riccati_form(layer: Layer) -> RiccatiForm | None:
    """Detect the Riccati class and return its data ``(A, R)``, or ``None`` outside it.

    If every head has ``V_h = v_h I`` then ``V_h Σ B_h Σ + Σ B_hᵀ Σ V_hᵀ = −Σ R_h Σ`` with
    ``R_h = −v_h (B_h + B_hᵀ)``, so the covariance equation is the matrix Bernoulli equation

        dΣ/dt = A Σ + Σ Aᵀ − Σ R Σ,        R = −Σ_h v_h (B_h + B_hᵀ).

    Only the symmetric part of ``B_h`` enters the covariance (the mean still sees all of it).
    A layer without heads is in the class with ``R = 0``. A layer with Brownian forcing ``G``
    adds the constant term ``Q = G Gᵀ`` (a full Riccati equation); the Bernoulli tools of this
    module (blow-up certificates, :func:`solve_bernoulli`) need ``Q = 0``.

    Parameters
    ----------
    layer
        The layer; an identity-activation feed-forward is folded into A.

    Returns
    -------
    RiccatiForm or None
        ``None`` when some ``V_h`` differs from ``v_h I`` by more than ``1e-12 |v_h|`` entrywise.

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward (outside the moment model).

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    a, _ = layer.affine_ffn()
    d = layer.dim
    r = np.zeros((d, d))
    vs: list[float] = []
    for v_h, b_h in layer.heads:
        vh = identity_multiple(v_h)
        if vh is None:
            return None
        r -= vh * (b_h + b_h.T)
        vs.append(vh)
    g = layer.noise
    q = np.zeros((d, d)) if g is None else sym(g @ g.T)
    return RiccatiForm(A=frozen(a.copy()), R=frozen(sym(r)), v=tuple(vs), Q=frozen(q))


def _require_form(layer: Layer, what: str, *, bernoulli: bool = False) -> RiccatiForm:
    form = riccati_form(layer)
    if form is None:
        raise InvalidParametersError(
            f"layer: {what} needs the Riccati class (every head V_h = v_h I); use the general "
            "tools (simulate, gtcontrol.equilibria) for this layer"
        )
    if bernoulli and not form.is_bernoulli:
        raise InvalidParametersError(
            f"layer.noise: {what} needs a layer without Brownian forcing (Q = G Gᵀ = 0)"
        )
    return form


def _bernoulli_form(layer: Layer) -> RiccatiForm | None:
    """The Riccati data when the layer is in the noise-free (Bernoulli) class, else ``None``."""
    form = riccati_form(layer)
    return form if form is not None and form.is_bernoulli else None


def _check_times(times: Any) -> FloatArray:
    t = as_float_array("times", np.atleast_1d(np.asarray(times, dtype=float)), ndim=1)
    if np.any(t < 0):
        raise InvalidParametersError(f"times: expected non-negative depths, got min {t.min():g}")
    return t


def riccati_flow(
    layer: Layer, initial: Gaussian, times: Any, *, method: str = "radon"
) -> FloatArray:
    """Exact covariance ``Σ(t)`` of a Riccati-class layer at the given depths.

    ``method="radon"``: ``[X; Y](t) = expm(t H) [Σ0; I]`` with ``H = [[A, Q], [R, −Aᵀ]]`` and
    ``Σ = X Y⁻¹`` (any rank of Σ0; ``Q = G Gᵀ`` for a noisy layer, else 0).
    ``method="lyapunov"`` (Σ0 ≻ 0, no noise): the precision solves the
    linear ODE ``dΩ/dt = −AᵀΩ − ΩA + R``, i.e. ``Ω(t) = e^{−Aᵀt}(Ω0 + W(t)) e^{−At}`` with
    ``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``; then ``Σ = Ω⁻¹``. Both advance from one requested depth
    to the next in sub-steps with ``‖H‖₁ Δ ≤ 2``, which keeps the exponentials well conditioned.

    Parameters
    ----------
    layer
        A Riccati-class layer (see :func:`riccati_form`).
    initial
        ``N(m0, Σ0)``; only Σ0 matters.
    times
        Depths ``≥ 0`` (any order), scalar or 1-d.
    method
        ``"radon"`` or ``"lyapunov"``.

    Returns
    -------
    ndarray
        ``(n, d, d)`` covariances in the order of ``times``.

    Raises
    ------
    InvalidParametersError
        Outside the Riccati class, for an unknown method (or ``"lyapunov"`` with noise), or if
        a requested depth is at or past the blow-up time (the certified search of
        :func:`gtcontrol.blowup_analysis`, or the integrator for a noisy layer).
    InvalidGaussianError
        For ``method="lyapunov"`` with a singular Σ0.
    SolverError
        In the rare case that the blow-up search can neither certify nor refute a singularity
        before the last depth (a tangential singularity of the Radon factor ``Y(t)``).
    """
    form = _require_form(layer, "riccati_flow")
    g0 = check_gaussian(initial, form.dim)
    t = _check_times(times)
    if method not in ("radon", "lyapunov"):
        raise InvalidParametersError(f"method: expected 'radon' or 'lyapunov', got {method!r}")
    if method == "lyapunov":
        _require_form(layer, "method='lyapunov'", bernoulli=True)
    if method == "lyapunov" and g0.rank < g0.dim:
        raise InvalidGaussianError(
            f"initial.cov: method='lyapunov' needs a non-singular Σ0 (rank {g0.rank} < {g0.dim});"
            " use method='radon'"
        )
    t_max = float(t.max()) if t.size else 0.0
    if t_max > 0:
        t_star = _first_blowup(layer, form, g0, t_max * (1 + 1e-9))
        if t_star <= t_max:
            raise InvalidParametersError(
                f"times: depth {t_max:g} is at or past the blow-up time T* = {t_star:.12g}"
            )
    a, r = form.A, form.R
    d = form.dim
    hn = float(np.linalg.norm(form.hamiltonian, 1))
    dt_max = math.inf if hn == 0 else 2.0 / hn
    order = np.argsort(t, kind="stable")
    out = np.empty((t.size, d, d))
    t_cur = 0.0
    state: FloatArray = g0.cov.copy() if method == "radon" else inv_spd(g0.cov)
    for idx in order:
        target = float(t[idx])
        while t_cur < target:
            dt = min(target - t_cur, dt_max)
            state = (
                _radon_step(form, state, dt)
                if method == "radon"
                else _precision_step(a, r, state, dt)
            )
            t_cur = t_cur + dt if dt < target - t_cur else target
        out[idx] = state if method == "radon" else inv_spd(state)
    return out


def _first_blowup(layer: Layer, form: RiccatiForm, g0: Gaussian, horizon: float) -> float:
    """First blow-up time up to ``horizon`` (``inf`` if none): certified march or integrator."""
    if not form.is_bernoulli:
        return simulate(layer, g0, horizon, n_points=2).blowup_time
    out = march_blowup(
        form.A, form.R, g0.cov, horizon, rtol=1e-12, max_steps=100_000, budget=Budget(None)
    )
    if out.status in (Status.FAILED, Status.BUDGET_EXHAUSTED):
        raise SolverError(f"riccati_flow: {out.message}", status=str(out.status))
    return out.t_star


def _radon_step(form: RiccatiForm, cov: FloatArray, dt: float) -> FloatArray:
    d = form.dim
    phi = sla.expm(dt * form.hamiltonian)
    x = phi[:d, :d] @ cov + phi[:d, d:]
    y = phi[d:, :d] @ cov + phi[d:, d:]
    try:
        s = np.linalg.solve(y.T, x.T).T
    except np.linalg.LinAlgError:
        raise SolverError(
            "Radon linearization: Y(t) is singular (blow-up)", status="blowup"
        ) from None
    return sym(s)


def _precision_step(a: FloatArray, r: FloatArray, omega: FloatArray, dt: float) -> FloatArray:
    _, w = gramian(a, r, dt)
    e_inv = sla.expm(-dt * a)
    return sym(e_inv.T @ (omega + w) @ e_inv)
