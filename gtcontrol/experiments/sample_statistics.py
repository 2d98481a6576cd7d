"""The statistics of a token cloud that :func:`~gtcontrol.experiments.gaussianity.gaussianity`
tests against Gaussian nulls (numpy/scipy only).

* Mardia's multivariate skewness ``b1 = N⁻² Σ_ij (z_iᵀ z_j)³`` and kurtosis ``b2 = N⁻¹ Σ_i |z_i|⁴``
  of the whitened sample ``z_i = Σ̂^{-1/2}(x_i − m̂)`` (1/N covariance, restricted to its numerical
  range of rank ``r``). ``b1`` needs all ``N²`` inner products: they are formed block by block
  (upper triangle only), so ``N = 10⁴`` at ``d = 384`` needs 40 MB and a few seconds, not the
  800 MB Gram matrix.
* The Székely–Rizzo energy statistic ``N (2 E|z − G| − E|G − G'| − E|z − z'|)`` against
  ``G ~ N(0, I_r)``: an omnibus, consistent test that, unlike Mardia's, has power against a mixture
  separated along a single direction. Its pairwise distances come from the same Gram blocks.
* The sliced 2-Wasserstein distance between the whitened sample and ``N(0, I_r)`` — the
  moment-matched Gaussian in whitened coordinates — averaged over random directions θ:
  ``SW² = mean_θ W2²(θᵀz, N(0, 1))``, each 1-D term in closed form
  ``W2² = mean(y²) − 2 Σ_i y_(i) (φ(q_{i−1}) − φ(q_i)) + 1`` with ``q_i = Φ⁻¹(i/N)``.
* The fraction of coordinates (in the original basis) whose D'Agostino–Pearson normality test
  rejects at ``coord_level``.

Reference: the paper cited in :mod:`gtcontrol`, numerical section; Mardia, Biometrika 57
(1970) 519–530; Székely & Rizzo, J. Multivariate Anal. 93 (2005) 58–80.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats as _st
from scipy.special import gammaln

from .._linalg import RANK_RTOL, FloatArray, sym
from .._status import Budget
from .._validation import MAX_ENTRY, as_float_array, as_positive_float, as_positive_int, as_seed
from ..errors import InvalidParametersError
from ..model.gaussian import Gaussian

__all__ = ["MAX_PROJECTIONS", "MardiaStatistics", "mardia", "sliced_wasserstein"]

#: Finite cap on the number of projection directions.
MAX_PROJECTIONS = 100_000


@dataclass(frozen=True)
class MardiaStatistics:
    """Mardia's multivariate skewness ``b1`` and kurtosis ``b2`` of a sample of rank ``rank``.

    For a Gaussian sample of size N in rank r, ``E b2 = r(r+2)(N−1)/(N+1)`` exactly and
    ``E b1 → r(r+1)(r+2)/N``.

    Attributes
    ----------
    skewness
        ``b1 = N⁻² Σ_ij (z_iᵀ z_j)³``.
    kurtosis
        ``b2 = N⁻¹ Σ_i |z_i|⁴``.
    rank
        Numerical rank ``r`` of the sample covariance (the whitened dimension).
    """

    skewness: float
    kurtosis: float
    rank: int


def as_samples(
    samples: Any, *, min_rows: int, name: str = "samples", max_abs: float = MAX_ENTRY
) -> FloatArray:
    """``samples`` as a finite real ``(N, d)`` array with ``N ≥ min_rows``, ``d ≥ 1`` and entries
    up to ``max_abs``, or refuse them naming ``name``."""
    x = as_float_array(name, samples, ndim=2, max_abs=max_abs)
    if x.shape[0] < min_rows or not x.shape[1]:
        raise InvalidParametersError(
            f"{name}: expected at least {min_rows} row{'s' if min_rows > 1 else ''} and one "
            f"column, got shape {x.shape}"
        )
    return x


def whiten(x: FloatArray, rtol: float) -> FloatArray:
    """``Σ̂^{-1/2}(x − m̂)`` in the eigenbasis of the 1/N covariance, restricted to its range."""
    xc = x - x.mean(axis=0)
    cov = (xc.T @ xc) / x.shape[0]
    w, u = np.linalg.eigh(sym(cov))
    top = float(w[-1])
    if top <= 0.0:
        raise InvalidParametersError("samples: all rows are equal (zero covariance)")
    keep = w > rtol * top
    return np.asarray((xc @ u[:, keep]) / np.sqrt(w[keep]))


def _pair_means(
    z: FloatArray, block: int, *, distances: bool = True, budget: Budget | None = None
) -> tuple[float, float]:
    """``N⁻² Σ_ij (z_iᵀz_j)³`` and ``N⁻² Σ_ij |z_i − z_j|`` from one pass over the Gram matrix.

    Only the upper triangle is formed, ``block`` rows at a time (memory ``block × N``). With a
    ``budget``, it is checked between blocks (:meth:`Budget.check` raises ``BudgetExhausted``):
    the pass is ``N² r`` flops, 4 s at N = 8192, r = 256.
    """
    n = z.shape[0]
    sq_norms = np.einsum("ij,ij->i", z, z)
    cubes = dist = 0.0
    # Three work arrays for the whole pass, touched once: a fresh (block, N) array per block is
    # returned to the system when freed and its pages are faulted in again by the next, at a
    # cost that depends on the machine (on a VM whose first touch ran at 100 MB/s, 0.35 s for
    # each 32 MiB array, seven times the block's arithmetic).
    rows = min(block, n)
    work = np.empty((3, rows * n))
    for i0 in range(0, n, block):
        if budget is not None:
            budget.check()
        i1 = min(i0 + block, n)
        k, m = i1 - i0, n - i0
        g, sq, d2 = (w[: k * m].reshape(k, m) for w in work)
        np.matmul(z[i0:i1], z[i0:].T, out=g)  # rows i0..i1 against columns i0..N
        # Within the diagonal block every ordered pair appears once; beyond it, once for two.
        np.multiply(g, g, out=sq)
        cubes += float(np.vdot(sq[:, :k], g[:, :k])) + 2.0 * float(np.vdot(sq[:, k:], g[:, k:]))
        if distances:
            np.add(sq_norms[i0:i1, None], sq_norms[None, i0:], out=d2)
            d2 -= g
            d2 -= g
            dd = np.sqrt(np.maximum(d2, 0.0, out=d2), out=d2)
            dd[np.arange(k), np.arange(k)] = 0.0  # |z_i − z_i| = 0 exactly (not √roundoff)
            dist += float(dd[:, :k].sum()) + 2.0 * float(dd[:, k:].sum())
    return cubes / (n * n), dist / (n * n)


def _expected_distance(sq_norms: FloatArray, r: int) -> FloatArray:
    """``E|a − G|`` for ``G ~ N(0, I_r)`` and each ``|a|² = sq_norms``.

    ``|a − G|²`` is noncentral χ²_r(λ = |a|²), a Poisson(λ/2) mixture of central χ²_{r+2k}, and
    ``E sqrt(χ²_ν) = √2 Γ((ν+1)/2)/Γ(ν/2)``. (The closed form ``√2 Γ((r+1)/2)/Γ(r/2)
    ₁F₁(−½; r/2; −λ/2)`` overflows in scipy at r ≈ 384, λ ≈ r, so the series is summed instead.)
    """
    half = 0.5 * np.asarray(sq_norms, dtype=float)
    top = float(half.max()) if half.size else 0.0
    k = np.arange(int(top + 12.0 * math.sqrt(top) + 40.0))
    nu = r + 2.0 * k
    chi_mean = math.sqrt(2.0) * np.exp(gammaln((nu + 1.0) / 2.0) - gammaln(nu / 2.0))
    pmf = _st.poisson.pmf(k[None, :], half[:, None])
    return np.asarray(pmf @ chi_mean)


def mardia(
    samples: Any, *, block_size: int = 128, rank_rtol: float = RANK_RTOL
) -> MardiaStatistics:
    """Mardia's multivariate skewness and kurtosis, computed in row blocks.

    ``b1 = N⁻² Σ_ij (z_iᵀ z_j)³``, ``b2 = N⁻¹ Σ_i |z_i|⁴`` with ``z_i = Σ̂^{-1/2}(x_i − m̂)``, the
    1/N covariance restricted to its numerical range (eigenvalues above ``rank_rtol λ_max``).
    The ``N²`` Gram entries are formed ``block_size`` rows at a time (upper triangle only):
    memory ``O(block_size · N)``, about ``N² r`` flops (Mardia, Biometrika 57 (1970) 519–530).

    Parameters
    ----------
    samples
        Array ``(N, d)`` of finite values, ``N ≥ 2``.
    block_size
        Rows of the Gram matrix formed at a time.
    rank_rtol
        Eigenvalues of the sample covariance below ``rank_rtol λ_max`` are treated as zero.

    Returns
    -------
    MardiaStatistics

    Raises
    ------
    InvalidParametersError
        On a non-2-d or non-finite sample, fewer than 2 rows, no columns, or zero covariance.

    Examples
    --------
    For a Gaussian sample of size N in rank r, ``E b2 = r(r+2)(N−1)/(N+1)``:

    >>> import numpy as np
    >>> from gtcontrol.experiments import mardia
    >>> x = np.random.default_rng(0).standard_normal((4000, 3))
    >>> stats = mardia(x)
    >>> stats.rank, bool(abs(stats.kurtosis - 15 * 3999 / 4001) < 1.0), bool(stats.skewness < 0.1)
    (3, True, True)
    """
    x = as_samples(samples, min_rows=2)
    z = whiten(x, as_positive_float("rank_rtol", rank_rtol))
    b1, _ = _pair_means(z, as_positive_int("block_size", block_size), distances=False)
    r2 = np.einsum("ij,ij->i", z, z)
    return MardiaStatistics(float(b1), float(np.mean(r2 * r2)), int(z.shape[1]))


@lru_cache(maxsize=32)
def _quantile_weights(n: int) -> FloatArray:
    """``φ(q_{i−1}) − φ(q_i)`` with ``q_i = Φ⁻¹(i/n)``, ``φ(±∞) = 0`` (= ``∫ Φ⁻¹`` on each cell)."""
    q = _st.norm.ppf(np.arange(n + 1) / n)
    dens = _st.norm.pdf(q)  # pdf(±inf) = 0
    w = np.asarray(dens[:-1] - dens[1:], dtype=np.float64)
    w.setflags(write=False)
    return w


def _sliced_w2_squared(
    z: FloatArray, directions: FloatArray, mu: Any = 0.0, sd: Any = 1.0
) -> FloatArray:
    """``W2²(θᵀz, N(μ_θ, σ_θ²))`` for each row θ of ``directions`` (exact for the empirical law).

    ``Σ_i w_i = 0``, so the shift ``μ`` enters only through ``mean((y − μ)²)``.
    """
    y = np.sort(z @ directions.T, axis=0)
    w = _quantile_weights(z.shape[0])
    dev = y - mu
    return np.asarray(np.mean(dev * dev, axis=0) - 2.0 * sd * (w @ y) + sd * sd)


def random_directions(rank: int, k: int, seed: int) -> FloatArray:
    """``k`` seeded uniform unit directions of ``R^rank`` (the projections' directions)."""
    rng = np.random.default_rng([seed, rank, k, 7919])
    th = rng.standard_normal((k, rank))
    return np.asarray(th / np.linalg.norm(th, axis=1, keepdims=True))


def sliced_wasserstein(
    samples: Any,
    target: Gaussian | None = None,
    *,
    n_projections: int = 128,
    seed: int = 0,
    rank_rtol: float = RANK_RTOL,
) -> float:
    """Sliced 2-Wasserstein distance from the empirical law of ``samples`` to a Gaussian.

    ``SW = sqrt(mean_θ W2²(θᵀx, θ_# N(m, Σ)))`` over ``n_projections`` seeded uniform directions;
    each 1-D term is exact for the empirical law: with sorted projections ``y_(i)``, ``μ = θᵀm``,
    ``σ² = θᵀΣθ``, ``W2² = mean((y − μ)²) − 2σ Σ_i y_(i) (φ(q_{i−1}) − φ(q_i)) + σ²``,
    ``q_i = Φ⁻¹(i/N)``.

    Parameters
    ----------
    samples
        Array ``(N, d)``.
    target
        The Gaussian to compare with, in the original units. ``None``: the moment-matched
        Gaussian, in whitened units (the sample is whitened by its 1/N covariance restricted to
        its range and compared with ``N(0, I_r)``): an affine-invariant distance.
    n_projections
        Number of directions.
    seed
        Seed of the directions.
    rank_rtol
        Rank threshold of the whitening (``target=None`` only).

    Returns
    -------
    float
        The sliced distance (in whitened units when ``target`` is ``None``).

    Raises
    ------
    InvalidParametersError
        On a malformed sample (not a finite real 2-d array, no rows or no columns), bad
        options or a target of the wrong dimension.

    Examples
    --------
    >>> x = np.random.default_rng(0).standard_normal((500, 2))
    >>> bool(sliced_wasserstein(x, Gaussian(np.zeros(2), np.eye(2))) < 0.1)
    True
    """
    x = as_samples(samples, min_rows=1)
    k = as_positive_int("n_projections", n_projections, maximum=MAX_PROJECTIONS)
    seed = as_seed("seed", seed)
    rank_tol = as_positive_float("rank_rtol", rank_rtol)
    if target is None:
        z = whiten(x, rank_tol)
        th = random_directions(z.shape[1], k, seed)
        return math.sqrt(max(float(np.mean(_sliced_w2_squared(z, th))), 0.0))
    if not isinstance(target, Gaussian) or target.dim != x.shape[1]:
        raise InvalidParametersError(
            f"target: expected a Gaussian of dimension {x.shape[1]}, got {target!r}"
        )
    th = random_directions(x.shape[1], k, seed)
    mu = th @ target.mean
    sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", th, target.cov, th), 0.0))
    w2 = _sliced_w2_squared(x, th, mu, sd)
    return math.sqrt(max(float(np.mean(w2)), 0.0))


def coordinate_fraction(x: FloatArray, level: float) -> float:
    """Fraction of the (non-constant) coordinates whose normality test rejects at ``level``."""
    # Constant coordinates (e.g. a frozen feature) carry no evidence; test the others.
    sd = x.std(axis=0)
    cols = x[:, sd > 1e-12 * max(float(sd.max()), 1e-300)]
    if cols.shape[1] == 0:
        return 0.0
    p = _st.normaltest(cols, axis=0).pvalue
    return float(np.mean(p < level))


def invariant_statistics(
    z: FloatArray, th: FloatArray, block: int, budget: Budget | None = None
) -> FloatArray:
    """Skewness, kurtosis, energy and sliced distance of a whitened sample ``z`` (N, r).

    With a ``budget``, a spent one raises ``BudgetExhausted`` between the blocks of the pair
    sums and before the energy's series."""
    n, r = z.shape
    b1, mean_dist = _pair_means(z, block, budget=budget)
    if budget is not None:
        budget.check()
    r2 = np.einsum("ij,ij->i", z, z)
    # Székely–Rizzo energy statistic N (2 E|z−G| − E|G−G'| − E|z−z'|) against N(0, I_r).
    e_gg = 2.0 * math.exp(gammaln((r + 1.0) / 2.0) - gammaln(r / 2.0))
    energy = n * (2.0 * float(np.mean(_expected_distance(r2, r))) - e_gg - mean_dist)
    sw = math.sqrt(max(float(np.mean(_sliced_w2_squared(z, th))), 0.0))
    return np.array([b1, float(np.mean(r2 * r2)), energy, sw])
