"""``harness diagnose``: which known culprits explain a divergence, what each costs, and what to change."""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from harness.cli.common import (
    add_images_args,
    add_reference_args,
    add_repository_args,
    add_server_args,
    connect,
    console,
    out,
    progress_bar,
    spec_path,
)
from harness.client import PIPELINES, ServerUnavailable, TritonClient
from harness.errors import UsageError
from harness.paths import REPORTS_DIR

DEFAULT_REPORT = REPORTS_DIR / "diagnose"
DEPLOYED_LIBRARY = {"dali": "DALI", "opencv": "OpenCV"}
FETCH_WORKERS = 4
"""Images in flight while reading the deployed side (the server works while the client waits)."""
RETRIES = 3
"""Retries of a request the server does not answer, with back-off, before the run ends."""


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "diagnose", help="find which known culprits explain a divergence, and the changes that fix it",
        description="Try each known culprit as a change to the reference recipe, against deployed tensors read "
                    "from the server once, in rounds: each round re-locates the first divergent stage with the "
                    "changes found so far applied. Ranks the causes by what each costs in predictions and "
                    "recommends every change in spec terms. Near-tie top-1 changes are not divergences. Exit "
                    "status: 0 nothing diverged, or the causes found explain every divergence; 1 a divergence "
                    "nothing explains, or an image only one side can process; 2 usage/setup errors, the server "
                    "stopped, or no image could be compared.")
    add_images_args(p, DEFAULT_REPORT)
    add_reference_args(p)
    p.add_argument("--write-spec", type=Path, default=None, metavar="FILE",
                   help="write the corrected reference spec (every cause applied to [reference]) to FILE; "
                        "`harness check --spec FILE` then compares against it")
    p.add_argument("--tie-margin", type=float, default=None, metavar="LOGITS",
                   help="a top-1 change is a near tie, not a divergence, when the reference's top-1 logit was ahead "
                        "of the deployed top-1 by at most this much (default: the output tolerance's atol, as check)")
    p.add_argument("--allow-rejected", action="store_true",
                   help="an image rejected by one side only does not make the exit status 1 (default: it does)")
    add_server_args(p)
    add_repository_args(p)
    p.set_defaults(run=run_diagnose_command)


def fetch_deployed(connect_client: Callable[[], TritonClient], images: list[Path], pipeline: str,
                   reference: Callable[[bytes], object] | None = None, workers: int = FETCH_WORKERS,
                   retries: int = RETRIES, on_image: Callable[[str], None] = lambda name: None):
    """Every image's deployed stages and logits, read once (``workers`` in flight, one client
    each). An image that cannot be read, or that the server rejects, is listed with its reason;
    with ``reference``, a rejected image the reference can process is "rejected by
    deployment", else "failed". A server that stops answering ends the read with
    :class:`harness.check.ServerStopped` after ``retries``."""
    from harness.check import ServerStopped
    from harness.diagnose import Deployed

    local = threading.local()

    def read(path: Path):
        try:
            data = path.read_bytes()
        except OSError as exc:
            return path.name, None, None, {"image": path.name, "reason": f"unreadable: {exc}", "outcome": "failed"}
        for attempt in range(retries + 1):
            try:
                if getattr(local, "client", None) is None:
                    local.client = connect_client()
                return path.name, data, local.client.deployed(data, pipeline), None
            except ServerUnavailable as exc:
                url = getattr(local.client, "url", "(server)")
                local.client = None  # reconnect on the next attempt
                if attempt == retries:
                    raise ServerStopped(url, path.name, str(exc)) from None
                time.sleep(0.5 * 2 ** attempt)
            except Exception as exc:  # noqa: BLE001 - anything else the deployment does with one image is that image's
                return path.name, data, None, {"image": path.name, "reason": f"deployed: {_line(exc)}",
                                               "outcome": _one_sided(reference, data)}

    deployed = Deployed([], [], [], [])
    pool = ThreadPoolExecutor(max(1, workers))
    try:
        for name, data, stages, failed in pool.map(read, images):
            if failed:
                deployed.failed.append(failed)
            else:
                deployed.names.append(name)
                deployed.data.append(data)
                deployed.stages.append(stages)
            on_image(name)
    finally:  # a stopped server: the images not started yet are not tried (each would wait out its retries)
        pool.shutdown(cancel_futures=True)
    return deployed


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _one_sided(reference: Callable[[bytes], object] | None, data: bytes) -> str:
    """"rejected by deployment" when the reference processes what the deployment rejected."""
    if reference is None:
        return "failed"
    try:
        reference(data)
    except Exception:  # noqa: BLE001 - failing on both sides is the ordinary "failed"
        return "failed"
    return "rejected by deployment"


