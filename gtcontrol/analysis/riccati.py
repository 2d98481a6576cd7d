"""The Riccati/Bernoulli connection: exact covariance flows, blow-up times and equilibria.

When every attention head has ``V_h = v_h I`` the covariance equation of theory.md §2 becomes the
matrix Bernoulli (zero-constant Riccati) equation

    dΣ/dt = A Σ + Σ Aᵀ − Σ R Σ,        R = −Σ_h v_h (B_h + B_hᵀ)        (symmetric)

because ``V_h Σ B_h Σ + Σ B_hᵀ Σ V_hᵀ = v_h Σ (B_h + B_hᵀ) Σ``. This module exploits it:

* :func:`riccati_form` detects the structure and returns ``(A, R)``.
* :func:`riccati_flow` evaluates Σ(t) exactly, either by Radon's linearization ``Σ = X Y⁻¹`` with
  ``[X; Y](t) = expm(t H) [Σ0; I]``, ``H = [[A, 0], [R, −Aᵀ]]``, or through the linear Lyapunov
  ODE ``dΩ/dt = −AᵀΩ − ΩA + R`` of the precision ``Ω = Σ⁻¹``.
* :func:`blowup_analysis` / :func:`blowup_time` locate the first finite-time singularity exactly
  and certify that no earlier one exists (see below); for layers outside the class they fall back
  to the adaptive integrator of :func:`gtcontrol.moments.simulate`.
* :func:`solve_bernoulli` solves the algebraic equation ``AΣ + ΣAᵀ − ΣRΣ = 0`` for a
  positive-definite Σ* with slycot, either as the Lyapunov equation ``AᵀΩ + ΩA = R`` for
  ``Ω = Σ*⁻¹`` (SB03MD) or as a CARE with zero constant term and ``G = R`` (SB02MD).

Blow-up certificate. Write ``Σ0 = F Fᵀ`` with ``F`` of full column rank ``r = rank Σ0`` and
``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``. Then ``Y(t) = e^{−Aᵀt}(I + W(t) Σ0)`` and

    Σ(t) = e^{At} F G(t)⁻¹ Fᵀ e^{Aᵀt},        G(t) = I_r + Fᵀ W(t) F        (symmetric, G(0) = I),

so Σ blows up exactly when ``λ_min(G(t))`` first reaches 0 (this also covers singular Σ0, whose
rank is kept). The search marches in restarted coordinates (``F`` replaced by a factor of
``Σ(t)`` at each accepted point, so G starts at I and stays well scaled) with steps ``h`` that are
*proved* root-free by either of two bounds valid for ``s ∈ [0, h]``:

* Loewner: ``G(s) ⪰ I − Fᵀ W₋(h) F`` where ``W₋`` is the Gramian of the negative part of R;
* interpolation: ``λ_min G(s) ≥ min(1, λ_min G(h)) − ‖F‖² h²/8 ‖AᵀR + RA‖ e^{2 μ₊ h}``
  (λ_min is concave along the chord; ``μ₊`` = positive part of the logarithmic norm of A).

A point with ``λ_min G ≤ 0`` closes the bracket; the march then converges to the first root from
below, and the root is reported once the certified bracket is narrower than ``rtol`` relative.
Tail certificates prove that no blow-up ever happens: ``R ⪰ 0``; ``λ_max(Fᵀ W₋(∞) F) < 1``
(when that Gramian converges, e.g. A Hurwitz); and, when −A is Hurwitz and Σ(t) ≻ 0,
``κ(P) ‖Σ(t)⁻¹ − Ω*‖ < λ_min(Ω*)`` with ``AᵀP + PA = I`` and ``Ω*`` the Lyapunov solution.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026), §3–§4.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.optimize import brentq

from .._linalg import RANK_RTOL, FloatArray, identity_multiple, sym
from .._status import Status
from .._validation import as_float_array, as_positive_float, as_positive_int, frozen
from ..errors import InvalidGaussianError, InvalidParametersError, SolverError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.moments import simulate
from ..model.params import Layer

__all__ = [
    "BernoulliSolution",
    "BlowupOptions",
    "BlowupResult",
    "RiccatiForm",
    "blowup_analysis",
    "blowup_time",
    "default_horizon",
    "riccati_flow",
    "riccati_form",
    "solve_bernoulli",
]

#: Eigenvalues of R below this fraction of ``‖R‖`` are treated as zero in its sign split.
_SIGN_RTOL = 1e-14
#: Relative margin kept by every positivity certificate (guards against rounding).
_CERT_MARGIN = 1e-9
#: ``min |λ_i + λ_j|`` of A below this fraction of ``‖A‖`` makes the Lyapunov operator singular.
_SEP_RTOL = 1e-10


# ----------------------------------------------------------------------------- structure


@dataclass(frozen=True, eq=False)
class RiccatiForm:
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

    def inertia(self) -> tuple[int, int, int]:
        """Numbers of positive, zero and negative eigenvalues of R (zero: ``≤ 1e-14 ‖R‖``)."""
        w = np.linalg.eigvalsh(self.R)
        cut = _SIGN_RTOL * max(float(np.max(np.abs(w))), 0.0)
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
            "tools (simulate, gtcontrol.asymptotics.equilibria) for this layer"
        )
    if bernoulli and not form.is_bernoulli:
        raise InvalidParametersError(
            f"layer.noise: {what} needs a layer without Brownian forcing (Q = G Gᵀ = 0)"
        )
    return form


# ----------------------------------------------------------------------------- linear algebra


def _gramian(a: FloatArray, q: FloatArray, h: float) -> tuple[FloatArray, FloatArray]:
    """``(e^{Ah}, W(h))`` with ``W(h) = ∫₀ʰ e^{Aᵀs} Q e^{As} ds`` (Van Loan, then doubling).

    The block exponential ``expm([[−Aᵀ, Q], [0, A]] h0)`` gives ``e^{−Aᵀh0} W(h0)`` over a short
    step ``‖A‖₁ h0 ≤ 1/2`` (well conditioned); ``W(2s) = W(s) + e^{Aᵀs} W(s) e^{As}`` doubles it
    up to h without ever forming ``e^{−Aᵀh}``.
    """
    d = a.shape[0]
    if h <= 0.0:
        return np.eye(d), np.zeros((d, d))
    na = float(np.linalg.norm(a, 1))
    k = 0 if na * h <= 0.5 else math.ceil(math.log2(na * h / 0.5))
    h0 = h / 2.0**k
    c = np.zeros((2 * d, 2 * d))
    c[:d, :d] = -a.T * h0
    c[:d, d:] = q * h0
    c[d:, d:] = a * h0
    phi = sla.expm(c)
    e = phi[d:, d:]
    w = sym(e.T @ phi[:d, d:])
    for _ in range(k):
        w = sym(w + e.T @ w @ e)
        e = e @ e
    return e, w


def _krylov_basis(m: FloatArray, v0: FloatArray, rtol: float = 1e-10) -> FloatArray:
    """Orthonormal basis of the smallest ``M``-invariant subspace containing ``range(v0)``.

    Built by alternating ``V ← orth([V, M V])`` until the dimension stops growing; singular
    values below ``rtol`` times the largest count as zero (M is scaled to unit norm first, which
    leaves every invariant subspace unchanged).
    """
    d = m.shape[0]
    nm = float(np.linalg.norm(m, 2))
    ms = m / nm if nm > 0 else m
    v = _orth(v0, rtol)
    while v.shape[1] < d:
        w = _orth(np.hstack([v, ms @ v]), rtol)
        if w.shape[1] == v.shape[1]:
            break
        v = w
    return v


def _orth(x: FloatArray, rtol: float) -> FloatArray:
    if x.size == 0:
        return np.zeros((x.shape[0], 0))
    u, sv, _ = np.linalg.svd(x, full_matrices=False)
    if sv.size == 0 or sv[0] == 0:
        return np.zeros((x.shape[0], 0))
    return u[:, sv > rtol * sv[0]]


def _gramian_limit(a: FloatArray, q: FloatArray) -> FloatArray | None:
    """``W(∞) = ∫₀^∞ e^{Aᵀs} Q e^{As} ds`` for ``Q ⪰ 0``, or ``None`` if it diverges.

    ``W(t)`` lives on the observable subspace of ``(Q^{1/2}, A)``, the smallest Aᵀ-invariant
    subspace containing ``range Q`` (basis ``Q_o``); there ``A_o = Q_oᵀ A Q_o`` and the integral
    converges iff ``A_o`` is Hurwitz, to the solution of ``A_oᵀ X + X A_o = −Q_oᵀ Q Q_o``.
    """
    qo = _krylov_basis(a.T, q)
    if qo.shape[1] == 0:
        return np.zeros_like(q)
    ao = qo.T @ a @ qo
    if not np.all(np.linalg.eigvals(ao).real < 0):
        return None
    try:
        x, _, _ = _slycot_lyapunov(ao, -(qo.T @ q @ qo))
    except SolverError:
        return None
    return sym(qo @ x @ qo.T)


def _range_factor(cov: FloatArray) -> FloatArray:
    """``F`` (d×r, full column rank) with ``F Fᵀ = Σ`` on its numerical range."""
    w, u = np.linalg.eigh(sym(cov))
    top = float(w[-1]) if w.size else 0.0
    if top <= 0.0:
        return np.zeros((cov.shape[0], 0))
    keep = w > RANK_RTOL * top
    return u[:, keep] * np.sqrt(w[keep])


def _lmin(g: FloatArray) -> float:
    return float(np.linalg.eigvalsh(g)[0]) if g.size else 1.0


def _lmax(g: FloatArray) -> float:
    return float(np.linalg.eigvalsh(g)[-1]) if g.size else 0.0


def _schur_eigvals(t: FloatArray) -> np.ndarray:
    """Eigenvalues of a real quasi-triangular Schur form, in float64 (1×1 and 2×2 blocks)."""
    n = t.shape[0]
    out = np.empty(n, dtype=complex)
    i = 0
    while i < n:
        if i + 1 < n and t[i + 1, i] != 0.0:
            out[i : i + 2] = np.linalg.eigvals(t[i : i + 2, i : i + 2])
            i += 2
        else:
            out[i] = t[i, i]
            i += 1
    return out


def _lyapunov_sep(eig: np.ndarray) -> float:
    """``min_{i,j} |λ_i + λ_j|``: zero iff ``X ↦ AᵀX + XA`` is singular."""
    return float(np.min(np.abs(eig[:, None] + eig[None, :])))


def _slycot_lyapunov(a: FloatArray, c: FloatArray) -> tuple[FloatArray, np.ndarray, float]:
    """Solve ``AᵀX + XA = C`` with slycot SB03MD; return ``(X, eig(A), scale)``.

    Raises
    ------
    SolverError
        If SB03MD fails (``status="slycot"``) or A and −Aᵀ have (numerically) common eigenvalues
        (``status="singular_lyapunov"``).
    """
    import slycot
    from slycot.exceptions import SlycotError, SlycotResultWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", SlycotResultWarning)
        try:
            t_schur, _, x, scale, _, _, _ = slycot.sb03md57(
                np.asfortranarray(a.copy()),
                C=np.asfortranarray(sym(c).copy()),
                dico="C",
                job="X",
                fact="N",
                trana="N",
            )
        except SlycotResultWarning as exc:
            raise SolverError(
                f"Lyapunov solve (slycot SB03MD) for AᵀΩ + ΩA = R: A and -Aᵀ have common or "
                f"very close eigenvalues, so the solution is not unique ({exc})",
                status="singular_lyapunov",
            ) from None
        except (SlycotError, ValueError, ArithmeticError) as exc:
            # SB03MD reports A and −Aᵀ with (nearly) common eigenvalues as INFO = n+1.
            eig = np.linalg.eigvals(a)
            sep = _lyapunov_sep(eig)
            if sep <= 1e3 * _SEP_RTOL * max(float(np.linalg.norm(a, 1)), 1e-300):
                raise SolverError(
                    "Lyapunov solve (slycot SB03MD) for AᵀX + XA = C: A and -Aᵀ have common or "
                    f"very close eigenvalues (min |λ_i + λ_j| = {sep:.3g}), so the solution is "
                    f"not unique ({exc})",
                    status="singular_lyapunov",
                ) from None
            raise SolverError(
                f"Lyapunov solve (slycot SB03MD) failed: {exc}", status="slycot"
            ) from None
    if not (scale > 0 and np.all(np.isfinite(x))):
        raise SolverError(
            "Lyapunov solve (slycot SB03MD) returned a non-finite solution", status="slycot"
        )
    return sym(np.asarray(x) / scale), _schur_eigvals(np.asarray(t_schur)), float(scale)


# ----------------------------------------------------------------------------- exact flows


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
        a requested depth is at or past the blow-up time (computed by :func:`blowup_analysis`).
    InvalidGaussianError
        For ``method="lyapunov"`` with a singular Σ0.
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
        blow = blowup_analysis(layer, initial, horizon=t_max * (1 + 1e-9))
        if blow.time <= t_max:
            raise InvalidParametersError(
                f"times: depth {t_max:g} is at or past the blow-up time T* = {blow.time:.12g}"
            )
    a, r = form.A, form.R
    d = form.dim
    hn = float(np.linalg.norm(form.hamiltonian, 1))
    dt_max = math.inf if hn == 0 else 2.0 / hn
    order = np.argsort(t, kind="stable")
    out = np.empty((t.size, d, d))
    t_cur = 0.0
    state: FloatArray = g0.cov.copy() if method == "radon" else _inv_spd(g0.cov)
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
        out[idx] = state if method == "radon" else _inv_spd(state)
    return out


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
    _, w = _gramian(a, r, dt)
    e_inv = sla.expm(-dt * a)
    return sym(e_inv.T @ (omega + w) @ e_inv)


def _inv_spd(omega: FloatArray) -> FloatArray:
    try:
        c = sla.cho_factor(omega)
    except np.linalg.LinAlgError:
        raise SolverError(
            "the precision Ω(t) lost positive definiteness", status="blowup"
        ) from None
    return sym(sla.cho_solve(c, np.eye(omega.shape[0])))


# ----------------------------------------------------------------------------- blow-up


@dataclass(frozen=True, kw_only=True)
class BlowupOptions:
    """Options of :func:`blowup_analysis`.

    Attributes
    ----------
    horizon
        Search up to this depth; ``None`` picks ``200 / rate`` with
        ``rate = ‖A‖ + Σ_h ‖V_h‖‖B_h‖ ‖Σ0‖`` (a few hundred time constants). Beyond it the
        answer is ``inf`` with ``status="none_before_horizon"`` unless a tail certificate proves
        ``"never"``. When blow-up is known to be certain (see :func:`blowup_analysis`) the
        Riccati search ignores the horizon.
    rtol
        Relative width of the certified bracket around the first root (Riccati class).
    max_steps
        Cap on certified steps of the march.
    """

    horizon: float | None = None
    rtol: float = 1e-12
    max_steps: int = 100_000

    def __post_init__(self) -> None:
        if self.horizon is not None:
            as_positive_float("horizon", self.horizon)
        if not 0 < as_positive_float("rtol", self.rtol) < 1e-3:
            raise InvalidParametersError(f"rtol: expected a number in (0, 1e-3), got {self.rtol!r}")
        as_positive_int("max_steps", self.max_steps)


@dataclass(frozen=True, eq=False)
class BlowupResult:
    """Outcome of :func:`blowup_analysis`.

    Attributes
    ----------
    time
        First blow-up time T*, ``math.inf`` if none was found.
    lower, upper
        Certified bracket: no blow-up on ``[0, lower]``; Σ is already singular-or-past at
        ``upper`` (``upper = inf`` when there is no blow-up).
    status
        ``"blowup"``, ``"never"`` (proved: no blow-up at any depth) or ``"none_before_horizon"``.
    certified
        True when the statement is proved by the certificates (Riccati class); False for the
        adaptive integrator or a horizon-limited search.
    method
        ``"riccati"`` (certified march) or ``"integrator"``.
    message
        The certificate or reason, in words with the numbers.
    success
        Always True for a returned result (failures raise :class:`~gtcontrol.SolverError`).
    stats
        ``steps``, ``gramians`` (matrix exponentials), ``seconds``, ``horizon``.
    """

    time: float
    lower: float
    upper: float
    status: str
    certified: bool
    method: str
    message: str
    success: bool = True
    stats: Mapping[str, Any] = field(default_factory=dict)


def _rate(layer: Layer, cov: FloatArray) -> float:
    a, _ = layer.affine_ffn()
    s = float(np.linalg.norm(cov, 2))
    rate = float(np.linalg.norm(a, 2))
    for v_h, b_h in layer.heads:
        rate += 2.0 * float(np.linalg.norm(v_h, 2) * np.linalg.norm(b_h, 2)) * s
    return rate


def default_horizon(layer: Layer, initial: Gaussian) -> float:
    """``200 / rate``, ``rate = ‖A‖₂ + 2 Σ_h ‖V_h‖₂‖B_h‖₂ ‖Σ0‖₂`` (1 if the rate is 0)."""
    rate = _rate(layer, initial.cov)
    return 200.0 / rate if rate > 0 else 200.0


def blowup_analysis(
    layer: Layer,
    initial: Gaussian,
    *,
    horizon: float | None = None,
    rtol: float = BlowupOptions.rtol,
    max_steps: int = BlowupOptions.max_steps,
) -> BlowupResult:
    """First finite-time blow-up of the covariance, with a certificate.

    Riccati class (every ``V_h = v_h I``): the blow-up time is the first root of
    ``λ_min G(t)``, ``G(t) = I + Fᵀ W(t) F`` (module docstring), located to ``rtol`` relative
    inside a bracket whose left part is proved root-free. Special cases with closed forms
    (docs/theory.md §2–3): scalar ``T* = ln(1 + a/(cσ0))/(2a)``; ``A = 0``, ``R ≺ 0``:
    ``T* = 1/λ_max(Σ0^{1/2}(−R)Σ0^{1/2})``. Blow-up is certain (and searched without horizon)
    when ``−A`` is Hurwitz, Σ0 ≻ 0 and the Lyapunov solution of ``AᵀΩ + ΩA = R`` is indefinite,
    or when A is Hurwitz and ``I + Fᵀ W(∞) F`` is indefinite.

    Other layers (general V, or Brownian forcing): the adaptive integrator of
    :func:`gtcontrol.moments.simulate` (rtol 1e-11), which reports ``tr Σ / (d tr Σ/dt)``-
    extrapolated blow-up times; not certified.

    Parameters
    ----------
    layer, initial
        The layer and ``N(m0, Σ0)`` (Σ0 may be singular; the rank is preserved).
    horizon, rtol, max_steps
        See :class:`BlowupOptions`.

    Returns
    -------
    BlowupResult

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On malformed input.
    SolverError
        If the march cannot certify a step (a tangential, non-crossing singularity) or the
        integrator fails.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §3–§4.
    """
    opts = BlowupOptions(horizon=horizon, rtol=rtol, max_steps=max_steps)
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    g0 = check_gaussian(initial, layer.dim)
    form = riccati_form(layer)
    hz = opts.horizon if opts.horizon is not None else default_horizon(layer, g0)
    if form is None or not form.is_bernoulli:
        return _integrator_blowup(layer, g0, hz)
    return _riccati_blowup(form, g0, hz, opts)


def blowup_time(layer: Layer, initial: Gaussian, **options: Any) -> float:
    """First blow-up time of Σ(t), ``math.inf`` if none (see :func:`blowup_analysis`).

    Exact to ``rtol`` (1e-12 relative by default) in the Riccati class, from the adaptive
    integrator otherwise; ``inf`` also when nothing happens before the search horizon.
    """
    return blowup_analysis(layer, initial, **options).time


def _integrator_blowup(layer: Layer, g0: Gaussian, hz: float) -> BlowupResult:
    clock = time.perf_counter()

    def result(t_star: float, message: str, stats: dict[str, Any]) -> BlowupResult:
        return BlowupResult(
            time=t_star,
            lower=0.0,
            upper=math.inf,
            status="blowup" if math.isfinite(t_star) else "none_before_horizon",
            certified=False,
            method="integrator",
            message=message,
            stats={**stats, "horizon": hz, "seconds": time.perf_counter() - clock},
        )

    traj = simulate(layer, g0, hz, n_points=2)
    if traj.status is Status.OVERFLOW:
        return result(
            math.inf,
            f"adaptive integrator: {traj.message} (no finite-time singularity detected)",
            dict(traj.stats),
        )
    if traj.status is Status.BLOWUP:
        return result(
            traj.blowup_time,
            "outside the Riccati class: adaptive integrator (DOP853, rtol 1e-11) detected "
            f"blow-up at T* ≈ {traj.blowup_time:.12g}",
            dict(traj.stats),
        )
    return result(
        math.inf,
        f"outside the Riccati class: no blow-up before the horizon {hz:g} (integrator)",
        dict(traj.stats),
    )


def _sign_split(r: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(R₊, R₋)`` with ``R = R₊ − R₋``, both PSD; eigenvalues below 1e-14‖R‖ dropped."""
    w, u = np.linalg.eigh(r)
    cut = _SIGN_RTOL * float(np.max(np.abs(w))) if w.size else 0.0
    wp = np.where(w > cut, w, 0.0)
    wm = np.where(w < -cut, -w, 0.0)
    return sym((u * wp) @ u.T), sym((u * wm) @ u.T)


