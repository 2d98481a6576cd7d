"""gtcontrol: control-theory design tools for the Gaussian mean-field dynamics of Transformers.

Reference: Alcalde, Ji, Zuazua, *Reachability and asymptotics of Gaussian Transformer dynamics*,
arXiv:2606.07600 (2026).
"""

from __future__ import annotations

from ._status import Result, Status
from ._version import __version__
from .analysis._field_kernel import covariance_jacobian
from .analysis.bernoulli import BernoulliSolution, solve_bernoulli
from .analysis.blowup import BlowupResult, blowup_analysis
from .analysis.compare import TokenComparison, compare_tokens
from .analysis.equilibria import EquilibriaResult, Equilibrium, equilibria, mean_matrix
from .analysis.filtering import (
    FilterComparison,
    KalmanData,
    SteadyState,
    compare_filter,
    from_kalman,
    kalman_covariance,
    kalman_steady_state,
    to_kalman,
)
from .analysis.newton import NewtonResult, NewtonSettings, newton_equilibrium
from .analysis.regimes import Regime, analyze, mean_dynamics_ss
from .analysis.riccati import CovarianceFlow, RiccatiForm, is_riccati, riccati_flow, riccati_form
from .analysis.stability import LinearizationSpectrum, linearization_spectrum
from .control.design import (
    ConvergenceData,
    DesignCertificate,
    MeanMatchingDesign,
    PathEss,
    Robustness,
    RobustnessCheck,
    TokenCertificate,
    design_certificate,
    design_convergence,
    design_mean_matching,
    design_robustness,
    design_token_certificate,
)
from .control.ot import KineticEnergy, OTSteering, kinetic_energy, ot_steering
from .control.reachability import MODES, check_reachable, is_reachable
from .control.realization import exact_layer_steering, realize
from .control.stabilization import Stabilization, stabilize
from .control.steering import Collocation, IpoptSettings, SteeringBounds, SteeringResult, steer
from .errors import (
    DesignFileError,
    GTControlError,
    InvalidGaussianError,
    InvalidParametersError,
    SolverError,
    UnreachableTargetError,
)
from .model.attention import token_velocity
from .model.finite_n import ess_fraction, worst_ess_fraction
from .model.gaussian import Gaussian
from .model.gaussian_closure import simulate_closure
from .model.heads import FactoredHeads
from .model.moments import (
    Trajectory,
    affine_velocity,
    moment_field,
    simulate,
    simulate_discrete,
)
from .model.params import Control, FeedForward, Layer, Schedule
from .model.tokens import TokenTrajectory, simulate_tokens

__all__ = [
    "MODES",
    "BernoulliSolution",
    "BlowupResult",
    "Collocation",
    "Control",
    "ConvergenceData",
    "CovarianceFlow",
    "DesignCertificate",
    "DesignFileError",
    "EquilibriaResult",
    "Equilibrium",
    "FactoredHeads",
    "FeedForward",
    "FilterComparison",
    "GTControlError",
    "Gaussian",
    "InvalidGaussianError",
    "InvalidParametersError",
    "IpoptSettings",
    "KalmanData",
    "KineticEnergy",
    "Layer",
    "LinearizationSpectrum",
    "MeanMatchingDesign",
    "NewtonResult",
    "NewtonSettings",
    "OTSteering",
    "PathEss",
    "Regime",
    "Result",
    "RiccatiForm",
    "Robustness",
    "RobustnessCheck",
    "Schedule",
    "SolverError",
    "Stabilization",
    "Status",
    "SteadyState",
    "SteeringBounds",
    "SteeringResult",
    "TokenCertificate",
    "TokenComparison",
    "TokenTrajectory",
    "Trajectory",
    "UnreachableTargetError",
    "__version__",
    "affine_velocity",
    "analyze",
    "blowup_analysis",
    "check_reachable",
    "compare_filter",
    "compare_tokens",
    "covariance_jacobian",
    "design_certificate",
    "design_convergence",
    "design_mean_matching",
    "design_robustness",
    "design_token_certificate",
    "equilibria",
    "ess_fraction",
    "exact_layer_steering",
    "from_kalman",
    "is_reachable",
    "is_riccati",
    "kalman_covariance",
    "kalman_steady_state",
    "kinetic_energy",
    "linearization_spectrum",
    "mean_dynamics_ss",
    "mean_matrix",
    "moment_field",
    "newton_equilibrium",
    "ot_steering",
    "realize",
    "riccati_flow",
    "riccati_form",
    "simulate",
    "simulate_closure",
    "simulate_discrete",
    "simulate_tokens",
    "solve_bernoulli",
    "stabilize",
    "steer",
    "to_kalman",
    "token_velocity",
    "worst_ess_fraction",
]
