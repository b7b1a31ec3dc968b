"""Segmentation: a mask out. The raw ``output`` (the map at the model's resolution) is
compared as a tensor; the result (``postprocess``) is the matte and the mask at the source
size; an image whose mask changed is the event.

- **Output**: the segmenter's raw map (U²-Net-p's saliency [1, 320, 320], a probability per
  pixel), compared by :data:`OUTPUT_TOLERANCE`.
- **Result** (``postprocess``): [2, H, W], the matte (0 to 1) and the mask
  (:mod:`harness.segmentation.postprocess`), from the server when the deployment
  postprocesses (``MATTE``/``MASK``), else from its raw output by the spec's ``[postprocess]``;
  the reference's by the reference's ``[postprocess]`` on its own output, at the decoded
  image's size. Compared by :func:`harness.segmentation.compare.compare_masks`: IoU, Dice,
  boundary F (2 px), the matte's mean absolute error, the pixels flipped.
- **Events**: the images whose mask changed beyond the close rule; where every pixel flipped
  beyond the rule sat within the margin (default :data:`NEAR_THRESHOLD`) of the threshold on
  both sides, a near-threshold change, a **tie**: listed, not failed; but only where the
  deployed postprocessing run alone on the reference's own output makes the reference's
  result exactly (:data:`ISOLATED`), and the reference's postprocessing on the deployment's
  own output makes the deployment's: a postprocessing difference is never excused by the
  map's noise (:func:`harness.compare.ties.explained_by_upstream`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from harness.client import PIPELINES, TaskModels
from harness.compare.ties import made_by
from harness.errors import UsageError
from harness.formatting import fmt
from harness.geometry import Geometry
from harness.paths import WORKING_ROOT
from harness.postprocessing import SaliencyParams
from harness.result import StageResult
from harness.scores import ScoreKind
from harness.segmentation.compare import NEAR_THRESHOLD, MaskTolerance, compare_masks
from harness.segmentation.model import SEGMENTER, SPEC_FILE, install_model
from harness.segmentation.postprocess import (
    POSTPROCESSINGS,
    SegmentationPostprocess,
    as_result,
    from_matte,
    is_segmentation,
    raw_output,
)
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
    without_leading_ones,
)
from harness.task_api.models import DALI_ON_CPU, DALI_TAPS_ON_CPU, ONNX_ON_CPU, ShippedModel
from harness.tolerance import Tolerance
from harness.verdict import Verdict

SEGMENTATION = ScoreKind("segmentation", "probability", distribution=False)
"""Not class scores: a segmenter's raw map, compared as it is; its margin is in the matte's
probability (0 to 1)."""
OUTPUT_TOLERANCE = Tolerance(atol=0.1, max_fraction=0.05, mean_atol=0.01)
"""The raw map: at most 5% of its pixels beyond 0.1 and a mean error within 0.01
(docs/segmentation.md: what DALI's LANCZOS3 against PIL's LANCZOS leaves on real photos)."""
TOLERANCE = MaskTolerance()
ISOLATED = MaskTolerance(max_flipped=0.0, max_matte_mae=1e-6, max_far=0.0)
"""The postprocessing alone on the reference's own map has no noise to excuse: any flipped
pixel is the step's own."""
POSTPROCESSED_ALONE = "postprocess_alone"
MATTE, MASK = "MATTE", "MASK"
WORDS = ("mask", "matte", "segment", "saliency", "alpha")
"""An output named with one of these holds a segmentation (discovery's sign)."""
MATTE_WORDS, MASK_WORDS = ("matte", "alpha"), ("mask",)
"""A deployment's own result, by name: a matte (or alpha) and a mask, each [H, W]."""
MATTE_ALONE = 1
"""Planes of a deployed ``postprocess`` read from a matte alone, before its mask is made at the
source size (:meth:`Segmentation.derive_deployed`); the result has 2."""


