"""The DALI implementation of the spec, as pipeline-graph building blocks.

``model_repository/preprocess_dali*/1/dali.py`` builds the production graph from these
with the GPU ("mixed") decoder; the cpu profile's Python-backend models and the harness
run the very same graph with the CPU decoder through :class:`CpuPipelineRunner`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types
from nvidia.dali import pipeline_def

from harness import operations
from harness.operations import decode as decode_operation
from harness.operations import resize_filter, resize_mode
from harness.preprocessing import Step, run_steps
from harness.preprocessing.image_check import ImageError, identify, validate
from harness.spec import DecodeSpec, Preprocess, SpecError
from harness.stage import Stage

INPUT_NAME = "IMAGE"
"""Name of the external source: the DALI backend binds the Triton input of this name to it."""

def check_supported(p: Preprocess) -> None:
    """Raise :class:`SpecError` for settings DALI cannot honour (the operations' one rule)."""
    if (reason := operations.refusal("dali", p)) is not None:
        raise SpecError(reason)


def decode(encoded, spec: DecodeSpec, device: str):
    """File bytes -> HWC uint8 RGB, on the CPU (``device="cpu"``) or with nvJPEG (``"mixed"``):
    the decode's DALI kernel (:func:`harness.operations.decode.with_dali`)."""
    return decode_operation.with_dali(encoded, spec, device)


def decode_images(images: list[bytes], spec: DecodeSpec, device: str = "mixed", device_id: int | None = 0) -> list[np.ndarray]:
    """``images`` (file bytes) decoded in one batch by :func:`decode` alone, on ``device``
    (``mixed``: the GPU ``device_id``; ``cpu`` with ``device_id=None`` runs without one)."""

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=device_id, prefetch_queue_depth=1)
    def pipeline():
        return decode(fn.external_source(name=INPUT_NAME, device="cpu", dtype=types.UINT8, ndim=1), spec, device)

    pipe = pipeline()
    pipe.build()
    pipe.feed_input(INPUT_NAME, [np.frombuffer(data, np.uint8) for data in images])
    (out,) = pipe.run()
    out = out.as_cpu() if device == "mixed" else out
    return [np.array(out[i]) for i in range(len(images))]


def resize(image, p: Preprocess):
    """Resize each image to the sizes of the resize mode's DALI kernel (computed per image in the
    graph where DALI's own would round otherwise), by the resize filter's kernel."""
    spec = p.resize
    if spec.resampling == "pil" and not spec.for_detector:  # PIL's passes, to the sizes computed in the graph
        from harness.preprocessing import dali_pil

        return dali_pil.resize(image, spec, *resize_mode.DALI_SIZES[spec.mode](image, spec))
    return resize_filter.OPERATION.kernels["dali"](image, resize_mode.OPERATION.kernels["dali"](image, spec), spec)


def canvas(image, p: Preprocess):
    """The ``crop`` stage: the center crop, or a detector's model-input canvas (the letterbox's
    padding around the resized image; a limit-side resize's image as it is: the crop's kernels
    pass a detector's image through)."""
    if p.resize.mode == "letterbox":
        from harness.preprocessing import dali_resize

        letterbox = p.resize.detector()
        return dali_resize.pad(image, resize_mode.dali_letterbox_padding(image, letterbox), letterbox)
    return operations.apply(Stage.CROP, "dali", image, p)


def geometry_of(decoded, resized, p: Preprocess):
    """A detector's ``GEOMETRY`` output (:func:`harness.preprocessing.dali_resize.geometry_tensor`)."""
    from harness.preprocessing import dali_resize

    padding = (resize_mode.dali_letterbox_padding(resized, p.resize.detector()) if p.resize.mode == "letterbox"
               else dali_resize.no_padding(resized))
    return dali_resize.geometry_tensor(decoded, resized, padding)


def normalize(image, p: Preprocess):
    """HWC RGB -> CHW float32 model input in the model's channel order."""
    return operations.apply(Stage.INPUT, "dali", image, p)


