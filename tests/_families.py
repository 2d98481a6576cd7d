"""Small random Transformers of every family, shared by tests/interop/test_extract_families.py and
benchmarks/bench_extract.py: how each is configured and where its attention sublayer lies.

Pure data (and one attribute walk): nothing here imports ``torch`` or ``transformers``.
"""

from __future__ import annotations

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
