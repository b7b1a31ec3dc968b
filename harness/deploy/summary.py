"""What ``harness deploy`` prints: the training definition read and how exactly, what was written and
validated, and per stage of the self-check what DALI does not replay exactly and what it costs."""

from __future__ import annotations

from harness.formatting import fmt
from harness.operations import crop, decode
from harness.spec import SPEC_FILENAME, load_spec
from harness.stage import Stage
from harness.verdict import Verdict


def operation(stage: Stage, p) -> str:
    """The spec's operation at ``stage``, in words (which one leaves the difference)."""
    r, n = p.resize, p.normalize
    return {
        Stage.DECODE: decode.describe(p),
        Stage.RESIZE: f"resize {r.extent()} {r.interpolation}" + (", PIL's resampling" if r.resampling == "pil" else "")
                      + (f", sizes rounded {r.size_rounding}" if r.mode == "shorter_side" else ""),
        Stage.CROP: crop.describe(p),
        Stage.INPUT: f"normalize x/255*{fmt(n.pixel_range)}, mean [{', '.join(map(fmt, n.mean))}], std "
                     f"[{', '.join(map(fmt, n.std))}]",
        Stage.OUTPUT: "the model (ONNX Runtime here, TensorRT on the GPU)",
    }.get(stage, str(stage))


def onnx_line(loaded) -> list[str]:
    """The ONNX as the production TensorRT's parser reads it (lowered where it was written newer)."""
    if loaded is None:
        return []
    lowered = (f", lowered from IR version {loaded.lowered_from} (only the version field changed: the graph is "
               f"valid at {loaded.ir_version})") if loaded.lowered_from is not None else ""
    return [f"  the ONNX: IR version {loaded.ir_version}, opset {loaded.opset}{lowered}; loaded by ONNX Runtime"]


def summary_lines(result) -> list[str]:
    o, v = result.options, result.validation
    lines = [f"deployed {o.model} for {o.reference} into {o.out} ({len(result.models)} models: "
             f"{', '.join(result.models)}; {result.classes} classes"
             + ("" if result.class_names_given else ", named by their indices: give --class-names") + ")"]
    reading = result.proof or f"read from {result.reading.source} ({result.reading.framework})"
    lines += [f"reference {reading}", "",
              "production profile (gpu), validated without a GPU:",
              f"  {v.configs} configs parsed by Triton's protobuf schema",
              f"  the DALI pipelines ({', '.join(v.pipelines)}): GPU decode, every operator argument in DALI {v.dali}'s "
              "schema",
              *onnx_line(result.onnx),
              *([f"  the engine: {v.engine_commands[0]}"] if len(v.engine_commands) == 1 else
                [f"  the engine of version {k}: {command}" for k, command in enumerate(v.engine_commands, 1)]),
              f"  serve it: docker compose -f {o.out / 'docker-compose.yml'} up -d (TRITON_ADMIN_KEY set: docs/gpu.md)",
              f"  cpu profile: harness serve --repository {o.out}"]
    if result.check is None:
        lines += ["", "not checked (--no-check, or no --images): harness check IMAGES --repository "
                      f"{o.out} --reference {o.reference}"]
        return lines
    report = result.check.report
    summary = report.summary
    p = _deployed_spec(o)
    lines += ["", f"checked on {summary.compared} of {summary.images} photos: the cpu profile (the same DALI graph on "
                  "DALI's CPU decoder and kernels, the model in ONNX Runtime) against the same reference",
              f"  {'stage':<7} {'verdict':<9} {'equal/close/diverged':<21} {'max |diff|':<11} {'alone adds':<11} operation"]
    for s in summary.stages:
        if s.stage is Stage.TOPK:
            continue
        counts = "/".join(str(s.count(k)) for k in (Verdict.EQUAL, Verdict.CLOSE, Verdict.DIVERGED))
        alone = s.metric("max_abs", isolated=True)
        lines.append(f"  {s.stage.value:<7} {s.verdict.value:<9} {counts:<21} {fmt(s.metric('max_abs')):<11} "
                     f"{'-' if alone is None else fmt(alone):<11} {operation(s.stage, p)}")
    lines += ["", *what_is_left(report, p)]
    seconds = result.seconds
    lines += ["", "time: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()),
              f"report: {result.check.paths.get('markdown', o.report)}"]
    return lines


def what_is_left(report, p) -> list[str]:
    """Where DALI does not replay an operation exactly (which, how large), and what that costs."""
    summary = report.summary
    left = []
    for s in summary.stages:
        if s.stage in (Stage.TOPK, Stage.OUTPUT) or not s.metric("max_abs"):
            continue
        alone = s.metric("max_abs", isolated=True)
        adds = "" if alone is None else (f"; it adds {fmt(alone)} by itself" if alone else "; inherited from the stage "
                                                                                         "before (it adds nothing)")
        unit = "" if s.stage is Stage.INPUT else " levels"
        left.append(f"  {s.stage.value} ({operation(s.stage, p)}): max {fmt(s.metric('max_abs'))}{unit}, mean "
                    f"{fmt(s.metric('mean_abs', 'mean'))}{adds}")
    top = summary.stage(Stage.TOPK)
    flips, ties = len(summary.events), summary.ties
    output = summary.stage(Stage.OUTPUT)
    cost = (f"what it costs: top-1 changed on {flips} of {summary.compared} photos"
            + (f" ({ties} within the tie margin)" if ties else "")
            + (f", top-1 agreement {top.metric('top1_agree', 'mean'):.1%}" if top is not None else "")
            + (f"; logits max |diff| {fmt(output.metric('max_abs'))}" if output is not None else ""))
    verdict = "nothing diverged" if summary.first_divergent_stage is None else \
        f"first divergent stage: {summary.first_divergent_stage}"
    head = "what DALI does not replay exactly" if left else "DALI replays every operation exactly on these photos"
    return [f"{head} ({verdict}):", *left, f"  {cost}"]


def _deployed_spec(options):
    """The spec the deployment's models read: its own (``NAME.toml``) where it is named."""
    from harness.task import repository_models  # here: the task registry only when a summary is written

    spec = repository_models(options.task).named(options.name, ()).spec if options.name else SPEC_FILENAME
    return load_spec(options.out / spec).preprocess
