"""Factored attention heads (issue 11): Layer.from_projections and the factored fields."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import gtcontrol as gt
from gtcontrol import (
    FactoredHeads,
    Gaussian,
    InvalidParametersError,
    Layer,
    Status,
    affine_velocity,
    moment_field,
    simulate_discrete,
    token_velocity,
)
from gtcontrol.model.field import factor_field

# (d, heads, d_head): d_head < d throughout, H·d_head below, equal to and above d.
SHAPES = [(3, 2, 1), (8, 2, 3), (16, 4, 4), (33, 3, 7), (64, 4, 16), (64, 8, 8), (20, 6, 5)]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _weights(
    rng: np.random.Generator, d: int, h: int, dh: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    inner = h * dh
    wq, wk, wv = (rng.standard_normal((inner, d)) / math.sqrt(d) for _ in range(3))
    wo = rng.standard_normal((d, inner)) / math.sqrt(inner)
    return wq, wk, wv, wo


def _pair(seed: int, d: int, h: int, dh: int, *, with_a: bool = True) -> tuple[Layer, Layer]:
    """A factored layer and the dense layer built from its heads."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((d, d)) / math.sqrt(d) if with_a else None
    b = rng.standard_normal(d)
    fl = Layer.from_projections(*_weights(rng, d, h, dh), n_heads=h, A=a, b=b)
    return fl, Layer(fl.A, b=fl.b, heads=fl.heads)


def _moments(seed: int, d: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + seed)
    factor = rng.standard_normal((d, r)) / math.sqrt(r)
    return rng.standard_normal(d), factor, factor @ factor.T


# ---------------------------------------------------------------------------- construction
@pytest.mark.parametrize(("d", "h", "dh"), SHAPES)
def test_from_projections_equals_the_dense_construction(d: int, h: int, dh: int) -> None:
    rng = np.random.default_rng(d + h)
    wq, wk, wv, wo = _weights(rng, d, h, dh)
    layer = Layer.from_projections(wq, wk, wv, wo, n_heads=h)
    assert layer.n_heads == h and layer.factored_heads is not None
    assert layer.factored_heads.head_dim == dh and layer.factored_heads.scale == 1 / math.sqrt(dh)
    assert len(layer.heads) == h
    for i, (v, b) in enumerate(layer.heads):
        sl = slice(i * dh, (i + 1) * dh)
        # The dense construction of gtcontrol.interop.extraction.
        b_ref = wk[sl].T @ wq[sl] / math.sqrt(dh)
        v_ref = wo[:, sl] @ wv[sl]
        assert _rel(b, b_ref) < 1e-14 and _rel(v, v_ref) < 1e-14
        assert not b.flags.writeable and not v.flags.writeable
    assert layer.heads is layer.heads  # computed once, cached


def test_the_attention_weight_is_the_transformer_logit() -> None:
    # exp(yᵀ B_h x) is exp((W_K,h y)ᵀ(W_Q,h x) · scale): the convention of docs/theory.md §1.
    rng = np.random.default_rng(3)
    wq, wk, wv, wo = _weights(rng, 10, 2, 4)
    layer = Layer.from_projections(wq, wk, wv, wo, n_heads=2, scale=0.3)
    x, y = rng.standard_normal(10), rng.standard_normal(10)
    _, b1 = layer.heads[1]
    assert math.isclose(y @ b1 @ x, 0.3 * (wk[4:] @ y) @ (wq[4:] @ x), rel_tol=1e-13)


