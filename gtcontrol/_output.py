"""Atomic output directories (docs/designs.md); the file format of ``result.json`` and
``result.npz`` is :mod:`gtcontrol._result_file` (its names are re-exported here).

An output directory ``OUT`` is built in a hidden sibling ``.OUT.tmp-<pid>-<random>`` (same file
system) and put in place with **one** atomic step: on Linux ``renameat2(RENAME_EXCHANGE)``
swaps the new folder with the previous ``OUT`` (so ``OUT`` is never absent), then the previous
output, now under the hidden name, is removed. Where the exchange is not available (another
operating system, a file system without it) the fallback is two renames, with a short window in
which ``OUT`` is absent. The hidden folders carry the id of the process that made them; a later
run removes those whose process is dead (a run killed with ``kill -9``). A previous output is
replaced only if it holds nothing but the files that gtcontrol wrote (listed in its
``result.json``); folders are created with the permissions the umask gives.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ._result_file import (
    NPZ_MIN_SIZE,
    NPZ_NAME,
    OutputError,
    dumps,
    jsonable,
    load_result,
    show_path,
    split_arrays,
    write_json,
)
from ._version import __version__

__all__ = [
    "NPZ_MIN_SIZE",
    "NPZ_NAME",
    "OutputError",
    "atomic_outdir",
    "check_length",
    "dumps",
    "follow_link",
    "jsonable",
    "load_result",
    "lock_exclusive",
    "open_lock_file",
    "pid_alive",
    "refuse_foreign",
    "relative_files",
    "run_summary",
    "split_arrays",
    "write_json",
    "write_run",
]

#: Longest file-name component and path (bytes) accepted for an output directory (Linux limits).
NAME_MAX = 255
PATH_MAX = 4096
#: Longest part of ``OUT``'s name kept in the hidden sibling names (the rest is hashed).
_STEM_MAX = 120
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: Names gtcontrol wrote before ``result.json`` listed its files (older outputs).
_LEGACY_NAMES = ("report.md", "report.html")


def check_length(out: Path) -> None:
    """Refuse an output path whose name or whole path the file system cannot hold."""
    full = os.path.abspath(out)
    size = len(os.fsencode(full))
    if size >= PATH_MAX:
        raise OutputError(
            f"output: the path {show_path(out)} is too long ({size} bytes; the limit is "
            f"{PATH_MAX - 1})"
        )
    for part in Path(full).parts:
        n = len(os.fsencode(part))
        if n > NAME_MAX:
            raise OutputError(
                f"output: the name {show_path(part)} in {show_path(out)} is too long ({n} bytes; "
                f"the limit is {NAME_MAX})"
            )


def follow_link(out: Path) -> Path:
    """``out``, or the folder its symbolic link points to (a link loop is refused)."""
    if not out.is_symlink():
        return out
    try:
        target = out.resolve()
    except (RuntimeError, OSError):  # a loop (RuntimeError up to Python 3.12, then OSError)
        raise OutputError(
            f"output: {show_path(out)} is a symbolic link that leads nowhere (a loop of links)"
        ) from None
    check_length(target)
    return target


def _refuse_working_dir(out: Path) -> None:
    """Refuse to replace the current directory or a folder above it (the shell's own folder
    would be swapped away under it)."""
    try:
        here = Path.cwd().resolve()
        target = Path(os.path.realpath(out))
    except (OSError, RuntimeError):  # no current directory: nothing to protect
        return
    if target == here or target in here.parents:
        raise OutputError(
            f"output: {show_path(out)} is the current directory or a folder above it; the output "
            "folder is replaced as a whole: give a folder below it (e.g. -o out/NAME)"
        )


def _stem(out: Path) -> str:
    """The part of ``out``'s name used in its hidden siblings (short enough for NAME_MAX)."""
    name = out.name
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= _STEM_MAX:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:12]
    head = raw[: _STEM_MAX - 13].decode("utf-8", "ignore")
    return f"{head}~{digest}"


