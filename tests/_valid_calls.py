"""Minimal valid arguments of every public callable that takes an option of the common kinds.

tests/contract/test_hostile_arguments.py walks ``docs/api/surface.txt`` and, for every callable
with a parameter of a common kind (:data:`COMMON`: ``seed``, ``time_limit``, ``T``, rates, ``n_*``,
tolerances, ``max_*``, ``steps_per_layer``, ``token_check``), calls it with the valid arguments
below and one hostile value in that parameter. Each hostile value must raise a
:class:`~gtcontrol.errors.GTControlError` naming the parameter, unless the entry (or
:data:`ACCEPTED_EVERYWHERE`) says why the value is valid there.

A callable on the surface with such a parameter and no entry here fails the test: a new public
function is added to :data:`VALID` with its smallest valid call. Everything is small (d = 1-3,
a few tokens, a short horizon, a time limit of a fraction of a second) so that the ~1,400
calls run in about 20 s; the calls that need a network read a 2-layer random BERT of width 8.
"""

from __future__ import annotations

import functools
import math
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import gtcontrol as gt

#: Names of the parameters of the common kinds (options only: :attr:`Valid.data` lists a
#: parameter of these names that is a callable's data).
COMMON = re.compile(
    r"^(seed|time_limit|T|rate|cov_rate|n_\w+|rtol|atol|tol|\w+_tol|\w+_rtol|max_\w+"
    r"|steps_per_layer|token_check)$"
)

#: The hostile values of each kind, by label. ``float`` parameters also get ``huge``, an integer
#: past the float range (``float(10**400)`` raises ``OverflowError``); ``int`` parameters get a
#: huge integer that fits no array or loop (``10**30``) and a non-integral float.
FLOAT_VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "negative": -1.0,
    "zero": 0.0,
    "bool": True,
    "huge": 10**400,
    "str": "1",
    "None": None,
}
INT_VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "negative": -1,
    "zero": 0,
    "bool": True,
    "float": 1.5,
    "huge": 10**30,
    "str": "2",
    "None": None,
}
SEED_VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "negative": -1,
    "bool": True,
    "float": 1.5,
    "huge": 10**30,
    "str": "0",
    "None": None,
}

#: Hostile-looking values that are valid for every parameter of that name, and why.
ACCEPTED_EVERYWHERE: dict[tuple[str, str], str] = {
    ("time_limit", "inf"): "no limit (as_time_limit: inf and anything past a year mean None)",
    ("time_limit", "huge"): "no limit (as_time_limit: an integer past the float range is inf)",
    ("seed", "huge"): "numpy's SeedSequence takes any non-negative integer",
}


def kind(param: str, annotation: str) -> str:
    """``"seed"``, ``"time_limit"``, ``"int"`` or ``"float"``: which hostile values apply."""
    if param in ("seed", "time_limit"):
        return param
    return "int" if "int" in annotation and "float" not in annotation else "float"


def hostile_values(param: str, annotation: str) -> dict[str, Any]:
    """The hostile values of a parameter (``None`` only where its annotation excludes it; in a
    ``Sequence[int]``, such as ``compare_tokens(n_tokens=)``, each beside a valid entry)."""
    values = {
        "seed": SEED_VALUES,
        "time_limit": FLOAT_VALUES,
        "int": INT_VALUES,
        "float": FLOAT_VALUES,
    }[kind(param, annotation)]
    optional = "None" in annotation or param == "time_limit"
    kept = {k: v for k, v in values.items() if not (k == "None" and optional)}
    if annotation.startswith("Sequence["):
        return {k: (32, v) for k, v in kept.items()}
    return kept


