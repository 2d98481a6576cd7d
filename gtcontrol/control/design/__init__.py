"""Design of stable, time-invariant attention layers for asymptotic mean matching.

Given a target ``N(m*, Σ*)`` (Σ* ≻ 0), find one layer ``(A, B, V, b)`` whose moment dynamics
(docs/theory.md §2) converge to it from every Gaussian start, at a prescribed exponential rate,
with a certificate (docs/theory.md §3–5).

Modules:

* :mod:`.mean_matching` — the entry point :func:`design_mean_matching`, its result, and the
  trajectories from random starts of its figure (:func:`design_convergence`);
* :mod:`._problem` — the validated request, the closed-form Riccati-class design
  (``V = vI``, ``O(d³)``) and the analytic prechecks of designs with fixed parts (a pretrained
  ``B``, a fixed ``V`` or ``A``);
* :mod:`._nlp` — designs with fixed parts and minimum-norm designs: the CasADi transcription
  in whitened coordinates and the IPOPT attempts within a time budget;
* :mod:`._certificates` — independent verification (:func:`design_certificate`) and how far a
  design is from losing stability (:func:`design_robustness`);
* :mod:`._finite_n` — finite-N validity: the predicted softmax ``ESS/N`` along the moment path,
  the ``(sV, B/s)`` scale split that keeps it high (:class:`PathEss`), and the token-level
  certificate: ``N`` real tokens against the target and its sampling floor
  (:func:`design_token_certificate`);

Targets, whitening, residuals and spectra shared with :mod:`gtcontrol.control.stabilization`
(a given layer made stable around a target) are in :mod:`gtcontrol.control._design_kernel`.

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

from ._certificates import (
    DesignCertificate,
    Robustness,
    RobustnessCheck,
    design_certificate,
    design_robustness,
)
from ._finite_n import PathEss, TokenCertificate, design_token_certificate
from .mean_matching import (
    ConvergenceData,
    MeanMatchingDesign,
    design_convergence,
    design_mean_matching,
)

__all__ = [
    "ConvergenceData",
    "DesignCertificate",
    "MeanMatchingDesign",
    "PathEss",
    "Robustness",
    "RobustnessCheck",
    "TokenCertificate",
    "design_certificate",
    "design_convergence",
    "design_mean_matching",
    "design_robustness",
    "design_token_certificate",
]
