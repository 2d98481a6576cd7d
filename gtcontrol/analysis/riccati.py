"""The Riccati/Bernoulli structure of a layer and its exact covariance flows.

When every attention head has ``V_h = v_h I`` the covariance equation (docs/theory.md §2) becomes
the matrix Bernoulli (zero-constant Riccati) equation

    dΣ/dt = A Σ + Σ Aᵀ − Σ R Σ,        R = −Σ_h v_h (B_h + B_hᵀ)        (symmetric)

because ``V_h Σ B_h Σ + Σ B_hᵀ Σ V_hᵀ = v_h Σ (B_h + B_hᵀ) Σ``. This module exploits it:

* :func:`is_riccati` detects the structure and :func:`riccati_form` returns its ``(A, R)`` (and
  ``Q = GGᵀ`` for a layer with Brownian forcing, the full Riccati equation of the Kalman–Bucy
  filter).
* :func:`riccati_flow` evaluates Σ(t) exactly, either by Radon's linearization ``Σ = X Y⁻¹`` with
  ``[X; Y](t) = expm(t H) [Σ0; I]``, ``H = [[A, Q], [R, −Aᵀ]]``, or through the linear Lyapunov
  ODE ``dΩ/dt = −AᵀΩ − ΩA + R`` of the precision ``Ω = Σ⁻¹``.

The certified blow-up search lives in :mod:`gtcontrol.analysis.blowup`, the algebraic equation
``AΣ + ΣAᵀ − ΣRΣ = 0`` in :mod:`gtcontrol.analysis.bernoulli`.

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._display import Axes, Displayable, SummaryItems
from .._linalg import FloatArray, identity_multiple, sym
from .._status import Budget, BudgetExhausted, OutcomeOrBlowup, ResultFields, Status, as_time_limit
from .._validation import as_depths, frozen
from ..errors import InvalidGaussianError, InvalidParametersError, SolverError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.params import Layer
from ._core import (
    EXACT_MAX_DIM,
    SIGN_RTOL,
    exact_definiteness,
    gramian,
    inv_spd,
    simulate_within,
)
from ._march import DEFAULT_MAX_STEPS, DEFAULT_RTOL, UNIT_ROUNDOFF, ModelError, march_blowup

__all__ = [
    "CovarianceFlow",
    "RiccatiForm",
    "is_riccati",
    "model_error",
    "riccati_flow",
    "riccati_form",
    "riccati_form_or_none",
]


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


def riccati_form(layer: Layer) -> RiccatiForm:
    """The Riccati data ``(A, R)`` of a layer whose heads all have ``V_h = v_h I``.

    If every head has ``V_h = v_h I`` then ``V_h Σ B_h Σ + Σ B_hᵀ Σ V_hᵀ = −Σ R_h Σ`` with
    ``R_h = −v_h (B_h + B_hᵀ)``, so the covariance equation is the matrix Bernoulli equation

        dΣ/dt = A Σ + Σ Aᵀ − Σ R Σ,        R = −Σ_h v_h (B_h + B_hᵀ).

    Only the symmetric part of ``B_h`` enters the covariance (the mean still sees all of it).
    A layer without heads is in the class with ``R = 0``. A layer with Brownian forcing ``G``
    adds the constant term ``Q = G Gᵀ`` (a full Riccati equation); the Bernoulli tools of this
    module (blow-up certificates, :func:`solve_bernoulli`) need ``Q = 0``. :func:`is_riccati`
    says whether a layer is in the class.

    Parameters
    ----------
    layer
        A layer of the Riccati class; an identity-activation feed-forward is folded into A.

    Returns
    -------
    RiccatiForm
        ``A``, ``R``, the scalars ``v_h`` and ``Q``.

    Raises
    ------
    InvalidParametersError
        If the layer is not in the class (some ``V_h`` differs from ``v_h I`` by more than
        ``1e-12 |v_h|`` entrywise: the message names the head), or has a ReLU/GELU
        feed-forward (outside the moment model).

    Examples
    --------
    >>> from gtcontrol import Layer, is_riccati, riccati_form
    >>> form = riccati_form(Layer(B=[[1.0, 0.0], [0.0, 2.0]], V=-0.5))  # R = −v(B + Bᵀ)
    >>> form.R
    array([[1., 0.],
           [0., 2.]])
    >>> is_riccati(Layer(B=[[1.0, 0.0], [0.0, 2.0]], V=[[1.0, 0.0], [0.0, 2.0]]))
    False

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    form = _form_or_reason(layer)
    if isinstance(form, str):
        raise InvalidParametersError(
            f"layer: expected a layer of the Riccati class (every head V_h = v_h I); {form}. "
            "is_riccati(layer) says whether a layer is; simulate, equilibria and analyze take "
            "any layer"
        )
    return form