@dataclass(frozen=True)
class Valid:
    """The smallest valid call of one public callable.

    Attributes
    ----------
    call
        Calls the callable with valid data; takes the common-kind options as keywords.
    options
        Valid values of the common-kind options the call is given (small sizes, a short
        ``time_limit``), overridden one at a time by a hostile value.
    accepts
        ``(parameter, label) → reason``: a hostile-looking value that is valid here. It is
        still called, and must return or raise a ``GTControlError``.
    data
        ``parameter → reason``: a parameter with a common-kind name that is this callable's
        data, not an option (not walked).
    heavy
        The call reads a network: its accepted values (no time limit) run the whole
        experiment, so those cases are marked slow.
    """

    call: Callable[..., Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    accepts: Mapping[tuple[str, str], str] = field(default_factory=dict)
    data: Mapping[str, str] = field(default_factory=dict)
    heavy: bool = False


# -- the data ------------------------------------------------------------------------------------

LAYER = gt.Layer(A=[[0.3, -0.4], [0.4, 0.2]], B=np.eye(2), V=-1.0)
G2 = gt.Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
G2B = gt.Gaussian([0.5, 0.2], [[0.8, 0.1], [0.1, 0.6]])
G1 = gt.Gaussian([1.0], [[0.5]])
G1B = gt.Gaussian([2.0], [[1.5]])
TOKENS = G2.sample(24, seed=0)
KALMAN = gt.KalmanData([[-1.0, 0.0], [0.0, -0.5]], [[1.0, 0.0]], [[1.0]], np.eye(2))
KALMAN_LAYER = gt.from_kalman(KALMAN.F, KALMAN.H, KALMAN.R, KALMAN.Q)
#: compare_filter runs the equilibrium search of its layer: 1-d keeps its no-limit call short.
KALMAN_LAYER_1D = gt.from_kalman([[-1.0]], [[1.0]], [[1.0]], [[1.0]])
_W = np.random.default_rng(0).standard_normal((4, 4, 4)) / 2.0
PROJECTIONS = (_W[0], _W[1], _W[2], _W[3])
#: A short time limit for every call that takes one: a hostile value in another option must be
#: refused before any work, and a valid call ends within it either way.
LIMIT = 0.3


@functools.cache
def design() -> gt.MeanMatchingDesign:
    """A 1-d mean-matching design (0.2 s)."""
    return gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False)


@functools.cache
def trajectory() -> gt.Trajectory:
    return gt.simulate(LAYER, G2, 1.0, n_points=5)


@functools.cache
def tiny_model() -> Any:
    """A 2-layer random BERT of width 8, extracted (imports torch and transformers once)."""
    import pytest

    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from _families import random_model

    from gtcontrol.interop import extract

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = random_model("bert", hidden_size=8, num_attention_heads=2, intermediate_size=16)
    return extract(net)


_OUT = tempfile.TemporaryDirectory(prefix="gtcontrol-hostile-")  # removed at exit


def _outdir() -> Path:
    return Path(tempfile.mkdtemp(dir=_OUT.name))


def _ex() -> Any:
    import gtcontrol.experiments as ex

    return ex


def _io() -> Any:
    import gtcontrol.interop as io

    return io


def _nets() -> Any:
    """The experiments that read a network (skipped without torch and transformers)."""
    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return _ex()


def _io_nets() -> Any:
    """The readers of a network (skipped without torch and transformers)."""
    _nets()
    return _io()


def _plot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import gtcontrol.plotting as gp

    return gp


def _figure(draw: Callable[[], Any]) -> Any:
    """Run a plotting call and close its figures (hundreds are drawn)."""
    import matplotlib.pyplot as plt

    try:
        return draw()
    finally:
        plt.close("all")


# -- the table -----------------------------------------------------------------------------------

_ASYMPTOTIC_T = "T = inf asks for the asymptotic regime (None: the default horizon)"
_TOKEN_ATOL = "the token integrator's default (its error weights have the floor rtol·rms(X))"

