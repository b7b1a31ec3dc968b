"""Where the test suite's time goes, by module: reads the JUnit XML of a pytest run
(``pytest --junitxml FILE``) and prints each test module's time (its tests' times summed,
setup and teardown of its fixtures included, as pytest records them), the slowest first, with
the number of tests and the share of the total.

    .venv/bin/python -m pytest -q --junitxml build/suite.xml
    .venv/bin/python benchmarks/suite_times.py build/suite.xml [--top 40]

A module-scoped fixture's set-up is charged to the module's first test; a session-scoped one
(the shared embedded server) to the first test that asked for it, wherever it is.

``--servers build/test-servers-*.json`` (what tests/conftest.py records of every tritonserver
the run's processes started) adds each module's server starts: how many, how many models they
loaded, and their seconds to ready. ``--write-hints`` writes the modules' seconds to
``tests/module_seconds.json``: the order in which ``make test``'s two workers take the modules
(longest first); refresh it when modules come or grow.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def module_of(classname: str) -> str:
    """``tests.cli.test_check_command.TestX`` or ``tests.cli.test_check_command``:
    ``tests/cli/test_check_command.py``."""
    parts = classname.split(".")
    while parts and not parts[-1].startswith("test_") and len(parts) > 1:
        parts.pop()  # a test class's name
    return "/".join(parts) + ".py"


def times_by_module(junit: Path) -> tuple[dict[str, float], dict[str, int], float]:
    """Seconds and test counts by module, and the run's own total (the suite element's time)."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for case in root.iter("testcase"):
        module = module_of(case.get("classname", ""))
        seconds[module] += float(case.get("time", 0))
        tests[module] += 1
    total = sum(float(s.get("time", 0)) for s in suites)
    return dict(seconds), dict(tests), total


HINTS = Path(__file__).resolve().parent.parent / "tests" / "module_seconds.json"


def starts_by_module(records: list[Path]) -> dict[str, list[dict]]:
    """The server starts of ``records`` (tests/conftest.py's ``SERVER_STARTS``, one per
    process) by test module."""
    by_module: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        for start in json.loads(record.read_text()):
            by_module[start["test"].split("::")[0]].append(start)
    return dict(by_module)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, help="JUnit XML written by pytest --junitxml")
    parser.add_argument("--top", type=int, default=0, help="only the slowest N modules (default: all)")
    parser.add_argument("--servers", type=Path, nargs="+", help="build/test-servers-*.json: each module's server starts too")
    parser.add_argument("--write-hints", action="store_true", help=f"write the modules' seconds to {HINTS.name}")
    args = parser.parse_args(argv)
    seconds, tests, total = times_by_module(args.junit)
    if args.write_hints:
        HINTS.write_text(json.dumps({m: round(s, 1) for m, s in sorted(seconds.items())}, indent=0) + "\n")
    starts = starts_by_module(args.servers) if args.servers else {}
    summed = sum(seconds.values())
    rows = sorted(seconds, key=seconds.get, reverse=True)
    if args.top:
        rows = rows[:args.top]
    width = max(len(m) for m in rows) if rows else 10
    servers = "  starts  models  start s" if starts else ""
    print(f"{'module':<{width}}  {'tests':>5}  {'seconds':>8}  {'share':>6}{servers}")
    for module in rows:
        line = f"{module:<{width}}  {tests[module]:>5}  {seconds[module]:>8.1f}  {seconds[module] / summed:>6.1%}"
        if starts:
            mine = starts.get(module, [])
            line += (f"  {len(mine):>6}  {sum(s['models'] for s in mine):>6}  {sum(s['seconds'] for s in mine):>7.1f}"
                     if mine else "")
        print(line)
    print(f"{'all ' + str(len(seconds)) + ' modules':<{width}}  {sum(tests.values()):>5}  {summed:>8.1f}")
    if starts:
        every = [s for mine in starts.values() for s in mine]
        print(f"server starts: {len(every)}, {sum(s['models'] for s in every)} models loaded, "
              f"{sum(s['seconds'] for s in every):.1f} s to ready")
    print(f"the run's total (collection and session fixtures' teardown included): {total:.1f} s")


if __name__ == "__main__":
    main()
