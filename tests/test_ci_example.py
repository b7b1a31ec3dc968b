"""examples/ci/github-actions.yml, the deployment gate a team copies: linted by actionlint (the
GitHub Actions linter, with shellcheck on its ``run:`` steps), and every ``harness`` command
line in it parsed by the harness's own argument parser, its files where the publishing steps
look for them. Both linters are pinned binaries from PyPI wheels (the test extra)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from harness.cli import build_parser
from harness.report import CHECK_REPORTS

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
BIN = Path(sys.executable).parent
SERVER = "127.0.0.1:8001"
"""What the server step sets TRITON_URL to: the embedded server's gRPC port."""


def actionlint(path: Path) -> subprocess.CompletedProcess:
    # shellcheck by its pinned path and pyflakes off: the findings do not depend on what is on PATH.
    return subprocess.run([str(BIN / "actionlint"), "-no-color", "-oneline", f"-shellcheck={BIN / 'shellcheck'}",
                           "-pyflakes=", str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps() -> list[dict]:
    return [step for job in workflow()["jobs"].values() for step in job["steps"]]


def harness_commands() -> list[tuple[dict, list[str]]]:
    """(step, argv) of every ``harness`` command the steps run, lines continued with a
    backslash joined, the workflow's variables expanded as the shell would."""
    env = {**workflow()["env"], "TRITON_URL": SERVER}
    found = []
    for step in steps():
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            expanded = re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: env.get(m.group(1), m.group(0)), line)
            words = shlex.split(expanded, comments=True)
            if words[:1] == ["nohup"]:
                words = words[1:]
            if words and Path(words[0]).name == "harness":
                end = next((k for k, w in enumerate(words) if w in ("&", "|", "&&", ";") or ">" in w), len(words))
                found.append((step, words[:end]))
    return found


def test_actionlint_and_shellcheck_find_nothing():
    result = actionlint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_the_linters_do_run_on_it(tmp_path):
    # A copy with a misspelt input and an unquoted variable: both found, so the clean run above means something.
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("inputs.triton-url", "inputs.triton_url")
                      .replace('>> "$GITHUB_ENV"', ">> $GITHUB_ENV"))
    result = actionlint(broken)
    assert result.returncode == 1
    assert 'property "triton_url" is not defined' in result.stdout and "SC2086" in result.stdout, result.stdout


def test_every_harness_command_line_parses_and_the_gate_writes_what_is_published():
    commands = harness_commands()
    assert [argv[1] for _, argv in commands] == ["serve", "check"]
    parser = build_parser()
    parsed = [parser.parse_args(argv[1:]) for _, argv in commands]  # a bad option exits 2: the test fails
    (serve_step, _), (_, _) = commands
    serve, check = parsed
    assert f"TRITON_URL=127.0.0.1:{serve.grpc_port}" in serve_step["run"] and check.url == SERVER
    assert check.protocol == "grpc" and check.fail_on == "diverged"
    assert {"junit", "html"} <= set(check.formats)
    # the publishing steps read the very files the gate writes
    report_dir = Path(workflow()["env"]["REPORT_DIR"])
    assert check.report == report_dir
    uses = {step["uses"].split("@")[0]: step for step in steps() if "uses" in step}
    junit = uses["mikepenz/action-junit-report"]["with"]["report_paths"].replace("${{ env.REPORT_DIR }}", str(report_dir))
    assert Path(junit) == CHECK_REPORTS.path(report_dir, "junit")
    kept = uses["actions/upload-artifact"]["with"]["path"].replace("${{ env.REPORT_DIR }}", str(report_dir)).split()
    assert kept == [str(CHECK_REPORTS.path(report_dir, "junit")), str(report_dir / "report.html")]


def test_actions_are_pinned_to_version_tags():
    for step in steps():
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+(\.\d+){0,2}", step["uses"]), step["uses"]
