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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from .. import (
    Gaussian,
    IpoptSettings,
    Layer,
    MeanMatchingDesign,
    Schedule,
    SteeringBounds,
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
from .._output import check_length
from .._status import Status, import_fits
from .._validation import as_float_array
from ..control.stabilization import Stabilization
from ..errors import (
    DesignFileError,
    GTControlError,
    InvalidGaussianError,
    InvalidParametersError,
    UnreachableTargetError,
)
from ._refusals import keyed, refused
from ._run_budget import (
    CONTROL_IMPORT_SECONDS,
    EXPERIMENTS_IMPORT_SECONDS,
    RunBudget,
    import_seconds,
    stack_eigenvalues,
)
from .records import (
    CERTIFICATE_KEYS,
    ROBUSTNESS_KEYS,
    equilibrium_summary,
    final_moments,
    result,
    spectral_norm,
    trajectory_figures,
    trajectory_summary,
)
from .schema import Design, ModelBase
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


def _plot_moments(traj: Trajectory, path: Path, **kw: Any) -> None:
    from ..plotting.core import plot_moments  # matplotlib: loaded only when drawing

    plot_moments(traj, path, **kw)


def _run_simulate(design: Design, out: Path) -> dict[str, Any]:
    o = design.options
    run = RunBudget(design.time_limit, design.started)
    n_figures = 1 + (o["tokens"] > 0) + bool(o["discrete"])
    traj = simulate(
        *_moment_problem(design),
        time_limit=run.solver_limit(n_figures) / (2 if o["discrete"] else 1),
        rtol=o["rtol"],
        atol=o["atol"],
        n_points=o["n_points"],
        method=o["method"],
    )
    bps = getattr(design.model, "breakpoints", None)
    outputs: dict[str, Any] = {"trajectory": trajectory_summary(traj, run)}
    summary = {**trajectory_figures(traj), "steps": traj.stats.get("nsteps")}
    figures = []
    if run.draw(
        "moments.png",
        lambda: _plot_moments(traj, out / "moments.png", title=design.title, breakpoints=bps),
        panels=2,
    ):
        figures.append("moments.png")
    if o["tokens"] > 0 and traj.dim >= 2:
        figures += _token_cloud_figure(design, traj, o["tokens"], out, run)
    if o["discrete"]:
        disc = simulate_discrete(
            *_moment_problem(design),
            time_limit=run.solver_limit(1),
            steps_per_layer=o["steps_per_layer"],
        )
        outputs["discrete"] = trajectory_summary(disc, run)
        if run.draw(
            "moments_discrete.png",
            lambda: _plot_moments(
                disc, out / "moments_discrete.png", title=f"{design.title} (discrete)"
            ),
            panels=2,
        ):
            figures.append("moments_discrete.png")
        summary["discrete_status"] = str(disc.status)
        summary["discrete_final_cov_norm"] = spectral_norm(final_moments(disc)[1])
    return run.finish(result(traj.status, outputs, figures, summary))


def _token_cloud_figure(
    design: Design, traj: Trajectory, n: int, out: Path, run: RunBudget
) -> list[str]:
    """Move ``n`` sampled tokens with the same model and draw them against the predicted ellipses.

    After a blow-up only a single layer can be cut short (at 90 % of the blow-up time); a
    schedule that blows up, or a trajectory that stopped for another reason (overflow, a failed
    or exhausted integration), gets no cloud figure.
    """
    assert design.initial is not None and design.model is not None
    if traj.status is Status.SUCCESS:
        model, horizon = design.model, design.T
        pred = traj
    elif traj.status is Status.BLOWUP and isinstance(design.model, Layer):
        model, horizon = design.model, 0.9 * traj.blowup_time
        pred = simulate(model, design.initial, horizon, time_limit=run.solver_limit(1))
        if pred.status is not Status.SUCCESS:
            return []
    else:
        return []
    t_end = float(pred.t[-1])
    layers = model.layers if isinstance(model, Schedule) else (model,)
    noisy = any(lay.noise is not None for lay in layers)
    x0 = design.initial.sample(n, seed=design.seed)
    tok = simulate_tokens(
        model,
        x0,
        horizon,
        times=np.linspace(0.0, t_end, 4),
        # Brownian forcing needs the Euler–Maruyama scheme (first order: more steps)
        method="euler" if noisy else "rk4",
        steps_per_layer=200 if noisy else 20,
        seed=design.seed,
        time_limit=run.solver_limit(1),
    )
    if tok.status is Status.BUDGET_EXHAUSTED:
        run.skip("the token clouds (the tokens did not reach the depth in time)")
        return []

    def draw() -> None:
        from ..plotting.core import plot_token_clouds

        plot_token_clouds(
            list(tok.snapshots),
            pred,
            out / "token_clouds.png",
            title=f"{n} tokens (softmax attention) and the predicted 2σ ellipse",
        )

    drawn = run.draw("token_clouds.png", draw, panels=len(tok.snapshots))
    return ["token_clouds.png"] if drawn else []


def _run_compare_tokens(design: Design, out: Path) -> dict[str, Any]:
    o = design.options
    run = RunBudget(design.time_limit, design.started)
    # Only what the design names is passed: otherwise compare_tokens picks its own integrator
    # (DOP853, with a tolerance sized from the statistical error) and the spec's defaults for
    # the fixed-step methods (rk4, 20 steps) apply only when the design asks for them.
    given = design.raw.get("compare-tokens", {})
    given = given if isinstance(given, dict) else {}
    method = o["method"] if "method" in given else None
    steps = o["steps_per_layer"] if "steps_per_layer" in given or method == "rk4" else None
    if method in ("DOP853", "RK45", "RK23") and "steps_per_layer" in given:
        raise DesignFileError(
            f"{design.source}: 'compare-tokens.steps_per_layer' is not used by method "
            f"{method!r} (an embedded pair picks its own steps); remove it"
        )
    cmp = compare_tokens(
        *_moment_problem(design),
        n_tokens=o["n_tokens"],
        repeats=o["repeats"],
        seed=design.seed,
        method=method,
        steps_per_layer=steps,
        max_work=o["max_work"],
        time_limit=run.solver_limit(3),
    )
    figures = _compare_figures(design, cmp, out, run)
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
        "trajectory": trajectory_summary(cmp.predicted, run),
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
    return run.finish(result(_status(cmp), outputs, figures, summary))


def _compare_figures(design: Design, cmp: Any, out: Path, run: RunBudget) -> list[str]:
    """The figures of ``compare-tokens``, each drawn if the run's budget affords it."""

    def moments() -> None:
        from ..plotting.core import plot_moments

        plot_moments(cmp.predicted, out / "moments.png", title=f"{design.title}: {cmp.reference}")

    def convergence() -> None:
        from ..plotting.core import plot_convergence

        errors = {
            "|mean error|": cmp.mean_error,
            "relative cov error": cmp.cov_error,
            "Bures-Wasserstein": cmp.bures_wasserstein,
        }
        title = "tokens vs moments at depth T"
        plot_convergence(cmp.n_tokens, errors, out / "convergence.png", title=title)

    def clouds() -> None:
        from ..plotting.core import plot_token_clouds

        plot_token_clouds(
            list(cmp.example.snapshots),
            cmp.predicted,
            out / "token_clouds.png",
            title=f"N = {cmp.n_tokens[-1]} tokens and the predicted 2σ ellipse",
        )

    draws = [("moments.png", moments, 2), ("convergence.png", convergence, 1)]
    if design.initial is not None and design.initial.dim >= 2 and cmp.example is not None:
        draws.append(("token_clouds.png", clouds, len(cmp.example.snapshots)))
    return [name for name, draw, k in draws if run.draw(name, draw, panels=k)]


def _run_analyze(design: Design, out: Path) -> dict[str, Any]:
    from ..analysis.regime_figures import regime_figure_data

    layer, g0 = design.model, design.initial
    if not isinstance(layer, Layer):
        raise DesignFileError(f"{design.source}: task 'analyze' needs a single [layer]")
    assert g0 is not None
    o = design.options
    run = RunBudget(design.time_limit, design.started)
    n_figures = 2 if layer.dim == 2 else 1
    # three solver calls share the time before the figures: the regime, the equilibria, the
    # integration for the figure
    regime = analyze(layer, g0, T=o["T"] or None, time_limit=run.solver_limit(n_figures) / 3)
    eqs = equilibria(layer, time_limit=run.solver_limit(n_figures) / 2)
    data = regime_figure_data(
        layer,
        g0,
        T=o["plot_T"] or None,
        n_points=o["n_points"],
        regime=regime,
        time_limit=run.solver_limit(n_figures),
    )
    if data.trajectory.status is Status.BUDGET_EXHAUSTED or np.isnan(data.eigenvalues).any():
        run.skip("part of the figure's trajectory (its integration stopped early)")
    figures = _analyze_figures(data, layer.dim, out, run)
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
        "trajectory": trajectory_summary(data.trajectory, run),
    }
    ss_cost = import_seconds("control", CONTROL_IMPORT_SECONDS) + 1e-8 * layer.dim**3
    if regime.limit_cov is not None and not run.affords(ss_cost):
        run.skip("the mean dynamics")
    elif regime.limit_cov is not None:
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
    return run.finish(result(_status(regime, kind_status), outputs, figures, summary))


