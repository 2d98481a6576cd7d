"""Hostile models given to ``extract``: each is read exactly or refused with one ModelFileError.

Tiny random ``transformers`` models (width 32, 2 layers, 4 heads) are built once per module and
saved with ``save_pretrained``; every damaged folder is a copy of one with a single change. The
reproducers are the files of the third hostile round (``04_`` … ``13_*.py``), named in each
test's docstring. Needs the ``experiments`` extra and ``onnx``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tr = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")

from _families import BUILD  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from gtcontrol.experiments import attention_flows, encoder_states  # noqa: E402
from gtcontrol.interop import MODELS, ModelFileError, extract  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

_BERT = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 64,  # the static export's token-type gather reads all 64
}


def _bert(dtype: Any = None, **kw: Any) -> Any:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        net = tr.BertModel(tr.BertConfig(**{**_BERT, **kw}), add_pooling_layer=False).eval()
        with torch.no_grad():  # non-zero biases: every term of the attention counts
            for p in net.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return net if dtype is None else net.to(dtype)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def net() -> Any:
    return _bert()


@pytest.fixture(scope="module")
def folder(root: Path, net: Any) -> Path:
    """A BERT saved without its pooler (``add_pooling_layer=False``), float32."""
    net.save_pretrained(root / "bert")
    return root / "bert"


def _variant(
    folder: Path, name: str, *, raw: bytes | None = None, edit: Any = None, **cfg: Any
) -> Path:
    """A copy of ``folder`` with other weight bytes, an edit of its tensors or config fields."""
    out = folder.parent / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(folder, out)
    if raw is not None:
        (out / "model.safetensors").write_bytes(raw)
    if edit is not None:
        tensors = dict(load_file(str(out / "model.safetensors")))
        edit(tensors)
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    if cfg:
        data = json.loads((out / "config.json").read_text())
        data.update(cfg)
        (out / "config.json").write_text(json.dumps(data))
    return out


def _same_attention(a: Any, b: Any, tol: float) -> None:
    x = np.random.default_rng(0).standard_normal((6, a.dim))
    assert a.n_layers == b.n_layers
    for la, lb in zip(a.layers, b.layers):
        ref = lb.attention(x)
        assert np.linalg.norm(la.attention(x) - ref) <= tol * np.linalg.norm(ref)


# ---------------------------------------------------------------------------- 04
def test_a_model_without_layers_is_one_model_file_error(root: Path) -> None:
    """04_extract_zero_layers_indexerror.py: 0 layers, from the module and from its folder."""
    empty = tr.BertModel(
        tr.BertConfig(**{**_BERT, "num_hidden_layers": 0}), add_pooling_layer=False
    )
    with pytest.raises(ModelFileError, match=r"BertModel: the model has no layers"):
        extract(empty)
    empty.save_pretrained(root / "no_layers")
    with pytest.raises(
        ModelFileError, match=r"config\.json: num_hidden_layers = 0; expected a pos"
    ):
        extract(root / "no_layers")


# ---------------------------------------------------------------------------- 08
def test_a_static_shape_onnx_export_is_read_exactly(root: Path) -> None:
    """08_extract_static_onnx_refused.py: torch.onnx.export without dynamic axes (its token-type
    gather over 64 positions broke onnx's reference GatherElements) reads the module's weights."""
    net = _bert(torch.float64)

    class Wrap(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: Any) -> Any:
            return self.net(input_ids=x).last_hidden_state

    path = root / "static.onnx"
    torch.onnx.export(Wrap().eval(), (torch.zeros(1, 7, dtype=torch.long),), str(path),
                      input_names=["x"], dynamo=False, opset_version=17)  # fmt: skip
    assert any(n.op_type == "GatherElements" for n in onnx.load(str(path)).graph.node)
    em = extract(path)
    assert em.family == "onnx" and em.norm_placement == "post-LN"
    _same_attention(em, extract(net), 1e-10)


def test_gather_elements_is_exact_beyond_64_positions() -> None:
    """08: the cause, checked alone: GatherElements over an axis of 100 (negative indices too)
    equals numpy's take_along_axis."""
    from gtcontrol.interop._onnx import reference_evaluator

    h = onnx.helper
    node = h.make_node("GatherElements", ["data", "idx"], ["out"], axis=1)
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("data", onnx.TensorProto.DOUBLE, [2, 100]),
         h.make_tensor_value_info("idx", onnx.TensorProto.INT64, [2, 7])],
        [h.make_tensor_value_info("out", onnx.TensorProto.DOUBLE, [2, 7])],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(1)
    data, idx = rng.standard_normal((2, 100)), rng.integers(-100, 100, size=(2, 7))
    (out,) = reference_evaluator(model).run(None, {"data": data, "idx": idx})
    np.testing.assert_array_equal(out, np.take_along_axis(data, idx % 100, axis=1))


