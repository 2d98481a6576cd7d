"""Starter designs (``gtcontrol init TASK``) and the shipped examples (``gtcontrol designs``).

Every task of :data:`gtcontrol.cli.specs.SPECS` has a starter: a small, commented design that
loads as it is (and, but for ``experiment`` and ``model``, runs in seconds), with every option
of the task listed: the ones the starter sets, then the others commented out at their defaults,
each with its one-line help. The shipped examples live in the package folder
``gtcontrol/designs`` (the repository's ``designs/`` links to it), so an installed package lists
them too.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .._output import OutputError
from ..errors import DesignFileError
from .specs import SPECS

__all__ = ["ShippedDesign", "shipped_design_text", "shipped_designs", "starter", "write_starter"]

_GAUSSIAN_2D = """\
[initial]                # the initial token distribution N(mean, cov)
mean = [1.0, -0.5]
cov = [[1.0, 0.3], [0.3, 0.5]]
"""

_LAYER_2D = """\
[layer]                  # velocity A x + b + V Attn(x), attention weight exp(yᵀ B x)
A = [[0.3, -0.6], [0.6, 0.2]]
B = [[1.0, 0.2], [0.2, 0.8]]
V = -1.0                 # a number: V = -1.0 · I; V = vI, v < 0, B + Bᵀ ≻ 0 stabilizes
b = [0.1, 0.0]
"""

#: The fixed-layer problem of the starters that analyze, simulate or sweep one layer.
_LAYER_PROBLEM_2D = f"{_GAUSSIAN_2D}\n{_LAYER_2D}"

#: A standard normal start, for the starters that design the layers themselves.
_STANDARD_2D = """\
[initial]
mean = [0.0, 0.0]
cov = [[1.0, 0.0], [0.0, 1.0]]
"""

#: The sections of each starter (everything but the task's own options table).
_BODIES: dict[str, str] = {
    "simulate": f"""\
# Integrate the moment ODE of one attention layer (docs/designs.md, task `simulate`).
{_LAYER_PROBLEM_2D}
[horizon]
T = 4.0                  # depth
""",
    "compare-tokens": f"""\
# Real softmax attention on N tokens against the moment ODE: the error at depth T falls like
# N^(-1/2) (docs/designs.md, task `compare-tokens`).
seed = 0

{_LAYER_PROBLEM_2D}
[horizon]
T = 1.0
""",
    "analyze": f"""\
# The regime of a fixed layer: equilibria, stability, exact blow-up time (docs/designs.md, task
# `analyze`).
{_LAYER_PROBLEM_2D}""",
    "steer": f"""\
# Steer N(m0, Σ0) to N(m1, Σ1) in depth T with an L-layer Transformer (CasADi/IPOPT, verified
# by re-simulation; docs/designs.md, task `steer`).
seed = 0

{_STANDARD_2D}
[target]                 # where the tokens should end up
mean = [1.0, -0.5]
cov = [[0.6, 0.1], [0.1, 1.4]]

[horizon]
T = 1.0
n_layers = 4             # L: the parameters are constant on each layer

# Through a fixed network: uncomment [base] (a layer table, the keys of [layer]); its heads are
# kept and the control is the least added affine part A_k, b_k (mode "ffn", its default).
# [base]
# V = 0.3
# B = [[1.0, 0.0], [0.0, 1.0]]
# Or a pretrained model's attention sublayer (the 'experiments' extra; drop [initial] and
# [target]: the initial is the moments entering the layer, the target generated from it):
# [base]
# model = "minilm"         # a name of `gtcontrol models`, a Hugging Face folder or an .onnx file
# layer = 2                # the layer index
# start_from = "text"      # "text" (the packaged text's tokens entering the layer) or "identity"
# target = "rotated"       # "rotated" (generated) or "given" (the [target], of size d + 1)
# angle = 0.4              # rotated: root-mean-square angle of the rotation (radians)
# shift = 0.5              # rotated: mean shift per active coordinate, in sqrt(tr Σ0 / rank)
# stretch = 0.0            # rotated: deviation of the log-factors of the eigenvalues
""",
    "design": """\
# Design a time-invariant layer that carries every Gaussian to N(m*, Σ*), with a convergence
# certificate (docs/designs.md, task `design`). Add a [layer] with B (or A, V, v) to keep
# those parts fixed and design the rest with CasADi.
seed = 0

