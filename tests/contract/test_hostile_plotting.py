"""Hostile arguments to the figure functions: refused with one GTControlError naming them.

Before, matplotlib or numpy answered them: a ValueError for a negative figure size, curves of
another length than ``n_tokens`` or no snapshot, an AttributeError for a Gaussian given as a
schedule, an IndexError for a target of another dimension, divide-by-zero RuntimeWarnings for a
token count of 0, and a FileNotFoundError for a figure saved into a missing folder (now
created, as for every output of gtcontrol). Reproducer: s61/args/repro_16.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import refused
from matplotlib.figure import Figure

from gtcontrol import Gaussian, Layer, simulate
from gtcontrol._result_file import OutputError
from gtcontrol.plotting import core, steering

G2 = Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
TRAJ = simulate(Layer(A=-np.eye(2)), G2, T=1.0, n_points=5)
CLOUD = np.random.default_rng(0).standard_normal((20, 2))


def quiet(call: Callable[[], Any]) -> Any:
    """``call()`` with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return call()


@pytest.mark.parametrize("name", ["width", "height"])
@pytest.mark.parametrize("size", [-1.0, 0.0, float("nan"), float("inf"), 1e9, "3", None, True])
def test_new_figure_refuses_a_bad_size(name: str, size: Any) -> None:
    refused(lambda: core.new_figure(**{name: size}), name)


@pytest.mark.parametrize(
    ("n_tokens", "errors", "name"),
    [
        ([10, 20], {"m": [1.0, 0.5, 0.2]}, "errors"),  # one value more than N
        ([0, 20], {"m": [1.0, 0.5]}, "n_tokens"),  # log axis: was divide-by-zero warnings
        ([-10, 20], {"m": [1.0, 0.5]}, "n_tokens"),
        ([], {}, "n_tokens"),
        ([np.nan, 20], {"m": [1.0, 0.5]}, "n_tokens"),
        ("ab", {"m": [1.0, 0.5]}, "n_tokens"),
        ([10, 20], [1.0, 0.5], "errors"),
        ([10, 20], {"m": "ab"}, "errors"),
        ([10, 20], {"m": [1j, 0.5]}, "errors"),
        ([10, 20], {"m": None}, "errors"),
    ],
)
def test_plot_convergence_refuses_bad_data(n_tokens: Any, errors: Any, name: str) -> None:
    refused(lambda: core.plot_convergence(n_tokens, errors), name)


def test_plot_convergence_draws_gaps_quietly() -> None:
    # NaN where not computed, inf where a run overflowed: not drawn, no warning
    ax = quiet(lambda: core.plot_convergence([10, 20, 40], {"a": [np.nan, np.inf, 0.1]}))
    assert ax.get_xscale() == "log"


@pytest.mark.parametrize(
    ("snapshots", "predicted", "name"),
    [
        ([], TRAJ, "snapshots"),
        ("ab", TRAJ, "snapshots"),
        (None, TRAJ, "snapshots"),
        ([(0.0,)], TRAJ, "snapshots[0]"),
        ([(0.0, np.ones((3, 3)))], TRAJ, "snapshots[0]"),
        ([("t", CLOUD)], TRAJ, "snapshots[0]"),
        ([(np.nan, CLOUD)], TRAJ, "snapshots[0]"),
        ([(0.0, "abc")], TRAJ, "snapshots[0]"),
        ([(0.0, CLOUD)], G2, "predicted"),
        (
            [(0.0, CLOUD[:, :1])],
            simulate(Layer(A=[[-1.0]]), Gaussian([0.0], [[1.0]]), 1.0),
            "predicted",
        ),
    ],
)
def test_plot_token_clouds_refuses_bad_snapshots(snapshots: Any, predicted: Any, name: str) -> None:
    refused(lambda: core.plot_token_clouds(snapshots, predicted), name)


def test_plot_token_clouds_takes_many_snapshots_and_overflowed_tokens() -> None:
    overflowed = np.array([[np.inf, 1.0], [np.nan, 0.0], [0.5, 0.5]], dtype=np.float32)
    axes = quiet(lambda: core.plot_token_clouds([(0.0, CLOUD), (1.0, overflowed)] * 100, TRAJ))
    assert len(axes) == 200


