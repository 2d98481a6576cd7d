"""gtcontrol._blas: BLAS thread counts for a block, and ARPACK's split of them."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as sla

threadpoolctl = pytest.importorskip("threadpoolctl")

from gtcontrol._blas import arpack_products, blas_single_threaded, single_threaded_blas  # noqa: E402


def _threads() -> int:
    info = threadpoolctl.threadpool_info()
    return max(int(p["num_threads"]) for p in info if p.get("user_api") == "blas")


def test_arpack_runs_on_one_thread_and_its_products_on_the_callers() -> None:
    seen: list[int] = []
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((60, 60))

    def product(x: np.ndarray) -> np.ndarray:
        seen.append(_threads())
        out: np.ndarray = mat @ x
        return out

    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = _threads()
        with arpack_products(product) as on_callers:
            assert _threads() == 1  # ARPACK's own BLAS
            lin = sla.LinearOperator(mat.shape, matvec=on_callers, dtype=float)
            vals = sla.eigs(lin, k=3, which="LR", return_eigenvectors=False, v0=np.ones(60))
        assert _threads() == before  # restored
    assert seen and set(seen) == {before}  # every product on the caller's threads
    # the same eigenvalues as a plain ARPACK run (the split changes threads, not arithmetic)
    ref = np.linalg.eigvals(mat)
    top = np.sort(ref.real)[-1]
    assert np.max(vals.real) == pytest.approx(top, rel=1e-10)


def test_on_one_thread_the_products_are_passed_through() -> None:
    def product(x: np.ndarray) -> np.ndarray:
        return x

    with single_threaded_blas():
        assert blas_single_threaded() and _threads() == 1
        with arpack_products(product) as on_callers:
            assert on_callers is product
            assert _threads() == 1
