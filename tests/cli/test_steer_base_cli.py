"""Task ``steer`` with a ``[base]``: a fixed network steered through, from a design file.

The controls a run writes are checked by re-simulating them (``gtcontrol.simulate`` on the
layers rebuilt from ``result.json``, not the run's own verification); the generated target by its
invariants (rank, the untouched null directions and affine coordinate, the seed).
"""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers import STEER_BASE_DESIGN

from gtcontrol import DesignFileError, Gaussian, Layer, Schedule, simulate
from gtcontrol._result_file import load_result
from gtcontrol.cli import main
from gtcontrol.cli._base_targets import rotated_target, token_moments
from gtcontrol.cli.schema import ModelBase, parse_design
from gtcontrol.cli.specs import BASE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]

SMALL = STEER_BASE_DESIGN

MODEL = """
task = "steer"
[horizon]
T = 1.0
n_layers = 3
[base]
model = "minilm"
layer = 2
"""


def _layers(controls: dict) -> Schedule:
    """The written layers (one head each: ``V``, ``B``) rebuilt."""
    lays = [
        Layer(A=np.array(c["A"]), b=np.array(c["b"]), V=np.array(c["V"]), B=np.array(c["B"]))
        for c in controls["layers"]
    ]
    return Schedule(lays, controls["T"])


def test_steer_design_through_a_fixed_head_reaches_the_target(tmp_path: Path) -> None:
    design = tmp_path / "d.toml"
    design.write_text(SMALL)
    out = tmp_path / "out"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    res = load_result(out / "result.json")
    o = res["outputs"]
    assert res["status"] == "success" and o["base_heads_kept"] is True
    assert set(res["figures"]) == {"moments.png", "added_control.png", "base_vs_steered.png"}
    for fig in res["figures"]:
        assert (out / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the written controls, re-simulated, end on the target; each holds the base head first
    sched = _layers(o["controls"])
    end = simulate(sched, Gaussian([0.0, 0.0], np.eye(2)), 1.0, rtol=1e-12).final
    target = Gaussian([1.0, -0.5], [[0.6, 0.1], [0.1, 1.4]])
    assert end.bures_wasserstein(target) < 1e-6
    for lay, a_k, b_k in zip(sched.layers, o["added"]["A"], o["added"]["b"], strict=True):
        np.testing.assert_array_equal(lay.heads[0][0], 0.8 * np.eye(2))
        np.testing.assert_allclose(lay.A - np.diag([0.1, -0.1]), a_k, atol=1e-15)
        np.testing.assert_allclose(lay.b, b_k, atol=1e-15)
    # the base alone blows up from N(0, I): its first variance obeys σ' = 0.2 σ + 1.6 σ², so
    # t* = ln(1 + 0.2 / 1.6) / 0.2; the energy without the base is recorded
    assert o["base_flow"]["status"] == "blowup"
    assert o["base_flow"]["blowup_time"] == pytest.approx(np.log(1.125) / 0.2, rel=1e-8)
    assert o["energy_without_base"] > 0 and o["blank_status"] == "success"
    assert o["added_energy"] == pytest.approx(res["summary"]["added_energy"])


def test_steer_design_takes_a_schedule_of_bases(tmp_path: Path) -> None:
    text = SMALL.replace("[base]", "[[base]]") + (
        "\n[[base]]\nV = -0.3\nB = [[1.0, 0.0], [0.0, 1.0]]\n"
    ).replace("n_layers = 4", "n_layers = 2")
    text = text.replace("n_layers = 4", "n_layers = 2")
    d = parse_design(text)
    assert isinstance(d.base, Schedule) and d.base.n_layers == 2
    out = tmp_path / "out"
    (tmp_path / "d.toml").write_text(text)
    assert main(["run", "-q", str(tmp_path / "d.toml"), "-o", str(out)]) == 0
    o = json.loads((out / "result.json").read_text())["outputs"]
    assert o["success"] and o["base_heads_kept"] is True
    heads = [lay["V"][0][0] for lay in o["controls"]["layers"]]
    assert heads == [0.8, -0.3]


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda s: s.replace('task = "steer"', 'task = "simulate"').replace("[steer]", ""),
            "task 'steer' only",
        ),
        (lambda s: s + 'mode = "attention"\n', r"'steer\.mode': around a \[base\].*'attention'"),
        (lambda s: s + 'objective = "parameter"\n', r"'steer\.objective'"),
        (lambda s: s + 'terminal = "bw"\n', r"'steer\.terminal'"),
        (
            lambda s: s.replace("V = 0.8", "V = 0.8\nlayer = 2"),
            r"'base\.layer' needs 'base\.model'",
        ),
        (lambda s: s.replace("V = 0.8", "V = 0.8\nC = 1"), r"unknown key 'base\.C'"),
        (lambda s: s.replace("B = [[1.0, 0.0], [0.0, 1.0]]", "B = [[1.0]]"), r"\[base\]"),
        (
            lambda s: s.replace(
                "A = [[0.1, 0.0], [0.0, -0.1]]\nB = [[1.0, 0.0], [0.0, 1.0]]", ""
            ).replace("V = 0.8", "A = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]"),
            r"\[initial\] has dimension 2 but the \[base\] has dimension 3",
        ),
        (lambda s: s.replace("[base]", "base = 3\n[basex]"), "unknown key 'basex'"),
        (
            lambda s: s.replace("[initial]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.0], [0.0, 1.0]]", ""),
            r"needs \[initial\]",
        ),
    ],
)
def test_steer_base_schema_errors_name_the_key(edit, match) -> None:
    with pytest.raises(DesignFileError, match=match) as info:
        parse_design(edit(SMALL))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s + "angle = -1.0\n", r"'base\.angle' must be >= 0"),
        (lambda s: s + 'start_from = "noise"\n', r"'base\.start_from' must be one of"),
        (lambda s: s + 'target = "mirrored"\n', r"'base\.target' must be one of"),
        (lambda s: s.replace("layer = 2", "layer = -1"), r"'base\.layer' must be >= 0"),
        (lambda s: s.replace('model = "minilm"', 'model = " "'), r"'base\.model' must not be"),
        (lambda s: s + "shift = true\n", r"'base\.shift' must be of type float"),
        (lambda s: s + "bogus = 1\n", r"unknown key 'base\.bogus'"),
        (lambda s: s + 'target = "given"\n', r"'base\.target' = 'given' needs \[target\]"),
        (
            lambda s: s + 'target = "given"\nangle = 0.2\n',
            r"'base\.angle' shapes the rotated target",
        ),
        (
            lambda s: s + "[initial]\nmean = [0.0]\ncov = [[1.0]]\n",
            r"\[initial\]: with \[base\] model the initial is the layer's own moments",
        ),
        (
            lambda s: s + "[target]\nmean = [0.0]\ncov = [[1.0]]\n",
            r"set base\.target = 'given' to steer to \[target\]",
        ),
    ],
)
def test_steer_model_base_options_are_validated(edit, match) -> None:
    text = edit(MODEL)
    with pytest.raises(DesignFileError, match=match) as info:
        parse_design(text)
    assert "\n" not in str(info.value)