class _March:
    """State of the certified march: depth ``t`` and a factor ``F`` of Σ(t) (``Σ = F Fᵀ``)."""

    def __init__(self, form: RiccatiForm, f: FloatArray) -> None:
        self.a = form.A
        self.r = form.R
        self.rp, self.rm = _sign_split(form.R)
        self.nq = float(np.linalg.norm(form.A.T @ form.R + form.R @ form.A, 2))
        self.mu = max(float(np.linalg.eigvalsh(sym(form.A))[-1]), 0.0)
        self.f = f
        self.t = 0.0
        self.gramians = 0
        self.eye = np.eye(f.shape[1])

    def g(self, s: float) -> tuple[float, FloatArray, FloatArray]:
        """``(λ_min G(s), G(s), e^{As})`` in the current coordinates."""
        e, w = _gramian(self.a, self.r, s)
        self.gramians += 1
        gm = sym(self.eye + self.f.T @ w @ self.f)
        return _lmin(gm), gm, e

    def certified(self, s: float, gmin: float) -> bool:
        """Is ``[t, t+s]`` proved root-free (given ``λ_min G(s) = gmin > 0``)?"""
        nf2 = float(np.linalg.norm(self.f, 2)) ** 2
        bound = nf2 * s * s / 8.0 * self.nq * math.exp(min(2.0 * self.mu * s, 700.0))
        if min(1.0, gmin) - bound > _CERT_MARGIN:
            return True
        _, wm = _gramian(self.a, self.rm, s)
        self.gramians += 1
        return _lmax(self.f.T @ wm @ self.f) < 1.0 - _CERT_MARGIN

    def accept(self, s: float, gm: FloatArray, e: FloatArray) -> None:
        # Σ(t+s) = e^{As} F G(s)⁻¹ Fᵀ e^{Aᵀs} = F' F'ᵀ with F' = e^{As} F L⁻ᵀ, G = L Lᵀ.
        low = np.linalg.cholesky(gm)
        self.f = sla.solve_triangular(low, (e @ self.f).T, lower=True).T
        self.t += s