def load_postprocess(ref: str) -> "UserSegmentationPostprocess":
    """``FILE.py:NAME``: the user's postprocessing, a callable ``(raw output, source size) -> (matte, mask)``."""
    from harness.reference.custom import load_object

    return UserSegmentationPostprocess(load_object(ref), ref)


class UserSegmentationPostprocess:
    """The user's postprocessing, called as user code on one image's raw output (the only output,
    leading axes as answered) and the source size; its matte (0 to 1, or 0 to 255) and mask must
    be at that size. Whatever it raises, or a wrong answer, is a :class:`PostprocessError`
    naming it. Its ``threshold`` attribute (default 0.5) is the matte's threshold."""

    def __init__(self, function, ref: str):
        if not callable(function):
            raise UsageError(f"--postprocess {ref}: {type(function).__name__} is not callable; a segmentation "
                             "postprocessing takes (the raw output, the source size (height, width)) and returns "
                             "(matte, mask)")
        self.function, self.ref = function, ref
        self.threshold = float(getattr(function, "threshold", 0.5))

    def __call__(self, outputs: Mapping[str, np.ndarray], size) -> np.ndarray:
        from harness.errors import call_user, raised

        size, who = (int(size[0]), int(size[1])), f"--postprocess {self.ref}"
        try:
            matte, mask = call_user(self.function, np.asarray(raw_output(outputs)), size)
            return as_result(matte, mask, size, who)
        except PostprocessError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's postprocessing failing on this image is its row
            raise PostprocessError(f"{who} failed: {raised(exc)}") from None


@dataclass(frozen=True)
class ResultOutputs:
    """A deployment's outputs holding the result: its matte, and its mask (None: a matte alone,
    whose mask is the spec's threshold of it)."""

    matte: str = MATTE
    mask: str | None = MASK

    @property
    def names(self) -> tuple[str, ...]:
        return (self.matte,) if self.mask is None else (self.matte, self.mask)

    def describe(self) -> str:
        if self.mask is None:
            return f"a matte {self.matte} alone (its mask: the spec's threshold of it, at the source size)"
        return f"a matte {self.matte} and a mask {self.mask}"


@dataclass(frozen=True)
class SegmentationSetup:
    reference_postprocess: Any
    """A :class:`SegmentationPostprocess` or the user's (:class:`UserSegmentationPostprocess`)."""
    deployed_postprocess: Any | None
    reference_table: Mapping[str, Any] | None
    """The reference's ``[postprocess]`` (None: the user's ``--postprocess``): what diagnose varies."""
    deployed_table: Mapping[str, Any] | None
    model_size: tuple[int, int] | None = None
    """The deployed spec's model input size (its crop): a matte answered at it is at the model's size."""

    @property
    def threshold(self) -> float:
        post = self.reference_postprocess
        params = getattr(post, "params", None)
        return float(params.score_threshold if params is not None else post.threshold)


class SegmentationEvents(Events):
    """The run's images whose mask changed, and the run's mean IoU, Dice, boundary F and matte error."""

    task = "segmentation"

    def __init__(self, margin: float):
        self.margin = margin
        self.events: list[Event] = []
        self.sums = dict.fromkeys(("iou", "dice", "boundary_f", "matte_mae"), 0.0)
        self.flipped = self.images = 0

    def add(self, result) -> None:
        post = result.stage(Stage.POSTPROCESS)
        if post is None:
            return
        m = post.metrics
        self.images += 1
        for key in self.sums:
            self.sums[key] += float(m.get(key) or 0.0)
        self.flipped += int(m.get("flipped") or 0)
        if post.verdict in (Verdict.TIE, Verdict.DIVERGED):
            self.events.append(Event(result.image, post.verdict, {
                k: m.get(k) for k in ("iou", "dice", "boundary_f", "matte_mae", "flipped", "near_threshold",
                                      "far_flipped")} | {"problem": m.get("problem") or m.get("unexplained") or "",
                                                         "made_by": made_by(result)}))

    def result(self):
        n = self.images
        figures = {"images": n, "flipped": self.flipped, "near_threshold_margin": self.margin,
                   **{f"mean_{k}": (v / n if n else None) for k, v in self.sums.items()}}
        return tuple(sorted(self.events, key=lambda e: e.image)), figures


