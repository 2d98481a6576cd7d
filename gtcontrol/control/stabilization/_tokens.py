"""The token runs of one :func:`gtcontrol.stabilize` call (:class:`TokenRuns`).

Two runs of ``N`` real tokens from the token check's start and seed
(:func:`gtcontrol.design_token_certificate`, in float32): the stabilized layer's, the check
itself, and the given layer's, reported beside it. The given layer's does not depend on the
design: it is kept across designs, and with numpy's BLAS on one thread it runs in a thread of
its own from the start of the call.
"""

from __future__ import annotations

import functools
import math
import threading
from concurrent.futures import Future, wait

import numpy as np

from ..._jobs import in_background
from ..._status import Budget, Status, cancellable
from ...model.params import Layer
from ..design import TokenCertificate, design_token_certificate
from ._plan import Plan

__all__ = ["TokenRuns"]

#: Seconds a wait for the background run may last past the call's deadline
#: (:meth:`TokenRuns.wait`).
_GRACE = 0.25
#: Pair and tolerance of the stabilized layer's token run (:meth:`TokenRuns.check`). Not the
#: cheaper third-order pair: on tokens that run away its steps collapse (docs/benchmarks.md).
_TOKEN_METHOD = "RK45"
_TOKEN_RTOL = 1e-2
#: The check's requirement, ``W2 ≤ _W2_FACTOR ×`` the sampling floor, holds after the first
#: step to reach each of ``T/16, T/8, T/4, T/2`` and at ``T``: the stabilized layer's run stops,
#: failed, at the first where it does not, since the depth left cannot change the verdict
#: (docs/benchmarks.md).
_W2_FACTOR = 2.0
#: The given layer's run, a report beside the check, stops once its W2 is this many sampling
#: floors: a layer being stabilized sends its tokens that far within a fraction of ``T``.
_AWAY = 10.0


class TokenRuns:
    """The token check of each design and the given layer's run, kept across designs."""

    def __init__(self, plan: Plan, budget: Budget) -> None:
        self.plan = plan
        self.budget = budget
        # the given layer's token runs, by token count and depth, and the one running in the
        # background (:meth:`start`) with its cancel event
        self._untouched: dict[tuple[int, float], TokenCertificate] = {}
        self._background: tuple[tuple[int, float], Future[TokenCertificate | None]] | None = None
        self._cancel = threading.Event()

    def start(self) -> None:
        """Start the given layer's token run in a thread, when jobs run in threads
        (:func:`~gtcontrol._jobs.threaded`): it does not depend on the design,
        so it takes the core that the design of ``A, b`` and the base spectrum (on the caller's
        thread) leave idle, and is ready by the first check. :meth:`close` cancels it
        if no result needs it, and waits for it no longer than the budget allows."""
        key = self.plan.token_key()
        if key is None or not self.plan.parallel or not self.plan.untouched:
            return
        run = functools.partial(self.run_untouched, *key)
        self._background = (key, in_background(run, self._cancel, "gtcontrol-untouched"))

    def running(self) -> bool:
        """Whether the background token run (:meth:`start`) still runs."""
        return self._background is not None and not self._background[1].done()

    def in_background(self, key: tuple[int, float] | None) -> bool:
        """Whether the given layer's run of ``key`` is the background one."""
        return self._background is not None and self._background[0] == key

    def close(self) -> None:
        """End the call's background run: cancelled when no result took it, and waited for
        (it ends at its next field evaluation), so no work outlives the call; with a time
        limit, no longer than ``_GRACE`` past it (a run left then ends at its next check)."""
        if self._background is not None:
            self._cancel.set()
            self.wait()  # an error there concerns no result
            self._background = None

    def wait(self, most: float = math.inf) -> bool:
        """Wait for the background run, at most ``most`` seconds and never past the call's
        deadline by more than ``_GRACE``: it checks the budget only between two token field
        evaluations, seconds apart at scale on a busy machine, so past the deadline it is left
        to end at its next check (cancelled). Whether it has ended."""
        assert self._background is not None
        left = self.budget.remaining()
        timeout = min(most, left + _GRACE) if math.isfinite(left) else most
        done, _ = wait([self._background[1]], timeout=None if math.isinf(timeout) else timeout)
        return bool(done)

    def check(
        self, final: Layer, n_tok: int, t_end: float, cancel: threading.Event | None = None
    ) -> TokenCertificate | None:
        """The stabilized layer's token check, by an error-controlled pair (Dormand–Prince
        5(4), :data:`_TOKEN_METHOD`): a large gauge ``s`` makes the token field stiff where the
        moment model is not, and a fixed-step RK4 at the norm rule's steps can diverge there.
        Its ``rtol = 1e-2`` bounds the accumulated local errors at 1e-2 of the tokens' scale,
        so the W2 they can move is about ``√2 · 1e-2`` of the tokens' RMS norm, under a tenth
        of the sampling floor at N = 1024 and d = 384 (where the floor is 0.19 of that norm;
        docs/benchmarks.md). The requirement ``W2 ≤ 2 ×`` the floor holds after the first step
        to reach each of ``T/16, T/8, …`` and at ``T``: the run stops, failed, at the first
        where it does not. Setting
        ``cancel`` ends it at its next field evaluation (``c`` is about to grow)."""
        if self.budget.exhausted:
            return None
        if cancel is None:
            return self._run(final, n_tok, t_end, check=True)
        with cancellable(cancel):
            return self._run(final, n_tok, t_end, check=True)

    def untouched(self, n_tok: int, t_end: float) -> TokenCertificate | None:
        """The given layer's tokens, from the token check's start and seed, until they are
        :data:`_AWAY` × the floor away (checked at the steps that reach ``T/16, T/8, …``, in
        one run): a layer that is being stabilized usually sends them away
        within a fraction of ``T``, and that depth says so at a fraction of the cost. The run
        does not depend on the design: it is kept for the next ``c``."""
        key = (n_tok, t_end)
        if key in self._untouched:
            return self._untouched[key]
        if self._background is not None and self._background[0] == key:
            if not self.wait():
                self._cancel.set()  # out of time: no result waits for it
                return None
            untouched = self._background[1].result()
            self._background = None
        else:
            untouched = self.run_untouched(n_tok, t_end)
        if untouched is not None and untouched.status is not Status.BUDGET_EXHAUSTED:
            self._untouched[key] = untouched
        return untouched

    def run_untouched(self, n_tok: int, t_end: float) -> TokenCertificate | None:
        """One run of the given layer's tokens (:meth:`untouched` keeps it)."""
        if self.budget.exhausted:
            return None
        return self._run(self.plan.layer, n_tok, t_end)

    def _run(
        self, lay: Layer, n_tok: int, depth: float, *, check: bool = False
    ) -> TokenCertificate:
        return design_token_certificate(
            lay,
            self.plan.target,
            n_tokens=n_tok,
            initial=self.plan.token_start,
            T=depth,
            method=_TOKEN_METHOD if check else "rk4",
            rtol=_TOKEN_RTOL if check else None,
            seed=self.plan.seed,
            min_token_ess=0.0,
            w2_factor=_W2_FACTOR,
            n_points=2,
            stop_factor=_W2_FACTOR if check else _AWAY,
            # float32 halves the cost at d = 385, N = 1024; its rounding is far below
            # the sampling floor that W2 is compared with
            dtype=np.float32,
            time_limit=self.budget.left_as_limit(),
        )