def _riccati_blowup(
    form: RiccatiForm, g0: Gaussian, hz: float, opts: BlowupOptions
) -> BlowupResult:
    clock = time.perf_counter()
    f0 = _range_factor(g0.cov)
    r_rank = f0.shape[1]
    march = _March(form, f0)

    def result(
        status: str,
        message: str,
        lower: float,
        upper: float = math.inf,
        *,
        t_star: float = math.inf,
        certified: bool = True,
        steps: int = 0,
    ) -> BlowupResult:
        stats = {
            "steps": steps,
            "gramians": march.gramians,
            "horizon": hz,
            "seconds": time.perf_counter() - clock,
        }
        return BlowupResult(
            time=t_star,
            lower=lower,
            upper=upper,
            status=status,
            certified=certified,
            method="riccati",
            message=message,
            stats=stats,
        )

    if r_rank == 0:
        return result("never", "Σ0 = 0 is invariant: no blow-up", math.inf)
    if not np.any(march.rm):
        return result(
            "never",
            "R ⪰ 0: G(t) = I + Fᵀ W(t) F ⪰ I never becomes singular (no blow-up at any depth)",
            math.inf,
        )
    rate = max(_rate_form(form, g0.cov), 1e-300)
    tails = _Tails(form, march, f0, rate)
    horizon = math.inf if tails.certain else hz

    h = 0.5 / rate
    t_up = math.inf
    for steps in range(1, opts.max_steps + 1):
        tail = tails.check(march)
        if tail:
            return result("never", tail, math.inf, steps=steps)
        bracketed = not math.isinf(t_up)
        if not bracketed:
            if march.t >= horizon:
                return result(
                    "none_before_horizon",
                    f"no blow-up on [0, {march.t:.6g}] (certified); the search stops at the "
                    "horizon without a certificate for later depths",
                    march.t,
                    certified=False,
                    steps=steps,
                )
            h_try = min(2.0 * h, horizon - march.t)
            ladder = [h_try * 0.5**k for k in range(60)]
        else:
            s_up = t_up - march.t
            if march.g(s_up)[0] > 0:
                # Rounding flipped the sign at the far end after a restart (the root is within
                # rounding of it): probe a few ulps further out for a point that is singular.
                for k in (1e-13, 1e-12, 1e-11, 1e-10):
                    if march.g(s_up + k * t_up)[0] <= 0:
                        t_up, s_up = t_up + k * t_up, s_up + k * t_up
                        break
                else:
                    t_up = math.inf  # lost: march on, the next steps re-find the bracket
                    continue
            if s_up <= opts.rtol * t_up:
                s_root = _root(march, s_up)
                return result(
                    "blowup",
                    f"first singularity of G(t) at T* = {march.t + s_root:.15g}: [0, "
                    f"{march.t:.15g}] is certified root-free and Σ is singular at or before "
                    f"{t_up:.15g}",
                    march.t,
                    t_up,
                    t_star=march.t + s_root,
                    steps=steps,
                )
            s_root = _root(march, s_up)
            probe = min(s_root * (1 + 1e-13), s_up)
            if march.g(probe)[0] <= 0:
                t_up = march.t + probe
            deltas = (1e-9, 1e-6, 1e-4, 1e-2, 0.1, 0.3, 0.6, 0.9)
            ladder = [s_root * (1 - dl) for dl in deltas]
            ladder += [s_root * 0.1 * 0.5**k for k in range(1, 50)]
        advanced = False
        t_up_before = t_up
        for s in ladder:
            gmin, gm, e = march.g(s)
            if gmin <= 0:
                t_up = min(t_up, march.t + s)
                if not bracketed:  # first bracket found: continue in bracket mode
                    break
                continue
            if march.certified(s, gmin):
                march.accept(s, gm, e)
                h = s
                advanced = True
                break
        if not advanced and (math.isinf(t_up) or (bracketed and t_up >= t_up_before)):
            raise SolverError(
                f"blow-up search could not certify any step at t = {march.t:.6g} "
                "(a tangential, non-crossing singularity of G(t)?)",
                status="uncertified",
                stats={"t": march.t, "steps": steps, "t_up": t_up},
            )
    raise SolverError(
        f"blow-up search exceeded max_steps = {opts.max_steps} at t = {march.t:.6g}",
        status="max_steps",
        stats={"t": march.t, "steps": opts.max_steps, "gramians": march.gramians},
    )


