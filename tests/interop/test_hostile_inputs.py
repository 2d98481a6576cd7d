"""Hostile arguments to the interop helpers: each is refused with one GTControlError naming it.

The weights' and extracted layers' methods (``LayerNormWeights``, ``FeedForwardWeights``,
``activation_statistics``, ``ExtractedLayer``, ``ExtractedModel``) once passed their array
arguments to numpy unchecked: a wrong shape, a string, ``None`` or a complex array leaked a
ZeroDivisionError, AxisError, IndexError or ValueError, or a ComplexWarning that dropped the
imaginary part. Reproducer: s61/args/repro_10.py. No torch needed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import refused

from gtcontrol import Layer
from gtcontrol.interop import (
    AttentionWeights,
    ExtractedLayer,
    ExtractedModel,
    FeedForwardWeights,
    LayerNormWeights,
    activation_statistics,
)

D = 4


def _parts() -> tuple[LayerNormWeights, FeedForwardWeights, ExtractedLayer, ExtractedModel]:
    rng = np.random.default_rng(0)
    att = AttentionWeights(*(rng.standard_normal((D, D)) / 2 for _ in range(4)), n_heads=2)
    ln = LayerNormWeights(np.ones(D), np.zeros(D), 1e-5)
    ffn = FeedForwardWeights(rng.standard_normal((8, D)), rng.standard_normal((D, 8)))
    lay = ExtractedLayer(att, ffn, ln, ln)
    model = ExtractedModel((lay, lay), "bert", "post-LN", None, label="toy", description="toy")
    return ln, ffn, lay, model


LN, FFN, LAY, MODEL = _parts()
TOKENS = np.random.default_rng(1).standard_normal((5, D))
EYE = np.eye(D)


@pytest.mark.parametrize("eps", ["x", None, 10**400, -1.0, float("nan"), float("inf"), 1j])
def test_layer_norm_refuses_a_bad_eps(eps: Any) -> None:
    refused(lambda: LayerNormWeights(np.ones(D), np.zeros(D), eps), "eps")


@pytest.mark.parametrize(
    ("gamma", "beta", "name"),
    [([[1.0, 2.0], [1.0]], None, "gamma"), (np.zeros(0), None, "gamma"), (None, "ab", "beta")],
)
def test_layer_norm_refuses_a_bad_width(gamma: Any, beta: Any, name: str) -> None:
    refused(lambda: LayerNormWeights(gamma, beta, 1e-5), name)


BAD_TOKENS = {
    "none": None,
    "str": "abc",
    "complex": TOKENS + 1j,
    "ragged": [[1.0, 2.0], [1.0]],
    "wrong width": np.ones((5, D + 1)),
    "nan": np.full((5, D), np.nan),
    "huge int": [[10**400] * D],
}
TOKEN_CALLS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "LayerNormWeights.__call__": (LN, "x"),
    "LayerNormWeights.scale": (LN.scale, "x"),
    "FeedForwardWeights.__call__": (FFN, "z"),
    "ExtractedLayer.attention": (LAY.attention, "tokens"),
    "ExtractedLayer.forward": (LAY.forward, "tokens"),
    "ExtractedModel.forward": (MODEL.forward, "tokens"),
}


@pytest.mark.parametrize("bad", sorted(BAD_TOKENS))
@pytest.mark.parametrize("method", sorted(TOKEN_CALLS))
def test_token_methods_refuse_bad_tokens(method: str, bad: str) -> None:
    call, name = TOKEN_CALLS[method]
    refused(lambda: call(BAD_TOKENS[bad]), name)


@pytest.mark.parametrize("method", ["ExtractedLayer.attention", "ExtractedModel.forward"])
@pytest.mark.parametrize("tokens", [np.zeros((0, D)), np.zeros(D), np.zeros((2, 3, D))])
def test_layers_want_one_sequence_of_at_least_one_token(method: str, tokens: Any) -> None:
    call, name = TOKEN_CALLS[method]
    refused(lambda: call(tokens), name)


BAD_MOMENTS = {
    "empty mean": (np.zeros(0), EYE),
    "short mean": (np.zeros(D - 1), EYE),
    "str cov": (np.zeros(D), "abc"),
    "none mean": (None, EYE),
    "complex cov": (np.zeros(D), EYE + 1j),
    "cov 1-d": (np.zeros(D), np.ones(D)),
    "nan mean": (np.full(D, np.nan), EYE),
}
MOMENT_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "LayerNormWeights.moments": LN.moments,
    "LayerNormWeights.linearization": LN.linearization,
    "FeedForwardWeights.linearization": FFN.linearization,
    "ExtractedLayer.propagate": LAY.propagate,
}


@pytest.mark.parametrize("bad", sorted(BAD_MOMENTS))
@pytest.mark.parametrize("method", sorted(MOMENT_CALLS))
def test_moment_methods_refuse_bad_moments(method: str, bad: str) -> None:
    mean, cov = BAD_MOMENTS[bad]
    wrong = "mean" if bad.endswith("mean") else "cov"
    refused(lambda: MOMENT_CALLS[method](mean, cov), wrong)


def test_layer_norm_without_eps_refuses_a_point_without_spread() -> None:
    ln = LayerNormWeights(None, None, 0.0, dim=3)
    refused(lambda: ln(np.ones((2, 3))), "x")
    refused(lambda: ln.moments(np.ones(3), np.zeros((3, 3))), "mean")
    assert ln(np.array([[1.0, 2.0, 3.0]])).shape == (1, 3)


@pytest.mark.parametrize(
    ("mean", "var", "kind", "name"),
    [
        (np.zeros(3), np.ones(2), "relu", "var"),  # shapes that do not broadcast
        ("abc", 1.0, "gelu", "mean"),
        (0.0, None, "gelu", "var"),
        (0.0, -1.0, "silu", "var"),
        (1j, 1.0, "silu", "mean"),
        (np.inf, 1.0, "gelu", "mean"),
        (1e101, 1.0, "gelu_tanh", "mean"),
        (0.0, 1.0, "tanh", "kind"),
    ],
)
def test_activation_statistics_refuses_bad_moments(
    mean: Any, var: Any, kind: str, name: str
) -> None:
    refused(lambda: activation_statistics(mean, var, kind=kind), name)


@pytest.mark.parametrize("kind", ["gelu", "gelu_tanh", "relu", "silu"])
@pytest.mark.parametrize(("mean", "var"), [(1e100, 1e-300), (-1e100, 1e150), (0.0, 0.0)])
def test_activation_statistics_at_the_bounds_are_finite_and_quiet(
    kind: str, mean: float, var: float
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = activation_statistics(np.array([mean]), np.array([var]), kind=kind)
    assert all(np.all(np.isfinite(x)) for x in out)


@pytest.mark.parametrize("layer", ["abc", 3, Layer(A=-np.eye(D))])
def test_a_replacement_attention_must_be_a_layer_on_the_augmented_space(layer: Any) -> None:
    refused(lambda: LAY.attention(TOKENS, layer=layer), "layer")
    refused(lambda: LAY.forward(TOKENS, layer=layer), "layer")
    refused(lambda: MODEL.forward(TOKENS, attention=[None, layer]), "attention[1]")


@pytest.mark.parametrize("attention", [5, "ab", [None], [None] * 3])
def test_model_forward_wants_one_attention_entry_per_layer(attention: Any) -> None:
    refused(lambda: MODEL.forward(TOKENS, attention=attention), "attention")


def test_valid_inputs_still_give_the_same_numbers() -> None:
    # one token, rows, and a batch of sequences along the last axis, as before
    np.testing.assert_allclose(LN(TOKENS[0]), LN(TOKENS)[0])
    assert LN.scale(np.stack([TOKENS, TOKENS])).shape == (2, 5)
    np.testing.assert_allclose(FFN(TOKENS[0]), FFN(TOKENS)[0])
    states = MODEL.forward(TOKENS.tolist(), attention=[None, LAY.attention_layer])
    np.testing.assert_allclose(states[1], LAY.forward(TOKENS)["out"])
    np.testing.assert_allclose(states[2], LAY.forward(states[1])["out"])
    m, _ = LAY.propagate(TOKENS[0], np.zeros((D, D)))
    np.testing.assert_allclose(m, LAY.forward(np.tile(TOKENS[0], (3, 1)))["out"][0], atol=1e-12)
    e, de, v = activation_statistics(0.0, [0.0, 1.0], kind="relu")
    assert e.shape == de.shape == v.shape == (2,)
