"""Finite-time blow-up of the covariance: exact, certified times and the integrator fallback.

In the Riccati class (every head ``V_h = v_h I``, no noise; see :mod:`gtcontrol.analysis.riccati`)
the covariance obeys ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``. Write ``Σ0 = F Fᵀ`` with ``F`` of full column
rank ``r = rank Σ0`` and ``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``. Then ``Y(t) = e^{−Aᵀt}(I + W(t) Σ0)``
and

    Σ(t) = e^{At} F G(t)⁻¹ Fᵀ e^{Aᵀt},        G(t) = I_r + Fᵀ W(t) F        (symmetric, G(0) = I),

so Σ blows up exactly when ``λ_min(G(t))`` first reaches 0 (this also covers singular Σ0, whose
rank is kept). The search marches in restarted coordinates (``F`` replaced by a factor of
``Σ(t)`` at each accepted point, so G starts at I and stays well scaled) with steps ``h`` that are
*proved* root-free by either of two bounds valid for ``s ∈ [0, h]``:

* Loewner: ``G(s) ⪰ I − Fᵀ W₋(h) F`` where ``W₋`` is the Gramian of the negative part of R;
* interpolation: ``λ_min G(s) ≥ min(1, λ_min G(h)) − ‖F‖² h²/8 ‖AᵀR + RA‖ e^{2 μ₊ h}``
  (λ_min is concave along the chord; ``μ₊`` = positive part of the logarithmic norm of A).

A point proved singular closes the bracket; the march then converges to the first root from
below, and the root is reported once the certified bracket is narrower than ``rtol`` relative.

Every statement holds for the exact solution of the layer's own float numbers: the march carries
a bound on how far the exact trajectory can be from the computed one (the rounding of each step,
amplified exactly as the flow amplifies perturbations), subtracts it before calling a step
root-free, adds it before calling a point singular, and accumulates the depth rounded down.
Near an unstable equilibrium the flow amplifies rounding like its instability: the bracket the
floats determine may then be wider than ``rtol`` (``stats["rounding_limited"]``, said in the
message), and a start within rounding of the equilibrium gets ``Status.FAILED`` with
``stats["undetermined"]``: the floats do not decide at double precision whether or when Σ blows
up beyond the certified ``[0, lower]``. The same status comes, more rarely, from the bound's
own looseness: the rounding of a very ill-conditioned Σ (condition 1e8 and more) close to a
blow-up is bounded normwise, so the march may stop within 1e-9 of a ``T*`` that the floats do
decide; the certified ``[0, lower]`` still holds.
Tail certificates prove that no blow-up ever happens: ``R ⪰ 0``; ``λ_max(Fᵀ W₋(∞) F) < 1``
(when that Gramian converges, e.g. A Hurwitz); and, when −A is Hurwitz and Σ(t) ≻ 0,
``κ(P) ‖Σ(t)⁻¹ − Ω*‖ < λ_min(Ω*)`` with ``AᵀP + PA = I`` and ``Ω*`` the Lyapunov solution.

Outside the class (general V, or Brownian forcing) the adaptive integrator of
:func:`gtcontrol.simulate` locates the blow-up event (not certified).

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._blas import calm_blas
from .._display import Axes, SummaryItems
from .._status import Budget, BudgetExhausted, OutcomeOrBlowup, ResultFields, Status
from .._validation import as_cap, as_positive_float, as_time_limit
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian, check_gaussian
from ..model.params import Layer
from ._core import field_rate, simulate_within
from ._march import DEFAULT_MAX_STEPS, DEFAULT_RTOL, march_blowup
from .riccati import model_error, riccati_form_or_none

__all__ = [
    "BlowupResult",
    "blowup_analysis",
    "default_horizon",
]


@dataclass(frozen=True, kw_only=True)
class _BlowupOptions:
    """Validated options of :func:`blowup_analysis` (private; the function takes keywords).

    Attributes
    ----------
    T
        Search depth (``None``: :func:`default_horizon`).
    rtol
        Relative width of the certified bracket, in ``(0, 1e-3)``.
    max_steps
        Cap on certified steps of the march.
    """

    T: float | None = None
    rtol: float = DEFAULT_RTOL
    max_steps: int = DEFAULT_MAX_STEPS

    def __post_init__(self) -> None:
        if self.T is not None:
            as_positive_float("T", self.T)
        if not 0 < as_positive_float("rtol", self.rtol) < 1e-3:
            raise InvalidParametersError(f"rtol: expected a number in (0, 1e-3), got {self.rtol!r}")
        as_cap("max_steps", self.max_steps)


@dataclass(frozen=True, eq=False)
class BlowupResult(ResultFields, OutcomeOrBlowup):
    """Outcome of :func:`blowup_analysis`.

    Attributes
    ----------
    blowup_time
        First blow-up time T*, ``math.inf`` if none was found.
    lower, upper
        Certified bracket: no blow-up on ``[0, lower]``; Σ is already singular-or-past at
        ``upper`` (``upper = inf`` when there is no blow-up). From the integrator (not
        certified): the last depth it reached and a verified over-estimate of T*.
    status
        ``Status.BLOWUP`` (finite-time blow-up at ``blowup_time``); ``Status.SUCCESS`` (no
        blow-up: proved for every depth when ``proved_never``, else none up to the search depth
        ``stats["T"]``); ``Status.BUDGET_EXHAUSTED`` (``time_limit`` or ``max_steps`` ran out;
        ``[0, lower]`` is still certified); ``Status.FAILED`` (the march could not certify any
        step: a tangential, non-crossing singularity, or, with ``stats["undetermined"]``, a
        trajectory this search bounds only to a relative error of order one: a start whose
        float numbers do not decide the answer at double precision, or a bound loosened by a
        very ill-conditioned Σ close to a blow-up, e.g. ``Σ0 = diag(1, 1e-8)``, ``A = 0``,
        ``V = B = I``, whose ``T* = 1/2`` :func:`gtcontrol.simulate` finds, uncertified).
    certified
        True when the statement is proved by the certificates (Riccati class); False for the
        adaptive integrator, a depth-limited search or an unfinished one.
    method
        ``"riccati"`` (certified march) or ``"integrator"``.
    message
        The certificate or reason, in words with the numbers.
    proved_never
        True when a certificate proves that no blow-up happens at any depth (the old status
        ``"never"``); False for a depth-limited answer (the old ``"none_before_horizon"``).
    stats
        ``steps``, ``gramians`` (matrix exponentials), ``seconds``, ``T``; for the certified
        march also ``rounding`` (the final bound on the relative distance between the exact and
        the computed trajectory), ``rounding_limited`` (rounding, not ``rtol``, set the bracket)
        and ``undetermined`` (see ``status``). When ``rounding_limited``, ``blowup_time`` is the
        computed estimate and only ``[lower, upper]`` is certified.
    """

    blowup_time: float
    lower: float
    upper: float
    certified: bool
    method: str
    proved_never: bool = False

    def _summary_items(self) -> SummaryItems:
        return [
            ("blowup_time", self.blowup_time),
            ("bracket", (self.lower, self.upper)),
            ("certified", self.certified),
            ("proved_never", self.proved_never),
            ("method", self.method),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_blowup

        note = f"{self.method}, {self.status.value}"
        bounds = {"lower": self.lower, "upper": self.upper, "blowup_time": self.blowup_time}
        draw_blowup(ax, **bounds, proved_never=self.proved_never, note=note)


def default_horizon(layer: Layer, initial: Gaussian) -> float:
    """Default search depth: ``200 / rate``, ``rate = ‖A‖₂ + 2 Σ_h ‖V_h‖₂‖B_h‖₂ ‖Σ0‖₂``.

    Parameters
    ----------
    layer
        The layer.
    initial
        ``N(m0, Σ0)``; only ``‖Σ0‖₂`` matters.

    Returns
    -------
    float
        A few hundred time constants (200 when the rate is 0).

    Raises
    ------
    InvalidParametersError
        If the layer has a ReLU/GELU feed-forward (outside the moment model).
    """
    return 200.0 / field_rate(layer, initial.cov)


def blowup_analysis(
    layer: Layer,
    initial: Gaussian,
    T: float | None = None,
    *,
    rtol: float = DEFAULT_RTOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    time_limit: float | None = None,
) -> BlowupResult:
    """First finite-time blow-up of the covariance, with a certificate.

    Riccati class (every ``V_h = v_h I``): the blow-up time is the first root of
    ``λ_min G(t)``, ``G(t) = I + Fᵀ W(t) F`` (module docstring), located to ``rtol`` relative
    inside a bracket whose left part is proved root-free. Special cases with closed forms
    (docs/theory.md §2–3): scalar ``T* = ln(1 + a/(cσ0))/(2a)``; ``A = 0``, ``R ≺ 0``:
    ``T* = 1/λ_max(Σ0^{1/2}(−R)Σ0^{1/2})``. Blow-up is certain (and searched without depth
    limit) when ``−A`` is Hurwitz, Σ0 ≻ 0 and the Lyapunov solution of ``AᵀΩ + ΩA = R`` is
    indefinite, or when A is Hurwitz and ``I + Fᵀ W(∞) F`` is indefinite.

    Other layers (general V, or Brownian forcing): the adaptive integrator of
    :func:`gtcontrol.simulate` (rtol 1e-11), which detects the singularity from the growth of
    ``‖Σ‖₂`` in any direction and extrapolates ``1/λ_max``; ``lower``/``upper`` are then its
    bracket (the last depth reached and a verified over-estimate); not certified.

    Parameters
    ----------
    layer
        The layer.
    initial
        ``N(m0, Σ0)`` (Σ0 may be singular; the rank is preserved).
    T
        Search depth; ``None`` picks :func:`default_horizon` (200 time constants). Beyond it the
        answer is ``inf`` with ``proved_never=False`` unless a tail certificate proves more.
        When blow-up is known to be certain the Riccati search ignores it.
    rtol
        Relative width of the certified bracket around the first root, in ``(0, 1e-3)``.
    max_steps
        Cap on certified steps of the march (``Status.BUDGET_EXHAUSTED`` when reached).
    time_limit
        Wall-clock limit in seconds (``None``: none); running out gives
        ``Status.BUDGET_EXHAUSTED`` with the certified ``[0, lower]``.

    Returns
    -------
    BlowupResult
        ``status`` says which answer it is; a blow-up is ``Status.BLOWUP``, never an exception.

    Raises
    ------
    InvalidParametersError, InvalidGaussianError
        On a ``layer`` that is not a :class:`Layer`, an ``initial`` of another dimension, or a
        bad ``T``, ``rtol``, ``max_steps`` or ``time_limit``.

    Examples
    --------
    Scalar ``dσ/dt = 2aσ + 2cσ²`` with ``a = 1``, ``c = vB = 0.5``, ``σ0 = 0.3``: a certified
    blow-up at ``T* = ln(1 + a/(cσ0))/(2a)``.

    >>> import math
    >>> from gtcontrol import Gaussian, Layer, blowup_analysis
    >>> res = blowup_analysis(Layer(A=[[1.0]], B=[[0.5]], V=1.0), Gaussian([0.0], [[0.3]]))
    >>> res.status, res.certified, abs(res.blowup_time - math.log(1 + 1 / 0.15) / 2) < 1e-12
    (<Status.BLOWUP: 'blowup'>, True, True)
    >>> res.lower <= res.blowup_time <= res.upper
    True

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §3–§4.
    """
    opts = _BlowupOptions(T=T, rtol=rtol, max_steps=max_steps)
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer: expected a Layer, got {type(layer).__name__}")
    g0 = check_gaussian(initial, layer.dim)
    budget = Budget(as_time_limit(time_limit))
    # a multi-threaded BLAS stalls on a busy machine, inside calls no budget check interrupts
    with calm_blas():
        return _blowup(layer, g0, opts, budget)


def _blowup(layer: Layer, g0: Gaussian, opts: _BlowupOptions, budget: Budget) -> BlowupResult:
    """:func:`blowup_analysis` on validated inputs: the certified march in the Riccati class,
    the integrator outside it."""
    form = riccati_form_or_none(layer)
    hz = opts.T if opts.T is not None else default_horizon(layer, g0)
    clock = time.perf_counter()
    if form is None or not form.is_bernoulli:
        return _integrator_blowup(layer, g0, hz, budget)
    out = march_blowup(
        form.A,
        form.R,
        g0.cov,
        hz,
        rtol=opts.rtol,
        max_steps=opts.max_steps,
        budget=budget,
        model=model_error(layer, form),
    )
    return BlowupResult(
        blowup_time=out.t_star,
        lower=out.lower,
        upper=out.upper,
        status=out.status,
        certified=out.certified,
        method="riccati",
        message=out.message,
        proved_never=out.proved_never,
        stats={
            "steps": out.steps,
            "gramians": out.gramians,
            "T": hz,
            "rounding": out.rounding,
            "rounding_limited": out.limited,
            "undetermined": out.undetermined,
            "seconds": time.perf_counter() - clock,
        },
    )


def _integrator_blowup(layer: Layer, g0: Gaussian, hz: float, budget: Budget) -> BlowupResult:
    clock = time.perf_counter()

    def result(
        t_star: float,
        status: Status,
        message: str,
        stats: Mapping[str, Any],
        bracket: tuple[float, float] = (0.0, math.inf),
    ) -> BlowupResult:
        return BlowupResult(
            blowup_time=t_star,
            lower=bracket[0],
            upper=bracket[1],
            status=status,
            certified=False,
            method="integrator",
            message=message,
            stats={**stats, "T": hz, "seconds": time.perf_counter() - clock},
        )

    try:
        traj = simulate_within(layer, g0, hz, budget, n_points=2)
    except BudgetExhausted as exc:
        return result(math.inf, Status.BUDGET_EXHAUSTED, f"adaptive integrator: {exc.reason}", {})
    if traj.status is Status.OVERFLOW:
        return result(
            math.inf,
            Status.SUCCESS,
            f"adaptive integrator: {traj.message} (no finite-time singularity detected)",
            {**traj.stats, "overflow": True},
        )
    if traj.status is Status.BLOWUP:
        bracket = traj.blowup_bracket or (traj.blowup_time, traj.blowup_time)
        return result(
            traj.blowup_time,
            Status.BLOWUP,
            "outside the Riccati class: the adaptive integrator (factor form, rtol 1e-11) "
            f"detected blow-up at T* ≈ {traj.blowup_time:.12g} in [{bracket[0]:.15g}, "
            f"{bracket[1]:.15g}] from the growth of ‖Σ‖₂ ({traj.message})",
            traj.stats,
            bracket,
        )
    if traj.status is not Status.SUCCESS:
        return result(math.inf, traj.status, f"adaptive integrator: {traj.message}", traj.stats)
    return result(
        math.inf,
        Status.SUCCESS,
        f"outside the Riccati class: no blow-up before the depth T = {hz:g} (integrator)",
        traj.stats,
    )
