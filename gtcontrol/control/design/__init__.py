"""Design of stable, time-invariant attention layers for asymptotic mean matching.

Given a target ``N(m*, Σ*)`` (Σ* ≻ 0), find one layer ``(A, B, V, b)`` whose moment dynamics
(docs/theory.md §2) converge to it from every Gaussian start, at a prescribed exponential rate,
with a certificate (docs/theory.md §3–5).

Modules:

* :mod:`.mean_matching` — the entry point :func:`design_mean_matching` and its result;
* :mod:`.constructive` — the closed-form Riccati-class design (``V = vI``, ``O(d³)``);
* :mod:`.problem`, :mod:`.nlp`, :mod:`.nlp_solve` — designs with fixed parts (a pretrained
  ``B``, a fixed ``V`` or ``A``) and minimum-norm designs: analytic prechecks, the CasADi
  transcription in whitened coordinates, and the IPOPT attempts within a time budget;
* :mod:`.certificate` — independent verification (:func:`design_certificate`);
* :mod:`.robustness` — stability radii and parameter perturbations (:func:`design_robustness`);
* :mod:`.convergence` — trajectories from random starts (:func:`design_convergence`);
* :mod:`.ess_path` — finite-N validity: the predicted softmax ``ESS/N`` along the moment path
  and the ``(sV, B/s)`` scale split that keeps it high (:class:`PathEss`);
* :mod:`.token_check` — the token-level certificate: ``N`` real tokens against the target and
  its sampling floor (:func:`design_token_certificate`).

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

from .certificate import DesignCertificate, design_certificate
from .convergence import ConvergenceData, design_convergence
from .ess_path import PathEss
from .mean_matching import MeanMatchingDesign, design_mean_matching
from .robustness import Robustness, RobustnessCheck, design_robustness
from .token_check import TokenCertificate, design_token_certificate

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
