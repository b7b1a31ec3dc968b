"""`harness diagnose` agrees with `harness check` (issue 46), on photos of this module's own.

The three cases the issue found (a detector's limit type, an OCR recognizer's channel order,
a segmenter's resize filter), each as a user meets it, and every planted spec of specs/ (and
those docs/ name) in one sweep: check and diagnose, on the same images, spec and deployment,
agree on whether anything diverged and where (diagnose starts from check's verdict, computed
by check's own code); diagnose names the planted cause, and the spec it writes passes check.

Servers: the session's (the repository as it is: classification, segmentation, and the
detector and OCR pipelines at full size) and one of the detector and OCR pipelines at the CI
size the planted detection and OCR specs extend (specs/detection/small.toml, specs/ocr/small.toml).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import cv2
import pytest

from harness.detection.data import generate
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.repository import build_cpu_profile, with_called_models
from harness.server import TritonServer, free_port
from tests.commands import harness
from tests.conftest import pipeline_models

pytestmark = pytest.mark.server

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
SPECS = PROJECT_ROOT / "specs"
CLASSIFIED = ("n01734418_king_snake.JPEG", "n02107908_Appenzeller.JPEG")
SEGMENTED = ("n02111889_Samoyed.JPEG", "n02134084_ice_bear.JPEG")
"""One salient animal each, larger than the segmenter's input (its resize shrinks them)."""
DIMMED = "n02113978_Mexican_hairless.JPEG"
"""A salient dog, small (250x250: the segmentation sweep's postprocessing is cheap), dimmed (its
brightest value 150) so that dividing by 255 and by the image's maximum differ."""
WORDED = ("n01484850_great_white_shark.JPEG", "n02092339_Weimaraner.JPEG", "n02422699_impala.JPEG",
          "n01560419_bulbul.JPEG")
"""Photos without text of their own (not in docs/detection-imagenet-text.json), words rendered onto
two of them; the second is turned a quarter, so its words stand upright (OCR's rotation rule)."""
SMALL_MODELS = [*pipeline_models("detection", ("dali",)), *pipeline_models("ocr", ("dali",))]
"""What check and diagnose read of the detection and OCR pipelines (with the models OCR's BLS calls:
:func:`harness.repository.with_called_models`)."""


@pytest.fixture(scope="module")
def small_server(repository, tmp_path_factory):
    """The detector and OCR pipelines serving specs/detection/small.toml and specs/ocr/small.toml."""
    profile = build_cpu_profile(repository, tmp_path_factory.mktemp("small") / "repository",
                                {"detection.toml": SPECS / "detection" / "small.toml",
                                 "ocr.toml": SPECS / "ocr" / "small.toml"})
    triton = TritonServer(profile, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=with_called_models(profile, SMALL_MODELS))
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, Path]:
    """Folders of this module's photos: ``classification``, ``segmentation``, ``dimmed`` (every
    segmentation plant shows on it alone), ``words``."""
    out = tmp_path_factory.mktemp("agrees")
    folders = {task: out / task for task in ("classification", "segmentation", "dimmed")}
    for task, names in (("classification", CLASSIFIED), ("segmentation", SEGMENTED)):
        folders[task].mkdir()
        for name in names:
            (folders[task] / name).write_bytes((SAMPLE / name).read_bytes())
    dim = cv2.imread(str(SAMPLE / DIMMED))
    dim = (dim.astype("float32") * (150.0 / dim.max())).round().astype("uint8")
    folders["dimmed"].mkdir()
    cv2.imwrite(str(folders["dimmed"] / DIMMED), dim, [cv2.IMWRITE_JPEG_QUALITY, 95])
    words = generate([SAMPLE / name for name in WORDED], out / "words", 2, seed=5).parent / "images"
    turned = sorted(words.iterdir())[1]
    cv2.imwrite(str(turned), cv2.rotate(cv2.imread(str(turned)), cv2.ROTATE_90_CLOCKWISE), [cv2.IMWRITE_JPEG_QUALITY, 95])
    folders["words"] = words
    return folders


def spec_file(folder: Path, name: str, base: Path, text: str) -> Path:
    """A training spec extending ``base`` (the deployment's) with ``text`` (its [reference] tables)."""
    path = folder / name
    path.write_text(f'extends = "{base}"\n{text}')
    return path


