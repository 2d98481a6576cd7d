"""The exact moment-model matrices of a real BERT layer, and the Gaussian surrogate of that layer.

Extraction (exact)
------------------
For head ``h`` of a BERT self-attention with query/key/value/output weights ``W_Q, W_K, W_V, W_O``
(biases ``b_Q, b_K, b_V, b_O``) and head width ``d_h``, the attention weight of key ``y`` for query
``x`` is ``∝ exp((W_Q,h x + b_Q,h)ᵀ(W_K,h y + b_K,h)/sqrt(d_h))``. Dropping the factors that do not
depend on ``y`` (they cancel in the softmax) leaves ``exp(yᵀ B_h x + yᵀ u_h)`` with

    B_h = W_K,hᵀ W_Q,h / sqrt(d_h),   u_h = W_K,hᵀ b_Q,h / sqrt(d_h),   V_h = W_O,h W_V,h,

and the sublayer output is ``Σ_h V_h Attn_h(x) + Σ_h W_O,h b_V,h + b_O`` (docs/theory.md §1). The
key-bias tilt ``u_h`` is made part of gtcontrol's model exactly by an affine coordinate: with
``x̃ = (x, 1)``, ``B̃_h = [[B_h, u_h], [0, 0]]`` and ``Ṽ_h = [[V_h, 0], [0, 0]]`` one has
``ỹᵀ B̃_h x̃ = yᵀ B_h x + yᵀ u_h`` and the last coordinate never moves. So one sublayer *is* a
:class:`~gtcontrol.params.Layer` on ``R^{d+1}`` acting on a Gaussian with a singular covariance,
and both the token-level recomputation (:func:`~gtcontrol.tokens.token_velocity`) and the moment
step (:func:`~gtcontrol.moments.simulate_discrete`, one residual step ``h = 1``) are gtcontrol's
own. The layer keeps the heads factored (:meth:`~gtcontrol.model.params.Layer.from_projections`)
with the augmented projections ``W̃_Q = [W_Q, b_Q]``, ``W̃_K = [W_K, 0]``, ``W̃_V = [W_V, 0]``,
``W̃_O = [W_O; 0]`` (then ``s W̃_K,hᵀ W̃_Q,h = B̃_h`` and ``W̃_O,h W̃_V,h = Ṽ_h``), so neither
field forms a ``d×d×d`` product per head.

The surrogate (approximate where the theory is)
-----------------------------------------------
A BERT layer is ``y = x + Attn(x)``, ``z = LN₁(y)``, ``w = z + W₂ GELU(W₁ z + c₁) + c₂``,
``out = LN₂(w)``. The surrogate carries a Gaussian ``N(m, Σ)`` through it:

1. **Attention, exact in the mean-field limit.** For Gaussian tokens and ``N → ∞`` the attention
   is the affine map ``x ↦ m + Σ(B_h x + u_h)`` (Gaussian tilting); the residual step is exact
   (:func:`~gtcontrol.moments.simulate_discrete`). At finite ``N`` the softmax sees ``N`` keys only;
   the measured effective sample size of the attention weights tells how far that is from the limit.
2. **LayerNorm, linearized by concentration.** ``LN(y) = γ ⊙ P y / s(y) + β`` with ``P = I − 11ᵀ/d``
   and the per-token scale ``s(y)² = |P y|²/d + ε``. The surrogate replaces ``s(y)`` by the constant
   ``s̄² = (tr(P Σ P) + |P m|²)/d + ε`` (its Gaussian mean), which makes LN affine. It is exact when
   the token norm concentrates (large effective rank); the measured coefficient of variation of
   ``s(y)`` across tokens is reported.
3. **GELU, by Gaussian moment matching.** With ``a = W₁ z + c₁ ~ N(μ_a, S_a)`` the surrogate keeps
   the exact mean ``E GELU(a_i) = μΦ(κ) + s²φ(κ)/sqrt(1+s²)``, ``κ = μ/sqrt(1+s²)``, the exact cross
   covariance ``Cov(z, GELU(a)) = Cov(z, a) D`` (Stein's lemma, ``D_i = E GELU'(a_i) = Φ(κ) +
   μφ(κ)/(1+s²)^{3/2}``), so the feed-forward becomes the affine layer ``A = W₂ D W₁`` of the
   statistical linearization, and adds the variance that the linearization misses,
   ``W₂ diag(Var GELU(a_i) − D_i² s_i²) W₂ᵀ`` (Gauss–Hermite quadrature), treating the hidden units'
   nonlinear residuals as uncorrelated — the one approximation of this step.

How well the surrogate predicts the real network is measured by
:func:`~gtcontrol.experiments.surrogate.moment_surrogate`.

Reference: the paper cited in :mod:`gtcontrol`, §1–§2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from scipy.special import ndtr

from .._linalg import FloatArray, sym
from ..errors import InvalidParametersError
from ..model.attention import token_velocity
from ..model.gaussian import Gaussian
from ..model.gaussian_closure import activation_moments
from ..model.moments import simulate_discrete
from ..model.params import FeedForward, Layer
from ._deps import require_torch

__all__ = ["ExtractedLayer", "extract_layers", "gelu_moments"]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_HERMITE = np.polynomial.hermite_e.hermegauss(80)


def gelu_moments(mean: Any, var: Any) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``E g(a)``, ``E g'(a)``, ``Var g(a)`` for ``g(a) = a Φ(a)`` (exact GELU), ``a ~ N(μ, s²)``.

    The first two in closed form (``κ = μ/sqrt(1+s²)``): ``E g = μΦ(κ) + s²φ(κ)/sqrt(1+s²)``,
    ``E g' = Φ(κ) + μφ(κ)/(1+s²)^{3/2}``; the variance by 80-point Gauss–Hermite quadrature
    (GELU is smooth and grows linearly, so the rule is accurate to ~1e-12 relative).

    Parameters
    ----------
    mean
        Means ``μ`` (any shape).
    var
        Variances ``s² ≥ 0``, broadcastable with ``mean``.

    Returns
    -------
    (E g, E g', Var g)
        Three arrays of the broadcast shape.

    Examples
    --------
    >>> e_g, e_dg, var_g = gelu_moments(np.array([0.0]), np.array([0.0]))
    >>> float(e_g[0]), float(e_dg[0]), float(var_g[0])
    (0.0, 0.5, 0.0)
    """
    mu = np.asarray(mean, dtype=float)
    s2 = np.asarray(var, dtype=float)
    e_g, e_dg = activation_moments("gelu", mu, s2)
    nodes, weights = _HERMITE
    a = mu[..., None] + np.sqrt(s2)[..., None] * nodes
    g = a * ndtr(a)
    e_g2 = (g * g) @ weights * _INV_SQRT_2PI
    return e_g, e_dg, np.maximum(e_g2 - e_g * e_g, 0.0)


