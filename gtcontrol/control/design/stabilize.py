"""Stabilize a given layer around a target: keep its heads, make ``N(m*, Σ*)`` a stable equilibrium.

A pretrained attention layer is usually not stable anywhere: its covariance blows up in finite
depth (docs/minilm_flows.md). :func:`stabilize` keeps the layer's heads exactly and designs
the smallest addition, in a named family, that makes a chosen target ``N(m*, Σ*)`` an
exponentially stable equilibrium with rate ``≥ rate`` (docs/theory.md, "Stability of a
prescribed equilibrium"):

1. **Feed-forward.** The equilibrium equation ``AΣ* + Σ*Aᵀ = −Q(Σ*)``,
   ``Q(Σ) = Σ_h (V_hΣB_hΣ + ΣB_hᵀΣV_hᵀ)``, is linear in ``A``: every solution is
   ``A = (−Q(Σ*)/2 + K)Σ*⁻¹`` with ``K`` skew. The one nearest to the layer's own ``A``
   (Frobenius) is used: ``K`` solves the Lyapunov equation ``KP² + P²K = PEᵀ − EP``,
   ``P = Σ*⁻¹``, ``E = −Q(Σ*)P/2 − A_old``. Then ``b`` makes the mean equation hold at ``m*``.
2. **The extra, in a family.** At any such equilibrium ``M* = A + Σ_h V_hΣ*B_h`` is
   ``Σ*``-skew, so ``A`` alone never makes ``Σ*`` attract; stability is decided by the heads.

   * ``"head"``: one extra Riccati-class head ``(−cI, Σ*⁻¹)`` with ``A → A + cI``. It keeps the
     equilibrium and shifts the covariance linearization ``L`` by exactly ``−2c``, so the smallest
     ``c`` is closed-form from the spectral abscissa of the pretrained part: ``c = max(0, (α(L) +
     ρ)/2)``. For tokens the head is used in the gauge ``(sV₀, B₀/s)``, which leaves the covariance
     dynamics unchanged; ``s`` makes the softmax effective sample size ``ESS/N = exp(−uᵀΣu)`` of the
     added head at least ``min_ess`` for all but ``e^{−9/2}`` of the queries of the target and of
     each start, by Gaussian concentration (``|Rm| + ‖W‖_F + 3‖W‖₂``; in high dimension a typical
     query lies far outside the ball of 3 standard deviations that bounds it in low dimension), and
     keeps a typical token's logit for itself within 1 of a typical key's at the target (``r/s`` on
     an ``r``-dimensional target), so that over ``N`` tokens the softmax stays near its first-order
     expansion, under which the head moves the tokens as the moment model moves the Gaussian of
     their empirical moments (``_head._token_scale``). The gauge alone is not free for the
     mean: the head moves the mean matrix ``K`` by ``−scI``, a stiff mean flow and a large change of
     the layer's function when ``s`` is large. A uniform companion head ``(κI, 0)`` (``B = 0``:
     every token attends equally, ``ESS/N = 1``) adds ``κm`` to the mean's velocity only; ``κ = sc −
     σ`` leaves ``K`` shifted by exactly ``−σ``, the smallest shift the mean needs: ``σ = max(0,
     α(K) + ρ)``. Where the layer has a frozen coordinate on which ``m*`` is nonzero (an extracted
     layer's affine one), the query may be centred, ``u = Σ*⁻¹(x − m*)/s`` (a query bias; same
     moment model), whichever needs the smaller ``s``. The local minimum of ``c`` need not attract a
     far start: the pretrained heads can keep a second attracting equilibrium (MiniLM's layers 1 and
     2 do at their text targets: docs/benchmarks.md). So at the local minimum a verification
     stops halfway when its start is not within relative 1e-2 of the target
     there and too slow to close that gap in the depth left (the farthest start's first half runs
     alone, before the other checks, which it spares when it stops); ``c`` then doubles until
     every such start passes a screen (integrated to half the verification depth at a loose
     tolerance, it must come within 1e-2), geometric bisection narrows the bracket to a factor
     ``2^(1/8)``, and every check of every start runs again at that ``c``: it is the smallest
     verified change to that resolution, and the message and ``stats`` say so. A start singular
     on the active subspace is not screened: the covariance flow is a congruence ``Σ(t) =
     Φ(t)Σ0Φ(t)ᵀ``, so it keeps its rank and never reaches a ``Σ*`` positive definite there, for
     any ``c``. When the moments are certified and verified but ``N`` tokens do not follow them
     (the kept heads' attention over ``N`` tokens is biased against the moment model, strongly so
     in their hard-maximum regime, and the contraction holds that steady forcing off), the design
     rate doubles, at most three times, and every check runs again (``_head._token_valid``).
   * ``"gains"``: per-head gains ``V_h → g_h V_h``, ``g ∈ [0, 1]ᴴ``, with ``‖1 − g‖₂`` minimal
     (a local minimum, by sequential linear programming on the eigenvalue sensitivities
     ``∂λ/∂g_h = ψᴴ L_h φ / ψᴴ φ``). The family cannot reach the rate when the mean
     eigenvalue of ``L`` or of ``K`` (affine in ``g``: ``tr L(g) = Σ_h g_h (tr V_h tr(B_hΣ*) +
     ⟨V_h, B_hΣ*⟩)``, ``tr K(g) = Σ_h g_h tr V_h``) exceeds ``−ρ`` for every ``g`` in the box:
     that is a proof, and the result is ``INFEASIBLE``.
   * ``"auto"``: both, and the certified one that changes the layer's function least (the
     relative change of the attention output on probe tokens).

Certificates, stated in the result:

* **local**: the spectral abscissa of the linearization (covariance and mean parts) at the
  target is ``≤ −rate`` (:func:`gtcontrol.linearization_spectrum` on the final layer; for the
  added head at Krylov scale, the base spectrum shifted by ``−2c``, the identity
  ``L = L_base − 2cI`` checked on random directions). The target is an equilibrium of the
  float layer returned only to its rounding: ``A`` is refined (iterative refinement) to
  round-off, and the relative residuals of both equations, head by head, must lie within the
  design's rounding bound ``8·eps·(r + κ(Σ*))`` (else ``FAILED`` with the numbers); the message
  and ``stats["residual"]`` state them, and the verifications, which integrate to the layer's
  exact equilibrium, bound how far it lies from the target;
* **global** (head family): with ``q = Σ_h ‖Σ*^{-½}V_hΣ*^{½}‖₂ ‖Σ*^{½}B_hΣ*^{½}‖₂`` over the
  kept heads, ``c > q`` makes the extra head's quadratic term dominate: for every ``Σ0 ⪰ 0``,
  ``tr(Σ*⁻¹Σ(t)) ≤ max(tr(Σ*⁻¹Σ0), r a⁺/(c − q))`` with ``a = λ_max(sym(Σ*^{-½}AΣ*^{½}))``
  (with noise the level is ``r(a + √(a² + 2(c − q)γ/r))/(2(c − q))``, ``γ = tr(Σ*⁻¹GGᵀ)``): no
  blow-up from anywhere;
* **basin**: with the numerical abscissa ``ω < 0`` of ``L`` and the quadratic remainder
  bounded by ``β‖G‖²``, ``β = 2(q + c)``, every start with
  ``‖Σ*^{-½}(Σ0 − Σ*)Σ*^{-½}‖_F < −ω/β`` converges; the result says where each ``initial``
  lies;
* **verified**: :func:`gtcontrol.simulate` from each initial reaches the target to a relative
  ``1e-6`` at depth ``T``; with ``token_check=N``, ``N`` real tokens follow
  (:func:`gtcontrol.design_token_certificate`).

Reference: the paper cited in :mod:`gtcontrol`, §4; docs/theory.md.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import replace
from typing import Any

import numpy as np

from ..._blas import calm_blas
from ..._jobs import concurrently, in_background, in_turn, threaded
from ..._linalg import FloatArray, spd_sqrt_pair, sym
from ..._status import Budget, BudgetExhausted, Status, as_time_limit, cancellable
from ..._validation import (
    MAX_ENTRY,
    as_choice,
    as_float_array,
    as_positive_float,
    as_positive_int,
    as_seed,
    frozen,
)
from ...analysis._subspace import active_subspace, reduced_layer
from ...analysis.stability import (
    LinearizationSpectrum,
    shifted_spectrum,
    spectrum_on_basis,
)
from ...errors import InvalidGaussianError, InvalidParametersError
from ...model.attention import token_velocity
from ...model.field import affine_velocity, moment_field
from ...model.finite_n import ess_fraction
from ...model.gaussian import Gaussian, check_gaussian
from ...model.moments import Trajectory, simulate
from ...model.params import Layer
from ._common import designed_a, residual_parts, scaled_norm
from ._finite_n import TokenCertificate, design_token_certificate
from ._gains import gains_family
from ._head import SCREEN_TOL, CheckPlan, head_family
from ._stabilization import VERIFY_RTOL, Design, Stabilization, Verification

__all__ = ["ADDITIONS", "Stabilization", "stabilize"]

#: The families of additions :func:`stabilize` designs.
ADDITIONS = ("auto", "head", "gains")
#: Relative tolerance of the verifying integration: the flow contracts near the target, so the
#: global error stays far below the 1e-6 required (tests/test_stabilize.py compares with a 1e-10
#: integration); not 1e-6, which is cheaper but brings the error floor that the factor's rotation
#: at the equilibrium carries too close to what is verified (docs/benchmarks.md).
_VERIFY_INTEGRATOR_RTOL = 1e-7
#: Its absolute tolerance, on the factor normalized to unit Frobenius norm (and the mean over
#: its scale): ``1e-4`` of the ``1e-6`` verified, so that entries far below the factor's scale,
#: which cannot move the verified error, do not set the step (docs/benchmarks.md).
_VERIFY_INTEGRATOR_ATOL = 1e-10
#: Seconds the far start's first half waits for the given layer's background token run to
#: end before it starts (``_Context.first_segment``): alone it gets every core's BLAS threads,
#: a gain larger than this wait; a run that goes the whole depth (a layer whose tokens stay near
#: the target) is not waited for (docs/benchmarks.md).
_BACKGROUND_WAIT = 3.0
#: Seconds a wait for the background run may last past the call's deadline
#: (:meth:`_Context._await_background`).
_GRACE = 0.25
#: e-folds added to the default verification depth for transients.
_TRANSIENT_EFOLDS = 3.0
#: A default depth is extended by this many e-folds at a time while the error still falls, up
#: to this multiple of the depth.
_EXTEND_EFOLDS = 3.0
_EXTEND_MAX = 2.0
#: Probe tokens for the function change when none are given.
_PROBE_TOKENS = 512
#: Tolerance of the stabilized layer's token run (RK45, :meth:`_Context._tokens`).
_TOKEN_RTOL = 1e-2
#: Both token runs stop once their W2 is this many sampling floors (five times the two the
#: check allows). The stabilized layer's has failed by then, and its tokens, held off the
#: moments by a finite-N bias larger than the contraction, run away on a stiffening field; the
#: given layer's is a report beside the check, which that depth makes at a fraction of the
#: cost of the whole depth (docs/benchmarks.md).
_AWAY = 10.0
#: The fields of a :class:`Stabilization` with no extra designed (:meth:`_Context.result_without`):
#: no change, no certificate, no check.
_NO_DESIGN: dict[str, Any] = {
    "c": math.nan,
    "scale": math.nan,
    "mean_shift": math.nan,
    "gains": None,
    "change": math.nan,
    "spectrum": None,
    "local_certificate": False,
    "global_certificate": False,
    "global_bound": "",
    "q": math.nan,
    "basin_radius": math.nan,
    "verification": (),
    "function_change": math.nan,
}
#: float64's machine epsilon (rounding bounds of the certificates).
_EPS = float(np.finfo(np.float64).eps)
#: Relative size of the perturbed-target start, and its name (the default token-check start).
_PERTURBATION = 0.1
_PERTURBED = "perturbed target"
#: The design's rounding bound is this many units of round-off times ``r + κ(Σ*)``
#: (:attr:`_Context.residual_bound`).
_ROUNDING = 8.0


def stabilize(
    layer: Layer,
    target: Gaussian,
    T: float | None = None,
    *,
    add: str = "auto",
    rate: float = 1.0,
    initial: Gaussian | Sequence[Gaussian] | str | None = None,
    token_check: int | None = None,
    min_ess: float = 0.5,
    tokens: Any = None,
    seed: int = 0,
    time_limit: float | None = None,
) -> Stabilization:
    """Keep a layer's heads and make ``N(m*, Σ*)`` an exponentially stable equilibrium.

    Designs ``A, b`` (the equilibrium equation ``AΣ* + Σ*Aᵀ = −Q(Σ*)``, the ``A`` nearest to
    the layer's own, then ``b`` from the mean equation) and the smallest extra in the family
    ``add`` such that the linearized moment flow at the target has spectral abscissa
    ``≤ −rate``; then states and checks the certificates (module docstring).

    Parameters
    ----------
    layer
        The layer (dense or factored heads, any number; affine feed-forward). With noise ``G``
        (``Layer.noise``) the equilibrium equation is ``AΣ* + Σ*Aᵀ = −Q(Σ*) − GGᵀ`` (the
        linearization is unchanged: ``GGᵀ`` is constant), and ``token_check`` is refused.
    target
        ``N(m*, Σ*)``, ``Σ*`` positive definite on the layer's active subspace (it may be
        singular along directions the layer never moves, e.g. ``S ⊕ 0`` for an extracted
        layer's affine coordinate).
    T
        Depth of the verification; ``None``: ``(ln(e0/1e-6) + 3) / rate`` with ``e0`` the
        largest relative error of the starts (covariance or mean), extended by ``3 / rate`` at
        a time, up to twice that, while a start's error is above ``1e-6`` and still falls (a
        far start's transient can be slower than the certified rate; the message says so).
        ``rate`` is the certified one: a doubled design rate (``token_check``) when there was
        one.
    add
        ``"head"``, ``"gains"`` or ``"auto"`` (default): see the module docstring.
    rate
        Required exponential rate ``ρ > 0`` (default 1).
    initial
        Start(s) of the verifying simulations: a Gaussian or a sequence; ``None``: the
        identity start ``N(m*_frozen, P)`` (``P`` the projection on the active subspace, the
        mean zero on it; left out when it is the target itself) and a perturbed target (10 %,
        seeded); ``"perturbed"``: that perturbed target alone (the local question, with no far
        start: no screens, and ``c`` is the smallest with the local certificate).
    token_check
        ``N`` (``≥ 2``): also drive ``N`` real tokens from the first initial (default starts:
        from the perturbed target) with the stabilized layer
        (:func:`gtcontrol.design_token_certificate`, in float32), beside the verifying
        simulations, by an error-controlled RK45 (``rtol = 1e-2``, capped at three times the
        evaluations of the RK4 rule; a large gauge ``s`` makes the token field stiff);
        required: ``W2 ≤ 2 ×`` the sampling floor; the run stops (and fails) at the first of
        the depths ``T/16, T/8, …`` where W2 exceeds 10 floors. Their depth is ``T``, or by
        default the verification's rule applied to their start alone. The given layer's tokens,
        from the same start and seed, are reported beside them: they run to depths ``T/16,
        T/8, …, T`` and stop at the first where they are 10 sampling floors away or out of
        range (with numpy's BLAS on one thread, as ``stabilize_model`` sets it, this run starts
        with the call, in a thread beside the design, and is cancelled if no result needs
        it). When only the token check fails (head family), the design rate doubles, at
        most three times (``stats["design_rate"]``): the tokens' finite-N bias is held off by
        the contraction. When it still fails, a kept head whose median predicted ``ESS/N`` at
        the target is below ``1/N`` is named as a hint (``stats["kept_head_ess"]``).
    min_ess
        Required predicted ``ESS/N`` of the added head's softmax (in ``(0, 1)``; default 0.5).
    tokens
        Probe tokens ``(n, d)`` for the function change; ``None``: 512 samples of the target.
    seed
        Seed of the perturbed start, the probe tokens and the token check.
    time_limit
        Wall-clock limit in seconds from the call (``None``: none); reaching it returns
        ``Status.BUDGET_EXHAUSTED``. On a busy machine (more runnable threads than cores)
        numpy's BLAS runs on one thread for the call: a multi-threaded OpenBLAS stalls there,
        inside calls that no budget check can interrupt.

    Returns
    -------
    Stabilization
        ``.layer`` is the stabilized layer; the certificates and checks are its fields.

    Raises
    ------
    InvalidParametersError
        On a malformed layer or option (``rate ≤ 0``, an unknown family, a token check of a
        noisy layer, ...).
    InvalidGaussianError
        On a target or initial of another dimension, or a target that is not positive definite
        on the active subspace (or singular where the layer's noise acts).

    Examples
    --------
    A layer whose single head ``V = 0.5 I``, ``B = I`` blows up; an added head (with its uniform
    companion for the mean) makes ``N(0, I)`` attract at rate 1:

    >>> import numpy as np, gtcontrol as gt
    >>> layer = gt.Layer(V=0.5 * np.eye(2), B=np.eye(2))
    >>> res = gt.stabilize(layer, gt.Gaussian(np.zeros(2), np.eye(2)), add="head", rate=1.0)
    >>> res.success, res.family, round(res.c, 4), round(res.mean_shift, 4), res.layer.n_heads
    (True, 'head', 1.0001, 1.5002, 3)
    >>> res.spectrum.abscissa <= -1.0
    True

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md.
    """
    clock = time.perf_counter()
    limit = as_time_limit(time_limit)
    if not isinstance(layer, Layer):
        raise InvalidParametersError(
            f"layer: expected a gtcontrol Layer, got {type(layer).__name__}"
        )
    if not isinstance(target, Gaussian):
        raise InvalidGaussianError(f"target: expected a Gaussian, got {type(target).__name__}")
    tgt = check_gaussian(target, layer.dim, "target")
    family = as_choice("add", add, ADDITIONS)
    rho = as_positive_float("rate", rate)
    depth = None if T is None else as_positive_float("T", T)
    n_tok = (
        None if token_check is None else as_positive_int("token_check", token_check, maximum=10**6)
    )
    if n_tok is not None and n_tok < 2:
        raise InvalidParametersError(
            f"token_check: expected at least 2 tokens, got {token_check!r}"
        )
    if (
        isinstance(min_ess, bool)
        or not isinstance(min_ess, (int, float))
        or not 0.0 < min_ess < 1.0
    ):
        raise InvalidParametersError(f"min_ess: expected a number in (0, 1), got {min_ess!r}")
    as_seed("seed", seed)
    layer.affine_ffn()
    probe = (
        None
        if tokens is None
        else as_float_array("tokens", tokens, ndim=2, shape=(None, layer.dim))
    )
    # jobs in threads when the caller runs numpy's BLAS on one thread (decided before the calm)
    parallel = threaded()
    with calm_blas():
        basis = _target_basis(layer, tgt.cov)
        if layer.noise is not None:
            _check_noise(layer.noise, basis, n_tok)
        starts = _starts(initial, tgt, basis, int(seed), layer.dim)
        ctx = _Context(
            layer,
            tgt,
            basis,
            rho,
            Budget(limit, start=clock),
            int(seed),
            float(min_ess),
            starts,
            depth=depth,
            n_tok=n_tok,
            probe=probe,
            clock=clock,
            parallel=parallel,
        )
        return _run(ctx, family)


def _run(ctx: _Context, family: str) -> Stabilization:
    """The design and checks of a validated :func:`stabilize` call, and ``auto``'s choice."""
    layer = ctx.layer
    # the given layer's tokens do not depend on the design: they run from the start, beside it
    ctx.start_untouched()
    try:
        try:
            base_layer = ctx.design_ffn(layer)
        except InvalidParametersError as exc:  # A or b beyond the entry bound
            return ctx.result_without(
                layer, None, family, Status.FAILED, f"the designed A, b do not fit: {exc}"
            )
        ctx.base_layer = base_layer
        base = ctx.spectrum(base_layer, omega=True, k=1)
        if base.status is not Status.SUCCESS:
            return ctx.result_without(base_layer, base, family, base.status, base.message)
        kinds = ("head", "gains") if family == "auto" else (family,)
        found = []
        for kind in kinds:
            found.append(ctx.family(kind, base_layer, base))
            if ctx.budget.exhausted:
                break
    except BudgetExhausted as exc:
        return ctx.result_without(
            layer, None, family, Status.BUDGET_EXHAUSTED, f"stopped: {exc.reason}"
        )
    finally:
        ctx.close()
    if family != "auto":
        return found[0]
    good = [r for r in found if r.success]
    pool = good or found
    best = min(
        pool, key=lambda r: r.function_change if math.isfinite(r.function_change) else math.inf
    )
    names = "; ".join(
        f"{r.family}: {r.status.value}, function change {r.function_change:.3g}" for r in found
    )
    return replace(
        best,
        candidates=tuple(found),
        message=f"auto chose {best.family} ({names}); {best.message}",
        stats=dict(best.stats, seconds=time.perf_counter() - ctx.clock),
    )


def _target_basis(layer: Layer, cov: FloatArray) -> FloatArray:
    """The active subspace of the target: :func:`active_subspace`, whose rank rule (eigenvalues
    below ``1e-10 λ_max`` count as zero) would refuse an ill-conditioned but positive-definite
    target (cond 1e11) as "singular along a direction the layer moves"; such a target's nonzero
    rows and columns (all, or all but the frozen coordinates) are kept instead when that block
    is positive definite. The design's rounding bound grows with ``κ(Σ*)`` and the
    verifications decide."""
    try:
        return active_subspace(layer, cov, "target")
    except InvalidGaussianError:
        rows = np.flatnonzero(np.any(cov != 0.0, axis=1))
        block = cov[np.ix_(rows, rows)]
        try:
            np.linalg.cholesky(block)
        except np.linalg.LinAlgError:
            raise InvalidGaussianError(
                "target: the covariance is singular along a direction the layer moves; "
                "expected a covariance positive definite on the layer's active subspace"
            ) from None
        if rows.size == cov.shape[0]:
            return np.eye(cov.shape[0])
        # the zero rows must be frozen: the rule's own check, on the rows' projection
        select = np.zeros_like(cov)
        select[rows, rows] = 1.0
        return active_subspace(layer, select, "target")


def _check_noise(noise: FloatArray, basis: FloatArray, n_tok: int | None) -> None:
    """Refuse what a layer with noise ``G`` cannot do: a token check (the token runs are
    deterministic), or a target singular along a direction that ``G`` moves (``GGᵀ`` pushes
    variance there, so the target cannot be an equilibrium)."""
    if n_tok is not None:
        raise InvalidParametersError(
            "token_check: the token check drives deterministic tokens, and the layer has noise "
            "(Layer.noise); expected token_check=None for a noisy layer"
        )
    off = noise - basis @ (basis.T @ noise)
    if scaled_norm(off) > 1e-12 * scaled_norm(noise):
        raise InvalidGaussianError(
            "target: the covariance is singular along a direction the layer's noise G moves "
            f"(|(I − P)G| = {scaled_norm(off):.3g}); expected a covariance positive definite "
            "wherever GGᵀ pushes variance"
        )


def _starts(
    initial: Any, tgt: Gaussian, basis: FloatArray, seed: int, d: int
) -> list[tuple[str, Gaussian]]:
    if initial is None or isinstance(initial, str):
        if initial is not None and initial != "perturbed":
            raise InvalidParametersError(
                "initial: expected a Gaussian, a sequence of them, None or 'perturbed', "
                f"got {initial!r}"
            )
        proj = basis @ basis.T
        frozen_mean = tgt.mean - proj @ tgt.mean
        identity = Gaussian(frozen_mean, proj, name="initial")
        rng = np.random.default_rng(seed)
        s_act = basis.T @ tgt.cov @ basis
        root, _ = spd_sqrt_pair(s_act)
        r = basis.shape[1]
        e = sym(rng.standard_normal((r, r)))
        e *= _PERTURBATION / max(float(np.linalg.norm(e, 2)), 1e-300)
        cov = sym(basis @ (root @ (np.eye(r) + e) @ root) @ basis.T)
        if float(np.max(np.abs(cov))) > MAX_ENTRY:
            # a target near the entry bound: a perturbation in [−0.1, −0.001] keeps the start
            # ⪯ Σ*, whose largest entry is on its diagonal, so inside the bound
            e = 0.5 * (e - _PERTURBATION * np.eye(r)) - 1e-3 * np.eye(r)
            cov = sym(basis @ (root @ (np.eye(r) + e) @ root) @ basis.T)
        step = _PERTURBATION * (basis @ (root @ rng.standard_normal(r)))
        mean = tgt.mean + step
        over = np.abs(mean) > MAX_ENTRY
        mean[over] = tgt.mean[over] - np.sign(tgt.mean[over]) * np.abs(step[over])
        perturbed = (_PERTURBED, Gaussian(mean, cov, name="the perturbed target start"))
        if initial == "perturbed" or (
            np.array_equal(identity.cov, tgt.cov) and np.array_equal(identity.mean, tgt.mean)
        ):
            return [perturbed]  # the identity start is the target itself: nothing to verify
        return [("identity", identity), perturbed]
    items = [initial] if isinstance(initial, Gaussian) else list(initial)
    if not items:
        raise InvalidGaussianError("initial: expected a Gaussian or a non-empty sequence of them")
    out = []
    for i, g in enumerate(items):
        if not isinstance(g, Gaussian):
            raise InvalidGaussianError(f"initial[{i}]: expected a Gaussian, got {type(g).__name__}")
        out.append((f"initial {i}", check_gaussian(g, d, f"initial[{i}]")))
    return out


def _global_level(r: int, a: float, gamma: float, gap: float) -> float:
    """The level of the global bound: ``φ = tr(Σ*⁻¹Σ)`` obeys ``dφ/dt ≤ 2aφ − 2(c − q)φ²/r + γ``
    (``γ = tr(Σ*⁻¹GGᵀ)``, the noise's constant push; docs/theory.md, "A global bound"), whose
    right side is negative above its larger root ``r(a + √(a² + 2(c − q)γ/r)) / (2(c − q))``:
    ``r a⁺/(c − q)`` without noise."""
    return r * (a + math.sqrt(a * a + 2.0 * gap * gamma / r)) / (2.0 * gap)


def _flagging(flag: threading.Event, verify: Callable[[], Verification]) -> Verification:
    """``verify()``, setting ``flag`` as soon as it ends unconverged (its start failed)."""
    check = verify()
    if check.status is Status.SUCCESS and not check.converged:
        flag.set()
    return check


class _Context:
    """The validated problem and the shared budget of one :func:`stabilize` call."""

    def __init__(
        self,
        layer: Layer,
        target: Gaussian,
        basis: FloatArray,
        rate: float,
        budget: Budget,
        seed: int,
        min_ess: float,
        starts: list[tuple[str, Gaussian]],
        *,
        depth: float | None = None,
        n_tok: int | None = None,
        probe: FloatArray | None = None,
        clock: float | None = None,
        parallel: bool = False,
    ) -> None:
        self.layer = layer
        # independent jobs in threads (numpy's BLAS on one thread when the call began)
        self.parallel = parallel
        # the checks of every family: verification depth (None: the default), token count,
        # probe tokens, and the call's start time
        self.depth, self.n_tok, self.probe = depth, n_tok, probe
        self.clock = time.perf_counter() if clock is None else clock
        self.target = target
        self.basis = basis
        self.rate = rate
        self.budget = budget
        self.seed = seed
        self.min_ess = min_ess
        self.starts = starts
        # the token check's start: the first initial given, else the perturbed target (from
        # the identity start the kept heads of a pretrained layer are typically in their hard-
        # attention regime, where no finite N follows the moments; near the target they are not)
        self.token_start = starts[-1][1] if starts[-1][0] == _PERTURBED else starts[0][1]
        self.s_act = basis.T @ target.cov @ basis
        self.proj = basis @ basis.T
        # the noise's GGᵀ on the active subspace: the equilibrium equation's constant term
        self.forcing = (
            None if layer.noise is None else sym(basis.T @ layer.noise @ layer.noise.T @ basis)
        )
        w = np.linalg.eigvalsh(sym(self.s_act))
        kappa = float(w[-1]) / float(w[0]) if w[0] > 0 else math.inf
        #: the design's rounding: a direct solve through Σ*⁻¹ leaves about eps·κ(Σ*) of the
        #: terms (refinement usually takes it far below), and evaluating them r·eps
        self.residual_bound = _ROUNDING * float(np.finfo(float).eps) * (basis.shape[1] + kappa)
        self.a_old_r = basis.T @ layer.affine_ffn()[0] @ basis
        self.base_layer = layer
        self._probe_sample: FloatArray | None = None
        # the given layer's token runs (:meth:`_untouched_tokens`), by token count and depth,
        # and the one running in the background (:meth:`start_untouched`) with its cancel event
        self._untouched: dict[tuple[int, float], TokenCertificate] = {}
        self._background: tuple[tuple[int, float], Future[TokenCertificate | None]] | None = None
        self._cancel = threading.Event()

    # -- the given layer's tokens, in the background ---------------------------------------
    def _untouched_key(self) -> tuple[int, float] | None:
        """The token count and depth of the given layer's token run (None: no token check):
        the depth given, or the verification's rule for the token start at the rate asked for
        (the run is kept across designs and design rates)."""
        if self.n_tok is None:
            return None
        return self.n_tok, (
            self.depth if self.depth is not None else self.default_depth([self.token_start])
        )

    def start_untouched(self) -> None:
        """Start the given layer's token run in a thread, when jobs run in threads
        (:func:`~gtcontrol._jobs.threaded`): it does not depend on the design,
        so it takes the core that the design of ``A, b`` and the base spectrum (on the caller's
        thread) leave idle, and is ready by the first :meth:`finish`. :meth:`close` cancels it
        if no result needs it, and waits for it no longer than the budget allows."""
        key = self._untouched_key()
        if key is None or not self.parallel:
            return
        run = functools.partial(self._run_untouched, *key)
        self._background = (key, in_background(run, self._cancel, "gtcontrol-untouched"))

    def background_running(self) -> bool:
        """Whether the background token run (:meth:`start_untouched`) still runs."""
        return self._background is not None and not self._background[1].done()

    def close(self) -> None:
        """End the call's background run: cancelled when no result took it, and waited for
        (it ends at its next field evaluation), so no work outlives the call; with a time
        limit, no longer than ``_GRACE`` past it (a run left then ends at its next check)."""
        if self._background is not None:
            self._cancel.set()
            self._await_background()  # an error there concerns no result
            self._background = None

    def _await_background(self, most: float = math.inf) -> bool:
        """Wait for the background run, at most ``most`` seconds and never past the call's
        deadline by more than ``_GRACE``: it checks the budget only between two token field
        evaluations, seconds apart at scale on a busy machine, so past the deadline it is left
        to end at its next check (cancelled). Whether it has ended."""
        assert self._background is not None
        left = self.budget.remaining()
        timeout = min(most, left + _GRACE) if math.isfinite(left) else most
        done, _ = wait([self._background[1]], timeout=None if math.isinf(timeout) else timeout)
        return bool(done)

    # -- design of A and b ----------------------------------------------------------------
    def design_ffn(self, layer: Layer) -> Layer:
        """``layer`` with ``A`` (nearest solution of the equilibrium equation, the noise's
        ``GGᵀ`` included) and ``b`` set."""
        red = reduced_layer(layer, self.basis)
        a_r = designed_a(red, self.s_act, self.a_old_r, self.forcing)
        # A outside the active block kept, that block replaced: A − PAP is exactly zero on a
        # coordinate subspace (A + P(A_r − A_old)P lost eps·|A_old| beside a small A_r)
        old = self.layer.A
        a_full = old - self.proj @ old @ self.proj + self.basis @ a_r @ self.basis.T
        lay = layer.replace(A=a_full, b=self.layer.b)
        return self.fix_bias(lay)

    def fix_bias(self, layer: Layer) -> Layer:
        """``layer`` with the ``b`` that makes ``m*`` its mean's equilibrium: ``−P`` times the
        velocity of ``m*`` without a bias (the frozen part of ``b`` kept). Not ``b − P·v``:
        beside a large ``b`` that lost a small ``Mm*`` (a target mean of ``1e-59``) entirely."""
        unbiased = layer.replace(b=np.zeros_like(layer.b))
        m_mat, c = affine_velocity(unbiased, self.target.mean, self.target.cov)
        v = m_mat @ self.target.mean + c
        return unbiased.replace(b=(layer.b - self.proj @ layer.b) - self.proj @ v)

    def residual(self, layer: Layer) -> tuple[float, float]:
        """The relative residuals ``(covariance, mean)`` of the target under a designed
        ``layer``, head by head (:func:`~._common.residual_parts`)."""
        return residual_parts(layer, self.target.mean, self.target.cov)

    def _off_equilibrium(
        self, layer: Layer, residual: tuple[float, float]
    ) -> LinearizationSpectrum | None:
        """A ``FAILED`` spectrum when the target is not an equilibrium of ``layer`` to the
        design's rounding (:attr:`residual_bound`), with the ``residual``; ``None`` when it is."""
        if max(residual) <= self.residual_bound:
            return None
        message = (
            f"the designed layer does not hold the target as an equilibrium to its rounding: "
            f"relative residuals {residual[0]:.3g} (covariance), {residual[1]:.3g} (mean), "
            f"above the design's rounding bound {self.residual_bound:.3g} "
            f"({_ROUNDING:g}·eps·(r + κ(Σ*)), r = {self.basis.shape[1]})"
        )
        nan = math.nan
        return LinearizationSpectrum(
            abscissa=nan,
            cov_abscissa=nan,
            mean_abscissa=nan,
            eigenvalues=frozen(np.zeros(0, dtype=complex)),
            modes=frozen(np.zeros((0, self.layer.dim, self.layer.dim), dtype=complex)),
            mean_eigenvalues=frozen(np.zeros(0, dtype=complex)),
            numerical_abscissa=nan,
            residual=residual,
            active_dim=self.basis.shape[1],
            method="none",
            status=Status.FAILED,
            message=message,
            stats={"matvecs": 0, "seconds": 0.0},
        )

    def spectrum(
        self, layer: Layer, *, omega: bool, k: int = 6, v0: FloatArray | None = None
    ) -> LinearizationSpectrum:
        """The linearization's spectrum of ``layer`` at the target (``FAILED`` when the target
        is not its equilibrium to the design's rounding, :meth:`_off_equilibrium`)."""
        residual = self.residual(layer)
        off = self._off_equilibrium(layer, residual)
        if off is not None:
            return off
        return spectrum_on_basis(
            layer,
            self.target,
            self.basis,
            k,
            "auto",
            1e-10,
            omega,
            self.budget,
            residual,
            time.perf_counter(),
            v0,
        )

    def shifted(
        self, layer: Layer, base_layer: Layer, base: LinearizationSpectrum, shift: float
    ) -> LinearizationSpectrum | None:
        """The spectrum of ``layer`` as ``base`` (of ``base_layer``) shifted by ``shift``
        (:func:`~gtcontrol.analysis.stability.shifted_spectrum`: the identity checked on random
        directions, the pairs' residuals on ``layer``), when ``base`` came from Krylov; ``None``
        otherwise (a dense base is cheap to recompute, and that stays wholly independent) or
        when the identity does not hold. At d = 385 a new Krylov run took 3–34 s a row."""
        if base.method != "krylov" or base.status is not Status.SUCCESS:
            return None
        residual = self.residual(layer)
        off = self._off_equilibrium(layer, residual)
        if off is not None:
            return off
        return shifted_spectrum(
            layer,
            base_layer,
            self.target,
            self.basis,
            base,
            shift,
            self.budget,
            residual,
            time.perf_counter(),
            self.seed,
        )

    # -- families ---------------------------------------------------------------------------
    def family(
        self,
        kind: str,
        base_layer: Layer,
        base: LinearizationSpectrum,
    ) -> Stabilization:
        """The result of the family ``kind``: out of time, or a designed layer beyond the
        entry bound (a target scale far from the heads' own), is a result of that family."""
        try:
            if kind == "head":
                return head_family(self, base_layer, base)
            found = gains_family(self, base_layer, base)
            if isinstance(found, Design):
                return self.finish(found, base)
            return self.result_without(base_layer, base, "gains", found.status, found.message)
        except BudgetExhausted as exc:
            return self.result_without(
                base_layer, base, kind, Status.BUDGET_EXHAUSTED, f"stopped: {exc.reason}"
            )
        except InvalidParametersError as exc:
            return self.result_without(
                base_layer,
                base,
                kind,
                Status.FAILED,
                f"the designed layer does not fit float64's range at this target: {exc}",
            )

    def start_vector(self, spec: LinearizationSpectrum) -> FloatArray | None:
        """The rightmost mode of ``spec`` (real coordinates), plus a little seeded noise."""
        if spec.modes.shape[0] == 0 or self.basis.shape[1] * (self.basis.shape[1] + 1) // 2 <= 1500:
            return None
        h = self.basis.T @ spec.modes[0] @ self.basis
        r = h.shape[0]
        w = np.where(np.eye(r, dtype=bool), 1.0, np.sqrt(2.0))[np.triu_indices(r)]
        x = (np.real(h) + np.imag(h))[np.triu_indices(r)] * w
        x = x / max(float(np.linalg.norm(x)), 1e-300)
        noise = np.random.default_rng(self.seed).standard_normal(x.size)
        out: FloatArray = x + 1e-3 * noise / np.linalg.norm(noise)
        return out

    def default_depth(
        self, starts: Sequence[Gaussian] | None = None, rate: float | None = None
    ) -> float:
        """``(ln(e0 / 1e-6) + 3) / rate``: the certified rate (default: the one asked for)
        brings the largest initial error ``e0`` (relative, covariance or mean) of ``starts``
        (default: the verification's) to ``1e-6``, with three e-folds for transients."""
        gs = [g for _, g in self.starts] if starts is None else starts
        e0 = max([1e-3, *(self._start_error(g) for g in gs)])
        return (math.log(e0 / VERIFY_RTOL) + _TRANSIENT_EFOLDS) / (rate or self.rate)

    def relative_error(self, mean: FloatArray, cov: FloatArray) -> float:
        """The relative distance of ``N(mean, cov)`` from the target, covariance or mean."""
        return max(
            scaled_norm(cov - self.target.cov) / scaled_norm(self.target.cov),
            scaled_norm(mean - self.target.mean) / self._mean_ref(),
        )

    def _start_error(self, g: Gaussian) -> float:
        return self.relative_error(g.mean, g.cov)

    def _speed(self, final: Layer, mean: FloatArray, cov: FloatArray) -> float:
        """The moments' relative speed under ``final`` at ``N(mean, cov)``: how fast the
        distance of :meth:`relative_error` can change per unit depth, or Σ relative to itself,
        whichever is larger (a small Σ growing exponentially towards the target is slow in the
        target's units but fast in its own)."""
        dm, ds = moment_field(final, mean, cov)
        size = scaled_norm(ds)
        return max(
            size / scaled_norm(self.target.cov),
            size / max(scaled_norm(cov), 1e-300),
            scaled_norm(dm) / self._mean_ref(),
        )

    def _noise_trace(self) -> float:
        """``γ = tr(Σ*⁻¹GGᵀ)`` on the active subspace (0 without noise)."""
        if self.forcing is None:
            return 0.0
        return float(np.trace(np.linalg.solve(self.s_act, self.forcing)))

    def _mean_ref(self) -> float:
        """The scale of mean errors: ``max(|m*|, sqrt(tr Σ*))``."""
        return max(scaled_norm(self.target.mean), math.sqrt(float(np.trace(self.target.cov))))

    def rank_gap(self, g0: Gaussian) -> str:
        """A sentence when ``g0`` is singular on the active subspace, else ``""``.

        The covariance flow is a congruence, ``Σ(t) = Φ(t)Σ0Φ(t)ᵀ`` with ``Φ' = M(Σ)Φ``,
        ``Φ(0) = I``, so the rank of ``Σ0`` is kept at every finite depth, and a limit of
        matrices of rank ``k`` has rank at most ``k``: such a start never reaches a ``Σ*``
        that is positive definite there, whatever the layer. With noise (``+ GGᵀ``) the flow is
        no congruence and the rank can grow: no claim then.
        """
        if self.forcing is not None and np.any(self.forcing):
            return ""
        s0 = sym(self.basis.T @ g0.cov @ self.basis)
        ev = np.linalg.eigvalsh(s0)
        tol = 1e-12 * max(float(ev[-1]), 1e-300) * s0.shape[0]
        k = int(np.sum(ev > tol))
        if k == s0.shape[0]:
            return ""
        return (
            f"the start has rank {k} < {s0.shape[0]} on the active subspace, and the covariance "
            "flow Σ(t) = Φ(t)Σ0Φ(t)ᵀ keeps the rank, so it never reaches Σ*"
        )

    # -- results ----------------------------------------------------------------------------
    def finish(
        self, design: Design, base: LinearizationSpectrum, plan: CheckPlan | None = None
    ) -> Stabilization:
        """The checks of ``design`` and its result, run as ``plan`` says (:class:`CheckPlan`:
        the gains family and a first design pass none). The default depths of the given
        layer's tokens do not follow ``plan.design_rate``: that run is kept across designs.

        A design without its spectrum (the gains family; the head family on a dense base, or
        where the shift identity failed) gets it here, as one more job beside the verifying
        simulations, started from the base's rightmost mode: it runs before the verification
        of the start nearest the target, in the same thread, while the far start's longer one
        takes the other core (or the token run does); before the verification when that is
        the only job.
        """
        plan = CheckPlan() if plan is None else plan
        screen_at, design_rate, first = plan.screen_at, plan.design_rate, plan.first
        final, q, omega = design.layer, design.q, design.omega
        rate = self.rate
        depth, n_tok, probe = self.depth, self.n_tok, self.probe
        c_eff = design.c if design.c > 0 else 0.0
        root, inv_root = spd_sqrt_pair(self.s_act)
        a_r = self.basis.T @ final.affine_ffn()[0] @ self.basis
        a_top = float(np.linalg.eigvalsh(sym(inv_root @ a_r @ root))[-1])
        r = self.basis.shape[1]
        # q is a sum of rounded 2-norms in Σ*-scaled coordinates: c must beat its rounding too
        kappa = float(np.linalg.cond(self.s_act))
        holds = c_eff > q * (1.0 + 8.0 * r * _EPS * kappa)
        if holds:
            level = _global_level(r, a_top, self._noise_trace(), c_eff - q)
            bound = (
                f"global: c = {c_eff:.6g} > q = {q:.6g}, so for every Σ0 ⪰ 0 "
                f"tr(Σ*⁻¹Σ(t)) ≤ max(tr(Σ*⁻¹Σ0), {level:.6g}): no blow-up from any start"
            )
        else:
            bound = (
                f"no global bound: the added quadratic term (c = {c_eff:.6g}) does not dominate "
                f"the kept heads' (q = {q:.6g}); c > q would give one"
            )
        beta = 2.0 * (q + c_eff)
        radius = (-omega / beta if beta > 0 else math.inf) if omega < 0 else math.nan
        t_end = depth if depth is not None else self.default_depth(rate=design_rate)
        # At the local minimum c a start whose verification ends unconverged (halfway, when it
        # fails the screens' test there) fails this design, and c grows (_head.head_family) when
        # the local certificate holds: the stabilized tokens at this c are then not needed,
        # and their run stops.
        stuck = threading.Event() if screen_at is not None else None
        # the verifying simulations and the token runs are independent: they share the cores
        jobs: list[Callable[[], Any]] = [
            functools.partial(
                self._verify,
                final,
                name,
                g0,
                t_end,
                radius,
                inv_root,
                extend=depth is None,
                plan=plan,
                first=first[1] if first is not None and first[0] == i else None,
            )
            for i, (name, g0) in enumerate(self.starts)
        ]
        if stuck is not None:
            # a start singular on the active subspace never converges, and c does not grow for
            # it (:meth:`rank_gap`): its verification does not stop the tokens
            jobs = [
                job if self.rank_gap(g0) else functools.partial(_flagging, stuck, job)
                for job, (_, g0) in zip(jobs, self.starts, strict=True)
            ]
        given = self._untouched_key()
        # the given layer's tokens (the same at every c): a job here unless already running
        in_background = self._background is not None and self._background[0] == given
        if n_tok is not None and given is not None:
            # the tokens go as deep as the verification would for their own start
            t_tok = (
                depth if depth is not None else self.default_depth([self.token_start], design_rate)
            )
            jobs.append(functools.partial(self._tokens, final, n_tok, t_tok, stuck))
            if not in_background:
                jobs.append(functools.partial(self._untouched_tokens, *given))
        spec, near = design.spectrum, -1
        if spec is not None and (
            spec.status is Status.FAILED
            or (spec.status is Status.SUCCESS and not spec.abscissa <= -rate)
        ):
            # the local certificate already fails (a design at the edge of float64's range):
            # no check could make this design certified
            jobs, given = [], None
        if spec is None and len(jobs) == 1:
            # first, here: a job alone gets every core's BLAS threads, and the Krylov products
            # are faster on the caller's one (docs/benchmarks.md)
            spec = self.spectrum(final, omega=False, k=1, v0=self.start_vector(base))
        elif spec is None:
            near = min(range(len(self.starts)), key=lambda i: self._start_error(self.starts[i][1]))
            jobs[near] = functools.partial(
                in_turn,
                functools.partial(
                    self.spectrum, final, omega=False, k=1, v0=self.start_vector(base)
                ),
                jobs[near],
            )
        done = concurrently(jobs, alone=not self.background_running(), parallel=self.parallel)
        if spec is None:
            spec, done[near] = done[near]
        local = spec.status is Status.SUCCESS and spec.abscissa <= -rate
        n_starts = len(self.starts) if done else 0
        checks: list[Verification] = done[:n_starts]
        tc, untouched = (
            (None, None)
            if given is None
            else (
                done[n_starts],
                self._untouched_tokens(*given) if in_background else done[n_starts + 1],
            )
        )
        token_note = ""
        if stuck is not None and stuck.is_set() and tc is not None and not tc.success:
            # stopped (or failed) beside a start that failed its screen: c grows
            token_note = (
                "tokens: not checked to the end at this c, where a start's verification ended "
                f"unconverged (stopped at depth {tc.T:.4g}: {tc.message})"
            )
            tc = None
        # out of time, the result reports what was computed (the change takes a token
        # evaluation of the probe tokens, seconds at scale)
        change_fn = math.nan if self.budget.exhausted else self._function_change(final, probe)
        reasons = []
        if spec.status is not Status.SUCCESS:
            reasons.append(f"the local certificate was not computed: {spec.message}")
        elif not local:
            reasons.append(
                f"the local certificate fails (spectral abscissa {spec.abscissa:.6g} > −{rate:g})"
            )
        for v in checks:
            if not v.converged:
                reasons.append(
                    f"the simulation from the {v.name} start did not converge: {v.message}"
                )
        kept_ess = math.nan
        if given is not None and tc is None and not token_note:
            # asked for and never run (the budget was spent before its turn): not a pass
            reasons.append(f"the token check did not run: {self.budget.reason()}")
        if tc is not None and tc.status is Status.BUDGET_EXHAUSTED and self.budget.exhausted:
            # the run saw what was left of the call's time: name the call's limit
            reasons.append(f"the token check was cut short: {self.budget.reason()} ({tc.message})")
        elif tc is not None and not tc.success:
            reasons.append(f"the token check fails: {tc.message}")
            if not self.budget.exhausted:
                kept_ess, why = self._kept_heads_ess(probe, n_tok)
                if why:
                    reasons.append(why)
        spent = (
            self.budget.exhausted
            or any(v.status is Status.BUDGET_EXHAUSTED for v in checks)
            or (tc is not None and tc.status is Status.BUDGET_EXHAUSTED)
        )
        status = (
            Status.SUCCESS if not reasons else (Status.BUDGET_EXHAUSTED if spent else Status.FAILED)
        )
        verified = "; ".join(
            f"{v.name}: relative error {float(v.cov_error[-1]):.2g} (Σ), "
            f"{float(v.mean_error[-1]):.2g} (m) at T = {float(v.t[-1]):.4g}"
            + (
                f", distance {v.basin_distance:.3g} × the basin radius"
                if math.isfinite(v.basin_distance)
                else ""
            )
            for v in checks
        )
        basin = (
            f"basin: ‖Σ*^(-1/2)(Σ0 − Σ*)Σ*^(-1/2)‖_F < {radius:.4g} converges (ω = {omega:.6g})"
            if math.isfinite(radius)
            else (
                f"no basin from the Σ*-Frobenius Lyapunov function (ω = {omega:.6g} ≥ 0)"
                if math.isnan(radius)
                else "every start in the ball converges"
            )
        )
        residual = self.residual(final)
        parts = [
            design.what,
            f"local: spectral abscissa {spec.abscissa:.6g} ≤ −{rate:g} at the target, an "
            f"equilibrium of this layer to relative residuals {residual[0]:.2g} (Σ), "
            f"{residual[1]:.2g} (m) (the design's rounding bound {self.residual_bound:.2g}; "
            "the verifications bound how far its exact equilibrium lies)"
            if local
            else reasons[0],
            bound,
            basin,
            verified,
            f"function change {change_fn:.3g} on {len(self._probe(probe))} probe tokens",
        ]
        if token_note:
            parts.append(token_note)
        if tc is not None:
            parts.append(f"tokens: {tc.message}")
        if untouched is not None:
            parts.append(f"untouched layer's tokens: {untouched.message}")
        head = "stabilized" if status is Status.SUCCESS else "not certified: " + "; ".join(reasons)
        return Stabilization(
            layer=final,
            original=self.layer,
            base_layer=self.base_layer,
            target=self.target,
            family=design.family,
            rate=rate,
            c=design.c,
            scale=design.scale,
            mean_shift=design.mean_shift,
            gains=None if design.gains is None else frozen(design.gains),
            change=design.change,
            base=base,
            spectrum=spec,
            local_certificate=local,
            global_certificate=holds,
            global_bound=bound,
            q=q,
            basin_radius=radius,
            starts=tuple(g for _, g in self.starts),
            verification=tuple(checks),
            function_change=change_fn,
            token_certificate=tc,
            untouched_tokens=untouched,
            status=status,
            message=head + "; " + "; ".join(part for part in parts if part),
            stats={
                "seconds": time.perf_counter() - self.clock,
                "matvecs": int(base.stats.get("matvecs", 0)) + int(spec.stats.get("matvecs", 0)),
                "active_dim": r,
                "kept_head_ess": kept_ess,
                "residual": residual,
                "residual_bound": self.residual_bound,
                **plan.stats,
            },
        )

    def _kept_heads_ess(self, probe: FloatArray | None, n_tok: int | None) -> tuple[float, str]:
        """The kept heads' finite-N regime at the target: the smallest, over heads, median
        predicted ``ESS/N = exp(−uᵀΣ*u)`` on the probe tokens, and a sentence when it is below
        ``1/N`` (that head's softmax over ``N`` tokens is then close to a hard maximum, which
        the Gaussian moment model need not describe). It is said only after a failed token
        check, as a hint, not a verdict: a kept head far below ``1/N`` can still leave the
        tokens within the floor (docs/benchmarks.md)."""
        if n_tok is None or not self.layer.n_heads:
            return math.nan, ""
        frac = ess_fraction(self.layer, self.target, self._probe(probe))
        med = np.median(frac, axis=0)
        h = int(np.argmin(med))
        low = float(med[h])
        if not low < 1.0 / n_tok:
            return low, ""
        return low, (
            f"kept head {h} has a median predicted ESS/N of {low:.2g} at the target (below "
            f"1/N = {1.0 / n_tok:.2g}): over {n_tok} tokens its softmax is close to a hard "
            "maximum, which the Gaussian moment model need not describe (a hint, not a proof: "
            "such a head with a small V_h can leave the tokens near the moments)"
        )

    def _probe(self, probe: FloatArray | None) -> FloatArray:
        if probe is not None:
            return probe
        if self._probe_sample is None:  # drawn once: the function change and the ESS hint
            self._probe_sample = self.target.sample(
                _PROBE_TOKENS, seed=np.random.default_rng(self.seed)
            )
        return self._probe_sample

    def function_change(self, final: Layer) -> float:
        """Relative change of the token velocity of ``final`` against the given layer on the
        probe tokens (the given ones, or samples of the target)."""
        return self._function_change(final, self.probe)

    def _function_change(self, final: Layer, probe: FloatArray | None) -> float:
        x = self._probe(probe)
        old = token_velocity(self.layer, x)
        new = token_velocity(final, x)
        size = scaled_norm(old)
        return scaled_norm(new - old) / size if size > 0 else math.inf

    def _verify(
        self,
        final: Layer,
        name: str,
        g0: Gaussian,
        t_end: float,
        radius: float,
        inv_root: FloatArray,
        *,
        extend: bool,
        plan: CheckPlan,
        first: Trajectory | None = None,
    ) -> Verification:
        """Simulate ``final`` from ``g0`` to ``t_end`` (extended while a default depth's error
        still falls). With ``plan.screen_at < t_end`` the integration first stops there, and
        ends unconverged when :meth:`_stuck` says so. ``first``: that first segment, already
        integrated (:meth:`first_segment`)."""
        screen_at, rate = plan.screen_at, plan.design_rate
        cov_ref = scaled_norm(self.target.cov)
        mean_ref = self._mean_ref()
        t_parts, means, covs = [], [], []
        halfway = self._halfway(g0, t_end, screen_at)
        start, offset = g0, 0.0
        span, points = (screen_at, 17) if halfway and screen_at is not None else (t_end, 33)
        stopped = ""
        while True:
            if first is not None:
                traj, first = first, None
            else:
                traj = self._segment(final, start, span, points)
            skip = 0 if offset == 0.0 else 1  # a continuation's first point is the last one
            if len(traj.t) <= skip:  # stopped (out of time) before its first step
                break
            t_parts.append(offset + np.asarray(traj.t, dtype=float)[skip:])
            means += list(traj.mean[skip:])
            covs += list(traj.cov[skip:])
            errs = [self.relative_error(m, c) for m, c in zip(means[-2:], covs[-2:], strict=True)]
            offset = float(t_parts[-1][-1])
            if traj.status is not Status.SUCCESS or self.budget.exhausted:
                break
            if halfway:  # the first segment ended halfway
                halfway = False
                stopped = self._stuck(final, means[-1], covs[-1], offset, t_end, extend)
                if stopped:
                    break
                span, points = t_end - offset, 17
            # A default depth is extended while the flow still closes in: the certified rate
            # holds near the target, and a far start's transient can be slower.
            elif extend and VERIFY_RTOL < errs[-1] < errs[0] and offset < _EXTEND_MAX * t_end:
                span, points = _EXTEND_EFOLDS / (rate or self.rate), 9
            else:
                break
            try:
                start = Gaussian(means[-1], covs[-1], name="the verification's end state")
            except InvalidGaussianError:
                break
        t = np.concatenate(t_parts)
        cov_err = np.array([scaled_norm(c - self.target.cov) / cov_ref for c in covs])
        mean_err = np.array([scaled_norm(m - self.target.mean) / mean_ref for m in means])
        lam = np.array([float(np.linalg.eigvalsh(sym(c))[-1]) for c in covs])
        message = traj.message + stopped
        if offset > t_end * (1.0 + 1e-12):
            message += (
                f"; the default depth {t_end:.4g} was extended to {offset:.4g} while the error "
                "still fell (the start's transient is slower than the certified rate)"
            )
        if traj.status is Status.SUCCESS and not (
            cov_err[-1] <= VERIFY_RTOL and mean_err[-1] <= VERIFY_RTOL
        ):
            message += "; " + self._settled(final, means[-1], covs[-1], cov_err, mean_err)
            gap = self.rank_gap(g0)
            if gap:
                message += f" ({gap})"
        dist = scaled_norm(inv_root @ (self.basis.T @ g0.cov @ self.basis - self.s_act) @ inv_root)
        ratio = dist / radius if radius > 0 and math.isfinite(radius) else math.nan
        return Verification(
            name=name,
            t=frozen(t),
            lam_max=frozen(lam),
            cov_error=frozen(cov_err),
            mean_error=frozen(mean_err),
            status=traj.status,
            message=message,
            basin_distance=ratio,
        )

    def _halfway(self, g0: Gaussian, t_end: float, screen_at: float | None) -> bool:
        """Whether the verification of ``g0`` to ``t_end`` first stops at ``screen_at`` for
        :meth:`_stuck` (never for a start that no ``c`` helps, :meth:`rank_gap`)."""
        return screen_at is not None and screen_at < t_end and not self.rank_gap(g0)

    def _segment(self, final: Layer, start: Gaussian, span: float, points: int) -> Trajectory:
        """One segment of a verifying simulation, within what is left of the budget."""
        return simulate(
            final,
            start,
            span,
            n_points=points,
            rtol=_VERIFY_INTEGRATOR_RTOL,
            atol=_VERIFY_INTEGRATOR_ATOL,
            time_limit=self.budget.left_as_limit(),
        )

    def _stuck(
        self,
        final: Layer,
        mean: FloatArray,
        cov: FloatArray,
        offset: float,
        t_end: float,
        extend: bool,
    ) -> str:
        """Why a verification halfway at depth ``offset``, at ``N(mean, cov)``, stops there
        (``""``: it goes on). Stuck: not within the screens' ``SCREEN_TOL``, and at its speed
        there the gap would not close in the depth left to the verification. A start that
        still closes in goes on, however slowly (random-init ViT layer 4, text target, at the
        local minimum: 0.012 halfway, 1.4e-7 at the depth extended from 16.8 to 19.8)."""
        err = self.relative_error(mean, cov)
        left = (_EXTEND_MAX if extend else 1.0) * t_end - offset
        speed = self._speed(final, mean, cov)
        if err > SCREEN_TOL and err > speed * left:
            return (
                f"; stopped at depth {offset:.4g}, half the verification depth "
                f"{t_end:.4g}: relative error {err:.3g} > {SCREEN_TOL:g}, and at "
                f"its relative speed there ({speed:.2g}) the gap would take a depth of "
                f"{err / speed if speed > 0 else math.inf:.3g} to close, more than "
                f"the {left:.4g} left"
            )
        return ""

    def first_segment(self, final: Layer, screen_at: float) -> tuple[int, Trajectory, str] | None:
        """The far start's verification to ``screen_at`` under ``final`` (the layer at the
        local minimum ``c``), before any other check and alone on every core (beside the given
        layer's token run only if that outlasts ``_BACKGROUND_WAIT``): the start's index, the
        segment, and :meth:`_stuck`'s sentence (``""``: it goes on).

        At the local minimum a far start can settle at another equilibrium, and then every
        other check at that ``c`` is wasted: ``c`` grows (``_head.head_family``). Alone, with
        every core's BLAS threads, the segment ends well before it would beside those checks
        (docs/benchmarks.md). A start that goes on continues from this segment in
        :meth:`finish`, so its verification is the same as without this step. ``None`` when
        there is no such segment: no start verified halfway, or nothing else to run beside
        it."""
        t_end = self.depth if self.depth is not None else self.default_depth()
        far = [i for i, (_, g0) in enumerate(self.starts) if self._halfway(g0, t_end, screen_at)]
        if not far or (len(self.starts) == 1 and self.n_tok is None):
            return None
        i = max(far, key=lambda j: self._start_error(self.starts[j][1]))
        if self._background is not None:
            # the given layer's tokens usually leave soon after the spectrum, and then the
            # segment gets every core's BLAS threads; a run still going after _BACKGROUND_WAIT
            # goes on beside it, on one thread each
            self._await_background(_BACKGROUND_WAIT)
        traj = concurrently(
            [functools.partial(self._segment, final, self.starts[i][1], screen_at, 17)],
            alone=not self.background_running(),
            parallel=self.parallel,
        )[0]
        if traj.status is not Status.SUCCESS or self.budget.exhausted:
            return i, traj, ""
        end = float(traj.t[-1])
        return (
            i,
            traj,
            self._stuck(final, traj.mean[-1], traj.cov[-1], end, t_end, self.depth is None),
        )

    def _settled(
        self,
        final: Layer,
        mean: FloatArray,
        cov: FloatArray,
        cov_err: FloatArray,
        mean_err: FloatArray,
    ) -> str:
        """Why a verification that ended is not within ``1e-6``: still moving, or
        settled at another equilibrium (the field's relative size there is the evidence)."""
        dm, ds = moment_field(final, mean, cov)
        speed = max(
            scaled_norm(ds) / max(scaled_norm(cov), 1e-300),
            scaled_norm(dm) / self._mean_ref(),
        )
        far = max(float(cov_err[-1]), float(mean_err[-1]))
        if speed <= 1e-6 * self.rate:
            return (
                f"it settled at another equilibrium: relative speed {speed:.2g} there, at "
                f"relative distance {far:.3g} from the target (the target attracts locally "
                "but not from this start)"
            )
        return (
            f"still moving there (relative speed {speed:.2g}, error {far:.3g}: at that "
            f"speed the gap takes a depth of {far / speed:.2g} more to close)"
        )

    def _tokens(
        self, final: Layer, n_tok: int, t_end: float, cancel: threading.Event | None = None
    ) -> TokenCertificate | None:
        """The stabilized layer's token check, by an error-controlled RK45: a large gauge ``s``
        makes the token field stiff where the moment model is not, and a fixed-step RK4 at the
        norm rule's steps can diverge there. Its ``rtol = 1e-2`` of the tokens' scale is two
        orders below the floor's ``~N^(-1/2)`` (docs/benchmarks.md). It stops at the first of
        ``T/16, T/8, …, T`` where the tokens are :data:`_AWAY` × the floor away (and then
        fails). Setting ``cancel`` ends it at its next field evaluation (:meth:`finish`: ``c``
        is about to grow)."""
        if self.budget.exhausted:
            return None
        if cancel is None:
            return self._token_run(final, n_tok, t_end, adaptive=True, stop_factor=_AWAY)
        with cancellable(cancel):
            return self._token_run(final, n_tok, t_end, adaptive=True, stop_factor=_AWAY)

    def _untouched_tokens(self, n_tok: int, t_end: float) -> TokenCertificate | None:
        """The given layer's tokens, from the token check's start and seed, until they are
        :data:`_AWAY` × the floor away (checked at ``T/16, T/8, …, T``, the run continuing
        from the tokens reached): a layer that is being stabilized usually sends them away
        within a fraction of ``T``, and that depth says so at a fraction of the cost. The run
        does not depend on the design: it is kept for the next ``c``."""
        key = (n_tok, t_end)
        if key in self._untouched:
            return self._untouched[key]
        if self._background is not None and self._background[0] == key:
            if not self._await_background():
                self._cancel.set()  # out of time: no result waits for it
                return None
            untouched = self._background[1].result()
            self._background = None
        else:
            untouched = self._run_untouched(n_tok, t_end)
        if untouched is not None and untouched.status is not Status.BUDGET_EXHAUSTED:
            self._untouched[key] = untouched
        return untouched

    def _run_untouched(self, n_tok: int, t_end: float) -> TokenCertificate | None:
        if self.budget.exhausted:
            return None
        return self._token_run(self.layer, n_tok, t_end, stop_factor=_AWAY)

    def _token_run(
        self,
        lay: Layer,
        n_tok: int,
        depth: float,
        *,
        adaptive: bool = False,
        stop_factor: float | None = None,
    ) -> TokenCertificate:
        return design_token_certificate(
            lay,
            self.target,
            n_tokens=n_tok,
            initial=self.token_start,
            T=depth,
            method="RK45" if adaptive else "rk4",
            rtol=_TOKEN_RTOL if adaptive else None,
            seed=self.seed,
            min_token_ess=0.0,
            n_points=2,
            stop_factor=stop_factor,
            # float32 halves the cost at d = 385, N = 1024; its rounding is far below
            # the sampling floor that W2 is compared with
            dtype=np.float32,
            time_limit=self.budget.left_as_limit(),
        )

    def result_without(
        self,
        base_layer: Layer,
        base: LinearizationSpectrum | None,
        family: str,
        status: Status,
        message: str,
    ) -> Stabilization:
        """A result with no extra designed (refused, proven infeasible, or out of time)."""
        return Stabilization(
            layer=base_layer,
            original=self.layer,
            base_layer=base_layer,
            target=self.target,
            family=family,
            rate=self.rate,
            base=base,
            starts=tuple(g for _, g in self.starts),
            status=status,
            message=message,
            stats={"seconds": time.perf_counter() - self.clock},
            **_NO_DESIGN,
        )
