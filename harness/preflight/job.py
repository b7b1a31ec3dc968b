"""``harness preflight`` as a job: :func:`run` takes :class:`PreflightOptions` and returns a
:class:`PreflightResult` whose :meth:`~PreflightResult.exit_status` is the harness's one
policy (:mod:`harness.errors`); the command lines (``harness preflight`` and ``python3 -m
harness.preflight``, :mod:`harness.preflight.cli`) only parse into these and print.

Imports what :mod:`harness.preflight` does (numpy, tritonclient, the standard library): it runs
in the Triton image too.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, ClassVar

from harness.client import TritonClient
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.files import strict_json, write_atomic
from harness.manifest import MANIFEST_PATH, Manifest, ManifestError, decode_stack_versions, load_manifest
from harness.paths import BUILD_DIR, DEFAULT_REPOSITORY
from harness.preflight import FAIL, PASS, SKIP, known_answers, profile_of, run_checks
from harness.preflight.known_answers import declared, record, record_dir, serves
from harness.report.formats import JobReports, require_formats
from harness.results.interface import Case, Status

DEFAULT_KNOWN_ANSWERS = BUILD_DIR / "preflight"
DEFAULT_TIMEOUT = 60.0
"""Seconds per request (``--timeout``)."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class PreflightOptions:
    """What a preflight is asked to do; defaults are the command line's."""

    url: str | None = None
    """``host:port`` of the server; None: the embedded server (cpu profile) is started."""
    protocol: str = "grpc"
    metrics_url: str | None = None
    """Triton's metrics endpoint (None: port 8002 of ``url``'s host, or the embedded server's)."""
    manifest: Path = MANIFEST_PATH
    known_answers: Path = DEFAULT_KNOWN_ANSWERS
    repository: Path = DEFAULT_REPOSITORY
    in_server_env: bool = False
    """This process runs in the server's own environment: its versions and DALI schema are checked too."""
    record: bool = False
    """Record the server's known answers and stop."""
    report: Path | None = None
    """Also write the rows to this JSON file."""
    timeout: float = DEFAULT_TIMEOUT
    photos: Path | None = None
    """With ``record``: read the known-answer photos from this folder (``make setup``: data/photos);
    None: take the very bytes the cpu record in ``known_answers`` holds (every later record does)."""
    task: str | None = None
    """``--task``: the deployment serves this task too (its models are checked ready; for
    ``detection``, its engine and its known answers too)."""
    formats: tuple[str, ...] | None = None
    """``--format``: the formats written beside ``report``, named after it (None: ``report``
    alone, the rows as JSON, as always)."""


@dataclass(frozen=True)
class PreflightResult:
    """A finished preflight: the rows of a check, or (``--record``) where the record went."""

    manifest: Manifest
    profile: str
    rows: tuple = ()
    """The :class:`~harness.preflight.Row` of every check, in order."""
    recorded: Path | None = None
    """With ``--record``: the record's metadata file (the record is in its folder)."""
    photos: int = 0
    """With ``--record``: how many photos were recorded."""

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)

    # -- the report interface (harness.results.interface) --

    job: ClassVar[str] = "preflight"

    @property
    def title(self) -> str:
        return f"Preflight: the {self.profile} deployment against Triton {self.manifest.release} and the known answers"

    @property
    def verdict(self) -> str:
        """``passed``, ``failed``, ``nothing checked`` (every check skipped) or ``recorded``."""
        if self.recorded is not None:
            return "recorded"
        return "failed" if self.count(FAIL) else "passed" if self.count(PASS) else "nothing checked"

    @property
    def passed(self) -> bool:
        """Exit status 0: the record written, or every check passed (and one did)."""
        return self.verdict in ("passed", "recorded")

    def cases(self) -> list[Case]:
        """One case per row: a failed row fails with what was expected and found, a skipped
        row is skipped with why, a printed (``info``) row passes with what was found; an error
        when every check was skipped; after ``--record``, where the record went."""
        if self.recorded is not None:
            return [Case("record", "preflight", Status.PASSED,
                         f"known answers of {self.photos} photos recorded from the {self.profile} profile in "
                         f"{self.recorded.parent}")]
        cases = []
        for row in self.rows:
            against = f" (against the {row.record} record)" if row.record else ""
            found = f"found {row.found}" if row.found else ""
            if row.status == FAIL:
                status = Status.FAILED
                reason = "; ".join(x for x in (f"expected {row.expected}" if row.expected else "", found, row.detail) if x)
            elif row.status == SKIP:
                status, reason = Status.SKIPPED, row.detail or "not checked here"
            else:
                status = Status.PASSED
                reason = "; ".join(x for x in ("" if row.status == PASS else "printed, not judged", found, row.detail) if x)
            cases.append(Case(row.check, f"preflight.{self.profile}", status, reason + against,
                              "\n".join(f"{k}: {v}" for k, v in (("expected", row.expected), ("found", row.found),
                                                                   ("detail", row.detail)) if v)))
        if not self.count(FAIL) and not self.count(PASS):
            cases.append(Case("checks", "preflight", Status.ERROR, "preflight checked nothing: every check was skipped"))
        return cases

    def to_dict(self) -> dict:
        return {"profile": self.profile, "verdict": self.verdict, "passed": self.passed,
                "recorded": str(self.recorded) if self.recorded is not None else None, "photos": self.photos,
                "rows": [asdict(r) for r in self.rows]}

    def exit_status(self) -> int:
        """0 every check passed (or the record was written), 1 one failed; raises
        :class:`~harness.errors.NothingCompared` (status 2) when no check could pass."""
        if self.recorded is not None:
            return EXIT_OK
        if self.count(FAIL):
            return EXIT_FOUND
        if not self.count(PASS):
            raise NothingCompared("preflight checked nothing: every check was skipped")
        return EXIT_OK


