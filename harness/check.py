"""``harness check``: reference vs deployed, stage by stage, image by image.

For each image: the reference recipe and model produce the training-side stages; the
server produces the deployed ones (taps model, then the production ensemble); each stage
is compared (cumulative error) and, where the reference has the previous stage, the
deployed stage is also run alone on it (isolated error). Results stream to disk as they
complete, so a stopped run keeps its work and ``--resume`` picks up where it stopped.
"""

from __future__ import annotations

import csv
import heapq
import json
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from harness.client import InferenceError, ServerUnavailable, TritonClient
from harness.compare.aggregate import RunSummary, severity
from harness.compare.result import ImageResult, one_line
from harness.compare.stages import compare_stages
from harness.compare.ties import default_tie_margin
from harness.compare.tolerance import Tolerance, Verdict
from harness.deployed import stage_runner
from harness.reference import Recipe
from harness.reference.model import ReferenceModel
from harness.spec import Preprocess, SpecError
from harness.stage import IMAGE_STAGES, ISOLATED_INPUT, STAGES, TENSOR_STAGES, Stage

RESULTS_FILENAME = "images.jsonl"
CSV_FILENAME = "per_image.csv"
VISUALS_DIRNAME = "visuals"
TENSORS_DIRNAME = "tensors"


class ServerStopped(RuntimeError):
    """The server stopped answering (after retries); the run ends, keeping what it compared."""

    def __init__(self, url: str, image: str, reason: str):
        super().__init__(f"the Triton server at {url} stopped answering at image {image!r}: {reason}")
        self.url, self.image = url, image


@dataclass
class ImageTensors:
    """Both sides' stage tensors of one image (and the isolated runs), for visuals and --save-tensors."""

    reference: dict[str, np.ndarray] = field(default_factory=dict)
    deployed: dict[str, np.ndarray] = field(default_factory=dict)
    isolated: dict[str, np.ndarray] = field(default_factory=dict)


class ImageChecker:
    """Compares one image at a time; safe to call from several threads."""

    def __init__(
        self,
        connect: Callable[[], TritonClient],
        pipeline: str,
        recipe: Recipe,
        reference_model: ReferenceModel,
        deployed: Preprocess,
        tolerances: dict[str, Tolerance],
        isolate: bool = True,
        retries: int = 3,
        top_k: int = 5,
        tie_margin: float | None = None,
    ):
        """``tie_margin``: a top-1 change within this many logits of the reference's margin
        is a tie, not a divergence (default: the output tolerance, see harness.compare.ties)."""
        self.connect, self.pipeline, self.recipe = connect, pipeline, recipe
        self.reference_model, self.deployed, self.tolerances = reference_model, deployed, tolerances
        self.isolate, self.retries, self.top_k = isolate, retries, top_k
        self.tie_margin = default_tie_margin(tolerances) if tie_margin is None else tie_margin
        self._local = threading.local()

    # -- per-thread resources ------------------------------------------------------------
    def _client(self) -> TritonClient:
        if getattr(self._local, "client", None) is None:
            self._local.client = self.connect()
        return self._local.client

    def _runner(self):
        if getattr(self._local, "runner", None) is None:
            self._local.runner = stage_runner(self.pipeline, self.deployed)
        return self._local.runner

    def _call(self, image: str, request: Callable[[TritonClient], np.ndarray]):
        """A server request, retried with back-off while the server does not answer."""
        for attempt in range(self.retries + 1):
            try:
                return request(self._client())
            except ServerUnavailable as exc:
                url = self._url()
                self._local.client = None  # reconnect on the next attempt
                if attempt == self.retries:
                    raise ServerStopped(url, image, str(exc)) from None
                time.sleep(0.5 * 2 ** attempt)

    def _url(self) -> str:
        client = getattr(self._local, "client", None)
        return client.url if client else "(server)"

    # -- one image -----------------------------------------------------------------------
    def check(self, path: Path) -> tuple[ImageResult, ImageTensors | None]:
        """One image's result. Whatever goes wrong with this image (a decoder error of any
        library, a pixel limit, memory for an absurd size, a broken custom reference) is
        this image's row with a one-line reason; only :class:`ServerStopped` ends the run."""
        try:
            return self._check(path)
        except ServerStopped:
            raise
        except Exception as exc:
            return ImageResult(path.name, error=f"comparison failed: {one_line(exc)}"), None

    def _check(self, path: Path) -> tuple[ImageResult, ImageTensors | None]:
        name = path.name
        try:
            data = path.read_bytes()
        except OSError as exc:
            return ImageResult(name, error=f"unreadable: {exc.strerror or exc}"), None
        tensors = ImageTensors()
        reference_error = deployed_error = None
        try:
            tensors.reference = self.recipe(data)
        except SpecError as exc:  # the recipe itself is wrong, not this image: failed, not a rejection
            return ImageResult(name, error=f"reference recipe: {exc}"), None
        except Exception as exc:  # training could not process this image (cv2.error, PIL, MemoryError, ...)
            reference_error = one_line(exc)
        if reference_error is None:
            problem = self._input_problem(tensors.reference[Stage.INPUT])
            if problem:
                return ImageResult(name, error=problem), None
            tensors.reference[Stage.OUTPUT] = self.reference_model.logits(tensors.reference[Stage.INPUT][None])[0]
        for attempt in range(2):
            # Once more on a rejection: Triton may batch this request with another image's,
            # and one undecodable image fails its whole DALI batch.
            try:
                tensors.deployed = self._call(name, lambda c: c.deployed(data, self.pipeline))
                deployed_error = None
                break
            except InferenceError as exc:
                deployed_error = one_line(exc)
        if reference_error and deployed_error:
            return ImageResult(name, error=f"reference: {reference_error}; deployed: {deployed_error}"), None
        if reference_error:
            return ImageResult(name, error=f"reference: {reference_error}", rejected_by="training"), None
        if deployed_error:
            return ImageResult(name, error=f"deployed: {deployed_error}", rejected_by="deployment"), None
        if self.isolate:
            self._isolate(name, tensors)
        return ImageResult(name, compare_stages(tensors.reference, tensors.deployed, self.tolerances,
                                                tensors.isolated, self.top_k, self.tie_margin)), tensors

    def _input_problem(self, model_input: np.ndarray) -> str | None:
        """Why the reference's model input cannot go into the model (a custom recipe's
        wrong shape), or None."""
        expected = self.reference_model.input_shape
        if expected and tuple(model_input.shape) != tuple(expected):
            return (f"reference {self.recipe.name} made a {list(model_input.shape)} model input; "
                    f"the classifier takes {list(expected)}")
        return None

    def _isolate(self, name: str, t: ImageTensors) -> None:
        runner = self._runner()
        for stage, previous in ISOLATED_INPUT.items():
            if stage in t.reference and previous in t.reference:
                t.isolated[stage] = runner.run(stage, t.reference[previous])
        t.isolated[Stage.OUTPUT] = self._call(name, lambda c: c.classifier_logits(t.reference[Stage.INPUT][None]))[0]


