"""Planted equilibria of the Riccati class and an independent extended-precision reference.

A planted case fixes an SPD ``S`` and a Riccati-class layer (one head ``V = vI``) whose float
``A`` is built so that ``S`` is an equilibrium of ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ`` up to the rounding
of that construction: ``A = (S R S / 2 + K) S⁻¹`` with ``K`` skew and ``R = −v(B + Bᵀ)``. Starts
lie exactly on ``S`` (as floats), within rounding of it, or at a chosen relative distance.

The reference never uses gtcontrol's numerics: on the very float inputs (``A``, ``R``, ``Σ0``)
it works in ``mpmath`` at 50 digits with ``M(t) = Σ0⁻¹ + W(t)``, ``W(t) = ∫₀ᵗ e^{Aᵀs} R e^{As} ds``
(from the eigen-decomposition of A), which is singular exactly when ``Σ(t)`` blows up
(``Σ(t)⁻¹ = e^{−Aᵀt} M(t) e^{−At}``). The first sign change of ``λ_min M(t)`` on a fine grid,
refined by bisection, is the blow-up time ``T*`` (``inf`` when there is none on the scanned
depths, which run until the exponentials have settled by 40 e-folds).

Used by tests/analysis/test_certificates_precision.py and benchmarks/verify_certificates.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import mpmath as mp
import numpy as np

#: Digits of the reference arithmetic.
DPS = 50


@dataclass(frozen=True)
class Planted:
    """One generated case: the layer's float data, the planted equilibrium and a start."""

    name: str
    A: np.ndarray
    B: np.ndarray
    v: float
    S: np.ndarray
    start: np.ndarray
    #: Relative distance of the start from S (0 for S itself, "ulp" starts ~1e-16).
    distance: float
    family: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def R(self) -> np.ndarray:
        return -self.v * (self.B + self.B.T)

    def layer(self) -> Any:
        import gtcontrol as gt

        return gt.Layer(A=self.A, V=self.v, B=self.B)


def _spd(rng: np.random.Generator, d: int, lo: float = 0.3, hi: float = 2.0) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(lo, hi, d)) @ q.T


def planted_case(seed: int, d: int, family: str, distance: float) -> Planted:
    """A planted case: ``family`` in unstable / stable / saddle; a start at ``distance``.

    ``unstable``: ``v > 0`` and ``B`` SPD (``R ≺ 0``), so A is Hurwitz and S repels (starts on
    one side blow up, on the other collapse). ``stable``: ``v < 0`` (``R ≻ 0``), −A Hurwitz and
    S attracts globally. ``saddle``: ``R`` indefinite. ``distance`` 0 starts on S itself, a
    negative distance moves the start towards smaller covariances, ``nan`` gives a random SPD.
    """
    rng = np.random.default_rng(seed)
    S = _spd(rng, d)
    v = float(rng.uniform(0.3, 1.5))
    if family == "unstable":
        B = _spd(rng, d)
    elif family == "stable":
        B = _spd(rng, d)
        v = -v
    else:
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        signs = np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
        B = (q * (signs * rng.uniform(0.3, 2.0, d))) @ q.T
    R = -v * (B + B.T)
    K = rng.standard_normal((d, d))
    K = 0.5 * (K - K.T)
    A = np.linalg.solve(S, (S @ R @ S / 2 + K).T).T
    if math.isnan(distance):
        start = _spd(rng, d)
    elif distance == 0:
        start = S.copy()
    else:
        P = rng.standard_normal((d, d))
        P = P @ P.T / d + 0.1 * np.eye(d)
        P *= np.linalg.norm(S, 2) / np.linalg.norm(P, 2)
        start = S + distance * P
        start = 0.5 * (start + start.T)
    name = f"{family}-d{d}-seed{seed}-dist{distance:g}"
    return Planted(name, A, B, v, S, start, abs(distance), family)


