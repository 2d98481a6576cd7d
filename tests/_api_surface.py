"""The callables that ``docs/api/surface.txt`` lists, walked for the API contract tests.

Shared by tests/contract/test_api_rules.py (the argument rule) and
tests/contract/test_hostile_arguments.py (hostile options): a function, the constructor of a class
a user builds (hand-written ``__init__``) or of an option family, and every public method.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SURFACE = Path(__file__).resolve().parents[1] / "docs" / "api" / "surface.txt"

_ENTRY = re.compile(r"^(def|class|    method|    classmethod|    staticmethod) (\w+)\(")


def walk_surface() -> Iterator[tuple[str, Callable[..., Any], bool]]:
    """(label, callable, bound) for every callable ``surface.txt`` lists, methods included."""
    module: Any = None
    owner: Any = None
    for line in SURFACE.read_text().splitlines():
        if line.startswith("## "):
            module = importlib.import_module(line.split()[1])
            owner = None
            continue
        match = _ENTRY.match(line)
        if match is None:
            if not line.startswith("    "):
                owner = None
            continue
        what, name = match.group(1).strip(), match.group(2)
        if what == "def":
            yield name, getattr(module, name), False
        elif what == "class":
            owner = getattr(module, name)
            if is_built_by_users(owner):
                yield name, owner, True
        elif owner is not None:
            raw = inspect.getattr_static(owner, name)
            bound = isinstance(raw, classmethod)
            func = getattr(owner, name) if bound else raw
            yield f"{owner.__name__}.{name}", func, not bound


def is_built_by_users(cls: type) -> bool:
    """Value classes (own ``__init__``) and option families; not results, rows or exceptions."""
    if issubclass(cls, BaseException) or getattr(cls, "_is_protocol", False):
        return False  # raised by the library, or a protocol that is never instantiated
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.init:  # type: ignore[attr-defined]
        return True
    return is_option_family(cls)


def is_option_family(cls: type) -> bool:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    return all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in fields
    )
