"""Fast checks of the documentation site's sources (the full build is `mkdocs build --strict`).

The build itself (which executes the tutorials) is CI's job (.ci/run), not pytest's: these
checks only read files, so that the site's structure cannot silently drift from the package.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

import gtcontrol

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
yaml = pytest.importorskip("yaml")

#: A fenced block that markdown-exec runs at build time: ```python exec="on" ...
EXEC_FENCE = re.compile(r'^```python\s+([^\n]*\bexec="(?:on|1|true)"[^\n]*)$', re.M)
#: An API directive of mkdocstrings: ::: dotted.path
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", re.M)


class _Loader(yaml.SafeLoader):
    """Safe loader that tolerates mkdocs' ``!!python/name:`` and ``!ENV`` tags."""


_Loader.add_multi_constructor("", lambda loader, suffix, node: None)


def _config() -> dict[str, Any]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    assert isinstance(config, dict)
    return config


def _nav_files(entry: Any) -> list[str]:
    """Every page path of a nav entry (a string, a {title: entry} map or a list)."""
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [f for value in entry.values() for f in _nav_files(value)]
    if isinstance(entry, list):
        return [f for item in entry for f in _nav_files(item)]
    raise AssertionError(f"unexpected nav entry {entry!r}")


def _nav() -> list[str]:
    return _nav_files(_config()["nav"])


def _tutorials() -> list[Path]:
    return sorted((DOCS / "tutorials").glob("*.md"))


def test_every_nav_entry_exists() -> None:
    nav = _nav()
    assert nav, "mkdocs.yml has no nav"
    missing = [p for p in nav if not (DOCS / p).is_file()]
    assert not missing, f"nav entries without a file under docs/: {missing}"
    assert len(nav) == len(set(nav)), "a page appears twice in the nav"


def test_every_page_is_in_the_nav() -> None:
    nav = set(_nav())
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not pages - nav, f"pages missing from the nav of mkdocs.yml: {sorted(pages - nav)}"


def test_site_is_offline() -> None:
    config = _config()
    assert config["theme"]["font"] is False, "theme.font must be false (no Google fonts)"
    plugins = [next(iter(p)) if isinstance(p, dict) else p for p in config["plugins"]]
    assert "markdown-exec" in plugins and "mkdocstrings" in plugins
    handler = config["plugins"][plugins.index("mkdocstrings")]["mkdocstrings"]
    options = handler["handlers"]["python"]["options"]
    assert options["docstring_style"] == "numpy"
    assert "import" not in handler["handlers"]["python"], "no inventories fetched at build time"


@pytest.mark.parametrize("path", _tutorials(), ids=lambda p: p.stem)
def test_tutorial_is_executed(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    fences = EXEC_FENCE.findall(text)
    assert len(fences) >= 3, f"{path.name}: expected executed python blocks, found {len(fences)}"
    sessions = {m.group(1) if (m := re.search(r'session="([^"]+)"', f)) else None for f in fences}
    assert None not in sessions and len(sessions) == 1, (
        f"{path.name}: every executed block must share one session (state carries over)"
    )
    assert any('result="text"' in f for f in fences), f"{path.name}: no printed numbers"
    assert any('html="1"' in f for f in fences), f"{path.name}: no figure made at build time"
    assert "savefig" in text and "pyplot" not in text, (
        f"{path.name}: figures must use matplotlib's object API"
    )
    assert f"tutorials/{path.name}" in _nav(), f"{path.name} is not in the nav"


def test_at_least_four_tutorials() -> None:
    names = {p.stem for p in _tutorials()}
    assert {"moments-vs-tokens", "pretrained-blowup", "steering", "mean-matching"} <= names


def _api_directives() -> dict[str, str]:
    """``{dotted path: page}`` of every ``::: path`` directive under docs/api."""
    found: dict[str, str] = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        for target in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            found[target] = page.name
    return found


def test_every_public_name_is_in_the_api_reference() -> None:
    documented = {path.rsplit(".", 1)[-1] for path in _api_directives() if path.count(".") == 1}
    missing = sorted(set(gtcontrol.__all__) - documented)
    assert not missing, f"public names without a '::: gtcontrol.NAME' in docs/api/: {missing}"


def test_every_api_directive_resolves() -> None:
    """Every ``::: path`` resolves, by the same lookup the site's griffe extension uses."""
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location(
        "gtcontrol_griffe", DOCS / "_ext" / "gtcontrol_griffe.py"
    )
    assert spec is not None and spec.loader is not None
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    for path, page in _api_directives().items():
        try:
            ext.resolve(path)
        except LookupError as exc:
            raise AssertionError(f"docs/api/{page}: '::: {path}': {exc}") from None
    with pytest.raises(LookupError, match="missing"):
        ext.resolve("gtcontrol.no_such_name")


def test_ci_builds_the_site_strictly() -> None:
    """README's test command and .ci/run agree, and both build the site with --strict."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in ci.splitlines() if line.startswith("python3 -m venv"))
    assert command in readme, "README's test command differs from .ci/run"
    assert "mkdocs build --strict" in command
    # mkdocs 1.6: --quiet drops warnings before --strict counts them (mkdocs/mkdocs#4126).
    build = command.split("mkdocs build", 1)[1].split("&&", 1)[0]
    assert " -q" not in build and "--quiet" not in build
    assert command.index("mypy") < command.index("mkdocs") < command.index("pytest")
