"""Independent verification of a design: :class:`DesignCertificate` and :func:`design_certificate`.

The certificate is recomputed from the layer alone, whatever built it: the residual of the
moment field at the target, the equilibria and spectra of
:mod:`gtcontrol.analysis.equilibria`, and (Riccati class) the sign of ``R`` and slycot's unique
positive-definite equilibrium.

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md §3–5.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._display import Axes, Displayable, SummaryItems
from ..._linalg import FloatArray, sym
from ..._status import Status
from ..._validation import frozen
from ...analysis.equilibria import equilibria, equilibrium_at
from ...analysis.riccati import RiccatiForm, riccati_form
from ...model.gaussian import Gaussian
from ...model.params import Layer
from ._common import RESIDUAL_TOL, Whitening, abscissa, check_layer, rel_residual

__all__ = ["DesignCertificate", "design_certificate"]

#: Eigenvalues of ``Σ*^{1/2} R Σ*^{1/2}`` above ``−_PSD_RTOL ‖R̂‖`` count as non-negative.
_PSD_RTOL = 1e-10
#: Unique-equilibrium cross-check (Riccati class): Σ* must equal slycot's solution to this.
_UNIQUE_RTOL = 1e-8


@dataclass(frozen=True, eq=False)
class DesignCertificate(Displayable):
    """Verified convergence data of a layer towards a target ``N(m*, Σ*)``.

    Attributes
    ----------
    kind
        ``"global"``: every ``N(m0, Σ0)`` with ``Σ0 ≻ 0`` converges to the target (Riccati
        class, ``R ⪰ 0``, ``−A`` Hurwitz, Σ* the unique positive-definite equilibrium, K
        Hurwitz). ``"local"``: the target is a locally exponentially stable equilibrium.
        ``"none"``: not an equilibrium, or not stable.
    valid
        The target is an equilibrium (relative residual ≤ 1e-9), both rates are positive and
        at least the requested ones (relative tolerance ``rate_rtol``), and the kind is
        ``"global"`` when that was required.
    mean_rate
        ``−max Re λ(K)``, ``K = A + Σ_h V_h (I + Σ* B_h)``: the rate of the mean near Σ*.
    cov_rate
        ``−(spectral abscissa of DF(Σ*) on symmetric matrices)``: the covariance rate. In the
        Riccati class it is ``2 min Re λ(A)`` and it is exact for all times in the precision
        (``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}``).
    rate
        ``min(mean_rate, cov_rate)``: the mean and covariance errors are ``O(e^{−(rate−ε)t})``
        (``O(e^{−rate·t})`` unless the two rates coincide).
    residual
        Relative residual of the moment field ``(dm/dt, dΣ/dt)`` at the target.
    riccati
        True when every head has ``V_h = v_h I`` (and the layer has no noise).
    r_min
        ``λ_min(Σ*^{1/2} R Σ*^{1/2})`` (Riccati class; ``R ⪰ 0`` ⇔ ``r_min ≥ 0``), else ``None``.
    uniqueness_gap
        Relative distance between Σ* and slycot's unique positive-definite equilibrium
        (Riccati class), else ``None``.
    requested_rate, requested_cov_rate
        The rates that were asked for (``None`` when none were).
    mean_matrix
        K.
    message
        The statement, with its numbers.
    status
        ``Status.SUCCESS`` when ``valid``; ``Status.INFEASIBLE`` otherwise (``message`` names
        the condition that fails).
    stats
        ``seconds``.
    """

    kind: str
    valid: bool
    mean_rate: float
    cov_rate: float
    rate: float
    residual: float
    riccati: bool
    r_min: float | None
    uniqueness_gap: float | None
    requested_rate: float | None
    requested_cov_rate: float | None
    mean_matrix: FloatArray
    message: str
    status: Status = Status.SUCCESS
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """Whether the layer is certified (``valid``)."""
        return self.valid

    def _summary_items(self) -> SummaryItems:
        return [
            ("kind", self.kind),
            ("valid", self.valid),
            ("rate", self.rate),
            ("mean_rate", self.mean_rate),
            ("cov_rate", self.cov_rate),
            ("residual", self.residual),
        ]

    def _draw(self, ax: Axes) -> None:
        from ...analysis._figures import draw_spectrum

        title = f"{self.kind} certificate, rate {self.rate:.4g}: spectrum of K"
        rate = self.rate if self.rate > 0 else None
        draw_spectrum(ax, np.linalg.eigvals(self.mean_matrix), label="K", rate=rate, title=title)


@dataclass
class _Evidence:
    """What the spectra and equilibria say, before the requested rates are compared."""

    cov_abscissa: float
    mean_matrix: FloatArray
    r_min: float | None = None
    gap: float | None = None
    global_ok: bool = False
    reasons: list[str] = field(default_factory=list)


def _riccati_evidence(layer: Layer, form: RiccatiForm, s: FloatArray, residual: float) -> _Evidence:
    """Riccati class: ``R ⪰ 0``, ``−A`` Hurwitz and Σ* the unique equilibrium give ``global``."""
    wh = Whitening.of(s)
    w_r = np.linalg.eigvalsh(sym(wh.T @ form.R @ wh.T))
    r_min = float(w_r[0])
    reasons: list[str] = []
    gap: float | None = None
    eqs = equilibria(layer, cross_check=False)
    if eqs.success and len(eqs) == 1:
        eq = eqs[0]
        gap = float(np.linalg.norm(eq.cov - s) / np.linalg.norm(s))
    else:
        eq = equilibrium_at(layer, s)
        reasons.append(f"slycot: {eqs.message}")
    min_re_a = float(np.min(np.linalg.eigvals(form.A).real))
    psd = r_min >= -_PSD_RTOL * max(float(np.max(np.abs(w_r))), 1e-300)
    global_ok = bool(
        psd
        and min_re_a > 0
        and gap is not None
        and gap <= _UNIQUE_RTOL
        and residual <= RESIDUAL_TOL
    )
    if not psd:
        reasons.append(f"R is indefinite (λ_min(Σ*^½RΣ*^½) = {r_min:.3g})")
    if min_re_a <= 0:
        reasons.append(f"−A is not Hurwitz (min Re λ(A) = {min_re_a:.3g})")
    return _Evidence(
        cov_abscissa=float(eq.spectral_abscissa),
        mean_matrix=np.asarray(eq.mean_matrix),
        r_min=r_min,
        gap=gap,
        global_ok=global_ok,
        reasons=reasons,
    )


def _local_evidence(layer: Layer, s: FloatArray) -> _Evidence:
    """Outside the Riccati class: the linearization at Σ* only (a local certificate)."""
    eq = equilibrium_at(layer, s)
    return _Evidence(
        cov_abscissa=float(eq.spectral_abscissa),
        mean_matrix=np.asarray(eq.mean_matrix),
        reasons=["outside the noise-free Riccati class (V ≠ vI or noise): local certificate only"],
    )


def _headline(kind: str, gap: float | None) -> str:
    if kind == "global":
        return (
            "global: every N(m0, Σ0) with Σ0 ≻ 0 converges to the target (Riccati class, "
            f"R ⪰ 0, −A Hurwitz, unique equilibrium to {gap:.1e}); "
        )
    if kind == "local":
        return "local: the target is a locally exponentially stable equilibrium; "
    return "no certificate: "


def design_certificate(
    layer: Layer,
    target: Gaussian | tuple[Any, Any],
    *,
    rate: float | None = None,
    cov_rate: float | None = None,
    require_global: bool = False,
    rate_rtol: float = 1e-6,
) -> DesignCertificate:
    """Verify that ``layer`` drives Gaussians to ``target`` and at which rates.

    Independent of how the layer was built: the residual of the moment field
    (:func:`gtcontrol.model.moments.moment_field`) at the target, and the equilibria and
    spectra of :mod:`gtcontrol.analysis.equilibria`. In the Riccati class (every
    ``V_h = v_h I``, no noise) the covariance dynamics is ``dΣ/dt = AΣ + ΣAᵀ − ΣRΣ``; if Σ* is
    its unique positive-definite equilibrium (slycot), ``R ⪰ 0`` and ``−A`` is Hurwitz, then
    ``Ω(t) = Σ(t)⁻¹`` obeys ``Ω(t) − Ω* = e^{−Aᵀt}(Ω0 − Ω*)e^{−At}`` and stays positive definite
    (``Ω(t) ⪰ e^{−Aᵀt}Ω0e^{−At} ≻ 0`` since R ⪰ 0), so every ``Σ0 ≻ 0`` converges (rate
    ``2 min Re λ(A)``), and the mean, driven by ``K(t) → K`` Hurwitz, converges too: the
    certificate is ``"global"``. Otherwise a stable linearization gives ``"local"``.

    Parameters
    ----------
    layer
        The layer.
    target
        ``N(m*, Σ*)`` (a :class:`Gaussian` or ``(mean, cov)``), Σ* ≻ 0.
    rate
        Requested mean rate to check (optional).
    cov_rate
        Requested covariance rate to check (optional).
    require_global
        ``valid`` needs a global certificate.
    rate_rtol
        Relative tolerance of the rate comparison.

    Returns
    -------
    DesignCertificate
        ``status`` is ``Status.SUCCESS`` when the layer is certified, else
        ``Status.INFEASIBLE`` with the failing condition in ``message``.

    Raises
    ------
    InvalidGaussianError
        On a malformed target or a dimension mismatch.
    InvalidParametersError
        If ``layer`` is not a :class:`Layer`.

    Examples
    --------
    ``a = 1``, ``vB = −2``: ``σ* = −a/(vB) = 0.5`` is the unique equilibrium, ``R = −v(B + Bᵀ) = 4
    ⪰ 0`` and ``−A`` is Hurwitz, so the certificate is global; the mean matrix
    ``K = A + V(1 + σ*B) = −1`` gives the mean rate 1.

    >>> from gtcontrol import Gaussian, Layer, design_certificate
    >>> cert = design_certificate(Layer(A=[[1.0]], B=[[2.0]], V=-1.0), Gaussian([0.0], [[0.5]]))
    >>> cert.kind, cert.valid, round(cert.mean_rate, 12), round(cert.cov_rate, 12)
    ('global', True, 1.0, 2.0)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    clock = time.perf_counter()
    layer, tgt = check_layer(layer, target)
    residual = rel_residual(layer, tgt)
    form = riccati_form(layer)
    riccati = form is not None and form.is_bernoulli
    if form is not None and riccati:
        ev = _riccati_evidence(layer, form, tgt.cov, residual)
    else:
        ev = _local_evidence(layer, tgt.cov)
    mean_rate = -abscissa(ev.mean_matrix)
    cov_rate_v = -ev.cov_abscissa
    is_eq = residual <= RESIDUAL_TOL
    stable = mean_rate > 0 and cov_rate_v > 0
    kind = "global" if ev.global_ok and stable else ("local" if is_eq and stable else "none")
    valid = is_eq and stable
    msgs: list[str] = []
    if not is_eq:
        msgs.append(f"the target is not an equilibrium (relative residual {residual:.3g})")
    if not stable:
        msgs.append(
            f"the linearization is not Hurwitz (mean rate {mean_rate:.6g}, covariance rate "
            f"{cov_rate_v:.6g})"
        )
    if rate is not None and mean_rate < rate * (1 - rate_rtol):
        valid = False
        msgs.append(f"mean rate {mean_rate:.9g} < requested {rate:.9g}")
    if cov_rate is not None and cov_rate_v < cov_rate * (1 - rate_rtol):
        valid = False
        msgs.append(f"covariance rate {cov_rate_v:.9g} < requested {cov_rate:.9g}")
    if require_global and kind != "global":
        valid = False
        msgs.append("a global certificate was required: " + "; ".join(ev.reasons or ["—"]))
    message = (
        _headline(kind, ev.gap)
        + f"mean rate {mean_rate:.6g}, covariance rate {cov_rate_v:.6g}, residual "
        + f"{residual:.2e}"
        + ("" if not msgs else "; " + "; ".join(msgs))
    )
    return DesignCertificate(
        kind=kind,
        valid=bool(valid),
        mean_rate=mean_rate,
        cov_rate=cov_rate_v,
        rate=min(mean_rate, cov_rate_v),
        residual=residual,
        riccati=bool(riccati),
        r_min=ev.r_min,
        uniqueness_gap=ev.gap,
        requested_rate=rate,
        requested_cov_rate=cov_rate,
        mean_matrix=frozen(ev.mean_matrix.copy()),
        message=message,
        status=Status.SUCCESS if valid else Status.INFEASIBLE,
        stats={"seconds": time.perf_counter() - clock},
    )
