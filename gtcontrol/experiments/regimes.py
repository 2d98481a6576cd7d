"""Token-level Transformers with prescribed attention against the moment predictions.

Two experiments of the paper (Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026)), token level against
gtcontrol's moment model:

* :func:`prescribed_attention_regimes` — pure attention ``dx/dt = V Attn(x)`` with ``V = v I`` and
  ``B ≻ 0`` (``A = 0`` unless stated): with opposite definiteness (``v < 0``) the covariance stays
  bounded (``Σ(t) = (Σ0⁻¹ + R t)⁻¹ → 0`` with ``R = −v(B + Bᵀ) ≻ 0``; adding ``A = aI``, ``a > 0``,
  it converges to ``Σ* = 2a R⁻¹``); with the same sign (``v > 0``) it blows up at
  ``T* = 1/λ_max(Σ0^{1/2}(−R)Σ0^{1/2})`` (docs/theory.md §2–4). A real L-layer residual network
  (``x ← x + h v(x)``, ``h = T/L``, :func:`~gtcontrol.tokens.simulate_tokens` with ``"discrete"``)
  is run on N Gaussian tokens; its empirical covariance is compared with the exact Gaussian
  recursion of the same stack (:func:`~gtcontrol.moments.simulate_discrete`) and the layer where
  ``tr Σ`` first exceeds ``threshold × tr Σ0`` with the continuous-depth ``T*/h``.
* :func:`feedforward_closeness` — the same kind of layer with a feed-forward ``W σ(Ux + c)``,
  ``σ`` identity or ReLU. With the identity the law stays Gaussian and the moment ODE is exact;
  with ReLU it is not. The Gaussian moment flow for ReLU is the **Gaussian closure**: the moment
  ODE of the layer whose feed-forward is replaced, at each depth, by its statistical linearization
  under the current Gaussian (``E σ(a)`` and ``D = diag E σ'(a)``, ``a = Ux + c``), which gives
  the exact ``dm/dt`` and ``dΣ/dt`` *at* a Gaussian state (Stein's lemma). The sliced
  2-Wasserstein distance between the tokens and that flow, and between the tokens and their own
  moment-matched Gaussian, is recorded along depth: at ``t = 0`` both are pure sampling error.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import ndtr

from .._linalg import FloatArray, unvech, vech
from .._validation import as_positive_float, as_positive_int
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.moments import moment_field, simulate, simulate_discrete
from ..model.params import FeedForward, Layer, Schedule
from ..model.tokens import simulate_tokens
from .gaussianity import gaussianity, sliced_wasserstein
from .surrogate import gelu_moments

__all__ = [
    "ClosenessCurve",
    "FeedForwardCloseness",
    "RegimeResult",
    "RegimeRow",
    "closure_flow",
    "feedforward_closeness",
    "prescribed_attention_regimes",
]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _spd(rng: np.random.Generator, d: int, lo: float, hi: float) -> FloatArray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return np.asarray((q * rng.uniform(lo, hi, d)) @ q.T)


def _check_common(d: Any, n_tokens: Any, seed: Any) -> tuple[int, int, int]:
    dd = as_positive_int("d", d)
    n = as_positive_int("n_tokens", n_tokens)
    if n < 2 * dd + 2:
        raise InvalidParametersError(f"n_tokens: expected at least 2d + 2 = {2 * dd + 2}, got {n}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidParametersError(f"seed: expected a non-negative integer, got {seed!r}")
    return dd, n, int(seed)


# ---------------------------------------------------------------------------- item 4: regimes
@dataclass(frozen=True)
class RegimeRow:
    """One prescribed configuration: prediction against the token-level network.

    Attributes
    ----------
    name, description
        Short key and a sentence (signs of V and B, A).
    predicted
        ``"bounded"`` (collapse to 0), ``"converges"`` (to ``Σ*``) or ``"blowup"``.
    blowup_time
        Continuous-depth ``T*`` (``inf`` if none); ``blowup_layer_theory`` is ``T*/h``.
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
        tokens (small: the token law has left the Gaussian family).
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


@dataclass(frozen=True, eq=False)
class RegimeResult:
    """Result of :func:`prescribed_attention_regimes`.

    ``traces[name]`` holds ``(layers, tr Σ tokens, tr Σ moments)`` for figures.
    """

    d: int
    n_tokens: int
    seed: int
    n_layers: int
    threshold: float
    rows: tuple[RegimeRow, ...]
    traces: dict[str, tuple[FloatArray, FloatArray, FloatArray]] = field(repr=False)
    stats: dict[str, Any] = field(default_factory=dict)

    def table(self) -> list[dict[str, Any]]:
        """One flat row per configuration."""
        return [dict(r.__dict__) for r in self.rows]


