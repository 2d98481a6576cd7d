"""What :func:`gtcontrol.compare_tokens` measures besides the errors.

The moment reference (the moment ODE, or the Gaussian closure for a non-affine feed-forward),
the cost of a token run in token pairs and a lower bound on its field evaluations (from which
``max_work`` refuses a comparison up front), the effective sample size of the softmax along the
predicted path, the spread-to-size ratio that sizes the adaptive tolerance, the kurtosis of a
cloud, and the verdict with its reason in words.

Reference: the paper cited in :mod:`gtcontrol`, §2 (finite N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._linalg import FloatArray
from .._status import Budget
from .._validation import MAX_ENTRY
from ..errors import GTControlError
from ..model.field import affine_velocity
from ..model.finite_n import worst_ess_fraction
from ..model.gaussian import Gaussian
from ..model.gaussian_closure import linearized_layer, simulate_closure
from ..model.moments import Trajectory, simulate
from ..model.params import Control, Layer, Schedule

__all__: list[str] = []

#: The integration error must be below this fraction of the statistical error.
INTEGRATION_FRACTION = 0.1
#: Queries this many standard deviations from the mean enter the worst-case ESS/N.
ESS_N_STD = 2.0
#: Fewer effective keys than this (``N · ESS/N``) for those queries: the softmax is starved.
STARVED_KEYS = 10.0
#: Cap on the evaluations of the moment reference (a few seconds; the moment ODE of a comparison
#: whose tokens fit in ``max_work`` needs a few thousand).
REFERENCE_MAX_EVALS = 10**5
#: Most depths of the predicted path at which ESS/N is evaluated.
_ESS_POINTS = 64
#: Field evaluations per step of each embedded pair and its stability interval on the negative
#: real axis (a step never covers more than ``interval / ρ(M)`` of depth): DOP853 12 and about
#: 6; Dormand–Prince 5(4) 6 and about 3.3; Bogacki–Shampine 3(2) 3 and about 2.5 (Hairer &
#: Wanner, *Solving ODEs II*, §IV.2).
_PAIR_COST = {"DOP853": (12, 6.0), "RK45": (6, 3.3), "RK23": (3, 2.5)}


def _layers(ctrl: Control) -> list[Layer]:
    """One layer per segment (at its midpoint)."""
    if isinstance(ctrl, Schedule):
        return list(ctrl.layers)
    bps = np.asarray(ctrl.breakpoints, dtype=float)
    return [ctrl.layer_at(0.5 * (bps[k] + bps[k + 1])) for k in range(len(bps) - 1)]


def reference_flow(
    ctrl: Control, initial: Gaussian, time_limit: float | None
) -> tuple[Trajectory, str]:
    """The moment ODE from ``initial``, or the Gaussian closure when a layer is not affine.

    At most :data:`REFERENCE_MAX_EVALS` right-hand-side evaluations: a reference that needs
    more (a stiff layer, a very long horizon) ends the comparison with ``BUDGET_EXHAUSTED``
    within seconds, where its token runs would need far more than ``max_work`` anyway.
    """
    cap = REFERENCE_MAX_EVALS
    if all(lay.is_gaussian_exact for lay in _layers(ctrl)):
        return simulate(ctrl, initial, max_evals=cap, time_limit=time_limit), "moment ODE"
    flow = simulate_closure(ctrl, initial, max_evals=cap, time_limit=time_limit)
    return flow, "Gaussian closure"


def _softmax_heads(layer: Layer) -> int:
    return sum(1 for v_h, b_h in layer.heads if np.any(v_h) and np.any(b_h))


#: The fixed cost of one field evaluation, in token pairs: the per-call work of the kernel and
#: the integrator, so that ``max_work`` bounds a comparison at small N, where the pairs alone
#: are few (docs/benchmarks.md).
EVAL_OVERHEAD_PAIRS = 25_000


def cost_per_eval(ctrl: Control, n: int) -> int:
    """Token pairs of one field evaluation of ``n`` tokens: ``N²`` per softmax head, plus ``N``
    and the fixed cost of an evaluation (:data:`EVAL_OVERHEAD_PAIRS`)."""
    heads = max(_softmax_heads(lay) for lay in _layers(ctrl))
    return heads * n * n + n + EVAL_OVERHEAD_PAIRS


def _rate(ctrl: Control, predicted: Trajectory, i: int) -> float:
    """Spectral radius of the mean-field velocity's linear part ``M`` at record ``i``."""
    t, m, s = float(predicted.t[i]), predicted.mean[i], predicted.cov[i]
    lay = linearized_layer(ctrl.layer_at(min(t, ctrl.T)), m, s)
    mat, _ = affine_velocity(lay, m, s)
    with np.errstate(all="ignore"):
        rho = float(np.max(np.abs(np.linalg.eigvals(mat)))) if np.all(np.isfinite(mat)) else 0.0
    return rho if math.isfinite(rho) else 0.0


