"""Token-level Transformers with a feed-forward against the Gaussian moment flow.

An experiment of the paper (Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026)), token level against
gtcontrol's moment model: :func:`feedforward_closeness` runs a layer with one stabilizing head and
a feed-forward ``W_out σ(W_in x + b_in)``, ``σ`` identity or ReLU. With the identity the law
stays Gaussian and the moment ODE is exact; with ReLU it is not. The Gaussian moment flow for ReLU
is the **Gaussian closure** (:func:`gtcontrol.simulate_closure`): the moment ODE of the layer whose
feed-forward is replaced, at each depth, by its statistical linearization under the current
Gaussian (``E σ(a)`` and ``D = diag E σ'(a)``, ``a = W_in x + b_in``), which gives the exact
``dm/dt`` and ``dΣ/dt`` *at* a Gaussian state (Stein's lemma). The sliced 2-Wasserstein
distance between the tokens and that flow, and between the tokens and their own moment-matched
Gaussian, is recorded along depth: at ``t = 0`` both are pure sampling error.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._display import Axes, SummaryItems
from .._docstring import fill
from .._linalg import FloatArray
from .._status import Budget, Outcome, ResultFields, Status
from .._validation import as_positive_float, as_positive_int, as_time_limit
from ..model.gaussian import Gaussian
from ..model.gaussian_closure import simulate_closure
from ..model.moments import simulate
from ..model.params import FeedForward, Layer
from ..model.tokens import simulate_tokens
from ._common import (
    SIZES_ATTRIBUTES,
    SIZES_PARAMETERS,
    TokenSizes,
    check_sizes,
    first_failure,
    random_spd,
    stop_reason,
)
from .sample_statistics import MAX_PROJECTIONS, sliced_wasserstein

__all__ = ["ClosenessCurve", "FeedForwardCloseness", "feedforward_closeness"]

#: Finite cap on the number of depths recorded by :func:`feedforward_closeness`.
MAX_POINTS = 10_000


@dataclass(frozen=True, eq=False)
class ClosenessCurve(ResultFields, Outcome):
    """Distances along depth for one activation.

    All three distances are divided by the flow's RMS radius ``sqrt(tr Σ(t))``, so that a cloud
    that grows or shrinks does not by itself change them.

    Attributes
    ----------
    activation
        ``"identity"`` or ``"relu"``.
    t
        Depths.
    to_flow
        Sliced W2 between the tokens and the Gaussian moment flow (exact ODE for identity,
        Gaussian closure for ReLU).
    to_own
        Sliced W2 between the tokens and their own moment-matched Gaussian (non-Gaussianity).
    moment_gap
        Bures–Wasserstein distance between the tokens' moment-matched Gaussian and the flow.
    status
        The status of the curve's closure flow (:func:`gtcontrol.simulate_closure`;
        ``Status.FAILED`` also when the identity closure disagrees with the exact moment ODE); a
        curve cut short holds the depths reached.
    message
        What happened, in words.
    stats
        The flow's statistics (``nfev``, ``nsteps``, ``form``, ``seconds``, as
        :func:`gtcontrol.simulate_closure` records them).
    """

    activation: str
    t: FloatArray
    to_flow: FloatArray
    to_own: FloatArray
    moment_gap: FloatArray

    def _summary_items(self) -> SummaryItems:
        curves = {"to_flow": self.to_flow, "to_own": self.to_own, "moment_gap": self.moment_gap}
        last = [(k, float(v[-1]) if v.size else math.nan) for k, v in curves.items()]
        return [("activation", self.activation), ("n", self.t.size), *last]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_closeness

        draw_closeness(ax, self.t, self.to_flow, self.to_own, activation=self.activation)


@fill(sizes=SIZES_ATTRIBUTES)
@dataclass(frozen=True, eq=False)
class FeedForwardCloseness(TokenSizes, ResultFields, Outcome):
    """Result of :func:`feedforward_closeness`: one :class:`ClosenessCurve` per activation.

    Attributes
    ----------
    %(sizes)s
    T
        Depth of the layer.
    curves
        ``"identity"`` then ``"relu"`` (fewer when the run was cut short).
    status
        ``Status.SUCCESS``, or the first non-success status of a curve (e.g.
        ``Status.BUDGET_EXHAUSTED`` when the ``time_limit`` ran out; the curves done are kept),
        or ``Status.OVERFLOW`` when the tokens became non-finite.
    message
        What ran, or why the run stopped.
    stats
        ``seconds``, ``curves_done``.
    """

    T: float
    curves: tuple[ClosenessCurve, ...]

    def _summary_items(self) -> SummaryItems:
        final = {c.activation: float(c.to_flow[-1]) for c in self.curves if c.to_flow.size}
        return [("d", self.d), ("n_tokens", self.n_tokens), ("T", self.T), ("to_flow", final)]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_closeness

        for c, color in zip(self.curves, ("tab:blue", "tab:red", "tab:green"), strict=False):
            draw_closeness(ax, c.t, c.to_flow, c.to_own, activation=c.activation, color=color)
        ax.set_title("tokens vs the Gaussian moment flow (t = 0: sampling error)", fontsize=9)

    def table(self) -> list[dict[str, Any]]:
        """Rows ``(activation, t, to_flow, to_own, moment_gap)``."""
        return [
            {
                "activation": c.activation,
                "t": float(c.t[i]),
                "to_flow": float(c.to_flow[i]),
                "to_own": float(c.to_own[i]),
                "moment_gap": float(c.moment_gap[i]),
            }
            for c in self.curves
            for i in range(len(c.t))
        ]


@dataclass(frozen=True)
class _Setup:
    """The seeded matrices and tokens of :func:`feedforward_closeness`."""

    b_mat: FloatArray
    w: FloatArray
    u: FloatArray
    c: FloatArray
    x0: FloatArray


def _setup(dd: int, n: int, sd: int) -> _Setup:
    rng = np.random.default_rng([sd, dd, 505])
    k = 2 * dd
    b_mat = random_spd(rng, dd, 0.2, 0.6)
    u = 1.5 * rng.standard_normal((k, dd)) / math.sqrt(dd)
    c = math.sqrt(0.5) * rng.standard_normal(k)
    w = rng.standard_normal((dd, k)) / math.sqrt(k)
    x0 = Gaussian(np.zeros(dd), random_spd(rng, dd, 0.5, 1.5)).sample(n, seed=rng)
    return _Setup(b_mat, w, u, c, x0)


def _curve(
    act: str,
    setup: _Setup,
    horizon: float,
    times: FloatArray,
    n_projections: int,
    seed: int,
    budget: Budget,
) -> ClosenessCurve:
    """Tokens against the closure flow for one activation, at the depths ``times``."""
    ffn = FeedForward(setup.u, setup.w, b_in=setup.c, activation=act)
    layer = Layer(B=setup.b_mat, V=-0.5, ffn=ffn)
    g0 = Gaussian.from_samples(setup.x0)  # the flow starts from the tokens' own moments
    steps = max(1, math.ceil(10 * horizon))  # RK4 error ~h⁴ ≪ the O(N^-1/2) sampling error
    tok = simulate_tokens(
        layer,
        setup.x0,
        horizon,
        steps_per_layer=steps,
        times=times,
        time_limit=budget.left_as_limit(),
    )
    flow = simulate_closure(layer, g0, horizon, times=times, time_limit=budget.left_as_limit())
    status, message = flow.status, flow.message
    if tok.status is not Status.SUCCESS and status is Status.SUCCESS:
        status, message = tok.status, f"tokens: {tok.message}"
    if act == "identity" and flow.success:  # the closure of an affine layer is the exact ODE
        exact = simulate(layer, g0, horizon, n_points=2)
        if not np.allclose(flow.cov[-1], exact.cov[-1], rtol=1e-7, atol=1e-9):
            status, message = Status.FAILED, "closure flow disagrees with the exact moment ODE"
    to_flow, to_own, gap = [], [], []
    snaps = tok.snapshots[: min(len(tok.snapshots), len(flow.t))]
    for (_, xs), m, s in zip(snaps, flow.mean, flow.cov, strict=False):
        target = Gaussian(m, s)
        own = Gaussian.from_samples(xs)
        radius = math.sqrt(float(np.trace(s)))
        sw_flow = sliced_wasserstein(xs, target, n_projections=n_projections, seed=seed)
        to_flow.append(sw_flow / radius)
        sw_own = sliced_wasserstein(xs, own, n_projections=n_projections, seed=seed)
        to_own.append(sw_own / radius)
        gap.append(own.bures_wasserstein(target) / radius)
    return ClosenessCurve(
        act,
        np.array([t for t, _ in snaps]),
        np.array(to_flow),
        np.array(to_own),
        np.array(gap),
        status=status,
        message=message,
        stats=dict(flow.stats),
    )


@fill(sizes=SIZES_PARAMETERS)
def feedforward_closeness(
    T: float = 2.0,
    *,
    d: int = 4,
    n_tokens: int = 2000,
    seed: int = 0,
    n_points: int = 11,
    n_projections: int = 64,
    time_limit: float | None = None,
) -> FeedForwardCloseness:
    """Distance between the token law and the Gaussian moment flow along depth, identity vs ReLU.

    The layer has one stabilizing head (``V = −½ I``, ``B ≻ 0``) and a feed-forward
    ``W_out σ(W_in x + b_in)`` with ``k = 2d`` hidden units (seeded, ``W_in`` rows of norm ~1.5,
    ``b_in ~ N(0, ½)``, ``W_out ~ N(0, 1/k)``). Tokens move by RK4 (10 steps per unit depth);
    the flow is :func:`gtcontrol.simulate_closure`.

    Parameters
    ----------
    T
        Depth of the layer.
    %(sizes)s
    seed
        Seed of the matrices, the tokens and the projection directions.
    n_points
        Equally spaced depths in ``[0, T]`` at which the distances are measured (at most
        10 000).
    n_projections
        Directions of the sliced Wasserstein distances.
    time_limit
        Wall-clock limit in seconds (``None``: none), checked between activations and inside the
        closure flow; when it runs out the curves done (the last possibly shorter) are returned
        with ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    FeedForwardCloseness
        Curves for ``"identity"`` and ``"relu"``.

    Raises
    ------
    InvalidParametersError
        On bad sizes or options.

    Examples
    --------
    >>> res = feedforward_closeness(0.5, d=2, n_tokens=200, n_points=2, n_projections=8)
    >>> [c.activation for c in res.curves], res.status
    (['identity', 'relu'], <Status.SUCCESS: 'success'>)
    """
    clock = time.perf_counter()
    dd, n, sd = check_sizes(d, n_tokens, seed)
    horizon = as_positive_float("T", T)
    nt = as_positive_int("n_points", n_points, maximum=MAX_POINTS)
    k = as_positive_int("n_projections", n_projections, maximum=MAX_PROJECTIONS)
    budget = Budget(as_time_limit(time_limit))
    setup = _setup(dd, n, sd)
    times = np.linspace(0.0, horizon, nt)
    curves: list[ClosenessCurve] = []
    for act in ("identity", "relu"):
        if budget.exhausted:
            break
        curves.append(_curve(act, setup, horizon, times, k, sd, budget))
        if not curves[-1].success:
            break
    status = first_failure(c.status for c in curves)
    if status is Status.SUCCESS and len(curves) < 2:
        status = Status.BUDGET_EXHAUSTED
    if status is Status.SUCCESS:
        message = f"identity and relu curves at {nt} depths in [0, {horizon:g}]"
    elif status is Status.BUDGET_EXHAUSTED:
        message = f"{stop_reason(budget)}: {len(curves)} of 2 curves (the last possibly shorter)"
    else:
        message = f"{curves[-1].activation}: {curves[-1].message}"
    return FeedForwardCloseness(
        d=dd,
        n_tokens=n,
        seed=sd,
        T=horizon,
        curves=tuple(curves),
        status=status,
        message=message,
        stats={"seconds": time.perf_counter() - clock, "curves_done": len(curves)},
    )
