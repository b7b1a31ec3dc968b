"""The production manifest, ``deploy/versions.toml``: one Triton release and the versions
its containers hold (server, DALI, TensorRT, CUDA, Python), the decode stack beside DALI
(nvImageCodec, nvJPEG) as the virtualenv pins it, the server Python's numpy and the order its
packages are found in, plus the embedded server of the cpu profile.

Standard library only (with :mod:`harness.errors` and :mod:`harness.paths`, themselves standard library only): ``harness
preflight`` reads it inside the Triton image, and ``docker/build_engine.py`` inside the
TensorRT image (which has no project packages).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.files import InputFileError, read_limited
from harness.paths import packaged

MANIFEST_PATH = packaged("deploy/versions.toml")
"""The manifest of a source checkout (the Triton image mounts it at the same place), or the one an
installed wheel ships."""


class ManifestError(HarnessError, ValueError):
    """The manifest is missing or lacks a field."""


@dataclass(frozen=True)
class Component:
    """One versioned component and where its version was read."""

    version: str
    source: str = ""
    image: str = ""
    """The container image it ships in, where it has one of its own."""
    wheel: str = ""
    """The PyPI distribution of the same build, where one exists."""


@dataclass(frozen=True)
class PythonPath:
    """Where the Triton image's Python finds packages: the base image's ``PYTHONPATH`` and the
    site-packages that docker/triton.Dockerfile puts before it (``[pythonpath]``)."""

    image: tuple[str, ...]
    """The base image's PYTHONPATH entries, in order (DALI's wheel folder)."""
    site_packages: str
    """Where pip installs the Dockerfile's pins (numpy 1.26.4 among them)."""
    source: str = ""

    @property
    def ordered(self) -> tuple[str, ...]:
        """The PYTHONPATH the server runs with: site-packages first, then the image's entries."""
        return (self.site_packages, *self.image)


@dataclass(frozen=True)
class OnnxLimits:
    """What the production TensorRT's ONNX parser reads (``[tensorrt.onnx]``)."""

    onnx: str
    """The ONNX release the parser is built against."""
    max_ir_version: int
    min_opset: int
    max_opset: int
    """Of the default (``ai.onnx``) domain."""
    source: str = ""


@dataclass(frozen=True)
class Manifest:
    release: str
    """The Triton release, e.g. ``26.06``: the tag of every NVIDIA image."""
    server: Component
    dali: Component
    tensorrt: Component
    cuda: Component
    python: Component
    ubuntu: Component
    nvimgcodec: Component
    """nvImageCodec, the codec library DALI's decoders call (its CPU decoder included)."""
    nvjpeg: Component
    """nvJPEG, the GPU JPEG decoder behind nvImageCodec's ``mixed`` decoding."""
    embedded: Component
    """The cpu profile's tritonserver (``wheel`` pins it)."""
    embedded_python: str
    """The Python of the cpu profile's Python-backend stub (and so of the virtualenv)."""
    numpy: Component
    """numpy of the server's Python, both profiles (< 2: the embedded server needs it)."""
    pythonpath: PythonPath
    """The order the Triton image's Python finds packages in."""
    tensorrt_onnx: OnnxLimits
    """What the production TensorRT's ONNX parser reads: the ONNX a deployment's engine is built from."""

    @property
    def dali_requirement(self) -> str:
        """The pip requirement of the production DALI (what the virtualenv installs)."""
        return f"{self.dali.wheel}=={self.dali.version}"

    @property
    def tensorrt_requirement(self) -> str:
        """The pip requirement of the production TensorRT (the ``gpu`` extra): any build of
        the manifest's version (PyPI numbers builds, e.g. ``11.0.0.114``)."""
        return f"tensorrt=={self.tensorrt.version}.*"

    @property
    def decode_stack_requirements(self) -> tuple[str, ...]:
        """The pip requirements of nvImageCodec and nvJPEG, as the virtualenv installs them."""
        return tuple(f"{c.wheel}=={c.version}" for c in (self.nvimgcodec, self.nvjpeg))

    @property
    def tensorrt_major(self) -> int:
        return int(self.tensorrt.version.split(".")[0])


def _component(table: dict, name: str, version_key: str = "version") -> Component:
    try:
        section = table[name]
        return Component(version=str(section[version_key]), source=section.get("source", ""),
                         image=section.get("image", ""), wheel=section.get("wheel", ""))
    except KeyError as exc:
        raise ManifestError(f"the manifest has no {name}.{exc.args[0]}") from None


