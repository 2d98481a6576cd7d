"""Atomic output directories and JSON encoding of results (docs/designs.md)."""

from __future__ import annotations

import enum
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ._version import __version__
from .errors import GTControlError

__all__ = ["atomic_outdir", "jsonable", "write_json", "write_run"]


class OutputError(GTControlError, OSError):
    """The output directory cannot be written or would overwrite foreign files."""


def jsonable(obj: Any) -> Any:
    """Convert numpy values, tuples and non-finite floats into strict-JSON-ready objects.

    ``inf`` becomes the string ``"inf"`` (``"-inf"``) and NaN becomes ``null``, so the file is
    valid JSON for every reader. Enum members (e.g. :class:`~gtcontrol.Status`) become their
    values.
    """
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer, int)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        x = float(obj)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if obj is None or isinstance(obj, str):
        return obj
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write strict JSON (no NaN/Infinity tokens)."""
    path.write_text(json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n", "utf-8")


@contextmanager
def atomic_outdir(outdir: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``outdir`` only if the block succeeds.

    The temporary directory is a sibling of ``outdir`` (same file system, so the final
    ``rename`` is atomic). An existing ``outdir`` is replaced only if it is empty or a previous
    gtcontrol output (it holds ``result.json``); anything else is refused so no user file is lost.
    On any exception the temporary directory is removed and ``outdir`` is left untouched.
    """
    out = Path(outdir)
    if out.exists():
        if not out.is_dir():
            raise OutputError(f"output: {out} exists and is not a directory")
        if any(out.iterdir()) and not (out / "result.json").is_file():
            raise OutputError(
                f"output: {out} exists, is not empty and holds no result.json; "
                "choose another -o directory"
            )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"output: cannot create {out} ({exc.strerror or exc})") from None
    try:
        yield tmp
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_run(
    outdir: str | Path,
    task: str,
    run: Callable[[Path], Mapping[str, Any]],
    *,
    title: str,
    source: str,
    inputs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> Path:
    """Run ``run(tmpdir)`` and write the standard ``result.json`` beside its figures, atomically.

    ``run`` writes its figures into the temporary directory and returns ``{"status", "outputs",
    "figures"}`` (``status`` a :class:`~gtcontrol.Status`, written as its string value).
    ``result.json`` then holds ``gtcontrol_version``, ``task``, ``title``, ``design`` (the
    source), ``inputs``, ``options``, ``status``, ``outputs``, ``figures`` and ``seconds``
    (docs/designs.md). Nothing replaces ``outdir`` unless all of it succeeded.

    Parameters
    ----------
    outdir
        The output directory (see :func:`atomic_outdir`).
    task
        The task name.
    run
        ``run(tmpdir) -> {"status", "outputs", "figures"}``.
    title, source, inputs, options
        Echoed into ``result.json``: the design's title, its file, its TOML document and the
        task options with defaults filled in.

    Returns
    -------
    pathlib.Path
        ``outdir``.
    """
    out = Path(outdir)
    clock = time.perf_counter()
    with atomic_outdir(out) as tmp:
        res = run(tmp)
        write_json(
            tmp / "result.json",
            {
                "gtcontrol_version": __version__,
                "task": task,
                "title": title,
                "design": source,
                "inputs": inputs,
                "options": dict(options),
                "status": str(res["status"]),  # a Status member: its string value
                "outputs": res["outputs"],
                "figures": res["figures"],
                "seconds": time.perf_counter() - clock,
            },
        )
    return out
