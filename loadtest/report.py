"""The sweep's reports: comparison table (Markdown, CSV), server-side breakdown, PNG plots.

The comparison sets the first model swept against the second: by default GPU decode
(``classify_dali``) against CPU decode (``classify_opencv``), and with ``--model A --model
B`` A against B. A's row of each protocol and client count carries its QPS improvement
over B's.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.report.formats import JobReports
from loadtest.result import BASELINE, CANDIDATE, SweepResult, compared_pair
from loadtest.stats import RunStats


@dataclass(frozen=True)
class ComparisonRow:
    protocol: str
    ensemble: str
    clients: int
    stats: RunStats
    qps_improvement: float | None
    """(candidate QPS / baseline QPS - 1) on the candidate's row, else None."""
    avg_batch: float
    """The batch size the server ran (:attr:`loadtest.sweep.PointResult.avg_batch`)."""


def improvement_title(results) -> str:
    candidate, baseline = compared_pair(results)
    if (candidate, baseline) == (CANDIDATE, BASELINE):
        return "DALI vs OpenCV QPS"
    return f"{candidate} vs {baseline} QPS" if baseline else "QPS change (one model: none)"


def comparison_rows(results) -> list[ComparisonRow]:
    """One row per point, with the candidate's QPS improvement over the baseline on its rows."""
    qps = {(r.point.protocol, r.point.clients, r.point.ensemble): r.stats.qps for r in results}
    candidate, baseline_model = compared_pair(results)
    rows = []
    for r in results:
        p = r.point
        improvement = None
        baseline = qps.get((p.protocol, p.clients, baseline_model))
        if p.ensemble == candidate and baseline:
            improvement = r.stats.qps / baseline - 1.0
        rows.append(ComparisonRow(p.protocol, p.ensemble, p.clients, r.stats, improvement, r.avg_batch))
    return rows


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def _errors(stats: RunStats) -> str:
    if not stats.errors:
        return "0"
    by_type = ", ".join(f"{kind} {count}" for kind, count in stats.errors.items())
    return f"{stats.error_count} ({by_type})"


def _wrong(stats: RunStats) -> str:
    """Wrong answers of the verified ones; ``not verified`` when none was."""
    return f"{stats.wrong_answers} of {stats.verified}" if stats.verified else "not verified"