def check_and_diagnose(server, images: Path, spec: Path, out: Path, *target, check_written: bool = True) -> dict:
    """check, then diagnose writing its spec, then (``check_written``) check with that spec: each
    command's status, report and seconds."""
    run = {}
    for name, args in (("check", ("check", "--report", out / "check")),
                       ("diagnose", ("diagnose", "--report", out / "diagnose", "--write-spec", out / "written.toml"))):
        start = time.perf_counter()
        result = harness(args[0], images, "--url", server.grpc_url, "--spec", spec, *target, *args[1:],
                         "--format", "json")
        file = out / name / ("report.json" if name == "check" else "diagnosis.json")
        run[name] = (result, json.loads(file.read_text()) if file.exists() else None, time.perf_counter() - start)
    if check_written and (out / "written.toml").exists():
        result = harness("check", images, "--url", server.grpc_url, "--spec", out / "written.toml", *target,
                         "--report", out / "written", "--format", "json")
        run["written"] = (result, json.loads((out / "written" / "report.json").read_text()), None)
    return run


def assert_agreement(run: dict, culprits: set[str]) -> None:
    """Check and diagnose agree (status, first divergent stage, never "no stage diverged" where
    check found a divergence), diagnose names ``culprits``, and the spec it wrote passes check."""
    (checked, report, _), (diagnosed, diagnosis, _) = run["check"], run["diagnose"]
    said = checked.stdout + checked.stderr + diagnosed.stdout + diagnosed.stderr
    assert checked.returncode == 1 and diagnosed.returncode == 1, said
    assert diagnosis["first_divergent_stage"] == report["first_divergent_stage"], said
    assert diagnosis["check"]["first_divergent_stage"] == report["first_divergent_stage"]
    assert not diagnosis["conclusion"].startswith("No stage diverged"), diagnosis["conclusion"]
    assert {c["culprit"] for c in diagnosis["causes"]} == culprits, diagnosis["conclusion"]
    assert diagnosis["remaining_divergence"] is None and diagnosis["verdict"] == "explained"
    written, _, _ = run["written"]
    assert written.returncode == 0, written.stdout + written.stderr


def test_a_detectors_limit_type_is_named_where_check_fails(server, photos, tmp_path):
    """Training limited the longer side (``limit_type`` max), the deployment enlarges the shorter
    one (detection.toml's min): read as any ensemble (``--model detect_dali``), the maps have
    other shapes and the boxes move; check exits 1, and so does diagnose, naming the limit type."""
    spec = spec_file(tmp_path, "limit_max.toml", DEFAULT_REPOSITORY / "detection.toml",
                     '[reference.resize]\nlimit_type = "max"\n')
    run = check_and_diagnose(server, photos["words"], spec, tmp_path, "--model", "detect_dali")
    assert_agreement(run, {"limit type"})
    assert run["check"][1]["first_divergent_stage"] == "output"


def test_an_ocr_recognizers_channel_order_is_named_where_the_words_diverge(small_server, photos, tmp_path):
    """Training fed the recognizer RGB crops, the deployment BGR: read as any model (``--model
    ocr_dali_taps``, its preprocessing hidden: only its raw map, boxes, words and the word taps it
    answers by name), every word diverges at its `input` stage; diagnose sees the word stages as
    check does (before: "No stage diverged") and names the recognizer's channel order; the spec it
    writes says so in [reference.recognition]."""
    spec = SPECS / "ocr" / "planted" / "channel_order.toml"
    run = check_and_diagnose(small_server, photos["words"], spec, tmp_path, "--model", "ocr_dali_taps")
    assert_agreement(run, {"recognition channel order"})
    figures = run["check"][1]["task_figures"]
    assert figures["words_matched"] >= 4 and figures["word_culprits"] == {"input": figures["words_matched"]}
    assert '[reference.recognition]\nchannel_order = "BGR"' in (tmp_path / "written.toml").read_text()


def test_a_segmenters_resize_filter_is_one_hypothesis(server, photos, tmp_path):
    """Training resized with ``linear`` and no antialias, the deployment with LANCZOS and its
    antialias (rembg's): neither half alone explains it (torchvision's tensors have no Lanczos
    without antialias; the antialias alone moves the error little), the filter as one does
    (before: "no known culprit")."""
    spec = spec_file(tmp_path, "linear_no_antialias.toml", DEFAULT_REPOSITORY / "segmentation.toml",
                     '[reference.resize]\ninterpolation = "linear"\nantialias = false\nresampling = "auto"\n')
    run = check_and_diagnose(server, photos["segmentation"], spec, tmp_path, "--task", "segmentation")
    assert_agreement(run, {"resize filter"})
    [cause] = run["diagnose"][1]["causes"]
    assert {c["key"]: c["deployment_behaves_as"] for c in cause["changes"]} == {
        "resize.interpolation": "lanczos", "resize.antialias": True}


