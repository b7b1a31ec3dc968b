"""The import graphs of ``harness/`` and ``loadtest/``: no circle between their packages and
top-level modules (``harness.X``, whole), none between the units of the layers (``harness.X``, or
a sub-unit named in the layers, such as ``task.ocr``), none between their modules, and no arrow
up the :data:`LAYERS` (:data:`LOADTEST_LAYERS`).

Every ``import`` of every module counts: those inside functions (a lazy import is still a
dependency), those under ``if TYPE_CHECKING:`` (an annotation naming a type of a layer above is
a dependency on it all the same), and ``importlib.import_module`` of a literal name. A new unit
must be given a layer here. A failure names each offending import as ``path:line``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from harness.paths import PROJECT_ROOT
from harness.task import BUILT_IN

LAYERS = (
    ("vocabulary", {"harness", "stage", "outcome", "verdict", "tolerance", "errors", "formatting", "paths", "packing",
                    "names", "files", "written", "validation", "scores", "result"}),
    # What a task is (harness/task_api/): the API every task implements and the mechanisms speak.
    ("task API", {"task_api"}),
    # The preprocessing operations, one module each (keys, kernels, alternatives, wording): the spec reads them.
    ("operations", {"operations"}),
    # What a run is given: the spec, the model, the manifest, the engine builder's input, the photos (listed by one
    # policy, or one shard of them), the server, the user's own code.
    ("inputs", {"spec", "geometry", "postprocessing", "model", "precision", "manifest", "engine_input", "corpus",
                "listing", "shard",
                "server", "user_code", "ocr.recognition", "ocr.tensors"}),
    # The mechanisms, in the order they build on each other: how each side computes (and talks to the server) ...
    ("computing", {"preprocessing", "reference", "deployed", "client", "run_identity"}),
    # ... what a run found (the typed run model) ...
    ("run model", {"results"}),
    # ... how results are compared (arrays, top-k, a detector's boxes) ...
    ("comparison", {"compare", "detection", "ocr", "segmentation"}),
    # ... and the deployed side read through the server (the repository's Python-backend models too).
    ("deployed side", {"deployment", "serving"}),
    # The tasks, each a plugin of the API (those the registry ships: a new one is its BUILT_IN line), then the
    # one registry that finds them by name.
    ("tasks", {place.partition(":")[0].removeprefix("harness.") for place in BUILT_IN.values()}),
    ("task registry", {"task"}),
    # The model repository and its profiles: the models every registered task brings (their cpu
    # replacements, exports and checks: harness.task_api.models), read from the registry.
    ("repository", {"repository"}),
    # The report writers (a run read back knows its task by name: they ask the registry).
    ("writers", {"report"}),
    # What every job sets up, and the deployed side a job names (--pipeline, --model) opened in it.
    ("session", {"session", "target"}),
    # The command line's vocabulary: the argument groups every command (and preflight's and the load test's own
    # command lines) parse their options with.
    ("command-line vocabulary", {"arguments"}),
    ("jobs", {"check", "diagnose", "accuracy", "layers", "training", "preflight", "compare_runs", "merge", "deploy"}),
    ("command line", {"cli", "__main__"}),
)
"""Bottom first: a unit imports its own layer or those below, never above."""
LOADTEST_LAYERS = (
    # What a request is, how its answer is judged (answers) and asked for (inference), and what a run measured.
    ("measurements", {"loadtest", "samples", "metrics", "responses", "stats", "payloads", "triton", "answers",
                      "inference"}),
    ("runs", {"locust_control", "locustfile", "result", "watch"}),
    ("reports", {"report"}),
    ("sweep", {"sweep"}),
)
"""``loadtest/``'s layers (it sits above the whole harness, whose units it imports freely)."""
SUB_UNITS = {u for layers in (LAYERS, LOADTEST_LAYERS) for _, units in layers for u in units if "." in u}


@dataclass(frozen=True)
class Import:
    source: str
    """The importing module (``harness.check.job``)."""
    target: str
    """The imported module (``harness.results``)."""
    where: str
    """``path:line`` of the import statement."""


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
    """(imported name, line) of every import in ``tree``, at any depth (under ``if
    TYPE_CHECKING:`` too); relative imports resolved against ``module``. ``from a import b`` gives
    ``a.b`` (a submodule, or a name: :func:`import_graph` keeps what exists)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
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
    """``harness.check.job`` -> ``check``, ``harness.task.ocr`` -> ``task.ocr`` (a sub-unit the
    layers name: :data:`SUB_UNITS`); the package's own ``__init__`` -> its name."""
    parts = module.split(".")
    if ".".join(parts[1:3]) in SUB_UNITS:
        return ".".join(parts[1:3])
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