def install_segmenter(folder: Path, spec, config) -> Path:
    """U2-Net-p out of its wheel (fetched by the setup into the project's, or the working folder's, build/wheels),
    its batch made dynamic."""
    return install_model(folder, WORKING_ROOT)


class Segmentation(Task):
    """The segmentation task; :meth:`configure` binds it to a spec's ``[postprocess]``."""

    name = "segmentation"
    # U²-Net-p (docs/segmentation.md): its own spec and models, the saliency map as the raw
    # output, the matte and the mask from the ensemble's postprocessing step.
    repository = TaskModels("segment", SEGMENTER, "input.1", "1959", "MAP", spec=SPEC_FILE,
                            preprocess_prefix="segment_", results=(MATTE, MASK), postprocess_model="segment_postprocess",
                            added=("segment_validate_image", "segment_preprocess_dali", "segment_preprocess_dali_stages",
                                   "segment_preprocess_dali_taps", "segment_preprocess_opencv", SEGMENTER,
                                   "segment_postprocess", "segment_dali", "segment_opencv"),
                            engines=(SEGMENTER,),
                            # as the detector's: U2-Net-p's ONNX in ONNX Runtime (about 0.3 s a 320x320
                            # image on one thread), its DALI preprocessing with the CPU decoder
                            shipped=(ShippedModel("segment_preprocess_dali", DALI_ON_CPU),
                                     ShippedModel("segment_preprocess_dali_stages", DALI_TAPS_ON_CPU),
                                     ShippedModel(SEGMENTER, ONNX_ON_CPU, install_segmenter,
                                                  "installed U2-Net-p (the segmentation task's model) as {path}, its "
                                                  "batch made dynamic, with its notices (LICENSE.txt, NOTICE)")))
    # What preflight records of the segmentation ensembles: photos with a salient subject (data/photos):
    # the squirrel, the portrait.
    known_results = KnownResults("segmentation", "segment", ("squirrel_cls.jpg", "grace_hopper.jpg"),
                                 (MATTE, MASK, GEOMETRY_TENSOR), "the segmenter")

    def check_known_results(self, served, recorded, failed, repository, prefix=""):
        """Each pipeline's matte and mask held to the record's by :func:`compare_masks` (the task's
        rule and default margin: a mask changed beyond the close rule, other than near the threshold,
        fails), and the geometry each applied (the source size): equal; a refused request fails."""
        checks = []
        for pipeline in PIPELINES:
            worst, problems = Verdict.EQUAL, []
            for photo, answers in recorded.items():
                want = answers[pipeline]
                if (photo, pipeline) in failed:
                    worst, problems = Verdict.DIVERGED, [*problems, f"{photo}: {failed[photo, pipeline]}"]
                    continue
                got = served[photo][pipeline]
                if not np.array_equal(got[GEOMETRY_TENSOR], want[GEOMETRY_TENSOR]):
                    worst = Verdict.DIVERGED
                    problems.append(f"{photo}: geometry {got[GEOMETRY_TENSOR].tolist()} not "
                                    f"{want[GEOMETRY_TENSOR].tolist()}")
                    continue
                verdict, m = compare_masks(np.stack([want[MATTE], want[MASK]]).astype(np.float32),
                                           np.stack([got[MATTE], got[MASK]]).astype(np.float32), NEAR_THRESHOLD)
                worst = max(worst, verdict, key=lambda v: v.rank)
                problems.append(f"{photo}: IoU {m.get('iou', 0):.4f}, {m.get('flipped', 0)} pixels flipped"
                                + (f" ({m['problem']})" if m.get("problem") else ""))
            checks.append(KnownCheck(f"{prefix}segmentation {pipeline}: masks", worst is not Verdict.DIVERGED,
                                     "equal, close or tie (compare_masks)", worst.value, "; ".join(problems)))
        return checks

    noun = "a mask"
    result_words = "the matte and mask"
    output_label = "map"
    model_words = "segmenter"
    output_words = "the segmenter's raw map at the model's resolution"
    event_words = ("mask change", "mask changes")
    flip_words = "images whose mask changed"
    agreement_words = "mask agreement"
    tie_words = ("mask change is near the threshold", "mask changes are near the threshold")
    csv_fields = ("postprocess_verdict", "iou", "dice", "boundary_f", "matte_mae", "flipped", "near_threshold",
                  "far_flipped")
    output_shaped = True
    claims_first = True
    answer_extras = (GEOMETRY_TENSOR,)

    def __init__(self, setup: SegmentationSetup | None = None):
        self.setup = setup
        self._changed: dict[tuple, SegmentationPostprocess] = {}

    # -- set-up -------------------------------------------------------------------------------
    def configure(self, spec, postprocess: str | None = None) -> "Segmentation":
        table, deployed = spec.reference.postprocess, spec.postprocess
        model_size = tuple(spec.preprocess.crop.size) if spec.preprocess.crop.size else None
        if postprocess is not None:  # the user's, for both sides
            user = load_postprocess(postprocess)
            return Segmentation(SegmentationSetup(user, user, None, None, model_size))
        if not is_segmentation(table):
            raise UsageError(f"--task segmentation: the reference's mask needs a [postprocess] table in the spec "
                             f"({spec.source}: name = \"saliency\" or \"argmax\" and its parameters), or "
                             "--postprocess FILE.py:NAME")
        return Segmentation(SegmentationSetup(
            SegmentationPostprocess(table), SegmentationPostprocess(deployed) if is_segmentation(deployed) else None,
            table, deployed, model_size))

    # -- discovery ------------------------------------------------------------------------------
    def choose_output(self, model, choice):
        if choice is not None:
            return self.named_output(model, choice, "map")
        results = self.result_outputs(model)
        maps = [t for t in model.outputs if t.data_type in ("TYPE_FP32", "TYPE_FP16")
                and (results is None or t.name not in results.names) and len(t.dims) >= 2]
        if len(maps) == 1:
            if not _is_logits(maps[0]):
                return OutputChoice(maps[0].name, "map", why="the one float map")
            # C-class logits: the spec's [postprocess] name = "argmax" (a saliency's refuses each image, saying so)
            return OutputChoice(maps[0].name, "logits", why=f"the one float output, C-class logits {maps[0].describe()}")
        return OutputChoice(None, why=f"model {model.name!r} answers no single map ([1, H, W] or [C, H, W]); outputs: "
                                      f"{', '.join(t.describe() for t in model.outputs) or 'none'}: name the map with "
                                      "--output")

    def result_outputs(self, model, choice=None):
        """A matte and a mask by name; else a matte alone: the one plane named as a matte, or the one
        uint8 plane (0 to 255) not named as a mask."""
        def named(words, among):
            found = [t.name for t in among if any(w in t.name.lower() for w in words)]
            return found[0] if len(found) == 1 else None

        planes = [t for t in model.outputs if _is_plane(t)]
        matte, mask = named(MATTE_WORDS, planes), named(MASK_WORDS, planes)
        if matte and mask and matte != mask:
            return ResultOutputs(matte, mask)
        if matte is None and mask is None:
            levels = [t.name for t in planes if t.data_type == "TYPE_UINT8"]
            matte = levels[0] if len(levels) == 1 else None
        return ResultOutputs(matte, None) if matte and matte != mask else None

    def served_results(self, names):
        return ResultOutputs(*names[:2])

    def claims(self, model):
        results = self.result_outputs(model)
        if results:
            return f"it answers {results.describe()}"
        named = [t for t in model.outputs if any(w in t.name.lower() for w in WORDS) and len(t.dims) >= 2]
        if named:
            return f"its output {named[0].name} is named as a mask"
        logits = [t for t in model.outputs if _is_logits(t) and any(w in t.name.lower() for w in ("logit", "class"))]
        return f"its output {logits[0].name} is C-class logits {logits[0].describe()}" if logits else None

    def output_kind(self, name, probe):
        return SEGMENTATION

    # -- the stages a segmenter adds ------------------------------------------------------------
    def derive_reference(self, stages: dict) -> dict:
        """The reference's GEOMETRY (its decoded image's size, resized to its output's resolution:
        what the postprocessing takes the map back from, as the served step checks) and its result
        (its postprocessing on its own output at that size)."""
        decoded = stages.get(Stage.DECODE)
        if decoded is None:
            raise ValueError("a segmenter's reference needs the decoded image's size (a decode stage)")
        size = tuple(np.asarray(decoded).shape[:2])
        geometry = Geometry(size, tuple(int(v) for v in np.asarray(stages[Stage.OUTPUT]).shape[-2:]))
        result = self._setup().reference_postprocess(_outputs(stages[Stage.OUTPUT]), size)
        return {GEOMETRY_TENSOR: geometry.to_tensor(), Stage.POSTPROCESS: result}

    def derive_deployed(self, deployed: dict, reference: dict) -> dict:
        """The deployment's raw output in the reference's shape (where only leading axes of one
        differ); its result when it answers a matte alone (its mask made at the source size:
        :meth:`completed`) or only its raw output (its spec's postprocessing, at the size it
        answered, else the reference's), and that postprocessing alone on the reference's output."""
        out = {}
        if Stage.OUTPUT in deployed and Stage.OUTPUT in reference:
            aligned = like(deployed[Stage.OUTPUT], reference[Stage.OUTPUT])
            if aligned is not deployed[Stage.OUTPUT]:
                out[Stage.OUTPUT] = aligned
        if Stage.POSTPROCESS in deployed:
            if len(deployed[Stage.POSTPROCESS]) == MATTE_ALONE and self._known_size(deployed, reference):
                out[Stage.POSTPROCESS] = self.completed(deployed[Stage.POSTPROCESS], self._source_size(deployed, reference),
                                                        self._model_size(deployed, reference))
            return out
        if Stage.OUTPUT not in deployed:
            return out
        s = self._setup()
        if s.deployed_postprocess is None:
            raise ValueError("the deployment answers its raw map only, and the spec has no [postprocess] to make its "
                             "mask: add one (name = \"saliency\" or \"argmax\"), or give --postprocess FILE.py:NAME")
        size = self._source_size(deployed, reference)
        out[Stage.POSTPROCESS] = s.deployed_postprocess(_outputs(out.get(Stage.OUTPUT, deployed[Stage.OUTPUT])), size)
        if Stage.OUTPUT in reference:
            out[POSTPROCESSED_ALONE] = s.deployed_postprocess(_outputs(reference[Stage.OUTPUT]), size)
        return out

    def completed(self, result: np.ndarray, size, model_size: tuple[int, int] | None) -> np.ndarray:
        """A deployed result [2, H, W] as it is; a matte alone [1, h, w] with its mask, at the source
        ``size`` (:func:`harness.segmentation.postprocess.from_matte`: a matte at the model's size
        ``model_size`` brought to it as the deployed spec's saliency brings its own)."""
        result = np.asarray(result, np.float32)
        if len(result) != MATTE_ALONE:
            return result
        return from_matte(result[0], size, model_size, self._matte_rule())

    def _matte_rule(self) -> SaliencyParams:
        """How a matte alone becomes a result: the deployed spec's saliency; under the user's
        ``--postprocess``, its ``threshold`` (the matte brought to the source size linearly)."""
        s = self._setup()
        post = s.deployed_postprocess or s.reference_postprocess
        params = getattr(post, "params", None)
        if isinstance(params, SaliencyParams):
            return params
        if params is not None:  # argmax: the matte is the winning class's probability, no threshold of it is a mask
            raise ValueError("the deployment answers a matte alone, and the spec's [postprocess] is an argmax over "
                             "class logits: a mask cannot be read from a matte; use a saliency [postprocess] (its "
                             "threshold), or answer the mask too")
        return SaliencyParams(interpolation="linear", threshold=post.threshold)

    @staticmethod
    def _known_size(deployed: dict, reference: dict) -> bool:
        return any(GEOMETRY_TENSOR in side or Stage.DECODE in side for side in (deployed, reference))

    def _source_size(self, deployed: dict, reference: dict) -> tuple[int, int]:
        for side in (deployed, reference):
            if GEOMETRY_TENSOR in side:
                return tuple(Geometry.from_tensor(side[GEOMETRY_TENSOR]).source)
            if Stage.DECODE in side:
                return tuple(np.asarray(side[Stage.DECODE]).shape[:2])
        raise ValueError("neither side shows the source image's size (a GEOMETRY or a decode stage)")

    def _model_size(self, *sides: dict) -> tuple[int, int] | None:
        """The raw map's size (the model's resolution), from a side that shows its output, else the
        deployed spec's crop."""
        for side in sides:
            if Stage.OUTPUT in side and np.ndim(side[Stage.OUTPUT]) >= 2:
                return tuple(np.shape(side[Stage.OUTPUT])[-2:])
        return self._setup().model_size

    def read_answer(self, answer: Mapping[str, np.ndarray], outputs) -> dict:
        """A deployment's own result (one image): its matte and mask as ``postprocess`` [2, H, W];
        a matte alone as [1, H, W], its mask made at the source size (:meth:`derive_deployed`). A
        uint8 matte is 0 to 255 (a float one above 1 too); any other 0 to 1."""
        answered = np.asarray(answer[outputs.matte])
        matte = _plane(answered, outputs.matte).astype(np.float32)
        if answered.dtype == np.uint8 or matte.max(initial=0) > 1.0 + 1e-6:
            matte = matte / 255.0
        if outputs.mask is None:
            out = {Stage.POSTPROCESS: matte[None]}
        else:
            mask = _plane(answer[outputs.mask], outputs.mask).astype(np.float32)
            if matte.shape != mask.shape:
                raise ValueError(f"{outputs.matte} is {list(matte.shape)} but {outputs.mask} {list(mask.shape)}")
            out = {Stage.POSTPROCESS: np.stack([matte, mask])}
        if GEOMETRY_TENSOR in answer:
            out[GEOMETRY_TENSOR] = np.asarray(answer[GEOMETRY_TENSOR]).reshape(-1)
        return out

    # -- comparison -----------------------------------------------------------------------------
    def output_tolerance(self, kind):
        return OUTPUT_TOLERANCE

    def default_margin(self, tolerances, kind):
        return NEAR_THRESHOLD

    def margin_units(self, kind):
        return "probability"

    def _tolerance(self) -> MaskTolerance:
        from dataclasses import replace

        return replace(TOLERANCE, threshold=self.setup.threshold) if self.setup else TOLERANCE

    def result_of(self, reference, deployed, isolated, margin, top_k, scores=SEGMENTATION):
        post = Stage.POSTPROCESS
        if post not in reference or post not in deployed:
            return None
        size = reference[post].shape[-2:]
        model_size = self._model_size(reference, deployed) if self.setup else None
        mine = self.completed(deployed[post], size, model_size)
        deployed = {**deployed, post: mine}
        verdict, metrics = compare_masks(reference[post], mine, margin, self._tolerance())
        alone_result = isolated.get(post, deployed.get(POSTPROCESSED_ALONE))
        if alone_result is not None:
            alone_result = self.completed(alone_result, size, model_size)
        alone = compare_masks(reference[post], alone_result, 0.0, ISOLATED) if alone_result is not None else None
        if verdict is not Verdict.DIVERGED and self.setup is not None and Stage.OUTPUT in deployed:
            # The mirror of the isolated run: the reference's postprocessing on the deployment's own map
            # must make the deployment's result, else the postprocessing differs and noise excuses nothing
            # (a close mask too: a threshold before upsampling flips few pixels, all on the boundary).
            mirror = self.setup.reference_postprocess(_outputs(deployed[Stage.OUTPUT]), deployed[post].shape[-2:])
            if compare_masks(mirror, deployed[post], 0.0, ISOLATED)[0] is Verdict.DIVERGED:
                verdict, metrics = Verdict.DIVERGED, {**metrics, "unexplained": (
                    "the reference's postprocessing, run on the deployment's own map, does not make the deployment's "
                    "mask: the postprocessing differs")}
        return StageResult(post, verdict, metrics, alone[0] if alone else None, alone[1] if alone else None)

    def events(self, margin):
        return SegmentationEvents(margin)

    # -- the effect on a labeled set: IoU, Dice, boundary F, matte error (harness.segmentation.effect) -----
    labeled_by = "masks"
    effect_from = "results"
    progress_word = "segmenting"

    def effect_of_results(self, dataset, results, changes):
        from harness.segmentation.effect import evaluate_segmentation

        found = [(path, {image: stages[Stage.POSTPROCESS] for image, stages in images.items()
                         if Stage.POSTPROCESS in stages}) for path, images in results.items()]
        return evaluate_segmentation(dataset.source, {s.name: s.path for s in dataset.samples}, found, changes=changes)

    # -- reports --------------------------------------------------------------------------------
    def output_note(self, report):
        return (f"{self.output_words}; `postprocess` compares the matte and the mask at the source size: IoU, Dice, "
                "boundary F (2 px), the matte's mean absolute error and the pixels flipped.")

    def summary_line(self, report):
        f = report.summary.figures
        if not f.get("images"):
            return None
        changed, ties = len(report.summary.events), report.summary.ties
        return (f"Masks over {f['images']} images: mean IoU **{fmt(f['mean_iou'])}**, Dice {fmt(f['mean_dice'])}, "
                f"boundary F {fmt(f['mean_boundary_f'])}, matte error {fmt(f['mean_matte_mae'])}; {f['flipped']} pixels "
                f"flipped. Images whose mask changed: **{changed}**" + (f" ({ties} only near the threshold)" if ties else "")
                + ".")

    def result_row(self, stats):
        verdict, counts = verdict_cells(stats)
        iou = stats.metric("iou")
        return ["postprocess", verdict, counts, f"matte {fmt(stats.metric('matte_mae'))}",
                f"matte {fmt(stats.metric('matte_mae', 'mean'))}", f"matte {fmt(stats.metric('matte_mae', isolated=True))}",
                "-" if iou is None else f"IoU {fmt(iou)}"]

    def headline(self, report):
        ties = report.summary.ties
        if not ties:
            return ""
        return (f" {ties} {'image changes' if ties == 1 else 'images change'} only by pixels near the threshold (both "
                f"sides' matte within {fmt(report.tie_margin)} of it): not a divergence.")

    def sections(self, report):
        events = report.summary.events
        if not events:
            return []
        rows = tuple((e.image, Verdict(e.verdict).value, fmt(e.details["iou"]), fmt(e.details["dice"]),
                      fmt(e.details["boundary_f"]), fmt(e.details["matte_mae"]), str(e.details["flipped"]),
                      str(e.details["near_threshold"]), str(e.details["far_flipped"]), e.details.get("made_by") or "",
                      e.details.get("problem") or "")
                     for e in events)
        note = ("A mask whose flipped pixels beyond the close rule all lay near the threshold on both sides (the matte "
                "within the margin of it) is a **tie**: listed, not counted as a divergence, unless the postprocessing "
                "alone makes the change. made by: the first stage that adds an error of its own (its isolated run), "
                "with its verdict and largest error.")
        return [Section("Images whose mask changed", note,
                        ("image", "verdict", "IoU", "Dice", "boundary F", "matte error", "flipped", "near threshold",
                         "far from it", "made by", "problem"), rows, verdict_column=1)]

    # -- diagnose -------------------------------------------------------------------------------
    def diagnose_hypotheses(self):
        return postprocess_hypotheses(self._setup().reference_table, self._setup().deployed_table)

    def _postprocess_with(self, changes: Mapping) -> SegmentationPostprocess:
        s = self._setup()
        if not changes:
            return s.reference_postprocess
        key = tuple(sorted(changes.items()))
        if key not in self._changed:
            self._changed[key] = SegmentationPostprocess({**s.reference_table, **changes})
        return self._changed[key]

    def diagnose_result(self, reference, deployed, gallery, index, margin, context=None):
        """The image's mask under the setting (the reference's postprocessing with the setting's
        ``[postprocess]`` changes, on its output) against the deployment's: a mask change is the
        event; a tie only where the setting's postprocessing on the deployment's own map makes
        the deployment's mask."""
        try:
            post = self._postprocess_with(context.get("postprocess") or {})
            dep = context["deployed"]
            size = tuple(context["source"])
            mine = post(_outputs(reference), size)
            dep = {**dep, Stage.POSTPROCESS: self.completed(dep[Stage.POSTPROCESS], size,
                                                             self._model_size({Stage.OUTPUT: reference}, dep))}
            verdict, metrics = compare_masks(mine, dep[Stage.POSTPROCESS], margin, self._tolerance())
            if verdict is not Verdict.DIVERGED and Stage.OUTPUT in dep:
                mirror = post(_outputs(dep[Stage.OUTPUT]), size)
                if compare_masks(mirror, dep[Stage.POSTPROCESS], 0.0, ISOLATED)[0] is Verdict.DIVERGED:
                    verdict = Verdict.DIVERGED
        except Exception:  # noqa: BLE001 - a setting whose mask cannot be made is as far as it gets
            return Verdict.DIVERGED, 1.0
        if verdict in (Verdict.EQUAL, Verdict.CLOSE):
            # still ranked: of two settings that keep the mask, the one whose matte moves less
            return Verdict.CLOSE, min(metrics.get("matte_mae") or 0.0, 0.5) / 10.0
        return verdict, 1.0