def is_riccati(layer: Layer) -> bool:
    """Whether every head of ``layer`` has ``V_h = v_h I`` (the Riccati class).

    Then :func:`riccati_form` gives the layer's ``(A, R)`` and the covariance obeys a matrix
    Riccati (Bernoulli, without noise) equation, for which :func:`blowup_analysis`,
    :func:`equilibria` and :func:`analyze` have exact certificates.

    Parameters
    ----------
    layer
        The layer.

    Returns
    -------
    bool
        True when every ``V_h`` is ``v_h I`` to ``1e-12 |v_h|`` entrywise (a layer without
        heads is in the class).

    Raises
    ------
    InvalidParametersError
        If ``layer`` is not a :class:`Layer`, or has a ReLU/GELU feed-forward.

    Examples
    --------
    >>> from gtcontrol import Layer, is_riccati
    >>> is_riccati(Layer(B=[[1.0, 0.0], [0.0, 2.0]], V=-0.5)), is_riccati(Layer(A=[[1.0]]))
    (True, True)
    >>> is_riccati(Layer(B=[[1.0, 0.0], [0.0, 2.0]], V=[[1.0, 0.0], [0.0, 2.0]]))
    False
    """
    return not isinstance(_form_or_reason(layer), str)


def riccati_form_or_none(layer: Layer) -> RiccatiForm | None:
    """The layer's :class:`RiccatiForm` when it is in the Riccati class, else ``None``: for
    the solvers that take the exact route in the class and a general one outside it."""
    form = _form_or_reason(layer)
    return None if isinstance(form, str) else form


def _form_or_reason(layer: Layer) -> RiccatiForm | str:
    """The Riccati data, or why the layer is outside the class (the first head that is not)."""
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    a, _ = layer.affine_ffn()
    d = layer.dim
    fh = layer.factored_heads
    if (
        fh is not None
        and fh.head_dim < d
        and all(np.any(o_h) and np.any(v_h) for o_h, v_h in zip(fh.o, fh.v, strict=True))
    ):
        # a factored head's V_h = W_O,h W_V,h has rank ≤ d_head < d, so it is v_h I only when
        # zero (then a factor is zero, up to products that cancel exactly): not in the class
        return (
            f"its factored heads have V_h = W_O,h W_V,h of rank at most d_head = {fh.head_dim} "
            f"< d = {d}, and none is zero"
        )
    r = np.zeros((d, d))
    vs: list[float] = []
    for h, (v_h, b_h) in enumerate(layer.heads):
        vh = identity_multiple(v_h)
        if vh is None:
            v_mean = float(np.trace(v_h)) / d
            dev = float(np.max(np.abs(v_h - v_mean * np.eye(d))))
            return (
                f"head {h} has V_h − (tr V_h / d) I of largest entry {dev:.3g} "
                f"(tr V_h / d = {v_mean:.6g})"
            )
        r -= vh * (b_h + b_h.T)
        vs.append(vh)
    g = layer.noise
    q = np.zeros((d, d)) if g is None else sym(g @ g.T)
    return RiccatiForm(A=frozen(a.copy()), R=frozen(sym(r)), v=tuple(vs), Q=frozen(q))