def test_factored_heads_value_and_layer_plumbing() -> None:
    rng = np.random.default_rng(4)
    wq, wk, wv, wo = _weights(rng, 6, 3, 2)
    fh = FactoredHeads.from_projections(wq, wk, wv, wo, n_heads=3)
    assert (fh.n_heads, fh.head_dim, fh.dim) == (3, 2, 6)
    np.testing.assert_array_equal(fh.q[1], wq[2:4])
    np.testing.assert_array_equal(fh.o[2], wo[:, 4:6])
    np.testing.assert_array_equal(fh.o_cat, wo)
    np.testing.assert_array_equal(fh.flat("k"), wk)
    for arr in (fh.q, fh.k, fh.v, fh.o):
        assert not arr.flags.writeable
    assert "n_heads=3" in repr(fh)
    layer = Layer(heads=fh, b=np.ones(6))
    assert layer.factored_heads is fh and layer.dim == 6
    assert "factored=True" in repr(layer) and "heads=3" in repr(layer)
    assert layer._all_heads is None  # repr and n_heads do not form the dense heads
    # replace keeps the factors unless the heads are replaced.
    assert layer.replace(b=np.zeros(6)).factored_heads is fh
    dense = layer.replace(heads=layer.heads)
    assert dense.factored_heads is None and _rel(dense.heads[0][1], layer.heads[0][1]) == 0.0
    # to_dict writes the dense heads; the rebuilt layer is equal.
    out = layer.to_dict()
    assert len(out["heads"]) == 3
    np.testing.assert_array_equal(np.array(out["heads"][2]["B"]), layer.heads[2][1])
    one = Layer.from_projections(wq[:2], wk[:2], wv[:2], wo[:, :2], n_heads=1)
    np.testing.assert_array_equal(np.array(one.to_dict()["V"]), one.heads[0][0])
    with pytest.raises(InvalidParametersError, match="dimension"):
        Layer(heads=fh, dim=5)


# ---------------------------------------------------------------------------- validation
def test_validation_names_the_argument() -> None:
    rng = np.random.default_rng(5)
    wq, wk, wv, wo = _weights(rng, 6, 2, 3)
    cases = [
        ((wq, wk[:5], wv, wo, 2), "W_K"),
        ((wq, wk, wv[:, :5], wo, 2), "W_V"),
        ((wq, wk, wv, wo[:, :4], 2), "W_O"),
        ((wq, wk, wv, wo, 4), "n_heads"),
        ((wq, wk, wv, wo, 0), "n_heads"),
        ((np.where(np.eye(6, 6, dtype=bool), np.nan, wq), wk, wv, wo, 2), "W_Q"),
        ((wq, wk, wv, np.full_like(wo, np.inf), 2), "W_O"),
        ((wq, wk.astype(complex) * 1j, wv, wo, 2), "W_K"),
        ((wq, wk, [[1.0, 2.0], [3.0]], wo, 2), "W_V"),
        ((wq[0], wk, wv, wo, 2), "W_Q"),
        ((np.zeros((0, 6)), wk, wv, wo, 2), "W_Q"),
    ]
    for (*weights, heads), name in cases:
        with pytest.raises(InvalidParametersError, match=name):
            Layer.from_projections(*weights, n_heads=heads)
    with pytest.raises(InvalidParametersError, match="scale"):
        Layer.from_projections(wq, wk, wv, wo, n_heads=2, scale=-1.0)
    with pytest.raises(InvalidParametersError, match=r"^A"):
        Layer.from_projections(wq, wk, wv, wo, n_heads=2, A=np.eye(5))
    q = wq.reshape(2, 3, 6)
    with pytest.raises(InvalidParametersError, match=r"^o"):
        FactoredHeads(q, q, q, q)
    with pytest.raises(InvalidParametersError, match=r"^k"):
        FactoredHeads(q, q[:1], q, wo.reshape(6, 2, 3).transpose(1, 0, 2))
    with pytest.raises(InvalidParametersError, match=r"^q"):
        FactoredHeads(q + 1j, q, q, q)


