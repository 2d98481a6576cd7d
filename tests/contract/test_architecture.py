"""The package's structure, checked: layering, no import cycles, module and function sizes,
documented parameters of every public callable, and the one result protocol
(docs/architecture.md)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import gtcontrol
import gtcontrol.experiments
import gtcontrol.interop
from gtcontrol import Result, Status
from gtcontrol._status import Outcome, ResultFields

PKG = Path(gtcontrol.__file__).resolve().parent

#: Rank of each part of the package: a module may import only parts of equal or lower rank.
RANKS = {
    "errors": 0,
    "_version": 0,
    "_linalg": 0,
    "_status": 0,
    "_validation": 0,
    "_output": 0,
    "_result_file": 0,
    "_progress": 0,
    "_display": 0,
    "_readonly": 0,
    "_blas": 0,
    "_jobs": 0,
    "_cluster": 0,
    "_docstring": 0,
    "model": 1,
    "analysis": 2,
    "control": 3,
    "plotting": 4,
    "interop": 5,  # reading someone else's network: below everything that runs one
    "experiments": 6,
    "": 7,  # the package root re-exports model/analysis/control
    "cli": 8,
    "__main__": 9,
}
MAX_LINES = 1500  # hard ceiling: a cohesive module of one idea may be long; split by idea, not size


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(["gtcontrol", *parts])] = path
    return mods


def _source(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module a ``from ... import`` in module ``name`` (file ``path``) reads from."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Every gtcontrol module that ``name`` imports, at module level or inside functions."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = _source(node, name, path)
            if not target.startswith("gtcontrol"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield sub if sub in modules else target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gtcontrol"):
                    yield alias.name


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {t for t in _imports(name, path, modules) if t != name}
        for name, path in modules.items()
    }


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_lower_layers_never_import_higher_ones() -> None:
    bad = [
        f"{src} -> {dst}"
        for src, targets in _graph().items()
        for dst in targets
        if RANKS[_part(dst)] > RANKS[_part(src)]
    ]
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles_even_through_function_level_imports() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


#: The underscore names that still cross a module boundary, each with the reason it must.
PRIVATE_NAMES_ACROSS_MODULES: dict[tuple[str, str, str], str] = {}
#: The ceiling on that list: a private name another module needs is a plain name in its home.
MAX_PRIVATE_NAMES_ACROSS_MODULES = 15


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_names_across_modules() -> set[tuple[str, str, str]]:
    """``(importing module, imported module, name)`` for every ``from X import _y`` (absolute or
    relative, at module level or inside functions) and every ``X._y`` on an imported module X,
    where X is another gtcontrol module and ``_y`` is not itself a module (importing a private
    module is fine: ``from . import _jobs``)."""
    modules = _modules()
    found = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        bound: dict[str, str] = {}  # local names of imported gtcontrol modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _source(node, name, path)
                if not source.startswith("gtcontrol"):
                    continue
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif source != name and _is_private(alias.name):
                        found.add((name, source, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules:
                        bound[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and bound.get(node.value.id, name) != name
                and _is_private(node.attr)
            ):
                found.add((name, bound[node.value.id], node.attr))
    return found


def test_no_private_names_cross_module_boundaries() -> None:
    """A name another module needs is a plain name in its home (a shared kernel in a module
    named for it); the few underscore names that still cross are listed with their reason."""
    assert len(PRIVATE_NAMES_ACROSS_MODULES) <= MAX_PRIVATE_NAMES_ACROSS_MODULES
    assert all(len(reason) > 20 for reason in PRIVATE_NAMES_ACROSS_MODULES.values())
    found = _private_names_across_modules()
    new = [
        f"{a} imports {c} from {b}"
        for a, b, c in sorted(found - PRIVATE_NAMES_ACROSS_MODULES.keys())
    ]
    assert not new, (
        "private names across modules (give each a plain name in its home):\n" + "\n".join(new)
    )
    gone = sorted(PRIVATE_NAMES_ACROSS_MODULES.keys() - found)
    assert not gone, f"listed but no longer imported (drop them from the list): {gone}"


def test_no_module_exceeds_the_size_ceiling() -> None:
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    too_big = {k: v for k, v in sizes.items() if v > MAX_LINES}
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"


#: The longest a function or method may be: lines from its ``def`` to its end, its docstring
#: left out; blank and comment lines count (a reader scrolls past them too), and a nested
#: function counts in the one that holds it. A longer one is cut into named steps.
MAX_FUNCTION_LINES = 120


def _function_lengths() -> dict[str, int]:
    """``{"path:line name": length}`` of every function and method in the package (the
    length as :data:`MAX_FUNCTION_LINES` measures it)."""
    lengths = {}
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                assert first.end_lineno is not None
                length -= first.end_lineno - first.lineno + 1
            lengths[f"{path.relative_to(PKG)}:{node.lineno} {node.name}"] = length
    return lengths


def test_no_function_is_longer_than_120_lines() -> None:
    lengths = _function_lengths()
    assert len(lengths) > 1000  # every function was found
    too_long = {k: v for k, v in sorted(lengths.items()) if v > MAX_FUNCTION_LINES}
    assert not too_long, (
        f"functions over {MAX_FUNCTION_LINES} lines (docstring excluded; cut them into named "
        f"steps): {too_long}"
    )


# -- documentation of every public parameter ------------------------------------------------

_SECTION = re.compile(r"^(\s*)(Parameters|Attributes|Other Parameters)\n\s*-{3,}\n", re.M)


def _documented_names(doc: str) -> set[str]:
    """Parameter names listed in the numpydoc Parameters/Attributes sections of ``doc``."""
    names: set[str] = set()
    doc = inspect.cleandoc(doc)
    for match in _SECTION.finditer(doc):
        body = doc[match.end() :]
        for line in body.splitlines():
            if re.match(r"^\S.*\n?$", line) and re.match(r"^[A-Z][a-z]+( [A-Z][a-z]+)?$", line):
                break  # next section title
            if line.startswith("---"):
                break
            if line and not line[0].isspace():
                head = line.split(" : ")[0]
                for name in head.split(","):
                    names.add(name.strip().lstrip("*"))
    return names


def _public_callables() -> Iterator[tuple[str, object]]:
    for mod in (gtcontrol, gtcontrol.interop, gtcontrol.experiments):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{mod.__name__}.{name}", obj


def _signature_params(obj: object) -> list[str]:
    target = obj
    if inspect.isclass(obj):
        if issubclass(obj, BaseException) or not (
            dataclasses.is_dataclass(obj) or "__init__" in vars(obj)
        ):
            return []
        target = obj.__init__  # type: ignore[misc]
    try:
        sig = inspect.signature(target)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "cls")
        and not p.name.startswith("_")
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


@pytest.mark.parametrize(
    ("name", "obj"),
    list(_public_callables()),
    # the name alone: an object's repr holds its address, which differs between processes
    ids=[name for name, _ in _public_callables()],
)
def test_every_public_parameter_is_documented(name: str, obj: object) -> None:
    params = _signature_params(obj)
    if not params:
        return
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and "__init__" in vars(obj) and obj.__init__.__doc__:
        doc += "\n" + inspect.getdoc(obj.__init__)  # type: ignore[operator]
    missing = [p for p in params if p not in _documented_names(doc)]
    assert not missing, f"{name}: parameters not documented: {missing}"


def test_no_runtime_docstring_keeps_a_fragment_placeholder() -> None:
    """Docstrings sharing a fragment (gtcontrol._docstring.fill) are complete at runtime."""
    import importlib

    placeholder = re.compile(r"^\s*%\(\w+\)s\s*$", re.M)
    unfilled = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and placeholder.search(doc):
                unfilled.append(f"{name}.{attr}")
    assert not unfilled, f"docstrings with an unfilled %(name)s line: {unfilled}"


# -- the result protocol ----------------------------------------------------------------------


def _public_functions() -> dict[str, object]:
    """Every public function of the root, the interop layer and the experiments, by name."""
    return {name: obj for name, obj in _public_callables() if inspect.isfunction(obj)}


def _returns(func: object) -> object:
    return inspect.signature(func, eval_str=True).return_annotation  # type: ignore[arg-type]


def _is_result_class(cls: object) -> bool:
    return inspect.isclass(cls) and all(
        _has(cls, a) for a in ("success", "status", "message", "stats")
    )


def _result_classes() -> dict[str, type]:
    """The result classes, found from the public functions' return types and the public classes
    with a ``success`` (not a hand-written list); table rows with a bare ``status`` are not."""
    found: dict[str, type] = {}
    for func in _public_functions().values():
        ret = _returns(func)
        if inspect.isclass(ret) and _has(ret, "status"):
            found[ret.__name__] = ret
    for _name, obj in _public_callables():  # results held by results (PathEss, ...)
        if inspect.isclass(obj) and (issubclass(obj, Outcome) or hasattr(obj, "success")):
            found[obj.__name__] = obj
    return found


def _has(cls: type, attr: str) -> bool:
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return attr in fields or hasattr(cls, attr)


def test_the_result_classes_are_found() -> None:
    found = _result_classes()
    assert {"Trajectory", "CovarianceFlow", "SteeringResult", "ClosenessCurve"} <= set(found)
    assert len(found) >= 25, sorted(found)


@pytest.mark.parametrize(
    "cls", sorted(_result_classes().values(), key=lambda c: c.__name__), ids=lambda c: c.__name__
)
def test_every_public_result_follows_the_protocol(cls: type) -> None:
    missing = [a for a in ("success", "status", "message", "stats") if not _has(cls, a)]
    assert not missing, f"{cls.__name__} lacks {missing}"


#: The public namespaces: the modules that docs/api/surface.txt lists.
SURFACE = PKG.parent / "docs" / "api" / "surface.txt"


def _classes_in(annotation: object) -> Iterator[type]:
    """The classes named by a resolved annotation (``X | None``, ``tuple[X, ...]``, ...)."""
    if inspect.isclass(annotation) and not typing.get_args(annotation):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _classes_in(arg)


def _reachable_classes() -> set[type]:
    """Every gtcontrol class a user can be handed: the classes of the public namespaces, the
    return types of their functions and, recursively, the types of every dataclass field."""
    namespaces = re.findall(r"^## (\S+) \(", SURFACE.read_text(), re.M)
    assert "gtcontrol.experiments" in namespaces, namespaces
    stack: list[type] = []
    for name in namespaces:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if inspect.isclass(obj):
                stack.append(obj)
            elif inspect.isfunction(obj):
                stack.extend(_classes_in(typing.get_type_hints(obj).get("return")))
    seen: set[type] = set()
    while stack:
        cls = stack.pop()
        if cls in seen or not cls.__module__.startswith("gtcontrol"):
            continue
        seen.add(cls)
        if dataclasses.is_dataclass(cls):
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                stack.extend(_classes_in(hints[f.name]))
    return seen


def _status_classes() -> dict[str, type]:
    """Every reachable class with a ``status`` (a field, a property or an attribute): a result,
    whatever its name or its place (a row of a table, a record inside a result)."""
    found = {
        cls.__name__: cls
        for cls in _reachable_classes()
        if _has(cls, "status") and not getattr(cls, "_is_protocol", False)
    }
    return found


def test_the_classes_with_a_status_are_found() -> None:
    found = _status_classes()
    rows_and_records = {"FlowRow", "StabilizationRow", "LayerGaussianity", "MapRegime"}
    assert {"Trajectory", "OTSteering", "Verification", "KineticEnergy"} | rows_and_records <= set(
        found
    )
    assert len(found) >= 40, sorted(found)


@pytest.mark.parametrize(
    "cls", sorted(_status_classes().values(), key=lambda c: c.__name__), ids=lambda c: c.__name__
)
def test_every_class_with_a_status_derives_the_protocol(cls: type) -> None:
    """One definition of the protocol: the fields of ``ResultFields`` (keyword-only, never
    re-declared) and ``success`` derived from ``status`` by ``Outcome`` (never overridden)."""
    assert dataclasses.is_dataclass(cls), f"{cls.__name__} is not a dataclass"
    assert issubclass(cls, ResultFields), f"{cls.__name__} does not derive ResultFields"
    assert issubclass(cls, Outcome), f"{cls.__name__} does not derive Outcome"
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in ("status", "message", "stats"):
        assert fields[name].kw_only is True, f"{cls.__name__}.{name} is not keyword-only"
        again = [
            k.__name__
            for k in cls.__mro__
            if k is not ResultFields
            and dataclasses.is_dataclass(k)
            and name in inspect.get_annotations(k)
        ]
        assert not again, f"{cls.__name__}: {again} re-declare {name}"
    success = inspect.getattr_static(cls, "success")
    assert success is vars(Outcome)["success"], f"{cls.__name__} overrides success"


def test_results_of_real_calls_follow_the_protocol() -> None:
    layer = gtcontrol.Layer(A=[[-1.0, 0.2], [0.0, -0.5]], B=[[1.0, 0.0], [0.0, 2.0]], V=-0.5)
    g0 = gtcontrol.Gaussian([1.0, 0.0], [[1.0, 0.2], [0.2, 0.5]])
    results = [
        gtcontrol.simulate(layer, g0, T=1.0),
        gtcontrol.blowup_analysis(layer, g0),
        gtcontrol.equilibria(layer),
        gtcontrol.analyze(layer, g0),
        gtcontrol.ot_steering(g0, gtcontrol.Gaussian([0.0, 1.0], [[2.0, 0.0], [0.0, 1.0]]), 1.0),
    ]
    for res in results:
        assert isinstance(res, Result), type(res).__name__
        assert isinstance(res.status, Status), type(res).__name__
        assert isinstance(res.success, bool) and isinstance(res.message, str)
        assert res.success and res.message, type(res).__name__


def test_status_is_one_str_enum() -> None:
    assert {"SUCCESS", "BLOWUP", "BUDGET_EXHAUSTED", "INFEASIBLE", "FAILED"} <= set(
        Status.__members__
    )
    assert Status.BLOWUP == "blowup" and str(Status.SUCCESS) == "success"


#: Public functions that return a result but run no loop (closed forms and direct slycot
#: solves): they need no ``time_limit``. Every other function that returns a result is a solver.
DIRECT = {
    "gtcontrol.ot_steering": "the closed-form Bures–Wasserstein geodesic",
    "gtcontrol.solve_bernoulli": "one slycot Lyapunov/CARE solve",
    "gtcontrol.kalman_steady_state": "one slycot CARE solve (python-control)",
    "gtcontrol.design_certificate": "residuals, slycot and one linearization spectrum",
}


def _solvers() -> list[str]:
    """Every public function that returns a result or takes a ``time_limit``, but the direct ones.

    Found from the signatures (not a hand-written list), so a new solver is checked at once.
    """
    names = []
    for name, func in _public_functions().items():
        takes = "time_limit" in inspect.signature(func).parameters  # type: ignore[arg-type]
        if (takes or _is_result_class(_returns(func))) and name not in DIRECT:
            names.append(name)
    return sorted(names)


SOLVERS = _solvers()


def test_the_solvers_are_found() -> None:
    short = {n.rpartition(".")[2] for n in SOLVERS}
    assert {"simulate", "riccati_flow", "kalman_covariance", "steer", "simulate_closure"} <= short
    assert not set(DIRECT) - set(_public_functions()), "DIRECT names a function that is gone"


@pytest.mark.parametrize("name", SOLVERS)
def test_every_solver_takes_a_keyword_only_time_limit(name: str) -> None:
    func = _public_functions()[name]
    param = inspect.signature(func).parameters.get("time_limit")  # type: ignore[arg-type]
    assert param is not None, f"{name} has no time_limit"
    assert param.kind is param.KEYWORD_ONLY and param.default is None


@pytest.mark.parametrize("name", SOLVERS)
def test_no_solver_takes_an_options_object_or_arbitrary_keywords(name: str) -> None:
    params = inspect.signature(_public_functions()[name]).parameters  # type: ignore[arg-type]
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), name
    assert "options" not in params, name


# -- one name per idea ------------------------------------------------------------------------

#: The one spelling of each idea in a public signature, and the spellings it replaced. A
#: parameter named like a right-hand entry fails (docs/architecture.md, "One name per idea").
VOCABULARY = {
    # depths at which to record (an array): moments, or the token clouds of simulate_tokens
    "times": ("t_eval", "t_out", "depths", "ts", "snapshot_times"),
    # how many evenly spaced depths to record, whatever is recorded there
    "n_points": ("n_times", "n_eval", "num_points", "n_snapshots", "snapshots"),
    # the initial state: a Gaussian (kalman_covariance also takes its covariance alone)
    "initial": ("P0", "initial_cov", "x0_cov"),
    # how many tokens the check of a design runs (None: no check); its result a TokenCertificate
    "token_check": ("verify_tokens", "check_tokens", "token_verification"),
    # the integrator: a scipy pair's name ("DOP853", "RK45", "RK23") or a fixed-step scheme,
    # one keyword
    "method": ("ivp_method", "integrator", "solver_method"),
    "max_evals": ("max_evaluations", "max_rhs", "max_nfev"),  # right-hand-side evaluations
    "max_iter": ("maxiter", "max_iterations", "n_iter"),  # iterations
    "max_steps": ("maxsteps", "n_steps_max"),  # certified steps of a march
    "max_work": ("work_cap", "max_flops"),  # floating-point work or token pairs
    "seed": ("rng", "random_state", "random_seed"),  # randomness
    "T": ("horizon", "depth", "t_final", "t_end"),  # the depth of a flow
    "time_limit": ("timeout", "max_time", "wall_time"),  # seconds
    "target": ("target_mean", "target_cov"),  # the Gaussian to reach
    # option families: one frozen, validated value each (docs/architecture.md)
    "solver": ("ipopt", "ipopt_options"),  # IpoptSettings(max_iter=, tol=, options=)
    "robustness": ("robustness_directions", "robustness_samples", "robustness_max"),
    "bounds": ("entry_bounds", "norm_bounds", "cov_bound"),  # SteeringBounds(entry=, norm=, cov=)
    "collocation": ("intervals", "max_corrections", "parallelization", "cache"),  # Collocation
    "newton": ("kron_max_dim", "deflation_power", "deflation_shift"),  # NewtonSettings
    # weight matrices are upper case, as A, B, V (Layer.from_projections, AttentionWeights,
    # FeedForward, FeedForwardWeights); a feed-forward's are W_in, W_out (nn.Linear layout)
    "W_Q": ("w_q", "wq"),
    "W_K": ("w_k", "wk"),
    "W_V": ("w_v", "wv"),
    "W_O": ("w_o", "wo"),
    "b_Q": ("b_q", "bq"),
    "b_K": ("b_k", "bk"),
    "b_V": ("b_v", "bv"),
    "b_O": ("b_o", "bo"),
    "W_in": ("w_in", "U"),
    "W_out": ("w_out", "W"),
}
_FORBIDDEN = {old: new for new, olds in VOCABULARY.items() for old in olds}
#: Names refused only for a count: ``layers`` is a sequence (of layers, or of layer indices)
#: and ``samples`` an array of samples, so their counts are ``n_layers`` (as
#: ``Schedule.n_layers``) and ``n_samples``.
_FORBIDDEN_FOR_INT = {"layers": "n_layers", "samples": "n_samples", "directions": "n_directions"}


def _functions_and_methods() -> Iterator[tuple[str, object]]:
    for name, obj in _public_callables():
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, raw in vars(obj).items():
                raw = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
                # A generated __init__ takes the fields, and an option family's fields are the
                # very names the table refuses as flat keywords; a hand-written one is checked.
                generated = (
                    dataclasses.is_dataclass(obj)
                    and attr == "__init__"
                    and obj.__dataclass_params__.init  # type: ignore[attr-defined]
                )
                if inspect.isfunction(raw) and not generated:
                    if attr == "__init__" or not attr.startswith("_"):
                        yield f"{name}.{attr}", raw


def test_one_keyword_spelling_per_idea() -> None:
    bad = []
    for name, func in _functions_and_methods():
        for p, param in inspect.signature(func).parameters.items():  # type: ignore[arg-type]
            if p in _FORBIDDEN:
                bad.append(f"{name}({p}=): use {_FORBIDDEN[p]}")
            if p in _FORBIDDEN_FOR_INT and param.annotation in (int, "int"):
                bad.append(f"{name}({p}: int): a count, use {_FORBIDDEN_FOR_INT[p]}")
    assert not bad, "\n".join(bad)


#: Second spellings of a result's ``success``, refused as attributes of a result class (as
#: ``PathEss.ok`` and ``DesignCertificate.valid`` were): ``.success`` is the one.
_SUCCESS_ALIASES = ("ok", "valid", "is_valid", "succeeded", "passed")


def _attributes(cls: type) -> set[str]:
    """A class's public attributes: its dataclass fields, properties and methods."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return {a for a in fields | set(dir(cls)) if not a.startswith("_")}


