"""Both profiles of the model repository, checked with Triton's own config schema."""

import pytest

from harness.client import PIPELINES
from harness.model import ONNX_FILENAME, onnx_signature
from harness.preprocessing import TAP_TENSORS
from harness.repository import CONFIG_FILENAME, RepositoryError, load_config, load_repository
from harness.task import get_task, shipped_engines, shipped_models

DETECTION_MODELS = set(get_task("detection").repository.added)
EXPECTED_MODELS = set(shipped_models())
"""Every model of every registered task (each task's ``repository.added``): a new task lists its own."""


def dtype_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.DataType.Name(value)


def signature(config):
    def tensors(ts):
        return [(t.name, dtype_name(t.data_type), list(t.dims), getattr(t, "label_filename", "")) for t in ts]

    steps = [(s.model_name, dict(s.input_map), dict(s.output_map)) for s in config.ensemble_scheduling.step]
    return config.max_batch_size, tensors(config.input), tensors(config.output), steps, config.HasField("dynamic_batching")


@pytest.fixture(scope="module")
def gpu(repository):
    return load_repository(repository)


@pytest.fixture(scope="module")
def cpu(cpu_repository):
    return load_repository(cpu_repository)


def test_every_config_parses_with_tritons_schema(gpu, cpu):
    assert set(gpu) == set(cpu) == EXPECTED_MODELS


def test_gpu_profile_uses_the_gpu_backends(gpu):
    assert gpu["preprocess_dali"].backend == gpu["preprocess_dali_stages"].backend == "dali"
    assert gpu["classifier"].platform == "tensorrt_plan"
    assert gpu["preprocess_opencv"].backend == "python"
    assert all(g.kind == g.KIND_GPU for g in gpu["classifier"].instance_group)


def test_cpu_profile_has_the_same_topology_and_signatures(gpu, cpu):
    for name in EXPECTED_MODELS:
        assert signature(cpu[name]) == signature(gpu[name]), name
    gpu_only = [name for name, config in gpu.items() if config.backend == "dali" or config.platform == "tensorrt_plan"]
    assert {"preprocess_dali", *shipped_engines()} <= set(gpu_only)
    for name in gpu_only:  # every model that needs a GPU runs on the cpu profile's Python backend
        assert cpu[name].backend == "python" and not cpu[name].platform, name
        assert all(g.kind == g.KIND_CPU for g in cpu[name].instance_group)


def test_cpu_profile_differs_from_production_only_in_how_models_run(gpu, cpu):
    """Backend, instances, threads, queue delay and queue policy may differ; every other field
    of every config (names, tensors, batch limits, ensemble steps, ragged inputs) is production's."""

    def serving_fields_cleared(config):
        config = type(config).FromString(config.SerializeToString())
        for field in ("backend", "platform", "instance_group", "parameters"):
            config.ClearField(field)
        config.dynamic_batching.ClearField("max_queue_delay_microseconds")
        config.dynamic_batching.ClearField("default_queue_policy")
        return config

    for name in EXPECTED_MODELS:
        assert serving_fields_cleared(cpu[name]) == serving_fields_cleared(gpu[name]), name
    # The replacements batch without waiting: on CPU a fuller batch is not cheaper per image.
    assert cpu["classifier"].dynamic_batching.max_queue_delay_microseconds == 0
    assert gpu["classifier"].dynamic_batching.max_queue_delay_microseconds > 0


def test_every_dynamic_batcher_refuses_overload(gpu, cpu):
    """A bounded queue with a timeout, rejecting (docs/robustness.md): production's two full
    batches (128 for the classifier's models, 16 for the detector's) and a second, ten for the
    OCR models, whose one request reads up to max_words words; the cpu profile's measured
    CPU_QUEUE_POLICY."""
    from harness.repository import CPU_QUEUE_POLICY

    ocr_models = get_task("ocr").repository
    ocr = {name for p in PIPELINES for name in (ocr_models.ensemble(p), ocr_models.answer(p))}
    for profile, (size, timeout) in ((gpu, (None, 1_000_000)),
                                     (cpu, (CPU_QUEUE_POLICY.max_queue_size, CPU_QUEUE_POLICY.timeout_us))):
        batchers = {name: c for name, c in profile.items() if c.HasField("dynamic_batching")}
        assert set(batchers) >= {"validate_image", "preprocess_dali", "preprocess_opencv", "classifier",
                                 "detect_validate_image", "detect_preprocess_dali", "detect_preprocess_opencv", "detector",
                                 "detect_postprocess"}
        for name, config in batchers.items():
            policy = config.dynamic_batching.default_queue_policy
            expected = (size or 2 * config.max_batch_size,
                        10_000_000 if profile is gpu and name in ocr else timeout)
            assert (policy.max_queue_size, policy.default_timeout_microseconds) == expected, name
            assert policy.timeout_action == policy.REJECT and expected[0] <= 2 * config.max_batch_size, name


