"""IPOPT as steering and design use it: the user's settings, and the wall-clock deadline.

:class:`IpoptSettings` is the one public value for the settings of the local NLP solver of
:func:`gtcontrol.steer` and :func:`gtcontrol.design_mean_matching` (their ``solver=``).

CasADi fixes IPOPT's options when it builds a solver, and built solvers are cached, so the
time limit of each solve is enforced by an iteration callback (:class:`IpoptDeadline`) whose
``deadline`` is set per solve; IPOPT then stops with ``User_Requested_Stop`` and returns its
current iterate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import casadi as ca

from .._validation import as_positive_float, as_positive_int, set_fields
from ..errors import InvalidParametersError

__all__ = [
    "MAX_ITER",
    "STOPPED",
    "IpoptDeadline",
    "IpoptSettings",
    "casadi_options",
]

#: Cap of IPOPT's iteration limit (a finite loop; larger values are refused as absurd).
MAX_ITER = 10**6


@dataclass(frozen=True, kw_only=True)
class IpoptSettings:
    """Settings of IPOPT, the local NLP solver: one validated value for the option family.

    :func:`gtcontrol.steer` and :func:`gtcontrol.design_mean_matching` take it as ``solver=``
    (as diffrax takes ``SaveAt``); a field left ``None`` takes that function's default.

    Attributes
    ----------
    max_iter
        IPOPT's iteration limit per solve (a finite cap, at most 10⁶; running out gives
        ``Status.BUDGET_EXHAUSTED``). ``None``: 500 for ``steer``, 3000 for
        ``design_mean_matching``.
    tol
        IPOPT's convergence tolerance (and, for a design, its constraint-violation tolerance),
        positive and ``< 1e-3``. ``None``: 1e-8 for ``steer``, 1e-10 for
        ``design_mean_matching``.
    options
        Extra IPOPT options, by name with or without the ``ipopt.`` prefix (e.g.
        ``{"mu_strategy": "adaptive"}``); they override the built-in ones. For a design they
        also replace the built-in sequence of attempts (default barrier strategy, then
        adaptive).

    Raises
    ------
    InvalidParametersError
        On ``max_iter`` outside 1 … 10⁶, ``tol`` outside (0, 1e-3), or ``options`` that is not
        a mapping with string names.

    Examples
    --------
    >>> from gtcontrol import IpoptSettings
    >>> IpoptSettings(max_iter=200).max_iter
    200
    >>> dict(IpoptSettings(options={"mu_strategy": "adaptive"}).options)
    {'mu_strategy': 'adaptive'}
    """

    max_iter: int | None = None
    tol: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_iter is not None:
            as_positive_int("max_iter", self.max_iter, maximum=MAX_ITER)
        if self.tol is not None and not as_positive_float("tol", self.tol) < 1e-3:
            raise InvalidParametersError(f"tol: expected a number < 1e-3, got {self.tol!r}")
        given = {} if self.options is None else self.options
        if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
            raise InvalidParametersError(
                f"options: expected a mapping of IPOPT option names to values, got {given!r}"
            )
        set_fields(self, options=MappingProxyType(dict(given)))


def casadi_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """User IPOPT options as CasADi plugin options: ``name`` → ``ipopt.name`` (``expand`` and
    names that already have a prefix are kept)."""
    return {k if k == "expand" or "." in k else f"ipopt.{k}": v for k, v in options.items()}


#: IPOPT return status of a solve stopped by the deadline callback.
STOPPED = "User_Requested_Stop"


class IpoptDeadline(ca.Callback):
    """Asks IPOPT to stop once ``deadline`` (a ``time.perf_counter`` value) has passed.

    Parameters
    ----------
    nx, ng, np_
        Numbers of NLP variables, constraints and parameters (the callback's input sizes).
    name
        The CasADi function name.
    stop
        Optional predicate asked at every iteration as well (e.g. ``lambda: budget.exhausted``
        for a budget shared by several solves).

    Attributes
    ----------
    deadline
        ``time.perf_counter()`` value after which IPOPT is asked to stop (``inf``: never).
    fired
        Whether the callback has stopped a solve since it was last reset.
    """

    def __init__(
        self,
        nx: int,
        ng: int,
        np_: int,
        name: str = "gtcontrol_deadline",
        stop: Callable[[], bool] | None = None,
    ) -> None:
        ca.Callback.__init__(self)
        self.stop = stop
        self._sizes = {"x": nx, "lam_x": nx, "g": ng, "lam_g": ng, "f": 1, "p": np_, "lam_p": np_}
        self.deadline = math.inf
        self.fired = False
        #: Iterations of the current solve, and the progress report ``update(iterations)``
        #: (:func:`gtcontrol._progress.progress`) called at each of them.
        self.iterations = 0
        self.update: Callable[[float], None] = lambda iterations: None
        self.construct(name, {})

    def arm(self, seconds: float) -> None:
        """Set the deadline ``seconds`` from now and clear ``fired``."""
        self.deadline = time.perf_counter() + seconds
        self.fired = False
        self.iterations = 0

    def disarm(self) -> None:
        """No deadline until the next :meth:`arm` (``fired`` keeps the last solve's answer)."""
        self.deadline = math.inf

    def get_n_in(self) -> int:
        return int(ca.nlpsol_n_out())

    def get_n_out(self) -> int:
        return 1

    def get_name_in(self, i: int) -> str:
        return str(ca.nlpsol_out(i))

    def get_name_out(self, i: int) -> str:
        return "stop"

    def get_sparsity_in(self, i: int) -> Any:
        n = self._sizes.get(str(ca.nlpsol_out(i)), 0)
        return ca.Sparsity.dense(n) if n else ca.Sparsity(0, 0)

    def eval(self, arg: Any) -> list[int]:
        self.iterations += 1
        self.update(self.iterations)
        if time.perf_counter() > self.deadline or (self.stop is not None and self.stop()):
            self.fired = True
            return [1]
        return [0]
