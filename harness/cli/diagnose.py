"""``harness diagnose``: which known culprit explains the divergence, and what to change."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import (
    PROJECT_ROOT,
    UsageError,
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
from harness.client import PIPELINES, InferenceError

DEFAULT_REPORT = PROJECT_ROOT / "reports" / "diagnose"
DEPLOYED_LIBRARY = {"dali": "DALI", "opencv": "OpenCV"}


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "diagnose", help="find which known culprit explains a divergence, and the change that fixes it",
        description="Try each known culprit as a change to the reference recipe, against deployed tensors read "
                    "from the server once; rank them and recommend a change in spec terms. Exit status: 0 nothing "
                    "diverged or a culprit explains it, 1 a divergence nothing explains, 2 usage/setup errors.")
    add_images_args(p, DEFAULT_REPORT)
    add_reference_args(p)
    add_server_args(p)
    add_repository_args(p)
    p.set_defaults(run=run_diagnose_command)


def fetch_deployed(client, images: list[Path], pipeline: str):
    """Every image's deployed stages and logits, read once; failures kept with their reason."""
    from harness.diagnose import Deployed

    deployed = Deployed([], [], [], [])
    with progress_bar(len(images), "reading the deployed stages") as advance:
        for path in images:
            data = path.read_bytes()
            try:
                stages = client.deployed(data, pipeline)
            except InferenceError as exc:
                deployed.failed.append({"image": path.name, "reason": f"deployed: {exc}"})
            else:
                deployed.names.append(path.name)
                deployed.data.append(data)
                deployed.stages.append(stages)
            advance(path.name)
    return deployed


def run_diagnose_command(args) -> int:
    from harness.compare.tolerance import tolerances_for
    from harness.corpus import list_images
    from harness.diagnose import SCREEN_IMAGES, Diagnoser, candidate_hypotheses, diagnose
    from harness.model import ONNX_FILENAME
    from harness.reference import BUILT_IN
    from harness.reference.model import TorchModel, load_reference_model
    from harness.report.data import versions
    from harness.report.diagnosis import diagnosis_dict, write_diagnosis
    from harness.spec import SPEC_FILENAME, SpecError, load_spec

    spec = load_spec(spec_path(args))
    recipe = args.reference or spec.reference.recipe
    if recipe not in BUILT_IN:
        raise UsageError(f"diagnose varies a built-in recipe ({', '.join(BUILT_IN)}); describe your training "
                         f"preprocessing in the spec's [reference] section instead of {recipe!r}")
    images = list_images(args.images)
    if not images:
        raise UsageError(f"no images in {args.images}")
    model = load_reference_model(args.repository / "classifier" / ONNX_FILENAME, args.reference_model)
    model.check_input(spec.reference.preprocess.input_shape)

    def fp16_model():
        if not isinstance(model, TorchModel):
            raise SpecError("the fp16 hypothesis needs the PyTorch model (--reference-model torch)")
        return TorchModel(half=True)

    with connect(args) as client:
        deployed = fetch_deployed(client, images, args.pipeline)
        url = client.url
    if not deployed.names:
        raise UsageError(f"the server failed on every image: {deployed.failed[0]['reason']}")
    tolerances = tolerances_for(spec.preprocess, spec.tolerances)
    diagnoser = Diagnoser(deployed, recipe, spec.reference.preprocess, spec.preprocess, model, tolerances, fp16_model)
    hypotheses = candidate_hypotheses(recipe, diagnoser.reference, diagnoser.deployed_spec)
    with progress_bar(len(hypotheses), "trying hypotheses") as advance:
        result = diagnose(diagnoser, hypotheses, str(args.repository / SPEC_FILENAME), DEPLOYED_LIBRARY[args.pipeline],
                          progress=advance)
    diagnosis = diagnosis_dict(result, {
        "images": len(images), "failed": deployed.failed, "screen_images": SCREEN_IMAGES,
        "reference": {"recipe": recipe, "model": model.name},
        "deployed": {"ensemble": PIPELINES[args.pipeline].ensemble, "url": url, "protocol": args.protocol},
        "spec": spec.source, "versions": versions(),
    })
    paths = write_diagnosis(args.report, diagnosis)
    out(paths["markdown"].read_text())
    console.print(f"diagnosis: {paths['markdown']} (also {paths['json'].name})")
    unexplained = result.first_divergent is not None and result.explained_by is None
    return 1 if unexplained else 0