def _analyze_figures(data: Any, dim: int, out: Path, run: RunBudget) -> list[str]:
    """The figures of ``analyze``, each drawn if the run's budget affords it."""

    def eigenvalues() -> None:
        from ..plotting.analysis import plot_covariance_eigenvalues

        plot_covariance_eigenvalues(data, out / "covariance_eigenvalues.png")

    def cone() -> None:
        from ..plotting.analysis import plot_cone

        plot_cone(data, out / "cone.png")

    draws = [("covariance_eigenvalues.png", eigenvalues, 1)]
    if dim == 2:
        draws.append(("cone.png", cone, 2))
    return [name for name, draw, k in draws if run.draw(name, draw, panels=k)]


def _run_steer(design: Design, out: Path) -> dict[str, Any]:
    if isinstance(design.base, ModelBase):
        from .._blas import single_threaded_blas

        with single_threaded_blas():  # torch is loaded: numpy's BLAS on one thread
            return _steer_base_run(design, out)
    if design.base is not None:
        return _steer_base_run(design, out)
    o = design.options
    assert design.initial is not None and design.target is not None and design.T is not None
    if design.model is not None:
        raise DesignFileError(
            f"{design.source}: task 'steer' computes the layers; remove [layer]/[[schedule]]"
        )
    run = RunBudget(design.time_limit, design.started)
    n_figures = 2 + (o["tokens"] > 0 and design.initial.dim >= 2)
    res = steer(
        design.initial,
        design.target,
        design.T,
        n_layers=design.n_layers or 10,
        mode=o["mode"],
        objective=o["objective"],
        method=o["method"],
        terminal=o["terminal"],
        bounds=SteeringBounds(cov=o["cov_bound"] or None),
        solver=IpoptSettings(max_iter=o["max_iter"]),
        seed=design.seed,
        time_limit=run.solver_limit(n_figures),
    )
    sched = res.controls
    figures = _steer_figures(design, res, out, run)
    token_w2 = None
    if o["tokens"] > 0 and res.trajectory is not None and res.trajectory.status is Status.SUCCESS:
        token_w2, clouds = _steer_tokens(design, res, out, run)
        figures += clouds
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
        outputs["trajectory"] = trajectory_summary(res.trajectory, run)
    summary = {
        "n_layers": len(sched.layers),
        "cost": res.cost,
        "lower_bound": res.lower_bound,
        "gap": res.gap,
        "terminal_error": res.terminal_error,
        "token_terminal_bures_wasserstein": token_w2,
        "iterations": res.stats.get("iterations"),
    }
    return run.finish(result(_status(res, Status.FAILED), outputs, figures, summary))


