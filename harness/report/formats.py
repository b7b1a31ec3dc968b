"""One registry of report formats for every job, and ``--format``, the one option choosing them.

Locust-style: the formats are flags on one object. :data:`WRITERS` holds one writer per format
(``md``, ``html``, ``json``, ``csv``, ``junit``), each reading any job's result through the one
interface of :mod:`harness.results.interface` (title, verdict, cases, ``to_dict``). A job
declares its :class:`JobReports`: its own writer for each format it always had (a check's
report.md, a load test's comparison.csv: today's files, unchanged), the formats it writes
when ``--format`` is not given (today's set), and the formats that are its run's records,
written whatever ``--format`` says (a check's report.json and per_image.csv, which
``--resume``, ``merge`` and ``compare`` read). A format a job has no writer of its own for
is written by the registry's, named after the job's file stem: ``diagnosis.html``,
``report.junit.xml``.

JUnit XML: one ``testsuite`` per job run, one ``testcase`` per case; a failed case holds a
``failure`` and an error an ``error`` whose ``message`` is the case's one-line reason (the
details in the element's text), a skipped case a ``skipped`` with its reason; a passed case
says its reason in ``system-out``. Written with the standard library's ``xml.etree`` rather
than junitparser: preflight runs in the Triton image, where only numpy, tritonclient and the
standard library are installed (junitparser is what the tests read the files back with, a
real consumer).
"""

from __future__ import annotations

import argparse
import csv
import enum
import html
import io
import re
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from harness.errors import UsageError
from harness.files import strict_json, write_atomic
from harness.names import csv_text, markdown_text, printable
from harness.results.interface import Case, JobResult, Status, count_line, counts

FORMATS = ("md", "html", "json", "csv", "junit")
"""Every format ``--format`` takes."""
WRITE_ORDER = ("json", "md", "html", "csv", "junit")
"""The order a run writes its formats in (the JSON record first, as the jobs always did)."""
SUFFIXES = {"md": ".md", "html": ".html", "json": ".json", "csv": ".csv", "junit": ".junit.xml"}
"""A registry writer's file: the job's stem and this suffix."""

CSV_FIELDS = ("classname", "name", "status", "reason", "details")


# -- the registry's writers: any job's result, through the interface -----------------------------

def verdict_text(result: JobResult) -> str:
    """The result's verdict as its plain word (a :class:`~harness.verdict.Verdict` is a ``str``
    enum: its value, not its name)."""
    verdict = result.verdict
    return str(verdict.value if isinstance(verdict, enum.Enum) else verdict)


def render_markdown(result: JobResult) -> str:
    """A job's result as Markdown: title, verdict, one table row per case."""
    cases = list(result.cases())
    lines = [f"# {markdown_text(result.title)}", "",
             f"Verdict: **{markdown_text(verdict_text(result))}** ({'passed' if result.passed else 'failed'}); "
             f"{count_line(cases)}.", ""]
    if cases:
        lines += ["| class | case | status | reason |", "|---|---|---|---|"]
        lines += [f"| {markdown_text(c.classname)} | {markdown_text(c.name)} | "
                  f"{'**' + c.status.value + '**' if c.fails else c.status.value} | {markdown_text(c.reason)} |"
                  for c in cases]
    return "\n".join(lines) + "\n"