# ---------------------------------------------------------------------------- 09
def test_kind_reads_a_clone_from_its_folder(root: Path) -> None:
    """09_extract_kind_ignored_for_folder.py: an XLM-R folder with kind='roberta'."""
    xlmr = tr.XLMRobertaModel(
        tr.XLMRobertaConfig(**{**_BERT, "max_position_embeddings": 70, "type_vocab_size": 1}),
        add_pooling_layer=False,
    ).eval()
    xlmr.save_pretrained(root / "xlmr")
    em = extract(root / "xlmr", kind="roberta")
    assert em.family == "roberta"
    _same_attention(em, extract(xlmr, kind="roberta"), 1e-12)
    with pytest.raises(ModelFileError, match=r"model_type 'xlm-roberta'.*pass kind="):
        extract(root / "xlmr")


# ---------------------------------------------------------------------------- 10
def test_a_damaged_weights_file_is_one_model_file_error(folder: Path) -> None:
    """10_extract_damaged_folder_raw_errors.py: truncated, empty and random safetensors; a NaN
    in a weight that no layer holds (the word embeddings) poisons the real network: refused."""
    emb = "embeddings.word_embeddings.weight"
    nan = _variant(folder, "nan", edit=lambda t: t[emb].view(-1).__setitem__(3, float("nan")))
    with pytest.raises(
        ModelFileError, match=rf"nan: parameters with NaN or infinite entries: {emb}"
    ):
        extract(nan)
    raw = (folder / "model.safetensors").read_bytes()
    rng = np.random.default_rng(2)
    for name, data in (("cut", raw[: len(raw) // 2]), ("empty", b""), ("noise", rng.bytes(5000))):
        damaged = _variant(folder, name, raw=data)
        with pytest.raises(
            ModelFileError, match=rf"{name}/model\.safetensors: not a readable safetensors file"
        ):
            extract(damaged)


def test_sharded_weights_are_read_and_a_missing_shard_is_named(root: Path, net: Any) -> None:
    """10: weights in shards (model.safetensors.index.json) read as one file; a shard missing
    is named by the index that names it."""
    net.save_pretrained(root / "sharded", max_shard_size="30KB")
    shards = sorted((root / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 1
    _same_attention(extract(root / "sharded"), extract(net), 1e-12)
    shards[0].unlink()
    with pytest.raises(ModelFileError, match=r"index\.json: names shards that are not in the"):
        extract(root / "sharded")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("hidden_act", None, "expected the name of an activation"),
        ("num_attention_heads", True, "expected a positive integer"),
        ("num_hidden_layers", -1, "expected a positive integer"),
        ("hidden_size", 32.0, "expected a positive integer"),
        ("layer_norm_eps", float("nan"), "expected a finite number >= 0"),
        ("layer_norm_eps", "1e-12", "expected a finite number >= 0"),
    ],
)
def test_a_config_field_of_the_wrong_type_is_named(
    folder: Path, field: str, value: Any, expected: str
) -> None:
    """10_extract_damaged_folder_raw_errors.py: null activation, boolean head count, ..."""
    damaged = _variant(folder, f"field_{field}", **{field: value})
    with pytest.raises(ModelFileError, match=rf"config\.json: {field} = .*; {expected}"):
        extract(damaged)


def test_a_config_transformers_refuses_is_named(folder: Path) -> None:
    """10: a field gtcontrol does not read but transformers validates (a dropout of 2)."""
    damaged = _variant(folder, "dropout", hidden_dropout_prob=2.0)
    with pytest.raises(ModelFileError, match=r"dropout/config\.json: transformers refuses|dropout"):
        extract(damaged)


# ---------------------------------------------------------------------------- 11
def test_extract_refuses_a_folder_with_missing_tensors(folder: Path) -> None:
    """11_extract_missing_weights_silently_random.py: a config of 5 layers beside weights of 2,
    a BERT folder whose config says gpt2, a tensor deleted (alone, or with a task head's tensor
    of its size beside it), a wider or a narrower config; never random."""
    q = "encoder.layer.1.attention.self.query.weight"
    cases = [
        (_variant(folder, "five", num_hidden_layers=5), r"num_hidden_layers = 5, but the "
         r"safetensors weights hold the tensors of layers 0\.\.1 \(no tensors of layers 2\.\.4\)"),
        (_variant(folder, "says_gpt2", model_type="gpt2"), r"some weights would be random "
         r"\(not in the files: h\.0\.attn\.c_attn\.bias"),
        (_variant(folder, "no_query", edit=lambda t: t.pop(q)),
         r"some weights would be random \(not in the files: " + re.escape(q) + r"\)"),
        (_variant(folder, "head_for_query", edit=lambda t: t.update({"head.w": t.pop(q)})),
         r"1 weights of the model are not in the files \(" + re.escape(q) + r"\)"),
        (_variant(folder, "wide", hidden_size=64), r"other shapes: embeddings\.LayerNorm\.bias "
         r"\(32,\) in the files, \(64,\) in the config's model"),
        (_variant(folder, "inner", intermediate_size=16), r"tensors have another shape "
         r"\(encoder\.layer\.0\.intermediate\.dense\.bias: \(64,\) in the file, \(16,\)"),
    ]  # fmt: skip
    for path, message in cases:
        with pytest.raises(ModelFileError, match=message):
            extract(path)
    with pytest.raises(
        ModelFileError, match=r"head_for_query: the weights do not match the config"
    ):
        attention_flows(cases[3][0])  # every experiment reads a folder through extract


def test_extract_refuses_a_folder_with_tensors_it_would_not_read(folder: Path) -> None:
    """11: a tensor added inside the model, one renamed, a config of fewer layers than the
    weights, a weight stored as integers, a tensor outside the model that the config's
    ``architectures`` (BertModel) does not name: each named."""
    q = "encoder.layer.0.attention.self.query.weight"
    cases = [
        (_variant(folder, "extra", edit=lambda t: t.update({"encoder.layer.0.x": t[q].clone()})),
         r"1 tensors of the files are not read \(encoder\.layer\.0\.x\)"),
        (_variant(folder, "renamed", edit=lambda t: t.update({q + "_old": t.pop(q)})),
         r"not in the files \(encoder\.layer\.0\.attention\.self\.query\.weight\).*not read "
         r"\(encoder\.layer\.0\.attention\.self\.query\.weight_old\)"),
        (_variant(folder, "one_layer", num_hidden_layers=1),
         r"num_hidden_layers = 1, but the safetensors weights hold the tensors of layers 0\.\.1"),
        (_variant(folder, "integer", edit=lambda t: t.update({q: t[q].to(torch.int64)})),
         r"integer: tensors stored as integers or booleans: " + re.escape(q) + r" \(I64\)"),
        (_variant(folder, "stray", edit=lambda t: t.update({"stray.weight": t[q].clone()})),
         r"1 tensors of the files are not read \(stray\.weight\)"),
    ]  # fmt: skip
    for path, message in cases:
        with pytest.raises(ModelFileError, match=message):
            extract(path)


def test_tensors_legitimately_absent_or_extra_are_accepted(root: Path, folder: Path) -> None:
    """11: what is allowed, and why. A folder saved without a pooler loads with none (not a
    random one: gtcontrol never reads it); a task model's head tensors lie outside the base model;
    an old position_ids buffer is rebuilt by the model; a float16 copy of a weight is exact in
    float32. Each reads the saved weights exactly."""
    em = extract(folder)
    assert em.network.pooler is None
    reference = extract(_bert())
    _same_attention(em, reference, 1e-12)
    cls = tr.BertForSequenceClassification(tr.BertConfig(**_BERT)).eval()
    cls.save_pretrained(root / "classifier")
    assert "classifier.weight" in load_file(str(root / "classifier" / "model.safetensors"))
    _same_attention(extract(root / "classifier"), extract(cls.bert), 1e-12)
    q = "encoder.layer.0.attention.self.query.weight"
    old = _variant(folder, "old", edit=lambda t: t.update(
        {"embeddings.position_ids": torch.arange(64)[None], q: t[q].half()}))  # fmt: skip
    got = extract(old)
    w = load_file(str(old / "model.safetensors"))[q].double().numpy()
    np.testing.assert_array_equal(got.layers[0].weights.W_Q, w)


@pytest.mark.parametrize(
    ("family", "task"),
    [("bert", "BertForMaskedLM"), ("gpt2", "GPT2LMHeadModel"),
     ("vit", "ViTForImageClassification"), ("distilbert", "DistilBertForMaskedLM")],
)  # fmt: skip
def test_a_task_models_folder_reads_its_base_model(root: Path, family: str, task: str) -> None:
    """11: the heads of a task model (named by ``architectures``) are not the base model's
    weights; the base model's layers are read exactly, nothing is reported missing."""
    cfg_cls, _, cfg, _ = BUILD[family]
    net = getattr(tr, task)(getattr(tr, cfg_cls)(**cfg)).eval()
    net.save_pretrained(root / task)
    _same_attention(extract(root / task), extract(net.base_model), 1e-12)


def test_only_random_names_are_random_and_say_so() -> None:
    """11: a randomly initialized model is only ever a ``random-*`` name, labelled as such in
    its description and summary."""
    for name, text in MODELS.items():
        assert name.startswith("random-") == ("random" in text), name
    em = extract("random-bert")
    assert "random" in em.description and "random" in em.summary()


# ---------------------------------------------------------------------------- 12
def test_odd_arguments_are_one_model_file_error() -> None:
    """12_extract_odd_arguments_raw.py: a path longer than the file system allows, a NUL byte,
    a model on the meta device."""
    with pytest.raises(ModelFileError, match=r"\(5000 characters\): not a usable path"):
        extract("a" * 5000)
    with pytest.raises(ModelFileError, match=r"model\x00name: not found"):
        extract("model\0name")
    with torch.device("meta"):
        meta = tr.BertModel(tr.BertConfig(**_BERT))
    with pytest.raises(ModelFileError, match=r"BertModel: the model's weights are on the meta"):
        extract(meta)


# ---------------------------------------------------------------------------- 13
def test_extract_leaves_the_callers_training_mode(net: Any) -> None:
    """13_extract_switches_user_model_to_eval.py: a module in training mode stays so; the
    package's own forward runs are in eval mode (no dropout: two runs agree, and equal the
    module's eval-mode output)."""
    net.train()
    try:
        em = extract(net)
        assert net.training and all(m.training for m in net.modules())
        x = np.random.default_rng(4).standard_normal((5, em.dim))
        first, second = encoder_states(em, x), encoder_states(em, x)
        assert net.training and all(m.training for m in net.modules())
        np.testing.assert_array_equal(first[-1], second[-1])
        net.eval()
        with torch.no_grad():
            h = torch.as_tensor(x, dtype=torch.float32)[None]
            for lay in net.encoder.layer:
                out = lay(h)
                h = out[0] if isinstance(out, tuple) else out
        np.testing.assert_allclose(first[-1], h[0].double().numpy(), rtol=0, atol=1e-6)
    finally:
        net.eval()


# ---------------------------------------------------------------------------- ONNX
def test_a_damaged_onnx_file_is_one_model_file_error(root: Path) -> None:
    """Damaged ONNX files: empty, a node dropped, an initializer of another shape, a graph with
    no attention (each one ModelFileError naming the file)."""
    net = _bert(torch.float64)
    base = root / "base.onnx"
    torch.onnx.export(net.encoder.layer[0].eval(), (torch.zeros(1, 5, 32, dtype=torch.float64),),
                      str(base), input_names=["x"], dynamo=False, opset_version=17)  # fmt: skip
    (root / "empty.onnx").write_bytes(b"")
    model = onnx.load(str(base))
    del model.graph.node[len(model.graph.node) // 2]
    (root / "dropped.onnx").write_bytes(model.SerializeToString())
    model = onnx.load(str(base))
    init = max(model.graph.initializer, key=lambda t: len(t.dims))
    init.CopyFrom(onnx.numpy_helper.from_array(np.ones((3, 5)), init.name))
    (root / "reshaped.onnx").write_bytes(model.SerializeToString())
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    torch.onnx.export(mlp.eval(), (torch.zeros(1, 5, 8),), str(root / "mlp.onnx"), dynamo=False)
    assert extract(base).n_layers == 1
    for name in ("empty", "dropped", "reshaped", "mlp"):
        with pytest.raises(ModelFileError, match=rf"{name}\.onnx: "):
            extract(root / f"{name}.onnx")