def _steer_base_run(design: Design, out: Path) -> dict[str, Any]:
    """Task ``steer`` with a ``[base]``: the least added control through the base (``A_k, b_k``;
    with ``mode = "full"`` also an added head per sublayer).

    Then, while the time limit affords them: the same pair steered with no base (the energy the
    base costs, option ``blank_energy``) and the base's own flow from the initial over the same
    depth (to its blow-up, if it blows up), for the figures."""
    o, T = design.options, design.T
    assert T is not None
    run = RunBudget(design.time_limit, design.started)  # loading a model counts
    model = design.base if isinstance(design.base, ModelBase) else None
    base: Layer | Schedule
    if model is not None:
        problem = _steer_model_problem(design, model, run)
        if isinstance(problem, str):
            return _not_loaded(run, model.model, problem)
        base, initial, target, source = problem
    else:
        assert design.initial is not None and design.target is not None
        base, initial, target = cast("Layer | Schedule", design.base), design.initial, design.target
        source = "the design's [base], [initial] and [target]"
    n = design.n_layers or 10
    table = design.raw.get("steer")
    mode = table.get("mode", "ffn") if isinstance(table, dict) else "ffn"

    def solve(b: Layer | Schedule, limit: float) -> Any:
        return steer(
            initial,
            target,
            T,
            n_layers=n,
            base=b,
            mode=mode,
            method=o["method"],
            solver=IpoptSettings(max_iter=o["max_iter"]),
            token_check=o["tokens"] or None,
            seed=design.seed,
            time_limit=limit,
        )

    def compute(what: str, work: Callable[[], Any]) -> Any:
        return run.compute(what, work) if model is not None else work()

    res = compute("the steering", lambda: solve(base, run.solver_limit(3)))
    if res is None:
        return _not_loaded(run, model.model if model else "the base", _COMPUTE)
    blank = None
    if o["blank_energy"]:
        blank = compute(
            "the energy without the base",
            lambda: solve(Layer(dim=initial.dim), run.solver_limit(3)),
        )
    flow = compute(
        "the base's own flow",
        lambda: simulate(base, initial, T, n_points=201, time_limit=run.solver_limit(3)),
    )
    if blank is not None and blank.status is Status.BUDGET_EXHAUSTED:
        run.skip("the energy without the base (its steering ran out of time)")
    if flow is not None and flow.status is Status.BUDGET_EXHAUSTED:
        run.skip("part of the base's own flow (its integration stopped early)")
    bases = base.layers if isinstance(base, Schedule) else (base,) * n
    added_A = [lay.A - b.A for lay, b in zip(res.controls.layers, bases, strict=True)]
    added_b = [lay.b - b.b for lay, b in zip(res.controls.layers, bases, strict=True)]
    steered = None if res.trajectory is None else trajectory_summary(res.trajectory, run)
    own = None if flow is None else trajectory_summary(flow, run)
    figures = _steer_base_figures(design, res, target, (steered, own), (added_A, added_b), out, run)
    blank_cost = None if blank is None or not blank.success else blank.cost
    stats = {k: v for k, v in res.stats.items() if isinstance(v, (int, float, str, bool))}
    outputs: dict[str, Any] = {
        "source": source,
        "success": res.success,
        "message": res.message,
        "added_energy": res.cost,
        "kinetic_energy": res.kinetic_energy,
        "lower_bound": res.lower_bound,
        "terminal_error": res.terminal_error,
        "relative_terminal_error": res.stats.get("relative_terminal_error"),
        "energy_without_base": blank_cost,
        "blank_status": None if blank is None else blank.status,
        "blank_seconds": None if blank is None else blank.stats.get("seconds"),
        "base_heads_kept": _heads_kept(bases, res.controls.layers),
        "added": {"A": np.array(added_A), "b": np.array(added_b)},
        "mode": mode,
        "added_heads": list(res.stats.get("added_heads", [])),
        "seconds_by_part": dict(res.stats.get("seconds_by_part", {})),
        "stats": stats,
        "initial": {"mean": initial.mean, "cov": initial.cov},
        "target": {"mean": target.mean, "cov": target.cov},
        "trajectory": steered,
        "base_flow": own,
    }
    if initial.dim <= 64:
        outputs["controls"] = res.controls.to_dict()
    summary = {
        "n_layers": n,
        "dimension": initial.dim,
        "relative_terminal_error": res.stats.get("relative_terminal_error"),
        "added_energy": res.cost,
        "energy_without_base": blank_cost,
        "base_blowup_time": None if flow is None else float(flow.blowup_time),
        "steer_seconds": res.stats.get("seconds"),
        "base_heads_kept": outputs["base_heads_kept"],
    }
    return run.finish(result(_status(res, Status.FAILED), outputs, figures, summary))


