"""Small random Transformers of every family, shared by tests/interop/test_extract_families.py and
benchmarks/bench_extract.py: how each is configured and where its attention sublayer lies; and
the builders of such models that the tests and benchmarks share.

Importing this module imports neither ``torch`` nor ``transformers``: the builders do, when
called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
#: family → (config class, model class, config keywords, model keywords)
BUILD: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "bert": ("BertConfig", "BertModel", {**SMALL, "intermediate_size": 64, "vocab_size": 100,
             "max_position_embeddings": 64}, {"add_pooling_layer": False}),
    "roberta": ("RobertaConfig", "RobertaModel", {**SMALL, "intermediate_size": 64,
                "vocab_size": 100, "max_position_embeddings": 70, "type_vocab_size": 1},
                {"add_pooling_layer": False}),
    "electra": ("ElectraConfig", "ElectraModel", {**SMALL, "intermediate_size": 64,
                "vocab_size": 100, "embedding_size": 16, "max_position_embeddings": 64}, {}),
    "distilbert": ("DistilBertConfig", "DistilBertModel", {"dim": 32, "n_layers": 2, "n_heads": 4,
                   "hidden_dim": 64, "vocab_size": 100, "max_position_embeddings": 64}, {}),
    "vit": ("ViTConfig", "ViTModel", {**SMALL, "intermediate_size": 64, "image_size": 16,
            "patch_size": 4}, {"add_pooling_layer": False}),
    "deit": ("DeiTConfig", "DeiTModel", {**SMALL, "intermediate_size": 64, "image_size": 16,
             "patch_size": 4}, {"add_pooling_layer": False}),
    "modernbert": ("ModernBertConfig", "ModernBertModel", {"hidden_size": 32,
                   "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 48,
                   "vocab_size": 100, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                   "cls_token_id": 1, "sep_token_id": 2, "attention_bias": True,
                   "mlp_bias": True, "norm_bias": True}, {}),
    "gpt2": ("GPT2Config", "GPT2Model", {"n_embd": 32, "n_layer": 2, "n_head": 4,
             "vocab_size": 100, "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}, {}),
}  # fmt: skip
#: family → (the layer list, the query projection (what the attention reads), the output one)
PATHS = {
    "bert": ("encoder.layer", "attention.self.query", "attention.output.dense"),
    "roberta": ("encoder.layer", "attention.self.query", "attention.output.dense"),
    "electra": ("encoder.layer", "attention.self.query", "attention.output.dense"),
    "distilbert": ("transformer.layer", "attention.q_lin", "attention.out_lin"),
    "vit": ("layers", "attention.q_proj", "attention.o_proj"),
    "deit": ("layers", "attention.q_proj", "attention.o_proj"),
    "modernbert": ("layers", "attn.Wqkv", "attn.Wo"),
    "gpt2": ("h", "attn.c_attn", "attn.c_proj"),
}


def get(obj: Any, path: str) -> Any:
    """The attribute of ``obj`` at a dotted ``path`` (``"encoder.layer"``)."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def random_model(family: str, **config: Any) -> Any:
    """A random-init model of ``family`` in eval mode: its ``BUILD`` configuration with the
    keywords ``config`` put over it, drawn from torch's global generator (the caller seeds it).
    """
    import transformers

    cfg_cls, model_cls, cfg, kw = BUILD[family]
    model_type = getattr(transformers, model_cls)
    return model_type(getattr(transformers, cfg_cls)(**{**cfg, **config}), **kw).eval()


#: The files :func:`save_tiny_models` writes, under its folder: key → name.
TINY_FILES = {"bert": "bert", "vit": "vit", "onnx": "vit.onnx"}


def save_tiny_models(folder: Path) -> dict[str, Path]:
    """Write a random BERT and a random ViT (``BUILD``'s, d = 32, drawn from seed 0) as
    ``save_pretrained`` folders and the ViT as an ONNX graph (pixels in, the last hidden state
    out) into ``folder``: ``{key: path}`` as :data:`TINY_FILES` names them. The tiny models of
    the design tasks that load one (tests/cli/test_cli_model_budget.py,
    benchmarks/fuzz_designs.py)."""
    import warnings

    import torch

    class Pixels(torch.nn.Module):  # type: ignore[misc]
        """A ViT as an ONNX graph takes it: pixels in, the last hidden state out."""

        def __init__(self, net: Any) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: Any) -> Any:
            return self.net(pixel_values=x).last_hidden_state

    paths = {key: folder / name for key, name in TINY_FILES.items()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        bert = random_model("bert")
        vit = random_model("vit")
    bert.save_pretrained(paths["bert"])
    vit.save_pretrained(paths["vit"])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on the model's shape checks
        torch.onnx.export(
            Pixels(vit),
            (torch.zeros(1, 3, 16, 16),),
            str(paths["onnx"]),
            input_names=["x"],
            dynamo=False,
            opset_version=17,
        )
    return paths
