"""The API's refusals of a design's inputs, as the one line of a design error.

A design that passed the schema may still be refused by the API it reaches (a target of
another rank, a horizon past the moments' blow-up, a design proved infeasible in closed form).
That is bad input (exit 2, docs/designs.md), and its line names the design file and the key
the user wrote: ``gtcontrol: error: FILE: horizon.T: ...``. The API names its own parameter
first (``T: ...``, ``control: ...``); :func:`refusals` puts the file first and the design's
key in place of that name. What is not a refusal of the inputs (a solver's failure, an output
folder's error) passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ..errors import (
    DesignFileError,
    InvalidGaussianError,
    InvalidParametersError,
    UnreachableTargetError,
)
from ..model.params import Schedule
from .schema import Design, ModelBase

__all__ = ["keyed", "refusals", "refused"]

#: The errors by which the API refuses its inputs.
_REFUSALS = (InvalidGaussianError, InvalidParametersError, UnreachableTargetError)

#: Per task, the API's names of its inputs that are not the design's keys.
_TASK_KEYS: dict[str, dict[str, str]] = {
    "compare-tokens": {
        "n_tokens, repeats": "compare-tokens.n_tokens, compare-tokens.repeats",
    },
    # design's own T is its figure's depth; design_mean_matching's T is [horizon] T
    "design": {"T": "horizon.T"},
}


def _keys(design: Design) -> dict[str, str]:
    """The API names of ``design``'s task that translate to another key of the design."""
    # the API's "control" is the design's [layer] or [[schedule]]
    keys = {
        "control": "schedule" if isinstance(design.model, Schedule) else "layer",
        "n_layers": "horizon.n_layers",
    }
    if "T" not in design.options:  # else the task's own depth option (analyze.T, ...)
        keys["T"] = "horizon.T"
    keys.update(_TASK_KEYS.get(design.task, {}))
    if isinstance(design.base, ModelBase) and design.base.target == "rotated":
        # the target is generated: its mean moves by base.shift, its spread by base.stretch
        keys.update({"target.mean": "base.shift", "target.cov": "base.stretch"})
    return keys


#: The fields of a layer, as the API names them when one it built is out of float64's range.
_FIELDS = ("A", "b", "B", "V")


def keyed(design: Design, text: str, keys: Mapping[str, str] | None = None) -> str:
    """``text``, an API message that starts with the API's name of an input, with the
    design's key for it: from ``keys``, the task's own translations, or the task's option of
    that name; a name the design gives alike (``target``, ``layer``) is kept."""
    name, sep, rest = text.partition(": ")
    known = {**_keys(design), **(keys or {})}
    if sep and design.base is not None and name in _FIELDS and name not in known:
        # the layers built around a [base] (its heads kept) take their scale from it
        return f"base: a layer built around it is not representable in float64 ({text})"
    if sep and name in known:
        return f"{known[name]}: {rest}"
    if sep and name in design.options:
        return f"{design.task}.{name}: {rest}"
    return text


def refused(design: Design, text: str) -> DesignFileError:
    """The design error of the line ``FILE: text`` (``text`` already names the key)."""
    return DesignFileError(f"{design.source}: {text}")


@contextmanager
def refusals(design: Design) -> Iterator[None]:
    """Raise an API refusal of ``design``'s inputs as a :class:`DesignFileError` that names
    the design file and the key the user wrote (:func:`keyed`)."""
    try:
        yield
    except _REFUSALS as exc:
        text = keyed(design, str(exc))
        if isinstance(exc, UnreachableTargetError) and text == str(exc):
            text = f"target: {text}"  # its message names no input: the target is the key
        raise refused(design, text) from None
