"""The import graph of ``harness/``: no circle between its packages and top-level modules (the
unit is ``harness.X``), none between its modules, and no arrow up the :data:`LAYERS`.

Every ``import`` of every module counts, those inside functions too (a lazy import is still a
dependency), and ``importlib.import_module`` of a literal name; only those under ``if
TYPE_CHECKING:`` do not (annotations, never run). A new unit must be given a layer here. A
failure names each offending import as ``path:line``.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

from harness.paths import PROJECT_ROOT

LAYERS = (
    ("vocabulary", {"harness", "stage", "outcome", "verdict", "tolerance", "errors", "formatting", "paths", "packing",
                    "names", "files", "validation", "scores", "result"}),
    # What a run is given: the spec, the model, the manifest, the photos (listed by one policy, or one shard of
    # them), the model repository and its server, the user's own code.
    ("inputs", {"spec", "geometry", "postprocessing", "model", "precision", "manifest", "corpus", "listing", "shard",
                "repository", "server", "user_code"}),
    # How each side computes, how they are compared, what a run found and how it is written.
    ("mechanisms", {"preprocessing", "reference", "deployed", "serving", "client", "deployment", "compare", "results",
                    "report", "run_identity", "detection", "task"}),
    ("session", {"session"}),
    # The command line's vocabulary: the argument groups every command (and preflight's and the load test's own
    # command lines) parse their options with.
    ("command-line vocabulary", {"arguments"}),
    ("jobs", {"check", "diagnose", "accuracy", "layers", "training", "preflight", "compare_runs", "merge"}),
    ("command line", {"cli", "__main__"}),
)
"""Bottom first: a unit imports its own layer or those below, never above."""


@dataclass(frozen=True)
class Import:
    source: str
    """The importing module (``harness.check.job``)."""
    target: str
    """The imported module (``harness.results``)."""
    where: str
    """``path:line`` of the import statement."""


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _dynamic_prefix(call: ast.Call) -> str | None:
    """The static module prefix of ``importlib.import_module("harness.x")`` or of an f-string
    ``f"harness.x.{name}"`` (None for anything else)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rsplit(".", 1)[0]  # the part before the computed name
    return None


