"""Design loader and command line: strict schema, one-line errors, atomic outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gtcontrol import DesignFileError, Layer, Schedule
from gtcontrol.cli import main
from gtcontrol.cli.schema import load_design, parse_design

ROOT = Path(__file__).resolve().parents[2]

BASE = """
task = "simulate"
[initial]
mean = [0.0, 1.0]
cov = [[1.0, 0.0], [0.0, 2.0]]
[layer]
A = [[-0.5, 0.0], [0.0, -0.5]]
B = [[1.0, 0.0], [0.0, 1.0]]
V = -0.5
[horizon]
T = 1.0
"""


def test_every_example_design_parses() -> None:
    files = sorted((ROOT / "designs").glob("*.toml"))
    assert files, "designs/ holds the examples"
    for f in files:
        d = load_design(f)
        assert d.task


def test_parse_fills_defaults_and_builds_the_model() -> None:
    d = parse_design(BASE)
    assert isinstance(d.model, Layer) and d.T == 1.0
    assert d.options["n_points"] == 201 and d.options["discrete"] is False
    np.testing.assert_array_equal(d.model.heads[0][0], -0.5 * np.eye(2))
    sched = parse_design(
        BASE.replace("[layer]", "[[schedule]]") + "[[schedule]]\nA = [[0.0, 1.0], [-1.0, 0.0]]\n"
    )
    assert isinstance(sched.model, Schedule) and sched.model.n_layers == 2


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: "foo = 1\n" + s, "unknown key 'foo'"),
        (lambda s: s + "\nfoo = 1\n", r"unknown key 'horizon\.foo'"),
        (lambda s: s.replace("V = -0.5", "V = -0.5\nC = 1"), r"unknown key 'layer\.C'"),
        (lambda s: s + "\n[simulate]\nbogus = 1\n", r"unknown key 'simulate\.bogus'"),
        (lambda s: s + "\n[simulate]\nn_points = 'many'\n", r"'simulate\.n_points' must be"),
        (lambda s: s + "\n[simulate]\nrtol = -1.0\n", r"'simulate\.rtol' must be positive"),
        (lambda s: s.replace("[0.0, 2.0]]", "[0.0]]"), r"'initial\.cov'"),
        (lambda s: s.replace("mean = [0.0, 1.0]", 'mean = ["a", 1.0]'), r"'initial\.mean'"),
        (lambda s: s.replace("mean = [0.0, 1.0]", "mean = [0.0, 1.0, 2.0]"), r"initial"),
        (lambda s: s.replace("[0.0, 2.0]]", "[0.0, -2.0]]"), "positive semi-definite"),
        (lambda s: s.replace("B = [[1.0, 0.0], [0.0, 1.0]]", "B = [[1.0]]"), "B"),
        (lambda s: s.replace("T = 1.0", "T = 0.0"), r"'horizon\.T' must be positive"),
        (lambda s: s.replace('task = "simulate"', 'task = "fly"'), "task 'fly'"),
        (lambda s: s.replace("[initial]", "[initialx]"), "unknown key 'initialx'"),
        (lambda s: s.replace("T = 1.0", "n_layers = 0"), r"'horizon\.n_layers' must be a positive"),
        (lambda s: s.replace("A = [[-0.5", "A = [[nan"), r"'layer\.A'"),
        (lambda s: s.replace("[horizon]\nT = 1.0", ""), r"needs \[horizon\] T"),
        (lambda s: s + "\n[[schedule]]\nA = [[1.0, 0.0], [0.0, 1.0]]\n", "not both"),
        (lambda s: s.replace("= [[1.0, 0.0], [0.0, 1.0]]", "= [[1.0, 0.0], [0.0]]"), "layer.B"),
        (lambda s: "seed = -3\n" + s, "seed"),
        (lambda s: s + "\n[[[", "invalid TOML"),
    ],
)
def test_schema_errors_name_the_key(edit, match) -> None:
    with pytest.raises(DesignFileError, match=match) as info:
        parse_design(edit(BASE))
    assert "\n" not in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(DesignFileError, match="not found"):
        load_design("does/not/exist.toml")


def test_cli_run_writes_result_and_figures(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ndiscrete = true\nsteps_per_layer = 5\n")
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    res = json.loads((out / "result.json").read_text())
    assert res["task"] == "simulate" and res["status"] == "success"
    assert res["inputs"]["layer"]["V"] == -0.5
    assert res["outputs"]["trajectory"]["blowup_time"] == "inf"
    for fig in res["figures"]:
        assert (out / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.toml", "out"]


def test_cli_error_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    design = tmp_path / "bad.toml"
    design.write_text("unknown = 3\n" + BASE)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "gtcontrol", "run", str(design), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown key 'unknown'" in lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_cli_failure_during_run_keeps_previous_output(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(BASE)
    out = tmp_path / "out"
    assert main(["run", str(good), "-o", str(out)]) == 0
    before = (out / "result.json").read_bytes()
    # a blow-up inside compare-tokens is a run-time refusal: previous output must survive
    bad = tmp_path / "blow.toml"
    bad.write_text(
        BASE.replace('task = "simulate"', 'task = "compare-tokens"')
        .replace("V = -0.5", "V = 2.0")
        .replace("T = 1.0", "T = 5.0")
    )
    assert main(["run", str(bad), "-o", str(out)]) == 2
    assert (out / "result.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blow.toml", "good.toml", "out"]


def test_cli_refuses_to_overwrite_foreign_directory(tmp_path: Path, capsys) -> None:
    design = tmp_path / "d.toml"
    design.write_text(BASE)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    assert main(["run", str(design), "-o", str(foreign)]) == 2
    assert (foreign / "thesis.tex").read_text() == "precious"
    err = capsys.readouterr().err
    assert "did not write" in err and "'thesis.tex'" in err and len(err.splitlines()) == 1


def test_cli_help_and_usage_errors() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gtcontrol", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and "compare-tokens" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "gtcontrol", "run"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_docs_cover_every_task_and_option() -> None:
    from gtcontrol.cli.tasks import TASKS

    doc = (ROOT / "docs" / "designs.md").read_text()
    for name, spec in TASKS.items():
        assert f"### `{name}`" in doc, name
        for opt in spec.options:
            assert f"| `{opt}` |" in doc, f"{name}.{opt}"
    examples = {load_design(f).task for f in (ROOT / "designs").glob("*.toml")}
    assert examples == set(TASKS), "designs/ holds one example per task"


def test_cli_compare_tokens_report(tmp_path: Path) -> None:
    text = (ROOT / "designs" / "quickstart.toml").read_text()
    text = text.replace("n_tokens = [256, 1024, 4096]", "n_tokens = [64, 256]")
    text = text.replace("repeats = 3", "repeats = 1").replace(
        "steps_per_layer = 12", "steps_per_layer = 4"
    )
    design = tmp_path / "qs.toml"
    design.write_text(text)
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    res = json.loads((out / "result.json").read_text())
    assert res["task"] == "compare-tokens" and res["status"] == "success"
    assert [r["n_tokens"] for r in res["outputs"]["table"]] == [64, 256]
    assert set(res["outputs"]["slopes"]) == {"mean_error", "cov_error", "bures_wasserstein"}
    assert set(res["figures"]) == {"moments.png", "convergence.png", "token_clouds.png"}
    for fig in res["figures"]:
        assert (out / fig).stat().st_size > 1000


def test_cli_simulate_noisy_layer_and_blowup(tmp_path: Path) -> None:
    noisy = BASE.replace("V = -0.5", "V = -0.5\nnoise = [[0.3, 0.0], [0.0, 0.2]]")
    noisy += "\n[simulate]\ntokens = 300\n"
    design = tmp_path / "noisy.toml"
    design.write_text(noisy)
    assert main(["run", str(design), "-o", str(tmp_path / "n")]) == 0
    res = json.loads((tmp_path / "n" / "result.json").read_text())
    assert "token_clouds.png" in res["figures"]
    blow = BASE.replace("V = -0.5", "V = 1.0").replace("T = 1.0", "T = 3.0")
    design = tmp_path / "blow.toml"
    design.write_text(blow + "\n[simulate]\ntokens = 300\n")
    assert main(["run", str(design), "-o", str(tmp_path / "b")]) == 0
    res = json.loads((tmp_path / "b" / "result.json").read_text())
    assert res["status"] == "blowup"
    # A = -I/2, heads V = I, B = I: scalar per eigen-direction, dσ/dt = -σ + 2σ², σ0 = 2
    t_star = np.log(1 + (-0.5) / (1.0 * 2.0)) / (2 * -0.5)
    assert res["outputs"]["trajectory"]["blowup_time"] == pytest.approx(t_star, rel=1e-9)
    assert "token_clouds.png" in res["figures"]


def test_cli_analyze_blowup_matches_closed_form(tmp_path: Path) -> None:
    # A = 0, V = I, B = I (same sign): T* = 1/λ_max(Σ0^{1/2}(−R)Σ0^{1/2}) with −R = 2I
    text = """