def package(module: str) -> str:
    """``harness.task.ocr`` -> ``task``: the package or top-level module, whole (no sub-unit)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_circle_between_the_packages_of_harness():
    """Each package whole: a package holding both a bottom and a top (the task API beside the
    tasks) closes a circle here even where its sub-units sit in two layers."""
    cycles = unit_cycles(harness_graph(), key=package)
    assert not cycles, "\n".join(_describe(c, key=package) for c in cycles)


def test_no_circle_between_the_units_of_harness():
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
    for root, layers in (("harness", LAYERS), ("loadtest", LOADTEST_LAYERS)):
        every = [u for _, units in layers for u in units]
        assert len(every) == len(set(every))
        units = {unit(m) for m in modules_under(PROJECT_ROOT / root)}
        assert units == set(every), f"{root}: in no layer: {sorted(units - set(every))}; no such unit: " \
                                    f"{sorted(set(every) - units)}"


def loadtest_graph() -> list[Import]:
    return import_graph(PROJECT_ROOT / "loadtest")


def test_no_circle_in_loadtest():
    cycles = unit_cycles(loadtest_graph()) + unit_cycles(loadtest_graph(), key=str)
    assert not cycles, "\n".join(_describe(c) for c in cycles)


def test_no_import_goes_up_the_layers_of_loadtest():
    problems = upward_imports(loadtest_graph(), LOADTEST_LAYERS)
    assert not problems, "\n".join(problems)


def test_the_task_registry_loads_no_task_until_asked():
    """``import harness.task`` (the registry) loads no task's own dependencies."""
    code = ("import sys, harness.task; print(sorted(m for m in ('shapely', 'cv2', 'harness.task.detection', "
            "'harness.task.classification', 'harness.compare') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", run.stdout


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


def test_a_lazy_import_closes_a_circle_and_type_checking_is_an_arrow(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "names.py": "Name = str\n",
        "low.py": """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg.names import Name  # annotations only: an arrow all the same


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
        ("pkg.low", "pkg.names"), ("pkg.low", "pkg.top"), ("pkg.jobs", "pkg.jobs.run"), ("pkg.jobs.run", "pkg"),
        ("pkg.jobs.run", "pkg.low"),
        ("pkg.top", "pkg.jobs")}
    [cycle] = unit_cycles(edges)
    assert {(unit(e.source), unit(e.target)) for e in cycle} == {("low", "top"), ("top", "jobs"), ("jobs", "low")}
    assert "pkg/low.py:8: pkg.low imports pkg.top" in _describe(cycle)

    [modules] = unit_cycles(edges, key=str)
    assert _describe(modules, key=str).startswith("circle pkg.jobs -> pkg.jobs.run -> pkg.low -> pkg.top -> pkg.jobs:")

    layers = (("bottom", {"pkg", "low", "names"}), ("jobs", {"jobs"}), ("top", {"top"}))
    assert upward_imports(edges, layers) == ["pkg/low.py:8: pkg.low (bottom) imports pkg.top (top), a layer above"]
    assert upward_imports(edges, layers[:2]) == ["top is in no layer (LAYERS in tests/test_imports.py): give it one"]


def test_a_type_checking_import_closes_a_circle(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "model.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.job import Result\n",
        "job.py": "from pkg.model import Report\n\nclass Result:\n    pass\n",
    })
    [cycle] = unit_cycles(import_graph(pkg))
    assert {(unit(e.source), unit(e.target)) for e in cycle} == {("model", "job"), ("job", "model")}
    assert "pkg/model.py:4: pkg.model imports pkg.job" in _describe(cycle)


def test_a_clean_package_passes(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "", "a.py": "X = 1\n", "b.py": "from .a import X\n",
                              "c/__init__.py": "from ..b import X\nfrom . import d\n", "c/d.py": ""})
    edges = import_graph(pkg)
    assert {(e.source, e.target) for e in edges} == {("pkg.b", "pkg.a"), ("pkg.c", "pkg.b"), ("pkg.c", "pkg.c.d")}
    assert unit_cycles(edges) == [] and unit_cycles(edges, key=str) == []
    assert upward_imports(edges, (("low", {"a"}), ("mid", {"b"}), ("high", {"c"}))) == []
