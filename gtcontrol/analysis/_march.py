"""The certified blow-up march of the matrix Bernoulli equation (private; see blowup.py).

For ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ`` write ``Σ0 = F Fᵀ`` (F of full column rank) and
``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``; then ``Σ(t) = e^{At} F G(t)⁻¹ Fᵀ e^{Aᵀt}`` with
``G(t) = I + Fᵀ W(t) F``, so Σ blows up exactly when ``λ_min G(t)`` first reaches 0. The march
works in restarted coordinates (F replaced by a factor of Σ(t) at each accepted point) with steps
proved root-free by a Loewner bound or an interpolation bound, closes a bracket at the first
point proved singular and converges to the first root from below. Tail certificates prove that
no blow-up ever happens. Details: the docstring of :mod:`gtcontrol.analysis.blowup`.

Rounding is bounded, not ignored. At every accepted point the march holds, besides the computed
factor ``F``, a Loewner bound ``B ⪰ 0`` and a number ``θ`` such that the *exact* trajectory of the
given float data is ``Σ(t) = (F + Δ)(I + E)⁻¹(F + Δ)ᵀ`` with ``−B ⪯ E ⪯ B`` and ``‖Δ‖₂ ≤ θ``
(``Δ = 0`` for a start of full rank). In those coordinates the exact ``G`` differs from the
computed one by ``E`` plus terms bounded by :meth:`_March.step_error`, and a restart maps
``E ↦ L⁻¹ E L⁻ᵀ`` (``G = L Lᵀ``) *exactly*: ``B`` grows by ``1/λ_min G`` per step, which is the
sensitivity of the flow itself (near an unstable equilibrium it grows like the instability).
A step is certified only with ``B`` and the step's own rounding subtracted, a point is singular
only with them added, and the depth is accumulated with directed rounding. When rounding alone
keeps the bracket wider than requested, the bracket the data determine is returned and said so;
when no step can be certified any more, the march says that the float inputs do not determine
the answer at double precision beyond the certified depth. The rounding of each kernel is
estimated by the a-priori bounds ``γ_n = n·u`` of backward-stable dense algorithms (Higham,
*Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, §3.5, §10.2, §11.1), with
``n = 2d`` (the Van Loan block) and one such term per doubling of the Gramian.

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
    SIGN_RTOL,
    gramian,
    gramian_doublings,
    gramian_limit,
    lmax,
    lmin,
    lyapunov_certificate,
    lyapunov_error,
    sign_split,
    slycot_lyapunov,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_RTOL",
    "UNIT_ROUNDOFF",
    "MarchOutcome",
    "ModelError",
    "march_blowup",
]

#: Default relative width of the certified bracket around the first root (one home for
#: :func:`gtcontrol.blowup_analysis` and the blow-up search of :func:`gtcontrol.riccati_flow`).
DEFAULT_RTOL = 1e-12
#: Default cap on certified steps of the march (the same two callers).
DEFAULT_MAX_STEPS = 100_000
#: Unit roundoff of float64, ``u = 2⁻⁵³``.
UNIT_ROUNDOFF = float(np.finfo(np.float64).eps) / 2.0
#: Rounding bound ``λ_max B`` above which the bracket phase asks how much depth is still
#: certifiable (the same level at which a stall is called rounding's).
_ROUNDING_SIGNIFICANT = 1e-3
#: The bracket phase ends (rounding-limited) once the depth still certifiable below the root is
#: under this fraction of the bracket's width: further steps could narrow it by no more.
_GAIN_FRACTION = 0.01


def _down(x: float) -> float:
    """The float below ``x`` (a sum rounded to nearest, pushed to a lower bound)."""
    return math.nextafter(x, -math.inf)


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


@dataclass(frozen=True)
class ModelError:
    """How far the march's ``A`` and ``R`` may be from the layer's own float numbers.

    Attributes
    ----------
    a
        Bound on ``‖δA‖₂`` (an affine feed-forward folded into A is a rounded product).
    r
        Bound on ``‖δR‖₂`` (R is formed from the heads in floating point).
    v
        ``Σ_h 2‖V_h − v_h I‖₂ ‖B_h‖₂`` for heads within the Riccati tolerance of ``v_h I`` but
        not exactly equal to it: their field differs from the Bernoulli one by a term whose
        effect on ``Σ⁻¹`` is bounded by ``v · κ(Σ)``.
    r_sign
        Definiteness of the exact R of the layer's floats, when decided in rational arithmetic.
    """

    a: float = 0.0
    r: float = 0.0
    v: float = 0.0
    #: Definiteness of the layer's R computed exactly from its floats (``"pd"``, ``"psd"``,
    #: ``"indefinite"``), or ``""`` when not decided (large d, or heads not exactly ``v_h I``).
    r_sign: str = ""


@dataclass(frozen=True)
class MarchOutcome:
    """What the march found (turned into a :class:`~gtcontrol.BlowupResult` by blowup.py).

    ``rounding`` is the final bound ``λ_max B`` on the relative error of the exact trajectory in
    the march's coordinates; ``limited`` says that rounding, not ``rtol``, set the bracket's
    width (or stopped the march: then ``status`` is ``FAILED`` and ``undetermined`` is set).
    """

    status: Status
    message: str
    lower: float
    upper: float = math.inf
    t_star: float = math.inf
    certified: bool = True
    proved_never: bool = False
    steps: int = 0
    gramians: int = 0
    rounding: float = 0.0
    limited: bool = False
    undetermined: bool = False


def _growth(mu: float, s: float) -> float:
    """``∫₀ˢ e^{2μσ} dσ`` (bounds ``∫‖e^{Aσ}‖² dσ`` for the logarithmic norm ``μ`` of A)."""
    x = 2.0 * mu * s
    if abs(x) < 1e-8:
        return s * (1.0 + 0.5 * x + x * x)
    return math.expm1(min(x, 700.0)) / (2.0 * mu)


def _start(cov: FloatArray, gamma: float) -> tuple[FloatArray, FloatArray, float]:
    """``(F, B0, θ0)``: a range factor of Σ0 and the bounds of its rounding.

    Eigenvalues within the eigensolver's rounding (``4γ‖Σ0‖``) count as zero: the float matrix
    is then within rounding of a matrix of the kept rank, which is what the march follows.
    """
    w, u = np.linalg.eigh(sym(cov))
    top = float(np.max(np.abs(w))) if w.size else 0.0
    cut = 4.0 * gamma * top
    keep = w > cut
    if not np.any(keep):
        return np.zeros((cov.shape[0], 0)), np.zeros((0, 0)), 0.0
    wk = w[keep]
    f: FloatArray = u[:, keep] * np.sqrt(wk)
    eps = gamma * top
    # Σ0 = F(I + E0)⁻¹Fᵀ up to the eigensolver: |E0| ⪯ ‖δ‖(FᵀF)⁻¹ + (U's loss of orthogonality).
    b0 = np.diag(eps / wk) + 2.0 * gamma * np.eye(wk.size)
    theta = 0.0
    if wk.size < w.size:
        dropped = float(np.max(np.abs(w[~keep])))
        gap = max(float(wk[0]) - dropped, float(wk[0]) * 0.5)
        theta = math.sqrt(float(wk[-1])) * (eps + dropped) / gap  # Davis–Kahan angle × ‖F‖
    return f, b0, theta


class _March:
    """State of the certified march: depth, a factor ``F`` of Σ(t) and its rounding bounds."""

    def __init__(
        self, a: FloatArray, r: FloatArray, cov: FloatArray, budget: Budget, model: ModelError
    ) -> None:
        d = int(a.shape[0])
        self.a = a
        self.r = r
        self.gamma = 2.0 * d * UNIT_ROUNDOFF
        self.model = model
        self.rp, self.rm = sign_split(r)
        na = float(np.linalg.norm(a, 2))
        nr = float(np.linalg.norm(r, 2))
        self.norm_r = nr * (1.0 + self.gamma) + model.r
        self.nq = (
            float(np.linalg.norm(a.T @ r + r @ a, 2))
            + 2.0 * self.gamma * na * nr
            + 2.0 * (model.a * (nr + model.r) + na * model.r)
        )
        w_sym = np.linalg.eigvalsh(sym(a))
        slack = self.gamma * na + model.a
        self.mu = float(w_sym[-1]) + slack
        self.mu_low = float(w_sym[0]) - slack
        # R ⪰ R₊ − R₋ − ε_split I: the eigensolver's rounding and the split's cut at SIGN_RTOL.
        self.eps_split = (SIGN_RTOL + self.gamma) * nr + model.r
        self.f, self.err, self.theta = _start(cov, self.gamma)
        self.full = self.f.shape[1] == d
        self.t = 0.0
        self.gramians = 0
        self.eye = np.eye(self.f.shape[1])
        self.budget = budget
        self._refresh()

    def _refresh(self) -> None:
        """Quantities of the current coordinates used by every trial step."""
        sv = np.linalg.svd(self.f, compute_uv=False) if self.f.size else np.zeros(1)
        self.nf = float(sv[0]) if sv.size else 0.0
        self.kf = float(sv[0] / sv[-1]) if sv.size and sv[-1] > 0 else math.inf
        self.bmax = lmax(self.err)

    # ---------------------------------------------------------------- one trial step
    def g(self, s: float) -> tuple[float, FloatArray, FloatArray]:
        """``(λ_min G(s), G(s), e^{As})`` in the current coordinates (computed)."""
        self.budget.check()
        e, w = gramian(self.a, self.r, s)
        self.gramians += 1
        gm = sym(self.eye + self.f.T @ w @ self.f)
        return lmin(gm), gm, e

    def step_error(self, s: float, gmin: float) -> float:
        """Bound on ``G_exact(σ) − G(σ) − E`` over ``σ ∈ [0, s]`` in the current coordinates.

        The rounding of ``G(s)`` and of its eigenvalues, the factor's distance ``θ`` from the
        exact range, and the model errors of A and R over the step. ``gmin`` (the computed
        ``λ_min G(s)``) only enters the estimate of ``κ(Σ)`` for heads near ``v_h I``.
        """
        k = gramian_doublings(self.a, s)
        gk = self.gamma * (k + 4)
        growth = _growth(self.mu, s)
        wb = self.norm_r * growth
        nf2 = self.nf**2
        out = gk * (1.0 + nf2 * wb + self.bmax)
        out += (2.0 * self.theta * self.nf + self.theta**2) * wb
        m = self.model
        if m.r or m.v or m.a:
            g_top = 1.0 + nf2 * wb + self.bmax
            spread = math.exp(min(2.0 * (self.mu - self.mu_low) * s, 700.0))
            kappa = spread * self.kf**2 * g_top / max(min(gmin, 1.0) * 0.5, 1e-300)
            out += (self.nf + self.theta) ** 2 * growth * (m.r + m.v * kappa)
            if m.a:
                out += 2.0 * m.a * self.kf * math.sqrt(spread) * s * g_top
        return out * (1.0 + 8.0 * self.gamma)

    def certified(self, s: float, gmin: float, gm: FloatArray) -> bool:
        """Is ``[t, t+s]`` proved root-free for the exact trajectory?

        Chord bound: ``λ_min`` is concave, the exact ``G`` at the far end is at least
        ``c = λ_min(G(s) − B) − D`` and at the near end ``I + E``, and ``G'' ⪯ M`` (the
        interpolation error at ``σ`` is ``σ(s − σ)M/2``). With ``I + E ⪰ (1 − λ_max B)I`` the
        bound is ``min(1 − λ_max B, c) − s²M/8 > 0``; with only ``I + E ≻ 0`` (the exact Σ(t)
        has full rank on its range, whatever B) it is ``c > s²M/2``, which keeps directions
        where rounding left Σ's scale unknown but G grows (Σ collapsing there) certifiable.
        """
        dd = self.step_error(s, gmin)
        far = lmin(gm - self.err) - dd
        if far <= 0.0:
            return False
        m2 = (
            (self.nf + self.theta) ** 2
            * self.nq
            * math.exp(min(2.0 * max(self.mu, 0.0) * s, 700.0))
            * (1.0 + 4.0 * self.gamma)
        )
        if self.bmax < 1.0 and min(1.0 - self.bmax, far) - s * s * m2 / 8.0 > 0.0:
            return True
        if far - s * s * m2 / 2.0 > 0.0:
            return True
        if self.bmax >= 1.0:
            return False
        _, wm = gramian(self.a, self.rm, s)
        self.gramians += 1
        extra = self.nf**2 * (self.eps_split + self.gamma * self.norm_r) * _growth(self.mu, s)
        return lmin(self.eye - self.err - self.f.T @ wm @ self.f) > dd + extra

    def singular(self, s: float, gmin: float, gm: FloatArray) -> bool:
        """Is the exact Σ proved singular (or past blow-up) at ``t + s``?"""
        if gmin > 0.0:
            return False
        return lmin(gm + self.err) + self.step_error(s, gmin) <= 0.0

    def accept(self, s: float, gmin: float, gm: FloatArray, e: FloatArray) -> bool:
        """Restart at ``t + s`` (``Σ = F'F'ᵀ``, ``F' = e^{As} F L⁻ᵀ``); False if G is not SPD."""
        try:
            low = np.linalg.cholesky(gm)
        except np.linalg.LinAlgError:
            return False
        dd = self.step_error(s, gmin)
        r = self.eye.shape[0]
        half = sla.solve_triangular(low, self.err + dd * self.eye, lower=True)
        err = sym(sla.solve_triangular(low, half.T, lower=True))
        g_top = lmax(gm)
        err += self.gamma * (r + 2) * (g_top / gmin) * self.eye  # Cholesky's backward error
        f_new = sla.solve_triangular(low, (e @ self.f).T, lower=True).T
        k = gramian_doublings(self.a, s)
        e_top = math.exp(min(self.mu * s, 700.0))
        dfac = (
            self.gamma * (k + 3) * e_top * self.nf / math.sqrt(gmin) * (1 + math.sqrt(g_top / gmin))
        )
        if self.full:
            # F'(I + X) with ‖X‖ ≤ ‖F'⁺‖‖δF'‖: E grows by at most 2‖X‖ + ‖X‖² (the error of a
            # large column reaches a small direction only through its cross term, √κ(Σ))
            sv = np.linalg.svd(f_new, compute_uv=False)
            x = dfac / float(sv[-1]) if sv[-1] > 0 else math.inf
            err += (2.0 * x + x * x) * (1.0 + lmax(err)) * self.eye
        else:
            self.theta = e_top * self.theta / math.sqrt(gmin) + dfac
        self.err = sym(err) * (1.0 + 8.0 * self.gamma)
        self.f = f_new
        self.t = _down(self.t + s)
        self._refresh()
        return True

    def root(self, s_up: float) -> float:
        """The first root of the computed ``λ_min G`` in ``(0, s_up]`` (Brent, to rounding)."""

        def fn(s: float) -> float:
            return self.g(s)[0]

        return float(brentq(fn, 0.0, s_up, xtol=1e-300 + 1e-16 * s_up, rtol=1e-15, maxiter=200))

    def rounding_at(self, s_root: float) -> float:
        """``vᵀBv`` for ``v`` the null direction of ``G(s_root)``: the cap on later steps.

        A step to ``s`` needs ``G(s) − B ≻ 0``, so ``vᵀG(s)v > vᵀBv``, and restarts keep that
        condition (``G`` and ``B`` map by the same congruence). ``vᵀG(s)v`` falls from 1 to 0
        on ``[0, s_root]`` (linearly for ``A = 0``): no certified depth reaches beyond about
        ``(1 − vᵀBv)·s_root``.
        """
        _, gm, _ = self.g(s_root)
        _, u = np.linalg.eigh(gm)
        v = u[:, 0]
        return float(v @ self.err @ v)


class _Tails:
    """Certificates that no blow-up happens after the current depth, and 'certain' verdicts.

    Each holds for the exact trajectory: the Lyapunov solves carry residual-based error bounds
    (:func:`~gtcontrol.analysis._core.lyapunov_error`) and the march's ``B``, ``θ`` enter.
    """

    def __init__(self, a: FloatArray, r: FloatArray, march: _March) -> None:
        self.a_zero = not np.any(a)
        self.model = march.model
        self.exact_model = not (march.model.a or march.model.v)
        self.hurwitz = lyapunov_certificate(a, -1.0)
        self.anti_hurwitz = lyapunov_certificate(a, 1.0)
        self.wm_inf: tuple[FloatArray, float] | None = None
        self.tail2: tuple[FloatArray, float, float, float] | None = None
        self.certain = ""
        if not self.exact_model:
            return
        self._negative_gramian(a, march)
        if march.full and self.anti_hurwitz is not None:
            self._precision_tail(a, r, march)
        if self.hurwitz is not None:
            self._gramian_tail(a, r, march)

    def _negative_gramian(self, a: FloatArray, march: _March) -> None:
        """``W₋(∞)`` of the rigorous negative part of R, with its error, when it converges."""
        if self.hurwitz is not None:
            _, p_norm = self.hurwitz
            try:
                w, _, _ = slycot_lyapunov(a, -march.rm)
            except SolverError:
                return
            err = lyapunov_error(a, w, -march.rm, p_norm) + march.eps_split * p_norm
            self.wm_inf = (w, err)
            return
        # A not Hurwitz: the Gramian must converge on the observable subspace of R₋ plus every
        # direction whose sign rounding cannot decide (weight ε_split), found at rounding level.
        wr, ur = np.linalg.eigh(march.r)
        unsure = ur[:, wr <= march.eps_split]
        rm_rig = march.rm + march.eps_split * (unsure @ unsure.T)
        w_lim = gramian_limit(a, rm_rig, rtol=march.gamma)
        if w_lim is not None:
            self.wm_inf = (w_lim, 64.0 * march.gamma * float(np.linalg.norm(w_lim, 2)))

    def _precision_tail(self, a: FloatArray, r: FloatArray, march: _March) -> None:
        assert self.anti_hurwitz is not None
        p, p_norm = self.anti_hurwitz
        try:
            omega, _, _ = slycot_lyapunov(a, r)
        except SolverError:
            return
        err = lyapunov_error(a, omega, r, p_norm) + self.model.r * p_norm
        w_om = np.linalg.eigvalsh(omega)
        w_p = np.linalg.eigvalsh(p)
        kappa = float(w_p[-1] / w_p[0]) * (1.0 + 8.0 * march.gamma)
        if w_om[0] - err > 0:
            self.tail2 = (omega, float(w_om[0]) - err, kappa, err)
        elif w_om[0] + err < 0:
            self.certain = (
                "−A is Hurwitz and the Lyapunov solution Ω* of AᵀΩ + ΩA = R has the "
                f"eigenvalue {w_om[0]:.6g} < 0 beyond its rounding bound {err:.3g}: Ω(t) → Ω* "
                "must cross singularity"
            )

    def _gramian_tail(self, a: FloatArray, r: FloatArray, march: _March) -> None:
        # G(t) → G(∞) = I + Fᵀ W(∞) F with AᵀW(∞) + W(∞)A = −R.
        assert self.hurwitz is not None
        _, p_norm = self.hurwitz
        try:
            w_inf, _, _ = slycot_lyapunov(a, -r)
        except SolverError:
            return
        err_w = lyapunov_error(a, w_inf, -r, p_norm) + self.model.r * p_norm
        f = march.f
        g_inf = sym(np.eye(f.shape[1]) + f.T @ w_inf @ f + march.err)
        bound = (march.nf + march.theta) ** 2 * err_w + (
            2.0 * march.theta * march.nf + march.theta**2
        ) * float(np.linalg.norm(w_inf, 2))
        top = lmin(g_inf) + march.gamma * (1.0 + float(np.linalg.norm(g_inf, 2))) + bound
        if top < 0:
            self.certain = (
                "A is Hurwitz and G(∞) = I + Fᵀ W(∞) F has the eigenvalue "
                f"{lmin(g_inf):.6g} < 0 beyond its rounding bound: G(t) → G(∞) must cross "
                "singularity"
            )

    def check(self, march: _March) -> str:
        """A certificate (in words) that no blow-up follows ``march.t``, or ``""``."""
        if march.bmax >= 1.0 or not self.exact_model:
            return ""
        f = march.f
        theta, nf, r_top = march.theta, march.nf, march.norm_r
        if self.a_zero:
            n = sym(f.T @ march.r @ f)
            err_n = march.gamma * nf**2 * r_top + (2.0 * theta * nf + theta**2) * r_top
            err_n += (nf + theta) ** 2 * self.model.r
            if lmin(n) >= err_n:
                return (
                    f"A = 0: G(t+s) = I + E + s FᵀRF with FᵀRF ⪰ 0 beyond rounding at t = "
                    f"{march.t:.6g}, never singular (no blow-up at any depth)"
                )
        if self.wm_inf is not None:
            w, err_w = self.wm_inf
            top = lmax(f.T @ w @ f + march.err)
            top += (nf + theta) ** 2 * err_w + (2.0 * theta * nf + theta**2) * float(
                np.linalg.norm(w, 2)
            )
            top += march.gamma * (1.0 + top)
            if top < 1.0:
                return (
                    f"tail certificate at t = {march.t:.6g}: λ_max(Fᵀ W₋(∞) F + B) < 1 with "
                    "rounding bounded, so G(t+s) ≻ 0 for all s ≥ 0 (no blow-up at any depth)"
                )
        if self.tail2 is not None:
            return self._precision_check(march)
        return ""

    def _precision_check(self, march: _March) -> str:
        assert self.tail2 is not None
        omega, lmin_om, kappa, _ = self.tail2
        f = march.f
        try:
            finv = np.linalg.inv(f)
        except np.linalg.LinAlgError:
            return ""
        om_t = sym(finv.T @ finv)
        # Ω_exact(t) = F⁻ᵀ(I + E)F⁻¹: the march's bound plus the inversion's rounding
        n_om = float(np.linalg.norm(om_t, 2))
        err_t = march.bmax * n_om + march.gamma * march.kf**2 * n_om
        gap = kappa * (float(np.linalg.norm(om_t - omega, 2)) + err_t + self.tail2[3])
        if gap < lmin_om:
            return (
                f"tail certificate at t = {march.t:.6g}: −A is Hurwitz and "
                f"κ(P)‖Σ(t)⁻¹ − Ω*‖ = {gap:.3g} < λ_min(Ω*) = {lmin_om:.3g} with rounding "
                "bounded (AᵀP + PA ≻ 0), so Ω(t+s) ≻ 0 for all s ≥ 0 (no blow-up at any depth)"
            )
        return ""


def riccati_rate(a: FloatArray, r: FloatArray, cov: FloatArray) -> float:
    """Rate scale of the Bernoulli field ``‖A‖₂ + ‖R‖₂‖Σ0‖₂`` (first step ``1/(2 rate)``)."""
    return float(np.linalg.norm(a, 2) + np.linalg.norm(r, 2) * np.linalg.norm(cov, 2))


class _Search:
    """The march loop: free steps until a point is proved singular, then the first root."""

    def __init__(
        self, march: _March, tails: _Tails, horizon: float, rate: float, rtol: float
    ) -> None:
        self.march = march
        self.tails = tails
        self.horizon = horizon
        self.rtol = rtol
        self.h = 0.5 / rate
        self.t_up = math.inf
        self.s_suspect = math.inf
        self.steps = 0

    def outcome(self, status: Status, message: str, lower: float, **kw: object) -> MarchOutcome:
        return MarchOutcome(
            status,
            message,
            lower,
            steps=self.steps,
            gramians=self.march.gramians,
            rounding=self.march.bmax,
            **kw,  # type: ignore[arg-type]
        )

    # ------------------------------------------------------------------ free steps
    def free_ladder(self) -> list[float] | MarchOutcome:
        """Trial steps before any singular point is known (or the horizon outcome)."""
        march = self.march
        # the depth is a rounded-down sum: within rounding of the horizon counts as reaching it
        if march.t >= self.horizon * (1.0 - 1e-13):
            return self.outcome(
                Status.SUCCESS,
                f"no blow-up on [0, {march.t:.6g}] (certified); the search stops at the "
                "horizon without a certificate for later depths",
                march.t,
                certified=False,
            )
        h_try = min(2.0 * self.h, self.horizon - march.t)
        return [h_try * 0.5**k for k in range(60)]

    def climb_free(self, ladder: list[float]) -> bool:
        """Accept the longest certified step, or find a point proved singular. True if either."""
        march = self.march
        for s in ladder:
            if _down(march.t + s) <= march.t:
                return False  # below the depth's resolution: no rung left can advance it
            gmin, gm, e = march.g(s)
            if gmin <= 0.0:
                if march.singular(s, gmin, gm):
                    self.t_up = _up(march.t + s)
                    return True
                self.s_suspect = min(self.s_suspect, s)
                continue
            if march.certified(s, gmin, gm) and march.accept(s, gmin, gm, e):
                self.h = s
                self.s_suspect = math.inf
                return True
        return False

    def probe_beyond(self) -> bool:
        """After a stall below a suspect point: look further out for a point proved singular."""
        march = self.march
        base = self.s_suspect if math.isfinite(self.s_suspect) else self.h
        for factor in (1.0, 1.001, 1.01, 1.1, 1.5, 2.0, 4.0, 16.0):
            s = base * factor
            if march.t + s > 4.0 * max(self.horizon, march.t + base) and math.isfinite(
                self.horizon
            ):
                break
            gmin, gm, _ = march.g(s)
            if march.singular(s, gmin, gm):
                self.t_up = _up(march.t + s)
                return True
        return False

    # ------------------------------------------------------------------ bracket steps
    def bracket_ladder(self) -> list[float] | MarchOutcome:
        """Trial steps below the proved singular point ``t_up`` (or the blow-up outcome).

        Once rounding is significant (``λ_max B > 10⁻³``) the rounding ``b`` in the null
        direction of G at the computed root caps what is still certifiable (about
        ``(1 − b)·s_root``, :meth:`_March.rounding_at`): the phase ends, rounding-limited, when
        that is under 1 % of the bracket's width, and the steps and probes that the cap rules
        out are not tried.
        """
        march = self.march
        t_up = self.t_up
        s_up = t_up - march.t
        if s_up <= self.rtol * t_up:
            return self.blowup_outcome(limited=False)
        gmin_up, _, _ = march.g(s_up)
        s_root = march.root(s_up) if gmin_up <= 0.0 else s_up
        b_root = march.rounding_at(s_root) if march.bmax > _ROUNDING_SIGNIFICANT else None
        self.tighten(s_root, s_up, b_root or 0.0)
        gap = self.t_up - march.t
        if gap <= self.rtol * self.t_up:
            return self.blowup_outcome(limited=False)
        deltas: tuple[float, ...] = (1e-9, 1e-6, 1e-4, 1e-2, 0.1, 0.3, 0.6, 0.9)
        if b_root is not None:
            if (1.0 - b_root) * s_root <= _GAIN_FRACTION * gap:
                return self.blowup_outcome(limited=True)
            # just below the cap first; the rungs above it cannot be certified
            near = {b_root + (1.0 - b_root) * x for x in (1e-3, 1e-2, 0.1)}
            deltas = tuple(sorted(near | {dl for dl in deltas if dl > b_root}))
        return [s_root * (1 - dl) for dl in deltas] + [s_root * 0.1 * 0.5**k for k in range(1, 50)]

    def tighten(self, s_root: float, s_up: float, b_root: float) -> None:
        """Move the proved singular point down to just above the computed root.

        A probe ``dl`` past the root is proved singular only where G's fall there (about
        ``dl`` in the null direction, 16× that allowed) outweighs the rounding ``b_root``.
        """
        march = self.march
        for dl in (1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2):
            probe = s_root * (1.0 + dl)
            if probe >= s_up:
                break
            if 16.0 * dl <= b_root:
                continue
            gmin, gm, _ = march.g(probe)
            if march.singular(probe, gmin, gm):
                self.t_up = _up(march.t + probe)
                break

    def climb_bracket(self, ladder: list[float]) -> bool:
        march = self.march
        for s in ladder:
            if _down(march.t + s) <= march.t:
                return False  # rounding-limited: the rungs left cannot advance the depth
            gmin, gm, e = march.g(s)
            if gmin <= 0.0:
                if march.singular(s, gmin, gm):
                    self.t_up = min(self.t_up, _up(march.t + s))
                continue
            if march.certified(s, gmin, gm) and march.accept(s, gmin, gm, e):
                self.h = s
                return True
        return False

    def blowup_outcome(self, *, limited: bool) -> MarchOutcome:
        march = self.march
        s_up = self.t_up - march.t
        gmin_up = march.g(s_up)[0] if s_up > 0 else -1.0
        s_root = march.root(s_up) if gmin_up <= 0.0 and s_up > 0 else 0.5 * s_up
        t_star = min(max(march.t + s_root, march.t), self.t_up)
        head = (
            f"first singularity of G(t) at T* = {t_star:.15g}: [0, {march.t:.15g}] is certified "
            f"root-free and Σ is singular at or before {self.t_up:.15g}"
        )
        if limited:
            head += (
                f"; rounding bounds the bracket: the float inputs determine T* only to "
                f"[{march.t:.10g}, {self.t_up:.10g}] at double precision (relative error bound "
                f"{march.bmax:.2g} of the trajectory there), not to rtol = {self.rtol:g}"
            )
        return self.outcome(
            Status.BLOWUP,
            head,
            march.t,
            upper=self.t_up,
            t_star=t_star,
            limited=limited,
        )

    def stalled(self) -> MarchOutcome:
        """No step can be certified and no point is proved singular."""
        march = self.march
        if march.bmax > _ROUNDING_SIGNIFICANT or math.isfinite(self.s_suspect):
            return self.outcome(
                Status.FAILED,
                f"undetermined at double precision after t = {march.t:.15g}: this search bounds "
                f"the exact trajectory of the float inputs there only to a relative error of "
                f"{march.bmax:.2g} (rounding amplified by the flow, e.g. a start within rounding "
                "of an unstable equilibrium, where the floats do not decide; or a bound "
                "loosened by a very ill-conditioned Σ near a blow-up, where simulate() may "
                "still locate it, uncertified), so no later step can be certified root-free "
                f"and no later point proved singular; [0, {march.t:.15g}] is certified root-free",
                march.t,
                certified=False,
                limited=True,
                undetermined=True,
            )
        return self.outcome(
            Status.FAILED,
            f"blow-up search could not certify any step at t = {march.t:.6g} "
            "(a tangential, non-crossing singularity of G(t)?)",
            march.t,
            certified=False,
        )

    def run(self, max_steps: int) -> MarchOutcome:
        for steps in range(1, max_steps + 1):
            self.steps = steps
            if math.isinf(self.t_up):
                tail = self.tails.check(self.march)
                if tail:
                    return self.outcome(Status.SUCCESS, tail, math.inf, proved_never=True)
                ladder = self.free_ladder()
                if isinstance(ladder, MarchOutcome):
                    return ladder
                if not self.climb_free(ladder) and not self.probe_beyond():
                    return self.stalled()
                continue
            bracket = self.bracket_ladder()
            if isinstance(bracket, MarchOutcome):
                return bracket
            if not self.climb_bracket(bracket):
                return self.blowup_outcome(limited=True)
        return self.outcome(
            Status.BUDGET_EXHAUSTED,
            f"blow-up search reached max_steps = {max_steps} at t = {self.march.t:.6g}; "
            f"[0, {self.march.t:.6g}] is certified root-free",
            self.march.t,
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
    model: ModelError | None = None,
) -> MarchOutcome:
    """First blow-up of ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ`` from ``Σ(0) = cov``, certified.

    Statuses: ``BLOWUP`` (with ``t_star`` and the bracket; ``limited`` when rounding, not
    ``rtol``, sets its width), ``SUCCESS`` (``proved_never`` when a certificate covers every
    depth, else no blow-up up to ``horizon``), ``BUDGET_EXHAUSTED`` (``max_steps`` or the budget
    ran out; ``[0, lower]`` is certified) or ``FAILED`` (no step could be certified; with
    ``undetermined`` when rounding amplified by the flow is the reason). Blow-up known to be
    certain ignores the horizon. ``model`` bounds the distance of ``a`` and ``r`` from the
    layer's own floats (:class:`ModelError`; zero: they are the layer's numbers).
    """
    march = _March(a, r, cov, budget, model or ModelError())
    if march.f.shape[1] == 0:
        return MarchOutcome(
            Status.SUCCESS, "Σ0 = 0 is invariant: no blow-up", math.inf, proved_never=True
        )
    exact_psd = march.model.r_sign in ("pd", "psd")
    if exact_psd or (not np.any(march.rm) and float(np.linalg.eigvalsh(r)[0]) > march.eps_split):
        how = (
            "exactly (rational arithmetic on the layer's floats)"
            if exact_psd
            else "beyond rounding"
        )
        return MarchOutcome(
            Status.SUCCESS,
            f"R ⪰ 0 {how}: G(t) = I + Fᵀ W(t) F ⪰ I never becomes singular (no blow-up at any "
            "depth)",
            math.inf,
            proved_never=True,
        )
    search: _Search | None = None
    try:
        tails = _Tails(a, r, march)
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
            rounding=march.bmax,
        )
