"""Exact regime rules of the Riccati class (private; :func:`gtcontrol.analyze` applies them).

Each rule returns a :class:`Verdict` (kind, message, certificate, limit) when a certificate of
docs/theory.md §3–§4 applies, or ``None``; :mod:`gtcontrol.analysis.regimes` turns verdicts into
:class:`~gtcontrol.Regime` results. The rules: blow-up explained by the sign of R and the spectrum
of A; ``R = 0`` (``Σ(t) = e^{At}Σ0e^{Aᵀt}``, classified on the invariant subspace of range Σ0);
``A = 0`` (``Σ(t) = F(I + tFᵀRF)⁻¹Fᵀ``); −A Hurwitz (``Ω(t) → Ω*``); R ≻ 0 with an eigenvalue of
A in the closed left half-plane (collapse); A Hurwitz without blow-up (``G(t) → G(∞)``).

Reference: the paper cited in :mod:`gtcontrol`, §3–§4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._linalg import FloatArray, psd_sqrt, sym
from .._status import Status
from ..errors import SolverError
from ..model.gaussian import Gaussian
from ..model.params import Layer
from ._core import (
    SIGN_RTOL,
    ComplexArray,
    krylov_basis,
    lyapunov_certificate,
    lyapunov_error,
    range_factor,
    slycot_lyapunov,
)
from ._march import UNIT_ROUNDOFF, ModelError
from .bernoulli import exact_lyapunov_definiteness
from .blowup import BlowupResult
from .equilibria import EquilibriaResult, Equilibrium, equilibria
from .riccati import RiccatiForm, model_error

__all__ = ["Verdict", "blowup_verdict", "fmt_eigs", "hurwitz", "riccati_verdict"]


@dataclass(frozen=True)
class Verdict:
    """A decided regime: what :func:`gtcontrol.analyze` reports, before the mean is added.

    ``blowup`` replaces the blow-up search result when the verdict found a blow-up itself.
    """

    kind: str
    message: str
    certificate: str
    limit: FloatArray | None = None
    equilibrium: Equilibrium | None = None
    eqs: EquilibriaResult | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    blowup: BlowupResult | None = None

    @classmethod
    def collapse_to_zero(
        cls,
        d: int,
        message: str,
        certificate: str,
        *,
        eqs: EquilibriaResult | None = None,
        stats: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """The verdict ``Σ(t) → 0``: a collapse whose limit is the ``d×d`` zero matrix."""
        zero = np.zeros((d, d))
        return cls("collapses", message, certificate, limit=zero, eqs=eqs, stats=stats or {})


def hurwitz(eig: ComplexArray) -> bool:
    """Whether every eigenvalue has a negative real part (False for none)."""
    return bool(eig.size and np.all(eig.real < 0))


def fmt_eigs(eig: ComplexArray) -> str:
    """Eigenvalues for messages: ``[1, -0.5+2j]`` with 4 significant digits."""
    parts = []
    for x in np.asarray(eig, dtype=complex):
        parts.append(f"{x.real:.4g}" + (f"{x.imag:+.4g}j" if x.imag != 0 else ""))
    return "[" + ", ".join(parts) + "]"


def blowup_verdict(form: RiccatiForm | None, g0: Gaussian, blow: BlowupResult) -> Verdict:
    """The blow-up found by the search, explained by the sign of R and the spectrum of A."""
    if form is None:
        return Verdict("blowup", blow.message, "integrator")
    reason = f"finite-time blow-up at T* = {blow.blowup_time:.12g} ({blow.message})"
    w_r = np.linalg.eigvalsh(form.R)
    if w_r[-1] < 0:
        eig_a = np.linalg.eigvals(form.A)
        head = "R = −Σ_h v_h(B_h + B_hᵀ) ≺ 0 (V and B of the same sign)"
        if not np.any(form.A):
            extra = ""
            if g0.rank == g0.dim:
                h = psd_sqrt(g0.cov)
                t_cf = 1.0 / float(np.linalg.eigvalsh(sym(h @ (-form.R) @ h))[-1])
                extra = f"; closed form 1/λ_max(Σ0^½(−R)Σ0^½) = {t_cf:.12g}"
            reason = f"{head} and A = 0: Ω(t) = Ω0 + tR reaches singularity; {reason}{extra}"
        elif not hurwitz(eig_a):
            where = (
                "so Σ0 ≻ 0 always blows up"
                if g0.rank == g0.dim
                else "and range Σ0 leaves the stable subspace of A"
            )
            reason = (
                f"{head} and A is not Hurwitz (eigenvalues {fmt_eigs(eig_a)}): ∫|e^{{As}}x|²ds "
                f"diverges off the stable subspace, {where}; {reason}"
            )
        else:
            reason = f"{head}, A Hurwitz and Σ0 ⋠ Σ* (the unstable equilibrium); {reason}"
    return Verdict("blowup", reason, "exact")


def riccati_verdict(
    layer: Layer, form: RiccatiForm, g0: Gaussian, blow: BlowupResult
) -> Verdict | None:
    """Exact classification in the Riccati class when a certificate applies, else ``None``.

    ``blow`` is a finished search without blow-up (``proved_never`` says whether it is proved).
    """
    a, r = form.A, form.R
    d = form.dim
    f = range_factor(g0.cov)
    rank = f.shape[1]
    never = blow.proved_never
    if rank == 0:
        return Verdict(
            "converges", "Σ0 = 0 is an equilibrium (Σ ≡ 0)", "exact", limit=np.zeros((d, d))
        )
    if not np.any(r):
        return _linear_verdict(a, f)
    if not np.any(a):
        return _zero_a_verdict(r, f) if never else None
    eig_a = np.linalg.eigvals(a)
    signs = _Signs(a, r, model_error(layer, form))
    eqs = equilibria(layer)
    if rank == d and signs.anti_hurwitz is not None and never:
        return _anti_hurwitz_verdict(a, r, eig_a, signs, eqs)
    if rank == d and signs.r_pd and signs.left_half_plane_eigenvalue:
        return Verdict(
            "collapses",
            "R ≻ 0 (V and B of opposite sign) but A has eigenvalues with Re ≤ 0 "
            f"({fmt_eigs(eig_a)}; {signs.left_half_plane_eigenvalue}): along such an eigenvector "
            "Ω(t) grows without bound while Ω(t) ⪰ ∫₀¹e^{−Aᵀs}Re^{−As}ds keeps Σ bounded, so "
            "λ_min Σ(t) → 0 (no positive-definite limit; stabilization needs every eigenvalue of "
            "A in the right half-plane)",
            "exact",
            limit=np.zeros((d, d)) if signs.hurwitz is not None else None,
            eqs=eqs,
        )
    if signs.hurwitz is not None and never:
        return _hurwitz_verdict(a, r, f, eig_a, signs, eqs)
    return None


class _Signs:
    """The sign facts the exact rules rest on, each proved for the layer's own floats.

    ``hurwitz`` / ``anti_hurwitz``: a Lyapunov certificate ``(P, ‖P_exact‖)`` that A (resp. −A)
    is Hurwitz, or ``None``; ``r_pd``: R ≻ 0 exactly (rational arithmetic) or beyond rounding;
    ``left_half_plane_eigenvalue``: why A has an eigenvalue with ``Re ≤ 0`` (an exactly skew A,
    or a computed eigenvalue whose first-order error bound keeps it left of the axis), or ``""``.
    """

    def __init__(self, a: FloatArray, r: FloatArray, model: ModelError) -> None:
        self.model = model
        self.hurwitz = lyapunov_certificate(a, -1.0)
        self.anti_hurwitz = lyapunov_certificate(a, 1.0)
        d = int(a.shape[0])
        gam = 2.0 * d * UNIT_ROUNDOFF
        nr = float(np.linalg.norm(r, 2))
        self.r_error = (SIGN_RTOL + gam) * nr + model.r
        if model.r_sign:
            self.r_pd = model.r_sign == "pd"
        else:
            self.r_pd = bool(np.linalg.eigvalsh(r)[0] > self.r_error)
        self.left_half_plane_eigenvalue = _left_half_plane(a, gam, model.a)


def _left_half_plane(a: FloatArray, gam: float, a_err: float) -> str:
    """Why A has an eigenvalue with ``Re ≤ 0`` for its exact floats, or ``""`` if unproved."""
    if a_err == 0.0 and not np.any(a + a.T):
        return "A is exactly skew-symmetric: its spectrum is imaginary"
    w, vl, vr = sla.eig(a, left=True, right=True)
    delta = gam * float(np.linalg.norm(a, 2)) + a_err
    for k in range(w.size):
        x, y = vr[:, k], vl[:, k]
        cond = float(np.linalg.norm(x) * np.linalg.norm(y) / max(abs(np.vdot(y, x)), 1e-300))
        if w[k].real + 2.0 * cond * delta < 0:
            return (
                f"the eigenvalue {w[k]:.4g} has Re < 0 beyond its first-order rounding bound "
                f"{2.0 * cond * delta:.2g}"
            )
    return ""


def _zero_a_verdict(r: FloatArray, f: FloatArray) -> Verdict:
    """A = 0 and no blow-up: ``Σ(t) = F(I + tFᵀRF)⁻¹Fᵀ`` with ``FᵀRF ⪰ 0``."""
    rank = f.shape[1]
    n = sym(f.T @ r @ f)
    w, u = np.linalg.eigh(n)
    ker = u[:, w <= 1e-12 * max(float(np.max(np.abs(w))), 1e-300)]
    limit = sym(f @ ker @ ker.T @ f.T)
    if ker.shape[1] == rank:
        return Verdict(
            "converges", "A = 0 and FᵀRF = 0: Σ(t) = Σ0 is constant", "exact", limit=limit
        )
    return Verdict(
        "collapses",
        f"A = 0: Σ(t) = F(I + tFᵀRF)⁻¹Fᵀ with FᵀRF ⪰ 0 of rank {rank - ker.shape[1]}, so "
        f"Σ(t) → a limit of rank {ker.shape[1]} < {rank} at the algebraic rate 1/t",
        "exact",
        limit=limit,
    )


def _anti_hurwitz_verdict(
    a: FloatArray, r: FloatArray, eig_a: ComplexArray, signs: _Signs, eqs: EquilibriaResult
) -> Verdict | None:
    """−A Hurwitz, Σ0 ≻ 0, no blow-up: ``Ω(t) → Ω*`` (converges if Ω* ≻ 0, else unbounded).

    The sign of ``λ_min Ω*`` decides only beyond the residual bound of the Lyapunov solve.
    """
    assert signs.anti_hurwitz is not None
    try:
        omega, _, _ = slycot_lyapunov(a, r)
    except SolverError:
        return None
    err = lyapunov_error(a, omega, r, signs.anti_hurwitz[1]) + signs.model.r * signs.anti_hurwitz[1]
    w_om = np.linalg.eigvalsh(omega)
    if w_om[0] > err and eqs.status is Status.SUCCESS and eqs.equilibria:
        eq = eqs.equilibria[0]
        if signs.r_pd:
            reason = (
                "global convergence: R = −Σ_h v_h(B_h + B_hᵀ) ≻ 0 (V and B of opposite sign) "
                f"and −A is Hurwitz (eigenvalues of A {fmt_eigs(eig_a)}), so Ω(t) = "
                "e^{−Aᵀt}(Ω0 − Ω*)e^{−At} + Ω* → Ω* ≻ 0 from every Σ0 ≻ 0 at rate "
                f"{2 * float(np.min(eig_a.real)):.4g}"
            )
            cert = "global"
        else:
            reason = (
                f"−A is Hurwitz (eigenvalues of A {fmt_eigs(eig_a)}), no blow-up is certified "
                "and Ω(t) = e^{−Aᵀt}(Ω0 − Ω*)e^{−At} + Ω* → Ω* ≻ 0"
            )
            cert = "exact"
        return Verdict("converges", reason, cert, limit=np.asarray(eq.cov), equilibrium=eq, eqs=eqs)
    if eqs.status is not Status.INFEASIBLE or w_om[0] > err:
        return None
    # No blow-up is proved, so Ω(t) ≻ 0 for ever and its limit Ω* ⪰ 0; λ_min Ω* within the
    # solve's rounding bound of 0 cannot tell singular from definite: only an exact zero
    # (no blow-up with λ_min Ω* < 0 is impossible) is named.
    if signs.model.r_sign and a.shape[0] <= 4 and exact_lyapunov_definiteness(a, r) == "psd":
        return Verdict(
            "unbounded",
            f"−A is Hurwitz and Ω(t) → Ω* (AᵀΩ* + Ω*A = R) which is exactly singular (λ_min = "
            f"{w_om[0]:.3g}, rational arithmetic), with no blow-up certified: λ_max Σ(t) → ∞ "
            "exponentially",
            "exact",
            eqs=eqs,
        )
    return None


def _hurwitz_verdict(
    a: FloatArray,
    r: FloatArray,
    f: FloatArray,
    eig_a: ComplexArray,
    signs: _Signs,
    eqs: EquilibriaResult,
) -> Verdict | None:
    """A Hurwitz, no blow-up: ``G(t) → G(∞) = I + FᵀW(∞)F``; ≻ 0 means Σ(t) → 0.

    ``G(∞) ≻ 0`` must hold beyond the rounding of W(∞) (its residual bound), of the start's
    factor and of forming G(∞).
    """
    assert signs.hurwitz is not None
    try:
        w_inf, _, _ = slycot_lyapunov(a, -r)
    except SolverError:
        return None
    p_norm = signs.hurwitz[1]
    err_w = lyapunov_error(a, w_inf, -r, p_norm) + signs.model.r * p_norm
    sv = np.linalg.svd(f, compute_uv=False)
    gam = 2.0 * a.shape[0] * UNIT_ROUNDOFF
    g_mat = sym(np.eye(f.shape[1]) + f.T @ w_inf @ f)
    g_top = float(np.linalg.norm(g_mat, 2))
    # the start's factor is exact to a relative γκ(Σ0) in G's coordinates
    err = sv[0] ** 2 * err_w + gam * (1.0 + g_top) * (1.0 + float(sv[0] / sv[-1]) ** 2)
    g_inf = np.linalg.eigvalsh(g_mat)
    if g_inf[0] > err:
        return Verdict.collapse_to_zero(
            a.shape[0],
            f"A is Hurwitz (abscissa {float(np.max(eig_a.real)):.4g}) and G(∞) = I + FᵀW(∞)F "
            f"≻ 0 (λ_min {g_inf[0]:.4g}): Σ(t) = e^{{At}}F G(t)⁻¹Fᵀe^{{Aᵀt}} → 0 exponentially",
            "exact",
            eqs=eqs,
        )
    return None


def _linear_verdict(a: FloatArray, f: FloatArray) -> Verdict:
    """R = 0: Σ(t) = e^{At} Σ0 e^{Aᵀt}; classify by A on the invariant subspace of range Σ0."""
    d = a.shape[0]
    q = krylov_basis(a, f)
    ar = q.T @ a @ q
    eig = np.linalg.eigvals(ar)
    na = max(float(np.linalg.norm(a, 2)), 1e-300)
    tol = 1e-10 * na
    top = float(np.max(eig.real))
    if top > tol:
        return Verdict(
            "unbounded",
            f"no attention growth (R = 0): Σ(t) = e^{{At}}Σ0e^{{Aᵀt}} and A has the eigenvalue(s) "
            f"with Re = {top:.4g} > 0 on the invariant subspace of range Σ0: exponential growth",
            "exact",
        )
    if top < -tol:
        return Verdict.collapse_to_zero(
            d,
            f"A is Hurwitz on the invariant subspace of range Σ0 (abscissa {top:.4g}) and R = 0: "
            "Σ(t) = e^{At}Σ0e^{Aᵀt} → 0 exponentially",
            "exact",
        )
    return _centre_verdict(a, f, q, ar)


def _centre_verdict(a: FloatArray, f: FloatArray, q: FloatArray, ar: FloatArray) -> Verdict:
    """R = 0 with imaginary-axis eigenvalues of A on the invariant subspace ``range q``."""
    rank = f.shape[1]
    na = max(float(np.linalg.norm(a, 2)), 1e-300)
    tol = 1e-10 * na
    # Ordered real Schur form Zᵀ A_r Z = [[T_ss, T_sc], [0, T_cc]].
    t_s, z, k = sla.schur(ar, output="real", sort=lambda x, y: x < -tol)
    t_ss, t_sc, t_cc = t_s[:k, :k], t_s[:k, k:], t_s[k:, k:]
    # e^{T_cc t} must stay bounded: a defective imaginary-axis eigenvalue grows polynomially.
    probe = 1e3 / na
    growth = float(np.linalg.norm(sla.expm(t_cc * probe), 2))
    if growth > 10.0 * max(float(np.linalg.norm(sla.expm(t_cc * probe / 10), 2)), 1.0):
        return Verdict(
            "unbounded",
            "R = 0 and A has defective eigenvalues on the imaginary axis on the invariant "
            f"subspace of range Σ0: ‖e^{{At}}‖ grows polynomially ({growth:.3g} at t = "
            f"{probe:.3g})",
            "exact",
        )
    # The centre eigenspace is spanned by E = Q Z [X; I] with T_ss X − X T_cc = −T_sc; the part
    # of Σ0 that persists is its oblique projection there: Σ(t) − E e^{T_cc t} Y e^{T_ccᵀ t} Eᵀ
    # → 0 with Y = y_c y_cᵀ, y_c the centre Schur coordinates of F.
    zq = q @ z
    x = sla.solve_sylvester(t_ss, -t_cc, -t_sc) if k else np.zeros((0, t_cc.shape[0]))
    e = zq[:, :k] @ x + zq[:, k:]
    yc = (zq.T @ f)[k:, :]
    y = yc @ yc.T
    lost = np.linalg.matrix_rank(yc, tol=1e-9 * max(float(np.linalg.norm(f, 2)), 1e-300)) < rank
    moving = float(np.linalg.norm(t_cc @ y + y @ t_cc.T)) > 1e-9 * na * max(
        float(np.linalg.norm(y)), 1e-300
    )
    limit = None if moving else sym(e @ y @ e.T)
    if lost:
        return Verdict(
            "collapses",
            f"R = 0: A has {k} stable and {t_cc.shape[0]} imaginary-axis eigenvalues on the "
            "invariant subspace of range Σ0; the stable part decays and the rest has rank "
            f"{np.linalg.matrix_rank(yc)} < {rank}: rank is lost"
            + ("" if moving else " (Σ(t) converges)"),
            "exact",
            limit=limit,
        )
    if moving:
        return Verdict(
            "bounded",
            "R = 0 and A acts on range Σ0 through non-defective imaginary-axis eigenvalues "
            f"{fmt_eigs(np.linalg.eigvals(t_cc))}: Σ(t) = e^{{At}}Σ0e^{{Aᵀt}} stays bounded, "
            "keeps its rank and oscillates",
            "exact",
        )
    return Verdict(
        "converges",
        "R = 0 and the persistent (imaginary-axis) part of Σ0 is invariant: Σ(t) converges "
        "without rank loss",
        "exact",
        limit=limit,
    )
