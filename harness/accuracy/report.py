"""accuracy.json and accuracy.md, both from one :class:`~harness.results.AccuracyReport`."""

from __future__ import annotations

import math
from pathlib import Path

from harness.accuracy.dataset import Sample
from harness.accuracy.predict import REFERENCE
from harness.accuracy.scoring import AccuracyResult, PathScore
from harness.files import strict_json, write_atomic
from harness.names import markdown_code, markdown_row, markdown_text
from harness.report.formats import JobReports
from harness.result import SIDES
from harness.results.accuracy import AccuracyReport, EffectReport, compared_scores, ensemble, points, rate

JSON_FILENAME = "accuracy.json"
MARKDOWN_FILENAME = "accuracy.md"
FLIPS_SHOWN = 50
"""Images listed in accuracy.md whose top-1 class differs between paths (all are in accuracy.json)."""


def reading_lines(reference) -> list[str]:
    """The reference's reading (``--reference hf:...``) and its proof, first: an empty list without one."""
    return [f"> Reference {reference.reading}", ""] if reference.reading else []


def render_markdown(report: AccuracyReport) -> str:
    """accuracy.md: the consistency table, per-class scores, the images whose top-1 changed,
    and the failed images."""
    result, k, reference = report.result, report.result.k, report.reference_score
    data = result.dataset
    evaluated = len(result.evaluated)
    layout = {"imagefolder": "ImageFolder", "csv": "CSV", "unlabeled": "unlabeled: flip rates only"}[data.layout]
    classes = {s.label for s in data.samples if s.label is not None}
    rejected = "".join(f", {n} of them rejected by {side} only" for side in SIDES if (n := result.rejected(side)))
    columns = ("path", "top-1", "diff", f"top-{k}", "diff", "recall (macro)", "diff", "precision (macro)", "diff",
               "flip rate vs reference", "without ties", "McNemar b/c, p")
    lines = [
        "# Accuracy: the deployed preprocessing vs the training reference", "",
        *reading_lines(report.reference),
        f"- Dataset: `{data.source}` ({layout}; {len(data.samples)} images"
        + (f", {len(classes)} classes" if data.labeled else "") + ")",
        f"- Evaluated: {evaluated} images on every path; {len(result.failed)} left out of every path"
        + rejected + (" (listed below)" if result.failed else ""),
        f"- Reference: {report.reference.recipe}; model: {report.reference.model}",
        f"- Deployed: {', '.join('`' + str(ensemble(s.path)) + '`' for s in report.deployed_scores)} over "
        f"{report.server.protocol} at {report.server.url}",
        f"- Spec: {report.reference.spec_line(report.spec)}", "",
        "| " + " | ".join(columns) + " |",
        "|---|" + "---:|" * (len(columns) - 1),
    ]
    for s in result.scores:
        name = f"reference ({report.reference.recipe_name})" if s is reference else f"`{ensemble(s.path)}`"
        cells = [name]
        for _, value, base in compared_scores(s, reference, k):
            cells += [_percent(value), "" if s is reference else _signed(points(value, base))]
        if s is reference:
            cells += ["", "", ""]
        else:
            cells.append("-" if s.flip_rate is None else f"{_percent(s.flip_rate)} ({s.flips}/{evaluated})")
            without = rate(s.diverged_flips, evaluated)
            cells.append("-" if without is None else
                         f"{_percent(without)} ({s.diverged_flips}/{evaluated}; "
                         f"{s.ties} {'tie' if s.ties == 1 else 'ties'})")
            m = s.mcnemar
            cells.append("-" if m is None else f"{m.b}/{m.c}, p = {m.p_value:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Diffs are deployed minus reference, in points. Flip rate: the share of images whose top-1 class differs "
        "from the reference's; without ties, the changes that are not ties (a tie: the reference's top-1 logit was "
        f"ahead of the deployed top-1 by at most {result.tie_margin:g}, what the output's error explains). "
        "McNemar: b = images the reference classifies correctly and the deployed path "
        "does not, c = the reverse; p = exact two-sided binomial test of b against b + c at 1/2 "
        "(p = 1 when b + c = 0). Macro averages are over the classes present in the dataset; a class a path never "
        "predicts has precision 0.",
    ]
    lines += _per_class(result)
    lines += _flipped(report)
    if result.failed:
        lines += ["", f"## Failed images, excluded from every path ({len(result.failed)})", "",
                  "| image | outcome | reason |", "|---|---|---|"]
        lines += [markdown_row(name, result.outcomes.get(name, "failed"), reason) for name, reason in result.failed.items()]
    lines += _skipped(result.dataset)
    return "\n".join(lines) + "\n"


