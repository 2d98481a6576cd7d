"""Factored attention heads: the rank-``d_head`` projections of a real Transformer layer.

In a Transformer with ``H`` heads of width ``d_head`` the attention weight of key ``y`` for query
``x`` in head ``h`` is ``exp((W_Q,h x)ᵀ(W_K,h y) s)`` with ``s = 1/sqrt(d_head)``, and the head's
output is ``W_O,h W_V,h Attn_h(x)``. In gtcontrol's conventions (docs/theory.md §1–§2)

    B_h = s W_K,hᵀ W_Q,h,        V_h = W_O,h W_V,h,

two ``d×d`` matrices of rank at most ``d_head``. :class:`FactoredHeads` keeps the factors, so the
moment field costs ``O(H d² d_head)`` instead of a ``d×d×d`` product per head (``M Σ = A Σ + s Σ_h
W_O,h (W_V,h Σ W_K,hᵀ)(W_Q,h Σ)``) and token attention projects keys and queries to ``d_head``
first. The dense pairs are available from :meth:`FactoredHeads.dense`.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §1–§2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._linalg import FloatArray
from .._readonly import ReadOnlyArrays
from .._validation import (
    as_float_array,
    as_positive_float,
    as_positive_int,
    frozen,
    set_fields,
)
from ..errors import InvalidParametersError

__all__ = ["FactoredHeads"]


def _fitting(
    name: str, value: Any, shape: tuple[int, ...], ref: str, ref_shape: tuple[int, ...]
) -> FloatArray:
    """``value`` as a finite real array, refused unless it has the ``shape`` that fits ``ref``."""
    arr = as_float_array(name, value, ndim=len(shape))
    if arr.shape != shape:
        raise InvalidParametersError(
            f"{name}: expected shape {shape} to match {ref} of shape {ref_shape}, "
            f"got shape {arr.shape}"
        )
    return arr


@dataclass(frozen=True, eq=False, init=False)
class FactoredHeads(ReadOnlyArrays):
    """``H`` attention heads kept as their rank-``d_head`` projection factors.

    Head ``h`` is ``B_h = scale · k_hᵀ q_h`` and ``V_h = o_h v_h`` (docs/theory.md §2): the
    attention weight of key ``y`` for query ``x`` is ``exp(scale (k_h y)ᵀ(q_h x))`` and the head
    adds ``o_h v_h Attn_h(x)``. The value is immutable and validated; build it from nn.Linear
    weights with :meth:`from_projections`.

    Parameters
    ----------
    q, k, v
        Query, key and value factors stacked per head, each of shape ``(H, d_head, d)``.
    o
        Output factors stacked per head, shape ``(H, d, d_head)``.
    scale
        The logit scale ``s`` (positive); ``None`` (default) means ``1/sqrt(d_head)``.

    Attributes
    ----------
    q, k, v, o
        The read-only stacked factors.
    scale
        The logit scale.

    Raises
    ------
    InvalidParametersError
        On NaN/inf, complex or ragged input, shapes that do not fit together (the message names
        the factor and both shapes), zero heads, or a non-positive scale.

    Examples
    --------
    >>> import numpy as np
    >>> from gtcontrol import FactoredHeads
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 1, 3)) for _ in range(3))
    >>> fh = FactoredHeads(q, k, v, rng.standard_normal((2, 3, 1)))
    >>> fh.n_heads, fh.head_dim, fh.dim, fh.scale
    (2, 1, 3, 1.0)
    >>> V0, B0 = fh.dense()[0]
    >>> bool(np.allclose(B0, k[0].T @ q[0]))
    True
    """

    q: FloatArray
    k: FloatArray
    v: FloatArray
    o: FloatArray
    scale: float
    _o_cat: FloatArray
    _vqk: FloatArray

    def __init__(self, q: Any, k: Any, v: Any, o: Any, *, scale: float | None = None) -> None:
        qq = as_float_array("q", q, ndim=3)
        n_heads, d_head, d = qq.shape
        if n_heads == 0 or d_head == 0 or d == 0:
            raise InvalidParametersError(
                f"q: expected shape (H, d_head, d) with every size positive, got {qq.shape}"
            )
        kk = _fitting("k", k, (n_heads, d_head, d), "q", qq.shape)
        vv = _fitting("v", v, (n_heads, d_head, d), "q", qq.shape)
        oo = _fitting("o", o, (n_heads, d, d_head), "q", qq.shape)
        s = 1.0 / math.sqrt(d_head) if scale is None else as_positive_float("scale", scale)
        # The output factors side by side, (d, H·d_head): one product applies every head.
        o_cat = np.ascontiguousarray(oo.transpose(1, 0, 2).reshape(d, n_heads * d_head))
        inner = n_heads * d_head
        vqk = np.concatenate([a.reshape(inner, d) for a in (vv, qq, kk)])
        set_fields(self, q=qq, k=kk, v=vv, o=oo, scale=s, _o_cat=o_cat, _vqk=vqk)

    @classmethod
    def from_projections(
        cls, W_Q: Any, W_K: Any, W_V: Any, W_O: Any, *, n_heads: int, scale: float | None = None
    ) -> FactoredHeads:
        """Split nn.Linear projection weights into ``n_heads`` heads.

        Rows ``h·d_head ... (h+1)·d_head − 1`` of ``W_Q``, ``W_K``, ``W_V`` and the same columns
        of ``W_O`` belong to head ``h`` (the layout of PyTorch/Hugging Face attention).

        Parameters
        ----------
        W_Q, W_K, W_V
            Query, key and value weights, each of shape ``(n_heads·d_head, d)``.
        W_O
            Output weight, shape ``(d, n_heads·d_head)``.
        n_heads
            Number of heads; it must divide the number of rows of ``W_Q``.
        scale
            Logit scale; ``None`` (default) means ``1/sqrt(d_head)``.

        Returns
        -------
        FactoredHeads
            The stacked factors.

        Raises
        ------
        InvalidParametersError
            If a weight is not a finite real 2-d array, the shapes do not fit together (the
            message names the weight), or ``n_heads`` does not divide ``W_Q``'s rows.
        """
        wq = as_float_array("W_Q", W_Q, ndim=2)
        inner, d = wq.shape
        h = as_positive_int("n_heads", n_heads)
        if inner == 0 or d == 0:
            raise InvalidParametersError(f"W_Q: expected a non-empty matrix, got shape {wq.shape}")
        if inner % h:
            raise InvalidParametersError(
                f"n_heads: {h} heads do not divide the {inner} rows of W_Q "
                "(expected W_Q of shape (n_heads·d_head, d))"
            )
        wk = _fitting("W_K", W_K, (inner, d), "W_Q", wq.shape)
        wv = _fitting("W_V", W_V, (inner, d), "W_Q", wq.shape)
        wo = _fitting("W_O", W_O, (d, inner), "W_Q", wq.shape)
        dh = inner // h
        return cls(
            wq.reshape(h, dh, d),
            wk.reshape(h, dh, d),
            wv.reshape(h, dh, d),
            wo.reshape(d, h, dh).transpose(1, 0, 2),
            scale=scale,
        )

    @property
    def n_heads(self) -> int:
        """Number of heads ``H``."""
        return int(self.q.shape[0])

    @property
    def head_dim(self) -> int:
        """Head width ``d_head``."""
        return int(self.q.shape[1])

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return int(self.q.shape[2])

    @property
    def o_cat(self) -> FloatArray:
        """The output factors side by side, ``(d, H·d_head)`` (``W_O`` of nn.Linear)."""
        return self._o_cat

    @property
    def vqk(self) -> FloatArray:
        """``[W_V; W_Q; W_K]`` stacked as rows, ``(3 H·d_head, d)``: one product projects on all."""
        return self._vqk

    def flat(self, name: str) -> FloatArray:
        """``q``, ``k`` or ``v`` with the heads stacked as rows: shape ``(H·d_head, d)``.

        Parameters
        ----------
        name
            ``"q"``, ``"k"`` or ``"v"``.

        Returns
        -------
        numpy.ndarray
            A read-only view (``W_Q``, ``W_K`` or ``W_V`` of nn.Linear).
        """
        arr: FloatArray = getattr(self, name)
        return arr.reshape(self.n_heads * self.head_dim, self.dim)

    def dense(self) -> tuple[tuple[FloatArray, FloatArray], ...]:
        """The dense heads ``((V_h, B_h), ...)``: ``V_h = o_h v_h``, ``B_h = scale · k_hᵀ q_h``.

        Returns
        -------
        tuple of (numpy.ndarray, numpy.ndarray)
            ``H`` read-only pairs of ``(d, d)`` matrices.
        """
        v_all = np.matmul(self.o, self.v)
        b_all = np.matmul(self.k.transpose(0, 2, 1), self.q) * self.scale
        return tuple((frozen(v_all[h]), frozen(b_all[h])) for h in range(self.n_heads))

    def __repr__(self) -> str:
        return (
            f"FactoredHeads(n_heads={self.n_heads}, head_dim={self.head_dim}, dim={self.dim}, "
            f"scale={self.scale:g})"
        )
