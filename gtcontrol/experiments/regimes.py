"""Token-level Transformers with prescribed attention against the moment predictions.

One experiment of the paper (Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026)), token level against
gtcontrol's moment model (the feed-forward experiment is in
:mod:`~gtcontrol.experiments.closure`):

* :func:`prescribed_attention_regimes` — pure attention ``dx/dt = V Attn(x)`` with ``V = v I``
  and ``B ≻ 0`` (``A = 0`` unless stated): with opposite definiteness (``v < 0``) the covariance
  collapses (``Σ(t) = (Σ0⁻¹ + R t)⁻¹ → 0`` with ``R = −v(B + Bᵀ) ≻ 0``; adding ``A = aI``,
  ``a > 0``, it converges to ``Σ* = 2a R⁻¹``); with the same sign (``v > 0``) it blows up at
  ``T* = 1/λ_max(Σ0^{1/2}(−R)Σ0^{1/2})`` (docs/theory.md §2–4). A real L-layer residual network
  (``x ← x + h v(x)``, ``h = T/L``, :func:`~gtcontrol.model.tokens.simulate_tokens` with
  ``"discrete"``) is run on N Gaussian tokens; its empirical covariance is compared with the
  exact Gaussian recursion of the same stack (:func:`~gtcontrol.model.moments.simulate_discrete`)
  and the layer where ``tr Σ`` first exceeds ``threshold × tr Σ0`` with the continuous-depth
  ``T*/h``.

The predicted regimes use the kinds of :func:`gtcontrol.analyze`: ``"collapses"`` (Σ → 0),
``"converges"`` (Σ → Σ* ≻ 0) and ``"blowup"`` (finite-time blow-up).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._display import Axes, SummaryItems, legend
from .._docstring import fill
from .._linalg import FloatArray
from .._status import Budget, Outcome, ResultFields, Status
from .._validation import as_positive_float, as_positive_int, as_time_limit
from ..model.gaussian import Gaussian
from ..model.moments import simulate_discrete
from ..model.params import Layer, Schedule
from ..model.tokens import simulate_tokens
from ._common import (
    SIZES_ATTRIBUTES,
    SIZES_PARAMETERS,
    TokenSizes,
    check_sizes,
    random_spd,
    stop_reason,
)
from .gaussianity import gaussianity

__all__ = ["PRESCRIBED_KINDS", "RegimeResult", "RegimeRow", "prescribed_attention_regimes"]

#: The regime kinds a row can predict (a subset of those of :func:`gtcontrol.analyze`).
PRESCRIBED_KINDS = ("collapses", "converges", "blowup")
#: Finite cap on the number of layers of each residual network.
MAX_LAYERS = 100_000


@dataclass(frozen=True)
class RegimeRow:
    """One prescribed configuration: prediction against the token-level network.

    Attributes
    ----------
    name, description
        Short key and a sentence (signs of V and B, A).
    predicted
        The regime of the moment ODE, one of :data:`PRESCRIBED_KINDS` (the kinds of
        :func:`gtcontrol.analyze`): ``"collapses"`` (Σ → 0), ``"converges"`` (to ``Σ*``) or
        ``"blowup"``.
    blowup_time
        Continuous-depth ``T*`` (``inf`` if none).
    blowup_layer_theory
        ``T*/h``: the layer at which the continuous-depth model blows up (``inf`` if none).
    moment_layer, token_layer
        First layer where ``tr Σ > threshold × tr Σ0`` for the exact Gaussian recursion of the
        discrete stack and for the tokens (``None``: not within the depth).
    max_cov_error
        Largest ``‖Σ_tokens − Σ_moments‖_F/‖Σ_moments‖_F`` over the layers before either crosses
        the threshold (or all layers). Both sides start from the empirical moments of the same
        tokens, so this is the error of the dynamics, not the initial sampling error.
    agree_until
        Last layer up to which that error stays below 10 %.
    h, T
        Residual step and depth of this configuration.
    final_trace_tokens, final_trace_moments
        ``tr Σ`` at the last layer (before the threshold for a blow-up).
    equilibrium_trace
        ``tr Σ*`` for ``"converges"``, else ``nan``.
    final_gaussianity_p
        Bonferroni p-value of :func:`~gtcontrol.experiments.gaussianity.gaussianity` on the final
        tokens (small: the token law has left the Gaussian family; ``nan`` if the time limit cut
        its null short).
    """

    name: str
    description: str
    predicted: str
    blowup_time: float
    blowup_layer_theory: float
    moment_layer: int | None
    token_layer: int | None
    max_cov_error: float
    agree_until: int
    h: float
    T: float
    final_trace_tokens: float
    final_trace_moments: float
    equilibrium_trace: float
    final_gaussianity_p: float


@fill(sizes=SIZES_ATTRIBUTES)
@dataclass(frozen=True, eq=False)
class RegimeResult(TokenSizes, ResultFields, Outcome):
    """Result of :func:`prescribed_attention_regimes`.

    Attributes
    ----------
    %(sizes)s
    n_layers
        Layers of each residual network.
    threshold
        Blow-up is declared when ``tr Σ > threshold × tr Σ0``.
    rows
        One :class:`RegimeRow` per configuration run (all three unless cut short).
    traces
        ``traces[name] = (layers, tr Σ tokens, tr Σ moments)`` for figures.
    status
        ``Status.SUCCESS`` when every configuration ran (a predicted blow-up is a row, not a
        status), ``Status.BUDGET_EXHAUSTED`` when the ``time_limit`` ran out (the rows done are
        kept).
    message
        What ran, or why the run stopped.
    stats
        ``seconds``, ``t_star`` (the blow-up time of the ``"same"`` configuration),
        ``configs_done``.
    """

    n_layers: int
    threshold: float
    rows: tuple[RegimeRow, ...]
    traces: dict[str, tuple[FloatArray, FloatArray, FloatArray]] = field(repr=False)

    def _summary_items(self) -> SummaryItems:
        predicted = {r.name: r.predicted for r in self.rows}
        sizes = [("d", self.d), ("n_tokens", self.n_tokens), ("n_layers", self.n_layers)]
        return [*sizes, ("predicted", predicted)]

    def _draw(self, ax: Axes, rows: tuple[RegimeRow, ...] | None = None) -> None:
        """Token and moment traces of ``rows`` (default: every configuration) on ``ax``."""
        from ._figures import draw_trace_comparison

        for row in self.rows if rows is None else rows:
            k, tokens, moments = self.traces[row.name]
            # Past the blow-up threshold the moments reach ~1e300: cut the curves there.
            cap = 30.0 * self.threshold * float(tokens[0])
            draw_trace_comparison(
                ax,
                k,
                tokens,
                moments,
                cap=cap,
                blowup_layer=row.blowup_layer_theory,
                equilibrium_trace=row.equilibrium_trace,
                label="" if rows is not None else row.name,
            )
        legend(ax, fontsize=6)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per configuration."""
        return [dict(r.__dict__) for r in self.rows]


