"""The certified blow-up march of the matrix Bernoulli equation (private; see blowup.py).

For ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ`` write ``Σ0 = F Fᵀ`` (F of full column rank) and
``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``; then ``Σ(t) = e^{At} F G(t)⁻¹ Fᵀ e^{Aᵀt}`` with
``G(t) = I + Fᵀ W(t) F``, so Σ blows up exactly when ``λ_min G(t)`` first reaches 0. The march
works in restarted coordinates (F replaced by a factor of Σ(t) at each accepted point) with steps
proved root-free by a Loewner bound or an interpolation bound, closes a bracket at the first
point with ``λ_min G ≤ 0`` and converges to the first root from below. Tail certificates prove
that no blow-up ever happens. Details: the docstring of :mod:`gtcontrol.analysis.blowup`.

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.optimize import brentq

from .._linalg import FloatArray, sym
from .._status import Budget, BudgetExhausted, Status
from ..errors import SolverError
from ._core import (
    CERT_MARGIN,
    gramian,
    gramian_limit,
    inv_spd,
    lmax,
    lmin,
    range_factor,
    sign_split,
    slycot_lyapunov,
)

__all__ = ["DEFAULT_MAX_STEPS", "DEFAULT_RTOL", "MarchOutcome", "march_blowup"]

#: Default relative width of the certified bracket around the first root (one home for
#: :func:`gtcontrol.blowup_analysis` and the blow-up search of :func:`gtcontrol.riccati_flow`).
DEFAULT_RTOL = 1e-12
#: Default cap on certified steps of the march (the same two callers).
DEFAULT_MAX_STEPS = 100_000


@dataclass(frozen=True)
class MarchOutcome:
    """What the march found (turned into a :class:`~gtcontrol.BlowupResult` by blowup.py)."""

    status: Status
    message: str
    lower: float
    upper: float = math.inf
    t_star: float = math.inf
    certified: bool = True
    proved_never: bool = False
    steps: int = 0
    gramians: int = 0


class _March:
    """State of the certified march: depth ``t`` and a factor ``F`` of Σ(t) (``Σ = F Fᵀ``)."""

    def __init__(self, a: FloatArray, r: FloatArray, f: FloatArray, budget: Budget) -> None:
        self.a = a
        self.r = r
        self.rp, self.rm = sign_split(r)
        self.nq = float(np.linalg.norm(a.T @ r + r @ a, 2))
        self.mu = max(float(np.linalg.eigvalsh(sym(a))[-1]), 0.0)
        self.f = f
        self.t = 0.0
        self.gramians = 0
        self.eye = np.eye(f.shape[1])
        self.budget = budget

    def g(self, s: float) -> tuple[float, FloatArray, FloatArray]:
        """``(λ_min G(s), G(s), e^{As})`` in the current coordinates."""
        self.budget.check()
        e, w = gramian(self.a, self.r, s)
        self.gramians += 1
        gm = sym(self.eye + self.f.T @ w @ self.f)
        return lmin(gm), gm, e

    def certified(self, s: float, gmin: float) -> bool:
        """Is ``[t, t+s]`` proved root-free (given ``λ_min G(s) = gmin > 0``)?"""
        nf2 = float(np.linalg.norm(self.f, 2)) ** 2
        bound = nf2 * s * s / 8.0 * self.nq * math.exp(min(2.0 * self.mu * s, 700.0))
        if min(1.0, gmin) - bound > CERT_MARGIN:
            return True
        _, wm = gramian(self.a, self.rm, s)
        self.gramians += 1
        return lmax(self.f.T @ wm @ self.f) < 1.0 - CERT_MARGIN

    def accept(self, s: float, gm: FloatArray, e: FloatArray) -> None:
        # Σ(t+s) = e^{As} F G(s)⁻¹ Fᵀ e^{Aᵀs} = F' F'ᵀ with F' = e^{As} F L⁻ᵀ, G = L Lᵀ.
        low = np.linalg.cholesky(gm)
        self.f = sla.solve_triangular(low, (e @ self.f).T, lower=True).T
        self.t += s

    def root(self, s_up: float) -> float:
        """The first root of ``λ_min G`` in ``(0, s_up]`` (Brent, to rounding)."""

        def fn(s: float) -> float:
            return self.g(s)[0]

        return float(brentq(fn, 0.0, s_up, xtol=1e-300 + 1e-16 * s_up, rtol=1e-15, maxiter=200))


class _Tails:
    """Certificates that no blow-up happens after the current depth, and 'certain' verdicts."""

    def __init__(self, a: FloatArray, r: FloatArray, march: _March, f0: FloatArray) -> None:
        d = a.shape[0]
        r_rank = f0.shape[1]
        self.a_zero = not np.any(a)
        eig_a = np.linalg.eigvals(a)
        # Tail 1: G(t+s) ⪰ I − Fᵀ W₋(∞) F, when W₋(∞) converges (e.g. A Hurwitz).
        self.wm_inf = gramian_limit(a, march.rm)
        # Tail 2 (−A Hurwitz, Σ0 ≻ 0): Ω(t+s) − Ω* = e^{−Aᵀs}(Ω(t) − Ω*)e^{−As}, and
        # ‖e^{−As}‖² ≤ κ(P) with AᵀP + PA = I.
        self.tail2: tuple[FloatArray, float, float] | None = None
        self.certain = ""
        if r_rank == d and np.all(eig_a.real > 0):
            self._precision_tail(a, r)
        if np.all(eig_a.real < 0):
            self._gramian_tail(a, r, f0)

    def _precision_tail(self, a: FloatArray, r: FloatArray) -> None:
        try:
            omega, _, _ = slycot_lyapunov(a, r)
            p, _, _ = slycot_lyapunov(a, np.eye(a.shape[0]))
        except SolverError:
            return
        w_om = np.linalg.eigvalsh(omega)
        if w_om[0] > 0:
            self.tail2 = (omega, float(w_om[0]), float(np.linalg.cond(p)))
        elif w_om[0] < -CERT_MARGIN * max(abs(float(w_om[-1])), 1e-300):
            self.certain = (
                "−A is Hurwitz and the Lyapunov solution Ω* of AᵀΩ + ΩA = R has the "
                f"negative eigenvalue {w_om[0]:.6g}: Ω(t) → Ω* must cross singularity"
            )

    def _gramian_tail(self, a: FloatArray, r: FloatArray, f0: FloatArray) -> None:
        # G(t) → G(∞) = I + Fᵀ W(∞) F with AᵀW(∞) + W(∞)A = −R.
        try:
            w_inf, _, _ = slycot_lyapunov(a, -r)
        except SolverError:
            return
        g_inf = np.linalg.eigvalsh(sym(np.eye(f0.shape[1]) + f0.T @ w_inf @ f0))
        if g_inf[0] < -CERT_MARGIN:
            self.certain = (
                "A is Hurwitz and G(∞) = I + Fᵀ W(∞) F has the negative eigenvalue "
                f"{g_inf[0]:.6g}: G(t) → G(∞) must cross singularity"
            )

    def check(self, march: _March) -> str:
        """A certificate (in words) that no blow-up follows ``march.t``, or ``""``."""
        f = march.f
        if self.a_zero:
            n = f.T @ march.r @ f
            if lmin(sym(n)) >= -CERT_MARGIN * max(float(np.linalg.norm(n, 2)), 1e-300):
                return (
                    f"A = 0: G(t+s) = I + s FᵀRF with FᵀRF ⪰ 0 at t = {march.t:.6g}, never "
                    "singular (no blow-up at any depth)"
                )
        if self.wm_inf is not None and lmax(f.T @ self.wm_inf @ f) < 1.0 - CERT_MARGIN:
            return (
                f"tail certificate at t = {march.t:.6g}: λ_max(Fᵀ W₋(∞) F) < 1, so "
                "G(t+s) ⪰ I − Fᵀ W₋(∞) F ≻ 0 for all s ≥ 0 (no blow-up at any depth)"
            )
        if self.tail2 is not None:
            omega, lmin_om, kappa = self.tail2
            try:
                om_t = inv_spd(f @ f.T)
            except SolverError:
                return ""
            gap = kappa * float(np.linalg.norm(om_t - omega, 2))
            if gap < lmin_om * (1.0 - CERT_MARGIN):
                return (
                    f"tail certificate at t = {march.t:.6g}: −A is Hurwitz and "
                    f"κ(P)‖Σ(t)⁻¹ − Ω*‖ = {gap:.3g} < λ_min(Ω*) = {lmin_om:.3g} "
                    "(AᵀP + PA = I), so Ω(t+s) ≻ 0 for all s ≥ 0 (no blow-up at any depth)"
                )
        return ""


def riccati_rate(a: FloatArray, r: FloatArray, cov: FloatArray) -> float:
    """Rate scale of the Bernoulli field ``‖A‖₂ + ‖R‖₂‖Σ0‖₂`` (first step ``1/(2 rate)``)."""
    return float(np.linalg.norm(a, 2) + np.linalg.norm(r, 2) * np.linalg.norm(cov, 2))


class _Search:
    """The march loop: free steps until a bracket closes, then convergence to the first root."""

    def __init__(
        self, march: _March, tails: _Tails, horizon: float, rate: float, rtol: float
    ) -> None:
        self.march = march
        self.tails = tails
        self.horizon = horizon
        self.rtol = rtol
        self.h = 0.5 / rate
        self.t_up = math.inf
        self.steps = 0

    def outcome(
        self,
        status: Status,
        message: str,
        lower: float,
        *,
        upper: float = math.inf,
        t_star: float = math.inf,
        certified: bool = True,
        proved_never: bool = False,
    ) -> MarchOutcome:
        return MarchOutcome(
            status,
            message,
            lower,
            upper=upper,
            t_star=t_star,
            certified=certified,
            proved_never=proved_never,
            steps=self.steps,
            gramians=self.march.gramians,
        )

    def free_ladder(self) -> list[float] | MarchOutcome:
        """Trial steps before any singular point is known (or the horizon outcome)."""
        march = self.march
        if march.t >= self.horizon:
            return self.outcome(
                Status.SUCCESS,
                f"no blow-up on [0, {march.t:.6g}] (certified); the search stops at the "
                "horizon without a certificate for later depths",
                march.t,
                certified=False,
            )
        h_try = min(2.0 * self.h, self.horizon - march.t)
        return [h_try * 0.5**k for k in range(60)]

    def bracket_ladder(self) -> list[float] | MarchOutcome | None:
        """Trial steps below the known singular point ``t_up`` (or the blow-up outcome).

        ``None`` when rounding lost the bracket (the march then goes on freely).
        """
        march = self.march
        t_up = self.t_up
        s_up = t_up - march.t
        if march.g(s_up)[0] > 0:
            # Rounding flipped the sign at the far end after a restart (the root is within
            # rounding of it): probe a few ulps further out for a point that is singular.
            for k in (1e-13, 1e-12, 1e-11, 1e-10):
                if march.g(s_up + k * t_up)[0] <= 0:
                    t_up, s_up = t_up + k * t_up, s_up + k * t_up
                    self.t_up = t_up
                    break
            else:
                self.t_up = math.inf  # lost: march on, the next steps re-find the bracket
                return None
        if s_up <= self.rtol * t_up:
            s_root = march.root(s_up)
            return self.outcome(
                Status.BLOWUP,
                f"first singularity of G(t) at T* = {march.t + s_root:.15g}: [0, "
                f"{march.t:.15g}] is certified root-free and Σ is singular at or before "
                f"{t_up:.15g}",
                march.t,
                upper=t_up,
                t_star=march.t + s_root,
            )
        s_root = march.root(s_up)
        probe = min(s_root * (1 + 1e-13), s_up)
        if march.g(probe)[0] <= 0:
            self.t_up = march.t + probe
        deltas = (1e-9, 1e-6, 1e-4, 1e-2, 0.1, 0.3, 0.6, 0.9)
        ladder = [s_root * (1 - dl) for dl in deltas]
        return ladder + [s_root * 0.1 * 0.5**k for k in range(1, 50)]

    def climb(self, ladder: list[float], bracketed: bool) -> bool:
        """Accept the longest certified trial step; update the bracket. True if advanced."""
        march = self.march
        for s in ladder:
            gmin, gm, e = march.g(s)
            if gmin <= 0:
                self.t_up = min(self.t_up, march.t + s)
                if not bracketed:  # first bracket found: continue in bracket mode
                    return False
                continue
            if march.certified(s, gmin):
                march.accept(s, gm, e)
                self.h = s
                return True
        return False

    def run(self, max_steps: int) -> MarchOutcome:
        march = self.march
        for steps in range(1, max_steps + 1):
            self.steps = steps
            tail = self.tails.check(march)
            if tail:
                return self.outcome(Status.SUCCESS, tail, math.inf, proved_never=True)
            bracketed = not math.isinf(self.t_up)
            ladder = self.bracket_ladder() if bracketed else self.free_ladder()
            if ladder is None:
                continue
            if isinstance(ladder, MarchOutcome):
                return ladder
            t_up_before = self.t_up
            advanced = self.climb(ladder, bracketed)
            if not advanced and (math.isinf(self.t_up) or (bracketed and self.t_up >= t_up_before)):
                return self.outcome(
                    Status.FAILED,
                    f"blow-up search could not certify any step at t = {march.t:.6g} "
                    "(a tangential, non-crossing singularity of G(t)?)",
                    march.t,
                    upper=self.t_up,
                    certified=False,
                )
        return self.outcome(
            Status.BUDGET_EXHAUSTED,
            f"blow-up search reached max_steps = {max_steps} at t = {march.t:.6g}; "
            f"[0, {march.t:.6g}] is certified root-free",
            march.t,
            upper=self.t_up,
            certified=False,
        )


def march_blowup(
    a: FloatArray,
    r: FloatArray,
    cov: FloatArray,
    horizon: float,
    *,
    rtol: float,
    max_steps: int,
    budget: Budget,
) -> MarchOutcome:
    """First blow-up of ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ`` from ``Σ(0) = cov``, certified.

    Statuses: ``BLOWUP`` (with ``t_star`` and the bracket), ``SUCCESS`` (``proved_never`` when a
    certificate covers every depth, else no blow-up up to ``horizon``), ``BUDGET_EXHAUSTED``
    (``max_steps`` or the budget ran out; ``[0, lower]`` is certified) or ``FAILED`` (no step
    could be certified). Blow-up known to be certain ignores the horizon.
    """
    f0 = range_factor(cov)
    march = _March(a, r, f0, budget)
    if f0.shape[1] == 0:
        return MarchOutcome(
            Status.SUCCESS, "Σ0 = 0 is invariant: no blow-up", math.inf, proved_never=True
        )
    if not np.any(march.rm):
        return MarchOutcome(
            Status.SUCCESS,
            "R ⪰ 0: G(t) = I + Fᵀ W(t) F ⪰ I never becomes singular (no blow-up at any depth)",
            math.inf,
            proved_never=True,
        )
    search: _Search | None = None
    try:
        tails = _Tails(a, r, march, f0)
        rate = max(riccati_rate(a, r, cov), 1e-300)
        search = _Search(march, tails, math.inf if tails.certain else horizon, rate, rtol)
        return search.run(max_steps)
    except BudgetExhausted as exc:
        return MarchOutcome(
            Status.BUDGET_EXHAUSTED,
            f"blow-up search stopped at t = {march.t:.6g}: {exc.reason}; [0, {march.t:.6g}] is "
            "certified root-free",
            march.t,
            upper=math.inf if search is None else search.t_up,
            certified=False,
            steps=0 if search is None else search.steps,
            gramians=march.gramians,
        )