def _heads_kept(bases: Any, layers: Any) -> bool:
    """Whether every returned layer holds its base's heads first, bitwise (factored: the same
    object)."""
    for b, lay in zip(bases, layers, strict=True):
        if b.factored_heads is not None and lay.factored_heads is not b.factored_heads:
            return False
        pairs = list(zip(lay.dense_heads, b.dense_heads))
        if len(pairs) != len(b.dense_heads) or not all(
            np.array_equal(v, v0) and np.array_equal(w, w0) for (v, w), (v0, w0) in pairs
        ):
            return False
    return True


def _steer_model_problem(
    design: Design, mb: ModelBase, run: RunBudget
) -> tuple[Layer, Gaussian, Gaussian, str] | str:
    """``(layer, initial, target, source)`` of ``steer`` through a model's layer, or what did
    not finish within the time limit (the model's load or its data tokens)."""
    from ._base_targets import rotated_target, token_moments

    em = _load_model(run, design, mb.model, "the steering")
    if em is None:
        return _LOAD
    k = mb.layer
    layer = _model_layer(design, em, k, "base.layer")
    if mb.start_from == "identity":
        initial, what = _identity_target(layer.dim), "N(e, I ⊕ 0)"
    else:
        from ..experiments._onnx_data import data_refusal

        refusal = data_refusal(em)
        if refusal is not None:
            raise DesignFileError(
                f"{design.source}: base.start_from = 'text' needs the tokens entering the layer "
                f"on data, and {refusal}; give start_from = 'identity' (it needs no data)"
            )
        data = _load_data_tokens(run, design, em, f"the steering through {em.label}")
        if data is None:
            return _DATA
        tokens, kind = data
        initial = token_moments(tokens[k])
        what = f"the moments of the {tokens[k].shape[0]} tokens entering it ({kind})"
    initial = Gaussian(initial.mean, initial.cov, name="initial")
    if mb.target == "given":
        target = cast(Gaussian, design.target)
        if target.dim != layer.dim:
            raise DesignFileError(
                f"{design.source}: [target] has dimension {target.dim} but layer {k} of "
                f"{em.label} acts on dimension {layer.dim} (its width and the affine coordinate)"
            )
        goal = "the design's [target]"
    else:
        target = rotated_target(
            initial, angle=mb.angle, shift=mb.shift, stretch=mb.stretch, seed=design.seed
        )
        goal = (
            f"the initial rotated (angle {mb.angle:g}), stretched ({mb.stretch:g}) and shifted "
            f"({mb.shift:g}) on its active subspace, seed {design.seed}"
        )
    return layer, initial, target, f"{em.label} layer {k}; from {what}; to {goal}"


def _steer_base_figures(
    design: Design,
    res: Any,
    goal: Gaussian,
    flows: tuple[dict[str, Any] | None, dict[str, Any] | None],
    added: tuple[list[Any], list[Any]],
    out: Path,
    run: RunBudget,
) -> list[str]:
    """The figures of ``steer`` through a base: the moments along depth (compact above d = 6),
    the added control per sublayer, the base's own flow against the steered one."""
    traj, title = res.trajectory, design.title
    steered, own = flows
    bps = res.controls.breakpoints.tolist()

    def moments() -> None:
        from ..plotting.steering import plot_steering_moments, plot_steering_summary

        assert steered is not None
        if traj.dim <= 6:
            plot_steering_moments(traj, goal, out / "moments.png", breakpoints=bps, title=title)
        else:
            lam = steered["cov_eigenvalues"]
            plot_steering_summary(
                traj, goal, lam, out / "moments.png", breakpoints=bps, title=title
            )

    def control() -> None:
        from ..plotting.steering import plot_added_control

        plot_added_control(
            *added, out / "added_control.png", title="the control added per sublayer"
        )

    def against() -> None:
        from ..plotting.steering import plot_base_against_steered

        assert steered is not None
        plot_base_against_steered(
            (steered["t"], steered["cov_eigenvalues"]),
            None if own is None else (own["t"], own["cov_eigenvalues"]),
            out / "base_vs_steered.png",
            blowup_time=math.inf if own is None else float(own["blowup_time"]),
            breakpoints=bps,
            title="the base's heads alone against the steered network",
        )

    draws: list[tuple[str, Callable[[], None], int]] = [("added_control.png", control, 1)]
    if steered is not None and not np.isnan(steered["cov_eigenvalues"]).any():
        draws = [("moments.png", moments, 3), *draws, ("base_vs_steered.png", against, 2)]
    return [name for name, draw, k in draws if run.draw(name, draw, panels=k)]