def test_ensembles_chain_preprocessing_into_the_classifier(gpu):
    for pipeline in PIPELINES.values():
        steps = gpu[pipeline.ensemble].ensemble_scheduling.step
        # The DALI path validates first: one bad image would fail its whole DALI batch.
        validate = ["validate_image"] if pipeline.name == "dali" else []
        assert [s.model_name for s in steps] == [*validate, f"preprocess_{pipeline.name}", "classifier"]
        if validate:
            assert steps[0].input_map["IMAGE"] == "IMAGE"
            assert steps[0].output_map["VALIDATED"] == steps[1].input_map["IMAGE"]
        assert steps[-2].output_map["INPUT"] == steps[-1].input_map["input"]
        taps = gpu[pipeline.taps_model]
        assert [o.name for o in taps.output] == list(TAP_TENSORS.values())
    # The DALI taps are validated too: a file that crashes a DALI decoder never reaches one.
    steps = gpu["preprocess_dali_taps"].ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["validate_image", "preprocess_dali_stages"]
    assert steps[0].output_map["VALIDATED"] == steps[1].input_map["IMAGE"]
    assert {v for v in steps[1].output_map.values()} == set(TAP_TENSORS.values())


def test_embedding_ensembles_share_the_classifiers_preprocessing(gpu, repository):
    """embed_dali and embed_opencv run exactly the steps of classify_dali and classify_opencv
    up to the model input, then the embedder; the embedder's ONNX fits its config."""
    for pipeline in ("dali", "opencv"):
        embed = gpu[f"embed_{pipeline}"].ensemble_scheduling.step
        classify = gpu[f"classify_{pipeline}"].ensemble_scheduling.step
        assert list(embed[:-1]) == list(classify[:-1])
        assert embed[-1].model_name == "embedder" and embed[-1].input_map["input"] == classify[-1].input_map["input"]
        assert dict(embed[-1].output_map) == {"embedding": "EMBEDDING"}
        assert [(o.name, list(o.dims)) for o in gpu[f"embed_{pipeline}"].output] == [("EMBEDDING", [1280])]
    assert gpu["embedder"].platform == "tensorrt_plan"
    assert signature(gpu["embedder"])[1] == signature(gpu["classifier"])[1]  # the same input
    inputs, outputs = onnx_signature(repository / "embedder" / ONNX_FILENAME)
    assert [(t.name, list(t.shape[1:])) for t in (*inputs, *outputs)] == [
        (t.name, list(t.dims)) for t in (*gpu["embedder"].input, *gpu["embedder"].output)]


def test_encoded_image_inputs_batch_ragged(gpu):
    # Without allow_ragged_batch Triton batches only requests of identical byte length,
    # i.e. almost never for real files.
    for name, config in gpu.items():
        for tensor in config.input:
            if tensor.name == "IMAGE":
                assert tensor.allow_ragged_batch, name


def test_onnx_io_matches_the_classifier_config(gpu, repository):
    inputs, outputs = onnx_signature(repository / "classifier" / ONNX_FILENAME)
    config = gpu["classifier"]
    for onnx_tensors, config_tensors in ((inputs, config.input), (outputs, config.output)):
        assert [t.name for t in onnx_tensors] == [t.name for t in config_tensors]
        for o, c in zip(onnx_tensors, config_tensors):
            assert dtype_name(c.data_type) == "TYPE_" + {"float32": "FP32"}[o.dtype]
            assert list(o.shape[1:]) == list(c.dims)  # the batch dim is Triton's max_batch_size
    assert config.output[1].label_filename == "labels.txt"
    assert (repository / "classifier" / "labels.txt").exists()