# ---------------------------------------------------------------------------- extraction
def _layer_norm(x: FloatArray, gamma: FloatArray, beta: FloatArray, eps: float) -> FloatArray:
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return np.asarray((x - mu) / np.sqrt(var + eps) * gamma + beta)


@dataclass(frozen=True, eq=False)
class ExtractedLayer:
    """The matrices of one post-LayerNorm BERT layer, in gtcontrol's conventions.

    Attributes
    ----------
    heads
        ``((V_h, B_h), ...)``, each ``(d, d)``.
    key_tilt
        ``u_h`` per head, ``(H, d)``.
    attention_bias
        ``Σ_h W_O,h b_V,h + b_O``, ``(d,)``.
    ln1, ln2
        ``(γ, β, ε)`` of the two LayerNorms.
    ffn
        ``(W₁ (k, d), c₁ (k,), W₂ (d, k), c₂ (d,))`` of the GELU feed-forward.
    projections
        ``(W_Q, b_Q, W_K, W_V, W_O)`` of the self-attention (nn.Linear shapes), or ``None``.
        When set, :attr:`attention_layer` keeps the heads factored
        (:meth:`~gtcontrol.model.params.Layer.from_projections`); ``heads`` and ``key_tilt``
        must be the matrices they define.
    """

    heads: tuple[tuple[FloatArray, FloatArray], ...]
    key_tilt: FloatArray
    attention_bias: FloatArray
    ln1: tuple[FloatArray, FloatArray, float]
    ln2: tuple[FloatArray, FloatArray, float]
    ffn: tuple[FloatArray, FloatArray, FloatArray, FloatArray]
    projections: tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray] | None = None

    @property
    def dim(self) -> int:
        """The model width ``d``."""
        return int(self.attention_bias.shape[0])

    @cached_property
    def attention_layer(self) -> Layer:
        """The attention sublayer as a :class:`Layer` on ``R^{d+1}`` (affine coordinate last).

        Factored (:meth:`Layer.from_projections`) when :attr:`projections` is set, else dense.
        """
        d = self.dim
        bias = np.append(self.attention_bias, 0.0)
        if self.projections is not None:
            wq, bq, wk, wv, wo = self.projections
            zero = np.zeros((wq.shape[0], 1))
            return Layer.from_projections(
                np.hstack([wq, bq[:, None]]),
                np.hstack([wk, zero]),
                np.hstack([wv, zero]),
                np.vstack([wo, zero.T]),
                len(self.heads),
                b=bias,
                scale=1.0 / math.sqrt(wq.shape[0] // len(self.heads)),
            )
        heads = []
        for (v, b), u in zip(self.heads, self.key_tilt, strict=True):
            bt = np.zeros((d + 1, d + 1))
            bt[:d, :d] = b
            bt[:d, d] = u
            vt = np.zeros((d + 1, d + 1))
            vt[:d, :d] = v
            heads.append((vt, bt))
        return Layer(heads=heads, b=bias)

    @cached_property
    def ffn_layer(self) -> Layer:
        """The GELU feed-forward ``W₂ GELU(W₁ z + c₁) + c₂`` as a token-level :class:`Layer`."""
        w1, c1, w2, c2 = self.ffn
        return Layer(b=c2, ffn=FeedForward(w2, w1, c1, activation="gelu"))

    def attention(self, tokens: Any) -> FloatArray:
        """Token-level attention sublayer output ``Σ_h V_h Attn_h(x) + bias`` (without residual).

        Parameters
        ----------
        tokens
            Array ``(N, d)``: one sequence.

        Returns
        -------
        numpy.ndarray
            ``(N, d)``.
        """
        x = np.asarray(tokens, dtype=float)
        xt = np.hstack([x, np.ones((x.shape[0], 1))])
        return token_velocity(self.attention_layer, xt)[:, : self.dim]

    def forward(self, tokens: Any) -> dict[str, FloatArray]:
        """The whole layer at token level from the extracted matrices, with its intermediates.

        Parameters
        ----------
        tokens
            As in :meth:`attention`.

        Returns
        -------
        dict
            ``{"attention", "ln1_in", "ln1_out", "ln2_in", "out"}``, each ``(N, d)``.
        """
        x = np.asarray(tokens, dtype=float)
        att = self.attention(x)
        y = x + att
        z = _layer_norm(y, *self.ln1)
        w = z + token_velocity(self.ffn_layer, z)
        return {
            "attention": att,
            "ln1_in": y,
            "ln1_out": z,
            "ln2_in": w,
            "out": _layer_norm(w, *self.ln2),
        }

    def propagate(self, mean: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
        """The surrogate's Gaussian ``N(mean, cov)`` after this layer (see the module docstring).

        Parameters
        ----------
        mean
            Mean ``(d,)`` of the layer's input.
        cov
            Covariance ``(d, d)`` of the layer's input.

        Returns
        -------
        (mean, cov)
            The predicted moments of the layer's output.
        """
        d = self.dim
        # 1. attention residual step on R^{d+1}: exact Gaussian recursion, h = 1.
        m_aug = np.append(mean, 1.0)
        s_aug = np.zeros((d + 1, d + 1))
        s_aug[:d, :d] = cov
        traj = simulate_discrete(self.attention_layer, Gaussian(m_aug, s_aug), T=1.0)
        m, s = traj.mean[-1, :d].copy(), traj.cov[-1, :d, :d].copy()
        # 2. LayerNorm with the per-token scale frozen at its Gaussian mean.
        m, s = _ln_moments(m, s, *self.ln1)
        # 3. feed-forward: statistical linearization + independent residual variances.
        w1, c1, w2, c2 = self.ffn
        w1s = w1 @ s
        mu_a = w1 @ m + c1
        var_a = np.einsum("ij,ij->i", w1s, w1)
        e_g, e_dg, var_g = gelu_moments(mu_a, var_a)
        lin = Layer(A=(w2 * e_dg) @ w1, b=w2 @ (e_g - e_dg * (w1 @ m)) + c2)
        step = simulate_discrete(lin, Gaussian(m, s), T=1.0)
        m = step.mean[-1].copy()
        s = step.cov[-1] + (w2 * np.maximum(var_g - e_dg**2 * var_a, 0.0)) @ w2.T
        # 4. second LayerNorm.
        return _ln_moments(m, sym(s), *self.ln2)


def _ln_moments(
    m: FloatArray, s: FloatArray, gamma: FloatArray, beta: FloatArray, eps: float
) -> tuple[FloatArray, FloatArray]:
    d = m.shape[0]
    pm = m - m.mean()
    ps = s - s.mean(axis=0, keepdims=True)
    ps = ps - ps.mean(axis=1, keepdims=True)  # P Σ P
    scale = math.sqrt((float(np.trace(ps)) + float(pm @ pm)) / d + eps)
    g = gamma / scale
    return g * pm + beta, (g[:, None] * ps) * g[None, :]


def _np(t: Any) -> FloatArray:
    return np.asarray(t.detach().to(require_torch().float64).cpu().numpy(), dtype=float)


def extract_layers(net: Any) -> tuple[ExtractedLayer, ...]:
    """Extract every layer of a Hugging Face BERT encoder (post-LayerNorm) as ExtractedLayer.

    Parameters
    ----------
    net
        A Hugging Face ``BertModel`` (e.g. from
        :func:`~gtcontrol.experiments.pretrained.load_model`).

    Returns
    -------
    tuple of ExtractedLayer
        One per encoder layer, in order.

    Raises
    ------
    InvalidParametersError
        If ``net`` is not a BERT-style encoder (``encoder.layer[k].attention.self.query`` ...) or
        its activation is not the exact (erf) GELU.
    """
    try:
        layers = list(net.encoder.layer)
        act = str(net.config.hidden_act)
    except AttributeError:
        raise InvalidParametersError(
            f"net: expected a BERT encoder (encoder.layer[...]), got {type(net).__name__}"
        ) from None
    if act != "gelu":
        raise InvalidParametersError(f"net: expected the exact 'gelu' activation, got {act!r}")
    out = []
    for lay in layers:
        att, so = lay.attention.self, lay.attention.output
        nh, dh = int(att.num_attention_heads), int(att.attention_head_size)
        wq, bq = _np(att.query.weight), _np(att.query.bias)
        wk = _np(att.key.weight)
        wv, bv = _np(att.value.weight), _np(att.value.bias)
        wo, bo = _np(so.dense.weight), _np(so.dense.bias)
        heads, tilt = [], []
        for h in range(nh):
            sl = slice(h * dh, (h + 1) * dh)
            heads.append((wo[:, sl] @ wv[sl], wk[sl].T @ wq[sl] / math.sqrt(dh)))
            tilt.append(wk[sl].T @ bq[sl] / math.sqrt(dh))
        ln1 = (_np(so.LayerNorm.weight), _np(so.LayerNorm.bias), float(so.LayerNorm.eps))
        ln2m = lay.output.LayerNorm
        ln2 = (_np(ln2m.weight), _np(ln2m.bias), float(ln2m.eps))
        ffn = (
            _np(lay.intermediate.dense.weight),
            _np(lay.intermediate.dense.bias),
            _np(lay.output.dense.weight),
            _np(lay.output.dense.bias),
        )
        out.append(
            ExtractedLayer(
                tuple(heads),
                np.array(tilt),
                wo @ bv + bo,
                ln1,
                ln2,
                ffn,
                projections=(wq, bq, wk, wv, wo),
            )
        )
    return tuple(out)