def min_evals(
    ctrl: Control,
    predicted: Trajectory | None,
    method: str,
    steps_per_layer: int | None,
    budget: Budget | None = None,
) -> int:
    """Field evaluations a token run needs at the least.

    Exact for the fixed-step methods; for an embedded pair one evaluation per segment and one
    for the first step, plus its evaluations per step (12 for DOP853, 6 for RK45), with at
    least one step per segment and at least ``∫ ρ(M(t)) dt / interval`` steps (the stability
    limit of an explicit step, with ``M`` the mean-field linear part along the predicted path;
    the token field has it as its own).
    Without a predicted path (before it is computed), or when ``budget`` is spent before every
    rate along it is known (each is a dense ``O(d³)`` eigenvalue problem), one step per segment:
    still a lower bound.
    """
    bps = np.asarray(ctrl.breakpoints, dtype=float)
    segments = len(bps) - 1
    if method == "rk4":
        return 4 * (steps_per_layer or 20) * segments
    if method in ("euler", "discrete"):
        return (steps_per_layer or 1) * segments
    per_step, interval = _PAIR_COST[method]
    if predicted is None or len(predicted.t) == 0:
        return 1 + (1 + per_step) * segments
    t = np.asarray(predicted.t, dtype=float)
    idx = np.unique(np.linspace(0, len(t) - 1, min(len(t), _ESS_POINTS)).astype(int))
    known: list[float] = []
    for i in idx:
        if budget is not None and budget.exhausted:
            return min_evals(ctrl, None, method, steps_per_layer)
        known.append(_rate(ctrl, predicted, int(i)))
    rates = np.array(known)
    total = 1
    for k in range(segments):
        inside = (t[idx] >= bps[k]) & (t[idx] <= bps[k + 1])
        rho = float(np.min(rates[inside])) if np.any(inside) else 0.0
        steps = max(1, math.ceil(rho * (bps[k + 1] - bps[k]) / interval))
        total += 1 + per_step * steps
    return total


def ess_along(
    ctrl: Control, predicted: Trajectory, budget: Budget | None = None
) -> tuple[FloatArray, FloatArray, bool]:
    """Depths and the worst ``ESS/N`` there (minimum over heads, queries within 2σ), and
    whether every depth was reached.

    Each depth costs ``O(d³)``: with a ``budget`` the pass is wrap-up work and stops when its
    grace (:meth:`Budget.grace`) is spent, returning the depths done.
    """
    t = np.asarray(predicted.t, dtype=float)
    if t.size == 0:
        return np.empty(0), np.empty(0), True
    idx = np.unique(np.linspace(0, len(t) - 1, min(len(t), _ESS_POINTS)).astype(int))
    out = np.empty(idx.size)
    for j, i in enumerate(idx):
        grace = None if budget is None else budget.grace()
        if grace is not None and grace <= 1e-9:
            return t[idx[:j]].copy(), out[:j].copy(), False
        try:
            g = Gaussian(predicted.mean[i], predicted.cov[i])
        except GTControlError:  # a covariance beyond the accepted magnitudes (near a blow-up)
            out[j] = math.nan
            continue
        lay = ctrl.layer_at(min(float(t[i]), ctrl.T))
        worst = worst_ess_fraction(lay, g, n_std=ESS_N_STD)
        out[j] = float(np.min(worst)) if worst.size else 1.0
    return t[idx].copy(), out, True


