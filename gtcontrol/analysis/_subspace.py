"""The active subspace of a singular covariance: the directions a layer moves.

An extracted Transformer layer carries an affine coordinate that no token ever changes
(``nᵀA = 0``, ``nᵀb = 0``, ``nᵀV_h = 0``); its equilibria are singular along it, ``S ⊕ 0``.
Everything about the covariance dynamics (Newton's equation, the linearization's spectrum) is
then taken on ``range Σ``: :func:`active_subspace` finds it and checks that the null space is
frozen, :func:`reduced_layer` restricts the layer to it, factored heads kept factored
(docs/theory.md, "Active subspace").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._linalg import FloatArray, sym
from ..errors import InvalidGaussianError
from ..model.heads import FactoredHeads
from ..model.params import Layer

__all__ = ["active_subspace", "frozen_rows_basis", "reduced_layer"]

#: Eigenvalues of ``Σ`` below this times ``λ_max`` count as zero (the frozen directions).
_RANK_RTOL = 1e-10
#: Entries of ``nᵀA``, ``nᵀV_h``, ``nᵀb`` up to this times the layer's size count as zero.
_FROZEN_RTOL = 1e-12


def active_subspace(layer: Layer, cov: FloatArray, name: str = "equilibrium") -> FloatArray:
    """Orthonormal basis ``U`` (``d×r``) of ``range Σ``, checked against the frozen directions.

    When ``Σ`` is singular its null space must consist of directions the layer never moves
    (``nᵀA = 0``, ``nᵀb = 0``, ``nᵀV_h = 0``); zero rows and columns of ``Σ`` give coordinate
    axes exactly (``U`` is then a selection of the identity's columns).

    Raises
    ------
    InvalidGaussianError
        Naming ``name``, if ``Σ`` is singular along a direction the layer moves.
    """
    d = layer.dim
    c = sym(cov)
    top = float(np.max(np.abs(c))) if c.size else 0.0
    if top == 0.0:
        raise InvalidGaussianError(f"{name}: the covariance is zero; expected rank ≥ 1")
    zero = np.all(c == 0.0, axis=1)
    active = np.flatnonzero(~zero)
    w = np.linalg.eigvalsh(c[np.ix_(active, active)])
    if float(w[0]) > _RANK_RTOL * float(w[-1]):
        basis = np.eye(d)[:, active]
    else:
        w_full, u_full = np.linalg.eigh(c)
        keep = w_full > _RANK_RTOL * float(w_full[-1])
        basis = u_full[:, keep]
    if basis.shape[1] < d:
        _check_frozen(layer, _complement(basis), name)
    return basis


def _complement(basis: FloatArray) -> FloatArray:
    d, r = basis.shape
    if np.all(np.isin(basis, (0.0, 1.0))) and np.allclose(basis.sum(axis=0), 1.0):
        rows = np.flatnonzero(basis.sum(axis=1) == 0.0)
        return np.eye(d)[:, rows]
    q, _ = np.linalg.qr(basis, mode="complete")
    return q[:, r:]


def _check_frozen(layer: Layer, null: FloatArray, name: str) -> None:
    a, b = layer.affine_ffn()
    parts: list[tuple[str, FloatArray]] = [("A", null.T @ a), ("b", null.T @ b)]
    fh = layer.factored_heads
    if fh is not None:
        parts.append(("heads (W_O)", null.T @ fh.o_cat))
    parts += [(f"dense head {h}", null.T @ v_h) for h, (v_h, _) in enumerate(layer.dense_heads)]
    scale = max(
        [1.0, float(np.max(np.abs(a)))]
        + [float(np.max(np.abs(v_h))) for v_h, _ in layer.dense_heads]
        + ([float(np.max(np.abs(fh.o_cat)))] if fh is not None else [])
    )
    for what, block in parts:
        dev = float(np.max(np.abs(block))) if block.size else 0.0
        if dev > _FROZEN_RTOL * scale:
            raise InvalidGaussianError(
                f"{name}: the covariance is singular along a direction the layer moves "
                f"({what} acts on it, |entry| up to {dev:.3g}); expected a covariance positive "
                "definite on the layer's active subspace (singular only along directions with "
                "nᵀA = 0, nᵀb = 0 and nᵀV_h = 0, such as an affine coordinate)"
            )


def reduced_layer(layer: Layer, basis: FloatArray) -> Layer:
    """The layer's covariance dynamics on ``range U``: ``A_r = UᵀAU``, heads ``(UᵀV_hU, UᵀB_hU)``.

    Factored heads stay factored (``W_Q U``, ``W_K U``, ``W_V U``, ``Uᵀ W_O``). The bias and the
    parts of ``B_h`` that act on the frozen directions only enter the mean equation, so they
    are dropped; with ``Σ = U S Uᵀ`` the reduced field gives ``dS/dt`` exactly.
    """
    a, _ = layer.affine_ffn()
    r = basis.shape[1]
    groups: list[Any] = []
    fh = layer.factored_heads
    if fh is not None:
        groups.append(
            FactoredHeads(
                fh.q @ basis,
                fh.k @ basis,
                fh.v @ basis,
                np.einsum("ji,hjk->hik", basis, fh.o),
                scale=fh.scale,
            )
        )
    groups += [(basis.T @ v_h @ basis, basis.T @ b_h @ basis) for v_h, b_h in layer.dense_heads]
    return Layer(basis.T @ a @ basis, heads=groups, dim=r)


def frozen_rows_basis(layer: Layer, cov: FloatArray) -> FloatArray | None:
    """The coordinate axes of ``cov``'s non-zero rows when its zero rows are frozen directions
    of ``layer`` (an extracted layer's affine coordinate), else ``None``.

    An ``O(d²)`` test first (no zero row: ``None``), so that callers may ask on every solve; a
    zero row the layer moves is not frozen and gives ``None`` too (the caller solves in full).
    """
    c = np.asarray(cov)
    zero = ~np.any(c != 0.0, axis=1)
    if not zero.any() or zero.all():
        return None
    basis = np.eye(c.shape[0])[:, ~zero]
    try:
        _check_frozen(layer, _complement(basis), "start")
    except InvalidGaussianError:
        return None
    return basis