def _skipped(dataset) -> list[str]:
    """The folder entries that are not images, with why (as check lists them)."""
    if not dataset.skipped:
        return []
    return ["", f"## Skipped entries, not images ({len(dataset.skipped)})", "", "| entry | reason |", "|---|---|",
            *(markdown_row(s.name, s.reason) for s in dataset.skipped)]


def _per_class(result: AccuracyResult) -> list[str]:
    if not result.dataset.labeled or not result.scores[0].per_class:
        return []
    lines = ["", "## Per class (recall / precision)", "",
             "| class | images | " + " | ".join(_path_name(s.path) for s in result.scores) + " |",
             "|---|---:|" + "---:|" * len(result.scores)]
    per_class = [{c.name: c for c in s.per_class} for s in result.scores]
    for c in result.scores[0].per_class:
        cells = [f"{_percent(scores[c.name].recall)} / {_percent(scores[c.name].precision)}" for scores in per_class]
        lines.append(f"| {c.name} ({c.index}) | {c.images} | " + " | ".join(cells) + " |")
    return lines


def _flipped(report: AccuracyReport) -> list[str]:
    result = report.result
    flipped = [s for s in result.evaluated if len({top[s.name][0] for top in result.predictions.values()}) > 1]
    if not flipped:
        return []
    lines = ["", f"## Images whose top-1 class differs between paths ({len(flipped)})", "",
             "A deployed top-1 marked *tie* is within the tie margin of the reference's (margin in logits); "
             "*diverged* is beyond it.", "",
             "| image | label | " + " | ".join(_path_name(s.path) for s in result.scores) + " |",
             "|---|---|" + "---|" * len(result.scores)]
    for sample in flipped[:FLIPS_SHOWN]:
        cells = [_flip_cell(report, sample, score) for score in result.scores]
        lines.append(f"| {markdown_code(sample.name)} | {markdown_text(report.label_name(sample) or '-')} | "
                     + " | ".join(cells) + " |")
    if len(flipped) > FLIPS_SHOWN:
        lines.append(f"\n{len(flipped) - FLIPS_SHOWN} more in {JSON_FILENAME}.")
    return lines


def _flip_cell(report: AccuracyReport, sample: Sample, score: PathScore) -> str:
    top1 = report.classes[report.result.predictions[score.path][sample.name][0]]
    flip = score.flip_verdicts.get(sample.name)
    if flip is None:
        return top1
    verdict, margin = flip
    return f"{top1} ({verdict}, margin {margin:.3g})" if math.isfinite(margin) else f"{top1} ({verdict}, margin inf)"


def _path_name(path: str) -> str:
    return REFERENCE if path == REFERENCE else str(ensemble(path))


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _signed(points: float | None) -> str:
    return "-" if points is None else f"{points:+.2f}"


def _own(render) -> dict:
    """accuracy.json and accuracy.md written by ``render`` (a report's Markdown)."""

    def json_file(report, out_dir: Path) -> dict[str, Path]:
        write_atomic(out_dir / JSON_FILENAME, strict_json(report.to_dict(), indent=1) + "\n")
        return {"json": out_dir / JSON_FILENAME}

    def markdown_file(report, out_dir: Path) -> dict[str, Path]:
        write_atomic(out_dir / MARKDOWN_FILENAME, render(report))
        return {"markdown": out_dir / MARKDOWN_FILENAME}

    return {"json": json_file, "md": markdown_file}


