"""The tasks a design file can run (docs/designs.md) and their options.

Each task reads a validated :class:`~gtcontrol.designs.Design`, writes its figures into the
(temporary) output directory and returns the outputs that go into ``result.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._status import Status
from .._validation import as_float_array
from ..errors import DesignFileError
from ..model.moments import Trajectory, simulate, simulate_discrete
from ..model.params import Layer
from .schema import Design, Option

__all__ = ["TASKS", "TaskSpec", "trajectory_summary"]


@dataclass(frozen=True)
class TaskSpec:
    """A task: the design sections it needs, its options and the function that runs it."""

    run: Callable[[Design, Path], dict[str, Any]]
    needs: tuple[str, ...]
    options: Mapping[str, Option] = field(default_factory=dict)
    summary: str = ""


def _positive(x: Any) -> str | None:
    return None if x > 0 else "must be positive"


def _int_list(x: Any) -> str | None:
    if not x or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in x):
        return "must be a non-empty list of positive integers"
    return None


_INTEGRATOR_OPTIONS: dict[str, Option] = {
    "rtol": Option(float, 1e-11, _positive, "relative tolerance of the moment integrator"),
    "atol": Option(float, 1e-14, _positive, "absolute tolerance (scaled by the initial state)"),
    "n_points": Option(int, 201, _positive, "number of recorded depths"),
    "method": Option(str, "DOP853", None, "scipy solve_ivp method"),
}


def trajectory_summary(traj: Trajectory) -> dict[str, Any]:
    """What ``result.json`` records of a moment trajectory."""
    return {
        "status": traj.status,
        "blowup_time": traj.blowup_time,
        "t": traj.t,
        "mean": traj.mean,
        "cov_eigenvalues": np.linalg.eigvalsh(traj.cov),
        "rank": traj.rank,
        "final": {"mean": traj.final.mean, "cov": traj.final.cov},
        "stats": dict(traj.stats),
    }


def _run_simulate(design: Design, out: Path) -> dict[str, Any]:
    from ..plotting.core import plot_moments

    o = design.options
    traj = simulate(
        design.model,  # type: ignore[arg-type]
        design.initial,  # type: ignore[arg-type]
        design.T,
        rtol=o["rtol"],
        atol=o["atol"],
        n_points=o["n_points"],
        method=o["method"],
    )
    bps = getattr(design.model, "breakpoints", None)
    plot_moments(traj, out / "moments.png", title=design.title, breakpoints=bps)
    outputs: dict[str, Any] = {"trajectory": trajectory_summary(traj)}
    figures = ["moments.png"]
    if o["tokens"] > 0 and traj.dim >= 2:
        figures += _token_cloud_figure(design, traj, o["tokens"], out)
    if o["discrete"]:
        disc = simulate_discrete(
            design.model,  # type: ignore[arg-type]
            design.initial,  # type: ignore[arg-type]
            design.T,
            steps_per_layer=o["steps_per_layer"],
        )
        outputs["discrete"] = trajectory_summary(disc)
        plot_moments(disc, out / "moments_discrete.png", title=f"{design.title} (discrete)")
        figures.append("moments_discrete.png")
    return {"status": traj.status, "outputs": outputs, "figures": figures}


def _token_cloud_figure(design: Design, traj: Trajectory, n: int, out: Path) -> list[str]:
    """Move ``n`` sampled tokens with the same model and draw them against the predicted ellipses.

    After a blow-up only a single layer can be cut short (at 90 % of the blow-up time); a
    schedule that blows up gets no cloud figure.
    """
    from ..model.params import Schedule
    from ..model.tokens import simulate_tokens
    from ..plotting.core import plot_token_clouds

    assert design.initial is not None and design.model is not None
    if traj.status is Status.SUCCESS:
        model, horizon = design.model, design.T
    elif isinstance(design.model, Layer):
        model, horizon = design.model, 0.9 * traj.blowup_time
    else:
        return []
    pred = traj if traj.status is Status.SUCCESS else simulate(model, design.initial, horizon)
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
        rng=design.seed,
    )
    plot_token_clouds(
        list(tok.snapshots),
        pred,
        out / "token_clouds.png",
        title=f"{n} tokens (softmax attention) and the predicted 2σ ellipse",
    )
    return ["token_clouds.png"]


def _run_compare_tokens(design: Design, out: Path) -> dict[str, Any]:
    from ..analysis.compare import compare_tokens
    from ..plotting.core import plot_convergence, plot_moments, plot_token_clouds

    o = design.options
    cmp = compare_tokens(
        design.model,  # type: ignore[arg-type]
        design.initial,  # type: ignore[arg-type]
        design.T,
        n_tokens=o["n_tokens"],
        repeats=o["repeats"],
        seed=design.seed,
        method=o["method"],
        steps_per_layer=o["steps_per_layer"],
    )
    figures = ["moments.png", "convergence.png"]
    plot_moments(cmp.predicted, out / "moments.png", title=f"{design.title}: moment ODE")
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
    if design.initial is not None and design.initial.dim >= 2:
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
        "trajectory": trajectory_summary(cmp.predicted),
        "seconds": cmp.stats["seconds"],
    }
    return {"status": "success", "outputs": outputs, "figures": figures}


def _nonneg(x: Any) -> str | None:
    return None if x >= 0 else "must be >= 0"


def _equilibrium_summary(eq: Any) -> dict[str, Any]:
    return {
        "cov": eq.cov,
        "stable": eq.stable,
        "spectral_abscissa": eq.spectral_abscissa,
        "residual": eq.residual,
        "method": eq.method,
        "mean_matrix_eigenvalues_real": np.linalg.eigvals(eq.mean_matrix).real,
        "mean_matrix_eigenvalues_imag": np.linalg.eigvals(eq.mean_matrix).imag,
    }


def _run_analyze(design: Design, out: Path) -> dict[str, Any]:
    from ..analysis.asymptotics import analyze, equilibria, mean_dynamics_ss, regime_figure_data
    from ..plotting.analysis import plot_cone, plot_covariance_eigenvalues

    layer, g0 = design.model, design.initial
    if not isinstance(layer, Layer):
        raise DesignFileError(f"{design.source}: task 'analyze' needs a single [layer]")
    assert g0 is not None
    o = design.options
    regime = analyze(layer, g0, horizon=o["horizon"] or None)
    eqs = equilibria(layer)
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
            "reason": regime.reason,
            "blowup_time": regime.blowup_time,
            "limit_cov": regime.limit_cov,
            "mean_limit": regime.mean_limit,
        },
        "equilibria": {
            "status": eqs.status,
            "success": eqs.success,
            "message": eqs.message,
            "method": eqs.method,
            "list": [_equilibrium_summary(e) for e in eqs],
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
    return {"status": regime.kind, "outputs": outputs, "figures": figures}


def _run_steer(design: Design, out: Path) -> dict[str, Any]:
    from ..control.steering import steer
    from ..model.tokens import simulate_tokens
    from ..plotting.core import plot_token_clouds
    from ..plotting.steering import plot_parameter_norms, plot_steering_moments

    o = design.options
    assert design.initial is not None and design.target is not None and design.T is not None
    if design.model is not None:
        raise DesignFileError(
            f"{design.source}: task 'steer' computes the layers; remove [layer]/[[schedule]]"
        )
    kw: dict[str, Any] = {
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
        tok = simulate_tokens(sched, x0, snapshot_times=snaps, steps_per_layer=8)
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
    return {"status": res.status, "outputs": outputs, "figures": figures}


def _run_design(design: Design, out: Path) -> dict[str, Any]:
    from ..control.design import DesignOptions, design_convergence, design_mean_matching
    from ..plotting.design import plot_design_convergence

    o = design.options
    assert design.target is not None
    fixed: dict[str, Any] = {}
    given = design.raw.get("layer", {})
    lay = design.model
    if lay is not None:
        if not isinstance(lay, Layer) or len(lay.heads) > 1 or lay.ffn is not None:
            raise DesignFileError(
                f"{design.source}: task 'design' takes at most one [layer] with one head whose "
                "given A, B, V or v are kept fixed"
            )
        extra = set(given) - {"A", "B", "V", "v"}
        if extra:
            raise DesignFileError(
                f"{design.source}: 'layer.{sorted(extra)[0]}' cannot be fixed in task 'design' "
                "(only A, B, V, v)"
            )
        if "A" in given:
            fixed["fixed_A"] = lay.A
        if "B" in given:
            fixed["fixed_B"] = lay.heads[0][1]
        if "V" in given or "v" in given:
            fixed["fixed_V"] = given["v"] if "v" in given else lay.heads[0][0]
    res = design_mean_matching(
        design.target.mean,
        design.target.cov,
        rate=o["rate"],
        cov_rate=o["cov_rate"] or None,
        minimum_norm=o["minimum_norm"],
        options=DesignOptions(
            V_structure=o["V_structure"],
            max_condition=o["max_condition"],
            robustness=o["robustness"],
            seed=design.seed,
        ),
        **fixed,
    )
    data = design_convergence(res, n_starts=o["n_starts"], T=o["T"] or None, seed=design.seed)
    plot_design_convergence(
        data.t,
        data.mean_error,
        data.cov_error,
        out / "convergence.png",
        rate=data.rate,
        cov_rate=data.cov_rate,
        title=design.title,
    )
    cert = res.certificate
    rob = res.robustness
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
        "certificate": {
            k: getattr(cert, k)
            for k in (
                "kind",
                "valid",
                "mean_rate",
                "cov_rate",
                "rate",
                "residual",
                "riccati",
                "r_min",
                "uniqueness_gap",
                "message",
            )
        },
        "convergence": {
            "t": data.t,
            "max_final_mean_error": float(np.max(data.mean_error[:, -1])),
            "max_final_cov_error": float(np.max(data.cov_error[:, -1])),
        },
        "stats": dict(res.stats),
    }
    if rob is not None:
        outputs["robustness"] = {
            k: getattr(rob, k)
            for k in (
                "mean_radius",
                "cov_radius",
                "radius",
                "binding",
                "parameter_radius",
                "parameter_stable_fraction",
                "linear_stable_fraction",
                "worst_case_abscissa",
            )
        }
    return {"status": res.status, "outputs": outputs, "figures": ["convergence.png"]}


def _run_filter(design: Design, out: Path) -> dict[str, Any]:
    from ..analysis.filtering import compare_filter, from_kalman
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
    cmp = compare_filter(layer, design.initial, design.T, n_points=o["n_points"])
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
    return {"status": "success", "outputs": outputs, "figures": ["filter.png"]}


def _run_experiment(design: Design, out: Path) -> dict[str, Any]:
    from ..experiments.report import experiment_outputs, run_experiments

    o = design.options
    res = run_experiments(out, n_tokens=o["n_tokens"], seed=design.seed, quick=o["quick"])
    return experiment_outputs(res)


TASKS: dict[str, TaskSpec] = {
    "simulate": TaskSpec(
        run=_run_simulate,
        needs=("initial", "model", "T"),
        options={
            **_INTEGRATOR_OPTIONS,
            "discrete": Option(bool, False, None, "also run the exact discrete-layer recursion"),
            "steps_per_layer": Option(int, 1, _positive, "residual steps per layer (discrete)"),
            "tokens": Option(
                int,
                2000,
                lambda n: None if n >= 0 else "must be >= 0",
                "tokens drawn for the cloud figure (0: none)",
            ),
        },
        summary="integrate the moment ODE",
    ),
    "compare-tokens": TaskSpec(
        run=_run_compare_tokens,
        needs=("initial", "model", "T"),
        options={
            "n_tokens": Option(list, [256, 1024, 4096], _int_list, "token counts N"),
            "repeats": Option(int, 3, _positive, "independent samples per N"),
            "method": Option(str, "rk4", None, "token integrator: rk4, discrete, adaptive"),
            "steps_per_layer": Option(int, 20, _positive, "token steps per layer"),
        },
        summary="token-level Transformer vs moment ODE, error against N",
    ),
    "analyze": TaskSpec(
        run=_run_analyze,
        needs=("initial", "model"),
        options={
            "horizon": Option(float, 0.0, _nonneg, "blow-up search depth (0: automatic)"),
            "plot_T": Option(float, 0.0, _nonneg, "depth shown in the figures (0: automatic)"),
            "n_points": Option(int, 401, _positive, "recorded depths for the figures"),
        },
        summary="regime of a fixed layer: equilibria, stability, exact blow-up",
    ),
    "steer": TaskSpec(
        run=_run_steer,
        needs=("initial", "target", "T"),
        options={
            "mode": Option(str, "full", None, "'full', 'ffn' (V = 0) or 'attention' (A = b = 0)"),
            "objective": Option(str, "kinetic", None, "'kinetic' or 'parameter'"),
            "terminal": Option(str, "exact", None, "'exact', 'bw' or 'kl' (penalty)"),
            "cov_bound": Option(float, 0.0, _nonneg, "bound on ‖Σ(t)‖ (0: none)"),
            "max_iter": Option(int, 500, _positive, "IPOPT iterations"),
            "tokens": Option(int, 2000, _nonneg, "tokens run through the result (0: none)"),
        },
        summary="optimal L-layer steering between Gaussians (CasADi/IPOPT), verified",
    ),
    "design": TaskSpec(
        run=_run_design,
        needs=("target",),
        options={
            "rate": Option(float, 1.0, _positive, "mean convergence rate |v|"),
            "cov_rate": Option(float, 0.0, _nonneg, "covariance rate (0: twice the rate)"),
            "minimum_norm": Option(bool, False, None, "minimum-norm parameters (CasADi)"),
            "V_structure": Option(str, "scalar", None, "'scalar' (V = vI) or 'general'"),
            "max_condition": Option(float, 100.0, _positive, "conditioning bound (CasADi)"),
            "robustness": Option(bool, True, None, "report the distance to instability"),
            "n_starts": Option(int, 5, _positive, "random starts in the convergence figure"),
            "T": Option(float, 0.0, _nonneg, "depth of the convergence figure (0: automatic)"),
        },
        summary="design a stable layer carrying every Gaussian to a target mean/covariance",
    ),
    "filter": TaskSpec(
        run=_run_filter,
        needs=("initial", "T"),
        options={
            "F": Option(list, None, None, "filter drift (instead of [layer])"),
            "H": Option(list, None, None, "observation matrix"),
            "R": Option(list, None, None, "observation noise covariance R_n"),
            "Q": Option(list, None, None, "process noise covariance (optional)"),
            "n_points": Option(int, 101, _positive, "recorded depths"),
        },
        summary="Kalman–Bucy filter vs the corresponding Transformer",
    ),
    "experiment": TaskSpec(
        run=_run_experiment,
        needs=(),
        options={
            "n_tokens": Option(int, 1024, _positive, "Gaussian tokens fed to the encoders"),
            "quick": Option(bool, False, None, "reduced smoke run (MiniLM only, < 60 s)"),
        },
        summary="the paper's evidence on real pretrained models (extra 'experiments')",
    ),
}