def run_diagnose_command(args) -> int:
    from harness.check import ServerStopped
    from harness.compare.tolerance import tolerances_for
    from harness.corpus import list_images
    from harness.diagnose import SCREEN_IMAGES, Diagnoser, corrected_spec, diagnose, reference_toml
    from harness.diagnose.advice import reference_table
    from harness.model import ONNX_FILENAME
    from harness.reference import BUILT_IN
    from harness.reference.model import TorchModel, load_reference_model
    from harness.report.data import versions
    from harness.report.diagnosis import diagnosis_dict, write_diagnosis
    from harness.spec import SPEC_FILENAME, SpecError, load_spec

    started = time.perf_counter()
    path = spec_path(args)
    spec = load_spec(path)
    recipe = args.reference or spec.reference.recipe
    if recipe not in BUILT_IN:
        raise UsageError(f"diagnose varies a built-in recipe ({', '.join(BUILT_IN)}); describe your training "
                         f"preprocessing in the spec's [reference] section instead of {recipe!r}")
    images = list_images(args.images)
    if not images:
        raise UsageError(f"no images in {args.images}")
    if args.tie_margin is not None and args.tie_margin < 0:
        raise UsageError("--tie-margin must be at least 0")
    # One intra-op thread: the search preprocesses one image per core, and torch's thread pool
    # spends more time waking up than working on one image's small tensors.
    model = load_reference_model(args.repository / "classifier" / ONNX_FILENAME, args.reference_model, threads=1)
    model.check_input(spec.reference.preprocess.input_shape)

    def fp16_model():
        if not isinstance(model, TorchModel):
            raise SpecError("the fp16 hypothesis needs the PyTorch model (--reference-model torch)")
        return TorchModel(half=True)

    reference = BUILT_IN[recipe](spec.reference.preprocess)
    read_start = time.perf_counter()
    with connect(args) as client:
        url, protocol = client.url, client.protocol
        with progress_bar(len(images), "reading the deployed stages") as advance:
            try:
                deployed = fetch_deployed(lambda: TritonClient(url, protocol, timeout=args.timeout), images,
                                          args.pipeline, reference, on_image=advance)
            except ServerStopped as exc:
                raise UsageError(f"{exc}. Nothing was diagnosed; run diagnose again once the server answers") from None
    read_seconds = time.perf_counter() - read_start
    if not deployed.names:
        raise UsageError(f"no image could be compared: the deployment answered none of the {len(images)} "
                         f"({deployed.failed[0]['image']}: {deployed.failed[0]['reason']})")
    tolerances = tolerances_for(spec.preprocess, spec.tolerances)
    diagnoser = Diagnoser(deployed, recipe, spec.reference.preprocess, spec.preprocess, model, tolerances, fp16_model,
                          tie_margin=args.tie_margin)
    search_start = time.perf_counter()
    try:
        with console.status("diagnosing") as status:
            result = diagnose(diagnoser, str(args.repository / SPEC_FILENAME), DEPLOYED_LIBRARY[args.pipeline],
                              progress=status.update)
    finally:
        diagnoser.close()
    if not diagnoser.indices:
        raise UsageError(f"no image could be compared: the reference recipe rejected all {len(deployed.names)} "
                         f"images the deployment answered ({diagnoser.rejected_by_training[0]['reason']})")
    final_recipe, final_preprocess, fp16 = diagnoser.setting([c.hypothesis for c in result.causes])
    note = "The model-precision cause (fp16) cannot be written in a spec: the output stays different." if fp16 else ""
    written = None
    if args.write_spec:
        written = corrected_spec(spec, path, final_recipe, final_preprocess, [c.hypothesis for c in result.causes],
                                 args.write_spec, note)
    timing = {"reading the deployed side": read_seconds, **dict(diagnoser.timing),
              "search (all phases)": time.perf_counter() - search_start,
              "total": time.perf_counter() - started}
    diagnosis = diagnosis_dict(result, {
        "images": len(images), "failed": deployed.failed + diagnoser.rejected_by_training,
        "screen_images": SCREEN_IMAGES,
        "reference": {"recipe": recipe, "model": model.name},
        "deployed": {"ensemble": PIPELINES[args.pipeline].ensemble, "url": url, "protocol": args.protocol},
        "combined_change": {"reference": reference_table(spec, final_recipe, final_preprocess),
                            "toml": reference_toml(spec, final_recipe, final_preprocess), "note": note or None},
        "spec": spec.source, "written_spec": str(written) if written else None, "tie_margin": diagnoser.tie_margin,
        "timing_seconds": {k: round(v, 3) for k, v in timing.items()}, "counts": dict(diagnoser.counts),
        "versions": versions(),
    })
    paths = write_diagnosis(args.report, diagnosis)
    out(paths["markdown"].read_text())
    console.print(f"diagnosis: {paths['markdown']} (also {paths['json'].name})"
                  + (f"; corrected spec: {written}" if written else ""))
    one_sided = [f for f in diagnosis["failed"] if f["outcome"].startswith("rejected by") and not args.allow_rejected]
    return 1 if result.remaining is not None or one_sided else 0
