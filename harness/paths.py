"""Where the project's files are: one definition for the commands, loadtest, benchmarks and tests.

Two layouts. In a source checkout (``make setup``) the files a job reads sit at its top level
(``model_repository/``, ``docker/build_engine.py``, ``deploy/versions.toml``) and the defaults
are the checkout's, as they always were. In an installed wheel the same files ship read-only
inside the package (``harness/_data``, copied there by ``setup.py`` from :data:`PACKAGE_DATA`), and
every default the commands write to is under the folder a command runs in, never site-packages.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGE_DATA = ("model_repository", "docker/build_engine.py", "docker/triton.Dockerfile", "deploy/versions.toml")
"""What a job reads at run time, relative to the checkout: what the wheel ships under ``harness/_data``
(of the repository only its text files: :func:`package_data_files`)."""
PACKAGE_DATA_SUFFIXES = (".pbtxt", ".toml", ".py", "engine_input.json", ".gitkeep")
"""The model repository's templates: configs, specs, Python-backend models and DALI graph
definitions, empty version folders; never what ``harness model export`` writes into it."""

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The checkout (in an installed wheel: the folder holding the package, read by nothing that writes)."""
_DATA_FOLDER = Path(str(files("harness") / "_data"))  # a package on the file system: its folder
INSTALLED = _DATA_FOLDER.is_dir()
"""Running from an installed wheel (its data shipped), not from a checkout."""


def packaged(relative: str) -> Path:
    """The file (or folder) ``relative`` to the checkout, as this installation has it (read-only)."""
    return (_DATA_FOLDER if INSTALLED else PROJECT_ROOT) / relative


def package_data_files(root: Path) -> list[str]:
    """The files of :data:`PACKAGE_DATA` under ``root`` (a checkout or ``harness/_data``), relative, sorted:
    the one list the wheel's build copies and the tests compare."""
    found = []
    for entry in PACKAGE_DATA:
        path = root / entry
        if path.is_file():
            found.append(entry)
        elif path.is_dir():
            found += [f.relative_to(root).as_posix() for f in path.rglob("*")
                      if f.is_file() and "__pycache__" not in f.parts and f.name.endswith(PACKAGE_DATA_SUFFIXES)]
    return sorted(found)


REPORTS_DIR = Path("reports")
"""Default parent of the commands' report directories: relative, so under the folder a command
runs in, as every default a command writes to (never into the tool's own checkout)."""
WORK_DIR = Path("build")
"""Default parent of what the commands write that is not a report (a server's log, a watch's
known answers, a trained model, downloaded wheels): relative, under the folder a command runs in."""
TEMPLATE_REPOSITORY = packaged("model_repository")
"""The production (gpu) repository as shipped: configs and DALI graph definitions, no model files
(``harness deploy`` copies its models from here)."""
WORKING_ROOT = Path(".") if INSTALLED else PROJECT_ROOT
"""The folder the defaults are under: the checkout, or (installed) the folder a command runs in."""
DEFAULT_REPOSITORY = WORKING_ROOT / "model_repository"
"""The production (gpu) model repository: the checkout's, or (installed) the working folder's,
written from the templates with the project's models by ``harness model export``."""
DEFAULT_PHOTOS = WORKING_ROOT / "data" / "photos"
"""The photo corpus (`harness corpus`)."""
BUILD_DIR = WORKING_ROOT / "build"
"""The project's generated files: its embedded servers' scratch repositories, benchmark sets."""


def no_repository(repository: Path) -> str:
    """What a command says of a model repository that is not there (installed, the default is not,
    until ``harness model export`` writes it)."""
    return (f"{repository}: no such model repository (`harness model export` writes the project's own there; "
            "yours: --repository DIR)")
