"""Transformers and Kalman–Bucy filtering: the covariance correspondence of docs/theory.md §6.

A Riccati-class layer (every head ``V_h = v_h I``) moves the covariance of a Gaussian by

    dΣ/dt = AΣ + ΣAᵀ − ΣRΣ [+ GGᵀ],        R = −Σ_h v_h (B_h + B_hᵀ),

and the error covariance of the Kalman–Bucy filter for ``dx = Fx dt + dw`` (``E dw dwᵀ = Q dt``),
``dy = Hx dt + dν`` (``E dν dνᵀ = R_n dt``) obeys

    dP/dt = F P + P Fᵀ + Q − P Hᵀ R_n⁻¹ H P.

They coincide with ``F = A``, ``Hᵀ R_n⁻¹ H = R`` (so R must be positive semi-definite) and
``Q = G Gᵀ``: Brownian forcing ``dx = v(x) dt + G dW`` of every token keeps Gaussians Gaussian and
adds ``GGᵀ`` (the noisy-token extension, ``Layer(noise=G)``). Without noise ``Q = 0``: the
noiseless Bernoulli equation of theory.md §3–5. The steady state is the filter algebraic Riccati
equation ``FP + PFᵀ + Q − PHᵀR_n⁻¹HP = 0``, solved by python-control as
``control.care(Fᵀ, Hᵀ, Q, R_n)`` or ``control.lqe(F, I, H, Q, R_n)``; its stabilizing solution
is the Transformer's stable equilibrium.

* :func:`to_kalman` — a layer's filter data ``(F, H, R_n, Q)`` (``H`` a factor of R, ``R_n = I``);
  refuses layers outside the Riccati class or with ``R`` not ⪰ 0, with the reason.
* :func:`from_kalman` — the layer ``A = F``, one head ``V = −I``, ``B = ½HᵀR_n⁻¹H``, noise
  ``G = Q^{1/2}``.
* :func:`kalman_steady_state` — the filter ARE by python-control (slycot).
* :func:`kalman_covariance` — the filter Riccati ODE integrated in filter variables.
* :func:`compare_filter` — the filter against the Transformer along a trajectory and at rest.

Only the covariance corresponds: the Transformer's mean ``dm/dt = Km + b`` is not the filter's
estimate equation (which is driven by the measurements).

Reference: the paper cited in :mod:`gtcontrol`, §6; R. E. Kalman, R. S. Bucy,
*New results in linear filtering and prediction theory*, J. Basic Eng. 83 (1961).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

from .._display import Axes, SummaryItems
from .._docstring import fill, integrator_budget_doc
from .._linalg import SYM_RTOL, FloatArray, frobenius_norms, psd_sqrt, sym, unvech, vech, vech_index
from .._readonly import ReadOnlyArrays
from .._status import DEFAULT_MAX_EVALS, Budget, BudgetExhausted, Outcome, ResultFields, Status
from .._validation import (
    as_depth,
    as_depths,
    as_float_array,
    as_max_evals,
    as_positive_float,
    as_time_limit,
    frozen,
    set_fields,
)
from ..errors import InvalidGaussianError, InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory
from ..model.params import Layer
from ._core import ComplexArray, remaining_limit, simulate_within
from .equilibria import equilibria
from .riccati import CovarianceFlow, riccati_form_or_none

__all__ = [
    "FilterComparison",
    "KalmanData",
    "SteadyState",
    "compare_filter",
    "from_kalman",
    "kalman_covariance",
    "kalman_steady_state",
    "to_kalman",
]


def _check_psd(name: str, a: FloatArray, rtol: float = SYM_RTOL) -> FloatArray:
    scale = float(np.linalg.norm(a, 2)) if a.size else 0.0
    if float(np.max(np.abs(a - a.T), initial=0.0)) > rtol * max(scale, np.finfo(float).tiny):
        raise InvalidParametersError(f"{name}: expected a symmetric matrix")
    w = np.linalg.eigvalsh(sym(a))
    if w.size and w[0] < -rtol * max(scale, np.finfo(float).tiny):
        raise InvalidParametersError(
            f"{name}: expected a positive semi-definite matrix, smallest eigenvalue {w[0]:.6g}"
        )
    return sym(a)


@dataclass(frozen=True, eq=False, init=False)
class KalmanData(ReadOnlyArrays):
    """A continuous-time filtering problem ``dx = Fx dt + dw``, ``dy = Hx dt + dν``.

    Parameters
    ----------
    F
        State matrix, ``(d, d)``.
    H
        Output matrix, ``(p, d)``.
    R
        Measurement-noise intensity ``R_n``, ``(p, p)``, symmetric positive definite.
    Q
        Process-noise intensity, ``(d, d)``, symmetric positive semi-definite; zero if omitted.

    Raises
    ------
    InvalidParametersError
        On shapes, NaN/inf, asymmetry, an indefinite Q or a singular/indefinite R.
    """

    F: FloatArray
    H: FloatArray
    R: FloatArray
    Q: FloatArray

    def __init__(self, F: Any, H: Any, R: Any, Q: Any = None) -> None:
        f = as_float_array("F", F, ndim=2)
        d = f.shape[0]
        if f.shape != (d, d) or d == 0:
            raise InvalidParametersError(
                f"F: expected a non-empty square matrix, got shape {f.shape}"
            )
        h = as_float_array("H", H, ndim=2, shape=(None, d))
        p = h.shape[0]
        if p == 0:
            raise InvalidParametersError(f"H: expected at least one measurement row, got {h.shape}")
        r = _check_psd("R", as_float_array("R", R, ndim=2, shape=(p, p)))
        w = np.linalg.eigvalsh(r)
        if w[0] <= 1e-14 * max(float(w[-1]), np.finfo(float).tiny):
            raise InvalidParametersError(
                f"R: the measurement-noise intensity must be positive definite, smallest "
                f"eigenvalue {w[0]:.6g}"
            )
        q = np.zeros((d, d)) if Q is None else as_float_array("Q", Q, ndim=2, shape=(d, d))
        q = _check_psd("Q", q)
        set_fields(self, F=f, H=h, R=r, Q=q)

    @property
    def dim(self) -> int:
        """State dimension d."""
        return int(self.F.shape[0])

    @property
    def n_outputs(self) -> int:
        """Measurement dimension p."""
        return int(self.H.shape[0])

    @property
    def information(self) -> FloatArray:
        """``Hᵀ R_n⁻¹ H``: the Transformer's ``R``."""
        return sym(self.H.T @ np.linalg.solve(self.R, self.H))

    def __repr__(self) -> str:
        return f"KalmanData(dim={self.dim}, outputs={self.n_outputs}, noise={bool(np.any(self.Q))})"