def steps(decoder_device: str) -> dict[Stage, Step]:
    """Stage -> its DALI step ``(previous stage's node, spec) -> node``, decoding on
    ``decoder_device``: the graph below and the isolated runs (:class:`CpuStageRunner`)."""
    return {
        Stage.DECODE: lambda encoded, p: decode(encoded, p.decode, decoder_device),
        Stage.RESIZE: resize,
        Stage.CROP: canvas,
        Stage.INPUT: normalize,
    }


def preprocess_graph(p: Preprocess, decoder_device: str = "mixed", taps: bool = False, geometry: bool | None = None,
                     decode_only: bool = False):
    """The whole graph from the ``IMAGE`` input: the model input, or every stage if ``taps``;
    a detector's graph also answers its ``GEOMETRY`` last (:data:`harness.stage.GEOMETRY_TENSOR`),
    and so does any graph with ``geometry`` (a segmenter's: the source size its masks go back to).
    With ``decode_only``, the decode step alone: the decoded image (``ocr_decode_dali``, which
    ``ocr_dali`` cuts its words from, answers no other stage).

    Tap order matches the taps model's outputs (:data:`harness.stage.TAP_TENSORS`). The
    image taps after the decode are sent as float32 whatever ``resize.dtype`` is (lossless),
    so one model config serves every spec.
    """
    check_supported(p)
    encoded = fn.external_source(name=INPUT_NAME, device="cpu", dtype=types.UINT8, ndim=1)
    if decode_only:
        return steps(decoder_device)[Stage.DECODE](encoded, p)
    nodes = dict(run_steps(steps(decoder_device), encoded, p))
    answer_geometry = p.resize.for_detector if geometry is None else geometry
    extra = (geometry_of(nodes[Stage.DECODE], nodes[Stage.RESIZE], p),) if answer_geometry else ()
    if not taps:
        return (nodes[Stage.INPUT], *extra) if extra else nodes[Stage.INPUT]
    return tuple(fn.cast(node, dtype=types.FLOAT) if stage.is_image and stage is not Stage.DECODE else node
                 for stage, node in nodes.items()) + extra


@dataclass
class SampleResult:
    """The outputs for one image, or the reason it failed."""

    outputs: tuple[np.ndarray, ...] | None = None
    error: ImageError | None = None


