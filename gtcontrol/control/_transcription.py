"""The CasADi/IPOPT nonlinear program of one steering problem (private; used by ``steer``).

Variables, per layer: the free parameters ``P``, the collocation states ``Z`` and the end state
``X`` (the blocks of :mod:`._ocp`); the initial state, the terminal data and the parameters held
fixed are NLP parameters, so one symbolic NLP serves every problem of the same structure (a
small LRU cache, :func:`transcription`). The objective is the kinetic or the parameter energy;
the terminal condition exact (reduced for a singular target) or a Bures–Wasserstein/KL penalty.

IPOPT's options are fixed when CasADi builds the solver, and the solver is cached across calls,
so the wall-clock budget of a solve (``max_wall_time``) is enforced by an IPOPT iteration
callback that reads the deadline of the current solve; IPOPT then stops with
``User_Requested_Stop`` and returns its current iterate.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import casadi as ca
import numpy as np

from .._linalg import FloatArray, psd_sqrt, unvech, vech
from .._progress import progress
from ._ipopt import STOPPED, IpoptDeadline
from ._ocp import (
    DEGREE,
    EXPAND_MAX_DIM,
    _collocation_coefficients,
    ca_unvech,
    ca_vech,
    layer_function,
    n_params,
    param_shapes,
)

__all__: list[str] = []


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Everything the transcription needs (validated by ``steer``)."""

    mode: str
    d: int
    T: float
    L: int
    intervals: int
    fixed: tuple[str, ...]
    cov1: FloatArray
    rank1: int
    objective: str
    terminal: str
    terminal_weight: float
    regularization: float
    entry_bounds: Mapping[str, float]
    norm_bounds: Mapping[str, float]
    cov_bound: float | None
    logdet0: float
    parallelization: str
    ipopt: Mapping[str, Any]

    def key(self) -> tuple[Any, ...]:
        """Everything the symbolic NLP depends on (the data enter as NLP parameters)."""
        cov_key = b"" if self.terminal == "exact" and self.rank1 == self.d else self.cov1.tobytes()
        return (
            self.mode,
            self.d,
            self.T,
            self.L,
            self.intervals,
            self.fixed,
            cov_key,
            self.rank1,
            self.objective,
            self.terminal,
            self.terminal_weight,
            self.regularization,
            tuple(sorted(self.entry_bounds.items())),
            tuple(sorted(self.norm_bounds.items())),
            self.cov_bound,
            self.parallelization,
            tuple(sorted(self.ipopt.items())),
        )


@dataclass(frozen=True)
class Solution:
    """Raw NLP result: parameters ``(L, n_params)``, node states ``(L, n_state)`` and IPOPT data.

    ``status`` is IPOPT's return status; ``timed_out`` is true when the deadline callback
    stopped the solve.
    """

    params: FloatArray
    states: FloatArray
    colloc: FloatArray
    aux: FloatArray
    objective: float
    status: str
    success: bool
    iterations: int
    seconds: float
    timed_out: bool = False


@dataclass
class _Constraints:
    """Constraint rows ``lbg ≤ g ≤ ubg`` collected block by block."""

    g: list[Any] = field(default_factory=list)
    lbg: list[FloatArray] = field(default_factory=list)
    ubg: list[FloatArray] = field(default_factory=list)

    def add(self, expr: Any, lower: float = 0.0, upper: float = 0.0) -> None:
        n = int(expr.numel())
        self.g.append(expr)
        self.lbg.append(np.full(n, lower))
        self.ubg.append(np.full(n, upper))


