"""Private torch backend of token attention (imported only when that backend is chosen).

The same tiles and the same shift rule as the numpy kernel (:mod:`._attention_kernels`): per
tile a logits GEMM, ``exp_`` in place and an ``addmm_`` of ``P [V 1]`` into the accumulator;
a query block with a row over the shift-free bound first takes its exact row maximum and then
the shifted logits from the augmented ``[q, −m]·[k; 1]``. Tensors live on the first CUDA device
when torch sees one (tiles of ``4096 × 8192``), on the CPU otherwise (``256 × 1024``, torch's
intra-op threads). float64 and float32 follow the working dtype.

torch is optional (the ``experiments`` extra): :func:`load_torch` returns ``None`` without it and
``import gtcontrol`` never imports it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

from ._attention_kernels import AnyArray, tile_plan, unshifted_rows, with_ones

__all__ = ["TorchSoftmax", "load_torch"]


def load_torch() -> ModuleType | None:
    """``torch``, or ``None`` when it is not installed (or does not import)."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


class TorchSoftmax:
    """``Σ_j v_j e^{q_i·k_j} / Σ_j e^{q_i·k_j}`` on torch tensors, tiled; numpy in and out."""

    def __init__(self, torch: ModuleType, n: int, block_size: int | None, dtype: np.dtype[Any]):
        self.torch = torch
        cuda = bool(torch.cuda.is_available())
        self.device = torch.device("cuda" if cuda else "cpu")
        self.plan = tile_plan(n, block_size, device=self.device.type)
        self.dtype = torch.float64 if dtype == np.float64 else torch.float32
        self._buf: Any = None

    def _tile(self, rows: int, cols: int) -> Any:
        if self._buf is None:
            size = self.plan.rows * self.plan.cols
            self._buf = self.torch.empty(size, dtype=self.dtype, device=self.device)
        return self._buf[: rows * cols].view(rows, cols)

    def _tensor(self, a: AnyArray) -> Any:
        return self.torch.as_tensor(np.ascontiguousarray(a), device=self.device)

    def _row_max(self, q: Any, k_t: Any) -> Any:
        torch, cols, n_keys = self.torch, self.plan.cols, k_t.shape[1]
        m = torch.full((q.shape[0],), -torch.inf, dtype=self.dtype, device=self.device)
        for c in range(0, n_keys, cols):
            t = self._tile(q.shape[0], min(cols, n_keys - c))
            torch.matmul(q, k_t[:, c : c + cols], out=t)
            torch.maximum(m, torch.amax(t, dim=1), out=m)
        return m

    def _accumulate(self, q: Any, k_t: Any, v1: Any, acc: Any) -> None:
        torch, cols, n_keys = self.torch, self.plan.cols, k_t.shape[1]
        for c in range(0, n_keys, cols):
            t = self._tile(q.shape[0], min(cols, n_keys - c))
            torch.matmul(q, k_t[:, c : c + cols], out=t)
            t.exp_()
            if c == 0:
                torch.matmul(t, v1[c : c + cols], out=acc)
            else:
                acc.addmm_(t, v1[c : c + cols])

    def __call__(self, q: AnyArray, k_t: AnyArray, values: AnyArray) -> AnyArray:
        """The softmax-weighted ``values`` of every query row (same dtype as ``q``)."""
        torch = self.torch
        free = unshifted_rows(q, k_t, values)
        n, rows = q.shape[0], self.plan.rows
        with torch.inference_mode():
            tq, tk, tv1 = self._tensor(q), self._tensor(k_t), self._tensor(with_ones(values))
            acc = torch.empty((n, tv1.shape[1]), dtype=self.dtype, device=self.device)
            k_aug = None
            for s in range(0, n, rows):
                e = min(s + rows, n)
                if free[s:e].all():
                    self._accumulate(tq[s:e], tk, tv1, acc[s:e])
                    continue
                if k_aug is None:
                    ones = torch.ones((1, tk.shape[1]), dtype=self.dtype, device=self.device)
                    k_aug = torch.cat([tk, ones])
                shift = self._row_max(tq[s:e], tk)
                q_aug = torch.cat([tq[s:e], -shift[:, None]], dim=1)
                self._accumulate(q_aug, k_aug, tv1, acc[s:e])
            out = (acc[:, :-1] / acc[:, -1:]).cpu().numpy()
        result: AnyArray = np.ascontiguousarray(out)
        return result
