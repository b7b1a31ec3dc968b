"""Commands that set up and use the deployment: model, repo, serve, infer, corpus."""

from __future__ import annotations

import argparse
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.arguments import (
    DeploymentArgs,
    Deployments,
    Groups,
    RepositoryArgs,
    ServerArgs,
    add_class_names,
    epilog,
    make_session,
)
from harness.cli.common import connect, console, say
from harness.client import CLASSIFIER
from harness.corpus import build_corpus, make_variants
from harness.deployment.discovery import read_model
from harness.errors import UsageError
from harness.layers.job import export_fp16_model
from harness.listing import list_inputs
from harness.model import import_onnx, read_labels
from harness.names import plain_text
from harness.paths import DEFAULT_PHOTOS, TEMPLATE_REPOSITORY, WORK_DIR
from harness.server import TritonServer
from harness.session import Session
from harness.target import Target, served_models
from harness.task import TASKS, claimed_by, get_task
from harness.validation import COUNT, PORT, Whole

DONE = epilog("done", "(infer) an image had no answer", "usage or setup error")


def register(commands: argparse._SubParsersAction) -> None:
    register_setup(commands)
    register_serving(commands)


def register_setup(commands: argparse._SubParsersAction) -> None:
    """``model``, ``corpus`` and ``repo``: setting up."""
    model = commands.add_parser("model", help="export or import the classifier ONNX",
                                description="Export the default models, or install your own classifier.")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    export = model_commands.add_parser("export", help="export EfficientNet-Lite0 (ImageNet-1k) to ONNX, with labels, and its "
                                    "pooled features (the embedder); install the text detector (rapidocr's PP-OCRv6 ONNX, "
                                    "with its licence notice)", epilog=epilog("exported", None, "usage or setup error"))
    export.add_argument("--fp16", action="store_true",
                        help="also write model_fp16.onnx (fp16 inside, fp32 inputs and outputs): what FP16=1 builds "
                             "the TensorRT 11 engine from, as trtexec has no --fp16 there; prints its error against fp32. "
                             "Layers that break fp16 on the calibration images stay fp32 (listed in model_fp16.json)")
    export.add_argument("--onnx", type=Path, default=None,
                        help="with --fp16: convert this fp32 ONNX (default: export the default classifier)")
    export.add_argument("--calibration", type=Path, default=None,
                        help=f"with --fp16: images the fp16 model must agree with fp32 on, top-1 and logits within the "
                             f"output tolerance (default: {DEFAULT_PHOTOS} when it exists; none: no fp32 fallback)")
    export.add_argument("--out", type=Path, default=None,
                        help="with --fp16: the fp16 ONNX to write (default: model_fp16.onnx beside the fp32 one); "
                             "OUT.json beside it lists the fp32_layers")
    export_groups = Groups(export, repository=RepositoryArgs())
    export.set_defaults(run=lambda args: run_model_export(args, export_groups))
    imp = model_commands.add_parser("import", help="install your own ONNX classifier and its class names",
                                    epilog=epilog("installed", None, "usage or setup error"))
    imp.add_argument("onnx", type=Path, metavar="ONNX", help="your classifier")
    add_class_names(imp.add_argument_group("class names"), alias_labels=True, required=True,
                    help="class names of your model, one a line, in output order")
    import_groups = Groups(imp, repository=RepositoryArgs())
    imp.set_defaults(run=lambda args: run_model_import(args, import_groups))

    corpus = commands.add_parser("corpus", help="gather the real-photo corpus (and re-encoded variants)",
                                 epilog=epilog("gathered", None, "usage or setup error"))
    corpus.add_argument("--out", type=Path, default=Path("data/photos"), help="photo directory (default: %(default)s)")
    corpus.add_argument("--variants", type=Whole(0, COUNT.maximum), default=0, metavar="N",
                        help="also write N re-encoded variants (quality, subsampling, progressive, EXIF, gray, CMYK) "
                             "(default: %(default)s)")
    corpus.add_argument("--variants-out", type=Path, default=None, help="(default: OUT-variants)")
    corpus.set_defaults(run=run_corpus)

    repo = commands.add_parser("repo", help="build a profile of the model repository")
    repo_commands = repo.add_subparsers(dest="repo_command", required=True, metavar="COMMAND")
    build = repo_commands.add_parser("build", help="write the cpu profile (or a gpu copy with another spec)",
                                     epilog=epilog("written", None, "usage or setup error"))
    build.add_argument("--profile", choices=("cpu", "gpu"), default="cpu",
                       help="cpu: the GPU-only models swapped for their CPU stand-ins; gpu: a copy "
                            "(default: %(default)s)")
    build.add_argument("--out", type=Path, required=True,
                       help="the profile's directory: a new or empty folder, or one harness wrote (then replaced)")
    build_groups = Groups(build, repository=RepositoryArgs())
    build.set_defaults(run=lambda args: run_repo_build(args, build_groups))


