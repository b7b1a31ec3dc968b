"""``harness layers`` and ``harness repeat`` as jobs: :func:`run` and :func:`run_repeat` take a
:class:`~harness.session.Session` and their options and return what they found, reports
written, with ``exit_status()`` by the harness's one policy (:mod:`harness.errors`); and
:func:`export_fp16_model`, what ``harness model export --fp16`` does. The command line only
parses into these and prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from harness.check.rundir import report_locked
from harness.compare.tolerance import tolerances_for
from harness.corpus import list_images
from harness.errors import EXIT_FOUND, EXIT_OK, UsageError
from harness.files import strict_json, write_atomic
from harness.layers.compare import LayerTolerance
from harness.layers.executions import load_onnx
from harness.layers.fallback import find_fp32_fallback
from harness.layers.inputs import image_inputs
from harness.layers.repeatability import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_CONCURRENCY,
    DEFAULT_REPEATS,
    check_repeatability,
    deployment_probes,
    repository_probes,
    summary_rows,
)
from harness.layers.report import write_layers_report
from harness.layers.run import DEFAULT_BATCH, run_layers
from harness.listing import InputFile, read_input
from harness.names import identifier
from harness.paths import DEFAULT_PHOTOS
from harness.precision import FP16_FILENAME, compare_precision, export_fp16
from harness.report.formats import JobReports, require_formats
from harness.stage import Stage
from harness.target import Target, open_deployment, require_pipeline
from harness.verdict import Verdict

if TYPE_CHECKING:
    from harness.layers.compare import LayersResult
    from harness.layers.fallback import Fallback
    from harness.layers.repeatability import RepeatResult
    from harness.precision import PrecisionComparison


@dataclass(frozen=True)
class LayersOptions:
    """What ``harness layers`` is asked to do; defaults are the command line's."""

    images: Path
    """Images (the reference preprocessing makes the inputs) or saved model inputs."""
    onnx: Path | None = None
    """The fp32 ONNX (None: the repository's classifier)."""
    executions: tuple[str, ...] = ("torch", "onnx")
    """The first is the reference."""
    fp16_onnx: Path | None = None
    torch_model: str | None = None
    torch_prefix: str | None = None
    layers: tuple[str, ...] | None = None
    """Node names to compare (None: every layer)."""
    rel_rms: float = LayerTolerance.rel_rms
    batch: int = DEFAULT_BATCH
    limit: int | None = None
    report: Path = Path("build/layers")
    command: str = ""
    """The command line as the report quotes it."""
    formats: tuple[str, ...] | None = None
    """``--format`` (None: layers.json, .csv, .md, .html; the plot always)."""


@dataclass(frozen=True)
class LayersJobResult:
    """A finished layer comparison whose report is written."""

    result: "LayersResult"
    paths: dict[str, Path]

    def exit_status(self) -> int:
        """0 no layer diverged, 1 one did."""
        return EXIT_FOUND if self.result.first_divergent_layer else EXIT_OK


def run(session, options: LayersOptions, *args, **kwargs) -> LayersJobResult:
    """:func:`_run` under :func:`harness.check.rundir.report_locked` (``options.report`` taken as
    ``check`` takes it), imported when a run starts: the check package brings cv2 and shapely,
    which listing and parsing the layers command does not need."""
    return report_locked(_run)(session, options, *args, **kwargs)


def _run(session, options: LayersOptions, progress: Callable[[int], None] | None = None) -> LayersJobResult:
    """Compare the executions layer by layer and write the report to ``options.report``.
    Raises :class:`~harness.errors.UsageError` (or a library refusal) for options, a model,
    layer or images it cannot use; ``progress`` gets the images done so far."""
    require_formats(options.formats)
    if options.batch < 1 or options.rel_rms <= 0:
        raise UsageError("--batch-size must be at least 1 and --rel-rms above 0")
    result = run_layers(options.images, options.onnx or session.onnx_path, list(options.executions), session.recipe(),
                        LayerTolerance(options.rel_rms), list(options.layers) if options.layers else None,
                        options.fp16_onnx, options.batch, options.limit, progress=progress or (lambda n: None),
                        torch_model=options.torch_model, torch_prefix=options.torch_prefix)
    return LayersJobResult(result, write_layers_report(options.report, result, options.command, options.formats))


@dataclass(frozen=True)
class RepeatOptions:
    """What ``harness repeat`` is asked to do; defaults are the command line's."""

    images: Path
    pipeline: str = "dali"
    model: str | None = None
    """Any model or ensemble on the server instead of ``pipeline``."""
    repeats: int = DEFAULT_REPEATS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    concurrency: int = DEFAULT_CONCURRENCY
    limit: int = 8
    report: Path = Path("build/repeat")
    client: str | None = None
    """``file.py:name``: the client's preprocessing making what ``model`` is fed (``--client``)."""
    task: str | None = None
    """``--task``: with ``pipeline``, which of the repository's ensembles (classify_, embed_);
    with ``model``, what discovery reads (None: what it finds)."""
    formats: tuple[str, ...] | None = None
    """``--format`` (None: repeat.json and repeat.md)."""


@dataclass(frozen=True)
class RepeatJobResult:
    """A finished repeatability run whose reports (repeat.json, repeat.md) are written."""

    result: "RepeatResult"
    images: int
    """Images used."""
    rows: list[dict]
    """One per probe and stage (:func:`~harness.layers.repeatability.summary_rows`)."""
    paths: dict[str, Path]
    alone: tuple[str, ...] = ()
    """The models sent one image at a time only (unbatched, or no dynamic batching): no batch size was tried."""

    def exit_status(self) -> int:
        """0 every answer repeated within the drift rule, 1 one did not."""
        return EXIT_FOUND if self.result.verdict is Verdict.DIVERGED else EXIT_OK


