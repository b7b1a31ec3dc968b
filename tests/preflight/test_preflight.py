"""harness preflight against the real embedded server (cpu profile): everything it can
check without a GPU passes, and each check fails when what it guards is broken. The GPU
host's records are exercised with records of real decoders: this server's own (drift rule)
and one whose DALI stages another decoder or a planted cause produced (decoder rule)."""

import dataclasses
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.client import TritonClient
from harness.compare.tolerance import tolerances_for
from harness.manifest import decode_stack_versions, load_manifest
from harness.preflight import FAIL, INFO, PASS, SKIP, known_answer_rows, passed, run_checks
from harness.preflight.known_answers import META, PHOTOS, KnownAnswers, load, read_photos, record
from harness.preprocessing.dali_graph import production_arguments
from harness.reference import TorchvisionRecipe
from harness.reference.custom import CallableRecipe, load_object
from harness.reference.model import OnnxModel
from harness.spec import with_overrides
from tests.conftest import encode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def known(server, repository, photos_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("known")
    with TritonClient(server.url("grpc"), "grpc") as client:
        record(client, read_photos(photos_dir), out, production_arguments(repository))
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
    for name in ("server version", "models ready", "DALI version", "Python version", "numpy version", "DALI operator schema",
                 "DALI pipelines serialize", "classifier engine: known input", "dali: decode", "dali: input",
                 "dali: output", "opencv: output", "dali: top-1", "opencv: top-1", "bad image fails only itself",
                 "dynamic batches form: validate_image", "dynamic batches form: preprocess_dali",
                 "dynamic batches form: classifier"):
        assert by_name[name].status == PASS, by_name[name]
    assert by_name["profile"].found == "cpu"
    assert "TensorRT version" not in by_name  # the cpu profile has none: not claimed either way
    # its own record: the drift rule, and the table says which record
    assert by_name["dali: decode"].record == "cpu" and "drift rule" in by_name["dali: decode"].expected
    # the decode stack is printed beside the pins, never judged
    manifest, found = load_manifest(), decode_stack_versions()
    for name, pin in (("nvImageCodec version", manifest.nvimgcodec), ("nvJPEG version", manifest.nvjpeg)):
        assert by_name[name].status == INFO and by_name[name].expected == pin.version
        assert by_name[name].found == found[name.split()[0]] and pin.version.startswith(by_name[name].found + ".")


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
                                  dali=dataclasses.replace(manifest.dali, version="1.44.0"),
                                  numpy=dataclasses.replace(manifest.numpy, version="2.2.6"))
    by_name, rows = check(server, load(known), manifest=drifted)
    assert by_name["server version"].status == FAIL and by_name["server version"].found == "2.51.0"
    assert by_name["DALI version"].status == FAIL
    # the numpy a shadowing folder would bring is named, with where it was found
    assert by_name["numpy version"].status == FAIL and by_name["numpy version"].found == np.__version__
    assert by_name["numpy version"].detail == f"from {Path(np.__file__).parent.parent}"
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


# -- a GPU host's records, on the cpu profile ---------------------------------------------

@pytest.fixture(scope="module")
def model(repository):
    return OnnxModel(repository / "classifier" / "model.onnx")


def decoded_by(answers: KnownAnswers, recipe, model, profile: str) -> KnownAnswers:
    """The record with its DALI stages and logits from ``recipe`` (another decoder, or a
    planted cause) and the model: the record of a deployment that decodes so."""
    stages = {}
    for photo, data in answers.images.items():
        reference = recipe(data)
        reference["output"] = model.logits(reference["input"][None])[0]
        stages[photo] = {**answers.stages[photo], "dali": reference}
    return dataclasses.replace(answers, stages=stages, profile=profile)


def pillow(repository):
    return CallableRecipe(load_object(f"{repository.parent / 'specs' / 'decoder_difference.py'}:pillow_ycbcr"), "pillow")


def rows_against(server, spec, known, own=None, tolerances=None):
    with TritonClient(server.url("grpc"), "grpc") as client:
        rows = known_answer_rows(client, known, tolerances or tolerances_for(spec.preprocess, spec.tolerances),
                                 tolerances_for(spec.preprocess, drift=True), "cpu", own)
    return {row.check: row for row in rows}, rows


