"""A solver's non-success answer is a result; an API refusal names the design file and key.

A run whose solver answers ``blowup``, ``overflow``, ``budget_exhausted``, ... writes
``result.json`` with that status and exits 0; a design the API refuses as bad input exits 2
with one line ``gtcontrol: error: FILE: KEY: ...`` that names the key the user wrote
(docs/designs.md, "Exit statuses and messages").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gtcontrol.cli import main

INITIAL = "[initial]\nmean = [1.0, -0.5]\ncov = [[1.0, 0.3], [0.3, 0.5]]\n"
TARGET = "[target]\nmean = [3.0, 1.0]\ncov = [[0.5, 0.1], [0.1, 2.0]]\n"
#: A covariance that grows like exp(1400 t): past float64's range well before T = 10.
GROWS = "[layer]\nA = [[700.0, 0.0], [0.0, 700.0]]\n"
#: Same-sign V and B: the covariance blows up in finite time (at 0.438 from INITIAL).
BLOWS = "[layer]\nB = [[1.0, 0.0], [0.0, 1.0]]\nV = 1.0\n"


def _run(tmp_path: Path, text: str, *, quiet: bool = True) -> tuple[int, Path]:
    design = tmp_path / "d.toml"
    design.write_text(text)
    out = tmp_path / "runs" / "out"
    code = main(["run", str(design), "-o", str(out), *(["-q"] if quiet else [])])
    return code, out


def _result(out: Path) -> dict[str, Any]:
    """``result.json``, checked: every file it names is there, nothing beside the folder."""
    res: dict[str, Any] = json.loads((out / "result.json").read_text())
    assert all((out / name).is_file() for name in res["files"])
    assert all(name in res["files"] for name in res["figures"])
    assert [p.name for p in out.parent.iterdir()] == [out.name]
    return res


@pytest.mark.parametrize(
    ("text", "status"),
    [
        (f'task = "simulate"\n{INITIAL}{GROWS}[horizon]\nT = 10.0\n', "overflow"),
        (
            f'task = "simulate"\n{INITIAL}{BLOWS}[horizon]\nT = 10.0\n'
            "[simulate]\ndiscrete = true\nsteps_per_layer = 40\ntokens = 0\n",
            "blowup",
        ),
        (
            f'task = "filter"\n{INITIAL}[horizon]\nT = 10.0\n[filter]\n'
            "F = [[700.0, 0.0], [0.0, 700.0]]\nH = [[0.0, 0.0], [0.0, 0.0]]\n"
            "R = [[1.0, 0.0], [0.0, 1.0]]\n",
            "overflow",
        ),
        (
            f'task = "compare-tokens"\n{INITIAL}{GROWS}[horizon]\nT = 10.0\n'
            '[compare-tokens]\nn_tokens = [64, 128]\nrepeats = 1\nmethod = "discrete"\n',
            "overflow",
        ),
    ],
    ids=["simulate", "simulate-discrete", "filter", "compare-tokens"],
)
def test_a_trajectory_past_the_entry_bound_is_a_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, status: str
) -> None:
    """The run stopped with exit 2 and ``error: Gaussian.cov: an entry of magnitude 5.29e+250
    exceeds the bound 1e+150``: ``result.json``'s summary of the trajectory read its last
    record as a Gaussian, which refuses such entries; an overflow (or a discrete stack that
    overflows after a blow-up) ends just past them, and that record is the answer."""
    code, out = _run(tmp_path, text, quiet=False)  # the summary is printed too
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert _result(out)["status"] == status
    assert captured.out.rstrip().endswith(f"gtcontrol: wrote {out / 'result.json'}")
    assert "error" not in captured.err


def test_a_sweep_point_that_overflows_is_an_overflow_row(tmp_path: Path) -> None:
    """Every point of a ``simulate`` sweep whose covariance overflows was a ``failed`` row
    with the message ``Gaussian.cov: an entry ... exceeds the bound``, and the sweep's status
    ``failed``: the row read the last record as a Gaussian."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("dask.distributed")
    text = (
        f'task = "sweep"\n{INITIAL}{GROWS}[horizon]\nT = 10.0\n'
        '[sweep]\nrun = "simulate"\nA_scale = [1.0, 2.0]\nworkers = 1\n'
    )
    code, out = _run(tmp_path, text)
    assert code == 0
    assert json.loads((out / "result.json").read_text())["status"] == "success"
    rows = pd.read_parquet(out / "sweep.parquet")
    assert list(rows["status"]) == ["overflow", "overflow"]
    assert (rows["final_cov_trace"] > 1e150).all()