def default_cases(n: int, seed: int = 0) -> list[Planted]:
    """``n`` planted cases over d = 2…6, the three families and starts on and near S."""
    distances = (0.0, 1e-15, -1e-15, 1e-12, -1e-12, 1e-9, -1e-9, 1e-6, -1e-6, 1e-3, -1e-3, 0.3)
    families = ("unstable", "stable", "saddle")
    out = []
    for i in range(n):
        d = 2 + i % 5
        fam = families[(i // 5) % 3]
        dist = distances[(i // 15) % len(distances)] if i % 17 else math.nan
        out.append(planted_case(seed * 100_003 + i, d, fam, dist))
    return out


# ================================================================== the reference (mpmath)
class Reference:
    """Extended-precision (50 digits) blow-up analysis of ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``, Σ0 ≻ 0.

    Works on the float inputs exactly (every float converts to mpmath without rounding). With
    ``A = VΛV⁻¹`` and ``Ω*`` the solution of ``AᵀΩ + ΩA = R`` (``VᵀΩ*V = [C_ij/(λ_i + λ_j)]``,
    ``C = VᵀRV``), ``Ω(t) = Σ(t)⁻¹ = Ω* + e^{−Aᵀt}(Ω0 − Ω*)e^{−At}``. The Hermitian congruence
    ``N(t) = D Vᴴ Ω(t) V D`` with ``D = diag(min(1, |e^{λ_i t}|))`` has the inertia of Ω(t)
    (Sylvester) and entries of moderate size at every depth, so the sign of ``λ_min N(t)``
    decides singularity without the dynamic range of ``e^{At}``.
    """

    def __init__(self, A: np.ndarray, R: np.ndarray, cov0: np.ndarray) -> None:
        mp.mp.dps = DPS
        d = A.shape[0]
        self.d = d
        Am = mp.matrix(A.tolist())
        Rm = mp.matrix(R.tolist())
        omega0 = mp.matrix(cov0.tolist()) ** -1
        lam, V = mp.eig(Am)
        self.lam = lam
        Vinv = V**-1
        C = V.T * Rm * V
        Y = mp.matrix(d, d)
        for i in range(d):
            for j in range(d):
                s = lam[i] + lam[j]
                if abs(s) < mp.mpf(10) ** -12:
                    raise ValueError("the Lyapunov operator of A is (nearly) singular")
                Y[i, j] = C[i, j] / s
        omega_star = Vinv.T * Y * Vinv
        omega_star = mp.matrix([[mp.re(omega_star[i, j]) for j in range(d)] for i in range(d)])
        self.omega_star = (omega_star + omega_star.T) / 2
        VH = V.transpose_conj()
        self.K = VH * self.omega_star * V
        self.G0 = VH * (omega0 - self.omega_star) * V
        self.min_rate = min(abs(mp.re(x)) for x in lam)

    def n(self, t: Any) -> Any:
        """``N(t)``: Hermitian, with the inertia of ``Σ(t)⁻¹``."""
        d = self.d
        out = mp.matrix(d, d)
        e = [mp.exp(-self.lam[i] * t) for i in range(d)]
        dd = [min(mp.mpf(1), abs(mp.exp(self.lam[i] * t))) for i in range(d)]
        for i in range(d):
            for j in range(d):
                out[i, j] = dd[i] * dd[j] * (self.K[i, j] + mp.conj(e[i]) * self.G0[i, j] * e[j])
        return (out + out.transpose_conj()) / 2

    def lmin(self, t: Any) -> Any:
        """``λ_min N(t) / ‖N(t)‖`` (scale-free; its sign decides)."""
        ev = mp.eighe(self.n(t), eigvals_only=True)
        top = max(abs(x) for x in ev)
        return min(ev) / top if top else mp.mpf(0)

    def horizon(self) -> float:
        """Depth after which no sign changes any more: 60 e-folds of the slowest mode."""
        slow = self.min_rate if self.min_rate > mp.mpf(10) ** -6 else mp.mpf(10) ** -6
        return float(min(60 / slow, 1e4))

    def first_root(self, horizon: float | None = None, n_grid: int = 600) -> float:
        """The first ``t`` with ``λ_min Ω(t) = 0`` (``inf`` if none up to ``horizon``)."""
        hz = self.horizon() if horizon is None else horizon
        # A linear grid plus a geometric one near 0.
        ts = sorted(
            {hz * (k / n_grid) for k in range(1, n_grid + 1)}
            | {hz * 10.0 ** (-k / 20) for k in range(1, 200)}
        )
        prev = mp.mpf(0)
        for t in ts:
            if self.lmin(mp.mpf(t)) <= 0:
                lo, hi = mp.mpf(prev), mp.mpf(t)
                for _ in range(90):
                    mid = (lo + hi) / 2
                    lo, hi = (mid, hi) if self.lmin(mid) > 0 else (lo, mid)
                return float(hi)
            prev = t
        return math.inf


def exact_blowup_time(case: Planted, horizon: float | None = None) -> float:
    """The independent extended-precision ``T*`` of a planted case (``inf``: none)."""
    return Reference(case.A, case.R, case.start).first_root(horizon)


# ================================================================== checking gtcontrol's claims
@dataclass(frozen=True)
class Check:
    """What gtcontrol claimed for a planted case and whether the reference contradicts it."""

    case: Planted
    exact_t_star: float
    blowup: Any
    regime: Any
    contradicted: str  # "" when every claim holds

    @property
    def certified(self) -> bool:
        """Whether the answer is decided with a certificate (a blow-up bracket or a regime)."""
        return bool(
            (self.blowup.certified and self.blowup.status.value in ("blowup", "success"))
            or self.regime.certificate in ("exact", "global")
        )


def check_case(case: Planted) -> Check:
    """Run ``blowup_analysis`` and ``analyze`` on a case and check every claim in 50 digits.

    Claims checked: a certified blow-up bracket contains the exact ``T*`` (no slack); a proved
    "never" has no exact root; any ``lower`` is root-free; an exact/global regime of kind
    ``blowup`` has the exact ``T*`` in its bracket and any other exact/global regime has no
    exact root; an exact/global limit agrees with the exact ``Ω*⁻¹`` when −A is Hurwitz.
    """
    import gtcontrol as gt

    layer = case.layer()
    g0 = gt.Gaussian(np.zeros(case.A.shape[0]), case.start)
    blow = gt.blowup_analysis(layer, g0)
    reg = gt.analyze(layer, g0)
    ref = Reference(case.A, case.R, case.start)
    t_star = ref.first_root()
    wrong = []
    if blow.status is gt.Status.BLOWUP and blow.certified:
        if not blow.lower <= t_star <= blow.upper:
            wrong.append(f"bracket [{blow.lower!r}, {blow.upper!r}] misses T* = {t_star!r}")
    elif blow.proved_never and math.isfinite(t_star):
        wrong.append(f"'never' but T* = {t_star!r}")
    if t_star < blow.lower:
        wrong.append(f"[0, {blow.lower!r}] claimed root-free but T* = {t_star!r}")
    if reg.certificate in ("exact", "global"):
        if reg.kind == "blowup":
            b = reg.blowup
            if not b.lower <= t_star <= b.upper:
                wrong.append(f"regime blow-up bracket misses T* = {t_star!r}")
        elif math.isfinite(t_star):
            wrong.append(f"regime {reg.kind} ({reg.certificate}) but T* = {t_star!r}")
        elif reg.kind == "converges" and reg.limit_cov is not None and ref.min_rate > 0:
            lam = [mp.re(x) for x in ref.lam]
            if all(x > 0 for x in lam):
                exact = np.array((ref.omega_star**-1).tolist(), dtype=float)
                gap = np.linalg.norm(reg.limit_cov - exact) / np.linalg.norm(exact)
                if gap > 1e-6:
                    wrong.append(f"limit off the exact Ω*⁻¹ by {gap:.2g} (relative)")
    return Check(case, t_star, blow, reg, "; ".join(wrong))
