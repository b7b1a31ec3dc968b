"""Both profiles of the model repository, checked with Triton's own config schema."""

import pytest

from harness.client import PIPELINES
from harness.model import ONNX_FILENAME, onnx_signature
from harness.preprocessing import TAP_TENSORS
from harness.repository import CONFIG_FILENAME, RepositoryError, load_config, load_repository

EXPECTED_MODELS = {"validate_image", "preprocess_dali", "preprocess_dali_stages", "preprocess_dali_taps", "preprocess_opencv",
                   "classifier", "classify_dali", "classify_opencv", "embedder", "embed_dali", "embed_opencv"}


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
    for name in ("preprocess_dali", "preprocess_dali_stages", "classifier", "embedder"):
        assert cpu[name].backend == "python" and not cpu[name].platform
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
    batches and a second; the cpu profile's measured CPU_QUEUE_POLICY."""
    from harness.repository import CPU_QUEUE_POLICY

    for profile, (size, timeout) in ((gpu, (128, 1_000_000)),
                                     (cpu, (CPU_QUEUE_POLICY.max_queue_size, CPU_QUEUE_POLICY.timeout_us))):
        batchers = {name: c for name, c in profile.items() if c.HasField("dynamic_batching")}
        assert set(batchers) >= {"validate_image", "preprocess_dali", "preprocess_opencv", "classifier"}
        for name, config in batchers.items():
            policy = config.dynamic_batching.default_queue_policy
            assert (policy.max_queue_size, policy.default_timeout_microseconds) == (size, timeout), name
            assert policy.timeout_action == policy.REJECT and size <= 2 * config.max_batch_size, name


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

    for name in ("preprocess_dali", "preprocess_dali_stages"):
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
    (wheel,) = tmp_path.glob("harness-*.whl")
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