task = "analyze"
[initial]
mean = [0.0, 0.0, 1.0]
cov = [[1.0, 0.2, 0.0], [0.2, 0.5, 0.0], [0.0, 0.0, 0.25]]
[layer]
B = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
V = 1.0
"""
    design = tmp_path / "an.toml"
    design.write_text(text)
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "result.json").read_text())
    s0 = np.array([[1.0, 0.2, 0.0], [0.2, 0.5, 0.0], [0.0, 0.0, 0.25]])
    t_star = 1.0 / (2.0 * np.max(np.linalg.eigvalsh(s0)))
    assert res["status"] == "blowup"
    assert res["outputs"]["regime"]["blowup_time"] == pytest.approx(t_star, rel=1e-10)
    assert res["figures"] == ["covariance_eigenvalues.png"]
    converging = json.loads(
        (main(["run", str(ROOT / "designs" / "analyze.toml"), "-o", str(tmp_path / "c")]) == 0)
        and (tmp_path / "c" / "result.json").read_text()
    )
    # the run's status is the result protocol's; the regime kind is in the outputs
    assert converging["status"] == "success"
    assert converging["outputs"]["regime"]["kind"] == "converges"
    poles = np.array(converging["outputs"]["mean_dynamics"]["poles_real"])
    np.testing.assert_allclose(poles, -0.8, rtol=1e-9)  # real parts equal v (docs/theory.md §3–5)


def test_cli_experiment_task_refuses_bad_options(tmp_path: Path) -> None:
    design = tmp_path / "p.toml"
    design.write_text('task = "experiment"\n[experiment]\nquick = "yes"\n')
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


def test_cli_design_keeps_fixed_b_and_certifies(tmp_path: Path) -> None:
    assert main(["run", str(ROOT / "designs" / "design.toml"), "-o", str(tmp_path / "d")]) == 0
    res = json.loads((tmp_path / "d" / "result.json").read_text())
    out = res["outputs"]
    assert out["success"] and out["certificate"]["success"] and out["fixed"] == ["B"]
    fixed_b = load_design(ROOT / "designs" / "design.toml").raw["layer"]["B"]
    assert out["layer"]["B"] == fixed_b  # bit-identical after the JSON round trip
    # the designed layer, read back as a design, has the target as its equilibrium
    target = load_design(ROOT / "designs" / "design.toml").target
    back = parse_design(
        'task = "simulate"\n[layer]\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in out["layer"].items())
        + f"[initial]\nmean = {json.dumps(target.mean.tolist())}\n"
        + f"cov = {json.dumps(target.cov.tolist())}\n[horizon]\nT = 1.0\n"
    )
    from gtcontrol import moment_field

    dm, ds = moment_field(back.model, target.mean, target.cov)
    assert np.linalg.norm(dm) < 1e-9 and np.linalg.norm(ds) < 1e-9
    # an infeasible request (indefinite fixed B) fails with one line that names it
    bad = tmp_path / "bad.toml"
    bad.write_text(
        (ROOT / "designs" / "design.toml")
        .read_text()
        .replace(
            "B = [[1.0, 0.2, 0.0], [0.1, 0.8, 0.0], [0.0, 0.0, 0.6]]",
            "B = [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0]]",
        )
    )
    assert main(["run", str(bad), "-o", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_cli_design_keeps_the_softmax_healthy_and_certifies_on_tokens(tmp_path: Path) -> None:
    """[initial], [horizon] T, min_ess and token_check reach design_mean_matching."""
    text = (
        'task = "design"\nseed = 0\n[target]\nmean = [1.0, -0.5]\n'
        "cov = [[1.0, 0.3], [0.3, 0.8]]\n[initial]\nmean = [0.0, 0.0]\n"
        "cov = [[1.0, 0.0], [0.0, 1.0]]\n[horizon]\nT = 6.0\n[design]\nn_starts = 2\n"
    )
    (tmp_path / "d.toml").write_text(text + "token_check = 256\n")
    assert main(["run", str(tmp_path / "d.toml"), "-o", str(tmp_path / "d")]) == 0
    res = json.loads((tmp_path / "d" / "result.json").read_text())
    ess, cert = res["outputs"]["ess"], res["outputs"]["token_certificate"]
    assert ess["status"] == "success" and ess["min_ess"] == 0.5
    assert np.min(ess["worst"]) >= 0.5 and res["summary"]["predicted_min_ess"] >= 0.5
    assert (
        cert["success"] and cert["n_tokens"] == 256 and res["summary"]["token_certificate_success"]
    )
    # without the token bound the heads keep the closed form's scale, and no tokens run
    (tmp_path / "c.toml").write_text(text + "min_ess = 0.0\n")
    assert main(["run", str(tmp_path / "c.toml"), "-o", str(tmp_path / "c")]) == 0
    out = json.loads((tmp_path / "c" / "result.json").read_text())["outputs"]
    assert "token_certificate" not in out
    assert out.get("ess") is None or out["ess"]["scale"] == 1.0
    (tmp_path / "bad.toml").write_text(text + "min_ess = 1.5\n")
    assert main(["run", str(tmp_path / "bad.toml"), "-o", str(tmp_path / "b")]) == 2


def test_cli_filter_matches_python_control(tmp_path: Path) -> None:
    assert main(["run", str(ROOT / "designs" / "filter.toml"), "-o", str(tmp_path / "f")]) == 0
    out = json.loads((tmp_path / "f" / "result.json").read_text())["outputs"]
    assert out["max_rel_diff"] < 1e-9 and out["steady_rel_diff"] < 1e-9
    import control

    d = load_design(ROOT / "designs" / "filter.toml").options
    p, _, _ = control.care(
        np.array(d["F"]).T, np.array(d["H"]).T, np.array(d["Q"]), np.array(d["R"])
    )
    np.testing.assert_allclose(out["steady_care"]["cov"], p, rtol=1e-9)
    np.testing.assert_allclose(out["equilibrium"], p, rtol=1e-8)


def test_cli_steer_small_problem_and_rank_refusal(tmp_path: Path) -> None:
    text = (ROOT / "designs" / "steer.toml").read_text()
    design = tmp_path / "s.toml"
    design.write_text(
        text.replace("n_layers = 10", "n_layers = 5").replace("tokens = 2000", "tokens = 200")
    )
    assert main(["run", str(design), "-o", str(tmp_path / "s")]) == 0
    res = json.loads((tmp_path / "s" / "result.json").read_text())
    out = res["outputs"]
    assert out["success"] and out["terminal_error"] < 1e-6
    assert out["kinetic_energy"] >= out["lower_bound"] * (1 - 1e-9)
    assert out["gap"] < 1e-2 and len(out["controls"]["layers"]) == 5
    # the controls in result.json, rebuilt as a schedule, reach the target
    from gtcontrol import Layer, Schedule, simulate

    lays = [Layer(e["A"], e["B"], e["V"], e["b"]) for e in out["controls"]["layers"]]
    d = load_design(design)
    final = simulate(Schedule(lays, out["controls"]["T"]), d.initial).final
    assert final.bures_wasserstein(d.target) < 1e-6
    # a rank change is refused: one line that says rank, exit 2, nothing written
    bad = tmp_path / "rank.toml"
    bad.write_text(
        text.replace(
            "cov = [[0.5, 0.2, 0.0], [0.2, 1.5, 0.3], [0.0, 0.3, 0.8]]",
            "cov = [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.5]]",
        )
    )
    assert load_design(bad).target.rank == 2
    proc = subprocess.run(
        [sys.executable, "-m", "gtcontrol", "run", str(bad), "-o", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "rank" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def _cli_imports() -> dict[str, set[str]]:
    """``gtcontrol.cli`` module -> the cli modules it imports (module or function level)."""
    import ast

    cli = ROOT / "gtcontrol" / "cli"
    graph: dict[str, set[str]] = {}
    for path in cli.glob("*.py"):
        name = path.stem
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    targets.add(node.module.split(".")[0])
                else:
                    targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "gtcontrol.cli."
            ):
                targets.add(node.module.split(".")[2])
        graph[name] = targets - {name}
    return graph


def test_cli_modules_import_each_other_without_cycles() -> None:
    graph = _cli_imports()
    assert graph["specs"] == set(), "specs imports no runner and no other cli module"
    assert graph["schema"] == {"specs"}
    assert "main" not in graph["tasks"] and "tasks" not in graph["schema"]
    assert "tasks" in graph["main"]

    def reaches(src: str, dst: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(t == dst or (t not in seen and reaches(t, dst, seen | {t})) for t in graph[src])

    cyclic = [m for m in graph if reaches(m, m)]
    assert not cyclic, f"import cycles through {cyclic}"


def test_task_registry_pairs_every_spec_with_a_runner() -> None:
    from gtcontrol.cli.specs import SPECS
    from gtcontrol.cli.tasks import TASKS

    assert set(TASKS) == set(SPECS)
    for name, task in TASKS.items():
        assert task.spec is SPECS[name] and callable(task.run)
        assert (
            task.options is SPECS[name].options and task.summary and task.needs == SPECS[name].needs
        )


def test_result_status_is_a_status_value(tmp_path: Path) -> None:
    from gtcontrol import Status

    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "result.json").read_text())
    assert res["status"] in {s.value for s in Status}
    traj = res["outputs"]["trajectory"]
    assert traj["status"] == "success" and traj["success"] is True
    assert traj["message"] == "integrated to the horizon"


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ("n_points = 10000000", r"'simulate\.n_points' must be at most 1000000"),
        ("steps_per_layer = 0", r"'simulate\.steps_per_layer' must be positive"),
    ],
)
def test_absurd_task_options_are_refused(option: str, match: str) -> None:
    with pytest.raises(DesignFileError, match=match):
        parse_design(BASE + f"\n[simulate]\n{option}\n")
    with pytest.raises(DesignFileError, match=r"'horizon\.n_layers' must be a positive integer"):
        parse_design(BASE.replace("T = 1.0", "T = 1.0\nn_layers = 10000000"))


# --- issue 12: outputs that lose nothing, errors that never hang or trace back ----------------


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_replacing_an_output_never_leaves_it_absent(tmp_path: Path, monkeypatch) -> None:
    import os
    import shutil

    from gtcontrol import _output

    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    absent: list[str] = []

    def watch(name: str, real):  # check OUTDIR around every rename and removal of the swap
        def wrapped(*args, **kwargs):
            result = real(*args, **kwargs)
            if not (out / "result.json").is_file():
                absent.append(name)
            return result

        return wrapped

    monkeypatch.setattr(_output.os, "replace", watch("replace", os.replace))
    monkeypatch.setattr(_output.os, "rename", watch("rename", os.rename))
    monkeypatch.setattr(_output.shutil, "rmtree", watch("rmtree", shutil.rmtree))
    for _ in range(3):
        assert main(["run", str(design), "-o", str(out)]) == 0
    assert absent == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.toml", "out"]


def test_output_folders_follow_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    old = os.umask(0o022)
    try:
        assert main(["run", str(design), "-o", str(tmp_path / "a" / "out")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "out").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o755


def test_rerun_never_deletes_user_files(tmp_path: Path, capsys) -> None:
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["run", str(design), "-o", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "'notes.txt'" in line and "did not write" in line
    assert (out / "notes.txt").read_text() == "mine"
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "notes.txt"} == before
    # the files of a run are listed in result.json: a rerun replaces exactly those
    (out / "notes.txt").unlink()
    assert main(["run", str(design), "-o", str(out)]) == 0
    listed = json.loads((out / "result.json").read_text())["files"]
    assert sorted(listed) == sorted(p.name for p in out.iterdir())


def test_stale_temporaries_of_dead_runs_are_removed(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".out.tmp-{dead_pid}-0badcafe"
    stale.mkdir()
    (stale / "moments.png").write_bytes(b"half")
    (tmp_path / f".out.old-{dead_pid}-12345678").mkdir()
    alive = tmp_path / ".out.tmp-1-00000000"  # pid 1 is alive: another run may own it
    alive.mkdir()
    # names a run never writes (no 8 random hex digits) are the user's: a dated backup stays
    backups = [tmp_path / ".out.old-20240101", tmp_path / f".out.tmp-{dead_pid}"]
    for folder in backups:
        folder.mkdir()
        (folder / "result_backup.json").write_text("mine")
    assert main(["run", str(design), "-o", str(tmp_path / "out")]) == 0
    kept = sorted([alive.name, "d.toml", "out", *(b.name for b in backups)])
    assert sorted(p.name for p in tmp_path.iterdir()) == kept
    assert all((b / "result_backup.json").read_text() == "mine" for b in backups)


@pytest.mark.parametrize("mode", [0o700, 0o2770])
def test_a_prepared_output_folder_keeps_its_permissions(tmp_path: Path, mode: int) -> None:
    """A private (0700) or group-shared (setgid) folder the user prepared was swapped for one
    made with the umask (0755): private results became readable by everyone."""
    import os
    import stat

    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, mode)
    for _ in range(2):  # the empty folder, then the previous output
        assert main(["run", str(design), "-o", str(out), "-q"]) == 0
        assert stat.S_IMODE(out.stat().st_mode) == mode


def test_a_write_protected_output_is_refused_not_replaced(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """It was exchanged away and its copy left in a hidden folder that could not be removed.
    Root may write anywhere (``access`` says so, as ``rm -r`` asks it): for a run as root the
    folder's answer is taken from its mode, as another user would get it."""
    import os
    import stat

    from gtcontrol import _output

    real_access = os.access

    def access(path: Any, mode: int, **kw: Any) -> bool:
        if os.geteuid() == 0 and mode == os.W_OK and Path(path) == out:
            return bool(os.stat(path).st_mode & stat.S_IWUSR)
        return real_access(path, mode, **kw)

    monkeypatch.setattr(_output.os, "access", access)
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out), "-q"]) == 0
    os.chmod(out, 0o555)
    try:
        capsys.readouterr()
        assert main(["run", str(design), "-o", str(out), "-q"]) == 2
        assert "write-protected" in _one_error_line(capsys.readouterr().err)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d.toml", "out"]
    finally:
        os.chmod(out, 0o755)
    assert main(["run", str(design), "-o", str(out), "-q"]) == 0  # writable again: replaced


