"""The paper's numerical evidence, reproduced offline (extra ``experiments``).

* :func:`gaussianity` — Mardia skewness/kurtosis, energy, sliced Wasserstein and per-coordinate
  normality statistics against Monte Carlo Gaussian nulls (numpy/scipy only).
* :func:`pretrained_gaussianity` — Gaussian tokens through all-MiniLM-L6-v2 (and random BERT /
  ViT-shaped encoders), diagnosed layer by layer.
* :func:`moment_surrogate` — the Gaussian moment model of the real network (exactly extracted
  ``B_h``, ``V_h``), predicted against measured moments.
* :func:`prescribed_attention_regimes`, :func:`feedforward_closeness` — token-level Transformers
  against the moment predictions (collapse, convergence and blow-up; identity vs ReLU
  feed-forward, with the Gaussian closure :func:`closure_flow`).
* :func:`attention_flows` — every MiniLM-L6 attention sublayer as a continuous-time flow
  (blow-up time and direction, from ``Σ0 = I`` and from real text; docs/minilm_flows.md).
* :func:`reproduce` — all of it, with figures, ``report.md`` and ``report.html``.

Every result carries ``success``, ``status`` (a :class:`~gtcontrol.Status`), ``message`` and
``stats``; every entry point that loops takes a keyword-only ``time_limit`` (seconds) and, when
it runs out, returns what is done with ``Status.BUDGET_EXHAUSTED``.

Importing this package never imports torch; the functions that need torch, transformers or the
MiniLM files raise :class:`ExperimentDependencyError` when the ``experiments`` extra is missing.

Reference: the paper cited in :mod:`gtcontrol`.
"""

from __future__ import annotations

from ._deps import ExperimentDependencyError
from .attention_flows import SENTENCES, AttentionFlows, FlowRow, attention_flows, text_moments
from .closure import (
    ClosenessCurve,
    ClosureFlow,
    FeedForwardCloseness,
    closure_flow,
    feedforward_closeness,
)
from .extraction import ExtractedLayer, extract_layers, gelu_moments
from .gaussianity import (
    STATISTICS,
    GaussianityResult,
    NullStatistic,
    gaussianity,
)
from .pretrained import (
    MODELS,
    GaussianityTable,
    LayerGaussianity,
    encoder_states,
    load_model,
    pretrained_gaussianity,
)
from .regimes import RegimeResult, RegimeRow, prescribed_attention_regimes
from .report import ReproduceResult, reproduce
from .sample_statistics import MardiaStatistics, mardia, sliced_wasserstein
from .surrogate import SurrogateComparison, SurrogateRow, moment_surrogate

__all__ = [
    "MODELS",
    "SENTENCES",
    "STATISTICS",
    "AttentionFlows",
    "ClosenessCurve",
    "ClosureFlow",
    "ExperimentDependencyError",
    "ExtractedLayer",
    "FeedForwardCloseness",
    "FlowRow",
    "GaussianityResult",
    "GaussianityTable",
    "LayerGaussianity",
    "MardiaStatistics",
    "NullStatistic",
    "RegimeResult",
    "RegimeRow",
    "ReproduceResult",
    "SurrogateComparison",
    "SurrogateRow",
    "attention_flows",
    "closure_flow",
    "encoder_states",
    "extract_layers",
    "feedforward_closeness",
    "gaussianity",
    "gelu_moments",
    "load_model",
    "mardia",
    "moment_surrogate",
    "prescribed_attention_regimes",
    "pretrained_gaussianity",
    "reproduce",
    "sliced_wasserstein",
    "text_moments",
]