def test_equilibria_of_a_layer_at_the_entry_bound_are_searched(tmp_path: Path) -> None:
    """``analyze`` of a layer with ``A = 1e150`` and noise ``G = 1e75`` (entries within the
    schema's bound) stopped with exit 2 and ``error: Gaussian.cov: an entry of magnitude 2e+150
    exceeds the bound``: the equilibrium search built a Gaussian from a start of scale
    ``G Gᵀ``, beyond the bound, instead of skipping that start."""
    text = (  # the time limit only keeps the test short: the search meets that start first
        'task = "analyze"\ntime_limit = 3\n[initial]\nmean = [1.0]\ncov = [[1.0]]\n'
        "[layer]\nA = [[1e150]]\nB = [[0.5]]\nV = -1.0\nnoise = [[1e75]]\n"
    )
    code, out = _run(tmp_path, text)
    assert code == 0
    assert _result(out)["status"] in ("success", "budget_exhausted")


_STEER = f'task = "steer"\n{INITIAL}'
_DESIGN = 'task = "design"\n[target]\nmean = [1.0, -0.5]\ncov = [[1.0, 0.3], [0.3, 0.5]]\n'


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (
            f'task = "compare-tokens"\n{INITIAL}{BLOWS}[horizon]\nT = 10.0\n',
            "layer",
            "the moments blow up at t = 0.438",
        ),
        (
            f'task = "compare-tokens"\n{INITIAL}{BLOWS}[horizon]\nT = 0.1\n'
            "[compare-tokens]\nn_tokens = [64, 128]\nrepeats = 1\nmax_work = 1000\n",
            "compare-tokens.n_tokens, compare-tokens.repeats",
            "raise max_work",
        ),
        (
            f"{_DESIGN}[layer]\nB = [[-1.0, 0.0], [0.0, -1.0]]\n[design]\nmin_ess = 0.0\n",
            "layer.B",
            "design infeasible: global certificate (R ⪰ 0): the fixed B has an indefinite or "
            "negative symmetric part",
        ),
        (
            f"{_DESIGN}[layer]\nB = [[1.0, 0.0], [0.0, 1.0]]\nV = -0.5\n"
            "[design]\nmin_ess = 0.0\nrate = 2.0\n",
            "layer.B, layer.V, design.rate",
            "design infeasible: mean rate",
        ),
        (f"{_DESIGN}[design]\nrate = 1e150\n", "target, design.rate", "not representable"),
        (
            f"{_STEER}[target]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.0], [0.0, 0.0]]\n"
            "[horizon]\nT = 1.0\nn_layers = 2\n",
            "target",
            "target covariance has rank 1",
        ),
        (
            f"{_STEER}{TARGET}[horizon]\nT = 1e-150\nn_layers = 2\n",
            "horizon.T",
            "not representable in float64",
        ),
        (
            f"{_STEER}{TARGET}[horizon]\nT = 1.0\nn_layers = 2\n"
            "[base]\nB = [[1e150, 0.0], [0.0, 1e150]]\nV = 1e150\n[steer]\ntokens = 0\n",
            "base",
            "a layer built around it is not representable in float64",
        ),
        (
            f'task = "filter"\n{INITIAL}{BLOWS}[horizon]\nT = 1.0\n',
            "layer",
            "R = −Σ_h v_h (B_h + B_hᵀ) has the negative eigenvalue",
        ),
        (
            'task = "stabilize"\n[target]\nmean = [0.0, 0.0]\ncov = [[1.0, 0.0], [0.0, 0.0]]\n'
            f"{BLOWS}",
            "target",
            "the covariance is singular along a direction the layer moves",
        ),
    ],
    ids=[
        "compare-blowup",
        "compare-max-work",
        "design-fixed-B",
        "design-fixed-V",
        "design-rate",
        "steer-rank",
        "steer-depth",
        "steer-base",
        "filter-layer",
        "stabilize-target",
    ],
)
def test_an_api_refusal_names_the_design_file_and_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str, words: str
) -> None:
    """The line named neither the design file nor a key of it: the API's own parameter
    (``control: the moments blow up``, ``T: the exact layers``, ``A: an entry``, ``target
    unreachable in mode 'full'``), or nothing at all (``design infeasible: ...; use
    require_global=False``, an argument the design file has no key for)."""
    code, out = _run(tmp_path, text)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith(f"gtcontrol: error: {tmp_path / 'd.toml'}: {key}: "), err[0]
    assert words in err[0] and "require_global" not in err[0]
    assert not out.parent.exists() or not any(out.parent.iterdir())