def test_configs_agree_with_the_spec(gpu, spec):
    c, h, w = spec.preprocess.input_shape
    for name in ("preprocess_dali", "preprocess_dali_stages", "preprocess_dali_taps", "preprocess_opencv"):
        outputs = {o.name: list(o.dims) for o in gpu[name].output}
        assert outputs["INPUT"] == [c, h, w]
        if "CROPPED" in outputs:
            assert outputs["CROPPED"] == [h, w, c]
    assert list(gpu["classifier"].input[0].dims) == [c, h, w]


def test_gpu_dali_pipelines_serialize_without_a_gpu(repository):
    import importlib.util

    for name in ("preprocess_dali", "preprocess_dali_stages", "detect_preprocess_dali", "detect_preprocess_dali_stages"):
        module_spec = importlib.util.spec_from_file_location(f"{name}_dali", repository / name / "1" / "dali.py")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        assert module.preprocess._is_autoserialize
        # device_id=None: serializing needs no GPU; building the mixed decoder would.
        serialized = module.preprocess(device_id=None).serialize()
        assert b"mixed" in serialized and b"decoders__Image" in serialized.replace(b".", b"__")


def test_malformed_config_is_reported_with_its_path(tmp_path):
    bad = tmp_path / "m" / CONFIG_FILENAME
    bad.parent.mkdir()
    bad.write_text('name: "m"\nbackend: "python"\nmax_batch_size: "eight"\n')
    with pytest.raises(RepositoryError, match=str(bad)):
        load_config(bad)