def model_error(layer: Layer, form: RiccatiForm) -> ModelError:
    """How far ``form``'s A and R may be from the layer's own float numbers.

    ``R = −Σ_h v_h(B_h + B_hᵀ)`` is formed in floating point, ``v_h`` is read off ``V_h``
    (exactly when ``V_h`` is exactly ``v_h I``; otherwise the deviation, within the class's
    tolerance, is a model error of its own), and an identity-activation feed-forward folded
    into A is a rounded product. The certified blow-up march adds these to its rounding bounds.
    """
    d = layer.dim
    u = UNIT_ROUNDOFF
    heads = layer.heads
    r_err = 2.0 * (len(heads) + 2) * u * float(np.linalg.norm(form.R, 2))
    v_dev = 0.0
    for (v_h, b_h), v_used in zip(heads, form.v, strict=True):
        nb = float(np.linalg.norm(b_h + b_h.T, 2))
        diag = np.diag(v_h)
        exact = not np.any(v_h - np.diag(diag)) and bool(np.all(diag == diag[0]))
        if exact:
            r_err += (abs(float(diag[0]) - v_used) + 4.0 * u * abs(v_used)) * nb
        else:
            v_dev += (
                2.0
                * float(np.linalg.norm(v_h - v_used * np.eye(d), 2))
                * float(np.linalg.norm(b_h, 2))
            )
            r_err += 4.0 * u * abs(v_used) * nb
    a_err = 0.0
    if layer.ffn is not None:
        w, uu = layer.ffn.W_out, layer.ffn.W_in
        a_err = (
            2.0
            * (uu.shape[0] + 2)
            * u
            * (
                float(np.linalg.norm(layer.A, 2))
                + float(np.linalg.norm(w, 2)) * float(np.linalg.norm(uu, 2))
            )
        )
    r_sign = ""
    if v_dev == 0.0 and d <= EXACT_MAX_DIM:
        r_q = [[Fraction(0)] * d for _ in range(d)]
        for v_h, b_h in heads:
            v_q = Fraction(float(v_h[0, 0]))
            for i in range(d):
                for j in range(d):
                    r_q[i][j] -= v_q * (Fraction(float(b_h[i, j])) + Fraction(float(b_h[j, i])))
        r_sign = exact_definiteness(r_q)
    return ModelError(a=a_err, r=r_err, v=v_dev, r_sign=r_sign)


def _require_form(layer: Layer, what: str, *, bernoulli: bool = False) -> RiccatiForm:
    form = _form_or_reason(layer)
    if isinstance(form, str):
        raise InvalidParametersError(
            f"layer: {what} needs the Riccati class (every head V_h = v_h I), and {form}; use "
            "the general tools (simulate, gtcontrol.equilibria) for this layer"
        )
    if bernoulli and not form.is_bernoulli:
        raise InvalidParametersError(
            f"layer.noise: {what} needs a layer without Brownian forcing (Q = G Gᵀ = 0)"
        )
    return form


def bernoulli_form(layer: Layer) -> RiccatiForm | None:
    """The Riccati data when the layer is in the noise-free (Bernoulli) class, else ``None``."""
    form = riccati_form_or_none(layer)
    return form if form is not None and form.is_bernoulli else None


def _check_times(times: Any) -> FloatArray:
    t = as_depths("times", times)
    if np.any(t < 0):
        raise InvalidParametersError(f"times: expected non-negative depths, got min {t.min():g}")
    return t