def _steer_figures(design: Design, res: Any, out: Path, run: RunBudget) -> list[str]:
    """The moments and parameter-norm figures of ``steer``, each drawn if the budget affords it."""
    sched, target = res.controls, design.target
    assert target is not None

    def moments() -> None:
        from ..plotting.steering import plot_steering_moments

        plot_steering_moments(
            res.trajectory,
            target,
            out / "moments.png",
            breakpoints=sched.breakpoints.tolist(),
            title=design.title,
        )

    def norms() -> None:
        from ..plotting.steering import plot_parameter_norms

        plot_parameter_norms(sched, out / "parameter_norms.png", title="parameter norms per layer")

    draws = [("moments.png", moments, 3)] if res.trajectory is not None else []
    draws.append(("parameter_norms.png", norms, 1))
    return [name for name, draw, k in draws if run.draw(name, draw, panels=k)]


def _steer_tokens(
    design: Design, res: Any, out: Path, run: RunBudget
) -> tuple[float | None, list[str]]:
    """Tokens through the steering layers: their terminal W2 and the cloud figure (if it fits)."""
    assert design.initial is not None and design.target is not None
    n = design.options["tokens"]
    x0 = design.initial.sample(n, seed=design.seed)
    snaps = np.linspace(0.0, res.controls.T, 4)
    limit = run.solver_limit(1 if design.initial.dim >= 2 else 0)
    tok = simulate_tokens(res.controls, x0, times=snaps, steps_per_layer=8, time_limit=limit)
    if tok.status is Status.BUDGET_EXHAUSTED:
        run.skip("the token check (the tokens did not reach the depth in time)")
        return None, []
    token_w2 = tok.final.bures_wasserstein(design.target)

    def clouds() -> None:
        from ..plotting.core import plot_token_clouds

        plot_token_clouds(
            list(tok.snapshots),
            res.trajectory,
            out / "token_clouds.png",
            title=f"{n} tokens through the steering layers, predicted 2σ ellipses",
        )

    drawn = design.initial.dim >= 2 and run.draw(
        "token_clouds.png", clouds, panels=len(tok.snapshots)
    )
    return token_w2, ["token_clouds.png"] if drawn else []


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


def _designed(design: Design, run: RunBudget) -> MeanMatchingDesign:
    """The design of task ``design``: 95 % of the time (the convergence check has the rest, at
    least what is left when the design stopped early); a refused target names the file."""
    o = design.options
    assert design.target is not None
    try:
        return design_mean_matching(
            design.target,
            time_limit=0.95 * run.solver_limit(1),
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
    except InvalidGaussianError as exc:  # its names are the design's keys (target.cov, ...)
        raise DesignFileError(f"{design.source}: {exc}") from None
    except UnreachableTargetError as exc:  # proved infeasible in closed form: bad input
        raise refused(design, _infeasible(design, str(exc))) from None
    except InvalidParametersError as exc:
        raise refused(design, _design_refusal(design, str(exc))) from None


def _infeasible(design: Design, text: str) -> str:
    """The line of a design proved infeasible: the keys that make it so (the fixed parts, the
    rate the constraint bounds) and the API's reason, its advice in the design file's terms."""
    constraint = text.removeprefix("design infeasible: ").partition(":")[0]
    given = design.raw.get("layer", {})
    keys = [f"layer.{k}" for k in ("A", "B", "V") if k in given]
    keys += {"mean rate": ["design.rate"], "covariance rate": ["design.cov_rate"]}.get(
        constraint, []
    )
    # require_global is not a design key: a full V is the design file's local design
    text = text.replace(
        "use require_global=False for a local design",
        'design.V_structure = "full" designs a local one',
    )
    return f"{', '.join(keys) or 'target'}: {text}"


def _design_refusal(design: Design, text: str) -> str:
    """The line of the API's refusal of a design's inputs; an entry of the designed layer out
    of float64's range names the target and the rate it was designed for."""
    name = text.partition(": ")[0]
    if name in ("A", "b", "B", "V") or name.startswith("heads["):
        return (
            "target, design.rate: the layer designed for them is not representable in "
            f"float64 ({text})"
        )
    return keyed(design, text, {f"fixed_{k}": f"layer.{k}" for k in ("A", "B", "V")})


def _convergence_check(
    design: Design, res: MeanMatchingDesign, run: RunBudget, out: Path
) -> tuple[dict[str, Any], list[str]]:
    """The convergence check's outputs and figures; skipped, saying why, for a design with no
    positive certified rate (nothing to check against)."""
    o = design.options
    if not res.certificate.rate > 0:
        why = "not run: the design has no positive certified rate to check"
        return {"t": [], "max_final_mean_error": None, "max_final_cov_error": None, "note": why}, []
    data = design_convergence(
        res,
        n_starts=o["n_starts"],
        T=o["T"] or None,
        seed=design.seed,
        time_limit=run.solver_limit(1),
    )
    if data.status is Status.BUDGET_EXHAUSTED:
        run.skip("part of the convergence check (its integrations stopped early)")

    def draw() -> None:
        from ..plotting.design import plot_design_convergence

        plot_design_convergence(
            data.t,
            data.mean_error,
            data.cov_error,
            out / "convergence.png",
            rate=data.rate,
            cov_rate=data.cov_rate,
            title=design.title,
        )

    figures = ["convergence.png"] if run.draw("convergence.png", draw, panels=2) else []
    check = {
        "t": data.t,
        "max_final_mean_error": float(np.max(data.mean_error[:, -1])),
        "max_final_cov_error": float(np.max(data.cov_error[:, -1])),
    }
    return check, figures


def _run_design(design: Design, out: Path) -> dict[str, Any]:
    run = RunBudget(design.time_limit, design.started)
    res = _designed(design, run)
    check, figures = _convergence_check(design, res, run, out)
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
        "convergence": check,
        "stats": dict(res.stats),
    }
    summary = {
        "method": res.method,
        "rate": res.rate,
        "cov_rate": res.cov_rate,
        "certificate": res.certificate.kind,
        "certificate_success": res.certificate.success,
        "norm": res.norm,
        "final_mean_error": check["max_final_mean_error"],
        "final_cov_error": check["max_final_cov_error"],
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
            "success": tc.success,
            "n_tokens": tc.n_tokens,
            "floor": tc.floor,
            "min_token_ess": tc.min_token_ess,
            "predicted_min_ess": tc.predicted_min_ess,
        }
        summary["token_certificate_success"] = tc.success
    status = _status(res, Status.FAILED)
    return run.finish(result(status, outputs, figures, summary))


