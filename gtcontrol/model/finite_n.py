"""Finite-N validity of the moment model: the effective sample size of each head's softmax.

For keys ``y ~ N(m, Σ)`` and a query ``x`` with ``u = B x``, the attention weights
``w = exp(yᵀu)`` have the effective sample size (docs/theory.md §2 "Finite N")

    ESS/N = (E w)² / E w² = exp(−uᵀ Σ u),

because ``E exp(yᵀu) = exp(mᵀu + uᵀΣu/2)``. The moment model (N → ∞) describes N real tokens only
while ``uᵀΣu`` stays moderate along the path: with ``ESS/N = 1e-3`` and ``N = 1024`` one key
carries the whole softmax and tokens stall, although the N → ∞ theory still holds. This module is
the one home of that quantity; the design certificates and the token comparisons call it.

Reference: the paper cited in :mod:`gtcontrol`, §2; A. Kong, *A note on importance sampling using
standardized weights* (1992) for the ESS of importance weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._linalg import FloatArray, psd_sqrt
from .._validation import as_float_array, as_nonnegative_float, as_real_array
from ..errors import InvalidParametersError
from .gaussian import Gaussian
from .params import Layer

__all__ = ["ess_fraction", "worst_ess_fraction"]


def _check_layer(layer: Any, d: int) -> Layer:
    if not isinstance(layer, Layer):
        raise InvalidParametersError(f"layer must be a gtcontrol Layer, got {type(layer).__name__}")
    if layer.dim != d:
        raise InvalidParametersError(f"layer has dimension {layer.dim}, the Gaussian {d}")
    return layer


def ess_fraction(layer: Layer, keys: Gaussian, queries: Any) -> FloatArray:
    """Effective sample size per key of each head's softmax, ``ESS/N = exp(−uᵀΣu)``, ``u = B_h x``.

    Parameters
    ----------
    layer
        The layer whose heads ``B_h`` tilt the softmax.
    keys
        The key distribution ``N(m, Σ)`` (only Σ matters).
    queries
        Query points, shape ``(n, d)`` (or ``(d,)`` for one).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, n_heads)`` (``(n_heads,)`` for one query): ``exp(−uᵀΣu)`` in ``(0, 1]``; ``1``
        for a head with ``B_h = 0`` or a query in its kernel. Underflows to ``0`` only when
        ``uᵀΣu > 745``.

    Raises
    ------
    InvalidParametersError
        If the layer is not a :class:`~gtcontrol.Layer`, the dimensions disagree, or the queries
        are not a finite real array of width ``d``.

    Notes
    -----
    ``E w = exp(mᵀu + uᵀΣu/2)`` and ``E w² = exp(2mᵀu + 2uᵀΣu)``, so the ratio is
    ``exp(−uᵀΣu)`` whatever the mean; docs/theory.md §2.

    Examples
    --------
    >>> import numpy as np, gtcontrol as gt
    >>> from gtcontrol.model.finite_n import ess_fraction
    >>> layer = gt.Layer(V=1.0, B=2.0 * np.eye(2))
    >>> ess_fraction(layer, gt.Gaussian(np.zeros(2), np.eye(2)), [1.0, 0.0]).round(4)
    array([0.0183])
    """
    if not isinstance(keys, Gaussian):
        raise InvalidParametersError(f"keys: expected a Gaussian, got {type(keys).__name__}")
    d = keys.dim
    _check_layer(layer, d)
    arr = as_real_array("queries", queries)
    single = arr.ndim == 1
    x2 = as_float_array(
        "queries", arr, ndim=1 if single else 2, shape=(None,) * (not single) + (d,)
    )
    if single:
        x2 = x2[None, :]
    root = psd_sqrt(keys.cov)
    out = np.empty((x2.shape[0], layer.n_heads))
    for h, (_, b) in enumerate(layer.heads):
        z = x2 @ (root @ b).T  # rows: (Σ^{1/2} B x)ᵀ, so |z|² = uᵀΣu
        out[:, h] = np.exp(-np.einsum("ij,ij->i", z, z))
    return out[0] if single else out


def worst_ess_fraction(layer: Layer, gaussian: Gaussian, *, n_std: float = 2.0) -> FloatArray:
    """Lower bound of ``ESS/N`` per head over queries within ``n_std`` standard deviations.

    For queries ``x = m + Σ^{1/2} z`` with ``|z| ≤ n_std`` drawn from the same Gaussian as the
    keys (self-attention), ``|Σ^{1/2} B x| ≤ |Σ^{1/2} B m| + n_std ‖Σ^{1/2} B Σ^{1/2}‖₂``, so

        ESS/N ≥ exp(−(|Σ^{1/2} B m| + n_std ‖Σ^{1/2} B Σ^{1/2}‖₂)²).

    The bound is attained when the top right singular vector of ``Σ^{1/2}BΣ^{1/2}`` is aligned
    with ``Σ^{1/2}Bm``'s preimage (always for ``m = 0``).

    Parameters
    ----------
    layer
        The layer whose heads ``B_h`` tilt the softmax.
    gaussian
        Token distribution ``N(m, Σ)``, used for the keys and the queries.
    n_std
        Radius of the query ball in standard deviations (``≥ 0``; default 2).

    Returns
    -------
    numpy.ndarray
        Shape ``(n_heads,)``: the lower bound for each head.

    Raises
    ------
    InvalidParametersError
        If ``n_std`` is negative or not finite, or the layer does not match the Gaussian.

    Examples
    --------
    >>> import numpy as np, gtcontrol as gt
    >>> from gtcontrol.model.finite_n import worst_ess_fraction
    >>> layer = gt.Layer(V=1.0, B=0.5 * np.eye(2))
    >>> worst_ess_fraction(layer, gt.Gaussian(np.zeros(2), np.eye(2)), n_std=2.0).round(4)
    array([0.3679])
    """
    if not isinstance(gaussian, Gaussian):
        raise InvalidParametersError(
            f"gaussian: expected a Gaussian, got {type(gaussian).__name__}"
        )
    d = gaussian.dim
    _check_layer(layer, d)
    n_std = as_nonnegative_float("n_std", n_std)
    root = psd_sqrt(gaussian.cov)
    out = np.empty(layer.n_heads)
    # a radius past the float range is inf: its ESS fraction is exp(−inf) = 0 (a product, not
    # radius**2, which raises OverflowError on a large finite float)
    with np.errstate(over="ignore", invalid="ignore"):
        for h, (_, b) in enumerate(layer.heads):
            rb = root @ b
            radius = float(np.linalg.norm(rb @ gaussian.mean)) + n_std * float(
                np.linalg.norm(rb @ root, 2)
            )
            out[h] = np.exp(-(radius * radius))
    return out
