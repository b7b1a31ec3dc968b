"""How the harness's imports sit in its layers, in one run (issue 49's figures).

- **package circles**: sets of ``harness.X`` packages (each whole: its sub-units together) that
  import each other, lazy and ``TYPE_CHECKING`` imports counted (tests/test_imports.py fails on any);
- **upward package arrows**: imports of a package whose layer (its highest unit's) is above the
  importer's: what makes such circles;
- **imports inside functions**: of the import statements naming a ``harness`` module, how many
  are made inside a function;
- with ``--trace PHOTOS``: a real ``harness check`` of PHOTOS (an embedded server), every call
  from one harness module into another traced, and the pairs of units where the callee sits in
  a higher layer than the caller, in two kinds. A **climb** is such a call the caller makes by
  name: its unit imports the callee's (lazily or not), so following the code goes back up a
  layer, as ``session`` <-> ``target`` once did. A **call handed down** reaches the higher
  layer through an object the caller was given and does not name: a task's hook (``Task``),
  a comparator, a callback; the caller knows only the protocol below it (the task API), so
  reading it never leads upwards: dependency inversion, the plugin design itself, not a climb.
  Issue 49's "climbs back up at most 4 times" counts the climbs. Generator resumptions are not calls.

    .venv/bin/python benchmarks/import_layers.py [--trace data/photos/few]
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import threading
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_imports import LAYERS, harness_graph, modules_under, package, unit  # noqa: E402

LEVEL = {u: k for k, (_, units) in enumerate(LAYERS) for u in units}


def package_level(name: str) -> int:
    """A package's layer: its highest unit's (the ``task`` package holds the registry and the tasks)."""
    return max(level for u, level in LEVEL.items() if u.split(".")[0] == name)


def package_figures() -> tuple[list[frozenset[str]], list[str]]:
    edges = harness_graph()
    arrows = defaultdict(set)
    for e in edges:
        if package(e.source) != package(e.target):
            arrows[package(e.source)].add(package(e.target))

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for b in arrows[todo.pop()] - seen:
                seen.add(b)
                todo.append(b)
        return seen

    nodes = set(arrows) | {b for targets in list(arrows.values()) for b in targets}
    reached = {p: reach(p) for p in nodes}
    circles = list({frozenset({p} | {q for q in reached[p] if p in reached[q]}) for p in nodes if p in reached[p]})
    upward = sorted({f"{package(e.source)} -> {package(e.target)} ({e.where})" for e in edges
                     if package(e.source) != package(e.target)
                     and package_level(package(e.target)) > package_level(package(e.source))})
    return circles, upward


def imports_inside_functions() -> tuple[int, int]:
    total = inside = 0
    for path in modules_under(ROOT / "harness").values():
        def visit(node: ast.AST, in_function: bool) -> None:
            nonlocal total, inside
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    names = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                    if getattr(child, "level", 0) or any(n == "harness" or n.startswith("harness.") for n in names):
                        total += 1
                        inside += in_function
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
        visit(ast.parse(path.read_text()), False)
    return inside, total


def traced_climbs(photos: str) -> dict[tuple[str, str], set[str]]:
    """Unit pairs (caller, callee) of a traced ``harness check`` where the callee's layer is higher."""
    root = str(ROOT / "harness") + os.sep
    calls: set[tuple[str, str, str]] = set()

    def module_of(frame) -> str | None:
        name = frame.f_code.co_filename
        if not name.startswith(root):
            return None
        return "harness." + name[len(root):-3].replace(os.sep, ".").removesuffix(".__init__")

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_flags & 0x20 or frame.f_back is None:  # 0x20: a generator
            return
        callee, caller = module_of(frame), module_of(frame.f_back)
        if callee and caller and callee != caller:
            calls.add((caller, callee, frame.f_code.co_name))

    from harness.cli import main

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        main(["check", photos, "--report", str(ROOT / "build" / "import_layers"), "--format", "json"])
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    up: dict[tuple[str, str], set[str]] = defaultdict(set)
    for caller, callee, function in calls:
        a, b = unit(caller), unit(callee)
        if a in LEVEL and b in LEVEL and LEVEL[b] > LEVEL[a]:
            up[(a, b)].add(f"{caller} -> {callee}.{function}")
    return up


def named(pairs) -> set[tuple[str, str]]:
    """Of unit pairs (caller, callee), those where the caller's unit imports the callee's: a climb
    the caller makes by name (the rest reach the callee through an object handed down)."""
    imports = {(unit(e.source), unit(e.target)) for e in harness_graph()}
    return {pair for pair in pairs if pair in imports}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", metavar="PHOTOS", help="also trace a real check of PHOTOS (starts a server)")
    args = parser.parse_args()
    circles, upward = package_figures()
    print(f"package circles: {len(circles)}" + "".join(f"\n  {len(c)} packages: {', '.join(sorted(c))}" for c in circles))
    pairs = {u.split(" (")[0] for u in upward}
    print(f"upward package arrows: {len(pairs)} pairs, {len(upward)} imports" + "".join(f"\n  {u}" for u in upward))
    inside, total = imports_inside_functions()
    print(f"imports of harness modules inside functions: {inside} of {total} ({inside / total:.0%})")
    if args.trace:
        up = traced_climbs(args.trace)
        climbs = named(up)
        print(f"calls into a higher layer in a check (unit pairs): {len(up)}; climbs (the caller names the "
              f"callee's unit): {len(climbs)}; handed down (a task's hook, a comparator, a callback): {len(up) - len(climbs)}")
        for (a, b), where in sorted(up.items()):
            kind = "climb" if (a, b) in climbs else "handed down"
            print(f"  {a} -> {b} ({kind}): {', '.join(sorted(where)[:3])}")


if __name__ == "__main__":
    main()
