"""Regression tests of the second hostile round (issue 22): ``time_limit`` is a promise, a
``SUCCESS`` is verified, and only bad input raises (always a ``GTControlError``).

One test (or a few) per reproducer of ``shared/hostile-cases/`` (the number in the name);
those that take longer than a few seconds run the reproducer at its full size behind
``@pytest.mark.slow``, with a smaller version of the same case in the default suite.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import ROTATION_TABLES

import gtcontrol as gt
from gtcontrol._status import MAX_TIME_LIMIT, Budget, as_time_limit
from gtcontrol.errors import GTControlError, InvalidParametersError


def allowed(limit: float) -> float:
    """``time_limit`` plus the tolerance of docs/architecture.md, ``max(1 s, 10 %)``."""
    return limit + max(1.0, 0.1 * limit)


def timed(call: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = call()
    return out, time.perf_counter() - t0


LAYER = gt.Layer(A=[[0.3, -0.4], [0.4, 0.2]], B=np.eye(2), V=-1.0)
G2 = gt.Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])


def _spd(d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 100)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(0.3, 2.0, d)) @ q.T


def _lowrank(d: int, r: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed + 300).standard_normal((d, r))
    return m @ m.T / r


def _ill_conditioned(d: int, condition: float, seed: int = 100) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return (q * np.logspace(0, -math.log10(condition), d)) @ q.T


# -- 01: time_limit (and seed) validated once, the same way everywhere -----------------------------

#: One small call per solver of the reproducer, taking ``time_limit``.
SOLVERS = {
    "simulate": lambda tl: gt.simulate(LAYER, G2, T=1.0, time_limit=tl),
    "simulate_tokens": lambda tl: gt.simulate_tokens(
        LAYER, G2.sample(64, seed=np.random.default_rng(0)), T=1.0, time_limit=tl
    ),
    "equilibria": lambda tl: gt.equilibria(LAYER, time_limit=tl),
    "analyze": lambda tl: gt.analyze(LAYER, G2, time_limit=tl),
    "steer": lambda tl: gt.steer(
        gt.Gaussian([1.0], [[0.5]]),
        gt.Gaussian([2.0], [[1.5]]),
        1.0,
        n_layers=2,
        mode="ffn",
        time_limit=tl,
    ),
    "design_mean_matching": lambda tl: gt.design_mean_matching(
        gt.Gaussian([1.0, -2.0], [[1.0, 0.3], [0.3, 0.5]]), robustness=False, time_limit=tl
    ),
    "compare_tokens": lambda tl: gt.compare_tokens(
        LAYER, G2, T=0.5, n_tokens=(32, 64), repeats=1, time_limit=tl
    ),
}


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_01_a_huge_integer_time_limit_means_no_limit(name: str) -> None:
    result = SOLVERS[name](10**400)  # used to raise OverflowError in every solver
    assert result.status is not gt.Status.BUDGET_EXHAUSTED, result.message


@pytest.mark.parametrize(
    "bad", [math.nan, -1.0, 0, -(10**400), True, False, "1", [1.0], 1j, np.float64("nan")]
)
@pytest.mark.parametrize("name", ["simulate", "steer", "design_mean_matching", "compare_tokens"])
def test_01_a_bad_time_limit_is_refused_naming_it(name: str, bad: Any) -> None:
    with pytest.raises(InvalidParametersError, match="time_limit"):
        SOLVERS[name](bad)


def test_01_as_time_limit_is_the_one_check() -> None:
    assert as_time_limit(None) is None and as_time_limit(2) == 2.0
    for no_limit in (math.inf, 10**400, np.float64(np.inf), 2 * MAX_TIME_LIMIT):
        assert as_time_limit(no_limit) is None
    assert Budget(10**400).time_limit is None and Budget(10**400).grace() is None
    with pytest.raises(InvalidParametersError, match=r"10\^4000"):  # no 4000-digit message
        as_time_limit(-(10**4000))


#: The public functions with an integer ``seed``, in the order of the calls below.
_SEEDED = (
    "steer",
    "design_mean_matching",
    "compare_tokens",
    "design_token_certificate",
    "equilibria",
    "design_convergence",
    "design_robustness",
    "stabilize",
)


@pytest.mark.parametrize("bad", [-1, True, 1.5, math.nan, "0", None])
@pytest.mark.parametrize(
    "call",
    [
        lambda s: gt.steer(G2, G2, 1.0, n_layers=2, mode="ffn", seed=s),
        lambda s: gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False, seed=s),
        lambda s: gt.compare_tokens(LAYER, G2, T=0.5, n_tokens=(32, 64), repeats=1, seed=s),
        lambda s: gt.design_token_certificate(
            gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False).layer,
            ([1.0], [[1.0]]),
            seed=s,
        ),
        lambda s: gt.equilibria(LAYER, seed=s),
        lambda s: gt.design_convergence(
            gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False), seed=s
        ),
        lambda s: gt.design_robustness(
            gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False).layer,
            ([1.0], [[1.0]]),
            seed=s,
        ),
        lambda s: gt.stabilize(LAYER, G2, add="head", seed=s),
    ],
    ids=list(_SEEDED),
)
def test_01_a_bad_seed_is_refused_naming_it(call: Any, bad: Any) -> None:
    """Every public function with an integer ``seed`` (the list is checked complete below):
    ``equilibria(seed=-1)`` leaked numpy's ``ValueError`` and ``design_convergence(seed=1.5)``
    a ``TypeError`` before they used the one check, ``as_seed``."""
    with pytest.raises(InvalidParametersError, match="seed"):
        call(bad)


#: Public functions whose ``seed`` also takes ``None`` or a Generator (``as_rng``).
_RNG_SEEDS = {"simulate_tokens"}


def test_01_the_bad_seed_list_names_every_public_function_with_a_seed() -> None:
    import inspect

    with_seed = {
        name
        for name in gt.__all__
        if callable(f := getattr(gt, name))
        and not inspect.isclass(f)
        and "seed" in inspect.signature(f).parameters
    }
    assert with_seed == set(_SEEDED) | _RNG_SEEDS


def test_01_numeric_options_refuse_huge_integers_by_name() -> None:
    with pytest.raises(InvalidParametersError, match="terminal_tol"):
        gt.steer(G2, G2, 1.0, n_layers=2, terminal_tol=-(10**400))
    with pytest.raises(InvalidParametersError, match="max_iter"):
        gt.steer(G2, G2, 1.0, n_layers=2, solver=gt.IpoptSettings(max_iter=10**400))
    with pytest.raises(InvalidParametersError, match="rate"):
        gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), rate=10**400)


# -- 02: compare_tokens never leaks the internal BudgetExhausted -----------------------------------


def test_02_compare_tokens_with_a_tiny_time_limit_is_a_result() -> None:
    cmp = gt.compare_tokens(LAYER, G2, T=2.0, n_tokens=(64, 256), repeats=2, time_limit=1e-9)
    assert cmp.status is gt.Status.BUDGET_EXHAUSTED and not cmp.success
    assert "time limit" in cmp.message and cmp.stats["completed_runs"] == 0


# -- 03: one velocity evaluation of N = 8192 tokens is interruptible -------------------------------


def _strong_attention(d: int = 32, s: float = 30.0) -> gt.Layer:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((d, d)) / np.sqrt(d)
    heads = [
        (s * rng.standard_normal((d, d)) / np.sqrt(d), s * rng.standard_normal((d, d)) / np.sqrt(d))
        for _ in range(4)
    ]
    return gt.Layer(A=a, heads=heads)


def test_03_simulate_tokens_keeps_a_half_second_limit_at_n_8192() -> None:
    """The limit and its tolerance are the contract's (0.5 s + 1 s), on one BLAS thread.

    Why one thread (as tests/test_budget.py): the initial moments of the 8192 tokens are one
    32×8192×32 product, computed before the first budget check. On two cores loaded by other
    processes a two-thread OpenBLAS spin-waits in it: 3.0 s in one of three fresh runs against
    0.51–0.54 s otherwise, and 0.57–0.70 s in three of three on one thread (measured at load
    average 4.7). That measures the machine's load, not the budget; the query blocks that the
    budget interrupts run on the kernel's own threads either way.
    """
    from threadpoolctl import threadpool_limits

    x = np.random.default_rng(0).standard_normal((8192, 32))
    layer = _strong_attention()
    with threadpool_limits(1):
        tr, wall = timed(lambda: gt.simulate_tokens(layer, x, T=20.0, time_limit=0.5))
    assert wall <= allowed(0.5), wall  # was 13-25 s: the budget is checked between query blocks
    assert tr.status is gt.Status.BUDGET_EXHAUSTED and "time limit" in tr.message
    assert np.all(np.isfinite(tr.final_tokens)) and len(tr) >= 1


# -- 05: steer's verifying re-simulation runs under the remaining budget ---------------------------


@pytest.mark.parametrize(
    ("g0", "g1"),
    [
        (gt.Gaussian(np.zeros(4), _lowrank(4, 2, 0)), gt.Gaussian(np.ones(4), _lowrank(4, 2, 7))),
        (gt.Gaussian(np.zeros(3), 1e-6 * _spd(3, 0)), gt.Gaussian(np.zeros(3), 1e6 * _spd(3, 1))),
    ],
    ids=["rank2-to-rank2", "scale-1e-6-to-1e6"],
)
def test_05_steer_keeps_its_time_limit(g0: gt.Gaussian, g1: gt.Gaussian) -> None:
    res, wall = timed(lambda: gt.steer(g0, g1, 1.0, n_layers=6, time_limit=1.0))
    assert wall <= allowed(1.0), wall  # was 40 s and more than 200 s at time_limit=5
    assert res.status is not gt.Status.SUCCESS or res.terminal_error <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["a", "b"])
def test_05_the_reproducer_at_time_limit_5(variant: str) -> None:
    if variant == "b":
        g0 = gt.Gaussian(np.zeros(3), 1e-6 * _spd(3, 0))
        g1 = gt.Gaussian(np.zeros(3), 1e6 * _spd(3, 1))
    else:
        g0 = gt.Gaussian(np.zeros(4), _lowrank(4, 2, 0))
        g1 = gt.Gaussian(np.ones(4), _lowrank(4, 2, 7))
    res, wall = timed(lambda: gt.steer(g0, g1, 1.0, n_layers=6, time_limit=5.0))
    assert wall <= allowed(5.0), wall
    assert res.status is not gt.Status.SUCCESS or res.terminal_error <= 1e-6


# -- 06: steer between zero covariances is a result, not an error about "A" ------------------------


def test_06_steer_between_zero_covariances() -> None:
    g0 = gt.Gaussian(np.zeros(3), np.zeros((3, 3)))
    g1 = gt.Gaussian(np.ones(3), np.zeros((3, 3)))
    ffn = gt.steer(g0, g1, 1.0, n_layers=4, mode="ffn")
    full = gt.steer(g0, g1, 1.0, n_layers=4)  # used to raise "A: contains NaN"
    for res in (ffn, full):
        assert res.success and res.terminal_error <= 1e-6
        # the moments really reach the target: an independent re-simulation
        final = gt.simulate(res.controls, g0).final
        assert np.allclose(final.mean, g1.mean, atol=1e-6)
        assert np.allclose(final.cov, 0.0, atol=1e-12)
    # a zero covariance is not moved: the kinetic energy is that of the mean, |Δm|²/T
    assert full.kinetic_energy == pytest.approx(3.0, rel=1e-3)


# -- 07: a design whose min_ess is not met is not SUCCESS ------------------------------------------


@pytest.mark.parametrize(
    ("mean", "cov"),
    [
        pytest.param(np.ones(8), _ill_conditioned(8, 1e8), marks=pytest.mark.slow),  # 8 s
        ([1e8], [[1e-8]]),
    ],
    ids=["condition-1e8-d8", "mean-1e8-var-1e-8"],
)
def test_07_min_ess_not_met_is_not_success(mean: Any, cov: Any) -> None:
    res = gt.design_mean_matching(gt.Gaussian(mean, cov), robustness=False, time_limit=30)
    assert res.ess is not None and not res.ess.success
    assert res.status is gt.Status.FAILED and not res.success
    assert res.message.startswith("min_ess = 0.5 is not met")
    # the layer is the certified unscaled design, not a 10⁶-stiff one that buys nothing
    assert res.certificate.success and res.ess.scale == 1.0
    assert res.certificate.mean_rate == pytest.approx(1.0, rel=1e-6)
    # without the requirement the same design is a success
    plain = gt.design_mean_matching(gt.Gaussian(mean, cov), robustness=False, min_ess=None)
    assert plain.success and np.allclose(plain.layer.A, res.layer.A)


def test_07_a_success_never_contradicts_its_requirements() -> None:
    res = gt.design_mean_matching(
        gt.Gaussian([1.0, -2.0], [[1.0, 0.3], [0.3, 0.5]]), robustness=False, token_check=128
    )
    assert res.success
    assert res.certificate.success and res.ess is not None and res.ess.success
    assert res.token_certificate is not None and res.token_certificate.success


# -- 08: the design NLP is set up inside the budget ------------------------------------------------


def test_08_design_with_fixed_b_at_d24_keeps_half_a_second() -> None:
    rng = np.random.default_rng(100)
    m = rng.standard_normal((24, 24))
    cov = m @ m.T / 24 + 0.3 * np.eye(24)
    rng = np.random.default_rng(5)
    bf = rng.standard_normal((24, 24))
    bf = bf @ bf.T / 24 + np.eye(24)
    res, wall = timed(
        lambda: gt.design_mean_matching(gt.Gaussian(np.ones(24), cov), fixed_B=bf, time_limit=0.5)
    )
    assert wall <= allowed(0.5), wall  # was 34-40 s
    assert res.status is gt.Status.BUDGET_EXHAUSTED
    assert "estimated at" in res.message and "time limit of 0.5 s" in res.message
    assert res.certificate.success  # the closed-form starting design, verified
    assert np.array_equal(res.layer.heads[0][1], bf)  # the fixed B is kept exactly


# -- 09: overflowing tokens are a failed certificate, not an internal InvalidGaussianError ---------


def test_09_design_token_check_whose_tokens_overflow() -> None:
    res = gt.design_mean_matching(
        gt.Gaussian([1.0, -2.0], [[1.0, 0.3], [0.3, 0.5]]), T=1e9, token_check=64, time_limit=60
    )
    tc = res.token_certificate
    assert tc is not None and tc.status is gt.Status.OVERFLOW and not tc.success
    assert res.status is gt.Status.FAILED and res.message.startswith("token_check = 64 is not met")


def test_09_tokens_that_leave_the_range_stop_with_overflow() -> None:
    x = np.random.default_rng(0).standard_normal((64, 2))
    for method in ("DOP853", "rk4"):
        tr = gt.simulate_tokens(gt.Layer(A=200 * np.eye(2)), x, T=5.0, method=method)
        assert tr.status is gt.Status.OVERFLOW and tr.overflow_time < 5.0
        # every recorded state is a valid Gaussian (it used to raise past 1e150)
        assert np.max(np.abs(tr.cov)) <= 1e150
        tr.final, tr.empirical(0)


def test_09_compare_tokens_reports_the_overflow_of_the_moments() -> None:
    cmp = gt.compare_tokens(gt.Layer(A=200 * np.eye(2)), G2, T=1.0, n_tokens=(64, 256), repeats=2)
    assert cmp.status is gt.Status.OVERFLOW and not cmp.consistent
    assert "overflows" in cmp.message and "1e+150" in cmp.message


@pytest.mark.slow
def test_09_the_reproducer() -> None:
    cov = _ill_conditioned(32, 1e8)
    res, wall = timed(
        lambda: gt.design_mean_matching(
            gt.Gaussian(np.linspace(-3, 3, 32), cov), token_check=512, time_limit=60
        )
    )
    assert wall <= allowed(60.0)
    assert not res.success


# -- 10: the collocation NLP is built inside the budget, or refused up front -----------------------


def _gauss(d: int, seed: int) -> gt.Gaussian:
    rng = np.random.default_rng(seed + 100)
    m = rng.standard_normal((d, d))
    mean = np.random.default_rng(seed + 200).standard_normal(d)
    return gt.Gaussian(mean, m @ m.T / d + 0.3 * np.eye(d))


def test_10_collocation_at_d16_is_refused_up_front_naming_the_limit() -> None:
    res, wall = timed(
        lambda: gt.steer(
            _gauss(16, 1), _gauss(16, 2), 1.0, n_layers=10, method="collocation", time_limit=2.0
        )
    )
    assert wall <= allowed(2.0), wall  # had not returned after 90 s
    assert res.status is gt.Status.BUDGET_EXHAUSTED
    assert "estimated at" in res.message and "time limit of 2 s" in res.message
    assert res.stats["build_estimate"] > 2.0 and res.controls.n_layers == 10


# -- 11: sweeps submit their points in batches ----------------------------------------------------


def test_11_batches_keep_the_scheduler_small_and_store_every_point(tmp_path: Path) -> None:
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


def test_11_batch_sizes_aim_at_a_second_of_work_after_a_ramp() -> None:
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


def test_11_plan_keys_are_the_point_keys_and_a_large_plan_is_fast() -> None:
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


@pytest.mark.slow
def test_11_the_reproducer_keeps_its_time_limit(tmp_path: Path) -> None:
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


# -- 12: result files and design files -------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, 123, b"out", 1.5, ["out"]])
def test_12_load_result_refuses_what_is_not_a_path(bad: Any) -> None:
    from gtcontrol.cli import load_result

    with pytest.raises(GTControlError, match="outdir: expected a path"):
        load_result(bad)


def _result_folder(tmp_path: Path, ref: dict[str, Any]) -> Path:
    np.savez(tmp_path / "result.npz", x=np.arange(6.0).reshape(2, 3))
    doc = {"gtcontrol_version": "0", "outputs": {"x": {"$npz": "result.npz", **ref}}}
    (tmp_path / "result.json").write_text(json.dumps(doc), "utf-8")
    return tmp_path


def test_12_load_result_checks_the_declared_shape_and_dtype(tmp_path: Path) -> None:
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


def test_12_a_design_file_that_is_a_directory_is_named(tmp_path: Path, capsys: Any) -> None:
    from gtcontrol.cli import main

    folder = tmp_path / "design.toml"
    folder.mkdir()
    assert main(["run", str(folder), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gtcontrol: error: {folder}: is a directory, not a design file"]


def test_a_nested_solver_gets_the_time_left_and_half_the_grace() -> None:
    # A nested public solver honours its own limit only to within its own max(1 s, 10 %):
    # handing it the whole grace let the two tolerances add up (API fuzzer case 756).
    assert Budget(None).nested_limit() is None
    before = Budget(20.0)  # 20 s left, grace 21 s: 20 + (21 − 20)/2
    assert before.nested_limit() == pytest.approx(20.5, abs=0.05)
    after = Budget(1e-6)
    time.sleep(0.01)  # past the deadline: half of the grace that is left
    grace, nested = after.grace(), after.nested_limit()
    assert grace is not None and nested is not None
    assert nested == pytest.approx(0.5 * grace, rel=0.05) and nested < grace
    spent = Budget(1e-6)
    spent._deadline -= 10.0  # the grace is spent too
    assert spent.nested_limit() == 1e-9


def _steer_d128() -> tuple[gt.Gaussian, gt.Gaussian]:
    """API fuzzer case 756's end points: a rotated spread of variances at d = 128 to N(1, I)."""
    rng = np.random.default_rng(3)
    d = 128
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    g0 = gt.Gaussian(rng.standard_normal(d), (q * np.linspace(0.5, 2.0, d)) @ q.T)
    return g0, gt.Gaussian(np.ones(d), np.eye(d))