[target]
mean = [1.0, -0.5]
cov = [[1.0, 0.3], [0.3, 0.8]]
""",
    "filter": f"""\
# A Kalman–Bucy filter beside the Transformer with the same covariance dynamics
# (docs/designs.md, task `filter`). Give the filter data below, or a [layer] instead.
{_STANDARD_2D}
[horizon]
T = 5.0
""",
    "sweep": f"""\
# A parameter sweep: the layer below varied over a grid, each point analyzed (or simulated) on
# dask.distributed, one Parquet row per point (needs the 'sweep' extra; docs/sweeps.md).
{_LAYER_PROBLEM_2D}""",
    "experiment": """\
# The paper's evidence on real pretrained models, offline (needs the 'experiments' extra:
# pip install 'gtcontrol[experiments]'; docs/designs.md, task `experiment`).
seed = 0
time_limit = 3600        # seconds for the whole run
""",
    "stabilize": """\
# Keep a layer's heads and make a target a certified stable equilibrium with the smallest added
# head (or per-head gains; docs/designs.md, task `stabilize`). For a real model's attention
# sublayer drop [layer] and [target] and set model = "minilm" and layer = k below (needs the
# 'experiments' extra).
seed = 0

[layer]                  # one head that blows up on its own
V = [[0.5, 0.1], [0.0, 0.5]]
B = [[1.0, 0.0], [0.0, 1.0]]

[target]
mean = [0.5, -0.2]
cov = [[1.0, 0.2], [0.2, 0.6]]
""",
    "model": """\
# The per-layer report of any Transformer: Gaussianity of Gaussian tokens after every layer,
# blow-up time of every attention sublayer's flow from the identity and from data, dominant
# head (needs the 'experiments' extra; `gtcontrol models` lists the names; a Hugging Face
# folder or an .onnx file also works; docs/own_model.md).
seed = 0
time_limit = 600         # seconds for the whole run
""",
}

#: The options each starter sets (the others are listed commented out at their defaults).
_SET: dict[str, dict[str, Any]] = {
    "simulate": {"n_points": 201, "tokens": 500},
    "compare-tokens": {"n_tokens": [64, 256, 1024], "repeats": 3},  # slope fit in ~1 s
    "analyze": {"n_points": 201},
    "steer": {"objective": "kinetic", "tokens": 0},
    "design": {"rate": 1.0, "n_starts": 3},
    "filter": {
        "F": [[0.3, -0.5], [0.5, 0.2]],
        "H": [[1.0, 0.0], [0.0, 1.0]],
        "R": [[2.0, 0.0], [0.0, 2.0]],
        "Q": [[0.8, 0.2], [0.2, 0.5]],
    },
    "experiment": {"quick": True},
    "stabilize": {"add": "head", "rate": 1.0},
    "model": {"model": "random-bert", "n_tokens": 448, "T": 1.0, "n_null": 8},
    # a 4 × 3 grid that crosses regimes (blow-up for V_scale < 0), in a few seconds
    "sweep": {
        "run": "analyze",
        "V_scale": {"start": -1.0, "stop": 2.0, "num": 4},
        "A_shift": [-0.5, 0.0, 0.5],
        "workers": 2,
    },
}


#: Column of the help comments in the options table.
_HELP_COLUMN = 25


def _toml(value: Any) -> str:
    """``value`` (a bool, number, string or nested list of them) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {type(value).__name__}")  # pragma: no cover


def _commented(code: str, text: str) -> str:
    """``code`` with the comment ``text`` in the help column (at least two spaces after it)."""
    return f"{code.ljust(_HELP_COLUMN - 2)}  # {text}"


def _options_table(task: str) -> str:
    """The ``[task]`` table: the starter's values, then every other option commented out."""
    spec, given = SPECS[task], _SET.get(task, {})
    lines = [_commented(f"[{task}]", "the task's options (docs/designs.md)")]
    for name, value in given.items():
        lines.append(_commented(f"{name} = {_toml(value)}", spec.options[name].help))
    for name, opt in spec.options.items():
        if name not in given:
            shown = "..." if opt.default is None else _toml(opt.default)
            lines.append(_commented(f"# {name} = {shown}", opt.help))
    return "\n".join(lines) + "\n"


