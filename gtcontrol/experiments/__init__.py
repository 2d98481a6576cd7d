"""The paper's numerical evidence, reproduced offline (extra ``experiments``).

* :func:`gaussianity` — Mardia skewness/kurtosis, energy, sliced Wasserstein and per-coordinate
  normality statistics against Monte Carlo Gaussian nulls (numpy/scipy only).
* :func:`pretrained_gaussianity` — Gaussian tokens through all-MiniLM-L6-v2 (or any model, e.g.
  random BERT / ViT-shaped encoders), diagnosed layer by layer.
* :func:`moment_surrogate` — the Gaussian moment model of the real network (exactly extracted
  ``B_h``, ``V_h``), predicted against measured moments.
* :func:`prescribed_attention_regimes`, :func:`feedforward_closeness` — token-level Transformers
  against the moment predictions (collapse, convergence and blow-up; identity vs ReLU
  feed-forward, with the Gaussian closure :func:`gtcontrol.simulate_closure`).
* :func:`attention_flows` — every attention sublayer (MiniLM-L6 by default) as a
  continuous-time flow (blow-up time and direction, from ``Σ0 = I`` and from data;
  docs/minilm_flows.md).
* :func:`stabilize_model` — every attention sublayer stabilized around data and identity
  targets (:func:`gtcontrol.stabilize`), tabulated.
* :func:`reproduce` — all of it, with figures, ``report.md`` and ``report.html``.
* :func:`model_report` — the per-layer report of any Transformer the user brings (read by
  :func:`gtcontrol.interop.extract`: a ``transformers`` model, a local Hugging Face folder, an
  ONNX file; every experiment above that reads a real network takes one).
* :func:`model_map` — the map of a model: every attention sublayer's regime, equilibria and
  smallest certified stabilization, and the network with every layer stabilized.

Every result carries ``success``, ``status`` (a :class:`~gtcontrol.Status`), ``message`` and
``stats``; every entry point that loops takes a keyword-only ``time_limit`` (seconds) and, when
it runs out, returns what is done with ``Status.BUDGET_EXHAUSTED``.

Importing this package never imports torch; the functions that need torch, transformers or the
MiniLM files raise :class:`~gtcontrol.interop.ExperimentDependencyError` when the
``experiments`` extra is missing.

Reference: the paper cited in :mod:`gtcontrol`.
"""

from __future__ import annotations

from .attention_flows import (
    SENTENCES,
    AttentionFlows,
    DataMoments,
    FlowRow,
    attention_flows,
    data_moments,
)
from .closure import ClosenessCurve, FeedForwardCloseness, feedforward_closeness
from .gaussianity import (
    STATISTICS,
    GaussianityResult,
    NullStatistic,
    gaussianity,
)
from .model_map import LayerMap, ModelMap, NetworkCheck, model_map
from .model_report import ModelLayerRow, ModelReport, model_report
from .pretrained import (
    GaussianityTable,
    LayerGaussianity,
    encoder_states,
    pretrained_gaussianity,
)
from .regimes import RegimeResult, RegimeRow, prescribed_attention_regimes
from .report import ReproduceResult, reproduce
from .sample_statistics import MardiaStatistics, mardia, sliced_wasserstein
from .stabilization import (
    StabilizationRow,
    StabilizationTable,
    data_tokens,
    ledoit_wolf,
    stabilize_model,
    text_target,
)
from .surrogate import SurrogateComparison, SurrogateRow, moment_surrogate

__all__ = [
    "SENTENCES",
    "STATISTICS",
    "AttentionFlows",
    "ClosenessCurve",
    "DataMoments",
    "FeedForwardCloseness",
    "FlowRow",
    "GaussianityResult",
    "GaussianityTable",
    "LayerGaussianity",
    "LayerMap",
    "MardiaStatistics",
    "ModelLayerRow",
    "ModelMap",
    "ModelReport",
    "NetworkCheck",
    "NullStatistic",
    "RegimeResult",
    "RegimeRow",
    "ReproduceResult",
    "StabilizationRow",
    "StabilizationTable",
    "SurrogateComparison",
    "SurrogateRow",
    "attention_flows",
    "data_moments",
    "data_tokens",
    "encoder_states",
    "feedforward_closeness",
    "gaussianity",
    "ledoit_wolf",
    "mardia",
    "model_map",
    "model_report",
    "moment_surrogate",
    "prescribed_attention_regimes",
    "pretrained_gaussianity",
    "reproduce",
    "sliced_wasserstein",
    "stabilize_model",
    "text_target",
]
