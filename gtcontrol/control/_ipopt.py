"""The IPOPT iteration callback that enforces a wall-clock deadline (steering and design).

CasADi fixes IPOPT's options when it builds a solver, and built solvers are cached, so the
time limit of each solve is enforced by an iteration callback whose ``deadline`` is set per
solve; IPOPT then stops with ``User_Requested_Stop`` and returns its current iterate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import casadi as ca

__all__ = ["STOPPED", "IpoptDeadline"]

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
