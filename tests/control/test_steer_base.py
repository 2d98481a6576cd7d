"""Steering through a fixed network: ``steer(..., base=...)`` keeps the base's heads.

Every control is checked by evidence independent of how it was built: scipy's ``solve_ivp``
(DOP853, ``rtol = 1e-11``) on the full-matrix moment ODE with the base's heads as dense pairs
(not gtcontrol's factor-form integrator nor its field function), and the closed-form energy of
the exact L-layer construction for a base without heads.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from gtcontrol import (
    FactoredHeads,
    Gaussian,
    Layer,
    Schedule,
    Status,
    exact_layer_steering,
    kinetic_energy,
    steer,
)
from gtcontrol.errors import InvalidGaussianError, InvalidParametersError, UnreachableTargetError


def _spd(rng: np.random.Generator, d: int, lo: float = 0.5, hi: float = 2.0) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(lo, hi, d)) @ q.T


def _dense_base(d: int, seed: int, n_heads: int = 2, size: float = 0.4) -> Layer:
    rng = np.random.default_rng(seed)
    heads = [
        (size * rng.standard_normal((d, d)), size * rng.standard_normal((d, d)))
        for _ in range(n_heads)
    ]
    return Layer(A=0.1 * rng.standard_normal((d, d)), b=0.1 * rng.standard_normal(d), heads=heads)


def _pair(d: int, seed: int) -> tuple[Gaussian, Gaussian]:
    rng = np.random.default_rng(seed + 100)
    return (
        Gaussian(rng.standard_normal(d), _spd(rng, d)),
        Gaussian(rng.standard_normal(d), _spd(rng, d)),
    )


def _augmented_case(d: int, seed: int) -> tuple[Gaussian, Gaussian, Layer]:
    """A factored base on ``R^{d+1}`` (affine coordinate last, not moved by the heads) and a
    rank-``d`` pair on the same active subspace: a rotated and shifted copy of the initial."""
    rng = np.random.default_rng(seed)
    h, dh, n = 3, 2, d + 1
    q, k, v = (0.5 * rng.standard_normal((h, dh, n)) for _ in range(3))
    k[:, :, -1] = 0.0  # no key bias: keys read the tokens only
    o = 0.5 * rng.standard_normal((h, n, dh))
    o[:, -1, :] = 0.0  # the heads' output leaves the affine coordinate alone
    b = np.append(0.1 * rng.standard_normal(d), 0.0)
    base = Layer(b=b, heads=FactoredHeads(q, k, v, o))
    s0 = np.zeros((n, n))
    s0[:d, :d] = _spd(rng, d)
    m0 = np.append(rng.standard_normal(d), 1.0)
    rot, _ = np.linalg.qr(rng.standard_normal((d, d)))
    big = np.eye(n)
    big[:d, :d] = rot
    m1 = big @ m0 + np.append(0.5 * rng.standard_normal(d), 0.0)
    return Gaussian(m0, s0), Gaussian(m1, big @ s0 @ big.T), base


def _independent(schedule: Schedule, initial: Gaussian) -> Gaussian:
    """Terminal Gaussian of the full-matrix moment ODE by scipy, written out here."""
    d = initial.dim
    y = np.concatenate([initial.mean, initial.cov.ravel()])

    for k, lay in enumerate(schedule.layers):
        heads = [(np.array(v), np.array(b)) for v, b in lay.heads]

        def rhs(_t: float, z: np.ndarray, lay: Layer = lay, heads: list = heads) -> np.ndarray:
            m, s = z[:d], z[d:].reshape(d, d)
            mm, c = lay.A.copy(), lay.b.copy()
            for v, b in heads:
                mm = mm + v @ s @ b
                c = c + v @ m
            return np.concatenate([mm @ m + c, (mm @ s + s @ mm.T).ravel()])

        t0, t1 = k * schedule.duration, (k + 1) * schedule.duration
        sol = solve_ivp(rhs, (t0, t1), y, method="DOP853", rtol=1e-11, atol=1e-13)
        assert sol.success, sol.message
        y = sol.y[:, -1]
    cov = y[d:].reshape(d, d)
    return Gaussian(y[:d], 0.5 * (cov + cov.T))


def _assert_heads_kept(result_schedule: Schedule, bases: list[Layer]) -> None:
    for lay, base in zip(result_schedule.layers, bases, strict=True):
        assert lay.factored_heads is base.factored_heads
        assert len(lay.dense_heads) == len(base.dense_heads)
        for (v, b), (v0, b0) in zip(lay.dense_heads, base.dense_heads, strict=True):
            assert np.array_equal(v, v0) and np.array_equal(b, b0)


# ============================================================================ correctness
def test_steer_through_dense_heads_reaches_the_target_by_an_independent_integration() -> None:
    g0, g1 = _pair(4, 0)
    base = _dense_base(4, 0)
    res = steer(g0, g1, 1.0, n_layers=4, base=base)
    assert res.status is Status.SUCCESS, res.message
    _assert_heads_kept(res.controls, [base] * 4)
    end = _independent(res.controls, g0)
    assert end.bures_wasserstein(g1) < 1e-8
    assert np.allclose(end.mean, g1.mean, rtol=0, atol=1e-8)
    assert res.stats["relative_terminal_error"] <= 1e-6
    # the added energy is the control's own: ∫ E|A_k x + b_k|² dt on the re-simulation
    assert math.isfinite(res.cost) and res.cost > 0.0


def test_steer_through_factored_heads_keeps_the_affine_coordinate_and_the_subspace() -> None:
    g0, g1, base = _augmented_case(5, 1)
    res = steer(g0, g1, 1.0, n_layers=4, base=base, method="flow")
    assert res.status is Status.SUCCESS, res.message
    _assert_heads_kept(res.controls, [base] * 4)
    assert res.stats["constant_coordinates"] == [5]
    for lay in res.controls.layers:  # the additions leave the affine coordinate constant
        assert not np.any(lay.A[-1] - base.A[-1]) and lay.b[-1] == base.b[-1]
    end = _independent(res.controls, g0)
    assert end.bures_wasserstein(g1) < 1e-7
    assert abs(end.mean[-1] - 1.0) < 1e-12


@pytest.mark.parametrize("kind", ["dense", "factored"])
def test_steer_through_a_base_at_d16_reaches_the_target_independently(kind: str) -> None:
    if kind == "dense":
        g0, g1 = _pair(16, 13)
        base = _dense_base(16, 13, n_heads=3, size=0.15)
    else:
        g0, g1, base = _augmented_case(15, 13)
    res = steer(g0, g1, 1.0, n_layers=5, base=base, method="flow")
    assert res.status is Status.SUCCESS, res.message
    _assert_heads_kept(res.controls, [base] * 5)
    scale = max(1.0, float(np.linalg.norm(g1.mean)), math.sqrt(float(np.trace(g1.cov))))
    assert _independent(res.controls, g0).bures_wasserstein(g1) < 1e-7 * scale


def test_the_nlp_around_a_base_is_never_worse_than_the_construction() -> None:
    """At small d ``steer`` polishes the construction with the collocation NLP (base heads as
    fixed data) and keeps the cheaper verified control; both reach the target independently."""
    for seed in range(3):
        g0, g1, base = _augmented_case(2, seed)
        flow = steer(g0, g1, 1.0, n_layers=3, base=base, method="flow")
        best = steer(g0, g1, 1.0, n_layers=3, base=base)
        assert flow.success and best.success, (flow.message, best.message)
        assert best.cost <= flow.cost * (1.0 + 1e-12)
        assert best.stats["construction_energy"] == pytest.approx(flow.cost, rel=1e-9)
        _assert_heads_kept(best.controls, [base] * 3)
        for lay in best.controls.layers:  # the NLP too holds the affine coordinate
            assert not np.any(lay.A[-1]) and lay.b[-1] == 0.0
        assert _independent(best.controls, g0).bures_wasserstein(g1) < 1e-7


def test_steer_through_a_schedule_uses_its_layer_in_each_sublayer() -> None:
    g0, g1 = _pair(3, 2)
    bases = [_dense_base(3, s, n_heads=1 + s % 2) for s in range(3)]
    res = steer(g0, g1, 0.9, n_layers=3, base=Schedule(bases, 0.9))
    assert res.status is Status.SUCCESS, res.message
    _assert_heads_kept(res.controls, bases)
    assert _independent(res.controls, g0).bures_wasserstein(g1) < 1e-8


def test_a_base_without_heads_gives_the_exact_layer_construction() -> None:
    """Zero heads: the control is the exact L-layer geodesic, whose energy is known."""
    g0, g1 = _pair(3, 3)
    res = steer(g0, g1, 1.0, n_layers=5, base=Layer(dim=3), method="flow")
    exact = exact_layer_steering(g0, g1, 1.0, n_layers=5, mode="ffn")
    ref = kinetic_energy(exact, g0).energy
    assert res.status is Status.SUCCESS, res.message
    assert res.cost == pytest.approx(ref, rel=1e-8)
    assert res.kinetic_energy == pytest.approx(ref, rel=1e-8)
    for lay, ex in zip(res.controls.layers, exact.layers, strict=True):
        assert np.allclose(lay.A, ex.A, atol=1e-8) and np.allclose(lay.b, ex.b, atol=1e-8)


def test_steer_through_a_base_checks_tokens_when_asked() -> None:
    g0, g1 = _pair(3, 4)
    base = _dense_base(3, 4, size=0.1)
    res = steer(g0, g1, 1.0, n_layers=3, base=base, token_check=2000, seed=1, method="flow")
    assert res.success, res.message
    assert 0.0 < res.stats["token_terminal_error"] < 0.3  # O(N^-1/2)


# ============================================================================ refusals
def test_steer_through_a_base_refuses_a_rank_change() -> None:
    g0 = Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(UnreachableTargetError, match="rank"):
        steer(g0, Gaussian([0.0, 0.0], np.eye(2)), 1.0, base=Layer(dim=2))


def test_steer_through_a_base_refuses_a_target_off_the_active_subspace() -> None:
    g0 = Gaussian([0.0, 0.0], [[1.0, 0.0], [0.0, 0.0]])
    g1 = Gaussian([0.0, 0.0], [[0.0, 0.0], [0.0, 1.0]])
    with pytest.raises(UnreachableTargetError, match="target: its covariance leaves"):
        steer(g0, g1, 1.0, base=Layer(dim=2))


def test_steer_through_a_base_refuses_heads_that_move_the_affine_coordinate() -> None:
    g0, g1, base = _augmented_case(3, 5)
    fh = base.factored_heads
    assert fh is not None
    o = np.array(fh.o)
    o[0, -1, 0] = 0.3
    moving = Layer(b=base.b, heads=FactoredHeads(fh.q, fh.k, fh.v, o))
    with pytest.raises(InvalidParametersError, match="base: moves coordinate 3"):
        steer(g0, g1, 1.0, n_layers=2, base=moving)


@pytest.mark.parametrize(
    ("base", "match"),
    [
        (np.eye(3), "base: expected a Layer or a Schedule"),
        (Layer(dim=4), "base: dimension 4"),
        (Schedule([Layer(dim=3)] * 2, 1.0), "base: a Schedule of 2 layers"),
        (Layer(dim=3, noise=np.eye(3)), "base: Brownian forcing"),
    ],
)
def test_steer_refuses_a_malformed_base(base: object, match: str) -> None:
    g0, g1 = _pair(3, 6)
    with pytest.raises(InvalidParametersError, match=match):
        steer(g0, g1, 1.0, n_layers=3, base=base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"objective": "parameter"}, "objective"), ({"terminal": "bw"}, "terminal")],
)
def test_steer_through_a_base_refuses_options_it_does_not_take(kw: dict, match: str) -> None:
    g0, g1 = _pair(3, 7)
    with pytest.raises(InvalidParametersError, match=match):
        steer(g0, g1, 1.0, n_layers=2, base=Layer(dim=3), **kw)


def test_steer_through_a_base_refuses_added_heads_alone() -> None:
    """Around a base the affine part is always added (mode 'ffn', or 'full' with a head): a
    mode of heads alone is refused, not quietly answered with another family."""
    g0, g1 = _pair(3, 7)
    with pytest.raises(InvalidParametersError, match="mode: around a base") as info:
        steer(g0, g1, 1.0, n_layers=2, base=Layer(dim=3), mode="attention")
    assert "mode 'ffn'" in str(info.value) and "are not built" in str(info.value)


def test_steer_through_a_base_adds_the_affine_part_by_default() -> None:
    """No mode with a base means ``"ffn"``; without a base it still means ``"full"``."""
    g0, g1 = _pair(2, 8)
    base = Layer(V=0.3 * np.eye(2), B=np.eye(2))
    default = steer(g0, g1, 1.0, n_layers=2, base=base, method="flow")
    ffn = steer(g0, g1, 1.0, n_layers=2, base=base, method="flow", mode="ffn")
    assert default.success and default.cost == ffn.cost
    assert all(lay.n_heads == 1 for lay in default.controls.layers)
    blank = steer(g0, g1, 1.0, n_layers=2)
    assert blank.success and any(lay.n_heads > 0 for lay in blank.controls.layers)


def test_steer_through_a_base_refuses_the_nlp_at_a_large_dimension() -> None:
    g0, g1 = _pair(13, 12)
    with pytest.raises(InvalidParametersError, match="method: 'collocation' around a base"):
        steer(g0, g1, 1.0, n_layers=2, base=Layer(dim=13), method="collocation")


def test_steer_through_a_base_refuses_a_target_of_another_size() -> None:
    g0, _ = _pair(3, 14)
    with pytest.raises(InvalidGaussianError, match="target: dimension 2"):
        steer(g0, Gaussian([0.0, 0.0], np.eye(2)), 1.0, n_layers=2, base=Layer(dim=3))


def test_steer_through_a_base_refuses_a_non_finite_depth() -> None:
    g0, g1 = _pair(2, 11)
    with pytest.raises(InvalidParametersError, match="T"):
        steer(g0, g1, math.nan, n_layers=2, base=Layer(dim=2))


def test_steer_through_a_base_moves_a_dirac_mass() -> None:
    """Rank 0 (Σ = 0 at both ends): no active subspace, only the mean moves."""
    g0 = Gaussian([0.0, 1.0], np.zeros((2, 2)))
    g1 = Gaussian([1.0, 2.0], np.zeros((2, 2)))
    res = steer(g0, g1, 1.0, n_layers=3, base=Layer(V=0.3 * np.eye(2), B=np.eye(2)), method="flow")
    assert res.success, res.message
    assert _independent(res.controls, g0).bures_wasserstein(g1) < 1e-9


def test_a_base_that_blows_up_within_the_first_sublayer_is_an_honest_status() -> None:
    """Heads ``V = 50 I, B = I`` blow ``N(0, I)`` up at ``T* = 0.01`` (theory.md §3), far inside
    the first sublayer: the result says it failed, never an exception."""
    g0 = Gaussian([0.0, 0.0], np.eye(2))
    g1 = Gaussian([1.0, 0.0], np.diag([2.0, 0.5]))
    res = steer(g0, g1, 1.0, n_layers=2, base=Layer(V=50.0, B=np.eye(2)))
    assert not res.success
    assert res.status in {Status.BLOWUP, Status.OVERFLOW, Status.FAILED}
    assert res.controls.n_layers == 2 and res.message


def test_steer_through_a_base_keeps_its_time_limit() -> None:
    """Contract only: it ends within the limit plus a margin, with a complete control and an
    honest status (SUCCESS only if verified)."""
    g0, g1, base = _augmented_case(12, 8)
    clock = time.perf_counter()
    res = steer(g0, g1, 1.0, n_layers=6, base=base, time_limit=0.05)
    assert time.perf_counter() - clock < 0.05 + 1.5
    assert res.controls.n_layers == 6
    assert res.status in {Status.SUCCESS, Status.BUDGET_EXHAUSTED}
    if res.success:
        assert res.stats["relative_terminal_error"] <= 1e-6


# ============================================================================ property
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(d=st.integers(2, 3), seed=st.integers(0, 10_000), size=st.floats(0.05, 0.5))
def test_a_successful_steer_through_a_base_reaches_the_target_independently(
    d: int, seed: int, size: float
) -> None:
    """Whatever the base, SUCCESS means the independent integration reaches the target."""
    g0, g1 = _pair(d, seed)
    res = steer(g0, g1, 1.0, n_layers=3, base=_dense_base(d, seed, size=size))
    if res.success:
        scale = max(1.0, float(np.linalg.norm(g1.mean)), math.sqrt(float(np.trace(g1.cov))))
        assert _independent(res.controls, g0).bures_wasserstein(g1) <= 1e-6 * scale
    else:
        assert res.status is not Status.SUCCESS and res.message


def test_the_drift_aware_plan_without_drift_is_the_geodesic() -> None:
    """The linear-system plan with ``F = 0``, ``f = 0`` has Gramian ``t I`` and transition ``I``:
    its nodes are the Bures–Wasserstein geodesic's (docs/steering.md §4)."""
    from gtcontrol.control._steer_base import _drift_nodes, _nodes, make_problem
    from gtcontrol.control._steer_problem import SteerOptions

    g0, g1 = _pair(4, 9)
    prob = make_problem(g0, g1, 1.3, 5, Layer(dim=4), SteerOptions())
    geo = _nodes(prob)
    zero = [(np.zeros((4, 4)), np.zeros(4))] * 5
    for a, b in zip(_drift_nodes(prob, geo, zero), geo, strict=True):
        assert np.allclose(a.S, b.S, atol=1e-12) and np.allclose(a.z, b.z, atol=1e-12)


def test_the_construction_takes_the_plan_it_predicts_cheapest() -> None:
    g0, g1 = _pair(4, 10)
    res = steer(g0, g1, 1.0, n_layers=4, base=_dense_base(4, 10), method="flow")
    energies = res.stats["plan_energies"]
    assert res.success and set(energies) >= {"geodesic", "drift-aware"}
    assert energies[res.stats["plan"]] == min(energies.values())
    # the prediction is the open-loop plan's; the shot control lands close to it
    assert res.cost == pytest.approx(energies[res.stats["plan"]], rel=0.1)
