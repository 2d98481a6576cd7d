"""Gaussianity diagnostics for clouds of tokens, each against a Monte Carlo Gaussian null.

The paper's first piece of evidence is that tokens of a pretrained Transformer fed Gaussian
inputs stay close to moment-matched Gaussians through early and middle layers (Alcalde, Ji,
Zuazua, arXiv:2606.07600 (2026), numerical section). :func:`gaussianity` measures that with five
statistics of a sample ``x_1..x_N ∈ R^d`` (:mod:`~gtcontrol.experiments.sample_statistics`):
Mardia's skewness and kurtosis, the Székely–Rizzo energy statistic, the sliced 2-Wasserstein
distance to the moment-matched Gaussian, and the fraction of coordinates whose
D'Agostino–Pearson test rejects.

Mardia's statistics and the energy statistic are affine invariant, and so is the distribution
of the whitened sliced distance (whitening is unique up to a rotation; the directions are
uniform), so their null depends only on ``(N, r)``: it is simulated once from standard Gaussian
samples and cached. The coordinate fraction depends on the correlations, so its null is a
parametric bootstrap from ``N(m̂, Σ̂)``. Each statistic gets a z-score against its null (positive,
right-skewed statistics on a log scale) and a p-value from the Student-t prediction interval of
one new draw from a normal null with estimated mean and spread (kurtosis two-sided: a bimodal
mixture has *low* kurtosis); the verdict ``rejected`` is Bonferroni over the five statistics.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from .._display import Axes
from .._linalg import RANK_RTOL, FloatArray
from .._status import Budget, BudgetExhausted, Outcome, ResultFields, Status
from .._validation import as_float_array, as_positive_float, as_positive_int, as_seed, as_time_limit
from ..errors import InvalidParametersError
from ._common import CAUTIOUS_FLOPS
from .sample_statistics import (
    MAX_PROJECTIONS,
    MardiaStatistics,
    coordinate_fraction,
    invariant_statistics,
    mardia,
    random_directions,
    sliced_wasserstein,
    whiten,
)

__all__ = [
    "STATISTICS",
    "GaussianityResult",
    "MardiaStatistics",
    "NullStatistic",
    "gaussianity",
    "mardia",
    "sliced_wasserstein",
]

#: Names of the five statistics, in report order.
STATISTICS = (
    "mardia_skewness",
    "mardia_kurtosis",
    "energy",
    "sliced_wasserstein",
    "coordinate_rejections",
)
_LOG_SCALE = {"mardia_skewness": True, "energy": True, "sliced_wasserstein": True}
_TWO_SIDED = {"mardia_kurtosis": True}
#: Finite cap on the Monte Carlo replicates of each null.
MAX_NULL = 10_000
#: Fewest samples the test takes: ``max(MIN_SAMPLES, d + 2)`` rows (the sample covariance needs
#: ``d + 2``; the per-coordinate normality test needs 20).
MIN_SAMPLES = 20


def min_samples(d: int) -> int:
    """The fewest rows :func:`gaussianity` takes in dimension ``d``: ``max(20, d + 2)``."""
    return max(MIN_SAMPLES, d + 2)


@dataclass(frozen=True)
class NullStatistic:
    """One statistic against its Monte Carlo Gaussian null.

    Attributes
    ----------
    name
        One of :data:`STATISTICS`.
    value
        The statistic of the sample.
    null_mean, null_std
        Mean and standard deviation of the statistic over the null replicates (on the scale the
        z-score uses: log for skewness and sliced Wasserstein); ``nan`` with fewer than two
        replicates (a run cut short by its ``time_limit``).
    z
        ``(value − null_mean)/null_std`` on that scale.
    p_value
        Upper-tail p-value (two-sided for the kurtosis) of ``z/sqrt(1 + 1/n_null)`` under a
        Student t with ``n_null − 1`` degrees of freedom.
    rejected
        ``p_value < level`` (this statistic alone, unadjusted).
    """

    name: str
    value: float
    null_mean: float
    null_std: float
    z: float
    p_value: float
    rejected: bool


@dataclass(frozen=True, eq=False)
class GaussianityResult(ResultFields, Outcome):
    """Outcome of :func:`gaussianity`.

    Attributes
    ----------
    n, dim, rank
        Sample size, dimension, numerical rank of the sample covariance (the whitened dimension).
    statistics
        The five :class:`NullStatistic`, in the order of :data:`STATISTICS`.
    level
        Family-wise level of the verdict.
    p_value
        Bonferroni-adjusted p-value ``min(1, 5 min_k p_k)`` (``nan`` when a null has fewer than
        two replicates).
    rejected
        ``p_value < level``: the sample is declared non-Gaussian.
    status
        ``Status.SUCCESS`` (the test ran; the verdict is ``rejected``), or
        ``Status.BUDGET_EXHAUSTED`` when the ``time_limit`` ran out during the Monte Carlo
        nulls: the p-values then use the replicates done (``stats["n_null_done"]``).
    message
        The verdict in words, or why the run was cut short.
    stats
        ``n_null`` (requested), ``n_null_done`` (fewest replicates of the two nulls),
        ``seconds``.
    """

    n: int
    dim: int
    rank: int
    statistics: tuple[NullStatistic, ...]
    level: float
    p_value: float
    rejected: bool

    _summary_fields = ("n", "dim", "rank", "p_value", "level", "rejected")

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_z_bars

        verdict = "rejected" if self.rejected else "not rejected"
        title = f"Gaussianity of {self.n} samples: p = {self.p_value:.3g}, {verdict}"
        draw_z_bars(ax, {s.name: s.z for s in self.statistics}, title=title)

    def statistic(self, name: str) -> NullStatistic:
        """The statistic called ``name``.

        Parameters
        ----------
        name
            One of :data:`STATISTICS`.

        Returns
        -------
        NullStatistic

        Raises
        ------
        InvalidParametersError
            On an unknown name.
        """
        for s in self.statistics:
            if s.name == name:
                return s
        raise InvalidParametersError(f"name: expected one of {STATISTICS}, got {name!r}")

    def row(self) -> dict[str, Any]:
        """A flat dictionary for tables: each statistic's value and z, the verdict."""
        out: dict[str, Any] = {"n": self.n, "dim": self.dim, "rank": self.rank}
        for s in self.statistics:
            out[s.name] = s.value
            out[f"{s.name}_z"] = s.z
        out["p_value"] = self.p_value
        out["rejected"] = self.rejected
        return out