def _first_crossing(traces: FloatArray, limit: float) -> int | None:
    bad = np.flatnonzero(~np.isfinite(traces) | (traces > limit))
    return int(bad[0]) if bad.size else None


@dataclass(frozen=True)
class _Config:
    name: str
    description: str
    layer: Layer
    kind: str
    T: float
    blowup_time: float
    equilibrium_trace: float


def _configs(b_mat: FloatArray, t_star: float) -> tuple[_Config, ...]:
    """The three prescribed layers: collapse, convergence to ``Σ* = B⁻¹``, blow-up at ``T*``."""
    d = b_mat.shape[0]
    t_stable = max(2.0 * t_star, 4.0)
    inf, nan = math.inf, math.nan
    return (
        _Config(
            "opposite",
            "v = −1 (V ≺ 0), B ≻ 0, A = 0",
            Layer(B=b_mat, V=-1.0),
            "collapses",
            t_stable,
            inf,
            nan,
        ),
        _Config(
            "opposite+A",
            "v = −1, B ≻ 0, A = I",
            Layer(A=np.eye(d), B=b_mat, V=-1.0),
            "converges",
            t_stable,
            inf,
            float(np.trace(np.linalg.inv(b_mat))),
        ),
        _Config(
            "same",
            "v = +1 (V ≻ 0), B ≻ 0, A = 0",
            Layer(B=b_mat, V=1.0),
            "blowup",
            2.0 * t_star,
            t_star,
            nan,
        ),
    )


def _run_config(
    cfg: _Config,
    x0: FloatArray,
    g0: Gaussian,
    n_layers: int,
    limit: float,
    seed: int,
    budget: Budget,
) -> tuple[RegimeRow, FloatArray, FloatArray, Status] | None:
    """Run one configuration at token level and by the exact Gaussian recursion.

    Also returns the status of the final Gaussianity test (cut short by ``budget`` or not);
    ``None`` when ``budget`` ran out during the token or moment simulation.
    """
    L = n_layers
    h = cfg.T / L
    sched = Schedule([cfg.layer] * L, cfg.T)
    tok = simulate_tokens(
        sched,
        x0,
        method="discrete",
        steps_per_layer=1,
        record="layers",
        time_limit=budget.left_as_limit(),
    )
    mom = simulate_discrete(sched, g0, time_limit=budget.left_as_limit())
    if Status.BUDGET_EXHAUSTED in (tok.status, mom.status):
        return None  # a network cut short would look like a blow-up: drop the configuration
    tr_tok = np.full(L + 1, np.inf)
    tr_tok[: len(tok.t)] = np.trace(tok.cov, axis1=1, axis2=2)
    tr_mom = np.full(L + 1, np.inf)
    tr_mom[: len(mom.t)] = np.trace(mom.cov, axis1=1, axis2=2)
    k_tok = _first_crossing(tr_tok, limit)
    k_mom = _first_crossing(tr_mom, limit)
    upto = min(k for k in (k_tok, k_mom, L + 1) if k is not None)
    n_cmp = min(upto, len(tok.t), len(mom.t))
    errs = np.array(
        [
            float(np.linalg.norm(tok.cov[i] - mom.cov[i]) / np.linalg.norm(mom.cov[i]))
            for i in range(n_cmp)
        ]
    )
    over = np.flatnonzero(errs > 0.1)
    gauss = gaussianity(tok.final_tokens, seed=seed, time_limit=budget.left_as_limit())
    row = RegimeRow(
        name=cfg.name,
        description=cfg.description,
        predicted=cfg.kind,
        blowup_time=cfg.blowup_time,
        blowup_layer_theory=cfg.blowup_time / h,
        moment_layer=k_mom,
        token_layer=k_tok,
        max_cov_error=float(errs.max()),
        agree_until=int(over[0]) - 1 if over.size else len(errs) - 1,
        h=h,
        T=cfg.T,
        final_trace_tokens=float(tr_tok[n_cmp - 1]),
        final_trace_moments=float(tr_mom[n_cmp - 1]),
        equilibrium_trace=cfg.equilibrium_trace,
        final_gaussianity_p=gauss.p_value,
    )
    return row, tr_tok, tr_mom, gauss.status


