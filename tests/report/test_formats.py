"""The one report interface and the format registry, without a server: real check reports
(tests/runs.py) written in every format, the JUnit XML read back by junitparser, a real
consumer of it, as a CI's test tab reads it."""

import csv
import io
import json

import junitparser
import pytest

from harness.cli import build_parser
from harness.report import CHECK_REPORTS, write_reports
from harness.report.formats import FORMATS, WRITERS, JobReports, render_junit
from harness.results.interface import Case, JobResult, Status, one_line
from tests.runs import check_report, result


def read_junit(path_or_text) -> junitparser.JUnitXml:
    if isinstance(path_or_text, str) and path_or_text.lstrip().startswith("<?xml"):
        return junitparser.JUnitXml.fromstring(path_or_text)
    return junitparser.JUnitXml.fromfile(str(path_or_text))


def suite_of(xml: junitparser.JUnitXml) -> junitparser.TestSuite:
    suites = list(xml)
    assert len(suites) == 1, suites
    return suites[0]


def outcome(case: junitparser.TestCase) -> tuple[str, str | None]:
    """(failed / error / skipped / passed, the message) of a case as junitparser reads it."""
    for item in case.result:
        kind = {junitparser.Failure: "failed", junitparser.Error: "error", junitparser.Skipped: "skipped"}[type(item)]
        return kind, item.message
    return "passed", None


def diverged_report(**options):
    return check_report(result("a.jpg"), result("b.jpg", resize_error=80), result("c.jpg", margin=2.0, logit_swap=3.0),
                        result("t.jpg", logit_swap=0.05), **options)


def test_a_diverged_check_reads_back_as_failed_stages_with_their_reason():
    report = diverged_report()
    assert isinstance(report, JobResult) and report.job == "check" and not report.passed
    xml = read_junit(render_junit(report))
    suite = suite_of(xml)
    assert suite.name == "Consistency report: classify_dali vs the training reference"
    cases = {(c.classname, c.name): c for c in suite}
    stages = [name for (group, name) in cases if group == "check.classify_dali"]
    assert stages == ["decode", "resize", "crop", "input", "output", "topk"]
    kind, message = outcome(cases[("check.classify_dali", "resize")])
    assert kind == "failed"
    assert message.startswith("diverged (") and "worst image b.jpg" in message and "\n" not in message
    assert outcome(cases[("check.classify_dali", "decode")]) == ("passed", None)
    # each top-1 change is a case: beyond the tie margin it fails, within it (a tie) it passes
    flip, tie = cases[("check.classify_dali.changes", "c.jpg")], cases[("check.classify_dali.changes", "t.jpg")]
    assert outcome(flip)[0] == "failed" and "beyond the tie margin 0.5 logits" in outcome(flip)[1]
    assert outcome(tie)[0] == "passed"
    assert suite.failures == sum(outcome(c)[0] == "failed" for c in suite) >= 2 and suite.errors == 0
    assert suite.tests == len(report.cases())
    properties = {p.name: p.value for p in suite.properties()}
    assert properties == {"job": "check", "verdict": "diverged", "passed": "false"}


def test_fail_on_decides_which_cases_fail_and_passed_is_no_failing_case():
    for fail_on, passed in (("diverged", True), ("tie", False), ("close", False)):
        report = check_report(result("a.jpg"), result("t.jpg", logit_swap=0.05), fail_on=fail_on)
        assert report.passed is passed is (report.fails(fail_on) is False)
        assert report.passed is not any(c.fails for c in report.cases())
    aligned = check_report(result("a.jpg"), result("b.jpg"))
    assert aligned.passed and aligned.verdict == "equal"
    assert all(c.status is Status.PASSED for c in aligned.cases())


