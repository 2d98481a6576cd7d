"""The ``result.json`` file format: strict, compact JSON with large arrays in ``result.npz``.

``result.json`` is strict, compact JSON: objects indented, every list of numbers on one line (a
matrix one row per line), ``inf`` as ``"inf"``, NaN as ``null``. Arrays of more than
:data:`NPZ_MIN_SIZE` numbers, and every complex number or array (JSON has none), are stored in
``result.npz`` beside it and referenced from the JSON as
``{"$npz": "result.npz", "key": ..., "shape": [...], "dtype": ...}``; :func:`load_result`
reads both back. The output folders that hold these files: :mod:`gtcontrol._output`.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GTControlError

__all__ = [
    "NPZ_MIN_SIZE",
    "NPZ_NAME",
    "NPZ_REF",
    "OutputError",
    "dumps",
    "jsonable",
    "load_result",
    "show_path",
    "split_arrays",
    "write_json",
]

#: Arrays with more numbers than this go to ``result.npz`` instead of ``result.json``.
NPZ_MIN_SIZE = 1000
#: The file beside ``result.json`` that holds its large arrays.
NPZ_NAME = "result.npz"
#: Key of a reference to an array in ``result.npz`` (see :func:`split_arrays`).
NPZ_REF = "$npz"
#: Longest one-line list of strings (longer ones get one item per line).
_LINE = 100


class OutputError(GTControlError, OSError):
    """The output directory cannot be written or would overwrite foreign files."""


def show_path(path: Path | str, limit: int = 80) -> str:
    """``path`` for a one-line message: shortened in the middle when long."""
    text = str(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}…{text[-limit // 2 :]}"


def jsonable(obj: Any) -> Any:
    """Convert numpy values, tuples and non-finite floats into strict-JSON-ready objects.

    ``inf`` becomes the string ``"inf"`` (``"-inf"``) and NaN becomes ``null``, so the file is
    valid JSON for every reader. Enum members (e.g. :class:`~gtcontrol.Status`) become their
    values.

    Parameters
    ----------
    obj
        A mapping, sequence, numpy array or scalar, enum member, string or ``None``.

    Returns
    -------
    Any
        The same data built from dicts, lists, ints, floats, strings, bools and ``None``.

    Raises
    ------
    TypeError
        For an object of another type (complex numbers included: :func:`split_arrays` moves
        them into ``result.npz`` first).
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


def _scalar(obj: Any) -> bool:
    return not isinstance(obj, (dict, list))


def _number(obj: Any) -> bool:
    return isinstance(obj, (int, float)) and not isinstance(obj, bool)


