"""The task runners of design files (docs/designs.md): one function per task.

Each runner reads a validated :class:`~gtcontrol.cli.schema.Design`, writes its figures into the
(temporary) output directory and returns ``{"status", "outputs", "figures", "summary"}`` for
``result.json``; ``status`` is a :class:`~gtcontrol.Status` (written as its string value) and
``summary`` the run's headline figures (scalars by name: blow-up time, regime, cost and gap,
final errors, ...), shown by ``gtcontrol run`` at the end of a run. What
each task needs and accepts is :data:`gtcontrol.cli.specs.SPECS`; :data:`TASKS` pairs every
spec with its runner.

The runners call the public API of :mod:`gtcontrol` (and the plotting / experiments modules).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from .. import (
    Gaussian,
    Layer,
    Schedule,
    Trajectory,
    analyze,
    compare_filter,
    compare_tokens,
    design_convergence,
    design_mean_matching,
    equilibria,
    from_kalman,
    mean_dynamics_ss,
    simulate,
    simulate_discrete,
    simulate_tokens,
    stabilize,
    steer,
)
from .._status import Status
from .._validation import as_float_array
from ..control.design.stabilize import Stabilization
from ..errors import DesignFileError
from .records import (
    CERTIFICATE_KEYS,
    ROBUSTNESS_KEYS,
    equilibrium_summary,
    result,
    trajectory_figures,
    trajectory_summary,
)
from .schema import Design
from .specs import SPECS, Option, TaskSpec
from .sweep import sweep_task

__all__ = ["TASKS", "Task", "trajectory_figures", "trajectory_summary"]

Runner = Callable[[Design, Path], dict[str, Any]]


@dataclass(frozen=True)
class Task:
    """A task: its :class:`~gtcontrol.cli.specs.TaskSpec` and the function that runs it.

    Attributes
    ----------
    spec
        What the task needs from a design and which options it accepts.
    run
        ``run(design, outdir) -> {"status", "outputs", "figures", "summary"}``.
    """

    spec: TaskSpec
    run: Runner

    @property
    def needs(self) -> tuple[str, ...]:
        """Design sections the task needs."""
        return self.spec.needs

    @property
    def options(self) -> Mapping[str, Option]:
        """The task's options by name."""
        return self.spec.options

    @property
    def summary(self) -> str:
        """One line for ``gtcontrol --help``."""
        return self.spec.summary


class _Clock:
    """What is left of a run's ``time_limit`` (docs/designs.md), for each solver call."""

    def __init__(self, design: Design) -> None:
        self.deadline = time.monotonic() + design.time_limit

    def left(self) -> float:
        """Seconds left (at least a millisecond: a spent budget returns at once)."""
        return max(self.deadline - time.monotonic(), 1e-3)


def _message(result: Any) -> str:
    """The result's ``message`` (formerly ``reason`` on some results)."""
    text = getattr(result, "message", None)
    return str(text if text is not None else getattr(result, "reason", ""))


def _status(result: Any, default: Status = Status.SUCCESS) -> Status:
    """The :class:`Status` of a result (the one result protocol), ``default`` without one."""
    status = getattr(result, "status", None)
    return status if isinstance(status, Status) else default


def _moment_problem(design: Design) -> tuple[Layer | Schedule, Gaussian, float | None]:
    """``(model, initial, T)`` of a task whose schema requires a model and an initial law."""
    return cast("Layer | Schedule", design.model), cast(Gaussian, design.initial), design.T