class CpuPipelineRunner:
    """Runs :func:`preprocess_graph` with DALI's CPU decoder, in this process.

    A failed batch leaves a DALI pipeline usable (with ``prefetch_queue_depth=1``). With
    ``isolate_failures`` (the default) the batch is then re-run image by image to pin the
    error on the right images only. Without it every image of the batch fails, which is
    what Triton's DALI backend does with a dynamic batch: the cpu profile's
    ``preprocess_dali`` behaves so, so that what protects the gpu profile (the
    ``validate_image`` step) is tested, not our own retry.

    A subclass with ``decoder = "mixed"`` and a ``device_id`` runs the production graph on
    a GPU with the same construction and error handling (the training loader's GPU runner).
    """

    decoder = "cpu"
    """The decoder device of the graph: ``cpu``, or ``mixed`` (nvJPEG) in a GPU subclass."""

    def __init__(self, p: Preprocess, max_batch_size: int, num_threads: int = 1, taps: bool = False,
                 isolate_failures: bool = True, device_id: int | None = None, geometry: bool | None = None,
                 decode_only: bool = False):
        self.max_batch_size = max_batch_size
        self.isolate_failures = isolate_failures
        self.resize = p.resize
        self.device_id = device_id
        self._pipe = self.define(p, max_batch_size, num_threads, taps, device_id, geometry, decode_only)
        self._pipe.build()

    @classmethod
    def define(cls, p: Preprocess, max_batch_size: int, num_threads: int = 1, taps: bool = False,
               device_id: int | None = None, geometry: bool | None = None, decode_only: bool = False):
        """The runner's pipeline, defined but not built: ``serialize()`` works without a GPU
        even for the ``mixed`` decoder (``device_id=None``); building it needs one."""
        if cls.decoder == "cpu" and (reason := decode_operation.cpu_refusal(p)) is not None:
            raise SpecError(reason)

        @pipeline_def(batch_size=max_batch_size, num_threads=num_threads, device_id=device_id, prefetch_queue_depth=1)
        def pipeline():
            return preprocess_graph(p, decoder_device=cls.decoder, taps=taps, geometry=geometry, decode_only=decode_only)

        return pipeline()

    def run(self, images: list[np.ndarray]) -> list[SampleResult]:
        """Preprocess encoded images (1-D uint8 arrays, zero padding allowed)."""
        results = [SampleResult() for _ in images]
        valid = []
        for i, data in enumerate(images):
            try:
                validate(data, "header", self.resize)  # what DALI would fail, crash or run out of memory on
                valid.append(i)
            except ImageError as exc:
                results[i].error = exc
        for start in range(0, len(valid), self.max_batch_size):
            chunk = valid[start:start + self.max_batch_size]
            try:
                for i, outputs in zip(chunk, self._run_batch([images[i] for i in chunk])):
                    results[i].outputs = outputs
            except RuntimeError as exc:
                if not self.isolate_failures:
                    error = ImageError(f"the DALI batch of {len(chunk)} images failed (one bad image fails them all): "
                                       f"{_dali_reason(exc)}")
                    for i in chunk:
                        results[i].error = error
                    continue
                for i in chunk:
                    try:
                        results[i].outputs = self._run_batch([images[i]])[0]
                    except RuntimeError as exc:
                        results[i].error = ImageError(f"could not decode {identify(images[i])}: {_dali_reason(exc)}")
        return results

    def _run_batch(self, images: list[np.ndarray]) -> list[tuple[np.ndarray, ...]]:
        self._pipe.feed_input(INPUT_NAME, [np.ascontiguousarray(x, dtype=np.uint8).reshape(-1) for x in images])
        outputs = self._pipe.run()
        return [tuple(np.array(out[i]) for out in outputs) for i in range(len(images))]


def _dali_reason(exc: Exception) -> str:
    """The operator's own message from a DALI pipeline error, without its traceback."""
    text = str(exc)
    if "encountered:" in text:
        text = text.split("encountered:", 1)[1]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "pipeline object is no longer valid" not in ln]
    return lines[0].rstrip(" :") if lines else "DALI decoder error"


def production_pipeline(model_file: str, taps: bool, geometry: bool | None = None, decode_only: bool = False):
    """The ``pipeline_def`` a model repository's ``dali.py`` hands to ``@autoserialize``.

    Reads the model's spec at the repository root (two levels above ``<model>/1/dali.py``:
    the one its ``config.pbtxt`` names, :func:`model_spec_name`) and decodes on the GPU. The
    DALI backend replaces batch size, thread count and device with the model config's
    ``max_batch_size``, ``num_threads`` parameter and instance's GPU.
    """
    from pathlib import Path

    from harness.spec import load_spec

    model_dir = Path(model_file).resolve().parents[1]
    spec = load_spec(model_dir.parent / model_spec_name(model_dir)).preprocess

    @pipeline_def(batch_size=1, num_threads=1, device_id=0)
    def preprocess():
        return preprocess_graph(spec, decoder_device="mixed", taps=taps, geometry=geometry, decode_only=decode_only)

    return preprocess


