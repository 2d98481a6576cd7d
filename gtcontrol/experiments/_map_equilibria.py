"""The model map's equilibria near the data: Newton–Krylov from the data moments and from the
identity, ``m*`` from the mean equation at each root, and the root's stability from the
certified spectrum of its linearization (:class:`MapEquilibrium`); roots found from both
starts are one equilibrium. A run that cannot reach its tolerance is ``NOT_FOUND``, with how
hard it looked, never "none exist".

Reference: the paper cited in :mod:`gtcontrol` (§3); C. T. Kelley, *Solving Nonlinear
Equations with Newton's Method* (SIAM, 2003), ch. 3.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._display import Axes
from .._linalg import FloatArray
from .._status import Budget, Outcome, ResultFields, Status
from ..analysis.equilibria import mean_matrix
from ..analysis.newton import NewtonResult, NewtonSettings, newton_equilibrium
from ..analysis.stability import LinearizationSpectrum, linearization_spectrum
from ..model.gaussian import Gaussian
from ..model.params import Layer

__all__ = ["NEWTON_SECONDS", "MapEquilibrium", "capped", "equilibrium", "same_roots"]

#: Seconds each Newton run may take at most.
NEWTON_SECONDS = 10.0
#: Newton's tolerance on the relative residual (the spectrum needs ``≤ 1e-8``), and its
#: iterations.
_NEWTON_TOL = 1e-10
_NEWTON_MAX_ITER = 30
#: Two Newton roots closer than this (relative Frobenius) are one equilibrium.
_SAME_ROOT = 1e-6


@dataclass(frozen=True)
class MapEquilibrium(ResultFields, Outcome):
    """An equilibrium near the data: one Newton run and the spectrum at its root.

    Attributes
    ----------
    start
        ``"data"`` or ``"identity"``.
    same_as
        The other start whose root this is (``""``: a distinct root).
    residual
        Newton's final relative residual.
    trace
        ``tr Σ*`` (``nan`` without a root).
    abscissa, cov_abscissa, mean_abscissa, abscissa_error
        Of the linearization at ``(m*, Σ*)``; ``abscissa_error`` is the rounding bound of a
        dense spectrum (``nan``: Krylov, no bound).
    eigenvalues
        The rightmost eigenvalues of the covariance part found.
    stability
        ``"stable"``, ``"unstable"`` or ``"undecided"``.
    evidence
        What decided it: ``"certified"`` (the bound excludes the other sign) or ``"estimate"``
        (a Krylov abscissa, or one within its bound of 0); ``""`` without a root.
    seconds
        Wall time of the run and the spectrum.
    status
        ``SUCCESS`` (a root, its spectrum computed), ``NOT_FOUND`` (Newton did not converge: no
        claim that none exists), ``FAILED`` (a root without a mean equilibrium or spectrum),
        ``BUDGET_EXHAUSTED``.
    message
        What was found, with its numbers.
    stats
        ``seconds``.
    success
        True for ``SUCCESS`` only.
    """

    start: str
    same_as: str
    residual: float
    trace: float
    abscissa: float
    cov_abscissa: float
    mean_abscissa: float
    abscissa_error: float
    eigenvalues: tuple[complex, ...]
    stability: str
    evidence: str
    seconds: float

    _summary_fields = ("start", "trace", "abscissa", "stability", "evidence")

    def _draw(self, ax: Axes) -> None:
        from ..analysis._figures import draw_spectrum

        title = f"equilibrium from {self.start}: {self.stability}"
        draw_spectrum(ax, list(self.eigenvalues), label="DF(Σ*)", title=title)


def capped(budget: Budget, cap: float) -> float:
    """A nested solver's limit: ``cap`` seconds or what is left, whichever is less."""
    return budget.hand(min(cap, budget.remaining()))