_NULL_CACHE: OrderedDict[tuple[int, ...], FloatArray] = OrderedDict()
_NULL_CACHE_SIZE = 64


def clear_null_cache() -> None:
    """Forget the cached Monte Carlo nulls (for benchmarks of the cold path)."""
    _NULL_CACHE.clear()


def _invariant_null(
    n: int, rank: int, n_null: int, n_projections: int, seed: int, block: int, budget: Budget
) -> FloatArray:
    """Invariant statistics of up to ``n_null`` standard Gaussian samples ``(n, rank)``.

    Affine invariance makes this the null of every Gaussian of rank ``rank``. Complete nulls are
    cached per process (at most 64); the replicates stop early, uncached, when ``budget`` runs
    out (the rows done are returned).
    """
    key = (n, rank, n_null, n_projections, seed, block)
    hit = _NULL_CACHE.get(key)
    if hit is not None:
        _NULL_CACHE.move_to_end(key)
        return hit
    rng = np.random.default_rng([seed, n, rank, 104729])
    th = random_directions(rank, n_projections, seed)
    rows: list[FloatArray] = []
    for _ in range(n_null):
        if budget.exhausted:
            return np.array(rows).reshape(len(rows), 4)
        g = rng.standard_normal((n, rank))
        try:
            rows.append(invariant_statistics(whiten(g, RANK_RTOL), th, block, budget))
        except BudgetExhausted:  # a replicate cut short is dropped
            return np.array(rows).reshape(len(rows), 4)
    out = np.array(rows)
    out.setflags(write=False)
    _NULL_CACHE[key] = out
    while len(_NULL_CACHE) > _NULL_CACHE_SIZE:
        _NULL_CACHE.popitem(last=False)
    return out


def _coordinate_null(
    x: FloatArray, rank: int, opts: _Options, budget: Budget
) -> tuple[FloatArray, float]:
    """Parametric bootstrap of the coordinate fraction from ``N(m̂, Σ̂)`` (correlations matter).

    Returns the replicates done before ``budget`` ran out and the binomial floor
    ``sqrt(α(1−α)/d)`` of the null's spread.
    """
    n, d = x.shape
    mean = x.mean(axis=0)
    xc = x - mean
    w, u = np.linalg.eigh((xc.T @ xc) / n)
    keep = w > opts.rank_rtol * float(w[-1])
    factor = u[:, keep] * np.sqrt(w[keep])
    rng = np.random.default_rng([opts.seed, n, d, 15485863])
    reps = []
    for _ in range(opts.n_null):
        if budget.exhausted:
            break
        sample = mean + rng.standard_normal((n, rank)) @ factor.T
        reps.append(coordinate_fraction(sample, opts.coord_level))
    return np.array(reps), math.sqrt(opts.coord_level * (1.0 - opts.coord_level) / d)