def run_repeat(session, options: RepeatOptions, log: Callable[[str], None] = lambda line: None) -> RepeatJobResult:
    """Send the first usable images of ``options.images`` (at most ``options.limit``) alone,
    in batches and concurrently, compare every answer with the first by the drift rule, and
    write repeat.json and repeat.md to ``options.report``. ``log`` gets the images skipped
    and what discovery found. Raises :class:`~harness.errors.UsageError` for bad options or
    no usable image."""
    require_formats(options.formats)
    sizes = list(options.batch_sizes)
    if options.repeats < 1 or options.concurrency < 1 or any(b < 2 for b in sizes):
        raise UsageError("--repeats and --concurrency must be at least 1, every batch size at least 2")
    recipe = session.recipe()
    images = []
    for path in list_images(options.images):
        data = read_input(InputFile.of(path))
        try:
            recipe(data)
        except ValueError as exc:  # ImageError and friends: skipped, said
            log(f"skipped {identifier(path)}: {exc}")
            continue
        images.append((identifier(path), data))
        if len(images) == options.limit:
            break
    if not images:
        raise UsageError(f"{options.images}: no usable image")
    drift = tolerances_for(session.spec.preprocess, drift=True)
    with session.connect(log=log) as client:
        if options.model:
            found = open_deployment(session, client, Target(model=options.model, client=options.client,
                                                            task=options.task),
                                    list_images(options.images), log, recipe)
            probes = deployment_probes(found, recipe)
        else:
            require_pipeline(session, client, options.pipeline, options.task)
            probes = repository_probes(options.pipeline, recipe, options.task)
        result = check_repeatability(session.client_factory(client), probes, images,
                                     lambda stage: drift[Stage.OUTPUT if stage == "classifier" else Stage(stage)],
                                     options.repeats, sizes, options.concurrency)
    rows = summary_rows(result)
    alone = tuple(p.model for p in probes if not p.batching)
    paths = repeat_reports(rows, len(images), sizes, alone).write(result, options.report, options.formats)
    return RepeatJobResult(result, len(images), rows, paths, alone)


def repeat_reports(rows: list[dict], images: int, sizes: list[int], alone: Sequence[str] = ()):
    """What ``harness repeat`` writes (:class:`~harness.report.formats.JobReports`): repeat.json
    and repeat.md by default."""
    def json_file(result: "RepeatResult", directory: Path) -> dict[str, Path]:
        write_atomic(directory / "repeat.json", strict_json(result.to_dict(), indent=1) + "\n")
        return {"json": directory / "repeat.json"}

    def markdown_file(result: "RepeatResult", directory: Path) -> dict[str, Path]:
        (directory / "repeat.md").write_text(repeat_markdown(result, rows, images, sizes, alone))
        return {"markdown": directory / "repeat.md"}

    return JobReports("repeat", "repeat", ("json", "md"), {"json": json_file, "md": markdown_file})


def repeat_markdown(result: "RepeatResult", rows: list[dict], images: int, sizes: list[int],
                    alone: Sequence[str] = ()) -> str:
    """repeat.md; ``alone``: the probes sent one image at a time only (no batching to test)."""
    lines = [f"# Repeatability: {images} images, {result.repeats} rounds, batch sizes {sizes}, "
             f"{result.concurrency} concurrent", ""]
    if alone:
        lines += [f"Sent one image at a time only, alone (no batch sizes, no concurrency): {', '.join(alone)}: "
                  "unbatched (max_batch_size 0) or without dynamic batching, so nothing batches them.", ""]
    lines += ["| model | stage | images | answers | max abs spread | top-1 changes | verdict |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['probe']} | {row['stage']} | {row['images']} | "
                     f"{row['answers']} | {row['max_abs']:.3g} | {row['top1_changes']} | {row['verdict'].value} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Fp16Export:
    """What ``harness model export --fp16`` wrote: the fp16 model and, when calibration
    images were there, its fp32 fallback, the report beside it and the error against fp32."""

    model: Path
    fp16_model: Path
    report: Path | None = None
    """OUT.json: the layers kept in fp32 (None: no calibration images, no fallback searched)."""
    fallback: "Fallback | None" = None
    comparison: "PrecisionComparison | None" = None


def export_fp16_model(session, model: Path, out: Path | None = None, calibration: Path | None = None,
                      log: Callable[[str], None] = lambda line: None) -> Fp16Export:
    """The fp16 model of ``model`` (default ``model_fp16.onnx`` beside it) with the fp32
    fallback found on ``calibration`` (default the photo corpus, when it exists: else no
    fallback is searched), its report OUT.json, and fp16 against fp32 on those images.
    Raises a one-line :class:`~harness.errors.HarnessError` for a missing or non-ONNX file."""
    import numpy as np

    load_onnx(model)  # a missing or non-ONNX file: one line, exit 2
    out = out or model.with_name(FP16_FILENAME)
    if calibration is None and not DEFAULT_PHOTOS.is_dir():
        export_fp16(model, out)
        return Fp16Export(model, out)
    failed: list = []
    inputs = np.stack([x for _, x in image_inputs(calibration or DEFAULT_PHOTOS, session.recipe(), failed)])
    fallback = find_fp32_fallback(model, inputs, out, session.tolerances()[Stage.OUTPUT], log=log)
    report = out.with_suffix(".json")
    write_atomic(report, strict_json({"model": str(model), "fp16_model": str(out), **fallback.to_dict()}, indent=1) + "\n")
    return Fp16Export(model, out, report, fallback, compare_precision(model, out, inputs))