def load_manifest(path: Path = MANIFEST_PATH) -> Manifest:
    """Read the manifest (default: the checkout's ``deploy/versions.toml``)."""
    if not Path(path).exists():
        raise ManifestError(f"{path}: the production manifest is missing")
    try:  # a regular file of at most 1 MiB: /dev/zero ran out of memory, a FIFO waited for ever
        table = tomllib.loads(read_limited(path, 2 ** 20, "manifest").decode("utf-8"))
    except InputFileError as exc:
        raise ManifestError(str(exc)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: {exc}") from None
    if "release" not in table.get("triton", {}):
        raise ManifestError(f"{path}: the manifest has no triton.release")
    return Manifest(
        release=table["triton"]["release"],
        server=_component(table, "triton", "server"),
        dali=_component(table, "dali"),
        tensorrt=_component(table, "tensorrt"),
        cuda=_component(table, "cuda"),
        python=_component(table, "python"),
        ubuntu=_component(table, "ubuntu"),
        nvimgcodec=_component(table, "nvimgcodec"),
        nvjpeg=_component(table, "nvjpeg"),
        embedded=_component(table, "embedded", "server"),
        embedded_python=str(table["embedded"].get("python", "")),
        numpy=_component(table, "numpy"),
        pythonpath=_pythonpath(table),
        tensorrt_onnx=_onnx_limits(table),
    )


def _onnx_limits(table: dict) -> OnnxLimits:
    try:
        section = table["tensorrt"]["onnx"]
        return OnnxLimits(str(section["onnx"]), int(section["max_ir_version"]), int(section["min_opset"]),
                          int(section["max_opset"]), section.get("source", ""))
    except KeyError as exc:
        raise ManifestError(f"the manifest has no tensorrt.onnx.{exc.args[0]}") from None


def _pythonpath(table: dict) -> PythonPath:
    try:
        section = table["pythonpath"]
        return PythonPath(tuple(section["image"]), section["site_packages"], section.get("source", ""))
    except KeyError as exc:
        raise ManifestError(f"the manifest has no pythonpath.{exc.args[0]}") from None


def tensorrt_library_version() -> str | None:
    """The TensorRT library this environment loads (``getInferLibVersion``, no Python
    bindings needed), or None without one."""
    for name in ("libnvinfer.so.11", "libnvinfer.so.10", "libnvinfer.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.getInferLibVersion.restype = ctypes.c_int32
        v = lib.getInferLibVersion()
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"  # major * 10000 + minor * 100 + patch
    return None


def same_version(expected: str, found: str) -> bool:
    """A manifest's ``11.0.0`` is a library's ``11.0.0`` or ``11.0.0.114``."""
    return found == expected or found.startswith(expected + ".")


_DECODE_STACK_CODE = "import nvidia.dali.backend as b; print(b.GetNvimgcodecVersion(), b.GetNvjpegVersion())"


def _decode_stack(codec: int, jpeg: int) -> dict[str, str | None]:
    """DALI numbers them major * 1000 + minor * 100 + patch (nvImageCodec: 700 is 0.7.0) and
    major * 1000 + minor * 10 + patch (nvJPEG: 13032 is 13.3.2, as its own tests read it)."""
    return {"nvImageCodec": f"{codec // 1000}.{codec % 1000 // 100}.{codec % 100}" if codec > 0 else None,
            "nvJPEG": f"{jpeg // 1000}.{jpeg % 1000 // 10}.{jpeg % 10}" if jpeg > 0 else None}


def decode_stack_versions() -> dict[str, str | None]:
    """The nvImageCodec and nvJPEG that this environment's DALI loads, as DALI reports them
    (None without DALI): what a GPU host's decoder runs, printed by ``harness preflight``.

    Asked of a fresh interpreter, as the server's DALI backend runs alone: in a process that
    imported torchvision first, DALI runs torchvision's bundled nvJPEG instead (see
    :func:`load_dalis_nvjpeg`), and this would report that."""
    try:
        done = subprocess.run([sys.executable, "-c", _DECODE_STACK_CODE], capture_output=True, text=True, timeout=300)
        codec, jpeg = (int(v) for v in done.stdout.split()) if done.returncode == 0 else (0, 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        codec, jpeg = 0, 0
    return _decode_stack(codec, jpeg)


def loaded_decode_stack() -> dict[str, str | None]:
    """The nvImageCodec and nvJPEG that DALI runs in this process (None without DALI)."""
    try:
        import nvidia.dali.backend as backend
    except ImportError:
        return _decode_stack(0, 0)
    return _decode_stack(backend.GetNvimgcodecVersion(), backend.GetNvjpegVersion())


def load_dalis_nvjpeg() -> None:
    """Load DALI's nvJPEG into this process, before any ``import torchvision``.

    torchvision's wheel bundles its own nvJPEG (13.0.1, where DALI's pinned one is 13.3.2)
    under the same soname, ``libnvjpeg.so.13``; the dynamic loader hands DALI whichever copy is
    loaded first, so a process that imported torchvision first decodes on the GPU with another
    nvJPEG than the server. Loaded first, DALI's stays DALI's and torchvision loads its own
    beside it. Every harness module that imports torchvision calls this first."""
    try:
        import nvidia.dali.backend as backend
    except ImportError:
        return
    backend.GetNvjpegVersion()  # dlopens DALI's libnvjpeg.so.13
