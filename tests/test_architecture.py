"""The package's structure, checked: layering, no import cycles, module sizes, documented
parameters of every public callable, and the one result protocol (docs/architecture.md)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import gtcontrol
import gtcontrol.experiments
from gtcontrol import Result, Status

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
    "_docstring": 0,
    "model": 1,
    "analysis": 2,
    "control": 3,
    "plotting": 4,
    "experiments": 5,
    "": 6,  # the package root re-exports model/analysis/control
    "cli": 7,
    "__main__": 8,
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


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Every gtcontrol module that ``name`` imports, at module level or inside functions."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
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


def test_no_module_exceeds_the_size_ceiling() -> None:
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    too_big = {k: v for k, v in sizes.items() if v > MAX_LINES}
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"


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
    for mod in (gtcontrol, gtcontrol.experiments):
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


@pytest.mark.parametrize(("name", "obj"), list(_public_callables()), ids=lambda x: str(x))
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

RESULT_CLASSES = [
    "Trajectory",
    "TokenTrajectory",
    "TokenComparison",
    "BlowupResult",
    "BernoulliSolution",
    "NewtonResult",
    "EquilibriaResult",
    "Regime",
    "SteadyState",
    "FilterComparison",
    "OTSteering",
    "SteeringResult",
    "MeanMatchingDesign",
    "Robustness",
    "ConvergenceData",
    "DesignCertificate",
]
EXPERIMENT_RESULTS = [
    "GaussianityResult",
    "GaussianityTable",
    "RegimeResult",
    "FeedForwardCloseness",
    "SurrogateComparison",
    "ReproduceResult",
    "ClosureFlow",
    "ClosenessCurve",
    "LayerGaussianity",
]


def _has(cls: type, attr: str) -> bool:
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return attr in fields or hasattr(cls, attr)


@pytest.mark.parametrize(
    "cls",
    [getattr(gtcontrol, n) for n in RESULT_CLASSES]
    + [getattr(gtcontrol.experiments, n) for n in EXPERIMENT_RESULTS],
    ids=lambda c: c.__name__,
)
def test_every_public_result_follows_the_protocol(cls: type) -> None:
    missing = [a for a in ("success", "status", "message", "stats") if not _has(cls, a)]
    assert not missing, f"{cls.__name__} lacks {missing}"


def test_results_of_real_calls_follow_the_protocol() -> None:
    layer = gtcontrol.Layer(A=[[-1.0, 0.2], [0.0, -0.5]], B=[[1.0, 0.0], [0.0, 2.0]], v=-0.5)
    g0 = gtcontrol.Gaussian([1.0, 0.0], [[1.0, 0.2], [0.2, 0.5]])
    results = [
        gtcontrol.simulate(layer, g0, T=1.0),
        gtcontrol.blowup_analysis(layer, g0),
        gtcontrol.equilibria(layer),
        gtcontrol.analyze(layer, g0),
        gtcontrol.ot_steering(g0, gtcontrol.Gaussian([0.0, 1.0], [[2.0, 0.0], [0.0, 1.0]])),
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


SOLVERS = [
    "simulate",
    "simulate_discrete",
    "simulate_tokens",
    "blowup_analysis",
    "blowup_time",
    "newton_equilibrium",
    "equilibria",
    "analyze",
    "steer",
    "design_mean_matching",
    "design_robustness",
    "design_convergence",
    "compare_tokens",
    "compare_filter",
    "kalman_covariance",
]


@pytest.mark.parametrize("name", SOLVERS)
def test_every_solver_takes_a_keyword_only_time_limit(name: str) -> None:
    param = inspect.signature(getattr(gtcontrol, name)).parameters.get("time_limit")
    assert param is not None, f"{name} has no time_limit"
    assert param.kind is param.KEYWORD_ONLY and param.default is None


@pytest.mark.parametrize("name", SOLVERS)
def test_no_solver_takes_an_options_object_or_arbitrary_keywords(name: str) -> None:
    params = inspect.signature(getattr(gtcontrol, name)).parameters.values()
    assert not any(p.kind is p.VAR_KEYWORD for p in params), name
    for p in params:  # `options=` survives only as a deprecated alias that defaults to None
        if p.name == "options":
            assert p.kind is p.KEYWORD_ONLY and p.default is None