def test_the_package_the_triton_image_installs_has_every_module_the_models_import(repository, tmp_path):
    # docker/triton.Dockerfile installs the project without dependencies; the models'
    # dali.py / model.py files import from it. Build that wheel and look.
    import ast
    import subprocess
    import sys
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(repository.parent)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")  # triton_preprocessing_harness-VERSION-py3-none-any.whl
    files = set(zipfile.ZipFile(wheel).namelist())
    imported = set()
    for entry in list(repository.glob("*/1/dali.py")) + list(repository.glob("*/1/model.py")):
        for node in ast.walk(ast.parse(entry.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("harness"):
                imported.add(node.module)
    imported |= {"harness.serving.preprocess_dali_cpu", "harness.serving.classifier_onnx"}  # the cpu profile's
    # `python3 -m harness.preflight` in the image (docker compose run --rm preflight)
    imported |= {"harness.preflight.__main__", "harness.preflight.cli", "harness.preflight.job", "loadtest.metrics"}
    assert imported and all(m.replace(".", "/") + ".py" in files for m in imported), sorted(imported)
    assert "harness/__init__.py" in files


def test_no_ensemble_output_is_also_consumed_by_a_step(gpu):
    """Triton's ensemble prunes, for a request that does not ask for an ensemble output, the
    step making it once none of its outputs is asked for, even when a later step consumes it:
    a request for BOXES alone then never finished (tritonserver 2.51: "unexpected deadlock").
    So every ensemble output here is made by a step whose outputs no other step reads."""
    for name, config in gpu.items():
        if config.platform != "ensemble":
            continue
        consumed = {tensor for step in config.ensemble_scheduling.step for tensor in step.input_map.values()}
        assert not consumed & {o.name for o in config.output}, name


def test_detection_ensembles_feed_the_detector_and_its_postprocessing(gpu):
    steps = {name: [s.model_name for s in gpu[name].ensemble_scheduling.step] for name in ("detect_dali", "detect_opencv")}
    assert steps == {"detect_dali": ["detect_validate_image", "detect_preprocess_dali", "detector", "detect_postprocess"],
                     "detect_opencv": ["detect_preprocess_opencv", "detector", "detect_postprocess"]}
    results = [("BOXES", "TYPE_FP32", [-1, 4, 2]), ("SCORES", "TYPE_FP32", [-1]),
               ("PROBABILITY", "TYPE_FP32", [1, -1, -1]), ("GEOMETRY", "TYPE_INT32", [8])]
    for name in ("detect_dali", "detect_opencv", "detect_postprocess"):
        assert [(o.name, dtype_name(o.data_type), list(o.dims)) for o in gpu[name].output] == results, name
    assert [(i.name, list(i.dims)) for i in gpu["detect_postprocess"].input] == [("PROBABILITY", [1, -1, -1]),
                                                                                ("GEOMETRY", [8])]
    for name in ("detect_dali", "detect_opencv"):
        preprocess, detector, postprocess = gpu[name].ensemble_scheduling.step[-3:]
        # the model input and the geometry the preprocessing applied go where they belong
        assert preprocess.output_map["INPUT"] == detector.input_map["x"]
        assert preprocess.output_map["GEOMETRY"] == postprocess.input_map["GEOMETRY"]
        assert detector.output_map["fetch_name_0"] == postprocess.input_map["PROBABILITY"]
        assert {k: v for k, v in postprocess.output_map.items()} == {r[0]: r[0] for r in results}
    steps = gpu["detect_preprocess_dali_taps"].ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["detect_validate_image", "detect_preprocess_dali_stages"]
    assert steps[0].output_map["VALIDATED"] == steps[1].input_map["IMAGE"]
    taps = [*TAP_TENSORS.values(), "GEOMETRY"]
    for name in ("detect_preprocess_dali_stages", "detect_preprocess_dali_taps", "detect_preprocess_opencv"):
        assert [o.name for o in gpu[name].output] == taps, name
    assert [o.name for o in gpu["detect_preprocess_dali"].output] == ["INPUT", "GEOMETRY"]
    assert gpu["detect_preprocess_dali"].backend == gpu["detect_preprocess_dali_stages"].backend == "dali"
    assert gpu["detector"].platform == "tensorrt_plan"
    assert {g.kind for g in gpu["detector"].instance_group} == {gpu["detector"].instance_group[0].KIND_GPU}


def test_detection_models_read_the_detection_spec_in_both_profiles(gpu, cpu, repository):
    from harness.spec import load_spec
    from harness.task import get_task

    spec_file = get_task("detection").repository.spec
    readers = DETECTION_MODELS - {"detect_dali", "detect_opencv", "detect_preprocess_dali_taps"}
    for profile in (gpu, cpu):
        for name in readers:
            assert profile[name].parameters["spec"].string_value == spec_file, name
    spec = load_spec(repository / spec_file)
    assert spec.preprocess.resize.mode == "limit_side" and spec.postprocess["name"] == "db"
    c, h, w = spec.preprocess.input_shape
    for name in ("detect_preprocess_dali", "detect_preprocess_dali_stages", "detect_preprocess_opencv"):
        assert {o.name: list(o.dims) for o in gpu[name].output}["INPUT"] == [c, h, w]
    assert list(gpu["detector"].input[0].dims) == [c, h, w]
    # one batch limit along the chain: an ensemble takes no more than each of its steps
    assert {gpu[name].max_batch_size for name in DETECTION_MODELS} == {8}


def test_onnx_io_matches_the_detector_config(gpu, repository):
    from harness.model import check_detector_onnx, onnx_signature

    onnx = repository / "detector" / ONNX_FILENAME
    inputs, outputs = onnx_signature(onnx)
    assert [t.name for t in inputs] == [t.name for t in gpu["detector"].input] == ["x"]
    assert [t.name for t in outputs] == [t.name for t in gpu["detector"].output] == ["fetch_name_0"]
    check_detector_onnx(onnx, gpu["detector"], run=True)  # names, types, dims; [1, 3, 32, 32] -> [1, 1, 32, 32]
    # its licence notice travels with it (rapidocr's MODEL_LICENSES.md, Apache-2.0 LICENSE)
    assert {"MODEL_LICENSES.md", "LICENSE"} <= {p.name for p in (repository / "detector").iterdir()}
    assert "PP-OCRv6_det_small.onnx" in (repository / "detector" / "MODEL_LICENSES.md").read_text()


def test_a_detector_onnx_that_breaks_its_config_is_refused(gpu, repository, tmp_path):
    from harness.model import ModelError, check_detector_onnx

    config = type(gpu["detector"]).FromString(gpu["detector"].SerializeToString())
    config.input[0].name = "image"
    with pytest.raises(ModelError, match="has them: \\['image'\\]"):
        check_detector_onnx(repository / "detector" / ONNX_FILENAME, config)
    config = type(gpu["detector"]).FromString(gpu["detector"].SerializeToString())
    config.input[0].dims[:] = [1, -1, -1]
    with pytest.raises(ModelError, match="in the detector's config"):
        check_detector_onnx(repository / "detector" / ONNX_FILENAME, config)
    with pytest.raises(ModelError, match="run `harness model export`"):
        check_detector_onnx(tmp_path / ONNX_FILENAME, gpu["detector"])


def test_the_detection_dali_pipelines_use_only_arguments_the_production_dali_has(repository):
    """The mixed-decoder pipelines of the detector's models, defined and serialized by the
    DALI the production image runs (deploy/versions.toml; tests/test_manifest.py pins the
    virtualenv's to it), pass only arguments its operator schema has."""
    import nvidia.dali

    from harness.manifest import load_manifest
    from harness.preprocessing.dali_graph import missing_arguments, pipeline_arguments, production_pipelines

    assert nvidia.dali.__version__ == load_manifest().dali.version
    pipes = production_pipelines(repository)
    for name in ("detect_preprocess_dali", "detect_preprocess_dali_stages"):
        serialized = pipes[name].serialize()
        assert b"mixed" in serialized
        arguments = pipeline_arguments(pipes[name])
        assert missing_arguments(arguments) == [], name
        assert "Resize" in arguments and "adjust_orientation" in arguments["experimental__decoders__Image"]


@pytest.fixture
def toy_task(repository, tmp_path):
    """A repository with one more model (``toy_embedder``: the embedder's config under another
    name) and a task that ships it (``TaskModels.shipped``), registered for the test only."""
    import shutil

    from harness.client import TaskModels
    from harness.model import ModelError
    from harness.task import TASKS
    from harness.task_api import Task
    from harness.task_api.models import ONNX_ON_CPU, ShippedModel

    source = tmp_path / "repository"
    shutil.copytree(repository, source, ignore=shutil.ignore_patterns("*.onnx", "*.plan", "__pycache__"))
    for onnx in repository.glob(f"*/{ONNX_FILENAME}"):
        (source / onnx.parent.name / ONNX_FILENAME).symlink_to(onnx.resolve())
    shutil.copytree(source / "embedder", source / "toy_embedder", symlinks=True)
    config = source / "toy_embedder" / CONFIG_FILENAME
    config.write_text(config.read_text().replace('name: "embedder"', 'name: "toy_embedder"'))

    def check(folder, spec, config):
        if not (folder / "toy.txt").is_file():
            raise ModelError(f"{folder}: no toy.txt")

    class Toy(Task):
        name = "toy"
        repository = TaskModels("toy", "toy_embedder", "input", "embedding", "EMBEDDING", added=("toy_embedder",),
                                shipped=(ShippedModel("toy_embedder", ONNX_ON_CPU, check=check),))

    TASKS.add(Toy(), "tests/test_repository.py:Toy")
    try:
        yield source
    finally:
        del TASKS._places["toy"]
        TASKS._tasks.pop("toy", None)


def test_a_tasks_own_model_is_checked_and_replaced_by_the_profile_as_the_task_declares(toy_task, tmp_path):
    """A new task's models need no line in harness/repository.py: the cpu profile replaces the
    model the task ships (``ShippedModel.cpu``) and refuses its files by the task's own check."""
    from harness.model import ModelError
    from harness.repository import build_profile

    with pytest.raises(ModelError, match="no toy.txt"):
        build_profile(toy_task, tmp_path / "cpu", "cpu")
    (toy_task / "toy_embedder" / "toy.txt").write_text("toy\n")
    cpu = load_config(build_profile(toy_task, tmp_path / "cpu", "cpu") / "toy_embedder" / CONFIG_FILENAME)
    assert cpu.backend == "python" and not cpu.platform
    assert [g.count for g in cpu.instance_group] == [2]
    assert "harness.serving.classifier_onnx" in (tmp_path / "cpu" / "toy_embedder" / "1" / "model.py").read_text()


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_jobs_server_loads_its_tasks_models_and_what_their_bls_calls(cpu_repository, pipeline):
    """A job's embedded server loads only what it reads: the OCR BLS's callees (named in its
    config's parameters, which Triton does not load with it) come along, no other task's models."""
    from harness.repository import with_called_models

    served = {task: set(with_called_models(cpu_repository, get_task(task).repository.served((pipeline,))))
              for task in ("classification", "ocr", "segmentation")}
    ocr = load_config(cpu_repository / f"ocr_{pipeline}" / CONFIG_FILENAME)
    callees = {p.string_value for p in ocr.parameters.values()} & set(load_repository(cpu_repository))
    assert {"recognizer", f"detect_{pipeline}"} <= callees <= served["ocr"]
    assert "classifier" in served["classification"] and "segmenter" in served["segmentation"]
    assert not served["classification"] & {"detector", "recognizer", "segmenter", "embedder"}
    assert not served["ocr"] & {"classifier", "segmenter", "embedder"}


def test_repo_build_replaces_only_a_profile_it_wrote(repository, tmp_path):
    """`harness repo build --out` removed its --out whole, a user's folder too: now it replaces only
    a folder holding nothing but what it wrote (its record), and never writes inside one."""
    from tests.commands import harness

    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "src" / "thesis.tex").write_text("\\chapter{Results}")
    result = harness("repo", "build", "--out", mine)
    assert result.returncode == 2 and "holds src, which the harness did not write" in result.stderr, result.stderr
    assert (mine / "src" / "thesis.tex").read_text() == "\\chapter{Results}"

    profile = tmp_path / "profile"
    for _ in range(2):  # built, then replaced
        result = harness("repo", "build", "--out", profile)
        assert result.returncode == 0, result.stderr
    assert load_config(profile / "classifier" / CONFIG_FILENAME).backend == "python"
    assert (profile / "classifier" / ONNX_FILENAME).readlink() == (repository / "classifier" / ONNX_FILENAME).resolve()
    (profile / "NOTES.md").write_text("mine\n")
    result = harness("repo", "build", "--out", profile)
    assert result.returncode == 2 and "holds NOTES.md, which the harness did not write" in result.stderr
    assert (profile / "NOTES.md").read_text() == "mine\n"

    for out, words in ((profile / "classifier" / "cpu", "a folder the harness wrote"),
                       (repository / "cpu", "this project's own model repository")):
        result = harness("repo", "build", "--out", out)
        assert result.returncode == 2 and f"inside {repository if 'own' in words else profile}, {words}" in result.stderr
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "profile"]  # nothing left beside them


