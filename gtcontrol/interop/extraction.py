"""The exact moment-model matrices of a real Transformer layer, and its Gaussian surrogate.

Extraction (exact)
------------------
For head ``h`` of a self-attention with query/key/value/output weights ``W_Q, W_K, W_V, W_O``
(biases ``b_Q, b_K, b_V, b_O``), head width ``d_h`` and logit scale ``s`` (``1/sqrt(d_h)`` in
every family read here), the attention weight of key ``y`` for query ``x`` is
``∝ exp(s (W_Q,h x + b_Q,h)ᵀ(W_K,h y + b_K,h))``. Dropping the factors that do not depend on
``y`` (they cancel in the softmax, ``b_K`` among them) leaves ``exp(yᵀ B_h x + yᵀ u_h)`` with

    B_h = s W_K,hᵀ W_Q,h,   u_h = s W_K,hᵀ b_Q,h,   V_h = W_O,h W_V,h,

and the sublayer output is ``Σ_h V_h Attn_h(x) + W_O b_V + b_O`` (docs/theory.md §1). The
key-bias tilt ``u_h`` is made part of gtcontrol's model exactly by an affine coordinate: with
``x̃ = (x, 1)``, ``B̃_h = [[B_h, u_h], [0, 0]]`` and ``Ṽ_h = [[V_h, 0], [0, 0]]`` one has
``ỹᵀ B̃_h x̃ = yᵀ B_h x + yᵀ u_h`` and the last coordinate never moves. So one sublayer *is* a
:class:`~gtcontrol.model.params.Layer` on ``R^{d+1}`` acting on a Gaussian with a singular
covariance (:attr:`ExtractedLayer.attention_layer`), and both the token-level recomputation
(:func:`~gtcontrol.model.attention.token_velocity`) and the moment step are gtcontrol's own. The
layer keeps the heads factored (:meth:`~gtcontrol.model.params.Layer.from_projections`), so
neither field forms a ``d×d×d`` product per head.

The sublayer acts on the tokens the attention *reads*: the layer input ``x`` in a post-LN layer
(BERT), ``LN₁(x)`` in a pre-LN one (ViT, GPT-2, ModernBERT). What each family's attention has
beyond ``softmax(s q·k)`` — positions, a causal mask, local windows — is not in ``B_h``; the
:class:`ExtractedModel` says what was dropped (:attr:`ExtractedModel.notes`; docs/own_model.md).

The surrogate (approximate where the theory is)
-----------------------------------------------
A post-LN layer is ``y = x + Attn(x)``, ``z = LN₁(y)``, ``out = LN₂(z + FFN(z))``; a pre-LN
layer is ``y = x + Attn(LN₁(x))``, ``out = y + FFN(LN₂(y))``. :meth:`ExtractedLayer.propagate`
carries a Gaussian ``N(m, Σ)`` through either:

1. **Attention, exact in the mean-field limit.** For Gaussian tokens and ``N → ∞`` the attention
   is the affine map ``x ↦ m + Σ(B_h x + u_h)`` (Gaussian tilting), so a residual step is
   ``x ↦ x + M x̃ + c`` with ``(M, c)`` of :func:`~gtcontrol.model.field.affine_velocity`. At
   finite ``N`` the softmax sees ``N`` keys only; the measured effective sample size of the
   attention weights tells how far that is from the limit.
2. **LayerNorm, linearized by concentration.** ``LN(y) = γ ⊙ P y / s(y) + β`` with the per-token
   scale ``s(y)`` frozen at its Gaussian mean (:class:`~._weights.LayerNormWeights`). Exact when
   the token norm concentrates; the measured coefficient of variation of ``s(y)`` is reported.
3. **Feed-forward, by Gaussian moment matching** (:class:`~._weights.FeedForwardWeights`): the
   exact mean and input cross-covariance (Stein's lemma), plus the variance the linearization
   misses with the hidden units' residuals treated as uncorrelated — the one approximation of
   this step. In a pre-LN layer the branch reads the linearized ``LN(y)`` and the residual adds
   to ``y``: ``Σ' = J Σ Jᵀ + R`` with ``J = I + J_branch G``.

How well the surrogate predicts the real network is measured by
:func:`~gtcontrol.experiments.surrogate.moment_surrogate`.

Reference: the paper cited in :mod:`gtcontrol`, §1–§2; docs/own_model.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .._linalg import FloatArray, sym
from .._status import shown
from .._validation import as_float_array
from ..errors import InvalidParametersError
from ..model._layer_stack import LayerStack
from ..model.attention import token_velocity
from ..model.field import affine_velocity
from ..model.params import Layer
from ._weights import AttentionWeights, FeedForwardWeights, LayerNormWeights, gaussian_moments

__all__ = ["NORM_PLACEMENTS", "ExtractedLayer", "ExtractedModel", "ModelFields"]

#: Where a layer's LayerNorms sit: after each residual sum (BERT) or inside each branch (ViT).
NORM_PLACEMENTS = ("post-LN", "pre-LN")
_Branch = Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray, FloatArray | None]]


@dataclass(frozen=True, eq=False)
class ExtractedLayer:
    """One Transformer layer's weights in gtcontrol's conventions (module docstring).

    Attributes
    ----------
    weights
        The self-attention's projections (:class:`~._weights.AttentionWeights`).
    ffn
        The feed-forward (:class:`~._weights.FeedForwardWeights`).
    ln1, ln2
        The LayerNorm after the attention residual and after the feed-forward residual
        (post-LN), or before the attention and before the feed-forward (pre-LN); ``None`` where
        the layer has none (ModernBERT's first layer reads its input without a norm).
    norm_placement
        ``"post-LN"`` or ``"pre-LN"``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> att = AttentionWeights(*(rng.standard_normal((4, 4)) for _ in range(4)), n_heads=2)
    >>> ex = ExtractedLayer(att, FeedForwardWeights(np.eye(4), np.eye(4)), None, None, "pre-LN")
    >>> ex.dim, ex.attention_layer.dim, ex.forward(rng.standard_normal((5, 4)))["out"].shape
    (4, 5, (5, 4))
    """

    weights: AttentionWeights
    ffn: FeedForwardWeights
    ln1: LayerNormWeights | None
    ln2: LayerNormWeights | None
    norm_placement: str = "post-LN"

    def __post_init__(self) -> None:
        if self.norm_placement not in NORM_PLACEMENTS:
            raise InvalidParametersError(
                f"norm_placement: expected one of {NORM_PLACEMENTS}, got {self.norm_placement!r}"
            )
        d = self.weights.dim
        parts: dict[str, int] = {"ffn": int(self.ffn.W_in.shape[1])}
        for name, ln in (("ln1", self.ln1), ("ln2", self.ln2)):
            if ln is not None:
                parts[name] = int(ln.gamma.shape[0])
        for name, width in parts.items():
            if width != d:
                raise InvalidParametersError(
                    f"{name}: acts on width {width}, the attention on width {d}"
                )

    @property
    def dim(self) -> int:
        """The model width ``d``."""
        return self.weights.dim

    @cached_property
    def heads(self) -> tuple[tuple[FloatArray, FloatArray], ...]:
        """The dense heads ``((V_h, B_h), ...)``, each ``(d, d)`` (formed on first access)."""
        return self.weights.dense_heads()

    @property
    def key_tilt(self) -> FloatArray:
        """``u_h = s W_K,hᵀ b_Q,h`` per head, ``(H, d)``."""
        return self.weights.key_tilt

    @property
    def attention_bias(self) -> FloatArray:
        """``W_O b_V + b_O``, ``(d,)``."""
        return self.weights.output_bias

    @cached_property
    def attention_layer(self) -> Layer:
        """The attention sublayer as a factored :class:`Layer` on ``R^{d+1}`` (affine coordinate
        last; it acts on the tokens the attention reads: ``LN₁(x)`` in a pre-LN layer)."""
        return self.weights.layer()

    def attention(
        self, tokens: Any, *, causal: bool = False, layer: Layer | None = None
    ) -> FloatArray:
        """The attention sublayer's output ``Σ_h V_h Attn_h(x) + bias`` (without the residual).

        Computed by gtcontrol's own token attention
        (:func:`~gtcontrol.model.attention.token_velocity`) on :attr:`attention_layer`, over the
        empirical measure of all tokens, or with ``causal`` of each token's prefix ``x_1..x_i``
        (GPT-2; ``N`` calls, ``O(N³)``: for checks on short sequences).

        Parameters
        ----------
        tokens
            Array ``(N, d)``: one sequence of the tokens the attention reads.
        causal
            Token ``i`` attends to tokens ``1..i`` only.
        layer
            A layer on ``R^{d+1}`` (affine coordinate last) whose token velocity replaces the
            attention's (e.g. a stabilized :attr:`attention_layer`); ``None``: the attention.

        Returns
        -------
        numpy.ndarray
            ``(N, d)``.

        Raises
        ------
        InvalidParametersError
            On tokens that are not a finite real ``(N, d)`` array with ``N ≥ 1``, or a
            ``layer`` that is not a :class:`Layer` on ``R^{d+1}``.
        """
        return self._attention(self._tokens(tokens), causal, self._velocity(layer))

    def _tokens(self, tokens: Any) -> FloatArray:
        """``tokens`` as a finite real ``(N, d)`` array with ``N ≥ 1``, or refuse them."""
        x = as_float_array("tokens", tokens, ndim=2, shape=(None, self.dim))
        if not x.shape[0]:
            raise InvalidParametersError(
                f"tokens: expected at least one token of width {self.dim}, got shape {x.shape}"
            )
        return x

    def _velocity(self, layer: Any, name: str = "layer") -> Layer:
        """The attention sublayer, or ``layer`` (checked: a :class:`Layer` on ``R^{d+1}``)."""
        if layer is None:
            return self.attention_layer
        if not isinstance(layer, Layer) or layer.dim != self.dim + 1:
            got = f"dimension {layer.dim}" if isinstance(layer, Layer) else shown(layer)
            raise InvalidParametersError(
                f"{name}: expected None or a Layer on R^{self.dim + 1} (affine coordinate "
                f"last), got {got}"
            )
        return layer

    def _attention(self, x: FloatArray, causal: bool, layer: Layer) -> FloatArray:
        """:meth:`attention` of checked tokens and layer."""
        xt = np.hstack([x, np.ones((x.shape[0], 1))])
        if not causal:
            return token_velocity(layer, xt)[:, : self.dim]
        rows = [token_velocity(layer, xt[: i + 1])[-1] for i in range(xt.shape[0])]
        return np.asarray(rows)[:, : self.dim]

    def forward(
        self, tokens: Any, *, causal: bool = False, layer: Layer | None = None
    ) -> dict[str, FloatArray]:
        """The whole layer at token level from the extracted weights, with its intermediates.

        The attention is that of :meth:`attention` (no positions; a causal mask on request).

        Parameters
        ----------
        tokens
            Array ``(N, d)``: one sequence.
        causal
            Token ``i`` attends to tokens ``1..i`` only (``O(N³)``, for short sequences).
        layer
            A replacement of the attention sublayer's velocity (:meth:`attention`); the
            residual, the LayerNorms and the feed-forward stay the model's.

        Returns
        -------
        dict
            ``{"attention_in", "attention", "ln1_in", "ln2_in", "ffn_in", "out"}``, each
            ``(N, d)`` (``ln*_in``: what the norm reads, whether or not the layer has it).

        Raises
        ------
        InvalidParametersError
            As :meth:`attention`, on the tokens or ``layer``.
        """
        return self._forward(self._tokens(tokens), causal, self._velocity(layer))

    def _forward(self, x: FloatArray, causal: bool, layer: Layer) -> dict[str, FloatArray]:
        """:meth:`forward` of checked tokens and layer (a model's forward pass calls it)."""
        if self.norm_placement == "post-LN":
            att = self._attention(x, causal, layer)
            y = x + att
            z = _norm(self.ln1, y)
            w = z + self.ffn._apply(z)
            return {
                "attention_in": x,
                "attention": att,
                "ln1_in": y,
                "ln2_in": w,
                "ffn_in": z,
                "out": _norm(self.ln2, w),
            }
        a_in = _norm(self.ln1, x)
        att = self._attention(a_in, causal, layer)
        y = x + att
        f_in = _norm(self.ln2, y)
        return {
            "attention_in": a_in,
            "attention": att,
            "ln1_in": x,
            "ln2_in": y,
            "ffn_in": f_in,
            "out": y + self.ffn._apply(f_in),
        }

    def _attention_branch(
        self, mean: FloatArray, cov: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray | None]:
        d = self.dim
        m_aug = np.append(mean, 1.0)
        s_aug = np.zeros((d + 1, d + 1))
        s_aug[:d, :d] = cov
        m_mat, c = affine_velocity(self.attention_layer, m_aug, s_aug)
        return (m_mat @ m_aug + c)[:d], m_mat[:d, :d], None

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

        Raises
        ------
        InvalidParametersError
            On a mean or covariance that is not a finite real array of shape ``(d,)`` /
            ``(d, d)``.
        """
        m, s = gaussian_moments(self.dim, mean, cov)
        if self.norm_placement == "post-LN":
            m, s = _residual(m, s, None, self._attention_branch)
            m, s = self.ln1._through(m, s) if self.ln1 is not None else (m, s)
            m, s = _residual(m, s, None, self._ffn_branch)
            return self.ln2._through(m, s) if self.ln2 is not None else (m, s)
        m, s = _residual(m, s, self.ln1, self._attention_branch)
        return _residual(m, s, self.ln2, self._ffn_branch)

    def _ffn_branch(
        self, mean: FloatArray, cov: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray | None]:
        return self.ffn._linear(mean, cov)


def _norm(ln: LayerNormWeights | None, x: FloatArray) -> FloatArray:
    return x if ln is None else ln._apply(x)


def _residual(
    m: FloatArray, s: FloatArray, norm: LayerNormWeights | None, branch: _Branch
) -> tuple[FloatArray, FloatArray]:
    """``x ↦ x + f(N(x))`` on a Gaussian: ``f`` linearized at the law of ``N(x)`` (or ``x``).

    With ``N(x) ≈ G x + β`` and ``f(z) ≈ E f + J_f (z − E z)`` plus independent noise of
    covariance ``R``: mean ``m + E f``, covariance ``J Σ Jᵀ + R`` with ``J = I + J_f G``.
    """
    if norm is None:
        mean_f, jac_f, extra = branch(m, s)
        jac = jac_f
    else:
        g = norm._linear(m, s)
        mean_f, jac_f, extra = branch(g @ m + norm.beta, sym(g @ s @ g.T))
        jac = jac_f @ g
    jac = jac + np.eye(m.shape[0])
    out = jac @ s @ jac.T
    if extra is not None:
        out = out + extra
    return m + mean_f, sym(out)


@dataclass(frozen=True, eq=False)
class ExtractedModel(LayerStack[ExtractedLayer]):
    """Every layer of a Transformer, extracted (:func:`~gtcontrol.interop.extract`).

    Attributes
    ----------
    layers
        One :class:`ExtractedLayer` per layer, in order.
    family
        ``"bert"``, ``"roberta"``, ``"distilbert"``, ``"electra"``, ``"vit"``, ``"deit"``,
        ``"modernbert"``, ``"gpt2"`` or ``"onnx"`` (an ONNX graph, whatever it was exported
        from).
    norm_placement
        ``"post-LN"`` or ``"pre-LN"``.
    final_norm
        The LayerNorm after the last layer of a pre-LN model (``None`` if there is none); not
        part of any layer.
    label
        A short name for file names and tables (the model name, or the folder/file stem).
    description
        One line: what the model is, and whether its weights are random.
    source
        Where it came from (a name, a path, or a class name).
    causal
        Whether token ``i`` attends to tokens ``1..i`` only (GPT-2).
    inputs
        ``"text"`` or ``"image"``: what the real network reads before its first layer.
    notes
        What the Gaussian model keeps and drops for this family (positions, masks, windows).
    dtype
        The precision the weights were stored in (``"float32"``, ``"float64"``).
    network
        The ``torch.nn.Module`` it was extracted from: what the experiments run as "the real
        network", in eval mode for the run (the module's own train/eval mode is left as its
        owner set it). ``None`` for an ONNX file, whose graph (at ``source``) runs the data.
    dim, n_layers
        The model width ``d`` and the number of layers.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> att = AttentionWeights(*(rng.standard_normal((4, 4)) for _ in range(4)), n_heads=2)
    >>> lay = ExtractedLayer(att, FeedForwardWeights(np.eye(4), np.eye(4)), None, None)
    >>> em = ExtractedModel((lay,), "bert", "post-LN", None, label="toy", description="toy")
    >>> em.dim, em.n_heads, em.n_layers
    (4, 2, 1)
    """

    layers: tuple[ExtractedLayer, ...]
    family: str
    norm_placement: str
    final_norm: LayerNormWeights | None
    label: str
    description: str
    source: str = ""
    causal: bool = False
    inputs: str = "text"
    notes: tuple[str, ...] = ()
    dtype: str = "float32"
    network: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.layers:
            raise InvalidParametersError("layers: expected at least one layer, got none")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise InvalidParametersError(
                f"norm_placement: expected one of {NORM_PLACEMENTS}, got {self.norm_placement!r}"
            )
        widths = {lay.dim for lay in self.layers}
        if len(widths) != 1:
            raise InvalidParametersError(f"layers: expected one width, got {sorted(widths)}")

    @property
    def n_heads(self) -> int:
        """The number of heads of the first layer."""
        return self.layers[0].weights.n_heads

    def forward(
        self,
        tokens: Any,
        *,
        causal: bool = False,
        attention: Sequence[Layer | None] | None = None,
    ) -> list[FloatArray]:
        """The tokens after every layer from the extracted weights (no positions).

        Parameters
        ----------
        tokens
            Array ``(N, d)``: one sequence entering the first layer.
        causal
            Apply a causal mask (:meth:`ExtractedLayer.attention`; ``O(N³)``).
        attention
            Per layer, a replacement of its attention sublayer's velocity (``None``: keep it;
            :meth:`ExtractedLayer.forward`); ``None``: the model as extracted.

        Returns
        -------
        list of numpy.ndarray
            ``L + 1`` arrays ``(N, d)``: the input and every layer's output (the final norm of
            a pre-LN model is not applied).

        Raises
        ------
        InvalidParametersError
            On tokens that are not a finite real ``(N, d)`` array with ``N ≥ 1``, or an
            ``attention`` that is not one entry per layer, each ``None`` or a :class:`Layer` on
            ``R^{d+1}``.
        """
        first = self.layers[0]
        x = first._tokens(tokens)
        try:
            swap = [None] * self.n_layers if attention is None else list(attention)
        except TypeError:
            swap = None
        if swap is None or isinstance(attention, (str, bytes)) or len(swap) != self.n_layers:
            got = f"{len(swap)} entries" if swap is not None else shown(attention)
            raise InvalidParametersError(
                f"attention: expected None or {self.n_layers} entries (one per layer), got {got}"
            )
        velocities = [
            lay._velocity(new, f"attention[{k}]")
            for k, (lay, new) in enumerate(zip(self.layers, swap, strict=True))
        ]
        out = [x.copy()]
        for lay, vel in zip(self.layers, velocities, strict=True):
            x = lay._forward(x, causal, vel)["out"]
            out.append(x)
        return out

    def summary(self) -> str:
        """One line: family, layers, width, heads, norm placement, what it reads."""
        causal = ", causal" if self.causal else ""
        return (
            f"{self.label}: {self.family}, {self.n_layers} layers, d = {self.dim}, "
            f"{self.n_heads} heads, {self.norm_placement}{causal}, reads {self.inputs}"
        )


@dataclass(frozen=True, eq=False)
class ModelFields:
    """What a result about a whole model says the model is (one home for the fields of
    :class:`~gtcontrol.experiments.ModelReport` and :class:`~gtcontrol.experiments.ModelMap`).

    Attributes
    ----------
    model, description, family, norm_placement
        The model's label, description, family and norm placement (:class:`ExtractedModel`).
    n_layers, dim, n_heads
        Its shape.
    notes
        What the Gaussian model keeps and drops for it.
    """

    model: str
    description: str
    family: str
    norm_placement: str
    n_layers: int
    dim: int
    n_heads: int
    notes: tuple[str, ...]

    @staticmethod
    def of(em: ExtractedModel) -> dict[str, Any]:
        """The fields of ``em``, as keywords (``Result(**ModelFields.of(em), ...)``)."""
        return {
            "model": em.label,
            "description": em.description,
            "family": em.family,
            "norm_placement": em.norm_placement,
            "n_layers": em.n_layers,
            "dim": em.dim,
            "n_heads": em.n_heads,
            "notes": em.notes,
        }

    @staticmethod
    def unloaded(label: str) -> dict[str, Any]:
        """The fields of a model that was not loaded."""
        return {
            "model": label,
            "description": "not loaded",
            "family": "",
            "norm_placement": "",
            "n_layers": 0,
            "dim": 0,
            "n_heads": 0,
            "notes": (),
        }
