"""The public API listing in docs/api/surface.txt is the code's: an API change is a visible diff.

Regenerate it with ``python docs/_ext/api_surface.py`` after a deliberate change of a public
name, parameter, default or field (and say so in CHANGELOG.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("api_surface", ROOT / "docs/_ext/api_surface.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_surface_file_matches_the_code() -> None:
    script = _script()
    written = (ROOT / "docs/api/surface.txt").read_text()
    now = script.surface()
    if written != now:
        import difflib

        diff = "\n".join(
            difflib.unified_diff(
                written.splitlines(), now.splitlines(), "surface.txt", "code", lineterm="", n=1
            )
        )
        raise AssertionError(
            "docs/api/surface.txt is stale; run python docs/_ext/api_surface.py\n" + diff[:6000]
        )


def test_surface_lists_every_root_name_with_its_signature() -> None:
    import gtcontrol

    text = _script().surface()
    heads = {line.split("(")[0].split(":")[0].split()[-1] for line in text.splitlines() if line}
    missing = [name for name in gtcontrol.__all__ if name not in heads]
    assert not missing, missing
    assert "def simulate(" in text and "enum Status:" in text
