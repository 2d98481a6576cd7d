"""The model map: every part of a row against an independent computation, on small random
BERT and GPT-2 models whose heads blow up from the identity; the stabilized network against the
real network with its attention replaced by hooks; time limits, bad input and the report."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gtcontrol as gt
from gtcontrol import Gaussian, Layer, Status
from gtcontrol.errors import InvalidParametersError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _families import BUILD  # noqa: E402

from gtcontrol._status import Budget  # noqa: E402
from gtcontrol.experiments._map_equilibria import _newton, equilibrium  # noqa: E402
from gtcontrol.experiments._map_report import FIGURES, model_map_record  # noqa: E402
from gtcontrol.experiments.model_map import (  # noqa: E402
    PARTS,
    LayerJob,
    LayerMap,
    ModelMap,
    map_data,
    map_layer,
    model_map,
)
from gtcontrol.interop import ModelFileError, extract  # noqa: E402

#: Query, key and value weights equal (``B_h ∝ V_h ⪰ 0``: the same-sign case, which blows up
#: from every start) and scaled so that ``T*`` is of order 0.1 at these sizes.
_GAIN = 9.0


def _aligned(family: str) -> Any:
    """A small random model of ``family`` whose heads have ``W_K = W_V = W_Q``, ``W_O = W_Qᵀ``."""
    cc, mc, ck, mk = BUILD[family]
    torch.manual_seed(0)
    net = getattr(transformers, mc)(getattr(transformers, cc)(**ck), **mk).eval()
    with torch.no_grad():
        if family == "bert":
            for lay in net.encoder.layer:
                a = lay.attention
                q = a.self.query.weight * _GAIN
                for lin in (a.self.query, a.self.key, a.self.value):
                    lin.weight.copy_(q)
                a.output.dense.weight.copy_(q.T)
        else:
            for blk in net.h:
                w = blk.attn.c_attn.weight  # Conv1D (d, 3d): x @ w
                d = w.shape[0]
                q = w[:, :d] * _GAIN
                w[:, d : 2 * d] = q
                w[:, 2 * d :] = q
                blk.attn.c_proj.weight.copy_(q.T)
    return net


def _identity_start(dim: int) -> Gaussian:
    """``N(e, I ⊕ 0)`` on ``R^dim``, ``e`` the affine coordinate (the last): the map's start
    "identity"."""
    cov = np.eye(dim)
    cov[-1, -1] = 0.0
    return Gaussian(np.eye(dim)[-1], cov)


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def mapped(request: Any) -> tuple[str, Any, ModelMap]:
    net = _aligned(request.param)
    em = extract(net)
    m = model_map(em, T=2.0, token_check=128, gaussian_tokens=64, n_null=8)
    return request.param, em, m


def test_every_row_has_every_part(mapped: tuple[str, Any, ModelMap]) -> None:
    _, em, m = mapped
    assert m.status is Status.SUCCESS, m.message
    assert [r.layer for r in m.rows] == list(range(em.n_layers))
    for r in m.rows:
        assert r.status is Status.SUCCESS and not r.cut, r.message
        assert {x.start for x in r.regimes} == {"identity", "data"}
        assert {e.start for e in r.equilibria} == {"data", "identity"}
        assert all(e.status in (Status.SUCCESS, Status.NOT_FOUND) for e in r.equilibria)
        st = r.stabilization
        assert st is not None and st.success and st.local_certificate
        assert st.token_certificate is not None and st.token_certificate.success
        assert set(r.seconds) == set(PARTS)
        # the local question: the perturbed target is the one verified start
        assert [v.name for v in st.verification] == ["perturbed target"]
        assert all(v.converged for v in st.verification)
        # the stabilized layer's flow from N(e, I ⊕ 0), drawn to the map's depth
        t_after, lam_after = r.lam_after
        assert t_after[0] == 0.0 and t_after[-1] == pytest.approx(2.0)
        assert lam_after[0] == pytest.approx(1.0)
        assert "from the identity under the stabilized layer" in r.message
    net = m.stabilized_network
    assert net is not None and net.n_inputs == 40
    # the extracted forward pass (final norm included) reproduces the real network's output
    assert net.reference_error < 1e-5


def test_blowup_time_matches_an_independent_integration(
    mapped: tuple[str, Any, ModelMap],
) -> None:
    """The map's T* from the identity (factor form, RK45 at rtol 1e-4) against an integration
    by DOP853 at rtol 1e-11: agreement to 2e-5 relative (both extrapolate 1/λ_max to the
    singularity; the loose run's global error is what separates them: 0.8e-6 to 4.9e-6 on
    MiniLM's layers 0 and 2 from the identity and the data, 3.9e-6 here)."""
    _, em, m = mapped
    for r in m.rows:
        layer = em.layers[r.layer].attention_layer
        ref = gt.simulate(layer, _identity_start(layer.dim), 2.0, rtol=1e-11)
        assert ref.status is Status.BLOWUP and r.regime("identity").kind == "blowup"
        assert r.blowup_identity == pytest.approx(ref.blowup_time, rel=2e-5)


def test_head_shares_match_dense_heads(mapped: tuple[str, Any, ModelMap]) -> None:
    """Shares from the factors against ``c_h = uᵀ V_h Σ B_h u`` with the dense head matrices,
    at Σ integrated independently (rtol 1e-10) to as short of its own T* as the map's last
    record is of the map's, where λ_max ~ 1e6: the direction u has converged, so the shares
    agree to 1e-3. (The same remaining depth, not the same depth: the map's loose T* is off by
    more than that remaining depth.)"""
    _, em, m = mapped
    for r in m.rows:
        layer = em.layers[r.layer].attention_layer
        depth = r.lam_before[0][-1]
        assert r.blowup_identity * (1 - 1e-3) < depth <= r.blowup_identity
        ref = gt.simulate(layer, _identity_start(layer.dim), 2.0, rtol=1e-10)
        same = ref.blowup_time - (r.blowup_identity - depth)
        traj = gt.simulate(layer, _identity_start(layer.dim), same, rtol=1e-10)
        sigma = np.asarray(traj.cov[-1])
        _, vecs = np.linalg.eigh(sigma)
        u = vecs[:, -1]
        c = np.array([u @ v @ sigma @ b @ u for v, b in layer.heads])
        shares = c / c.sum()
        assert r.dominant_head == int(np.argmax(shares))
        np.testing.assert_allclose(r.head_shares, shares, atol=1e-3)
        assert sum(r.head_shares) == pytest.approx(1.0, abs=1e-12)


def test_stabilized_layer_converges_in_an_independent_simulation(
    mapped: tuple[str, Any, ModelMap],
) -> None:
    """The stabilized layer from N(e, I ⊕ 0) and from the data moments, integrated by
    simulate to depth 30 (rate 1: e^-30 ≈ 1e-13 of the start's error), ends at the target."""
    _, _, m = mapped
    for r in m.rows:
        st = r.stabilization
        assert st is not None
        end = gt.simulate(st.layer, _identity_start(st.target.dim), 30.0, rtol=1e-10)
        scale = np.linalg.norm(st.target.cov)
        assert np.linalg.norm(end.cov[-1] - st.target.cov) <= 1e-6 * scale
        assert np.linalg.norm(end.mean[-1] - st.target.mean) <= 1e-6 * np.linalg.norm(
            st.target.mean
        )


def test_rate_curve_passes_through_the_verified_design(
    mapped: tuple[str, Any, ModelMap],
) -> None:
    """At the rate asked, the curve's point is the result itself when the ladder kept the
    local minimum c; c(ρ) rises by exactly (ρ − ρ')/2 (the shift identity, with the margin)."""
    _, _, m = mapped
    for r in m.rows:
        st, curve = r.stabilization, r.curve
        assert st is not None and curve is not None and curve.chosen == 1.0 and curve.how == "given"
        i = curve.rates.index(1.0)
        if st.c == pytest.approx(st.stats["c_local"], rel=1e-12):
            assert curve.function_change[i] == pytest.approx(st.function_change, rel=1e-9)
        dc = np.diff(curve.c) / np.diff(curve.rates)
        np.testing.assert_allclose(dc, 0.5 * (1.0 + 1e-4), rtol=1e-6)


def test_stabilized_network_matches_the_real_network_with_hooks() -> None:
    """The extracted forward pass with the stabilized attention against the real BERT whose
    attention output is replaced, by a forward hook, with the stabilized layer's velocity."""
    net = _aligned("bert")
    em = extract(net)
    m = model_map(em, T=2.0, token_check=None, gaussian_tokens=64, n_null=8)
    swap = [r.stabilization.layer for r in m.rows]  # type: ignore[union-attr]
    data = map_data(em)
    seen: dict[int, np.ndarray] = {}

    def reads(k: int) -> Any:
        def f(mod: Any, args: Any, out: Any) -> None:
            seen[k] = args[0][0].double().numpy()

        return f

    def writes(k: int) -> Any:
        def f(mod: Any, args: Any, out: Any) -> Any:
            x = seen[k]
            xt = np.hstack([x, np.ones((x.shape[0], 1))])
            v = gt.token_velocity(swap[k], xt)[:, :-1]
            return torch.as_tensor(v, dtype=out.dtype)[None]

        return f

    handles = []
    for k, lay in enumerate(net.encoder.layer):
        handles.append(lay.attention.self.query.register_forward_hook(reads(k)))
        handles.append(lay.attention.output.dense.register_forward_hook(writes(k)))
    try:
        x0 = data.sequences[0]
        with torch.no_grad():
            h = torch.as_tensor(x0, dtype=torch.float32)[None]
            for lay in net.encoder.layer:
                h = lay(h)
                h = h[0] if isinstance(h, tuple) else h
        real = h[0].double().numpy()
    finally:
        for hd in handles:
            hd.remove()
    mine = em.forward(x0, attention=swap)[-1]
    # float32 network against float64 extraction: ~1e-6 of the states' size
    assert np.abs(mine - real).max() <= 1e-4 * np.abs(real).max()
    net_check = m.stabilized_network
    assert net_check is not None and net_check.reference_error < 1e-5


def test_map_finds_and_certifies_a_planted_equilibrium() -> None:
    """A one-dimensional Riccati layer (A = 1, B = 2, V = −1) on R^1 ⊕ affine: Σ* = 0.5 is its
    equilibrium, dσ/dt = 2σ − 4σ² has derivative −2 there and the mean matrix K = −1, so the
    linearization's abscissa is −1: Newton from the data finds it, and a dense spectrum with
    its Bauer–Fike bound certifies it stable."""
    layer = Layer(
        A=[[1.0, 0.0], [0.0, 0.0]],
        heads=[([[-1.0, 0.0], [0.0, 0.0]], [[2.0, 0.0], [0.0, 0.0]])],
    )
    tokens = np.random.default_rng(3).normal(0.2, 0.6, size=(400, 1))
    row = map_layer(LayerJob(0, layer, tokens, T=2.0, token_check=None))
    eq = {e.start: e for e in row.equilibria}
    e = eq["data"]
    assert e.status is Status.SUCCESS and e.trace == pytest.approx(0.5, rel=1e-12)
    assert e.cov_abscissa == pytest.approx(-2.0, rel=1e-10)
    assert e.abscissa == pytest.approx(-1.0, rel=1e-10)
    assert e.stability == "stable" and e.evidence == "certified"
    assert math.isfinite(e.abscissa_error) and e.abscissa_error < 1e-8
    # the affine coordinate takes it out of the Riccati class: analyze's integrator verdict
    # ("bounded" to T) when it fits in its 5 s, else the blow-up search's "no blow-up to T"
    reg = row.regime("data")
    assert reg is not None and reg.status is Status.SUCCESS
    assert reg.kind in ("bounded", "no blow-up to T = 2"), reg
    assert row.stabilization is not None and row.stabilization.success


def _slow_newton_layer() -> Layer:
    """d = 24 (Newton's Krylov route), four random factored heads and ``A = −I/2``: from the
    identity Newton's first step takes the relative residual only from 0.456 to 0.413."""
    rng = np.random.default_rng(0)
    d, h, k = 24, 4, 6
    q, kk, v = (rng.standard_normal((h, k, d)) / np.sqrt(d) for _ in range(3))
    o = rng.standard_normal((h, d, k)) / np.sqrt(k)
    return Layer(heads=gt.FactoredHeads(q, kk, v, o), A=-0.5 * np.eye(d))


def test_map_gives_newton_up_when_its_first_step_projects_past_the_cap() -> None:
    """At the first step's rate (0.413/0.456) the tolerance 1e-10 is ~220 steps away, past
    the run's 30: one step, then NOT_FOUND with the projection in the row's words."""
    layer = _slow_newton_layer()
    res, why, cut = _newton(layer, np.eye(24), Budget(None))
    assert not cut
    assert res.iterations == 1 and len(res.residuals) == 2
    assert res.residuals[1] / res.residuals[0] > 0.8
    assert "given up" in why and "steps away, past the run's 30" in why
    entry, cov = equilibrium(layer, "identity", np.eye(24), Budget(None))
    assert entry.status is Status.NOT_FOUND and cov is None
    assert (
        "given up" in entry.message and "does not say that no equilibrium exists" in entry.message
    )


def test_map_newton_goes_on_after_a_first_step_that_converges_fast() -> None:
    """A planted equilibrium at d = 20 (the Krylov route) from 30 % away: the first step
    projects within the cap, the run goes on to the root, and the two calls read as one run
    (the residuals continue, the iterations add up)."""
    from _planted import planted_case

    case = planted_case(4, 20, "stable", 0.3)
    res, why, cut = _newton(case.layer(), case.start, Budget(None))
    assert not cut
    assert why == "" and res.status is Status.SUCCESS
    assert res.iterations == len(res.residuals) - 1 >= 2
    assert res.residuals[0] == pytest.approx(
        float(
            gt.newton_equilibrium(
                case.layer(), case.start, newton=gt.NewtonSettings(max_iter=1)
            ).residuals[0]
        )
    )
    assert all(b < a for a, b in zip(res.residuals, res.residuals[1:], strict=False))
    np.testing.assert_allclose(res.cov, case.S, rtol=0, atol=1e-8 * np.linalg.norm(case.S))


@pytest.mark.parametrize(("predicted", "limit"), [(False, 0.05), (True, 5.0)])
def test_a_newton_run_the_row_deadline_ends_is_budget_exhausted_not_a_miss(
    predicted: bool, limit: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """d = 256, four random factored heads, a row whose deadline comes before Newton's own
    10 s: a run that the deadline ends is BUDGET_EXHAUSTED, the search cut, not a miss. Either
    at the deadline (0.05 s: no first step of 60 Krylov products fits), or at once when the
    next Lyapunov solve is predicted past it (a prediction of 10⁹ × the Schur form's time),
    before the deadline: 0.3 s on an idle machine, up to 2.5 s beside two CPU hogs and the
    suite (OpenBLAS's threads on a busy machine), so the deadline is 5 s."""
    import gtcontrol.analysis.newton as newton

    if predicted:
        monkeypatch.setattr(newton, "_SOLVE_PER_SCHUR", 1e9)
    rng = np.random.default_rng(7)
    d, h, k = 256, 4, 16
    q, kk, v = (0.5 * rng.standard_normal((h, k, d + 1)) / np.sqrt(d) for _ in range(3))
    o = rng.standard_normal((h, d + 1, k)) / np.sqrt(k)
    o[:, -1, :] = 0.0
    layer = Layer(heads=gt.FactoredHeads(q, kk, v, o))
    start = np.diag(np.append(np.ones(d), 0.0))
    clock = time.perf_counter()
    entry, cov = equilibrium(layer, "identity", start, Budget(limit))
    spent = time.perf_counter() - clock
    assert spent <= limit + 1.0
    assert entry.status is Status.BUDGET_EXHAUSTED and cov is None, entry.message
    if predicted:
        assert "the next Lyapunov solve" in entry.message and spent < limit


def test_map_keeps_its_time_limit_and_names_what_was_cut() -> None:
    net = _aligned("bert")
    em = extract(net)
    clock = time.perf_counter()
    # the whole map takes about 4 s here (1.9 s with a 128-token check, which an idle machine
    # finished within a 2 s limit): a quarter of it is surely too little
    m = model_map(em, T=2.0, token_check=512, time_limit=1.0)
    spent = time.perf_counter() - clock
    assert spent <= 1.0 + 1.0 + 1.5, spent  # its limit, the max(1 s, 10 %) tolerance, slack
    assert m.status is Status.BUDGET_EXHAUSTED
    # what was cut is named: unmapped layers, a row's cut parts, a missing network check, or the
    # network check's own cut (on a fast machine the rows finish and only its tests are cut)
    net = m.stabilized_network
    assert (
        m.unmapped
        or any(r.cut for r in m.rows)
        or net is None
        or (net.status is Status.BUDGET_EXHAUSTED and "cut by the time limit" in m.message)
    )
    text = " ".join([m.message, *m.unmapped, *(r.message for r in m.rows)])
    named = {float(x) for x in re.findall(r"time limit of ([0-9.e+-]+) s", text)}
    assert named <= {1.0}, named  # only the limit the user gave, never a share of it


def test_map_refuses_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(ModelFileError, match=r"broken\.onnx"):
        model_map(bad)
    em = extract(_aligned("bert"))
    with pytest.raises(InvalidParametersError, match="rate"):
        model_map(em, rate="fast")
    with pytest.raises(InvalidParametersError, match="layers"):
        model_map(em, layers=[2])
    with pytest.raises(InvalidParametersError, match="layers"):
        model_map(em, layers=[True])
    with pytest.raises(InvalidParametersError, match="n_null"):
        model_map(em, n_null=3)


def test_report_is_self_contained(mapped: tuple[str, Any, ModelMap], tmp_path: Path) -> None:
    _, _, m = mapped
    rec = model_map_record(tmp_path, m)
    assert set(FIGURES) <= set(rec["figures"])
    page = (tmp_path / "model_map.html").read_text("utf-8")
    assert page.count("data:image/png;base64,") == len(FIGURES)
    assert "http://" not in page and "https://" not in page
    md = (tmp_path / "model_map.md").read_text("utf-8")
    assert "The stabilized network on real inputs" in md and "| layer |" in md
    # the model's shape is named once in the headline (the description may already give it),
    # and both pages say which rate the map used
    headline = md.splitlines()[2]
    assert headline.count(f"d = {m.dim}") == 1, headline
    assert "Rate: " in md and "Rate: " in page
    assert len(rec["outputs"]["table"]) == len(m.rows)


@pytest.mark.slow
def test_report_renders_in_a_headless_browser_with_every_figure(
    mapped: tuple[str, Any, ModelMap], tmp_path: Path
) -> None:
    """The page opened by headless Chromium (Debian's ``chromium``) with no network: every
    embedded figure decodes to an image with a size. A copy of the page gets a script that
    writes what loaded into the DOM, which Chromium dumps after the load."""
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (apt install chromium)")
    _, _, m = mapped
    model_map_record(tmp_path, m)
    page = (tmp_path / "model_map.html").read_text("utf-8")
    probe = (
        "<script>window.addEventListener('load', () => { const i = [...document.images];"
        " document.body.setAttribute('data-loaded', i.filter(x => x.complete &&"
        " x.naturalWidth > 0).length + '/' + i.length); });</script></body>"
    )
    copy = tmp_path / "probe.html"
    copy.write_text(page.replace("</body>", probe), "utf-8")
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--dump-dom",
            copy.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f'data-loaded="{len(FIGURES)}/{len(FIGURES)}"' in proc.stdout, proc.stderr[-2000:]


def test_a_row_is_the_same_with_its_parts_side_by_side_or_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that takes idle cores runs a row's two regimes and its two Newton runs (and
    stabilize's checks) in threads from d = 64: the row is the one computed in turn (each part
    is deterministic on one BLAS thread), and the parts ran in threads. Below d = 64 they stay
    in turn: interpreter-bound work would only share the interpreter."""
    import threading

    from threadpoolctl import threadpool_limits

    from gtcontrol import _blas, _jobs

    cores = os.cpu_count() or 1
    if min(len(os.sched_getaffinity(0)), cores) < 2:
        pytest.skip("one CPU: nothing runs side by side")
    rng = np.random.default_rng(1)
    d, h, dh = 64, 2, 8
    q, k, v = (0.3 * rng.standard_normal((h, dh, d + 1)) / math.sqrt(d) for _ in range(3))
    o = 0.3 * rng.standard_normal((h, d + 1, dh))
    o[:, -1, :] = 0.0  # the affine coordinate never moves
    layer = Layer(heads=gt.FactoredHeads(q, k, v, o))
    tokens = rng.standard_normal((400, d))
    seen: list[str] = []
    real = _jobs.concurrently

    def recorded(jobs: list[Any], **kw: Any) -> list[Any]:
        def named(job: Any) -> Any:
            seen.append(threading.current_thread().name)
            return job()

        return real([lambda j=j: named(j) for j in jobs], **kw)

    module = sys.modules[map_layer.__module__]  # the package's name is the function's
    monkeypatch.setattr(module, "concurrently", recorded)
    monkeypatch.setenv(_jobs.CORES_VARIABLE, "1")

    def row(running: int, lay: Layer, toks: Any) -> LayerMap:
        monkeypatch.setattr(_blas, "_load", lambda: (float(cores), running))
        seen.clear()
        with threadpool_limits(1, user_api="blas"):
            return map_layer(LayerJob(0, lay, toks, T=1.0, token_check=64))

    # runnable threads: every core's (the other workers run), then the caller's alone
    turn = row(cores, layer, tokens)
    assert seen == [threading.current_thread().name] * 4, seen
    side = row(1, layer, tokens)
    assert len(seen) == 4 and all(s.startswith("gtcontrol-verify") for s in seen), seen
    assert turn.status is side.status is Status.SUCCESS, (turn.message, side.message)
    for start in ("identity", "data"):
        a, b = turn.regime(start), side.regime(start)
        assert a is not None and b is not None
        assert (a.kind, a.status, a.blowup_time) == (b.kind, b.status, b.blowup_time)
    assert [(e.start, e.status, e.residual) for e in turn.equilibria] == [
        (e.start, e.status, e.residual) for e in side.equilibria
    ]
    assert turn.stabilization is not None and side.stabilization is not None
    assert side.stabilization.c == turn.stabilization.c
    tc, ts = turn.stabilization.token_certificate, side.stabilization.token_certificate
    assert tc is not None and ts is not None and ts.w2 == pytest.approx(tc.w2, rel=1e-4)
    small = Layer(heads=gt.FactoredHeads(q[:, :, -5:], k[:, :, -5:], v[:, :, -5:], o[:, -5:]))
    row(1, small, tokens[:, -4:])
    assert seen == [threading.current_thread().name] * 4, seen


def test_a_row_is_two_stored_halves_and_a_resume_maps_only_the_half_that_was_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row's stabilization and analysis are jobs of their own, each stored as it lands
    (``layer_001.analysis.pkl``): with layer 1's analysis cut by its time limit, the map ends
    budget_exhausted and stores the three other halves; the resume maps that half alone,
    reuses the three (layer 0 whole, layer 1's stabilization), and the rows are those of a map
    without a store, to the last digit of every reported value."""
    import importlib

    mm = importlib.import_module("gtcontrol.experiments.model_map")
    em = extract(_aligned("bert"))
    store = tmp_path / "rows"
    real = mm._map_half
    ran: list[str] = []

    def cut(job: Any, half: str, budget: Any = None) -> Any:
        ran.append(f"{job.layer_index}.{half}")
        if job.layer_index == 1 and half == "analysis":
            job = dataclasses.replace(job, deadline=time.time() + 1e-3)
        return real(job, half, budget)

    monkeypatch.setattr(mm, "_map_half", cut)
    first = model_map(em, layers=[0, 1], T=1.0, token_check=64, store=store)
    assert first.status is Status.BUDGET_EXHAUSTED, first.message
    assert sorted(p.name for p in (store / "rows").iterdir()) == [
        "layer_000.analysis.pkl",
        "layer_000.stabilization.pkl",
        "layer_001.stabilization.pkl",
    ]
    # every stabilization first, then the analyses
    assert ran == ["0.stabilization", "1.stabilization", "0.analysis", "1.analysis"]
    ran.clear()

    def recorded(job: Any, half: str, budget: Any = None) -> Any:
        ran.append(f"{job.layer_index}.{half}")
        return real(job, half, budget)

    monkeypatch.setattr(mm, "_map_half", recorded)
    again = model_map(em, layers=[0, 1], T=1.0, token_check=64, store=store)
    assert again.status is Status.SUCCESS, again.message
    assert ran == ["1.analysis"]
    assert again.stats["reused"] == [0]
    assert again.stats["reused_halves"] == [
        "layer_000.stabilization",
        "layer_001.stabilization",
        "layer_000.analysis",
    ]
    assert "halves layer_001.stabilization reused from the store" in again.message
    fresh = model_map(em, layers=[0, 1], T=1.0, token_check=64)
    for resumed, whole in zip(again.rows, fresh.rows, strict=True):
        got, want = resumed.row(), whole.row()
        assert got.keys() == want.keys()
        for name in set(got) - {"seconds"}:
            x, y = got[name], want[name]
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), name