def _run_stabilize(design: Design, out: Path) -> dict[str, Any]:
    if not design.options["model"]:
        return _stabilize_run(design, out)
    from .._blas import single_threaded_blas

    with single_threaded_blas():  # torch is loaded: numpy's BLAS on one thread
        return _stabilize_run(design, out)


def _stabilize_run(design: Design, out: Path) -> dict[str, Any]:
    o = design.options
    run = RunBudget(design.time_limit, design.started)  # loading the model counts
    probe = None
    if o["model"]:
        problem = _model_problem(design, run)
        if isinstance(problem, str):
            return _not_loaded(run, o["model"], problem)
        layer, target, probe, source = problem
    else:
        if not isinstance(design.model, Layer) or design.target is None:
            raise DesignFileError("stabilize: expected a [layer] (not a schedule) and a [target]")
        layer, target = design.model, design.target
        source = "the design's [layer] and [target]"
    limit = run.solver_limit(1)
    if o["model"]:  # a layer of width d + 1 of a real model: its solvers may overrun (threaded)
        found = run.compute(
            "the stabilization", lambda: _stabilize_design(design, layer, target, probe, limit)
        )
        if found is None:
            return _not_loaded(run, o["model"], _COMPUTE)
        res = found
    else:
        res = _stabilize_design(design, layer, target, probe, limit)
    curves = {f"stabilized, from {name}": (v.t, v.lam_max) for name, v in _named_checks(res)}
    blowup = None
    if o["before"] and res.starts and run.solver_limit(1) > 1.0:
        T0 = float(res.verification[0].t[-1]) if res.verification else 10.0 / o["rate"]
        limit = run.solver_limit(1)

        def given() -> Trajectory:
            return simulate(res.original, res.starts[0], T0, n_points=201, time_limit=limit)

        what = "the given layer's simulation"
        before = run.compute(what, given) if o["model"] else given()
        if before is not None:
            lam = stack_eigenvalues(before.cov, run, "the given layer's eigenvalues")[:, -1]
            label = f"given layer ({before.status.value})"
            curves = {label: (np.asarray(before.t), lam), **curves}
            blowup = before.blowup_time

    def draw() -> None:
        from ..plotting.design import plot_stabilization

        plot_stabilization(
            curves,
            None if res.base is None else res.base.eigenvalues,
            None if res.spectrum is None else res.spectrum.eigenvalues,
            out / "stabilization.png",
            rate=o["rate"],
            blowup=blowup,
            title=design.title,
        )

    figures = ["stabilization.png"] if run.draw("stabilization.png", draw, panels=2) else []
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
        "mean_shift": res.mean_shift,
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
        summary["design rate"] = res.stats.get("design_rate")
    return run.finish(result(_status(res, Status.FAILED), outputs, figures, summary))