def test_another_decoders_record_is_held_to_the_decoder_rule(server, spec, repository, known, model):
    # what a GPU host sees before it has a record of its own: its answers against the cpu
    # record; here the other way round, this server against a record a Pillow decode made
    other = decoded_by(load(known), pillow(repository), model, "pillow")
    by_name, rows = rows_against(server, spec, other)
    assert passed(rows), [r for r in rows if r.status == FAIL]
    decode = by_name["dali: decode"]
    assert decode.found == "close" and decode.record == "pillow" and "decoder rule" in decode.expected
    assert by_name["cpu record"].status == SKIP and "--record" in by_name["cpu record"].detail
    assert by_name["opencv: decode"].found == "equal"  # the OpenCV pipeline's record is this server's
    # the strict rule fails the same healthy difference: the rule is what lets it pass
    strict, _ = rows_against(server, spec, other, tolerances=tolerances_for(spec.preprocess, drift=True))
    assert strict["dali: resize"].status == FAIL


def test_a_host_with_its_own_record_is_held_to_it_and_its_record_to_the_other(server, spec, repository, known, model):
    own = load(known)  # recorded from this very server into tmp_path by the fixture
    other = decoded_by(own, pillow(repository), model, "pillow")
    by_name, rows = rows_against(server, spec, other, own=own)
    assert passed(rows), [r for r in rows if r.status == FAIL]
    assert by_name["dali: decode"].found == "equal" and by_name["dali: decode"].record == "cpu"
    assert "drift rule" in by_name["dali: decode"].expected
    assert by_name["record dali: decode"].found == "close" and by_name["record dali: decode"].record == "cpu vs pillow"
    assert "decoder rule" in by_name["record dali: decode"].expected and "cpu record" not in by_name


def test_a_planted_cause_in_the_other_record_still_fails_its_stage(server, spec, known, model):
    # a deployment that resizes with antialiasing (torchvision on PIL): diverged at resize
    planted = decoded_by(load(known), TorchvisionRecipe(with_overrides(spec.preprocess, resize={"antialias": True})),
                         model, "antialias")
    for own in (None, load(known)):
        by_name, rows = rows_against(server, spec, planted, own=own)
        prefix = "record " if own else ""
        assert by_name[f"{prefix}dali: resize"].status == FAIL, by_name[f"{prefix}dali: resize"]
        assert by_name[f"{prefix}dali: decode"].status == PASS and not passed(rows)


def test_record_writes_the_profile_and_versions_and_refuses_an_unwritable_place(server, photos_dir, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "harness.preflight", "--url", server.url("grpc"), *map(str, args)],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)

    recorded = run("--record", "--known-answers", tmp_path / "rec", "--photos", photos_dir)  # as make setup does
    assert recorded.returncode == 0 and "from the cpu profile" in recorded.stdout, recorded.stderr
    answers = load(tmp_path / "rec")  # the cpu profile's record is the folder itself
    assert answers.profile == "cpu" and answers.versions["server"] == "2.51.0"
    # the recording process's own DALI decode stack (this process's may be torchvision's
    # bundled nvJPEG, if a test imported it first): the virtualenv's pin
    assert load_manifest().nvjpeg.version.startswith(answers.versions["nvJPEG"] + ".")
    assert answers.images == read_photos(photos_dir)
    (tmp_path / "file").write_text("not a folder")
    refused = run("--record", "--known-answers", tmp_path / "file", "--photos", photos_dir)
    assert refused.returncode == 2 and "cannot write the cpu record" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "file" / META).exists()


def test_a_gpu_record_is_made_from_the_bytes_the_cpu_record_holds(server, photos_dir, tmp_path):
    # The cpu record of re-encoded photos (bytes data/photos does not hold): a record made
    # without --photos, as `docker compose run --rm preflight --record` makes the GPU host's,
    # answers for those very bytes, and lands in gpu/ beside the cpu record, which stays.
    from harness.preflight.job import PreflightOptions, _record

    reencoded = {name: encode(Image.open(io.BytesIO(data)).convert("RGB"), quality=70)
                 for name, data in read_photos(photos_dir).items()}
    assert all(reencoded[name] != data for name, data in read_photos(photos_dir).items())
    with TritonClient(server.url("grpc"), "grpc") as client:
        record(client, reencoded, tmp_path, production_arguments(ROOT / "model_repository"))
        options = PreflightOptions(url=server.url("grpc"), known_answers=tmp_path, record=True)
        result = _record(client, options, load_manifest(), "gpu")
    assert result.recorded == tmp_path / "gpu" / META and result.photos == len(PHOTOS)
    gpu, cpu = load(tmp_path / "gpu"), load(tmp_path)
    assert gpu.profile == "gpu" and cpu.profile == "cpu"
    assert gpu.images == cpu.images == reencoded