@dataclass(frozen=True, eq=False)
class CovarianceFlow(ResultFields, OutcomeOrBlowup):
    """Covariances at requested depths: the result of :func:`riccati_flow` and
    :func:`gtcontrol.kalman_covariance`.

    Attributes
    ----------
    t
        The requested depths ``(n,)``, in the order given.
    cov
        ``(n, d, d)`` covariances at ``t``; NaN at a depth that was not computed (at or past
        ``blowup_time``, or not reached when the budget ran out or the method failed).
    blowup_time
        ``T*`` when the covariance blows up at or before the last requested depth, else
        ``math.inf``.
    status
        ``Status.SUCCESS`` (every depth computed), ``Status.BLOWUP`` (the depths before
        ``blowup_time`` computed; a blow-up is an answer, so ``success`` is true),
        ``Status.BUDGET_EXHAUSTED`` (``time_limit`` or a step cap ran out) or ``Status.FAILED``
        (the method failed; ``message`` says how).
    message
        How the computation ended, with the numbers.
    stats
        ``method``, ``computed`` (how many depths hold a covariance) and ``seconds``.
    """

    t: FloatArray
    cov: FloatArray
    blowup_time: float = math.inf

    def _summary_items(self) -> SummaryItems:
        return [
            ("dim", self.cov.shape[-1]),
            ("n", self.t.size),
            ("computed", int(np.sum(np.isfinite(self.cov[:, 0, 0])))),
            ("blowup_time", self.blowup_time),
        ]

    def _draw(self, ax: Axes) -> None:
        from ..model._figures import draw_covariance

        keep = np.isfinite(self.cov[:, 0, 0])
        order = np.argsort(self.t[keep], kind="stable")
        draw_covariance(
            ax, self.t[keep][order], self.cov[keep][order], blowup_time=self.blowup_time
        )


def riccati_flow(
    layer: Layer,
    initial: Gaussian,
    times: Any,
    *,
    method: str = "radon",
    time_limit: float | None = None,
) -> CovarianceFlow:
    """Exact covariance ``Σ(t)`` of a Riccati-class layer at the given depths.

    ``method="radon"``: ``[X; Y](t) = expm(t H) [Σ0; I]`` with ``H = [[A, Q], [R, −Aᵀ]]`` and
    ``Σ = X Y⁻¹`` (any rank of Σ0; ``Q = G Gᵀ`` for a noisy layer, else 0).
    ``method="lyapunov"`` (Σ0 ≻ 0, no noise): the precision solves the
    linear ODE ``dΩ/dt = −AᵀΩ − ΩA + R``, i.e. ``Ω(t) = e^{−Aᵀt}(Ω0 + W(t)) e^{−At}`` with
    ``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``; then ``Σ = Ω⁻¹``. Both advance from one requested depth
    to the next in sub-steps with ``‖H‖₁ Δ ≤ 2``, which keeps the exponentials well conditioned.
    The first blow-up time up to the last depth is found first (the certified march of
    :func:`gtcontrol.blowup_analysis`, or the integrator for a noisy layer); depths at or past
    it are not computed.

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
    time_limit
        Wall-clock limit in seconds (``None``: none) of the blow-up search and the steps;
        running out returns the depths computed so far with ``Status.BUDGET_EXHAUSTED``. The
        certified blow-up march is also capped at 100,000 steps.

    Returns
    -------
    CovarianceFlow
        ``Status.BLOWUP`` (with ``blowup_time``) when a requested depth is at or past the
        blow-up, never an exception.

    Raises
    ------
    InvalidParametersError
        Outside the Riccati class, for an unknown method (or ``"lyapunov"`` with noise), or
        for a negative depth.
    InvalidGaussianError
        For ``method="lyapunov"`` with a singular Σ0.

    Examples
    --------
    Scalar ``dσ/dt = 2aσ + 2cσ²`` with ``a = 1``, ``c = vB = 0.5``: ``ω = 1/σ`` solves
    ``ω(t) = (ω0 + c/a) e^{−2at} − c/a`` (docs/theory.md §2), and ``σ0 = 1`` blows up at
    ``T* = ln(1 + a/(cσ0))/(2a) = ln(3)/2 ≈ 0.549``.

    >>> import math
    >>> from gtcontrol import Gaussian, Layer, riccati_flow
    >>> layer, g0 = Layer(A=[[1.0]], B=[[0.5]], V=1.0), Gaussian([0.0], [[1.0]])
    >>> flow = riccati_flow(layer, g0, [0.1, 1.0])
    >>> flow.status, abs(flow.blowup_time - math.log(3) / 2) < 1e-12
    (<Status.BLOWUP: 'blowup'>, True)
    >>> w = 1.5 * math.exp(-0.2) - 0.5
    >>> abs(float(flow.cov[0, 0, 0]) - 1 / w) < 1e-12, bool(math.isnan(flow.cov[1, 0, 0]))
    (True, True)
    """
    clock = time.perf_counter()
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
    budget = Budget(as_time_limit(time_limit))
    d = form.dim
    out = np.full((t.size, d, d), np.nan)

    def result(status: Status, message: str, t_star: float = math.inf) -> CovarianceFlow:
        computed = int(np.sum(np.isfinite(out[:, 0, 0])))
        stats = {"method": method, "computed": computed, "seconds": time.perf_counter() - clock}
        protocol: dict[str, Any] = {"status": status, "message": message, "stats": stats}
        return CovarianceFlow(t=frozen(t), cov=frozen(out), blowup_time=t_star, **protocol)

    t_max = float(t.max()) if t.size else 0.0
    t_star = math.inf
    try:
        if t_max > 0:
            t_star = _first_blowup(layer, form, g0, t_max * (1 + 1e-9), budget)
        _fill(form, g0, t, method, t_star, out, budget)
    except BudgetExhausted as exc:
        return result(Status.BUDGET_EXHAUSTED, f"riccati_flow: {exc.reason}")
    except SolverError as exc:
        return result(Status.FAILED, f"riccati_flow: {exc}")
    if t_star <= t_max:
        return result(
            Status.BLOWUP,
            f"Σ blows up at T* = {t_star:.12g}; the depths at or past it are not computed",
            t_star,
        )
    return result(Status.SUCCESS, f"Σ(t) at {t.size} depths ({method})")


