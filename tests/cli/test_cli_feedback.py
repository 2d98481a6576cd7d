"""Terminal feedback and output files of ``gtcontrol`` (issue 15, parts 3 and 5).

Progress bars on a terminal only (a pseudo-terminal here) and never in a pipe or with
``--quiet``; the summary printed at the end of a run; the compact ``result.json`` with its
``summary`` and ``result.npz``; ``gtcontrol designs`` and ``gtcontrol init``.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import pty
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtcontrol._output import NPZ_MIN_SIZE, OutputError, dumps, split_arrays, write_run
from gtcontrol._progress import progress, reporting, reporting_enabled
from gtcontrol._status import Status
from gtcontrol.cli import load_result, main
from gtcontrol.cli.schema import load_design, parse_design
from gtcontrol.cli.specs import SPECS
from gtcontrol.cli.starters import shipped_design_text, shipped_designs, starter
from gtcontrol.cli.summary import format_value, print_summary, summary_rows
from gtcontrol.errors import GTControlError

ROOT = Path(__file__).resolve().parents[2]

#: A design whose run keeps a bar open long enough to be drawn (moments, then 2000 tokens).
SLOWISH = """
task = "simulate"
title = "feedback test"
[initial]
mean = [1.0, -0.5]
cov = [[1.0, 0.3], [0.3, 0.5]]
[layer]
A = [[0.3, -0.6], [0.6, 0.2]]
B = [[1.0, 0.2], [0.2, 0.8]]
V = -1.0
[horizon]
T = 4.0
[simulate]
tokens = 3000
"""

SMALL = SLOWISH.replace("tokens = 3000", "tokens = 0")

#: What a drawn progress bar leaves in the terminal output.
BAR_MARKS = ("━", "tokens, depth", "moments, depth")


def _run_cli(args: list[str], *, stderr_tty: bool, cwd: Path) -> tuple[int, str, str]:
    """``python -m gtcontrol ARGS``; stderr a pseudo-terminal or a pipe; (rc, stdout, stderr)."""
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100")
    env.pop("NO_COLOR", None)
    cmd = [sys.executable, "-m", "gtcontrol", *args]
    if not stderr_tty:
        proc = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, timeout=300, check=False)
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:  # drain the terminal while the child writes (its buffer is small)
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd)
        os.close(slave)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        out, _ = child.communicate(timeout=300)
        reader.join(timeout=10)
    finally:
        os.close(master)
    return child.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- progress
def test_bars_on_a_terminal_not_in_a_pipe_nor_quiet(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SLOWISH)
    rc, out, err = _run_cli(["run", str(design), "-o", "o1"], stderr_tty=True, cwd=tmp_path)
    assert rc == 0, err
    assert any(mark in err for mark in BAR_MARKS), f"no bar drawn: {err[:500]!r}"
    assert "Traceback" not in err
    # stdout is a pipe: plain summary lines, then the 'wrote' line last
    lines = out.splitlines()
    assert lines[-1] == "gtcontrol: wrote o1/result.json"
    assert any(ln.split()[:2] == ["status", "success"] for ln in lines)
    assert "\x1b" not in out

    rc, out, err = _run_cli(["run", str(design), "-o", "o2"], stderr_tty=False, cwd=tmp_path)
    assert rc == 0 and err == "", err
    assert out.splitlines()[-1] == "gtcontrol: wrote o2/result.json"

    rc, out, err = _run_cli(["run", "-q", str(design), "-o", "o3"], stderr_tty=True, cwd=tmp_path)
    assert rc == 0 and not any(mark in err for mark in BAR_MARKS) and "\x1b" not in err
    assert out == "gtcontrol: wrote o3/result.json\n"


def test_progress_is_a_noop_without_reporting() -> None:
    assert not reporting_enabled()
    with progress("nothing", total=1.0) as update:
        update(0.5)  # no display: nothing happens, nothing is printed
    stream = io.StringIO()
    with reporting(enabled=False, stream=stream):
        assert not reporting_enabled()
    assert stream.getvalue() == ""


def test_library_calls_report_inside_a_reporting_block() -> None:
    from gtcontrol import Gaussian, Layer, simulate, simulate_tokens

    layer = Layer(A=[[0.3, -0.6], [0.6, 0.2]], B=np.eye(2), V=-1.0)
    g0 = Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
    stream = io.StringIO()
    with reporting(enabled=True, stream=stream):
        assert reporting_enabled()
        traj = simulate(layer, g0, T=2.0)
        tok = simulate_tokens(layer, g0.sample(64, seed=0), T=1.0, method="rk4")
    assert traj.success and tok.success
    assert not reporting_enabled()


# ---------------------------------------------------------------------------- summary
def test_summary_lines_and_quiet(tmp_path: Path, capsys) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SMALL)
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gtcontrol: feedback test"
    rows = {ln.split()[0]: ln.split(maxsplit=1)[1] for ln in out[1:-1]}
    assert rows["task"] == "simulate" and rows["status"] == "success"
    assert rows["blowup_time"] == "inf" and float(rows["depth"]) == 4.0
    assert rows["files"].startswith(f"{tmp_path / 'o'}/") and "result.json" in rows["files"]
    assert out[-1] == f"gtcontrol: wrote {tmp_path / 'o'}/result.json"
    assert main(["run", "--quiet", str(design), "-o", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out == f"gtcontrol: wrote {tmp_path / 'o'}/result.json\n"


def test_quiet_option_of_run_and_reproduce() -> None:
    from gtcontrol.cli.main import _build_parser

    parser = _build_parser()
    assert parser.parse_args(["reproduce", "-q", "--quick"]).quiet
    assert not parser.parse_args(["reproduce"]).quiet
    assert parser.parse_args(["run", "d.toml", "--quiet"]).quiet


def test_summary_table_on_a_terminal(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SMALL.replace("feedback test", "a [bold] title"))
    assert main(["run", "-q", str(design), "-o", str(tmp_path / "o")]) == 0
    stream = io.StringIO()
    print_summary(tmp_path / "o", rich=True, stream=stream)
    text = stream.getvalue()
    assert "a [bold] title" in text  # shown as it is, not read as rich markup
    assert "│" in text and "simulate" in text and "success" in text
    print_summary(tmp_path / "missing", rich=False, stream=stream)  # nothing, no error


def test_format_value() -> None:
    assert format_value(1.23456789e-7) == "1.235e-07"
    assert format_value(3) == "3" and format_value(False) == "no"
    assert format_value("x" * 500).endswith("…") and len(format_value("x" * 500)) == 160
    files = [".gtcontrol-sweep", "a.png"] + [f"points/{i}.parquet" for i in range(20)]
    files += [f"f{i}.png" for i in range(8)] + ["result.json"]
    summary = {"regimes": {"blowup": 2, "converges": 5}}
    result = {"task": "sweep", "status": "success", "files": files, "summary": summary}
    rows = dict(summary_rows(result, Path("o")))
    assert rows["task"] == "sweep" and rows["regimes"] == "blowup 2, converges 5"
    # a sub-folder is one entry with its count, hidden markers are not listed
    assert rows["files"].startswith("o/ (a.png, points/ (20 files), f0.png")
    assert rows["files"].endswith("f5.png and 3 more)") and ".gtcontrol" not in rows["files"]


# ---------------------------------------------------------------------------- result.json
def test_dumps_is_strict_and_compact() -> None:
    data = {"a": np.array([1.0, np.inf, -np.inf, np.nan]), "m": np.eye(2), "e": [], "o": {}}
    text = dumps(data)
    assert json.loads(text) == {
        "a": [1.0, "inf", "-inf", None],
        "m": [[1.0, 0.0], [0.0, 1.0]],
        "e": [],
        "o": {},
    }
    assert '"a": [1.0, "inf", "-inf", null]' in text
    assert "NaN" not in text and "Infinity" not in text
    assert "[1.0, 0.0]" in text and "[0.0, 1.0]" in text  # a matrix: one row per line


def test_split_arrays() -> None:
    big = np.arange(NPZ_MIN_SIZE + 1, dtype=float)
    doc, arrays = split_arrays(
        {"x": {"y": big, "small": np.ones(3)}, "rows": [[1, 2]] * 600, "mixed": [1, "a"] * 600}
    )
    assert doc["x"]["y"] == {
        "$npz": "result.npz",
        "key": "x/y",
        "shape": [NPZ_MIN_SIZE + 1],
        "dtype": "float64",
    }
    assert isinstance(doc["x"]["small"], np.ndarray)
    assert doc["rows"]["key"] == "rows" and arrays["rows"].shape == (600, 2)
    assert doc["mixed"][:2] == [1, "a"]  # not numbers: stays in the JSON
    assert set(arrays) == {"x/y", "rows"}


def test_result_json_compact_with_summary(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SMALL)
    out = tmp_path / "o"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    text = (out / "result.json").read_text()
    res = json.loads(text)
    # every list of numbers on one line: no line holds a bare number (201 depths × 2: the mean
    # and the covariance eigenvalues are one row per line; before, about 2,600 lines)
    assert not [ln for ln in text.splitlines() if _is_number(ln.strip().rstrip(","))]
    assert '"t": [0.0, ' in text and len(text.splitlines()) < 600
    summary = res["summary"]
    assert summary["task"] == "simulate" and summary["status"] == res["status"] == "success"
    assert summary["blowup_time"] == "inf" and summary["seconds"] > 0
    assert math.isclose(summary["depth"], 4.0)
    assert "result.npz" not in res["files"]  # 201 depths × 2: small enough for the JSON


def test_big_arrays_go_to_result_npz(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SMALL + "n_points = 1200\n")
    out = tmp_path / "o"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    raw = json.loads((out / "result.json").read_text())
    ref = raw["outputs"]["trajectory"]["t"]
    assert ref["$npz"] == "result.npz" and ref["key"] == "outputs/trajectory/t"
    assert "result.npz" in raw["files"] and (out / "result.npz").is_file()
    res = load_result(out)
    t = res["outputs"]["trajectory"]["t"]
    assert isinstance(t, np.ndarray) and t.shape == tuple(ref["shape"]) and t[-1] == 4.0
    assert res["outputs"]["trajectory"]["mean"].shape == (t.size, 2)
    # the npz is listed, so a rerun may replace the folder
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0


def _strict_json(text: str) -> object:
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _write(out: Path, outputs: object) -> Path:
    """``outputs`` through the writer of every task (``write_run``) into ``out``."""
    return write_run(
        out,
        "analyze",
        lambda tmp: {"status": Status.SUCCESS, "outputs": {"data": outputs}, "figures": []},
        title="t",
        source="s",
        inputs={},
        options={},
    )


def _expected(obj: object) -> object:
    """What ``load_result`` gives back for ``obj`` (docs/designs.md): arrays of more than
    NPZ_MIN_SIZE numbers and complex values exactly (from result.npz); in the JSON NaN is
    ``None`` and ±inf is ``"inf"``/``"-inf"``; tuples are lists."""
    if isinstance(obj, (complex, np.complexfloating)):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "c" or (obj.dtype.kind in "iuf" and obj.size > NPZ_MIN_SIZE):
            return obj
        return _expected(obj.tolist())
    if isinstance(obj, dict):
        return {str(k): _expected(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_expected(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf") if math.isinf(x) else x
    return obj.item() if isinstance(obj, np.generic) else obj


def _same(a: object, b: object) -> bool:
    """Equal data: arrays elementwise (NaN equal to NaN, same kind), numbers by value."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype.kind == b.dtype.kind and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (complex, np.complexfloating)):
        return isinstance(b, (complex, np.complexfloating)) and np.array_equal(
            np.asarray(a), np.asarray(b), equal_nan=True
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
_SCALARS = st.one_of(
    _FLOATS,
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.floats(width=32).map(np.float32),
    st.integers(-(2**31), 2**31).map(np.int64),
)


@st.composite
def _arrays(draw: st.DrawFn) -> np.ndarray:
    kind = draw(st.sampled_from(["f", "i", "c", "b", "O", "big", "bigc"]))
    shape = draw(st.sampled_from([(), (0,), (0, 3), (1,), (2, 3), (3, 1, 2)]))
    size = math.prod(shape)
    if kind in ("big", "bigc"):  # past NPZ_MIN_SIZE: result.npz, NaN and inf kept
        arr = np.linspace(-1.0, 1.0, NPZ_MIN_SIZE + draw(st.integers(1, 50)))
        arr[draw(st.integers(0, 10))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        return arr.reshape(-1, 1) * (1 + 2j if kind == "bigc" else 1)
    if kind == "O":
        items = draw(st.lists(_SCALARS, min_size=size, max_size=size))
        arr = np.empty(size, dtype=object)
        arr[:] = items
        return arr.reshape(shape)
    values = {
        "f": _FLOATS,
        "i": st.integers(-(2**62), 2**62),
        "c": st.complex_numbers(allow_nan=True, allow_infinity=True),
        "b": st.booleans(),
    }[kind]
    dtype = {"f": float, "i": np.int64, "c": complex, "b": bool}[kind]
    return np.array(draw(st.lists(values, min_size=size, max_size=size)), dtype=dtype).reshape(
        shape
    )


_KEYS = st.text(max_size=6).filter(lambda k: not k.startswith("$"))
_DATA = st.recursive(
    st.one_of(_SCALARS, _arrays()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),  # ragged lists included
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_DATA)
def test_result_json_round_trip(tmp_path: Path, data: object) -> None:
    out = _write(tmp_path / f"o{next(_COUNTER)}", data)
    _strict_json((out / "result.json").read_text("utf-8"))  # no NaN/Infinity tokens
    back = load_result(out)["outputs"]["data"]
    assert _same(_expected(data), back), (data, back)


_COUNTER = itertools.count()


def test_complex_values_round_trip_through_result_npz(tmp_path: Path) -> None:
    data = {"z": 1 - 2j, "poles": np.array([-1 + 1j, -1 - 1j]), "obj": np.array([1, 2j], "O")}
    out = _write(tmp_path / "o", data)
    raw = _strict_json((out / "result.json").read_text("utf-8"))
    assert raw["outputs"]["data"]["poles"]["dtype"] == "complex128"  # type: ignore[index]
    back = load_result(out)["outputs"]["data"]
    assert back["z"] == 1 - 2j and isinstance(back["z"], np.complexfloating)
    np.testing.assert_array_equal(back["poles"], data["poles"])
    assert back["obj"][0] == 1 and back["obj"][1] == 2j


def test_load_result_refuses_damaged_and_outside_files(tmp_path: Path) -> None:
    good = _write(tmp_path / "good", {"x": np.arange(NPZ_MIN_SIZE + 1.0)})

    def damaged(name: str, change: Callable[[Path], object]) -> Path:
        out = tmp_path / name
        shutil.copytree(good, out)
        change(out)
        return out

    npz = (good / "result.npz").read_bytes()
    buffer = io.BytesIO()
    np.save(buffer, np.ones(3))
    npy_bytes = buffer.getvalue()
    text = (good / "result.json").read_text()
    cases = {
        "truncated": lambda o: (o / "result.npz").write_bytes(npz[: len(npz) // 2]),
        "flipped": lambda o: (o / "result.npz").write_bytes(
            npz[:100] + bytes(b ^ 0xFF for b in npz[100:300]) + npz[300:]
        ),
        "empty": lambda o: (o / "result.npz").write_bytes(b""),
        "npy": lambda o: (o / "result.npz").write_bytes(npy_bytes),  # not an archive
        "outside": lambda o: (o / "result.json").write_text(
            text.replace('"$npz": "result.npz"', '"$npz": "../good/result.npz"')
        ),
        "deep": lambda o: (o / "result.json").write_text("[" * 100_000 + "]" * 100_000),
    }
    for name, change in cases.items():
        with pytest.raises(OutputError, match="output: "):
            load_result(damaged(name, change))


def test_output_folder_is_not_the_working_directory_nor_a_link_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SMALL)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for where in (".", "", "..", str(work)):
        assert main(["run", "-q", str(design), "-o", where]) == 2, where
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is the current directory or a folder above it" in err[0]
    assert list(work.iterdir()) == []  # no temporary left behind
    (work / "a").symlink_to(work / "b")
    (work / "b").symlink_to(work / "a")
    assert main(["run", "-q", str(design), "-o", "a"]) == 2  # was an internal error
    assert "a loop of links" in capsys.readouterr().err
    assert main(["run", "-q", str(design), "-o", "sub/x/.."]) == 0  # normalised: sub
    assert (work / "sub" / "result.json").is_file()


# ---------------------------------------------------------------------------- designs, init
def test_designs_are_package_data() -> None:
    shipped = {d.name: d for d in shipped_designs()}
    files = {f.stem for f in (ROOT / "gtcontrol" / "designs").glob("*.toml")}
    assert set(shipped) == files and "quickstart" in shipped
    assert (ROOT / "designs").resolve() == (ROOT / "gtcontrol" / "designs").resolve()
    assert (ROOT / "designs" / "quickstart.toml").is_file()  # the README's path
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "designs/*.toml" in pyproject["tool"]["setuptools"]["package-data"]["gtcontrol"]
    assert shipped["quickstart"].task == "compare-tokens"


def test_designs_command(capsys) -> None:
    assert main(["designs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(shipped_designs())
    row = next(ln for ln in lines if ln.startswith("quickstart "))
    assert row.split()[1] == "compare-tokens" and "quickstart:" in row
    assert main(["designs", "quickstart"]) == 0
    text = capsys.readouterr().out
    assert text == shipped_design_text("quickstart.toml")
    assert parse_design(text).task == "compare-tokens"
    assert main(["designs", "nope"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no shipped design 'nope'" in err[0] and "quickstart" in err[0]


def test_every_task_has_a_starter_that_loads(tmp_path: Path, capsys) -> None:
    for task in SPECS:
        path = tmp_path / f"{task}.toml"
        assert main(["init", task, "-o", str(path)]) == 0
        assert capsys.readouterr().out.startswith(f"gtcontrol: wrote {path}")
        design = load_design(path)
        assert design.task == task
        text = path.read_text()
        for name in SPECS[task].options:  # every option is listed (set, or commented out)
            assert f"\n{name} = " in text or f"\n# {name} = " in text, (task, name)


def test_init_refuses_overwrite_and_unknown_tasks(tmp_path: Path, capsys) -> None:
    path = tmp_path / "mine.toml"
    path.write_text("precious")
    assert main(["init", "simulate", "-o", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "exists" in err[0] and path.read_text() == "precious"
    assert main(["init", "simulat", "-o", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "unknown task 'simulat'" in err[0]
    assert all(task in err[0] for task in SPECS)
    assert not (tmp_path / "x.toml").exists()
    assert main(["init", "analyze", "-o", "-"]) == 0
    assert capsys.readouterr().out == starter("analyze")
    # a directory, or a file in a missing folder: one line that says so
    assert main(["init", "sweep", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is a directory" in err[0] and "sweep.toml" in err[0]
    assert main(["init", "sweep", "-o", str(tmp_path / "no" / "such" / "x.toml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
    for name in ("", "../x", "/etc/passwd", "ü", "a\nb", "quickstart/../sweep"):
        assert main(["designs", name]) == 2
        assert len(capsys.readouterr().err.splitlines()) == 1


#: Starters run here (the others need the 'experiments'/'sweep' extras or are slow).
CHEAP = ("simulate", "compare-tokens", "analyze", "design", "filter", "steer")


@pytest.mark.parametrize("task", CHEAP)
def test_cheap_starters_run(tmp_path: Path, task: str) -> None:
    path = tmp_path / "d.toml"
    path.write_text(starter(task))
    assert main(["run", "-q", str(path), "-o", str(tmp_path / "o")]) == 0
    res = load_result(tmp_path / "o")
    assert res["status"] == "success", res["summary"]
    assert res["summary"]["task"] == task


# -- load_result refuses what is not a result folder


def _result_folder(tmp_path: Path, ref: dict[str, Any]) -> Path:
    np.savez(tmp_path / "result.npz", x=np.arange(6.0).reshape(2, 3))
    doc = {"gtcontrol_version": "0", "outputs": {"x": {"$npz": "result.npz", **ref}}}
    (tmp_path / "result.json").write_text(json.dumps(doc), "utf-8")
    return tmp_path


@pytest.mark.parametrize("bad", [None, 123, b"out", 1.5, ["out"]])
def test_load_result_refuses_what_is_not_a_path(bad: Any) -> None:
    """``load_result`` of something that is not a path is one GTControlError naming ``outdir``.

    Reproducer: ../shared/hostile-cases/12_load_result_bad_arg.py.
    """
    from gtcontrol.cli import load_result

    with pytest.raises(GTControlError, match="outdir: expected a path"):
        load_result(bad)


def test_load_result_checks_the_declared_shape_and_dtype(tmp_path: Path) -> None:
    """An array whose shape or dtype differs from its declaration in result.json is refused.

    Reproducer: ../shared/hostile-cases/12_load_result_bad_arg.py.
    """
    from gtcontrol.cli import load_result

    good = {"key": "x", "shape": [2, 3], "dtype": "float64"}
    x = load_result(_result_folder(tmp_path, good))["outputs"]["x"]
    assert x.shape == (2, 3)
    for bad, what in [
        ({"key": "x", "shape": [3, 2], "dtype": "float64"}, "shape"),
        ({"key": "x", "shape": "2x3", "dtype": "float64"}, "shape"),
        ({"key": "x", "shape": [2, 3], "dtype": "int8"}, "dtype"),
    ]:
        with pytest.raises(GTControlError, match=f"has {what}"):
            load_result(_result_folder(tmp_path, bad))