def to_kalman(layer: Layer, *, rtol: float = 1e-10) -> KalmanData:
    """The Kalman–Bucy filter whose error covariance is the layer's covariance.

    ``F = A``, ``H = Lᵀ`` with ``L Lᵀ = R = −Σ_h v_h (B_h + B_hᵀ)`` (eigen-factor of the range of
    R, so ``p = rank R`` outputs), ``R_n = I_p`` and ``Q = GGᵀ`` (``G = layer.noise``, else 0).
    Then ``dP/dt = FP + PFᵀ + Q − PHᵀR_n⁻¹HP`` is exactly the layer's covariance equation.
    When ``R = 0`` the filter has one output with ``H = 0`` (no information).

    Parameters
    ----------
    layer
        A Riccati-class layer (every head ``V_h = v_h I``).
    rtol
        Eigenvalues of R below ``rtol ‖R‖`` are zero (rank) and above ``−rtol ‖R‖`` non-negative.

    Returns
    -------
    KalmanData

    Raises
    ------
    InvalidParametersError
        Outside the Riccati class (the quadratic term is then not ``−ΣRΣ``), or if R has a
        negative eigenvalue: ``HᵀR_n⁻¹H`` is positive semi-definite, so such a layer (same-sign
        V and B, which can blow up in finite time) has no filter counterpart.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §6; docs/theory.md §6.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Layer, to_kalman
    >>> data = to_kalman(Layer(A=-np.eye(2), B=np.eye(2), V=-0.5))  # R = −v(B + Bᵀ) = I
    >>> np.allclose(data.H.T @ np.linalg.solve(data.R, data.H), np.eye(2))
    True
    """
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    tol = as_positive_float("rtol", rtol)
    form = riccati_form_or_none(layer)
    if form is None:
        raise InvalidParametersError(
            "layer: the Kalman–Bucy correspondence needs the Riccati class (every head "
            "V_h = v_h I), where the quadratic term is −ΣRΣ; this layer has a general V_h"
        )
    d = form.dim
    w, u = np.linalg.eigh(form.R)
    top = float(np.max(np.abs(w))) if w.size else 0.0
    if w[0] < -tol * top:
        raise InvalidParametersError(
            f"layer: R = −Σ_h v_h (B_h + B_hᵀ) has the negative eigenvalue {w[0]:.6g}; a "
            "Kalman–Bucy filter needs HᵀR_n⁻¹H ⪰ 0 (same-sign V and B make R indefinite or "
            "negative, the blow-up regime, which has no filter counterpart)"
        )
    keep = w > tol * top if top > 0 else np.zeros(d, dtype=bool)
    if np.any(keep):
        h = (u[:, keep] * np.sqrt(w[keep])).T
    else:
        h = np.zeros((1, d))
    return KalmanData(form.A, h, np.eye(h.shape[0]), form.Q)