@pytest.mark.parametrize("schedule", [G2, TRAJ, None, [Layer(A=-np.eye(2))]])
def test_plot_parameter_norms_refuses_what_is_not_a_schedule(schedule: Any) -> None:
    refused(lambda: steering.plot_parameter_norms(schedule), "schedule")


@pytest.mark.parametrize(
    ("traj", "target", "kw", "name"),
    [
        (TRAJ, Gaussian([0.0], [[1.0]]), {}, "target"),
        (TRAJ, "target", {}, "target"),
        (G2, G2, {}, "traj"),
        (TRAJ, G2, {"breakpoints": "ab"}, "breakpoints"),
        (TRAJ, G2, {"breakpoints": [0.0, np.nan, 1.0]}, "breakpoints"),
    ],
)
@pytest.mark.parametrize("summary", [False, True])
def test_steering_figures_refuse_mismatched_moments(
    traj: Any, target: Any, kw: dict[str, Any], name: str, summary: bool
) -> None:
    if summary:
        lam = np.linalg.eigvalsh(TRAJ.cov)
        refused(lambda: steering.plot_steering_summary(traj, target, lam, **kw), name)
    else:
        refused(lambda: steering.plot_steering_moments(traj, target, **kw), name)


@pytest.mark.parametrize("eigenvalues", [np.ones((3, 2)), "ab", np.ones(5), np.ones((5, 2)) + 1j])
def test_plot_steering_summary_refuses_eigenvalues_of_another_shape(eigenvalues: Any) -> None:
    refused(lambda: steering.plot_steering_summary(TRAJ, G2, eigenvalues), "eigenvalues")


def test_plot_steering_summary_keeps_nan_rows() -> None:
    lam = np.linalg.eigvalsh(TRAJ.cov)
    lam[2] = np.nan
    assert len(quiet(lambda: steering.plot_steering_summary(TRAJ, G2, lam, n_distances=3))) == 3


def test_save_figure_creates_missing_folders(tmp_path: Path) -> None:
    fig = core.new_figure(width=2.0, height=2.0)
    target = tmp_path / "a" / "b" / "figure.png"
    quiet(lambda: core.save_figure(fig, target))
    assert target.read_bytes()[:4] == b"\x89PNG"
    core.plot_moments(TRAJ, tmp_path / "c" / "moments.png")
    assert (tmp_path / "c" / "moments.png").is_file()


@pytest.mark.parametrize(
    ("fig", "path", "name"),
    [
        (TRAJ, "x.png", "fig"),
        (None, "x.png", "fig"),
        ("new", None, "path"),
        ("new", b"x.png", "path"),
        ("new", 3, "path"),
        ("new", "x.xyz", "path"),
    ],
)
def test_save_figure_refuses_what_is_not_a_figure_or_a_path(
    tmp_path: Path, fig: Any, path: Any, name: str
) -> None:
    figure = core.new_figure(width=2.0, height=2.0) if fig == "new" else fig
    where = str(tmp_path / path) if isinstance(path, str) else path
    refused(lambda: core.save_figure(figure, where), name)


@pytest.mark.parametrize("where", ["in_a_file", "nul", "long"])
def test_save_figure_where_the_system_refuses_is_an_output_error(
    tmp_path: Path, where: str
) -> None:
    (tmp_path / "file").write_text("")
    path = {
        "in_a_file": tmp_path / "file" / "x.png",
        "nul": f"{tmp_path}/a\0b.png",
        "long": tmp_path / ("z" * 300 + ".png"),
    }[where]
    figure: Figure = core.new_figure(width=2.0, height=2.0)
    refused(lambda: core.save_figure(figure, path), "path", OutputError)


@pytest.mark.parametrize("n", [0, -1, 1.5, "2"])
def test_panels_refuses_a_bad_count(n: Any) -> None:
    refused(lambda: core.panels(None, n, width=4.0, height=2.0), "n")