def postprocess_hypotheses(reference: Mapping | None, deployed: Mapping | None = None) -> list[ResultCulprit]:
    """The segmentation postprocessing's culprits (:func:`harness.postprocessing.culprit_hypotheses`)."""
    from harness.postprocessing import culprit_hypotheses

    return culprit_hypotheses(reference, deployed, POSTPROCESSINGS)


def _is_plane(tensor) -> bool:
    """One plane, [H, W] after leading axes of one ([1, H, W], an unbatched step's NCHW [1, 1, H, W]),
    of numbers (a matte or a mask; its sides not fixed tiny)."""
    dims = without_leading_ones(tensor.dims, keep=2)
    return (tensor.data_type in ("TYPE_FP32", "TYPE_FP16", "TYPE_UINT8") and len(dims) == 2
            and all(d == -1 or d >= 8 for d in dims))


def _plane(array, name: str) -> np.ndarray:
    """One image's answered plane without its leading axes of one ([H, W])."""
    array = np.asarray(array)
    array = array.reshape(without_leading_ones(array.shape, keep=2))
    if array.ndim != 2:
        raise ValueError(f"{name} is {list(np.shape(array))}, not one plane [H, W]")
    return array


def _is_logits(tensor) -> bool:
    """A float [C, H, W] output with more than one class (a fixed C), its planes not fixed tiny."""
    dims = list(tensor.dims)
    return (tensor.data_type in ("TYPE_FP32", "TYPE_FP16") and len(dims) == 3 and dims[0] > 1
            and all(d == -1 or d >= 8 for d in dims[1:]))


def _outputs(output: np.ndarray) -> dict[str, np.ndarray]:
    return {"output": np.asarray(output)}
