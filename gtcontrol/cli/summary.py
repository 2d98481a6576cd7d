"""The summary printed at the end of ``gtcontrol run``: a table of the run's headline figures.

It is read back from ``OUTDIR/result.json`` (its top-level ``summary``, docs/designs.md), so a
design run and ``gtcontrol reproduce`` print the same kind of table: a rich table on a terminal,
plain aligned lines in a pipe.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = ["format_value", "print_summary", "summary_rows"]

#: Longest value shown in the table (a longer message is shortened).
_MAX_VALUE = 160
#: Most file names listed in the summary (a sweep may write thousands).
_MAX_FILES = 8


def format_value(value: Any) -> str:
    """A summary value in a few characters: 4 significant digits, ``—`` for none.

    Parameters
    ----------
    value
        A JSON scalar (a number, a string such as ``"inf"``, a bool or ``None``).

    Returns
    -------
    str

    Examples
    --------
    >>> format_value(0.000123456), format_value("inf"), format_value(None), format_value(True)
    ('0.0001235', 'inf', '—', 'yes')
    """
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, dict) and all(isinstance(v, (int, float, str)) for v in value.values()):
        text = ", ".join(f"{k} {format_value(v)}" for k, v in value.items())  # counts by kind
    elif isinstance(value, (list, dict)):
        text = json.dumps(value)
    else:
        text = " ".join(str(value).split())
    return text if len(text) <= _MAX_VALUE else f"{text[: _MAX_VALUE - 1]}…"


def summary_rows(result: Mapping[str, Any], outdir: Path) -> list[tuple[str, str]]:
    """The ``(name, value)`` rows of the summary of a run.

    Parameters
    ----------
    result
        The ``result.json`` document of the run.
    outdir
        Where the run's files are.

    Returns
    -------
    list of tuple
        ``task``, ``status``, the headline figures, ``seconds`` and ``files``.
    """
    summary = result.get("summary")
    summary = dict(summary) if isinstance(summary, Mapping) else {}
    rows = [
        ("task", format_value(summary.pop("task", result.get("task")))),
        ("status", format_value(summary.pop("status", result.get("status")))),
    ]
    seconds = summary.pop("seconds", result.get("seconds"))
    rows += [(str(name), format_value(value)) for name, value in summary.items()]
    if isinstance(seconds, (int, float)):
        rows.append(("seconds", f"{seconds:.1f}"))
    files = result.get("files")
    names = _file_entries(
        [f for f in files if isinstance(f, str)] if isinstance(files, list) else []
    )
    listed = ", ".join(names[:_MAX_FILES])
    if len(names) > _MAX_FILES:
        listed += f" and {len(names) - _MAX_FILES} more"
    rows.append(("files", f"{outdir}/ ({listed})" if listed else f"{outdir}/"))
    return rows


def _file_entries(names: list[str]) -> list[str]:
    """The files of a run as listed: a sub-folder once with its count, hidden markers left out.

    ``["phase_diagram.png", "points/a.parquet", "points/b.parquet", ".lock"]`` ->
    ``["phase_diagram.png", "points/ (2 files)"]``.
    """
    counts: dict[str, int] = {}
    for name in names:
        folder, sep, _ = name.partition("/")
        if sep:
            counts[folder] = counts.get(folder, 0) + 1
    entries: list[str] = []
    for name in names:
        folder, sep, _ = name.partition("/")
        if name.startswith("."):
            continue
        if not sep:
            entries.append(name)
        elif folder in counts:
            n = counts.pop(folder)
            entries.append(f"{folder}/ ({n} file{'s' if n != 1 else ''})")
    return entries


def _printable(text: str) -> str:
    """``text`` on one line with its control characters shown as escapes: a design file's
    title must not set the terminal's window title, clear the screen or break the heading."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def print_summary(outdir: Path, *, rich: bool, stream: TextIO | None = None) -> None:
    """Print the summary of the run written to ``outdir`` (nothing if it cannot be read).

    Parameters
    ----------
    outdir
        The run's output directory (holding ``result.json``).
    rich
        A rich table (for a terminal); otherwise plain aligned lines.
    stream
        Where to print (``sys.stdout`` by default).
    """
    out = stream if stream is not None else sys.stdout
    try:
        result = json.loads((Path(outdir) / "result.json").read_text("utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(result, dict):
        return
    rows = [(_printable(n), _printable(v)) for n, v in summary_rows(result, Path(outdir))]
    title = result.get("title")
    heading = f"gtcontrol: {_printable(title)}" if isinstance(title, str) and title else "gtcontrol"
    if rich:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # Text cells: a value such as "[0.5, 1]" is shown as it is, never read as rich markup
        table = Table(title=Text(heading), show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for name, value in rows:
            table.add_row(Text(name), Text(value))
        Console(file=out, highlight=False).print(table)
        return
    width = max(len(name) for name, _ in rows)
    print(heading, file=out)
    for name, value in rows:
        print(f"  {name:{width}}  {value}", file=out)
