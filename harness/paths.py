"""Where the project's files are: one definition for the commands, loadtest, benchmarks and tests."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
"""The production (gpu) model repository, checked in."""
DEFAULT_PHOTOS = PROJECT_ROOT / "data" / "photos"
"""The photo corpus (`harness corpus`)."""
BUILD_DIR = PROJECT_ROOT / "build"
"""The project's generated files: its embedded servers' scratch repositories, benchmark sets."""
REPORTS_DIR = Path("reports")
"""Default parent of the commands' report directories: relative, so under the folder a command
runs in, as every default a command writes to (never into the tool's own checkout)."""
WORK_DIR = Path("build")
"""Default parent of what the commands write that is not a report (a server's log, a watch's
known answers, a trained model, downloaded wheels): relative, under the folder a command runs in."""