def _encode(obj: Any, level: int) -> str:
    """``obj`` (built by :func:`jsonable`) as indented JSON with lists of numbers on one line."""
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        pad = "  " * (level + 1)
        items = [f"{pad}{json.dumps(k)}: {_encode(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        if all(_scalar(v) for v in obj):
            line = "[" + ", ".join(json.dumps(v, allow_nan=False) for v in obj) + "]"
            if any(_number(v) for v in obj) or len(line) + 2 * level <= _LINE:
                return line
        pad = "  " * (level + 1)
        items = [f"{pad}{_encode(v, level + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(obj, allow_nan=False)


def dumps(data: Any) -> str:
    """Strict, compact JSON text of ``data``: objects indented, lists of numbers on one line.

    Parameters
    ----------
    data
        The data (see :func:`jsonable`).

    Returns
    -------
    str
        The JSON text (no NaN/Infinity tokens), ending with a newline.

    Examples
    --------
    >>> import numpy as np
    >>> print(dumps({"t": np.array([0.0, 0.5, np.inf]), "m": [[1, 2], [3, 4]]}), end="")
    {
      "t": [0.0, 0.5, "inf"],
      "m": [
        [1, 2],
        [3, 4]
      ]
    }
    """
    return _encode(jsonable(data), 0) + "\n"


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write strict, compact JSON (no NaN/Infinity tokens; see :func:`dumps`).

    Parameters
    ----------
    path
        The file to write.
    data
        The data (see :func:`jsonable`).
    """
    path.write_text(dumps(data), "utf-8")


def _big_array(obj: Any, min_size: int) -> np.ndarray[Any, Any] | None:
    """``obj`` as a numeric array when it is one with more than ``min_size`` numbers, or holds
    complex numbers (any size: JSON has none; a complex scalar becomes a 0-d array)."""
    if isinstance(obj, (complex, np.complexfloating)):
        return np.asarray(obj)
    if isinstance(obj, np.ndarray):
        arr = obj
    elif isinstance(obj, (list, tuple)) and len(obj) > 0:
        first = obj[0]
        while isinstance(first, (list, tuple)) and first:
            first = first[0]
        if not isinstance(first, (int, float, complex, np.number)) or isinstance(
            first, (bool, np.bool_)
        ):
            return None
        try:
            arr = np.asarray(obj)
        except (ValueError, TypeError, OverflowError):  # ragged, or mixed beyond numbers
            return None
    else:
        return None
    if arr.dtype.kind == "c" or (arr.dtype.kind in "iuf" and arr.size > min_size):
        return arr
    return None


def split_arrays(
    data: Any, *, min_size: int = NPZ_MIN_SIZE, name: str = NPZ_NAME
) -> tuple[Any, dict[str, np.ndarray[Any, Any]]]:
    """Replace the numeric arrays of more than ``min_size`` numbers in ``data`` by references.

    Each such array (a numpy array, or a rectangular nested list of numbers) becomes
    ``{"$npz": name, "key": "outputs/trajectory/mean", "shape": [...], "dtype": "float64"}``;
    the key is the array's path in ``data`` (mapping keys and list indices joined by ``/``).
    Complex numbers and arrays of any size are split off too (JSON has no complex numbers; a
    scalar is stored as a 0-d array), so that :func:`load_result` gives them back exactly.

    Parameters
    ----------
    data
        Mappings, sequences, arrays and scalars (see :func:`jsonable`).
    min_size
        Arrays with more numbers than this are split off.
    name
        The ``.npz`` file named in the references.

    Returns
    -------
    tuple
        The data with references in place of the large arrays, and the arrays by key.

    Examples
    --------
    >>> import numpy as np
    >>> doc, arrays = split_arrays({"x": np.zeros((3, 4)), "y": [1.0]}, min_size=10)
    >>> doc["x"]["key"], doc["x"]["shape"], list(arrays)
    ('x', [3, 4], ['x'])
    """
    arrays: dict[str, np.ndarray[Any, Any]] = {}

    def walk(obj: Any, path: tuple[str, ...]) -> Any:
        arr = _big_array(obj, min_size)
        if arr is not None:
            key = "/".join(path) or "data"
            while key in arrays:
                key += "_"
            arrays[key] = arr
            return {NPZ_REF: name, "key": key, "shape": list(arr.shape), "dtype": str(arr.dtype)}
        if isinstance(obj, enum.Enum) or isinstance(obj, (str, bytes)):
            return obj
        if isinstance(obj, np.ndarray) and obj.dtype.kind == "O":  # its items one by one
            obj = obj.tolist()
        if isinstance(obj, Mapping):
            return {k: walk(v, (*path, str(k))) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [walk(v, (*path, str(i))) for i, v in enumerate(obj)]
        return obj

    return walk(data, ()), arrays


def _check_declared(ref: Mapping[str, Any], arr: np.ndarray[Any, Any], file: str) -> None:
    """Refuse an array whose shape or dtype differs from what its reference declares."""
    key = ref["key"]
    if "shape" in ref:
        shape = ref["shape"]
        ok = isinstance(shape, list) and all(
            isinstance(n, int) and not isinstance(n, bool) for n in shape
        )
        if not ok or tuple(shape) != arr.shape:
            raise OutputError(
                f"output: the array {key!r} of {show_path(file)} has shape {list(arr.shape)}, "
                f"but result.json declares {show_path(repr(shape))}"
            )
    if "dtype" in ref and ref["dtype"] != str(arr.dtype):
        raise OutputError(
            f"output: the array {key!r} of {show_path(file)} has dtype {arr.dtype}, but "
            f"result.json declares {show_path(repr(ref['dtype']))}"
        )


def load_result(outdir: str | Path) -> dict[str, Any]:
    """Read ``OUTDIR/result.json`` with its ``result.npz`` arrays put back in place.

    Parameters
    ----------
    outdir
        An output directory of ``gtcontrol run`` (or the path of its ``result.json``).

    Returns
    -------
    dict
        The JSON document; every ``{"$npz": ...}`` reference replaced by its numpy array (a
        0-d one, a complex scalar, by its numpy scalar).

    Raises
    ------
    OutputError
        If ``outdir`` is not a path (a ``str`` or ``os.PathLike``), or ``result.json`` or a
        referenced array cannot be read (a damaged file, one nested too deeply, a reference to
        a file outside the folder, or an array whose shape or dtype differs from what the
        reference declares).

    Examples
    --------
    >>> res = load_result("out/quickstart")  # doctest: +SKIP
    >>> res["outputs"]["trajectory"]["t"].shape  # doctest: +SKIP
    (201,)
    """
    if not isinstance(outdir, (str, os.PathLike)) or isinstance(outdir, bytes):
        raise OutputError(
            f"outdir: expected a path (str or os.PathLike) of an output directory, got "
            f"{type(outdir).__name__}"
        )
    try:
        path = Path(outdir)
        if path.is_dir():
            path = path / "result.json"
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        text = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise OutputError(f"output: cannot read {show_path(path)} ({text})") from None
    opened: dict[str, Any] = {}

    def load(file: str) -> dict[str, Any]:
        if file in ("", ".", "..") or "/" in file or os.sep in file:
            raise OutputError(
                f"output: {show_path(path)} refers to {file!r}, not to a file beside it"
            )
        try:
            archive = np.load(path.parent / file, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("not an .npz archive")
            with archive as npz:
                return {k: npz[k] for k in npz.files}
        except Exception as exc:  # damaged: BadZipFile, zlib.error, EOFError, ValueError, ...
            raise OutputError(
                f"output: cannot read {show_path(file)} ({type(exc).__name__}: {exc})"
            ) from None

    def resolve(obj: Any) -> Any:
        if isinstance(obj, dict):
            if isinstance(obj.get(NPZ_REF), str) and isinstance(obj.get("key"), str):
                file = obj[NPZ_REF]
                if file not in opened:
                    opened[file] = load(file)
                try:
                    arr = opened[file][obj["key"]]
                except KeyError:
                    raise OutputError(
                        f"output: {show_path(file)} has no array {obj['key']!r}"
                    ) from None
                _check_declared(obj, arr, file)
                return arr[()] if arr.ndim == 0 else arr
            return {k: resolve(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [resolve(v) for v in obj]
        return obj

    try:
        resolved = resolve(data)
    except RecursionError:
        raise OutputError(f"output: cannot read {show_path(path)} (nested too deeply)") from None
    if not isinstance(resolved, dict):
        raise OutputError(f"output: {show_path(path)} is not a gtcontrol result")
    return resolved