def _compare(
    name: str, value: float, null: FloatArray, level: float, floor: float
) -> NullStatistic:
    n = null.shape[0]
    if n < 2:  # a null cut short by the time limit: no reference distribution
        nan = math.nan
        return NullStatistic(name, float(value), nan, nan, nan, nan, False)
    log = _LOG_SCALE.get(name, False)
    obs = math.log(max(value, 1e-300)) if log else value
    ref = np.log(np.maximum(null, 1e-300)) if log else null
    mu = float(np.mean(ref))
    sd = max(float(np.std(ref, ddof=1)), floor)
    z = (obs - mu) / sd if sd > 0 else (0.0 if obs == mu else math.copysign(math.inf, obs - mu))
    # Prediction interval for one new draw from a normal null whose mean and spread are estimated
    # from n replicates: (obs − mean)/(sd sqrt(1 + 1/n)) ~ Student t with n − 1 dof.
    t = z / math.sqrt(1.0 + 1.0 / n)
    tail = _st.t.sf(abs(t) if _TWO_SIDED.get(name, False) else t, n - 1)
    p = float(2.0 * tail) if _TWO_SIDED.get(name, False) else float(tail)
    return NullStatistic(name, float(value), mu, sd, float(z), min(p, 1.0), bool(p < level))


@dataclass(frozen=True)
class _Options:
    """The validated options of :func:`gaussianity`."""

    level: float
    n_null: int
    n_projections: int
    coord_level: float
    seed: int
    block_size: int
    rank_rtol: float


def gaussianity_options(
    level: Any,
    n_null: Any,
    n_projections: Any,
    coord_level: Any,
    seed: Any,
    block_size: Any,
    rank_rtol: Any,
) -> _Options:
    """The options of :func:`gaussianity`, validated (each bad one named)."""
    lvl = as_positive_float("level", level)
    clvl = as_positive_float("coord_level", coord_level)
    if lvl >= 1 or clvl >= 1:
        raise InvalidParametersError(
            f"level, coord_level: expected numbers in (0, 1), got {level!r}, {coord_level!r}"
        )
    reps = as_positive_int("n_null", n_null, maximum=MAX_NULL)
    if reps < 8:
        raise InvalidParametersError(f"n_null: expected at least 8 replicates, got {n_null!r}")
    return _Options(
        level=lvl,
        n_null=reps,
        n_projections=as_positive_int("n_projections", n_projections, maximum=MAX_PROJECTIONS),
        coord_level=clvl,
        seed=as_seed("seed", seed),
        block_size=as_positive_int("block_size", block_size),
        rank_rtol=as_positive_float("rank_rtol", rank_rtol),
    )


def _check_samples(samples: Any) -> FloatArray:
    x = as_float_array("samples", samples, ndim=2)
    n, d = x.shape
    if n < min_samples(d):
        raise InvalidParametersError(
            f"samples: expected at least max(20, d + 2) = {min_samples(d)} rows for d = {d}, "
            f"got {n}"
        )
    return x


def _verdict(p_adj: float, level: float, rank: int) -> str:
    if math.isnan(p_adj):
        return "no verdict (a Gaussian null has fewer than 2 replicates)"
    word = "rejected" if p_adj < level else "not rejected"
    return f"Gaussianity {word} at level {level:g} (Bonferroni p = {p_adj:.3g}, rank {rank})"


def unbudgeted_seconds(n: int, d: int) -> float:
    """A cautious estimate of the seconds of :func:`gaussianity`'s part that runs whatever its
    ``time_limit`` (the sample's whitening), on ``n`` samples of width ``d`` on one CPU:
    centring, covariance and whitening ``4 N d²`` and the eigendecomposition ``10 d³`` flops at
    the rate that also bounds a forward pass (``_common.CAUTIOUS_FLOPS``, 2e10 flop/s; N = 8192,
    d = 384: 0.27 s estimated, 0.4 s measured beside two CPU-bound processes). A caller with a
    budget does not start a test that this would not fit in."""
    return (4.0 * n * d * d + 10.0 * d**3) / CAUTIOUS_FLOPS


