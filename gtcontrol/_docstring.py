"""Docstring fragments: one home for a description that several docstrings share (private).

A fragment is a piece of numpydoc text, e.g. the entry of a parameter that several functions take
with the same meaning. A docstring names it on a line of its own as ``%(name)s``; :func:`fill`
replaces every such line, at import time, by the fragment indented like the placeholder, so the
runtime ``__doc__`` (what ``help``, the doctests and the documentation meta-test of
``tests/test_architecture.py`` read) is complete. Only whole-line placeholders are replaced, so a
``%`` elsewhere in a docstring needs no escaping; an unknown name raises at import.

The same idea as matplotlib's ``_docstring.interpd`` and scipy's ``doccer``, kept small.

>>> @fill(sizes="d, n\\n    Dimension and count.")
... def f(d: int, n: int) -> None:
...     '''Do nothing.
...
...     Parameters
...     ----------
...     %(sizes)s
...     '''
>>> print(f.__doc__.splitlines()[4:6])
['    d, n', '        Dimension and count.']
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from typing import TypeVar

__all__ = ["fill"]

_T = TypeVar("_T")

#: A placeholder: ``%(name)s`` alone on its line (leading blanks are its indentation).
_PLACEHOLDER = re.compile(r"^([ \t]*)%\((\w+)\)s[ \t]*$", re.M)


def fill(**fragments: str) -> Callable[[_T], _T]:
    """Decorator replacing each ``%(name)s`` line of a docstring by ``fragments[name]``.

    Each fragment is written flush left (its first line at column 0, continuation lines indented
    relative to it, as numpydoc entries are); every line is indented like the placeholder.
    Raises ``KeyError`` at import for a placeholder without a fragment. Under ``python -OO``
    (docstrings stripped) it leaves the object as it is.
    """

    def splice(match: re.Match[str]) -> str:
        indent, name = match.group(1), match.group(2)
        return textwrap.indent(textwrap.dedent(fragments[name]).strip("\n"), indent)

    def decorate(obj: _T) -> _T:
        if obj.__doc__ is not None:
            obj.__doc__ = _PLACEHOLDER.sub(splice, obj.__doc__)
        return obj

    return decorate