def test_the_stage_taps_are_what_production_leaves_out_and_each_is_reached_through_the_guard(gpu, repository):
    """Issue 58: production loads every task's ensembles and what they run or call; the rest of the
    shipped models are the stage taps, which only a check host loads (docs/gpu.md). Each taps model
    a client calls runs the image guard first (an ensemble's first step, or the OCR BLS model's own
    first step), and each ``_stages`` DALI model is a step of such an ensemble, so what they answer
    is bounded by the guard's header limits."""
    from harness.repository import production_models, stage_taps

    production, taps = production_models(repository), stage_taps(repository)
    assert not set(production) & set(taps) and sorted(production + taps) == sorted(shipped_models())
    assert {f"{prefix}preprocess_dali_{kind}" for prefix in ("", "detect_", "segment_") for kind in ("taps", "stages")} | \
        {"ocr_dali_taps", "ocr_opencv_taps"} == set(taps)
    # ocr_dali decodes with ocr_decode_dali (its decode_model, a BLS call), which answers the decoded page alone
    decode_model = gpu["ocr_dali"].parameters["decode_model"].string_value
    assert decode_model == "ocr_decode_dali" and decode_model in production
    assert [o.name for o in gpu[decode_model].output] == ["DECODED"]
    guarded_ensembles = set()
    for name in taps:
        config, code = gpu[name], repository / name / "1" / "model.py"
        if config.platform == "ensemble":
            first = config.ensemble_scheduling.step[0].model_name
            assert "harness.serving.validate_image" in (repository / first / "1" / "model.py").read_text(), name
            guarded_ensembles.add(name)
        elif config.backend == "python":
            assert "harness.serving.ocr" in code.read_text(), name  # validate() before any model runs
    for name in (n for n in taps if gpu[n].backend == "dali"):
        assert any(step.model_name == name for e in guarded_ensembles for step in gpu[e].ensemble_scheduling.step), name