# -- visuals of the worst images ----------------------------------------------------------

VISUAL_SIDE = 256
"""Heat maps are downsampled to at most this many pixels a side: the report needs the
pattern of the difference (edges, borders, blocks), not every pixel."""


def visual_arrays(stage: Stage, t: ImageTensors) -> dict[str, np.ndarray] | None:
    """Small arrays to draw for one stage: a |difference| heat map, and for the crop
    stage the two crops side by side."""
    ref, dep = t.reference.get(stage), t.deployed.get(stage)
    if ref is None or dep is None or ref.shape != dep.shape or stage not in (*IMAGE_STAGES, Stage.INPUT):
        return None
    diff = np.abs(dep.astype(np.float32) - ref.astype(np.float32))
    diff = diff.mean(axis=0) if stage == Stage.INPUT else diff.mean(axis=2)
    step = max(1, int(np.ceil(max(diff.shape) / VISUAL_SIDE)))
    out = {"diff": diff[::step, ::step].astype(np.float16)}
    if stage == Stage.CROP:
        out["reference"] = np.clip(ref, 0, 255).astype(np.uint8)
        out["deployed"] = np.clip(dep, 0, 255).astype(np.uint8)
    return out


class VisualStore:
    """Keeps, on disk, the visuals of the few worst images per stage (bounded memory/disk)."""

    def __init__(self, directory: Path, keep: int = 3):
        self.directory, self.keep = directory, keep
        self.heaps: dict[Stage, list[tuple[float, str]]] = {s: [] for s in STAGES}
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, stage: Stage, image: str) -> Path:
        return self.directory / f"{stage}__{image}.npz"

    def offer(self, result: ImageResult, tensors: ImageTensors | None) -> None:
        for stage_result in result.stages:
            if stage_result.verdict is Verdict.EQUAL:
                continue  # nothing differs: a heat map would be one flat colour
            heap, score = self.heaps[stage_result.stage], severity(stage_result)
            if len(heap) >= self.keep and score <= heap[0][0]:
                continue
            arrays = visual_arrays(stage_result.stage, tensors) if tensors else None
            if arrays is None and tensors is not None:
                continue
            if tensors is not None:
                np.savez_compressed(self.path(stage_result.stage, result.image), **arrays)
            elif not self.path(stage_result.stage, result.image).exists():
                continue  # resumed result whose visual was evicted before
            heapq.heappush(heap, (score, result.image))
            if len(heap) > self.keep:
                _, evicted = heapq.heappop(heap)
                self.path(stage_result.stage, evicted).unlink(missing_ok=True)

    def worst(self, stage: Stage) -> list[tuple[str, Path]]:
        return [(image, self.path(stage, image)) for _, image in sorted(self.heaps[stage], reverse=True)]


