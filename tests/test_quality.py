"""Static checks run with the suite: ruff lint, ruff format and mypy on the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the 'test' extra")
    return found


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_lint() -> None:
    proc = _run(_tool("ruff"), "check", "gtcontrol", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
    proc = _run(_tool("ruff"), "format", "--check", "gtcontrol", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = _run(_tool("mypy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_api_is_exported() -> None:
    import gtcontrol

    for name in gtcontrol.__all__:
        assert hasattr(gtcontrol, name), name
