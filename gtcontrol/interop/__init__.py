"""Reading someone else's network (extra ``experiments``): a ``transformers`` model, a local
Hugging Face folder, an ONNX file or a packaged name, turned into gtcontrol objects.

* :func:`extract` — any Transformer the user brings (a model of the BERT, RoBERTa, ELECTRA,
  DistilBERT, ViT, DeiT, ModernBERT or GPT-2 family, a folder with ``config.json`` and
  safetensors, an ONNX file, or a name of :func:`available_models`) as an
  :class:`ExtractedModel`: per attention sublayer its :class:`AttentionWeights` (with the
  exact moment-model :class:`~gtcontrol.Layer`), its :class:`LayerNormWeights` and its
  :class:`FeedForwardWeights`, and how the layers are wired (post-LN or pre-LN).
* :func:`load_model` — a packaged model (all-MiniLM-L6-v2) or a random-init one of a family,
  offline.

Reading is checked: a folder whose files do not hold what its config says, or an ONNX graph
whose pattern gtcontrol does not read, is a :class:`ModelFileError` naming the file and what
was expected; a missing optional dependency is an :class:`ExperimentDependencyError`. Nothing
here runs the network: :mod:`gtcontrol.experiments` does, on data, with what was read.

Importing this package never imports torch.

Examples
--------
>>> from gtcontrol.interop import FAMILIES
>>> sorted(FAMILIES)[:3]
['bert', 'deit', 'distilbert']
"""

from __future__ import annotations

from ._deps import ExperimentDependencyError, ModelFileError
from ._weights import (
    AttentionWeights,
    FeedForwardWeights,
    LayerNormWeights,
    activation_statistics,
)
from .extraction import ExtractedLayer, ExtractedModel
from .models import FAMILIES, MODELS, ModelEntry, available_models, extract, load_model

__all__ = [
    "FAMILIES",
    "MODELS",
    "AttentionWeights",
    "ExperimentDependencyError",
    "ExtractedLayer",
    "ExtractedModel",
    "FeedForwardWeights",
    "LayerNormWeights",
    "ModelEntry",
    "ModelFileError",
    "activation_statistics",
    "available_models",
    "extract",
    "load_model",
]