def _first_crossing(traces: FloatArray, limit: float) -> int | None:
    bad = np.flatnonzero(~np.isfinite(traces) | (traces > limit))
    return int(bad[0]) if bad.size else None


def prescribed_attention_regimes(
    d: int = 4,
    n_tokens: int = 2000,
    seed: int = 0,
    *,
    n_layers: int = 40,
    threshold: float = 1e3,
) -> RegimeResult:
    """Run stabilizing and destabilizing prescribed-attention Transformers at token level.

    Parameters
    ----------
    d, n_tokens, seed
        Dimension, number of tokens, seed (of ``Σ0``, ``B`` and the tokens).
    n_layers
        Layers of each residual network. The blow-up configuration has depth ``T = 2 T*``, so that
        ``T*`` falls mid-network at layer ``n_layers/2``; the bounded ones have depth
        ``max(2 T*, 4)`` (several time constants of the convergence).
    threshold
        Blow-up is declared when ``tr Σ > threshold × tr Σ0``.

    Returns
    -------
    RegimeResult
        One :class:`RegimeRow` per configuration: ``"opposite"`` (``v = −1``, ``A = 0``),
        ``"opposite+A"`` (``v = −1``, ``A = I``), ``"same"`` (``v = +1``, ``A = 0``).

    Raises
    ------
    InvalidParametersError
        On bad sizes or options.
    """
    clock = time.perf_counter()
    dd, n, sd = _check_common(d, n_tokens, seed)
    L = as_positive_int("n_layers", n_layers)
    thr = as_positive_float("threshold", threshold)
    rng = np.random.default_rng([sd, dd, 404])
    sigma0 = _spd(rng, dd, 0.5, 1.5)
    b_mat = _spd(rng, dd, 0.5, 1.5)
    x0 = Gaussian(0.2 * rng.standard_normal(dd), sigma0).sample(n, rng)
    # Moments start from the empirical Gaussian of the very tokens (shared sampling error).
    g0 = Gaussian.from_samples(x0)
    root = g0.factor()
    t_star = 1.0 / float(np.linalg.eigvalsh(root @ (2.0 * b_mat) @ root)[-1])
    t_stable = max(2.0 * t_star, 4.0)
    configs = (
        ("opposite", "v = −1 (V ≺ 0), B ≻ 0, A = 0", Layer(B=b_mat, v=-1.0), "bounded", t_stable),
        (
            "opposite+A",
            "v = −1, B ≻ 0, A = I",
            Layer(A=np.eye(dd), B=b_mat, v=-1.0),
            "converges",
            t_stable,
        ),
        ("same", "v = +1 (V ≻ 0), B ≻ 0, A = 0", Layer(B=b_mat, v=1.0), "blowup", 2.0 * t_star),
    )
    rows, traces = [], {}
    tr0 = float(np.trace(g0.cov))
    for name, desc, layer, kind, T in configs:
        h = T / L
        sched = Schedule([layer] * L, T)
        tok = simulate_tokens(sched, x0, method="discrete", steps_per_layer=1, record="layers")
        mom = simulate_discrete(sched, g0)
        tr_tok = np.full(L + 1, np.inf)
        tr_tok[: len(tok.t)] = np.trace(tok.cov, axis1=1, axis2=2)
        tr_mom = np.full(L + 1, np.inf)
        tr_mom[: len(mom.t)] = np.trace(mom.cov, axis1=1, axis2=2)
        k_tok = _first_crossing(tr_tok, thr * tr0)
        k_mom = _first_crossing(tr_mom, thr * tr0)
        upto = min(k for k in (k_tok, k_mom, L + 1) if k is not None)
        errs = np.array(
            [
                float(np.linalg.norm(tok.cov[i] - mom.cov[i]) / np.linalg.norm(mom.cov[i]))
                for i in range(min(upto, len(tok.t), len(mom.t)))
            ]
        )
        over = np.flatnonzero(errs > 0.1)
        agree = int(over[0]) - 1 if over.size else len(errs) - 1
        last = min(upto, len(tok.t), len(mom.t)) - 1
        if kind == "blowup":
            t_b = t_star
        else:
            t_b = math.inf
        eq = float(np.trace(np.linalg.inv(b_mat))) if kind == "converges" else math.nan
        rows.append(
            RegimeRow(
                name=name,
                description=desc,
                predicted=kind,
                blowup_time=t_b,
                blowup_layer_theory=t_b / h,
                moment_layer=k_mom,
                token_layer=k_tok,
                max_cov_error=float(errs.max()),
                agree_until=agree,
                h=h,
                T=T,
                final_trace_tokens=float(tr_tok[last]),
                final_trace_moments=float(tr_mom[last]),
                equilibrium_trace=eq,
                final_gaussianity_p=gaussianity(tok.final_tokens, seed=sd).p_value,
            )
        )
        traces[name] = (np.arange(L + 1, dtype=float), tr_tok, tr_mom)
    return RegimeResult(
        d=dd,
        n_tokens=n,
        seed=sd,
        n_layers=L,
        threshold=thr,
        rows=tuple(rows),
        traces=traces,
        stats={"seconds": time.perf_counter() - clock, "t_star": t_star},
    )