# ---------------------------------------------------------------------------- the fields
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("d", "h", "dh"), SHAPES)
def test_moment_fields_factored_equal_dense(seed: int, d: int, h: int, dh: int) -> None:
    fl, dl = _pair(seed, d, h, dh, with_a=seed % 2 == 0)
    m, factor, cov = _moments(seed, d, max(1, d // (1 + seed)))
    for got, ref in zip(affine_velocity(fl, m, cov), affine_velocity(dl, m, cov), strict=True):
        assert _rel(got, ref) < 1e-12
    dm, ds = moment_field(fl, m, cov)
    dm_ref, ds_ref = moment_field(dl, m, cov)
    assert _rel(dm, dm_ref) < 1e-12 and _rel(ds, ds_ref) < 1e-12
    np.testing.assert_array_equal(ds, ds.T)  # exactly symmetric, as for dense heads
    for got, ref in zip(factor_field(fl, m, factor), factor_field(dl, m, factor), strict=True):
        assert _rel(got, ref) < 1e-12


def test_factored_field_with_affine_ffn_and_noise() -> None:
    rng = np.random.default_rng(7)
    d, h, dh = 12, 3, 2
    from gtcontrol import FeedForward

    ffn = FeedForward(
        W_out=rng.standard_normal((d, 5)), W_in=rng.standard_normal((5, d)), activation="identity"
    )
    g = rng.standard_normal((d, d))
    fl = Layer.from_projections(*_weights(rng, d, h, dh), n_heads=h, ffn=ffn, noise=g)
    dl = Layer(fl.A, b=fl.b, heads=fl.heads, ffn=ffn, noise=g)
    m, _, cov = _moments(0, d, d)
    for got, ref in zip(moment_field(fl, m, cov), moment_field(dl, m, cov), strict=True):
        assert _rel(got, ref) < 1e-12


def test_simulate_discrete_factored_equals_dense() -> None:
    fl, dl = _pair(8, 10, 2, 3)
    fl, dl = fl.replace(A=-np.eye(10)), dl.replace(A=-np.eye(10))
    m, _, cov = _moments(1, 10, 10)
    g = Gaussian(m, 0.1 * cov)
    a = simulate_discrete(fl, g, T=0.5, steps_per_layer=5)
    b = simulate_discrete(dl, g, T=0.5, steps_per_layer=5)
    assert _rel(a.cov[-1], b.cov[-1]) < 1e-12 and _rel(a.mean[-1], b.mean[-1]) < 1e-12


# ---------------------------------------------------------------------------- tokens
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("d", "h", "dh"), [(8, 2, 3), (33, 3, 7), (64, 4, 16)])
def test_token_velocity_factored_equals_dense(seed: int, d: int, h: int, dh: int) -> None:
    fl, dl = _pair(seed, d, h, dh)
    x = 2.0 * np.random.default_rng(seed).standard_normal((300, d))
    ref = token_velocity(dl, x)
    assert _rel(token_velocity(fl, x), ref) < 1e-12
    assert _rel(token_velocity(fl, x, block_size=37), ref) < 1e-12


def test_token_velocity_factored_degenerate_heads() -> None:
    # A head with W_Q,h = 0 attends uniformly (the mean), one with W_O,h = 0 adds nothing.
    rng = np.random.default_rng(9)
    wq, wk, wv, wo = _weights(rng, 7, 3, 2)
    wq[:2] = 0.0
    wo[:, 4:] = 0.0
    fl = Layer.from_projections(wq, wk, wv, wo, n_heads=3)
    dl = Layer(heads=fl.heads)
    x = rng.standard_normal((50, 7))
    assert _rel(token_velocity(fl, x), token_velocity(dl, x)) < 1e-12
    wv[:] = 0.0
    zero = Layer.from_projections(wq, wk, wv, wo, n_heads=3)
    np.testing.assert_array_equal(token_velocity(zero, x), np.zeros_like(x))


# ------------------------------------------------- equilibria: factored Jacobian and work cap
def test_factored_jacobian_equals_dense() -> None:
    from gtcontrol.analysis._field_kernel import JacobianOperator, residual_scale

    rng = np.random.default_rng(3)
    d, n_heads, d_head = 10, 3, 2
    fh = FactoredHeads(
        *(rng.standard_normal((n_heads, d_head, d)) for _ in range(3)),
        rng.standard_normal((n_heads, d, d_head)),
    )
    a = rng.standard_normal((d, d))
    fac, dense = Layer(a, heads=fh), Layer(a, heads=list(fh.dense()))
    s = rng.standard_normal((d, d))
    s = s @ s.T
    h = rng.standard_normal((d, d))
    h = h + h.T
    jf, jd = JacobianOperator(fac, s), JacobianOperator(dense, s)
    ref = jd(h)
    assert np.linalg.norm(jf(h) - ref) <= 1e-14 * np.linalg.norm(ref)
    ln = jd.lyapunov_matrix()
    assert np.linalg.norm(jf.lyapunov_matrix() - ln) <= 1e-14 * np.linalg.norm(ln)
    assert residual_scale(fac, s) == pytest.approx(residual_scale(dense, s), rel=1e-14)
    assert jf.flops < jd.flops  # factored heads: no d×d×d product per head


def test_equilibria_general_v_beyond_kronecker_size_finds_the_root() -> None:
    # d = 24 > kron_max_dim: capped, preconditioned GMRES steps. V = −I + noise keeps a PD root
    # near the Riccati-class one (Σ* = I for V = −I, A = I, B = I); Newton must reach round-off.
    rng = np.random.default_rng(24)
    d = 24
    a = np.eye(d) + 0.2 * rng.standard_normal((d, d)) / np.sqrt(d)
    v = -np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)
    layer = Layer(a, heads=[(v, np.eye(d))])
    res = gt.equilibria(layer, method="newton")
    assert res.status is Status.SUCCESS and len(res) >= 1
    f = gt.moment_field(layer, np.zeros(d), res[0].cov)[1]
    assert np.linalg.norm(f) <= 1e-12 * np.linalg.norm(res[0].cov)
    assert res.stats["work_flops"] <= res.stats["max_work"]


