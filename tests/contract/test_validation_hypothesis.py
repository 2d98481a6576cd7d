"""Property-based tests (hypothesis): validation round trips, steering and OT exactness."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gtcontrol as gc
from gtcontrol import Gaussian, Layer
from gtcontrol.errors import GTControlError

_FAST = settings(max_examples=40, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
_SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def _spd(draw: st.DrawFn, d: int) -> np.ndarray:
    a = draw(hnp.arrays(np.float64, (d, d), elements=st.floats(-2, 2)))
    return a @ a.T + 0.5 * np.eye(d)


@st.composite
def _gaussians(draw: st.DrawFn, d: int | None = None) -> Gaussian:
    d = d if d is not None else draw(st.integers(1, 3))
    mean = draw(hnp.arrays(np.float64, (d,), elements=st.floats(-3, 3)))
    return Gaussian(mean, draw(_spd(d)))


@_FAST
@given(
    st.integers(1, 4).flatmap(
        lambda d: st.tuples(
            hnp.arrays(np.float64, (d,), elements=_finite),
            hnp.arrays(np.float64, (d, d), elements=st.floats(-100, 100)),
        )
    )
)
def test_valid_gaussians_are_stored_exactly(data: tuple[np.ndarray, np.ndarray]) -> None:
    mean, a = data
    cov = a @ a.T
    g = Gaussian(mean, cov)
    assert np.array_equal(g.mean, mean)
    assert np.array_equal(g.cov, 0.5 * (cov + cov.T))


_hostile = st.one_of(
    st.just(None),
    st.text(max_size=3),
    st.complex_numbers(allow_nan=False, max_magnitude=10).map(lambda z: [z, z]),
    st.integers(10**160, 10**500).map(lambda n: [n, 0]),
    st.floats().map(lambda x: [x, 1.0]),
    hnp.arrays(np.float64, st.integers(0, 3).map(lambda k: (k,) * k), elements=st.floats()),
    st.lists(st.lists(st.floats(-1, 1), max_size=3), max_size=3),
    st.builds(object),
)


@_FAST
@given(_hostile, _hostile)
def test_invalid_gaussians_raise_gtcontrol_errors_only(mean: object, cov: object) -> None:
    try:
        g = Gaussian(mean, cov)
    except GTControlError as exc:
        assert "mean" in str(exc) or "cov" in str(exc)
    else:  # accepted: then it really is a valid finite Gaussian
        assert np.all(np.isfinite(g.cov)) and np.all(np.abs(g.cov) <= 1e150)


_hostile_not_ragged = st.one_of(
    st.just(None),
    st.complex_numbers(allow_nan=False, max_magnitude=10).map(lambda z: [[z]]),
    st.integers(10**160, 10**500).map(lambda n: [[n]]),
    st.floats().map(lambda x: [[x]]),
    hnp.arrays(np.float64, st.integers(0, 3).map(lambda k: (k,) * k), elements=st.floats()),
)


@pytest.mark.parametrize(
    "kw",
    [
        {"B": [[], [0.0]], "V": -1.0},
        {"A": [[1.0, 2.0], [3.0]]},
        {"heads": [([[1.0], [2.0, 3.0]], [[1.0, 0.0], [0.0, 1.0]])]},
        {"b": [[1.0], []], "A": [[1.0, 0.0], [0.0, 1.0]]},
    ],
)
def test_ragged_layer_matrix_is_a_gtcontrol_error(kw: dict[str, object]) -> None:
    with pytest.raises(GTControlError):
        Layer(**kw)


@_FAST
@given(_hostile_not_ragged, _hostile_not_ragged)
def test_invalid_layers_raise_gtcontrol_errors_only(a: object, b: object) -> None:
    try:
        Layer(A=a, B=b, V=-1.0)
    except GTControlError as exc:
        assert str(exc).startswith(("A", "B", "Layer", "dim"))


@_FAST
@given(st.integers(1, 3).flatmap(lambda d: st.tuples(_gaussians(d), _gaussians(d))))
def test_ot_steering_is_exact(pair: tuple[Gaussian, Gaussian]) -> None:
    g0, g1 = pair
    geo = gc.ot_steering(g0, g1, T=1.0)
    end = Gaussian(geo.mean_at(1.0), geo.cov_at(1.0))
    scale = 1.0 + float(np.linalg.norm(g1.cov)) ** 0.5
    assert end.bures_wasserstein(g1) <= 1e-10 * scale
    assert abs(geo.kinetic_energy - geo.lower_bound) <= 1e-9 * (1.0 + geo.lower_bound)


@_SLOW
@given(st.integers(1, 2).flatmap(lambda d: st.tuples(_gaussians(d), _gaussians(d))))
def test_steering_reaches_target_above_the_bound(pair: tuple[Gaussian, Gaussian]) -> None:
    g0, g1 = pair
    res = gc.steer(g0, g1, 1.0, n_layers=3, mode="ffn", time_limit=20.0)
    if res.success:
        assert res.terminal_error <= 1e-6
        assert res.kinetic_energy >= res.lower_bound * (1 - 1e-6) - 1e-9
    else:  # honest: never a silent miss
        assert res.status is not gc.Status.SUCCESS