def test_a_result_spells_its_success_one_way() -> None:
    bad = [
        f"{name}.{a}: use .success"
        for name, cls in sorted(_result_classes().items())
        for a in _SUCCESS_ALIASES
        if a in _attributes(cls)
    ]
    assert not bad, "\n".join(bad)


#: The arrays of a feed-forward ``W_out σ(W_in x + b_in) + b_out``, in nn.Linear layout: the
#: one spelling of :class:`gtcontrol.FeedForward` and :class:`gtcontrol.interop.FeedForwardWeights`.
_FEED_FORWARD_NAMES = {"W_in", "W_out", "b_in", "b_out", "activation", "gated"}


def test_a_feed_forward_spells_its_weights_one_way() -> None:
    """Every public value with an ``activation`` (a feed-forward; a result such as
    ``ClosenessCurve`` names the activation it was run with) names its fields and keywords from
    one set (``FeedForward(W, U, c)`` beside ``FeedForwardWeights(W_in, W_out, ...)`` was
    two spellings)."""
    found, bad = [], []
    for name, obj in _public_callables():
        if not (inspect.isclass(obj) and dataclasses.is_dataclass(obj)):
            continue
        fields = {f.name for f in dataclasses.fields(obj)}
        if "activation" not in fields or _is_result_class(obj):
            continue
        found.append(name)
        names = fields | set(_signature_params(obj))
        bad += [f"{name}.{n}" for n in sorted(names - _FEED_FORWARD_NAMES)]
    assert {"gtcontrol.FeedForward", "gtcontrol.interop.FeedForwardWeights"} <= set(found), found
    assert not bad, f"feed-forward names outside {sorted(_FEED_FORWARD_NAMES)}: {bad}"


