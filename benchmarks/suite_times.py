"""Where the test suite's time goes, by module: reads the JUnit XML of a pytest run
(``pytest --junitxml FILE``) and prints each test module's time (its tests' times summed,
setup and teardown of its fixtures included, as pytest records them), the slowest first, with
the number of tests and the share of the total.

    .venv/bin/python -m pytest -q --junitxml build/suite.xml
    .venv/bin/python benchmarks/suite_times.py build/suite.xml [--top 40]

A module-scoped fixture's set-up is charged to the module's first test; a session-scoped one
(the shared embedded server) to the first test that asked for it, wherever it is.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, help="JUnit XML written by pytest --junitxml")
    parser.add_argument("--top", type=int, default=0, help="only the slowest N modules (default: all)")
    args = parser.parse_args(argv)
    seconds, tests, total = times_by_module(args.junit)
    summed = sum(seconds.values())
    rows = sorted(seconds, key=seconds.get, reverse=True)
    if args.top:
        rows = rows[:args.top]
    width = max(len(m) for m in rows) if rows else 10
    print(f"{'module':<{width}}  {'tests':>5}  {'seconds':>8}  {'share':>6}")
    for module in rows:
        print(f"{module:<{width}}  {tests[module]:>5}  {seconds[module]:>8.1f}  {seconds[module] / summed:>6.1%}")
    print(f"{'all ' + str(len(seconds)) + ' modules':<{width}}  {sum(tests.values()):>5}  {summed:>8.1f}")
    print(f"the run's total (collection and session fixtures' teardown included): {total:.1f} s")


if __name__ == "__main__":
    main()
