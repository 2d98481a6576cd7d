"""The ``sweep`` task (issue 15): schema, LocalCluster runs, resume after a crash, an external
dask scheduler, and the output folder rules (docs/sweeps.md)."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import allowed

pytest.importorskip("dask.distributed")
pd = pytest.importorskip("pandas")

from _dask_cluster import dask_cluster as start_dask_cluster  # noqa: E402
from helpers import ROTATION_TABLES  # noqa: E402

from gtcontrol import DesignFileError, Gaussian, Layer, analyze  # noqa: E402
from gtcontrol.cli import main  # noqa: E402
from gtcontrol.cli import sweep as sweep_module  # noqa: E402
from gtcontrol.cli._sweep_points import plan_sweep, point_key, run_point  # noqa: E402
from gtcontrol.cli.schema import parse_design  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: A rotation (A has eigenvalues ±i) with one head V = vI: every regime over (v, A shift).
BASE = 'task = "sweep"\ntitle = "test sweep"\n\n' + ROTATION_TABLES
GRID = """
[sweep]
workers = 2
V_scale = [-1.0, 0.0, 1.0]
A_shift = [-0.5, 0.5]
"""
#: A general V (outside the Riccati class): Newton equilibria and integration, ~0.5 s a point.
GENERAL = BASE.replace("V = 1.0", "V = [[1.0, 0.4], [-0.3, 0.7]]") + (
    "\n[sweep]\nworkers = 2\nV_scale = [-1.5, -1.0, -0.5, 0.5]\nA_shift = [-0.5, 0.5]\n"
)
#: Columns that differ between two runs of the same points.
TIMING = ["seconds"]


def write(tmp_path: Path, text: str, name: str = "d.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text("utf-8"))


def table(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "sweep.parquet")


def stored(out: Path) -> list[Path]:
    """The point files of a sweep folder (not the hidden temporaries of a write in progress)."""
    return [p for p in (out / "points").glob("*.parquet") if not p.name.startswith(".")]


def same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(
        a.drop(columns=TIMING).reset_index(drop=True), b.drop(columns=TIMING).reset_index(drop=True)
    )


# -- the schema ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sweep", "match"),
    [
        ("run = 'analyze'\n", r"\[sweep\] needs at least one grid axis"),
        ("V_scale = 'x'\n", r"'sweep\.V_scale' must be of type"),
        ("V_scale = [1.0, 'x']\n", r"'sweep\.V_scale' must be a non-empty list"),
        ("V_scale = []\n", r"'sweep\.V_scale' must be a non-empty list"),
        ("V_scale = [1.0, 1]\n", r"'sweep\.V_scale' must not repeat a value"),
        ("A_shift = {start = 0, stop = 1}\n", r"'sweep\.A_shift' must be a range"),
        ("A_shift = {start = 0, stop = 1, num = 0}\n", r"'sweep\.A_shift' must have an integer"),
        ("A_shift = {start = 0, stop = 1, num = 3, step = 1}\n", r"unknown key 'step'"),
        ("B_scale = {start = -1, stop = 1, num = 3, log = true}\n", r"'sweep\.B_scale'.*positive"),
        ("cov_scale = [-1.0, 1.0]\n", r"'sweep\.cov_scale' must be >= 0"),
        ("b_scale = [1.0, 2.0]\n", r"'sweep\.b_scale' varies the \[layer\]'s b"),
        ("V_scal = [1.0]\n", r"unknown key 'sweep\.V_scal'"),
        ("run = 'steer'\nV_scale = [1.0]\n", r"'sweep\.run' must be one of"),
        ("run = 'simulate'\nV_scale = [1.0]\n", r"needs \[horizon\] T"),
        ("point_time_limit = 0\nV_scale = [1.0]\n", r"'sweep\.point_time_limit' must be positive"),
        (
            "V_scale = {start = 0, stop = 1, num = 1000}\n"
            "A_shift = {start = 0, stop = 1, num = 101}\n",
            r"101000 points, more than the limit",
        ),
        # a range whose values overflow, or round to the same number (duplicate points)
        ("V_scale = {start = -1e308, stop = 1e308, num = 3}\n", r"'sweep\.V_scale'.*overflow"),
        ("V_scale = {start = 1.0, stop = 1.000000000000001, num = 50}\n", r"would repeat"),
        (
            "B_scale = {start = 1.0, stop = 1.000000000000001, num = 50, log = true}\n",
            r"'sweep\.B_scale'.*would repeat",
        ),
        # integers just below 2**1024 that still round to it (float() overflows)
        (f"V_scale = [{2**1024 - 1}]\n", r"'sweep\.V_scale' must be a non-empty list"),
        (f"V_scale = [1.0]\npoint_time_limit = {2**1024 - 2**970}\n", r"floating-point range"),
    ],
)
def test_schema_names_the_offending_key(sweep: str, match: str) -> None:
    with pytest.raises(DesignFileError, match=match) as info:
        parse_design(BASE + "\n[sweep]\n" + sweep)
    assert "\n" not in str(info.value)


def test_a_top_level_integer_that_rounds_beyond_the_float_range_is_named() -> None:
    with pytest.raises(DesignFileError, match=r"'time_limit' is beyond the floating-point range"):
        parse_design(f"time_limit = {2**1024 - 1}\n" + BASE + GRID)


def test_schema_refuses_a_schedule_and_accepts_ranges() -> None:
    sched = (
        BASE.replace("[layer]", "[[schedule]]") + "[horizon]\nT = 1.0\n[sweep]\nV_scale = [1.0]\n"
    )
    with pytest.raises(DesignFileError, match=r"single \[layer\], not a \[\[schedule\]\]"):
        parse_design(sched)
    d = parse_design(
        BASE
        + "[sweep]\nB_scale = {start = 0.1, stop = 10, num = 3, log = true}\nV_scale = [2, 1]\n"
    )
    plan = plan_sweep(d, deadline=time.time() + 60)
    assert plan.axes == ("B_scale", "V_scale")  # the design's order: the first varies slowest
    np.testing.assert_allclose(plan.values["B_scale"], [0.1, 1.0, 10.0])
    assert [p.params for p in plan][:2] == [
        {"B_scale": 0.1, "V_scale": 2.0},
        {"B_scale": 0.1, "V_scale": 1.0},
    ]


def test_point_keys_cover_the_base_design_and_the_point() -> None:
    plan = plan_sweep(parse_design(BASE + GRID), deadline=0.0)
    keys = [p.key for p in plan]
    assert len(set(keys)) == len(keys) == 6
    # the axis order in the file does not change a point; the base design does
    swapped = GRID.replace(
        "V_scale = [-1.0, 0.0, 1.0]\nA_shift = [-0.5, 0.5]",
        "A_shift = [0.5, -0.5]\nV_scale = [1.0, 0.0, -1.0]",
    )
    assert {p.key for p in plan_sweep(parse_design(BASE + swapped), deadline=0.0)} == set(keys)
    other = BASE.replace("B = [[1.0, 0.2]", "B = [[1.0, 0.3]") + GRID
    assert not {p.key for p in plan_sweep(parse_design(other), deadline=0.0)} & set(keys)
    assert point_key(plan.base, {"V_scale": -0.0}) == point_key(plan.base, {"V_scale": 0.0})


def test_a_failing_point_is_a_row_not_an_exception() -> None:
    d = parse_design(
        BASE.replace("[0.0, 1.0], [-1.0", "[2.0, 1.0], [-1.0") + "[sweep]\nA_scale = [1e308, 1.0]\n"
    )
    bad, good = plan_sweep(d, deadline=time.time() + 60)
    row = run_point(bad)
    assert row["status"] == "failed" and "A" in row["message"] and row["regime"] is None
    assert run_point(good)["status"] == "blowup"
    late = plan_sweep(d, deadline=time.time() - 1).points[1]
    row = run_point(late)
    assert row["status"] == "budget_exhausted" and row["time_limit"] == 0.0


# -- runs on a LocalCluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The 8 general-V points run once on a LocalCluster: (design file, output folder)."""
    root = tmp_path_factory.mktemp("sweep")
    design = write(root, GENERAL)
    out = root / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    return design, out