_DenseHeads = tuple[tuple[np.ndarray, np.ndarray], ...]


def _heads_from_projections() -> dict[str, typing.Callable[..., _DenseHeads]]:
    """The public constructors of attention heads from nn.Linear projections, each reduced to
    the dense heads ``((V_h, B_h), ...)`` it builds."""

    def home(*w: object, **kw: object) -> _DenseHeads:
        return gtcontrol.FactoredHeads.from_projections(*w, **kw).dense()  # type: ignore[arg-type]

    def layer(*w: object, **kw: object) -> _DenseHeads:
        return gtcontrol.Layer.from_projections(*w, **kw).heads  # type: ignore[arg-type]

    def weights(*w: object, **kw: object) -> _DenseHeads:
        att = gtcontrol.interop.AttentionWeights(*w, **kw)  # type: ignore[arg-type]
        assert att.layer().n_heads == att.n_heads  # the affine lift builds on the home too
        return att.dense_heads()

    return {
        "FactoredHeads.from_projections": home,
        "Layer.from_projections": layer,
        "AttentionWeights": weights,
    }


def test_attention_from_projections_has_one_home() -> None:
    """``FactoredHeads.from_projections`` is the one home of the head split, its checks and the
    default scale: the other constructors from projections build the same heads from the same
    weights, bit for bit, and refuse the same bad weights with the same message."""
    rng = np.random.default_rng(0)
    wq, wk, wv = (rng.standard_normal((4, 3)) for _ in range(3))
    wo = rng.standard_normal((3, 4))
    builders = _heads_from_projections()
    reference = builders["FactoredHeads.from_projections"](wq, wk, wv, wo, n_heads=2)
    for name, build in builders.items():
        heads = build(wq, wk, wv, wo, n_heads=2)
        assert len(heads) == len(reference) == 2, name
        for (v, b), (v0, b0) in zip(heads, reference):
            np.testing.assert_array_equal(v, v0, err_msg=name)
            np.testing.assert_array_equal(b, b0, err_msg=name)
    nan_v = wv.copy()
    nan_v[0, 0] = np.nan
    bad_cases = {
        "n_heads not dividing": ((wq, wk, wv, wo), {"n_heads": 3}),
        "W_K of another shape": ((wq, wk[:2], wv, wo), {"n_heads": 2}),
        "W_O not transposed": ((wq, wk, wv, wo.T), {"n_heads": 2}),
        "empty W_Q": ((np.zeros((0, 3)), wk, wv, wo), {"n_heads": 2}),
        "NaN in W_V": ((wq, wk, nan_v, wo), {"n_heads": 2}),
        "negative scale": ((wq, wk, wv, wo), {"n_heads": 2, "scale": -1.0}),
    }
    for case, (w, kw) in bad_cases.items():
        messages = {}
        for name, build in builders.items():
            with pytest.raises(gtcontrol.InvalidParametersError) as err:
                build(*w, **kw)
            messages[name] = str(err.value)
        assert len(set(messages.values())) == 1, (case, messages)


