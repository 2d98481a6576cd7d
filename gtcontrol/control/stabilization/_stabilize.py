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

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..._blas import calm_blas
from ..._jobs import threaded
from ..._status import Budget, BudgetExhausted, Status, as_time_limit
from ...analysis.stability import LinearizationSpectrum
from ...errors import InvalidParametersError
from ...model.gaussian import Gaussian
from ...model.params import Layer
from ._call import Call
from ._gains import gains_family
from ._head import head_family
from ._plan import ADDITIONS, make_plan
from ._report import result_without
from ._result import Design, Stabilization

__all__ = ["ADDITIONS", "Stabilization", "stabilize"]


def stabilize(
    layer: Layer,
    target: Gaussian,
    T: float | None = None,
    *,
    add: str = "auto",
    rate: float = 1.0,
    initial: Gaussian | Sequence[Gaussian] | str | None = None,
    token_check: int | None = None,
    untouched_tokens: bool = True,
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
        ``N`` (``≥ 2``): also drive ``N`` real tokens from the first initial (default starts: from
        the perturbed target) with the stabilized layer (:func:`gtcontrol.design_token_certificate`,
        in float32), beside the verifying simulations, by an error-controlled Dormand–Prince 5(4)
        pair (``rtol = 1e-2``, capped at three times the evaluations of the RK4 rule; a large gauge
        ``s`` makes the token field stiff); required: ``W2 ≤ 2 ×`` the sampling floor after the
        first step to reach each of the depths ``T/16, T/8, T/4, T/2`` and at ``T``; the run stops
        (and fails) at the first where it does not. Their depth is ``T``, or by default
        ``(ln(e0/1e-3) + 3) / rate`` with ``e0`` their start's relative error: the moments are then
        within ``1e-3`` of the target, and W2 at ``N`` tokens cannot see closer (its sampling floor
        at ``N = 1024, d = 384`` is 0.19 of the tokens' RMS norm). The given layer's tokens, from
        the same start and seed, are reported beside them: they run to ``T``, checked at the steps
        that reach ``T/16, T/8, …``, and stop at the first check where they are 10 sampling floors
        away or out of range (with numpy's BLAS on one thread, as ``stabilize_model`` sets it, this
        run starts with the call, in a thread beside the design, and is cancelled if no result needs
        it). When only the token check fails (head family), the design rate doubles, at most three
        times (``stats["design_rate"]``): the tokens' finite-N bias is held off by the contraction.
        When it still fails, a kept head whose median predicted ``ESS/N`` at the target is below
        ``1/N`` is named as a hint (``stats["kept_head_ess"]``).
    untouched_tokens
        With a token check, also run the given layer's tokens beside it (default ``True``;
        ``.untouched_tokens``); ``False`` leaves that report out and saves its run.
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
    # jobs in threads when the caller runs numpy's BLAS on one thread (decided before the calm)
    parallel = threaded()
    with calm_blas():
        plan = make_plan(
            layer,
            target,
            T,
            add=add,
            rate=rate,
            initial=initial,
            token_check=token_check,
            untouched_tokens=untouched_tokens,
            min_ess=min_ess,
            tokens=tokens,
            seed=seed,
            clock=clock,
            parallel=parallel,
        )
        return _run(Call(plan, Budget(limit, start=clock)))


def _run(call: Call) -> Stabilization:
    """The design and checks of a planned :func:`stabilize` call, and ``auto``'s choice."""
    layer, family = call.plan.layer, call.plan.family
    # the given layer's tokens do not depend on the design: they run from the start, beside it
    call.tokens.start()
    try:
        try:
            base_layer = call.design_ffn(layer)
        except InvalidParametersError as exc:  # A or b beyond the entry bound
            return result_without(
                call.plan,
                layer,
                None,
                family,
                Status.FAILED,
                f"the designed A, b do not fit: {exc}",
            )
        call.base_layer = base_layer
        base = call.spectrum(base_layer, omega=True, k=1)
        if base.status is not Status.SUCCESS:
            return result_without(call.plan, base_layer, base, family, base.status, base.message)
        kinds = ("head", "gains") if family == "auto" else (family,)
        found = []
        for kind in kinds:
            found.append(_family(call, kind, base_layer, base))
            if call.budget.exhausted:
                break
    except BudgetExhausted as exc:
        return result_without(
            call.plan, layer, None, family, Status.BUDGET_EXHAUSTED, f"stopped: {exc.reason}"
        )
    finally:
        call.close()
    if family != "auto":
        return found[0]
    return _auto_choice(found, call.plan.clock)


def _auto_choice(found: Sequence[Stabilization], clock: float) -> Stabilization:
    """``auto``'s result: of the certified candidates (else of all), the one that changes
    the layer's function least, with every candidate kept."""
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
        stats=dict(best.stats, seconds=time.perf_counter() - clock),
    )


def _family(call: Call, kind: str, base_layer: Layer, base: LinearizationSpectrum) -> Stabilization:
    """The result of the family ``kind``: out of time, or a designed layer beyond the
    entry bound (a target scale far from the heads' own), is a result of that family."""
    try:
        if kind == "head":
            return head_family(call, base_layer, base)
        found = gains_family(call, base_layer, base)
        if isinstance(found, Design):
            return call.finish(found, base)
        return result_without(call.plan, base_layer, base, "gains", found.status, found.message)
    except BudgetExhausted as exc:
        return result_without(
            call.plan, base_layer, base, kind, Status.BUDGET_EXHAUSTED, f"stopped: {exc.reason}"
        )
    except InvalidParametersError as exc:
        return result_without(
            call.plan,
            base_layer,
            base,
            kind,
            Status.FAILED,
            f"the designed layer does not fit float64's range at this target: {exc}",
        )
