"""Deflated Newton search for the covariance equilibria of any layer.

:func:`deflated_search` runs Newton–Kantorovich (:mod:`gtcontrol.analysis.newton`) with
deflation of every root found (Σ = 0 always) from several kinds of starts, sharing one budget:

* ``flow`` / ``reversed_flow``: endpoints of the forward flow (which leads to stable equilibria)
  and of the reversed flow ``−F`` (negate A and every V_h; its stable equilibria are the fully
  unstable ones of the layer) from the given starts and ``s0·{1, 0.3, 3}·I``;
* ``continuation``: the unique equilibrium of the Riccati-class layer with ``V_h → (tr V_h/d) I``
  (when it is positive definite) followed by Newton along ``V_h(λ) = (1−λ)(tr V_h/d)I + λV_h``;
* ``given``, ``identity`` and ``random`` starts ``Q diag(s0 e^u) Qᵀ`` (Haar Q, ``u ~ U(±1.5)``),
  ``s0 = ‖A‖/Σ_h‖V_h‖‖B_h‖`` the scale where the linear and quadratic terms balance;
* ``factor``: Newton in Cholesky coordinates ``Σ = LLᵀ`` (L lower triangular, a square system
  ``F(LLᵀ) = 0`` with Jacobian ``DF(Σ)[δL Lᵀ + L δLᵀ]``) from random L: its iterates stay
  positive semidefinite, so it converges to the positive-(semi)definite roots only — the ones
  wanted — and is then polished in Σ coordinates (up to ``newton.kron_max_dim``).

* ``path``: the real curve of the Newton homotopy ``F(Σ) = (1 − t)F(Σ0)`` from a random
  ``(Σ0, 0)``, followed by pseudo-arclength continuation through turning points; every crossing
  of ``t = 1`` is a root (one curve often meets several).

* ``whitened``: Levenberg–Marquardt on the whitened residual ``L⁻¹F(LLᵀ)L⁻ᵀ`` in the factor
  ``Σ = LLᵀ`` from random positive-definite starts, then Newton polish
  (:mod:`gtcontrol.analysis._whitened_search`; up to ``newton.kron_max_dim``). Σ = 0 and the
  singular roots of F are no minima of this residual, and a planted equilibrium (a saddle, out
  of reach of the flows) is typically found within a few starts. These run *first*, until
  ``_WHITENED_SATURATION`` of them in a row find no new positive-definite root (at least
  ``n_random``), then the other kinds.

Whitened, path, factor and random starts then keep coming, in turn, until ``_SATURATION`` starts
in a row, of any kind and counted from the first phase on, find no new positive-definite root
(at least ``n_random`` of each kind), or a cap is reached.

Reference: P. E. Farrell, Á. Birkisson, S. W. Funke, *Deflation techniques for finding distinct
solutions of nonlinear PDEs*, SIAM J. Sci. Comput. 37 (2015); docs/theory.md §4.4.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import scipy.linalg as sla

from .._linalg import FloatArray, sym, unvech, vech, vech_index
from .._status import Budget, BudgetExhausted, Status
from .._validation import MAX_ENTRY
from ..errors import InvalidParametersError, SolverError
from ..model.gaussian import Gaussian
from ..model.heads import FactoredHeads
from ..model.params import Layer
from ._core import field_rate, is_pd, simulate_within
from ._field_kernel import (
    field_flops,
    jacobian_matrix,
    jacobian_parts,
    relative_residual,
    typical_scale,
)
from ._homotopy import PolynomialSystem
from ._whitened_search import LM_MAX_ITER, whitened_lm
from .bernoulli import solve_bernoulli
from .newton import SearchOptions, WorkMeter, deflation_factor, deflation_weight, newton_run
from .riccati import bernoulli_form

__all__ = ["SearchLog", "as_start_sequence", "deflated_search"]

#: Two roots closer than this (relative, Frobenius) are the same.
DISTINCT_RTOL = 1e-6

#: Deflation retries one start at most this many times (once per new root found).
_MAX_ROOTS_PER_START = 8

#: At most this many user-given extra starts.
MAX_STARTS = 64

#: Right-hand-side evaluations allowed to one flow-start integration (a stiff or slow flow is
#: abandoned, its start skipped; about 0.3 s at d = 3).
_FLOW_MAX_EVALS = 6_000

#: Newton iterations allowed to the whole search (all starts and deflation retries together):
#: a finite cap on total work independent of ``time_limit``.
_TOTAL_MAX_ITER = 20_000

#: Random/factor starts in a row without a new positive-definite root that end the search.
_SATURATION = 40

#: At most this many random plus factor starts.
_MAX_RANDOM = 2_000

#: Steps allowed to one Newton-homotopy path (``_path_roots``).
_PATH_MAX_STEPS = 400

#: Whitened Levenberg–Marquardt starts in a row without a new positive-definite root that end
#: the first phase of the search, and the cap on its starts.
_WHITENED_SATURATION = 24
_MAX_WHITENED = 600

#: Continuation steps from the Riccati-class layer to the given one.
_CONTINUATION_STEPS = 8


@dataclass
class SearchLog:
    """What a deflated search found and how each start ended."""

    roots: list[tuple[FloatArray, int]] = field(default_factory=list)
    known: list[FloatArray] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    newton_iterations: int = 0
    stopped: str = ""
    work_flops: float = 0.0
    max_work: float = 0.0

    def count(self, outcome: str) -> None:
        """One more run that ended with ``outcome``."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def ended(self, kind: str, outcome: str) -> None:
        """A start of ``kind`` whose only run ended with ``outcome`` (logged and counted)."""
        self.log.append({"start": kind, "runs": [outcome]})
        self.count(outcome)

    def check_iterations(self) -> None:
        """Raise :class:`BudgetExhausted` once the Newton iterations of all starts reach their
        cap."""
        if self.newton_iterations >= _TOTAL_MAX_ITER:
            raise BudgetExhausted(
                f"the cap of {_TOTAL_MAX_ITER} Newton iterations over all starts was reached"
            )

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for entry in self.log:
            out[entry["start"]] = out.get(entry["start"], 0) + 1
        return out