def test_record_without_a_cpu_record_or_photos_is_one_clean_line(server, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "harness.preflight", "--url", server.url("grpc"), "--record",
                               *map(str, args)], capture_output=True, text=True, timeout=300, cwd=ROOT)

    for args, message in ((("--known-answers", tmp_path / "empty"), "no cpu record in"),
                          (("--known-answers", tmp_path / "k", "--photos", tmp_path / "nowhere"),
                           "known-answer photos missing")):
        refused = run(*args)
        assert refused.returncode == 2, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert message in line, line
    assert not (tmp_path / "empty").exists() and not (tmp_path / "k").exists()


def test_a_request_the_server_refuses_is_a_failed_row_and_the_other_photos_are_compared(server, spec, known):
    answers = load(known)
    photo = PHOTOS[1]
    cut = dataclasses.replace(answers, images={**answers.images, photo: answers.images[photo][:2000]})
    by_name, rows = rows_against(server, spec, cut)
    for pipeline in ("dali", "opencv"):
        request = by_name[f"{pipeline}: request"]
        assert request.status == FAIL and request.detail.startswith(f"{photo}: "), request
        assert by_name[f"{pipeline}: decode"].status == PASS  # the other three photos
        assert by_name[f"{pipeline}: top-1"].found == f"3 of {len(PHOTOS)}"
    assert not passed(rows)


def test_the_exit_status_is_the_harness_policy():
    from harness.errors import NothingCompared, exit_status_of
    from harness.preflight import Row
    from harness.preflight.job import PreflightResult

    manifest = load_manifest()
    assert PreflightResult(manifest, "cpu", (Row("a", PASS), Row("b", SKIP))).exit_status() == 0
    assert PreflightResult(manifest, "cpu", (Row("a", PASS), Row("b", FAIL))).exit_status() == 1
    assert PreflightResult(manifest, "cpu", recorded=Path("rec/known_answers.json"), photos=4).exit_status() == 0
    with pytest.raises(NothingCompared) as nothing:
        PreflightResult(manifest, "cpu", (Row("a", SKIP), Row("b", INFO))).exit_status()
    assert exit_status_of(nothing.value) == 2


def test_the_engine_rows_read_the_builders_stamp(tmp_path):
    import importlib.util
    import json

    from harness.preflight import engine_rows

    module_spec = importlib.util.spec_from_file_location("build_engine", ROOT / "docker" / "build_engine.py")
    builder = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(builder)
    manifest, onnx, stamp = load_manifest(), ROOT / "model_repository" / "classifier" / "model.onnx", tmp_path / "stamp.json"

    def rows_for(fp16: bool, drop_no_tf32: bool = False) -> dict:
        cmd = builder.trtexec_command("trtexec", onnx, tmp_path / "model.plan", "input", [3, 224, 224], 64, 8, fp16,
                                      manifest.tensorrt_major)
        built = builder.engine_stamp(onnx, cmd, "NVIDIA H100 80GB HBM3", manifest.tensorrt.version,
                                     builder.precision(fp16, manifest.tensorrt_major))
        if drop_no_tf32:  # a stamp of a build made before the builder turned TF32 off
            built = {k: v for k, v in built.items() if k != "precision"} | {
                "command": [a for a in built["command"] if a != "--noTF32"]}
        stamp.write_text(json.dumps(built))
        return {row.check: row for row in engine_rows(stamp, manifest)}

    fp32 = rows_for(False)
    assert fp32["engine built by"].status == PASS and fp32["engine built by"].detail == "on NVIDIA H100 80GB HBM3"
    assert fp32["engine precision"].status == PASS and fp32["engine precision"].found == "fp32 (TF32 off)"
    fp16 = rows_for(True)["engine precision"]
    assert fp16.status == PASS and fp16.found.startswith("fp16 (strongly typed from model_fp16.onnx")
    old = rows_for(False, drop_no_tf32=True)["engine precision"]
    assert old.status == FAIL and old.found == "not in the stamp" and "TF32" in old.detail
    stamp.unlink()
    assert [row.status for row in engine_rows(stamp, manifest)] == [SKIP]


# -- the hardware JPEG engine (hw_decoder_load) ------------------------------------------

def cpu_decode(batch, decode_spec):
    """DALI's CPU decoder, which takes hw_decoder_load and ignores it."""
    from harness.preprocessing.dali_graph import decode_images

    return decode_images(batch, decode_spec, device="cpu", device_id=None)


def engine_without_fancy_upsampling(batch, decode_spec):
    """A decode whose share above 0 goes to an engine that ignores jpeg_fancy_upsampling:
    libjpeg-turbo's fast upsampling (simplejpeg), the suspected hardware engine behaviour."""
    from harness.reference.decoders import decode_with_switches

    if decode_spec.hw_decoder_load == 0:
        return cpu_decode(batch, decode_spec)
    return [decode_with_switches(data, dataclasses.replace(decode_spec, fancy_upsampling=False)) for data in batch]


