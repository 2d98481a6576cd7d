"""Docstring fragments: one home for a description that several docstrings share.

A fragment is a piece of numpydoc text, e.g. the entry of a parameter that several functions take
with the same meaning. A docstring names it on a line of its own as ``%(name)s``; :func:`fill`
replaces every such line, at import time, by the fragment indented like the placeholder, so the
runtime ``__doc__`` (what ``help``, the doctests and the documentation meta-test of
``tests/contract/test_architecture.py`` read) is complete. Only whole-line placeholders are
replaced, so a ``%`` elsewhere in a docstring needs no escaping; an unknown name raises at import.

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

from ._status import DEFAULT_MAX_EVALS, MAX_EVALS_LIMIT

__all__ = ["fill", "integrator_budget_doc"]

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


def _power(n: int) -> str:
    """``10**k`` for a power of ten (how the docstrings write the caps), else the number."""
    k = len(str(n)) - 1
    return f"10**{k}" if n == 10**k else f"{n:,}"


def integrator_budget_doc(evaluations: str) -> str:
    """The ``max_evals`` and ``time_limit`` entries of an integrator's docstring (numpydoc).

    One home for the description of the caps ``DEFAULT_MAX_EVALS`` and ``MAX_EVALS_LIMIT`` of
    :mod:`gtcontrol._status` and of what running out returns; ``evaluations`` says what is
    counted (``"right-hand-side"``, ``"velocity-field"``). Spliced in by :func:`fill`.
    """
    return f"""\
max_evals
    Cap on {evaluations} evaluations (default ``{_power(DEFAULT_MAX_EVALS)}``, at most
    ``{_power(MAX_EVALS_LIMIT)}``); reaching it returns ``Status.BUDGET_EXHAUSTED``.
time_limit
    Wall-clock limit in seconds (``None``: none); reaching it returns
    ``Status.BUDGET_EXHAUSTED``."""