def from_kalman(F: Any, H: Any, R: Any, Q: Any = None) -> Layer:
    """The layer whose covariance is the Kalman–Bucy error covariance of ``(F, H, R, Q)``.

    ``A = F``, a single head ``V = −I`` (``v = −1``) with ``B = ½ HᵀR⁻¹H`` (so that
    ``R_Riccati = −v(B + Bᵀ) = HᵀR⁻¹H``) and, when ``Q ≠ 0``, Brownian forcing ``G = Q^{1/2}``
    (symmetric square root, ``GGᵀ = Q``) on every token.

    Parameters
    ----------
    F, H, R, Q
        As in :class:`KalmanData` (``R`` is the measurement-noise intensity ``R_n``).

    Returns
    -------
    Layer

    Raises
    ------
    InvalidParametersError
        On malformed data (see :class:`KalmanData`).

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import from_kalman
    >>> layer = from_kalman(-np.eye(2), np.eye(2), 2 * np.eye(2))  # B = ½ HᵀR⁻¹H = I/4
    >>> layer.heads[0][1]
    array([[0.25, 0.  ],
           [0.  , 0.25]])
    """
    data = F if isinstance(F, KalmanData) else KalmanData(F, H, R, Q)
    g = psd_sqrt(data.Q) if np.any(data.Q) else None
    return Layer(data.F, B=0.5 * data.information, V=-1.0, noise=g)


@dataclass(frozen=True, eq=False)
class SteadyState(ResultFields, Outcome):
    """Steady state of the filter: the stabilizing solution of the filter ARE.

    Attributes
    ----------
    cov
        ``P`` with ``FP + PFᵀ + Q − PHᵀR_n⁻¹HP = 0`` and ``F − KH`` Hurwitz (NaN when the solve
        failed).
    gain
        Kalman gain ``K = PHᵀR_n⁻¹``.
    poles
        Eigenvalues of ``F − KH``.
    residual
        ``‖ARE(P)‖_F / (2‖FP‖_F + ‖Q‖_F + ‖PHᵀR_n⁻¹HP‖_F)``.
    method
        ``"care"`` (``control.care(Fᵀ, Hᵀ, Q, R_n)``) or ``"lqe"`` (``control.lqe``).
    status
        ``Status.SUCCESS`` (the stabilizing solution), or ``Status.FAILED`` when python-control
        finds none (e.g. an unobservable unstable mode, or Hamiltonian eigenvalues on the
        imaginary axis); the message is python-control's.
    message
        What was found.
    positive_definite
        False when P is singular (the old status ``"not_positive_definite"``): the Transformer
        then has no positive-definite equilibrium, e.g. ``Q = 0`` with a stable mode of F.
    stats
        ``seconds``.
    """

    cov: FloatArray
    gain: FloatArray
    poles: ComplexArray
    residual: float
    method: str
    positive_definite: bool = True

    _summary_fields = ("method", "cov", "residual")

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_spectrum

        draw_spectrum(ax, self.poles, label="F − KH", title=f"filter poles ({self.method})")