def register_serving(commands: argparse._SubParsersAction) -> None:
    """``serve`` and ``infer``: serving, and asking what it answers."""
    serve = commands.add_parser("serve", help="serve the repository with the embedded tritonserver",
                                epilog=epilog("stopped with Ctrl-C or SIGTERM", None,
                                              "usage or setup error, or the server exited by itself"))
    serve.add_argument("--profile", choices=("cpu", "gpu", "as-is"), default="cpu",
                       help="cpu: this repository's cpu profile, derived from --repository; as-is: serve --repository "
                            "unchanged (your own repository of Python-backend, ONNX Runtime or ensemble models) "
                            "(default: %(default)s)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument("--http-port", type=PORT, default=8000,
                       help="the port of Triton's HTTP endpoint (default: %(default)s)")
    serve.add_argument("--grpc-port", type=PORT, default=8001,
                       help="the port of Triton's gRPC endpoint (default: %(default)s)")
    serve.add_argument("--metrics-port", type=PORT, default=8002,
                       help="the port of Triton's metrics endpoint (default: %(default)s)")
    serve.add_argument("--log-file", type=Path, default=WORK_DIR / "tritonserver.log",
                       help="the server's log (default: %(default)s)")
    serve_groups = Groups(serve, repository=RepositoryArgs())
    serve.set_defaults(run=lambda args: run_serve(args, serve_groups))

    infer = commands.add_parser("infer", help="top-k classes of images (or directories of images) through the server",
                                epilog=epilog("every image answered", "an image had no answer on some model",
                                              "usage or setup error, or the server not reachable or stopped"))
    infer.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="images, or directories of images")
    infer.add_argument("--top-k", type=COUNT, default=5,
                       help="classes per image; for --task embedding, the nearest of the other images given; "
                            "for --task detection, the best boxes shown (default: %(default)s)")
    add_class_names(infer.add_argument_group("class names"), alias_labels=True,
                    help="class names, one a line in output order, for a --model without a label file of its own "
                         "(default: the repository's labels.txt, when the class count matches)")
    infer_groups = Groups(infer, deployment=DeploymentArgs(("pipeline", "model", "output", "task"), several=True,
                                                           notes={"pipeline": "(default: dali)"}),
                          server=ServerArgs(), repository=RepositoryArgs())
    infer.set_defaults(run=lambda args: run_infer(args, infer_groups))


def run_model_export(args, groups: Groups) -> int:
    paths = groups.parse(args).repository
    if not paths.repository.exists():  # a new folder (an installed harness's default): the shipped configs first
        shutil.copytree(TEMPLATE_REPOSITORY, paths.repository, ignore=shutil.ignore_patterns("__pycache__"))
        console.print(f"wrote the model repository's configs to {paths.repository}")
    session, repository = make_session(paths), paths.repository
    if (args.onnx or args.out or args.calibration) and not args.fp16:
        raise UsageError("--onnx, --calibration and --out go with --fp16")
    if args.onnx is not None:
        path = args.onnx
    else:
        from harness.repository import shipped_in  # here: loads protobuf, tomli_w, tritonclient

        written = {}
        for model, config in shipped_in(repository):  # every task's model files, as the task writes them
            if model.export is not None:
                written[model.name] = model.export(repository / model.name, session.spec, config)
                console.print(model.exported.format(path=written[model.name]))
        path = written[CLASSIFIER]
    if args.fp16:
        _export_fp16(session, path, args.out, args.calibration)
    return 0


def _export_fp16(session, path: Path, out: Path | None, calibration: Path | None) -> None:
    """The fp16 model with its fp32 fallback found on ``calibration`` (default the photo corpus)."""
    done = export_fp16_model(session, path, out, calibration, log=say)
    if done.fallback is None:
        console.print(f"wrote {done.fp16_model} (no calibration images: no fp32 fallback searched)")
        return
    kept = ", ".join(done.fallback.fp32_layers) if done.fallback.fp32_layers else "none: fp16 is safe as it is"
    console.print(f"wrote {done.fp16_model} and {done.report}; layers kept in fp32: {kept}", highlight=False,
                  soft_wrap=True)
    c = done.comparison
    console.print(f"fp16 vs fp32 on {c.images} images (ONNX Runtime, CPU): top-1 agreement {c.top1_agreement:.1%}, "
                  f"logits max |diff| {c.max_abs_logit:.3g}, mean {c.mean_abs_logit:.3g}")


def run_model_import(args, groups: Groups) -> int:
    from harness.repository import set_class_count  # here: loads protobuf, tomli_w, tritonclient

    paths = groups.parse(args).repository
    spec = make_session(paths).spec
    path = import_onnx(args.onnx, args.class_names, paths.repository / CLASSIFIER, spec.preprocess.crop.size)
    console.print(f"installed {args.onnx} as {path}")
    classes = len(read_labels(args.class_names))
    changed = set_class_count(paths.repository, classes)
    if changed:
        console.print(f"class count set to {classes} in the configs of {', '.join(changed)}")
    return 0