#: The option families of the public API, by the keyword that takes them.
OPTION_GROUPS = {
    "solver": gtcontrol.IpoptSettings,
    "bounds": gtcontrol.SteeringBounds,
    "collocation": gtcontrol.Collocation,
    "robustness": gtcontrol.RobustnessCheck,
    "newton": gtcontrol.NewtonSettings,
}


def test_an_option_family_is_not_also_spread_flat() -> None:
    """A function that takes a family as one value takes none of its fields as keywords."""
    bad = []
    for name, func in _public_functions().items():
        params = set(inspect.signature(func).parameters)  # type: ignore[arg-type]
        for key, cls in OPTION_GROUPS.items():
            flat = params & {f.name for f in dataclasses.fields(cls)} if key in params else set()
            if flat:
                bad.append(f"{name}: {sorted(flat)} belong to {key}={cls.__name__}(...)")
    assert not bad, bad


#: Pairs that differ only by case and are two ideas in the paper's notation (docs/theory.md §1):
#: ``B`` the attention's bilinear form, ``b`` the feed-forward bias; ``T`` the depth of a flow,
#: ``t`` the depths recorded. (``V`` and ``v = V/I`` were one idea: ``V`` now takes a number.)
NOTATION = {frozenset({"B", "b"}), frozenset({"T", "t"})}


