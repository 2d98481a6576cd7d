"""Layers of one width, first to last: the base of a network's parameters.

:class:`~gtcontrol.model.params.Schedule` (the moment model's layers) and
:class:`~gtcontrol.interop.ExtractedModel` (a Transformer's extracted layers) are both a
non-empty tuple ``layers`` of one width, each class validating its own; :class:`LayerStack`
is the one home of what follows from that: the width ``dim`` and the depth ``n_layers``.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

__all__ = ["LayerStack"]


class _HasWidth(Protocol):
    @property
    def dim(self) -> int: ...


_L = TypeVar("_L", bound=_HasWidth)


class LayerStack(Generic[_L]):
    """Base of a non-empty tuple ``layers`` of one width (the subclass validates both)."""

    __slots__ = ()

    layers: tuple[_L, ...]

    @property
    def dim(self) -> int:
        """The width ``d`` of every layer."""
        return self.layers[0].dim

    @property
    def n_layers(self) -> int:
        """The number of layers."""
        return len(self.layers)