HTML_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; }
.failed, .error { color: #b00; font-weight: bold; } .skipped { color: #555; } .passed { color: #070; }
pre { margin: 0; white-space: pre-wrap; font-size: 12px; color: #555; }
"""


def render_html(result: JobResult) -> str:
    """A job's result as one self-contained HTML page: title, verdict, a table of the cases
    (their details under the reason)."""
    e = lambda text: html.escape(printable(text))  # noqa: E731  (every name is text, never markup)
    cases = list(result.cases())
    verdict = "passed" if result.passed else "failed"
    parts = [f"<!doctype html><meta charset=utf-8><title>{e(result.title)}</title><style>{HTML_STYLE}</style>",
             f"<h1>{e(result.title)}</h1>",
             f"<p>Verdict: <b class={verdict}>{e(verdict_text(result))}</b> ({verdict}); {e(count_line(cases))}.</p>"]
    if cases:
        parts.append("<table><tr><th>class</th><th>case</th><th>status</th><th>reason</th></tr>")
        for c in cases:
            details = "".join(f"\n{e(line)}" for line in c.details.splitlines())
            parts.append(f"<tr><td>{e(c.classname)}</td><td>{e(c.name)}</td><td class={c.status.value}>"
                         f"{c.status.value}</td><td>{e(c.reason)}" + (f"<pre>{details.strip()}</pre>" if details else "")
                         + "</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


def render_csv(result: JobResult) -> str:
    """One row per case: classname, name, status, reason, details (text cells never formulas)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_FIELDS)
    for c in result.cases():
        writer.writerow([csv_text(c.classname), csv_text(c.name), c.status.value, csv_text(c.reason),
                         csv_text(c.details.replace("\n", "; "))])
    return buf.getvalue()


def render_json(result: JobResult) -> str:
    return strict_json(result.to_dict(), indent=1) + "\n"


_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: object, lines: bool = False) -> str:
    """``text`` as characters XML 1.0 can hold: :func:`harness.names.printable` (undecodable
    bytes and control characters as ``\\xNN``), line by line when ``lines``; anything still
    not allowed as ``\\uNNNN``."""
    text = str(text)
    shown = "\n".join(printable(line) for line in text.split("\n")) if lines else printable(text)
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group(0)):04x}", shown)


def junit_element(results: Sequence[JobResult], timestamp: datetime | None = None) -> ET.Element:
    """``<testsuites>`` with one ``<testsuite>`` per result (see the module)."""
    stamp = (timestamp or datetime.now(timezone.utc)).isoformat(timespec="seconds")
    host = socket.gethostname()
    root = ET.Element("testsuites", name="harness")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    total_time = 0.0
    for result in results:
        cases = list(result.cases())
        n = counts(cases)
        seconds = sum(c.seconds or 0.0 for c in cases)
        figures = {"tests": len(cases), "failures": n[Status.FAILED], "errors": n[Status.ERROR],
                   "skipped": n[Status.SKIPPED]}
        suite = ET.SubElement(root, "testsuite", name=xml_text(result.title),
                              **{k: str(v) for k, v in figures.items()}, time=f"{seconds:.3f}",
                              timestamp=stamp, hostname=xml_text(host))
        properties = ET.SubElement(suite, "properties")
        for name, value in (("job", result.job), ("verdict", verdict_text(result)),
                            ("passed", "true" if result.passed else "false")):
            ET.SubElement(properties, "property", name=name, value=xml_text(value))
        for case in cases:
            suite.append(_testcase(case))
        for key, value in figures.items():
            totals[key] += value
        total_time += seconds
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.3f}")
    return root


def _testcase(case: Case) -> ET.Element:
    element = ET.Element("testcase", name=xml_text(case.name), classname=xml_text(case.classname),
                         time=f"{case.seconds or 0.0:.3f}")
    reason, details = xml_text(case.reason), xml_text(case.details, lines=True)
    if case.status is Status.FAILED or case.status is Status.ERROR:
        outcome = ET.SubElement(element, "failure" if case.status is Status.FAILED else "error",
                                message=reason, type=case.status.value)
        outcome.text = details or reason
    elif case.status is Status.SKIPPED:
        ET.SubElement(element, "skipped", message=reason)
    else:
        out = ET.SubElement(element, "system-out")
        out.text = "\n".join(x for x in (reason, details) if x)
    return element


def render_junit(result: JobResult) -> str:
    """JUnit XML of one job's result (``<testsuites>`` holding its one ``<testsuite>``)."""
    root = junit_element([result])
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


Renderer = Callable[[JobResult], str]

WRITERS: dict[str, Renderer] = {"md": render_markdown, "html": render_html, "json": render_json, "csv": render_csv,
                                "junit": render_junit}
"""The registry: format -> what it writes of any job's result (:data:`FORMATS`)."""


def write_format(result: JobResult, fmt: str, path: Path) -> Path:
    """``path`` written atomically with ``result`` in ``fmt`` by the registry's writer."""
    write_atomic(path, WRITERS[fmt](result))
    return path


# -- what each job writes ------------------------------------------------------------------------

OwnWriter = Callable[[object, Path], Mapping[str, Path]]
"""A job's own writer of one format: (its result, the directory) -> the files written, by the
names the job's result has always used for them (``markdown``, ``json``, ...)."""


