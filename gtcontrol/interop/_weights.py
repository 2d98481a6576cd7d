"""The weights of one Transformer layer, as frozen values with their token map and moment map.

Three parts, each in the layout of PyTorch's ``nn.Linear`` (weights ``(out, in)``):

* :class:`AttentionWeights` — ``W_Q, b_Q, W_K, b_K, W_V, b_V, W_O, b_O``, the head count and
  the logit scale ``s``. Head ``h`` gives ``B_h = s W_K,hᵀ W_Q,h``, ``V_h = W_O,h W_V,h`` and the
  key tilt ``u_h = s W_K,hᵀ b_Q,h`` (docs/theory.md §1). The key bias ``b_K`` adds
  ``s b_K,hᵀ(W_Q,h x + b_Q,h)`` to every logit of query ``x`` alike, so it cancels in the softmax
  exactly: it is kept for the record and enters nothing. :meth:`AttentionWeights.layer` is the
  sublayer as a gtcontrol :class:`~gtcontrol.model.params.Layer` on ``R^{d+1}`` (the affine
  coordinate carries the query bias; :mod:`.extraction`).
* :class:`LayerNormWeights` — ``LN(x) = γ ⊙ P x / sqrt(|P x|²/d + ε) + β`` with ``P = I −
  11ᵀ/d``, and its linearization at a Gaussian with the per-token scale frozen at its mean
  ``s̄² = (tr(PΣP) + |Pm|²)/d + ε``: ``LN(x) ≈ G x + β``, ``G = diag(γ/s̄) P``.
* :class:`FeedForwardWeights` — ``W_out σ(W_in z + b_in) + b_out`` with ``σ`` one of
  :data:`ACTIVATIONS`, or gated (GeGLU, ModernBERT): ``W_out (σ(a) ⊙ g) + b_out`` with
  ``[a; g] = W_in z + b_in``. Its statistical linearization at a Gaussian keeps the exact mean
  and the exact cross-covariance with the input (Stein's lemma) and adds the variance the
  linearization misses, treating the hidden units' nonlinear residuals as uncorrelated.

Reference: Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §1–§2; docs/own_model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from scipy.special import expit, ndtr

from .._linalg import FloatArray, sym
from .._readonly import ReadOnlyArrays
from .._validation import (
    as_choice,
    as_float_array,
    as_nonnegative_float,
    as_positive_int,
    as_real_array,
    frozen,
    set_fields,
)
from ..errors import InvalidParametersError
from ..model.gaussian_closure import activation_moments
from ..model.heads import FactoredHeads
from ..model.params import Layer

__all__ = [
    "ACTIVATIONS",
    "AttentionWeights",
    "FeedForwardWeights",
    "LayerNormWeights",
    "activation",
    "activation_statistics",
]

#: The feed-forward activations read from models: ``"gelu"`` (exact, ``a Φ(a)``),
#: ``"gelu_tanh"`` (GPT-2's tanh approximation), ``"relu"`` and ``"silu"`` (``a σ(a)``).
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_HERMITE = np.polynomial.hermite_e.hermegauss(80)
_TANH_C = math.sqrt(2.0 / math.pi)
#: The projections of an attention, in the order of the factors ``q, k, v, o``.
_PROJECTIONS = ("W_Q", "W_K", "W_V", "W_O")
#: Largest accepted |mean| of :func:`activation_statistics` (the tanh GELU cubes it).
_MAX_PRE_ACTIVATION = 1e100
#: ``|μ/s|`` beyond which ``Φ(μ/s)`` is 0 or 1 and ``φ(μ/s)`` is 0 in float64.
_K_MAX = 40.0


def activation(kind: str, x: Any, *, derivative: bool = False) -> FloatArray:
    """``σ(x)`` (or ``σ'(x)``) elementwise for one of :data:`ACTIVATIONS`.

    Parameters
    ----------
    kind
        The activation.
    x
        Pre-activations (any shape).
    derivative
        Return ``σ'(x)`` instead (``relu``: the step, 0 at 0).

    Returns
    -------
    numpy.ndarray
        The values, the shape of ``x``.

    Examples
    --------
    >>> float(activation("gelu", 0.0)), float(activation("relu", 2.0, derivative=True))
    (0.0, 1.0)
    """
    a = np.asarray(x, dtype=float)
    if kind == "gelu":
        p = ndtr(a)
        out = a * p if not derivative else p + a * _INV_SQRT_2PI * np.exp(-0.5 * a * a)
    elif kind == "gelu_tanh":
        t = np.tanh(_TANH_C * (a + 0.044715 * a**3))
        out = 0.5 * a * (1.0 + t)
        if derivative:
            out = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * _TANH_C * (1.0 + 0.134145 * a * a)
    elif kind == "relu":
        out = np.maximum(a, 0.0) if not derivative else (a > 0).astype(float)
    elif kind == "silu":
        s = expit(a)
        out = a * s if not derivative else s * (1.0 + a * (1.0 - s))
    else:
        raise InvalidParametersError(f"activation: expected one of {ACTIVATIONS}, got {kind!r}")
    return np.asarray(out, dtype=float)


def activation_statistics(
    mean: Any, var: Any, *, kind: str
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``E σ(a)``, ``E σ'(a)``, ``Var σ(a)`` for ``a ~ N(μ, s²)`` and any of :data:`ACTIVATIONS`.

    The statistics of :meth:`~gtcontrol.interop.FeedForwardWeights.linearization` (a
    feed-forward's Gaussian surrogate). ReLU and GELU (``σ(a) = a Φ(a)``) take the closed forms of
    :func:`~gtcontrol.model.gaussian_closure.activation_moments` for the first two; the tanh
    GELU and SiLU take 80-point Gauss–Hermite quadrature (smooth integrands: ~1e-12 relative).
    The variance is by quadrature too, but for ReLU (closed form: its kink would leave ~4e-4).

    Parameters
    ----------
    mean, var
        Means (``|μ| ≤ 1e100``) and variances (``0 ≤ s² ≤ 1e150``) of the pre-activations,
        real arrays of broadcastable shapes.
    kind
        The activation.

    Returns
    -------
    (E σ, E σ', Var σ)
        Three arrays of the broadcast shape.

    Raises
    ------
    InvalidParametersError
        On a mean or variance that is not a finite real array (or a variance below zero),
        shapes that do not broadcast, or an unknown ``kind``; the message names the input.

    Examples
    --------
    >>> e, de, v = activation_statistics(np.zeros(1), np.zeros(1), kind="silu")
    >>> float(e[0]), float(de[0]), float(v[0])
    (0.0, 0.5, 0.0)
    """
    kind = as_choice("kind", kind, ACTIVATIONS)
    # the tanh GELU cubes the pre-activation: |μ| ≤ 1e100 keeps every term in float64
    mu = as_real_array("mean", mean, max_abs=_MAX_PRE_ACTIVATION)
    s2 = as_real_array("var", var)
    if np.any(s2 < 0):
        raise InvalidParametersError(f"var: expected variances >= 0, got {float(np.min(s2)):.3g}")
    try:
        np.broadcast_shapes(mu.shape, s2.shape)
    except ValueError:
        raise InvalidParametersError(
            f"mean, var: expected broadcastable shapes, got {mu.shape} and {s2.shape}"
        ) from None
    return _statistics(mu, s2, kind)


def _statistics(
    mean: FloatArray, var: FloatArray, kind: str
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`activation_statistics` of checked arrays (variances clipped at 0: roundoff)."""
    mu, s2 = np.broadcast_arrays(mean, var)
    s2 = np.maximum(s2, 0.0)
    nodes, weights = _HERMITE
    a = mu[..., None] + np.sqrt(s2)[..., None] * nodes
    g = activation(kind, a)
    if kind in ("gelu", "relu"):
        # (μ/s)² overflows past |μ/s| ~ 1e154, where φ(μ/s) = 0 is still right: no warning
        with np.errstate(over="ignore"):
            e_g, e_dg = activation_moments(kind, mu, s2)
    else:
        e_g = g @ weights * _INV_SQRT_2PI
        e_dg = activation(kind, a, derivative=True) @ weights * _INV_SQRT_2PI
    e_g2 = (g * g) @ weights * _INV_SQRT_2PI
    if kind == "relu":  # E relu(a)² = (μ² + s²) Φ(μ/s) + μ s φ(μ/s): the kink defeats quadrature
        s = np.sqrt(s2)
        k = np.divide(mu, s, out=np.where(mu >= 0, np.inf, -np.inf), where=s > 0)
        k = np.clip(k, -_K_MAX, _K_MAX)  # Φ and φ are saturated there; k² must not overflow
        pdf = np.where(s > 0, _INV_SQRT_2PI * np.exp(-0.5 * np.where(s > 0, k, 0.0) ** 2), 0.0)
        e_g2 = (mu * mu + s2) * ndtr(k) + mu * s * pdf
    return e_g, e_dg, np.maximum(e_g2 - e_g * e_g, 0.0)


def _rows(name: str, value: Any, d: int) -> FloatArray:
    """Tokens of width ``d`` along the last axis (one token ``(d,)``, or rows ``(..., d)``)."""
    arr = as_real_array(name, value)
    nd = max(arr.ndim, 1)
    return as_float_array(name, arr, ndim=nd, shape=(*([None] * (nd - 1)), d))


def gaussian_moments(d: int, mean: Any, cov: Any) -> tuple[FloatArray, FloatArray]:
    """``mean`` ``(d,)`` and ``cov`` ``(d, d)`` as finite real arrays, or refuse them by name.

    Only the shapes and entries are checked: the moment maps take any symmetric part.
    """
    m = as_float_array("mean", mean, ndim=1, shape=(d,))
    return m, as_float_array("cov", cov, ndim=2, shape=(d, d))


def _matrix(name: str, value: Any, shape: tuple[int | None, ...]) -> FloatArray:
    return frozen(as_float_array(name, value, ndim=len(shape), shape=shape).copy())


@dataclass(frozen=True, eq=False, init=False)
class AttentionWeights(ReadOnlyArrays):
    """A multi-head self-attention's projections in ``nn.Linear`` layout (module docstring).

    Rows ``h·d_head … (h+1)·d_head − 1`` of ``W_Q``, ``W_K``, ``W_V`` (and those columns of
    ``W_O``) belong to head ``h``.

    Parameters
    ----------
    W_Q, W_K, W_V
        Query, key and value weights ``(H·d_head, d)``.
    W_O
        Output weight ``(d, H·d_head)``.
    b_Q, b_K, b_V, b_O
        Biases ``(H·d_head,)`` (``b_O``: ``(d,)``); ``None`` means zero.
    n_heads
        Number of heads ``H``; it must divide the rows of ``W_Q``.
    scale
        Logit scale ``s > 0``; ``None`` means ``1/sqrt(d_head)``.

    Attributes
    ----------
    factored_heads
        The heads without the biases, split by
        :meth:`~gtcontrol.model.heads.FactoredHeads.from_projections` (the one home of the
        split, its checks and the default scale).

    Raises
    ------
    InvalidParametersError
        On a non-finite weight, shapes that do not fit together (the message names the weight),
        a head count that does not divide ``H·d_head`` or a non-positive scale.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> w = [rng.standard_normal((4, 3)) for _ in range(3)]
    >>> att = AttentionWeights(*w, rng.standard_normal((3, 4)), n_heads=2)
    >>> att.head_dim, att.dim, round(att.scale, 4), att.layer().dim
    (2, 3, 0.7071, 4)
    """

    W_Q: FloatArray
    W_K: FloatArray
    W_V: FloatArray
    W_O: FloatArray
    b_Q: FloatArray
    b_K: FloatArray
    b_V: FloatArray
    b_O: FloatArray
    n_heads: int
    scale: float
    factored_heads: FactoredHeads

    def __init__(
        self,
        W_Q: Any,
        W_K: Any,
        W_V: Any,
        W_O: Any,
        *,
        b_Q: Any = None,
        b_K: Any = None,
        b_V: Any = None,
        b_O: Any = None,
        n_heads: int,
        scale: float | None = None,
    ) -> None:
        # The head split, its checks and the default scale have one home.
        fh = FactoredHeads.from_projections(W_Q, W_K, W_V, W_O, n_heads=n_heads, scale=scale)
        inner, d = fh.n_heads * fh.head_dim, fh.dim
        split = (fh.flat("q"), fh.flat("k"), fh.flat("v"), fh.o_cat)
        vals = {name: _matrix(name, w, w.shape) for name, w in zip(_PROJECTIONS, split)}
        for name, value, n in (("b_Q", b_Q, inner), ("b_K", b_K, inner), ("b_V", b_V, inner)):
            vals[name] = _matrix(name, np.zeros(n) if value is None else value, (n,))
        vals["b_O"] = _matrix("b_O", np.zeros(d) if b_O is None else b_O, (d,))
        set_fields(self, **vals, n_heads=fh.n_heads, scale=fh.scale, factored_heads=fh)

    @property
    def dim(self) -> int:
        """The model width ``d``."""
        return self.factored_heads.dim

    @property
    def head_dim(self) -> int:
        """The head width ``d_head``."""
        return self.factored_heads.head_dim

    @property
    def output_bias(self) -> FloatArray:
        """``Σ_h W_O,h b_V,h + b_O = W_O b_V + b_O``: attention weights sum to one."""
        return np.asarray(self.W_O @ self.b_V + self.b_O)

    @property
    def key_tilt(self) -> FloatArray:
        """``u_h = s W_K,hᵀ b_Q,h`` per head, ``(H, d)``."""
        bq = self.b_Q.reshape(self.n_heads, self.head_dim)
        return np.asarray(self.scale * np.einsum("hed,he->hd", self.factored_heads.k, bq))

    def dense_heads(self) -> tuple[tuple[FloatArray, FloatArray], ...]:
        """The dense heads ``((V_h, B_h), ...)``, each ``(d, d)``."""
        return self.factored_heads.dense()

    def layer(self) -> Layer:
        """The sublayer as a factored :class:`Layer` on ``R^{d+1}`` (affine coordinate last).

        ``W̃_Q = [W_Q, b_Q]``, ``W̃_K = [W_K, 0]``, ``W̃_V = [W_V, 0]``, ``W̃_O = [W_O; 0]`` and
        ``b̃ = (W_O b_V + b_O, 0)``: then ``ỹᵀ B̃_h x̃ = yᵀ B_h x + yᵀ u_h`` and the last coordinate
        never moves (:mod:`gtcontrol.interop.extraction`). Built by
        :meth:`Layer.from_projections <gtcontrol.model.params.Layer.from_projections>` from
        these augmented projections.
        """
        zero = np.zeros((self.W_Q.shape[0], 1))
        return Layer.from_projections(
            np.hstack([self.W_Q, self.b_Q[:, None]]),
            np.hstack([self.W_K, zero]),
            np.hstack([self.W_V, zero]),
            np.vstack([self.W_O, zero.T]),
            n_heads=self.n_heads,
            b=np.append(self.output_bias, 0.0),
            scale=self.scale,
        )


@dataclass(frozen=True, eq=False, init=False)
class LayerNormWeights(ReadOnlyArrays):
    """A LayerNorm ``γ ⊙ (x − mean x)/sqrt(var x + ε) + β`` over the last axis.

    Parameters
    ----------
    gamma, beta
        Scale and shift ``(d,)``; ``None`` means ones / zeros (a LayerNorm without them).
    eps
        ``ε ≥ 0``.
    dim
        The width, needed only when both ``gamma`` and ``beta`` are ``None``.

    Raises
    ------
    InvalidParametersError
        On non-finite or mismatched parameters or an ``eps`` that is not a finite number
        ``≥ 0``; the methods, on tokens or moments that are not finite real arrays of width
        ``d`` (the message names the input).

    Examples
    --------
    >>> ln = LayerNormWeights(None, None, 0.0, dim=2)
    >>> ln(np.array([[1.0, 3.0]])).tolist()
    [[-1.0, 1.0]]
    """

    gamma: FloatArray
    beta: FloatArray
    eps: float

    def __init__(self, gamma: Any, beta: Any, eps: float, *, dim: int | None = None) -> None:
        if gamma is None and beta is None:
            d = as_positive_int("dim", dim)
        else:
            name, ref = ("gamma", gamma) if gamma is not None else ("beta", beta)
            d = as_float_array(name, ref, ndim=1).shape[0]
            if not d:
                raise InvalidParametersError(f"{name}: expected at least one entry, got none")
        g = _matrix("gamma", np.ones(d) if gamma is None else gamma, (d,))
        b = _matrix("beta", np.zeros(d) if beta is None else beta, (d,))
        set_fields(self, gamma=g, beta=b, eps=as_nonnegative_float("eps", eps))

    @property
    def dim(self) -> int:
        """The width ``d``."""
        return int(self.gamma.shape[0])

    def __call__(self, x: Any) -> FloatArray:
        """The normalized tokens (``x``: one token ``(d,)`` or rows ``(..., d)``)."""
        return self._apply(_rows("x", x, self.dim))

    def _apply(self, a: FloatArray) -> FloatArray:
        """:meth:`__call__` of checked tokens (the forward passes call it per layer)."""
        c = a - a.mean(axis=-1, keepdims=True)
        den = np.sqrt((c * c).mean(axis=-1, keepdims=True) + self.eps)
        if self.eps == 0.0 and not np.all(den > 0):
            raise InvalidParametersError(
                "x: a token with no spread (all entries equal, or a variance below the float "
                "range) and eps = 0: the LayerNorm divides by zero there; expected eps > 0 or "
                "tokens with spread"
            )
        return np.asarray(c / den * self.gamma + self.beta)

    def scale(self, x: Any) -> FloatArray:
        """The per-token scale ``s(x) = sqrt(|P x|²/d + ε)`` (``x``: ``(d,)`` or ``(..., d)``)."""
        a = _rows("x", x, self.dim)
        return np.asarray(np.sqrt(a.var(axis=-1) + self.eps))

    def linearization(self, mean: Any, cov: Any) -> FloatArray:
        """``G = diag(γ/s̄) P`` with ``s̄² = (tr(PΣP) + |Pm|²)/d + ε`` (``LN(x) ≈ G x + β``).

        ``mean`` is ``(d,)`` and ``cov`` ``(d, d)``.
        """
        return self._linear(*gaussian_moments(self.dim, mean, cov))

    def _linear(self, mean: FloatArray, cov: FloatArray) -> FloatArray:
        """:meth:`linearization` of checked moments."""
        d = mean.shape[0]
        pm = mean - mean.mean()
        tr = float(np.trace(cov)) - float(cov.sum()) / d  # tr(P Σ P) = tr Σ − 1ᵀΣ1/d
        s2 = (tr + float(pm @ pm)) / d + self.eps
        if not s2 > 0:
            raise InvalidParametersError(
                "mean, cov: the LayerNorm's mean scale s̄ is zero (eps = 0 and no spread about "
                "the token mean): its linearization divides by zero"
            )
        g = self.gamma / math.sqrt(s2)
        return np.asarray(g[:, None] * (np.eye(d) - 1.0 / d))

    def moments(self, mean: Any, cov: Any) -> tuple[FloatArray, FloatArray]:
        """``(G m + β, G Σ Gᵀ)``: the Gaussian through the linearized LayerNorm.

        ``mean`` is ``(d,)`` and ``cov`` ``(d, d)``.
        """
        return self._through(*gaussian_moments(self.dim, mean, cov))

    def _through(self, mean: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
        """:meth:`moments` of checked moments."""
        g = self._linear(mean, cov)
        return g @ mean + self.beta, sym(g @ cov @ g.T)


@dataclass(frozen=True, eq=False, init=False)
class FeedForwardWeights(ReadOnlyArrays):
    """A feed-forward ``W_out σ(W_in z + b_in) + b_out``, or gated (module docstring).

    Parameters
    ----------
    W_in
        ``(k, d)``; gated: ``(2k, d)``, rows ``[:k]`` the activation's input, ``[k:]`` the gate.
    W_out
        ``(d, k)``.
    b_in, b_out
        Biases; ``None`` means zero.
    activation
        One of :data:`ACTIVATIONS`.
    gated
        ``σ(a) ⊙ g`` (GeGLU) instead of ``σ(a)``.

    Raises
    ------
    InvalidParametersError
        On mismatched or non-finite weights or an unknown activation; the methods, on tokens
        or moments that are not finite real arrays of width ``d`` (the message names the
        input).

    Examples
    --------
    >>> ffn = FeedForwardWeights(np.eye(2), np.eye(2), activation="relu")
    >>> ffn(np.array([[1.0, -1.0]])).tolist()
    [[1.0, 0.0]]
    """

    W_in: FloatArray
    b_in: FloatArray
    W_out: FloatArray
    b_out: FloatArray
    activation: str
    gated: bool

    def __init__(
        self,
        W_in: Any,
        W_out: Any,
        *,
        b_in: Any = None,
        b_out: Any = None,
        activation: str = "gelu",
        gated: bool = False,
    ) -> None:
        wi = _matrix("W_in", W_in, (None, None))
        rows, d = wi.shape
        k = rows // 2 if gated else rows
        if gated and rows % 2:
            raise InvalidParametersError(f"W_in: a gated feed-forward needs 2k rows, got {rows}")
        wo = _matrix("W_out", W_out, (d, k))
        if activation not in ACTIVATIONS:
            raise InvalidParametersError(
                f"activation: expected one of {ACTIVATIONS}, got {activation!r}"
            )
        set_fields(
            self,
            W_in=wi,
            b_in=_matrix("b_in", np.zeros(rows) if b_in is None else b_in, (rows,)),
            W_out=wo,
            b_out=_matrix("b_out", np.zeros(d) if b_out is None else b_out, (d,)),
            activation=activation,
            gated=bool(gated),
        )

    @property
    def hidden(self) -> int:
        """The hidden width ``k``."""
        return int(self.W_out.shape[1])

    @property
    def dim(self) -> int:
        """The width ``d`` of its input and output."""
        return int(self.W_in.shape[1])

    def __call__(self, z: Any) -> FloatArray:
        """The feed-forward of every token (``z``: one token ``(d,)`` or rows ``(..., d)``)."""
        return self._apply(_rows("z", z, self.dim))

    def _apply(self, z: FloatArray) -> FloatArray:
        """:meth:`__call__` of checked tokens (the forward passes call it per layer)."""
        a = z @ self.W_in.T + self.b_in
        if self.gated:
            k = self.hidden
            h = activation(self.activation, a[..., :k]) * a[..., k:]
        else:
            h = activation(self.activation, a)
        return np.asarray(h @ self.W_out.T + self.b_out)

    @cached_property
    def _split(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        k = self.hidden
        return self.W_in[:k], self.b_in[:k], self.W_in[k:], self.b_in[k:]

    def linearization(self, mean: Any, cov: Any) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(E f, J, R)`` at ``z ~ N(m, Σ)``: ``f(z) ≈ E f + J (z − m)`` plus independent noise.

        ``J = W_out D W_in`` with ``D = E σ'(a)`` (Stein's lemma: ``Cov(z, f(z)) = Σ Jᵀ``
        exactly), ``R = W_out diag(Var σ(a_i) − D_i² Var a_i) W_outᵀ``. Gated: for each unit
        ``(a, g)`` is a bivariate Gaussian; ``E[σ(a) g]``, ``D_a = E[σ'(a) g]``,
        ``D_g = E σ(a)`` and ``E[(σ(a) g)²]`` are one-dimensional Gauss–Hermite integrals over
        ``a`` with ``g | a`` Gaussian, and ``J = W_out (D_a W_a + D_g W_g)``.

        Parameters
        ----------
        mean, cov
            The law of the feed-forward's input: ``(d,)`` and ``(d, d)``.

        Returns
        -------
        (numpy.ndarray, numpy.ndarray, numpy.ndarray)
            The output mean ``(d,)``, ``J`` and ``R`` ``(d, d)``.

        Raises
        ------
        InvalidParametersError
            On a mean or covariance that is not a finite real array of that shape.
        """
        return self._linear(*gaussian_moments(self.dim, mean, cov))

    def _linear(
        self, mean: FloatArray, cov: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """:meth:`linearization` of checked moments (the surrogate calls it per layer)."""
        if not self.gated:
            mu = self.W_in @ mean + self.b_in
            var = np.einsum("ij,ij->i", self.W_in @ cov, self.W_in)
            e_f, e_df, var_f = _statistics(mu, var, self.activation)
            jac = (self.W_out * e_df) @ self.W_in
            res = np.maximum(var_f - e_df**2 * var, 0.0)
            return self.W_out @ e_f + self.b_out, jac, (self.W_out * res) @ self.W_out.T
        wa, ba, wg, bg = self._split
        mu_a, mu_g = wa @ mean + ba, wg @ mean + bg
        sa, sg = wa @ cov, wg @ cov
        var_a = np.maximum(np.einsum("ij,ij->i", sa, wa), 0.0)
        var_g = np.maximum(np.einsum("ij,ij->i", sg, wg), 0.0)
        c_ag = np.einsum("ij,ij->i", sa, wg)
        slope = np.divide(c_ag, var_a, out=np.zeros_like(c_ag), where=var_a > 0)
        v_r = np.maximum(var_g - slope * c_ag, 0.0)
        nodes, weights = _HERMITE
        z = np.sqrt(var_a)[:, None] * nodes
        a = mu_a[:, None] + z
        m_g = mu_g[:, None] + slope[:, None] * z  # E[g | a]
        f = activation(self.activation, a)
        df = activation(self.activation, a, derivative=True)
        w = weights * _INV_SQRT_2PI
        e_fg = (f * m_g) @ w
        d_a = (df * m_g) @ w
        d_g = f @ w
        e_fg2 = (f * f * (m_g * m_g + v_r[:, None])) @ w
        lin_var = d_a**2 * var_a + 2 * d_a * d_g * c_ag + d_g**2 * var_g
        res = np.maximum(e_fg2 - e_fg**2 - lin_var, 0.0)
        jac = self.W_out @ (d_a[:, None] * wa + d_g[:, None] * wg)
        return self.W_out @ e_fg + self.b_out, jac, (self.W_out * res) @ self.W_out.T
