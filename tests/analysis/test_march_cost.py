"""The certified march ends a rounding-limited bracket without steps that cannot narrow it.

Once rounding dominates (the exact trajectory known only to a relative error near 1 beside the
root), the steps the march can still certify shrink geometrically and the bracket it reports no
longer moves: each further step costs Gramians (a 2d × 2d exponential each) and buys nothing.
The documentation's Riccati-class MiniLM layer (d = 384, ``A = 0``) took 742 Gramians, 2 × 74 s
at d = 384, for the bracket that 35 give. The answers stay certified: each bracket is checked
against the 50-digit reference of tests/_planted.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _planted import Reference
from helpers import layer_near_a_repelling_equilibrium

import gtcontrol as gt
from gtcontrol.analysis._core import gramian


@pytest.mark.parametrize("scale", [1 + 1e-9, 1 + 1e-6, 1 + 1e-3])
def test_a_rounding_limited_bracket_ends_once_no_step_can_narrow_it(scale):
    """The layer of hostile round 3, case 06, from starts 1e-9…1e-3 above its repelling
    equilibrium: rounding sets the bracket, which holds the exact T*, within at most 80 Gramians
    (over 700 when every shrinking step was taken)."""
    layer, a, b, s, v = layer_near_a_repelling_equilibrium()
    start = s * scale
    blow = gt.blowup_analysis(layer, gt.Gaussian(np.zeros(3), start))
    exact = Reference(a, -v * (b + b.T), start).first_root()
    assert blow.status is gt.Status.BLOWUP and blow.certified
    assert blow.lower <= exact <= blow.upper
    assert blow.stats["rounding_limited"] and "rounding bounds the bracket" in blow.message
    assert blow.stats["gramians"] <= 80


def test_an_attention_only_layer_marches_on_its_closed_form_gramian():
    """``A = 0`` (heads only): ``W(h) = hQ`` and ``e^{Ah} = I`` exactly, without the block
    exponential; the march's bracket holds the closed form ``T* = 1/λ_max(Fᵀ(−R)F)`` and ends
    within 60 Gramians (over 800 when every shrinking step was taken)."""
    q = np.array([[2.0, 1.0], [1.0, -3.0]])
    e, w = gramian(np.zeros((2, 2)), q, 0.25)
    assert np.array_equal(e, np.eye(2)) and np.array_equal(w, 0.25 * q)

    d, k = 40, 6
    rng = np.random.default_rng(3)
    heads = [
        (rng.uniform(0.2, 1.0) * np.eye(d), rng.standard_normal((d, d)) / np.sqrt(d))
        for _ in range(3)
    ]
    u = np.linalg.qr(rng.standard_normal((d, k)))[0]
    f = u * np.sqrt(rng.uniform(0.5, 2.0, k))
    layer = gt.Layer(heads=heads)
    blow = gt.blowup_analysis(layer, gt.Gaussian(np.zeros(d), f @ f.T))
    minus_r = sum(vh[0, 0] * (bh + bh.T) for vh, bh in heads)
    closed = 1.0 / np.linalg.eigvalsh(f.T @ minus_r @ f)[-1]
    assert blow.status is gt.Status.BLOWUP and blow.certified
    assert blow.lower <= closed * (1 + 1e-13) and closed * (1 - 1e-13) <= blow.upper
    assert blow.upper - blow.lower <= 1e-9 * closed
    assert blow.stats["gramians"] <= 60