# -- the run --------------------------------------------------------------------------------

CSV_STAGE_FIELDS = ("verdict", "max_abs", "mean_abs", "isolated_max_abs")


def csv_header() -> list[str]:
    header = ["image", "status", "first_divergent_stage", "error"]
    for stage in TENSOR_STAGES:
        header += [f"{stage}_{f}" for f in CSV_STAGE_FIELDS]
    return header + list(CSV_TOPK_FIELDS)


CSV_TOPK_FIELDS = ("topk_verdict", "top1_agree", "reference_top1", "deployed_top1", "top1_prob_change", "topk_overlap",
                   "reference_margin")
"""``topk_verdict`` is equal, close, tie or diverged; ``topk_overlap`` is over the run's top-k
(5 by default); ``reference_margin`` is in logits (see harness.compare.ties)."""


def csv_row(result: ImageResult) -> list:
    """``status`` is :attr:`ImageResult.outcome`: compared, failed, rejected by deployment/training."""
    row = [result.image, result.outcome, result.first_divergent or "", result.error or ""]
    for stage in TENSOR_STAGES:
        s = result.stage(stage)
        if s is None:
            row += [""] * len(CSV_STAGE_FIELDS)
        elif s.metrics.get("shape_mismatch"):
            row += [s.verdict.value, "shape", "shape", (s.isolated or {}).get("max_abs", "")]
        else:
            row += [s.verdict.value, s.metrics["max_abs"], s.metrics["mean_abs"], (s.isolated or {}).get("max_abs", "")]
    top = result.stage(Stage.TOPK)
    if top is None:
        return row + [""] * len(CSV_TOPK_FIELDS)
    return row + [top.verdict.value, *(top.metrics.get(f, "") for f in CSV_TOPK_FIELDS[1:])]


@dataclass
class RunOutcome:
    summary: RunSummary
    visuals: VisualStore
    stopped: ServerStopped | None
    seconds: float


def run_check(
    images: list[Path],
    checker: ImageChecker,
    out_dir: Path,
    resume: bool = False,
    save_tensors: bool = False,
    workers: int = 4,
    on_result: Callable[[ImageResult], None] = lambda r: None,
) -> RunOutcome:
    """Check every image, streaming results to ``out_dir``. Images already in
    ``images.jsonl`` are not redone when ``resume``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path, csv_path = out_dir / RESULTS_FILENAME, out_dir / CSV_FILENAME
    summary, visuals = RunSummary(), VisualStore(out_dir / VISUALS_DIRNAME)
    done: set[str] = set()
    if resume and results_path.exists():
        with results_path.open() as f:
            for line in f:
                if line.strip():
                    result = ImageResult.from_dict(json.loads(line))
                    summary.add(result)
                    visuals.offer(result, None)
                    done.add(result.image)
                    on_result(result)
    else:
        results_path.write_text("")
        with csv_path.open("w", newline="") as f:
            csv.writer(f).writerow(csv_header())
    if save_tensors:
        (out_dir / TENSORS_DIRNAME).mkdir(exist_ok=True)
    todo = [p for p in images if p.name not in done]

    start, stopped = time.perf_counter(), None
    with results_path.open("a") as results_file, csv_path.open("a", newline="") as csv_file, \
            ThreadPoolExecutor(workers) as pool:
        writer = csv.writer(csv_file)
        pending, queue = set(), iter(todo)

        def record(result: ImageResult, tensors: ImageTensors | None) -> None:
            results_file.write(json.dumps(result.to_dict(), allow_nan=True) + "\n")
            results_file.flush()
            writer.writerow(csv_row(result))
            csv_file.flush()
            summary.add(result)
            visuals.offer(result, tensors)
            if save_tensors and tensors is not None:
                save_image_tensors(out_dir / TENSORS_DIRNAME / f"{result.image}.npz", tensors)
            on_result(result)

        # At most 2 images in flight per worker: memory does not grow with the image count.
        while True:
            while stopped is None and len(pending) < 2 * workers:
                path = next(queue, None)
                if path is None:
                    break
                pending.add(pool.submit(checker.check, path))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                try:
                    record(*future.result())
                except ServerStopped as exc:
                    stopped = stopped or exc
    return RunOutcome(summary, visuals, stopped, time.perf_counter() - start)


def save_image_tensors(path: Path, t: ImageTensors) -> None:
    arrays = {f"reference.{k}": v for k, v in t.reference.items()}
    arrays.update({f"deployed.{k}": v for k, v in t.deployed.items()})
    arrays.update({f"isolated.{k}": v for k, v in t.isolated.items()})
    np.savez_compressed(path, **arrays)


def load_image_tensors(path: Path) -> ImageTensors:
    t = ImageTensors()
    with np.load(path) as z:
        for key in z.files:
            side, _, stage = key.partition(".")
            getattr(t, side)[stage] = z[key]
    return t
