"""Random matrices of the kinds the tests need, from explicitly seeded generators.

Imported by the test modules (``from helpers import ...``) and served as fixtures by conftest.py.
"""

from __future__ import annotations

import numpy as np


def random_spd(rng: np.random.Generator, d: int, lo: float = 0.3, hi: float = 2.0) -> np.ndarray:
    """A random symmetric positive-definite matrix with eigenvalues uniform in ``[lo, hi]``."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(lo, hi, d)) @ q.T


def wishart_spd(rng: np.random.Generator, d: int, shift: float = 0.5) -> np.ndarray:
    """``F Fᵀ/d + shift·I`` with standard normal ``F`` (d×d): SPD, eigenvalues ≥ ``shift``."""
    f = rng.standard_normal((d, d))
    return f @ f.T / d + shift * np.eye(d)


def random_skew(rng: np.random.Generator, d: int) -> np.ndarray:
    """A random skew-symmetric matrix ``S − Sᵀ`` with standard normal ``S``."""
    x = rng.standard_normal((d, d))
    return x - x.T
