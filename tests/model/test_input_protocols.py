"""What the simulators accept from a user, checked at the door: a horizon too small to divide
by, a control written outside gtcontrol, a ``stop_when`` that answers an array, depths that are
not numbers, torch tensors with an autograd graph, float32 tokens at the edge of their range,
and a schedule of a million layers under a time limit.

Each case failed before: a raw numpy/torch exception, a success claimed on NaN, or a run that
kept its time limit only after seconds of set-up (the fourth hostile review, 2026-12-07).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import allowed, refused, timed

import gtcontrol as gt
from gtcontrol import (
    Gaussian,
    GTControlError,
    Layer,
    Schedule,
    Status,
    affine_velocity,
    moment_field,
    simulate,
    simulate_closure,
    simulate_tokens,
)
from gtcontrol.analysis.filtering import KalmanData, kalman_covariance
from gtcontrol.analysis.riccati import riccati_flow
from gtcontrol.model.finite_n import ess_fraction, worst_ess_fraction

LAYER = Layer(A=[[0.3, -0.4], [0.4, 0.2]], B=np.eye(2), V=-1.0)
G0 = Gaussian([1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
TOKENS = G0.sample(32, seed=0)


def _refused(call: Callable[[], Any], name: str) -> str:
    """:func:`helpers.refused` with any :class:`GTControlError` (a Gaussian's own)."""
    return refused(call, name, GTControlError)


# -- horizons: a subnormal positive number is refused ------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: Schedule([LAYER], 5e-324),
        lambda: simulate(LAYER, G0, 5e-324),
        lambda: gt.ot_steering(G0, Gaussian(np.zeros(2), np.eye(2)), 5e-324),
        lambda: gt.design_convergence(
            gt.design_mean_matching(Gaussian([1.0], [[1.0]]), robustness=False), T=5e-324
        ),
    ],
    ids=["Schedule", "simulate", "ot_steering", "design_convergence"],
)
def test_a_subnormal_horizon_is_refused_by_name(call: Callable[[], Any]) -> None:
    """``T = 5e-324`` used to pass: ``design_convergence`` then claimed success with NaN
    errors, ``ot_steering`` success with an infinite energy, a schedule divided by zero."""
    assert "smallest normal float" in _refused(call, "T")


def test_the_smallest_normal_horizon_still_runs() -> None:
    """The bound is the smallest normal float, not a guess at a useful depth."""
    traj = simulate(LAYER, G0, 1e-300)
    assert traj.success and traj.t[-1] == 1e-300


# -- a million layers under a time limit -------------------------------------------------------


@pytest.mark.parametrize("solver", [simulate, gt.kinetic_energy])
def test_a_million_layer_schedule_keeps_a_small_time_limit(solver: Callable[..., Any]) -> None:
    """The recording depths of every segment were built before the budget was looked at
    (7 s for 10⁶ layers); they are now made as each segment starts."""
    schedule = Schedule([LAYER] * 1_000_000, 1.0)
    res, seconds = timed(lambda: solver(schedule, G0, time_limit=0.5))
    assert res.status is Status.BUDGET_EXHAUSTED
    assert seconds < allowed(0.5), seconds


# -- torch tensors ------------------------------------------------------------------------------


