"""Token attention kernels: tiled numpy and torch backends against the former kernel and dense
references, the shift-free bound at its edges, float32, and the option checks."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from gtcontrol import FeedForward, InvalidParametersError, Layer, token_velocity
from gtcontrol.model import _attention_kernels as kern
from gtcontrol.model.attention import Workspace

try:  # torch is optional (the experiments extra): its tests skip without it
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")
needs_cuda = pytest.mark.skipif(
    torch is None or not torch.cuda.is_available(), reason="no CUDA device"
)
_EPS64 = float(np.finfo(np.float64).eps)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _former_softmax(q: np.ndarray, k_t: np.ndarray, v: np.ndarray, block: int) -> np.ndarray:
    """The kernel this module replaced (commit 01381d6): query blocks × all keys, max-shifted."""
    n = q.shape[0]
    out = np.empty((n, v.shape[1]))
    for s in range(0, n, block):
        logits = q[s : s + block] @ k_t
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        out[s : s + block] = (logits @ v) / logits.sum(axis=1)[:, None]
    return out


def _former_velocity(layer: Layer, x: np.ndarray) -> np.ndarray:
    """``v(x_i)`` with dense heads, the former kernel and the feed-forward spelled out."""
    out = x @ layer.A.T + layer.b
    if layer.ffn is not None:
        f = layer.ffn
        z = x @ f.W_in.T + f.b_in
        act = {
            "identity": z,
            "relu": np.maximum(z, 0.0),
            "gelu": 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))),
        }[f.activation]
        out = out + act @ f.W_out.T
    for v_h, b_h in layer.heads:
        out = out + _former_softmax(x @ b_h.T, x.T, x, 64) @ v_h.T
    return out


def _layers(rng: np.random.Generator, d: int) -> dict[str, Layer]:
    def m(scale: float = 1.0) -> np.ndarray:
        return scale * rng.standard_normal((d, d)) / math.sqrt(d)

    heads = [(m(), m(0.7)), (m(), m(0.3)), (m(), None)]
    ffn = {
        a: FeedForward(W_out=m(), W_in=m(), b_in=rng.standard_normal(d), activation=a)
        for a in ("relu", "gelu")
    }
    wq, wk, wv = (rng.standard_normal((12, d)) / math.sqrt(d) for _ in range(3))
    wo = rng.standard_normal((d, 12)) / math.sqrt(12)
    return {
        "one head": Layer(B=m(), V=1.0, dim=d),
        # a diagonal V_h (one zero entry) scales the attention's rows instead of a product
        "diagonal values": Layer(heads=[(np.diag(np.r_[0.0, rng.standard_normal(d - 1)]), m())]),
        "multi-head affine": Layer(heads=heads, A=m(), b=rng.standard_normal(d)),
        "relu": Layer(heads=heads[:1], ffn=ffn["relu"]),
        "gelu": Layer(heads=heads[:2], ffn=ffn["gelu"]),
        "factored": Layer.from_projections(wq, wk, wv, wo, n_heads=3),
    }


# ---------------------------------------------------------------- equal to the former kernel
@pytest.mark.parametrize(
    "kind", ["one head", "diagonal values", "multi-head affine", "relu", "gelu", "factored"]
)
def test_numpy_backend_equals_the_former_kernel(kind: str, rng: np.random.Generator) -> None:
    d = 6
    layer = _layers(rng, d)[kind]
    x = 1.5 * rng.standard_normal((700, d))
    ref = _former_velocity(Layer(heads=layer.heads, A=layer.A, b=layer.b, ffn=layer.ffn), x)
    # 700 tokens: 3 query blocks by default; block_size 2048 gives 374-key tiles (2 per row),
    # 1 gives single-row blocks, 37 ragged ones.
    for block in (None, 1, 37, 2048):
        got = token_velocity(layer, x, block_size=block, backend="numpy")
        assert _rel(got, ref) < 1e-12, (kind, block)


def test_huge_logits_take_the_shift_and_stay_exact(rng: np.random.Generator) -> None:
    # Logits up to ~1e4: nearly all rows are over the shift-free bound (the few tokens of tiny
    # norm are not); the softmax is nearly one-hot.
    x = rng.standard_normal((300, 3))
    b = 1e3 * rng.standard_normal((3, 3))
    assert kern.unshifted_rows(x @ b.T, x.T, x).mean() < 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = token_velocity(Layer(B=b, V=1.0), x, block_size=16, backend="numpy")
    ref = softmax(x @ b.T @ x.T, axis=1) @ x
    assert np.all(np.isfinite(got)) and _rel(got, ref) < 1e-12


def test_blocks_mixing_shifted_and_shift_free_rows(rng: np.random.Generator) -> None:
    # Half of the tokens are 40x larger: their rows exceed the bound, the others do not; with
    # 16-row blocks some blocks hold both kinds, some only one.
    x = rng.standard_normal((200, 2))
    x[rng.permutation(200)[:100]] *= 40.0
    b = np.array([[0.3, -0.2], [0.1, 0.25]])
    free = kern.unshifted_rows(x @ b.T, x.T, x)
    assert 0 < free.sum() < 200
    got = token_velocity(Layer(B=b, V=1.0), x, block_size=16, backend="numpy")
    ref = softmax(x @ b.T @ x.T, axis=1) @ x
    # The largest logits are ~2e3: the shifted reference itself rounds them to ~2e3 ε.
    assert _rel(got, ref) < 1e-12


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 60),
    d=st.integers(1, 4),
    log_scale=st.floats(-2.0, 3.0),
    block=st.integers(1, 70),
    seed=st.integers(0, 2**32 - 1),
)
def test_equal_to_the_former_kernel_for_any_scale(
    n: int, d: int, log_scale: float, block: int, seed: int
) -> None:
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, d))
    b = 10.0**log_scale * r.standard_normal((d, d))
    q = x @ b.T
    ref = _former_softmax(q, x.T, x, block)
    got = token_velocity(Layer(B=b, V=1.0), x, block_size=block, backend="numpy")
    # Both round a logit l to ~ε|l| before exponentiating, so they may differ by a few ε max|l|
    # (the conditioning of softmax); 1e-12 covers logits up to ~1e3, the floor of the bound.
    tol = max(1e-12, 16 * _EPS64 * float(np.max(np.abs(q @ x.T))))
    assert np.max(np.abs(got - ref)) <= tol * max(1.0, float(np.max(np.abs(ref))))


# ---------------------------------------------------------------- the shift-free bound
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_bound_keeps_sums_finite_and_weights_normal(dtype: type) -> None:
    fi = np.finfo(dtype)
    n, v_max = 10**6, 50.0
    u = kern.shift_free_bound(n, np.dtype(dtype), v_max)
    assert 60.0 < u < (670.0 if dtype == np.float64 else 69.0)
    # No overflow: n weights e^U times the largest value stay below the largest float ...
    assert math.log(n) + u + math.log(v_max) < math.log(float(fi.max))
    # ... and the smallest leading weight e^{-U}, and 2^-p of it, are normal numbers.
    assert -u - (fi.nmant + 1) * math.log(2.0) > math.log(float(fi.smallest_normal))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_shift_free_rows_at_the_edge_of_the_bound(dtype: type, sign: float) -> None:
    # One query with |q| max|k| just under U: logits all near +U (largest weights ~e^U) or all
    # near -U (every weight ~e^{-U}, close to the subnormals) are computed without the shift.
    n = 1000
    u = kern.shift_free_bound(n, np.dtype(dtype), 1.0)
    keys = np.linspace(0.99, 1.0, n)[:, None]
    q = np.array([[sign * 0.999 * u]])
    vals = np.random.default_rng(0).uniform(-1.0, 1.0, (n, 1))
    q_t, k_t, v_t = q.astype(dtype), keys.T.astype(dtype), vals.astype(dtype)
    assert kern.unshifted_rows(q_t, k_t, v_t).all()
    got = kern.numpy_softmax(q_t, k_t, v_t, kern.TilePlan(1, 256))
    ref = softmax(q @ keys.T, axis=1) @ vals
    tol = 1e-12 if dtype == np.float64 else 2e-5  # float32: ε |l| ≈ 6e-8 * 69 per weight
    assert np.all(np.isfinite(got)) and abs(got[0, 0] - ref[0, 0]) < tol * np.abs(vals).max()
    # Just over the bound the row takes the shift.
    assert not kern.unshifted_rows((q * 1.01 / 0.999).astype(dtype), k_t, v_t).any()


def test_non_finite_logits_are_never_shift_free() -> None:
    q = np.array([[np.inf, 0.0], [np.nan, 1.0], [1.0, 1.0]])
    assert kern.unshifted_rows(q, np.ones((2, 3)), np.ones((3, 1))).tolist() == [
        False,
        False,
        True,
    ]


# ---------------------------------------------------------------- float32
def test_float32_velocity(rng: np.random.Generator) -> None:
    layer = _layers(rng, 5)["multi-head affine"]
    x = rng.standard_normal((400, 5))
    ref = token_velocity(layer, x, backend="numpy")
    got = token_velocity(layer, x, backend="numpy", dtype=np.float32)
    assert got.dtype == np.float32
    # float32 rounding (ε = 6e-8) of logits ~|x|²|B| ≈ 10 and of sums over 400 keys.
    assert _rel(got.astype(np.float64), ref) < 2e-6


# ---------------------------------------------------------------- torch backend
@needs_torch
@pytest.mark.parametrize("kind", ["one head", "multi-head affine", "gelu", "factored"])
def test_torch_and_numpy_backends_equal(kind: str, rng: np.random.Generator) -> None:
    layer = _layers(rng, 6)[kind]
    x = 1.5 * rng.standard_normal((700, 6))
    for block in (None, 37, 2048):
        a = token_velocity(layer, x, block_size=block, backend="numpy")
        b = token_velocity(layer, x, block_size=block, backend="torch")
        assert b.dtype == np.float64 and _rel(b, a) < 1e-13, block
    a32 = token_velocity(layer, x, backend="numpy", dtype=np.float32)
    b32 = token_velocity(layer, x, backend="torch", dtype=np.float32)
    # float32: two orders of float32 rounding (different exp and GEMM kernels).
    assert b32.dtype == np.float32 and _rel(b32.astype(float), a32.astype(float)) < 2e-6


@needs_torch
def test_torch_backend_shifted_rows(rng: np.random.Generator) -> None:
    x = rng.standard_normal((300, 2))
    x[::3] *= 40.0
    b = np.array([[0.3, -0.2], [0.1, 0.25]])
    a = token_velocity(Layer(B=b, V=1.0), x, block_size=16, backend="numpy")
    t = token_velocity(Layer(B=b, V=1.0), x, block_size=16, backend="torch")
    assert _rel(t, a) < 1e-13


@needs_cuda
def test_cuda_backend_equals_numpy(rng: np.random.Generator) -> None:  # pragma: no cover
    layer = _layers(rng, 16)["multi-head affine"]
    x = rng.standard_normal((5000, 16))
    ws = Workspace(5000, np.dtype(np.float64), None, backend="torch")
    assert ws._torch_softmax.device.type == "cuda"
    a = token_velocity(layer, x, backend="numpy")
    assert _rel(token_velocity(layer, x, backend="torch"), a) < 1e-10


# ---------------------------------------------------------------- choice of backend, options
def test_auto_is_numpy_without_cuda_and_never_imports_torch_for_a_cpu() -> None:
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("an NVIDIA driver is present: auto may use torch")
    code = (
        "import sys, numpy as np; from gtcontrol import Layer, token_velocity; "
        "from gtcontrol.model.attention import Workspace; "
        "x = np.random.default_rng(0).standard_normal((4096, 4)); "
        "token_velocity(Layer(B=np.eye(4), V=1.0), x); "
        "print(Workspace(4096, np.dtype(float), None, backend='auto').backend, "
        "'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["numpy", "False"]


def test_small_problems_and_the_integrators_stay_on_numpy() -> None:
    assert kern.auto_backend(kern.AUTO_CUDA_MIN_N - 1) == "numpy"
    assert Workspace(10**5, np.dtype(np.float64), None).backend == "numpy"


def test_tiles_bound_the_memory() -> None:
    for single, tile in ((False, kern.CPU_TILE), (True, kern.CPU_SINGLE_TILE)):
        for n in (1, 100, 16_384, 262_144):
            for block in (None, 1, 256, 4096, 10**7):
                p = kern.tile_plan(n, block, single_threaded_blas=single)
                assert 1 <= p.rows <= n and 1 <= p.cols <= n
                assert p.rows * p.cols <= max(tile, p.rows * kern.MIN_COLS)
    assert kern.tile_plan(262_144, None) == kern.TilePlan(128, 256)
    assert kern.tile_plan(262_144, None, single_threaded_blas=True) == kern.TilePlan(256, 512)


def test_a_single_threaded_blas_gets_the_larger_tiles_and_the_same_attention() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(3)
    d, n = 6, 1500
    b = rng.standard_normal((d, d)) / d
    x = rng.standard_normal((n, d))
    layer = Layer(B=b, V=1.0)
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        wide = Workspace(n, np.dtype(np.float64), None)
        many = token_velocity(layer, x, backend="numpy")
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        single = Workspace(n, np.dtype(np.float64), None)
        one = token_velocity(layer, x, backend="numpy")
    assert (wide.block, wide.key_block) == (128, 256)
    assert (single.block, single.key_block) == (256, 512)
    # the tiles change the summation order only
    np.testing.assert_allclose(one, many, rtol=1e-13, atol=1e-13)


def test_a_sequence_one_tile_holds_is_planned_without_asking_blas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Up to 128 tokens (256 with a given block size) both tile plans are one ``N × N`` tile,
    so the workspace does not ask threadpoolctl (milliseconds a call, once per short sequence
    of a forward pass); above, it asks."""
    import importlib

    attention = importlib.import_module("gtcontrol.model.attention")
    asked: list[int] = []
    monkeypatch.setattr(attention, "blas_single_threaded", lambda: asked.append(1) or True)
    for n, block in ((1, None), (128, None), (256, 64)):
        work = Workspace(n, np.dtype(np.float64), block)
        assert (work.block, work.key_block) == (min(n, block or n), n)
    assert asked == []
    assert (Workspace(129, np.dtype(np.float64), None).block, asked) == (129, [1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "jax"}, "backend"),
        ({"backend": None}, "backend"),
        ({"dtype": np.float16}, "dtype"),
        ({"dtype": "int64"}, "dtype"),
        ({"dtype": None}, "dtype"),
        ({"block_size": 0}, "block_size"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParametersError, match=match):
        token_velocity(Layer(dim=2), np.zeros((3, 2)), **kwargs)  # type: ignore[arg-type]