def run(options: PreflightOptions, log: Callable[[str], None] = _stderr) -> PreflightResult:
    """Check the server (``options.url``, or an embedded one started for the run) against the
    manifest and the known answers, or record its known answers (``options.record``); write
    ``options.report``. Raises :class:`~harness.errors.UsageError` for a manifest it cannot
    read, a server not ready, missing photos or an unwritable record; ``log`` gets warnings."""
    require_formats(options.formats)
    if options.formats is not None and options.report is None:
        raise UsageError("--format: give --report FILE too: the files are written beside it, named after it")
    try:
        manifest = load_manifest(options.manifest)
    except ManifestError as exc:
        raise UsageError(str(exc)) from None
    images = photos_to_record(options) if options.record else None  # before a server starts for nothing
    with contextlib.ExitStack() as stack:
        url, metrics_url = options.url, options.metrics_url
        if url and not metrics_url:
            metrics_url = f"http://{url.rsplit(':', 1)[0]}:8002/metrics"
        if not url:  # never in the Triton image (there, the server's url is given)
            from harness.session import embedded_server

            server = stack.enter_context(embedded_server(options.repository, log=log))
            url, metrics_url = server.url(options.protocol), server.metrics_url

        def client_factory():
            return TritonClient(url, options.protocol, timeout=options.timeout)

        client = stack.enter_context(client_factory())
        if not client.is_ready():
            raise UsageError(f"Triton server at {url} ({options.protocol}) is not reachable or not ready")
        profile = profile_of(client)
        if options.record:
            recorded = _record(client, options, manifest, profile, images)
            if options.formats is not None:
                write_preflight_reports(recorded, options.report, options.formats)
            return recorded
        try:
            known = known_answers.load(options.known_answers)
        except FileNotFoundError as exc:
            log(f"warning: {exc}")
            known = None
        own_dir = known_answers.record_dir(options.known_answers, profile)
        own = known_answers.load(own_dir) if profile != "cpu" and (own_dir / known_answers.META).is_file() else None
        rows = run_checks(client, client_factory, manifest, known, repository=options.repository,
                          in_server_env=options.in_server_env, metrics_url=metrics_url, own=own, task=options.task)
    result = PreflightResult(manifest, profile, tuple(rows))
    if options.report:
        write_preflight_reports(result, options.report, options.formats)
    return result


def preflight_reports(report: Path):
    """What a preflight writes with ``--report FILE`` (:class:`~harness.report.formats.JobReports`):
    FILE, its rows as JSON (as always); the other formats beside it, named after it
    (``FILE-STEM.junit.xml``)."""
    def json_file(result: PreflightResult, directory: Path) -> dict[str, Path]:
        write_atomic(report, strict_json([asdict(r) for r in result.rows], indent=2) + "\n")
        return {"json": report}

    return JobReports("preflight", report.stem, ("json",), {"json": json_file},
                      note="With --report FILE: FILE holds the rows as JSON, the other formats go beside it, named "
                           "after it (FILE-STEM.junit.xml)")


def write_preflight_reports(result: PreflightResult, report: Path, formats=None) -> dict[str, Path]:
    """``result`` in ``formats`` (None: ``report`` alone) beside ``report`` (its folder created)."""
    return preflight_reports(report).write(result, report.parent, formats)


def _record(client, options: PreflightOptions, manifest: Manifest, profile: str,
            images: tuple[dict[str, bytes], dict[str, dict[str, bytes]]] | None = None) -> PreflightResult:
    """Record ``images`` (default: :func:`photos_to_record`: the classification photos and each
    task's known-result photos) from the server into the record of its ``profile``; a task's
    known results only where the server serves its ensembles."""
    from harness.preprocessing.dali_graph import production_arguments  # here: loads DALI only when called

    images, result_images = photos_to_record(options) if images is None else images
    out = record_dir(options.known_answers, profile)
    versions = decode_stack_versions() if options.in_server_env or profile == "cpu" else {}
    served = {known.name: result_images.get(known.name, {}) for known in declared() if serves(client, known)}
    try:
        path = record(client, images, out, production_arguments(options.repository), profile, versions, served)
    except OSError as exc:
        raise UsageError(f"cannot write the {profile} record to {out}: {exc.strerror or exc} "
                         "(in compose, build/preflight must be mounted writable to record)") from None
    return PreflightResult(manifest, profile, recorded=path, photos=len(images))


def photos_to_record(options: PreflightOptions) -> tuple[dict[str, bytes], dict[str, dict[str, bytes]]]:
    """Name -> file bytes of the photos ``--record`` sends: the classification photos, and each
    task's known-result photos (by :attr:`KnownResults.name`): from ``options.photos``, else the
    very bytes of the cpu record in ``options.known_answers`` (so a GPU host's record and the cpu
    one answer for the same files; the Triton image has no data/photos; a task's photos the cpu
    record lacks are not sent)."""
    try:
        if options.photos is not None:
            return (known_answers.read_photos(options.photos),
                    {known.name: known_answers.read_photos(options.photos, known.photos) for known in declared()})
        cpu = known_answers.load(options.known_answers)
        return cpu.images, cpu.result_images
    except FileNotFoundError as exc:
        if options.photos is not None:
            raise UsageError(str(exc)) from None
        raise UsageError(f"no cpu record in {options.known_answers} to take the known-answer photos from: record it "
                         "first from a checkout (make setup: harness preflight --record --photos data/photos)") from None