def module_imports(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported name, line) of every import in ``tree``, at any depth, except under ``if
    TYPE_CHECKING:``; relative imports resolved against ``module``. ``from a import b`` gives
    ``a.b`` (a submodule, or a name: :func:`import_graph` keeps what exists)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.append((origin, node.lineno))
            found.extend((f"{origin}.{alias.name}", node.lineno) for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and (prefix := _dynamic_prefix(node)):
            found.append((prefix, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def modules_under(root: Path) -> dict[str, Path]:
    """``harness.x.y`` -> its file, for every module of the package at ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path) -> list[Import]:
    """Every import from one module of the package at ``root`` of another of its modules."""
    modules, package = modules_under(root), root.name
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for name, line in module_imports(tree, module, path.name == "__init__.py"):
            if name != package and not name.startswith(package + "."):
                continue
            while name not in modules and "." in name:  # ``from a import name``: the module a
                name = name.rpartition(".")[0]
            if name != module:
                edges.append(Import(module, name, f"{path.relative_to(root.parent)}:{line}"))
    return list(dict.fromkeys(edges))  # ``from a import b, c``: one arrow a line


def unit(module: str) -> str:
    """``harness.check.job`` -> ``check``; the package's own ``__init__`` -> its name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_cycles(edges: list[Import], key=unit) -> list[list[Import]]:
    """One circle for each set of units (``key`` of a module: :func:`unit`, or the module
    itself) that import each other (a strongly connected component), as the imports that make
    it, in order (the first import found per arrow)."""
    arrows: dict[str, dict[str, Import]] = {}
    for e in edges:
        a, b = key(e.source), key(e.target)
        if a != b:
            arrows.setdefault(a, {}).setdefault(b, e)
    cycles, index, low, stack, on_stack = [], {}, {}, [], set()

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in arrows.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(_shortest_circle(arrows, component))

    for v in sorted(arrows):
        if v not in index:
            connect(v)
    return cycles


def _shortest_circle(arrows: dict[str, dict[str, Import]], component: set[str]) -> list[Import]:
    """The shortest circle through the component's first unit, as its imports in order."""
    start = min(component)
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w, e in sorted(arrows.get(v, {}).items()):
            if w == start:
                return paths[v] + [e]
            if w in component and w not in paths:
                paths[w] = paths[v] + [e]
                queue.append(w)
    raise AssertionError(f"no circle through {start} in {component}")


def upward_imports(edges: list[Import], layers=LAYERS) -> list[str]:
    """One line per import of a higher layer, and per unit in no layer."""
    level = {u: (k, name) for k, (name, units) in enumerate(layers) for u in units}
    problems = sorted({f"{u} is in no layer (LAYERS in tests/test_imports.py): give it one"
                       for e in edges for u in (unit(e.source), unit(e.target)) if u not in level})
    for e in edges:
        a, b = unit(e.source), unit(e.target)
        if a in level and b in level and level[b][0] > level[a][0]:
            problems.append(f"{e.where}: {e.source} ({level[a][1]}) imports {e.target} ({level[b][1]}), a layer above")
    return problems


def _describe(cycle: list[Import], key=unit) -> str:
    units = " -> ".join([key(cycle[0].source), *(key(e.target) for e in cycle)])
    return f"circle {units}: " + "; ".join(f"{e.where}: {e.source} imports {e.target}" for e in cycle)


# -- the harness -----------------------------------------------------------------------------


def harness_graph() -> list[Import]:
    return import_graph(PROJECT_ROOT / "harness")


def test_no_circle_between_the_packages_of_harness():
    cycles = unit_cycles(harness_graph())
    assert not cycles, "\n".join(_describe(c) for c in cycles)


def test_no_circle_between_the_modules_of_harness():
    """Inside a package too (a package's ``__init__`` is a module of its own)."""
    cycles = unit_cycles(harness_graph(), key=str)
    assert not cycles, "\n".join(_describe(c, key=str) for c in cycles)


def test_no_import_goes_up_the_layers():
    problems = upward_imports(harness_graph())
    assert not problems, "\n".join(problems)


def test_every_unit_has_one_layer():
    every = [u for _, units in LAYERS for u in units]
    assert len(every) == len(set(every))
    units = {unit(m) for m in modules_under(PROJECT_ROOT / "harness")}
    assert units == set(every), f"in no layer: {sorted(units - set(every))}; no such unit: {sorted(set(every) - units)}"


def test_errors_imports_no_library_module():
    """Every library error subclasses ``HarnessError``: errors.py lists none of them."""
    imports = [e for e in harness_graph() if e.source == "harness.errors"]
    assert not imports, imports


# -- the checks themselves, on a package written to fail them ---------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_a_lazy_import_closes_a_circle_and_type_checking_does_not(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "low.py": """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg.jobs import Job  # annotations only: no arrow


            def f():
                from pkg.top import main  # lazy: an arrow all the same
                return main
            """,
        "jobs/__init__.py": "from .run import Job\n",
        "jobs/run.py": "from pkg import low\n\nclass Job:\n    pass\n",
        "top.py": "import importlib\n\nmain = importlib.import_module(f'pkg.jobs.{\"run\"}')\n",
    })
    edges = import_graph(pkg)
    assert {(e.source, e.target) for e in edges} == {
        ("pkg.low", "pkg.top"), ("pkg.jobs", "pkg.jobs.run"), ("pkg.jobs.run", "pkg"), ("pkg.jobs.run", "pkg.low"),
        ("pkg.top", "pkg.jobs")}
    [cycle] = unit_cycles(edges)
    assert {(unit(e.source), unit(e.target)) for e in cycle} == {("low", "top"), ("top", "jobs"), ("jobs", "low")}
    assert "pkg/low.py:8: pkg.low imports pkg.top" in _describe(cycle)

    [modules] = unit_cycles(edges, key=str)
    assert _describe(modules, key=str).startswith("circle pkg.jobs -> pkg.jobs.run -> pkg.low -> pkg.top -> pkg.jobs:")

    layers = (("bottom", {"pkg", "low"}), ("jobs", {"jobs"}), ("top", {"top"}))
    assert upward_imports(edges, layers) == ["pkg/low.py:8: pkg.low (bottom) imports pkg.top (top), a layer above"]
    assert upward_imports(edges, layers[:2]) == ["top is in no layer (LAYERS in tests/test_imports.py): give it one"]


def test_a_clean_package_passes(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "", "a.py": "X = 1\n", "b.py": "from .a import X\n",
                              "c/__init__.py": "from ..b import X\nfrom . import d\n", "c/d.py": ""})
    edges = import_graph(pkg)
    assert {(e.source, e.target) for e in edges} == {("pkg.b", "pkg.a"), ("pkg.c", "pkg.b"), ("pkg.c", "pkg.c.d")}
    assert unit_cycles(edges) == [] and unit_cycles(edges, key=str) == []
    assert upward_imports(edges, (("low", {"a"}), ("mid", {"b"}), ("high", {"c"}))) == []
