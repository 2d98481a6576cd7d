"""Token-level simulation of the continuous-depth Transformer: the ground truth of the moment model.

``N`` tokens ``x_i ∈ R^d`` with empirical measure ``μ = (1/N) Σ_j δ_{x_j}`` move by
(docs/theory.md §1)

    dx_i/dt = A x_i + b [+ W_out σ(W_in x_i + b_in)] + Σ_h V_h Attn_h(x_i; μ),
    Attn_h(x; μ) = Σ_j x_j e^{x_jᵀ B_h x} / Σ_j e^{x_jᵀ B_h x},

every token being both a query and a key; σ ∈ {identity, relu, gelu (exact erf form)}. For a
Gaussian cloud the empirical moments follow the moment ODE of :mod:`gtcontrol.model.moments` up
to a sampling error ``O(N^{-1/2})``; for ReLU/GELU feed-forwards and non-Gaussian clouds this
simulator is the reference the moment model is measured against. The field itself (blocked,
stable softmax; its cost) lives in :mod:`gtcontrol.model.attention`.

:func:`simulate_tokens` never raises on numerical trouble: non-finite tokens, an integrator
failure or a spent budget (``time_limit``, ``max_evals``) is a :class:`TokenTrajectory` whose
``status`` says which, holding the tokens' path up to that point.

Reference: the paper cited in :mod:`gtcontrol`, §1 (model), §2 (Gaussian invariance),
§6 (noisy tokens).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._display import Axes, SummaryItems
from .._linalg import FloatArray
from .._progress import progress
from .._status import DEFAULT_MAX_EVALS, Budget, Outcome, ResultFields, Status
from .._validation import frozen, option_values
from ..errors import InvalidParametersError
from ._token_adaptive import run_adaptive
from ._token_integrators import (
    Recorder,
    TokenOptions,
    TokenRun,
    check_noise_sources,
    check_times,
    in_range,
    mean_square_bound,
    run_fixed,
)
from .attention import Workspace, check_tokens
from .gaussian import Gaussian
from .params import Control, Layer, Schedule, as_control

__all__ = ["TokenTrajectory", "simulate_tokens"]

AnyArray = NDArray[Any]


@dataclass(frozen=True, eq=False)
class TokenTrajectory(ResultFields, Outcome):
    """Tokens moved through depth, summarized by their empirical moments.

    Attributes
    ----------
    t
        Recorded depths ``(n,)``.
    mean, cov
        Empirical mean ``(n, d)`` and covariance ``(n, d, d)`` of the tokens at those depths,
        with the ``1/N`` normalization of :meth:`Gaussian.from_samples` (the covariance of the
        empirical measure, which is what the dynamics transports).
    snapshots
        ``((t, tokens), ...)`` at the requested snapshot depths, sorted by depth (for plotting
        clouds). Fixed-step methods snapshot at the step depth nearest to each request (``t``
        is that depth; the step grid is never altered to hit it); an embedded pair hits it exactly.
    final_tokens
        Tokens ``(N, d)`` where the integration stopped (the last finite state after an
        overflow, the last completed step when the budget ran out).
    status
        :class:`~gtcontrol.Status`: ``SUCCESS`` (carried to the horizon), ``OVERFLOW`` (the
        tokens left the floating-point range: non-finite, or a mean square above ``1e150``,
        beyond which their empirical moments are no valid :class:`Gaussian`),
        ``BUDGET_EXHAUSTED`` (``time_limit`` or ``max_evals`` ran
        out; the tokens of the last completed step are kept) or ``FAILED`` (the adaptive step
        size collapsed; ``message`` says why).
    overflow_time
        Depth of the step that produced non-finite tokens (for an embedded pair: the end of the
        shortest step tried, after the step size collapsed on non-finite tokens); ``math.inf``
        otherwise. Tokens overflow; only the moment model has a finite-time blow-up
        (:attr:`Trajectory.blowup_time <gtcontrol.Trajectory.blowup_time>`).
    stats
        ``method``, ``steps`` (accepted steps), ``n_velocity`` (field evaluations over all
        tokens), ``n_attention`` (softmax-head evaluations, the ``O(N² d)`` passes),
        ``block_size``, ``n_tokens``, ``seconds``; ``steps_per_layer`` for the fixed-step
        methods; for an embedded pair also ``nfev`` (= ``n_velocity``), ``rejected`` (rejected
        steps), ``nonfinite_rejections``, ``error_estimate`` (the sum of the accepted local
        errors relative to the token scale: the achieved global relative error when errors are
        carried by the flow no faster than the tokens; at most ``rtol``), ``rtol``, ``atol``,
        ``min_step``, ``max_step`` and ``next_step`` (the step the controller
        would take next: ``first_step`` of a continuation).
    message
        How the integration ended, in words.
    success
        True for ``SUCCESS`` only.
    """

    t: FloatArray
    mean: FloatArray
    cov: FloatArray
    snapshots: tuple[tuple[float, AnyArray], ...]
    final_tokens: AnyArray
    overflow_time: float = math.inf

    @property
    def dim(self) -> int:
        return int(self.mean.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.final_tokens.shape[0])

    def empirical(self, i: int) -> Gaussian:
        """The moment-matched Gaussian ``N(mean[i], cov[i])`` of the tokens at record ``i``."""
        return Gaussian(self.mean[i], self.cov[i], name="empirical")

    @property
    def final(self) -> Gaussian:
        """The moment-matched Gaussian at the last recorded depth."""
        return self.empirical(-1)

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def _summary_items(self) -> SummaryItems:
        return [
            ("N", self.n_tokens),
            ("dim", self.dim),
            ("n", len(self)),
            ("t", (float(self.t[0]), float(self.t[-1]))),
            ("overflow_time", self.overflow_time),
            ("snapshots", len(self.snapshots)),
        ]

    def _draw(self, ax: Axes) -> None:
        from ._figures import draw_covariance

        title = f"{self.n_tokens} tokens, empirical covariance ({self.status.value})"
        draw_covariance(
            ax,
            self.t,
            self.cov,
            blowup_time=self.overflow_time,
            blowup_label="overflow",
            title=title,
        )


def simulate_tokens(
    control: Layer | Schedule | Control,
    tokens: Any,
    T: float | None = None,
    *,
    method: str | None = None,
    steps_per_layer: int | None = None,
    block_size: int | None = None,
    backend: str = "auto",
    record: str = "steps",
    times: Any = None,
    noise: Any = None,
    seed: np.random.Generator | int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    first_step: float | None = None,
    dtype: Any = np.float64,
    max_evals: int = DEFAULT_MAX_EVALS,
    stop_when: Callable[[float, Any], bool] | None = None,
    time_limit: float | None = None,
) -> TokenTrajectory:
    """Move ``N`` tokens through the continuous-depth Transformer with softmax attention.

    Each token follows ``dx/dt = A x + b [+ W_out σ(W_in x + b_in)] + Σ_h V_h Attn_h(x; μ_t)``
    with ``μ_t`` the empirical measure of the tokens and
    ``Attn_h(x; μ) = Σ_j x_j e^{x_jᵀB_h x} / Σ_j e^{x_jᵀB_h x}`` (docs/theory.md §1). With
    ``noise = G`` and ``method="euler"`` it is the noisy model ``dx = v(x) dt + G dW``
    (independent Brownian motions per token, docs/theory.md §6), whose Gaussian counterpart is
    ``dΣ/dt = MΣ + ΣMᵀ + GGᵀ``. Fixed-step methods step exactly onto every breakpoint of a
    piecewise-constant model. Numerical trouble never raises: it is the result's ``status``.

    Parameters
    ----------
    control
        A :class:`Layer` (needs ``T``; one segment), a :class:`Schedule`, or any control with
        ``.T``, ``.breakpoints`` and ``.layer_at(t)``. ReLU/GELU feed-forwards are allowed.
    tokens
        Finite array ``(N, d)``, ``N ≥ 1``, ``d`` the model dimension; it is not modified.
    T
        Horizon; optional for controls that carry their own.
    method
        ``"DOP853"`` (the default unless ``steps_per_layer`` is given; order 8, 12 field
        evaluations per step), ``"RK45"`` (Dormand–Prince 5(4), 6 per step; cheaper at loose
        ``rtol``) or ``"RK23"`` (Bogacki–Shampine 3(2), 3 per step; cheaper still at ``rtol``
        of 1e-2 and above): an embedded Runge–Kutta pair with error control on the whole
        ensemble, error per unit step, so that the accepted local errors sum to at most
        ``rtol`` over the horizon whatever ``T`` (the default is within ~1e-6 relative of a
        converged integration; see ``stats["error_estimate"]``). ``"rk4"``: classical RK4 with
        ``steps_per_layer`` fixed steps (the former default; the default when
        ``steps_per_layer`` is given). ``"euler"`` /
        ``"discrete"``: residual steps ``x ← x + h v(x)`` with the layer at the step midpoint,
        ``h = segment/steps_per_layer``: with ``steps_per_layer=1`` on a Schedule a real
        L-layer residual Transformer, whose moments tend to :func:`gtcontrol.simulate_discrete`
        as ``N → ∞``.
    steps_per_layer
        Fixed steps per layer (per segment between breakpoints), at most ``10**6``. ``None``:
        20 for ``"rk4"``, 1 for ``"euler"``/``"discrete"``. Refused with the embedded pairs.
    block_size
        Query rows per attention tile (at most ``10**7``); ``None``: the kernel's default
        (128 query rows × 256 keys, in cache; :mod:`gtcontrol.model.attention`).
    backend
        Attention backend of :func:`~gtcontrol.token_velocity`: ``"auto"`` (default: torch on
        a CUDA device for N ≥ 2048, else numpy), ``"numpy"`` or ``"torch"`` (float64 results
        equal to numpy's to ~1e-15; refused when torch is not installed).
    record
        ``"steps"`` (default): empirical moments after every step (every accepted step for
        an embedded pair); ``"layers"``: only at the breakpoints.
    times
        Depths at which to keep a copy of all tokens (see :attr:`TokenTrajectory.snapshots`).
    noise
        Noise matrix ``G``, shape ``(d, k)`` (usually ``(d, d)``); only with ``"euler"`` /
        ``"discrete"``: each step adds ``sqrt(h) ξ Gᵀ``, ``ξ`` standard normal ``(N, k)``.
        When omitted, each layer's own ``Layer.noise`` is used (the same Euler–Maruyama step;
        other methods refuse a layer with noise).
    seed
        Seed (a non-negative integer) or ``numpy.random.Generator`` of the noise; pass one for
        reproducible runs.
    rtol, atol
        Tolerances of the embedded pairs: a step is accepted when its local error, in the RMS over
        all coordinates of ``e / (atol + rtol · max(|x|, |x⁺|, rms of the tokens))``, is at most
        ``h / T``. Defaults ``rtol = 1e-7`` (``1e-4`` for float32; at least 100 machine
        epsilons of ``dtype``, at most ``0.1``) and ``atol = 0``. Refused with the fixed-step
        methods.
    first_step
        First step of an embedded pair; ``None``: Hairer's starting rule (one extra field
        evaluation, and on a stiff field a cautious guess that the controller must grow).
        ``stats["next_step"]`` of a run is the step its controller would take next: passed
        here with its final tokens, it continues that run (MiniLM layer 0 at ``I ⊕ 0``,
        N = 1024: five stretches took 634 evaluations restarted, 452 in one run). To stop a
        run where a condition holds, ``stop_when`` needs no restart at all.
    dtype
        ``numpy.float64`` (default) or ``numpy.float32`` for the token arithmetic; moments are
        always accumulated in float64.
    max_evals
        Cap on velocity-field evaluations (default ``10**6``, at most ``10**9``); reaching it
        returns ``Status.BUDGET_EXHAUSTED``.
    stop_when
        A predicate ``stop_when(depth, tokens) -> bool`` asked after every step (every
        accepted step of an embedded pair) with the depth it reached and the tokens there, in
        the run's ``dtype`` (after any snapshot at that depth is kept; the predicate must not
        change them): the run ends after the first step where it is true, with
        ``Status.SUCCESS`` and a message naming that depth; its moments are recorded there.
        A check that needs the tokens at a few depths (a distance that must stay below a
        bound) then stops as soon as it fails, in one run, and no step is cut to land on its
        depths: a run stopped at each, and continued, takes a step more per depth.
        It must take two arguments and answer one truth value (an array of several is refused
        with :class:`~gtcontrol.errors.InvalidParametersError`, naming ``stop_when``).
        ``None`` (default): never asked. An exception it raises ends the call.
    time_limit
        Wall-clock limit in seconds (``None``: none); reaching it returns
        ``Status.BUDGET_EXHAUSTED``.

    Returns
    -------
    TokenTrajectory
        Empirical moments along depth, snapshots, final tokens. ``Status.SUCCESS`` when the
        tokens reached ``T``, or the depth where ``stop_when`` was true; ``Status.OVERFLOW``
        when they left the floating-point range (non-finite, or a mean square ``Σ|x_i|²/N``
        above ``1e150`` in float64, ``1e30`` in float32; the trajectory stops at the last
        state in range);
        ``Status.BUDGET_EXHAUSTED`` when ``time_limit`` or ``max_evals`` ran out;
        ``Status.FAILED`` when the adaptive integrator failed.

    Raises
    ------
    InvalidParametersError
        On malformed tokens (the message names ``tokens`` and both shapes), a non-positive ``T``,
        zero or too many steps, an unknown method, noise with a method other than
        Euler–Maruyama, a tolerance out of range, or snapshot depths outside ``[0, T]``.

    Notes
    -----
    Cost per field evaluation: ``O(N² d)`` per head with ``B_h ≠ 0``, memory ``O(N d + threads ·
    block_size · 256)``; see :mod:`gtcontrol.model.attention`. ``"DOP853"`` stores the stages
    of one step (``13 N d`` numbers for DOP853) and spends ``12`` evaluations per step (plus one
    per segment and one for its first step); its step count grows with ``T`` times the field's
    rate, where the fixed-step methods keep their count and lose accuracy
    (``benchmarks/bench_tokens.py`` prints both side by side). Reference: Alcalde, Ji, Zuazua,
    arXiv:2606.07600 (2026), §1–§2; Hairer, Nørsett, Wanner, *Solving Ordinary Differential
    Equations I* (1993), §II.4 and §II.10 (embedded pairs, step-size control).

    Examples
    --------
    A contracting feed-forward ``A = -I`` with no attention: every token decays like ``e^{-t}``.

    >>> import numpy as np
    >>> from gtcontrol import Layer, simulate_tokens
    >>> tr = simulate_tokens(Layer(A=-np.eye(2)), np.ones((3, 2)), T=1.0)
    >>> tr.status, tr.success
    (<Status.SUCCESS: 'success'>, True)
    >>> bool(np.allclose(tr.final_tokens, np.exp(-1.0), rtol=1e-6))
    True
    """
    opts = TokenOptions(**option_values(TokenOptions, locals()))
    ctrl = as_control(control, T)
    d = ctrl.layer_at(0.0).dim
    x64 = check_tokens(tokens, d)
    with np.errstate(over="ignore"):  # an overflow of the cast is refused just below
        x = x64.astype(opts.dtype, copy=False)
    if opts.dtype != np.float64 and not in_range(x):
        raise InvalidParametersError(
            f"tokens: a mean square of {float(np.mean(np.sum(x64 * x64, axis=1))):.3g} is "
            f"beyond {mean_square_bound(opts.dtype):.3g}, where {opts.dtype} tokens leave the "
            "range of their products; pass dtype=numpy.float64"
        )
    breaks = np.asarray(ctrl.breakpoints, dtype=float)
    snap_times = check_times(times, float(breaks[-1]))
    g, gen = check_noise_sources(ctrl, noise, seed, d, str(opts.method))

    budget = Budget(opts.time_limit, max_evals=opts.max_evals)
    work = Workspace(x.shape[0], opts.dtype, opts.block_size, budget, backend=opts.backend)
    rec = Recorder(opts.record)
    stats: dict[str, Any] = {"method": opts.method, "backend": work.backend}
    t_start, t_end = float(breaks[0]), float(breaks[-1])
    # Overflow is detected and reported as a status; silence the intermediate inf/nan warnings.
    with (
        np.errstate(over="ignore", invalid="ignore", divide="ignore"),
        progress(f"{x.shape[0]} tokens, depth {t_end:g}", total=t_end - t_start) as update,
    ):
        run = TokenRun(
            ctrl, opts, work, rec, snap_times, lambda t: update(t - t_start), opts.stop_when
        )
        if opts.adaptive:
            x, end, adaptive_stats = run_adaptive(run, x)
            stats.update(adaptive_stats)
            n_steps = int(adaptive_stats["steps"])
            stats["nfev"] = work.n_velocity
        else:
            x, end, n_steps = run_fixed(run, x, g, gen)
            stats["steps_per_layer"] = opts.steps
    stats.update(
        steps=n_steps,
        n_velocity=work.n_velocity,
        n_attention=work.n_attention,
        block_size=work.block,
        n_tokens=int(x.shape[0]),
        seconds=budget.elapsed,
    )
    return TokenTrajectory(
        t=frozen(np.array(rec.t)),
        mean=frozen(np.array(rec.mean)),
        cov=frozen(np.array(rec.cov)),
        snapshots=tuple(rec.snaps),
        final_tokens=frozen(x),
        status=end.status,
        overflow_time=end.depth if end.status is Status.OVERFLOW else math.inf,
        stats=stats,
        message=end.message(),
    )