def run_repo_build(args, groups: Groups) -> int:
    from harness.repository import build_profile, load_repository  # here: loads protobuf, tomli_w, tritonclient

    paths = groups.parse(args).repository
    out = build_profile(paths.repository, args.out, args.profile, paths.spec)
    console.print(f"{args.profile} profile written to {out}: {', '.join(load_repository(out))}")
    return 0


def run_serve(args, groups: Groups) -> int:
    import tempfile

    from harness.repository import build_cpu_profile  # here: loads protobuf, tomli_w, tritonclient

    paths = groups.parse(args).repository

    if args.profile == "gpu":
        raise UsageError("the gpu profile needs the DALI and TensorRT backends and a GPU: "
                         "serve it with `docker compose up` (see README)")
    if args.profile == "as-is":
        return _serve(args, paths.repository)
    # the cpu profile in a folder of its own, removed when the server stops (`harness repo build` keeps one)
    with tempfile.TemporaryDirectory(prefix="harness-serve-") as tmp:
        return _serve(args, build_cpu_profile(paths.repository, Path(tmp) / "repository-cpu", paths.spec))


def _serve(args, repo: Path) -> int:
    server = TritonServer(repo, args.host, args.http_port, args.grpc_port, args.metrics_port, log_file=args.log_file)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with console.status("starting tritonserver"):
        server.start()
    try:
        console.print(f"serving {repo} ({args.profile})\n  HTTP    {server.http_url}\n  gRPC    {server.grpc_url}\n"
                      f"  metrics {server.metrics_url}\n  log     {server.log_file}\nCtrl-C to stop.")
        while not stop.wait(1.0):
            if not server.is_running():
                raise UsageError(f"tritonserver exited unexpectedly; log {server.log_file}:\n{server.log_tail()}")
    finally:
        code = server.stop()
        console.print(f"tritonserver stopped (exit code {code})")
    return 0


def _expand(paths: list[Path]) -> tuple[list[Path], list]:
    """The images of ``paths`` (files, and the inputs of folders), and the folders' entries
    that are not inputs (:class:`harness.listing.Skipped`: a hidden file, a sub-folder, a link
    leading out), listed as check lists them."""
    files, skipped = [], []
    for p in paths:
        if p.is_dir():
            listing = list_inputs(p)
            files.extend(f.path for f in listing.inputs)
            skipped.extend(listing.skipped)
        elif p.exists():
            files.append(p)
        else:
            raise UsageError(f"no such image or directory: {p}")
    return files, skipped


def _say_skipped(skipped: list) -> None:
    for entry in skipped:
        console.print(f"skipped {plain_text(entry.name)}: {plain_text(entry.reason)}", markup=False)


def _claimed(client, models) -> str:
    """The task discovery finds for the first ``--model``."""
    return claimed_by(read_model(client, models[0]))[0].name


@dataclass(frozen=True)
class Asked:
    """What ``harness infer`` is asked (what :meth:`harness.task_api.Task.infer` reads): the
    deployed sides, the session, the class names of a ``--model`` without its own, how many
    classes (or neighbours, or boxes) per image, the images and the folders' entries skipped."""

    deployed: Deployments
    session: Session
    class_names: Path | None
    top_k: int
    files: list[Path]
    skipped: list
    tasks = TASKS
    """The registry: a task named for a model is checked against the others' signs."""
    console = console

    @staticmethod
    def say(line: str) -> None:
        say(line)

    def say_skipped(self) -> None:
        _say_skipped(self.skipped)

    @property
    def pipelines(self) -> tuple[str, ...]:
        return self.deployed.pipelines or ("dali",)


def run_infer(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    deployed = parsed.deployment
    files, skipped = _expand(args.images)
    asked = Asked(deployed, make_session(parsed.repository, parsed.server, task=deployed.task), args.class_names,
                  args.top_k, files, skipped)
    targets = [Target(pipeline, task=deployed.task) for pipeline in asked.pipelines] + list(deployed.targets)
    with connect(asked.session, served_models(targets)) as client:
        task = get_task(deployed.task or (_claimed(client, deployed.models) if deployed.models else None))
        return task.infer(client, asked)  # each task's own table


def run_corpus(args) -> int:
    photos = build_corpus(args.out, WORK_DIR / "wheels", progress=console.print)
    console.print(f"{len(photos)} photos in {args.out}")
    if args.variants:
        target = args.variants_out or args.out.with_name(args.out.name + "-variants")
        variants = make_variants(photos, target, args.variants)
        console.print(f"{len(variants)} re-encoded variants in {target}")
    return 0


__all__ = ["register"]