def test_no_two_keywords_of_a_signature_differ_only_by_case() -> None:
    bad = []
    for name, func in _functions_and_methods():
        params = list(inspect.signature(func).parameters)  # type: ignore[arg-type]
        for i, p in enumerate(params):
            for q in params[i + 1 :]:
                if p.lower() == q.lower() and frozenset({p, q}) not in NOTATION:
                    bad.append(f"{name}({p}, {q})")
    assert not bad, bad


def test_the_first_argument_is_named_by_what_it_is() -> None:
    """``layer`` for a :class:`Layer`, ``control`` for any control (a Layer, a Schedule, ...);
    ``model`` is kept for a Transformer network (the experiments)."""
    bad = []
    for name, func in _public_functions().items():
        params = list(inspect.signature(func, eval_str=True).parameters.values())  # type: ignore[arg-type]
        if not params:
            continue
        first = params[0]
        ann = first.annotation
        if ann is gtcontrol.Layer and first.name != "layer":
            bad.append(f"{name}({first.name}: Layer): name it layer")
        if isinstance(ann, types.UnionType) and gtcontrol.Schedule in ann.__args__:
            if first.name != "control":
                bad.append(f"{name}({first.name}: a control): name it control")
        if first.name == "model" and not name.startswith(
            ("gtcontrol.experiments.", "gtcontrol.interop.")
        ):
            bad.append(f"{name}(model): model is a Transformer network (interop, experiments)")
    assert not bad, "\n".join(bad)


