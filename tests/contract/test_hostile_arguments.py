"""Every public callable refuses a hostile option of the common kinds, naming it.

For each callable that ``docs/api/surface.txt`` lists (walked by tests/_api_surface.py) and
each parameter of a common kind (``seed``, ``time_limit``, ``T``, rates, ``n_*``,
``rtol``/``atol``/tolerances, ``max_*``, ``steps_per_layer``, ``token_check``), the smallest
valid call of tests/_valid_calls.py is made with one hostile value in that parameter: NaN,
±inf, a negative number, zero, a bool, a float where an integer is expected, a huge integer, a
string, ``None`` where the parameter is not optional. Each must raise a
:class:`~gtcontrol.errors.GTControlError` whose message names the parameter: never a raw
``TypeError``/``ValueError`` or a numpy/scipy error, never a hang (each call runs under an
alarm), never a raw numpy/scipy warning. The values that are valid for a parameter are listed,
with the reason, in tests/_valid_calls.py; they are called too and must not leak either.
"""

from __future__ import annotations

import inspect
import math
import re
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from _api_surface import walk_surface
from _valid_calls import ACCEPTED_EVERYWHERE, COMMON, G2, LAYER, VALID, Valid, hostile_values

import gtcontrol as gt
from gtcontrol._status import MAX_TIME_LIMIT, Budget, as_time_limit
from gtcontrol.errors import GTControlError, InvalidParametersError

#: Seconds one call may take before it counts as a hang (the first call into the experiments
#: imports torch and builds the tiny network; a refused value returns at once).
ALARM = 30


class Hang(BaseException):  # not an Exception: no library ``except Exception`` swallows it
    """A call ran past :data:`ALARM`."""


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _common_parameters() -> dict[str, dict[str, str]]:
    """label → {parameter: annotation} of every surface callable with a common-kind parameter."""
    found: dict[str, dict[str, str]] = {}
    for label, func, _bound in walk_surface():
        params = {
            p.name: str(p.annotation)
            for p in inspect.signature(func).parameters.values()
            if COMMON.match(p.name)
        }
        if params:
            found[label] = params
    return found


COMMON_PARAMETERS = _common_parameters()


def _cases(accepted: bool) -> list[Any]:
    cases = []
    for label, params in sorted(COMMON_PARAMETERS.items()):
        entry = VALID.get(label)
        if entry is None:
            continue  # test_every_callable_with_a_common_option_has_a_valid_call fails
        for param, annotation in params.items():
            if param in entry.data:
                continue
            for name in hostile_values(param, annotation):
                why = entry.accepts.get((param, name)) or ACCEPTED_EVERYWHERE.get((param, name))
                if (why is not None) is accepted:
                    marks = [pytest.mark.slow] if entry.heavy and accepted else []
                    cases.append(
                        pytest.param(label, param, name, id=f"{label}-{param}-{name}", marks=marks)
                    )
    return cases


#: Where a raw warning comes from when the library lets one through (third-party deprecations
#: of torch or transformers are not the library's).
_RAW = re.compile(r"[/\\](gtcontrol|numpy|scipy|casadi|matplotlib)[/\\]")


def _call(entry: Valid, param: str | None = None, value: Any = None) -> Any:
    """The call under :data:`ALARM`; it fails on a raw numpy/scipy/gtcontrol warning."""
    options = dict(entry.options)
    if param is not None:
        options[param] = value
    with warnings.catch_warnings(record=True) as caught, alarm(ALARM):
        warnings.simplefilter("always")
        try:
            return entry.call(**options)
        finally:
            raw = [w for w in caught if _RAW.search(w.filename) or w.category is RuntimeWarning]
            assert not raw, f"raw warnings: {[f'{w.category.__name__}: {w.message}' for w in raw]}"


def _value(label: str, param: str, name: str) -> Any:
    return hostile_values(param, COMMON_PARAMETERS[label][param])[name]


def _names(message: str, param: str) -> bool:
    """``message`` names ``param`` as a word (``T`` in ``"T: expected ..."``, not in ``"Tr"``)."""
    return re.search(rf"(?<![\w.]){re.escape(param)}(?![\w(])", message) is not None