def test_steer_at_d128_with_a_tiny_limit_keeps_the_promise() -> None:
    # API fuzzer case 756: 1.57–1.90 s for time_limit = 1e-9 (promise: 1 s).
    g0, g1 = _steer_d128()
    t0 = time.perf_counter()
    res = gt.steer(g0, g1, 1.0, n_layers=6, time_limit=1e-9)
    assert time.perf_counter() - t0 <= 1.0
    assert res.status is gt.Status.BUDGET_EXHAUSTED and not res.success


def test_steer_keeps_time_to_verify_the_flow_construction_it_returns() -> None:
    # d = 128, L = 6: the gauge search of the flow construction takes about 12 s. Under a
    # limit it ran to the deadline and its verification got 0.22 s of the 0.7 s it needs:
    # an unverified control (no trajectory). It now stops while twice the estimated
    # verification is left, and the control it returns is verified within the promise.
    g0, g1 = _steer_d128()
    t0 = time.perf_counter()
    res = gt.steer(g0, g1, 1.0, n_layers=6, time_limit=3.0)
    assert time.perf_counter() - t0 <= 4.0
    assert res.status is gt.Status.BUDGET_EXHAUSTED and not res.success
    assert res.trajectory is not None, res.message
    assert res.terminal_error <= 1e-8, res.message
    assert "best feasible control so far" in res.message
