"""``harness preflight``: the first command on a GPU host.

Proves on the running deployment what no CPU-side test can: that the server, DALI,
TensorRT, CUDA and Python are the manifest's (``deploy/versions.toml``), that every DALI
argument the pipeline uses exists in the DALI it runs, that the classifier's engine
loads, that known-answer photos come out of both ensembles and the taps model as recorded
(:mod:`harness.preflight.known_answers`), and that a bad image among concurrent good ones
fails only itself. Each check is one :class:`Row`; checks that cannot run where preflight
runs are skipped with the reason, never passed; the decode stack found is printed.

Which record, which rule (:mod:`harness.compare.tolerance`): a server is held to a record
of its own profile by the strict drift rule; a GPU host without its own record is compared
with the cpu record by the decoder rule (nvJPEG is not libjpeg-turbo); with its own record
(``--record``), it is held to that by the drift rule, and that record to the cpu one by the
decoder rule. The ``record`` column says which record a row used.

Imports only numpy, tritonclient and the standard library at module level: it runs in
the Triton image (``docker compose run --rm preflight``) as well as in the virtualenv.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from harness.client import CLASSIFIER, PIPELINES, InferenceError, TritonClient
from harness.compare.comparators import ARRAYS
from harness.compare.tolerance import tolerances_for
from harness.manifest import Manifest, decode_stack_versions, same_version, tensorrt_library_version
from harness.paths import DEFAULT_REPOSITORY
from harness.preflight import known_answers
from harness.preflight.bad_images import bad_images
from harness.preflight.known_answers import KnownAnswers
from harness.spec import DecodeSpec
from harness.task import get_task, repository_models
from harness.tolerance import Tolerance
from harness.verdict import Verdict

PASS, FAIL, SKIP, INFO = "pass", "fail", "skip", "info"
"""Row statuses; ``info`` is printed, never judged (what the container has)."""


@dataclass(frozen=True)
class Row:
    """One check: its outcome, what the manifest or the known answers expect, what was found."""

    check: str
    status: str
    expected: str = ""
    found: str = ""
    detail: str = ""
    record: str = ""
    """The known-answer record the row compared with (``cpu``, ``gpu``, ``gpu vs cpu``)."""


def profile_of(client: TritonClient) -> str:
    """``gpu`` when preprocess_dali runs in the DALI backend, else ``cpu``."""
    config = client.model_config("preprocess_dali")
    return "gpu" if config.get("backend") == "dali" else "cpu"


def _version_row(check: str, expected: str, found: str | None, unavailable: str) -> Row:
    if found is None:
        return Row(check, SKIP, expected, "", unavailable)
    return Row(check, PASS if same_version(expected, found) else FAIL, expected, found)


def _dali_version() -> str | None:
    try:
        import nvidia.dali
    except ImportError:
        return None
    return nvidia.dali.__version__


def environment_rows(manifest: Manifest, profile: str, repository: Path | None, known: KnownAnswers | None,
                     task: str | None = None) -> list[Row]:
    """Versions and the DALI schema of *this* process's environment: the server's own when
    preflight runs in the Triton image (or, for the cpu profile, the embedded server's virtualenv);
    for a ``task`` with engines of its own (the detector), their build stamps too."""
    gpu = profile == "gpu"
    python = ".".join(map(str, sys.version_info[:3]))
    rows = [
        _version_row("DALI version", manifest.dali.version, _dali_version(), "DALI is not installed here"),
        _version_row("Python version", manifest.python.version if gpu else manifest.embedded_python, python, ""),
        numpy_row(manifest),
    ]
    if gpu:
        rows.append(_version_row("TensorRT version", manifest.tensorrt.version, tensorrt_library_version(),
                                 "no libnvinfer here: run inside the Triton image"))
        rows.append(_version_row("CUDA version", manifest.cuda.version, os.environ.get("CUDA_VERSION"),
                                 "CUDA_VERSION is not set: run inside the Triton image"))
    if gpu and repository is not None:
        rows.extend(engine_rows(repository / CLASSIFIER / "1" / "model.plan.stamp.json", manifest))
        for engine in (e for e in repository_models(task).engines if e != CLASSIFIER):
            rows.extend(Row(f"{engine} {r.check}", r.status, r.expected, r.found, r.detail, r.record)
                        for r in engine_rows(repository / engine / "1" / "model.plan.stamp.json", manifest))
    rows.extend(decode_stack_rows(manifest))
    rows.extend(dali_schema_rows(repository, known))
    if gpu and repository is not None and known is not None:
        from harness.spec import SPEC_FILENAME, load_spec
        from harness.stage import Stage

        spec = load_spec(repository / SPEC_FILENAME)
        rows.append(hardware_decoder_row(known.images, spec.preprocess.decode,
                                         tolerances_for(spec.preprocess, spec.tolerances)[Stage.DECODE]))
    return rows


HARDWARE_DECODER = "hardware JPEG decoder"
HARDWARE_DECODER_COPIES = 4
"""Each known-answer photo goes into the batch this many times, interleaved: whichever share
of the batch ``hw_decoder_load`` hands to the hardware engine, every photo is in it."""


def hardware_decoder_row(images: dict[str, bytes], spec: DecodeSpec, tolerance: Tolerance,
                         decode: Callable[[list[bytes], DecodeSpec], list[np.ndarray]] | None = None) -> Row:
    """Whether the GPU's hardware JPEG engine decodes the known-answer photos as DALI's CUDA
    decoder does: the pipeline's decode with ``hw_decoder_load`` 0 (CUDA only) against its
    setting (the spec's, else DALI's default 0.9), by the decoder rule's decode tolerance.

    Nothing found says the engine honours ``jpeg_fancy_upsampling``; if it does not, its
    decode is "fancy upsampling off" (tens of levels at chroma edges) and the row fails with
    the remedy (``decode.hw_decoder_load = 0``). ``decode`` decodes a batch with a spec; the
    default is DALI's ``mixed`` decoder on GPU 0 (skipped where no GPU is visible)."""
    load = spec.hw_decoder_load
    if decode is None:
        if _dali_version() is None:
            return Row(HARDWARE_DECODER, SKIP, detail="DALI is not installed here")
        import nvidia.dali.backend as backend

        if backend.GetCUDADeviceCount() == 0:
            return Row(HARDWARE_DECODER, SKIP, detail="no GPU visible to this process (compose reserves one for preflight)")
        from harness.preprocessing.dali_graph import decode_images

        decode = decode_images
    names = list(images) * HARDWARE_DECODER_COPIES
    batch = [images[name] for name in names]
    setting = load if load else None  # with the spec at 0, what the engine would have done (DALI's default)
    try:
        cuda_only = decode(batch, dataclasses.replace(spec, hw_decoder_load=0.0))
        with_engine = decode(batch, dataclasses.replace(spec, hw_decoder_load=setting))
    except Exception as exc:  # a decoder that fails on the known answers: the row says how
        return Row(HARDWARE_DECODER, FAIL, detail=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")
    worst: tuple[Verdict, float, str] | None = None
    for name, a, b in zip(names, cuda_only, with_engine):
        judged = ARRAYS.judge(a, b, tolerance)
        verdict, rmse = judged.verdict, judged.rmse
        if worst is None or (verdict.rank, rmse) > (worst[0].rank, worst[1]):
            worst = (verdict, rmse, name)
    verdict, rmse, photo = worst
    expected = f"hw_decoder_load {setting if setting is not None else 'default'} vs 0: equal or close (decoder rule)"
    detail = f"worst {photo}: rmse {rmse:.3g}"
    if verdict != Verdict.DIVERGED:
        return Row(HARDWARE_DECODER, PASS, expected, verdict.value, detail)
    if load == 0:
        return Row(HARDWARE_DECODER, PASS, expected, verdict.value,
                   f"{detail}; the engine differs, and the spec keeps it off (decode.hw_decoder_load = 0)")
    return Row(HARDWARE_DECODER, FAIL, expected, verdict.value,
               f"{detail}: the hardware engine decodes otherwise than the CUDA decoder; set decode.hw_decoder_load = 0 "
               "in the spec (model_repository/preprocessing.toml)")


def numpy_row(manifest: Manifest) -> Row:
    """The numpy the server's Python resolves, and from where: in the Triton image, a numpy
    that DALI's wheel folder brought would come first unless the site-packages do
    (``[pythonpath]`` in the manifest, docker/triton.Dockerfile)."""
    row = _version_row("numpy version", manifest.numpy.version, np.__version__, "")
    return Row(row.check, row.status, row.expected, row.found, f"from {Path(np.__file__).parent.parent}")


def decode_stack_rows(manifest: Manifest) -> list[Row]:
    """The nvImageCodec and nvJPEG this environment's DALI loaded, beside the virtualenv's pins:
    printed, not judged (the image's own builds are read from no release branch; what a
    change of them does to the answers is the drift rows' to say)."""
    found = decode_stack_versions()
    return [Row(f"{name} version", INFO, pin.version, found[name] or "", "" if found[name] else "DALI is not installed here")
            for name, pin in (("nvImageCodec", manifest.nvimgcodec), ("nvJPEG", manifest.nvjpeg))]


def engine_rows(stamp: Path, manifest: Manifest) -> list[Row]:
    """From the engine builder's stamp (``docker/build_engine.py``): the TensorRT that built
    the served engine is the manifest's, and the precision it was built in, with TF32 off
    (trtexec turns TF32 on unless told ``--noTF32``: fp32 layers would run on 10-bit mantissas)."""
    import json

    if not stamp.is_file():
        return [Row("engine built by", SKIP, manifest.tensorrt.version, "", f"no build stamp at {stamp}")]
    built = json.loads(stamp.read_text())
    row = _version_row("engine built by", manifest.tensorrt.version, built.get("tensorrt"), "the stamp names no TensorRT")
    tf32_off = "--noTF32" in built.get("command", [])
    return [Row(row.check, row.status, row.expected, row.found, f"on {built.get('gpu', '?')}"),
            Row("engine precision", PASS if tf32_off else FAIL, "fp32 or fp16, TF32 off",
                built.get("precision", "not in the stamp"),
                "" if tf32_off else "built without --noTF32: its fp32 layers run in TF32; rebuild it "
                                    "(docker compose up engine-builder)")]


def dali_schema_rows(repository: Path | None, known: KnownAnswers | None) -> list[Row]:
    """Every operator argument the pipeline uses exists in this DALI, and the production
    (mixed-decoder) pipelines define and serialize with it."""
    if _dali_version() is None:
        return [Row("DALI operator schema", SKIP, detail="DALI is not installed here")]
    from harness.preprocessing.dali_graph import missing_arguments, production_pipelines  # here: loads DALI

    rows = []
    if known is not None and known.pipeline_arguments:
        missing = missing_arguments(known.pipeline_arguments)
        count = sum(len(args) for args in known.pipeline_arguments.values())
        rows.append(Row("DALI operator schema", FAIL if missing else PASS, f"{count} arguments of the pipeline",
                         ", ".join(missing) or "all present"))
    if repository is not None:
        try:
            pipes = production_pipelines(repository)
            for pipe in pipes.values():
                pipe.serialize()
            rows.append(Row("DALI pipelines serialize", PASS, "mixed decoder", ", ".join(pipes)))
        except Exception as exc:  # KeyError for an unknown argument, RuntimeError from the backend
            rows.append(Row("DALI pipelines serialize", FAIL, "mixed decoder", f"{type(exc).__name__}: {exc}"))
    return rows


def server_rows(client: TritonClient, manifest: Manifest, profile: str, task: str | None = None,
                repository: Path | None = None) -> list[Row]:
    expected = manifest.server.version if profile == "gpu" else manifest.embedded.version
    found = client.server_metadata().get("version")
    rows = [_version_row("server version", expected, found, "the server does not report its version")]
    models = _served(task, "added")
    not_ready = [m for m in models if not client.is_ready(m)]
    rows.append(Row("models ready", FAIL if not_ready else PASS, f"{len(models)} models",
                    _not_ready(not_ready, repository) if not_ready else "all ready"))
    want = "tensorrt_plan" if profile == "gpu" else "python"
    for model in _served(task, "engines"):
        config = client.model_config(model)
        platform = config.get("platform") or config.get("backend")
        rows.append(Row(f"{model} platform", PASS if platform == want else FAIL, want, platform or "?"))
    return rows


def _not_ready(models: list[str], repository: Path | None) -> str:
    """The models not ready, and when they are stage taps (a production server loads none: preflight
    reads the classifier's), how a check host loads them."""
    from harness.repository import CHECK_HOST, stage_taps  # here: the repository's configs only for this detail

    known = set(stage_taps(repository or DEFAULT_REPOSITORY))  # once: it reads every config of the repository
    taps = [m for m in models if m in known]
    return f"not ready: {', '.join(models)}" + (f" ({', '.join(taps)}: stage taps; {CHECK_HOST})" if taps else "")


def _served(task: str | None, kind: str) -> tuple[str, ...]:
    """The models (``added``) or engines (``engines``) preflight expects served: the default
    task's (the repository's base: the classifier's pipelines) and ``task``'s."""
    return tuple(dict.fromkeys((*getattr(repository_models(None), kind), *getattr(repository_models(task), kind))))


def known_answer_rows(client: TritonClient, known: KnownAnswers, tolerances: dict[str, Tolerance],
                      drift: dict[str, Tolerance], profile: str, own: KnownAnswers | None = None) -> list[Row]:
    """Both pipelines' stages and ensemble logits, and the classifier alone, against a record.

    With ``own`` (this host's own record) the server is held to it by ``drift`` and ``own``
    to ``known`` by ``tolerances`` (the decoder rule); else the server to ``known``, by
    ``drift`` when ``known`` is of the server's ``profile``, by ``tolerances`` when not."""
    target = own or known
    same = own is not None or known.profile == profile
    rule, rule_name = (drift, "drift rule") if same else (tolerances, "decoder rule")
    rows = [classifier_row(client, target, drift)]
    served: dict[str, dict[str, dict[str, np.ndarray]]] = {photo: {} for photo in target.images}
    failed: dict[str, str] = {}  # pipeline -> the first request it failed
    for photo, data in target.images.items():
        for pipeline in PIPELINES:
            try:
                served[photo][pipeline] = client.deployed(data, pipeline)
            except InferenceError as exc:
                failed.setdefault(pipeline, f"{photo}: {exc}")
    rows += compared_rows(served, target.stages, rule, rule_name, target.profile, failed)
    if own is not None:
        rows += compared_rows(own.stages, known.stages, tolerances, "decoder rule", f"{own.profile} vs {known.profile}",
                              prefix="record ")
    elif not same:
        rows.append(Row(f"{profile} record", SKIP, record=profile,
                        detail="none yet: once this table passes, `--record` keeps this host's answers, and later runs "
                               "hold it to them by the drift rule"))
    return rows


def classifier_row(client: TritonClient, record: KnownAnswers, drift: dict[str, Tolerance]) -> Row:
    """The classifier alone on a recorded model input gives the recorded logits: the same
    input on both sides, so the strict rule."""
    first = next(iter(record.images))
    recorded = record.stages[first]["dali"]
    try:
        logits = client.classifier_logits(recorded["input"][None])[0]
    except InferenceError as exc:
        return Row("classifier engine: known input", FAIL, "logits", str(exc), record=record.profile)
    judged = ARRAYS.judge(recorded["output"], logits, drift["output"])
    verdict, rmse = judged.verdict, judged.rmse
    return _verdict_row("classifier engine: known input", verdict, f"{first}: logits rmse {rmse:.3g}", "drift rule",
                        record.profile)


def compared_rows(found: dict, expected: dict, tolerances: dict[str, Tolerance], rule_name: str, record: str,
                  failed: dict[str, str] | None = None, prefix: str = "") -> list[Row]:
    """Per pipeline and stage, the worst verdict over the photos both hold (``found`` and
    ``expected``: ``[photo][pipeline][stage]``), then whether every top-1 class is kept;
    ``failed``: pipeline -> why a request of it failed (a ``request`` row)."""
    rows = []
    for pipeline in PIPELINES:
        photos = [p for p in expected if pipeline in found.get(p, {})]
        worst: dict[str, tuple[Verdict, float, str]] = {}  # per stage: the worst verdict, then the worst RMSE
        if failed and pipeline in failed:
            worst["request"] = (Verdict.DIVERGED, 0.0, failed[pipeline])
        for photo in photos:
            for stage, reference in expected[photo][pipeline].items():
                judged = ARRAYS.judge(reference, found[photo][pipeline][stage], tolerances[stage])
                verdict, rmse = judged.verdict, judged.rmse
                if stage not in worst or (verdict.rank, rmse) > (worst[stage][0].rank, worst[stage][1]):
                    worst[stage] = (verdict, rmse, f"worst {photo}: rmse {rmse:.3g}")
        for stage, (verdict, _, detail) in worst.items():
            rows.append(_verdict_row(f"{prefix}{pipeline}: {stage}", verdict, detail, rule_name, record))
        top1 = [int(np.argmax(found[p][pipeline]["output"])) == int(np.argmax(expected[p][pipeline]["output"]))
                for p in photos]
        count = len(expected)
        rows.append(Row(f"{prefix}{pipeline}: top-1", PASS if top1 and all(top1) and len(top1) == count else FAIL,
                        f"{count} of {count}", f"{sum(top1)} of {count}", record=record))
    return rows


def _verdict_row(check: str, verdict: Verdict, detail: str, rule_name: str, record: str) -> Row:
    return Row(check, FAIL if verdict == Verdict.DIVERGED else PASS, f"equal or close ({rule_name})", verdict.value,
               detail, record)


def known_result_rows(client: TritonClient, known: KnownAnswers, task, repository: Path,
                      own: KnownAnswers | None = None) -> list[Row]:
    """``task``'s known results (:attr:`harness.task_api.Task.known_results`: its ensembles' answers
    of the recorded photos) held to a record by the task's own check
    (:meth:`~harness.task_api.Task.check_known_results`). With ``own`` (this host's own record) the
    server is held to it and it to ``known``, as :func:`known_answer_rows` does."""
    declared = task.known_results
    target = own or known
    if declared.name not in target.results:
        return [Row(f"{declared.name} known answers", FAIL, record=target.profile,
                    detail=f"none in the {target.profile} record: record them again from a server with "
                           f"{declared.served_by} (make setup: harness preflight --record --photos data/photos)")]
    served: dict[str, dict[str, dict[str, np.ndarray]]] = {photo: {} for photo in target.result_images[declared.name]}
    failed: dict[tuple[str, str], str] = {}
    for photo, data in target.result_images[declared.name].items():
        for pipeline in PIPELINES:
            try:
                served[photo][pipeline] = known_answers.answer(client, declared, data, pipeline)
            except InferenceError as exc:
                failed[photo, pipeline] = f"{photo}: {exc}"

    def rows(checks, record: str) -> list[Row]:
        return [Row(c.check, PASS if c.passed else FAIL, c.expected, c.found, c.detail, record) for c in checks]

    result = rows(task.check_known_results(served, target.results[declared.name], failed, repository), target.profile)
    if own is not None:
        if declared.name in known.results:
            result += rows(task.check_known_results(own.results[declared.name], known.results[declared.name], {},
                                                    repository, prefix="record "), f"{own.profile} vs {known.profile}")
        else:
            result.append(Row(f"record {declared.name} known answers", FAIL, record=known.profile,
                              detail=f"none in the {known.profile} record to hold this host's to: record it again"))
    return result


def isolation_row(client_factory, photos: list[bytes], clients: int = 8, rounds: int = 6) -> Row:
    """A bad image among concurrent good ones fails only its own request (classify_dali).

    ``clients`` threads each send ``rounds`` rounds of one request per good photo and per
    bad variant, so dynamic batches mix them."""
    bad = bad_images(photos[0])

    def work(worker: int) -> tuple[int, int, list[str]]:
        good_failed, bad_passed, reasons = 0, 0, []
        with client_factory() as client:
            for r in range(rounds):
                for i, data in enumerate(photos):
                    try:
                        client.classify([data], "dali", top_k=1)
                    except InferenceError as exc:
                        good_failed += 1
                        reasons.append(str(exc))
                    name = list(bad)[(worker + r + i) % len(bad)]
                    try:
                        client.classify([bad[name]], "dali", top_k=1)
                        bad_passed += 1
                    except InferenceError:
                        pass
        return good_failed, bad_passed, reasons

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(work, range(clients)))
    good_failed = sum(r[0] for r in results)
    bad_passed = sum(r[1] for r in results)
    sent = clients * rounds * len(photos)
    detail = f"{sent} good and {sent} bad requests from {clients} clients"
    if good_failed:
        detail += f"; e.g. {next(reason for r in results for reason in r[2])}"
    ok = good_failed == 0 and bad_passed == 0
    return Row("bad image fails only itself", PASS if ok else FAIL, "0 good failed, 0 bad served",
               f"{good_failed} good failed, {bad_passed} bad served", detail)


BATCHED_MODELS = ("validate_image", "preprocess_dali", "classifier")
"""The models of classify_dali whose dynamic batcher should form batches under concurrent load."""


def concurrent_rows(client_factory, photos: list[bytes], metrics_url: str | None) -> list[Row]:
    """Bad-image isolation under concurrent load, and, from Triton's metrics over the same
    load, whether dynamic batches form (ragged inputs batch in the DALI backend too)."""
    from loadtest.metrics import MetricsError, breakdown, scrape, scrape_settled

    before = None
    if metrics_url:
        try:
            before = scrape(metrics_url)
        except MetricsError as exc:
            skipped = Row("dynamic batches form", SKIP, detail=str(exc))
    rows = [isolation_row(client_factory, photos)]
    if before is None:
        return rows + [skipped if metrics_url else Row("dynamic batches form", SKIP, detail="no metrics URL")]
    after = scrape_settled(metrics_url)
    for model in BATCHED_MODELS:
        stats = breakdown(before, after, model)
        rows.append(Row(f"dynamic batches form: {model}", PASS if stats.avg_batch > 1 else FAIL,
                        "average batch > 1", f"{stats.avg_batch:.2f}", f"{stats.requests} requests"))
    return rows


def run_checks(client: TritonClient, client_factory, manifest: Manifest, known: KnownAnswers | None,
               tolerances: dict[str, Tolerance] | None = None, repository: Path | None = None,
               in_server_env: bool = False, metrics_url: str | None = None,
               own: KnownAnswers | None = None, task: str | None = None) -> list[Row]:
    """Every check, in order: versions, schema, models, known answers, concurrent load.

    ``known`` is the cpu profile's record; ``own`` this host's own record (a GPU host's,
    ``--record``), if any. ``in_server_env``: this process runs in the server's own
    environment (the Triton image, or the embedded server's virtualenv), so its DALI,
    TensorRT, CUDA, Python and decode stack are the server's; otherwise those rows are
    skipped. ``tolerances`` default to the decoder rule for the repository's spec (the
    drift rule always comes from it too). ``metrics_url``: Triton's metrics, to see the
    batches formed. ``task``: the task's models are checked ready too, its engines' platforms,
    and its known results where it declares them (a detector's boxes, a segmenter's masks on
    their recorded photos: :func:`known_result_rows`); the preprocessing's and the classifier's
    known answers are checked whatever the task."""
    profile = profile_of(client)
    rows = [Row("profile", PASS, "", profile)]
    rows += server_rows(client, manifest, profile, task, repository)
    if in_server_env:
        rows += environment_rows(manifest, profile, repository, known, task)
    else:
        rows.append(Row("versions inside the server's image", SKIP,
                        detail="run it there: docker compose run --rm preflight"))
    if known is None:
        rows.append(Row("known answers", FAIL, detail="none recorded: run `make setup` (harness preflight --record)"))
    else:
        from harness.spec import SPEC_FILENAME, load_spec

        spec = load_spec(Path(repository or "model_repository") / SPEC_FILENAME)
        if tolerances is None:
            tolerances = tolerances_for(spec.preprocess, spec.tolerances)
        drift = tolerances_for(spec.preprocess, drift=True)
        rows += known_answer_rows(client, known, tolerances, drift, profile, own)
        if get_task(task).known_results is not None:  # the task's served result against the record, by its check
            rows += known_result_rows(client, known, get_task(task), Path(repository or "model_repository"), own)
        rows += concurrent_rows(client_factory, list(known.images.values()), metrics_url)
    return rows


def passed(rows: list[Row]) -> bool:
    """No row failed, and something was checked."""
    return any(r.status == PASS for r in rows) and not any(r.status == FAIL for r in rows)
