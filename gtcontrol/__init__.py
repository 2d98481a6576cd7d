"""gtcontrol: control-theory design tools for the Gaussian mean-field dynamics of Transformers.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026).
"""

from __future__ import annotations

from .asymptotics import (
    EquilibriaResult,
    Equilibrium,
    NewtonOptions,
    NewtonResult,
    Regime,
    analyze,
    covariance_jacobian,
    equilibria,
    mean_dynamics_ss,
    mean_matrix,
    newton_equilibrium,
)
from .compare import TokenComparison, compare_tokens
from .design import (
    Certificate as DesignCertificate,
)
from .design import (
    ConvergenceData,
    DesignOptions,
    MeanMatchingDesign,
    Robustness,
    design_certificate,
    design_convergence,
    design_mean_matching,
    design_robustness,
)
from .errors import (
    DesignFileError,
    GTControlError,
    InvalidGaussianError,
    InvalidParametersError,
    SolverError,
    UnreachableTargetError,
)
from .filtering import (
    FilterComparison,
    KalmanData,
    SteadyState,
    compare_filter,
    from_kalman,
    kalman_covariance,
    kalman_steady_state,
    to_kalman,
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
from .riccati import (
    BernoulliSolution,
    BlowupOptions,
    BlowupResult,
    RiccatiForm,
    blowup_analysis,
    blowup_time,
    riccati_flow,
    riccati_form,
    solve_bernoulli,
)
from .tokens import TokenOptions, TokenTrajectory, simulate_tokens, token_velocity

__version__ = "0.1.0"

__all__ = [
    "BernoulliSolution",
    "BlowupOptions",
    "BlowupResult",
    "Control",
    "ConvergenceData",
    "DesignCertificate",
    "DesignFileError",
    "DesignOptions",
    "EquilibriaResult",
    "Equilibrium",
    "FeedForward",
    "FilterComparison",
    "GTControlError",
    "Gaussian",
    "IntegratorOptions",
    "InvalidGaussianError",
    "InvalidParametersError",
    "KalmanData",
    "Layer",
    "MeanMatchingDesign",
    "NewtonOptions",
    "NewtonResult",
    "Regime",
    "RiccatiForm",
    "Robustness",
    "Schedule",
    "SolverError",
    "SteadyState",
    "TokenComparison",
    "TokenOptions",
    "TokenTrajectory",
    "Trajectory",
    "UnreachableTargetError",
    "__version__",
    "affine_velocity",
    "analyze",
    "blowup_analysis",
    "blowup_time",
    "compare_filter",
    "compare_tokens",
    "covariance_jacobian",
    "design_certificate",
    "design_convergence",
    "design_mean_matching",
    "design_robustness",
    "equilibria",
    "from_kalman",
    "kalman_covariance",
    "kalman_steady_state",
    "mean_dynamics_ss",
    "mean_matrix",
    "moment_field",
    "newton_equilibrium",
    "riccati_flow",
    "riccati_form",
    "simulate",
    "simulate_discrete",
    "simulate_tokens",
    "solve_bernoulli",
    "to_kalman",
    "token_velocity",
]