def out_of_range(predicted: Trajectory) -> str:
    """Why the moment reference cannot be compared with tokens ('' when it can).

    A covariance entry above :data:`gtcontrol._validation.MAX_ENTRY` (``1e150``, the largest
    magnitude a :class:`Gaussian` accepts: products of two entries would overflow float64)
    leaves the range of the comparison: the moments overflow although they stay finite.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        cov = np.abs(np.asarray(predicted.cov, dtype=float)).reshape(len(predicted.t), -1)
        mean = np.abs(np.asarray(predicted.mean, dtype=float)).reshape(len(predicted.t), -1)
        top = np.maximum(cov.max(axis=1, initial=0.0), mean.max(axis=1, initial=0.0))
        bad = np.flatnonzero(~(top <= MAX_ENTRY))
    if bad.size == 0:
        return ""
    i = int(bad[0])
    return (
        f"the moment reference overflows: an entry of magnitude {float(top[i]):.3g} exceeds "
        f"{MAX_ENTRY:g} (the largest a Gaussian accepts) at depth {float(predicted.t[i]):.6g}; "
        "the tokens cannot be compared there (choose a shorter horizon T)"
    )


def kurtosis_ratio(tokens: FloatArray) -> float:
    """Mardia's multivariate kurtosis of a cloud over its Gaussian value ``d (d + 2)``.

    ``b₂ = mean(((x − m)ᵀ Σ⁺ (x − m))²)`` with the empirical moments (pseudo-inverse on the
    cloud's span, ``d`` its rank): 1 for a Gaussian up to ``O(N^(-1/2))``, above 1 for heavy
    tails. K. V. Mardia, Biometrika 57 (1970).
    """
    x = np.asarray(tokens, dtype=np.float64)
    xc = x - x.mean(axis=0)
    cov = xc.T @ xc / max(x.shape[0], 1)
    rank = int(np.linalg.matrix_rank(cov)) if np.all(np.isfinite(cov)) else 0
    if rank == 0:
        return math.nan
    q = np.einsum("ij,jk,ik->i", xc, np.linalg.pinv(cov, hermitian=True), xc)
    return float(np.mean(q * q) / (rank * (rank + 2)))


def spread_ratio(predicted: Trajectory) -> float:
    """Smallest ``sqrt(tr Σ) / sqrt(|m|² + tr Σ)`` along the path (in ``[1e-6, 1]``)."""
    tr = np.trace(predicted.cov, axis1=1, axis2=2)
    size = np.sum(predicted.mean**2, axis=1) + tr
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(np.where(size > 0, tr / size, 1.0))
    r = r[np.isfinite(r)]
    return float(np.clip(np.min(r), 1e-6, 1.0)) if r.size else 1.0


@dataclass(frozen=True)
class Verdict:
    """Whether the tokens agree with the moment model, and the reason in words."""

    slope: float
    slope_tol: float
    integration: float
    statistical: float
    n_max: int
    ess_min: float
    ess_t: float
    reference: str
    kurtosis: float

    @property
    def slope_ok(self) -> bool:
        return math.isfinite(self.slope) and abs(self.slope + 0.5) <= self.slope_tol

    @property
    def integration_ok(self) -> bool:
        return self.integration <= INTEGRATION_FRACTION * self.statistical

    @property
    def starved(self) -> bool:
        return self.n_max * self.ess_min < STARVED_KEYS

    @property
    def consistent(self) -> bool:
        return self.slope_ok and self.integration_ok

    def text(self) -> str:
        slope = (
            f"the Bures–Wasserstein error falls like N^{self.slope:+.2f} "
            f"(theory −1/2 ± {self.slope_tol:g})"
        )
        integ = (
            f"token integration error {self.integration:.2g} "
            f"{'below' if self.integration_ok else 'NOT below'} a tenth of the statistical error "
            f"{self.statistical:.2g} at N = {self.n_max}"
        )
        ess = (
            f"worst ESS/N along the path {self.ess_min:.2g} at t = {self.ess_t:.3g} "
            f"({self.n_max * self.ess_min:.2g} effective keys at N = {self.n_max} for queries "
            f"{ESS_N_STD:g}σ out)"
        )
        shape = (
            f"the tokens' Mardia kurtosis at T is {self.kurtosis:.3g} times the Gaussian value"
            if math.isfinite(self.kurtosis)
            else ""
        )
        if self.consistent:
            return f"consistent: {slope}; {integ}; {ess}"
        why = []
        if not self.integration_ok:
            why.append(
                "the integrator's error is not negligible: refine the token integration "
                "(rtol, or more steps_per_layer)"
            )
        if not self.slope_ok and self.integration_ok:
            if self.starved:
                why.append(
                    "the integrator is not the cause; the softmax is starved: a few keys carry "
                    "each outer query's attention, which falls short of the N → ∞ tilted mean "
                    "m + ΣBx (it lies beyond the sampled keys), so the outer tokens lag, the "
                    "cloud leaves the Gaussian family, and the error is a finite-N bias that "
                    "does not fall like N^(-1/2)"
                )
            elif self.reference == "Gaussian closure":
                why.append(
                    "the integrator is not the cause and the softmax is not starved; the "
                    "reference is the Gaussian closure, which the tokens leave as the non-affine "
                    "feed-forward makes their law non-Gaussian (a bias that does not fall with N)"
                )
            else:
                why.append(
                    "neither the integrator nor ESS starvation explains it; more repeats or a "
                    "wider range of N would pin the slope down"
                )
        if shape and not self.slope_ok:
            why.append(shape)
        return f"NOT consistent: {slope}; {integ}; {ess}; {'; '.join(why)}"