#: Cost model of one filter ARE (slycot SB02MD on the 2d Hamiltonian): flops / d³ and a
#: conservative flop rate, so that a solve that cannot fit the time left is not started.
_ARE_FLOPS_PER_D3 = 300.0
_ARE_FLOP_RATE = 2e9
_ARE_ALWAYS = 0.1


def _steady_within(data: KalmanData, method: str, budget: Budget) -> SteadyState:
    """:func:`kalman_steady_state`, or ``BUDGET_EXHAUSTED`` when its estimated cost does not fit."""
    d = data.F.shape[0]
    estimate = _ARE_FLOPS_PER_D3 * float(d) ** 3 / _ARE_FLOP_RATE
    left = budget.remaining()
    # a solve estimated under 0.1 s always runs: it fits the contract's 1 s of slack
    if estimate > max(left, _ARE_ALWAYS):
        nan = np.full((d, d), np.nan)
        return SteadyState(
            cov=frozen(nan),
            gain=frozen(nan.copy()),
            poles=frozen(np.full(d, np.nan, dtype=complex)),
            residual=math.nan,
            method=method,
            positive_definite=False,
            status=Status.BUDGET_EXHAUSTED,
            message=(
                f"not solved: the {method.upper()} at d = {d} is estimated at {estimate:.2g} s, "
                f"more than the {left:.2g} s left of the time limit"
            ),
            stats={"seconds": 0.0, "estimate": estimate},
        )
    return kalman_steady_state(data, method=method)


def _are_residual(data: KalmanData, p: FloatArray) -> float:
    fp = data.F @ p
    quad = p @ data.information @ p
    res = fp + fp.T + data.Q - quad
    scale = 2.0 * float(np.linalg.norm(fp)) + float(np.linalg.norm(data.Q))
    scale += float(np.linalg.norm(quad))
    return float(np.linalg.norm(res)) / scale if scale > 0 else float(np.linalg.norm(res))


def kalman_steady_state(data: KalmanData | Layer, *, method: str = "care") -> SteadyState:
    """Solve the filter ARE ``FP + PFᵀ + Q − PHᵀR_n⁻¹HP = 0`` with python-control.

    ``method="care"``: ``control.care(Fᵀ, Hᵀ, Q, R_n)`` (the dual control CARE,
    ``AᵀX + XA − XBR⁻¹BᵀX + Q = 0`` with ``A = Fᵀ``, ``B = Hᵀ``); ``method="lqe"``:
    ``control.lqe(F, I, H, Q, R_n)``. Both return the stabilizing solution (slycot SB02MD).

    Parameters
    ----------
    data
        :class:`KalmanData`, or a Riccati-class layer (converted by :func:`to_kalman`).
    method
        ``"care"`` or ``"lqe"``.

    Returns
    -------
    SteadyState
        A python-control failure is ``Status.FAILED`` with its message, never an exception.

    Raises
    ------
    InvalidParametersError
        For an unknown method or a layer without a filter counterpart.

    Examples
    --------
    Scalar filter ``F = A = −1``, ``HᵀR_n⁻¹H = R = −v(B + Bᵀ) = 1`` and ``Q = GGᵀ = 1``: the
    ARE ``−2P + 1 − P² = 0`` has the stabilizing root ``P = √2 − 1``.

    >>> import math
    >>> from gtcontrol import Layer, kalman_steady_state
    >>> ss = kalman_steady_state(Layer(A=[[-1.0]], B=[[1.0]], V=-0.5, noise=[[1.0]]))
    >>> ss.status, abs(float(ss.cov[0, 0]) - (math.sqrt(2) - 1)) < 1e-12
    (<Status.SUCCESS: 'success'>, True)
    """
    import control

    clock = time.perf_counter()
    kd = to_kalman(data) if isinstance(data, Layer) else data
    if not isinstance(kd, KalmanData):
        raise InvalidParametersError(
            f"data: expected KalmanData or a Layer, got {type(data).__name__}"
        )
    if method not in ("care", "lqe"):
        raise InvalidParametersError(f"method: expected 'care' or 'lqe', got {method!r}")
    d = kd.dim
    try:
        if method == "care":
            x, _, _ = control.care(kd.F.T, kd.H.T, kd.Q, kd.R)
        else:
            _, x, _ = control.lqe(kd.F, np.eye(d), kd.H, kd.Q, kd.R)
        p = sym(np.asarray(x, dtype=float))
        if not np.all(np.isfinite(p)):
            raise ValueError("non-finite solution")
    except Exception as exc:  # python-control/slycot raise several types; never leak them
        nan = np.full((d, d), np.nan)
        return SteadyState(
            cov=frozen(nan),
            gain=frozen(np.full((d, kd.n_outputs), np.nan)),
            poles=np.full(d, np.nan, dtype=complex),
            residual=math.nan,
            method=method,
            status=Status.FAILED,
            message=f"filter ARE (python-control {method}) failed: {exc}",
            positive_definite=False,
            stats={"seconds": time.perf_counter() - clock},
        )
    gain = p @ np.linalg.solve(kd.R, kd.H).T
    poles = np.linalg.eigvals(kd.F - gain @ kd.H)
    w = np.linalg.eigvalsh(p)
    pd = bool(w[-1] > 0 and w[0] > 1e-10 * w[-1])
    return SteadyState(
        cov=frozen(p),
        gain=frozen(gain),
        poles=poles,
        residual=_are_residual(kd, p),
        method=method,
        status=Status.SUCCESS,
        message=(
            f"stabilizing solution of the filter ARE (python-control {method}); max Re pole "
            f"{np.max(poles.real):.6g}" + ("" if pd else f"; P is singular (λ_min = {w[0]:.3g})")
        ),
        positive_definite=pd,
        stats={"seconds": time.perf_counter() - clock},
    )