# -- examples ---------------------------------------------------------------------------------

#: Functions whose Example needs a Transformer model (torch, transformers, seconds to minutes):
#: their Examples are marked ``# doctest: +SKIP``; every other Example runs with the doctests.
MODEL_EXAMPLES = {
    "gtcontrol.experiments.attention_flows",
    "gtcontrol.experiments.data_moments",
    "gtcontrol.experiments.data_tokens",
    "gtcontrol.experiments.encoder_states",
    "gtcontrol.interop.extract",
    "gtcontrol.interop.load_model",
    "gtcontrol.experiments.model_map",
    "gtcontrol.experiments.model_report",
    "gtcontrol.experiments.moment_surrogate",
    "gtcontrol.experiments.pretrained_gaussianity",
    "gtcontrol.experiments.reproduce",
    "gtcontrol.experiments.stabilize_model",
}
#: Still without an Example (being edited elsewhere; remove a name when its Example is written).
WITHOUT_EXAMPLE: set[str] = set()


def _plotting_functions() -> dict[str, object]:
    """Every public function of the plotting modules that docs/api/surface.txt lists."""
    found: dict[str, object] = {}
    for name in re.findall(r"^## (gtcontrol\.plotting\.\S+) \(", SURFACE.read_text(), re.M):
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isfunction(obj):
                found[f"{name}.{attr}"] = obj
    return found