def test_entries_not_compared_are_skipped_and_one_sided_rejections_fail():
    from harness.result import ImageResult

    report = check_report(result("a.jpg"), ImageResult("notes.txt", error="not an image: no known signature"),
                          ImageResult("sub", error="a directory", skipped=True),
                          ImageResult("huge.png", error="pixel limit", rejected_by="deployment"))
    suite = suite_of(read_junit(render_junit(report)))
    cases = {c.name: outcome(c) for c in suite}
    assert cases["notes.txt"] == ("skipped", "failed: not an image: no known signature")
    assert cases["sub"] == ("skipped", "skipped: a directory")
    assert cases["huge.png"] == ("failed", "rejected by deployment: pixel limit")
    assert not report.passed and suite.skipped == 2


def test_a_stopped_run_is_an_error_case():
    report = check_report(result("a.jpg"), stopped="the server stopped answering (127.0.0.1:8001)")
    suite = suite_of(read_junit(render_junit(report)))
    run = next(c for c in suite if c.name == "run")
    assert outcome(run) == ("error", "the run stopped before every image: the server stopped answering (127.0.0.1:8001)")
    assert suite.errors == 1 and report.verdict == "stopped" and not report.passed


def test_hostile_names_stay_valid_xml():
    # An undecodable byte (surrogate-escaped), control characters and markup in names: still one
    # parseable document, each shown escaped, never as markup.
    name = "bad\udcff\x01\x1b[31m<b>&amp;\u2028.jpg"
    case = Case(name, "check.<x>", Status.FAILED, "line one\nline\x00two " + "x" * 600, "a\x07b\nc")
    assert case.reason.startswith("line one line") and len(case.reason) <= 400 and case.reason.endswith("...")

    class Hostile:
        job, title, verdict, passed = "check", "t\x0c<i>", "diverged", False

        def cases(self):
            return [case]

        def to_dict(self):
            return {}

    suite = suite_of(read_junit(render_junit(Hostile())))
    (parsed,) = list(suite)
    assert parsed.name == "bad\\xff\\x01\\x1b[31m<b>&amp;\\u2028.jpg" and parsed.classname == "check.<x>"
    assert outcome(parsed)[0] == "failed" and "\\x00" in outcome(parsed)[1] and suite.name == "t\\x0c<i>"


def test_every_format_of_a_check_and_the_records_it_always_writes(tmp_path):
    report = diverged_report()
    everything = write_reports(tmp_path / "all", report, formats=FORMATS)
    assert {p.name for p in everything.values()} == {"report.md", "report.html", "report.json", "report.csv",
                                                     "report.junit.xml"}
    # a check run: today's files by default; with --format, what it names and its records
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "per_image.csv").write_text("image\n")  # streamed by the run itself
    default = write_reports(run_dir, report, check_run=True)
    assert {k: p.name for k, p in default.items()} == {"json": "report.json", "markdown": "report.md",
                                                       "html": "report.html", "csv": "per_image.csv"}
    junit_only = write_reports(tmp_path / "junit", report, formats=("junit",), check_run=True)
    assert sorted(junit_only) == ["csv", "json", "junit"] and not (tmp_path / "junit" / "report.md").exists()
    assert CHECK_REPORTS.chosen(("junit",)) == ("json", "csv", "junit")


def test_the_registry_writers_read_any_job_through_the_interface(tmp_path):
    report = diverged_report()
    table = list(csv.DictReader(io.StringIO(WRITERS["csv"](report))))
    assert [r["name"] for r in table][:6] == ["decode", "resize", "crop", "input", "output", "topk"]
    assert table[1]["status"] == "failed" and table[1]["reason"].startswith("diverged (")
    markdown = WRITERS["md"](report)
    assert markdown.startswith("# Consistency report: classify_dali vs the training reference")
    assert "| check.classify_dali | resize | **failed** | diverged (" in markdown
    page = WRITERS["html"](report)
    assert "<td class=failed>failed</td>" in page and "<title>Consistency report" in page
    assert json.loads(WRITERS["json"](report))["first_divergent_stage"] == "resize"
    # a job with no writer of its own for a format gets the registry's, named after its stem
    reports = JobReports("demo", "demo", ("json",), {})
    written = reports.write(report, tmp_path, ("junit", "md"))
    assert {k: p.name for k, p in written.items()} == {"md": "demo.md", "junit": "demo.junit.xml"}
    assert suite_of(read_junit(written["junit"])).tests == len(report.cases())


