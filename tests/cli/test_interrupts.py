"""Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM during a run: one
line ``gtcontrol: ...`` on stderr, exit 130 (143 for SIGTERM), no traceback, no dask log line,
no C++ abort; a sweep keeps its points, a ``model`` run names the rows it keeps
(docs/designs.md, "Exit statuses and messages"; gtcontrol.cli.main).

Each run is a real ``gtcontrol`` process in a session of its own, signalled when a marker shows
that it is at the moment under test (a stored point, a loaded torch, a stored row)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A sweep of 2,800 points (minutes on two cores): still running when it is signalled.
BIG_SWEEP = (ROOT / "designs" / "sweep.toml").read_text("utf-8").replace("num = 9", "num = 400")


def _start(args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONFAULTHANDLER", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gtcontrol", "run", "-q", *args],
        env=env,
        start_new_session=True,  # a process group of its own: signalled as a terminal does
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _when(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float) -> None:
    """Wait until ``ready()`` (the process still running), at most ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            pytest.fail(f"the run ended (rc={proc.returncode}) before the marker: {err[-2000:]}")
        if time.monotonic() > end:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the marker never appeared")
        time.sleep(0.02)


def _signal(proc: subprocess.Popen[bytes], sig: int, timeout: float = 40.0) -> tuple[int, str]:
    """Send ``sig`` to the run's process group; its exit status and stderr."""
    os.killpg(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the run did not end within {timeout} s of the signal")
    return proc.returncode, err.decode("utf-8", "replace")


def _one_line(err: str, start: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err[-3000:]}"
    assert lines[0].startswith(start), lines[0]
    return lines[0]


def _points(out: Path) -> Callable[[], bool]:
    """A stored point (not a temporary ``.NAME.tmp-…`` file being written)."""
    return lambda: (out / "points").is_dir() and any((out / "points").glob("[0-9a-f]*.parquet"))


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
)
def test_a_signalled_sweep_prints_one_line_and_keeps_its_points(
    tmp_path: Path, sig: int, code: int, word: str
) -> None:
    """B1, B15: the workers, in the same process group, got the Ctrl-C too and each printed a
    KeyboardInterrupt traceback; a SIGTERM ended the run without its line, with
    multiprocessing's 'leaked semaphore objects' warning."""
    design = tmp_path / "sweep.toml"
    design.write_text(BIG_SWEEP, "utf-8")
    out = tmp_path / "out"
    proc = _start([str(design), "-o", str(out)])
    _when(proc, _points(out), 120)
    rc, err = _signal(proc, sig)
    assert rc == code, err[-3000:]
    line = _one_line(err, f"gtcontrol: {word}; ")
    assert "finished point(s) kept in" in line and str(out / "points") in line
    assert any((out / "points").glob("[0-9a-f]*.parquet"))


def _weights_mapped(pid: int) -> Callable[[], bool]:
    """The model's weights are mapped (safetensors): torch and transformers are imported and
    the load, then the forward passes, run in the background thread, in C++."""
    maps = Path(f"/proc/{pid}/maps")

    def ready() -> bool:
        try:
            return ".safetensors" in maps.read_text()
        except OSError:
            return False

    return ready


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
@pytest.mark.parametrize("delay", [0.0, 0.15, 0.3])
def test_ctrl_c_while_a_model_loads_exits_130_not_134(tmp_path: Path, delay: float) -> None:
    """B3: Ctrl-C while the model loaded in a background thread: the interpreter's exit stopped
    that daemon thread inside C++ code, 'terminate called without an active exception', exit
    134 (before the fix: 2 of 7 tries of this moment). The thread is now stopped first."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    text = (ROOT / "designs" / "stabilize.toml").read_text("utf-8")
    design = tmp_path / "stab.toml"
    design.write_text(text.replace("time_limit = 600", "time_limit = 60"), "utf-8")
    proc = _start([str(design), "-o", str(tmp_path / "out")])
    _when(proc, _weights_mapped(proc.pid), 120)
    time.sleep(delay)
    rc, err = _signal(proc, signal.SIGINT)
    assert rc == 130, err[-3000:]
    _one_line(err, "gtcontrol: interrupted; ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stab.toml"]


def _model_design(tmp_path: Path) -> Path:
    """A 4-layer random BERT folder (tests/cli/test_model_map_cli.py) mapped on 2 workers."""
    from test_model_map_cli import _design

    return _design(tmp_path, extra="workers = 2\n")


def test_ctrl_c_during_a_model_map_on_workers_names_the_rows_it_keeps(tmp_path: Path) -> None:
    """B2: Ctrl-C once a row is stored, the map on 2 dask worker processes: dask tracebacks
    and log lines on stderr, and "no output written" while OUT.rows was left. Now one line
    that names the store kept for the rerun."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("distributed")
    design = _model_design(tmp_path)
    out = tmp_path / "out"
    store = tmp_path / "out.rows"
    proc = _start([str(design), "-o", str(out)])
    _when(proc, lambda: any((store / "rows").glob("layer_*.pkl")), 150)
    rc, err = _signal(proc, signal.SIGINT)
    assert rc == 130, err[-3000:]
    line = _one_line(err, "gtcontrol: interrupted; ")
    assert f"kept in {store}" in line
    assert any((store / "rows").glob("layer_*.pkl")) and not out.exists()


@pytest.mark.slow
def test_ctrl_c_as_a_model_map_starts_its_workers_leaves_nothing(tmp_path: Path) -> None:
    """B2: Ctrl-C while the map's worker processes start (before any row): no traceback from
    them, no dask log line, and no OUT.rows left behind a line that says nothing was written."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    design = _model_design(tmp_path)
    out = tmp_path / "out"
    proc = _start([str(design), "-o", str(out)])

    def workers() -> bool:
        try:
            kids = psutil.Process(proc.pid).children()
            return sum("spawn_main" in " ".join(k.cmdline()) for k in kids) >= 1
        except psutil.Error:
            return False

    _when(proc, workers, 150)
    rc, err = _signal(proc, signal.SIGINT)
    assert rc == 130, err[-3000:]
    line = _one_line(err, "gtcontrol: interrupted; ")
    store = tmp_path / "out.rows"
    assert not store.exists() or f"kept in {store}" in line
    assert not out.exists()


def test_a_sweep_interrupted_before_its_first_point_says_nothing_was_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line said "0 finished point(s) kept in OUT/points" while the folder the run had just
    made was removed on the way out."""
    pytest.importorskip("dask.distributed")
    from gtcontrol.cli import main
    from gtcontrol.cli import sweep as sweep_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "_execute", interrupted)
    out = tmp_path / "out"
    assert main(["run", str(ROOT / "designs" / "sweep.toml"), "-o", str(out)]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err == ["gtcontrol: interrupted; no point had finished, no output written"]
    assert not out.exists()
