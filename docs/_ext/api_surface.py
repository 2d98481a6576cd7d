"""The public API of gtcontrol as text: every public name and its signature.

``python docs/_ext/api_surface.py`` writes ``docs/api/surface.txt``;
``tests/contract/test_api_surface.py`` compares that file with the code, so every change of the
public surface (a name, a parameter, a default, a field) is a visible diff in review.
``--check`` exits 1 when the file is stale.

Listed: the names of ``gtcontrol.__all__`` and of the public subpackages' ``__all__``
(``gtcontrol.control.design``, ``gtcontrol.control.stabilization``, ``gtcontrol.interop``,
``gtcontrol.experiments``, ``gtcontrol.cli``, ``gtcontrol.plotting`` and its modules); for a
function its signature; for a class its constructor and its public methods, properties and
class attributes (dataclass fields with their types); for a constant its value's type. Names
re-exported from the root are listed once, under ``gtcontrol``.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SURFACE = ROOT / "docs" / "api" / "surface.txt"
#: The modules whose ``__all__`` is public, the root first (a name is listed where first seen).
MODULES = (
    "gtcontrol",
    "gtcontrol.control.design",
    "gtcontrol.control.stabilization",
    "gtcontrol.interop",
    "gtcontrol.experiments",
    "gtcontrol.cli",
    "gtcontrol.plotting",
    "gtcontrol.plotting.core",
    "gtcontrol.plotting.analysis",
    "gtcontrol.plotting.steering",
    "gtcontrol.plotting.design",
    "gtcontrol.plotting.sweep",
)


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"


def _class_lines(name: str, cls: type) -> list[str]:
    if issubclass(cls, enum.Enum):
        members = ", ".join(f"{m.name}={m.value!r}" for m in cls)
        return [f"enum {name}: {members}"]
    if issubclass(cls, BaseException):
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        return [f"exception {name}{_signature(cls)}  ({bases})"]
    bases = ", ".join(b.__name__ for b in cls.__bases__ if b is not object)
    lines = [f"class {name}{_signature(cls)}" + (f"  ({bases})" if bases else "")]
    members: list[str] = []
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    for f in fields.values():
        if not f.init and not f.name.startswith("_"):
            members.append(f"    field {f.name}: {f.type}")
    for attr in sorted(vars(cls)):
        if attr.startswith("_") or attr in fields:
            continue
        raw = vars(cls)[attr]
        if isinstance(raw, property):
            members.append(f"    property {attr}")
        elif isinstance(raw, (classmethod, staticmethod)):
            kind = "classmethod" if isinstance(raw, classmethod) else "staticmethod"
            members.append(f"    {kind} {attr}{_signature(getattr(cls, attr))}")
        elif inspect.isfunction(raw):
            members.append(f"    method {attr}{_signature(raw)}")
        elif not callable(raw):
            members.append(f"    attribute {attr}: {type(raw).__name__}")
    return lines + members


def surface() -> str:
    """The text of ``docs/api/surface.txt`` for the code as it is imported now."""
    seen: dict[int, str] = {}
    out = [
        "# The public API of gtcontrol (names and signatures).",
        "# Written by docs/_ext/api_surface.py; tests/contract/test_api_surface.py compares it",
        "# with the code: regenerate it after a deliberate API change.",
        "",
    ]
    for modname in MODULES:
        module = importlib.import_module(modname)
        names = sorted(getattr(module, "__all__", ()))
        out.append(f"## {modname} ({len(names)} names)")
        for name in names:
            obj = getattr(module, name)
            key = id(obj)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and key in seen:
                out.append(f"{name} = {seen[key]}")
                continue
            qual = f"{modname}.{name}"
            if inspect.isclass(obj):
                seen[key] = qual
                out.extend(_class_lines(name, obj))
            elif inspect.isfunction(obj):
                seen[key] = qual
                out.append(f"def {name}{_signature(obj)}")
            else:
                out.append(f"{name}: {type(obj).__name__}")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = surface()
    if "--check" in argv:
        stale = not SURFACE.exists() or SURFACE.read_text() != text
        if stale:
            print(f"{SURFACE} is stale: run python docs/_ext/api_surface.py", file=sys.stderr)
        return int(stale)
    SURFACE.write_text(text)
    print(f"wrote {SURFACE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
