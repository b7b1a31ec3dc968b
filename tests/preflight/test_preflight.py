"""harness preflight against the real embedded server (cpu profile): everything it can
check without a GPU passes, and each check fails when what it guards is broken."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.client import TritonClient
from harness.manifest import load_manifest
from harness.preflight import FAIL, PASS, SKIP, passed, run_checks
from harness.preflight.known_answers import PHOTOS, KnownAnswers, load, record
from harness.preprocessing.dali_graph import production_arguments

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def known(server, repository, photos_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("known")
    with TritonClient(server.url("grpc"), "grpc") as client:
        record(client, [photos_dir / name for name in PHOTOS], out, production_arguments(repository))
    return out


def check(server, known_answers, manifest=None, in_server_env=True, repository=ROOT / "model_repository"):
    def factory():
        return TritonClient(server.url("grpc"), "grpc")

    with factory() as client:
        rows = run_checks(client, factory, manifest or load_manifest(), known_answers, repository=repository,
                          in_server_env=in_server_env, metrics_url=server.metrics_url)
    return {row.check: row for row in rows}, rows


def test_every_check_the_cpu_profile_allows_passes(server, known):
    by_name, rows = check(server, load(known))
    assert passed(rows), [r for r in rows if r.status == FAIL]
    for name in ("server version", "models ready", "DALI version", "Python version", "DALI operator schema",
                 "DALI pipelines serialize", "classifier engine: known input", "dali: decode", "dali: input",
                 "dali: output", "opencv: output", "dali: top-1", "opencv: top-1", "bad image fails only itself",
                 "dynamic batches form: validate_image", "dynamic batches form: preprocess_dali",
                 "dynamic batches form: classifier"):
        assert by_name[name].status == PASS, by_name[name]
    assert by_name["profile"].found == "cpu"
    assert "TensorRT version" not in by_name  # the cpu profile has none: not claimed either way


def test_a_served_tensor_that_moved_fails_its_stage(server, known):
    answers = load(known)
    photo = next(iter(answers.images))
    moved = {p: {pipeline: dict(stages) for pipeline, stages in answers.stages[p].items()} for p in answers.stages}
    moved[photo]["dali"]["input"] = moved[photo]["dali"]["input"] + 0.5  # 64 pixel levels
    by_name, rows = check(server, dataclasses.replace(answers, stages=moved))
    assert by_name["dali: input"].status == FAIL and photo in by_name["dali: input"].detail
    assert by_name["opencv: input"].status == PASS
    assert not passed(rows)


def test_versions_other_than_the_manifests_fail(server, known):
    manifest = load_manifest()
    drifted = dataclasses.replace(manifest, embedded=dataclasses.replace(manifest.embedded, version="2.49.0"),
                                  dali=dataclasses.replace(manifest.dali, version="1.44.0"))
    by_name, rows = check(server, load(known), manifest=drifted)
    assert by_name["server version"].status == FAIL and by_name["server version"].found == "2.51.0"
    assert by_name["DALI version"].status == FAIL
    assert not passed(rows)


def test_an_argument_the_servers_dali_lacks_fails_the_schema_row(server, known):
    answers = load(known)
    legacy = dataclasses.replace(answers, pipeline_arguments={**answers.pipeline_arguments,
                                                              "decoders__Image": ["adjust_orientation"]})
    by_name, _ = check(server, legacy)
    assert by_name["DALI operator schema"].status == FAIL
    assert by_name["DALI operator schema"].found == "decoders__Image.adjust_orientation"


def test_outside_the_server_environment_its_versions_are_skipped_not_passed(server, known):
    by_name, rows = check(server, load(known), in_server_env=False)
    assert "DALI version" not in by_name
    assert by_name["versions inside the server's image"].status == SKIP
    assert passed(rows)


def test_the_command_prints_a_table_and_exits_by_its_verdict(server, known, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "harness.preflight", "--url", server.url("grpc"), *map(str, args)],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)

    ok = run("--known-answers", known, "--in-server-env", "--metrics-url", server.metrics_url,
             "--report", tmp_path / "rows.json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "preflight PASSED" in ok.stdout and "bad image fails only itself" in ok.stdout
    assert (tmp_path / "rows.json").is_file()
    missing = run("--known-answers", tmp_path / "nothing")
    assert missing.returncode == 1 and "known answers" in missing.stdout and "FAIL" in missing.stdout
    unreachable = subprocess.run([sys.executable, "-m", "harness.preflight", "--url", "127.0.0.1:9", "--timeout", "2"],
                                 capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert unreachable.returncode == 2 and "not reachable" in unreachable.stderr


def test_known_answers_round_trip(known):
    answers = load(known)
    assert isinstance(answers, KnownAnswers) and list(answers.images) == list(PHOTOS)
    stages = answers.stages[PHOTOS[0]]
    assert set(stages) == {"dali", "opencv"}
    assert set(stages["dali"]) == {"decode", "resize", "crop", "input", "output"}
    assert stages["dali"]["decode"].dtype == np.uint8 and stages["dali"]["output"].shape == (1000,)