def _scratch_pattern(out: Path) -> re.Pattern[str]:
    """Names of the hidden siblings of ``out`` made by a run: the pid is group 1. Only the
    exact form :func:`_make_scratch` writes, with its 8 random hex digits: a user's
    ``.OUT.old-20240101`` is not one."""
    return re.compile(rf"\.{re.escape(_stem(out))}\.(?:tmp|old)-(\d+)-[0-9a-f]{{8}}")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and runs (a process of another user counts as alive).

    A process killed with ``kill -9`` whose parent has not reaped it yet is a zombie: it still
    answers ``kill(pid, 0)``, but it will never finish its folder (seen in a container whose
    init does not reap: the next run kept the killed run's folder). On Linux its state in
    ``/proc/<pid>/stat`` is ``Z``, and it counts as dead."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # not Linux, or gone meanwhile: kill(pid, 0) answered
        return True
    # the state follows the parenthesized command name, which may itself hold ") "
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] != "Z"


def _remove_stale(out: Path) -> None:
    """Remove the hidden siblings of ``out`` left by runs whose process is dead (``kill -9``)."""
    pattern = _scratch_pattern(out)
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or pid_alive(int(match.group(1))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _make_scratch(out: Path, kind: str) -> Path:
    """Create the hidden sibling ``.OUT.<kind>-<pid>-<random>`` (permissions from the umask)."""
    for _ in range(100):
        path = out.parent / f".{_stem(out)}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()  # mode 0o777 & ~umask (tempfile.mkdtemp would give 0o700)
        except FileExistsError:
            continue
        return path
    raise OutputError(f"output: cannot create a temporary folder beside {show_path(out)}")


def _listed_files(out: Path) -> set[str] | None:
    """The files a previous gtcontrol run wrote into ``out``; ``None`` if it is no such output."""
    try:
        data = json.loads((out / "result.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "gtcontrol_version" not in data:
        return None
    names = {"result.json"}
    for key in ("files", "figures"):
        listed = data.get(key)
        if isinstance(listed, list):
            names.update(n for n in listed if isinstance(n, str))
    if "files" not in data:
        names.update(_LEGACY_NAMES)
    return names


def relative_files(root: Path) -> list[str]:
    """Every file (and symlink) under ``root``, as sorted POSIX paths relative to it."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        links = [d for d in dirnames if (base / d).is_symlink()]
        for name in [*filenames, *links]:
            found.append((base / name).relative_to(root).as_posix())
    return sorted(found)


def _foreign_files(out: Path) -> list[str]:
    """Entries of an existing ``out`` that gtcontrol did not write (they must not be deleted)."""
    present = relative_files(out)
    ours = _listed_files(out)
    if ours is None:
        if present:
            return present
        # empty folders only: nothing to lose
        return []
    return [name for name in present if name not in ours]


def _check_replaceable(out: Path) -> None:
    """Raise :class:`OutputError` unless ``out`` is absent, empty or a previous output that
    the user left writable (a write-protected one is theirs to keep, as ``rm -r`` asks)."""
    if not os.path.lexists(out):
        return
    if not out.is_dir():
        raise OutputError(f"output: {show_path(out)} exists and is not a directory")
    if not os.access(out, os.W_OK):
        raise OutputError(
            f"output: {show_path(out)} is write-protected; make it writable to replace it, "
            "or choose another -o directory"
        )
    refuse_foreign(out, _foreign_files(out), "gtcontrol")


def _take_over_mode(tmp: Path, out: Path) -> None:
    """Give ``tmp`` the permissions (and, where allowed, the group) of the ``out`` it replaces:
    a private (0700) or group-shared (setgid) folder the user prepared stays so."""
    try:
        st = os.stat(out)
    except OSError:
        return
    try:
        if st.st_gid != os.stat(tmp).st_gid:
            os.chown(tmp, -1, st.st_gid)
    except OSError:  # not a member of that group: the mode is still kept
        pass
    os.chmod(tmp, stat.S_IMODE(st.st_mode))


def refuse_foreign(out: Path, foreign: list[str], writer: str) -> None:
    """Raise :class:`OutputError` naming the first of the ``foreign`` files (none: return).

    ``writer`` says who did not write them (``"gtcontrol"``, ``"a sweep"``).
    """
    if not foreign:
        return
    shown = ", ".join(repr(name) for name in foreign[:3])
    more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
    raise OutputError(
        f"output: {show_path(out)} holds files {writer} did not write ({shown}{more}); "
        "move them away or choose another -o directory"
    )


def open_lock_file(lock: Path, what: str, *, make: Path | None = None) -> int:
    """Create the folder of ``lock`` and open (create) the file ``lock`` in it, for
    :func:`lock_exclusive`.

    Parameters
    ----------
    lock
        The lock file.
    what
        What the folder is, the start of the error message (``"output"``, ``"layer store"``).
    make
        The folder to create with its parents (default: the lock's own); a subfolder of the
        lock's folder creates both.

    Returns
    -------
    int
        The open file descriptor (read-write); the caller closes it.

    Raises
    ------
    OutputError
        If the folder or the file cannot be created.
    """
    try:
        (lock.parent if make is None else make).mkdir(parents=True, exist_ok=True)
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise OutputError(
            f"{what}: cannot create {show_path(lock.parent)} ({exc.strerror or exc})"
        ) from None


def lock_exclusive(fd: int, busy: str) -> None:
    """Lock the open file ``fd`` for this process (until it is closed), or raise
    :class:`OutputError` with the message ``busy`` when another process holds the lock.

    Off POSIX there is no lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise OutputError(busy) from None


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directories ``a`` and ``b`` atomically; ``False`` where that is unsupported.

    Linux ``renameat2(..., RENAME_EXCHANGE)`` (glibc ≥ 2.28, kernel ≥ 3.15, most local file
    systems). Other errors raise :class:`OSError`.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _put_in_place(tmp: Path, out: Path) -> None:
    """Move the finished ``tmp`` to ``out`` with one atomic step where the system allows."""
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return
    _check_replaceable(out)  # again: files may have been added while the run was working
    _take_over_mode(tmp, out)
    if _exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the previous output
        return
    # fallback: two renames; ``out`` is absent between them (documented in docs/designs.md)
    old = out.parent / f".{_stem(out)}.old-{os.getpid()}-{secrets.token_hex(4)}"
    os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_outdir(outdir: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``outdir`` only if the block succeeds.

    The temporary directory ``.OUT.tmp-<pid>-<random>`` is a sibling of ``outdir`` (same file
    system) and is swapped into place with one atomic ``renameat2(RENAME_EXCHANGE)`` on Linux
    (elsewhere: two renames). An existing ``outdir`` is replaced only if it is empty or a
    previous gtcontrol output holding only the files listed in its ``result.json``; anything
    else is refused, naming the files, so no user file is lost. Hidden siblings left by runs
    whose process is dead are removed first. On any exception the temporary directory is
    removed and ``outdir`` is left untouched. A symbolic link ``outdir`` is followed.

    Parameters
    ----------
    outdir
        The output directory.

    Yields
    ------
    pathlib.Path
        The temporary directory to write into.

    Raises
    ------
    OutputError
        If ``outdir`` is too long, is not a directory, is the current directory (or holds it),
        is a loop of symbolic links, holds foreign files or cannot be created.
    """
    out = Path(outdir)
    check_length(out)
    out = follow_link(out)
    _refuse_working_dir(out)
    if out.name in ("", ".", ".."):  # a/b/..: its hidden siblings go beside a, not into b
        out = Path(os.path.abspath(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(out)
        _check_replaceable(out)
        tmp = _make_scratch(out, "tmp")
    except OutputError:
        raise
    except OSError as exc:
        blocker = next(
            (p for p in reversed(out.parents) if os.path.lexists(p) and not p.is_dir()), None
        )
        why = f"{show_path(blocker)} is a file, not a folder" if blocker else exc.strerror or exc
        raise OutputError(f"output: cannot create {show_path(out)} ({why})") from None
    try:
        yield tmp
        _put_in_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def run_summary(task: str, res: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """The top-level ``summary`` of ``result.json``: task, status, headline figures, seconds.

    Parameters
    ----------
    task
        The task name.
    res
        What the run returned: ``status``, and optionally ``summary`` (the task's headline
        figures: scalars by name) and ``outputs`` (whose ``message``, if a string, is used
        when ``summary`` has none).
    seconds
        The run's wall-clock time.

    Returns
    -------
    dict
        ``{"task", "status", <headline figures>..., "seconds"}``.
    """
    figures = dict(res.get("summary") or {})
    outputs = res.get("outputs")
    if "message" not in figures and isinstance(outputs, Mapping):
        if isinstance(outputs.get("message"), str):
            figures["message"] = outputs["message"]
    figures.pop("task", None)
    figures.pop("status", None)
    figures.pop("seconds", None)
    return {"task": task, "status": str(res["status"]), **figures, "seconds": seconds}


def write_run(
    outdir: str | Path,
    task: str,
    run: Callable[[Path], Mapping[str, Any]],
    *,
    title: str,
    source: str,
    inputs: Mapping[str, Any],
    options: Mapping[str, Any],
    started: float | None = None,
) -> Path:
    """Run ``run(tmpdir)`` and write the standard ``result.json`` beside its figures, atomically.

    ``run`` writes its figures into the temporary directory and returns ``{"status", "outputs",
    "figures"}`` and optionally ``"summary"`` (the task's headline figures; ``status`` a
    :class:`~gtcontrol.Status`, written as its string value). ``result.json`` then holds
    ``gtcontrol_version``, ``task``, ``title``, ``design`` (the source), ``status``, ``summary``
    (:func:`run_summary`), ``inputs``, ``options``, ``outputs``, ``figures``, ``files`` (every
    file of the folder, so a later run knows what it may replace) and ``seconds``
    (docs/designs.md). Arrays of more than :data:`NPZ_MIN_SIZE` numbers go to ``result.npz``
    (:func:`split_arrays`). Nothing replaces ``outdir`` unless all of it succeeded.

    Parameters
    ----------
    outdir
        The output directory (see :func:`atomic_outdir`).
    task
        The task name.
    run
        ``run(tmpdir) -> {"status", "outputs", "figures"[, "summary"]}``.
    title
        The design's title, echoed into ``result.json``.
    source
        The design file, echoed into ``result.json``.
    inputs
        The design's TOML document, echoed into ``result.json``.
    options
        The task options with defaults filled in, echoed into ``result.json``.
    started
        When the run began (``time.perf_counter()``: when its design file was read); ``None``:
        now. ``seconds`` counts from there.

    Returns
    -------
    pathlib.Path
        ``outdir``.

    Raises
    ------
    OutputError
        If ``outdir`` cannot be written or would lose files gtcontrol did not write.
    """
    out = Path(outdir)
    clock = time.perf_counter() if started is None else started
    with atomic_outdir(out) as tmp:
        res = run(tmp)
        doc, arrays = split_arrays(
            {
                "gtcontrol_version": __version__,
                "task": task,
                "title": title,
                "design": source,
                "status": str(res["status"]),  # a Status member: its string value
                "summary": {},
                "inputs": inputs,
                "options": dict(options),
                "outputs": res["outputs"],
                "figures": res["figures"],
            }
        )
        if arrays:
            np.savez_compressed(tmp / NPZ_NAME, **arrays)  # type: ignore[arg-type]
        seconds = time.perf_counter() - clock
        doc["summary"] = run_summary(task, res, seconds)
        doc["files"] = sorted({*relative_files(tmp), "result.json"})
        doc["seconds"] = seconds
        write_json(tmp / "result.json", doc)
    return out
