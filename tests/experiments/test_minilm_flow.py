"""A real MiniLM-L6 attention sublayer integrated to its blow-up (issue 11; extra 'experiments')."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gtcontrol import Gaussian, Status, simulate

pytest.importorskip("torch")
pytest.importorskip("transformers")

_REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "minilm_reference.json"


def _identity_start(d: int) -> Gaussian:
    m0 = np.zeros(d)
    m0[-1] = 1.0
    s0 = np.eye(d)
    s0[-1, -1] = 0.0
    return Gaussian(m0, s0)


def test_minilm_layer_blows_up_inside_the_reference_bracket() -> None:
    """Layer 0 from N(e, I ⊕ 0): BLOWUP, the bracket holds the independent dense t*, PSD, rank 384.

    The reference is the independent dense integration of benchmarks/bench_minilm_flow.py
    (DOP853 at rtol 1e-10 on the full 384×384 covariance with the dense heads, tangent of
    1/tr Σ at tr Σ = 1e7), cached in benchmarks/minilm_reference.json with its own error
    estimate (the difference of the extrapolations at 1e6 and 1e7).
    """
    from threadpoolctl import threadpool_limits

    from gtcontrol.interop import extract

    try:
        layers = extract("minilm").layers
    except ImportError as exc:  # the MiniLM files of the experiments extra
        pytest.skip(str(exc))
    ref = json.loads(_REFERENCE.read_text("utf-8"))["layer0"]
    layer = layers[0].attention_layer
    with threadpool_limits(1, user_api="blas"):
        traj = simulate(layer, _identity_start(layer.dim), T=1.0)
    assert traj.status is Status.BLOWUP and traj.success
    assert traj.blowup_bracket is not None
    lower, upper = traj.blowup_bracket
    t_ref, err = float(ref["t_star"]), float(ref["error"])
    slack = max(err, 1e-10 * t_ref)
    assert lower - slack <= t_ref <= upper + slack
    assert abs(traj.blowup_time - t_ref) <= 1e-4 * t_ref
    assert lower <= traj.blowup_time <= upper
    # the last record: positive semidefinite and of rank 384 (the affine coordinate has none).
    # λ_max is ~1e8 there while the other directions stay O(1), so the rank is counted above
    # round-off (1e-14 λ_max), not at Trajectory.rank's 1e-9: Σ = L Lᵀ with L of full rank 384.
    w = np.linalg.eigvalsh(traj.cov[-1])
    assert w[0] >= -1e-12 * w[-1]
    assert int(np.sum(w > 1e-14 * w[-1])) == 384
    assert traj.factor is not None and traj.factor.shape[-1] == 384
    assert int(np.linalg.matrix_rank(traj.factor[-1])) == 384
    assert math.isfinite(w[-1]) and w[-1] > 1e6


def test_attention_flows_validates_and_honours_the_time_limit() -> None:
    from gtcontrol.errors import InvalidParametersError
    from gtcontrol.experiments import AttentionFlows, attention_flows

    with pytest.raises(InvalidParametersError, match="layers"):
        attention_flows(layers=[6])
    with pytest.raises(InvalidParametersError, match="starts"):
        attention_flows(starts=["noise"])
    with pytest.raises(InvalidParametersError, match="T"):
        attention_flows(T=-1.0)
    try:
        res = attention_flows(layers=[0], starts=["identity"], time_limit=1e-3)
    except ImportError as exc:  # the MiniLM files of the experiments extra
        pytest.skip(str(exc))
    assert isinstance(res, AttentionFlows)
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success
    assert res.rows == () and "stopped" in res.message
    assert res.stats["seconds"] >= 0
