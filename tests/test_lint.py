"""The code style the project keeps (ruff: pyflakes, pycodestyle, import order; see pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    # --no-cache: a stale cache once passed here what a clean clone's CI then refused.
    result = subprocess.run([ruff, "check", "--no-cache", "harness", "tests", "benchmarks", "loadtest", "docker"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
