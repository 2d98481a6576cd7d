"""Solving the design NLP: starting point, IPOPT attempts within a budget, polish, diagnosis.

IPOPT is tried with two barrier strategies (each with two exact-penalty weights on the margin
slacks); the best attempt is kept (verified first, then optimal, then the smallest objective).
If no attempt verifies but the closed-form starting design does, that design is returned
(certified, not norm-minimal). A ``time_limit`` reaches IPOPT as ``max_wall_time`` (the
remaining budget) and stops the attempts; the best iterate so far is returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._linalg import FloatArray, sym, unvech, vech
from ..._status import Budget
from ...model.params import Layer
from .._ipopt import IpoptDeadline
from ._common import MARGIN_SLACK
from .certificate import DesignCertificate
from .nlp import NLP
from .problem import Problem

__all__ = ["Builder", "DesignAttempt", "initial_guess", "polish", "solve_nlp"]

Builder = Callable[[FloatArray, FloatArray, FloatArray], tuple[Layer, DesignCertificate]]

_GROUP_HINTS = {
    "equilibrium": "the target cannot be made an equilibrium with these fixed parts",
    "mean margin": "the mean linearization K",
    "covariance margin": "the covariance linearization DF(Σ*)",
    "mean certificate conditioning": "a mean-rate certificate needs a Lyapunov weight with a "
    "condition number above max_condition",
    "covariance certificate conditioning": "a covariance-rate certificate needs a Lyapunov "
    "weight with a condition number above max_condition",
    "global (R ⪰ 0)": "R = AᵀΣ*⁻¹ + Σ*⁻¹A cannot be positive semi-definite (no global certificate)",
}
#: Exact-penalty weights tried in turn (the objective is normalized to 1 at the start).
_SLACK_WEIGHTS = (1e2, 1e4)
#: Slacks above this fraction of the requested rate mean the request was not met.
_SLACK_TOL = 1e-7
#: IPOPT settings tried in turn when an attempt does not end optimal with a verified design
#: (the barrier strategies fail on different instances of these nonconvex problems).
_ATTEMPTS: tuple[dict[str, Any], ...] = ({}, {"ipopt.mu_strategy": "adaptive"})
#: IPOPT return statuses that mean a cap (iterations, time) ran out.
_CAPS = ("Maximum_Iterations_Exceeded", "Maximum_WallTime_Exceeded", "Maximum_CpuTime_Exceeded")
#: Cost model of setting up one IPOPT solver (CasADi's ``nlpsol``: the exact Hessian of the
#: Lagrangian, one native call that cannot be interrupted): ``c · (d / d0)^p`` seconds, per
#: class. Fitted on the upper envelope of set-ups measured on a loaded 2-core machine: Riccati
#: class (V = vI: a fixed B, A or v, or minimum_norm) 0.38/2.3/11.6/36 s at d = 8/12/16/20;
#: a general V (the d(d+1)/2-square covariance certificate) 0.9/3.4/13.8 s at d = 4/5/6.
_SETUP_COST = {True: (0.4, 8.0, 5.3), False: (14.0, 6.0, 7.5)}


def setup_estimate(p: Problem) -> float:
    """Estimated seconds to set up one IPOPT solver of the design NLP of ``p``."""
    c, d0, power = _SETUP_COST[bool(p.riccati)]
    return float(c * (p.d / d0) ** power)


# ----------------------------------------------------------------------------- start, polish


def initial_guess(p: Problem) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Feasible-leaning ``(Â, B̂, V̂)`` honoring the fixed parts (closed forms of the
    constructive design where the fixed parts allow them)."""
    d = p.d
    eye = np.eye(d)
    r_c = p.r_c * (1 + 1e-2)
    if p.riccati:
        if p.v_scalar is not None:
            v = p.v_scalar
        elif p.a_hat is not None and p.b_hat is not None:
            sa, sb = sym(p.a_hat), sym(p.b_hat)
            v = -float(np.sum(sa * sb)) / float(np.sum(sb * sb))
        elif p.b_hat is not None:
            lmin = float(np.linalg.eigvalsh(sym(p.b_hat))[0])
            v = -max(p.r_m, r_c / (2 * lmin) if lmin > 0 else p.r_m) * (1 + 1e-2)
        else:
            v = -p.r_m * (1 + 1e-2)
        if p.b_hat is not None:
            b_hat = p.b_hat
            a_hat = p.a_hat if p.a_hat is not None else -v * sym(b_hat)
        elif p.a_hat is not None:
            a_hat = p.a_hat
            b_hat = -sym(a_hat) / v
        else:
            a_hat = 0.5 * r_c * eye
            b_hat = -a_hat / v
        return a_hat, b_hat, v * eye
    v_hat = p.v_fixed if p.v_fixed is not None else -p.r_m * (1 + 1e-2) * eye
    if p.b_hat is not None:
        b_hat = p.b_hat
    else:
        smin = float(np.linalg.svd(v_hat, compute_uv=False)[-1])
        c = r_c / (2.0 * max(smin, 1e-3) ** 2) * (1 + 1e-2)
        b_hat = -c * v_hat.T
    a_hat = p.a_hat if p.a_hat is not None else -sym(v_hat @ b_hat)
    return a_hat, b_hat, v_hat