def gaussianity(
    samples: Any,
    *,
    level: float = 0.01,
    n_null: int = 32,
    n_projections: int = 128,
    coord_level: float = 0.05,
    seed: int = 0,
    block_size: int = 128,
    rank_rtol: float = RANK_RTOL,
    time_limit: float | None = None,
) -> GaussianityResult:
    """Test whether ``samples`` (N, d) look like a draw from a Gaussian, with five statistics.

    Parameters
    ----------
    samples
        Array ``(N, d)`` of finite values, ``N ≥ max(20, d + 2)``.
    level
        Family-wise level of the verdict (Bonferroni over the five statistics).
    n_null
        Monte Carlo replicates of each null (at least 8, at most 10 000).
    n_projections
        Random directions of the sliced Wasserstein distance (at most 100 000).
    coord_level
        Level of the per-coordinate D'Agostino–Pearson test.
    seed
        Seeds the null samples and the projection directions (never the data).
    block_size
        Rows per block of the Mardia skewness.
    rank_rtol
        Eigenvalues of the sample covariance below ``rank_rtol λ_max`` are treated as zero (a
        LayerNorm output lies in a hyperplane: rank ``d − 1``); the invariant statistics and their
        null live in the remaining ``r`` dimensions.
    time_limit
        Wall-clock limit in seconds (``None``: none). The statistics of the sample are always
        computed; the Monte Carlo nulls stop when the limit is reached.

    Returns
    -------
    GaussianityResult
        Five :class:`NullStatistic` and the verdict. The p-values treat the Monte Carlo null as
        normal (log scale for skewness, energy and sliced Wasserstein) with estimated mean and
        spread (Student t with ``n_null − 1`` degrees of freedom), so they are accurate to the
        extent that this shape holds in the tail; measured false-rejection rate at level 0.01:
        0.5–2 % over 200 Gaussian samples (N = 1000, d = 8) depending on the null's seed. The
        standard deviation of the coordinate fraction is floored at the binomial value
        ``sqrt(α(1−α)/d)`` of independent coordinates, so that a degenerate null (all zeros at
        small d) cannot make a single rejection look infinitely significant. When the
        ``time_limit`` cuts the nulls short the status is ``Status.BUDGET_EXHAUSTED`` and the
        p-values use the replicates done (``nan`` below two).

    Raises
    ------
    InvalidParametersError
        On a malformed sample, too few rows, bad options, or zero covariance.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026); Mardia, Biometrika 57 (1970) 519–530;
    Székely & Rizzo, J. Multivariate Anal. 93 (2005) 58–80; D'Agostino & Pearson,
    Biometrika 60 (1973) 613–622.

    Examples
    --------
    >>> x = np.random.default_rng(0).standard_normal((200, 3))
    >>> res = gaussianity(x, n_null=8)
    >>> res.status, res.rejected, res.rank
    (<Status.SUCCESS: 'success'>, False, 3)
    """
    clock = time.perf_counter()
    x = _check_samples(samples)
    opts = gaussianity_options(
        level, n_null, n_projections, coord_level, seed, block_size, rank_rtol
    )
    budget = Budget(as_time_limit(time_limit))
    n, d = x.shape
    z = whiten(x, opts.rank_rtol)
    r = int(z.shape[1])
    th = random_directions(r, opts.n_projections, opts.seed)
    # the sample's own statistics are the wrap-up of a spent budget: they may use half of its
    # grace (a quarter of max(1 s, 10 %) past the deadline) and finish the block they are in
    # (N² r flops in all: 4 s at 8192 × 256)
    grace = budget.grace()
    try:
        wrap = Budget(None if grace is None else 0.5 * grace)
        observed = invariant_statistics(z, th, opts.block_size, wrap)
        cut = False
    except BudgetExhausted:  # no observed statistic: no verdict (NaN p-values)
        observed, cut = np.full(4, np.nan), True
    null = _invariant_null(
        n, r, opts.n_null, opts.n_projections, opts.seed, opts.block_size, budget
    )
    frac_null, binom_sd = _coordinate_null(x, r, opts, budget)
    grace = budget.grace()
    if grace is not None and grace < 2e-7 * n * d:  # d normality tests of N values (0.45 s
        coordinates, cut = math.nan, True  # at 8192 × 256): not begun past the grace
    else:
        coordinates = coordinate_fraction(x, opts.coord_level)
    stats_ = (
        *(
            _compare(name, float(observed[j]), null[:, j], opts.level, 0.0)
            for j, name in enumerate(STATISTICS[:4])
        ),
        _compare(
            "coordinate_rejections",
            coordinates,
            frac_null,
            opts.level,
            binom_sd,
        ),
    )
    p_min = min(s.p_value for s in stats_)
    p_adj = math.nan if math.isnan(p_min) else min(1.0, len(stats_) * p_min)
    done = min(null.shape[0], frac_null.shape[0])
    verdict = _verdict(p_adj, opts.level, r)
    if cut:
        status = Status.BUDGET_EXHAUSTED
        message = (
            f"{budget.reason()} before the sample's own statistics were all computed; {verdict}"
        )
    elif done < opts.n_null:
        status = Status.BUDGET_EXHAUSTED
        message = (
            f"{budget.reason()}: the Gaussian nulls hold {done} of {opts.n_null} replicates; "
            f"{verdict}"
        )
    else:
        status, message = Status.SUCCESS, verdict
    return GaussianityResult(
        n=n,
        dim=d,
        rank=r,
        statistics=stats_,
        level=opts.level,
        p_value=p_adj,
        rejected=bool(p_adj < opts.level),
        status=status,
        message=message,
        stats={"n_null": opts.n_null, "n_null_done": done, "seconds": time.perf_counter() - clock},
    )