def test_steer_model_base_parses_with_its_defaults() -> None:
    d = parse_design(MODEL)
    assert d.base == ModelBase(
        model="minilm",
        layer=2,
        start_from="text",
        target="rotated",
        angle=BASE_OPTIONS["angle"].default,
        shift=BASE_OPTIONS["shift"].default,
        stretch=BASE_OPTIONS["stretch"].default,
    )
    assert d.initial is None and d.target is None


def test_docs_list_every_base_option() -> None:
    doc = (ROOT / "docs" / "designs.md").read_text()
    steer = doc[doc.index("### `steer`") : doc.index("### `sweep`")]
    for name in BASE_OPTIONS:
        assert f"| `{name}` |" in steer, name


def _augmented_start(seed: int, d: int = 6) -> Gaussian:
    """Token moments of rank ``d - 1`` (a LayerNorm-like null direction), augmented."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((200, d)) @ rng.standard_normal((d, d))
    x -= x.mean(axis=1, keepdims=True)  # every token orthogonal to (1, ..., 1)
    return token_moments(x + 0.3)


def test_rotated_target_keeps_the_rank_and_the_null_directions() -> None:
    g0 = _augmented_start(0)
    g1 = rotated_target(g0, angle=0.5, shift=0.7, stretch=0.3, seed=4)
    assert g0.rank == g1.rank == 5 and g0.dim == g1.dim == 7
    ones = np.append(np.ones(6), 0.0) / np.sqrt(6.0)
    for null in (ones, np.eye(7)[-1]):  # LayerNorm's direction, the affine coordinate
        assert abs(null @ g1.cov @ null) < 1e-12
        assert null @ g1.mean == pytest.approx(null @ g0.mean, abs=1e-12)
    assert g1.mean[-1] == 1.0 and not np.allclose(g1.cov, g0.cov)
    again = rotated_target(g0, angle=0.5, shift=0.7, stretch=0.3, seed=4)
    np.testing.assert_array_equal(again.cov, g1.cov)
    np.testing.assert_array_equal(again.mean, g1.mean)


def test_rotated_target_without_moves_is_the_initial() -> None:
    g0 = _augmented_start(1)
    g1 = rotated_target(g0, angle=0.0, shift=0.0, stretch=0.0, seed=9)
    np.testing.assert_allclose(g1.cov, g0.cov, atol=1e-12)
    np.testing.assert_allclose(g1.mean, g0.mean, atol=1e-12)
    # the rotation alone keeps the eigenvalues; the stretch alone keeps the eigenvectors
    rot = rotated_target(g0, angle=0.8, shift=0.0, stretch=0.0, seed=9)
    np.testing.assert_allclose(np.linalg.eigvalsh(rot.cov), np.linalg.eigvalsh(g0.cov), atol=1e-12)
    st = rotated_target(g0, angle=0.0, shift=0.0, stretch=0.5, seed=9)
    np.testing.assert_allclose(st.cov @ g0.cov, g0.cov @ st.cov, atol=1e-10)


@pytest.mark.slow
def test_shipped_steer_pretrained_design_reaches_its_target(tmp_path: Path) -> None:
    """designs/steer_pretrained.toml: MiniLM layer 2, d = 385, 8 sublayers (about 2 minutes:
    ``pytest -m slow tests/cli/test_steer_base_cli.py``)."""
    pytest.importorskip("transformers")
    path = ROOT / "designs" / "steer_pretrained.toml"
    limit = tomllib.loads(path.read_text())["time_limit"]
    clock = time.perf_counter()
    assert main(["run", "-q", str(path), "-o", str(tmp_path / "out")]) == 0
    seconds = time.perf_counter() - clock
    res = load_result(tmp_path / "out" / "result.json")
    o = res["outputs"]
    assert res["status"] == "success", o["message"]
    assert o["relative_terminal_error"] <= 1e-6 and o["base_heads_kept"] is True
    assert o["added"]["A"].shape == (8, 385, 385)
    assert seconds < limit


def _bert_folder(path: Path) -> Path:
    """A 2-layer random BERT of width 32 (no tokenizer: its data are random token ids)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from _families import BUILD

    cc, mc, ck, mk = BUILD["bert"]
    torch.manual_seed(0)
    net = getattr(transformers, mc)(
        getattr(transformers, cc)(**{**ck, "num_hidden_layers": 2}), **mk
    )
    net.eval().save_pretrained(path)
    return path


