"""Where the project's files are: one definition for the commands, loadtest, benchmarks and tests."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
"""The production (gpu) model repository, checked in."""
DEFAULT_PHOTOS = PROJECT_ROOT / "data" / "photos"
"""The photo corpus (`harness corpus`)."""
BUILD_DIR = PROJECT_ROOT / "build"
"""Generated files: embedded repositories, wheels, benchmark sets."""
REPORTS_DIR = PROJECT_ROOT / "reports"
"""Default parent of the commands' report directories."""
