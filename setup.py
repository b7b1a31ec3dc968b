"""The wheel's one build step beyond pyproject.toml: what a job reads at run time
(:data:`harness.paths.PACKAGE_DATA`: the model repository's templates, the engine builder, the
versions manifest) is copied from the checkout into the package, ``harness/_data``, where an
installed harness reads it (:func:`harness.paths.shipped`). The checkout keeps its files where
they are; an editable install reads them there."""

import shutil
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from harness.paths import PACKAGE_DATA, package_data_files  # noqa: E402  (standard library only)


class BuildWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the checkout reads its own files
            return
        missing = [entry for entry in PACKAGE_DATA if not (ROOT / entry).exists()]
        if missing:
            raise SystemExit(f"{', '.join(missing)} not found in {ROOT}: build the wheel from the project's checkout")
        target = Path(self.build_lib) / "harness" / "_data"
        shutil.rmtree(target, ignore_errors=True)  # a previous build's copy, never a file of the checkout
        for relative in package_data_files(ROOT):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / relative, target / relative)


class SdistWithShippedFiles(sdist):
    """The source distribution carries the same files, so that a wheel built from it ships them too."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        for relative in package_data_files(ROOT):
            (Path(base_dir) / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / relative, Path(base_dir) / relative)


# A fresh build folder each time, outside the checkout (whose build/ is the project's scratch): a
# module deleted since the last build cannot linger in build/lib and ship.
_BUILD_BASE = tempfile.TemporaryDirectory(prefix="harness-wheel-build-")
setup(cmdclass={"build_py": BuildWithShippedFiles, "sdist": SdistWithShippedFiles},
      options={"build": {"build_base": _BUILD_BASE.name}})
