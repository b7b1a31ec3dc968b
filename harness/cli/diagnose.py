"""``harness diagnose``: which known culprits explain a divergence, what each costs, and what to change."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.cli.common import (
    add_images_args,
    add_reference_args,
    add_repository_args,
    add_server_args,
    add_tie_and_rejection_args,
    console,
    out,
    progress_bar,
    session_of,
    target_of,
)
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, ServerStopped, UsageError
from harness.paths import REPORTS_DIR

DEFAULT_REPORT = REPORTS_DIR / "diagnose"
DEPLOYED_LIBRARY = {"dali": "DALI", "opencv": "OpenCV"}


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
    add_tie_and_rejection_args(p.add_argument_group("verdicts"))
    add_server_args(p)
    add_repository_args(p)
    p.set_defaults(run=run_diagnose_command)


def run_diagnose_command(args) -> int:
    from harness.corpus import list_images
    from harness.deployment import DeployedSide
    from harness.deployment.target import open_deployment, require_reference_model
    from harness.diagnose import SCREEN_IMAGES, Diagnoser, corrected_spec, diagnose, fetch_deployed, reference_toml
    from harness.diagnose.advice import fingerprint, reference_table
    from harness.reference import BUILT_IN
    from harness.reference.model import CHOICES, TorchModel
    from harness.report.data import versions
    from harness.report.diagnosis import CombinedChange, DiagnosisReport, write_diagnosis
    from harness.results import DeployedInfo, ReferenceInfo, ServerInfo
    from harness.spec import SPEC_FILENAME, SpecError

    started = time.perf_counter()
    session = session_of(args)
    spec = session.spec
    recipe = args.reference or spec.reference.recipe
    if recipe not in BUILT_IN:
        raise UsageError(f"diagnose varies a built-in recipe ({', '.join(BUILT_IN)}); describe your training "
                         f"preprocessing in the spec's [reference] section instead of {recipe!r}")
    images = list_images(args.images)
    if not images:
        raise UsageError(f"no images in {args.images}")
    target = target_of(args)
    require_reference_model([target], args.reference_model)
    tie_margin = session.tie_margin(args.tie_margin)
    # One intra-op thread: the search preprocesses one image per core, and torch's thread pool
    # spends more time waking up than working on one image's small tensors.
    model = session.reference_model(args.reference_model, threads=1)
    model.check_input(spec.reference.preprocess.input_shape)

    def fp16_model():
        if not isinstance(model, TorchModel):
            raise SpecError("the fp16 hypothesis needs the PyTorch model (--reference-model torch)")
        return TorchModel(half=True)

    def not_fp16():
        raise SpecError("the fp16 hypothesis runs this repository's PyTorch model, not --reference-model FILE")

    reference = BUILT_IN[recipe](spec.reference.preprocess)
    read_start = time.perf_counter()
    with session.connect(log=console.print) as client:
        server = ServerInfo(client.url, args.protocol)
        deployment = open_deployment(session, client, target, images, console.print)
        tolerances = session.tolerances(deployment.scores_kind)
        if deployment.scores_kind == "probabilities":
            raise UsageError(f"{deployment.model} answers probabilities ({deployment.scores_output}); diagnose compares "
                             "logits: name an output of logits with --output")
        side = DeployedSide(deployment, session.client_factory(client))
        with progress_bar(len(images), "reading the deployed stages") as advance:
            try:
                deployed = fetch_deployed(side, images, reference, on_image=advance)
            except ServerStopped as exc:
                raise exc.then("Nothing was diagnosed; run diagnose again once the server answers") from None
    read_seconds = time.perf_counter() - read_start
    if not deployed.names:
        raise NothingCompared(f"no image could be compared: the deployment answered none of the {len(images)} "
                              f"({deployed.failed[0].image}: {deployed.failed[0].reason})")
    foreign = target.model is not None
    diagnoser = Diagnoser(deployed, recipe, spec.reference.preprocess, spec.preprocess, model, tolerances,
                          not_fp16 if foreign and args.reference_model not in CHOICES else fp16_model,
                          tie_margin=tie_margin)
    search_start = time.perf_counter()
    try:
        with console.status("diagnosing") as status:
            result = diagnose(diagnoser, None if foreign else str(args.repository / SPEC_FILENAME),
                              deployment.model if foreign else DEPLOYED_LIBRARY[args.pipeline], progress=status.update)
    finally:
        diagnoser.close()
    if not diagnoser.indices:
        raise NothingCompared(f"no image could be compared: the reference recipe rejected all {len(deployed.names)} "
                              f"images the deployment answered ({diagnoser.rejected_by_training[0].reason})")
    final_recipe, final_preprocess, fp16 = diagnoser.setting([c.hypothesis for c in result.causes])
    note = "The model-precision cause (fp16) cannot be written in a spec: the output stays different." if fp16 else ""
    written = None
    if args.write_spec:
        written = corrected_spec(spec, session.spec_path, final_recipe, final_preprocess,
                                 [c.hypothesis for c in result.causes], args.write_spec, note)
    timing = {"reading the deployed side": read_seconds, **dict(diagnoser.timing),
              "search (all phases)": time.perf_counter() - search_start,
              "total": time.perf_counter() - started}
    report = DiagnosisReport(
        result, len(images), (*deployed.failed, *diagnoser.rejected_by_training), SCREEN_IMAGES,
        ReferenceInfo(recipe, model.name), deployment.model, server,
        CombinedChange(reference_table(spec, final_recipe, final_preprocess),
                       reference_toml(spec, final_recipe, final_preprocess), note or None),
        spec.source, str(written) if written else None, diagnoser.tie_margin,
        {k: round(v, 3) for k, v in timing.items()}, dict(diagnoser.counts), versions(),
        fingerprint(final_recipe, final_preprocess),
        tuple(DeployedInfo.of(deployment, server).found) if foreign else ())
    paths = write_diagnosis(args.report, report)
    out(paths["markdown"].read_text())
    console.print(f"diagnosis: {paths['markdown']} (also {paths['json'].name})"
                  + (f"; corrected spec: {written}" if written else ""))
    found = result.remaining is not None or (report.one_sided() and not args.allow_rejected)
    return EXIT_FOUND if found else EXIT_OK