def test_every_callable_with_a_common_option_has_a_valid_call() -> None:
    """A public callable taking ``seed``, ``time_limit``, ``T``, a rate, ``n_*``, a tolerance
    or ``max_*`` is walked only if tests/_valid_calls.py knows its smallest valid call."""
    missing = sorted(set(COMMON_PARAMETERS) - set(VALID))
    stale = sorted(set(VALID) - set(COMMON_PARAMETERS))
    assert not missing, f"add these to tests/_valid_calls.py VALID: {missing}"
    assert not stale, f"not on the surface (or no common option): {stale}"
    for label, entry in VALID.items():
        unknown = (set(entry.options) | set(entry.data)) - set(COMMON_PARAMETERS[label])
        assert not unknown, f"{label}: {sorted(unknown)} are not its common-kind parameters"
        for param, name in entry.accepts:
            assert name in hostile_values(param, COMMON_PARAMETERS[label][param]), (label, param)


@pytest.mark.parametrize("label", sorted(VALID))
def test_the_valid_calls_are_valid(label: str) -> None:
    """The baseline of every hostile case: with the valid options the call returns (so an error
    below comes from the hostile value)."""
    _call(VALID[label])


@pytest.mark.parametrize(("label", "param", "name"), _cases(accepted=False))
def test_a_hostile_option_is_refused_naming_it(label: str, param: str, name: str) -> None:
    """``equilibria(layer, seed=-1)`` leaked numpy's ``ValueError``, ``design_convergence(d,
    seed=1.5)`` a ``TypeError``, ``seed=True`` was accepted: the kinds of leak walked here."""
    value = _value(label, param, name)
    try:
        _call(VALID[label], param, value)
    except GTControlError as exc:
        assert _names(str(exc), param), f"{type(exc).__name__} does not name {param}: {exc}"
    except Exception as exc:  # a leak: show what leaked
        pytest.fail(f"{label}({param}={value!r}) leaked {type(exc).__name__}: {exc}")
    else:
        pytest.fail(f"{label}({param}={value!r}) was accepted")


@pytest.mark.parametrize(("label", "param", "name"), _cases(accepted=True))
def test_an_accepted_option_does_not_leak(label: str, param: str, name: str) -> None:
    """The values listed as valid (``time_limit=inf``: no limit) return, or raise only a
    ``GTControlError`` naming the parameter."""
    value = _value(label, param, name)
    try:
        _call(VALID[label], param, value)
    except GTControlError as exc:
        assert _names(str(exc), param), f"{type(exc).__name__} does not name {param}: {exc}"
    except Exception as exc:
        pytest.fail(f"{label}({param}={value!r}) leaked {type(exc).__name__}: {exc}")


# -- time_limit and seed: one check each, the same in every solver


#: One small call per solver of the reproducer, taking ``time_limit``.
SOLVERS = {
    "simulate": lambda tl: gt.simulate(LAYER, G2, T=1.0, time_limit=tl),
    "simulate_tokens": lambda tl: gt.simulate_tokens(
        LAYER, G2.sample(64, seed=np.random.default_rng(0)), T=1.0, time_limit=tl
    ),
    "equilibria": lambda tl: gt.equilibria(LAYER, time_limit=tl),
    "analyze": lambda tl: gt.analyze(LAYER, G2, time_limit=tl),
    "steer": lambda tl: gt.steer(
        gt.Gaussian([1.0], [[0.5]]),
        gt.Gaussian([2.0], [[1.5]]),
        1.0,
        n_layers=2,
        mode="ffn",
        time_limit=tl,
    ),
    "design_mean_matching": lambda tl: gt.design_mean_matching(
        gt.Gaussian([1.0, -2.0], [[1.0, 0.3], [0.3, 0.5]]), robustness=False, time_limit=tl
    ),
    "compare_tokens": lambda tl: gt.compare_tokens(
        LAYER, G2, T=0.5, n_tokens=(32, 64), repeats=1, time_limit=tl
    ),
}


#: The public functions with an integer ``seed``, in the order of the calls below.
_SEEDED = (
    "steer",
    "design_mean_matching",
    "compare_tokens",
    "design_token_certificate",
    "equilibria",
    "design_convergence",
    "design_robustness",
    "stabilize",
)


#: Public functions whose ``seed`` also takes ``None`` or a Generator (``as_rng``).
_RNG_SEEDS = {"simulate_tokens"}


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_huge_integer_time_limit_means_no_limit(name: str) -> None:
    """A ``time_limit`` past any float (``10**400``) is no limit, not an ``OverflowError``.

    Reproducer: ../shared/hostile-cases/01_time_limit_overflow.py.
    """
    result = SOLVERS[name](10**400)  # used to raise OverflowError in every solver
    assert result.status is not gt.Status.BUDGET_EXHAUSTED, result.message