@fill(budget=integrator_budget_doc("right-hand-side"))
def kalman_covariance(
    data: KalmanData,
    initial: Gaussian | Any,
    times: Any,
    *,
    rtol: float = 1e-12,
    atol: float = 1e-15,
    max_evals: int = DEFAULT_MAX_EVALS,
    time_limit: float | None = None,
) -> CovarianceFlow:
    """Integrate the Kalman–Bucy Riccati ODE ``dP/dt = FP + PFᵀ + Q − PHᵀR_n⁻¹HP``.

    In filter variables (independently of the Transformer's moment field), with
    ``scipy.integrate.solve_ivp`` (DOP853) on the upper triangle of P.

    Parameters
    ----------
    data
        :class:`KalmanData`.
    initial
        The initial error covariance ``P(0)`` (symmetric positive semi-definite), or a
        :class:`~gtcontrol.Gaussian` whose covariance it is (its mean is not used: the error
        covariance does not depend on it).
    times
        Increasing depths ``≥ 0``; the first may be 0.
    rtol, atol
        Integrator tolerances, positive (``atol`` scaled by ``max(‖P(0)‖_max, 1)``).
    %(budget)s

    Returns
    -------
    CovarianceFlow
        ``P(t)`` at ``times`` (``.cov``): ``Status.SUCCESS``; ``Status.BUDGET_EXHAUSTED`` when
        ``max_evals`` or ``time_limit`` ran out and ``Status.FAILED`` when the integrator
        failed, with NaN at the depths not reached. ``H ᵀR_n⁻¹H ⪰ 0`` keeps P bounded, so
        there is no blow-up.

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On ``data`` that is not :class:`KalmanData`, an ``initial`` that is not symmetric positive
        semi-definite, depths that do not increase from ``≥ 0``, or a bad cap or limit.

    Examples
    --------
    Scalar filter ``dP/dt = 2fP + q − hP²`` with ``f = −1``, ``q = 1``, ``h = 1``: P tends to
    the positive root of ``−2P + 1 − P² = 0``, ``P∞ = √2 − 1``.

    >>> import math
    >>> from gtcontrol import KalmanData, kalman_covariance
    >>> data = KalmanData(F=[[-1.0]], H=[[1.0]], R=[[1.0]], Q=[[1.0]])
    >>> flow = kalman_covariance(data, [[1.0]], [0.0, 20.0])
    >>> flow.status, abs(float(flow.cov[-1, 0, 0]) - (math.sqrt(2) - 1)) < 1e-9
    (<Status.SUCCESS: 'success'>, True)
    """
    clock = time.perf_counter()
    if not isinstance(data, KalmanData):
        raise InvalidParametersError(f"data: expected KalmanData, got {type(data).__name__}")
    d = data.dim
    if isinstance(initial, Gaussian):
        if initial.dim != d:
            raise InvalidParametersError(
                f"initial: expected a Gaussian of dimension {d}, got {initial.dim}"
            )
        p0 = np.asarray(initial.cov)
    else:
        p0 = as_float_array("initial", initial, ndim=2, shape=(d, d), error=InvalidGaussianError)
        Gaussian(np.zeros(d), p0, name="initial")  # validates symmetry and semi-definiteness
    t = as_depths("times", times)
    if t.size == 0 or t[0] < 0 or np.any(np.diff(t) <= 0):
        raise InvalidParametersError("times: expected increasing depths ≥ 0")
    rtol, atol = as_positive_float("rtol", rtol), as_positive_float("atol", atol)
    budget = Budget(as_time_limit(time_limit), max_evals=as_max_evals(max_evals))
    f, q, info = data.F, data.Q, data.information
    iu, _ = vech_index(d)

    def rhs(_: float, y: FloatArray) -> FloatArray:
        budget.tick()
        p = unvech(y, d)
        fp = f @ p
        return (fp + fp.T + q - p @ info @ p)[iu]

    y0 = vech(sym(p0))
    scale = max(float(np.max(np.abs(y0))), 1.0)
    out = np.full((t.size, d, d), np.nan)
    start = 0
    if t[0] == 0.0:
        out[0] = sym(p0)
        start = 1

    def result(status: Status, message: str) -> CovarianceFlow:
        stats = {
            "method": "DOP853",
            "computed": int(np.sum(np.isfinite(out[:, 0, 0]))),
            "evaluations": budget.count,
            "seconds": time.perf_counter() - clock,
        }
        return CovarianceFlow(
            t=frozen(t), cov=frozen(out), status=status, message=message, stats=stats
        )

    if start < t.size:
        try:
            # an overflowing flow ends as a failed solve (its message says so), not as warnings
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                sol = solve_ivp(
                    rhs,
                    (0.0, float(t[-1])),
                    y0,
                    method="DOP853",
                    t_eval=t[start:],
                    rtol=rtol,
                    atol=atol * scale,
                )
        except BudgetExhausted as exc:
            return result(Status.BUDGET_EXHAUSTED, f"Kalman–Bucy integration stopped: {exc.reason}")
        ys = np.asarray(sol.y, dtype=float).reshape(y0.size, -1)  # a list when no step was taken
        for i in range(ys.shape[1]):
            out[start + i] = unvech(ys[:, i], d)
        if sol.status != 0 or ys.shape[1] != t.size - start:
            return result(Status.FAILED, f"Kalman–Bucy integration failed: {sol.message}")
    return result(Status.SUCCESS, f"P(t) at {t.size} depths")