def model_spec_name(model_dir) -> str:
    """The spec file a model of the repository reads: its config's ``spec`` parameter (the
    detector's models name ``detection.toml``), else the repository's ``preprocessing.toml``.
    Parsed with Triton's own schema (tritonclient is in the serving image, see
    docker/triton.Dockerfile); the DALI backend ignores parameters it does not know."""
    from pathlib import Path

    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from harness.spec import SPEC_FILENAME

    config = text_format.Parse((Path(model_dir) / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return config.parameters["spec"].string_value if "spec" in config.parameters else SPEC_FILENAME


class CpuStageRunner:
    """One stage of the deployed DALI graph alone, on a given input (CPU, batch of one).

    Isolation by substitution: feed the reference's previous stage into the deployed
    implementation of a stage, to see the error that stage adds by itself. One pipeline
    per (stage, input dtype), built on first use; not thread-safe (one per thread).
    """

    def __init__(self, p: Preprocess):
        check_supported(p)
        self.p = p
        self._pipes = {}

    KEEP_BELOW = 64 * 2 ** 20
    """Inputs of at most this many bytes run on the cached pipeline; a larger one on a pipeline
    of its own, dropped after: a DALI pipeline keeps its buffers at the size of the largest
    input it ever saw, so one huge image would otherwise pin gigabytes per thread for the run."""

    def run(self, stage: str, image: np.ndarray) -> np.ndarray:
        image = np.ascontiguousarray(image if image.dtype == np.uint8 else image.astype(np.float32))
        key = (stage, image.dtype.str)
        dtype = types.UINT8 if image.dtype == np.uint8 else types.FLOAT
        if image.nbytes > self.KEEP_BELOW:
            pipe = self._build(stage, dtype)
            try:
                pipe.feed_input("X", [image])
                return np.array(pipe.run()[0][0])
            finally:
                del pipe
        if key not in self._pipes:
            self._pipes[key] = self._build(stage, dtype)
        pipe = self._pipes[key]
        pipe.feed_input("X", [image])
        return np.array(pipe.run()[0][0])

    def _build(self, stage: str, dtype):
        p, op = self.p, steps("cpu")[stage]

        @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
        def pipeline():
            return op(fn.external_source(name="X", device="cpu", layout="HWC", dtype=dtype, ndim=3), p)

        pipe = pipeline()
        pipe.build()
        return pipe


def pipeline_arguments(pipe) -> dict[str, list[str]]:
    """Operator schema name -> the arguments ``pipe`` passes it, for a pipeline whose graph
    is built (``serialize()`` or ``build()`` has run). What the DALI of another release
    must know for this pipeline to load there (see :func:`missing_arguments`)."""
    used: dict[str, set[str]] = {}
    for op in pipe._ops:  # DALI's own record of the graph's operators and their arguments
        args = used.setdefault(op._op._schema.Name(), set())
        args.update(name for name in {**op._op._init_args, **(op._op._call_args or {})} if not name.startswith("_"))
    return {name: sorted(args) for name, args in sorted(used.items())}


def missing_arguments(arguments: dict[str, list[str]]) -> list[str]:
    """``operator.argument`` for each one the installed DALI does not know (or operator it lacks)."""
    import nvidia.dali.backend as backend

    missing = []
    for op, args in arguments.items():
        try:
            schema = backend.GetSchema(op)
        except (KeyError, RuntimeError):  # "Schema for operator ... not registered"
            missing.append(op)
            continue
        missing.extend(f"{op}.{arg}" for arg in args if not schema.HasArgument(arg))
    return missing


def production_arguments(repository) -> dict[str, list[str]]:
    """:func:`pipeline_arguments` of every production pipeline of a repository, merged:
    what the DALI that serves it must know (``harness preflight`` records it)."""
    merged: dict[str, set[str]] = {}
    for pipe in production_pipelines(repository).values():
        pipe.serialize()  # builds the graph pipeline_arguments reads
        for op, names in pipeline_arguments(pipe).items():
            merged.setdefault(op, set()).update(names)
    return {op: sorted(names) for op, names in sorted(merged.items())}


def production_pipelines(repository) -> dict:
    """The serialized-ready production (``mixed`` decoder) pipelines of a model repository's
    DALI models, by model name, defined by this process's DALI without a GPU."""
    import importlib.util
    from pathlib import Path

    pipes = {}
    for model_file in sorted(Path(repository).glob("*/1/dali.py")):
        module_spec = importlib.util.spec_from_file_location(f"{model_file.parts[-3]}_dali", model_file)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        pipes[model_file.parts[-3]] = module.preprocess(device_id=None)  # no GPU needed to serialize
    return pipes
