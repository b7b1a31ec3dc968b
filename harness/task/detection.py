"""Detection: boxes out. The raw ``output`` (a text probability map, a raw head) is compared
as a tensor, the boxes after postprocessing are the result, and an image whose boxes change
is the event.

- **Output**: the detector's raw output, compared as a tensor by :data:`OUTPUT_TOLERANCE`, so
  a user sees whether the model or the postprocessing adds the error. Its shape follows the
  model input's: a different resize (a limit length, a letterbox size) is a shape mismatch.
- **Geometry**: what the resize did to the image (:class:`harness.geometry.Geometry`):
  the reference's is its spec's arithmetic on the decoded image, the deployment's the
  ``GEOMETRY`` tensor its preprocessing answers (what it actually applied), else its spec's.
  Kept in the stage dicts under :data:`harness.stage.GEOMETRY_TENSOR`.
- **Result** (``postprocess``): boxes in the source image's pixels, from the server when the
  deployment postprocesses (``BOXES``/``SCORES``, EfficientNMS, quads: :mod:`harness.detection.outputs`),
  else from the deployment's raw output by the postprocessor; the reference's always by the
  postprocessor (the spec's ``[postprocess]`` table, ``[reference.postprocess]``, or
  ``--postprocess FILE.py:NAME`` for both sides). Compared one to one
  (:func:`harness.detection.compare.compare_detections`: matched, missed, extra, IoU,
  corner error, score changes; its documented rules and defaults).
- **Events**: the images whose boxes changed; a box that appears or disappears with a score
  within the margin (default :data:`NEAR_THRESHOLD`) of the score threshold, or whose map
  pixels crossed the binarization threshold only from near it, is a near-threshold change, a
  **tie**: listed, not failed; but only where the deployed postprocessing, run alone on the
  reference's raw output and geometry, makes the reference's boxes (:data:`ISOLATED_MARGIN`;
  :func:`harness.compare.ties.explained_by_upstream`): a postprocessing difference is never
  excused by the maps' noise.
- **Effect** (``harness accuracy --task detection``, a COCO labeled set): precision, recall and
  F1 at IoU 0.5, COCO mAP where boxes have classes, McNemar on the per-image outcomes
  (:mod:`harness.detection.effect`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from harness.client import PIPELINES, TaskModels
from harness.compare.ties import made_by
from harness.detection.boxes import Detections
from harness.detection.compare import Boxes, DetectionTolerance
from harness.errors import ServerStopped, UsageError
from harness.formatting import fmt
from harness.geometry import Geometry
from harness.listing import InputFile, read_input
from harness.model import ONNX_FILENAME, check_detector_onnx
from harness.names import identifier, terminal_text
from harness.result import StageResult
from harness.scores import DETECTION
from harness.spec import load_spec
from harness.stage import GEOMETRY_TENSOR, Stage
from harness.task_api import (
    Event,
    Events,
    KnownCheck,
    KnownResults,
    OutputChoice,
    PostprocessError,
    ResultCulprit,
    Section,
    Task,
    like,
    verdict_cells,
)
from harness.task_api.models import DALI_ON_CPU, DALI_TAPS_ON_CPU, ONNX_ON_CPU, ShippedModel
from harness.tolerance import Tolerance
from harness.verdict import Verdict

OUTPUT_TOLERANCE = Tolerance(atol=0.1, max_fraction=0.01, mean_atol=0.01)
"""The raw output (for the text detector, a probability per pixel): at most 1% of the values
beyond 0.1 and a mean error within 0.01 (docs/detection.md measures what an aligned
deployment shows)."""
NEAR_THRESHOLD = DetectionTolerance().near_threshold
"""A box that appears or disappears with a score within this of the score threshold is a
near-threshold change (the detection analogue of a near tie)."""
BINARIZATION_MARGIN = 0.15
"""A box missed, extra or moved where every map pixel whose binarization differs between the
two sides lay within this of the binarization threshold in the reference's map is a
near-threshold change too: the raw output's noise pushed pixels across the threshold and the
contour split, merged or grew there. Measured (benchmarks/detection_rule.py, the ImageNet
sample's 171 photos with text, limit side 736): an aligned deployment's changed boxes all lie
within 0.131 of it; under a planted channel order, resize filter or normalization, 97-100% of the
changed boxes have a pixel flipped from beyond 0.2."""


ISOLATED_MARGIN = 1e-4
"""The postprocessing run alone on the reference's own raw output has no noise to excuse: a
box change there is near the score threshold only within float rounding of it (the server
and the harness compute scores in float32 and float64)."""
MIRROR_WHY = ("the reference's postprocessing, run on the deployment's own raw output, does not make the deployment's "
              "boxes: the postprocessing differs, and the maps' noise does not excuse it")
POSTPROCESSED_ALONE = "postprocess_alone"
"""The key under which :meth:`Detection.derive_deployed` keeps, for a deployment answering
only its raw output (boxes made here by the deployed spec's postprocessing), that
postprocessing run on the reference's raw output with the reference's geometry."""


@dataclass(frozen=True)
class DetectionSetup:
    """What a detection comparison needs beyond the tensors: each side's postprocessor and resize."""

    reference_postprocess: Any
    """A :class:`harness.detection.postprocess.Postprocessor` (the reference's boxes)."""
    deployed_postprocess: Any | None
    """Run on the deployment's raw output when it answers no boxes of its own."""
    reference_resize: Any
    """The reference's :class:`harness.spec.ResizeSpec` (its geometry)."""
    deployed_resize: Any
    """The deployment's, for a deployment that does not answer its ``GEOMETRY``."""
    tolerance: DetectionTolerance = DetectionTolerance()
    describe: str = ""
    """The postprocessing in words, for reports."""
    reference_table: Mapping | None = None
    """The reference's ``[postprocess]`` table (None: the user's ``--postprocess``): what
    diagnose varies (:func:`postprocess_hypotheses`)."""
    deployed_table: Mapping | None = None

    @property
    def score_threshold(self) -> float:
        """The score a box needs to be kept (a user's postprocessor may say it as ``score_threshold``)."""
        post = self.reference_postprocess
        for owner in (getattr(post, "params", None), post):
            value = getattr(owner, "score_threshold", None)
            if isinstance(value, (int, float)) and math.isfinite(value):
                return float(value)
        return math.nan  # unknown: no box change counts as near the threshold


def load_postprocessor(ref: str):
    """``FILE.py:NAME``: the user's postprocessor, a callable ``(outputs, geometry) -> Detections``."""
    from harness.reference.custom import load_object

    obj = load_object(ref)
    if not callable(obj):
        raise UsageError(f"--postprocess {ref}: {type(obj).__name__} is not callable; a postprocessor takes "
                         "(outputs by name, geometry) and returns harness.detection.boxes.Detections")
    return UserPostprocessor(obj, ref)


class UserPostprocessor:
    """The user's postprocessor, called as user code: whatever it raises (``sys.exit()`` too:
    :func:`harness.errors.call_user`) is a :class:`PostprocessError` naming it. Its attributes
    (``params``, ``score_threshold``) read through."""

    def __init__(self, function, ref: str):
        self.function, self.ref = function, ref

    def __call__(self, outputs, geometry):
        from harness.errors import call_user, raised

        try:
            return call_user(self.function, outputs, geometry)
        except Exception as exc:  # noqa: BLE001 - the user's postprocessing failing on this image is its row
            raise PostprocessError(f"--postprocess {self.ref} failed: {raised(exc)}") from None

    def __getattr__(self, name):
        return getattr(self.__dict__["function"], name)


def _postprocessor(table: Mapping | None):
    from harness.detection.postprocess import from_table

    return None if table is None else from_table(table)


def _describe(table: Mapping | None, user: str | None) -> str:
    if user:
        return f"{user} (--postprocess)"
    if table is None:
        return "none"
    params = ", ".join(f"{k} {v}" for k, v in table.items() if k != "name")
    return f"{table['name']} ({params})" if params else str(table["name"])


class DetectionEvents(Events):
    """The run's images whose boxes changed, and the run's box totals."""

    task = "detection"

    def __init__(self, margin: float):
        self.margin = margin
        self.events: list[Event] = []
        self.totals = dict.fromkeys(("reference_boxes", "deployed_boxes", "matched", "missed", "extra",
                                     "near_threshold"), 0)
        self.iou_sum = 0.0
        self.images = 0

    def add(self, result) -> None:
        post = result.stage(Stage.POSTPROCESS)
        if post is None:
            return
        m = post.metrics
        self.images += 1
        for key in self.totals:
            # Near-threshold changes count where they excuse something: not in a diverged image
            # (its changes are not ties: a change beyond the rule, or one nothing before explains).
            if key != "near_threshold" or post.verdict is not Verdict.DIVERGED:
                self.totals[key] += int(m.get(key) or 0)
        self.iou_sum += (m.get("mean_iou") or 0.0) * (m.get("matched") or 0)
        if post.verdict in (Verdict.TIE, Verdict.DIVERGED):
            self.events.append(Event(result.image, post.verdict, {
                k: m.get(k) for k in ("reference_boxes", "deployed_boxes", "matched", "missed", "extra",
                                      "near_threshold", "min_iou", "worst_corner_px", "max_score_delta")}
                | {"problems": m.get("problem_lines") or [], "made_by": made_by(result)}))

    def result(self):
        matched = self.totals["matched"]
        figures = {"images": self.images, **self.totals, "mean_iou": self.iou_sum / matched if matched else None,
                   "near_threshold_margin": self.margin}
        return tuple(sorted(self.events, key=lambda e: e.image)), figures


def install_detector(folder: Path, spec, config) -> Path:
    """rapidocr's PP-OCRv6 detector into ``folder/model.onnx`` with its licence notice (after
    checking it is the file the notice covers), held to the folder's ``config`` and run once."""
    from harness.detection.detector import install_model  # here: loads OpenCV and pyclipper only when exporting

    path = install_model(folder, ONNX_FILENAME)
    check_detector_onnx(path, config, run=True)
    return path


def check_detector(folder: Path, spec, config) -> None:
    """The detector's ONNX against its config: tensor names, types and dimensions."""
    check_detector_onnx(folder / ONNX_FILENAME, config)


class Detection(Task):
    """The detection task; :meth:`configure` binds it to a spec's postprocessing (a bare
    ``Detection()`` only discovers and names)."""

    name = "detection"
    # PP-OCRv6's text detector (docs/detection.md): its own spec and preprocessing models, the
    # probability map as the raw output, the boxes from the ensemble's DB postprocessing step.
    repository = TaskModels("detect", "detector", "x", "fetch_name_0", "PROBABILITY", spec="detection.toml",
                            preprocess_prefix="detect_", results=("BOXES", "SCORES"),
                            postprocess_model="detect_postprocess",
                            added=("detect_validate_image", "detect_preprocess_dali", "detect_preprocess_dali_stages",
                                   "detect_preprocess_dali_taps", "detect_preprocess_opencv", "detector",
                                   "detect_postprocess", "detect_dali", "detect_opencv"),
                            engines=("detector",),
                            # the same DALI graph with the CPU decoder, and the detector's ONNX in ONNX
                            # Runtime (about 0.5 s a 736x992 image on one thread), as the classifier's
                            shipped=(ShippedModel("detect_preprocess_dali", DALI_ON_CPU),
                                     ShippedModel("detect_preprocess_dali_stages", DALI_TAPS_ON_CPU),
                                     ShippedModel("detector", ONNX_ON_CPU, install_detector,
                                                  "installed PP-OCRv6's text detector (the detection task's model) as "
                                                  "{path}, with its licence notice (MODEL_LICENSES.md, LICENSE)",
                                                  check_detector)))
    noun = "boxes"
    result_words = "the boxes"
    result_stage = Stage.POSTPROCESS
    result_in_table = True
    output_words = "the detector's raw output (a probability map, a raw head)"
    event_words = ("box change", "box changes")
    flip_words = "images with box changes"
    agreement_words = "box agreement"
    tie_words = ("box change is near a threshold", "box changes are near a threshold")
    csv_fields = ("postprocess_verdict", "reference_boxes", "deployed_boxes", "matched", "missed", "extra",
                  "near_threshold", "min_iou", "worst_corner_px", "max_score_delta")

    def __init__(self, setup: DetectionSetup | None = None):
        self.setup = setup
        self._changed_postprocessors: dict[tuple, Any] = {}

    # What preflight records of the detection ensembles (the OCR task's deployment answers them too):
    # the photos with text, where the reference detector finds 4 and 3 words, every score at least
    # 0.15 above the threshold (0.5), so that no box is a near-threshold one that may come and go.
    known_results = KnownResults("detection", "detect", ("grace_hopper.jpg", "LinuxLogo.jpg"),
                                 ("BOXES", "SCORES", "GEOMETRY"), "the detector")

    def check_known_results(self, served, recorded, failed, repository, prefix=""):
        """Each pipeline's boxes held to the record's by :class:`Boxes` (its documented tolerance:
        matched one to one at IoU 0.5, corners within 4 px or IoU 0.9, scores within 0.05; a box
        only one side has near the score threshold is a tie, listed), at the score threshold of
        the detection ensembles' spec, and the geometry each applied, which is arithmetic on the
        image's size: equal; a refused request is a row of its own."""
        spec = load_spec(Path(repository) / Detection.repository.spec)  # the detect_ ensembles', for OCR too
        threshold = _postprocessor(spec.postprocess).params.score_threshold
        checks = []
        for pipeline in PIPELINES:
            worst, geometry_moved = None, []
            for photo, want in ((photo, answers[pipeline]) for photo, answers in recorded.items()):
                if pipeline not in served.get(photo, {}):
                    continue
                got = served[photo][pipeline]
                if not np.array_equal(got["GEOMETRY"], want["GEOMETRY"]):
                    geometry_moved.append(f"{photo}: {got['GEOMETRY'].tolist()} not {want['GEOMETRY'].tolist()}")
                boxes = Boxes(threshold, image_size=tuple(int(v) for v in want["GEOMETRY"][:2]))
                result = boxes(Detections(want["BOXES"], want["SCORES"]), Detections(got["BOXES"], got["SCORES"]))
                events = "; ".join(result.events()) or "the same boxes"
                if worst is None or result.verdict.rank > worst[0].rank:
                    worst = (result.verdict, f"worst {photo} ({result.reference_boxes} boxes): {events}")
            name = f"{prefix}detection {pipeline}"
            refused = next((why for (photo, p), why in failed.items() if p == pipeline), None)
            if refused is not None:
                checks.append(KnownCheck(f"{name}: request", False, "answered", "refused", refused))
            if worst is not None:
                checks.append(KnownCheck(f"{name}: boxes", worst[0] != Verdict.DIVERGED,
                                         "equal, close or tie (compare_detections)", worst[0].value, worst[1]))
                checks.append(KnownCheck(f"{name}: geometry", not geometry_moved, "equal",
                                         "moved" if geometry_moved else "equal", "; ".join(geometry_moved)))
        return checks

    # -- set-up -------------------------------------------------------------------------------
    def configure(self, spec, postprocess: str | None = None) -> "Detection":
        user = load_postprocessor(postprocess) if postprocess else None
        reference = user or _postprocessor(spec.reference.postprocess)
        if reference is None:
            raise UsageError("--task detection: the reference's boxes need a postprocessing: a [postprocess] table in "
                             f"the spec ({spec.source}: name = \"db\" or \"yolo\" and its parameters), or "
                             "--postprocess FILE.py:NAME")
        return Detection(DetectionSetup(
            reference, user or _postprocessor(spec.postprocess), spec.reference.preprocess.resize,
            spec.preprocess.resize, describe=_describe(spec.reference.postprocess, postprocess),
            reference_table=None if user else spec.reference.postprocess, deployed_table=spec.postprocess))

    # -- discovery ------------------------------------------------------------------------------
    def choose_output(self, model, choice):
        if choice is not None:
            return self.named_output(model, choice, "raw output")
        return self.raw_beside(model, self.result_outputs(model))

    def raw_beside(self, model, boxes) -> OutputChoice:
        """The raw output beside ``boxes`` (:meth:`result_outputs`'s, None: none): the one float
        output not among them."""
        raw = [t for t in model.outputs if t.data_type in ("TYPE_FP32", "TYPE_FP16")
               and (boxes is None or t.name not in boxes.names)]
        if boxes is not None:
            return OutputChoice(raw[0].name if len(raw) == 1 else None, "boxes", why=f"answers {boxes.describe()}")
        if len(raw) == 1:
            return OutputChoice(raw[0].name, "raw output", why="the one float output (postprocessed here)")
        return OutputChoice(None, why=f"model {model.name!r} answers no boxes (boxes [-1, 4] or [-1, 4, 2] with scores "
                                      "[-1], or EfficientNMS's num_dets/det_boxes/det_scores) and no single raw output; "
                                      f"outputs: {', '.join(t.describe() for t in model.outputs) or 'none'}: name "
                                      "the raw output with --output")

    def signs(self, tensor, labelled):
        return None

    claims_first = True
    output_shaped = True
    answer_extras = (GEOMETRY_TENSOR,)

    def claims(self, model):
        boxes = self.result_outputs(model)
        return f"it answers boxes ({boxes.describe()})" if boxes else None

    def result_outputs(self, model, choice=None):
        from harness.detection.outputs import find_box_outputs

        return find_box_outputs(model.outputs)

    def settle_results(self, outputs, answer, size):
        """The boxes' coding told by the probe's answer (:meth:`BoxOutputs.settled`: x, y, width,
        height or corners)."""
        return outputs.settled(answer, size)

    def served_results(self, names):
        from harness.detection.outputs import BoxOutputs

        return BoxOutputs(*names[:2], "auto")

    def output_kind(self, name, probe):
        return DETECTION

    # -- the stages a detector adds -------------------------------------------------------------
    def derive_reference(self, stages: dict) -> dict:
        """The reference's geometry (its spec's on its decoded image) and boxes (its postprocessor
        on its raw output)."""
        s = self._setup()
        decoded = stages.get(Stage.DECODE)
        if decoded is None:
            raise ValueError("a detector's reference needs the decoded image's size (a decode stage) to map "
                             "boxes back to its pixels")
        geometry = s.reference_resize.geometry(*np.asarray(decoded).shape[:2])
        boxes = s.reference_postprocess(_outputs(stages[Stage.OUTPUT]), geometry)
        return {GEOMETRY_TENSOR: geometry.to_tensor(), Stage.POSTPROCESS: _as_detections(boxes).to_array()}

    def derive_deployed(self, deployed: dict, reference: dict) -> dict:
        """The deployment's boxes when it answers only its raw output: the postprocessor on it,
        with the geometry it answered (else its spec's, on its decoded image or the reference's).
        Its raw output in the reference's shape where only leading axes of one differ (a model
        without batching whose output keeps a batch axis of one)."""
        out = {}
        if Stage.OUTPUT in deployed and Stage.OUTPUT in reference:
            aligned = like(deployed[Stage.OUTPUT], reference[Stage.OUTPUT])
            if aligned is not deployed[Stage.OUTPUT]:
                out[Stage.OUTPUT] = aligned
        if Stage.POSTPROCESS in deployed or Stage.OUTPUT not in deployed:
            return out
        s = self._setup()
        if s.deployed_postprocess is None:
            raise ValueError("the deployment answers its raw output only, and the spec has no [postprocess] to make "
                             "its boxes: add one, or give --postprocess FILE.py:NAME")
        geometry = self.geometry_of(deployed, reference)
        boxes = s.deployed_postprocess(_outputs(out.get(Stage.OUTPUT, deployed[Stage.OUTPUT])), geometry)
        out.update({GEOMETRY_TENSOR: geometry.to_tensor(), Stage.POSTPROCESS: _as_detections(boxes).to_array()})
        if Stage.OUTPUT in reference and GEOMETRY_TENSOR in reference:  # the same postprocessing, alone
            out[POSTPROCESSED_ALONE] = self.isolated_postprocess(
                lambda output, g: s.deployed_postprocess(_outputs(output), g), reference)
        return out

    def geometry_of(self, deployed: dict, reference: dict) -> Geometry:
        if GEOMETRY_TENSOR in deployed:
            return Geometry.from_tensor(deployed[GEOMETRY_TENSOR])
        decoded = deployed.get(Stage.DECODE, reference.get(Stage.DECODE))
        if decoded is None:
            raise ValueError("the deployment answers no GEOMETRY and shows no decoded image: its boxes cannot be "
                             "mapped back to the source image's pixels by its spec's resize")
        return self._setup().deployed_resize.geometry(*np.asarray(decoded).shape[:2])

    def read_answer(self, answer: Mapping[str, np.ndarray], boxes) -> dict:
        """The stages a deployment's own answer holds (one image, outputs by name): its boxes
        (``boxes``: :class:`harness.detection.outputs.BoxOutputs`) as ``postprocess`` (with the
        records :data:`~harness.detection.outputs.UNSCORED` and
        :data:`~harness.detection.outputs.AXIS_ALIGNED` where they apply), and its ``GEOMETRY``
        when it answers one."""
        from harness.detection.outputs import AXIS_ALIGNED, AXIS_ALIGNED_LAYOUTS, UNSCORED

        out = {Stage.POSTPROCESS: boxes.read(answer).to_array()}
        if boxes.scores is None:
            out[UNSCORED] = np.ones(1, bool)
        if boxes.coding(answer) in AXIS_ALIGNED_LAYOUTS:
            out[AXIS_ALIGNED] = np.ones(1, bool)
        if GEOMETRY_TENSOR in answer:
            out[GEOMETRY_TENSOR] = np.asarray(answer[GEOMETRY_TENSOR]).reshape(-1)
        return out

    def isolated_postprocess(self, run, reference: dict) -> np.ndarray:
        """``postprocess`` run alone on the reference's output and geometry, by ``run(output, geometry)``."""
        return _as_detections(run(reference[Stage.OUTPUT], Geometry.from_tensor(reference[GEOMETRY_TENSOR]))).to_array()

    # -- comparison -----------------------------------------------------------------------------
    def output_tolerance(self, kind):
        return OUTPUT_TOLERANCE

    def default_margin(self, tolerances, kind):
        return NEAR_THRESHOLD

    def margin_units(self, kind):
        return "score"

    def compare_boxes(self, reference: np.ndarray, deployed: np.ndarray, margin: float,
                      image_size: tuple[int, int] | None, explained=None,
                      reading: Mapping | None = None) -> tuple[Verdict, dict]:
        """One image's boxes compared; ``reading``: the deployed stage dict, whose records say how
        its boxes read (:func:`as_deployed_codes`; no box scores)."""
        from harness.detection.outputs import UNSCORED

        # unconfigured (`harness compare` of two saved runs): the default rules, no threshold to be near
        tolerance = self.setup.tolerance if self.setup else DetectionTolerance()
        threshold = self.setup.score_threshold if self.setup else math.nan
        reading = reading or {}
        c = Boxes(threshold, image_size, explained, scored=UNSCORED not in reading)(
            Detections.from_array(as_deployed_codes(reference, reading)), Detections.from_array(deployed),
            replace(tolerance, near_threshold=margin))
        return c.verdict, c.metrics

    def binarization_evidence(self, reference: dict, deployed: dict):
        """``explained(quads)`` for :func:`compare_detections`: whether the two raw maps differ in
        the quads' region only by pixels near the binarization threshold (:data:`BINARIZATION_MARGIN`);
        None when there is no such evidence (no binarizing postprocessor, maps of other shapes,
        no geometry)."""
        params = getattr(self.setup.reference_postprocess, "params", None) if self.setup else None
        thresh = getattr(params, "thresh", None)
        if thresh is None or GEOMETRY_TENSOR not in reference or Stage.OUTPUT not in deployed:
            return None
        ref, dep = _map(reference[Stage.OUTPUT]), _map(deployed[Stage.OUTPUT])
        if ref is None or dep is None or ref.shape != dep.shape:
            return None
        geometry = Geometry.from_tensor(reference[GEOMETRY_TENSOR])
        flipped = (ref > thresh) != (dep > thresh)
        far = flipped & (np.abs(ref - thresh) > BINARIZATION_MARGIN)
        scale = np.array([ref.shape[1] / geometry.input[1], ref.shape[0] / geometry.input[0]])

        def explained(quads: np.ndarray) -> bool:
            points = geometry.to_input(np.asarray(quads, np.float64).reshape(-1, 2)) * scale
            x0, y0 = np.maximum(np.floor(points.min(axis=0)).astype(int) - 2, 0)
            x1, y1 = np.ceil(points.max(axis=0)).astype(int) + 3
            window = (slice(y0, max(y1, y0)), slice(x0, max(x1, x0)))
            return bool(flipped[window].any() and not far[window].any())

        return explained

    def result_of(self, reference, deployed, isolated, margin, top_k, scores=DETECTION):
        post = Stage.POSTPROCESS
        if post not in reference or post not in deployed:
            return None
        size = tuple(Geometry.from_tensor(reference[GEOMETRY_TENSOR]).source) if GEOMETRY_TENSOR in reference else None
        verdict, metrics = self.compare_boxes(reference[post], deployed[post], margin, size,
                                              self.binarization_evidence(reference, deployed), deployed)
        # The deployed postprocessing alone on the reference's raw output and geometry: no noise to
        # excuse a change there (harness.compare.ties.explained_by_upstream fails the stage on it).
        alone_boxes = isolated.get(post, deployed.get(POSTPROCESSED_ALONE))
        alone = (self.compare_boxes(reference[post], alone_boxes, ISOLATED_MARGIN, size, reading=deployed)
                 if alone_boxes is not None else None)
        if verdict is Verdict.TIE and self.setup is not None and GEOMETRY_TENSOR in reference and (
                alone is None or alone[0] is not Verdict.DIVERGED):  # (a diverged isolated run says it already)
            # The mirror of the isolated run, with what the deployment answered: where the isolated run
            # agrees on this image (no box of the reference's map lies between the two thresholds) the
            # deployment's own map may still hold one, which only the mirror sees; and where there is
            # no isolated run (--no-isolate, accuracy) it is the only evidence.
            if self.postprocessing_differs(self.setup.reference_postprocess, deployed,
                                           Geometry.from_tensor(reference[GEOMETRY_TENSOR]), size):
                verdict, metrics = Verdict.DIVERGED, {**metrics, "unexplained": MIRROR_WHY}
        return StageResult(post, verdict, metrics, alone[0] if alone else None, alone[1] if alone else None)

    def postprocessing_differs(self, post, deployed: dict, geometry: Geometry, size) -> bool:
        """The mirror of the isolated run: whether ``post`` (the reference's postprocessing) run
        on the deployment's own raw output, with the geometry it answered (else ``geometry``),
        fails to make the deployment's boxes. False when the deployment shows no raw output
        (nothing to tell by)."""
        if Stage.OUTPUT not in deployed or Stage.POSTPROCESS not in deployed:
            return False
        own = Geometry.from_tensor(deployed[GEOMETRY_TENSOR]) if GEOMETRY_TENSOR in deployed else geometry
        mirror = _as_detections(post(_outputs(deployed[Stage.OUTPUT]), own))
        return self.compare_boxes(mirror.to_array(), deployed[Stage.POSTPROCESS], ISOLATED_MARGIN, size,
                                  reading=deployed)[0] is Verdict.DIVERGED

    def events(self, margin):
        return DetectionEvents(margin)

    def diagnose_hypotheses(self):
        s = self._setup()
        return postprocess_hypotheses(s.reference_table, s.deployed_table)

    def _postprocessor_with(self, changes: Mapping) -> Any:
        """The reference's postprocessor with ``changes`` to its ``[postprocess]`` table (one per
        distinct change, kept)."""
        s = self._setup()
        if not changes:
            return s.reference_postprocess
        key = tuple(sorted(changes.items()))
        made = self._changed_postprocessors
        if key not in made:
            made[key] = _postprocessor({**s.reference_table, **changes})
        return made[key]

    # -- the effect on a labeled set: precision, recall, F1, mAP (harness.detection.effect) ---------------
    labeled_by = "boxes"
    effect_from = "results"
    progress_word = "detecting"
    unshardable = "a detector's COCO mAP ranks every image's boxes together"

    def effect_of_results(self, dataset, results, changes):
        from harness.detection.effect import evaluate_detection, load_labels

        found = [(path, {image: Detections.from_array(stages[Stage.POSTPROCESS]) for image, stages in images.items()})
                 for path, images in results.items()]
        return evaluate_detection(load_labels(dataset.source), found, changes=changes)

    # -- harness infer ---------------------------------------------------------------------------------
    def infer(self, client, asked):
        return infer_table(self, client, asked)

    infer_extras: tuple[str, ...] = ()
    """Outputs ``harness infer`` asks for beside the result outputs, where the model answers them
    (this repository's OCR texts)."""

    def infer_labels(self, stages: dict) -> list[str] | None:
        """Each box's label for ``harness infer`` from the stages :meth:`read_answer` read (None: boxes only)."""
        return None

    def diagnose_result(self, reference, deployed, gallery, index, margin, context=None):
        """The image's boxes under the setting (the reference's postprocessor with the setting's
        ``[postprocess]`` changes on its output, with the setting's geometry) against the
        deployment's: a box change is the event. A change near a threshold is a tie only where
        the setting's postprocessing, run on the deployment's own raw output, makes the
        deployment's boxes (the mirror of check's isolated run, which diagnose has no server
        for): else the postprocessing differs, and the image diverges."""
        try:
            post = self._postprocessor_with(context.get("postprocess") or {})
            geometry = context["preprocess"].resize.geometry(*context["source"])
            boxes = _as_detections(post(_outputs(reference), geometry))
            dep = context["deployed"]
            evidence = self.binarization_evidence({Stage.OUTPUT: reference, GEOMETRY_TENSOR: geometry.to_tensor()}, dep)
            size = tuple(context["source"])
            verdict, metrics = self.compare_boxes(boxes.to_array(), dep[Stage.POSTPROCESS], margin, size, evidence, dep)
            if verdict is Verdict.TIE and self.postprocessing_differs(post, dep, geometry, size):
                verdict = Verdict.DIVERGED
        except Exception:  # noqa: BLE001 - a setting whose boxes cannot be made is as far as it gets
            return Verdict.DIVERGED, 1.0
        if verdict in (Verdict.EQUAL, Verdict.CLOSE):
            # Still ranked: of two settings that both keep every box, the one whose corners move less
            # (a thousandth of the worst corner error in px: never near an event's 1.0).
            return Verdict.CLOSE, min(metrics.get("worst_corner_px") or 0.0, 100.0) / 1000.0
        return verdict, 1.0

    def csv_values(self, stage):
        if stage is None:
            return [""] * len(self.csv_fields)
        m = stage.metrics
        return [stage.verdict.value, *("" if m.get(f) is None else m.get(f) for f in self.csv_fields[1:])]

    # -- reports --------------------------------------------------------------------------------
    def output_note(self, report):
        return (f"{self.output_words}; `postprocess` compares the boxes one to one (IoU above 0.5, best score "
                "first): matched, missed, extra, the worst IoU and corner error in source pixels, score changes.")

    def summary_line(self, report):
        f = report.summary.figures
        if not f.get("images"):
            return None
        changed, ties = len(report.summary.events), report.summary.ties
        line = (f"Boxes: reference {f['reference_boxes']}, deployed {f['deployed_boxes']} over {f['images']} images; "
                f"**{f['matched']} matched**, {f['missed']} missed, {f['extra']} extra"
                + (f" ({f['near_threshold']} near a threshold, in images not diverged)" if f["near_threshold"] else "")
                + (f"; mean IoU of the matches {f['mean_iou']:.3f}" if f.get("mean_iou") is not None else "")
                + f". Images whose boxes changed: **{changed}**"
                + (f" ({ties} only near a threshold)" if ties else "") + ".")
        post = report.summary.stage(Stage.POSTPROCESS)
        if post is not None and post.isolated:
            line += (" With the reference's raw output, the deployed postprocessing alone: worst corner error "
                     f"{fmt(post.metric('worst_corner_px', isolated=True))} px, up to "
                     f"{fmt(post.metric('missed', isolated=True))} missed and "
                     f"{fmt(post.metric('extra', isolated=True))} extra boxes an image.")
        return line

    def result_row(self, stats):
        """Boxes have no array error: the worst corner error (px) stands in the error columns, the
        worst IoU of a match as the quality; ties (near-threshold changes) beside the counts."""
        verdict, counts = verdict_cells(stats)
        worst_iou = stats.metric("min_iou")
        return ["postprocess", verdict, counts, f"{fmt(stats.metric('worst_corner_px'))} px",
                f"{fmt(stats.metric('worst_corner_px', 'mean'))} px", f"{fmt(stats.metric('worst_corner_px', isolated=True))} px",
                "-" if worst_iou is None else f"IoU {fmt(worst_iou)}"]

    def headline(self, report):
        ties = report.summary.ties
        if not ties:
            return ""
        return (f" {ties} {'image changes' if ties == 1 else 'images change'} only by boxes near a threshold (a score "
                f"within {fmt(report.tie_margin)} of the score threshold, or map pixels crossing the binarization "
                f"threshold from within {BINARIZATION_MARGIN}): not a divergence.")

    def sections(self, report):
        events = report.summary.events
        if not events:
            return []
        rows = tuple((e.image, Verdict(e.verdict).value, str(e.details["reference_boxes"]),
                      str(e.details["deployed_boxes"]), str(e.details["matched"]), str(e.details["missed"]),
                      str(e.details["extra"]), str(e.details["near_threshold"]), fmt(e.details["min_iou"]),
                      fmt(e.details["worst_corner_px"]), e.details.get("made_by") or "",
                      "; ".join(e.details.get("problems") or ()))
                     for e in events)
        note = ("Matched one to one by IoU above 0.5, the reference's boxes by descending score. A box that appears, "
                "disappears or moves near a threshold (its score within the margin of the score threshold, or its "
                "map pixels crossing the binarization threshold only from close to it) is a **tie**: listed, not "
                "counted as a divergence. Corner errors are in the source image's pixels. made by: the first stage "
                "that adds an error of its own (its isolated run), with its verdict and largest error.")
        return [Section("Images whose boxes changed", note,
                        ("image", "verdict", "reference boxes", "deployed boxes", "matched", "missed", "extra",
                         "near threshold", "worst IoU", "worst corner (px)", "made by", "problems"), rows,
                        verdict_column=1)]


def postprocess_hypotheses(reference: Mapping | None, deployed: Mapping | None = None) -> list[ResultCulprit]:
    """The detector's postprocessing culprits (:func:`harness.postprocessing.culprit_hypotheses`
    of the detector postprocessings): diagnose runs the reference's postprocessing with each on
    the reference's raw output against the deployment's boxes."""
    from harness.detection.postprocess import BUILTIN
    from harness.postprocessing import culprit_hypotheses

    return culprit_hypotheses(reference, deployed, tuple(BUILTIN))


def as_deployed_codes(boxes: np.ndarray, deployed: Mapping) -> np.ndarray:
    """The reference's ``boxes`` ([N, 10], :meth:`Detections.to_array`) as the deployment codes its
    own (``deployed``: its stage dict): their enclosing axis-aligned boxes where its coding holds
    no rotation (:data:`harness.detection.outputs.AXIS_ALIGNED`: x1, y1, x2, y2 or x, y, width,
    height), else as they are."""
    from harness.detection.outputs import AXIS_ALIGNED

    if AXIS_ALIGNED not in deployed:
        return boxes
    found = Detections.from_array(boxes)
    return Detections.from_xyxy(found.xyxy, found.scores, found.classes).to_array()


def _map(output) -> np.ndarray | None:
    """A raw output as one [H, W] probability map (a DB detector's), else None."""
    array = np.asarray(output, np.float32)
    while array.ndim > 2 and array.shape[0] == 1:
        array = array[0]
    return array if array.ndim == 2 else None


def _outputs(output: np.ndarray) -> dict[str, np.ndarray]:
    """The raw output as a postprocessor takes it: outputs by name (one output: its name does not matter)."""
    return {"output": np.asarray(output)}


def _as_detections(boxes) -> Detections:
    if not isinstance(boxes, Detections):
        raise TypeError(f"the postprocessor returned {type(boxes).__name__}, not harness.detection.boxes.Detections")
    return boxes


# -- harness infer ------------------------------------------------------------------------------


def _detectors(task, client, asked) -> dict:
    """Column name -> ``detect(data)`` (the image's :class:`~harness.detection.boxes.Detections`),
    for ``--task detection``: this repository's ``detect_<pipeline>``, or each ``--model``'s
    boxes read by name (:mod:`harness.detection.outputs`)."""
    from harness.deployment.base import ImageRequest
    from harness.deployment.discovery import DeploymentError, image_input, read_model
    from harness.deployment.stepwise import decoded_size

    deployed, out = asked.deployed, {}
    if not deployed.models:
        models = task.repository
        boxes = task.served_results(models.results)
        for p in asked.pipelines:
            request = ImageRequest(models.ensemble(p), image_input(read_model(client, models.ensemble(p))), True)
            out[request.model] = (request, boxes, True)
    for name in deployed.models:
        info = read_model(client, name)
        boxes = task.result_outputs(info)
        if boxes is None:
            outputs = ", ".join(t.describe() for t in info.outputs)
            raise DeploymentError(f"{name} answers no boxes (boxes [-1, 4] or [-1, 4, 2] with scores [-1], or "
                                  f"EfficientNMS's num_dets/det_boxes/det_scores): {outputs}")
        request = ImageRequest(name, image_input(info), info.batched)
        asked.say(f"{name}: image input {request.describe()}, {boxes.describe()}")
        out[name] = (request, boxes, False)

    def detect(data, name, extras):
        request, boxes, settled = out[name]
        answer = client.infer(request.model, request.inputs([data]), [*boxes.names, *extras])
        answer = {k: v[0] if request.batched else v for k, v in answer.items()}
        if not settled:  # the boxes' coding, told by the first answer (as discovery's probe tells it)
            boxes = task.settle_results(boxes, answer, decoded_size(data))
            out[name] = (request, boxes, True)
            asked.say(f"{name}: {boxes.describe()}")
        stages = task.read_answer(answer, boxes)
        return Detections.from_array(stages[Stage.POSTPROCESS]), task.infer_labels(stages)

    def extras(name, boxes):
        answered = {t.name for t in read_model(client, name).outputs}
        return tuple(n for n in task.infer_extras if n in answered and n not in boxes.names)

    return {name: (lambda data, n=name, e=extras(name, boxes): detect(data, n, e))
            for name, (request, boxes, _) in out.items()}


def infer_table(task, client, asked) -> int:
    """Each image's boxes through each detector: how many, and the best ``top_k`` (score, the
    box's corners in the image's pixels, and its label where the task reads one: OCR's word)."""
    from rich.progress import track
    from rich.table import Table

    from harness.client import ServerUnavailable
    from harness.result import one_line

    files = asked.files

    detectors = _detectors(task, client, asked)
    labelled = ", its word" if task.infer_extras else ""
    table = Table(title=f"boxes per image (the best {asked.top_k}: score, x1,y1-x2,y2 in the image's pixels{labelled})")
    table.add_column("image")
    for name in detectors:
        table.add_column(name)
    failures = 0
    for path in track(files, description="detecting", console=asked.console, transient=True):
        cells = []
        try:
            data = read_input(InputFile.of(path))
        except OSError as exc:
            cells = [f"[red]unreadable: {terminal_text(getattr(exc, 'reason', None) or exc.strerror or exc)}[/]"] * len(
                detectors)
        for detect in (detectors.values() if not cells else ()):
            try:
                found, labels = detect(data)
                scores = np.nan_to_num(found.scores, nan=-np.inf)  # boxes without scores: in the order answered
                best = sorted(range(len(found)), key=lambda i: -scores[i])[:asked.top_k]
                lines = [f"{len(found)} boxes"] + [
                    (f"{found.scores[i]:.3f} " if np.isfinite(found.scores[i]) else "- ")
                    + "{:.0f},{:.0f}-{:.0f},{:.0f}".format(*found.xyxy[i])
                    + ("" if labels is None else f" {terminal_text(repr(labels[i]))}") for i in best]
                cells.append("\n".join(lines))
            except ServerUnavailable as exc:
                raise ServerStopped(client.url, identifier(path), str(exc)) from None
            except Exception as exc:
                cells.append(f"[red]{terminal_text(one_line(exc))}[/]")
        failures += any(c.startswith("[red]") for c in cells)
        table.add_row(terminal_text(identifier(path)), *cells)
    from rich.console import Console

    Console().print(table)
    asked.say_skipped()
    return 1 if failures else 0