class _Tails:
    """Certificates that no blow-up happens after the current depth, and 'certain' verdicts."""

    def __init__(self, form: RiccatiForm, march: _March, f0: FloatArray, rate: float) -> None:
        d = form.dim
        r_rank = f0.shape[1]
        self.a_zero = not np.any(form.A)
        eig_a = np.linalg.eigvals(form.A)
        # Tail 1: G(t+s) ⪰ I − Fᵀ W₋(∞) F, when W₋(∞) converges (e.g. A Hurwitz).
        self.wm_inf = _gramian_limit(form.A, march.rm)
        # Tail 2 (−A Hurwitz, Σ0 ≻ 0): Ω(t+s) − Ω* = e^{−Aᵀs}(Ω(t) − Ω*)e^{−As}, and
        # ‖e^{−As}‖² ≤ κ(P) with AᵀP + PA = I.
        self.tail2: tuple[FloatArray, float, float] | None = None
        self.certain = ""
        if r_rank == d and np.all(eig_a.real > 0):
            try:
                omega, _, _ = _slycot_lyapunov(form.A, form.R)
                p, _, _ = _slycot_lyapunov(form.A, np.eye(d))
            except SolverError:
                omega = None
            if omega is not None:
                w_om = np.linalg.eigvalsh(omega)
                if w_om[0] > 0:
                    self.tail2 = (omega, float(w_om[0]), float(np.linalg.cond(p)))
                elif w_om[0] < -_CERT_MARGIN * max(abs(float(w_om[-1])), 1e-300):
                    self.certain = (
                        "−A is Hurwitz and the Lyapunov solution Ω* of AᵀΩ + ΩA = R has the "
                        f"negative eigenvalue {w_om[0]:.6g}: Ω(t) → Ω* must cross singularity"
                    )
        if np.all(eig_a.real < 0):
            # G(t) → G(∞) = I + Fᵀ W(∞) F with AᵀW(∞) + W(∞)A = −R.
            try:
                w_inf, _, _ = _slycot_lyapunov(form.A, -form.R)
            except SolverError:
                w_inf = None
            if w_inf is not None:
                g_inf = np.linalg.eigvalsh(sym(np.eye(r_rank) + f0.T @ w_inf @ f0))
                if g_inf[0] < -_CERT_MARGIN:
                    self.certain = (
                        "A is Hurwitz and G(∞) = I + Fᵀ W(∞) F has the negative eigenvalue "
                        f"{g_inf[0]:.6g}: G(t) → G(∞) must cross singularity"
                    )

    def check(self, march: _March) -> str:
        f = march.f
        if self.a_zero:
            n = f.T @ march.r @ f
            if _lmin(sym(n)) >= -_CERT_MARGIN * max(float(np.linalg.norm(n, 2)), 1e-300):
                return (
                    f"A = 0: G(t+s) = I + s FᵀRF with FᵀRF ⪰ 0 at t = {march.t:.6g}, never "
                    "singular (no blow-up at any depth)"
                )
        if self.wm_inf is not None and _lmax(f.T @ self.wm_inf @ f) < 1.0 - _CERT_MARGIN:
            return (
                f"tail certificate at t = {march.t:.6g}: λ_max(Fᵀ W₋(∞) F) < 1, so "
                "G(t+s) ⪰ I − Fᵀ W₋(∞) F ≻ 0 for all s ≥ 0 (no blow-up at any depth)"
            )
        if self.tail2 is not None:
            omega, lmin_om, kappa = self.tail2
            try:
                om_t = _inv_spd(f @ f.T)
            except SolverError:
                return ""
            gap = kappa * float(np.linalg.norm(om_t - omega, 2))
            if gap < lmin_om * (1.0 - _CERT_MARGIN):
                return (
                    f"tail certificate at t = {march.t:.6g}: −A is Hurwitz and "
                    f"κ(P)‖Σ(t)⁻¹ − Ω*‖ = {gap:.3g} < λ_min(Ω*) = {lmin_om:.3g} "
                    "(AᵀP + PA = I), so Ω(t+s) ≻ 0 for all s ≥ 0 (no blow-up at any depth)"
                )
        return ""