def _unknown_task(task: str) -> DesignFileError:
    return DesignFileError(f"unknown task {task!r}; the tasks are {', '.join(SPECS)}")


def starter(task: str) -> str:
    """The commented starter design of ``task``.

    Parameters
    ----------
    task
        A task name (a key of :data:`gtcontrol.cli.specs.SPECS`).

    Returns
    -------
    str
        The TOML text: it loads with :func:`~gtcontrol.cli.schema.load_design` as it is.

    Raises
    ------
    DesignFileError
        On an unknown task (the message lists the tasks).

    Examples
    --------
    >>> from gtcontrol.cli.schema import parse_design
    >>> parse_design(starter("simulate")).task
    'simulate'
    """
    if task not in SPECS:
        raise _unknown_task(task)
    body = _BODIES.get(task, f"# {SPECS[task].summary} (docs/designs.md, task `{task}`).\n")
    lines = body.splitlines(keepends=True)
    n_comment = next((i for i, ln in enumerate(lines) if not ln.startswith("#")), len(lines))
    head = f'task = "{task}"\ntitle = "starter {task} run"\n'
    comment, rest = "".join(lines[:n_comment]), "".join(lines[n_comment:])
    gap = "" if rest.startswith(("\n", "seed", "time_limit")) else "\n"
    return f"{comment}{head}{gap}{rest}\n{_options_table(task)}"


def write_starter(task: str, path: str | Path) -> Path:
    """Write the starter design of ``task`` to ``path``; never overwrite a file.

    Parameters
    ----------
    task
        A task name.
    path
        The new design file.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    DesignFileError
        On an unknown task.
    OutputError
        If ``path`` exists or cannot be created.
    """
    text = starter(task)
    target = Path(path)
    try:
        with open(target, "x", encoding="utf-8") as fh:  # "x": refuse an existing file
            fh.write(text)
    except FileExistsError:
        if target.is_dir():
            raise OutputError(
                f"init: {target} is a directory; give the new file's path "
                f"(e.g. -o {target / f'{task}.toml'})"
            ) from None
        raise OutputError(
            f"init: {target} exists; gtcontrol init never overwrites a file (give another -o)"
        ) from None
    except OSError as exc:
        if not target.parent.is_dir():
            raise OutputError(
                f"init: cannot create {target}: the folder {target.parent} does not exist"
            ) from None
        raise OutputError(f"init: cannot create {target} ({exc.strerror or exc})") from None
    return target


@dataclass(frozen=True)
class ShippedDesign:
    """One example design shipped with the package.

    Attributes
    ----------
    name
        The file stem (``quickstart`` for ``quickstart.toml``).
    task, title
        The design's ``task`` and ``title``.
    """

    name: str
    task: str
    title: str


def _designs_folder() -> Any:
    return resources.files("gtcontrol") / "designs"


def shipped_designs() -> list[ShippedDesign]:
    """The example designs shipped with the package, by name.

    Returns
    -------
    list of ShippedDesign
        One entry per ``gtcontrol/designs/*.toml``; a file that is not valid TOML is listed
        with the task ``?``.
    """
    found = []
    for entry in _designs_folder().iterdir():
        if not entry.name.endswith(".toml") or not entry.is_file():
            continue
        try:
            doc = tomllib.loads(entry.read_text("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            doc = {}
        task = doc.get("task")
        title = doc.get("title")
        found.append(
            ShippedDesign(
                name=entry.name[: -len(".toml")],
                task=task if isinstance(task, str) else "?",
                title=title if isinstance(title, str) else "",
            )
        )
    return sorted(found, key=lambda d: d.name)


def shipped_design_text(name: str) -> str:
    """The text of the shipped design ``name`` (``quickstart`` or ``quickstart.toml``).

    Parameters
    ----------
    name
        A name listed by :func:`shipped_designs`.

    Returns
    -------
    str
        The TOML text.

    Raises
    ------
    DesignFileError
        If no shipped design has that name (the message lists them).
    """
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    names = [d.name for d in shipped_designs()]
    if stem not in names or os.sep in stem or "/" in stem:
        raise DesignFileError(
            f"no shipped design {name!r}; the shipped designs are {', '.join(names)}"
        )
    text: str = (_designs_folder() / f"{stem}.toml").read_text("utf-8")
    return text
