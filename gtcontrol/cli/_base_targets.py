"""The end points of task ``steer`` through a model's layer (``[base] model = ...``).

The initial is the moments of the tokens entering the layer (or ``N(e, I ⊕ 0)``), augmented by
the affine coordinate; the generated target (``[base] target = "rotated"``) is the initial
rotated, stretched and shifted on its own active subspace, so that it keeps the rank, the affine
coordinate and every null direction (LayerNorm's) of the initial: what a base whose heads never
move those directions can reach.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from .._linalg import FloatArray
from ..model.gaussian import Gaussian

__all__ = ["rotated_target", "token_moments"]


def token_moments(tokens: FloatArray) -> Gaussian:
    """``N(m ⊕ 1, Σ ⊕ 0)``: the sample moments of ``tokens`` (one per row), augmented.

    Parameters
    ----------
    tokens
        The tokens entering the layer, shape ``(n, d)``.

    Returns
    -------
    Gaussian
        On ``R^{d+1}``, the affine coordinate last (mean 1, variance 0). The sample covariance
        (not shrunk) keeps the tokens' null directions, LayerNorm's among them.
    """
    x = np.asarray(tokens, dtype=float)
    mean = x.mean(axis=0)
    xc = x - mean
    d = x.shape[1]
    cov = np.zeros((d + 1, d + 1))
    cov[:d, :d] = xc.T @ xc / x.shape[0]
    return Gaussian(np.append(mean, 1.0), (cov + cov.T) / 2, name="initial")


def rotated_target(
    initial: Gaussian, *, angle: float, shift: float, stretch: float, seed: int
) -> Gaussian:
    """``initial`` stretched, rotated and shifted on its active subspace (seeded).

    With ``U`` an orthonormal basis of the range of ``Σ0`` (rank ``r``): the eigenvalues of
    ``Σ0`` are multiplied by ``exp(stretch · z)``, then ``Q = U exp(angle · K) Uᵀ + (I − UUᵀ)``
    rotates the covariance and the mean, ``K`` a random skew-symmetric matrix whose eigen-angles
    have root mean square 1; the mean then moves by ``shift · sqrt(tr Σ0 / r) · U w``, ``z`` and
    ``w`` standard normal. Directions outside the range (the affine coordinate, LayerNorm's null
    direction) are left untouched.

    Parameters
    ----------
    initial
        The Gaussian to move.
    angle
        Root-mean-square rotation angle in radians (0: no rotation).
    shift
        Mean shift per active coordinate, in units of ``sqrt(tr Σ0 / r)``.
    stretch
        Deviation of the log-factors of the eigenvalues (0: none).
    seed
        Seed of ``K``, ``z`` and ``w``.

    Returns
    -------
    Gaussian
        The target, of the same dimension and rank.

    Examples
    --------
    >>> g0 = Gaussian([0.0, 0.0, 1.0], [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    >>> g1 = rotated_target(g0, angle=0.5, shift=0.0, stretch=0.0, seed=0)
    >>> g1.rank, float(g1.mean[2]), bool(abs(g1.cov.trace() - 3.0) < 1e-12)
    (2, 1.0, True)
    """
    rng = np.random.default_rng(seed)
    d, r = initial.dim, initial.rank
    lam, vec = np.linalg.eigh(initial.cov)
    u, lam = vec[:, d - r :], lam[d - r :]
    k = rng.standard_normal((r, r))
    skew = (k - k.T) / np.sqrt(2.0 * max(r, 1))  # eigen-angles of root mean square ~1
    rot = scipy.linalg.expm(angle * skew) if r else np.eye(0)
    q = u @ rot @ u.T + (np.eye(d) - u @ u.T)
    cov = (u * (lam * np.exp(stretch * rng.standard_normal(r)))) @ u.T
    scale = np.sqrt(max(float(lam.sum()), 0.0) / max(r, 1))
    mean = q @ initial.mean + u @ (shift * scale * rng.standard_normal(r))
    cov = q @ cov @ q.T
    return Gaussian(mean, (cov + cov.T) / 2, name="target")
