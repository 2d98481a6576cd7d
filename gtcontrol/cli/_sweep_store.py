"""The output folder of a ``sweep``: written point by point, every file atomically.

Unlike the other tasks (whose whole folder is swapped in at the end), a sweep writes into
``OUTDIR`` as it goes, so that a killed run keeps every finished point::

    OUTDIR/.gtcontrol-sweep        marks the folder as a sweep's (and is locked while one runs)
    OUTDIR/points/<id>.parquet     the rows of a batch of finished points (each row names its
                                   point in ``point``), written as soon as the batch finished;
                                   ``<id>`` is the point's key for a batch of one point
    OUTDIR/sweep.parquet           the table of all points (at the end)
    OUTDIR/phase_diagram.png       the figure (at the end)
    OUTDIR/result.json             the run's record (at the end)

At the end of a run, stored rows that no point of the current grid uses (another design, a
superseded row of a point computed again) are dropped: a file left with none is removed, one
left with some is rewritten with those.

Every file is written to a hidden ``.<name>.tmp-<pid>-<random><suffix>`` beside it and renamed
into place (``os.replace``), so a file is either absent or complete; temporaries of killed runs
are removed by the next run. A folder that holds anything else (a user's files, the output of
another task) is refused before anything is written, and nothing but the sweep's own files is
ever removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._output import (
    OutputError,
    check_length,
    dumps,
    follow_link,
    lock_exclusive,
    open_lock_file,
    pid_alive,
    refuse_foreign,
    relative_files,
)
from .._result_file import show_path
from .._version import __version__

__all__ = [
    "FIGURE",
    "MARKER",
    "POINTS",
    "RESULT",
    "TABLE",
    "SweepFolder",
    "batch_name",
    "check_sweep_folder",
]

MARKER = ".gtcontrol-sweep"
POINTS = "points"
TABLE = "sweep.parquet"
FIGURE = "phase_diagram.png"
RESULT = "result.json"
_POINT = re.compile(r"points/[0-9a-f]{20}\.parquet")
_TMP = re.compile(r"(?:points/)?\.[^/]+\.tmp-(\d+)-[0-9a-f]+(?:\.[a-z]+)?")


def batch_name(keys: Sequence[str]) -> str:
    """The file id of a batch of stored points: the key of a single point, else a hash of the
    keys (20 hexadecimal digits, like a key)."""
    if len(keys) == 1:
        return keys[0]
    return hashlib.sha256("\n".join(keys).encode("ascii")).hexdigest()[: len(keys[0])]


#: Arrow types of the column dtypes of :data:`gtcontrol.cli._sweep_points.COLUMNS`.
_ARROW = {"string": "string", "float64": "float64", "Int64": "int64"}


def _result(out: Path) -> dict[str, Any] | None:
    """``OUT/result.json`` when it is a gtcontrol result, else ``None``."""
    try:
        data = json.loads((out / RESULT).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "gtcontrol_version" in data else None


def _ours(name: str, listed: set[str]) -> bool:
    """Whether ``name`` (relative to OUT) is a file a sweep writes."""
    return (
        name in {MARKER, TABLE, FIGURE, RESULT}
        or name in listed
        or _POINT.fullmatch(name) is not None
        or _TMP.fullmatch(name) is not None
    )


def _directories_in_the_way(out: Path) -> list[str]:
    """Directories (empty ones: others hold foreign files) named like a file a sweep writes."""
    names = [n for n in (MARKER, TABLE, FIGURE, RESULT) if (out / n).is_dir()]
    points = out / POINTS
    if points.is_dir():
        names += [
            f"{POINTS}/{p.name}"
            for p in sorted(points.iterdir())
            if p.is_dir() and _POINT.fullmatch(f"{POINTS}/{p.name}")
        ]
    return names


def check_sweep_folder(out: Path) -> Path:
    """Refuse an output folder a sweep may not write into; return the folder to use.

    ``out`` may be absent, empty, or a previous sweep's folder (finished or killed) holding
    only the files a sweep writes. Anything else is refused, naming the other files.

    Parameters
    ----------
    out
        The output directory (a symbolic link is followed).

    Returns
    -------
    pathlib.Path
        The folder (``out`` resolved when it is a link).

    Raises
    ------
    OutputError
        If the path is too long, is not a directory (or a loop of links), holds the output of
        another task, files a sweep did not write, or a directory where a sweep writes a file.
    """
    check_length(out)
    out = follow_link(out)
    if not os.path.lexists(out):
        return out
    if not out.is_dir():
        raise OutputError(f"output: {show_path(out)} exists and is not a directory")
    try:
        present = relative_files(out)
        blocking = _directories_in_the_way(out)
    except OSError as exc:
        raise OutputError(f"output: cannot read {show_path(out)} ({exc.strerror or exc})") from None
    if blocking:
        raise OutputError(
            f"output: {show_path(out)} holds a directory {blocking[0]!r} where a sweep writes a "
            "file; remove it or choose another -o directory"
        )
    if not present:
        return out
    previous = _result(out)
    if previous is not None and previous.get("task") != "sweep":
        raise OutputError(
            f"output: {show_path(out)} holds the output of task {previous.get('task')!r}; a sweep "
            "writes its folder point by point and replaces no other output: choose another -o "
            "directory"
        )
    if previous is None and MARKER not in present:
        foreign = present
    else:
        listed = set()
        if previous is not None and isinstance(previous.get("files"), list):
            listed = {n for n in previous["files"] if isinstance(n, str)}
        foreign = [name for name in present if not _ours(name, listed)]
    refuse_foreign(out, foreign, "a sweep")
    return out


class SweepFolder:
    """A sweep's output folder, locked while the sweep runs (see the module docstring).

    Parameters
    ----------
    path
        The folder, checked by :func:`check_sweep_folder`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.points = path / POINTS
        self.created = False
        self._lock: int | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[SweepFolder]:
        """Create the folder (with its marker) and hold its lock for the block.

        If the block fails before any point was written into a folder this run created, the
        folder is removed again (nothing half-made is left).

        Yields
        ------
        SweepFolder
            ``self``.

        Raises
        ------
        OutputError
            If the folder cannot be created or another sweep is writing it.
        """
        self.created = not os.path.lexists(self.path)
        fd = open_lock_file(self.path / MARKER, "output", make=self.points)
        self._lock = fd
        try:
            lock_exclusive(
                fd,
                f"output: another sweep is writing {show_path(self.path)}; wait for it or choose "
                "another -o directory",
            )
            self._remove_temporaries()
            if os.fstat(fd).st_size == 0:
                note = {"gtcontrol_version": __version__, "task": "sweep"}
                os.write(fd, (json.dumps(note) + "\n").encode())
            yield self
        except BaseException:
            if self.created and not any(self.points.iterdir()):
                shutil.rmtree(self.path, ignore_errors=True)
            raise
        finally:
            os.close(fd)
            self._lock = None

    def _remove_temporaries(self) -> None:
        """Remove the temporary files left by killed runs (their process is dead)."""
        for name in relative_files(self.path):
            match = _TMP.fullmatch(name)
            if match is not None and not pid_alive(int(match.group(1))):
                (self.path / name).unlink(missing_ok=True)

    def write_atomic(self, name: str, write: Callable[[Path], object]) -> None:
        """Write ``OUT/name`` with ``write(tmp)`` into a hidden temporary, then rename it.

        Parameters
        ----------
        name
            The file, relative to the folder.
        write
            Writes the complete file at the path it is given.
        """
        target = self.path / name
        stem, dot, suffix = target.name.partition(".")
        tmp = target.with_name(f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{dot}{suffix}")
        try:
            write(tmp)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def write_text(self, name: str, text: str) -> None:
        """Write a text file atomically (see :meth:`write_atomic`)."""
        self.write_atomic(name, lambda p: p.write_text(text, "utf-8"))

    def write_result(self, doc: Mapping[str, Any]) -> None:
        """Write ``result.json`` atomically (strict JSON, see :func:`gtcontrol._output.dumps`)."""
        self.write_text(RESULT, dumps(doc))

    def point_path(self, name: str) -> Path:
        """Where the batch of stored points ``name`` (:func:`batch_name`) is."""
        return self.points / f"{name}.parquet"

    def stored(self) -> dict[str, list[dict[str, Any]] | None]:
        """The rows of every stored point file, by file id (``None``: unreadable, damaged)."""
        if not self.points.is_dir():
            return {}
        out: dict[str, list[dict[str, Any]] | None] = {}
        for p in sorted(self.points.iterdir()):
            if not _POINT.fullmatch(f"{POINTS}/{p.name}"):
                continue
            import pyarrow.parquet as pq  # (only when there is something to read)

            try:
                out[p.stem] = pq.read_table(p).to_pylist()
            except Exception:  # damaged (a crash of the disk) or not a Parquet file
                out[p.stem] = None
        return out

    def write_rows(
        self, name: str, rows: Sequence[Mapping[str, Any]], axes: Sequence[str], dtypes: Any
    ) -> None:
        """Write a batch of rows to ``points/<name>.parquet`` atomically (pyarrow, one file).

        ``axes`` are float64 columns; ``dtypes`` maps the other columns to the dtypes of
        :data:`gtcontrol.cli._sweep_points.COLUMNS`.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        fields = [pa.field(a, pa.float64()) for a in axes]
        fields += [pa.field(c, getattr(pa, _ARROW[t])()) for c, t in dtypes.items()]
        schema = pa.schema(fields)
        columns = [f.name for f in fields]
        table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)
        self.write_atomic(f"{POINTS}/{name}.parquet", lambda p: pq.write_table(table, p))

    def remove_point_file(self, name: str) -> None:
        """Remove the stored batch ``name``."""
        self.point_path(name).unlink(missing_ok=True)

    def files(self) -> list[str]:
        """Every file of the folder, relative to it (all written by the sweep)."""
        return sorted({*relative_files(self.path), RESULT})