def _run_simulate(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.core import plot_moments  # matplotlib: loaded only when drawing

    o = design.options
    clock = _Clock(design)
    traj = simulate(
        *_moment_problem(design),
        time_limit=clock.left(),
        rtol=o["rtol"],
        atol=o["atol"],
        n_points=o["n_points"],
        method=o["method"],
    )
    bps = getattr(design.model, "breakpoints", None)
    plot_moments(traj, out / "moments.png", title=design.title, breakpoints=bps)
    outputs: dict[str, Any] = {"trajectory": trajectory_summary(traj)}
    summary = {**trajectory_figures(traj), "steps": traj.stats.get("nsteps")}
    figures = ["moments.png"]
    if o["tokens"] > 0 and traj.dim >= 2:
        figures += _token_cloud_figure(design, traj, o["tokens"], out, clock)
    if o["discrete"]:
        disc = simulate_discrete(
            *_moment_problem(design),
            time_limit=clock.left(),
            steps_per_layer=o["steps_per_layer"],
        )
        outputs["discrete"] = trajectory_summary(disc)
        plot_moments(disc, out / "moments_discrete.png", title=f"{design.title} (discrete)")
        figures.append("moments_discrete.png")
        summary["discrete_status"] = str(disc.status)
        summary["discrete_final_cov_norm"] = float(np.linalg.norm(disc.final.cov, 2))
    return result(traj.status, outputs, figures, summary)


def _token_cloud_figure(
    design: Design, traj: Trajectory, n: int, out: Path, clock: _Clock
) -> list[str]:
    """Move ``n`` sampled tokens with the same model and draw them against the predicted ellipses.

    After a blow-up only a single layer can be cut short (at 90 % of the blow-up time); a
    schedule that blows up, or a trajectory that stopped for another reason (overflow, a failed
    or exhausted integration), gets no cloud figure.
    """
    from ..plotting.core import plot_token_clouds

    assert design.initial is not None and design.model is not None
    if traj.status is Status.SUCCESS:
        model, horizon = design.model, design.T
        pred = traj
    elif traj.status is Status.BLOWUP and isinstance(design.model, Layer):
        model, horizon = design.model, 0.9 * traj.blowup_time
        pred = simulate(model, design.initial, horizon, time_limit=clock.left())
        if pred.status is not Status.SUCCESS:
            return []
    else:
        return []
    t_end = float(pred.t[-1])
    layers = model.layers if isinstance(model, Schedule) else (model,)
    noisy = any(lay.noise is not None for lay in layers)
    x0 = design.initial.sample(n, design.seed)
    tok = simulate_tokens(
        model,
        x0,
        horizon,
        snapshot_times=np.linspace(0.0, t_end, 4),
        # Brownian forcing needs the Euler–Maruyama scheme (first order: more steps)
        method="euler" if noisy else "rk4",
        steps_per_layer=200 if noisy else 20,
        seed=design.seed,
        time_limit=clock.left(),
    )
    plot_token_clouds(
        list(tok.snapshots),
        pred,
        out / "token_clouds.png",
        title=f"{n} tokens (softmax attention) and the predicted 2σ ellipse",
    )
    return ["token_clouds.png"]


def _run_compare_tokens(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.core import plot_convergence, plot_moments, plot_token_clouds

    o = design.options
    # Only what the design names is passed: otherwise compare_tokens picks its own integrator
    # (adaptive, with a tolerance sized from the statistical error) and the spec's defaults for
    # the fixed-step methods (rk4, 20 steps) apply only when the design asks for them.
    given = design.raw.get("compare-tokens", {})
    given = given if isinstance(given, dict) else {}
    method = o["method"] if "method" in given else None
    steps = o["steps_per_layer"] if "steps_per_layer" in given or method == "rk4" else None
    if method == "adaptive" and "steps_per_layer" in given:
        raise DesignFileError(
            f"{design.source}: 'compare-tokens.steps_per_layer' is not used by method "
            "'adaptive' (it picks its own steps); remove it"
        )
    cmp = compare_tokens(
        *_moment_problem(design),
        n_tokens=o["n_tokens"],
        repeats=o["repeats"],
        seed=design.seed,
        method=method,
        steps_per_layer=steps,
        time_limit=design.time_limit,
    )
    figures = ["moments.png", "convergence.png"]
    plot_moments(cmp.predicted, out / "moments.png", title=f"{design.title}: {cmp.reference}")
    plot_convergence(
        cmp.n_tokens,
        {
            "|mean error|": cmp.mean_error,
            "relative cov error": cmp.cov_error,
            "Bures-Wasserstein": cmp.bures_wasserstein,
        },
        out / "convergence.png",
        title="tokens vs moments at depth T",
    )
    if design.initial is not None and design.initial.dim >= 2 and cmp.example is not None:
        snaps = list(cmp.example.snapshots)
        plot_token_clouds(
            snaps,
            cmp.predicted,
            out / "token_clouds.png",
            title=f"N = {cmp.n_tokens[-1]} tokens and the predicted 2σ ellipse",
        )
        figures.append("token_clouds.png")
    outputs = {
        "table": cmp.table(),
        "slopes": cmp.slopes,
        "repeats": cmp.repeats,
        "consistent": cmp.consistent,
        "message": cmp.message,
        "reference": cmp.reference,
        "integration_error": cmp.integration_error,
        "statistical_error": cmp.statistical_error,
        "ess_min": cmp.ess_min,
        "method": cmp.stats["method"],
        "work": cmp.stats["work"],
        "trajectory": trajectory_summary(cmp.predicted),
        "seconds": cmp.stats["seconds"],
    }
    summary = {
        "largest_N": int(cmp.n_tokens[-1]),
        "mean_error": float(cmp.mean_error[-1]),
        "cov_error": float(cmp.cov_error[-1]),
        "bures_wasserstein": float(cmp.bures_wasserstein[-1]),
        "slope_bures_wasserstein": cmp.slopes.get("bures_wasserstein"),
        "consistent": cmp.consistent,
        "ess_min": cmp.ess_min,
    }
    return result(_status(cmp), outputs, figures, summary)


def _run_analyze(design: Design, out: Path) -> dict[str, Any]:
    from ..analysis.regime_figures import regime_figure_data
    from ..plotting.analysis import plot_cone, plot_covariance_eigenvalues

    layer, g0 = design.model, design.initial
    if not isinstance(layer, Layer):
        raise DesignFileError(f"{design.source}: task 'analyze' needs a single [layer]")
    assert g0 is not None
    o = design.options
    clock = _Clock(design)
    regime = analyze(layer, g0, T=o["horizon"] or None, time_limit=clock.left())
    eqs = equilibria(layer, time_limit=clock.left())
    data = regime_figure_data(
        layer, g0, T=o["plot_T"] or None, n_points=o["n_points"], regime=regime
    )
    plot_covariance_eigenvalues(data, out / "covariance_eigenvalues.png")
    figures = ["covariance_eigenvalues.png"]
    if layer.dim == 2:
        plot_cone(data, out / "cone.png")
        figures.append("cone.png")
    outputs: dict[str, Any] = {
        "regime": {
            "kind": regime.kind,
            "certificate": regime.certificate,
            "message": _message(regime),
            "blowup_time": regime.blowup_time,
            "limit_cov": regime.limit_cov,
            "mean_limit": regime.mean_limit,
        },
        "equilibria": {
            "status": eqs.status,
            "success": eqs.success,
            "message": eqs.message,
            "method": eqs.method,
            "list": [equilibrium_summary(e) for e in eqs],
        },
        "trajectory": trajectory_summary(data.trajectory),
    }
    if regime.limit_cov is not None:
        ss = mean_dynamics_ss(layer, regime)
        poles = np.asarray(ss.poles())
        outputs["mean_dynamics"] = {
            "poles_real": poles.real,
            "poles_imag": poles.imag,
            "dc_gain": ss.dcgain() if np.all(poles.real < 0) else None,
        }
    # The regime's kind ("converges", "blowup", ...) is in outputs.regime.kind; the status is the
    # result protocol's (a blow-up is the answer, not a failure).
    kind_status = Status.BLOWUP if regime.kind == "blowup" else Status.SUCCESS
    summary = {
        "regime": regime.kind,
        "certificate": regime.certificate,
        "blowup_time": float(regime.blowup_time),
        "equilibria": len(outputs["equilibria"]["list"]),
        "stable_equilibria": sum(bool(e["stable"]) for e in outputs["equilibria"]["list"]),
    }
    if regime.limit_cov is not None:
        summary["limit_cov_norm"] = float(np.linalg.norm(regime.limit_cov, 2))
    return result(_status(regime, kind_status), outputs, figures, summary)


def _run_steer(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.core import plot_token_clouds
    from ..plotting.steering import plot_parameter_norms, plot_steering_moments

    o = design.options
    assert design.initial is not None and design.target is not None and design.T is not None
    if design.model is not None:
        raise DesignFileError(
            f"{design.source}: task 'steer' computes the layers; remove [layer]/[[schedule]]"
        )
    clock = _Clock(design)
    kw: dict[str, Any] = {
        "time_limit": clock.left(),
        "terminal": o["terminal"],
        "max_iter": o["max_iter"],
        "seed": design.seed,
    }
    if o["cov_bound"] > 0:
        kw["cov_bound"] = o["cov_bound"]
    res = steer(
        design.initial,
        design.target,
        design.T,
        layers=design.layers or 10,
        mode=o["mode"],
        objective=o["objective"],
        method=o["method"],
        **kw,
    )
    sched = res.controls
    figures: list[str] = []
    if res.trajectory is not None:
        plot_steering_moments(
            res.trajectory,
            design.target,
            out / "moments.png",
            breakpoints=sched.breakpoints.tolist(),
            title=design.title,
        )
        figures.append("moments.png")
    plot_parameter_norms(sched, out / "parameter_norms.png", title="parameter norms per layer")
    figures.append("parameter_norms.png")
    token_w2 = None
    if o["tokens"] > 0 and res.trajectory is not None and res.trajectory.status is Status.SUCCESS:
        x0 = design.initial.sample(o["tokens"], design.seed)
        snaps = np.linspace(0.0, sched.T, 4)
        tok = simulate_tokens(
            sched, x0, snapshot_times=snaps, steps_per_layer=8, time_limit=clock.left()
        )
        token_w2 = tok.final.bures_wasserstein(design.target)
        if design.initial.dim >= 2:
            plot_token_clouds(
                list(tok.snapshots),
                res.trajectory,
                out / "token_clouds.png",
                title=f"{o['tokens']} tokens through the steering layers, predicted 2σ ellipses",
            )
            figures.append("token_clouds.png")
    outputs: dict[str, Any] = {
        "controls": sched.to_dict(),
        "success": res.success,
        "message": res.message,
        "cost": res.cost,
        "kinetic_energy": res.kinetic_energy,
        "parameter_energy": res.parameter_energy,
        "lower_bound": res.lower_bound,
        "gap": res.gap,
        "terminal_error": res.terminal_error,
        "token_terminal_bures_wasserstein": token_w2,
        "stats": {k: v for k, v in res.stats.items() if isinstance(v, (int, float, str, bool))},
    }
    if res.trajectory is not None:
        outputs["trajectory"] = trajectory_summary(res.trajectory)
    summary = {
        "layers": len(sched.layers),
        "cost": res.cost,
        "lower_bound": res.lower_bound,
        "gap": res.gap,
        "terminal_error": res.terminal_error,
        "token_terminal_bures_wasserstein": token_w2,
        "iterations": res.stats.get("iterations"),
    }
    return result(_status(res, Status.FAILED), outputs, figures, summary)


def _design_fixed_parts(design: Design) -> dict[str, Any]:
    """The ``fixed_A`` / ``fixed_B`` / ``fixed_V`` keywords given by the design's ``[layer]``."""
    fixed: dict[str, Any] = {}
    given = design.raw.get("layer", {})
    lay = design.model
    if lay is None:
        return fixed
    if not isinstance(lay, Layer) or len(lay.heads) > 1 or lay.ffn is not None:
        raise DesignFileError(
            f"{design.source}: task 'design' takes at most one [layer] with one head whose "
            "given A, B or V are kept fixed"
        )
    extra = set(given) - {"A", "B", "V"}
    if extra:
        raise DesignFileError(
            f"{design.source}: 'layer.{sorted(extra)[0]}' cannot be fixed in task 'design' "
            "(only A, B, V)"
        )
    if "A" in given:
        fixed["fixed_A"] = lay.A
    if "B" in given:
        fixed["fixed_B"] = lay.heads[0][1]
    if "V" in given:  # a number V stays the scalar it means (V = vI)
        fixed["fixed_V"] = lay.heads[0][0] if isinstance(given["V"], list) else given["V"]
    return fixed


def _run_design(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.design import plot_design_convergence

    o = design.options
    assert design.target is not None
    clock = _Clock(design)
    res = design_mean_matching(
        design.target,
        time_limit=clock.left(),
        rate=o["rate"],
        cov_rate=o["cov_rate"] or None,
        minimum_norm=o["minimum_norm"],
        V_structure=o["V_structure"],
        max_condition=o["max_condition"],
        robustness=o["robustness"],
        seed=design.seed,
        min_ess=o["min_ess"] or None,
        initial=design.initial,
        T=design.T,
        token_check=o["token_check"] or None,
        **_design_fixed_parts(design),
    )
    data = design_convergence(
        res, n_starts=o["n_starts"], T=o["T"] or None, seed=design.seed, time_limit=clock.left()
    )
    plot_design_convergence(
        data.t,
        data.mean_error,
        data.cov_error,
        out / "convergence.png",
        rate=data.rate,
        cov_rate=data.cov_rate,
        title=design.title,
    )
    outputs: dict[str, Any] = {
        "layer": res.layer.to_dict(),
        "success": res.success,
        "message": res.message,
        "method": res.method,
        "fixed": list(res.fixed),
        "norm": res.norm,
        "whitened_norm": res.whitened_norm,
        "rate": res.rate,
        "cov_rate": res.cov_rate,
        "certificate": {k: getattr(res.certificate, k) for k in CERTIFICATE_KEYS},
        "convergence": {
            "t": data.t,
            "max_final_mean_error": float(np.max(data.mean_error[:, -1])),
            "max_final_cov_error": float(np.max(data.cov_error[:, -1])),
        },
        "stats": dict(res.stats),
    }
    summary = {
        "method": res.method,
        "rate": res.rate,
        "cov_rate": res.cov_rate,
        "certificate": res.certificate.kind,
        "certificate_valid": res.certificate.valid,
        "norm": res.norm,
        "final_mean_error": outputs["convergence"]["max_final_mean_error"],
        "final_cov_error": outputs["convergence"]["max_final_cov_error"],
    }
    if res.robustness is not None:
        outputs["robustness"] = {k: getattr(res.robustness, k) for k in ROBUSTNESS_KEYS}
        summary["robustness_radius"] = res.robustness.radius
    if res.ess is not None:  # the softmax's predicted ESS/N along the moment path
        outputs["ess"] = {
            "status": res.ess.status,
            "message": res.ess.message,
            "scale": res.ess.scale,
            "min_ess": res.ess.min_ess,
            "t": res.ess.t,
            "worst": res.ess.worst,
        }
        summary["predicted_min_ess"] = float(np.min(res.ess.worst)) if res.ess.worst.size else None
    if res.token_certificate is not None:
        tc = res.token_certificate
        outputs["token_certificate"] = {
            "status": tc.status,
            "message": tc.message,
            "valid": tc.valid,
            "n_tokens": tc.n_tokens,
            "floor": tc.floor,
            "min_token_ess": tc.min_token_ess,
            "predicted_min_ess": tc.predicted_min_ess,
        }
        summary["token_certificate_valid"] = tc.valid
    status = _status(res, Status.FAILED)
    return result(status, outputs, ["convergence.png"], summary)


def _run_stabilize(design: Design, out: Path) -> dict[str, Any]:
    if not design.options["model"]:
        return _stabilize_run(design, out)
    from ..experiments._deps import single_threaded_blas

    with single_threaded_blas():  # torch is loaded: numpy's BLAS on one thread
        return _stabilize_run(design, out)


def _stabilize_run(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.design import plot_stabilization

    o = design.options
    clock = _Clock(design)
    probe = None
    source = "the design's [layer] and [target]"
    if o["model"]:
        from ..experiments.models import extract
        from ..experiments.stabilization import data_tokens, text_target

        em = extract(o["model"])
        k = int(o["layer"])
        if k >= len(em.layers):
            raise DesignFileError(
                f"stabilize.layer: {k} is not a layer of {em.label} (0 … {len(em.layers) - 1})"
            )
        layer = em.layers[k].attention_layer
        tokens, what = data_tokens(em, seed=design.seed)
        probe = np.hstack([tokens[k], np.ones((tokens[k].shape[0], 1))])
        if o["target_from"] == "text":
            target, delta = text_target(tokens[k])
            source = (
                f"{em.label} layer {k}; target: the {tokens[k].shape[0]} tokens entering it "
                f"({what}), covariance shrunk by Ledoit–Wolf δ = {delta:.3g}"
            )
        else:
            d = layer.dim
            cov = np.eye(d)
            cov[-1, -1] = 0.0
            target = Gaussian(np.eye(d)[-1], cov, name="target")
            source = f"{em.label} layer {k}; target N(e, I ⊕ 0)"
    else:
        if not isinstance(design.model, Layer) or design.target is None:
            raise DesignFileError("stabilize: expected a [layer] (not a schedule) and a [target]")
        layer, target = design.model, design.target
    res = _stabilize_design(design, layer, target, probe, clock)
    curves = {f"stabilized, from {name}": (v.t, v.lam_max) for name, v in _named_checks(res)}
    blowup = None
    if o["before"] and res.starts and clock.left() is not None and clock.left() > 1.0:
        T0 = float(res.verification[0].t[-1]) if res.verification else 10.0 / o["rate"]
        before = simulate(res.original, res.starts[0], T0, n_points=201, time_limit=clock.left())
        lam = np.array([float(np.linalg.eigvalsh(c)[-1]) for c in before.cov])
        curves = {f"given layer ({before.status.value})": (np.asarray(before.t), lam), **curves}
        blowup = before.blowup_time
    plot_stabilization(
        curves,
        None if res.base is None else res.base.eigenvalues,
        None if res.spectrum is None else res.spectrum.eigenvalues,
        out / "stabilization.png",
        rate=o["rate"],
        blowup=blowup,
        title=design.title,
    )
    checks = {
        name: {
            "converged": v.converged,
            "cov_error": float(v.cov_error[-1]),
            "mean_error": float(v.mean_error[-1]),
            "T": float(v.t[-1]),
            "basin_distance": v.basin_distance,
        }
        for name, v in _named_checks(res)
    }
    outputs: dict[str, Any] = {
        "source": source,
        "success": res.success,
        "message": res.message,
        "family": res.family,
        "c": res.c,
        "scale": res.scale,
        "gains": res.gains,
        "change": res.change,
        "rate": res.rate,
        "base_abscissa": None if res.base is None else res.base.abscissa,
        "abscissa": None if res.spectrum is None else res.spectrum.abscissa,
        "local_certificate": res.local_certificate,
        "global_certificate": res.global_certificate,
        "global_bound": res.global_bound,
        "basin_radius": res.basin_radius,
        "function_change": res.function_change,
        "verification": checks,
        "given_blowup_time": blowup,
        "stats": dict(res.stats),
    }
    if layer.dim <= 64:
        outputs["layer"] = res.layer.to_dict()
    summary: dict[str, Any] = {
        "family": res.family,
        "change": res.change,
        "abscissa before": outputs["base_abscissa"],
        "abscissa after": outputs["abscissa"],
        "global": res.global_certificate,
        "function_change": res.function_change,
    }
    if res.token_certificate is not None:
        tc, un = res.token_certificate, res.untouched_tokens
        outputs["token_certificate"] = {
            "status": tc.status,
            "message": tc.message,
            "w2": tc.w2,
            "floor": tc.floor,
            "untouched_w2": None if un is None else un.w2,
            "untouched_status": None if un is None else un.status,
        }
        summary["token W2 / floor"] = tc.w2 / tc.floor if tc.floor > 0 else None
    return result(_status(res, Status.FAILED), outputs, ["stabilization.png"], summary)


def _stabilize_design(
    design: Design, layer: Layer, target: Gaussian, probe: Any, clock: _Clock
) -> Stabilization:
    o = design.options
    return stabilize(
        layer,
        target,
        add=o["add"],
        rate=o["rate"],
        initial=design.initial,
        T=o["T"] or None,
        token_check=o["token_check"] or None,
        tokens=probe,
        seed=design.seed,
        time_limit=clock.left(),
    )


def _named_checks(res: Stabilization) -> list[tuple[str, Any]]:
    return [(v.name, v) for v in res.verification]


def _run_filter(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.design import plot_filter_covariance

    o = design.options
    assert design.initial is not None and design.T is not None
    given = [k for k in ("F", "H", "R", "Q") if o[k] is not None]
    if design.model is not None and given:
        raise DesignFileError(
            f"{design.source}: give either [layer] or the filter data [filter] F, H, R, Q"
        )
    if design.model is None:
        missing = [k for k in ("F", "H", "R") if o[k] is None]
        if missing:
            raise DesignFileError(
                f"{design.source}: task 'filter' needs [layer] or 'filter.{missing[0]}'"
            )
        mats = {}
        for k in given:
            try:
                mats[k] = as_float_array(f"'filter.{k}'", o[k], ndim=2, error=DesignFileError)
            except DesignFileError as exc:
                raise DesignFileError(f"{design.source}: {exc}") from None
        layer = from_kalman(mats["F"], mats["H"], mats["R"], mats.get("Q"))
    elif isinstance(design.model, Layer):
        layer = design.model
    else:
        raise DesignFileError(f"{design.source}: task 'filter' needs a single [layer]")
    if layer.dim != design.initial.dim:
        raise DesignFileError(
            f"{design.source}: [initial] has dimension {design.initial.dim} but the filter "
            f"has dimension {layer.dim}"
        )
    cmp = compare_filter(
        layer, design.initial, design.T, n_points=o["n_points"], time_limit=design.time_limit
    )
    plot_filter_covariance(
        cmp.trajectory.t,
        cmp.filter_cov,
        cmp.trajectory.cov,
        out / "filter.png",
        steady=cmp.steady_care.cov if cmp.steady_care.success else None,
        title=design.title,
    )
    kal = cmp.kalman
    outputs = {
        "layer": layer.to_dict(),
        "kalman": {"F": kal.F, "H": kal.H, "R_n": kal.R, "Q": kal.Q},
        "max_rel_diff": cmp.max_rel_diff,
        "steady_care": {
            "cov": cmp.steady_care.cov,
            "success": cmp.steady_care.success,
            "message": cmp.steady_care.message,
        },
        "steady_lqe": {
            "cov": cmp.steady_lqe.cov,
            "gain": cmp.steady_lqe.gain,
            "poles_real": np.real(cmp.steady_lqe.poles),
            "poles_imag": np.imag(cmp.steady_lqe.poles),
        },
        "equilibrium": cmp.equilibrium,
        "steady_rel_diff": cmp.steady_rel_diff,
        "trajectory": trajectory_summary(cmp.trajectory),
    }
    summary = {
        "max_rel_diff": cmp.max_rel_diff,
        "steady_rel_diff": cmp.steady_rel_diff,
        "steady_care": "found" if cmp.steady_care.success else "none",
        **trajectory_figures(cmp.trajectory),
    }
    return result(_status(cmp), outputs, ["filter.png"], summary)


def _run_experiment(design: Design, out: Path) -> dict[str, Any]:
    from ..experiments.report import experiment_outputs, run_experiments

    o = design.options
    if o["flows"]:
        from ..experiments.attention_flows import run_flows

        flows = dict(run_flows(out, time_limit=design.time_limit))
        rows = flows["outputs"]["table"]
        flows["summary"] = {
            "flows": len(rows),
            "blowups": sum(row.get("regime") == "blowup" for row in rows),
            "message": flows["outputs"]["message"],
        }
        return flows
    res = run_experiments(out, n_tokens=o["n_tokens"], seed=design.seed, quick=o["quick"])
    done = dict(experiment_outputs(res))
    done["summary"] = {
        "tables": len(res.tables),
        "figures": len(res.figures),
        "skipped_stages": len(res.stats.get("skipped", [])),
        "message": res.message,
    }
    return done


def _run_model(design: Design, out: Path) -> dict[str, Any]:
    from ..experiments.model_report import run_model_task
    from ..experiments.models import MODELS

    o = design.options
    model = o["model"]
    if model not in MODELS and not Path(model).is_absolute():
        beside = Path(design.source).parent / model  # a path relative to the design file
        if beside.exists():
            model = str(beside)
    return run_model_task(
        out,
        model=model,
        n_tokens=o["n_tokens"],
        seed=design.seed,
        T=o["T"],
        n_null=o["n_null"],
        flows=o["flows"],
        time_limit=design.time_limit,
    )


_RUNNERS: dict[str, Runner] = {
    "simulate": _run_simulate,
    "compare-tokens": _run_compare_tokens,
    "analyze": _run_analyze,
    "steer": _run_steer,
    "design": _run_design,
    "stabilize": _run_stabilize,
    "filter": _run_filter,
    "experiment": _run_experiment,
    "model": _run_model,
    "sweep": sweep_task,  # gtcontrol run resumes sweeps with gtcontrol.cli.sweep.run_sweep
}
if set(_RUNNERS) != set(SPECS):  # pragma: no cover - a programming error, caught by the tests
    raise RuntimeError(f"task runners {sorted(_RUNNERS)} do not match specs {sorted(SPECS)}")

#: Every task a design file can name: its spec and its runner.
TASKS: dict[str, Task] = {name: Task(spec, _RUNNERS[name]) for name, spec in SPECS.items()}