@dataclass(frozen=True, eq=False)
class FilterComparison(ResultFields, Outcome):
    """The Kalman–Bucy filter against the Transformer it corresponds to.

    Attributes
    ----------
    kalman
        The filter data (:func:`to_kalman` of the layer).
    trajectory
        The Transformer's moment trajectory (:func:`gtcontrol.simulate`).
    filter_cov
        ``P(t)`` at ``trajectory.t`` from :func:`kalman_covariance` (NaN where not computed).
    max_rel_diff
        ``max_t ‖P(t) − Σ(t)‖_F / max_t ‖Σ(t)‖_F`` (``nan`` when not computed).
    steady_care, steady_lqe
        :func:`kalman_steady_state` by both python-control routes.
    equilibrium
        The Transformer's stable positive-definite equilibrium (:func:`gtcontrol.equilibria`),
        or ``None`` when there is none.
    steady_rel_diff
        ``‖P_care − Σ*‖_F / ‖Σ*‖_F`` (``nan`` without an equilibrium).
    status
        ``Status.SUCCESS``; ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` ran out (the parts
        not computed are NaN/``None``); otherwise the trajectory's status when the moments did
        not reach T (e.g. ``Status.OVERFLOW``) or ``Status.FAILED`` (the filter integration
        failed).
    message
        What was compared, or what stopped it.
    stats
        ``seconds``.
    """

    kalman: KalmanData
    trajectory: Trajectory
    filter_cov: FloatArray
    max_rel_diff: float
    steady_care: SteadyState
    steady_lqe: SteadyState
    equilibrium: FloatArray | None
    steady_rel_diff: float

    def _summary_items(self) -> SummaryItems:
        diffs = [("max_rel_diff", self.max_rel_diff), ("steady_rel_diff", self.steady_rel_diff)]
        return [("dim", self.kalman.dim), *diffs, ("trajectory", self.trajectory)]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_filter_entries

        steady = self.steady_care.cov if self.steady_care.success else None
        traj = self.trajectory
        draw_filter_entries(ax, traj.t, self.filter_cov, traj.cov, steady=steady)