class Transcription:
    """The NLP of one steering problem; :meth:`solve` may be called again with a new target.

    Variables: per layer the parameters ``p_k``, the collocation states ``Z_k`` and the end
    state ``x_{k+1}``; the initial state and the terminal data are NLP parameters.
    """

    def __init__(self, prob: Problem) -> None:
        clock = time.perf_counter()
        self.prob = prob
        self._layout()
        cons = _Constraints()
        energy, logdet, norms = self._dynamics(cons)
        objective = self._objective(energy)
        objective = objective + self._terminal(cons, logdet)
        self._path_constraints(cons, norms)
        self._variable_bounds()
        self.lbg = np.concatenate(cons.lbg)
        self.ubg = np.concatenate(cons.ubg)
        self.solver = self._make_solver(objective, cons)
        self.build_seconds = time.perf_counter() - clock

    # ------------------------------------------------------------------ building blocks
    def _layout(self) -> None:
        """Sizes, the packing of parameters, and the rows that are free or held fixed."""
        prob = self.prob
        d = prob.d
        self.nx = d + d * (d + 1) // 2
        self.npar = n_params(prob.mode, d)
        self.nz = self.nx * DEGREE * prob.intervals
        shapes = param_shapes(prob.mode, d)
        self.names = [n for n, _ in shapes]
        self.offsets = np.cumsum([0] + [int(np.prod(sh)) for _, sh in shapes])
        free = [
            np.arange(self.offsets[i], self.offsets[i + 1])
            for i, n in enumerate(self.names)
            if n not in prob.fixed
        ]
        self.free_rows = np.concatenate(free).astype(int)
        self.fixed_rows = np.setdiff1d(np.arange(self.npar), self.free_rows)
        self.nfree = len(self.free_rows)
        L = prob.L
        self.P = ca.MX.sym("P", self.nfree, L)
        self.Z = ca.MX.sym("Z", self.nz, L)
        self.X = ca.MX.sym("X", self.nx, L)
        self.x0 = ca.MX.sym("x0", self.nx)
        self.target = ca.MX.sym("target", self.nx)  # (m1, vech Σ1), shifted by corrections
        self.pfix = ca.MX.sym("pfix", len(self.fixed_rows), L)  # fixed parameters (NLP data)
        self.w: list[Any] = [ca.vec(self.P), ca.vec(self.Z), ca.vec(self.X)]  # layer by layer
        self.n_aux = 0
        self.k_mat = np.zeros((0, d))

    def _dynamics(self, cons: _Constraints) -> tuple[Any, Any, Any]:
        """Collocation equations and continuity of every layer (the layer function, mapped)."""
        prob = self.prob
        L = prob.L
        self.layer = layer_function(prob.mode, prob.d, prob.T / L, prob.intervals)
        mapped = self.layer.map(L, prob.parallelization)
        # Full parameter matrix: free and fixed rows interleaved back into packing order.
        perm = np.argsort(np.concatenate([self.free_rows, self.fixed_rows]))
        p_all = ca.vertcat(self.P, self.pfix)[perm.tolist(), :] if len(self.fixed_rows) else self.P
        xin = ca.horzcat(self.x0, self.X[:, : L - 1]) if L > 1 else self.x0
        res, xend, energy, logdet, norms = mapped(xin, self.Z, p_all)
        cons.add(ca.vec(res))
        cons.add(ca.vec(xend - self.X))
        return energy, logdet, norms

    def _objective(self, energy: Any) -> Any:
        """Kinetic energy (plus ε × parameter energy) or the parameter energy."""
        prob = self.prob
        par_energy = (prob.T / prob.L) * ca.sumsqr(self.P)
        if prob.objective == "kinetic":
            return ca.sum2(energy) + prob.regularization * par_energy
        return par_energy

    def _terminal_basis(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Eigenvalues (descending) of Σ1 and bases of its range and kernel."""
        prob = self.prob
        w1, u1 = np.linalg.eigh(prob.cov1)
        order = np.argsort(w1)[::-1]
        u1, w1 = u1[:, order], w1[order]
        r = prob.rank1
        ur, uk = u1[:, :r], u1[:, r:]
        if prob.terminal == "exact" and r == prob.d:
            ur = np.eye(prob.d)  # any orthonormal basis; the identity keeps it target-independent
        return w1, ur, uk

    def _terminal(self, cons: _Constraints, logdet: Any) -> Any:
        """Terminal constraints (exact) or the terminal penalty (bw, kl), which is returned."""
        prob = self.prob
        d, r = prob.d, prob.rank1
        x_end = self.X[:, prob.L - 1]
        m_end, cov_end = x_end[:d], ca_unvech(x_end[d:], d)
        m1, cov1 = self.target[:d], ca_unvech(self.target[d:], d)
        w1, ur, uk = self._terminal_basis()
        if prob.terminal == "exact":
            # Reduced conditions for a rank-r target: U1ᵀ(Σ − Σ1)U1 = 0 and Q1ᵀ(Σ − Σ1)U1 = 0
            # (Q1 spans ker Σ1). Q1ᵀΣQ1 = 0 then follows from rank Σ = r; imposing it too would
            # make the constraint Jacobian rank-deficient (LICQ fails).
            diff = cov_end - cov1
            cons.add(m_end - m1)
            if r > 0:
                cons.add(ca_vech(ca.mtimes([ur.T, diff, ur]), r))
                if r < d:
                    cons.add(ca.vec(ca.mtimes([uk.T, diff, ur])))
            return 0.0
        if prob.terminal == "bw":
            # W2² = |Δm|² + tr Σ + tr Σ1 − 2 tr (K Σ Kᵀ)^{1/2}, K = D1^{1/2} U1ᵀ (r × d); the square
            # root is an auxiliary symmetric Y with Y² = K Σ Kᵀ, warm-started on the principal
            # root (minimizing −2 tr Y keeps it there).
            pen = ca.sumsqr(m_end - m1) + ca.trace(cov_end) + ca.trace(cov1)
            if r > 0:
                self.k_mat = (ur * np.sqrt(w1[:r])).T
                self.n_aux = r * (r + 1) // 2
                y_vech = ca.MX.sym("Y", self.n_aux)
                y = ca_unvech(y_vech, r)
                self.w.append(y_vech)
                inner = ca.mtimes([self.k_mat, cov_end, self.k_mat.T])
                cons.add(ca_vech(ca.mtimes(y, y) - inner, r))
                pen = pen - 2.0 * ca.trace(y)
            return prob.terminal_weight * pen
        # "kl": KL(N(m_T, Σ_T) ‖ N(m1, Σ1)) with ln det Σ_T = ln det Σ0 + ∫ 2 tr M dt
        prec1 = np.linalg.inv(prob.cov1)
        dm = m1 - m_end
        kl = 0.5 * (
            ca.trace(ca.mtimes(prec1, cov_end))
            + ca.dot(dm, ca.mtimes(prec1, dm))
            - d
            + float(np.linalg.slogdet(prob.cov1)[1])
            - (prob.logdet0 + ca.sum2(logdet))
        )
        return prob.terminal_weight * kl

    def _path_constraints(self, cons: _Constraints, norms: Any) -> None:
        """Per-layer Frobenius-norm bounds on parameters and the bound on ``|Σ|_F``."""
        prob = self.prob
        free_pos = {int(r): j for j, r in enumerate(self.free_rows)}
        for name, bound in prob.norm_bounds.items():
            i = self.names.index(name)
            rows = [free_pos[r] for r in range(int(self.offsets[i]), int(self.offsets[i + 1]))]
            cons.add(ca.sum1(self.P[rows, :] ** 2).T, -np.inf, bound**2)
        if prob.cov_bound is not None:
            cons.add(ca.vec(norms), -np.inf, prob.cov_bound**2)

    def _variable_bounds(self) -> None:
        """Entry bounds on the free parameters; the states are unbounded."""
        prob = self.prob
        L = prob.L
        lbx = np.full((self.npar, L), -np.inf)
        ubx = np.full((self.npar, L), np.inf)
        for name, bound in prob.entry_bounds.items():
            i = self.names.index(name)
            lbx[self.offsets[i] : self.offsets[i + 1], :] = -bound
            ubx[self.offsets[i] : self.offsets[i + 1], :] = bound
        lbx, ubx = lbx[self.free_rows], ubx[self.free_rows]
        n_states = (self.nz + self.nx) * L + self.n_aux
        self.lbx = np.concatenate([lbx.ravel(order="F"), np.full(n_states, -np.inf)])
        self.ubx = np.concatenate([ubx.ravel(order="F"), np.full(n_states, np.inf)])

    def _make_solver(self, objective: Any, cons: _Constraints) -> Any:
        """The IPOPT solver, with the deadline callback and the user's IPOPT options."""
        prob = self.prob
        x = ca.vertcat(*self.w)
        p = ca.vertcat(self.x0, self.target, ca.vec(self.pfix))
        g = ca.vertcat(*cons.g)
        self.deadline = IpoptDeadline(int(x.numel()), int(g.numel()), int(p.numel()))
        opts: dict[str, Any] = {
            "ipopt.print_level": 0,
            "ipopt.sb": "yes",
            "print_time": False,
            "show_eval_warnings": False,
            "ipopt.tol": 1e-8,
            "ipopt.constr_viol_tol": 1e-10,
            "ipopt.max_iter": 500,
            "expand": prob.d <= EXPAND_MAX_DIM,
            "iteration_callback": self.deadline,
        }
        for key, value in prob.ipopt.items():
            opts[key if key == "expand" or "." in key else f"ipopt.{key}"] = value
        max_iter = opts["ipopt.max_iter"]
        self.max_iter = float(max_iter) if isinstance(max_iter, (int, float)) else None
        return ca.nlpsol("steer", "ipopt", {"x": x, "p": p, "f": objective, "g": g}, opts)

    # ------------------------------------------------------------------ solving
    def _initial_aux(self, states0: FloatArray) -> FloatArray:
        """Principal square root of ``K Σ Kᵀ`` at the guessed end state (BW penalty)."""
        d = self.prob.d
        cov_end = unvech(states0[-1, d:], d)
        return vech(psd_sqrt(self.k_mat @ cov_end @ self.k_mat.T))

    def solve(
        self,
        x0: FloatArray,
        target: FloatArray,
        params0: FloatArray,
        colloc0: FloatArray,
        states0: FloatArray,
        aux0: FloatArray | None = None,
        *,
        max_wall_time: float = math.inf,
    ) -> Solution:
        """Solve from ``x0 = (m0, vech Σ0)`` to ``target = (m1, vech Σ1)``.

        Guesses: parameters ``(L, npar)`` (the fixed rows are held at these values), collocation
        states ``(L, nz)``, end states ``(L, nx)``; ``aux0`` the BW square-root variable.
        ``max_wall_time`` (seconds) stops IPOPT after the iteration that exceeds it.
        """
        L = self.prob.L
        parts = [params0[:, self.free_rows].ravel(), colloc0.ravel(), states0.ravel()]
        if self.n_aux:
            parts.append(np.asarray(self._initial_aux(states0) if aux0 is None else aux0))
        clock = time.perf_counter()
        self.deadline.arm(max_wall_time)
        with progress(f"steer: IPOPT iterations, {L} layers", total=self.max_iter) as update:
            self.deadline.update = update
            try:
                sol = self.solver(
                    x0=np.concatenate(parts),
                    p=np.concatenate([x0, target, params0[:, self.fixed_rows].ravel()]),
                    lbx=self.lbx,
                    ubx=self.ubx,
                    lbg=self.lbg,
                    ubg=self.ubg,
                )
            finally:
                self.deadline.disarm()
                self.deadline.update = lambda iterations: None
        seconds = time.perf_counter() - clock
        st = self.solver.stats()
        wopt = np.asarray(sol["x"]).ravel()
        nfree, nz, nx = self.nfree, self.nz, self.nx
        i1, i2, i3 = nfree * L, (nfree + nz) * L, (nfree + nz + nx) * L
        params = params0.copy()
        params[:, self.free_rows] = wopt[:i1].reshape(L, nfree)
        status = str(st.get("return_status", "unknown"))
        return Solution(
            params=params,
            colloc=wopt[i1:i2].reshape(L, nz),
            states=wopt[i2:i3].reshape(L, nx),
            aux=wopt[i3:],
            objective=float(sol["f"]),
            status=status,
            success=bool(st.get("success", False)),
            iterations=int(st.get("iter_count", -1)),
            seconds=seconds,
            timed_out=self.deadline.fired and status == STOPPED,
        )

    def collocation_times(self) -> FloatArray:
        """Depths of the collocation points, shape ``(L, intervals·DEGREE)``, in ``Z`` order."""
        prob = self.prob
        h = prob.T / prob.L
        dt = h / prob.intervals
        tau = _collocation_coefficients(DEGREE)[0][1:]
        local = np.concatenate([i * dt + dt * tau for i in range(prob.intervals)])
        return np.asarray(np.arange(prob.L)[:, None] * h + local[None, :], dtype=float)


_CACHE: OrderedDict[tuple[Any, ...], Transcription] = OrderedDict()
_CACHE_SIZE = 8

#: Cost model of building the NLP, per mode: ``(c, c_expanded, floor)`` in seconds. Building is
#: dominated by CasADi's ``nlpsol`` set-up (the exact Hessian of the Lagrangian), one native
#: call that cannot be interrupted, so a build that cannot fit the time left is refused up front
#: (:func:`build_estimate`). Fitted on the upper envelope of builds measured on a loaded 2-core
#: machine (L = 10, one interval; seconds): full 0.11/0.44/1.5/0.8/1.8/7.9/23 at
#: d = 2/3/4/5/6/8/10 (d ≤ 4 expanded to SX), attention 3.4/4.3/30 at d = 4/6/8, ffn
#: 1.3/1.3/1.6/2.8 at d = 4/6/8/10; L = 2 as L = 10, L = 30 about 3.7 times that.
_BUILD_COST = {"full": (9.0, 1.6, 0.1), "attention": (30.0, 3.5, 0.5), "ffn": (0.6, 0.2, 1.3)}


def build_estimate(prob: Problem, *, cache: bool = True) -> float:
    """Estimated seconds to build the NLP of ``prob`` (0 when ``cache`` and it is cached).

    ``c · (d/8)⁵ · max(1, L/10)^1.2 · intervals + floor`` (``c_expanded · (d/4)⁵ ...`` up to
    ``EXPAND_MAX_DIM``, where the NLP is expanded to scalar form): the Hessian has
    ``O(d⁴)`` entries, each an expression of ``O(d)`` terms.
    """
    if cache and prob.key() in _CACHE:
        return 0.0
    c, c_exp, floor = _BUILD_COST[prob.mode]
    size = c_exp * (prob.d / 4) ** 5 if prob.d <= EXPAND_MAX_DIM else c * (prob.d / 8) ** 5
    return float(size * max(1.0, prob.L / 10) ** 1.2 * prob.intervals + floor)


def transcription(prob: Problem, *, cache: bool = True) -> tuple[Transcription, bool]:
    """The NLP of ``prob``, reused from a small LRU cache when its structure was built before.

    Returns the transcription and whether it came from the cache. Building one (symbolic
    derivatives included) dominates the cost of small solves, and repeated solves with the same
    shapes and options but other end points share it.
    """
    key = prob.key()
    if cache and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    built = Transcription(prob)
    if cache:
        _CACHE[key] = built
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return built, False
