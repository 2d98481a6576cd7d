"""One :func:`gtcontrol.stabilize` call (:class:`Call`): its plan, budget and running state,
and the steps a family calls (the design of ``A, b``, spectra, the far start's first half,
the checks of a design and its result)."""

from __future__ import annotations

from ..._linalg import FloatArray
from ..._status import Budget
from ...analysis.stability import LinearizationSpectrum
from ...model.moments import Trajectory
from ...model.params import Layer
from . import _spectra
from ._checks import finish
from ._plan import Plan
from ._report import Probes
from ._result import CheckPlan, Design, Stabilization
from ._tokens import TokenRuns
from ._verify import Verifier

__all__ = ["Call"]


class Call:
    """The state of one call: the plan, the shared budget, the layer with ``A, b`` designed
    (``base_layer``, once designed), the token runs, the verifier and the probe tokens."""

    def __init__(self, plan: Plan, budget: Budget) -> None:
        self.plan = plan
        self.budget = budget
        self.base_layer = plan.layer
        self.tokens = TokenRuns(plan, budget)
        self.verifier = Verifier(plan, budget, self.tokens)
        self.probes = Probes(plan)

    def design_ffn(self, layer: Layer) -> Layer:
        """:func:`~._spectra.design_ffn`."""
        return _spectra.design_ffn(self.plan, layer)

    def fix_bias(self, layer: Layer) -> Layer:
        """:func:`~._spectra.fix_bias`."""
        return _spectra.fix_bias(self.plan, layer)

    def spectrum(
        self, layer: Layer, *, omega: bool, k: int = 6, v0: FloatArray | None = None
    ) -> LinearizationSpectrum:
        """:func:`~._spectra.spectrum` within the call's budget."""
        return _spectra.spectrum(self.plan, self.budget, layer, omega=omega, k=k, v0=v0)

    def shifted(
        self, layer: Layer, base_layer: Layer, base: LinearizationSpectrum, shift: float
    ) -> LinearizationSpectrum | None:
        """:func:`~._spectra.shifted` within the call's budget."""
        return _spectra.shifted(self.plan, self.budget, layer, base_layer, base, shift)

    def start_vector(self, spec: LinearizationSpectrum) -> FloatArray | None:
        """:func:`~._spectra.start_vector`."""
        return _spectra.start_vector(self.plan, spec)

    def function_change(self, final: Layer) -> float:
        """:meth:`~._report.Probes.function_change`."""
        return self.probes.function_change(final)

    def background_running(self) -> bool:
        """Whether the given layer's background token run still runs."""
        return self.tokens.running()

    def first_segment(self, final: Layer, screen_at: float) -> tuple[int, Trajectory, str] | None:
        """:meth:`~._verify.Verifier.first_segment`."""
        return self.verifier.first_segment(final, screen_at)

    def finish(
        self, design: Design, base: LinearizationSpectrum, plan: CheckPlan | None = None
    ) -> Stabilization:
        """:func:`~._checks.finish`: the checks of ``design`` and its result."""
        return finish(self, design, base, plan)

    def close(self) -> None:
        """End the call's background token run (:meth:`~._tokens.TokenRuns.close`)."""
        self.tokens.close()