def test_the_hardware_decoder_row_names_the_spec_setting_when_the_engine_differs(known, spec):
    from harness.preflight import HARDWARE_DECODER_COPIES, hardware_decoder_row

    images, decode = load(known).images, spec.preprocess.decode
    tolerance = tolerances_for(spec.preprocess, spec.tolerances)["decode"]
    calls = []

    def counted(batch, decode_spec):
        calls.append((len(batch), decode_spec.hw_decoder_load))
        return cpu_decode(batch, decode_spec)

    same = hardware_decoder_row(images, decode, tolerance, counted)
    assert same.status == PASS and same.found == "equal", same
    # the pipeline's own setting (DALI's default here) against 0, every photo several times in one batch
    assert calls == [(len(images) * HARDWARE_DECODER_COPIES, 0.0), (len(images) * HARDWARE_DECODER_COPIES, None)]
    differs = hardware_decoder_row(images, decode, tolerance, engine_without_fancy_upsampling)
    assert differs.status == FAIL and differs.found == "diverged"
    assert "set decode.hw_decoder_load = 0" in differs.detail and differs.detail.startswith("worst ")
    off = hardware_decoder_row(images, dataclasses.replace(decode, hw_decoder_load=0.0), tolerance,
                               engine_without_fancy_upsampling)
    assert off.status == PASS and off.found == "diverged" and "keeps it off" in off.detail

    def broken(batch, decode_spec):
        raise RuntimeError("nvImageCodec: decoding failed\n  long traceback")

    failed = hardware_decoder_row(images, decode, tolerance, broken)
    assert failed.status == FAIL and failed.detail == "RuntimeError: nvImageCodec: decoding failed"


def test_without_a_gpu_the_hardware_decoder_row_is_skipped_not_passed(known, repository):
    from harness.preflight import environment_rows

    by_name = {row.check: row for row in environment_rows(load_manifest(), "gpu", repository, load(known))}
    row = by_name["hardware JPEG decoder"]
    assert row.status == SKIP and "no GPU visible" in row.detail


@pytest.fixture
def embedding_known_results():
    """A task of the test's own (the repository's embed_* ensembles as its deployment) that
    declares known results, registered for the test only: preflight records and checks them
    without a line of its own about the task."""
    from harness.task import TASKS, get_task
    from harness.task_api import KnownCheck, KnownResults

    class Retrieval(type(get_task("embedding"))):
        name = "retrieval"
        known_results = KnownResults("retrieval", "embed", ("fruits.jpg",), ("EMBEDDING",), "the embedder")

        def check_known_results(self, served, recorded, failed, repository, prefix=""):
            return [KnownCheck(f"{prefix}retrieval {pipeline}: embedding",
                               all((p, pipeline) not in failed and np.allclose(served[p][pipeline]["EMBEDDING"],
                                                                                 answers[pipeline]["EMBEDDING"], atol=1e-4)
                                   for p, answers in recorded.items()), "within 1e-4")
                    for pipeline in ("dali", "opencv")]

    task = TASKS.add(Retrieval(), "tests/preflight/test_preflight.py:Retrieval")
    try:
        yield task
    finally:
        del TASKS._places["retrieval"]
        TASKS._tasks.pop("retrieval", None)


def test_a_tasks_own_known_results_are_recorded_and_held_by_its_own_check(server, photos_dir, tmp_path,
                                                                          embedding_known_results):
    from harness.preflight import known_result_rows
    from harness.preflight.job import PreflightOptions, run

    run(PreflightOptions(url=server.url("grpc"), known_answers=tmp_path, record=True, photos=photos_dir))
    known = load(tmp_path)
    assert list(known.result_images["retrieval"]) == ["fruits.jpg"]
    assert known.results["retrieval"]["fruits.jpg"]["dali"]["EMBEDDING"].shape == (1280,)
    with TritonClient(server.url("grpc"), "grpc") as client:
        rows = known_result_rows(client, known, embedding_known_results, ROOT / "model_repository")
        assert [(r.check, r.status, r.record) for r in rows] == [("retrieval dali: embedding", PASS, "cpu"),
                                                                 ("retrieval opencv: embedding", PASS, "cpu")]
        known.results["retrieval"]["fruits.jpg"]["opencv"]["EMBEDDING"] += 0.1  # a record the server no longer meets
        rows = known_result_rows(client, known, embedding_known_results, ROOT / "model_repository")
    assert [r.status for r in rows] == [PASS, FAIL]