def _fill(
    form: RiccatiForm,
    g0: Gaussian,
    t: FloatArray,
    method: str,
    t_star: float,
    out: FloatArray,
    budget: Budget,
) -> None:
    """Write Σ at the depths ``t < t_star`` into ``out``, in increasing depth."""
    hn = float(np.linalg.norm(form.hamiltonian, 1))
    dt_max = math.inf if hn == 0 else 2.0 / hn
    t_cur = 0.0
    state: FloatArray = g0.cov.copy() if method == "radon" else inv_spd(g0.cov)
    for idx in np.argsort(t, kind="stable"):
        target = float(t[idx])
        if target >= t_star:
            return
        while t_cur < target:
            budget.check()
            dt = min(target - t_cur, dt_max)
            state = (
                _radon_step(form, state, dt)
                if method == "radon"
                else _precision_step(form.A, form.R, state, dt)
            )
            t_cur = t_cur + dt if dt < target - t_cur else target
        out[idx] = state if method == "radon" else inv_spd(state)


def _first_blowup(
    layer: Layer, form: RiccatiForm, g0: Gaussian, horizon: float, budget: Budget
) -> float:
    """First blow-up time up to ``horizon`` (``inf`` if none): certified march or integrator.

    Raises :class:`BudgetExhausted` when the budget runs out and :class:`SolverError` when the
    search cannot decide.
    """
    if not form.is_bernoulli:
        traj = simulate_within(layer, g0, horizon, budget, n_points=2)
        if traj.status is Status.BUDGET_EXHAUSTED:
            raise BudgetExhausted(f"the blow-up search stopped: {traj.message}")
        if traj.status not in (Status.SUCCESS, Status.BLOWUP):
            raise SolverError(f"the blow-up search: {traj.message}", status=traj.status)
        return traj.blowup_time
    out = march_blowup(
        form.A,
        form.R,
        g0.cov,
        horizon,
        rtol=DEFAULT_RTOL,
        max_steps=DEFAULT_MAX_STEPS,
        budget=budget,
        model=model_error(layer, form),
    )
    if out.status is Status.BUDGET_EXHAUSTED:
        raise BudgetExhausted(out.message)
    if out.status is Status.FAILED:
        raise SolverError(out.message, status=out.status)
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
            "Radon linearization: Y(t) is singular (blow-up)", status=Status.BLOWUP
        ) from None
    return sym(s)


def _precision_step(a: FloatArray, r: FloatArray, omega: FloatArray, dt: float) -> FloatArray:
    _, w = gramian(a, r, dt)
    e_inv = sla.expm(-dt * a)
    return sym(e_inv.T @ (omega + w) @ e_inv)