# ---------------------------------------------------------------------------- item 5: closure
def _activation_moments(
    kind: str, mu: FloatArray, var: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``E σ(a)`` and ``E σ'(a)`` for ``a ~ N(μ, s²)`` elementwise (closed forms)."""
    if kind == "identity":
        return mu.copy(), np.ones_like(mu)
    if kind == "relu":
        s = np.sqrt(np.maximum(var, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(s > 0, mu / np.where(s > 0, s, 1.0), np.sign(mu) * np.inf)
        big = ndtr(k)
        pdf = np.where(
            np.isfinite(k),
            _INV_SQRT_2PI * np.exp(-0.5 * np.where(np.isfinite(k), k, 0.0) ** 2),
            0.0,
        )
        return mu * big + s * pdf, big
    e_g, e_dg, _ = gelu_moments(mu, var)
    return e_g, e_dg


def _linearized(layer: Layer, mean: FloatArray, cov: FloatArray) -> Layer:
    """``layer`` with its feed-forward replaced by the statistical linearization at N(mean, cov)."""
    ffn = layer.ffn
    if ffn is None:
        return layer
    mu_a = ffn.U @ mean + ffn.c
    var_a = np.einsum("ij,jk,ik->i", ffn.U, cov, ffn.U)
    e_s, e_ds = _activation_moments(ffn.activation, mu_a, var_a)
    a_eff = layer.A + (ffn.W * e_ds) @ ffn.U
    b_eff = layer.b + ffn.W @ (e_s - e_ds * (ffn.U @ mean))
    return Layer(a_eff, b=b_eff, heads=layer.heads)


def closure_flow(
    layer: Layer, initial: Gaussian, T: float, *, t_eval: Any = None, rtol: float = 1e-10
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Gaussian-closure moment flow of a layer with a ReLU/GELU/identity feed-forward.

    ``dm/dt = M m + c`` and ``dΣ/dt = MΣ + ΣMᵀ`` with ``(M, c)`` the affine velocity
    (:func:`~gtcontrol.moments.moment_field`) of the layer whose feed-forward ``W σ(Ux + c)`` is
    replaced by ``W (E σ(a) + D (a − E a))``, ``D = diag E σ'(a)``, ``a = Ux + c ~`` the current
    Gaussian. At a Gaussian state these are the exact moment derivatives (Stein's lemma); the flow
    is the assumed-density (Gaussian) approximation of the token law. With the identity it is the
    exact moment ODE.

    Returns
    -------
    (t, mean, cov)
        Arrays ``(n,)``, ``(n, d)``, ``(n, d, d)``.

    Raises
    ------
    SolverError
        If the integration fails (e.g. the moments overflow).
    """
    d = layer.dim
    iu = np.triu_indices(d)

    def rhs(_t: float, y: FloatArray) -> FloatArray:
        m, s = y[:d], unvech(y[d:], d)
        dm, ds = moment_field(_linearized(layer, m, s), m, s)
        return np.concatenate([dm, ds[iu]])

    y0 = np.concatenate([initial.mean, vech(initial.cov)])
    sol = solve_ivp(rhs, (0.0, T), y0, method="DOP853", t_eval=t_eval, rtol=rtol, atol=1e-12)
    if sol.status != 0:
        raise SolverError(f"closure flow failed: {sol.message}", status="integrator_error")
    covs = np.array([unvech(col[d:], d) for col in sol.y.T])
    return sol.t, sol.y[:d].T.copy(), covs


@dataclass(frozen=True, eq=False)
class ClosenessCurve:
    """Distances along depth for one activation.

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

    All three are divided by the flow's RMS radius ``sqrt(tr Σ(t))``, so that a cloud that grows
    or shrinks does not by itself change them.
    """

    activation: str
    t: FloatArray
    to_flow: FloatArray
    to_own: FloatArray
    moment_gap: FloatArray


@dataclass(frozen=True, eq=False)
class FeedForwardCloseness:
    """Result of :func:`feedforward_closeness`: one :class:`ClosenessCurve` per activation."""

    d: int
    n_tokens: int
    seed: int
    T: float
    curves: tuple[ClosenessCurve, ...]
    stats: dict[str, Any] = field(default_factory=dict)

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


def feedforward_closeness(
    d: int = 4,
    n_tokens: int = 2000,
    seed: int = 0,
    *,
    T: float = 2.0,
    n_times: int = 11,
    n_projections: int = 64,
) -> FeedForwardCloseness:
    """Distance between the token law and the Gaussian moment flow along depth, identity vs ReLU.

    The layer has one stabilizing head (``V = −½ I``, ``B ≻ 0``) and a feed-forward
    ``W σ(Ux + c)`` with ``k = 2d`` hidden units (seeded, ``U`` rows of norm ~1.5, ``c ~ N(0, ½)``,
    ``W ~ N(0, 1/k)``). Tokens move by RK4 (10 steps per unit depth); the flow is
    :func:`closure_flow`.

    Returns
    -------
    FeedForwardCloseness
        Curves for ``"identity"`` and ``"relu"``.
    """
    clock = time.perf_counter()
    dd, n, sd = _check_common(d, n_tokens, seed)
    horizon = as_positive_float("T", T)
    nt = as_positive_int("n_times", n_times)
    rng = np.random.default_rng([sd, dd, 505])
    k = 2 * dd
    b_mat = _spd(rng, dd, 0.2, 0.6)
    u = 1.5 * rng.standard_normal((k, dd)) / math.sqrt(dd)
    c = math.sqrt(0.5) * rng.standard_normal(k)
    w = rng.standard_normal((dd, k)) / math.sqrt(k)
    x0 = Gaussian(np.zeros(dd), _spd(rng, dd, 0.5, 1.5)).sample(n, rng)
    g0 = Gaussian.from_samples(x0)  # the flow starts from the tokens' own moments
    times = np.linspace(0.0, horizon, nt)
    steps = max(1, math.ceil(10 * horizon))  # RK4 error ~h⁴ ≪ the O(N^-1/2) sampling error
    curves = []
    for act in ("identity", "relu"):
        layer = Layer(B=b_mat, v=-0.5, ffn=FeedForward(w, u, c, activation=act))
        tok = simulate_tokens(layer, x0, horizon, steps_per_layer=steps, snapshot_times=times)
        _, fm, fc = closure_flow(layer, g0, horizon, t_eval=times)
        if act == "identity":  # the closure of an affine layer is the exact moment ODE
            exact = simulate(layer, g0, horizon, n_points=2)
            if not np.allclose(fc[-1], exact.cov[-1], rtol=1e-7, atol=1e-9):
                raise SolverError(
                    "closure flow disagrees with the exact moment ODE", status="check"
                )
        to_flow, to_own, gap = [], [], []
        for (_, xs), m, s in zip(tok.snapshots, fm, fc, strict=True):
            target = Gaussian(m, s)
            own = Gaussian.from_samples(xs)
            radius = math.sqrt(float(np.trace(s)))
            sw_flow = sliced_wasserstein(xs, target, n_projections=n_projections, seed=sd)
            to_flow.append(sw_flow / radius)
            sw_own = sliced_wasserstein(xs, own, n_projections=n_projections, seed=sd)
            to_own.append(sw_own / radius)
            gap.append(own.bures_wasserstein(target) / radius)
        curves.append(
            ClosenessCurve(
                act,
                np.array([t for t, _ in tok.snapshots]),
                np.array(to_flow),
                np.array(to_own),
                np.array(gap),
            )
        )
    return FeedForwardCloseness(
        d=dd,
        n_tokens=n,
        seed=sd,
        T=horizon,
        curves=tuple(curves),
        stats={"seconds": time.perf_counter() - clock},
    )