def _model_problem(design: Design, run: RunBudget) -> tuple[Layer, Gaussian, Any, str] | str:
    """``(layer, target, probe tokens, source)`` of ``stabilize`` with ``model`` set, or what
    did not finish within the time limit (the model's load or its data tokens).

    Only ``target_from = "text"`` needs data (the model's own embeddings run on text, or on
    random token ids without a tokenizer); ``"identity"`` probes the function change on the data
    tokens when the model can be fed data, else on samples of the target."""
    o = design.options
    em = _load_model(run, design, o["model"], "the stabilization")
    if em is None:
        return _LOAD
    k = int(o["layer"])
    layer = _model_layer(design, em, k, "stabilize.layer")
    from ..experiments._onnx_data import data_refusal

    refusal = data_refusal(em)  # an ONNX graph without an input of token ids, say
    if refusal is not None:
        if o["target_from"] == "text":
            raise DesignFileError(
                f"{design.source}: stabilize.target_from = 'text' needs the tokens entering the "
                f"layer on data, and {refusal}; give target_from = 'identity' (it needs no data)"
            )
        return (
            layer,
            _identity_target(layer.dim),
            None,
            f"{em.label} layer {k}; target N(e, I ⊕ 0); function change on 512 samples of the "
            "target (the model cannot be fed data)",
        )
    data = _load_data_tokens(run, design, em, f"the stabilization of {em.label}")
    if data is None:
        return _DATA
    tokens, what = data
    probe = np.hstack([tokens[k], np.ones((tokens[k].shape[0], 1))])
    if o["target_from"] == "identity":
        return (
            layer,
            _identity_target(layer.dim),
            probe,
            f"{em.label} layer {k}; target N(e, I ⊕ 0)",
        )
    from ..experiments.stabilization import text_target

    target, delta = text_target(tokens[k])
    source = (
        f"{em.label} layer {k}; target: the {tokens[k].shape[0]} tokens entering it "
        f"({what}), covariance shrunk by Ledoit–Wolf δ = {delta:.3g}"
    )
    return layer, target, probe, source


def _identity_target(d: int) -> Gaussian:
    """``N(e, I ⊕ 0)`` on ``R^d``, ``e`` the affine coordinate (last)."""
    cov = np.eye(d)
    cov[-1, -1] = 0.0
    return Gaussian(np.eye(d)[-1], cov, name="target")


def _stabilize_design(
    design: Design, layer: Layer, target: Gaussian, probe: Any, time_limit: float
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
        time_limit=time_limit,
    )


def _named_checks(res: Stabilization) -> list[tuple[str, Any]]:
    return [(v.name, v) for v in res.verification]


def _run_filter(design: Design, out: Path) -> dict[str, Any]:
    o = design.options
    run = RunBudget(design.time_limit, design.started)
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
        try:
            layer = from_kalman(mats["F"], mats["H"], mats["R"], mats.get("Q"))
        except GTControlError as exc:  # its names are the design's keys F, H, R, Q
            raise DesignFileError(f"{design.source}: filter.{exc}") from None
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
        layer, design.initial, design.T, n_points=o["n_points"], time_limit=run.solver_limit(1)
    )

    def draw() -> None:
        from ..plotting.design import plot_filter_covariance

        plot_filter_covariance(
            cmp.trajectory.t,
            cmp.filter_cov,
            cmp.trajectory.cov,
            out / "filter.png",
            steady=cmp.steady_care.cov if cmp.steady_care.success else None,
            title=design.title,
        )

    figures = ["filter.png"] if run.draw("filter.png", draw, panels=2) else []
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
        "trajectory": trajectory_summary(cmp.trajectory, run),
    }
    summary = {
        "max_rel_diff": cmp.max_rel_diff,
        "steady_rel_diff": cmp.steady_rel_diff,
        "steady_care": "found" if cmp.steady_care.success else "none",
        **trajectory_figures(cmp.trajectory),
    }
    return run.finish(result(_status(cmp), outputs, figures, summary))


def _run_experiment(design: Design, out: Path) -> dict[str, Any]:
    o = design.options
    run = RunBudget(design.time_limit, design.started)  # the experiments draw within it
    em = _load_model(run, design, "minilm", "the experiments")  # every stage begins with it
    if em is None:
        return _not_loaded(run, "minilm")
    from ..experiments.report import experiment_outputs, run_experiments

    if o["flows"]:
        from ..experiments.attention_flows import run_flows

        flows = dict(run_flows(out, model=em, time_limit=run.solver_limit(1)))
        rows = flows["outputs"]["table"]
        flows["summary"] = {
            "flows": len(rows),
            "blowups": sum(row.get("regime") == "blowup" for row in rows),
            "message": flows["outputs"]["message"],
        }
        return run.finish(flows)
    res = run_experiments(
        out,
        n_tokens=o["n_tokens"],
        seed=design.seed,
        quick=o["quick"],
        time_limit=run.solver_limit(5 if o["quick"] else 10),  # the report's figures
        draw=run.draw,
    )
    done = dict(experiment_outputs(res))
    done["summary"] = {
        "tables": len(res.tables),
        "figures": len(res.figures),
        "skipped_stages": len(res.stats.get("skipped", [])),
        "message": res.message,
    }
    return run.finish(done)


def _run_model(design: Design, out: Path) -> dict[str, Any]:
    return run_model(design, out)


def map_rows_store(out: Path) -> Path:
    """Where the ``model`` task of the output folder ``out`` stores its rows as they finish:
    the sibling folder ``OUT.rows`` (the output folder itself is replaced atomically at the
    end, so what a killed run finished must live beside it). Its name, 5 bytes longer than
    ``OUT``'s, is checked here, before a model is loaded: an :class:`OutputError` if the file
    system cannot hold it."""
    out = Path(out)
    store = out.parent / f"{out.name or 'out'}.rows"
    check_length(store)
    return store