@dataclass(frozen=True)
class _Search:
    """What every start of one deflated search shares: the layer, the Newton options, the
    search's budget and per-start limit (seconds, ``None``: none), its work meter and its log."""

    layer: Layer
    opts: SearchOptions
    budget: Budget
    per_start: float | None
    work: WorkMeter
    out: SearchLog

    def start_budget(self) -> Budget:
        """One start's budget: the search's, cut to ``per_start`` seconds."""
        return self.budget.sub(self.per_start)


def as_start_sequence(starts: Any) -> Sequence[Any]:
    """``starts`` as a sequence of matrices (a single array or a non-sequence is refused)."""
    if isinstance(starts, np.ndarray) and starts.ndim == 3:
        return list(starts)
    if isinstance(starts, (str, bytes, np.ndarray)) or not isinstance(starts, Sequence):
        raise InvalidParametersError(
            f"starts: expected a sequence of symmetric d×d matrices, got {type(starts).__name__}"
        )
    if len(starts) > MAX_STARTS:
        raise InvalidParametersError(
            f"starts: expected at most {MAX_STARTS} extra starts, got {len(starts)}"
        )
    return starts


def _reversed(layer: Layer) -> Layer | None:
    """The layer whose covariance field is ``−F`` (negate A and every V_h), or ``None`` (noise)."""
    if layer.noise is not None and np.any(layer.noise):
        return None
    a, _ = layer.affine_ffn()
    fh = layer.factored_heads
    if fh is not None and not layer.dense_heads:  # V_h = o_h v_h: negate o, keep the factors
        return Layer(-a, heads=FactoredHeads(fh.q, fh.k, fh.v, -fh.o, scale=fh.scale))
    return Layer(-a, heads=[(-v, b) for v, b in layer.heads], dim=layer.dim)


