"""The map of a model: what every attention sublayer does, and the least certified change that
makes it stable, with what the stabilized network still does on real inputs.

For every layer ``k`` of a model :func:`~gtcontrol.interop.extract` reads, the attention
sublayer ``ExtractedLayer.attention_layer`` (``d + 1`` coordinates, the affine one last) is
mapped from two starts, ``N(e, I ⊕ 0)`` (``"identity"``) and the moments of the tokens that
enter it when the real network reads data (``"data"``: mean and ``1/N`` covariance):

1. **Regime** — :func:`gtcontrol.analyze` from each start, to the depth ``T``, with its
   certificate; the blow-up time, and from the identity the head that drives it and its share
   of the growth of ``λ_max Σ`` (:func:`~gtcontrol.experiments.attention_flows.head_growth`).
2. **Equilibria near the data** — :func:`gtcontrol.newton_equilibrium` from the data moments
   (Ledoit–Wolf) and from ``I ⊕ 0``; for each root found, the mean equilibrium
   ``m* = −K⁻¹b`` and the spectral abscissa of the linearization
   (:func:`gtcontrol.linearization_spectrum`). Its stability is *certified* only when the
   spectrum carries a rounding bound (dense, Bauer–Fike); a Krylov abscissa is reported as an
   estimate. A Newton run that does not converge is ``NOT_FOUND``, never "none exist".
3. **Stabilization** — :func:`gtcontrol.stabilize` with ``add="head"`` makes the data target
   (mean and Ledoit–Wolf covariance) an exponentially stable equilibrium at the rate, with its
   local and global certificates and a token check at ``N`` tokens (W2 against its floor), and
   the function change on the data tokens.
4. **The price of stability** — the design's rate curve: the function change of the smallest
   locally certified addition at rates ``ρ/16 … 4ρ`` (``Stabilization.stats["rate_curve"]``).
   With ``rate="auto"`` the map first designs at rate 1, then at the largest rate of the curve
   whose change is within ``change_budget`` (the least change that still certifies), and says
   which.

Then the **stabilized network**: in the network's own forward pass (LayerNorms and
feed-forwards kept; the extracted weights, :meth:`ExtractedModel.forward`), every attention
sublayer's update ``x + v(x)`` is replaced by the stabilized layer's velocity, one residual
step as the network takes it (the flow over a unit of depth would describe a different network,
one whose attention is integrated, not the one the user runs). Reported: the cosine of the
mean-pooled final hidden states against the original's per input, the relative change of the
final hidden states, and the Gaussianity of Gaussian input tokens after every layer in both
networks.

Each row is two independent jobs, its stabilization and its analysis (regimes, head shares,
equilibria), run inline (every stabilization first: the longer half), on local worker
processes or on a Dask cluster, and stored as each finishes so that a killed map resumes (the
``model`` design task). Two jobs per row let two workers take the last row apart: three rows
on two workers otherwise leave one worker idle for a whole row. Reference: the paper cited in
:mod:`gtcontrol` (§3–§4); O. Ledoit, M. Wolf, J. Multivariate Anal. 88 (2004).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from .._blas import single_threaded_blas
from .._display import Axes, SummaryItems, legend
from .._jobs import concurrently, threaded
from .._linalg import FloatArray
from .._progress import progress
from .._status import (
    Budget,
    BudgetExhausted,
    HandedLimit,
    Outcome,
    OutcomeOrBlowup,
    ResultFields,
    Status,
    as_time_limit,
    within,
)
from .._validation import as_positive_float, as_positive_int, as_seed
from .._version import __version__
from ..analysis.blowup import blowup_analysis
from ..analysis.equilibria import riccati_form_of
from ..analysis.regimes import analyze
from ..control.stabilization import Stabilization, stabilize
from ..errors import GTControlError, InvalidParametersError
from ..interop.extraction import ExtractedModel, ModelFields
from ..model.gaussian import Gaussian
from ..model.moments import Trajectory, simulate
from ..model.params import Layer
from ._layer_jobs import run_layer_jobs
from ._map_equilibria import MapEquilibrium, capped, equilibrium, same_roots
from ._map_network import MapData, NetworkCheck, map_data, network_check
from .attention_flows import head_growth
from .pretrained import (
    MAX_TOKENS,
    check_tokens,
    load_within,
    model_label,
    not_loaded,
    serially,
)
from .stabilization import text_target

__all__ = [
    "LayerJob",
    "LayerMap",
    "MapData",
    "MapEquilibrium",
    "MapRegime",
    "ModelMap",
    "NetworkCheck",
    "RateCurve",
    "map_data",
    "map_layer",
    "model_map",
    "network_check",
]

#: The parts of a row, in the order they run.
PARTS = ("regime", "heads", "equilibria", "stabilization", "after")
#: Seconds each regime (one per start) may take at most (each Newton run: ``NEWTON_SECONDS``):
#: analyze's verdict outside the Riccati class runs an equilibria search that is hours at
#: d = 385.
REGIME_SECONDS = 5.0
#: Outside the Riccati class, analyze's long-run verdict is attempted up to this dimension.
_VERDICT_MAX_DIM = 8
#: The flows from the identity and the data: method, tolerance and records. The blow-up time
#: is extrapolated from 1/λ_max, near-linear at the singularity, so it needs no tight steps,
#: and RK45 is the cheaper pair at loose tolerances (docs/benchmarks.md, "The model map");
#: the records draw λ_max.
_FLOW_METHOD = "RK45"
_FLOW_RTOL = 1e-4
_FLOW_POINTS = 20
#: Tolerance of the stabilized layer's flow from the identity (a figure and a distance, two
#: significant digits; the stabilization's own verification runs at 1e-7), by RK45: the
#: cheaper pair at loose tolerances (docs/benchmarks.md).
_AFTER_RTOL = 1e-3
#: From this dimension a row's two regimes and two Newton runs go side by side where the cores
#: allow (:func:`~gtcontrol._jobs.concurrently`): below, they are bound by the interpreter, and
#: threads would only share it (and slow a time-capped verdict into an undecided one).
_SIDE_BY_SIDE_DIM = 64


@dataclass(frozen=True)
class LayerJob:
    """One layer's work for :func:`map_layer`: picklable, for worker processes and clusters.

    Attributes
    ----------
    layer_index
        The layer (from 0).
    layer
        Its attention sublayer (``d + 1`` coordinates, affine coordinate last).
    tokens
        The data tokens that enter it, ``(N, d)``.
    T
        Depth of the regimes and of the blow-up search.
    rate
        The stabilization rate, or ``"auto"``.
    change_budget
        ``rate="auto"``: the largest function change accepted.
    token_check
        Tokens of the stabilization's token check (``None``: none).
    seed
        Seed of the stabilization's perturbed start and token check.
    time_limit
        Seconds for the whole row (``None``: none).
    deadline
        A wall-clock deadline (``time.time()`` seconds; ``None``: none): the row ends by the
        earlier of the two, whenever and wherever it starts (rows of one map on worker
        processes share the map's deadline).
    given_limit
        The time limit the user gave, named by the row's messages (``None``: its own).
    """

    layer_index: int
    layer: Layer
    tokens: FloatArray = field(repr=False)
    T: float = 4.0
    rate: float | str = 1.0
    change_budget: float = 1.0
    token_check: int | None = 1024
    seed: int = 0
    time_limit: float | None = None
    deadline: float | None = None
    given_limit: float | None = None

    def budget(self) -> Budget:
        """The row's budget, from now (its messages name ``given_limit`` when set: the limit
        the user gave the whole map)."""
        limit = as_time_limit(self.time_limit)
        if self.deadline is not None:
            left = max(self.deadline - time.time(), 1e-6)
            limit = left if limit is None else min(limit, left)
        if limit is not None and self.given_limit is not None:
            limit = HandedLimit(limit, self.given_limit)
        return Budget(limit)


@dataclass(frozen=True)
class MapRegime(ResultFields, OutcomeOrBlowup):
    """The regime of one start (:func:`gtcontrol.analyze`).

    Attributes
    ----------
    start
        ``"identity"`` or ``"data"``.
    kind, certificate
        ``Regime.kind`` and ``Regime.certificate`` (``"none"``: decided by an integration, or
        undecided).
    blowup_time
        ``T*`` (``inf``: none found up to ``T``).
    seconds
        Wall time.
    status
        ``Regime.status`` (``BLOWUP``, ``SUCCESS``; ``BUDGET_EXHAUSTED``: undecided in its time).
    message
        ``Regime.message``.
    stats
        ``seconds``.
    success
        True for ``SUCCESS`` and ``BLOWUP`` (a blow-up is the answer).
    """

    start: str
    kind: str
    certificate: str
    blowup_time: float
    seconds: float

    _summary_fields = ("start", "kind", "certificate", "blowup_time")

    def _draw(self, ax: Axes) -> None:
        t_star = self.blowup_time if math.isfinite(self.blowup_time) else 0.0
        ax.barh([self.start], [t_star])
        ax.set_xlabel("blow-up time T* (0: none found)")
        ax.set_title(f"{self.kind} ({self.certificate})", fontsize=8)


@dataclass(frozen=True)
class RateCurve:
    """The function change of the smallest locally certified addition, per rate.

    Attributes
    ----------
    rates, c, function_change
        The rates, the added head's ``c`` at each (``c_loc(ρ)``, exact by the shift identity)
        and the relative change of the token velocity on the data tokens.
    chosen
        The rate the row's stabilization used.
    how
        How it was chosen (``"given"``, or ``rate="auto"`` and the budget).
    """

    rates: tuple[float, ...]
    c: tuple[float, ...]
    function_change: tuple[float, ...]
    chosen: float
    how: str

    def small_and_large(self, budget: float) -> tuple[float, float]:
        """The largest rate whose change is ``≤ budget`` and the smallest above it (``nan``
        when there is none)."""
        ok = [r for r, f in zip(self.rates, self.function_change, strict=True) if f <= budget]
        bad = [r for r, f in zip(self.rates, self.function_change, strict=True) if f > budget]
        return (max(ok) if ok else math.nan, min(bad) if bad else math.nan)


@dataclass(frozen=True, eq=False)
class LayerMap(ResultFields, Outcome):
    """One row of :class:`ModelMap`: what layer ``layer`` does, and how it is stabilized.

    Attributes
    ----------
    layer
        The layer (from 0).
    regimes
        :class:`MapRegime` from ``"identity"`` and ``"data"`` (those that ran).
    blowup_identity, blowup_data
        ``T*`` from each start (``inf``: none up to ``T``; ``nan``: not run).
    dominant_head, head_share, head_shares
        From the identity: the head with the largest part in the growth of ``λ_max Σ`` at the
        last depth integrated, its share, and every head's share (``-1``/``nan``/empty: not
        run).
    lam_before, lam_after
        ``(t, λ_max Σ(t))`` from the identity under the layer, and under the stabilized layer
        (an integration to ``T``, :func:`_after`); empty when not run.
    equilibria
        :class:`MapEquilibrium` from ``"data"`` and ``"identity"``.
    stabilization
        The :class:`~gtcontrol.Stabilization` of the data target at the row's rate, or ``None``.
    stabilization_note
        Why there is none, or which rate and why.
    curve
        The :class:`RateCurve` (``None`` without a head design).
    seconds
        Wall time per part (:data:`PARTS`).
    cut
        The parts the time limit cut or skipped.
    status
        ``SUCCESS`` when every part ran and the stabilization succeeded; ``BUDGET_EXHAUSTED``
        when a part was cut; ``FAILED`` when the stabilization did not succeed or a part
        refused its input (the message says which).
    message
        One line per part.
    stats
        ``seconds``.
    """

    layer: int
    regimes: tuple[MapRegime, ...]
    blowup_identity: float
    blowup_data: float
    dominant_head: int
    head_share: float
    head_shares: tuple[float, ...]
    lam_before: tuple[tuple[float, ...], tuple[float, ...]]
    lam_after: tuple[tuple[float, ...], tuple[float, ...]]
    equilibria: tuple[MapEquilibrium, ...]
    stabilization: Stabilization | None
    stabilization_note: str
    curve: RateCurve | None
    seconds: Mapping[str, float]
    cut: tuple[str, ...]

    def _summary_items(self) -> SummaryItems:
        st = self.stabilization
        return [
            ("layer", self.layer),
            ("blowup_identity", self.blowup_identity),
            ("stabilization", "—" if st is None else st.status.value),
            ("function_change", math.nan if st is None else st.function_change),
        ]

    def _draw(self, ax: Axes) -> None:
        for (t, lam), style, label in (
            (self.lam_before, "--", "as it is"),
            (self.lam_after, "-", "stabilized"),
        ):
            if len(t):
                ax.plot(t, lam, style, label=label)
        ax.set_yscale("log")
        ax.set_xlabel("depth t")
        ax.set_ylabel("λ_max Σ(t) from N(e, I ⊕ 0)")
        ax.set_title(f"layer {self.layer}", fontsize=8)
        legend(ax, fontsize=7)

    def regime(self, start: str) -> MapRegime | None:
        """The regime from ``start`` (``None``: not run)."""
        return next((r for r in self.regimes if r.start == start), None)

    def row(self) -> dict[str, Any]:
        """The row as a flat dict (tables, ``result.json``)."""
        st = self.stabilization
        tc = None if st is None else st.token_certificate
        eq = {e.start: e for e in self.equilibria}
        out: dict[str, Any] = {"layer": self.layer}
        for start in ("identity", "data"):
            r = self.regime(start)
            out[f"regime_{start}"] = "—" if r is None else f"{r.kind} ({r.certificate})"
        out |= {
            "blowup_identity": self.blowup_identity,
            "blowup_data": self.blowup_data,
            "dominant_head": self.dominant_head,
            "head_share": self.head_share,
        }
        for start in ("data", "identity"):
            e = eq.get(start)
            out[f"equilibrium_{start}"] = "—" if e is None else _equilibrium_word(e)
            out[f"equilibrium_{start}_abscissa"] = math.nan if e is None else e.abscissa
        out |= {
            "stabilization": "—" if st is None else str(st.status),
            "rate": math.nan if self.curve is None else self.curve.chosen,
            "c": math.nan if st is None else st.c,
            "local_certificate": None if st is None else st.local_certificate,
            "global_certificate": None if st is None else st.global_certificate,
            "abscissa_before": math.nan if st is None or st.base is None else st.base.abscissa,
            "abscissa_after": math.nan
            if st is None or st.spectrum is None
            else st.spectrum.abscissa,
            "token_w2": math.nan if tc is None else tc.w2,
            "token_floor": math.nan if tc is None else tc.floor,
            "function_change": math.nan if st is None else st.function_change,
            "status": str(self.status),
            "cut": ",".join(self.cut),
            "seconds": float(sum(self.seconds.values())),
        }
        return out


def _equilibrium_word(e: MapEquilibrium) -> str:
    if e.status is not Status.SUCCESS:
        return str(e.status)
    same = f" (= {e.same_as})" if e.same_as else ""
    return f"{e.stability}, {e.evidence}{same}"


def _augmented(mean: FloatArray, cov: FloatArray) -> Gaussian:
    d = mean.shape[0]
    s = np.zeros((d + 1, d + 1))
    s[:d, :d] = 0.5 * (cov + cov.T)
    return Gaussian(np.append(mean, 1.0), s)


def _identity(d: int) -> Gaussian:
    return _augmented(np.zeros(d), np.eye(d))


def _data_start(tokens: FloatArray) -> Gaussian:
    mean = tokens.mean(axis=0)
    xc = tokens - mean
    return _augmented(mean, xc.T @ xc / tokens.shape[0])


def _regime(
    layer: Layer, start: str, g0: Gaussian, T: float, budget: Budget
) -> tuple[MapRegime, Trajectory | None]:
    """The blow-up search to ``T`` and, without a blow-up, :func:`gtcontrol.analyze`'s long-run
    verdict where it can decide (within :data:`REGIME_SECONDS`); the trajectory integrated.

    In the Riccati class the search is :func:`gtcontrol.blowup_analysis` (certified); outside
    it (every extracted layer: the affine coordinate is frozen) one factor-form integration by
    :data:`_FLOW_METHOD` at ``rtol`` :data:`_FLOW_RTOL` gives the blow-up time (an estimate:
    the integrator's global error is not bounded) and, from its last record (where the blow-up
    was detected), the head shares.
    """
    clock = time.perf_counter()

    def regime(kind: str, certificate: str, status: Status, t_star: float, msg: str) -> MapRegime:
        secs = time.perf_counter() - clock
        return MapRegime(
            start,
            kind,
            certificate,
            t_star,
            secs,
            status=status,
            message=msg,
            stats={"seconds": secs},
        )

    no_blowup = f"no blow-up to T = {T:g}"
    traj = None
    if riccati_form_of(layer) is not None:
        blow = blowup_analysis(layer, g0, T=T, time_limit=budget.left_as_limit())
        if blow.status is Status.BLOWUP:
            cert = "exact" if blow.certified else "none"
            return regime("blowup", cert, Status.BLOWUP, blow.blowup_time, blow.message), None
        if blow.status is not Status.SUCCESS:
            return regime("undecided", "none", blow.status, math.nan, blow.message), None
        found = blow.message
    else:
        traj = simulate(
            layer,
            g0,
            T,
            rtol=_FLOW_RTOL,
            method=_FLOW_METHOD,
            n_points=_FLOW_POINTS,
            time_limit=budget.left_as_limit(),
        )
        if traj.status is Status.BLOWUP:
            lo, hi = traj.blowup_bracket or (traj.blowup_time, traj.blowup_time)
            why = (
                f"the adaptive integrator (factor form, {_FLOW_METHOD} at rtol {_FLOW_RTOL:g}) "
                f"detected blow-up at T* ≈ {traj.blowup_time:.7g} ({traj.message}); the "
                f"extrapolation of 1/λ_max puts the computed flow's singularity in "
                f"[{lo:.10g}, {hi:.10g}], and the integrator's own error, not bounded, comes on "
                "top; outside the Riccati class no certificate"
            )
            return regime("blowup", "none", Status.BLOWUP, traj.blowup_time, why), traj
        if traj.status is not Status.SUCCESS:
            return regime("undecided", "none", traj.status, math.nan, traj.message), traj
        found = (
            f"no blow-up before the depth T = {T:g} (integrator, {_FLOW_METHOD} at rtol "
            f"{_FLOW_RTOL:g})"
        )
        if layer.dim > _VERDICT_MAX_DIM:
            why = (
                f"{found}; the long-run verdict outside the Riccati class searches every "
                f"equilibrium, which is out of reach at d = {layer.dim}"
            )
            return regime(no_blowup, "none", Status.SUCCESS, math.inf, why), traj
    searched = time.perf_counter() - clock
    if 4.0 * searched > REGIME_SECONDS or budget.remaining() < 4.0 * searched:
        why = f"{found}; the long-run verdict was not attempted (the search took {searched:.3g} s)"
        return regime(no_blowup, "none", Status.SUCCESS, math.inf, why), traj
    reg = analyze(layer, g0, T=T, time_limit=capped(budget, REGIME_SECONDS))
    if reg.status is Status.BUDGET_EXHAUSTED:
        why = f"{found}; the long-run regime is undecided ({reg.message})"
        return regime(no_blowup, "none", Status.SUCCESS, math.inf, why), traj
    return regime(reg.kind, reg.certificate, reg.status, reg.blowup_time, reg.message), traj


_NO_HEADS: tuple[int, float, tuple[float, ...], tuple[tuple[float, ...], tuple[float, ...]]] = (
    -1,
    math.nan,
    (),
    ((), ()),
)


def _heads(
    layer: Layer, traj: Trajectory | None, T: float, budget: Budget
) -> tuple[int, float, tuple[float, ...], tuple[tuple[float, ...], tuple[float, ...]]]:
    """The head shares at the last record of the flow from the identity (where a blow-up was
    detected, or at ``T``) and the ``λ_max`` curve; :data:`_NO_HEADS` without factored heads.
    A Riccati-class layer (no factor-form trajectory yet) is integrated here."""
    if layer.factored_heads is None:
        return _NO_HEADS
    if traj is None or traj.factor is None:
        traj = simulate(
            layer,
            _identity(layer.dim - 1),
            T,
            rtol=_FLOW_RTOL,
            method=_FLOW_METHOD,
            n_points=_FLOW_POINTS,
            time_limit=budget.left_as_limit(),
        )
    if traj.factor is None or traj.status is Status.BUDGET_EXHAUSTED or not len(traj.t):
        return _NO_HEADS
    lams = [head_growth(layer, f)[0] for f in traj.factor]
    _, _, c = head_growth(layer, traj.factor[-1])
    total = float(np.sum(c))
    shares = c / total if total != 0 else np.full_like(c, math.nan)
    h = int(np.argmax(c))
    curve = (tuple(float(t) for t in traj.t), tuple(float(x) for x in lams))
    return h, float(shares[h]), tuple(float(x) for x in shares), curve


def _curve(res: Stabilization, chosen: float, how: str) -> RateCurve | None:
    rows = res.stats.get("rate_curve")
    if not rows:
        return None
    return RateCurve(
        rates=tuple(float(r["rate"]) for r in rows),
        c=tuple(float(r["c"]) for r in rows),
        function_change=tuple(float(r["function_change"]) for r in rows),
        chosen=chosen,
        how=how,
    )


def _auto_rate(curve: RateCurve, change_budget: float) -> tuple[float, str]:
    small, _ = curve.small_and_large(change_budget)
    if math.isnan(small):
        lo = min(curve.rates)
        return lo, (
            f"auto: no rate of the curve keeps the function change within {change_budget:g}; "
            f"the smallest, {lo:g}"
        )
    return small, f"auto: the largest rate of the curve with function change ≤ {change_budget:g}"


def _stabilization(
    job: LayerJob, probe: FloatArray, budget: Budget
) -> tuple[Stabilization | None, RateCurve | None, str]:
    """The data target stabilized at the job's rate (``"auto"``: chosen from the curve of a
    first design at rate 1, then designed again there with the token check)."""
    target, _ = text_target(job.tokens)
    auto = job.rate == "auto"
    first = 1.0 if auto else float(job.rate)

    def design(rate: float, tokens: int | None) -> Stabilization:
        return stabilize(
            job.layer,
            target,
            add="head",
            rate=rate,
            initial="perturbed",
            token_check=tokens,
            untouched_tokens=False,  # the map reports the stabilized layer's tokens alone
            tokens=probe,
            seed=job.seed,
            time_limit=budget.left_as_limit(1e-3),
        )

    res = design(first, None if auto else job.token_check)
    if not auto:
        return res, _curve(res, first, "given"), ""
    probe_curve = _curve(res, first, "")
    if probe_curve is None:
        return res, None, "rate 'auto': the design at rate 1 has no curve (no head designed)"
    chosen, how = _auto_rate(probe_curve, job.change_budget)
    if budget.exhausted:
        return res, probe_curve, f"rate 'auto': cut before the design at {chosen:g}"
    final = design(chosen, job.token_check)
    curve = RateCurve(
        rates=probe_curve.rates,
        c=probe_curve.c,
        function_change=probe_curve.function_change,
        chosen=chosen,
        how=how,
    )
    return final, curve, how


def _after(
    res: Stabilization | None, T: float, budget: Budget
) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], str]:
    """``(t, λ_max Σ(t))`` from ``N(e, I ⊕ 0)`` to ``T`` under the stabilized layer, and a line
    saying how far from the target that start ends (an integration at ``rtol``
    :data:`_AFTER_RTOL`, for the figure and that line, not a verification: the stabilization
    verifies the target's own neighbourhood, its local question)."""
    if res is None or res.status is not Status.SUCCESS:
        return ((), ()), ""
    final, tgt = res.layer, res.target
    traj = simulate(
        final,
        _identity(final.dim - 1),
        T,
        rtol=_AFTER_RTOL,
        method="RK45",
        n_points=_FLOW_POINTS,
        time_limit=budget.left_as_limit(),
    )
    if not len(traj.t):
        return ((), ()), ""
    lam = tuple(float(np.linalg.eigvalsh(c)[-1]) for c in traj.cov)
    curve = (tuple(float(t) for t in traj.t), lam)
    if traj.status is not Status.SUCCESS:
        return curve, f"from the identity under the stabilized layer: {traj.message}"
    cov_err = float(np.linalg.norm(traj.cov[-1] - tgt.cov) / np.linalg.norm(tgt.cov))
    mean_err = float(
        np.linalg.norm(traj.mean[-1] - tgt.mean) / max(float(np.linalg.norm(tgt.mean)), 1.0)
    )
    return curve, (
        f"from the identity under the stabilized layer (integrator, rtol {_AFTER_RTOL:g}; not a "
        f"verification): relative distance to the target {cov_err:.2g} (Σ), {mean_err:.2g} "
        f"(m) at depth {float(traj.t[-1]):.4g}"
    )


#: Share of a row's time limit each part may take at most (the stabilization takes the rest).
_SHARES = {"regime": 0.2, "heads": 0.1, "equilibria": 0.2}


def _part(budget: Budget, name: str) -> Budget:
    """The budget of one part: its share of what the row has left (all of it for the last)."""
    share = _SHARES.get(name)
    if share is None or budget.time_limit is None:
        return budget.sub()
    return budget.sub(share * budget.remaining())


#: A row's two halves: the stabilization (with its token check, most of a row) and the
#: analysis (regimes, head shares, equilibria). They share no
#: result, so the rows' halves are tasks of their own (:func:`_map_half`): two workers can
#: take one row apart where the rows are fewer than the workers can keep busy.
HALVES = ("stabilization", "analysis")


class _Parts:
    """The parts of one half, each within its share of the budget (:func:`_part`): their
    seconds, the parts cut by the time limit or refused, and the lines of the row's message."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.seconds: dict[str, float] = {}
        self.cut: list[str] = []
        self.failed: list[str] = []
        self.lines: list[str] = []

    def run(self, name: str, work: Callable[[Budget], Any], default: Any) -> Any:
        """``work(budget of the part)``, or ``default`` when the time is out or the part
        refuses its input (:class:`~gtcontrol.GTControlError`; the other parts still run)."""
        clock = time.perf_counter()
        try:
            if self.budget.exhausted:
                raise BudgetExhausted(self.budget.reason())
            return work(_part(self.budget, name))
        except BudgetExhausted as exc:
            self.was_cut(name)
            self.lines.append(f"{name}: cut ({exc.reason})")
            return default
        except GTControlError as exc:
            self.failed.append(name)
            self.lines.append(f"{name}: refused ({exc})")
            return default
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - clock

    def was_cut(self, name: str) -> None:
        if name not in self.cut:
            self.cut.append(name)


@dataclass(frozen=True, eq=False)
class _LayerHalf:
    """One half of a row (:data:`HALVES`), as a worker returns it and a store keeps it.

    Attributes
    ----------
    layer, half
        The layer and which half.
    values
        What the half found, by name (the :class:`LayerMap` fields it fills).
    seconds, cut, failed, lines
        Each part's seconds, the parts cut by the time limit, those that refused their input,
        and the lines of the row's message.
    """

    layer: int
    half: str
    values: Mapping[str, Any]
    seconds: Mapping[str, float]
    cut: tuple[str, ...]
    failed: tuple[str, ...]
    lines: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Whether no part was cut (a cut half is mapped again by a resume)."""
        return not self.cut


def _analysis(job: LayerJob, parts: _Parts) -> dict[str, Any]:
    """Regimes from ``N(e, I ⊕ 0)`` and the data, head shares, and Newton from both."""
    layer, d = job.layer, job.layer.dim - 1
    starts = (("identity", _identity(d)), ("data", _data_start(job.tokens)))

    def side_by_side() -> bool:
        """Whether the two starts of a part run in threads (asked as each part begins: a
        worker takes the cores the others leave idle, :func:`~gtcontrol._jobs.cpus`)."""
        return d >= _SIDE_BY_SIDE_DIM and threaded()

    flows: dict[str, Trajectory | None] = {}

    def regimes(b: Budget) -> tuple[MapRegime, ...]:
        done = concurrently(
            [partial(_regime, layer, name, g0, job.T, b) for name, g0 in starts],
            parallel=side_by_side(),
        )
        out = []
        for (name, _), (reg, traj) in zip(starts, done, strict=True):
            flows[name] = traj
            out.append(reg)
        return tuple(out)

    regs: tuple[MapRegime, ...] = parts.run("regime", regimes, ())
    for r in regs:
        parts.lines.append(f"regime from {r.start}: {r.kind} ({r.certificate}): {r.message}")
        if r.status is Status.BUDGET_EXHAUSTED:
            parts.was_cut("regime")
    heads = parts.run("heads", lambda b: _heads(layer, flows.get("identity"), job.T, b), _NO_HEADS)
    if heads[0] < 0 and layer.factored_heads is not None:
        parts.was_cut("heads")

    def equilibria(b: Budget) -> list[MapEquilibrium]:
        target, _ = text_target(job.tokens)

        def newton(start: str, cov0: FloatArray) -> tuple[MapEquilibrium, FloatArray | None] | None:
            if start != "data" and b.exhausted:  # in turn, the data's run spent the part
                return None
            return equilibrium(layer, start, cov0, b)

        done = concurrently(
            [partial(newton, "data", target.cov), partial(newton, "identity", _identity(d).cov)],
            parallel=side_by_side(),
        )
        return same_roots([e for e in done if e is not None])

    eqs: list[MapEquilibrium] = parts.run("equilibria", equilibria, [])
    parts.lines.extend(f"equilibrium from {e.start}: {e.message}" for e in eqs)
    if any(e.status is Status.BUDGET_EXHAUSTED for e in eqs):
        parts.was_cut("equilibria")
    return {
        "regimes": regs,
        "blowup_identity": next((r.blowup_time for r in regs if r.start == "identity"), math.nan),
        "blowup_data": next((r.blowup_time for r in regs if r.start == "data"), math.nan),
        "heads": heads,
        "equilibria": tuple(eqs),
    }


def _stabilized(job: LayerJob, parts: _Parts) -> dict[str, Any]:
    """The stabilization of the data target, and the stabilized layer's flow from the identity."""
    probe = np.hstack([job.tokens, np.ones((job.tokens.shape[0], 1))])
    stab, curve, note = parts.run(
        "stabilization", lambda b: _stabilization(job, probe, b), (None, None, "not run")
    )
    if stab is not None:
        parts.lines.append(f"stabilization ({stab.status.value}): {stab.message}")
        if stab.status is Status.BUDGET_EXHAUSTED:
            parts.was_cut("stabilization")
    after, after_line = parts.run("after", lambda b: _after(stab, job.T, b), (((), ()), ""))
    if after_line:
        parts.lines.append(after_line)
    return {"stabilization": stab, "curve": curve, "note": note, "after": after}


def _map_half(job: LayerJob, half: str, budget: Budget | None = None) -> _LayerHalf:
    """One half of :func:`map_layer`'s row (:data:`HALVES`), within ``budget`` (default: the
    job's, from now); :func:`_join_halves` makes the row of the two."""
    parts = _Parts(job.budget() if budget is None else budget)
    values = _analysis(job, parts) if half == "analysis" else _stabilized(job, parts)
    return _LayerHalf(
        layer=job.layer_index,
        half=half,
        values=values,
        seconds=dict(parts.seconds),
        cut=tuple(parts.cut),
        failed=tuple(parts.failed),
        lines=tuple(parts.lines),
    )


def _join_halves(job: LayerJob, analysis: _LayerHalf, stabilized: _LayerHalf) -> LayerMap:
    """The row of a layer from its two halves (the analysis' lines first)."""
    a, s = analysis.values, stabilized.values
    cut = analysis.cut + stabilized.cut
    stab = s["stabilization"]
    status = Status.SUCCESS
    if cut:
        status = Status.BUDGET_EXHAUSTED
    elif analysis.failed or stabilized.failed or stab is None or stab.status is not Status.SUCCESS:
        status = Status.FAILED
    heads = a["heads"]
    seconds = {**analysis.seconds, **stabilized.seconds}
    return LayerMap(
        layer=job.layer_index,
        regimes=a["regimes"],
        blowup_identity=a["blowup_identity"],
        blowup_data=a["blowup_data"],
        dominant_head=heads[0],
        head_share=heads[1],
        head_shares=heads[2],
        lam_before=heads[3],
        lam_after=s["after"],
        equilibria=a["equilibria"],
        stabilization=stab,
        stabilization_note=s["note"],
        curve=s["curve"],
        seconds=seconds,
        cut=cut,
        status=status,
        message="\n".join(analysis.lines + stabilized.lines),
        stats={"seconds": float(sum(seconds.values()))},
    )


def map_layer(job: LayerJob) -> LayerMap:
    """Map one attention sublayer: regimes, head shares, equilibria, stabilization.

    Each part runs within its share of the row's time limit (20 % for the regimes, 10 % for
    the head shares, 20 % for the equilibria, the rest for the stabilization; and at most
    :data:`REGIME_SECONDS` per regime and :data:`NEWTON_SECONDS` per Newton run), so that a
    row whose first parts are slow still gets a stabilization; a part cut short is named in
    ``cut``. A part that refuses its input (:class:`~gtcontrol.GTControlError`) is reported in
    the message, and the other parts still run.

    Parameters
    ----------
    job
        The layer, its data tokens and the options.

    Returns
    -------
    LayerMap
        The row.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import FactoredHeads, Layer
    >>> rng = np.random.default_rng(1)
    >>> q, k, v = (0.3 * rng.standard_normal((2, 2, 5)) for _ in range(3))
    >>> o = 0.3 * rng.standard_normal((2, 5, 2))
    >>> o[:, -1, :] = 0.0  # the affine coordinate never moves
    >>> layer = Layer(heads=FactoredHeads(q, k, v, o))
    >>> tokens = rng.standard_normal((200, 4))
    >>> row = map_layer(LayerJob(0, layer, tokens, T=1.0, token_check=None))  # doctest: +SKIP
    >>> row.stabilization.status  # doctest: +SKIP
    <Status.SUCCESS: 'success'>
    """
    budget = job.budget()
    analysis = _map_half(job, "analysis", budget)
    return _join_halves(job, analysis, _map_half(job, "stabilization", budget))


@dataclass(frozen=True, eq=False)
class ModelMap(ModelFields, ResultFields, Outcome):
    """Result of :func:`model_map`: one :class:`LayerMap` per layer and the stabilized network.

    Attributes
    ----------
    model, description, family, norm_placement, n_layers, dim, n_heads, notes
        What the model is (:class:`~gtcontrol.interop.ExtractedModel`).
    data
        What the data were (the packaged sentences through the tokenizer, or random ids).
    rows
        One :class:`LayerMap` per layer mapped, in order.
    stabilized_network
        The :class:`NetworkCheck` (``None`` when it did not run).
    rate, change_budget
        The rate asked (a number or ``"auto"``) and the change budget of ``"auto"``.
    unmapped
        ``"layer k: why"`` for each layer asked for and not mapped (cut, or its job raised).
    status
        ``SUCCESS`` when every row succeeded and the network check ran; ``BUDGET_EXHAUSTED``
        when the time limit cut a row or the check; ``FAILED`` when a row failed (the other
        rows still come).
    message, stats
        What ran; ``stats``: ``seconds``, ``timing`` (seconds per part, summed over the rows,
        and for loading, data and the network check), ``where`` (inline, local processes or
        the cluster's address), ``reused`` (the layers whose two halves were read from the
        store) and ``reused_halves`` (every half read from it, ``layer_003.analysis``).
    """

    data: str
    rows: tuple[LayerMap, ...]
    stabilized_network: NetworkCheck | None
    rate: float | str
    change_budget: float
    unmapped: tuple[str, ...] = ()

    def _summary_items(self) -> SummaryItems:
        net = self.stabilized_network
        return [
            ("model", self.model),
            ("layers mapped", len(self.rows)),
            (
                "stabilized",
                sum(r.stabilization is not None and r.stabilization.success for r in self.rows),
            ),
            ("pooled cosine", math.nan if net is None else net.cosine_mean),
        ]

    def _draw(self, ax: Axes) -> None:
        ks = [r.layer for r in self.rows]
        before = [_abscissa(r, "base") for r in self.rows]
        after = [_abscissa(r, "spectrum") for r in self.rows]
        ax.plot(ks, before, "o-", label="heads kept, A, b designed")
        ax.plot(ks, after, "s-", label="stabilized")
        ax.axhline(0.0, color="0.6", lw=0.8, ls="--")
        ax.set_xlabel("layer")
        ax.set_ylabel("spectral abscissa at the data target")
        ax.set_title(self.model, fontsize=8)
        legend(ax, fontsize=7)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per layer."""
        return [r.row() for r in self.rows]


def _abscissa(row: LayerMap, which: str) -> float:
    st = row.stabilization
    spec = None if st is None else getattr(st, which)
    return math.nan if spec is None else float(spec.abscissa)


def _check_rate(rate: Any) -> float | str:
    if isinstance(rate, str):
        if rate != "auto":
            raise InvalidParametersError(
                f"rate: expected a positive number or 'auto', got {rate!r}"
            )
        return rate
    return as_positive_float("rate", rate)


def model_map(
    model: Any = "minilm",
    T: float = 4.0,
    *,
    layers: Sequence[int] | None = None,
    rate: float | str = 1.0,
    change_budget: float = 1.0,
    token_check: int | None = 1024,
    gaussian_tokens: int | None = None,
    n_null: int = 8,
    seed: int = 0,
    workers: int = 1,
    scheduler: str | None = None,
    store: str | os.PathLike[str] | None = None,
    time_limit: float | None = None,
) -> ModelMap:
    """The map of a model: every attention sublayer's regime, equilibria and certified
    stabilization, and the network with every layer stabilized (module docstring).

    Parameters
    ----------
    model
        Anything :func:`~gtcontrol.interop.extract` reads (a name of
        :data:`~gtcontrol.interop.MODELS`, a Hugging Face folder, an ``.onnx`` file, a
        ``transformers`` module) or an :class:`~gtcontrol.interop.ExtractedModel`.
    T
        Depth of the regimes and of the blow-up search (default 4).
    layers
        Layer indices (default: all).
    rate
        The stabilization's rate ``ρ > 0``, or ``"auto"``: the largest rate of the rate curve
        whose function change is at most ``change_budget``.
    change_budget
        ``rate="auto"``: the largest function change accepted (relative; default 1, the token
        velocity's own size).
    token_check
        Tokens of each stabilization's token check (``None``: none; default 1024).
    gaussian_tokens, n_null
        Gaussian input tokens of the network check's Gaussianity tests (``None``:
        ``max(512, d + 64)``; at least ``max(20, d + 2)``) and the replicates of each null.
    seed
        Seed of random data, the stabilization's perturbed start and token checks.
    workers
        Without ``scheduler``: 1 maps the layers one after the other here; more map them on a
        local cluster of that many worker processes (at most the cores; extra ``sweep``).
    scheduler
        Address of a running dask scheduler (``tcp://HOST:8786``): one task per layer on its
        cluster (its workers run this gtcontrol).
    store
        A folder where each finished row is stored at once (``None``: none). A map killed or
        cut short and run again with the same store, model and options reuses the rows stored
        and maps only the others; a row cut by the time limit is not stored. A store of
        another model or options is refused, never changed.
    time_limit
        Wall-clock limit in seconds for the whole map, loading included (``None``: none).

    Returns
    -------
    ModelMap
        The rows and the network check.

    Raises
    ------
    InvalidParametersError
        On bad options, a layer the model does not have, or a model that cannot be read
        (:class:`~gtcontrol.interop.ModelFileError`).

    Examples
    --------
    >>> m = model_map("random-bert", layers=[0], token_check=None)  # doctest: +SKIP
    >>> m.rows[0].stabilization.status  # doctest: +SKIP
    <Status.SUCCESS: 'success'>
    """
    clock = time.perf_counter()
    horizon = as_positive_float("T", T)
    chosen = _check_rate(rate)
    budget_c = as_positive_float("change_budget", change_budget)
    n_tok = (
        None if token_check is None else as_positive_int("token_check", token_check, maximum=10**6)
    )
    sd = as_seed("seed", seed)
    n_workers = as_positive_int("workers", workers, maximum=1024)
    nulls = as_positive_int("n_null", n_null, maximum=10000)
    if nulls < 8:
        raise InvalidParametersError(f"n_null: expected 8 to 10000, got {n_null!r}")
    n_gauss = None
    if gaussian_tokens is not None:
        n_gauss = as_positive_int("gaussian_tokens", gaussian_tokens, maximum=MAX_TOKENS)
        check_tokens(n_gauss)
    budget = Budget(as_time_limit(time_limit))
    timing: dict[str, float] = {}
    em = load_within(model, sd, budget)
    timing["load"] = time.perf_counter() - clock
    if em is None:
        return _not_mapped(model_label(model), not_loaded(model, budget), chosen, budget_c, clock)
    if n_gauss is not None:
        check_tokens(n_gauss, em.dim, em.label)
    picked = list(range(em.n_layers)) if layers is None else list(layers)
    bad = [
        k
        for k in picked
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < em.n_layers
    ]
    if bad or not picked:
        raise InvalidParametersError(
            f"layers: expected indices in 0..{em.n_layers - 1}, got {layers!r}"
        )
    t0 = time.perf_counter()
    data = within(budget, lambda: serially(lambda: map_data(em, sd)))
    timing["data"] = time.perf_counter() - t0
    if data is None:
        why = f"{budget.reason()} before the data of {em.label} were computed"
        return _not_mapped(em.label, why, chosen, budget_c, clock)
    jobs = [
        LayerJob(
            layer_index=k,
            layer=em.layers[k].attention_layer,
            tokens=data.tokens[k],
            T=horizon,
            rate=chosen,
            change_budget=budget_c,
            token_check=n_tok,
            seed=sd,
            time_limit=budget.left_as_limit(),
        )
        for k in picked
    ]
    got, unmapped, where, reused, halves = _run_rows(jobs, n_workers, scheduler, store, budget)
    rows = tuple(got[k] for k in picked if k in got)
    for part in PARTS:
        timing[part] = float(sum(r.seconds.get(part, 0.0) for r in rows))
    t0 = time.perf_counter()
    net = None
    if rows and not budget.exhausted:
        with single_threaded_blas():
            stabilized = {
                r.layer: r.stabilization.layer
                for r in rows
                if r.stabilization is not None and r.stabilization.success
            }
            kept = {
                r.layer: "no stabilization"
                if r.stabilization is None
                else f"stabilization {r.stabilization.status.value}"
                for r in rows
                if r.layer not in stabilized
            }
            net = network_check(
                em,
                stabilized,
                data,
                kept=kept,
                gaussian_tokens=n_gauss,
                n_null=nulls,
                seed=sd,
                time_limit=budget.left_as_limit(),
            )
    timing["network"] = time.perf_counter() - t0
    run = {"where": where, "reused": list(reused), "reused_halves": list(halves), "timing": timing}
    return _assemble(em, data, rows, net, unmapped, chosen, budget_c, run, clock)


#: A half's key is ``HALVES.index(half) * _STRIDE + layer``: sorted, every stabilization
#: (the longer half) comes before every analysis, and the halves start in that order, inline or
#: on workers (the longest first: the last to land are short).
_STRIDE = 100_000


def _key(layer: int, half: str) -> int:
    return HALVES.index(half) * _STRIDE + layer


def _layer_and_half(key: int) -> tuple[int, str]:
    return key % _STRIDE, HALVES[key // _STRIDE]


def _label(key: int) -> str:
    """A half's row file in the store: ``layer_003.stabilization``."""
    layer, half = _layer_and_half(key)
    return f"layer_{layer:03d}.{half}"


def _map_key(jobs: Mapping[int, LayerJob], key: int) -> _LayerHalf:
    """One half of a row (the runner's work: module-level, picklable with its jobs)."""
    layer, half = _layer_and_half(key)
    with single_threaded_blas():
        return _map_half(jobs[layer], half)


def _complete(half: _LayerHalf) -> bool:
    """Whether a half is stored: one cut by the time limit is mapped again by a resume."""
    return half.complete


def fingerprint(jobs: Sequence[LayerJob]) -> str:
    """What a map's rows depend on: every job's layer, data tokens and options (a digest)."""
    h = hashlib.sha256(f"model_map {__version__} halves {HALVES}".encode())
    for job in jobs:
        lay = job.layer
        h.update(repr((job.layer_index, job.T, job.rate, job.change_budget)).encode())
        h.update(repr((job.token_check, job.seed)).encode())
        for a in (lay.A, lay.b, job.tokens):
            h.update(np.ascontiguousarray(a).tobytes())
        for v, b in lay.dense_heads:
            h.update(v.tobytes() + b.tobytes())
        fh = lay.factored_heads
        if fh is not None:
            for a in (fh.q, fh.k, fh.v, fh.o):
                h.update(np.ascontiguousarray(a).tobytes())
            h.update(repr(fh.scale).encode())
    return h.hexdigest()


def _run_rows(
    jobs: list[LayerJob],
    workers: int,
    scheduler: str | None,
    store: str | os.PathLike[str] | None,
    budget: Budget,
) -> tuple[dict[int, LayerMap], dict[int, str], str, tuple[int, ...], tuple[str, ...]]:
    """The rows by layer, each joined from its two halves, run as tasks of their own
    (:func:`~gtcontrol.experiments._layer_jobs.run_layer_jobs`), the layers not mapped with
    why, where they ran, the layers whose halves all came from the store, and the stored
    halves reused (their labels)."""
    limit = budget.left_as_limit()
    deadline = None if limit is None else time.time() + limit
    given = budget.given_limit
    by_layer = {
        j.layer_index: replace(j, time_limit=None, deadline=deadline, given_limit=given)
        for j in jobs
    }
    keys = sorted(_key(k, half) for k in by_layer for half in HALVES)
    with progress("model map", total=len(keys)) as update:
        done = [0]

        def landed(key: int, row: Any) -> None:
            done[0] += 1
            update(done[0])

        out = run_layer_jobs(
            keys,
            partial(_map_key, by_layer),
            store=store,
            fingerprint=None if store is None else fingerprint(jobs),
            scheduler=scheduler,
            workers=workers,
            time_limit=limit,
            on_done=landed,
            stored=_complete,
            label=_label,
        )
    rows: dict[int, LayerMap] = {}
    missing: dict[int, str] = {}
    for k, job in by_layer.items():
        stabilized, analysis = (out.rows.get(_key(k, half)) for half in HALVES)
        if stabilized is not None and analysis is not None:
            rows[k] = _join_halves(job, analysis, stabilized)
            continue
        whys = []
        for half in HALVES:
            nd = out.not_done.get(_key(k, half))
            if nd is not None:
                why = (
                    f"not mapped: {budget.reason()}"
                    if nd.reason == "time_limit"
                    else (f"{nd.reason}: {nd.message}")
                )
                whys.append(f"{half}: {why}")
        missing[k] = "; ".join(whys) or "not mapped"
    reused = tuple(k for k in sorted(by_layer) if all(_key(k, h) in out.reused for h in HALVES))
    return rows, missing, out.where, reused, tuple(_label(key) for key in sorted(out.reused))


def _assemble(
    em: ExtractedModel,
    data: MapData,
    rows: tuple[LayerMap, ...],
    net: NetworkCheck | None,
    unmapped: Mapping[int, str],
    rate: float | str,
    change_budget: float,
    run: dict[str, Any],
    clock: float,
) -> ModelMap:
    statuses = [r.status for r in rows] + ([] if net is None else [net.status])
    if unmapped or net is None or Status.BUDGET_EXHAUSTED in statuses:
        status = Status.BUDGET_EXHAUSTED
    elif any(s is not Status.SUCCESS for s in statuses):
        status = Status.FAILED
    else:
        status = Status.SUCCESS
    done = sum(r.stabilization is not None and r.stabilization.success for r in rows)
    parts = [
        f"{em.label}: {len(rows)} of {em.n_layers} layers mapped, {done} stabilized "
        f"(rate {rate if isinstance(rate, str) else f'{rate:g}'}); data: {data.what}"
    ]
    if run["reused"]:
        parts.append(f"layers {', '.join(map(str, run['reused']))} reused from the store")
    whole = tuple(f"layer_{k:03d}." for k in run["reused"])
    halves = [h for h in run.get("reused_halves", ()) if not h.startswith(whole)]
    if halves:
        parts.append(f"halves {', '.join(halves)} reused from the store")
    if net is not None:
        parts.append(f"stabilized network: {net.message}")
    parts.extend(f"layer {k}: {why}" for k, why in sorted(unmapped.items()))
    return ModelMap(
        **ModelFields.of(em),
        data=data.what,
        rows=rows,
        stabilized_network=net,
        rate=rate,
        change_budget=change_budget,
        unmapped=tuple(f"layer {k}: {why}" for k, why in sorted(unmapped.items())),
        status=status,
        message="; ".join(parts),
        stats={"seconds": time.perf_counter() - clock, **run},
    )


def _not_mapped(
    label: str, why: str, rate: float | str, change_budget: float, clock: float
) -> ModelMap:
    return ModelMap(
        **ModelFields.unloaded(label),
        data="",
        rows=(),
        stabilized_network=None,
        rate=rate,
        change_budget=change_budget,
        status=Status.BUDGET_EXHAUSTED,
        message=why,
        stats={"seconds": time.perf_counter() - clock, "timing": {}, "where": ""},
    )
