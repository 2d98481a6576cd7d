"""Stabilization of a given layer around a target: keep its heads, make ``N(m*, Σ*)`` attract.

The entry point :func:`stabilize` runs four named steps (docs/theory.md, "Stability of a
prescribed equilibrium"):

1. **plan** (:mod:`._plan`): the validated request, frozen (:class:`~._plan.Plan`): the
   target's active subspace, the starts, the depth rules;
2. **design** (:mod:`._spectra`, then a family): ``A, b`` for the equilibrium and the
   spectra at the target; the added-head family in :mod:`._head` (its gauge, ``c`` ladder
   and design rate), the per-head gains family in :mod:`._gains`;
3. **checks** (:mod:`._checks`): the jobs of one design, run concurrently: the verifying
   simulations (:mod:`._verify`), the token runs (:mod:`._tokens`: the stabilized layer's
   check and the given layer's run in the background) and a missing spectrum;
4. **result** (:mod:`._report`): the certificates' sentences, the status and the message of
   the :class:`Stabilization` (:mod:`._result`, with its verifications and the values passed
   between the steps).

:mod:`._call` holds one call's state (the plan, its budget, the token runs) and the steps a
family calls; :mod:`._stabilize` the entry point and ``auto``'s choice. The designs' shared
kernel (the equilibrium's ``A``, residuals, ``q``) is :mod:`gtcontrol.control._design_kernel`;
the token check is mean matching's (:func:`gtcontrol.design_token_certificate`).

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md.
"""

from __future__ import annotations

from ._result import Stabilization
from ._stabilize import ADDITIONS, stabilize

__all__ = ["ADDITIONS", "Stabilization", "stabilize"]