def _jacobian(d: int, column: Callable[[FloatArray], FloatArray]) -> FloatArray:
    """Matrix of a linear map on ``d×d`` matrices, one unit matrix (column-major) at a time."""
    cols = []
    for k in range(d * d):
        e = np.zeros(d * d)
        e[k] = 1.0
        cols.append(column(e.reshape(d, d)))
    return np.array(cols).T


def polish(
    p: Problem, a_hat: FloatArray, b_hat: FloatArray, v_hat: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Make ``sym(Â + V̂B̂) = 0`` exact by a minimum-norm correction of one designed block.

    The equation is linear in each block separately, so one least-squares step is exact.
    """
    d = p.d

    def eq(a: FloatArray, b: FloatArray, v: FloatArray) -> FloatArray:
        return vech(sym(a + v @ b))

    res = eq(a_hat, b_hat, v_hat)
    if p.a_hat is None:
        return a_hat - unvech(res, d), b_hat, v_hat
    if p.b_hat is None:
        jac = _jacobian(d, lambda e: eq(np.zeros((d, d)), e, v_hat))
        delta = np.linalg.lstsq(jac, -res, rcond=None)[0].reshape(d, d)
        return a_hat, b_hat + delta, v_hat
    if p.riccati and p.v_scalar is None:
        sb = sym(b_hat)
        v = -float(np.sum(sym(a_hat) * sb)) / float(np.sum(sb * sb))
        return a_hat, b_hat, v * np.eye(d)
    if p.v_fixed is None and not p.riccati:
        jac = _jacobian(d, lambda e: eq(np.zeros((d, d)), b_hat, e))
        delta = np.linalg.lstsq(jac, -res, rcond=None)[0].reshape(d, d)
        return a_hat, b_hat, v_hat + delta
    return a_hat, b_hat, v_hat


# ----------------------------------------------------------------------------- attempts


def _diagnose(p: Problem, nlp: NLP, x: FloatArray, st: Mapping[str, Any]) -> str:
    """Why an attempt is not a solution: the margin with a positive slack, or the most violated
    constraint group ('' when IPOPT succeeded with zero slacks)."""
    slack = np.asarray(nlp.eval_slack(x)).ravel()
    short = [(c[0], c[2], sv) for c, sv in zip(nlp.certs, slack) if sv > _SLACK_TOL]
    status = st.get("return_status", "")
    if short:
        name, rate, sv = max(short, key=lambda t: t[2])
        rate_req = rate / (1 + MARGIN_SLACK) * (2 if p.riccati and name == "covariance" else 1)
        if st.get("success", False):
            return (
                f"IPOPT: {status}; the binding constraint is the {name} margin: "
                f"{_GROUP_HINTS[name + ' margin']} reaches at best {(1 - sv) * rate_req:.6g} of "
                f"the requested {name} rate {rate_req:.6g} with the Lyapunov weights bounded by "
                f"max_condition = {p.opts.max_condition:g} (a local optimum)"
            )
        return (
            f"IPOPT: {status}; at the last iterate the {name} margin is not met: "
            f"{_GROUP_HINTS[name + ' margin']} reaches {(1 - sv) * rate_req:.6g} of the requested "
            f"{name} rate {rate_req:.6g}"
        )
    if st.get("success", False):
        return ""
    worst = max(nlp.violations(x), key=lambda kv: kv[1])
    if worst[1] > 1e-8:
        return (
            f"IPOPT: {status}; the most violated constraint is the {worst[0]} (violation "
            f"{worst[1]:.3g}): {_GROUP_HINTS.get(worst[0], '')}"
        )
    return f"IPOPT: {status} at a point satisfying the constraints"


@dataclass
class _Attempt:
    """One IPOPT attempt, built into a layer and verified."""

    layer: Layer
    certificate: DesignCertificate
    stats: dict[str, Any]
    diagnosis: str
    short: bool  # IPOPT converged, but a margin slack stayed positive (request out of reach)

    @property
    def key(self) -> tuple[bool, bool, float]:
        return (self.certificate.valid, bool(self.stats["optimal"]), -self.stats["objective"])


class _Runner:
    """Runs IPOPT attempts on one NLP from one starting point."""

    def __init__(self, p: Problem, nlp: NLP, x_init: FloatArray) -> None:
        self.p = p
        self.nlp = nlp
        self.x_init = x_init
        self.f0 = max(float(nlp.eval_obj(x_init)), 1e-12)
        self.bounds = nlp.bounds()
        ca = nlp.ca
        self.problem = {
            "x": nlp.x,
            "p": nlp.weight,
            "f": nlp.obj / self.f0 + nlp.weight * ca.sum1(nlp.slack),
            "g": nlp.g,
        }
        self.iterations = 0
        self._stop: Any = None  # the budget callback (kept alive while its solver runs)

    def _solver(self, extra: Mapping[str, Any], budget: Budget) -> Any:
        opts = self.p.opts
        base: dict[str, Any] = {
            "ipopt.print_level": 0,
            "ipopt.sb": "yes",
            "print_time": False,
            "ipopt.tol": opts.tol,
            "ipopt.constr_viol_tol": opts.tol,
            "ipopt.max_iter": opts.max_iter,
            "show_eval_warnings": False,
        }
        if budget.time_limit is not None:
            # max_wall_time bounds each solve by the time left now; the callback stops IPOPT
            # as soon as the shared budget is spent (later solves of the same solver included).
            base["ipopt.max_wall_time"] = max(budget.remaining(), 1e-3)
            nlp = self.nlp
            self._stop = IpoptDeadline(
                int(nlp.x.numel()),
                int(nlp.g.numel()),
                1,
                name="gtcontrol_design_budget",
                stop=lambda: budget.exhausted,
            )
            base["iteration_callback"] = self._stop
        user = {f"ipopt.{k}": v for k, v in opts.ipopt_options.items()}
        options = {**base, **extra, **user}
        return self.nlp.ca.nlpsol("gtcontrol_design", "ipopt", self.problem, options)

    def attempt(self, extra: Mapping[str, Any], budget: Budget, build: Builder) -> _Attempt:
        """Solve with the penalty weights in turn (stopping when the slacks vanish)."""
        lbx, ubx, lbg, ubg = self.bounds
        x = self.x_init
        st: dict[str, Any] = {}
        try:
            solver = self._solver(extra, budget)
            for i, weight in enumerate(_SLACK_WEIGHTS):
                if i > 0 and budget.exhausted:
                    break
                sol = solver(x0=x, p=weight, lbx=lbx, ubx=ubx, lbg=lbg, ubg=ubg)
                st = dict(solver.stats())
                self.iterations += int(st.get("iter_count", 0))
                x = np.asarray(sol["x"]).ravel()
                slack = np.asarray(self.nlp.eval_slack(x)).ravel()
                if not st.get("success", False) or np.max(slack) <= _SLACK_TOL:
                    break
        except RuntimeError as exc:
            st = {"return_status": f"CasADi error ({exc})", "success": False}
        return self.evaluate(x, st, build)

    def evaluate(self, x: FloatArray, st: Mapping[str, Any], build: Builder) -> _Attempt:
        nlp = self.nlp
        slack = np.asarray(nlp.eval_slack(x)).ravel()
        converged = bool(st.get("success", False))
        stats: dict[str, Any] = {
            "return_status": str(st.get("return_status", "")),
            "objective": float(nlp.eval_obj(x)),
            "initial_objective": self.f0,
            "variables": int(nlp.x.numel()),
            "constraints": int(nlp.g.numel()),
            "slack": {c[0]: float(sv) for c, sv in zip(nlp.certs, slack)},
            "certificate_condition": {
                c[0]: float(np.linalg.cond(w)) for c, w in zip(nlp.certs, nlp.weights(x))
            },
            "optimal": converged and float(np.max(slack)) <= _SLACK_TOL,
        }
        layer, cert = build(*polish(self.p, *(np.asarray(m) for m in nlp.eval_parts(x))))
        short = converged and float(np.max(slack)) > _SLACK_TOL
        return _Attempt(layer, cert, stats, _diagnose(self.p, nlp, x, st), short)


# ----------------------------------------------------------------------------- driver


@dataclass
class DesignAttempt:
    """What :func:`solve_nlp` returns."""

    layer: Layer
    certificate: DesignCertificate
    stats: dict[str, Any]
    diagnosis: str
    exhausted: str | None  # why a budget (time limit, IPOPT cap) ran out; None if none did
    short: bool  # IPOPT converged with a margin out of reach (see :class:`_Attempt`)

    @property
    def optimal(self) -> bool:
        return bool(self.stats.get("optimal", False))


def _starting_design(
    p: Problem, build: Builder, guess: tuple[FloatArray, FloatArray, FloatArray]
) -> tuple[Layer, DesignCertificate]:
    return build(*polish(p, *guess))


def _cap_reason(p: Problem, return_status: str, budget: Budget) -> str | None:
    if return_status == "Maximum_Iterations_Exceeded":
        return f"IPOPT's iteration cap max_iter = {p.opts.max_iter} was reached"
    if return_status == "Maximum_WallTime_Exceeded" and budget.time_limit is not None:
        return budget.reason()
    if return_status in _CAPS:
        return f"IPOPT stopped at its limit ({return_status})"
    return None


def _refusal(p: Problem, estimate: float, budget: Budget, what: str) -> str:
    return (
        f"setting up {what} (d = {p.d}) is estimated at {estimate:.3g} s, more than the "
        f"{budget.remaining():.3g} s left of the time limit of {budget.time_limit:g} s (the "
        "set-up cannot be interrupted; raise time_limit)"
    )


def solve_nlp(p: Problem, build: Builder, budget: Budget) -> DesignAttempt:
    """Solve the NLP (with retries, within ``budget``) and verify the result.

    Attempts follow :data:`_ATTEMPTS` until one ends optimal (zero slacks) with a verified
    design; otherwise the best attempt is kept (verified first, then optimal, then the smallest
    objective). If no attempt verifies but the starting design does (it is feasible by
    construction for a fixed B with positive symmetric part, a fixed A or v, or no fixed
    parts), that design is returned, certified but not minimal. When the budget runs out
    before IPOPT starts, or setting up an IPOPT solver is estimated (:func:`setup_estimate`)
    to take longer than the time left, the (polished) starting design is the best iterate.
    """
    clock = time.perf_counter()
    guess = initial_guess(p)
    best: _Attempt | None = None
    history: list[str] = []
    runner: _Runner | None = None
    exhausted: str | None = None
    estimate = setup_estimate(p)
    refused = ""
    if not budget.exhausted and estimate <= budget.remaining():
        nlp = NLP(p)
        runner = _Runner(p, nlp, nlp.initial(*guess))
        for extra in _ATTEMPTS if not p.opts.ipopt_options else ({},):
            if budget.exhausted:
                break
            if estimate > budget.remaining():
                refused = _refusal(p, estimate, budget, "another IPOPT attempt")
                break
            att = runner.attempt(extra, budget, build)
            history.append(att.stats["return_status"])
            if best is None or att.key > best.key:
                best = att
            if att.certificate.valid and att.stats["optimal"]:
                break
    elif not budget.exhausted:
        refused = _refusal(p, estimate, budget, "the NLP")
    if best is None:
        exhausted = refused or budget.reason()
        layer, cert = _starting_design(p, build, guess)
        stats: dict[str, Any] = {"return_status": "", "optimal": False}
        diagnosis = "IPOPT did not run"
        short = False
    else:
        layer, cert, stats, diagnosis, short = (
            best.layer,
            best.certificate,
            best.stats,
            best.diagnosis,
            best.short,
        )
        if not (cert.valid and stats["optimal"]):
            if budget.exhausted or refused:
                exhausted = refused or budget.reason()
            else:
                exhausted = _cap_reason(p, stats["return_status"], budget)
        if not cert.valid:
            layer0, cert0 = _starting_design(p, build, guess)
            if cert0.valid:
                stats = {**stats, "optimal": False, "fallback": "initial"}
                diagnosis = (
                    f"{diagnosis or 'IPOPT: ' + history[-1]}; the closed-form starting design "
                    "verifies and is returned instead"
                )
                layer, cert = layer0, cert0
    stats["attempts"] = history
    stats["setup_estimate"] = estimate
    stats["iterations"] = 0 if runner is None else runner.iterations
    stats["nlp_seconds"] = time.perf_counter() - clock
    return DesignAttempt(layer, cert, stats, diagnosis, exhausted, short)