def test_torch_weights_that_require_grad_are_read_as_their_values() -> None:
    """``nn.Linear`` weights require grad: numpy cannot read them without ``detach``."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lins = [torch.nn.Linear(4, 4, bias=False) for _ in range(4)]
    weights = [lin.weight for lin in lins]
    assert all(w.requires_grad for w in weights)
    from_torch = Layer.from_projections(*weights, n_heads=2)
    from_numpy = Layer.from_projections(*(w.detach().numpy() for w in weights), n_heads=2)
    for (v1, b1), (v2, b2) in zip(from_torch.heads, from_numpy.heads, strict=True):
        np.testing.assert_array_equal(v1, v2)
        np.testing.assert_array_equal(b1, b2)
    g = Gaussian(torch.zeros(2, requires_grad=True), torch.eye(2, dtype=torch.bfloat16))
    np.testing.assert_array_equal(g.cov, np.eye(2))
    _refused(lambda: Gaussian(torch.zeros(2, dtype=torch.complex64), torch.eye(2)), "mean")


# -- controls written outside gtcontrol ----------------------------------------------------------


class _Control:
    """A control as a user writes one: ``T``, ``breakpoints`` and ``layer_at``."""

    def __init__(self, breakpoints: Any = (0.0, 1.0), layer_at: Any = None, T: Any = 1.0):
        self.T, self.breakpoints = T, breakpoints
        self._layer_at = layer_at or (lambda t: LAYER)

    def layer_at(self, t: float) -> Any:
        return self._layer_at(t)


@pytest.mark.parametrize(
    "control",
    [
        _Control(breakpoints=()),
        _Control(breakpoints=(0.0,)),
        _Control(breakpoints=None),
        _Control(breakpoints="ab"),
        _Control(breakpoints=(0.0, 0.7, 0.3, 1.0)),
        _Control(breakpoints=(0.0, float("nan"), 1.0)),
        _Control(breakpoints=(0.5, 1.0)),
        _Control(breakpoints=(0.0, 2.0)),
        _Control(layer_at=lambda t: "x"),
        _Control(T=-1.0),
    ],
    ids=[
        "empty",
        "one",
        "None",
        "str",
        "unsorted",
        "nan",
        "late-start",
        "past-T",
        "not-a-layer",
        "T",
    ],
)
@pytest.mark.parametrize(
    "solver",
    [
        lambda c: simulate(c, G0),
        lambda c: simulate_tokens(c, TOKENS),
        lambda c: gt.simulate_discrete(c, G0),
        lambda c: simulate_closure(c, G0),
        lambda c: gt.kinetic_energy(c, G0),
        lambda c: gt.compare_tokens(c, G0, n_tokens=(32, 64), repeats=1),
    ],
    ids=["simulate", "simulate_tokens", "simulate_discrete", "closure", "energy", "compare"],
)
def test_a_control_that_breaks_its_protocol_is_refused_by_name(
    control: _Control, solver: Callable[[Any], Any]
) -> None:
    """NaN breakpoints used to make ``simulate_tokens`` claim success and ``simulate`` spin at
    depth 0 until its time limit; the others raised IndexError, ZeroDivisionError, ..."""
    _refused(lambda: solver(control), "control.")


@pytest.mark.parametrize(
    "solver",
    [
        lambda c: simulate(c, G0),
        lambda c: simulate_tokens(c, TOKENS),
        lambda c: simulate_closure(c, G0),
        lambda c: gt.kinetic_energy(c, G0),
    ],
    ids=["simulate", "simulate_tokens", "closure", "energy"],
)
def test_a_control_whose_dimension_changes_partway_is_refused_mid_run(
    solver: Callable[[Any], Any],
) -> None:
    """Not a failed step nor an overflow, as the integrators used to report it: bad input."""
    wider = Layer(A=-np.eye(3))
    control = _Control((0.0, 0.5, 1.0), lambda t: LAYER if t < 0.5 else wider)
    assert "expected a Layer of dimension 2, got dimension 3" in _refused(
        lambda: solver(control), "control.layer_at"
    )


def test_a_well_formed_user_control_runs_as_a_schedule_does() -> None:
    """The check changes nothing: a piecewise-constant user control gives the schedule's
    moments bit for bit (its flag is passed through), a general one to the tolerance."""
    other = Layer(A=-np.eye(2), B=np.eye(2), V=0.5)
    control = _Control((0.0, 0.5, 1.0), lambda t: LAYER if t < 0.5 else other)
    theirs = simulate(Schedule([LAYER, other], 1.0), G0)
    mine = simulate(control, G0)
    control.piecewise_constant = True  # type: ignore[attr-defined]
    flagged = simulate(control, G0)
    assert mine.success and theirs.success and flagged.success
    np.testing.assert_array_equal(flagged.final.cov, theirs.final.cov)
    np.testing.assert_allclose(mine.final.cov, theirs.final.cov, rtol=1e-9)


# -- stop_when ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["DOP853", "rk4"])
def test_a_stop_when_that_answers_an_array_is_refused(method: str) -> None:
    _refused(
        lambda: simulate_tokens(LAYER, TOKENS, T=1.0, method=method, stop_when=lambda t, x: x > 0),
        "stop_when",
    )


def test_a_stop_when_of_the_wrong_arity_is_refused_before_the_run() -> None:
    _refused(lambda: simulate_tokens(LAYER, TOKENS, T=1.0, stop_when=lambda t: True), "stop_when")


def test_a_stop_when_answering_a_numpy_bool_or_a_one_element_array_stops() -> None:
    for answer in (np.True_, np.array([True])):
        run = simulate_tokens(LAYER, TOKENS, T=1.0, stop_when=lambda t, x, a=answer: a)
        assert run.success and run.t[-1] < 1.0


# -- field evaluations and depths -----------------------------------------------------------------


@pytest.mark.parametrize("field", [moment_field, affine_velocity])
@pytest.mark.parametrize(
    ("mean", "cov", "name"),
    [
        (np.zeros(3), np.eye(2), "mean"),
        (np.zeros(2), None, "cov"),
        (np.zeros(2), "abc", "cov"),
        (np.zeros(2) + 1j, np.eye(2), "mean"),
        ([10**400, 0], np.eye(2), "mean"),
        (np.zeros(2), np.eye(3), "cov"),
    ],
)
def test_the_field_refuses_moments_of_the_wrong_kind(
    field: Callable[..., Any], mean: Any, cov: Any, name: str
) -> None:
    _refused(lambda: field(LAYER, mean, cov), name)


def test_the_field_takes_lists_as_arrays() -> None:
    dm, ds = moment_field(LAYER, [1.0, -0.5], [[1.0, 0.3], [0.3, 0.5]])
    want = moment_field(LAYER, np.asarray(G0.mean), np.asarray(G0.cov))
    np.testing.assert_array_equal(dm, want[0])
    np.testing.assert_array_equal(ds, want[1])


@pytest.mark.parametrize("times", ["abc", {"a": 1}, [0, 10**400], [0.0, 0.5 + 1j, 1.0]])
def test_depths_that_are_not_real_numbers_are_refused(times: Any) -> None:
    """Complex depths used to lose their imaginary part silently (and report success)."""
    data = KalmanData(np.eye(2), np.eye(2), np.eye(2))
    _refused(lambda: kalman_covariance(data, np.eye(2), times), "times")
    _refused(lambda: riccati_flow(LAYER, G0, times), "times")


def test_ragged_depths_and_queries_are_refused() -> None:
    _refused(lambda: simulate_tokens(LAYER, TOKENS, T=1.0, times=[1.0, [1.0]]), "times")
    _refused(lambda: ess_fraction(LAYER, G0, [[1.0], [1.0, 2.0]]), "queries")


# -- float32 tokens at the edge of their range ----------------------------------------------------


@pytest.mark.parametrize(
    "layer", [Layer(A=5.0 * np.eye(2)), Layer(A=np.eye(2), B=np.eye(2), V=3.0)], ids=["A", "head"]
)
def test_float32_tokens_that_grow_past_their_range_end_with_overflow(layer: Layer) -> None:
    """They used to creep to float32's infinities in ever shorter steps until the time limit
    (3 s, ``BUDGET_EXHAUSTED``); float64 carries the same tokens to the horizon."""
    run, seconds = timed(
        lambda: simulate_tokens(layer, TOKENS, T=30.0, dtype=np.float32, time_limit=3.0)
    )
    assert run.status is Status.OVERFLOW, run.message
    assert seconds < 1.0
    assert "1e+30" in run.message
    wide = simulate_tokens(layer, TOKENS, T=30.0, time_limit=3.0)
    assert wide.success, wide.message


@pytest.mark.parametrize("scale", [1e30, 1e149])
def test_float32_tokens_beyond_their_range_are_refused(scale: float) -> None:
    message = _refused(
        lambda: simulate_tokens(LAYER, scale * TOKENS, T=0.5, dtype=np.float32), "tokens"
    )
    assert "dtype=numpy.float64" in message


def test_float64_tokens_out_of_range_at_the_start_overflow_at_depth_zero() -> None:
    run = simulate_tokens(LAYER, 1e100 * TOKENS, T=0.5)
    assert run.status is Status.OVERFLOW and run.overflow_time == 0.0


@pytest.mark.parametrize(
    "layer",
    [
        Layer(A=1e149 * np.array([[0.3, -0.4], [0.4, 0.2]]), B=np.eye(2), V=-1.0),
        Layer(A=np.eye(2), B=np.eye(2), V=1e149),
    ],
    ids=["A", "V"],
)
def test_a_field_past_the_float_range_overflows_at_the_first_step(layer: Layer) -> None:
    """Hairer's starting step divided by a zero first guess (``ZeroDivisionError``)."""
    run = simulate_tokens(layer, TOKENS, T=1.0)
    assert run.status is Status.OVERFLOW and run.overflow_time < 1e-12


