"""What makes the deployment's folder stand alone (issue 57): the serving image and the engine
builder's image are built from the folder itself, so its compose file names no path outside it.

- ``Dockerfile``: this project's serving image (``docker/triton.Dockerfile``: the release's Triton
  image, its numpy and the serving code's pins), installing the harness from its wheel in the
  folder instead of from the project's source; the pins stay written once, in that file.
- ``engine.Dockerfile``: the release's TensorRT image with the engine builder (``build_engine.py``)
  and the manifest it holds the image to (``versions.toml``), both copied into the folder, and the
  harness's manifest reader from the same wheel.
- ``.dockerignore``: the build context is the folder (the serving image holds it at :data:`IN_IMAGE`,
  which the Kubernetes engine-build Job copies into its volume: :mod:`harness.deploy.kubernetes`).

The wheel is ``*.whl`` at the folder's root (``pip wheel --no-deps PROJECT -w FOLDER``; the
installable tool's distribution puts it there once it has one): a ``wheels/`` folder would be
taken for a model by Triton, which then does not start without explicit model control. Files only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.errors import HarnessError
from harness.manifest import MANIFEST_PATH
from harness.paths import packaged

SERVING_DOCKERFILE = packaged("docker/triton.Dockerfile")
BUILDER = packaged("docker/build_engine.py")
DOCKERFILE, ENGINE_DOCKERFILE, DOCKERIGNORE = "Dockerfile", "engine.Dockerfile", ".dockerignore"
BUILDER_FILE, MANIFEST_FILE = "build_engine.py", "versions.toml"
ENGINE_DIR = "/opt/engine"
"""Where the engine builder's image keeps ``build_engine.py`` and ``versions.toml``."""
IN_IMAGE = "/opt/deployment"
"""Where the serving image holds the folder (its Dockerfile's last step), which the Kubernetes Job copies into its volume."""
WHEELS = "*.whl"

# The serving Dockerfile installs the project from its source between these lines; the folder's, from its wheel.
_SOURCE_FIRST = "COPY pyproject.toml "
_SOURCE_LAST = "    && rm -rf /src/harness-project \\\n"
_FROM_WHEEL = (f"COPY {WHEELS} /tmp/wheels/\n"
               "RUN pip install --no-cache-dir --break-system-packages --no-deps /tmp/wheels/*.whl \\\n"
               "    && rm -rf /tmp/wheels \\\n")


class StandaloneError(HarnessError, RuntimeError):
    """The project's serving Dockerfile or engine builder is not where, or not how, the folder's are made from."""


def serving_dockerfile(source: str) -> str:
    """``docker/triton.Dockerfile`` (``source``) installing the harness from the folder's wheel."""
    if _SOURCE_FIRST not in source or _SOURCE_LAST not in source:
        raise StandaloneError(f"{SERVING_DOCKERFILE}: no longer installs the project from its source as "
                              "harness/deploy/standalone.py expects: update it")
    start, end = source.index(_SOURCE_FIRST), source.index(_SOURCE_LAST) + len(_SOURCE_LAST)
    body = source[source.index("\nFROM ") + 1:]  # its header speaks of the project's build context
    start, end = start - (len(source) - len(body)), end - (len(source) - len(body))
    return ("# The serving image of this folder, written by `harness deploy` from the harness project's\n"
            "# docker/triton.Dockerfile: build context this folder (.dockerignore), the harness installed from its wheel\n"
            f"# here ({WHEELS}: pip wheel --no-deps HARNESS_PROJECT -w .).\n" + body[:start] + _FROM_WHEEL + body[end:]
            + f"\n# The folder itself, which the Kubernetes engine-build Job copies into the repository volume.\n"
              f"COPY . {IN_IMAGE}/\n")


def engine_dockerfile(manifest) -> str:
    return f"""# The engine builder of this folder, written by `harness deploy`: the TensorRT of Triton {manifest.release}
# (an engine loads only in the TensorRT that built it), {BUILDER_FILE} and the manifest it checks the image
# against ({MANIFEST_FILE}), and the harness's manifest reader from its wheel here ({WHEELS}).
FROM {manifest.tensorrt.image}
COPY {WHEELS} /tmp/wheels/
RUN pip install --no-cache-dir --break-system-packages --no-deps /tmp/wheels/*.whl \\
    && rm -rf /tmp/wheels
COPY {BUILDER_FILE} {MANIFEST_FILE} {ENGINE_DIR}/
"""


def write_images(folder: Path, manifest) -> None:
    """The folder's ``Dockerfile``, ``engine.Dockerfile``, ``.dockerignore``, engine builder and manifest."""
    for needed in (SERVING_DOCKERFILE, BUILDER):
        if not needed.is_file():
            raise StandaloneError(f"{needed}: not in this installation: deploy writes the folder's images from the "
                                  "harness project's docker/")
    (folder / DOCKERFILE).write_text(serving_dockerfile(SERVING_DOCKERFILE.read_text()))
    (folder / ENGINE_DOCKERFILE).write_text(engine_dockerfile(manifest))
    (folder / DOCKERIGNORE).write_text("# The build context is this folder: the wheel and the engine builder for the images, "
                                       "the repository for the Kubernetes Job to copy.\n**/__pycache__\n")
    shutil.copyfile(BUILDER, folder / BUILDER_FILE)
    shutil.copyfile(MANIFEST_PATH, folder / MANIFEST_FILE)
