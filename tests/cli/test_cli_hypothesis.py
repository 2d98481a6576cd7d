"""Property-based tests of the command line on generated and mutated design files (issue 12).

Every design file, however broken, ends in bounded time with exit 0 (a complete output folder)
or exit 2 with exactly one line on stderr: never a traceback, never a hang, never a partial
output folder or a hidden temporary left behind.
"""

from __future__ import annotations

import json
import random
import signal
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _design_mutations import MUTATIONS, SLOW_TASKS, dumps, make_fast, mutate, shipped_designs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gtcontrol import DesignFileError
from gtcontrol.cli import main
from gtcontrol.cli.schema import parse_design

#: Fast versions of the shipped designs (the slow experiment task is only parsed).
BASES = {
    name: make_fast(doc)
    for name, doc in shipped_designs().items()
    if doc.get("task") not in SLOW_TASKS and doc.get("task") != "steer"
}
#: Tasks only parsed here (steer: CasADi/IPOPT takes seconds; benchmarks/fuzz_designs.py runs it).
PARSE_ONLY = (*SLOW_TASKS, "steer")
#: Seconds one case may take before it counts as a hang.
CASE_LIMIT = 30

SETTINGS = settings(
    max_examples=40,
    deadline=None,  # the alarm below bounds each case; deadlines flake on a shared machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)


class Hang(BaseException):
    """A case ran past :data:`CASE_LIMIT` (a BaseException: ``main`` must not swallow it)."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no exit after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(text: str, root: Path, capsys: pytest.CaptureFixture[str]) -> int:
    """Run ``gtcontrol run`` on ``text`` in-process and check the contract; return the code."""
    root.mkdir()
    design = root / "d.toml"
    design.write_text(text, "utf-8", errors="surrogatepass")
    out = root / "out"
    capsys.readouterr()
    with time_limit(CASE_LIMIT):
        code = main(["run", str(design), "-o", str(out)])
    captured = capsys.readouterr()
    event(f"exit {code}")
    assert "Traceback" not in captured.err
    if code == 0:
        res = json.loads((out / "result.json").read_text("utf-8"))
        assert sorted(res["files"]) == sorted(
            p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
        ), "partial output folder"
        for fig in res["figures"]:
            assert (out / fig).stat().st_size > 0
    else:
        assert code == 2, captured.err
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("gtcontrol: error: "), captured.err
        assert not out.exists(), "a failed run must not write the output folder"
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["d.toml"] + (["out"] if code == 0 else [])
    )
    return code


_counter = iter(range(10**9))


@SETTINGS
@given(
    base=st.sampled_from(sorted(BASES)),
    ops=st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
)
def test_mutated_shipped_designs(tmp_path: Path, capsys, base: str, ops: list[str], seed: int):
    rng = random.Random(seed)
    doc: dict[str, Any] | str = BASES[base]
    for op in ops:
        if isinstance(doc, str):
            break
        doc = mutate(doc, rng, op)
        if op == "task" and isinstance(doc, dict):
            doc = make_fast(doc)  # the new task's options small too
    text = doc if isinstance(doc, str) else dumps(doc)
    try:
        task = tomllib.loads(text).get("task")
    except tomllib.TOMLDecodeError:
        task = None
    if task in PARSE_ONLY:  # a valid experiment runs real models for minutes
        try:
            parse_design(text)
        except DesignFileError as exc:
            assert "\n" not in str(exc)
        return
    run_cli(text, tmp_path / f"case{next(_counter)}", capsys)


_SCALARS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.booleans(),
    st.sampled_from(["nan", "inf", "$x$", "simulate", "analyze", "filter", "design"]),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4), max_leaves=12)
_KEYS = st.sampled_from(
    [
        "task",
        "title",
        "seed",
        "initial",
        "target",
        "layer",
        "horizon",
        "mean",
        "cov",
        "A",
        "B",
        "V",
        "T",
        "n_layers",
        "heads",
        "simulate",
        "bogus",
        "é",
    ]
)
_TABLES = st.dictionaries(_KEYS, _VALUES, max_size=4)


@SETTINGS
@given(
    task=st.sampled_from(["simulate", "compare-tokens", "analyze", "filter", "design", "steer", 7]),
    top=st.dictionaries(_KEYS, st.one_of(_VALUES, _TABLES), max_size=6),
)
def test_generated_design_files(tmp_path: Path, capsys, task: Any, top: dict[str, Any]):
    doc = {"task": task, **{k: v for k, v in top.items() if k != "task"}}
    text = dumps(doc)
    if task in PARSE_ONLY:
        with pytest.raises(DesignFileError):  # a generated steer design is never complete
            parse_design(text)
        return
    run_cli(text, tmp_path / f"gen{next(_counter)}", capsys)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    base=st.sampled_from(sorted(shipped_designs())),
    ops=st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_schema_raises_only_design_file_errors(base: str, ops: list[str], seed: int) -> None:
    rng = random.Random(seed)
    doc: dict[str, Any] | str = shipped_designs()[base]
    for op in ops:
        if isinstance(doc, str):
            break
        doc = mutate(doc, rng, op)
    text = doc if isinstance(doc, str) else dumps(doc)
    with time_limit(CASE_LIMIT):
        try:
            parse_design(text)
        except DesignFileError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 3000
