"""Griffe extension for gtcontrol's API reference (loaded by mkdocstrings, see mkdocs.yml).

Text transformations only:

1. **Shared docstring fragments.** gtcontrol writes a parameter description that several
   functions share once (``gtcontrol._docstring.fill``): the source docstring holds a line
   ``%(name)s`` that is replaced at import time. Griffe reads the source, so for an object whose
   docstring has such a line the extension imports the object and uses its runtime ``__doc__``
   (the text ``help()`` and the doctests see).
2. **Sphinx roles become cross-references.** The docstrings cross-reference with reST roles
   (``:func:`~gtcontrol.steer```, the numpydoc convention that ``help()`` readers see), which
   Markdown would print verbatim. Each becomes an mkdocs-autorefs cross-reference to the object's
   heading: ``<autoref identifier="gtcontrol.steer" optional><code>steer</code></autoref>``,
   resolved after the pages are rendered to a link to the page that documents the object (under
   its public path or its canonical one, which mkdocstrings registers as an alias). A bare name
   (``:class:`Layer```) is looked up in ``gtcontrol`` and then in the docstring's own module. A
   target that no page documents (a private helper) stays a code span, as for the ``optional``
   cross-references mkdocstrings writes for signatures; the title is the short name when the
   target starts with ``~``, as in Sphinx.
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
        message names which); tests/contract/test_docs.py checks every ``:::`` directive with
        it.
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


_EXPLICIT_TITLE = re.compile(r"(.+?)\s*<([^<>]+)>")


def _identifier(target: str, module: str) -> str:
    """The dotted path a role's target means: absolute, ``gtcontrol.<name>``, or module-relative."""
    if target.startswith("."):  # a sibling of the docstring's module, or a module of its package
        package = hasattr(importlib.import_module(module), "__path__")
        return (module if package else module.rpartition(".")[0]) + target
    if target.startswith("gtcontrol") or "." in target:
        return target
    import gtcontrol

    return f"gtcontrol.{target}" if hasattr(gtcontrol, target) else f"{module}.{target}"


def _role_replacer(module: str) -> Any:
    def role(match: re.Match[str]) -> str:
        tilde, target = match.group(1), match.group(2).strip()
        explicit = _EXPLICIT_TITLE.fullmatch(target)  # Sphinx's "title <target>"
        if explicit:
            title, target = explicit.group(1), explicit.group(2)
        else:
            title = target.rsplit(".", 1)[-1] if tilde else target.lstrip(".")
        identifier = _identifier(target, module)
        return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'

    return role


class GTControlDocstrings(griffe.Extension):
    """Fill ``%(name)s``; roles to cross-references; link docs/ pages; split grouped parameters."""

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
        module = obj.module.path if isinstance(obj, griffe.Object) else "gtcontrol"
        value = _DOCS_PATH.sub(_docs_link, _ROLE.sub(_role_replacer(module), value))
        doc.value = _split_grouped_parameters(value)
