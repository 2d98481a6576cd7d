"""Optimal finite-time steering of Gaussians by ``L``-layer Transformers, verified.

:func:`steer` optimizes piecewise-constant layer parameters that move ``N(m0, Σ0)`` to
``N(m1, Σ1)`` in depth ``T`` with IPOPT through CasADi, and re-simulates every returned control
with the adaptive moment integrator. The parts, one idea each:

* :mod:`.reachability`: which targets are reachable (``is_reachable``, ``check_reachable``);
* :mod:`.ot`: the closed-form geodesic (``ot_steering``) and ``kinetic_energy``;
* :mod:`.realization`: ``realize`` and ``exact_layer_steering`` (also the warm starts,
  :mod:`._warm_starts`);
* :mod:`._steer_options`: validation of the keyword options;
* :mod:`._ocp` and :mod:`._transcription`: the CasADi NLP (collocation blocks, assembly);
* :mod:`._flow` and :mod:`._flow_solve`: the flow construction (exact node-to-node layers,
  ``method="flow"``, the default from ``d = 5`` on);
* :mod:`._steer_solve`: the solve attempts within the time budget;
* :mod:`._steer_result`: verification, status and :class:`SteeringResult`.

Reference: the paper cited in :mod:`gtcontrol`, §5.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .._status import Budget, as_time_limit
from .._validation import option_values
from ..model.gaussian import Gaussian
from ..model.params import Schedule
from ._steer_options import _SteerOptions, make_plan
from ._steer_result import SteeringResult
from ._steer_solve import run

__all__ = ["SteeringResult", "steer"]


def steer(
    initial: Gaussian,
    target: Gaussian,
    T: float,
    *,
    layers: int = 10,
    mode: str = "full",
    objective: str = "kinetic",
    terminal: str = "exact",
    terminal_weight: float = 1e4,
    redundancy: str | None = None,
    regularization: float | None = None,
    entry_bounds: Mapping[str, float] | None = None,
    norm_bounds: Mapping[str, float] | None = None,
    cov_bound: float | None = None,
    intervals: int = 1,
    max_corrections: int = 3,
    terminal_tol: float = 1e-6,
    max_iter: int = 500,
    ipopt_options: Mapping[str, Any] | None = None,
    parallelization: str = "serial",
    initial_guess: Schedule | None = None,
    verify_tokens: int = 0,
    seed: int = 0,
    cache: bool = True,
    method: str = "auto",
    time_limit: float | None = None,
) -> SteeringResult:
    """Optimal ``L``-layer steering of ``initial`` to ``target`` in depth ``T``, verified.

    Parameters are constant on each layer ``[kh, (k+1)h)``, ``h = T/L``. Two methods (option
    ``method``). The flow construction (the default from ``d = 5`` on, when it applies) chains
    exact node-to-node layers between the geodesic's states at the layer switches: seconds at
    ``d = 64``, and in mode ``"full"`` a kinetic gap ~10× below the exact L-layer construction's.
    The collocation NLP covers every objective and bound: the moment dynamics
    ``dm/dt = M m + c``, ``dΣ/dt = M Σ + Σ Mᵀ`` (``M = A + V Σ B``, ``c = b + V m``, theory.md §2)
    are transcribed for IPOPT through CasADi by Gauss–Legendre collocation (degree 3 per interval;
    states ``(m, vech Σ)`` with each entry of Σ stored once; the layer function ``map``-ped over
    the layers; exact first and second derivatives). The objective is the kinetic energy
    ``∫ tr(MΣMᵀ) + |Mm + c|² dt ≥ W2²/T`` or the parameter energy; the terminal condition exact
    or a Bures–Wasserstein/KL penalty. The warm start is the closed-form geodesic realized in the
    requested mode (:func:`ot_steering`, :func:`exact_layer_steering`, :func:`realize`).

    Every returned control is re-simulated with :func:`gtcontrol.simulate` (adaptive,
    ``rtol = 1e-13``); the discretization error of the NLP is then removed by up to
    ``max_corrections`` re-solves with shifted terminal data. Every loop is capped (IPOPT's
    ``max_iter``, ``max_corrections``, at most three starts; in the flow construction a fixed
    number of gauges per layer, each at most 40 re-simulations); ``time_limit`` bounds the wall
    time.

    Parameters
    ----------
    initial
        The starting Gaussian.
    target
        The Gaussian to reach, of the same dimension; it must be reachable in ``mode``.
    T
        Depth, positive.
    layers
        Number of layers ``L``.
    mode
        ``"full"`` (``A, b, V, B``), ``"ffn"`` (``V = B = 0``) or ``"attention"``
        (``A = 0, b = 0`` exactly).
    objective
        ``"kinetic"``: ``∫₀ᵀ E|v|² dt`` (bounded below by ``W2²/T``); ``"parameter"``: the depth-
        integrated parameter energy ``Σ_k h (|A_k|² + |b_k|² + |V_k|² + |B_k|²)``.
    terminal
        ``"exact"``: equality constraints ``m(T) = m1``, ``Σ(T) = Σ1`` (for a rank-r target in the
        reduced form ``U1ᵀ(Σ − Σ1)U1 = 0``, ``Q1ᵀ(Σ − Σ1)U1 = 0``); ``"bw"``: penalty
        ``terminal_weight · W2²(N(T), target)``; ``"kl"``: penalty
        ``terminal_weight · KL(N(T) ‖ target)`` (needs non-singular Σ0 and Σ1).
    terminal_weight
        Weight of a terminal penalty, positive.
    redundancy
        How ``mode="full"`` treats the flat directions (``A`` and ``V Σ B`` enter only through
        their sum): ``"fixed"`` eliminates them: ``V_k, B_k`` are held at a gauge and only
        ``A_k, b_k`` are optimized (they span every constant field, so nothing is lost for
        reachability). Two gauges are solved and the lower energy is returned: the
        curvature-matched attention of the closed form (``V Σ(t) B`` then reproduces the
        geodesic's field variation ``dM/dt = −M²`` inside each layer) and ``V = B = 0``; so the
        result is never worse than the ``"ffn"`` optimum. ``"joint"`` optimizes all four with the
        Tikhonov term of ``regularization``, from the minimum-norm split. ``None``: ``"fixed"``
        for the kinetic objective, ``"joint"`` for the parameter objective.
    regularization
        Weight ε ≥ 0 of ``ε Σ_k h |θ_k|²`` added to the kinetic objective over the optimized
        parameters: it gives the flat directions curvature ``2εh``. The reported ``cost`` excludes
        it. ``None``: ``1e-4``, or ``1e-3`` in attention mode with a singular Σ0.
    entry_bounds
        Per parameter name (``"A"``, ``"b"``, ``"V"``, ``"B"``): a bound on the absolute value of
        every entry. Only optimized parameters may be bounded.
    norm_bounds
        Per parameter name: a bound on the Frobenius norm of each layer's matrix.
    cov_bound
        Bound on ``|Σ(t)|_F`` at every collocation point (the re-simulated maximum is reported in
        ``stats["cov_norm_max"]``); required for ``objective="parameter"`` with attention.
    intervals
        Collocation intervals per layer (Gauss–Legendre, degree 3, order 6).
    max_corrections
        Number ``≥ 0`` of discretization corrections: after each converged solve the control is
        re-simulated and the NLP's terminal data are shifted by the re-simulated terminal miss
        (exact terminal only) before re-solving from the last iterate.
    terminal_tol
        ``success`` requires the re-simulated terminal Bures–Wasserstein error to be at most this.
    max_iter
        IPOPT iteration limit per solve (running out gives ``Status.BUDGET_EXHAUSTED``).
    ipopt_options
        Extra IPOPT options (names with or without the ``ipopt.`` prefix).
    parallelization
        CasADi ``map`` evaluation of the layers: ``"serial"``, ``"thread"`` or ``"openmp"``.
    initial_guess
        A :class:`Schedule` of ``L`` single-head layers to start from instead of the closed form.
    verify_tokens
        When positive, also move that many tokens sampled from ``initial`` through the control
        with the token-level simulator; the terminal error of their empirical Gaussian is
        reported in ``stats["token_terminal_error"]`` (a finite-N check: it is ``O(N^{-1/2})``).
    seed
        Seed of the token sample of ``verify_tokens``.
    cache
        Reuse the symbolic NLP of an earlier call with the same structure.
    method
        ``"collocation"``: the CasADi/IPOPT NLP above (every objective, terminal condition and
        bound). ``"flow"``: no NLP; exact node-to-node layers between the geodesic's states at the
        layer switches (docs/steering.md §5, "Flow construction"): ``"ffn"`` is the exact
        L-layer construction, ``"full"`` keeps per layer the lowest-energy of that layer and a
        few attention gauges shot onto the next node (never worse than the exact construction),
        ``"attention"`` shoots node-to-node attention layers (the exact attention construction
        is kept when cheaper). It needs the kinetic objective, the exact terminal condition, no
        bounds, no ``initial_guess``, ``redundancy="fixed"`` and a non-singular Σ0.
        ``"auto"``: ``"flow"`` where it applies from ``d ≥ 5`` (``"full"``, ``"attention"``) or
        ``d ≥ 9`` (``"ffn"``), else ``"collocation"``.
    time_limit
        Wall-clock budget in seconds (``None``: no limit). Each IPOPT solve gets the remaining
        budget as its maximal wall time; when it is spent no further start or correction is
        tried, and the best iterate so far (the starting control if no solve ran, or a feasible
        ``initial_guess`` when no iterate reaches the target) is returned with
        ``Status.BUDGET_EXHAUSTED``. The flow construction checks it between re-simulations and
        returns the best feasible control built so far (at worst the exact construction).
        Building the NLP (CasADi's exact Hessian, one native call: seconds for ``d ≥ 8`` the
        first time, minutes for ``d ≥ 16``) cannot be interrupted: a cost model refuses it up
        front when its estimate exceeds the time left (the message names both), and the
        starting control is returned. The verifying re-simulations run within the budget, plus
        at most half of the ``max(1 s, 10 %)`` tolerance for the final verification; a control
        whose verification runs out is returned unverified with ``BUDGET_EXHAUSTED``. When not
        even a closed-form start fits (``d = 256``: seconds), the identity control is returned.

    Returns
    -------
    SteeringResult
        ``status`` is ``SUCCESS`` when the re-simulated control reaches the target within
        ``terminal_tol``; otherwise the best iterate with ``BUDGET_EXHAUSTED`` (``time_limit``
        or ``max_iter``), ``INFEASIBLE`` (e.g. under bounds), ``BLOWUP``/``OVERFLOW`` or
        ``FAILED``; ``message`` says why and quotes IPOPT's return status.

    Raises
    ------
    UnreachableTargetError
        If the target is not reachable in ``mode`` (rank change; pure-attention invariants).
    InvalidParametersError, InvalidGaussianError
        On malformed input or options.

    References
    ----------
    Alcalde, Ji, Zuazua, arXiv:2606.07600 (2026), §5.

    Examples
    --------
    >>> from gtcontrol import Gaussian
    >>> g0, g1 = Gaussian([1.0], [[0.5]]), Gaussian([2.0], [[1.5]])
    >>> res = steer(g0, g1, 1.0, layers=3, mode="ffn")
    >>> res.status, res.stats["ipopt_status"]
    (<Status.SUCCESS: 'success'>, 'Solve_Succeeded')
    >>> bool(res.terminal_error < 1e-6), bool(res.kinetic_energy >= res.lower_bound)
    (True, True)
    """
    clock = time.perf_counter()
    opts = _SteerOptions(**option_values(_SteerOptions, locals()))
    budget = Budget(as_time_limit(time_limit))
    return run(make_plan(initial, target, T, layers, mode, opts), budget, clock)