def compare_filter(
    layer: Layer,
    initial: Gaussian,
    T: float,
    *,
    n_points: int = 101,
    time_limit: float | None = None,
) -> FilterComparison:
    """Run the layer's moment ODE and its Kalman–Bucy filter side by side.

    Parameters
    ----------
    layer
        A Riccati-class layer with ``R ⪰ 0`` (optionally noisy).
    initial
        ``N(m0, Σ0)``; Σ0 is the filter's initial error covariance ``P(0)``.
    T
        Depth.
    n_points
        Recorded depths.
    time_limit
        Wall-clock limit in seconds for the whole comparison (``None``: none).

    Returns
    -------
    FilterComparison
        ``status`` says whether everything was computed.

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        As :func:`to_kalman`, :func:`gtcontrol.simulate`.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import Gaussian, compare_filter, from_kalman
    >>> layer = from_kalman(-np.eye(2), np.eye(2), np.eye(2))
    >>> cmp = compare_filter(layer, Gaussian(np.zeros(2), np.eye(2)), T=2.0)
    >>> cmp.status, bool(cmp.max_rel_diff < 1e-9)
    (<Status.SUCCESS: 'success'>, True)
    """
    clock = time.perf_counter()
    as_depth("T", T)  # it becomes the last depth of the filter's flow
    budget = Budget(as_time_limit(time_limit))
    kd = to_kalman(layer)
    care = _steady_within(kd, "care", budget)
    lqe = _steady_within(kd, "lqe", budget)
    traj = simulate_within(layer, initial, T, budget, n_points=n_points)
    status, message = traj.status, traj.message
    p = np.full(traj.cov.shape, np.nan)
    eq_cov: FloatArray | None = None
    try:
        if traj.status is Status.SUCCESS:
            flow = kalman_covariance(kd, initial, traj.t, time_limit=remaining_limit(budget))
            p = np.asarray(flow.cov)
            status, message = flow.status, flow.message
            if flow.success:
                message = "filter and Transformer integrated to depth T"
        eqs = equilibria(layer, time_limit=remaining_limit(budget))
        stable = [e for e in eqs if e.stable]
        eq_cov = np.asarray(stable[0].cov) if stable else None
        budget.check()
    except BudgetExhausted as exc:
        status, message = Status.BUDGET_EXHAUSTED, exc.reason
    except SolverError as exc:
        status, message = Status.FAILED, str(exc)
    denom = float(np.max(frobenius_norms(traj.cov)))
    diff = float(np.max(frobenius_norms(p - traj.cov))) / denom
    sdiff = (
        float(np.linalg.norm(care.cov - eq_cov) / np.linalg.norm(eq_cov))
        if eq_cov is not None
        else math.nan
    )
    return FilterComparison(
        kalman=kd,
        trajectory=traj,
        filter_cov=frozen(p),
        max_rel_diff=diff,
        steady_care=care,
        steady_lqe=lqe,
        equilibrium=None if eq_cov is None else frozen(eq_cov.copy()),
        steady_rel_diff=sdiff,
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - clock},
    )