def _batch(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _improvement(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def comparison_markdown(results) -> str:
    header = ("| protocol | ensemble | clients | QPS | avg ms | TP50 ms | TP90 ms | TP99 ms | errors | wrong answers | "
              f"avg batch | {improvement_title(results)} |\n|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    lines = [header]
    for row in comparison_rows(results):
        s = row.stats
        lines.append(f"| {row.protocol} | {row.ensemble} | {row.clients} | {s.qps:.1f} | {_ms(s.avg_ms)} | "
                     f"{_ms(s.p50_ms)} | {_ms(s.p90_ms)} | {_ms(s.p99_ms)} | {_errors(s)} | {_wrong(s)} | "
                     f"{_batch(row.avg_batch)} | {_improvement(row.qps_improvement)} |")
    return "\n".join(lines)


COMPARISON_CSV_FIELDS = ("protocol", "ensemble", "clients", "seconds", "requests", "qps", "avg_ms", "p50_ms",
                         "p90_ms", "p99_ms", "max_ms", "errors", "errors_by_type", "wrong_answers", "verified",
                         "avg_batch", "qps_improvement_pct")


def write_comparison_csv(results, path: Path) -> None:
    with Path(path).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COMPARISON_CSV_FIELDS)
        for row in comparison_rows(results):
            s = row.stats
            writer.writerow([row.protocol, row.ensemble, row.clients, f"{s.seconds:.3f}", s.requests, f"{s.qps:.3f}",
                             f"{s.avg_ms:.3f}", f"{s.p50_ms:.3f}", f"{s.p90_ms:.3f}", f"{s.p99_ms:.3f}",
                             f"{s.max_ms:.3f}", s.error_count, json.dumps(s.errors, sort_keys=True), s.wrong_answers,
                             s.verified, f"{row.avg_batch:.3f}",
                             "" if row.qps_improvement is None else f"{row.qps_improvement * 100:.2f}"])


BREAKDOWN_FIELDS = ("requests", "failures", "avg_batch", "queue_us", "compute_input_us", "compute_infer_us",
                    "compute_output_us", "request_us")


def _us(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"


def breakdown_markdown(results) -> str:
    lines = ["| protocol | ensemble | clients | model | requests | avg batch | queue µs | compute input µs | "
             "compute infer µs | compute output µs | request µs |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for b in r.breakdown:
            lines.append(f"| {r.point.protocol} | {r.point.ensemble} | {r.point.clients} | {b.model} | {b.requests} | "
                         f"{_batch(b.avg_batch)} | {_us(b.queue_us)} | {_us(b.compute_input_us)} | {_us(b.compute_infer_us)} | "
                         f"{_us(b.compute_output_us)} | {_us(b.request_us)} |")
    return "\n".join(lines)


def write_breakdown_csv(results, path: Path) -> None:
    with Path(path).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("protocol", "ensemble", "clients", "model", *BREAKDOWN_FIELDS))
        for r in results:
            for b in r.breakdown:
                writer.writerow([r.point.protocol, r.point.ensemble, r.point.clients, b.model,
                                 *(getattr(b, name) for name in BREAKDOWN_FIELDS)])


def _series(results, protocol: str, ensemble: str, value) -> tuple[list[int], list[float]]:
    points = sorted((r.point.clients, value(r.stats)) for r in results
                    if r.point.protocol == protocol and r.point.ensemble == ensemble)
    return [c for c, _ in points], [v for _, v in points]


def _figure(results, title: str):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    protocols = sorted({r.point.protocol for r in results})
    # One y scale for all panels, so the protocols compare at a glance.
    fig, axes = plt.subplots(1, len(protocols), figsize=(6 * len(protocols), 4.5), squeeze=False, sharey=True)
    fig.suptitle(title)
    clients = sorted({r.point.clients for r in results})
    for ax in axes[0]:
        ax.set_xticks(clients)  # the measured client counts, not a continuous scale
    return plt, fig, dict(zip(protocols, axes[0]))


def plot_throughput(results, path: Path) -> None:
    """QPS vs clients, one line per ensemble, one panel per protocol."""
    plt, fig, axes = _figure(results, "Throughput (successful requests per second)")
    ensembles = sorted({r.point.ensemble for r in results})
    for protocol, ax in axes.items():
        for ensemble in ensembles:
            x, y = _series(results, protocol, ensemble, lambda s: s.qps)
            ax.plot(x, y, marker="o", label=ensemble)
        ax.set(title=protocol, xlabel="concurrent clients", ylabel="QPS")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_latency(results, path: Path) -> None:
    """TP50 / TP90 / TP99 vs clients: colour per ensemble, line style per percentile."""
    plt, fig, axes = _figure(results, "Latency percentiles (successful requests)")
    ensembles = sorted({r.point.ensemble for r in results})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = {"TP50": ("p50_ms", "-"), "TP90": ("p90_ms", "--"), "TP99": ("p99_ms", ":")}
    for protocol, ax in axes.items():
        for i, ensemble in enumerate(ensembles):
            for label, (attr, style) in styles.items():
                x, y = _series(results, protocol, ensemble, lambda s, a=attr: getattr(s, a))
                ax.plot(x, y, style, marker="o", color=colours[i % len(colours)], label=f"{ensemble} {label}")
        ax.set(title=protocol, xlabel="concurrent clients", ylabel="latency (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


REPORT_FILES = ("results.json", "comparison.md", "comparison.csv", "breakdown.md", "breakdown.csv",
                "throughput.png", "latency.png")


def _json_file(sweep, out: Path) -> dict[str, Path]:
    path = out / "results.json"
    path.write_text(json.dumps({**sweep.meta, "points": [r.to_dict() for r in sweep.results]}, indent=2) + "\n")
    return {path.name: path}


def _markdown_files(sweep, out: Path) -> dict[str, Path]:
    (out / "comparison.md").write_text(comparison_markdown(sweep.results) + "\n")
    (out / "breakdown.md").write_text(breakdown_markdown(sweep.results) + "\n")
    return {name: out / name for name in ("comparison.md", "breakdown.md")}


def _csv_files(sweep, out: Path) -> dict[str, Path]:
    write_comparison_csv(sweep.results, out / "comparison.csv")
    write_breakdown_csv(sweep.results, out / "breakdown.csv")
    return {name: out / name for name in ("comparison.csv", "breakdown.csv")}


def _plots(sweep, out: Path) -> dict[str, Path]:
    plot_throughput(sweep.results, out / "throughput.png")
    plot_latency(sweep.results, out / "latency.png")
    return {name: out / name for name in ("throughput.png", "latency.png")}


LOADTEST_REPORTS = JobReports("loadtest", "loadtest", ("json", "md", "csv"),
                              {"json": _json_file, "md": _markdown_files, "csv": _csv_files}, extra=_plots,
                              note="The plots (throughput.png, latency.png) are written with every format")
"""What a sweep writes (:class:`~harness.report.formats.JobReports`): results.json, the comparison
and breakdown tables as Markdown and CSV, and the plots; ``--format`` html and junit add
loadtest.html and loadtest.junit.xml (one test case per point)."""


def write_report(results, out: Path, meta: dict, formats: Sequence[str] | None = None) -> list[Path]:
    """Every report of a sweep into ``out`` (or those of ``formats``, and the plots); returns
    their paths (those of today's files named and ordered as in REPORT_FILES, then the others)."""
    files = LOADTEST_REPORTS.write(SweepResult(list(results), [], meta), Path(out), formats)
    return [files[name] for name in REPORT_FILES if name in files] + [
        path for name, path in files.items() if name not in REPORT_FILES]
