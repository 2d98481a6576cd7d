"""Griffe extension for gtcontrol's API reference (loaded by mkdocstrings, see mkdocs.yml).

Text transformations only:

1. **Shared docstring fragments.** gtcontrol writes a parameter description that several
   functions share once (``gtcontrol._docstring.fill``): the source docstring holds a line
   ``%(name)s`` that is replaced at import time. Griffe reads the source, so for an object whose
   docstring has such a line the extension imports the object and uses its runtime ``__doc__``
   (the text ``help()`` and the doctests see).
2. **Sphinx roles.** The docstrings cross-reference with reST roles (``:func:`~gtcontrol.steer```),
   which Markdown would print verbatim; they become code spans (```steer```, the short name
   when the target starts with ``~``, as in Sphinx).
3. **Grouped parameters.** numpydoc allows one entry for several parameters (``rtol, atol``
   then their description). Griffe gives every name of such an entry the type and default of
   the first one, so the table would show wrong types; the entry is split into one entry per
   name, each with the shared description (types and defaults then come from the signature).
4. **Pages of this site.** A plain ``docs/theory.md`` in a docstring (the path a reader of the
   source or of ``help()`` follows) becomes a link to that page.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import griffe

_PLACEHOLDER = re.compile(r"^[ \t]*%\(\w+\)s[ \t]*$", re.M)
_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const|term|ref):`(~?)([^`]+)`"
)


def resolve(path: str) -> Any:
    """The object at the dotted ``path`` (its longest importable module, then attributes).

    Raises
    ------
    LookupError
        If no prefix of ``path`` is an importable module, or an attribute is missing (the
        message names which); tests/test_docs.py checks every ``:::`` directive with it.
    """
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                raise LookupError(f"{path!r} does not resolve ({name!r} is missing)")
            obj = getattr(obj, name)
        return obj
    raise LookupError(f"{path!r} is not importable")


def _runtime_doc(path: str) -> str | None:
    """The runtime ``__doc__`` of the object at the dotted ``path`` (None if not importable)."""
    try:
        doc = getattr(resolve(path), "__doc__", None)
    except LookupError:
        return None
    return inspect.cleandoc(doc) if doc else None


_NAME = re.compile(r"\*{0,2}[A-Za-z_]\w*")
_RULE = re.compile(r"-{3,}")
_PARAMETER_SECTIONS = ("Parameters", "Other Parameters")


def _split_grouped_parameters(text: str) -> str:
    """One numpydoc parameter entry per name (``a, b`` + description -> ``a`` and ``b``)."""
    lines = text.split("\n")
    out: list[str] = []
    in_parameters = False
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = i + 1 < len(lines) and bool(_RULE.fullmatch(lines[i + 1].strip()))
        if heading and line and not line[0].isspace():
            in_parameters = line.strip() in _PARAMETER_SECTIONS
            out += [line, lines[i + 1]]
            i += 2
            continue
        names_part, sep, type_part = line.partition(" : ")
        names = [n.strip() for n in names_part.split(",")]
        if (
            in_parameters
            and line
            and not line[0].isspace()
            and len(names) > 1
            and all(_NAME.fullmatch(n) for n in names)
        ):
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or lines[j][0].isspace()):
                j += 1
            description = lines[i + 1 : j]
            blank_tail: list[str] = []
            while description and not description[-1].strip():
                blank_tail.insert(0, description.pop())
            for name in names:
                out.append(name + (sep + type_part if sep else ""))
                out += description
            out += blank_tail
            i = j
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


_DOCS = Path(__file__).resolve().parents[1]
#: A plain path to a page of the site in a docstring (``docs/theory.md``), not in a code span.
_DOCS_PATH = re.compile(r"(?<![\w/`\[])(?<!\]\()docs/([\w-]+)\.md\b")


def _docs_link(match: re.Match[str]) -> str:
    """``docs/theory.md`` -> a link to that page (API pages live in docs/api/)."""
    name = match.group(1)
    if not (_DOCS / f"{name}.md").is_file():
        return match.group(0)
    return f"[{match.group(0)}](../{name}.md)"


def _role(match: re.Match[str]) -> str:
    tilde, target = match.group(1), match.group(2)
    target = target.strip()
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


class GTControlDocstrings(griffe.Extension):
    """Fill ``%(name)s``; roles to code spans; link docs/ pages; split grouped parameters."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is None:
            return
        value = doc.value
        if _PLACEHOLDER.search(value):
            runtime = _runtime_doc(obj.path)
            if runtime is None or _PLACEHOLDER.search(runtime):
                raise RuntimeError(f"{obj.path}: docstring fragment not filled at import")
            value = runtime
        value = _DOCS_PATH.sub(_docs_link, _ROLE.sub(_role, value))
        doc.value = _split_grouped_parameters(value)