def _root(march: _March, s_up: float) -> float:
    def fn(s: float) -> float:
        return march.g(s)[0]

    return float(brentq(fn, 0.0, s_up, xtol=1e-300 + 1e-16 * s_up, rtol=1e-15, maxiter=200))


def _rate_form(form: RiccatiForm, cov: FloatArray) -> float:
    return float(np.linalg.norm(form.A, 2) + np.linalg.norm(form.R, 2) * np.linalg.norm(cov, 2))


# ----------------------------------------------------------------------------- equilibria


@dataclass(frozen=True, eq=False)
class BernoulliSolution:
    """Positive-definite solution of ``AΣ + ΣAᵀ − ΣRΣ = 0`` from one slycot solver.

    Attributes
    ----------
    cov
        Σ* (``None`` when there is no positive-definite solution or the problem is degenerate).
    omega
        The precision ``Ω* = Σ*⁻¹`` (Lyapunov method: the Lyapunov solution even when indefinite).
    status
        ``"ok"``, ``"none"`` (no positive-definite equilibrium), ``"degenerate"`` (the Lyapunov
        operator ``Ω ↦ AᵀΩ + ΩA`` is singular: A has eigenvalues with ``λ_i + λ_j = 0``, e.g. on
        the imaginary axis; equilibria are then not isolated or do not exist) or
        ``"not_applicable"`` (CARE route when neither A nor −A is Hurwitz).
    success
        True for ``"ok"`` and ``"none"`` (a definite answer).
    message
        What was found and why.
    method
        ``"lyapunov"`` (SB03MD) or ``"care"`` (SB02MD).
    eigvals_a
        Eigenvalues of A (from the Schur form the solver computed).
    stats
        ``seconds``, ``sep`` (``min |λ_i + λ_j|``), ``rcond`` (CARE), ``scale`` (Lyapunov).
    """

    cov: FloatArray | None
    omega: FloatArray | None
    status: str
    success: bool
    message: str
    method: str
    eigvals_a: np.ndarray
    stats: Mapping[str, Any] = field(default_factory=dict)