def _flow_start(
    layer: Layer, start: FloatArray, budget: Budget, work: WorkMeter
) -> FloatArray | None:
    """Endpoint of the moment flow from ``start`` after 20 time constants (None if it fails).

    At most ``_FLOW_MAX_EVALS`` field evaluations and 1/16 of the work left: at large d a flow
    start is cheap to skip, Newton is where the work pays.
    """
    cost = field_flops(layer) / 2 + WorkMeter.OVERHEAD
    max_evals = int(min(_FLOW_MAX_EVALS, work.left() / 16 / cost))
    if max_evals < 50 or not np.max(np.abs(start)) <= MAX_ENTRY:  # no Gaussian starts there
        return None
    g = Gaussian(np.zeros(layer.dim), start)
    try:
        # Only a start for Newton is wanted: low accuracy is enough. A stiff flow may make the
        # integrator's LU warn; the start is then simply skipped, so the warning is not shown.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sla.LinAlgWarning)
            traj = simulate_within(
                layer,
                g,
                20.0 / field_rate(layer, start),
                budget,
                n_points=2,
                rtol=1e-5,
                atol=1e-10,
                method="RK45",
                max_evals=max_evals,
            )
    except (SolverError, InvalidParametersError, ValueError, BudgetExhausted):
        work.used += max_evals * cost
        return None
    work.used += int(traj.stats.get("nfev", max_evals)) * cost
    if traj.status is not Status.SUCCESS:
        return None
    end = np.asarray(traj.cov[-1])
    top = float(np.linalg.eigvalsh(end)[-1])
    if not np.all(np.isfinite(end)) or top <= 1e-8 * float(np.linalg.norm(start, 2)):
        return None
    return end


def _continuation_start(
    layer: Layer, opts: SearchOptions, budget: Budget, work: WorkMeter
) -> FloatArray | None:
    """Follow the Riccati-class equilibrium (``V_h → (tr V_h/d) I``) to the layer by Newton."""
    if layer.factored_heads is not None or layer.noise is not None:
        return None
    d = layer.dim
    a, _ = layer.affine_ffn()
    means = [(float(np.trace(v)) / d, v, b) for v, b in layer.heads]
    if all(m == 0.0 for m, _, _ in means):
        return None

    def at(lam: float) -> Layer:
        return Layer(a, heads=[((1 - lam) * m * np.eye(d) + lam * v, b) for m, v, b in means])

    form = bernoulli_form(at(0.0))
    if form is None:
        return None
    sol = solve_bernoulli(form)
    if sol.cov is None:
        return None
    cov = np.asarray(sol.cov)
    for lam in np.linspace(0.0, 1.0, _CONTINUATION_STEPS + 1)[1:]:
        res = newton_run(at(float(lam)), cov, [], opts, budget, work)
        if not res.success:
            return cov if lam > 0.5 else None
        cov = np.asarray(res.cov)
    return cov


def _fixed_starts(search: _Search, given: list[FloatArray]) -> list[tuple[str, FloatArray]]:
    """Flow endpoints, the continuation start, the given starts and the multiples of I."""
    layer, budget, work = search.layer, search.budget, search.work
    d = layer.dim
    s0 = typical_scale(layer)
    base = [("given", g) for g in given]
    base += [("identity", c * s0 * np.eye(d)) for c in (1.0, 0.3, 3.0)]
    rev = _reversed(layer)
    out: list[tuple[str, FloatArray]] = []
    for kind0, st in base:
        if budget.exhausted or (kind0 == "given" and not is_pd(st)):
            continue
        for kind, lay in (("flow", layer), ("reversed_flow", rev)):
            if lay is not None and not budget.exhausted:
                end = _flow_start(lay, st, search.start_budget(), work)
                if end is not None:
                    out.append((kind, end))
    if not budget.exhausted:
        cont = _continuation_start(layer, search.opts, search.start_budget(), work)
        if cont is not None:
            out.append(("continuation", cont))
    return out + base


