"""Random matrices of the kinds the tests need, from explicitly seeded generators.

Imported by the test modules (``from helpers import ...``) and served as fixtures by conftest.py;
the benchmarks take the independent token reference :func:`converged_tokens` and the sweeps'
design tables :data:`ROTATION_TABLES` from here too.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from gtcontrol import GTControlError, InvalidParametersError, Layer, token_velocity

#: The ``[initial]`` and ``[layer]`` tables of the sweep designs (tests/cli/test_sweep.py, its
#: hostile reproducer there, benchmarks/bench_sweep.py): a rotation (A has eigenvalues ±i) with
#: one head V = vI, every regime over (v, A shift).
ROTATION_TABLES = """\
[initial]
mean = [1.0, -1.0]
cov = [[2.0, 0.5], [0.5, 0.3]]

[layer]
A = [[0.0, 1.0], [-1.0, 0.0]]
B = [[1.0, 0.2], [0.0, 0.6]]
V = 1.0
"""


def random_spd(rng: np.random.Generator, d: int, lo: float = 0.3, hi: float = 2.0) -> np.ndarray:
    """A random symmetric positive-definite matrix with eigenvalues uniform in ``[lo, hi]``."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(lo, hi, d)) @ q.T


def wishart_spd(rng: np.random.Generator, d: int, shift: float = 0.5) -> np.ndarray:
    """``F Fᵀ/d + shift·I`` with standard normal ``F`` (d×d): SPD, eigenvalues ≥ ``shift``."""
    f = rng.standard_normal((d, d))
    return f @ f.T / d + shift * np.eye(d)


def random_skew(rng: np.random.Generator, d: int) -> np.ndarray:
    """A random skew-symmetric matrix ``S − Sᵀ`` with standard normal ``S``."""
    x = rng.standard_normal((d, d))
    return x - x.T


def dense_heads(layer: Layer) -> list[tuple[np.ndarray, np.ndarray]]:
    """The heads ``(V_h, B_h)`` of ``layer`` as dense arrays."""
    return [(np.array(v), np.array(b)) for v, b in layer.heads]


def duplication(r: int) -> np.ndarray:
    """``vec(H) = D vech(H)`` (column-major vec, lower-triangle vech)."""
    cols = [(i, j) for j in range(r) for i in range(j, r)]
    out = np.zeros((r * r, len(cols)))
    for k, (i, j) in enumerate(cols):
        out[i + j * r, k] = 1.0
        out[j + i * r, k] = 1.0
    return out


def covariance_linearization(
    a: np.ndarray, heads: list[tuple[np.ndarray, np.ndarray]], s: np.ndarray
) -> np.ndarray:
    """``DF(Σ)`` of the covariance field ``F(Σ) = MΣ + ΣMᵀ`` (``M = A + Σ_h V_hΣB_h``) on
    symmetric matrices, in ``vech`` coordinates: Kronecker products of the dense matrices and a
    :func:`duplication` matrix (nothing of gtcontrol's field or Jacobian)."""
    r = s.shape[0]
    mm = a + sum((v @ s @ b for v, b in heads), np.zeros((r, r)))
    eye = np.eye(r)
    j = np.kron(eye, mm) + np.kron(mm, eye)
    for v, b in heads:
        y = b @ s
        j += np.kron(y.T, v) + np.kron(v, y.T)
    dup = duplication(r)
    return np.asarray(np.linalg.pinv(dup) @ j @ dup)


def converged_tokens(layer: Layer, x: np.ndarray, T: float) -> np.ndarray:
    """Independent reference for token runs: scipy's DOP853 on the flattened tokens at
    ``rtol = atol = 1e-13`` (nothing of gtcontrol's token integrators is used)."""
    sol = solve_ivp(
        lambda _t, y: token_velocity(layer, y.reshape(x.shape)).ravel(),
        (0.0, T),
        x.ravel(),
        method="DOP853",
        rtol=1e-13,
        atol=1e-13,
    )
    assert sol.success, sol.message
    return np.asarray(sol.y[:, -1]).reshape(x.shape)