def test_a_greedy_search_tries_a_halfs_partner_before_giving_up(server, photos, tmp_path):
    """The segmenter's case searched with a catalogue that offers the resize filter's halves apart
    (the antialias, the interpolation), as the search did before the filter was one hypothesis:
    neither half improves the resize beyond noise alone (torchvision's tensors have no Lanczos
    without antialias), so the round tries them as a pair before giving up, and the pair is the
    one cause (before: "no known culprit")."""
    from harness.check.image import ImageChecker
    from harness.client import TritonClient
    from harness.deployment import DeployedSide, TapsDeployment
    from harness.diagnose import Diagnoser, candidate_hypotheses, diagnose, fetch_deployed
    from harness.reference import load_recipe
    from harness.session import Session
    from harness.spec import SpecError
    from harness.task import get_task

    spec_path = spec_file(tmp_path, "linear_no_antialias.toml", DEFAULT_REPOSITORY / "segmentation.toml",
                          '[reference.resize]\ninterpolation = "linear"\nantialias = false\nresampling = "auto"\n')
    session = Session(spec_file=spec_path, url=server.grpc_url, task="segmentation")
    spec, task = session.spec, get_task("segmentation").configure(session.spec)
    deployment = TapsDeployment("dali", task, spec.preprocess)
    model = session.reference_model(threads=1, task=task.name)
    tolerances = session.tolerances(deployment.scores_kind, task)
    margin = session.tie_margin(None, deployment.scores_kind, task)
    checker = ImageChecker(DeployedSide(deployment, lambda: TritonClient(server.grpc_url, "grpc")), load_recipe(spec),
                           model, tolerances, tie_margin=margin)
    deployed = fetch_deployed(checker, sorted(photos["segmentation"].iterdir())[:1])  # one photo shows it
    assert deployed.check.first_divergent_stage == "resize"
    def no_fp16():
        raise SpecError("the segmenter has no fp16 twin here")

    diagnoser = Diagnoser(deployed, spec.reference.recipe, spec.reference.preprocess, spec.preprocess, model, tolerances,
                          no_fp16, tie_margin=margin, scores=deployment.scores_kind, task=task)
    try:
        found = diagnose(diagnoser, str(spec_path), "DALI",
                         lambda *args: [h for h in candidate_hypotheses(*args) if h.culprit != "resize filter"])
    finally:
        diagnoser.close()
    first = found.rounds[0]
    halves = [e for e in first.ranked if e.culprit in ("resize antialias", "resize interpolation")]
    assert halves and not any(e.outcomes and e.improvement(e.baseline or first.base, "resize").real for e in halves)
    assert [c.hypothesis.culprit for c in found.causes] == ["resize antialias + resize interpolation"], found.conclusion
    assert found.remaining is None and first.explains


# -- every planted spec ---------------------------------------------------------------------------

ALIGNED = {SPECS / "aligned.toml", SPECS / "detection" / "small.toml", SPECS / "ocr" / "small.toml"}
TARGETS = {"planted": ("server", "classification", ("--reference-model", "onnx")),
           "detection": ("small_server", "words", ("--task", "detection")),
           "ocr": ("small_server", "words", ("--task", "ocr")),
           "segmentation": ("server", "dimmed", ("--task", "segmentation"))}