def test_torch_backend_without_torch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import gtcontrol.model._attention_torch as backend

    monkeypatch.setattr(backend, "load_torch", lambda: None)
    with pytest.raises(InvalidParametersError, match="backend: 'torch' needs the torch package"):
        token_velocity(Layer(B=np.eye(2), V=1.0), np.ones((3, 2)), backend="torch")


def test_a_map_workers_share_of_the_cores_bounds_the_attention_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local cluster's worker (``GTCONTROL_CORES=1``) splits its query blocks over one
    thread while the other workers run, and over the cores they leave idle once they stop."""
    import os

    from gtcontrol import _blas, _jobs

    n = min(len(os.sched_getaffinity(0)), kern.MAX_WORKERS)
    cores = os.cpu_count() or 1
    monkeypatch.setattr(kern, "WORKERS", None)
    monkeypatch.setenv(_jobs.CORES_VARIABLE, "1")
    monkeypatch.setattr(_blas, "_load", lambda: (float(cores), cores))  # every core taken
    assert kern.workers() == 1
    monkeypatch.setattr(_blas, "_load", lambda: (float(cores), 1))  # only the caller runs
    assert kern.workers() == min(n, cores)
    monkeypatch.delenv(_jobs.CORES_VARIABLE)
    monkeypatch.setattr(_blas, "_load", lambda: (float(cores), cores))
    assert kern.workers() == n  # no share: the process's CPUs, as before


def test_worker_threads_do_not_change_the_result(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every query block is computed the same way whichever thread runs it: bitwise equal.
    layer = _layers(rng, 4)["multi-head affine"]
    x = rng.standard_normal((1000, 4))
    x[::7] *= 30.0  # some blocks take the shift
    got = {}
    for w in (1, 3):
        monkeypatch.setattr(kern, "WORKERS", w)
        assert kern.workers() == w
        got[w] = token_velocity(layer, x, block_size=50, backend="numpy")
    np.testing.assert_array_equal(got[1], got[3])