def planted_layer(rng: np.random.Generator, d: int) -> tuple[Layer, np.ndarray]:
    """Issue 21's recipe: ``A = (−Q(S)/2 + K)S⁻¹`` makes ``S ≻ 0`` an equilibrium exactly."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    s = (q * np.exp(rng.uniform(-1.0, 1.0, d))) @ q.T
    s = 0.5 * (s + s.T)
    v, b = 0.5 * rng.standard_normal((d, d)), 0.5 * rng.standard_normal((d, d))
    k = np.triu(0.5 * rng.standard_normal((d, d)), 1)
    a = (-(v @ s @ b @ s + s @ b.T @ s @ v.T) / 2 + (k - k.T)) @ np.linalg.inv(s)
    return Layer(a, heads=[(v, b)]), s


def layer_near_a_repelling_equilibrium() -> tuple[Layer, np.ndarray, np.ndarray, np.ndarray, float]:
    """The layer of ../shared/hostile-cases/round3/06_analyze_exact_blowup_certificate_wrong.py."""
    d = 3
    rng = np.random.default_rng(d + 100)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    s = (q * rng.uniform(0.3, 2.0, d)) @ q.T
    v = np.random.default_rng(d + 7).uniform(0.3, 1.5)
    rng2 = np.random.default_rng(d + 100)
    q2, _ = np.linalg.qr(rng2.standard_normal((d, d)))
    b = (q2 * rng2.uniform(0.3, 2.0, d)) @ q2.T
    qs = v * (s @ b @ s + s @ b.T @ s)
    k = np.random.default_rng(d + 55).standard_normal((d, d))
    k = 0.5 * (k - k.T)
    a = np.linalg.solve(s, (-qs / 2 + k).T).T
    return Layer(A=a, V=v, B=b), a, b, s, float(v)


def allowed(limit: float) -> float:
    """``time_limit`` plus the tolerance of docs/architecture.md, ``max(1 s, 10 %)``."""
    return limit + max(1.0, 0.1 * limit)


_T = TypeVar("_T")


def timed(call: Callable[[], _T]) -> tuple[_T, float]:
    """``call()`` and the wall-clock seconds it took."""
    t0 = time.perf_counter()
    out = call()
    return out, time.perf_counter() - t0


#: A steer design through a fixed base head (d = 2, four sublayers): the CLI tests of steering
#: around a base build on it.
STEER_BASE_DESIGN = """
task = "steer"
title = "through a fixed head"
[initial]
mean = [0.0, 0.0]
cov = [[1.0, 0.0], [0.0, 1.0]]
[target]
mean = [1.0, -0.5]
cov = [[0.6, 0.1], [0.1, 1.4]]
[horizon]
T = 1.0
n_layers = 4
[base]
A = [[0.1, 0.0], [0.0, -0.1]]
B = [[1.0, 0.0], [0.0, 1.0]]
V = 0.8
[steer]
tokens = 0
"""


def _spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


@contextmanager
def busy_processes(count: int = 2) -> Iterator[None]:
    """``count`` CPU-bound processes (spawned) running beside the block, stopped after it."""
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    hogs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        time.sleep(0.5)  # the processes are running
        yield
    finally:
        stop.set()
        for hog in hogs:
            hog.join(timeout=5.0)
            if hog.is_alive():
                hog.kill()


def refused(
    call: Callable[[], Any], name: str, error: type[GTControlError] = InvalidParametersError
) -> str:
    """``call()`` raises ``error`` naming ``name`` before its colon, with no warning shown on
    the way; the message (the contract's "bad input raises, naming the input")."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(error) as info:
            call()
    message = str(info.value)
    assert name in message.split(":")[0], message
    assert not caught, [str(w.message) for w in caught]
    return message