def test_a_kalman_flow_that_overflows_at_once_fails_without_warnings() -> None:
    """No step taken: scipy's ``sol.y`` is a list (``AttributeError``), after three warnings."""
    data = KalmanData(np.eye(2), np.eye(2), np.eye(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow = kalman_covariance(data, 1e149 * np.eye(2), [0.0, 0.5, 1.0])
    assert flow.status is Status.FAILED
    assert np.isnan(flow.cov[1:]).all() and flow.cov[0, 0, 0] == 1e149


# -- layers at the edge of the accepted magnitudes: answers, not warnings ------------------------

_HUGE = Layer(A=1e149 * np.array([[0.3, -0.4], [0.4, 0.2]]), B=np.eye(2), V=-1.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: gt.equilibria(_HUGE),
        lambda: gt.solve_bernoulli(gt.riccati_form(_HUGE)),
        lambda: gt.blowup_analysis(Layer(A=-1e149 * np.eye(2), B=0.1 * np.eye(2), V=0.5), G0),
        lambda: gt.design_certificate(
            Layer(A=-np.eye(2), B=np.eye(2), V=-0.5), (np.zeros(2), 1e-300 * np.eye(2))
        ),
        lambda: Gaussian(1e149 * np.ones(2), 1e149 * np.eye(2)).kl_divergence(
            Gaussian(np.zeros(2), 1e-300 * np.eye(2))
        ),
        lambda: worst_ess_fraction(_HUGE, Gaussian(1e149 * np.ones(2), 1e149 * np.eye(2)))[0],
    ],
    ids=["equilibria", "solve_bernoulli", "blowup_analysis", "design_certificate", "kl", "ess"],
)
def test_magnitudes_at_the_edge_give_answers_without_warnings(call: Callable[[], Any]) -> None:
    """slycot casts the eigenvalues it returns to complex64 (an overflow past 3.4e38); a norm
    of a 1e-300 target underflowed to a division by zero; a divergence past the float range
    overflowed: each printed numpy's RuntimeWarning on the user's terminal."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = call()
    if isinstance(out, float):  # the divergence is infinite, the ESS fraction nil
        assert out in (math.inf, 0.0)


@pytest.mark.parametrize(
    ("m_mat", "c"),
    [(-np.eye(2), np.array([1e149, 1e149])), (np.full((2, 2), 1e149), np.array([1.0, -0.5]))],
    ids=["c", "M"],
)
def test_realize_at_the_edge_keeps_the_feed_forward_realization(
    m_mat: np.ndarray, c: np.ndarray
) -> None:
    """The minimum-norm head split squares the data and raised ``LinAlgError`` past the float
    range; the split V = B = 0 (the feed-forward alone) realizes ``M, c`` exactly."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer = gt.realize(m_mat, c, G0)
    got_m, got_c = affine_velocity(layer, np.asarray(G0.mean), np.asarray(G0.cov))
    np.testing.assert_allclose(got_m, m_mat, rtol=1e-12)
    np.testing.assert_allclose(got_c, c, rtol=1e-12)


def test_stabilize_past_the_float_range_fails_with_a_reason() -> None:
    """The numerical abscissa's eigensolver met an infinite matrix (``LinAlgError``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = gt.stabilize(_HUGE, Gaussian(np.zeros(2), 1e-300 * np.eye(2)), time_limit=2.0)
    assert res.status is Status.FAILED and res.message


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (
            lambda: gt.design_mean_matching(Gaussian([1.0, -0.5], 1e-300 * np.asarray(G0.cov))),
            "target",
        ),
        (lambda: gt.exact_layer_steering(G0, Gaussian(np.zeros(2), np.eye(2)), 1e-300), "T"),
        (
            lambda: gt.exact_layer_steering(
                G0, Gaussian(np.zeros(2), np.eye(2)), 1e300, n_layers=2
            ),
            "T",
        ),
        (lambda: gt.compare_filter(Layer(A=-np.eye(2), B=np.eye(2), V=-1.0), G0, T=1e300), "T"),
    ],
    ids=["design-target", "steer-T-small", "steer-T-large", "compare_filter-T"],
)
def test_a_refusal_names_the_users_input_not_an_internal_matrix(
    call: Callable[[], Any], name: str
) -> None:
    """They named the internal ``B``, ``A``, ``b`` or ``times`` the input became."""
    assert _refused(call, name).startswith(f"{name}:")


@pytest.mark.parametrize("dim", [10**12, 10**6, 2049])
def test_a_layer_of_an_unsupported_dimension_is_refused_by_name(dim: int) -> None:
    """``Layer(dim=10**6)`` raised MemoryError and ``10**12`` numpy's ValueError, where
    ``Gaussian.standard`` already refused them by the package's dimension cap."""
    assert "supported maximum" in _refused(lambda: Layer(dim=dim), "dim")


# -- a mean residual past the float range, a horizon of 1e300, a design's bias named by its input -
# (linearization_spectrum's equilibrium check, steer's kinetic energy, design_mean_matching's b)

_EDGE = 1e149


@pytest.mark.parametrize(
    "layer",
    [
        Layer(A=_EDGE * np.eye(2), V=-_EDGE * np.eye(2), B=np.eye(2)),
        Layer(A=_EDGE * np.eye(2), V=-1.0, B=np.eye(2)),
    ],
    ids=["accepted-before", "refused-after-a-warning"],
)
def test_linearization_spectrum_refuses_a_mean_at_the_edge_without_a_warning(layer: Layer) -> None:
    """``‖A m*‖`` of a 1e298 vector overflowed its squares: numpy's RuntimeWarning, then an
    infinite scale that read the mean's residual as 0, so the first layer's ``N(m*, I)`` passed
    for an equilibrium (``dm/dt = −1e298``)."""
    call = lambda: gt.linearization_spectrum(layer, Gaussian(np.full(2, _EDGE), np.eye(2)))  # noqa: E731
    assert "mean" in _refused(call, "equilibrium")


def test_linearization_spectrum_at_an_equilibrium_of_mean_1e149_answers_without_warnings() -> None:
    """``A m*`` and ``V m*`` cancel at 1e298: the scaled norms find the residual exact."""
    layer = Layer(
        A=_EDGE * np.array([[0.0, 1.0], [-2.0, 0.0]]),
        V=_EDGE * np.array([[0.0, 0.0], [1.0, 0.0]]),
        B=np.eye(2),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = gt.linearization_spectrum(layer, Gaussian([_EDGE, 0.0], np.eye(2)))
    assert spec.success, spec.message
    assert spec.residual == (0.0, 0.0)
    assert spec.mean_abscissa == 0.0  # K = 1e149 [[0, 1], [0, 0]]


def test_steer_over_a_horizon_of_1e300_measures_its_energy_without_warnings() -> None:
    """Simpson's rule multiplied depth spacings of 1e299 (an overflow RuntimeWarning from scipy)
    and the velocities of 1e-300 squared to 0: a kinetic energy 0, below its bound W2²/T."""
    g0, g1 = Gaussian([0.0, 0.0], np.eye(2)), Gaussian([1.0, 0.0], np.eye(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = gt.steer(g0, g1, 1e300)
        energy = gt.kinetic_energy(res.controls, g0)
    assert res.success, res.message
    assert res.lower_bound == pytest.approx(1e-300, rel=1e-12)  # W2² = 1
    assert res.kinetic_energy == pytest.approx(res.lower_bound, rel=1e-3)  # the geodesic's
    assert energy.energy == pytest.approx(res.kinetic_energy, rel=1e-9)
    assert 0.0 < res.parameter_energy < math.inf


def test_a_design_whose_bias_leaves_the_float_range_is_refused_by_the_targets_name() -> None:
    """The heads scaled for ``min_ess`` make ``b = −K m*`` 1e151: refused as ``b:``, a name the
    user never gave."""
    call = lambda: gt.design_mean_matching(Gaussian(np.full(2, _EDGE), np.eye(2)))  # noqa: E731
    message = _refused(call, "target")
    assert message.startswith("target: the mean") and "b = −K m*" in message


def test_a_closed_form_control_over_a_horizon_past_the_entry_bound_is_measured() -> None:
    """Breakpoints are depths, not entries of a product: the control check refused
    ``ot_steering``'s ``[0, 1e200]`` as ``control.breakpoints`` (the entry bound 1e150), though
    ``ot_steering`` and every schedule take such a horizon. The energy is ``W2²/T``."""
    g0 = gt.Gaussian([0.0, 0.0], np.eye(2))
    g1 = gt.Gaussian([1.0, 0.0], 2.0 * np.eye(2))
    w2_squared = 1.0 + 2.0 * (3.0 - 2.0 * math.sqrt(2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        energy = gt.kinetic_energy(gt.ot_steering(g0, g1, 1e200), g0)
    assert energy.status is gt.Status.SUCCESS
    assert energy.energy * 1e200 == pytest.approx(w2_squared, rel=1e-12)
