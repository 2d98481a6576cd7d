"""Reachable sets of Gaussian Transformer dynamics: which targets a steering can reach, and why not.

With time-varying parameters the moment dynamics (docs/theory.md §2)

    dm/dt = M m + c,   dΣ/dt = M Σ + Σ Mᵀ,   M = A + Σ_h V_h Σ B_h,   c = b + Σ_h V_h m,

move ``N(m0, Σ0)`` to any ``N(m1, Σ1)`` with ``rank Σ1 = rank Σ0`` in any time ``T > 0``. The
three parameter modes (``"full"``, ``"ffn"``: ``V = 0``, ``"attention"``: ``A = 0, b = 0``) have
the reachable sets of :func:`is_reachable`; :func:`check_reachable` raises with the reason.

Reference: the paper cited in :mod:`gtcontrol`, §5.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import as_choice, as_positive_int
from ..errors import InvalidGaussianError, UnreachableTargetError
from ..model.gaussian import Gaussian

__all__ = ["MODES", "check_reachable", "is_reachable"]

#: Parameter modes: which layer parameters may be non-zero.
#: ``"full"``: ``A, b, V, B``; ``"ffn"``: ``A, b`` (``V = 0``); ``"attention"``: ``V, B``
#: (``A = 0``, ``b = 0``).
MODES = ("full", "ffn", "attention")

#: A mean whose norm is at most this fraction of the problem scale counts as zero in the
#: pure-attention reachability test (a zero mean is invariant there).
ZERO_MEAN_RTOL = 1e-12


def check_mode(mode: Any) -> str:
    """Validate a parameter mode (one of :data:`MODES`)."""
    return str(as_choice("mode", mode, MODES))


#: Largest number of layers of a steering schedule: the schedule and the steering NLP grow with
#: it, and past it building them alone outlasts any time limit.
MAX_LAYERS = 1_000


def check_n_layers(n_layers: Any) -> int:
    """Validate the number of layers of a steering schedule (1 to :data:`MAX_LAYERS`)."""
    return as_positive_int("n_layers", n_layers, maximum=MAX_LAYERS)


def check_pair(initial: Any, target: Any) -> tuple[Gaussian, Gaussian]:
    """Validate two Gaussians of equal dimension."""
    for name, g in (("initial", initial), ("target", target)):
        if not isinstance(g, Gaussian):
            raise InvalidGaussianError(f"{name}: expected a Gaussian, got {type(g).__name__}")
    if initial.dim != target.dim:
        raise InvalidGaussianError(
            f"target: dimension {target.dim} does not match the initial dimension {initial.dim}"
        )
    return initial, target


def problem_scale(*gs: Gaussian) -> float:
    """``max(1, |m|, sqrt(tr Σ))`` over the Gaussians: the scale of relative zero tests."""
    return max(
        [1.0]
        + [float(np.linalg.norm(g.mean)) for g in gs]
        + [math.sqrt(float(np.trace(g.cov))) for g in gs]
    )


def is_zero_mean(g: Gaussian, scale: float) -> bool:
    """Whether the mean of ``g`` is zero relative to ``scale`` (:data:`ZERO_MEAN_RTOL`)."""
    return float(np.linalg.norm(g.mean)) <= ZERO_MEAN_RTOL * scale


def unreachable_reason(initial: Gaussian, target: Gaussian, mode: str) -> str | None:
    """Why ``target`` is not reachable from ``initial`` in ``mode``, or ``None`` if it is."""
    r0, r1 = initial.rank, target.rank
    if r0 != r1:
        return (
            f"target covariance has rank {r1} but the initial covariance has rank {r0}: "
            "every Transformer flow keeps the rank (Σ(t) = Φ(t) Σ0 Φ(t)ᵀ with Φ(t) invertible, "
            "docs/theory.md §2), so a rank change is unreachable in any mode and any time"
        )
    if mode != "attention":
        return None
    scale = problem_scale(initial, target)
    z0, z1 = is_zero_mean(initial, scale), is_zero_mean(target, scale)
    if z0 and not z1:
        return (
            "pure attention (A = 0, b = 0) keeps a zero mean at zero: dm/dt = V (I + Σ B) m, "
            f"so the target mean {target.mean.tolist()} is unreachable from mean 0"
        )
    if z1 and not z0:
        return (
            "pure attention (A = 0, b = 0) cannot bring a non-zero mean to zero in finite time: "
            "m(t) = Ψ(t) m0 with Ψ(t) invertible since dm/dt = V (I + Σ B) m is linear in m"
        )
    if initial.dim == 1 and not z0 and np.sign(initial.mean[0]) != np.sign(target.mean[0]):
        return (
            "in d = 1 pure attention (A = 0, b = 0) cannot change the sign of the mean "
            f"(dm/dt = v (1 + σ B) m): initial mean {initial.mean[0]:g}, "
            f"target mean {target.mean[0]:g}"
        )
    return None


def is_reachable(initial: Gaussian, target: Gaussian, *, mode: str = "full") -> bool:
    """Whether some time-varying Transformer moves ``initial`` to ``target`` in finite time.

    Reachable sets from ``N(m0, Σ0)`` in any time ``T > 0`` (Alcalde, Ji, Zuazua,
    arXiv:2606.07600 (2026), §5; proofs for the modes in docs/steering.md):

    * ``"full"`` and ``"ffn"`` (``V = 0``): every ``N(m1, Σ1)`` with ``rank Σ1 = rank Σ0``.
    * ``"attention"`` (``A = 0``, ``b = 0``): the same, and in addition ``m1 = 0`` exactly when
      ``m0 = 0`` (``dm/dt = V (I + ΣB) m`` is linear in ``m``), and in ``d = 1``
      ``sign m1 = sign m0``. Means below ``1e-12`` times the problem scale count as zero.

    Parameters
    ----------
    initial
        The starting Gaussian (its covariance may be singular).
    target
        The Gaussian to reach, of the same dimension.
    mode
        ``"full"``, ``"ffn"`` or ``"attention"`` (see :data:`MODES`).

    Returns
    -------
    bool
        True when ``target`` is reachable; :func:`check_reachable` says why not.

    Raises
    ------
    InvalidGaussianError
        If an argument is not a :class:`Gaussian` or the dimensions differ.
    InvalidParametersError
        On an unknown ``mode``.

    Examples
    --------
    >>> from gtcontrol import Gaussian
    >>> g0 = Gaussian([1.0], [[0.5]])
    >>> is_reachable(g0, Gaussian([-2.0], [[1.0]]))
    True
    >>> is_reachable(g0, Gaussian([-2.0], [[1.0]]), mode="attention")  # the sign is invariant
    False
    >>> is_reachable(g0, Gaussian([1.0], [[0.0]]))  # a rank change
    False
    """
    check_pair(initial, target)
    return unreachable_reason(initial, target, check_mode(mode)) is None


def check_reachable(
    initial: Gaussian, target: Gaussian, *, mode: str = "full"
) -> tuple[Gaussian, Gaussian]:
    """The validated pair ``(initial, target)``, or :class:`UnreachableTargetError` with the reason.

    The ``check_*`` functions of gtcontrol validate and return what they checked (like
    :func:`gtcontrol.model.gaussian.check_gaussian`); :func:`is_reachable` answers the same
    question as a bool and has the reachable sets. Solvers that need a reachable target
    (:func:`gtcontrol.steer`, :func:`gtcontrol.ot_steering`) call this check first, so an
    unreachable target is the same error everywhere.

    Parameters
    ----------
    initial
        The starting Gaussian.
    target
        The Gaussian to reach, of the same dimension.
    mode
        ``"full"``, ``"ffn"`` or ``"attention"``.

    Returns
    -------
    tuple of Gaussian
        ``(initial, target)``.

    Raises
    ------
    UnreachableTargetError
        If ``target`` is not reachable in ``mode``; the message gives the reason.
    InvalidGaussianError
        If ``initial`` or ``target`` is not a :class:`Gaussian`, or their dimensions differ.
    InvalidParametersError
        If ``mode`` is not one of :data:`MODES`.

    Examples
    --------
    >>> from gtcontrol import Gaussian, UnreachableTargetError, check_reachable
    >>> g0, g1 = Gaussian([1.0], [[0.5]]), Gaussian([-2.0], [[1.0]])
    >>> check_reachable(g0, g1) == (g0, g1)
    True
    >>> try:
    ...     check_reachable(g0, g1, mode="attention")
    ... except UnreachableTargetError as err:
    ...     print(str(err)[:60])
    target unreachable in mode 'attention': in d = 1 pure attent
    """
    check_pair(initial, target)
    reason = unreachable_reason(initial, target, check_mode(mode))
    if reason is not None:
        raise UnreachableTargetError(f"target unreachable in mode {mode!r}: {reason}")
    return initial, target