def _random_spd(rng: np.random.Generator, d: int, s0: float, spread: float = 1.5) -> FloatArray:
    """``Q diag(s0 e^u) Qᵀ`` with Q Haar-orthogonal and ``u ~ U(−spread, spread)``."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w = s0 * np.exp(rng.uniform(-spread, spread, d))
    return sym((q * w) @ q.T)


def _factor_newton(
    layer: Layer,
    chol: FloatArray,
    known: list[FloatArray],
    opts: SearchOptions,
    budget: Budget,
    work: WorkMeter,
) -> tuple[FloatArray | None, int]:
    """Newton on ``G(L) = F(LLᵀ)`` over lower-triangular L, deflated; ``(Σ or None, its)``.

    The iterates ``Σ = LLᵀ`` stay positive semidefinite. Each step solves
    ``DF(Σ)[δL Lᵀ + L δLᵀ] = −F(Σ)`` (dense, ``d(d+1)/2`` unknowns), scaled by the deflation
    factor and damped by backtracking on the deflated relative residual.
    """
    d = layer.dim
    iu, _ = vech_index(d)
    ia, ib = iu  # rows: the (a, b), a ≤ b, entries of a symmetric matrix
    li, lj = np.tril_indices(d)  # columns: the (i, j), i ≥ j, entries of L
    s0 = max(float(np.linalg.norm(chol @ chol.T)), typical_scale(layer))
    lmat = chol.copy()
    cost = float(d) ** 6 / 12 + 2 * field_flops(layer)
    for it in range(opts.max_iter):
        cov = lmat @ lmat.T
        f, rel = relative_residual(layer, cov)
        if not np.isfinite(rel):
            return None, it
        if rel <= 1e-8:
            return cov, it
        budget.check()
        work.charge(cost)
        # ∂vech(δL Lᵀ + L δLᵀ)/∂δL_ij = [a = i] L_bj + [b = i] L_aj.
        p = (ia[:, None] == li[None, :]) * lmat[ib[:, None], lj[None, :]] + (
            ib[:, None] == li[None, :]
        ) * lmat[ia[:, None], lj[None, :]]
        jac = jacobian_matrix(*jacobian_parts(layer, cov)) @ p
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", sla.LinAlgWarning)
                step = sla.solve(jac, -vech(f), check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            return None, it
        dl = np.zeros((d, d))
        dl[li, lj] = step
        tau = deflation_factor(cov, dl @ lmat.T + lmat @ dl.T, known, s0, opts)
        merit = rel * deflation_weight(cov, known, s0, opts)
        alpha, moved = tau, False
        for _ in range(12):
            cand = lmat + alpha * dl
            c_cov = cand @ cand.T
            if np.all(np.isfinite(c_cov)):
                _, rc = relative_residual(layer, c_cov)
                if rc * deflation_weight(c_cov, known, s0, opts) < (1 - 1e-4) * merit:
                    lmat, moved = cand, True
                    break
            alpha *= 0.5
        if not moved or float(np.linalg.norm(lmat)) ** 2 > 1e8 * s0:
            return None, it + 1
    return None, opts.max_iter


def deflated_search(
    layer: Layer,
    given: list[FloatArray],
    opts: SearchOptions,
    budget: Budget,
    per_start: float | None,
    known: list[FloatArray],
) -> SearchLog:
    """Deflated Newton from every kind of start (module docstring); ``known`` is deflated.

    Returns the positive-definite roots with their Newton iterations, and how each start ended.
    """
    d = layer.dim
    out = SearchLog(known=[np.zeros((d, d))] + [k for k in known if np.any(k)])
    work = WorkMeter(opts.max_work, budget)
    rng = np.random.default_rng(opts.seed)
    s0 = typical_scale(layer)
    factor_ok = d <= opts.kron_max_dim
    search = _Search(layer, opts, budget, per_start, work, out)
    try:
        # ``dry``: starts in a row, of any kind, that found no new positive-definite root.
        dry = _whitened_phase(search, rng, s0) if factor_ok else 0
        for kind, st in _fixed_starts(search, given):
            before = len(out.roots)
            _run_start(search, kind, st)
            dry = 0 if len(out.roots) > before else dry + 1
        poly = PolynomialSystem(layer, 1.0, np.ones(d * (d + 1) // 2 + 1)) if factor_ok else None
        count = {"random": 0, "factor": 0, "path": 0, "whitened": 0}
        cycle = ("whitened", "path", "factor", "random") if poly is not None else ("random",)
        while dry < _SATURATION or min(count[k] for k in cycle) < opts.n_random:
            total = sum(count.values())
            if total >= _MAX_RANDOM:
                break
            kind = cycle[total % len(cycle)]
            count[kind] += 1
            before = len(out.roots)
            st = _random_spd(rng, d, s0)
            _own_limit(search, partial(_one_start, search, kind, st, poly), kind)
            dry = 0 if len(out.roots) > before else dry + 1
    except BudgetExhausted as exc:
        out.stopped = exc.reason
    out.work_flops, out.max_work = work.used, work.cap
    return out


def _own_limit(search: _Search, start: Callable[[], None], kind: str) -> None:
    """Run one start; one cut by its own per-start limit is logged ``time_limit`` and the search
    goes on, one cut by the search's budget or work cap stops the search (re-raised)."""
    try:
        start()
    except BudgetExhausted:
        if search.budget.exhausted or search.work.left() == 0.0:
            raise
        search.out.ended(kind, "time_limit")