def test_the_plotting_functions_are_found() -> None:
    names = {n.rpartition(".")[2] for n in _plotting_functions()}
    assert {"plot_moments", "plot_cone", "plot_phase_diagram", "plot_stabilization"} <= names
    assert len(names) >= 18, sorted(names)


@pytest.mark.parametrize("name", sorted(_plotting_functions()))
def test_every_plotting_function_has_an_example_that_runs(name: str) -> None:
    """Each Example draws for real (the doctests run it, on the Agg canvas)."""
    doc = inspect.getdoc(_plotting_functions()[name]) or ""
    assert "Examples\n--------" in doc, f"{name} has no Examples section"
    lines = [ln for ln in doc.splitlines() if ln.lstrip().startswith(">>> ")]
    assert lines and not any("doctest: +SKIP" in ln for ln in lines), f"{name}: skipped"


@pytest.mark.parametrize("name", sorted(_public_functions()))
def test_every_public_function_has_an_example(name: str) -> None:
    doc = inspect.getdoc(_public_functions()[name]) or ""
    if name in WITHOUT_EXAMPLE:
        assert "Examples\n--------" not in doc, f"{name} has an Example now: drop it from the set"
        return
    assert "Examples\n--------" in doc and ">>> " in doc, f"{name} has no Examples section"
    if name in MODEL_EXAMPLES:
        return
    lines = [ln for ln in doc.splitlines() if ln.lstrip().startswith(">>> ")]
    runs = [ln for ln in lines if "doctest: +SKIP" not in ln]
    assert runs, f"{name}: its Example does not run (all lines skipped)"