def solve_bernoulli(form: RiccatiForm, *, method: str = "lyapunov") -> BernoulliSolution:
    """Solve the algebraic Bernoulli equation ``AΣ + ΣAᵀ − ΣRΣ = 0`` for Σ* ≻ 0 with slycot.

    ``method="lyapunov"``: a positive-definite Σ solves it iff ``Ω = Σ⁻¹`` solves the Lyapunov
    equation ``AᵀΩ + ΩA = R`` (multiply by Ω on both sides). When the Lyapunov operator is
    non-singular (``λ_i + λ_j ≠ 0`` for all eigenvalues of A) the solution is unique, so there is
    exactly one positive-definite equilibrium if Ω ≻ 0 and none otherwise. Solved by SB03MD.

    ``method="care"``: SB02MD solves ``QₛAₛ``-form CAREs ``Aₛᵀ X + X Aₛ − X G X + Q = 0``;
    with ``Aₛ = Aᵀ``, ``G = R``, ``Q = 0`` this is the Bernoulli equation. Its invariant-subspace
    solution with ``Aᵀ − RΣ`` having the spectrum of ``−A`` is Σ*; SB02MD returns it with
    ``sort="S"`` when −A is Hurwitz and ``sort="U"`` when A is Hurwitz (otherwise the sorted
    subspace mixes and gives a different, singular equilibrium: ``"not_applicable"``).

    Returns
    -------
    BernoulliSolution

    Raises
    ------
    SolverError
        If slycot fails unexpectedly (the slycot message is included).

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    if not isinstance(form, RiccatiForm):
        raise InvalidParametersError(f"form: expected a RiccatiForm, got {type(form).__name__}")
    if not form.is_bernoulli:
        raise InvalidParametersError(
            "form.Q: the Bernoulli equation needs Q = G Gᵀ = 0 (a layer without noise); with "
            "noise it is the filter ARE (gtcontrol filtering) or use equilibria(method='newton')"
        )
    if method == "lyapunov":
        return _bernoulli_lyapunov(form)
    if method == "care":
        return _bernoulli_care(form)
    raise InvalidParametersError(f"method: expected 'lyapunov' or 'care', got {method!r}")


def _degenerate(
    form: RiccatiForm, eig: np.ndarray, method: str, sep: float, clock: float
) -> BernoulliSolution:
    bad = eig[np.argmin(np.min(np.abs(eig[:, None] + eig[None, :]), axis=1))]
    return BernoulliSolution(
        cov=None,
        omega=None,
        status="degenerate",
        success=False,
        message=(
            "the Lyapunov operator Ω ↦ AᵀΩ + ΩA is singular: A has eigenvalues with "
            f"λ_i + λ_j ≈ 0 (e.g. {bad:.6g}; min |λ_i + λ_j| = {sep:.3g}), such as eigenvalues "
            "on the imaginary axis; positive-definite equilibria are then not isolated or do "
            "not exist"
        ),
        method=method,
        eigvals_a=eig,
        stats={"sep": sep, "seconds": time.perf_counter() - clock},
    )


def _bernoulli_lyapunov(form: RiccatiForm) -> BernoulliSolution:
    clock = time.perf_counter()
    a, r = form.A, form.R
    na = float(np.linalg.norm(a, 1))
    try:
        omega, eig, scale = _slycot_lyapunov(a, r)
    except SolverError as exc:
        if exc.status != "singular_lyapunov":
            raise
        eig = np.linalg.eigvals(a)
        return _degenerate(form, eig, "lyapunov", _lyapunov_sep(eig), clock)
    sep = _lyapunov_sep(eig)
    if na == 0.0 or sep <= _SEP_RTOL * na:
        return _degenerate(form, eig, "lyapunov", sep, clock)
    stats: dict[str, Any] = {"sep": sep, "scale": scale}
    try:
        c = sla.cho_factor(omega)
    except np.linalg.LinAlgError:
        lo = float(np.linalg.eigvalsh(omega)[0])
        stats["seconds"] = time.perf_counter() - clock
        return BernoulliSolution(
            cov=None,
            omega=frozen(omega),
            status="none",
            success=True,
            message=(
                "no positive-definite equilibrium: the unique solution Ω of AᵀΩ + ΩA = R has "
                f"smallest eigenvalue {lo:.6g} ≤ 0"
            ),
            method="lyapunov",
            eigvals_a=eig,
            stats=stats,
        )
    cov = sym(sla.cho_solve(c, np.eye(form.dim)))
    stats["seconds"] = time.perf_counter() - clock
    return BernoulliSolution(
        cov=frozen(cov),
        omega=frozen(omega),
        status="ok",
        success=True,
        message="unique positive-definite equilibrium Σ* = Ω⁻¹, AᵀΩ + ΩA = R (slycot SB03MD)",
        method="lyapunov",
        eigvals_a=eig,
        stats=stats,
    )


def _bernoulli_care(form: RiccatiForm) -> BernoulliSolution:
    import slycot
    from slycot.exceptions import SlycotError

    clock = time.perf_counter()
    a, r = form.A, form.R
    d = form.dim
    eig = np.linalg.eigvals(a)
    sep = _lyapunov_sep(eig)
    na = float(np.linalg.norm(a, 1))
    if na == 0.0 or sep <= _SEP_RTOL * na:
        return _degenerate(form, eig, "care", sep, clock)
    if np.all(eig.real > 0):
        sort = "S"
    elif np.all(eig.real < 0):
        sort = "U"
    else:
        return BernoulliSolution(
            cov=None,
            omega=None,
            status="not_applicable",
            success=False,
            message=(
                "CARE route not applicable: A has eigenvalues on both sides of the imaginary "
                "axis, so neither the stabilizing nor the anti-stabilizing CARE solution is the "
                "positive-definite equilibrium"
            ),
            method="care",
            eigvals_a=eig,
            stats={"sep": sep, "seconds": time.perf_counter() - clock},
        )
    try:
        x, rcond, _, _, _, _ = slycot.sb02md(
            d,
            np.asfortranarray(a.T.copy()),
            np.asfortranarray(r.copy()),
            np.zeros((d, d), order="F"),
            "C",
            sort=sort,
        )
    except (SlycotError, ValueError, ArithmeticError) as exc:
        raise SolverError(
            f"CARE solve (slycot SB02MD, G = R, Q = 0) failed: {exc}", status="slycot"
        ) from None
    x = sym(np.asarray(x))
    stats = {"sep": sep, "rcond": float(rcond), "sort": sort}
    if not np.all(np.isfinite(x)):
        raise SolverError(
            "CARE solve (slycot SB02MD) returned a non-finite solution", status="slycot"
        )
    w = np.linalg.eigvalsh(x)
    stats["seconds"] = time.perf_counter() - clock
    if w[0] <= RANK_RTOL * max(w[-1], 0.0):
        return BernoulliSolution(
            cov=None,
            omega=None,
            status="none",
            success=True,
            message=(
                f"no positive-definite equilibrium: the {'anti-' if sort == 'U' else ''}"
                f"stabilizing CARE solution has smallest eigenvalue {w[0]:.6g}"
            ),
            method="care",
            eigvals_a=eig,
            stats=stats,
        )
    return BernoulliSolution(
        cov=frozen(x),
        omega=None,
        status="ok",
        success=True,
        message=(
            f"positive-definite equilibrium from the {'anti-' if sort == 'U' else ''}stabilizing "
            "CARE solution (slycot SB02MD, G = R, Q = 0)"
        ),
        method="care",
        eigvals_a=eig,
        stats=stats,
    )