def _one_start(search: _Search, kind: str, st: FloatArray, poly: PolynomialSystem | None) -> None:
    """One random, factor or path start (a per-start limit raises :class:`BudgetExhausted`)."""
    if kind == "random":
        _run_start(search, "random", st)
        return
    if kind == "whitened":
        _whitened_start(search, st, search.start_budget())
        return
    out, work = search.out, search.work
    sub = search.start_budget()
    if kind == "factor":
        chol = np.asarray(np.linalg.cholesky(st), dtype=float)
        cov, its = _factor_newton(search.layer, chol, out.known, search.opts, sub, work)
        out.newton_iterations += its
        roots = [] if cov is None else [cov]
    else:
        assert poly is not None
        roots = _path_roots(poly, st, sub, work, _PATH_MAX_STEPS)
    if not roots:
        out.ended(kind, "no_root")
    for root in roots:
        _run_start(search, kind, root)


def _whitened_phase(search: _Search, rng: np.random.Generator, s0: float) -> int:
    """Whitened Levenberg–Marquardt from random starts until ``_WHITENED_SATURATION`` in a row
    find nothing new (at least ``n_random`` starts, at most ``_MAX_WHITENED``); returns that
    count of starts in a row. Every other start spreads its eigenvalues wider (``e^{±3}``
    about ``s0`` instead of ``e^{±1.5}``): some roots have eigenvalues 10–1000 times ``s0``."""
    dry = 0
    for k in range(_MAX_WHITENED):
        if dry >= _WHITENED_SATURATION and k >= search.opts.n_random:
            break
        before = len(search.out.roots)
        st = _random_spd(rng, search.layer.dim, s0, 1.5 if k % 2 == 0 else 3.0)
        _own_limit(search, partial(_whitened_start, search, st, search.start_budget()), "whitened")
        dry = 0 if len(search.out.roots) > before else dry + 1
    return dry


def _whitened_start(search: _Search, start: FloatArray, budget: Budget) -> None:
    """One whitened Levenberg–Marquardt run (within ``budget``, the start's own), its end point
    polished by Newton and logged.

    The run's end (``stalled``, ``stuck``, ``singular``, ``max_iter``) is logged when it did not
    converge; a converged one is polished by Newton on F (tolerance ``min(tol, 1e-14)``, kept
    if the best iterate reaches ``tol``) and logged ``new``, ``duplicate``,
    ``not_positive_definite`` or ``polish_failed``.
    """
    layer, opts, work, out = search.layer, search.opts, search.work, search.out
    out.check_iterations()
    run = whitened_lm(layer, start, budget, work, max_iter=max(opts.max_iter, LM_MAX_ITER))
    out.newton_iterations += run.iterations
    key = run.end
    if run.end == "converged":
        polish = newton_run(
            layer, run.cov, [], replace(opts, tol=min(opts.tol, 1e-14)), budget, work
        )
        out.newton_iterations += polish.iterations
        cov = np.asarray(polish.cov)
        _, rel = relative_residual(layer, cov)
        key = "polish_failed"
        if rel <= opts.tol:
            key = _record_root(out, cov, run.iterations + polish.iterations)
    out.ended("whitened", key)


def _record_root(out: SearchLog, cov: FloatArray, iterations: int) -> str:
    """Log a converged root: ``"duplicate"`` of a known one, else deflated from now on and
    ``"new"`` when positive definite (kept) or ``"not_positive_definite"``."""
    scale = max(float(np.linalg.norm(cov)), 1e-300)
    if any(np.linalg.norm(cov - k) <= DISTINCT_RTOL * scale for k in out.known):
        return "duplicate"
    out.known.append(cov)
    if is_pd(cov):
        out.roots.append((cov, iterations))
        return "new"
    return "not_positive_definite"