"""specs/ folder -> (the server serving its deployment, the photos, the command's arguments)."""
CAUSES = {  # spec, relative to specs/ -> the culprits diagnose names on this module's photos
    "misaligned_resize.toml": {"resize antialias", "crop offset rounding"},
    "planted/antialias.toml": {"resize antialias"},
    "planted/channel_order.toml": {"channel order"},
    "planted/normalization_scale.toml": {"normalization scale"},
    "planted/stretch.toml": {"resize mode"},
    "planted/antialias+channel_order.toml": {"resize antialias", "channel order"},
    "planted/antialias+channel_order+normalization_scale.toml": {"resize antialias", "channel order",
                                                                 "normalization scale"},
    "planted/channel_order+normalization_scale.toml": {"channel order", "normalization scale"},
    "planted/stretch+channel_order.toml": {"resize mode", "channel order"},
    "planted/stretch+normalization_scale.toml": {"resize mode", "normalization scale"},
    "detection/planted/channel_order.toml": {"channel order"},
    "detection/planted/limit_length.toml": {"limit side length"},
    "detection/planted/limit_type.toml": {"limit type"},
    "detection/planted/limit_type+channel_order.toml": {"limit type", "channel order"},
    "detection/planted/unclip_ratio.toml": {"DB unclip ratio"},
    "ocr/planted/axis_aligned.toml": {"axis-aligned crop vs perspective warp"},
    "ocr/planted/blank_offset.toml": {"dictionary blank offset"},
    "ocr/planted/channel_order.toml": {"recognition channel order"},
    "ocr/planted/imagenet_normalization.toml": {"recognition normalization"},
    "ocr/planted/no_rotation.toml": {"rotation rule"},
    "ocr/planted/width_cap.toml": {"recognition width cap and padding"},
    "segmentation/planted/channel_order.toml": {"channel order"},
    "segmentation/planted/linear.toml": {"resize interpolation"},
    "segmentation/planted/linear+threshold_before.toml": {"resize interpolation",
                                                          "threshold before or after upsampling"},
    "segmentation/planted/normalization_range.toml": {"normalization divisor"},
    "segmentation/planted/threshold_before.toml": {"threshold before or after upsampling"},
}


def planted_specs() -> list[Path]:
    """Every planted spec: those of specs/**/planted/, and every spec of specs/ docs/ and the
    README name (those the deployments serve as they are, the aligned ones, left out)."""
    found = set(SPECS.glob("**/planted/*.toml"))
    for page in [*(PROJECT_ROOT / "docs").glob("*.md"), PROJECT_ROOT / "README.md"]:
        found |= {PROJECT_ROOT / name for name in re.findall(r"\bspecs/[\w/+.-]+\.toml", page.read_text())}
    return sorted(found - ALIGNED)


def test_the_sweep_covers_every_planted_spec():
    assert {str(p.relative_to(SPECS)) for p in planted_specs()} == set(CAUSES)


@pytest.fixture(scope="module")
def sweep(request, photos, tmp_path_factory) -> dict[str, dict]:
    """check and diagnose (writing its spec) on every planted spec. The written spec is judged by
    check's comparison inside diagnose (``check_with_every_cause``: the same images, answers and
    code, without a second read of the server); the three cases above run check on it for real."""
    out, runs = tmp_path_factory.mktemp("sweep"), {}
    for spec in planted_specs():
        name = str(spec.relative_to(SPECS))
        server, folder, args = TARGETS[name.split("/")[0] if "/" in name else "planted"]
        runs[name] = check_and_diagnose(request.getfixturevalue(server), photos[folder], spec,
                                        out / name.replace("/", "_"), *args, check_written=False)
        runs[name]["written spec"] = (out / name.replace("/", "_") / "written.toml").exists()
    return runs


def test_check_and_diagnose_agree_on_every_planted_spec(sweep):
    """Where check exits 1 so does diagnose, naming the same first divergent stage, never saying
    nothing diverged; where check exits 0 so does diagnose."""
    disagree = []
    for name, run in sweep.items():
        (checked, report, _), (diagnosed, diagnosis, _) = run["check"], run["diagnose"]
        stages = (report or {}).get("first_divergent_stage"), (diagnosis or {}).get("first_divergent_stage")
        if checked.returncode != diagnosed.returncode or stages[0] != stages[1] or (
                checked.returncode == 1 and diagnosis["conclusion"].startswith("No stage diverged")):
            disagree.append(f"{name}: check {checked.returncode} at {stages[0]}, diagnose {diagnosed.returncode} at "
                            f"{stages[1]}: {(diagnosis or {}).get('conclusion', diagnosed.stderr[-300:])}")
    seconds = {name: round(run["check"][2] + run["diagnose"][2], 1) for name, run in sweep.items()}
    assert not disagree, "\n".join(disagree) + f"\n(seconds: {seconds})"


def test_diagnose_names_every_planted_cause_and_its_written_spec_passes_check(sweep):
    wrong = []
    for name, run in sweep.items():
        diagnosis = run["diagnose"][1] or {}
        found = {c["culprit"] for c in diagnosis.get("causes", ())}
        after = diagnosis.get("check_with_every_cause") or {}
        if found != CAUSES[name] or not run["written spec"] or after.get("diverged") is not False:
            wrong.append(f"{name}: named {sorted(found)}, planted {sorted(CAUSES[name])}; spec written: "
                         f"{run['written spec']}; check with every cause applied: {after or 'not run'}")
    assert not wrong, "\n".join(wrong)