@pytest.fixture
def finished_copy(finished: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of the finished output folder, for a test that changes or damages it."""
    copy = tmp_path / "copy"
    shutil.copytree(finished[1], copy)
    return copy


def test_local_cluster_writes_the_table_figure_and_result(finished: tuple[Path, Path]) -> None:
    _, out = finished
    df = table(out)
    assert list(df.columns[:2]) == ["V_scale", "A_shift"]
    for col in (
        "point",
        "status",
        "regime",
        "certificate",
        "blowup_time",
        "equilibria",
        "stable_equilibria",
        "message",
        "seconds",
    ):
        assert col in df.columns
    assert len(df) == 8 and df["point"].is_unique
    assert sorted(p.stem for p in (out / "points").glob("*.parquet")) == sorted(df["point"])
    kinds = dict(zip(zip(df["V_scale"], df["A_shift"]), df["regime"]))
    assert kinds[(-1.0, 0.5)] == "converges" and kinds[(-1.0, -0.5)] == "collapses"
    assert kinds[(0.5, 0.5)] == "blowup" and kinds[(0.5, -0.5)] == "blowup"
    # the same answers as gtcontrol.analyze called directly
    A0, B = np.array([[0.0, 1.0], [-1.0, 0.0]]), np.array([[1.0, 0.2], [0.0, 0.6]])
    V0 = np.array([[1.0, 0.4], [-0.3, 0.7]])
    g0 = Gaussian([1.0, -1.0], [[2.0, 0.5], [0.5, 0.3]])
    for v, s in [(-1.0, 0.5), (0.5, -0.5)]:
        direct = analyze(Layer(A=A0 + s * np.eye(2), B=B, V=v * V0), g0)
        row = df[(df["V_scale"] == v) & (df["A_shift"] == s)].iloc[0]
        assert row["regime"] == direct.kind and row["status"] == str(direct.status)
        assert row["blowup_time"] == pytest.approx(direct.blowup_time, rel=1e-12)
    res = result(out)
    for key in (
        "gtcontrol_version",
        "task",
        "title",
        "design",
        "status",
        "summary",
        "inputs",
        "options",
        "outputs",
        "figures",
        "files",
        "seconds",
    ):
        assert key in res
    assert res["task"] == "sweep" and res["status"] == "success"
    summary = res["summary"]
    assert (summary["points"], summary["computed"], summary["skipped"]) == (8, 8, 0)
    assert summary["regimes"] == {"blowup": 2, "collapses": 3, "converges": 3}
    assert res["files"] == sorted(
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
    )
    assert (out / "phase_diagram.png").stat().st_size > 0


def test_rerun_skips_every_point_and_removed_points_are_computed_again(
    finished: tuple[Path, Path], tmp_path: Path
) -> None:
    design, out = finished
    before = table(out)
    t0 = time.perf_counter()
    assert main(["run", str(design), "-o", str(out)]) == 0
    assert time.perf_counter() - t0 < 10  # no cluster is started for a finished sweep
    summary = result(out)["summary"]
    assert (summary["computed"], summary["skipped"]) == (0, 8)
    assert "8 skipped" in summary["message"]
    same_rows(before, table(out))
    # a crash that left half the points: only the missing ones run again
    for path in sorted((out / "points").glob("*.parquet"))[:3]:
        path.unlink()
    (out / "sweep.parquet").unlink()
    (out / "result.json").unlink()
    assert main(["run", str(design), "-o", str(out)]) == 0
    summary = result(out)["summary"]
    assert (summary["computed"], summary["skipped"]) == (3, 5)
    same_rows(before, table(out))


def test_a_changed_design_does_not_reuse_stale_points(finished_copy: Path, tmp_path: Path) -> None:
    copy = finished_copy
    changed = write(
        tmp_path,
        GENERAL.replace("-0.3, 0.7", "-0.3, 0.8").replace("[-1.5, -1.0, -0.5, 0.5]", "[-1.0, 0.5]"),
    )
    assert main(["run", str(changed), "-o", str(copy)]) == 0
    res = result(copy)
    assert (res["summary"]["computed"], res["summary"]["skipped"]) == (4, 0)
    assert res["outputs"]["stale_points_removed"] == 8
    assert len(list((copy / "points").glob("*.parquet"))) == 4


def test_the_time_limit_cuts_the_sweep_short_and_the_next_run_finishes_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    short = write(tmp_path, "time_limit = 0.01\n" + BASE + GRID, "short.toml")
    assert main(["run", str(short), "-o", str(out)]) == 0
    res = result(out)
    assert res["status"] == "budget_exhausted"
    assert res["summary"]["budget_exhausted"] == 6 and res["summary"]["computed"] == 0
    assert "time_limit" in res["summary"]["message"]
    assert set(table(out)["status"]) == {"budget_exhausted"}
    full = write(tmp_path, BASE + GRID, "full.toml")
    assert main(["run", str(full), "-o", str(out)]) == 0
    res = result(out)
    assert res["status"] == "success" and res["summary"]["computed"] == 6


# -- a real kill -9 halfway through, then resume ---------------------------------------------------


def test_resume_after_kill_9_computes_only_the_missing_points(
    finished: tuple[Path, Path], tmp_path: Path
) -> None:
    design = write(tmp_path, GENERAL)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gtcontrol", "run", str(design), "-o", str(out), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not stored(out) and time.monotonic() < deadline:
            assert proc.poll() is None, "the sweep ended before it was killed"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        try:  # its worker processes exit with it; make sure nothing of the group is left
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    done = len(stored(out))
    assert 1 <= done < 8, done
    assert not (out / "result.json").exists()
    assert main(["run", str(design), "-o", str(out)]) == 0
    summary = result(out)["summary"]
    assert (summary["skipped"], summary["computed"]) == (done, 8 - done)
    assert f"{done} skipped" in summary["message"]
    resumed = table(out)
    assert len(resumed) == 8 and resumed["point"].is_unique
    assert len(list((out / "points").glob("*"))) == 8  # no temporaries, no duplicates
    same_rows(table(finished[1]), resumed)  # the table of a clean run of the same design


# -- an existing cluster: a separately started scheduler and worker --------------------------------


@pytest.fixture
def dask_cluster(tmp_path: Path) -> Iterator[str]:
    """A scheduler and one worker started as separate processes; yields the address."""
    with start_dask_cluster(tmp_path) as address:
        yield address


def test_run_on_a_separately_started_scheduler(dask_cluster: str, tmp_path: Path) -> None:
    design = write(tmp_path, BASE + GRID)
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out), "--scheduler", dask_cluster]) == 0
    res = result(out)
    assert res["outputs"]["cluster"] == dask_cluster
    assert res["summary"]["computed"] == 6 and res["status"] == "success"
    assert len(table(out)) == 6


def test_an_unreachable_scheduler_is_one_error_line(tmp_path: Path, capsys) -> None:
    design = write(tmp_path, "time_limit = 2\n" + BASE + GRID)
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out), "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the dask scheduler" in err[0]
    assert not out.exists()


# -- the output folder -----------------------------------------------------------------------------


def test_a_foreign_outdir_is_refused_and_left_alone(
    finished: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    design, done = finished
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["run", str(design), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "did not write" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # the output of another task
    other = tmp_path / "analyze"
    assert main(["run", str(ROOT / "designs" / "analyze.toml"), "-o", str(other), "-q"]) == 0
    listing = sorted(p.name for p in other.iterdir())
    assert main(["run", str(design), "-o", str(other)]) == 2
    assert "task 'analyze'" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == listing
    # a user's file put into a finished sweep's folder
    (done / "points" / "mine.csv").write_text("1,2\n")
    try:
        assert main(["run", str(design), "-o", str(done)]) == 2
        assert "points/mine.csv" in capsys.readouterr().err
    finally:
        (done / "points" / "mine.csv").unlink()


def test_scheduler_option_is_for_sweeps_only(tmp_path: Path, capsys) -> None:
    out = tmp_path / "a"
    code = main(["run", str(ROOT / "designs" / "analyze.toml"), "-o", str(out), "--scheduler", "x"])
    assert code == 2 and "--scheduler is for task 'sweep'" in capsys.readouterr().err
    assert not out.exists()


def test_shipped_sweep_design_has_enough_points() -> None:
    from gtcontrol.cli.schema import load_design

    d = load_design(ROOT / "designs" / "sweep.toml")
    plan = plan_sweep(d, deadline=math.inf)
    assert d.task == "sweep" and len(plan) >= 50 and len(plan.axes) == 2


def test_ctrl_c_keeps_the_finished_points_and_says_so(
    finished: tuple[Path, Path], finished_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    design, copy = finished[0], finished_copy
    n_points = len(list((copy / "points").glob("*.parquet")))

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "_execute", interrupted)
    assert main(["run", str(design), "-o", str(copy)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{n_points} finished point(s) kept in {copy}/points" in err[0]
    assert len(list((copy / "points").glob("*.parquet"))) == n_points


# -- hostile output folders, damaged points, absurd options ----------------------------------------


def test_damaged_and_foreign_point_files_are_computed_again(
    finished: tuple[Path, Path], finished_copy: Path
) -> None:
    (design, out), copy = finished, finished_copy
    first, second = sorted((copy / "points").glob("*.parquet"))[:2]
    first.write_bytes(first.read_bytes()[:300])  # truncated by a crash of the disk
    # a row of another gtcontrol (another schema) under a current key
    pd.DataFrame({"point": [second.stem], "status": ["success"]}).to_parquet(second)
    # a point of another version or design (another key), and a killed run's temporary
    stale = copy / "points" / ("0" * 20 + ".parquet")
    shutil.copy(second, stale)
    (copy / "points" / f".{first.stem}.tmp-999999999-deadbeef.parquet").write_bytes(b"PAR1")
    assert main(["run", str(design), "-o", str(copy), "-q"]) == 0
    res = result(copy)
    assert (res["summary"]["computed"], res["summary"]["skipped"]) == (2, 6)
    assert res["outputs"]["stale_points_removed"] == 1 and not stale.exists()
    assert sorted(p.name for p in (copy / "points").iterdir()) == sorted(
        p.name for p in (out / "points").iterdir()
    )  # no temporaries left
    same_rows(table(out), table(copy))


def test_hostile_output_paths_are_one_line_and_touch_nothing(tmp_path: Path, capsys) -> None:
    design = write(tmp_path, BASE + GRID)
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    blocked = tmp_path / "blocked"
    (blocked / "sweep.parquet").mkdir(parents=True)  # an (empty) directory named like a file
    (tmp_path / "a_file").write_text("keep")
    cases = {
        "loop_a": "a loop of links",
        "blocked": "holds a directory 'sweep.parquet'",
        "a_file": "is not a directory",
        "a_file/sub": "cannot create",
    }
    for name, text in cases.items():
        assert main(["run", str(design), "-o", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0], (name, err)
    assert sorted(p.name for p in blocked.iterdir()) == ["sweep.parquet"]
    assert (tmp_path / "a_file").read_text() == "keep"


@pytest.mark.parametrize(
    ("address", "text"),
    [
        ("foo", "is not a dask scheduler address"),
        ("tcp://localhost:99999", "is not a dask scheduler address"),
        ("inproc://x", "is not a dask scheduler address"),
        ("tls://127.0.0.1:9", "cannot reach the dask scheduler"),  # no TLS configured
    ],
)
def test_a_bad_scheduler_address_is_one_line_and_no_traceback(
    tmp_path: Path, address: str, text: str
) -> None:
    # 4 s: the imports and the plan (1-2 s on a loaded machine) leave time to connect
    design = write(tmp_path, "time_limit = 4\n" + BASE + GRID)
    out = tmp_path / "out"
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "gtcontrol", "run", str(design), "-o", str(out), "-q"]
    proc = subprocess.run(
        [*cmd, "--scheduler", address], capture_output=True, text=True, timeout=60
    )
    # a half-made dask client used to print a traceback at exit after waiting 2 x its timeout
    assert time.perf_counter() - t0 < 20
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and text in lines[0], proc.stderr
    assert not out.exists()


def test_workers_are_capped_by_the_points_and_no_answer_is_not_success(tmp_path: Path) -> None:
    sweep = "\n[sweep]\nworkers = 64\npoint_time_limit = 1e-300\nV_scale = [-1.0, 1.0]\n"
    design = write(tmp_path, BASE + sweep)
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out), "-q"]) == 0
    res = result(out)
    assert res["outputs"]["cluster"] == "local: 2 worker processes"  # not 64 processes
    assert set(table(out)["status"]) == {"budget_exhausted"}
    assert res["status"] == "budget_exhausted"  # every point ran out of its own time
    assert "regimes: none (no point answered)" in res["summary"]["message"]


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([1.0], [0.5]),
        ([-1.0, 1.0, -1.0, 1.0], [-0.5, -0.5, 0.5, 0.5]),
        ([2.0], None),
        ([1e200, 1e308], None),
        ([1e300], None),
        ([1e-320, 1e-310], None),
    ],
)
def test_phase_diagram_of_a_small_or_extreme_grid_draws_without_warnings(
    x: list[float], y: list[float] | None
) -> None:
    from gtcontrol.plotting.sweep import plot_phase_diagram

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # cramped layouts and singular limits used to warn
        ax = plot_phase_diagram(
            x, y, ["blowup"] * len(x), blowup_time=[0.5] * len(x), xlabel="V_scale", title="t"
        )
        ax.figure.savefig(io.BytesIO(), format="png", dpi=40)
    lo, hi = ax.get_xlim()
    assert np.isfinite([lo, hi]).all() and lo < min(x) and max(x) <= hi


# -- points in batches: a small scheduler, every point stored, a large plan built fast


_SWEEP = (
    'task = "sweep"\ntime_limit = 600\n'
    + ROTATION_TABLES
    + """\
[sweep]
run = "analyze"
point_time_limit = 10.0
V_scale = { start = -2.0, stop = 2.0, num = NUM }
A_shift = { start = -1.0, stop = 1.0, num = NUM }
"""
)


def test_batches_keep_the_scheduler_small_and_store_every_point(tmp_path: Path) -> None:
    """Sweeps submit their points in batches: at most 2 × workers at the scheduler, all stored.

    Reproducer: ../shared/hostile-cases/11_sweep_1e4_points.toml.
    """
    dd = pytest.importorskip("dask.distributed")
    pytest.importorskip("pandas")
    from gtcontrol.cli import sweep
    from gtcontrol.cli._sweep_points import batch_size, plan_sweep, run_point
    from gtcontrol.cli._sweep_store import SweepFolder
    from gtcontrol.cli.schema import parse_design

    design = parse_design(_SWEEP.replace("NUM", "12"), source="d.toml")  # 144 points
    plan = plan_sweep(design, deadline=time.time() + 600)
    assert batch_size(len(plan), 2) == 4 and batch_size(10**5, 2) == 256
    folder = SweepFolder(tmp_path / "out")
    folder.points.mkdir(parents=True)
    rows: dict[str, dict[str, Any]] = {}
    written: set[str] = set()
    most, sizes = [0], []
    with dd.Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as c:
        run = sweep._Run(c, folder, plan, rows, written, time.time() + 600, 1.0)
        submit = run._submit

        def counted(*args: Any) -> bool:
            before = run.next
            ok = submit(*args)
            most[0] = max(most[0], len(run.inflight))
            if ok:
                sizes.append(run.next - before)
            return ok

        run._submit = counted  # type: ignore[method-assign]
        computed, lost = run.compute(list(plan))
        assert run.first_stored is not None
    assert (computed, lost) == (144, 0)
    assert most[0] <= 4  # never more than 2 × workers batches at the scheduler
    # one point per batch first (stored as soon as a worker is up), then a ramp to the cap
    assert sizes[:4] == [1, 1, 1, 1] and max(sizes) <= 4 and sum(sizes) == 144
    assert all(b <= 2 * max(sizes[:i] or [1]) for i, b in enumerate(sizes))
    stored = folder.stored()
    assert len(stored) == len(sizes) and sum(len(r or ()) for r in stored.values()) == 144
    direct = {t.key: run_point(t) for t in plan.points[:5]}
    for key, row in direct.items():
        assert rows[key]["regime"] == row["regime"] and rows[key]["status"] == row["status"]


def test_batch_sizes_aim_at_a_second_of_work_after_a_ramp() -> None:
    """Batch sizes double from one point, then hold about a second of measured work.

    Reproducer: ../shared/hostile-cases/11_sweep_1e4_points.toml.
    """
    from gtcontrol.cli._sweep_points import BATCH_SECONDS, BatchSizer

    s = BatchSizer(10**5, 2)
    assert s.next() == 1  # nothing measured yet
    sizes = []
    for _ in range(12):
        n = s.next()
        sizes.append(n)
        s.done(n, 0.01 * n)  # 10 ms a point
    assert sizes[:5] == [1, 2, 4, 8, 16]  # doubling: a few cheap points launch no long batch
    assert sizes[-1] == int(BATCH_SECONDS / 0.01)  # then about a second of work
    slow = BatchSizer(10**5, 2)
    slow.done(1, 30.0)  # a point of 30 s: one point per batch
    assert slow.next() == 1
    assert BatchSizer(8, 2).next() == 1 and BatchSizer(10**5, 64).cap == 97


def test_plan_keys_are_the_point_keys_and_a_large_plan_is_fast() -> None:
    """A 99,856-point plan is built in seconds, its keys those of ``point_key``.

    Reproducer: ../shared/hostile-cases/11_sweep_1e4_points.toml.
    """
    from gtcontrol.cli._sweep_points import plan_sweep, point_key
    from gtcontrol.cli.schema import parse_design

    design = parse_design(_SWEEP.replace("NUM", "316"), source="d.toml")  # 99,856 points
    t0 = time.perf_counter()
    plan = plan_sweep(design, deadline=time.time() + 600)
    assert time.perf_counter() - t0 < 15.0  # 0.6-1.4 s on a loaded 2-core machine
    assert len({t.key for t in plan}) == len(plan) == 316**2
    for task in plan.points[::4999]:
        assert task.key == point_key(plan.base, task.params)
    # the key text is the canonical JSON, also for values whose repr needs care
    base = {"run": "analyze"}
    for params in ({"V_scale": -0.0}, {"V_scale": 5e-324, "A_shift": 1e300}, {"b_scale": 0.1}):
        import hashlib
        import json

        from gtcontrol.cli._sweep_points import KEY_LENGTH, _canonical

        text = json.dumps({"base": _canonical(base), "point": _canonical(params)}, sort_keys=True)
        want = hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]
        assert point_key(base, params) == want


@pytest.mark.slow
def test_a_sweep_of_10_000_points_keeps_its_time_limit(tmp_path: Path) -> None:
    """The full reproducer: 10⁴ points within the design's 15 s, every point in the summary.

    Reproducer: ../shared/hostile-cases/11_sweep_1e4_points.toml.
    """
    pytest.importorskip("dask.distributed")
    from gtcontrol.cli import main

    design = tmp_path / "d.toml"
    design.write_text(_SWEEP.replace("NUM", "100").replace("600", "15"), "utf-8")
    out = tmp_path / "out"
    t0 = time.perf_counter()
    assert main(["run", str(design), "-o", str(out), "-q"]) == 0
    assert time.perf_counter() - t0 <= allowed(15.0)
    res = json.loads((out / "result.json").read_text("utf-8"))
    assert res["summary"]["points"] == 10**4
