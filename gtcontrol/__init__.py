"""gtcontrol: control-theory design tools for the Gaussian mean-field dynamics of Transformers.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026).
"""

from __future__ import annotations

from .compare import TokenComparison, compare_tokens
from .errors import (
    DesignFileError,
    GTControlError,
    InvalidGaussianError,
    InvalidParametersError,
    SolverError,
    UnreachableTargetError,
)
from .gaussian import Gaussian
from .moments import (
    IntegratorOptions,
    Trajectory,
    affine_velocity,
    moment_field,
    simulate,
    simulate_discrete,
)
from .params import Control, FeedForward, Layer, Schedule
from .tokens import TokenOptions, TokenTrajectory, simulate_tokens, token_velocity

__version__ = "0.1.0"

__all__ = [
    "Control",
    "DesignFileError",
    "FeedForward",
    "GTControlError",
    "Gaussian",
    "IntegratorOptions",
    "InvalidGaussianError",
    "InvalidParametersError",
    "Layer",
    "Schedule",
    "SolverError",
    "TokenComparison",
    "TokenOptions",
    "TokenTrajectory",
    "Trajectory",
    "UnreachableTargetError",
    "__version__",
    "affine_velocity",
    "compare_tokens",
    "moment_field",
    "simulate",
    "simulate_discrete",
    "simulate_tokens",
    "token_velocity",
]
