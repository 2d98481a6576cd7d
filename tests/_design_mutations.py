"""Mutations of design files shared by tests/cli/test_cli_hypothesis.py and
benchmarks/fuzz_designs.py.

A design is handled as the TOML document (nested dicts and lists); :func:`dumps` writes it back
as TOML. Each mutation takes a ``random.Random`` so both hypothesis (through a seed it draws) and
the seeded fuzz script use the same operations: delete a key (required ones too), set a key to a
value of a random type, add an unknown key, make a matrix ragged, scale numbers up to beyond the
floating-point range, put NaN strings, unicode or mathtext specials into strings, switch the
task, or edit the TOML text itself.
"""

from __future__ import annotations

import json
import math
import random
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Tasks whose runs take minutes (real pretrained models): never switched to by a mutation.
# a sweep starts a cluster of worker processes (seconds); tests/cli/test_sweep.py covers it
SLOW_TASKS = ("experiment", "sweep", "model")

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    return k if _BARE.fullmatch(k) else json.dumps(k, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v).__name__)


def dumps(doc: dict[str, Any]) -> str:
    """Write a TOML document: scalars first, then tables, arrays of tables as ``[[name]]``."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in doc.items() if not _is_table(v)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append(f"\n[{_key(k)}]")
            lines += [f"{_key(kk)} = {_value(vv)}" for kk, vv in v.items()]
        elif _is_table(v):
            for entry in v:
                lines.append(f"\n[[{_key(k)}]]")
                lines += [f"{_key(kk)} = {_value(vv)}" for kk, vv in entry.items()]
    return "\n".join(lines) + "\n"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) or (
        isinstance(v, list) and bool(v) and all(isinstance(e, dict) for e in v)
    )


def shipped_designs() -> dict[str, dict[str, Any]]:
    """The shipped designs/*.toml by file stem (the slow ``experiment`` one included)."""
    return {
        f.stem: tomllib.loads(f.read_text("utf-8"))
        for f in sorted((ROOT / "designs").glob("*.toml"))
    }


_FAST_TASKS = ("simulate", "compare-tokens", "analyze", "filter", "design", "steer", "experiment")


def make_fast(doc: dict[str, Any]) -> dict[str, Any]:
    """The same design with small sizes, so a run takes about a second."""
    doc = json.loads(json.dumps(doc))  # a deep copy
    task = doc.get("task")
    opts = doc.setdefault(task, {}) if task in _FAST_TASKS else {}
    if not isinstance(opts, dict):
        return doc
    if task == "simulate":
        opts.update(tokens=60, n_points=41, steps_per_layer=4)
    elif task == "compare-tokens":
        opts.update(n_tokens=[16, 32], repeats=1)  # the default (DOP853) integrator
    elif task == "analyze":
        opts.update(n_points=41)
    elif task == "filter":
        opts.update(n_points=21)
    elif task == "design":
        opts.update(n_starts=2, robustness=False)
    elif task == "steer":
        opts.update(tokens=0, max_iter=60)
        horizon = doc.setdefault("horizon", {})
        if isinstance(horizon, dict):
            horizon["n_layers"] = 2
    elif task == "experiment":
        opts.update(quick=True, n_tokens=400)
    return doc


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of the document (dict keys and list indices)."""
    out: list[tuple[Any, ...]] = []
    items: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    for k, v in items:
        out.append((*prefix, k))
        out += _paths(v, (*prefix, k))
    return out


def _get_parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for k in path[:-1]:
        doc = doc[k]
    return doc


_STRINGS = [
    "nan",
    "inf",
    "",
    "$x$",
    "$\\frac{",
    "a$b",
    "∑ tokens ✓",
    "\u200b",
    "line\nbreak",
    "😀",
    "x" * 300,
    "%s %d {}",
    "DOP853",
    "adaptive",
    "full",
    "general",
]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A TOML value of a random type: numbers (huge, tiny, non-finite), strings, lists, tables."""
    kind = rng.randrange(12 if depth < 2 else 8)
    if kind == 0:
        return rng.choice([0, 1, -1, 2, 3, 10**6, 10**7, -(10**9), 2**63 - 1])
    if kind == 1:
        return rng.choice([0.0, -0.0, 1e-300, 1e300, -1e308, 1.5, -2.5, 1e-12, 1e12])
    if kind == 2:
        return rng.choice([math.nan, math.inf, -math.inf])
    if kind == 3:
        return rng.choice(_STRINGS)
    if kind == 4:
        return rng.choice([True, False])
    if kind == 5:
        return rng.uniform(-10, 10)
    if kind == 6:
        return rng.randrange(-5, 50)
    if kind == 7:
        return 10 ** rng.randrange(300, 420)
    if kind == 8:
        n = rng.randrange(0, 4)
        return [random_value(rng, depth + 1) for _ in range(n)]
    if kind == 9:  # a matrix, maybe ragged
        d = rng.randrange(1, 4)
        rows = [[rng.uniform(-2, 2) for _ in range(d)] for _ in range(d)]
        if rng.random() < 0.5 and rows:
            rows[rng.randrange(d)].append(1.0)
        return rows
    if kind == 10:
        return {rng.choice(["A", "B", "v", "mean", "x", "é"]): random_value(rng, depth + 1)}
    return [[rng.uniform(-1, 1)] * rng.randrange(1, 3)] * rng.randrange(1, 3)


def _scale(v: Any, factor: float) -> Any:
    if isinstance(v, list):
        return [_scale(x, factor) for x in v]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if isinstance(v, int) and abs(v) > 2**1000:  # an int past the float range stays as it is
        return v
    return v * factor


#: Valid alternatives of task options (a mutation that keeps the design valid).
_VALID_OPTIONS: dict[str, dict[str, list[Any]]] = {
    "simulate": {
        "method": ["RK45", "Radau", "LSODA", "BDF"],
        "discrete": [True, False],
        "tokens": [0, 30],
    },
    "compare-tokens": {
        "method": ["DOP853", "RK45", "RK23", "rk4", "discrete"],
        "steps_per_layer": [1, 3],
    },
    "analyze": {"T": [0.0, 5.0], "plot_T": [0.0, 2.0]},
    "filter": {"n_points": [5, 11]},
    "design": {"rate": [0.5, 2.0], "cov_rate": [0.0, 3.0], "T": [0.0, 2.0]},
    "steer": {"terminal": ["bw", "kl"], "objective": ["parameter"], "mode": ["ffn"]},
}

MUTATIONS = (
    "perturb",
    "option",
    "delete",
    "set",
    "add",
    "ragged",
    "scale",
    "string",
    "task",
    "title",
    "text",
)


def mutate(doc: dict[str, Any], rng: random.Random, op: str) -> dict[str, Any] | str:
    """Apply mutation ``op`` to a copy of ``doc``; ``"text"`` returns edited TOML text."""
    doc = json.loads(json.dumps(doc, allow_nan=True))
    paths = _paths(doc)
    if op == "text":
        text = dumps(doc)
        i = rng.randrange(len(text) + 1)
        j = min(len(text), i + rng.randrange(0, 8))
        junk = "".join(
            rng.choice("[]{}=\"',.#\n 0123456789e+-abcx$\\") for _ in range(rng.randrange(4))
        )
        return text[:i] + junk + text[j:]
    if op == "task":
        from gtcontrol.cli.specs import SPECS

        doc["task"] = rng.choice([t for t in SPECS if t not in SLOW_TASKS] + ["fly", 3])
        return doc
    if op == "option":
        choices = _VALID_OPTIONS.get(str(doc.get("task")), {})
        opts = doc.get(str(doc.get("task")))
        if choices and isinstance(opts, dict):
            name = rng.choice(sorted(choices))
            opts[name] = rng.choice(choices[name])
        return doc
    if op == "title":
        doc["title"] = rng.choice(_STRINGS) + rng.choice(["", " $", " $5 and $\\alpha", "^_{}"])
        return doc
    if op == "add":
        target = rng.choice([doc] + [v for v in _containers(doc) if isinstance(v, dict)])
        target[rng.choice(["bogus", "T", "v", "mean", "cov", "A", "layers", "é"])] = random_value(
            rng
        )
        return doc
    if not paths:
        return doc
    path = rng.choice(paths)
    parent = _get_parent(doc, path)
    key = path[-1]
    if op == "perturb":  # numbers moved by a few percent: mostly still a valid design
        parent[key] = _scale(parent[key], rng.uniform(0.9, 1.1))
    elif op == "delete":
        del parent[key]
    elif op == "set":
        parent[key] = random_value(rng)
    elif op == "ragged":
        v = parent[key]
        if isinstance(v, list) and v:
            if isinstance(v[0], list) and v[0]:
                v[rng.randrange(len(v))] = v[0][:-1]
            else:
                v.append([1.0])
        else:
            parent[key] = [[1.0, 2.0], [3.0]]
    elif op == "scale":
        parent[key] = _scale(
            parent[key], rng.choice([1e155, 1e300, -1e200, 1e-320, 0.0, -1.0, 1e6])
        )
    elif op == "string":
        v = parent[key]
        parent[key] = json.dumps(v) if rng.random() < 0.3 else rng.choice(_STRINGS)
    if doc.get("task") in SLOW_TASKS:
        doc["task"] = "simulate"
    return doc


def _containers(node: Any) -> list[Any]:
    out = []
    if isinstance(node, dict):
        for v in node.values():
            if isinstance(v, (dict, list)):
                out.append(v)
                out += _containers(v)
    elif isinstance(node, list):
        for v in node:
            if isinstance(v, (dict, list)):
                out.append(v)
                out += _containers(v)
    return out