def run_model(
    design: Design, out: Path, *, store: Path | None = None, scheduler: str | None = None
) -> dict[str, Any]:
    """The ``model`` task: :func:`~gtcontrol.experiments.model_map.model_map` and its report.

    With ``store`` every finished row is stored there as it lands (a killed run resumes from
    it); the store is removed once the map is complete, and kept (said in the message) when
    the time limit cut it short. ``scheduler``: the dask cluster to map the layers on.
    """
    o = design.options
    run = RunBudget(design.time_limit, design.started)
    em = _load_model(run, design, o["model"], "the map")
    if em is None:
        return _not_loaded(run, o["model"])
    from ..experiments._map_report import FIGURES, model_map_record
    from ..experiments.model_map import model_map

    limit = run.solver_limit(len(FIGURES))  # its figures are drawn after the map
    m = run.compute(
        f"the map of {em.label}",
        lambda: model_map(
            em,
            layers=o["layers"],
            T=o["T"],
            rate=o["rate"],
            change_budget=o["change_budget"],
            token_check=o["token_check"] or None,
            gaussian_tokens=o["n_tokens"] or None,
            n_null=o["n_null"],
            seed=design.seed,
            workers=o["workers"],
            scheduler=scheduler,
            store=store,
            time_limit=limit,
        ),
    )
    if m is None:
        return _not_loaded(run, o["model"], _COMPUTE)
    record = model_map_record(out, m, draw=run.draw)
    if store is not None:
        stored = any((store / "rows").glob("layer_*.pkl"))
        if m.status is not Status.BUDGET_EXHAUSTED or not stored:
            _remove_store(store)  # complete, or nothing worth keeping
        if store.exists():
            record["outputs"]["store"] = str(store)
            record["summary"]["message"] += (
                f"; the finished rows are kept in {store}: run again to map only the others"
            )
    return run.finish(record)


def _remove_store(store: Path) -> bool:
    """Remove a complete map's row store if it holds only what the map wrote there."""
    from ..experiments._layer_jobs import remove_store

    return remove_store(store)


def _load_model(run: RunBudget, design: Design, name: str, what: str) -> Any:
    """The model ``name`` extracted within the run's time limit (``None``: not in time).

    Importing gtcontrol.experiments (about 1 s), torch and transformers (2–8 s in a fresh
    process) and reading the model cannot be interrupted: :meth:`RunBudget.load` gives up on
    them at the deadline and records ``what`` as not produced. A relative path is read beside
    the design file first (a name of ``gtcontrol models`` wins)."""

    def load() -> Any:
        import_fits(run.budget, "gtcontrol.experiments", EXPERIMENTS_IMPORT_SECONDS)
        from ..experiments.pretrained import extract_serially
        from ..interop.models import MODELS

        model = name
        if model not in MODELS and not Path(model).is_absolute():
            beside = Path(design.source).parent / model
            if beside.exists():
                model = str(beside)
        return extract_serially(model, design.seed, run.budget)

    return run.load(f"{what} of {_label(name)}", load)


def _model_layer(design: Design, em: Any, k: int, key: str) -> Layer:
    """The attention layer ``k`` of the extracted model ``em``; a ``k`` past its last layer is
    refused naming the design's option ``key``."""
    if k >= len(em.layers):
        raise DesignFileError(
            f"{design.source}: {key}: {k} is not a layer of {em.label} (0 … {len(em.layers) - 1})"
        )
    return cast(Layer, em.layers[k].attention_layer)


def _load_data_tokens(run: RunBudget, design: Design, em: Any, what: str) -> Any:
    """``(tokens entering each layer, what they were run on)`` of the model ``em`` on its data
    batch, within the run's time limit (``None``: not in time; ``what (its data tokens)`` is
    recorded as not produced)."""

    def read() -> Any:
        from ..experiments.pretrained import serially
        from ..experiments.stabilization import data_tokens

        return serially(lambda: data_tokens(em, seed=design.seed))

    return run.load(f"{what} (its data tokens)", read)


def _label(name: str) -> str:
    return Path(name).name or name


#: Why nothing was computed on a model within the time limit (:func:`_not_loaded`).
_LOAD = (
    "{} was not loaded within the time limit of {:g} s (importing torch and transformers and "
    "reading the model, which cannot be interrupted, did not fit in it): nothing was computed"
)
_DATA = (
    "running {} on its data batch (the target's and the probe's tokens), which cannot be "
    "interrupted, did not fit in the time limit of {:g} s: nothing was computed"
)
_COMPUTE = (
    "the computation on {} did not return within the time limit of {:g} s, even when told "
    "to stop: nothing is kept"
)


def _not_loaded(run: RunBudget, name: str, why: str = _LOAD) -> dict[str, Any]:
    """The record of a run that computed nothing on its model within the time limit; ``why``
    is one of the sentences above."""
    message = why.format(_label(name), run.budget.time_limit)
    return run.finish(
        result(
            Status.BUDGET_EXHAUSTED,
            {"model": name, "message": message},
            [],
            {"model": name, "message": message},
        )
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
