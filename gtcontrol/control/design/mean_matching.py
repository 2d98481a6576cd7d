"""The entry point :func:`design_mean_matching`, its result and its convergence data.

Given a target ``N(m*, Σ*)`` (Σ* ≻ 0), find one time-invariant layer ``(A, B, V, b)`` whose moment
dynamics (docs/theory.md §2) converge to it from every Gaussian start, at a prescribed
exponential rate, with a certificate (docs/theory.md §3–5). Without fixed parts the design is the
closed form of :mod:`._problem`; with fixed parts (a pretrained ``B``, a fixed ``V`` or
``A``) or for minimum-norm designs it is the CasADi/IPOPT problem of :mod:`._nlp`, after the
analytic prechecks of :mod:`._problem`. Every design is verified independently
(:func:`~._certificates.design_certificate`) and comes with a robustness report
(:func:`~._certificates.design_robustness`). :func:`design_convergence` gives the data of the
``design`` figure: a design's moment trajectories from seeded random starts.

Reference: the paper cited in :mod:`gtcontrol`, §4.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._blas import calm_blas, native_refusal
from ..._display import Axes, SummaryItems
from ..._linalg import FloatArray, frobenius_norms, identity_multiple
from ..._progress import progress
from ..._status import Budget, Outcome, ResultFields, Status, as_time_limit
from ..._validation import as_positive_float, as_positive_int, as_seed, frozen, option_values
from ...errors import InvalidParametersError
from ...model.gaussian import Gaussian
from ...model.moments import Trajectory, simulate
from ...model.params import Layer
from .._design_kernel import Whitening, param_norm, with_bias
from .._ipopt import IpoptSettings
from ._certificates import (
    DesignCertificate,
    Robustness,
    RobustnessCheck,
    design_certificate,
    no_radii,
    robustness_within,
    uncertified,
)
from ._finite_n import (
    PathEss,
    TokenCertificate,
    design_token_certificate,
    ess_scaled_layer,
    path_depth,
    path_ess,
)
from ._nlp import DesignAttempt, solve_nlp
from ._problem import (
    DesignOptions,
    DesignRequest,
    Problem,
    constructive_layer,
    parse_request,
    precheck,
)

__all__ = ["ConvergenceData", "MeanMatchingDesign", "design_convergence", "design_mean_matching"]


@dataclass(frozen=True, eq=False)
class MeanMatchingDesign(ResultFields, Outcome):
    """Result of :func:`design_mean_matching`.

    Attributes
    ----------
    layer
        The designed time-invariant layer (single head); the best iterate when the design did
        not succeed.
    target
        ``N(m*, Σ*)``: the equilibrium the layer drives every admissible start to.
    status
        ``Status.SUCCESS``: the layer is certified (``optimal`` says whether IPOPT also proved
        norm-minimality). ``Status.BUDGET_EXHAUSTED``: ``time_limit`` or IPOPT's ``solver.max_iter``
        ran out before a certified optimal design was found; ``layer`` is the best iterate
        (``certificate.success`` says whether it verifies). ``Status.NOT_FOUND``: IPOPT
        converged with a rate margin out of reach and the layer does not verify (``message``
        names the margin and the best rate reached); a local search, so no proof that no
        design exists. A request proved impossible in closed form is not a result: it raises
        :class:`~gtcontrol.UnreachableTargetError` before any solve. ``Status.FAILED``: any
        other failure of IPOPT or of the verification, or a requirement the caller set that
        the certified layer does not meet (``min_ess`` on the predicted path, the
        ``token_check``), named first in ``message``.
    message
        The certificate's statement, or why the design is incomplete.
    method
        ``"constructive"`` or ``"casadi"``.
    rate, cov_rate
        The requested mean and covariance rates.
    certificate
        :class:`DesignCertificate` (verified independently of the construction).
    robustness
        :class:`Robustness` or ``None`` (when disabled or when there is no certificate).
    fixed
        Names of the parts that were fixed (``"A"``, ``"B"``, ``"V"``).
    norm
        ``sqrt(‖A‖² + ‖B‖² + ‖V‖² + ‖b‖²)`` (Frobenius).
    whitened_norm
        The same in whitened coordinates (the norm the NLP minimizes):
        ``sqrt(‖Â‖² + ‖B̂‖² + ‖V̂‖² + ‖b̂‖²)``, ``Â = Σ*^{-½}AΣ*^{½}``, ``B̂ = Σ*^{½}BΣ*^{½}``,
        ``V̂ = Σ*^{-½}VΣ*^{½}``, ``b̂ = Σ*^{-½}b``; ``nan`` when the time limit had passed.
    optimal
        The constructive design, or IPOPT ended optimal with every margin met (the norm is
        locally minimal before the ESS scaling, which trades norm for finite-N validity).
    ess
        :class:`~gtcontrol.control.design.PathEss`: the predicted ``ESS/N`` of the
        head's softmax along the moment path from ``initial`` to depth ``T`` (``None`` when the
        design has no certificate or the time limit ran out first). With ``min_ess`` set and
        V and B designed, the heads were scaled ``(V, B) → (sV, B/s)`` (``ess.scale``) until
        it holds; when no scale up to ``10⁶`` achieves it the unscaled design is kept and the
        status is ``FAILED``.
    token_certificate
        :class:`~gtcontrol.control.design.TokenCertificate` of ``token_check``
        tokens (``None`` unless requested).
    stats
        ``seconds``, ``ess_scale`` and, for CasADi designs, IPOPT's ``return_status``,
        ``iterations``, ``attempts``, ``objective``, ``slack``, the certificate weights'
        condition numbers (of the NLP's design, before the ESS scaling).
    """

    layer: Layer
    target: Gaussian
    method: str
    rate: float
    cov_rate: float
    certificate: DesignCertificate
    robustness: Robustness | None
    fixed: tuple[str, ...]
    norm: float
    whitened_norm: float
    optimal: bool = True
    ess: PathEss | None = None
    token_certificate: TokenCertificate | None = None

    @property
    def equilibrium(self) -> Gaussian:
        """The equilibrium ``N(m*, Σ*)`` (the target)."""
        return self.target

    def _summary_items(self) -> SummaryItems:
        return [
            ("dim", self.target.dim),
            ("method", self.method),
            ("kind", self.certificate.kind),
            ("certified_rate", self.certificate.rate),  # `rate` is the requested one
            ("norm", self.norm),
            ("optimal", self.optimal),
            ("fixed", self.fixed),
        ]

    def _draw(self, ax: Axes) -> None:
        self.certificate._draw(ax)


# ----------------------------------------------------------------------------- routes


def _certify(
    req: DesignRequest, layer: Layer, want_global: bool, budget: Budget
) -> DesignCertificate:
    """The design's certificate, as wrap-up work (within :meth:`Budget.nested_limit`)."""
    return design_certificate(
        layer,
        req.target,
        rate=req.r_m,
        cov_rate=req.r_c,
        require_global=want_global,
        rate_rtol=req.opts.rate_rtol,
        time_limit=budget.nested_limit(),
    )


#: The constructive certificate (eigensolves, slycot's Lyapunov solves, SVDs) costs about this
#: many ``d×d`` products up to each ``d``: twice the count measured on an idle machine
#: (docs/benchmarks.md), as a short product gets a whole core where the long call shares one.
_CERTIFICATE_MATMULS = ((384, 400), (640, 360), (math.inf, 250))


def _design_constructive(req: DesignRequest, budget: Budget) -> DesignAttempt:
    layer = constructive_layer(req.target, req.r_m, req.r_c, req.rotation)
    refusal = native_refusal("the certificate was", req.target.dim, _CERTIFICATE_MATMULS, budget)
    if refusal is not None:
        cert = uncertified(layer, req.target, req.r_m, req.r_c, "no time left for it")
        return DesignAttempt(layer, cert, {"optimal": True}, "", refusal, False)
    cert = _certify(req, layer, req.opts.require_global is not False, budget)
    return DesignAttempt(layer, cert, {"optimal": True}, "", None, False)


def _design_nlp(req: DesignRequest, budget: Budget) -> DesignAttempt:
    opts, tgt = req.opts, req.target
    fa, fb, fv = req.fa, req.fb, req.fv
    wh = Whitening.of(tgt.cov)
    v_scalar = None if fv is None else identity_multiple(fv)
    riccati = (fv is None and opts.V_structure == "scalar") or v_scalar is not None
    want_global = riccati if opts.require_global is None else opts.require_global
    prob = Problem(
        d=tgt.dim,
        target=tgt,
        wh=wh,
        a_hat=None if fa is None else wh.Ti @ fa @ wh.T,
        b_hat=None if fb is None else wh.T @ fb @ wh.T,
        v_fixed=None if fv is None else wh.Ti @ fv @ wh.T,
        riccati=riccati,
        v_scalar=v_scalar,
        r_m=req.r_m,
        r_c=req.r_c,
        require_global=want_global,
        opts=opts,
    )
    precheck(prob)

    def build(a_h: FloatArray, b_h: FloatArray, v_h: FloatArray) -> tuple[Layer, DesignCertificate]:
        # Fixed parts are used exactly as given; designed parts leave whitened form.
        a_mat = fa if fa is not None else wh.T @ a_h @ wh.Ti
        b_mat = fb if fb is not None else wh.Ti @ b_h @ wh.Ti
        if fv is not None:
            layer0 = Layer(a_mat, B=b_mat, V=fv)
        elif riccati:
            layer0 = Layer(a_mat, B=b_mat, V=float(v_h[0, 0]))
        else:
            layer0 = Layer(a_mat, B=b_mat, V=wh.T @ v_h @ wh.Ti)
        lay = with_bias(layer0, tgt)
        return lay, _certify(req, lay, want_global, budget)

    return solve_nlp(prob, build, budget)


def _verdict(out: DesignAttempt) -> tuple[Status, str]:
    """Status and message of a design from its outcome (see :class:`MeanMatchingDesign`)."""
    cert = out.certificate
    diagnosis = out.diagnosis
    if cert.success and out.optimal:
        return Status.SUCCESS, cert.message
    if out.exhausted is not None:
        best = "verifies" if cert.success else "is not certified"
        head = f"{diagnosis}; " if diagnosis else ""
        return (
            Status.BUDGET_EXHAUSTED,
            f"{head}budget exhausted: {out.exhausted}; the best iterate {best}: {cert.message}",
        )
    if cert.success:
        # IPOPT stopped early at a point that verifies: certified, maybe not norm-minimal.
        head = diagnosis or f"IPOPT: {out.stats.get('return_status')}"
        return Status.SUCCESS, f"{head} (the norm may not be minimal); the design verifies: " + (
            cert.message
        )
    status = Status.NOT_FOUND if out.short else Status.FAILED
    return status, (f"{diagnosis}; " if diagnosis else "") + cert.message


def _finite_n(
    req: DesignRequest, out: DesignAttempt, budget: Budget
) -> tuple[DesignAttempt, PathEss | None, str]:
    """Predicted ``ESS/N`` along the path; with V and B designed, the scale split enforcing it.

    The scaled layer is certified again (same rates, a global certificate stays required when
    the unscaled one was global); if it does not verify, the unscaled design is kept.
    """
    opts = req.opts
    if out.certificate.kind == "none" or budget.exhausted:
        return out, None, ""
    tgt, g0, cov_rate = req.target, req.initial, out.certificate.cov_rate
    if opts.min_ess is None or not req.scalable:
        depth = path_depth(out.layer, tgt, cov_rate) if req.T is None else req.T
        rep = path_ess(
            out.layer, tgt, g0, depth, n_std=opts.ess_n_std, min_ess=opts.min_ess, budget=budget
        )
        why = (
            ""
            if rep.success or opts.min_ess is None
            else " (a fixed B or V leaves no scale freedom)"
        )
        return out, rep, why
    layer, rep = ess_scaled_layer(
        out.layer,
        tgt,
        g0,
        req.T,
        cov_rate=cov_rate,
        n_std=opts.ess_n_std,
        min_ess=opts.min_ess,
        budget=budget,
    )
    if rep.scale == 1.0:
        return out, rep, ""
    if not rep.success:
        # The search ended without meeting min_ess (no scale up to its cap of 10⁶ does, or a
        # cap or the time limit cut it short): keep the unscaled design (a large scale buys
        # nothing then and makes the layer stiff) and report its own path.
        depth = path_depth(out.layer, tgt, cov_rate) if req.T is None else req.T
        base = path_ess(
            out.layer, tgt, g0, depth, n_std=opts.ess_n_std, min_ess=opts.min_ess, budget=budget
        )
        why = (
            f" (the scale search ended without meeting it: {rep.message}; the unscaled "
            "design is kept)"
        )
        if rep.status is Status.BUDGET_EXHAUSTED and not base.success:
            base = dataclasses.replace(base, status=Status.BUDGET_EXHAUSTED)
        return out, base, why
    cert = design_certificate(
        layer,
        tgt,
        rate=req.r_m,
        cov_rate=req.r_c,
        require_global=out.certificate.kind == "global",
        rate_rtol=opts.rate_rtol,
        time_limit=budget.nested_limit(),
    )
    if not cert.success:
        late = cert.status is Status.BUDGET_EXHAUSTED
        loses = "was not certified in time" if late else "loses the certificate"
        why = f" (the scale s = {rep.scale:.4g} {loses}: {cert.message})"
        depth = path_depth(out.layer, tgt, cov_rate) if req.T is None else req.T
        rep = path_ess(
            out.layer, tgt, g0, depth, n_std=opts.ess_n_std, min_ess=opts.min_ess, budget=budget
        )
        return out, rep, why
    return dataclasses.replace(out, layer=layer, certificate=cert), rep, ""


def _robustness_report(req: DesignRequest, out: DesignAttempt, budget: Budget) -> Robustness | None:
    opts = req.opts
    check = opts.robustness
    if not isinstance(check, RobustnessCheck) or out.certificate.kind == "none":
        return None
    # the radii are one native call each, about the certificate's cost (docs/benchmarks.md)
    refusal = native_refusal(
        "the robustness radii were", req.target.dim, _CERTIFICATE_MATMULS, budget
    )
    if refusal is not None:
        return no_radii(check.n_samples, Status.BUDGET_EXHAUSTED, refusal)
    return robustness_within(
        out.layer,
        req.target,
        n_directions=check.n_directions,
        n_samples=check.n_samples,
        max_relative=check.max_relative,
        seed=int(opts.seed),
        budget=budget,
    )


def _token_check(
    req: DesignRequest, out: DesignAttempt, ess: PathEss | None, budget: Budget
) -> TokenCertificate | None:
    n = req.opts.token_check
    if n is None or out.certificate.kind == "none":
        return None
    depth = ess.T if ess is not None else req.T
    left = budget.remaining()
    return design_token_certificate(
        out.layer,
        req.target,
        n_tokens=n,
        initial=req.initial,
        T=depth,
        seed=int(req.opts.seed),
        time_limit=None if left == float("inf") else max(left, 1e-6),
    )


def _requirement(
    status: Status, message: str, check: PathEss | TokenCertificate, name: str, value: Any
) -> tuple[Status, str]:
    """The design's status once a requirement the caller set (``min_ess``, ``token_check``)
    is checked: a certified design whose requirement is not met is not ``SUCCESS``.

    A check cut short by the time limit gives ``BUDGET_EXHAUSTED``; one that fails (the bound
    is violated, the tokens or the predicted path overflow or fail) gives ``FAILED``, with the
    reason put first in ``message``.
    """
    if check.success or status is not Status.SUCCESS:
        return status, message
    if check.status is Status.BUDGET_EXHAUSTED:
        return Status.BUDGET_EXHAUSTED, message
    if value is None:  # only reported (min_ess=None): the predicted path is not a requirement
        return status, message
    return Status.FAILED, f"{name} = {value:g} is not met ({check.status.value}): {message}"


# ----------------------------------------------------------------------------- entry point


def design_mean_matching(
    target: Gaussian | tuple[Any, Any],
    T: float | None = None,
    *,
    rate: float = 1.0,
    cov_rate: float | None = None,
    rotation: Any = None,
    fixed_A: Any = None,
    fixed_B: Any = None,
    fixed_V: Any = None,
    minimum_norm: bool = False,
    require_global: bool | None = None,
    V_structure: str = "scalar",
    max_condition: float = 100.0,
    rate_rtol: float = 1e-6,
    symbolic: str = "SX",
    solver: IpoptSettings | None = None,
    robustness: bool | RobustnessCheck = True,
    seed: int = 0,
    min_ess: float | None = 0.5,
    ess_n_std: float = 3.0,
    initial: Any = None,
    token_check: int | None = None,
    time_limit: float | None = None,
) -> MeanMatchingDesign:
    """Design a time-invariant single-head layer that carries every Gaussian to a target.

    The layer has ``N(m*, Σ*)`` as an exponentially stable equilibrium of the moment dynamics
    (docs/theory.md §2), with mean rate ``≥ rate`` and covariance rate ``≥ cov_rate``, and (by
    default) a softmax whose predicted effective sample size stays ``≥ min_ess`` along the
    path from ``initial``, so that a finite number of real tokens follows the moments: for
    Riccati-class designs (``V = vI``, the default) globally — every ``N(m0, Σ0)`` with
    ``Σ0 ≻ 0`` converges, and ``Σ(t)⁻¹ − Σ*⁻¹ = e^{−Aᵀt}(Σ0⁻¹ − Σ*⁻¹)e^{−At}``.

    * No fixed parts, ``minimum_norm=False``: the constructive design ``A = aI + SΣ*⁻¹``,
      ``v = −rate``, ``B = (a/rate)Σ*⁻¹``, ``b = −K m*`` with ``a = cov_rate/2``
      (:mod:`gtcontrol.control.design._problem`); exact, ``O(d³)``; then ``v → s·v``,
      ``B → B/s`` for ``min_ess`` (one moment simulation per round of the scale search).
    * Fixed parts (``fixed_A``, ``fixed_B``, ``fixed_V``) or ``minimum_norm=True``: CasADi/IPOPT
      minimizes the parameter norm in the target's metric (``whitened_norm``: the Frobenius
      norm after ``x̂ = Σ*^{-½}x``) over the designed parts subject to the equilibrium
      equations and Lyapunov margin certificates (:mod:`gtcontrol.control.design._nlp`). Fixed
      parts are used exactly as given. A designed V is ``vI`` unless ``V_structure="full"``;
      a fixed V that is not a multiple of I makes the design local.

    Parameters
    ----------
    target
        ``N(m*, Σ*)``, a :class:`Gaussian` or a ``(mean, cov)`` pair, with ``Σ* ≻ 0``. For
        matching a mean only, any SPD ``Σ*`` works (e.g. the identity).
    T
        Depth of the predicted path and of the token check; ``None``: ``12 / r`` with ``r``
        the slowest certified rate of the final layer (after the scale split), so the errors
        end ``~e^{−12}`` of the initial ones.
    rate
        Mean rate (``|v|`` in the Riccati class); the promised rate of the whole state is
        ``min(rate, cov_rate)``.
    cov_rate
        Covariance rate, default ``2 × rate`` (then the mean converges at exactly ``rate``
        without the resonance ``t e^{−rate·t}`` of equal rates).
    rotation
        Skew ``S`` for the constructive design (``A = aI + SΣ*⁻¹``); rotates without changing
        the rates.
    fixed_A
        ``A`` to keep (original coordinates), shape ``(d, d)``.
    fixed_B
        ``B`` to keep (e.g. a pretrained head), shape ``(d, d)``.
    fixed_V
        ``V`` to keep, shape ``(d, d)``, or a scalar ``v`` (``V = vI``).
    minimum_norm
        Use the NLP even without fixed parts (minimum-norm parameters).
    require_global
        ``None`` (default): global certificate in the Riccati class (``V = vI``, ``R ⪰ 0``),
        local otherwise. ``True``: fail unless a global certificate is possible (needs
        ``V = vI``). ``False``: only the local margins (allows e.g. a fixed B with indefinite
        symmetric part).
    V_structure
        How a *designed* V is parameterized: ``"scalar"`` (``V = vI``, Riccati class, default)
        or ``"full"`` (any ``d×d`` matrix; local certificate; uses the NLP).
    max_condition
        κ ≥ 1: the Lyapunov weights P of the margin certificates (``(X + rI)ᵀP + P(X + rI) =
        −2rI``) satisfy ``tr P ≤ κ n``. This bounds the transient growth
        ``‖e^{Xt}‖ ≤ √cond(P) e^{−rt}`` and, for normal X, asks ``α(X) ≤ −r(1 + 1/κ)``.
    rate_rtol
        Relative tolerance when the certificate compares verified and requested rates.
    symbolic
        CasADi expression type of the NLP: ``"SX"`` (scalar graphs, default) or ``"MX"``
        (matrix graphs; builds faster for larger d).
    solver
        An :class:`IpoptSettings` for the NLP: IPOPT's tolerance (default 1e-10, also its
        constraint-violation tolerance), iteration limit per solve (default 3000) and extra
        options (e.g. ``{"mu_strategy": "adaptive"}``; when given, they replace the built-in
        sequence of attempts: default barrier strategy, then adaptive). ``None``:
        ``IpoptSettings()``.
    robustness
        Compute :func:`design_robustness` for the result: ``True`` with the default
        :class:`RobustnessCheck`, a ``RobustnessCheck(n_directions=..., n_samples=...,
        max_relative=...)`` to tune it, ``False`` to skip it.
    seed
        Seed of the robustness report and of the token check.
    min_ess
        Finite-N validity (docs/theory.md §2 "Finite N"): the predicted ``ESS/N = exp(−uᵀΣu)``,
        ``u = Bx``, of the softmax for every query within ``ess_n_std`` standard deviations of
        the tokens' Gaussian must stay ``≥ min_ess`` at every depth of the predicted moment
        path from ``initial`` to depth ``T`` (default 0.5; ``None``: not required, the exact
        closed form above). When V and B are both designed, the head is rescaled
        ``(V, B) → (sV, B/s)`` with the smallest ``s ≥ 1`` that achieves it
        (:mod:`gtcontrol.control.design._finite_n`): the covariance dynamics, ``R`` and the
        covariance rate are unchanged, the mean rate becomes ``s·rate`` and ``b = −K m*`` is
        recomputed. With a fixed B or V there is no such freedom. Either way a bound that is
        not met (``ess.success`` false) makes the status ``FAILED``, with the worst ESS in
        ``message``; pass ``min_ess=None`` to only report the predicted ESS.
    ess_n_std
        Radius of the query ball of ``min_ess`` in standard deviations (default 3; ``≥ 0``).
        In ``d`` dimensions most tokens lie near ``√d`` standard deviations, so for large
        ``d`` use about ``√d + 2`` to cover every token.
    initial
        Start of the predicted path (a :class:`Gaussian` or ``(mean, cov)``; ``None``:
        ``N(0, I)``, the inputs the finite-N check and the token check assume).
    token_check
        Number ``N`` of tokens for a token-level certificate
        (:func:`~gtcontrol.control.design.design_token_certificate`, e.g. 1024;
        ``None``, the default: none, it costs seconds): ``N`` tokens from ``initial`` driven
        to depth ``T``, their distance to the target against the sampling floor, and the
        empirical softmax ``ESS/N`` of every token.
    time_limit
        Wall-clock limit in seconds for the whole call (``None``: no limit; every loop has a
        finite cap anyway). IPOPT gets the remaining time as ``max_wall_time`` and stops at
        the next iteration once it is spent, the attempts stop, and the robustness search stops
        early; running out before a certified optimal design gives
        ``Status.BUDGET_EXHAUSTED`` with the best iterate. Setting up an IPOPT solver
        (CasADi's exact Hessian: seconds at d = 12, a minute at d = 24 in the V = vI class;
        seconds at d = 5 for a general V) cannot be interrupted: it is refused up front, and
        the closed-form starting design returned, when its estimated cost exceeds the time
        left (the message names both).

    Returns
    -------
    MeanMatchingDesign
        ``status`` says whether the design is certified (``Status.SUCCESS``) or why not
        (``BUDGET_EXHAUSTED``, ``NOT_FOUND``, ``FAILED``; ``layer`` is then the best iterate
        and ``message`` names the binding margin or the most violated constraint).

    Raises
    ------
    InvalidGaussianError
        If the target is malformed or Σ* is singular.
    InvalidParametersError
        On malformed rates, fixed parts, options or ``time_limit``.
    UnreachableTargetError
        When an analytic necessary condition fails (invalid request); the message names the
        constraint (mean rate, covariance rate, equilibrium, global certificate) and the
        numbers.

    Examples
    --------
    >>> from gtcontrol import Gaussian
    >>> target = Gaussian([1.0, -2.0], [[1.0, 0.3], [0.3, 0.5]])
    >>> res = design_mean_matching(target, rate=0.5, robustness=False)
    >>> res.success, str(res.status), res.certificate.kind
    (True, 'success', 'global')
    >>> bool(res.ess.worst_overall >= 0.5), round(res.certificate.cov_rate, 12)
    (True, 1.0)
    >>> bool(res.certificate.mean_rate >= 0.5)  # s·rate, s = res.ess.scale
    True

    Without the finite-N requirement the closed form is exact: ``v = −rate``, ``B = Σ*⁻¹``.

    >>> exact = design_mean_matching(target, rate=0.5, robustness=False, min_ess=None)
    >>> round(exact.certificate.mean_rate, 12), exact.ess.scale
    (0.5, 1.0)

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §4; docs/theory.md §3–5.
    """
    clock = time.perf_counter()
    opts = DesignOptions(**option_values(DesignOptions, locals()))
    budget = Budget(as_time_limit(time_limit))
    req = parse_request(
        target,
        rate,
        cov_rate,
        rotation,
        (fixed_A, fixed_B, fixed_V),
        minimum_norm,
        opts,
        (initial, T),
    )
    # a multi-threaded BLAS stalls on a busy machine, inside calls no budget check interrupts
    with calm_blas():
        if req.constructive:
            method, out = "constructive", _design_constructive(req, budget)
        else:
            method, out = "casadi", _design_nlp(req, budget)
        out, ess, ess_note = _finite_n(req, out, budget)
        status, message = _verdict(out)
        if ess is not None:
            message += f"; finite N: {ess.message}{ess_note}"
            status, message = _requirement(status, message, ess, "min_ess", req.opts.min_ess)
        rob = _robustness_report(req, out, budget)
        if rob is not None and not rob.success:
            message += f"; robustness report incomplete: {rob.message}"
        tokens = _token_check(req, out, ess, budget)
        if tokens is not None:
            message += f"; tokens: {tokens.message}"
            status, message = _requirement(
                status, message, tokens, "token_check", req.opts.token_check
            )
    stats = dict(out.stats)
    stats["ess_scale"] = 1.0 if ess is None else ess.scale
    stats["seconds"] = time.perf_counter() - clock
    return MeanMatchingDesign(
        layer=out.layer,
        target=req.target,
        status=status,
        message=message,
        method=method,
        rate=req.r_m,
        cov_rate=req.r_c,
        certificate=out.certificate,
        robustness=rob,
        fixed=req.fixed,
        norm=param_norm(out.layer),
        # O(d³) per head: left out (nan) once the time limit has passed
        whitened_norm=(
            math.nan
            if budget.exhausted
            else param_norm(Whitening.of(req.target.cov).layer(out.layer))
        ),
        optimal=out.optimal,
        ess=ess,
        token_certificate=tokens,
        stats=stats,
    )


#: Finite caps on the number of starts and of recorded depths.
_MAX_STARTS = 10_000
_MAX_POINTS = 10**6
#: Smallest wall-clock slice handed to one simulation (a spent budget still records ``t = 0``).
_MIN_SLICE = 1e-6
#: Cap on right-hand-side evaluations of one start's simulation (a stiff design with rates
#: 1e6 apart took 1e6 evaluations, 40 s): a start that reaches it keeps the depths it reached.
_START_MAX_EVALS = 200_000


@dataclass(frozen=True, eq=False)
class ConvergenceData(ResultFields, Outcome):
    """Errors of a design's moment trajectories from several random starts.

    Attributes
    ----------
    t
        Common recorded depths ``(n,)``.
    mean_error
        ``|m(t) − m*| / max(|m*|, 1)`` per start, ``(starts, n)``.
    cov_error
        ``‖Σ(t) − Σ*‖_F / ‖Σ*‖_F`` per start, ``(starts, n)``.
    rate, cov_rate
        The certified mean and covariance rates (for reference slopes).
    starts
        The initial Gaussians (fewer than requested when ``time_limit`` ran out; the last one
        may have been cut short, its errors NaN past the depth it reached).
    status
        ``Status.SUCCESS`` when every simulation succeeded; otherwise the status of the first
        one that did not (e.g. ``Status.BLOWUP``), or ``Status.BUDGET_EXHAUSTED`` when
        ``time_limit`` ran out before every start was simulated.
    message
        Final errors, or what went wrong.
    stats
        ``max_final_mean_error``, ``max_final_cov_error`` (over the starts that reached the
        final depth; NaN if none did), ``seconds``.
    """

    t: FloatArray
    mean_error: FloatArray
    cov_error: FloatArray
    rate: float
    cov_rate: float
    starts: tuple[Gaussian, ...]

    def _summary_items(self) -> SummaryItems:
        return [
            ("starts", len(self.starts)),
            ("t", (float(self.t[0]), float(self.t[-1])) if self.t.size else None),
            ("rate", self.rate),
            ("cov_rate", self.cov_rate),
            ("max_final_mean_error", self.stats.get("max_final_mean_error")),
            ("max_final_cov_error", self.stats.get("max_final_cov_error")),
        ]

    def _draw(self, ax: Axes) -> None:
        from .._figures import draw_mean_cov_errors

        rates = {"rate": self.rate, "cov_rate": self.cov_rate}
        draw_mean_cov_errors(ax, self.t, self.mean_error, self.cov_error, **rates)


def _random_start(tgt: Gaussian, wh: Whitening, rng: np.random.Generator) -> Gaussian:
    d = tgt.dim
    s = math.sqrt(float(np.linalg.norm(tgt.cov, 2)))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = np.exp(rng.uniform(-2.0, 2.0, d))
    return Gaussian(tgt.mean + 3.0 * s * rng.standard_normal(d), wh.T @ ((q * w) @ q.T) @ wh.T)


def _on_grid(traj: Trajectory, tgt: Gaussian, grid: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Relative mean and covariance errors of ``traj`` on ``grid`` (NaN where not reached).

    A trajectory stopped early (spent budget, blow-up) holds the grid depths it reached plus
    the depth where it stopped; only the grid depths are kept.
    """
    m_e = np.full(grid.size, np.nan)
    c_e = np.full(grid.size, np.nan)
    idx = np.clip(np.searchsorted(grid, traj.t), 0, grid.size - 1)
    hit = np.abs(grid[idx] - traj.t) <= 1e-12 * max(float(grid[-1]), 1.0)
    scale_m = max(float(np.linalg.norm(tgt.mean)), 1.0)
    m_e[idx[hit]] = np.linalg.norm(traj.mean[hit] - tgt.mean, axis=1) / scale_m
    c_e[idx[hit]] = frobenius_norms(traj.cov[hit] - tgt.cov) / np.linalg.norm(tgt.cov)
    return m_e, c_e


def _nanmax(x: FloatArray) -> float:
    return float(np.nanmax(x)) if np.any(np.isfinite(x)) else math.nan


def design_convergence(
    design: MeanMatchingDesign,
    T: float | None = None,
    *,
    n_starts: int = 5,
    n_points: int = 201,
    seed: int = 0,
    time_limit: float | None = None,
) -> ConvergenceData:
    """Simulate a design from ``n_starts`` seeded random Gaussians (the ``design`` figure data).

    Starts: means ``m* + 3 s z`` and covariances ``Σ*^{1/2} (Q diag(e^{u}) Qᵀ) Σ*^{1/2}`` with
    ``z`` standard normal, ``s = sqrt(‖Σ*‖₂)``, Q a random rotation and ``u ~ U(−2, 2)``.

    Parameters
    ----------
    design
        A :class:`MeanMatchingDesign` with a positive certified rate.
    T
        Depth; default ``16 / certificate.rate`` (errors ~1e-7 of the initial ones).
    n_starts
        Number of starts (at most 10 000).
    n_points
        Recorded depths (``2 ≤ n_points ≤ 10⁶``), evenly spaced on ``[0, T]``.
    seed
        Seed of the starts.
    time_limit
        Wall-clock limit in seconds (``None``: no limit) for the whole call: every simulation
        gets the time that is left (its integrator checks it at every right-hand-side
        evaluation), and no new start begins once it is spent. Running out gives
        ``Status.BUDGET_EXHAUSTED`` with the starts simulated so far; a start cut short keeps
        the depths it reached and NaN beyond (the figure leaves a gap).

    Returns
    -------
    ConvergenceData

    Raises
    ------
    InvalidParametersError
        If ``design`` is not a :class:`MeanMatchingDesign`, has no positive certified rate, or
        on malformed counts, depth or limit.

    Examples
    --------
    >>> from gtcontrol import Gaussian, design_convergence, design_mean_matching
    >>> design = design_mean_matching(Gaussian([1.0], [[0.5]]), robustness=False, min_ess=None)
    >>> data = design_convergence(design, n_starts=2, n_points=21)
    >>> data.status, data.mean_error.shape
    (<Status.SUCCESS: 'success'>, (2, 21))
    """
    clock = time.perf_counter()
    if not isinstance(design, MeanMatchingDesign):
        raise InvalidParametersError(
            f"design: expected a MeanMatchingDesign, got {type(design).__name__}"
        )
    cert = design.certificate
    if not cert.rate > 0:
        raise InvalidParametersError("design: the certificate has no positive rate")
    n = as_positive_int("n_starts", n_starts, maximum=_MAX_STARTS)
    depth = 16.0 / cert.rate if T is None else as_positive_float("T", T)
    budget = Budget(as_time_limit(time_limit))
    tgt = design.target
    rng = np.random.default_rng(as_seed("seed", seed))
    wh = Whitening.of(tgt.cov)
    n_pts = as_positive_int("n_points", n_points, maximum=_MAX_POINTS)
    if n_pts < 2:
        raise InvalidParametersError(f"n_points: expected at least 2 depths, got {n_points!r}")
    grid = np.linspace(0.0, depth, n_pts)
    starts: list[Gaussian] = []
    merr: list[FloatArray] = []
    cerr: list[FloatArray] = []
    status, message = Status.SUCCESS, ""
    with progress(f"design: {n} convergence starts", total=n) as update:
        for i in range(n):
            if i > 0 and budget.exhausted:
                status, message = Status.BUDGET_EXHAUSTED, f"{budget.reason()} after {i} starts"
                break
            g0 = _random_start(tgt, wh, rng)
            traj = simulate(
                design.layer,
                g0,
                depth,
                n_points=grid.size,
                max_evals=_START_MAX_EVALS,
                time_limit=budget.left_as_limit(_MIN_SLICE),
            )
            m_e, c_e = _on_grid(traj, tgt, grid)
            merr.append(m_e)
            cerr.append(c_e)
            starts.append(g0)
            if traj.status is Status.BUDGET_EXHAUSTED:
                status = Status.BUDGET_EXHAUSTED
                message = (
                    f"{budget.reason()}: start {i + 1} reached depth {float(traj.t[-1]):.6g} of "
                    f"{depth:.6g} (errors beyond it are NaN)"
                )
                break
            if traj.status is not Status.SUCCESS and status is Status.SUCCESS:
                status = Status(traj.status)
                message = f"start {i + 1}: the simulation ended with status {traj.status!s}"
            update(i + 1)
    mean_error, cov_error = np.array(merr), np.array(cerr)
    finals = mean_error[:, -1], cov_error[:, -1]
    stats = {
        "max_final_mean_error": _nanmax(finals[0]),
        "max_final_cov_error": _nanmax(finals[1]),
        "seconds": time.perf_counter() - clock,
    }
    if status is Status.SUCCESS:
        message = (
            f"{len(starts)} starts: final relative errors ≤ {stats['max_final_mean_error']:.2e} "
            f"(mean), {stats['max_final_cov_error']:.2e} (covariance) at depth {depth:.6g}"
        )
    return ConvergenceData(
        t=frozen(grid),
        mean_error=frozen(mean_error),
        cov_error=frozen(cov_error),
        rate=cert.mean_rate,
        cov_rate=cert.cov_rate,
        starts=tuple(starts),
        status=status,
        message=message,
        stats=stats,
    )