def test_equilibria_work_cap_bounds_a_large_factored_search() -> None:
    rng = np.random.default_rng(0)
    d, n_heads = 48, 4
    fh = FactoredHeads(
        *(rng.standard_normal((n_heads, d // n_heads, d)) / np.sqrt(d) for _ in range(3)),
        rng.standard_normal((n_heads, d, d // n_heads)) / np.sqrt(d),
    )
    layer = Layer(-np.eye(d), heads=fh)
    t0 = time.perf_counter()
    res = gt.equilibria(layer, max_work=2e9)
    assert time.perf_counter() - t0 < 30.0  # a generous wall bound: the cap is in flops
    assert res.status is Status.BUDGET_EXHAUSTED
    assert "work cap" in res.message
    # the cap is honoured to within one operation (one Schur form or Jacobian application)
    assert res.stats["max_work"] <= res.stats["work_flops"] <= 2e9 + 30 * d**3 + 1e6
    with pytest.raises(gt.InvalidParametersError, match="max_work"):
        gt.equilibria(layer, max_work=-1.0)


def test_a_copy_of_a_factored_layer_rebuilds_its_dense_heads_instead_of_carrying_them() -> None:
    """The dense pairs of factored heads are a cache (``Layer.heads``): a pickled copy (a Dask
    worker's result, a map row on disk) holds the factors alone, ``d / (2 d_head)`` times
    smaller than the pairs, and rebuilds the same read-only pairs on first use."""
    import copy
    import pickle

    rng = np.random.default_rng(7)
    d, h, dh = 128, 4, 4
    layer = Layer.from_projections(*_weights(rng, d, h, dh), n_heads=h)
    pairs = layer.heads  # the cache: 2 h d² numbers, 1 MiB
    blob = pickle.dumps(layer)
    assert len(blob) < 8 * (2 * h * d * d) / 2  # A and the factors (with their stacked copies)
    for clone in (pickle.loads(blob), copy.deepcopy(layer)):
        again = clone.heads
        assert len(again) == h
        for (v, b), (v2, b2) in zip(pairs, again, strict=True):
            assert _rel(v2, v) <= 1e-15 and _rel(b2, b) <= 1e-15
            assert not (v2.flags.writeable or b2.flags.writeable)
