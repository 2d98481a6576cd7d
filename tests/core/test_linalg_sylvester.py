"""The recursive blocked triangular Sylvester solve (``gtcontrol._linalg.schur_sylvester``),
against LAPACK's trsyl on the whole matrix and against the residual of the equation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import lapack

from gtcontrol._linalg import SYLVESTER_LEAF, schur_sylvester


def _backward_error(a: np.ndarray, b: np.ndarray, c: np.ndarray, x: np.ndarray) -> float:
    """``‖AX + XBᵀ − C‖ / ((‖A‖ + ‖B‖)‖X‖ + ‖C‖)`` (Frobenius)."""
    size = (np.linalg.norm(a) + np.linalg.norm(b)) * np.linalg.norm(x) + np.linalg.norm(c)
    return float(np.linalg.norm(a @ x + x @ b.T - c) / size)


def _schur(rng: np.random.Generator, n: int, shift: float) -> np.ndarray:
    """The real Schur form of a random non-normal matrix (2×2 blocks for complex pairs)."""
    m = rng.standard_normal((n, n)) / np.sqrt(n) - shift * np.eye(n)
    t, _ = sla.schur(m, output="real")
    return np.asarray(t)


@pytest.mark.parametrize(("m", "n"), [(5, 7), (64, 64), (65, 64), (200, 130), (300, 300)])
def test_it_is_trsyl_on_the_whole_matrix(m: int, n: int) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    a, b = _schur(rng, m, 0.5), _schur(rng, n, 0.7)
    c = rng.standard_normal((m, n))
    x = schur_sylvester(a, b, c)
    ref, scale, info = lapack.dtrsyl(a, b, c, trana="N", tranb="T", isgn=1)
    assert info == 0
    ref = ref / scale
    assert np.linalg.norm(x - ref) <= 1e-12 * np.linalg.norm(ref)
    # backward stable as trsyl is: the normwise residual is a few units of round-off
    assert _backward_error(a, b, c, x) <= 10.0 * max(_backward_error(a, b, c, ref), 1e-16)


def test_a_split_never_cuts_a_two_by_two_block() -> None:
    """A matrix whose complex eigenvalue pair straddles every halving point: the split moves
    past it, and the solve is still exact (cutting it would leave a 1×1 'triangular' block
    with a subdiagonal entry outside, and a wrong answer)."""
    n = 2 * SYLVESTER_LEAF + 2
    rng = np.random.default_rng(1)
    t = np.triu(rng.standard_normal((n, n)) / np.sqrt(n))
    np.fill_diagonal(t, -1.0 - rng.random(n))
    for k in (n // 2, n // 4, 3 * n // 4):  # 2×2 blocks at the halving points
        t[k, k - 1] = -0.5
        t[k - 1, k] = 0.5
        t[k, k] = t[k - 1, k - 1]
    c = rng.standard_normal((n, n))
    x = schur_sylvester(t, t, c)
    assert _backward_error(t, t, c, x) <= 1e-15


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 160),
    n=st.integers(1, 160),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_residual_vanishes_for_any_shape(m: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = _schur(rng, m, 1.0), _schur(rng, n, 1.0)
    c = rng.standard_normal((m, n))
    x = schur_sylvester(a, b, c)
    assert _backward_error(a, b, c, x) <= 1e-15