@fill(sizes=SIZES_PARAMETERS)
def prescribed_attention_regimes(
    *,
    d: int = 4,
    n_tokens: int = 2000,
    seed: int = 0,
    n_layers: int = 40,
    threshold: float = 1e3,
    time_limit: float | None = None,
) -> RegimeResult:
    """Run collapsing, converging and blowing-up prescribed-attention Transformers at token level.

    Parameters
    ----------
    %(sizes)s
    seed
        Seed of ``Σ0``, ``B`` and the tokens.
    n_layers
        Layers of each residual network. The blow-up configuration has depth ``T = 2 T*``, so that
        ``T*`` falls mid-network at layer ``n_layers/2``; the others have depth
        ``max(2 T*, 4)`` (several time constants of the convergence).
    threshold
        Blow-up is declared when ``tr Σ > threshold × tr Σ0``.
    time_limit
        Wall-clock limit in seconds (``None``: none), checked between configurations and in the
        Gaussianity nulls; when it runs out the configurations done are returned with
        ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    RegimeResult
        One :class:`RegimeRow` per configuration: ``"opposite"`` (``v = −1``, ``A = 0``:
        ``"collapses"``), ``"opposite+A"`` (``v = −1``, ``A = I``: ``"converges"``), ``"same"``
        (``v = +1``, ``A = 0``: ``"blowup"``).

    Raises
    ------
    InvalidParametersError
        On bad sizes or options.

    Examples
    --------
    >>> res = prescribed_attention_regimes(d=2, n_tokens=200, n_layers=10)
    >>> [(r.name, r.predicted) for r in res.rows]
    [('opposite', 'collapses'), ('opposite+A', 'converges'), ('same', 'blowup')]
    >>> res.status
    <Status.SUCCESS: 'success'>
    """
    clock = time.perf_counter()
    dd, n, sd = check_sizes(d, n_tokens, seed)
    L = as_positive_int("n_layers", n_layers, maximum=MAX_LAYERS)
    thr = as_positive_float("threshold", threshold)
    budget = Budget(as_time_limit(time_limit))
    rng = np.random.default_rng([sd, dd, 404])
    sigma0 = random_spd(rng, dd, 0.5, 1.5)
    b_mat = random_spd(rng, dd, 0.5, 1.5)
    x0 = Gaussian(0.2 * rng.standard_normal(dd), sigma0).sample(n, seed=rng)
    # Moments start from the empirical Gaussian of the very tokens (shared sampling error).
    g0 = Gaussian.from_samples(x0)
    root = g0.factor()
    t_star = 1.0 / float(np.linalg.eigvalsh(root @ (2.0 * b_mat) @ root)[-1])
    configs = _configs(b_mat, t_star)
    limit = thr * float(np.trace(g0.cov))
    rows: list[RegimeRow] = []
    traces: dict[str, tuple[FloatArray, FloatArray, FloatArray]] = {}
    status, message = Status.SUCCESS, ""
    for cfg in configs:
        if budget.exhausted:
            status = Status.BUDGET_EXHAUSTED
            break
        done = _run_config(cfg, x0, g0, L, limit, sd, budget)
        if done is None:
            status = Status.BUDGET_EXHAUSTED
            break
        row, tr_tok, tr_mom, gauss_status = done
        rows.append(row)
        traces[cfg.name] = (np.arange(L + 1, dtype=float), tr_tok, tr_mom)
        if gauss_status is Status.BUDGET_EXHAUSTED:  # its Gaussianity null was cut short
            status = Status.BUDGET_EXHAUSTED
            break
    if status is Status.BUDGET_EXHAUSTED:
        message = f"{stop_reason(budget)}: {len(rows)} of {len(configs)} configurations run"
    else:
        message = "; ".join(f"{r.name}: predicted {r.predicted}" for r in rows)
    return RegimeResult(
        d=dd,
        n_tokens=n,
        seed=sd,
        n_layers=L,
        threshold=thr,
        rows=tuple(rows),
        traces=traces,
        status=status,
        message=message,
        stats={
            "seconds": time.perf_counter() - clock,
            "t_star": t_star,
            "configs_done": len(rows),
        },
    )