RECORD_NOTE = "Always written: accuracy.json, the run's record (merge reads a shard's)"
ACCURACY_REPORTS = JobReports("accuracy", "accuracy", ("json", "md"), _own(lambda r: render_markdown(r)),
                              records=("json",), note=RECORD_NOTE)
"""What ``harness accuracy`` writes (:class:`~harness.report.formats.JobReports`)."""
EFFECT_REPORTS = JobReports("accuracy", "accuracy", ("json", "md"), _own(lambda r: render_effect_markdown(r)),
                            records=("json",), note=RECORD_NOTE)
"""What ``harness accuracy`` writes for a task other than classification."""


def write_accuracy_files(out_dir: Path, report: AccuracyReport | EffectReport, formats=None) -> dict[str, Path]:
    """``report`` in ``formats`` (None: accuracy.json and accuracy.md; accuracy.json always) in
    ``out_dir`` (created); the files by name (``json``, ``markdown``, or the format)."""
    reports = EFFECT_REPORTS if isinstance(report, EffectReport) else ACCURACY_REPORTS
    return reports.write(report, out_dir, formats)


def write_report(out_dir: Path, report: AccuracyReport) -> tuple[Path, Path]:
    """accuracy.json and accuracy.md in ``out_dir`` (created)."""
    files = write_accuracy_files(out_dir, report)
    return files["json"], files["markdown"]


def render_effect_markdown(report: EffectReport) -> str:
    """accuracy.md of a task other than classification: the context, the task's tables, the images left out."""
    data, evaluated = report.dataset, len(report.evaluated)
    layout = {"imagefolder": "ImageFolder", "csv": "CSV", "coco": "COCO JSON", "masks": "a folder of masks",
              "unlabeled": "unlabeled: agreement only"}[data.layout]
    labels = {s.label for s in data.samples if s.label is not None}
    counted = (f", {report.effect.paths[0].labeled} labeled boxes" if data.layout == "coco" and report.effect
               else "" if data.layout == "masks" else f", {len(labels)} labels" if data.labeled else "")
    rejected = "".join(f", {n} of them rejected by {side} only" for side in SIDES
                       if (n := sum(o == f"rejected by {side}" for o in report.outcomes.values())))
    lines = [f"# Effect on a labeled set ({report.task}): the deployed preprocessing vs the training reference", "",
             *reading_lines(report.reference),
             f"- Dataset: `{data.source}` ({layout}; {len(data.samples)} images{counted})",
             f"- Evaluated: {evaluated} images on every path; {len(report.failed)} left out of every path"
             + rejected + (" (listed below)" if report.failed else ""),
             f"- Reference: {report.reference.recipe}; model: {report.reference.model}",
             f"- Deployed: {', '.join(f'`{m}` ({p})' for p, m in zip(report.paths, report.models))} over "
             f"{report.server.protocol} at {report.server.url}",
             f"- Spec: `{report.spec}`", "",
             *report.effect.markdown([s.name for s in report.evaluated])]
    if report.failed:
        lines += ["", f"## Failed images, excluded from every path ({len(report.failed)})", "",
                  "| image | outcome | reason |", "|---|---|---|"]
        lines += [markdown_row(name, report.outcomes.get(name, "failed"), reason) for name, reason in report.failed.items()]
    lines += _skipped(report.dataset)
    return "\n".join(lines) + "\n"


def write_effect_report(out_dir: Path, report: EffectReport) -> tuple[Path, Path]:
    """accuracy.json and accuracy.md of a task other than classification."""
    files = write_accuracy_files(out_dir, report)
    return files["json"], files["markdown"]
