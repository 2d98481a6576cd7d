"""compare_tokens: real tokens against the moment ODE, error ~ N^(-1/2)."""

from __future__ import annotations

import numpy as np
import pytest

from gtcontrol import Gaussian, InvalidParametersError, Layer, Result, Status, compare_tokens


def _setup() -> tuple[Layer, Gaussian]:
    lay = Layer(A=[[0.2, -0.5], [0.5, 0.1]], B=[[0.8, 0.3], [-0.1, 0.6]], v=-0.7, b=[0.3, -0.2])
    return lay, Gaussian([0.5, -0.3], [[0.8, 0.2], [0.2, 0.5]])


def test_errors_fall_like_inverse_sqrt_n() -> None:
    lay, g0 = _setup()
    cmp = compare_tokens(
        lay, g0, 0.6, n_tokens=(128, 512, 2048), repeats=6, seed=1, steps_per_layer=6
    )
    assert cmp.n_tokens == (128, 512, 2048)
    for name, slope in cmp.slopes.items():
        # 6 repeats per N: the RMS error has ~30 % relative noise, so the fitted slope over a
        # 16x range of N is known to about ±0.2 around the theoretical -1/2.
        assert -0.8 < slope < -0.25, (name, slope)
    # the predicted trajectory is the moment ODE from the exact initial Gaussian
    assert cmp.predicted.status == "success" and cmp.predicted.t[-1] == pytest.approx(0.6)
    # errors are real distances, decreasing overall and comparable to the sampling error
    assert np.all(cmp.bures_wasserstein > 0)
    assert cmp.bures_wasserstein[-1] < cmp.bures_wasserstein[0] / 2
    rows = cmp.table()
    assert [r["n_tokens"] for r in rows] == [128, 512, 2048]
    assert cmp.example is not None
    assert cmp.example.n_tokens == 2048 and len(cmp.example.snapshots) == 4
    assert isinstance(cmp, Result) and cmp.status is Status.SUCCESS and cmp.success
    assert cmp.message and cmp.stats["completed_runs"] == 18


def test_compare_tokens_refuses_blowup_and_bad_counts() -> None:
    lay, g0 = _setup()
    with pytest.raises(InvalidParametersError, match="n_tokens"):
        compare_tokens(lay, g0, 0.5, n_tokens=(128,))
    with pytest.raises(InvalidParametersError, match="n_tokens"):
        compare_tokens(lay, g0, 0.5, n_tokens=(128, 0))
    blow = Layer(B=np.eye(2), v=2.0)
    with pytest.raises(InvalidParametersError, match="blow up"):
        compare_tokens(blow, g0, 5.0, n_tokens=(64, 128))


def test_compare_tokens_time_limit_returns_partial_results() -> None:
    import time

    lay, g0 = _setup()
    t0 = time.perf_counter()
    cmp = compare_tokens(lay, g0, 0.6, n_tokens=(64, 128, 4096), repeats=50, time_limit=0.05)
    assert time.perf_counter() - t0 < 3.0
    assert cmp.status is Status.BUDGET_EXHAUSTED and not cmp.success
    assert cmp.stats["completed_runs"] < 150 and "stopped" in cmp.message
    assert cmp.example is None


def test_adaptive_token_method_runs_with_the_default_steps() -> None:
    """``steps_per_layer`` defaults to the method's own choice, so "adaptive" works (it refused
    the former integer default of 20 and always failed)."""
    layer = Layer(A=-0.5 * np.eye(2), B=0.5 * np.eye(2), v=-0.5)
    g0 = Gaussian(np.zeros(2), np.eye(2))
    cmp = compare_tokens(layer, g0, T=0.5, n_tokens=(64, 128), repeats=1, method="adaptive")
    assert cmp.status is Status.SUCCESS and cmp.success
