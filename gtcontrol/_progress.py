"""Progress of long work, shown on a terminal only (quiet in pipes, logs and the library).

Long loops of every layer (integrations, token runs, steering iterations, sweeps) report
through :func:`progress`; nothing is shown unless a caller has switched reporting on with
:func:`reporting` (the command line does so when stderr is a terminal and ``--quiet`` is not
given). Without it :func:`progress` yields a no-op, so a library call costs one context-variable
lookup and prints nothing.

Example
-------
>>> with progress("integrating", total=1.0) as update:
...     for t in (0.25, 0.5, 1.0):
...         update(t)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TextIO

__all__ = ["progress", "reporting", "reporting_enabled"]

#: The live display of the innermost :func:`reporting` block that switched progress on.
_DISPLAY: ContextVar[Any | None] = ContextVar("gtcontrol_progress_display", default=None)
#: Smallest interval between two refreshes of one bar (seconds): updates from tight loops
#: are dropped in between, so reporting costs next to nothing.
_MIN_INTERVAL = 0.1


def _noop(completed: float) -> None:
    """Progress update when reporting is off."""


def reporting_enabled() -> bool:
    """Whether :func:`progress` currently draws bars."""
    return _DISPLAY.get() is not None


@contextmanager
def reporting(*, enabled: bool, stream: TextIO | None = None) -> Iterator[None]:
    """Show the progress bars of the work done inside the block, if ``enabled``.

    Parameters
    ----------
    enabled
        Draw bars (callers pass ``not quiet and stream.isatty()``); otherwise the block runs
        silently.
    stream
        Where the bars go (``sys.stderr`` by default); the bars are removed when the block ends.

    Yields
    ------
    None
    """
    if not enabled or _DISPLAY.get() is not None:
        yield
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(file=stream if stream is not None else sys.stderr)
    display = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    token = _DISPLAY.set(display)
    try:
        with display:
            yield
    finally:
        _DISPLAY.reset(token)


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Callable[[float], None]]:
    """A progress bar for one piece of work; yields ``update(completed)``.

    Parameters
    ----------
    description
        What is being done, e.g. ``"simulate T=3"``.
    total
        The value of ``completed`` when the work is done (a horizon, a number of points);
        ``None`` for work of unknown length.

    Yields
    ------
    callable
        ``update(completed)``: the work done so far, in the units of ``total``. A no-op unless
        a :func:`reporting` block is active.
    """
    display = _DISPLAY.get()
    if display is None:
        yield _noop
        return
    task = display.add_task(description, total=total)
    last = [0.0]

    def update(completed: float) -> None:
        now = time.monotonic()
        if now - last[0] >= _MIN_INTERVAL:
            last[0] = now
            display.update(task, completed=completed)

    try:
        yield update
    finally:
        display.remove_task(task)
