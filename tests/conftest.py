"""Shared fixtures: seeded random generators and random matrices of the kinds tests need.

Every random draw in the suite comes from a generator seeded explicitly (here from the test's
own node id, so a test's numbers do not change when other tests are added or reordered).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import pytest


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test's node id (stable across runs and orderings)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def random_spd(rng: np.random.Generator, d: int, lo: float = 0.3, hi: float = 2.0) -> np.ndarray:
    """A random symmetric positive-definite matrix with eigenvalues uniform in ``[lo, hi]``."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(lo, hi, d)) @ q.T


def random_skew(rng: np.random.Generator, d: int) -> np.ndarray:
    """A random skew-symmetric matrix with standard normal entries above the diagonal."""
    x = rng.standard_normal((d, d))
    return x - x.T


@pytest.fixture
def spd() -> Callable[..., np.ndarray]:
    """Factory ``spd(rng, d, lo=0.3, hi=2.0)`` of random SPD matrices (see :func:`random_spd`)."""
    return random_spd


@pytest.fixture
def skew() -> Callable[..., np.ndarray]:
    """Factory ``skew(rng, d)`` of random skew-symmetric matrices."""
    return random_skew