VALID: dict[str, Valid] = {
    # ---- option families and value classes
    "Collocation": Valid(
        lambda **kw: gt.Collocation(**kw),
        accepts={("max_corrections", "zero"): "no correction rounds (documented: 0 … 100)"},
    ),
    "NewtonSettings": Valid(lambda **kw: gt.NewtonSettings(**kw)),
    "IpoptSettings": Valid(lambda **kw: gt.IpoptSettings(**kw)),
    "RobustnessCheck": Valid(lambda **kw: gt.RobustnessCheck(**kw)),
    "Schedule": Valid(lambda **kw: gt.Schedule([LAYER, LAYER], **kw), {"T": 1.0}),
    "Gaussian.sample": Valid(lambda **kw: G2.sample(4, **kw)),
    "FactoredHeads.from_projections": Valid(
        lambda **kw: gt.FactoredHeads.from_projections(*PROJECTIONS, **kw), {"n_heads": 2}
    ),
    "Layer.from_projections": Valid(
        lambda **kw: gt.Layer.from_projections(*PROJECTIONS, **kw), {"n_heads": 2}
    ),
    # ---- gtcontrol
    "analyze": Valid(
        lambda **kw: gt.analyze(LAYER, G2, **kw),
        {"T": 1.0, "time_limit": LIMIT},
        accepts={("T", "inf"): _ASYMPTOTIC_T},
    ),
    "blowup_analysis": Valid(
        lambda **kw: gt.blowup_analysis(LAYER, G2, **kw),
        {"T": 1.0, "time_limit": LIMIT},
        accepts={("T", "inf"): "T = inf searches for a blow-up at any depth"},
    ),
    "compare_filter": Valid(
        lambda **kw: gt.compare_filter(KALMAN_LAYER_1D, G1, **kw),
        {"T": 1.0, "n_points": 5, "time_limit": LIMIT},
    ),
    "compare_tokens": Valid(
        lambda **kw: gt.compare_tokens(LAYER, G2, repeats=1, **kw),
        {"T": 0.5, "n_tokens": (32, 64), "time_limit": LIMIT},
    ),
    "design_certificate": Valid(lambda **kw: gt.design_certificate(design().layer, G1, **kw)),
    "design_convergence": Valid(
        lambda **kw: gt.design_convergence(design(), **kw),
        {"T": 1.0, "n_starts": 2, "n_points": 5, "time_limit": LIMIT},
    ),
    "design_mean_matching": Valid(
        lambda **kw: gt.design_mean_matching(G1, robustness=False, **kw),
        {"time_limit": LIMIT},
    ),
    "design_robustness": Valid(
        lambda **kw: gt.design_robustness(design().layer, design().target, **kw),
        {"n_directions": 2, "n_samples": 2, "time_limit": LIMIT},
    ),
    "design_token_certificate": Valid(
        lambda **kw: gt.design_token_certificate(
            design().layer, design().target, method="RK45", **kw
        ),
        {"T": 1.0, "n_tokens": 64, "time_limit": LIMIT},
    ),
    "equilibria": Valid(
        lambda **kw: gt.equilibria(LAYER, **kw),
        {"n_random": 1, "time_limit": LIMIT},
        accepts={("n_random", "zero"): "no random starts: the multiples of I only (documented)"},
    ),
    "exact_layer_steering": Valid(
        lambda **kw: gt.exact_layer_steering(G2, G2B, **kw), {"T": 1.0, "n_layers": 2}
    ),
    "kalman_covariance": Valid(
        lambda **kw: gt.kalman_covariance(KALMAN, np.eye(2), [0.0, 0.5, 1.0], **kw),
        {"time_limit": LIMIT},
    ),
    "kinetic_energy": Valid(
        lambda **kw: gt.kinetic_energy(LAYER, G2, **kw),
        {"T": 1.0, "n_points": 11, "time_limit": LIMIT},
    ),
    "linearization_spectrum": Valid(
        lambda **kw: gt.linearization_spectrum(design().layer, design().target, **kw),
        {"time_limit": LIMIT},
        accepts={("tol", "zero"): "ARPACK's tol = 0 asks for machine precision"},
    ),
    "newton_equilibrium": Valid(
        lambda **kw: gt.newton_equilibrium(design().layer, design().target.cov, **kw),
        {"time_limit": LIMIT},
    ),
    "ot_steering": Valid(lambda **kw: gt.ot_steering(G2, G2B, **kw), {"T": 1.0}),
    "riccati_flow": Valid(
        lambda **kw: gt.riccati_flow(LAYER, G2, [0.0, 0.5], **kw), {"time_limit": LIMIT}
    ),
    "simulate": Valid(
        lambda **kw: gt.simulate(LAYER, G2, **kw),
        {"T": 1.0, "n_points": 5, "time_limit": LIMIT},
        accepts={
            ("max_step", "inf"): "the default: no bound on the integrator's step",
            ("max_step", "huge"): "past the float range: inf, the default (no bound)",
        },
    ),
    "simulate_closure": Valid(
        lambda **kw: gt.simulate_closure(LAYER, G2, **kw), {"T": 1.0, "time_limit": LIMIT}
    ),
    "simulate_discrete": Valid(
        lambda **kw: gt.simulate_discrete(gt.Schedule([LAYER, LAYER], 1.0), G2, **kw),
        {"time_limit": LIMIT},
    ),
    "simulate_tokens": Valid(
        lambda **kw: gt.simulate_tokens(LAYER, TOKENS, method="DOP853", **kw),
        {"T": 0.5, "time_limit": LIMIT},
        accepts={("atol", "zero"): _TOKEN_ATOL},
    ),
    "stabilize": Valid(
        lambda **kw: gt.stabilize(LAYER, G2, add="head", **kw), {"T": 1.0, "time_limit": LIMIT}
    ),
    "steer": Valid(
        lambda **kw: gt.steer(G1, G1B, mode="ffn", **kw),
        {"T": 1.0, "n_layers": 2, "time_limit": LIMIT},
    ),
    "to_kalman": Valid(lambda **kw: gt.to_kalman(KALMAN_LAYER, **kw)),
    "worst_ess_fraction": Valid(
        lambda **kw: gt.worst_ess_fraction(LAYER, G2, **kw),
        accepts={("n_std", "zero"): "the bound at the mean query alone (documented: n_std ≥ 0)"},
    ),
    # ---- gtcontrol.interop and gtcontrol.experiments
    "AttentionWeights": Valid(
        lambda **kw: _io().AttentionWeights(*PROJECTIONS, **kw), {"n_heads": 2}
    ),
    "gaussianity": Valid(
        lambda **kw: _ex().gaussianity(TOKENS, **kw),
        {"n_null": 8, "n_projections": 4, "time_limit": LIMIT},
    ),
    "mardia": Valid(lambda **kw: _ex().mardia(TOKENS, **kw)),
    "sliced_wasserstein": Valid(
        lambda **kw: _ex().sliced_wasserstein(TOKENS, G2, **kw), {"n_projections": 4}
    ),
    "feedforward_closeness": Valid(
        lambda **kw: _ex().feedforward_closeness(**kw),
        {"T": 0.5, "n_tokens": 16, "n_points": 3, "n_projections": 4, "time_limit": LIMIT},
    ),
    "prescribed_attention_regimes": Valid(
        lambda **kw: _ex().prescribed_attention_regimes(d=2, **kw),
        {"n_tokens": 24, "n_layers": 2, "time_limit": LIMIT},
    ),
    "load_model": Valid(lambda **kw: _io_nets().load_model("random-bert", **kw), heavy=True),
    "extract": Valid(lambda **kw: _io_nets().extract(tiny_model().network, **kw), heavy=True),
    "data_tokens": Valid(lambda **kw: _nets().data_tokens(tiny_model(), **kw), heavy=True),
    "data_moments": Valid(lambda **kw: _nets().data_moments(tiny_model(), **kw), heavy=True),
    "attention_flows": Valid(
        lambda **kw: _nets().attention_flows(tiny_model(), **kw),
        {"T": 1.0, "time_limit": LIMIT},
        heavy=True,
    ),
    "model_map": Valid(
        lambda **kw: _nets().model_map(tiny_model(), **kw),
        {"T": 1.0, "token_check": None, "time_limit": LIMIT},
        heavy=True,
    ),
    "model_report": Valid(
        lambda **kw: _nets().model_report(tiny_model(), flows=False, **kw),
        {"T": 1.0, "n_tokens": 64, "n_null": 8, "time_limit": LIMIT},
        heavy=True,
    ),
    "moment_surrogate": Valid(
        lambda **kw: _nets().moment_surrogate(tiny_model(), **kw),
        {"n_tokens": 64, "time_limit": LIMIT},
        heavy=True,
    ),
    "pretrained_gaussianity": Valid(
        lambda **kw: _nets().pretrained_gaussianity(tiny_model(), **kw),
        {"n_tokens": 64, "n_null": 8, "n_projections": 4, "time_limit": LIMIT},
        heavy=True,
    ),
    "reproduce": Valid(
        lambda **kw: _nets().reproduce(_outdir(), quick=True, **kw),
        {"n_tokens": 400, "time_limit": 1e-3},
        heavy=True,
    ),
    "stabilize_model": Valid(
        lambda **kw: _nets().stabilize_model(tiny_model(), targets=["identity"], **kw),
        {"time_limit": LIMIT},
        heavy=True,
    ),
    # ---- gtcontrol.plotting
    "plot_convergence": Valid(
        lambda **kw: _figure(lambda: _plot().core.plot_convergence(**kw, errors={"m": [1, 0.5]})),
        {"n_tokens": [10, 20]},
        data={"n_tokens": "the x values of the figure, not an option"},
    ),
    "plot_token_clouds": Valid(
        lambda **kw: _figure(
            lambda: _plot().core.plot_token_clouds([(0.0, TOKENS)], trajectory(), **kw)
        ),
        {"max_points": 10},
    ),
    "plot_steering_summary": Valid(
        lambda **kw: _figure(
            lambda: _plot().steering.plot_steering_summary(
                trajectory(), G2, np.linalg.eigvalsh(trajectory().cov), **kw
            )
        ),
        {"n_distances": 3},
    ),
    "plot_design_convergence": Valid(
        lambda **kw: _figure(
            lambda: _plot().design.plot_design_convergence(
                np.array([0.0, 1.0]), np.array([1.0, 0.5]), np.array([1.0, 0.4]), **kw
            )
        ),
    ),
    "plot_stabilization": Valid(
        lambda **kw: _figure(
            lambda: _plot().design.plot_stabilization(
                {"run": (np.array([0.0, 1.0]), np.array([1.0, 0.5]))},
                np.array([-1.0 + 0j]),
                np.array([-2.0 + 0j]),
                **kw,
            )
        ),
    ),
}
