"""Telling a finite-time blow-up of Σ from exponential growth, and locating it.

Near a quadratic singularity the top eigenvalue grows like ``λ_max(t) ≈ c/(t* − t)``, so its
reciprocal is near-linear in depth and the tangent extrapolation ``t + λ/λ̇`` (the *remaining
time* ``ρ = λ/λ̇`` added to the depth) has an error ``O(ρ²)``. Under exponential growth ``ρ`` stays
constant instead. The watch (:class:`BlowupWatch`) samples ``(t, λ, λ̇)`` each time ``‖Σ‖₂ = λ_max``
has grown tenfold past ``blowup_factor × max(‖Σ0‖₂, 1)`` and declares a blow-up when

* the remaining time shrank (``ρ_k ≤ ρ_{k−1}/3``, as the quadratic law predicts: ×1/10), and
* two successive extrapolations agree (``|t*_k − t*_{k−1}| ≤ 10⁻³ ρ_{k−1}``), and
* the predicted error of the last one, ``|t*_k − t*_{k−1}| (ρ_k/ρ_{k−1})²``, is below the target
  (``tol``, relative to ``t*``), or ``λ_max`` reached the end of its useful range.

Where the integrator's own error sets the estimates' accuracy (near the singularity it may
loosen its tolerances, :meth:`BlowupWatch.relaxation`, and the estimates then agree only to a
fixed fraction of ``ρ``), the agreement test above is never met and the integration would go on
to the collapse of its step. So the watch also stops on a *geometric* convergence of the
estimates: over four samples the remaining time shrank threefold at each, and so did the gaps
``g_k = |t*_k − t*_{k−1}|`` (``g_k ≤ g_{k−1}/3``, twice); the estimates' limit then lies within
``g_k/2`` of ``t*_k`` (a geometric tail of ratio ``≤ 1/3``), and the watch stops once ``g_k/2`` is
below the target, with the bracket's upper end ``t*_k + g_k`` (twice that tail).

The answer is ``t*_k`` with the bracket ``(t_k, t*_k + max(|t*_k − t*_{k−1}|, 8 ε t*_k))``: the
lower end is the last depth the integration reached, the upper end an over-estimate verified by
the agreement of two extrapolations (its margin is the difference of the two, which exceeds the
predicted error of ``t*_k`` by the factor ``(ρ_{k−1}/ρ_k)² ≥ 9``). A collapse of the step size
(the integrator cannot go on) with ``λ_max`` growing fast is classified the same way
(:meth:`BlowupWatch.collapse`), with the bracket widened to the remaining time.

Reference: the paper cited in :mod:`gtcontrol`, §3.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .._linalg import FloatArray
from .._status import Status
from .params import Layer

__all__: list[str] = []

#: λ_max past this without a finite-time singularity is ``Status.OVERFLOW``.
OVERFLOW_LEVEL = 1e250
#: Growth of λ_max between two samples of the watch.
_LEVEL_STEP = 10.0
#: Largest growth (over the reference) at which the watch still asks for a better estimate.
_LAST_LEVEL = 1e15
#: Largest factor by which :meth:`BlowupWatch.relaxation` loosens the integrator's tolerances.
MAX_RELAXATION = 1e4
_EPS = float(2.0**-52)


@dataclass(frozen=True)
class IntegrationEnd:
    """How an integration ended (anything but reaching the horizon)."""

    status: Status
    message: str
    blowup_time: float = math.inf
    bracket: tuple[float, float] | None = None


@dataclass(frozen=True)
class _Sample:
    t: float
    lam: float
    remaining: float

    @property
    def estimate(self) -> float:
        return self.t + self.remaining


def _blowup(t_star: float, lower: float, upper: float, how: str) -> IntegrationEnd:
    return IntegrationEnd(
        Status.BLOWUP,
        f"finite-time blow-up at depth {t_star:.12g} (bracket [{lower:.15g}, {upper:.15g}]; {how})",
        t_star,
        (lower, upper),
    )


class BlowupWatch:
    """Samples ``(t, λ_max, λ̇_max)`` as ‖Σ‖₂ grows and classifies the growth (module doc).

    Parameters
    ----------
    lam_ref
        Reference size ``max(‖Σ0‖₂, 1)``.
    factor
        Growth over ``lam_ref`` at which sampling starts (``blowup_factor``).
    tol
        Target relative accuracy of the blow-up time.
    """

    def __init__(self, lam_ref: float, factor: float, tol: float) -> None:
        self.lam_ref = lam_ref
        self.level = lam_ref * factor
        self.tol = tol
        self.samples: list[_Sample] = []

    def due(self, trace: float) -> bool:
        """Whether a sample is due (``tr Σ ≥ λ_max`` is a cheap pre-test)."""
        return trace >= self.level or not math.isfinite(trace)

    def observe(self, t: float, lam: float, dlam: float) -> IntegrationEnd | None:
        """Record a sample if ``λ_max`` passed the next level; return a blow-up or ``None``."""
        if lam < self.level:
            return None
        self.level = lam * _LEVEL_STEP
        remaining = lam / dlam if dlam > 0 else math.inf
        new = _Sample(t, lam, remaining)
        prev = self.samples[-1] if self.samples else None
        self.samples.append(new)
        if prev is None or not math.isfinite(remaining) or not math.isfinite(prev.remaining):
            return None
        gap = abs(new.estimate - prev.estimate)
        shrinking = remaining <= prev.remaining / 3.0
        agree = gap <= 1e-3 * prev.remaining
        t_star = new.estimate
        geometric = self._geometric()
        if geometric is not None:
            return geometric
        if not (shrinking and agree):
            return None
        predicted = gap * (remaining / prev.remaining) ** 2
        if predicted <= self.tol * abs(t_star) or lam >= self.lam_ref * _LAST_LEVEL:
            upper = t_star + max(gap, 8 * _EPS * abs(t_star))
            how = (
                f"two extrapolations of 1/λ_max agree to {gap:.2g}; λ_max = {lam:.3g}, "
                f"remaining time {remaining:.3g}"
            )
            return _blowup(t_star, t, upper, how)
        return None

    def _geometric(self) -> IntegrationEnd | None:
        """The blow-up from the last four samples when their estimates converge geometrically
        (module docstring), else ``None``."""
        if len(self.samples) < 4:
            return None
        last = self.samples[-4:]
        rho = [s.remaining for s in last]
        if not all(math.isfinite(r) and r > 0 for r in rho) or any(
            b > a / 3.0 for a, b in itertools.pairwise(rho)
        ):
            return None
        est = [s.estimate for s in last]
        gaps = [abs(b - a) for a, b in itertools.pairwise(est)]
        if not (gaps[1] <= gaps[0] / 3.0 and gaps[2] <= gaps[1] / 3.0):
            return None
        t_star = est[-1]
        if 0.5 * gaps[2] > self.tol * abs(t_star):
            return None
        upper = t_star + max(gaps[2], 8 * _EPS * abs(t_star))
        how = (
            f"the extrapolations of 1/λ_max converge geometrically (gaps {gaps[0]:.2g}, "
            f"{gaps[1]:.2g}, {gaps[2]:.2g}); λ_max = {last[-1].lam:.3g}, remaining time "
            f"{rho[-1]:.3g}"
        )
        return _blowup(t_star, last[-1].t, upper, how)

    def relaxation(self) -> float:
        """Factor ``≥ 1`` by which the integrator may loosen its tolerances near a blow-up.

        A relative error ``δ`` of Σ committed at remaining time ``τ = t* − t`` moves the
        singularity by about ``δ τ`` (near ``t*``, ``Σ ≈ u uᵀ c/(t* − t)``: a relative change of
        ``c`` is a shift of ``t*``). So once the samples show a finite-time blow-up (the
        remaining time shrank threefold or more between the last two samples), the tolerance
        can grow like ``τ_first/τ`` (``τ_first`` the remaining time at the first sample) and
        every step still moves ``t*`` by no more than one step at the first sample did: the
        error budget of ``t*`` is unchanged while an 8th-order method needs ``(τ_first/τ)^{1/8}``
        times fewer steps per decade of ``λ_max``. Capped at :data:`MAX_RELAXATION`; ``1``
        before two samples and whenever the growth does not look like a blow-up.
        """
        if len(self.samples) < 2:
            return 1.0
        first, prev, last = self.samples[0], self.samples[-2], self.samples[-1]
        if not (
            math.isfinite(first.remaining)
            and math.isfinite(last.remaining)
            and 0.0 < last.remaining <= prev.remaining / 3.0
        ):
            return 1.0
        return min(max(first.remaining / last.remaining, 1.0), MAX_RELAXATION)

    def collapse(self, t: float, lam: float, dlam: float, why: str) -> IntegrationEnd | None:
        """Classify a step-size collapse at ``(t, λ, λ̇)``: a blow-up, or ``None`` (a failure).

        It is a blow-up when ``λ_max`` grew well past its reference and is still growing with a
        remaining time ``λ/λ̇`` far below the depth scale (at most ``10⁻⁶ max(|t|, 1e-300)`` or
        ``10⁻⁹``) — the step collapsed because the singularity is that close.
        """
        if not (lam > 1e3 * self.lam_ref and dlam > 0 and math.isfinite(lam)):
            return None
        remaining = lam / dlam
        if not (remaining <= 1e-6 * max(abs(t), 1e-300) or remaining <= 1e-9):
            return None
        t_star = t + remaining
        margin = remaining
        if self.samples and math.isfinite(self.samples[-1].remaining):
            margin = max(margin, abs(t_star - self.samples[-1].estimate))
        upper = t_star + max(margin, 8 * _EPS * abs(t_star))
        how = f"the step size collapsed ({why}) with λ_max = {lam:.3g} growing"
        return _blowup(t_star, t, upper, how)

    def growth_note(self) -> str:
        """What the samples say about a growth the watch has not classified ('' before two).

        Appended to the message of an integration that stops undecided (a spent budget): the
        e-folding rate of ``λ_max`` between the first and last samples and the trend of the
        remaining-time estimate ``λ/λ̇`` (a quadratic blow-up shrinks it tenfold per decade of
        ``λ_max``; exponential growth keeps it constant).
        """
        if len(self.samples) < 2:
            return ""
        first, last = self.samples[0], self.samples[-1]
        rate = math.log(last.lam / first.lam) / max(last.t - first.t, 1e-300)
        return (
            f"; λ_max grew from {first.lam:.3g} at depth {first.t:.6g} to {last.lam:.3g} at "
            f"depth {last.t:.6g} (e-folding rate {rate:.3g} per unit depth) and the remaining-"
            f"time estimate λ/λ̇ went {first.remaining:.3g} → {last.remaining:.3g} (a quadratic "
            "blow-up shrinks it tenfold per decade of λ_max, exponential growth keeps it "
            "constant): the growth is not classified yet"
        )

    def null_cone_note(self, layer: Layer, cov: FloatArray) -> str:
        """Whether the top direction of Σ lies on the null cone of every head's tilt ('' if not).

        With ``Σ ≈ λ v vᵀ + Σ_⊥`` the quadratic part of the growth of ``λ`` is
        ``λ² Σ_h (vᵀV_h v)(vᵀB_h v)``. When ``vᵀB_h v ≈ 0`` for every head (the attention logits
        are flat along ``v``; a non-empty set when the ``B_h`` are indefinite) only the
        feed-forward and the other directions drive ``λ``: the signature of exponential growth
        along an attention-flat direction, not of a quadratic finite-time singularity. Reported
        when ``λ_max`` is past 10⁴ times its reference ``λ_ref`` and ``max_h |vᵀB_h v| / ‖B_h‖_F``
        is below ``min(10⁻³, 10² λ_ref/λ_max)``: the tilt falls like ``1/λ_max``, as on the way
        to the null cone (it tends to a non-zero constant at a quadratic blow-up).
        """
        if not self.samples or not np.all(np.isfinite(cov)):
            return ""
        w, u = np.linalg.eigh(cov)
        growth = float(w[-1]) / self.lam_ref
        if not growth >= 1e4:
            return ""
        v = u[:, -1]
        fh = layer.factored_heads
        tilt = np.array([v @ b @ v for _, b in layer.dense_heads])
        size = np.array([np.linalg.norm(b) for _, b in layer.dense_heads])
        if fh is not None:  # B_h = s k_hᵀ q_h: vᵀB_h v = s (k_h v)·(q_h v), no dense head
            f_tilt = fh.scale * np.einsum("hi,hi->h", fh.k @ v, fh.q @ v)
            f_size = (
                fh.scale * np.linalg.norm(fh.k, axis=(1, 2)) * np.linalg.norm(fh.q, axis=(1, 2))
            )
            tilt, size = np.concatenate([f_tilt, tilt]), np.concatenate([f_size, size])
        if tilt.size == 0 or not np.all(size > 0):
            return ""
        flat = float(np.max(np.abs(tilt) / size))
        if not flat <= min(1e-3, 1e2 / growth):
            return ""
        second = float(w[-2]) if w.size > 1 else 0.0
        return (
            f"; the top direction of Σ lies on the null cone of every head (max_h |vᵀB_h v| / "
            f"‖B_h‖ = {flat:.2g} at λ_max = {w[-1]:.3g}, λ_2 = {second:.3g}): "
            "attention is flat along it and the growth comes from the feed-forward and the "
            "other directions: the signature of exponential growth rather than of a quadratic "
            "blow-up"
        )

    def growth_samples(self) -> list[tuple[float, float, float]]:
        """The samples ``(t, λ_max, λ/λ̇)`` taken so far (``.stats["growth_samples"]``)."""
        return [(x.t, x.lam, x.remaining) for x in self.samples]

    def overflow(self, t: float) -> IntegrationEnd:
        """The outcome for λ_max past :data:`OVERFLOW_LEVEL` without a singularity."""
        return IntegrationEnd(
            Status.OVERFLOW,
            f"the covariance exceeded {OVERFLOW_LEVEL:g} at depth {t:g} without a finite-time "
            "singularity (exponential growth); the trajectory stops there",
        )