@pytest.mark.parametrize(
    "bad", [math.nan, -1.0, 0, -(10**400), True, False, "1", [1.0], 1j, np.float64("nan")]
)
@pytest.mark.parametrize("name", ["simulate", "steer", "design_mean_matching", "compare_tokens"])
def test_a_bad_time_limit_is_refused_naming_it(name: str, bad: Any) -> None:
    """NaN, a negative, zero, a bool, a string, a list or a complex ``time_limit``: refused by name.

    Reproducer: ../shared/hostile-cases/01_time_limit_overflow.py.
    """
    with pytest.raises(InvalidParametersError, match="time_limit"):
        SOLVERS[name](bad)


def test_as_time_limit_is_the_one_check_of_a_time_limit() -> None:
    """``as_time_limit`` maps every "no limit" to ``None`` and names a huge bad value briefly.

    Reproducer: ../shared/hostile-cases/01_time_limit_overflow.py.
    """
    assert as_time_limit(None) is None and as_time_limit(2) == 2.0
    for no_limit in (math.inf, 10**400, np.float64(np.inf), 2 * MAX_TIME_LIMIT):
        assert as_time_limit(no_limit) is None
    assert Budget(10**400).time_limit is None and Budget(10**400).grace() is None
    with pytest.raises(InvalidParametersError, match=r"10\^4000"):  # no 4000-digit message
        as_time_limit(-(10**4000))


@pytest.mark.parametrize("bad", [-1, True, 1.5, math.nan, "0", None])
@pytest.mark.parametrize(
    "call",
    [
        lambda s: gt.steer(G2, G2, 1.0, n_layers=2, mode="ffn", seed=s),
        lambda s: gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False, seed=s),
        lambda s: gt.compare_tokens(LAYER, G2, T=0.5, n_tokens=(32, 64), repeats=1, seed=s),
        lambda s: gt.design_token_certificate(
            gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False).layer,
            ([1.0], [[1.0]]),
            seed=s,
        ),
        lambda s: gt.equilibria(LAYER, seed=s),
        lambda s: gt.design_convergence(
            gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False), seed=s
        ),
        lambda s: gt.design_robustness(
            gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), robustness=False).layer,
            ([1.0], [[1.0]]),
            seed=s,
        ),
        lambda s: gt.stabilize(LAYER, G2, add="head", seed=s),
    ],
    ids=list(_SEEDED),
)
def test_a_bad_seed_is_refused_naming_it(call: Any, bad: Any) -> None:
    """Every public function with an integer ``seed`` (the list is checked complete below):
    ``equilibria(seed=-1)`` leaked numpy's ``ValueError`` and ``design_convergence(seed=1.5)``
    a ``TypeError`` before they used the one check, ``as_seed``.

    Reproducer: ../shared/hostile-cases/01_time_limit_overflow.py.
    """
    with pytest.raises(InvalidParametersError, match="seed"):
        call(bad)


def test_the_bad_seed_list_names_every_public_function_with_a_seed() -> None:
    """The seeded calls above cover every public function that takes a ``seed``.

    Reproducer: ../shared/hostile-cases/01_time_limit_overflow.py.
    """
    import inspect

    with_seed = {
        name
        for name in gt.__all__
        if callable(f := getattr(gt, name))
        and not inspect.isclass(f)
        and "seed" in inspect.signature(f).parameters
    }
    assert with_seed == set(_SEEDED) | _RNG_SEEDS


def test_numeric_options_refuse_huge_integers_by_name() -> None:
    """A huge integer tolerance, iteration cap or rate is refused by name, not overflowed.

    Reproducer: ../shared/hostile-cases/01_time_limit_overflow.py.
    """
    with pytest.raises(InvalidParametersError, match="terminal_tol"):
        gt.steer(G2, G2, 1.0, n_layers=2, terminal_tol=-(10**400))
    with pytest.raises(InvalidParametersError, match="max_iter"):
        gt.steer(G2, G2, 1.0, n_layers=2, solver=gt.IpoptSettings(max_iter=10**400))
    with pytest.raises(InvalidParametersError, match="rate"):
        gt.design_mean_matching(gt.Gaussian([1.0], [[1.0]]), rate=10**400)
