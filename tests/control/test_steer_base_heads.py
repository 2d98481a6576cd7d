"""Steering through a fixed network with added heads: ``steer(..., base=..., mode="full")``.

Every control is checked by evidence independent of how it was built: scipy's ``solve_ivp``
(DOP853, ``rtol = 1e-11``) on the full-matrix moment ODE of docs/theory.md §2 written out here,
``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ``, ``M = A + Σ_h V_h Σ B_h``, ``c = b + Σ_h V_h m``,
with every head as a dense pair (not gtcontrol's factor-form integrator nor its field function),
and the added energy ``∫ E|u|² dt`` of the added field ``u = (A_k + Σ V Σ B) x + b_k + Σ V m``
(the heads after the base's own) integrated along that solution.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import STEER_BASE_DESIGN
from scipy.integrate import simpson, solve_ivp

from gtcontrol import FactoredHeads, Gaussian, Layer, Schedule, Status, steer
from gtcontrol.errors import InvalidParametersError


def _spd(rng: np.random.Generator, d: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(0.5, 2.0, d)) @ q.T


def _dense_case(d: int, seed: int, n_heads: int = 2, size: float = 0.4) -> tuple:
    rng = np.random.default_rng(seed)
    heads = [
        (size * rng.standard_normal((d, d)), size * rng.standard_normal((d, d)))
        for _ in range(n_heads)
    ]
    base = Layer(A=0.1 * rng.standard_normal((d, d)), b=0.1 * rng.standard_normal(d), heads=heads)
    g0 = Gaussian(rng.standard_normal(d), _spd(rng, d))
    g1 = Gaussian(rng.standard_normal(d), _spd(rng, d))
    return g0, g1, base


def _factored_case(d: int, seed: int) -> tuple:
    """A factored base on ``R^{d+1}`` (affine coordinate last, not moved by its heads) and a
    rank-``d`` pair on the same active subspace: a rotated and shifted copy of the initial."""
    rng = np.random.default_rng(seed)
    n = d + 1
    q, k, v = (0.5 * rng.standard_normal((3, 2, n)) for _ in range(3))
    k[:, :, -1] = 0.0
    o = 0.5 * rng.standard_normal((3, n, 2))
    o[:, -1, :] = 0.0
    base = Layer(b=np.append(0.1 * rng.standard_normal(d), 0.0), heads=FactoredHeads(q, k, v, o))
    s0 = np.zeros((n, n))
    s0[:d, :d] = _spd(rng, d)
    m0 = np.append(rng.standard_normal(d), 1.0)
    rot = np.eye(n)
    rot[:d, :d] = np.linalg.qr(rng.standard_normal((d, d)))[0]
    m1 = rot @ m0 + np.append(0.5 * rng.standard_normal(d), 0.0)
    return Gaussian(m0, s0), Gaussian(m1, rot @ s0 @ rot.T), base


def _field(a: np.ndarray, b: np.ndarray, heads: list, m: np.ndarray, s: np.ndarray) -> tuple:
    mm, c = a.copy(), b.copy()
    for v, bh in heads:
        mm = mm + v @ s @ bh
        c = c + v @ m
    return mm, c


def _independent(schedule: Schedule, initial: Gaussian, bases: list[Layer]) -> tuple:
    """Terminal Gaussian and added energy of the full-matrix moment ODE by scipy."""
    d = initial.dim
    y = np.concatenate([initial.mean, initial.cov.ravel()])
    energy = 0.0
    for k, (lay, base) in enumerate(zip(schedule.layers, bases, strict=True)):
        heads = [(np.array(v), np.array(bh)) for v, bh in lay.heads]
        added = heads[base.n_heads :]
        a_add, b_add = lay.A - base.A, lay.b - base.b

        def rhs(_t: float, z: np.ndarray, lay: Layer = lay, heads: list = heads) -> np.ndarray:
            m, s = z[:d], z[d:].reshape(d, d)
            mm, c = _field(lay.A, lay.b, heads, m, s)
            return np.concatenate([mm @ m + c, (mm @ s + s @ mm.T).ravel()])

        t0, t1 = k * schedule.duration, (k + 1) * schedule.duration
        sol = solve_ivp(
            rhs, (t0, t1), y, method="DOP853", rtol=1e-11, atol=1e-13, dense_output=True
        )
        assert sol.success, sol.message
        ts = np.linspace(t0, t1, 129)
        power = []
        for t in ts:
            z = sol.sol(t)
            m, s = z[:d], z[d:].reshape(d, d)
            mm, c = _field(a_add, b_add, added, m, s)
            u = mm @ m + c
            power.append(float(np.trace(mm @ s @ mm.T) + u @ u))
        energy += float(simpson(power, x=ts))
        y = sol.y[:, -1]
    cov = y[d:].reshape(d, d)
    return Gaussian(y[:d], 0.5 * (cov + cov.T)), energy


def _scale(g0: Gaussian, g1: Gaussian) -> float:
    return max(
        1.0,
        float(np.linalg.norm(g0.mean)),
        float(np.linalg.norm(g1.mean)),
        math.sqrt(float(np.trace(g0.cov))),
        math.sqrt(float(np.trace(g1.cov))),
    )


def _assert_base_heads_first(schedule: Schedule, bases: list[Layer]) -> None:
    """Every layer holds its base's heads first, unchanged (a factored group is the same
    object), then at most one added dense head."""
    for lay, base in zip(schedule.layers, bases, strict=True):
        assert lay.factored_heads is base.factored_heads
        n = len(base.dense_heads)
        assert len(lay.dense_heads) in (n, n + 1)
        for (v, b), (v0, b0) in zip(lay.dense_heads[:n], base.dense_heads, strict=True):
            assert np.array_equal(v, v0) and np.array_equal(b, b0)


# ============================================================================ correctness
def test_added_heads_through_dense_heads_reach_the_target_with_an_honest_energy() -> None:
    """The flow construction with added heads: verified independently, its ``cost`` the added
    field's energy on the independent solution, never above the affine additions' own."""
    g0, g1, base = _dense_case(4, 1)
    full = steer(g0, g1, 1.0, n_layers=4, base=base, mode="full", method="flow")
    ffn = steer(g0, g1, 1.0, n_layers=4, base=base, mode="ffn", method="flow")
    assert full.status is Status.SUCCESS, full.message
    _assert_base_heads_first(full.controls, [base] * 4)
    assert sum(full.stats["added_heads"]) >= 1  # a head was added, and it paid off
    end, energy = _independent(full.controls, g0, [base] * 4)
    assert end.bures_wasserstein(g1) < 1e-8 * _scale(g0, g1)
    assert full.cost == pytest.approx(energy, rel=1e-6)
    assert full.cost <= ffn.cost * (1.0 + 1e-9)


def test_added_heads_through_factored_heads_hold_the_affine_coordinate() -> None:
    g0, g1, base = _factored_case(5, 2)
    res = steer(g0, g1, 1.0, n_layers=4, base=base, mode="full", method="flow")
    assert res.status is Status.SUCCESS, res.message
    _assert_base_heads_first(res.controls, [base] * 4)
    assert sum(res.stats["added_heads"]) >= 1
    for lay in res.controls.layers:  # nothing added moves the affine coordinate
        assert not np.any(lay.A[-1]) and lay.b[-1] == 0.0
        for v, _ in lay.dense_heads:
            assert not np.any(v[-1])
    end, energy = _independent(res.controls, g0, [base] * 4)
    assert end.bures_wasserstein(g1) < 1e-7 * _scale(g0, g1)
    assert abs(end.mean[-1] - 1.0) < 1e-12
    assert res.cost == pytest.approx(energy, rel=1e-6)


@pytest.mark.parametrize("kind", ["dense", "factored"])
def test_added_heads_at_d16_reach_the_target_independently(kind: str) -> None:
    if kind == "dense":
        g0, g1, base = _dense_case(16, 3, n_heads=3, size=0.15)
    else:
        g0, g1, base = _factored_case(15, 3)
    res = steer(g0, g1, 1.0, n_layers=4, base=base, mode="full", method="flow")
    assert res.status is Status.SUCCESS, res.message
    _assert_base_heads_first(res.controls, [base] * 4)
    end, energy = _independent(res.controls, g0, [base] * 4)
    assert end.bures_wasserstein(g1) < 1e-7 * _scale(g0, g1)
    assert res.cost == pytest.approx(energy, rel=1e-6)


def test_added_heads_through_a_schedule_keep_each_layers_heads() -> None:
    g0, g1, _ = _dense_case(3, 4)
    bases = [_dense_case(3, 10 + s, n_heads=1 + s % 2)[2] for s in range(3)]
    res = steer(g0, g1, 0.9, n_layers=3, base=Schedule(bases, 0.9), mode="full", method="flow")
    assert res.status is Status.SUCCESS, res.message
    _assert_base_heads_first(res.controls, bases)
    end, energy = _independent(res.controls, g0, bases)
    assert end.bures_wasserstein(g1) < 1e-8 * _scale(g0, g1)
    assert res.cost == pytest.approx(energy, rel=1e-6)


def test_the_nlp_with_added_heads_is_never_worse_than_the_construction() -> None:
    """At d ≤ 6 ``method="auto"`` polishes the construction with the collocation NLP (the
    added head's ``V`` free, its ``B`` held) and keeps the cheaper verified control."""
    g0, g1, base = _dense_case(3, 0)
    flow = steer(g0, g1, 1.0, n_layers=3, base=base, mode="full", method="flow")
    best = steer(g0, g1, 1.0, n_layers=3, base=base, mode="full")
    assert flow.success and best.success, (flow.message, best.message)
    assert best.cost <= flow.cost * (1.0 + 1e-12)
    assert best.stats["construction_energy"] == pytest.approx(flow.cost, rel=1e-9)
    _assert_base_heads_first(best.controls, [base] * 3)
    end, energy = _independent(best.controls, g0, [base] * 3)
    assert end.bures_wasserstein(g1) < 1e-7 * _scale(g0, g1)
    assert best.cost == pytest.approx(energy, rel=1e-6)


# ============================================================================ honesty
def test_added_heads_with_an_unreachable_terminal_tol_are_not_a_success() -> None:
    g0, g1, base = _dense_case(3, 5)
    res = steer(g0, g1, 1.0, n_layers=3, base=base, mode="full", method="flow", terminal_tol=1e-18)
    assert res.status is Status.FAILED
    assert "terminal_tol" in res.message
    assert res.stats["relative_terminal_error"] > 1e-18


def test_added_heads_keep_the_time_limit() -> None:
    """Contract only: it ends within the limit plus a margin, with a complete control and an
    honest status (SUCCESS only if verified)."""
    g0, g1, base = _factored_case(12, 6)
    clock = time.perf_counter()
    res = steer(g0, g1, 1.0, n_layers=6, base=base, mode="full", time_limit=0.05)
    assert time.perf_counter() - clock < 0.05 + 1.5
    assert res.controls.n_layers == 6
    assert res.status in {Status.SUCCESS, Status.BUDGET_EXHAUSTED}
    if res.success:
        assert res.stats["relative_terminal_error"] <= 1e-6


# ============================================================================ bad input
def test_steer_through_a_base_refuses_added_heads_alone() -> None:
    """Mode ``"attention"`` (heads without ``A_k, b_k``) is not built around a base: refused
    naming ``mode``, not answered with another family."""
    g0, g1, base = _dense_case(3, 7)
    with pytest.raises(InvalidParametersError, match="mode: around a base") as info:
        steer(g0, g1, 1.0, n_layers=2, base=base, mode="attention")
    assert "'full'" in str(info.value)


def test_added_heads_refuse_a_malformed_base() -> None:
    g0, g1, _ = _dense_case(3, 8)
    with pytest.raises(InvalidParametersError, match="base: expected a Layer or a Schedule"):
        steer(g0, g1, 1.0, n_layers=2, base=np.eye(3), mode="full")  # type: ignore[arg-type]


# ============================================================================ the CLI
SMALL_FULL = STEER_BASE_DESIGN.replace(
    'title = "through a fixed head"', 'title = "through a fixed head, with added heads"'
).replace(
    "[steer]\ntokens = 0\n",
    '[steer]\nmode = "full"\nmethod = "flow"\ntokens = 0\nblank_energy = false\n',
)


def test_steer_design_adds_heads_through_a_base(tmp_path: Path) -> None:
    """``mode = "full"`` with a ``[base]``: the written controls hold the base head first, then
    the added ones; rebuilt from ``result.json`` and integrated independently, they reach the
    target."""
    from gtcontrol._result_file import load_result
    from gtcontrol.cli import main

    design = tmp_path / "d.toml"
    design.write_text(SMALL_FULL)
    out = tmp_path / "out"
    assert main(["run", "-q", str(design), "-o", str(out)]) == 0
    o = load_result(out / "result.json")["outputs"]
    assert o["success"] and o["base_heads_kept"] is True and o["mode"] == "full"
    assert len(o["added_heads"]) == 4
    layers = []
    for c in o["controls"]["layers"]:
        pairs = c["heads"] if "heads" in c else [{"V": c["V"], "B": c["B"]}]
        heads = [(np.array(h["V"]), np.array(h["B"])) for h in pairs]
        np.testing.assert_array_equal(heads[0][0], 0.8 * np.eye(2))
        assert len(heads) - 1 == o["added_heads"][len(layers)]
        layers.append(Layer(A=np.array(c["A"]), b=np.array(c["b"]), heads=heads))
    g0 = Gaussian([0.0, 0.0], np.eye(2))
    base = Layer(A=np.diag([0.1, -0.1]), V=0.8, B=np.eye(2))
    end, energy = _independent(Schedule(layers, 1.0), g0, [base] * 4)
    assert end.bures_wasserstein(Gaussian([1.0, -0.5], [[0.6, 0.1], [0.1, 1.4]])) < 1e-6
    assert o["added_energy"] == pytest.approx(energy, rel=1e-6)