def _mean_equilibrium(layer: Layer, cov: FloatArray) -> FloatArray | None:
    """``m*`` with the affine coordinate at 1: ``K₁₁ x = −(K₁₂ + b₁)`` (``None``: K singular)."""
    d = layer.dim - 1
    k = mean_matrix(layer, cov)
    _, b = layer.affine_ffn()
    rhs = -(k[:d, d] + b[:d])
    try:
        x = np.linalg.solve(k[:d, :d], rhs)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(x)) or np.linalg.norm(k[:d, :d] @ x - rhs) > 1e-8 * (
        np.linalg.norm(rhs) + np.linalg.norm(k[:d, :d], 2) * np.linalg.norm(x)
    ):
        return None
    return np.append(x, 1.0)


def _stability(spec: LinearizationSpectrum) -> tuple[str, str]:
    a, err = spec.abscissa, spec.cov_abscissa_error
    bound = err if math.isfinite(err) else math.nan
    if math.isfinite(bound) and spec.mean_abscissa < 0 and a + bound < 0:
        return "stable", "certified"
    if math.isfinite(bound) and a - bound > 0:
        return "unstable", "certified"
    if not math.isfinite(a):
        return "undecided", "estimate"
    return ("stable" if a < 0 else "unstable"), "estimate"


def _newton(layer: Layer, cov0: FloatArray, budget: Budget) -> tuple[NewtonResult, str, bool]:
    """Newton from ``cov0`` within :data:`NEWTON_SECONDS` and :data:`_NEWTON_MAX_ITER` steps,
    given up after its first step (a probe: one Krylov cycle, ``krylov_cycles=1``) when, at
    the rate of that step, the tolerance lies more steps away than the run may take
    (``r₀ qᵏ ≤ tol`` needs ``k > max_iter``, ``q = r₁/r₀``):
    the start is outside the region of Newton's fast convergence (at d = 384 each such step
    costs a stagnating Krylov solve, seconds, for a few per cent of the residual). On the
    Kronecker route (``d ≤ kron_max_dim``) a step takes milliseconds, and the run goes on.
    Returns the run, why it was given up (``""``: it was not) and whether the row's time
    limit, not the run's own cap, ended it."""
    clock = time.perf_counter()
    settings = NewtonSettings(tol=_NEWTON_TOL, max_iter=_NEWTON_MAX_ITER)
    krylov = layer.dim - 1 > settings.kron_max_dim

    def run(start: FloatArray, newton: NewtonSettings, cap: float) -> tuple[NewtonResult, bool]:
        binding = budget.remaining() < cap  # the row's deadline comes before the run's cap
        res = newton_equilibrium(layer, start, newton=newton, time_limit=capped(budget, cap))
        return res, binding and res.stats.get("termination") == "time_limit"

    # the probe step measures the rate from the start: one Krylov cycle gives it (a second
    # cycle moved MiniLM's first-step residuals by under 1 %: docs/benchmarks.md)
    probe = replace(settings, max_iter=1, krylov_cycles=1) if krylov else settings
    first, cut = run(cov0, probe, NEWTON_SECONDS)
    hist = first.residuals
    if not krylov or first.success or first.iterations < 1 or cut:
        return first, "", cut
    if first.status is not Status.BUDGET_EXHAUSTED:
        return first, "", False
    q = hist[-1] / hist[0]
    needed = math.log(_NEWTON_TOL / hist[-1]) / math.log(q) if 0.0 < q < 1.0 else math.inf
    if needed > _NEWTON_MAX_ITER - 1:
        why = (
            f"its first step took the relative residual from {hist[0]:.3g} to {hist[-1]:.3g} "
            f"({first.stats.get('gmres_iterations', 0)} Krylov products); at that rate the "
            f"tolerance {_NEWTON_TOL:g} is {needed:.3g} steps away, past the run's "
            f"{_NEWTON_MAX_ITER}: given up, the start being outside the region where Newton "
            "converges fast"
        )
        return first, why, False
    left = NEWTON_SECONDS - (time.perf_counter() - clock)
    if left <= 0.0:
        return first, f"its {NEWTON_SECONDS:g} s were spent by the first step", False
    more, cut = run(np.asarray(first.cov), replace(settings, max_iter=_NEWTON_MAX_ITER - 1), left)
    joined = replace(
        more,
        iterations=first.iterations + more.iterations,
        residuals=hist[:-1] + more.residuals,
        stats={**more.stats, "seconds": time.perf_counter() - clock},
    )
    return joined, "", cut


