"""Validation at the edge (issue 25): every option and spec value `harness check` is given is
checked for type, range and finiteness before any work; each bad one ends the command with
exit status 2 and one line saying what is wrong, never a traceback."""

import os

import pytest

from harness.cli import main
from tests.conftest import copy_photos


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, ["baboon.jpg"], tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    (d / "binary.toml").write_bytes(bytes(range(256)) * 4)
    os.mkfifo(d / "fifo.toml")
    texts = {
        "extends_dir.toml": f'extends = "{d}"',
        "extends_number.toml": "extends = 5",
        "extends_zero.toml": 'extends = "/dev/zero"',
        "extends_fifo.toml": 'extends = "fifo.toml"',
        "nan_mean.toml": "[normalize]\nmean = [nan, 127.0, 127.0]",
        "bool_size.toml": "[resize]\nsize = true",
        "huge_resize.toml": "[resize]\nsize = 100000",
        "string_flag.toml": '[decode]\nexif_orientation = "yes"',
        "nan_tolerance.toml": "[tolerances.resize]\natol = nan",
        "negative_tolerance.toml": "[tolerances.output]\natol = -1.0",
        "section_number.toml": "resize = 5",
        "bad_recipe.toml": '[reference]\nrecipe = "nope"',
    }
    for name, text in texts.items():
        (d / name).write_text(text + "\n")
    (d / "big.toml").write_text("# " + "x" * (2 ** 20 + 10))
    return d


def run(capsys, *args) -> tuple[int, str]:
    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's refusals exit from inside
        status = exc.code
    return status, capsys.readouterr().err


def assert_refused(status: int, err: str, *expected: str) -> None:
    assert "Traceback" not in err, err
    assert status == 2, err
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and err.strip().endswith(lines[0].strip()), err  # one line, the last
    for text in expected:
        assert text in err, err


SPEC_CASES = {
    "binary.toml": "not a text file",
    "fifo.toml": "not a regular file (a FIFO)",
    "extends_dir.toml": "not a regular file (a directory)",
    "extends_number.toml": "'extends' must be the path of another spec",
    "extends_zero.toml": "not a regular file (a character device)",
    "extends_fifo.toml": "not a regular file (a FIFO)",
    "nan_mean.toml": "mean must be finite numbers",
    "bool_size.toml": "size must be finite numbers, got True",
    "huge_resize.toml": "larger than 8192 pixels a side",
    "string_flag.toml": "exif_orientation must be true or false",
    "nan_tolerance.toml": "atol must be a finite number >= 0",
    "negative_tolerance.toml": "atol must be a finite number >= 0",
    "section_number.toml": "[resize] must be a table",
    "bad_recipe.toml": "reference.recipe = 'nope'",
    "big.toml": "spec file larger than",
}


@pytest.mark.parametrize("spec", sorted(SPEC_CASES))
def test_a_bad_spec_is_refused_in_one_line(capsys, images, specs, tmp_path, spec):
    status, err = run(capsys, "check", images, "--spec", specs / spec, "--report", tmp_path / "r")
    assert_refused(status, err, SPEC_CASES[spec])
    assert not (tmp_path / "r").exists()  # refused before any work


def test_a_spec_at_dev_zero_is_not_read(capsys, images, tmp_path):
    assert_refused(*run(capsys, "check", images, "--spec", "/dev/zero", "--report", tmp_path / "r"),
                   "not a regular file (a character device)")


OPTION_CASES = [
    (("--workers", "0"), "argument --workers: must be at least 1"),
    (("--workers", "-3"), "argument --workers: must be at least 1"),
    (("--workers", "many"), "argument --workers: must be a whole number, got 'many'"),
    (("--retries", "-1"), "argument --retries: must be at least 0"),
    (("--timeout", "0"), "argument --timeout: must be at least 0.1"),
    (("--timeout", "-5"), "argument --timeout: must be at least 0.1"),
    (("--timeout", "0.001"), "argument --timeout: must be at least 0.1"),
    (("--timeout", "nan"), "argument --timeout: must be a finite number"),
    (("--timeout", "inf"), "argument --timeout: must be a finite number"),
    (("--tie-margin", "nan"), "argument --tie-margin: must be a finite number"),
    (("--tie-margin", "-1"), "argument --tie-margin: must be at least 0"),
    (("--top-k", "0"), "argument --top-k: must be at least 1"),
    (("--memory-budget", "0"), "argument --memory-budget: must be at least 1"),
    (("--url", "http://127.0.0.1:8001"), "--url takes host:port, not a URL: drop 'http://'"),
    (("--url", "127.0.0.1"), "--url must be host:port"),
    (("--url", "127.0.0.1:70000"), "--url must be host:port"),
    (("--protocol", "ftp"), "argument --protocol: invalid choice"),
    (("--fail-on", "never"), "argument --fail-on: invalid choice"),
    (("--reference", "/nonexistent/mine.py:fn"), "not found"),
    (("--repository", "/nonexistent"), "/nonexistent: no such model repository"),
]


@pytest.mark.parametrize("option,expected", OPTION_CASES, ids=[" ".join(c[0]) for c in OPTION_CASES])
def test_a_bad_option_is_refused_in_one_line(capsys, images, tmp_path, option, expected):
    status, err = run(capsys, "check", images, "--report", tmp_path / "r", *option)
    assert_refused(status, err, expected)


def test_a_report_path_that_is_a_file_and_a_reference_that_does_not_load(capsys, server, images, tmp_path):
    (tmp_path / "file").write_text("x")
    assert_refused(*run(capsys, "check", images, "--url", server.grpc_url, "--report", tmp_path / "file"),
                   "is a file, not a directory")
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert_refused(*run(capsys, "check", images, "--url", server.grpc_url, "--report", tmp_path / "r",
                        "--reference", f"{tmp_path / 'broken.py'}:f"))


def test_the_metrics_port_is_not_taken_for_the_server(capsys, server, images, tmp_path):
    metrics = f"127.0.0.1:{server.metrics_port}"
    assert_refused(*run(capsys, "check", images, "--url", metrics, "--protocol", "http", "--report", tmp_path / "a"),
                   "not as a Triton server", "metrics port")
    assert_refused(*run(capsys, "check", images, "--url", metrics, "--report", tmp_path / "b"),
                   "not reachable or not ready")
