"""The ``model`` task: the map's report from a Hugging Face folder, rows stored as they finish,
and a map on a dask cluster started as separate processes that resumes after its driver is
killed, with no stored layer done twice."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gtcontrol.cli import main

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("distributed")

from _dask_cluster import dask_cluster  # noqa: E402
from _families import BUILD  # noqa: E402

_LAYERS = 4


def _folder(path: Path) -> Path:
    """A 4-layer random BERT (d = 32) whose heads blow up from the identity, saved as a folder."""
    cc, mc, ck, mk = BUILD["bert"]
    torch.manual_seed(0)
    net = getattr(transformers, mc)(
        getattr(transformers, cc)(**{**ck, "num_hidden_layers": _LAYERS}), **mk
    ).eval()
    with torch.no_grad():
        for lay in net.encoder.layer:
            a = lay.attention
            q = a.self.query.weight * 9.0
            for lin in (a.self.query, a.self.key, a.self.value):
                lin.weight.copy_(q)
            a.output.dense.weight.copy_(q.T)
    net.save_pretrained(path)
    return path


def _design(tmp: Path, limit: float = 600.0, extra: str = "") -> Path:
    model = _folder(tmp / "bert")
    design = tmp / "map.toml"
    design.write_text(
        f'task = "model"\ntime_limit = {limit}\nseed = 0\n[model]\nmodel = "{model}"\n'
        f"T = 1.0\ntoken_check = 64\nn_tokens = 64\n{extra}"
    )
    return design


def test_model_task_writes_the_report_and_removes_its_finished_store(tmp_path: Path) -> None:
    design = _design(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "success", doc["summary"]["message"]
    names = {"model_map.md", "model_map.html", "lambda_depth.png", "spectra.png"}
    assert names <= {p.name for p in out.iterdir()}
    assert len(doc["outputs"]["table"]) == _LAYERS and doc["outputs"]["where"] == "inline"
    assert not (tmp_path / "out.rows").exists()  # complete: the row store is gone


def _rows(store: Path) -> dict[str, int]:
    rows = store / "rows"
    return {p.name: p.stat().st_ino for p in rows.glob("layer_*.pkl")} if rows.is_dir() else {}


def _run(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "gtcontrol", "run", "-q", *args],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **kw,
    )


@pytest.mark.slow
def test_a_killed_map_on_a_dask_cluster_resumes_and_maps_no_stored_layer_twice(
    tmp_path: Path,
) -> None:
    """A scheduler and two workers started as separate processes; the driver (``gtcontrol run
    --scheduler``) is killed with SIGKILL once a row is stored; the rerun reuses every stored
    row (same files, untouched) and maps only the others. A layer in flight at the kill was
    not done: it is mapped by the rerun."""
    design = _design(tmp_path)
    out = tmp_path / "out"
    store = tmp_path / "out.rows"
    with dask_cluster(tmp_path, n_workers=2) as address:
        driver = _run([str(design), "-o", str(out), "--scheduler", address])
        deadline = time.monotonic() + 240
        while not _rows(store) and time.monotonic() < deadline:
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        before = _rows(store)
        assert 1 <= len(before) < _LAYERS and not (out / "result.json").exists()
        rerun = _run([str(design), "-o", str(out), "--scheduler", address])
        _, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err.decode()[-2000:]
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "success", doc["summary"]["message"]
    reused = {f"{label}.pkl" for label in doc["outputs"]["reused_halves"]}
    assert reused == set(before)  # every stored half reused, none recomputed
    assert doc["outputs"]["where"] == address
    assert len(doc["outputs"]["table"]) == _LAYERS
    assert not store.exists()


def test_rows_cut_by_the_time_limit_are_mapped_again_and_finished_rows_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Layers 2 and 3 cut by their time limit (a row limit of 1 ms): the map ends
    budget_exhausted, names what was cut, keeps the two finished rows in its store (and says
    where); the next run reuses exactly those and maps the two others."""
    mm = importlib.import_module("gtcontrol.experiments.model_map")

    real = mm._map_half

    def cut(job: Any, half: str, budget: Any = None) -> Any:
        late = replace(job, deadline=time.time() + 1e-3) if job.layer_index >= 2 else job
        return real(late, half, budget)

    monkeypatch.setattr(mm, "_map_half", cut)
    design = _design(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "budget_exhausted"
    cuts = {r["layer"]: r["cut"] for r in doc["outputs"]["table"]}
    assert cuts[0] == cuts[1] == "" and cuts[2] and cuts[3], cuts
    store = tmp_path / "out.rows"
    assert set(_rows(store)) == {
        f"layer_{k:03d}.{half}.pkl" for k in (0, 1) for half in ("analysis", "stabilization")
    }
    assert str(store) in doc["summary"]["message"]
    monkeypatch.setattr(mm, "_map_half", real)
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "success", doc["summary"]["message"]
    assert doc["outputs"]["reused"] == [0, 1]
    assert not store.exists()