def equilibrium(
    layer: Layer, start: str, cov0: FloatArray, budget: Budget
) -> tuple[MapEquilibrium, FloatArray | None]:
    """Newton from ``cov0``, then ``m*`` and the spectrum at the root; the root's covariance."""
    clock = time.perf_counter()

    def entry(status: Status, message: str, **kw: Any) -> MapEquilibrium:
        nan = math.nan
        secs = time.perf_counter() - clock
        fields: dict[str, Any] = {
            "start": start,
            "same_as": "",
            "residual": nan,
            "trace": nan,
            "abscissa": nan,
            "cov_abscissa": nan,
            "mean_abscissa": nan,
            "abscissa_error": nan,
            "eigenvalues": (),
            "stability": "undecided",
            "evidence": "",
            "seconds": secs,
        }
        return MapEquilibrium(
            **(fields | kw), status=status, message=message, stats={"seconds": secs}
        )

    res, outside, cut = _newton(layer, cov0, budget)
    resid = float(res.residuals[-1]) if res.residuals else math.nan
    if not res.success:
        status = Status.BUDGET_EXHAUSTED if cut or budget.exhausted else Status.NOT_FOUND
        why = (
            f"Newton from the {start} moments did not converge ({outside or res.message}); "
            "this does not say that no equilibrium exists"
        )
        return entry(status, why, residual=resid), None
    cov = np.asarray(res.cov)
    trace = float(np.trace(cov))
    mean = _mean_equilibrium(layer, cov)
    if mean is None:
        why = "a covariance root, but the mean matrix K is singular there: no mean equilibrium"
        return entry(Status.FAILED, why, residual=resid, trace=trace), cov
    spec = linearization_spectrum(
        layer, Gaussian(mean, cov), k=4, numerical_abscissa=False, time_limit=budget.left_as_limit()
    )
    if spec.status is not Status.SUCCESS:
        why = f"a root (residual {resid:.2g}); its spectrum: {spec.message}"
        return entry(spec.status, why, residual=resid, trace=trace), cov
    stability, evidence = _stability(spec)
    err = spec.cov_abscissa_error
    how = (
        f"± {err:.2g} (Bauer–Fike bound)"
        if math.isfinite(err)
        else f"({spec.method}, {spec.stats.get('matvecs', 0)} products; no rounding bound)"
    )
    found = entry(
        Status.SUCCESS,
        f"root with relative residual {resid:.2g}, tr Σ* = {trace:.4g}; abscissa "
        f"{spec.abscissa:.6g} {how}: {stability} ({evidence})",
        residual=resid,
        trace=trace,
        abscissa=spec.abscissa,
        cov_abscissa=spec.cov_abscissa,
        mean_abscissa=spec.mean_abscissa,
        abscissa_error=err,
        eigenvalues=tuple(complex(z) for z in spec.eigenvalues),
        stability=stability,
        evidence=evidence,
    )
    return found, cov


def same_roots(found: list[tuple[MapEquilibrium, FloatArray | None]]) -> list[MapEquilibrium]:
    """The entries, each root found twice marked ``same_as`` the start that found it first."""
    out: list[MapEquilibrium] = []
    for i, (e, cov) in enumerate(found):
        for f, other in found[:i]:
            if cov is not None and other is not None:
                gap = float(np.linalg.norm(cov - other)) / max(float(np.linalg.norm(other)), 1e-300)
                if gap <= _SAME_ROOT:
                    e = replace(e, same_as=f.start)
                    break
        out.append(e)
    return out
