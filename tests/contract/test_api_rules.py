"""One rule for the arguments of every public callable, checked by introspection.

The rule (docs/architecture.md, "One rule for arguments"):

1. the data a function acts on are positional;
2. the horizon ``T`` is positional-or-keyword, right after the data
   (``simulate(layer, g0, 2.0)`` and ``analyze(layer, g0, 2.0)`` both work, and ``T=2.0`` too);
3. every option is keyword-only.

The callables walked are those that ``docs/api/surface.txt`` lists: its functions, the
constructors of the classes a user builds (hand-written ``__init__``), the option families (frozen
dataclasses whose fields all have defaults) and every public method. The constructors of results
and table rows (dataclasses with required fields, built by the library) are not walked: a user
reads them and never calls them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from _api_surface import is_option_family, walk_surface

#: Names of the data a callable acts on: the only parameters that may be positional (with ``T``).
#: A name not listed here is an option, and an option is keyword-only.
DATA = frozenset(
    {
        # what is run, analysed or read: a layer, a control, a network, a design, a filter
        *("layer", "control", "model", "model_or_path", "design", "form", "data", "schedule"),
        *("layers",),  # Schedule(layers, T): the layers of the schedule themselves
        # the Gaussians and states acted on
        *("initial", "target", "gaussian", "equilibrium", "state", "start", "other"),
        *("keys", "queries", "mean", "cov", "var", "P0"),
        # tokens, samples, text
        *("tokens", "samples", "points", "sentences", "snapshots", "predicted", "traj"),
        # the matrices and vectors of a layer, a head, a filter, a network's weights
        *("A", "B", "V", "b", "F", "H", "R", "Q", "M", "c", "W", "U", "q", "k", "v", "o"),
        *("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "gamma", "beta", "eps"),
        # the depth or index asked for; a required time grid is the horizon of its flow
        *("t", "i", "times"),
        # the arrays a figure draws
        *("mean_error", "cov_error", "filter_cov", "transformer_cov", "curves", "before", "after"),
        *("x", "y", "category"),
        # where a figure or a run is written, and what is written there
        *("path", "outdir", "fig", "axes", "ax"),
        # the command line
        *("argv",),
    }
)

#: Parameters that are data of one callable only (the same name is an option elsewhere).
DATA_OF = {
    "Gaussian.sample": {"n"},  # how many draws: the request itself, as numpy's ``size``
    "Gaussian.standard": {"dim"},  # the size of the Gaussian built
    "FactoredHeads.flat": {"name"},  # the factor asked for, as a mapping's key
    "GaussianityResult.statistic": {"name"},  # the statistic asked for, as a mapping's key
    "panels": {"n"},  # how many panels to make
    "plot_convergence": {"n_tokens", "errors"},  # the x and y of the figure
    # the arrays these figures draw: the added controls, the flows, the eigenvalues
    "plot_added_control": {"added_A", "added_b"},
    "plot_base_against_steered": {"steered", "base"},
    "plot_steering_summary": {"eigenvalues"},
}

#: The option vocabulary: keyword-only wherever it appears, whatever the lists above say.
OPTIONS = frozenset(
    {
        *("mode", "seed", "time_limit", "rtol", "atol", "tol", "method", "kind", "backend"),
        *("n_layers", "n_points", "n_tokens", "n_starts", "n_points", "n_null", "n_random"),
        *("n_samples", "n_directions", "n_projections", "n_std", "n_heads", "repeats"),
        *("max_evals", "max_steps", "max_iter", "max_work", "rate", "cov_rate", "title"),
        *("width", "height", "d", "dtype", "block_size", "steps_per_layer"),
    }
)


def _violations(label: str, func: Callable[..., Any], bound: bool) -> list[str]:
    params = list(inspect.signature(func).parameters.values())
    if bound and params and params[0].name in ("self", "cls"):
        params = params[1:]
    own = DATA_OF.get(label.split(".")[-1], set()) | DATA_OF.get(label, set())
    found: list[str] = []
    horizon = next((i for i, p in enumerate(params) if p.name == "T"), None)
    if horizon is not None:
        T = params[horizon]
        if T.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            found.append(f"{label}: T is {T.kind.description}, not positional-or-keyword")
        for p in params[horizon + 1 :]:
            if p.kind not in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD):
                found.append(f"{label}: {p.name} after T is {p.kind.description}")
    for p in params:
        if p.name == "T" or p.kind in (inspect.Parameter.KEYWORD_ONLY, p.VAR_KEYWORD):
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            found.append(f"{label}: *{p.name} takes options positionally")
        elif p.name not in own and (p.name in OPTIONS or p.name not in DATA):
            found.append(f"{label}: option {p.name} is {p.kind.description}")
    return found


def test_the_data_and_option_lists_do_not_overlap() -> None:
    assert not DATA & OPTIONS
    assert not set().union(*DATA_OF.values()) & (OPTIONS - {"n_tokens"})


def test_every_public_callable_follows_the_argument_rule() -> None:
    """Data positional, ``T`` positional-or-keyword after them, every option keyword-only."""
    walked = list(walk_surface())
    names = {label for label, _, _ in walked}
    # the walk reaches functions, methods, value classes and option families
    assert {"simulate", "Gaussian.sample", "Layer", "IpoptSettings", "steer"} <= names
    assert "Trajectory" not in names  # a result: built by the library
    violations = [v for label, func, bound in walked for v in _violations(label, func, bound)]
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize(
    "name", ["Collocation", "IpoptSettings", "NewtonSettings", "RobustnessCheck", "SteeringBounds"]
)
def test_option_families_are_frozen_and_keyword_only(name: str) -> None:
    import gtcontrol

    cls = getattr(gtcontrol, name)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert is_option_family(cls)
    kinds = {p.kind for p in inspect.signature(cls).parameters.values()}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}


def test_the_horizon_is_positional_where_a_function_takes_one() -> None:
    """``simulate(l, g, 2.0)`` and ``analyze(l, g, 2.0)`` both read the depth third."""
    import gtcontrol

    for func in (gtcontrol.simulate, gtcontrol.analyze, gtcontrol.blowup_analysis):
        third = list(inspect.signature(func).parameters.values())[2]
        assert (third.name, third.kind) == ("T", inspect.Parameter.POSITIONAL_OR_KEYWORD)


def test_the_check_catches_each_kind_of_violation() -> None:
    """The three clauses each fail a callable that breaks them (the shapes found before)."""

    def keyword_only_T(layer: Any, initial: Any, *, T: float = 1.0) -> None: ...
    def positional_mode(initial: Any, target: Any, mode: str = "full") -> None: ...
    def positional_seed(n_tokens: int = 8, seed: int = 0) -> None: ...
    def data_after_T(layer: Any, T: float, initial: Any) -> None: ...
    def options_as_args(layer: Any, *args: Any) -> None: ...
    def follows(layer: Any, initial: Any, T: float = 1.0, *, seed: int = 0) -> None: ...

    assert _violations("f", keyword_only_T, False) == [
        "f: T is keyword-only, not positional-or-keyword"
    ]
    assert _violations("f", positional_mode, False) == ["f: option mode is positional or keyword"]
    assert len(_violations("f", positional_seed, False)) == 2
    assert _violations("f", data_after_T, False) == ["f: initial after T is positional or keyword"]
    assert _violations("f", options_as_args, False) == ["f: *args takes options positionally"]
    assert _violations("f", follows, False) == []
