"""The plan of one :func:`gtcontrol.stabilize` call: its request validated and frozen.

:func:`make_plan` checks every argument (in the order of the signature) and derives what every
later step reads: the target's active subspace, the starts of the verifying simulations (the
identity start and a seeded perturbed target by default), the token check's start, and the
design's rounding bound. :class:`Plan` also holds the rules that depend on the request alone:
the default verification depth, the relative error to the target, and the rank argument that
no ``c`` helps a start singular on the active subspace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular

from ..._linalg import FloatArray, spd_sqrt_pair, sym
from ..._validation import (
    MAX_ENTRY,
    as_choice,
    as_float_array,
    as_positive_float,
    as_positive_int,
    as_seed,
)
from ...analysis._subspace import active_subspace
from ...errors import InvalidGaussianError, InvalidParametersError
from ...model.field import moment_field
from ...model.gaussian import Gaussian, check_gaussian
from ...model.params import Layer
from .._design_kernel import scaled_norm
from ._result import VERIFY_RTOL

__all__ = ["ADDITIONS", "PERTURBED", "Plan", "make_plan"]

#: The families of additions :func:`gtcontrol.stabilize` designs.
ADDITIONS = ("auto", "head", "gains")
#: e-folds added to the default verification depth for transients.
_TRANSIENT_EFOLDS = 3.0
#: The token runs follow the moments' relative error to this, under a hundredth of W2's
#: sampling floor at N = 1024, d = 384 (0.19 of the tokens' RMS norm; docs/benchmarks.md).
TOKEN_DEPTH_TOL = 1e-3
#: Relative size of the perturbed-target start, and its name (the default token-check start).
_PERTURBATION = 0.1
PERTURBED = "perturbed target"
#: A start is near the target (:meth:`Plan.near`) within this relative distance, with
#: ``(1 ± _NEAR) Σ*`` bounding its covariance on the target's range.
_NEAR = 0.5
#: The design's rounding bound is this many units of round-off times ``r + κ(Σ*)``
#: (:attr:`Plan.residual_bound`).
ROUNDING = 8.0


@dataclass(frozen=True, eq=False)
class Plan:
    """The validated request of one :func:`gtcontrol.stabilize` call and what follows from it.

    Attributes
    ----------
    layer, target, family, rate, seed, min_ess
        The arguments, validated (``family`` is ``add``).
    basis
        Orthonormal basis of the target's active subspace (``r`` columns).
    starts
        The verifying simulations' starts, each with its name.
    depth, n_tok, untouched, probe
        ``T`` (``None``: the default rule), ``token_check``, ``untouched_tokens`` and the probe
        tokens.
    clock, parallel
        The call's start time, and whether independent jobs run in threads.
    token_start
        The token check's start: the first initial given, else the perturbed target (from the
        identity start the kept heads of a pretrained layer are typically in their hard-
        attention regime, where no finite N follows the moments; near the target they are not).
    s_act, proj
        ``Σ*`` on the active subspace, and the projection on it.
    forcing
        The noise's ``GGᵀ`` on the active subspace (the equilibrium equation's constant term).
    residual_bound
        The design's rounding: a direct solve through Σ*⁻¹ leaves about eps·κ(Σ*) of the terms
        (refinement usually takes it far below), and evaluating them r·eps.
    a_old_r
        The layer's own ``A`` on the active subspace.
    """

    layer: Layer
    target: Gaussian
    family: str
    rate: float
    seed: int
    min_ess: float
    basis: FloatArray
    starts: tuple[tuple[str, Gaussian], ...]
    depth: float | None
    n_tok: int | None
    untouched: bool
    probe: FloatArray | None
    clock: float
    parallel: bool
    token_start: Gaussian
    s_act: FloatArray
    proj: FloatArray
    forcing: FloatArray | None
    residual_bound: float
    a_old_r: FloatArray

    def default_depth(
        self,
        starts: Sequence[Gaussian] | None = None,
        rate: float | None = None,
        tol: float = VERIFY_RTOL,
    ) -> float:
        """``(ln(e0 / tol) + 3) / rate``: the certified rate (default: the one asked for)
        brings the largest initial error ``e0`` (relative, covariance or mean; at least
        ``1e-3``) of ``starts`` (default: the verification's) to ``tol`` (default ``1e-6``),
        with three e-folds for transients."""
        gs = [g for _, g in self.starts] if starts is None else starts
        e0 = max([1e-3, *(self.start_error(g) for g in gs)])
        return (math.log(e0 / tol) + _TRANSIENT_EFOLDS) / (rate or self.rate)

    def token_depth(self, rate: float | None = None) -> float:
        """The depth of the token runs: the depth given, else :meth:`default_depth` of the
        token start to :data:`TOKEN_DEPTH_TOL` (at N = 1024 and d = 384 the moments then move
        the tokens' W2 by under a hundredth of its sampling floor)."""
        if self.depth is not None:
            return self.depth
        return self.default_depth([self.token_start], rate, TOKEN_DEPTH_TOL)

    def relative_error(self, mean: FloatArray, cov: FloatArray) -> float:
        """The relative distance of ``N(mean, cov)`` from the target, covariance or mean."""
        return max(
            scaled_norm(cov - self.target.cov) / scaled_norm(self.target.cov),
            scaled_norm(mean - self.target.mean) / self.mean_ref(),
        )

    def start_error(self, g: Gaussian) -> float:
        """:meth:`relative_error` of a start."""
        return self.relative_error(g.mean, g.cov)

    def speed(self, final: Layer, mean: FloatArray, cov: FloatArray) -> float:
        """The moments' relative speed under ``final`` at ``N(mean, cov)``: how fast the
        distance of :meth:`relative_error` can change per unit depth, or Σ relative to itself,
        whichever is larger (a small Σ growing exponentially towards the target is slow in the
        target's units but fast in its own)."""
        dm, ds = moment_field(final, mean, cov)
        size = scaled_norm(ds)
        return max(
            size / scaled_norm(self.target.cov),
            size / max(scaled_norm(cov), 1e-300),
            scaled_norm(dm) / self.mean_ref(),
        )

    def noise_trace(self) -> float:
        """``γ = tr(Σ*⁻¹GGᵀ)`` on the active subspace (0 without noise)."""
        if self.forcing is None:
            return 0.0
        return float(np.trace(np.linalg.solve(self.s_act, self.forcing)))

    def mean_ref(self) -> float:
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

    def halfway(self, g0: Gaussian, t_end: float, screen_at: float | None) -> bool:
        """Whether the verification of ``g0`` to ``t_end`` first stops at ``screen_at`` to
        ask whether it is stuck (never for a start that no ``c`` helps, :meth:`rank_gap`)."""
        return screen_at is not None and screen_at < t_end and not self.rank_gap(g0)

    def near(self, g0: Gaussian) -> bool:
        """Whether ``g0`` is near enough to the target for its verification to integrate the
        distance (``simulate(around=)``): of full rank on the active subspace
        (:meth:`rank_gap`), within ``_NEAR`` relative (:meth:`start_error`), and with
        ``(1 ± _NEAR) Σ*`` bounding its covariance there (``‖L⁻¹(Σ0 − Σ*)L⁻ᵀ‖₂ ≤ _NEAR``,
        ``Σ* = LLᵀ`` on the active subspace), so that errors relative to the distance cannot
        cost Σ its positive semidefiniteness."""
        if self.start_error(g0) > _NEAR or self.rank_gap(g0):
            return False
        try:
            low = np.linalg.cholesky(self.s_act)
        except np.linalg.LinAlgError:
            return False
        diff = self.basis.T @ g0.cov @ self.basis - self.s_act
        half = solve_triangular(low, diff, lower=True)
        white = solve_triangular(low, half.T, lower=True)
        return bool(np.linalg.norm(sym(white), 2) <= _NEAR)

    def token_key(self) -> tuple[int, float] | None:
        """The token count and depth of the given layer's token run (None: no token check):
        :meth:`token_depth` at the rate asked for (the run is kept across designs and design
        rates)."""
        if self.n_tok is None:
            return None
        return self.n_tok, self.token_depth()


def make_plan(
    layer: Any,
    target: Any,
    T: Any,
    *,
    add: Any,
    rate: Any,
    initial: Any,
    token_check: Any,
    untouched_tokens: Any,
    min_ess: Any,
    tokens: Any,
    seed: Any,
    clock: float,
    parallel: bool,
) -> Plan:
    """The :class:`Plan` of :func:`gtcontrol.stabilize`'s arguments (its docstring says what
    each must be), or the error naming the first one that is not."""
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
    if not isinstance(untouched_tokens, (bool, np.bool_)):
        raise InvalidParametersError(
            f"untouched_tokens: expected True or False, got {untouched_tokens!r}"
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
    basis = _target_basis(layer, tgt.cov)
    if layer.noise is not None:
        _check_noise(layer.noise, basis, n_tok)
    starts = _starts(initial, tgt, basis, int(seed), layer.dim)
    s_act = basis.T @ tgt.cov @ basis
    w = np.linalg.eigvalsh(sym(s_act))
    kappa = float(w[-1]) / float(w[0]) if w[0] > 0 else math.inf
    return Plan(
        layer=layer,
        target=tgt,
        family=family,
        rate=rho,
        seed=int(seed),
        min_ess=float(min_ess),
        basis=basis,
        starts=tuple(starts),
        depth=depth,
        n_tok=n_tok,
        untouched=bool(untouched_tokens),
        probe=probe,
        clock=clock,
        parallel=parallel,
        token_start=starts[-1][1] if starts[-1][0] == PERTURBED else starts[0][1],
        s_act=s_act,
        proj=basis @ basis.T,
        forcing=(
            None if layer.noise is None else sym(basis.T @ layer.noise @ layer.noise.T @ basis)
        ),
        residual_bound=ROUNDING * float(np.finfo(float).eps) * (basis.shape[1] + kappa),
        a_old_r=basis.T @ layer.affine_ffn()[0] @ basis,
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
        perturbed = (PERTURBED, Gaussian(mean, cov, name="the perturbed target start"))
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