@dataclass(frozen=True)
class JobReports:
    """What one job writes (see the module)."""

    job: str
    stem: str
    """The registry writers' file names: ``STEM.html``, ``STEM.junit.xml``."""
    defaults: tuple[str, ...]
    """The formats written when ``--format`` is not given: today's files."""
    own: Mapping[str, OwnWriter] = field(default_factory=dict)
    records: tuple[str, ...] = ()
    """Formats always written, whatever ``--format`` says: the run's records, read by other commands."""
    extra: OwnWriter | None = None
    """Files written with every run, in no format of their own (a load test's plots)."""
    note: str = ""
    """What ``--format``'s help adds for this job (which files are records, and why)."""

    def chosen(self, formats: Sequence[str] | None) -> tuple[str, ...]:
        """The formats a run writes: ``formats`` (None: :attr:`defaults`) with the records,
        in :data:`WRITE_ORDER`."""
        wanted = set(self.defaults if formats is None else formats) | set(self.records)
        unknown = wanted - set(FORMATS)
        if unknown:
            raise ValueError(f"unknown report format {', '.join(sorted(unknown))}: choose from {', '.join(FORMATS)}")
        return tuple(f for f in WRITE_ORDER if f in wanted)

    def path(self, directory: Path, fmt: str, stem: str | None = None) -> Path:
        """Where the registry's writer puts ``fmt``."""
        return Path(directory) / f"{stem or self.stem}{SUFFIXES[fmt]}"

    def write(self, result, directory: Path, formats: Sequence[str] | None = None,
              stem: str | None = None) -> dict[str, Path]:
        """Write ``result`` in every chosen format into ``directory`` (created): the job's own
        writer where it has one, else the registry's; returns every file written by name
        (the own writers' names, the format for the registry's)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        for fmt in self.chosen(formats):
            own = self.own.get(fmt)
            if own is not None:
                written.update(own(result, directory))
            else:
                written[fmt] = write_format(result, fmt, self.path(directory, fmt, stem))
        if self.extra is not None:
            written.update(self.extra(result, directory))
        return written

    def describe(self) -> str:
        """The default, for ``--format``'s help."""
        return ",".join(self.defaults) or "none"


# -- --format: one option for every job ----------------------------------------------------------

def parse_formats(text: str) -> tuple[str, ...]:
    """``junit,html`` -> (``junit``, ``html``); ArgumentTypeError naming an unknown one."""
    names = tuple(n.strip().lower() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(FORMATS)}, got {text!r}")
    unknown = [n for n in names if n not in FORMATS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown format {', '.join(map(repr, unknown))}: choose from "
                                         f"{', '.join(FORMATS)}")
    return names


def require_formats(formats: Sequence[str] | None) -> None:
    """:class:`~harness.errors.UsageError` for a ``--format`` naming no format of :data:`FORMATS`
    (the jobs check their options so, whoever calls them)."""
    unknown = [f for f in formats or () if f not in FORMATS]
    if unknown:
        raise UsageError(f"--format: unknown format {', '.join(map(repr, unknown))}: choose from {', '.join(FORMATS)}")


class _Formats(argparse.Action):
    """Repeated or comma-separated: every name once, in the order first given."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, None) or ()
        setattr(namespace, self.dest, tuple(dict.fromkeys((*before, *values))))


def add_format_arg(parser: argparse.ArgumentParser, *jobs: JobReports) -> None:
    """``--format`` (``args.formats``: a tuple, or None when not given): the one option every
    job's command takes to choose its report formats; ``jobs``: what the command writes (two
    for ``merge``: a check's shards or an accuracy run's)."""
    defaults = "; ".join(f"{j.job}: {j.describe()}" if len(jobs) > 1 else j.describe() for j in jobs)
    notes = "".join(f" {j.note}." for j in jobs if j.note)
    parser.add_argument("--format", dest="formats", action=_Formats, type=parse_formats, default=None,
                        metavar="FORMAT[,FORMAT]",
                        help=f"report formats to write, comma-separated or repeated, of {', '.join(FORMATS)}; junit "
                             "is JUnit XML for a CI's test tab, one test case per thing decided (a stage, a "
                             "hypothesis, a row, a point), a failure's message its one-line reason (default: the "
                             f"files written without --format: {defaults}).{notes}")


def formats_line(paths: Iterable[Path]) -> str:
    """``reports: a, b, c``: what a command says it wrote when ``--format`` was given."""
    return "reports: " + ", ".join(str(p) for p in paths)