@pytest.mark.parametrize("start", ["text", "identity"])
def test_steer_design_through_a_model_layer(tmp_path: Path, start: str) -> None:
    folder = _bert_folder(tmp_path / "bert")
    design = tmp_path / "d.toml"
    design.write_text(
        MODEL.replace('model = "minilm"', f'model = "{folder}"').replace("layer = 2", "layer = 1")
        + f'start_from = "{start}"\nstretch = 0.3\n[steer]\ntokens = 0\n'
    )
    out = tmp_path / "out"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    res = load_result(out / "result.json")
    o = res["outputs"]
    assert res["status"] == "success", o["message"]
    assert o["base_heads_kept"] is True and o["relative_terminal_error"] <= 1e-6
    g0 = Gaussian(o["initial"]["mean"], o["initial"]["cov"])
    g1 = Gaussian(o["target"]["mean"], o["target"]["cov"])
    assert g0.dim == g1.dim == 33 and g0.rank == g1.rank == (32 if start == "identity" else 31)
    assert g1.mean[-1] == 1.0 and o["added"]["A"].shape == (3, 33, 33)
    assert ("tokens entering it" if start == "text" else "N(e, I ⊕ 0)") in o["source"]
    bad = design.read_text().replace("layer = 1", "layer = 2")
    design.write_text(bad)
    assert main(["run", "-q", str(design), "-o", str(tmp_path / "bad")]) == 2


@pytest.mark.parametrize("limit", [0.05, 1.0])
def test_steer_design_through_a_base_ends_within_its_time_limit(tmp_path: Path, limit: float):
    """The contract, not how much fitted: within ``time_limit + max(1 s, 10 %)``, a complete
    folder, and a run that left something out says so and is not ``success``."""
    from _design_mutations import dumps

    rng = np.random.default_rng(3)
    d = 8
    heads = [{"V": (0.4 * rng.standard_normal((d, d))).tolist(), "B": np.eye(d).tolist()}]
    doc = {
        "task": "steer",
        "time_limit": limit,
        "initial": {"mean": [0.0] * d, "cov": np.eye(d).tolist()},
        "target": {"mean": [1.0] * d, "cov": (2.0 * np.eye(d)).tolist()},
        "horizon": {"T": 1.0, "n_layers": 8},
        "base": {"heads": heads},
        "steer": {"tokens": 0},
    }
    design = tmp_path / "d.toml"
    design.write_text(dumps(doc))
    out = tmp_path / "out"
    clock = time.perf_counter()
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    assert time.perf_counter() - clock <= limit + max(1.0, 0.1 * limit)
    res = json.loads((out / "result.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted(res["files"])
    if res["outputs"].get("skipped") or res["status"] != "success":
        assert res["status"] in ("budget_exhausted", "failed"), res["status"]
