"""Hostile samples to the experiments' statistics helpers, and a hostile ``deflate``.

``ledoit_wolf`` and ``text_target`` once raised a ZeroDivisionError (after a "Mean of empty
slice" warning) on an empty array and a ValueError on a 1-d, 3-d or str input;
``sliced_wasserstein`` raised an IndexError on an empty one (s61/args/repro_11.py).
``newton_equilibrium(..., deflate=5)`` raised a TypeError (s61/args/repro_12.py). Each is now
refused with one GTControlError naming the argument, and no warning. No torch needed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import refused

from gtcontrol import Gaussian, Layer, newton_equilibrium
from gtcontrol.experiments import ledoit_wolf, mardia, sliced_wasserstein, text_target

BAD_SAMPLES = {
    "empty": np.zeros((0, 0)),
    "no rows": np.zeros((0, 3)),
    "no columns": np.zeros((3, 0)),
    "1-d": np.ones(4),
    "3-d": np.ones((2, 2, 2)),
    "str": "abc",
    "none": None,
    "complex": np.ones((3, 2)) + 1j,
    "ragged": [[1.0, 2.0], [1.0]],
    "nan": np.full((3, 2), np.nan),
}
HELPERS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "ledoit_wolf": (ledoit_wolf, "points"),
    "text_target": (text_target, "tokens"),
    "sliced_wasserstein": (lambda x: sliced_wasserstein(x, n_projections=4), "samples"),
    "sliced_wasserstein(target)": (
        lambda x: sliced_wasserstein(x, Gaussian(np.zeros(2), np.eye(2)), n_projections=4),
        "samples",
    ),
    "mardia": (mardia, "samples"),
}


@pytest.mark.parametrize("bad", sorted(BAD_SAMPLES))
@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_sample_helpers_refuse_malformed_samples(helper: str, bad: str) -> None:
    call, name = HELPERS[helper]
    refused(lambda: call(BAD_SAMPLES[bad]), name)


@pytest.mark.parametrize("exponent", [-300, -120, 0, 120, 300])
def test_ledoit_wolf_is_exact_under_power_of_two_scaling(exponent: int) -> None:
    # the points are scaled into [-1, 1] by a power of two: no overflow of the fourth powers,
    # no underflow of the tiny ones, and the very same numbers otherwise
    x = np.random.default_rng(3).standard_normal((40, 5))
    m0, s0, d0 = ledoit_wolf(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m, s, delta = ledoit_wolf(x * 2.0**exponent)
    assert delta == d0
    np.testing.assert_array_equal(m, m0 * 2.0**exponent)
    np.testing.assert_array_equal(s, s0 * 2.0 ** (2 * exponent))


def test_ledoit_wolf_of_one_point_or_equal_points_is_a_point_mass() -> None:
    for x in ([[5.0, 1.0]], np.ones((4, 2))):
        mean, cov, delta = ledoit_wolf(x)
        assert delta == 1.0 and not np.any(cov)
        np.testing.assert_array_equal(mean, np.asarray(x)[0])


def test_text_target_refuses_tokens_whose_covariance_is_beyond_a_gaussian() -> None:
    x = np.random.default_rng(4).standard_normal((30, 3))
    target, _ = text_target(x * 1e70)
    assert target.dim == 4
    refused(lambda: text_target(x * 1e80), "tokens")


LAYER = Layer(A=[[1.0]], B=[[2.0]], V=-1.0)


@pytest.mark.parametrize(
    ("deflate", "name"),
    [
        (5, "deflate"),
        (None, "deflate"),
        ("ab", "deflate"),
        (1.5, "deflate"),
        ([np.zeros(2)], "deflate[0]"),
        ([[[0.0]], "x"], "deflate[1]"),
        ([[[np.nan]]], "deflate[0]"),
    ],
)
def test_newton_equilibrium_refuses_a_bad_deflate(deflate: Any, name: str) -> None:
    refused(lambda: newton_equilibrium(LAYER, [[0.3]], deflate=deflate), name)


def test_newton_equilibrium_deflates_any_iterable_of_matrices() -> None:
    for deflate in ([[[0.0]]], ([[0.0]],), np.zeros((1, 1, 1)), iter([np.zeros((1, 1))])):
        assert newton_equilibrium(LAYER, [[0.3]], deflate=deflate).success