@pytest.mark.parametrize(("stdout", "code"), [("closed pipe", 0), ("/dev/full", 2)])
def test_a_standard_output_that_cannot_be_written_gets_no_traceback(
    tmp_path: Path, stdout: str, code: int
) -> None:
    """``| head`` that has left, or a full disk: the output is written either way; a reader
    that left ends the run quietly, a full disk gets one line (was a traceback, status 1)."""
    import os

    if stdout == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    cmd = [sys.executable, "-m", "gtcontrol", "run", str(design), "-o", str(tmp_path / "out")]
    if stdout == "/dev/full":
        with open("/dev/full", "w") as sink:
            proc = subprocess.run(cmd, stdout=sink, stderr=subprocess.PIPE, text=True)
        err = proc.stderr
    else:
        read, write = os.pipe()
        os.close(read)  # the reader has left before the summary is written
        try:
            proc = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True)
        finally:
            os.close(write)
        err = proc.stderr
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == (code != 0)
    assert (tmp_path / "out" / "result.json").exists()


_SLOW_RUN = """
import os, sys, time, shutil
from gtcontrol import _output
from gtcontrol.cli import main, tasks

moment, marker = sys.argv[1], sys.argv[2]

def pause():
    open(marker, "w").close()
    time.sleep(60)

real = tasks.TASKS["simulate"].run
def slow(design, out):
    if moment == "start":
        pause()
    res = real(design, out)
    if moment == "figures":
        pause()
    return res
tasks.TASKS["simulate"] = tasks.Task(tasks.TASKS["simulate"].spec, slow)

real_rmtree = shutil.rmtree
class _Shutil:
    @staticmethod
    def rmtree(path, ignore_errors=False):
        if moment == "swapped":
            pause()
        real_rmtree(path, ignore_errors=ignore_errors)
_output.shutil = _Shutil
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("moment", ["start", "figures", "swapped"])
def test_kill_9_keeps_the_output_and_the_next_run_cleans_up(tmp_path: Path, moment) -> None:
    import os
    import signal
    import time

    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out)]) == 0
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_RUN, moment, str(marker), "run", str(design), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the slow run ended before the pause"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    marker.unlink()
    # OUTDIR holds a complete output (the previous one, or after the swap the new one)
    res = json.loads((out / "result.json").read_text())
    assert sorted(res["files"]) == sorted(p.name for p in out.iterdir())
    assert any(p.name.startswith(".out.") for p in tmp_path.iterdir()), "the kill left a temp"
    assert main(["run", str(design), "-o", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.toml", "out"]


def test_long_output_names(tmp_path: Path, capsys) -> None:
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    fits = tmp_path / ("o" * 250)  # fits NAME_MAX, but a '.NAME.tmp-…' sibling would not
    assert main(["run", str(design), "-o", str(fits)]) == 0
    assert (fits / "result.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["d.toml", fits.name])
    capsys.readouterr()
    for bad in (tmp_path / ("o" * 300), tmp_path.joinpath(*["p" * 200] * 25)):
        assert main(["run", str(design), "-o", str(bad)]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "too long" in line and len(line) < 400
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["d.toml", fits.name])


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge", "binary"])
def test_design_file_that_is_no_regular_text_file(tmp_path: Path, kind: str) -> None:
    import os

    path = tmp_path / "d.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        path.write_text(BASE + "#" * (11 * 2**20) + "\n")
    else:
        path.write_bytes(b"\xff\xfe" + BASE.encode())
    proc = subprocess.run(
        [sys.executable, "-m", "gtcontrol", "run", str(path), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,  # a FIFO used to block forever, /dev/zero to exhaust the memory
    )
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    expected = {
        "fifo": "not a regular file",
        "dev-zero": "not a regular file",
        "directory": "directory",
        "huge": "bytes",
        "binary": "UTF-8",
    }[kind]
    assert expected in line
    assert not (tmp_path / "out").exists()


def test_titles_with_mathtext_specials_are_drawn_as_text(tmp_path: Path) -> None:
    # even dollar counts: matplotlib would parse '\frac{x' and '^_' as (invalid) mathtext
    text = 'title = "costs $\\\\frac{x$ and $^_$ {} % # & ~"\n' + BASE
    text += "\n[simulate]\ntokens = 50\ndiscrete = true\n"
    design = tmp_path / "d.toml"
    design.write_text(text)
    assert parse_design(text).title == "costs $\\frac{x$ and $^_$ {} % # & ~"
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == 0
    filt = (ROOT / "designs" / "filter.toml").read_text()
    filt = filt.replace('title = "Kalman', 'title = "$\\\\sqrt{$ $x^$ Kalman')
    design.write_text(filt.replace("T = 5.0", "T = 0.5"))
    assert main(["run", str(design), "-o", str(tmp_path / "f")]) == 0


@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (DesignFileError("bad\nkey"), 2, "gtcontrol: error: bad key"),
        (OSError(28, "No space left on device"), 2, "No space left on device"),
        (MemoryError(), 2, "out of memory"),
        (RecursionError("deep"), 2, "nested too deeply"),
        (ZeroDivisionError("boom"), 3, "internal error: ZeroDivisionError: boom"),
        (ValueError("x\ny"), 3, "internal error: ValueError: x y"),
    ],
)
def test_every_exception_is_one_line(tmp_path: Path, monkeypatch, capsys, exc, code, words):
    from gtcontrol.cli import tasks

    def boom(design, out):
        raise exc

    monkeypatch.setitem(tasks.TASKS, "simulate", tasks.Task(tasks.TASKS["simulate"].spec, boom))
    design = tmp_path / "d.toml"
    design.write_text(BASE)
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == code
    captured = capsys.readouterr()
    assert words in _one_error_line(captured.err) and captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.toml"]


def test_compare_tokens_adaptive_runs(tmp_path: Path) -> None:
    text = BASE.replace('task = "simulate"', 'task = "compare-tokens"').replace(
        "T = 1.0", "T = 0.3"
    )
    design = tmp_path / "d.toml"
    design.write_text(
        text + '\n[compare-tokens]\nmethod = "DOP853"\nn_tokens = [16, 64]\nrepeats = 1\n'
    )
    assert main(["run", str(design), "-o", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "result.json").read_text())
    assert res["status"] == "success" and res["options"]["method"] == "DOP853"
    with pytest.raises(DesignFileError, match="not used by method 'DOP853'"):
        design.write_text(
            text + '\n[compare-tokens]\nmethod = "DOP853"\nn_tokens = [16, 64]\n'
            "steps_per_layer = 4\n"
        )
        from gtcontrol.cli.main import run_design

        run_design(design, tmp_path / "x")


def test_choices_in_docs_schema_and_code_agree() -> None:
    from gtcontrol.control.design._problem import DesignOptions  # noqa: F401  (exists)

    doc = (ROOT / "docs" / "designs.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `V_structure` |"))
    assert '"full"' in row and "general" not in row
    text = 'task = "design"\n[target]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.0], [0.0, 1.0]]\n'
    assert parse_design(text + '[design]\nV_structure = "full"\n').options["V_structure"] == "full"
    with pytest.raises(DesignFileError, match=r"'design\.V_structure' must be one of"):
        parse_design(text + '[design]\nV_structure = "general"\n')
    with pytest.raises(DesignFileError, match=r"'compare-tokens\.method' must be one of"):
        parse_design(
            BASE.replace('"simulate"', '"compare-tokens"') + '[compare-tokens]\nmethod = "x"\n'
        )
    for f in (ROOT / "designs").glob("*.toml"):
        assert "DESIGN.md" not in f.read_text(), f"{f.name} cites a file users do not have"


def test_huge_and_non_finite_numbers_are_refused() -> None:
    big = "1" + "0" * 400
    for edit, match in [
        (lambda s: s.replace("mean = [0.0, 1.0]", f"mean = [{big}, 1.0]"), "floating-point"),
        (lambda s: s.replace("V = -0.5", f"V = {big}"), "floating-point"),
        (lambda s: s + f"\n[simulate]\nrtol = {big}\n", "floating-point"),
        (lambda s: s + "\n[simulate]\nrtol = inf\n", "finite"),
        (lambda s: s + "\n[simulate]\nrtol = nan\n", "finite"),
        (
            lambda s: s.replace("T = 1.0", "T = 1.0\n") + "\n[simulate]\ntokens = 10000000\n",
            "at most",
        ),
        (lambda s: s + "\nx = " + "[" * 200 + "]" * 200 + "\n", "nested"),
    ]:
        with pytest.raises(DesignFileError, match=match) as info:
            parse_design(edit(BASE))
        assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_debug_flag_adds_the_traceback_after_the_error_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    design = tmp_path / "d.toml"
    design.write_text(BASE.replace("V = -0.5", "V = -0.5\nC = 1"))
    assert main(["run", str(design), "-o", str(tmp_path / "a")]) == 2
    plain = capsys.readouterr().err
    assert plain.count("\n") == 1 and "Traceback" not in plain
    assert main(["--debug", "run", str(design), "-o", str(tmp_path / "b")]) == 2
    debug = capsys.readouterr().err
    assert debug.startswith(plain) and "Traceback (most recent call last)" in debug
    assert "DesignFileError" in debug


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc states are Linux's")
def test_a_killed_run_not_yet_reaped_counts_as_dead(tmp_path: Path) -> None:
    """A run killed with ``kill -9`` stays a zombie until its parent reaps it (in a container
    whose init does not reap, for good): ``kill(pid, 0)`` still answers, but its folder is
    stale, and the next run removes it."""
    import os
    import signal
    import time

    from gtcontrol._output import _remove_stale, pid_alive

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[-1][0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(proc.pid, 0)  # the zombie still answers
        assert not pid_alive(proc.pid)
        stale = tmp_path / f".out.tmp-{proc.pid}-0badcafe"
        stale.mkdir()
        _remove_stale(tmp_path / "out")
        assert not stale.exists()
    finally:
        proc.kill()
        proc.wait(timeout=30)


# -- a design path that is a folder


def test_a_design_file_that_is_a_directory_is_named(tmp_path: Path, capsys: Any) -> None:
    """A folder given as the design file is one error line naming it, exit code 2.

    Reproducer: ../shared/hostile-cases/12_load_result_bad_arg.py.
    """
    from gtcontrol.cli import main

    folder = tmp_path / "design.toml"
    folder.mkdir()
    assert main(["run", str(folder), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gtcontrol: error: {folder}: is a directory, not a design file"]


def test_a_design_file_with_a_byte_order_mark_runs(tmp_path: Path) -> None:
    """Windows editors write one; it read as 'Invalid statement (at line 1, column 1)'."""
    design = tmp_path / "d.toml"
    design.write_bytes(b"\xef\xbb\xbf" + (BASE + "\n[simulate]\ntokens = 0\n").encode())
    assert main(["run", str(design), "-o", str(tmp_path / "out"), "-q"]) == 0


def test_a_title_cannot_drive_the_terminal(tmp_path: Path, capsys) -> None:
    """Escape sequences of a design's title (window title, clear screen, colours) and its
    newlines reached the terminal raw through the summary's heading."""
    design = tmp_path / "d.toml"
    title = "owned\\u001b]0;pwn\\u0007\\u001b[2Jred\\nsecond line"
    design.write_text(f'title = "{title}"\n' + BASE + "\n[simulate]\ntokens = 0\n")
    assert main(["run", str(design), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    heading = out.splitlines()[0]
    assert heading.startswith("gtcontrol: owned") and "\\x1b[2J" in heading
    assert "second line" in heading  # the newline is shown, not obeyed


def test_an_output_below_a_file_names_the_file(tmp_path: Path, capsys) -> None:
    """It said 'cannot create f/sub (File exists)', though f/sub does not exist."""
    design = tmp_path / "d.toml"
    design.write_text(BASE + "\n[simulate]\ntokens = 0\n")
    (tmp_path / "f").write_text("mine")
    assert main(["run", str(design), "-o", str(tmp_path / "f" / "sub")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "f is a file, not a folder" in line
    assert (tmp_path / "f").read_text() == "mine"


def test_compare_tokens_takes_the_max_work_its_refusal_advises(tmp_path: Path, capsys) -> None:
    """The refusal said 'raise max_work', a key the design file refused as unknown."""
    design = tmp_path / "d.toml"
    body = BASE.replace('task = "simulate"', 'task = "compare-tokens"')
    design.write_text(
        body + "\n[compare-tokens]\nn_tokens = [64, 128]\nrepeats = 1\nmax_work = 1000\n"
    )
    assert main(["run", str(design), "-o", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "max_work" in line and "unknown key" not in line
    design.write_text(
        body + "\n[compare-tokens]\nn_tokens = [64, 128]\nrepeats = 1\nmax_work = 10000000000\n"
    )
    assert main(["run", str(design), "-o", str(tmp_path / "out"), "-q"]) == 0


@pytest.mark.parametrize(
    ("task", "extra", "named"),
    [
        ("simulate", "[target]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.0], [0.0, 1.0]]\n", "[target]"),
        ("analyze", "", "'horizon.T'"),
        ("simulate", "", None),
    ],
)
def test_a_section_the_task_would_ignore_is_refused(
    tmp_path: Path, task: str, extra: str, named: str | None
) -> None:
    """``analyze`` ran to its own depth 10 with the user's ``[horizon] T = 1`` ignored, and a
    ``[target]`` in ``simulate`` was accepted and unused; ``[base]`` was already refused."""
    text = BASE.replace('task = "simulate"', f'task = "{task}"') + extra
    if named is None:
        parse_design(text)  # what a task reads still parses
        return
    with pytest.raises(DesignFileError) as info:
        parse_design(text, source="d.toml")
    message = str(info.value)
    assert message.startswith("d.toml: ") and named in message
    assert "not read by task" in message
    if task == "analyze":
        assert "'analyze.T'" in message


def test_the_experiment_task_refuses_a_layer() -> None:
    with pytest.raises(DesignFileError, match=r"\[layer\] or \[\[schedule\]\] is not read"):
        parse_design('task = "experiment"\n[layer]\nA = [[1.0]]\n')


def test_the_model_task_checks_its_rows_folder_name_before_loading(tmp_path: Path, capsys) -> None:
    """``OUT.rows`` is 5 bytes longer than ``OUT``: a 253-byte name failed with 'File name too
    long' only after the model had loaded (11–16 s)."""
    design = Path(__file__).parents[2] / "designs" / "model.toml"
    out = tmp_path / ("m" * 253)
    assert main(["run", str(design), "-o", str(out), "-q"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert ".rows" in line and "too long (258 bytes" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_filter_refusal_names_the_design_file_and_its_key(tmp_path: Path, capsys) -> None:
    """It said 'R: expected ...': no file, and not the key 'filter.R' the user wrote."""
    design = tmp_path / "d.toml"
    design.write_text(
        'task = "filter"\n[initial]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.0], [0.0, 1.0]]\n'
        "[horizon]\nT = 1.0\n[filter]\nF = [[-1.0, 0.0], [0.0, -1.0]]\n"
        "H = [[1.0, 0.0], [0.0, 1.0]]\nR = [[1.0, 0.0], [0.0, -2.0]]\n"
    )
    assert main(["run", str(design), "-o", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{design}: filter.R: " in line


def _refusal(tmp_path: Path, capsys: Any, text: str) -> tuple[Path, str]:
    """The design ``text`` is refused: exit 2, no output; its path and the one error line."""
    design = tmp_path / "d.toml"
    design.write_text(text)
    assert main(["run", str(design), "-o", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    return design, _one_error_line(capsys.readouterr().err)


_MOMENTS = "mean = [1.0, -0.5]\ncov = [[1.0, 0.3], [0.3, 0.5]]\n"
_RELU_FFN = "ffn = {W_in = [[1.0, 0.0], [0.0, 1.0]], W_out = [[1.0, 0.0], [0.0, 1.0]]}\n"


@pytest.mark.parametrize(
    ("task", "model", "key"),
    [
        ("simulate", f"[layer]\nA = [[-1.0, 0.0], [0.0, -1.0]]\n{_RELU_FFN}", "layer"),
        ("analyze", f"[layer]\nV = -1.0\nB = [[1.0, 0.0], [0.0, 1.0]]\n{_RELU_FFN}", "layer"),
        (
            "simulate",
            "[[schedule]]\nA = [[-1.0, 0.0], [0.0, -1.0]]\n"
            f"[[schedule]]\nA = [[-1.0, 0.0], [0.0, -1.0]]\n{_RELU_FFN}",
            "schedule[1]",
        ),
    ],
)
def test_a_feedforward_outside_the_moment_model_is_refused_by_its_key(
    tmp_path: Path, capsys, task: str, model: str, key: str
) -> None:
    """It was refused below the schema, without the file, as 'layers[0].ffn' or 'ffn', with
    the advice 'use simulate_tokens' (a Python function, not a task)."""
    horizon = "[horizon]\nT = 1.0\n" if task == "simulate" else ""
    text = f'task = "{task}"\n[initial]\n{_MOMENTS}{model}{horizon}'
    design, line = _refusal(tmp_path, capsys, text)
    assert f"{design}: '{key}.ffn.activation' = 'relu' is outside the exact Gaussian" in line
    assert "task 'compare-tokens'" in line and "simulate_tokens" not in line


def test_the_token_comparison_takes_a_relu_feedforward() -> None:
    """It compares tokens with the Gaussian closure: the one task that runs such a layer."""
    design = parse_design(
        f'task = "compare-tokens"\n[initial]\n{_MOMENTS}[layer]\nA = [[-1.0, 0.0], [0.0, -1.0]]\n'
        f"{_RELU_FFN}[horizon]\nT = 1.0\n"
    )
    assert isinstance(design.model, Layer) and not design.model.is_gaussian_exact


def test_a_design_not_found_is_a_result_not_an_error(tmp_path: Path, capsys) -> None:
    """A fixed ``B = 0`` leaves the covariance no rate: the design is not found. The run ended
    in 'error: design: the certificate has no positive rate' (exit 2), from the convergence
    check it then started; it now writes the result, the check skipped with its reason."""
    design = tmp_path / "d.toml"
    design.write_text(
        'task = "design"\ntime_limit = 30\n[target]\nmean = [1.0, -0.5]\n'
        "cov = [[1.0, 0.0], [0.0, 1.0]]\n[layer]\nB = [[0.0, 0.0], [0.0, 0.0]]\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(design), "-o", str(out), "-q"]) == 0
    res = json.loads((out / "result.json").read_text())
    assert res["status"] == "not_found" and not res["outputs"]["success"]
    check = res["outputs"]["convergence"]
    assert check["note"].startswith("not run: the design has no positive certified rate")
    assert check["max_final_mean_error"] is None and not res["figures"]


_A = "A = [[-1.0, 0.0], [0.0, -1.0]]\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # it asked for [horizon] T first, and once that was given refused the schedule
        (
            f'task = "sweep"\n[initial]\n{_MOMENTS}[[schedule]]\n{_A}V = 1.0\n'
            "[sweep]\nV_scale = [-1.0, 1.0]\n",
            "task 'sweep' varies a single [layer], not a [[schedule]]",
        ),
        # 'target.cov: expected a positive-definite covariance' came without the file
        (
            'task = "design"\n[target]\nmean = [1.0, -0.5]\ncov = [[1.0, 0.0], [0.0, 0.0]]\n',
            "target.cov: expected a positive-definite covariance",
        ),
        # it ended with 'needs method euler', which the task's `method` does not offer
        (
            f'task = "compare-tokens"\n[initial]\n{_MOMENTS}[layer]\n{_A}'
            "noise = [[0.3, 0.0], [0.0, 0.3]]\n[horizon]\nT = 1.0\n",
            "'layer.noise': task 'compare-tokens' measures",
        ),
        # the tasks' own checks come before the sections are parsed: the sweep's read
        # `horizon = 5` as a table (an internal error, exit 3)
        (
            f'task = "sweep"\nhorizon = 5\n[initial]\n{_MOMENTS}[layer]\n{_A}V = 1.0\n'
            '[sweep]\nrun = "simulate"\nV_scale = [1.0, 2.0]\n',
            "'horizon' must be a table",
        ),
    ],
    ids=["sweep-schedule", "design-target", "compare-noise", "malformed-horizon"],
)
def test_a_refusal_below_the_schema_names_the_file_and_the_key(
    tmp_path: Path, capsys: Any, text: str, expected: str
) -> None:
    design, line = _refusal(tmp_path, capsys, text)
    assert f"{design}: {expected}" in line