def _run_start(search: _Search, kind: str, start: FloatArray) -> None:
    """Newton from one start, retried with each new root deflated; the outcomes are logged."""
    work, out = search.work, search.out
    search.budget.check()
    ends: list[str] = []
    out.log.append({"start": kind, "runs": ends})
    for _ in range(_MAX_ROOTS_PER_START):
        out.check_iterations()
        res = newton_run(search.layer, start, out.known, search.opts, search.start_budget(), work)
        out.newton_iterations += res.iterations
        if res.stats["termination"] == "time_limit" and work.left() == 0.0:
            raise BudgetExhausted(res.message)
        key = str(res.stats["termination"])
        if res.success:
            key = _record_root(out, np.asarray(res.cov), res.iterations)
        ends.append(key)
        out.count(key)
        if key not in ("new", "not_positive_definite"):
            break


def _path_roots(
    poly: PolynomialSystem, cov0: FloatArray, budget: Budget, work: WorkMeter, max_steps: int
) -> list[FloatArray]:
    """Roots met along the Newton homotopy ``H(x, t) = E(x) − (1 − t)E(x0)`` from ``(x0, 0)``.

    ``E`` is the scaled polynomial form of F (``x = vech(Σ)/s``,
    :class:`~._homotopy.PolynomialSystem`).
    The real solution curve of H through ``(x0, 0)`` is followed by pseudo-arclength
    continuation (Euler predictor along the tangent, chord-Newton corrector on
    ``[H; τᵀ(y − y_pred)] = 0``, adaptive step), through turning points in t; every crossing of
    ``t = 1`` is a root of F (returned as Σ, to be polished by Newton). The curve is followed
    until it leaves ``‖x‖ ≤ 10⁶`` or ``max_steps`` run out.
    """
    n = poly.n
    d = poly.d
    x0 = vech(cov0) / poly.scale
    q_flat = poly.q_flat.real
    lin, c = poly.lin, poly.c

    def parts(x: FloatArray) -> tuple[FloatArray, FloatArray]:
        qx = (x @ q_flat).reshape(n, n)
        return qx @ x + lin @ x + c, 2.0 * qx + lin

    f0, _ = parts(x0)
    fs = max(float(np.linalg.norm(f0)), 1e-300)
    f0 = f0 / fs
    cost = 2.0 * n**3 + 4.0 * n**2
    y = np.concatenate([x0, [0.0]])
    tau = np.zeros(n + 1)
    tau[n] = 1.0
    h = 0.05
    aug = np.empty((n + 1, n + 1))
    aug[:n, n] = f0
    roots: list[FloatArray] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sla.LinAlgWarning)
        for _ in range(max_steps):
            budget.check()
            work.charge(cost)
            _, jx = parts(y[:n])
            aug[:n, :n] = jx / fs
            aug[n] = tau
            try:
                inv = np.linalg.inv(aug)
            except np.linalg.LinAlgError:
                break
            z = inv[:, n]  # inv @ e_last
            if not np.all(np.isfinite(z)):
                break
            tau = z / np.linalg.norm(z)
            # Chord corrector with the inverse at y (its last row, the old tangent, is close).
            ok = False
            while h >= 1e-6 and not ok:
                yp = y + h * tau
                yc = yp.copy()
                first = prev = math.inf
                for k in range(6):
                    e, _ = parts(yc[:n])
                    g = np.concatenate([e / fs - (1 - yc[n]) * f0, [tau @ (yc - yp)]])
                    dy = -(inv @ g)
                    yc = yc + dy
                    nd = float(np.linalg.norm(dy))
                    first = nd if k == 0 else first
                    if not np.isfinite(nd) or (k and nd > 0.5 * prev):
                        break
                    prev = nd
                    if nd <= 1e-7 * (1 + float(np.linalg.norm(yc))):
                        ok = first <= 0.2 * h
                        break
                if not ok:
                    h *= 0.5
            if not ok:
                break
            if (y[n] - 1.0) * (yc[n] - 1.0) <= 0 and yc[n] != y[n]:
                w = (1.0 - y[n]) / (yc[n] - y[n])
                roots.append(unvech((1 - w) * y[:n] + w * yc[:n], d) * poly.scale)
            y = yc
            h = min(2.0 * h, 0.5 * (1 + float(np.linalg.norm(y[:n]))))
            if float(np.linalg.norm(y[:n])) > 1e6:
                break
    return roots