def test_one_line_reasons():
    assert one_line("a\n  b\tc ") == "a b c"
    assert one_line("x" * 10, limit=8) == "xxxxx..."


@pytest.mark.parametrize("argv, formats", [
    (["check", "IMAGES", "--format", "junit,html"], ("junit", "html")),
    (["check", "IMAGES", "--format", "junit", "--format", "html", "--format", "junit"], ("junit", "html")),
    (["check", "IMAGES"], None),
    (["diagnose", "IMAGES", "--format", "JUnit"], ("junit",)),
    (["accuracy", "DATA", "--format", "csv"], ("csv",)),
    (["layers", "IMAGES", "--format", "md"], ("md",)),
    (["repeat", "IMAGES", "--format", "junit"], ("junit",)),
    (["preflight", "--format", "junit", "--report", "p.json"], ("junit",)),
    (["loadtest", "--format", "junit"], ("junit",)),
    (["merge", "A", "B", "--report", "OUT", "--format", "junit"], ("junit",)),
    (["compare", "A", "B", "--format", "junit"], ("junit",)),
])
def test_every_job_takes_format(argv, formats):
    assert build_parser().parse_args(argv).formats == formats


def test_an_unknown_format_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["check", "IMAGES", "--format", "junit,xml"])
    assert exit.value.code == 2 and "unknown format 'xml'" in capsys.readouterr().err


def test_a_load_test_point_that_failed_and_a_repeat_that_moved_carry_their_reason():
    import dataclasses

    from harness.layers.repeatability import RepeatResult, Spread
    from harness.verdict import Verdict
    from loadtest.sweep import SweepResult
    from tests.loadtest.test_report import result as point

    served = point("grpc", "classify_dali", 1, 90.0)
    broken = point("grpc", "classify_opencv", 1, 70.0, {"truncated JPEG": 3})
    broken = dataclasses.replace(broken, stats=dataclasses.replace(broken.stats, failed_photos=3))
    sweep = SweepResult([served, broken], [], {"date": "2026-11-26"})
    found = {c.name: outcome(c) for c in suite_of(read_junit(render_junit(sweep)))}
    assert found["classify_dali x1"] == ("passed", None)
    assert found["classify_opencv x1"] == ("failed", "3 good photos failed (errors: truncated JPEG 3)")
    assert sweep.verdict == "failed" and not sweep.passed and sweep.exit_status() == 1

    spreads = (Spread("classify_dali", "output", "a.jpg", 5, 0.0, 0, "-", Verdict.EQUAL),
               Spread("noisy", "output", "a.jpg", 5, 2.5, 1, "concurrent", Verdict.DIVERGED))
    repeat = RepeatResult(1, (2,), 2, spreads)
    found = {(c.classname, c.name): outcome(c) for c in suite_of(read_junit(render_junit(repeat)))}
    assert found[("repeat.classify_dali", "output")] == ("passed", None)
    assert found[("repeat.noisy", "output")] == (
        "failed", "diverged: 5 answers of 1 images, largest spread 2.5 (a.jpg, sent concurrent), top-1 changes 1")
    assert repeat.title == "Repeatability of classify_dali, noisy: 1 images, 1 rounds, batch sizes [2], 2 concurrent"


def test_preflight_format_needs_a_report_file_and_refuses_before_any_server():
    from harness.errors import UsageError
    from harness.preflight.job import PreflightOptions, run

    with pytest.raises(UsageError, match="--format: give --report FILE too"):
        run(PreflightOptions(formats=("junit",)))
    with pytest.raises(UsageError, match="unknown format 'xml'"):
        run(PreflightOptions(formats=("xml",), report=None))
