"""Does the deployment answer the same twice? Repeatability and batch invariance.

:func:`check_repeatability` sends the same images N times to each :class:`Probe` (a model, its
input, the outputs it exposes as stages) in three ways, and compares every answer with the
image's first answer sent alone:

- ``alone``: one image per request, one request at a time;
- ``request``: the image inside one request with companions (every batch size of
  ``batch_sizes``, the image at a varying position, other companions each round);
- ``concurrent``: one image per request from ``concurrency`` threads at once, so Triton's
  dynamic batcher puts it in server-side batches of varying size and company.

Per stage and image: the largest deviation from the first answer (:class:`Spread`), judged with
the drift rule (one deployment against itself: :data:`harness.compare.tolerance.DRIFT_TOLERANCES`),
and top-1 changes for scores outputs. Kept per image: its first answer and running maxima, so
memory grows with the images, not the repeats. Uses :class:`harness.client.TritonClient` as it is.
"""

from __future__ import annotations

import concurrent.futures
import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from harness.client import TritonClient
from harness.compare.comparators import ARRAYS, SAME_DEPLOYMENT, TOP_K
from harness.packing import pack_images
from harness.preprocessing import TAP_TENSORS
from harness.results.interface import Case, Status
from harness.stage import Stage
from harness.task import repository_models
from harness.tolerance import Tolerance
from harness.verdict import Verdict

MODES = ("alone", "request", "concurrent")
DEFAULT_BATCH_SIZES = (2, 4, 8)
DEFAULT_REPEATS = 3
DEFAULT_CONCURRENCY = 8


@dataclass(frozen=True)
class Probe:
    """One model of the deployment and what it exposes: ``outputs`` {stage: output tensor};
    ``scores`` names the stages that are class scores (top-1 is compared); ``prepare`` turns an
    image's bytes into what the model takes (default: the bytes), ``pack`` a list of those into
    a request's input ``input`` (default: stack them), or into every input (a dict by name);
    ``batching`` False sends only ``alone`` requests (a model without dynamic batching, or with
    outputs whose shape varies per image)."""

    model: str
    input: str
    outputs: dict[str, str]
    scores: tuple[str, ...] = ()
    pack: Callable[[list], np.ndarray] = np.stack
    batching: bool = True
    prepare: Callable[[bytes], object] = lambda data: data
    batched: bool = True
    """False: the model has no batch dimension (``max_batch_size`` 0): one image a request."""


@dataclass(frozen=True)
class Spread:
    """One stage of one image over every answer."""

    probe: str
    stage: str
    image: str
    answers: int
    max_abs: float
    """Largest |answer - first answer| over every element and answer."""
    top1_changes: int
    worst_mode: str
    """The mode of the answer furthest from the first (``-`` when all are equal)."""
    verdict: Verdict

    def to_dict(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "verdict"}, "verdict": self.verdict.value}


@dataclass(frozen=True)
class RepeatResult:
    repeats: int
    batch_sizes: tuple[int, ...]
    concurrency: int
    spreads: tuple[Spread, ...]

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(s.verdict for s in self.spreads)

    # -- the report interface (harness.results.interface); verdict above: the worst spread's --

    job = "repeat"

    @property
    def title(self) -> str:
        models = ", ".join(dict.fromkeys(s.probe for s in self.spreads))
        images = len({s.image for s in self.spreads})
        return (f"Repeatability of {models}: {images} images, {self.repeats} rounds, batch sizes "
                f"{list(self.batch_sizes)}, {self.concurrency} concurrent")

    @property
    def passed(self) -> bool:
        """Exit status 0: every answer repeated within the drift rule."""
        return self.verdict is not Verdict.DIVERGED

    def cases(self) -> list[Case]:
        """Each model and stage over every image (failed when an answer moved beyond the drift
        rule), the reason with its largest spread and top-1 changes."""
        worst = {}
        for s in self.spreads:
            if s.max_abs >= worst.get((s.probe, s.stage), (-1.0,))[0]:
                worst[(s.probe, s.stage)] = (s.max_abs, s.image, s.worst_mode)
        cases = []
        for row in summary_rows(self):
            spread, image, mode = worst[(row["probe"], row["stage"])]
            where = f" ({image}, sent {mode})" if mode != "-" else ""
            reason = (f"{row['verdict'].value}: {row['answers']} answers of {row['images']} images, largest spread "
                      f"{row['max_abs']:.3g}{where}, top-1 changes {row['top1_changes']}")
            cases.append(Case(row["stage"], f"repeat.{row['probe']}",
                              Status.FAILED if row["verdict"] is Verdict.DIVERGED else Status.PASSED, reason))
        return cases

    def to_dict(self) -> dict:
        return {"repeats": self.repeats, "batch_sizes": list(self.batch_sizes), "concurrency": self.concurrency,
                "verdict": self.verdict.value, "spreads": [s.to_dict() for s in self.spreads]}


class _Tally:
    """One stage of one image: its first answer, and how far every later one strayed from it,
    each judged by check's rule (:meth:`harness.compare.comparators.Arrays.judge`: ``atol`` and
    ``rtol``, the fraction beyond them, the mean bound)."""

    __slots__ = ("first", "tolerance", "answers", "max_abs", "top1", "worst_mode", "verdicts")

    def __init__(self, first: np.ndarray, tolerance: Tolerance):
        self.first, self.tolerance, self.answers, self.max_abs, self.top1, self.worst_mode = (
            first, tolerance, 1, 0.0, 0, "-")
        self.verdicts: set[Verdict] = set()

    @property
    def verdict(self) -> Verdict:
        """The worst of the comparators' verdicts on the later answers (equal with none)."""
        return Verdict.worst(self.verdicts)

    def add(self, answer: np.ndarray, mode: str, scores: bool) -> None:
        self.answers += 1
        self.verdicts.add(ARRAYS.judge(self.first, answer, self.tolerance).verdict)
        if answer.shape != self.first.shape:
            deviation = math.inf
        else:
            with np.errstate(invalid="ignore"):
                d = np.abs(answer.astype(np.float64) - self.first)
            deviation = float(d.max(initial=0.0)) if np.isfinite(d).all() else math.inf
        if deviation > self.max_abs:
            self.max_abs, self.worst_mode = deviation, mode
        if scores and int(np.argmax(answer)) != int(np.argmax(self.first)):
            self.top1 += 1
            self.verdicts.add(TOP_K.flip(self.first, int(np.argmax(answer)), SAME_DEPLOYMENT).verdict)


def check_repeatability(client_factory: Callable[[], TritonClient], probes: Sequence[Probe],
                        images: Sequence[tuple[str, bytes]], tolerances: Callable[[str], Tolerance],
                        repeats: int = DEFAULT_REPEATS, batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                        concurrency: int = DEFAULT_CONCURRENCY, seed: int = 0) -> RepeatResult:
    """Send ``images`` ((name, encoded bytes)) ``repeats`` times per mode
    to every probe (see the module doc) and return the spread of every stage of every image.
    ``tolerances(stage)`` is the drift tolerance of a stage. Defaults: 3 repeats, batch sizes
    2/4/8, 8 concurrent threads, companions drawn with ``seed`` 0."""
    rng = random.Random(seed)
    spreads: list[Spread] = []
    names = [n for n, _ in images]
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        clients = [client_factory() for _ in range(concurrency)]
        try:
            for probe in probes:
                items = [probe.prepare(data) for _, data in images]

                def send(client: TritonClient, idx: list[int]) -> dict[str, np.ndarray]:
                    packed = probe.pack([items[i] for i in idx])
                    out = client.infer(probe.model, packed if isinstance(packed, dict) else {probe.input: packed},
                                       list(probe.outputs.values()))
                    return out if probe.batched else {name: value[None] for name, value in out.items()}

                tallies: dict[tuple[str, int], _Tally] = {}

                def record(idx: list[int], out: dict[str, np.ndarray], mode: str) -> None:
                    for stage, tensor in probe.outputs.items():
                        for row, i in enumerate(idx):
                            value = out[tensor][row]
                            tally = tallies.get((stage, i))
                            if tally is None:
                                tallies[(stage, i)] = _Tally(value.astype(np.float64), tolerances(stage))
                            else:
                                tally.add(value, mode, stage in probe.scores)

                for i in range(len(images)):  # the first answers: alone, one at a time
                    record([i], send(clients[0], [i]), "alone")
                for _ in range(repeats):
                    for i in range(len(images)):
                        record([i], send(clients[0], [i]), "alone")
                    if not probe.batching:
                        continue
                    for size in batch_sizes:
                        for i in range(len(images)):
                            others = [j for j in range(len(images)) if j != i] or [i]
                            idx = [rng.choice(others) for _ in range(size - 1)]
                            idx.insert(rng.randrange(size), i)
                            out = send(clients[0], idx)
                            record([i], {t: v[idx.index(i):idx.index(i) + 1] for t, v in out.items()}, "request")
                    order = list(range(len(images))) * max(1, concurrency // max(1, len(images)))
                    rng.shuffle(order)
                    futures = {pool.submit(send, clients[k % concurrency], [i]): i for k, i in enumerate(order)}
                    for future in concurrent.futures.as_completed(futures):
                        record([futures[future]], future.result(), "concurrent")
                stage_order = list(probe.outputs)
                for (stage, i), t in sorted(tallies.items(), key=lambda kv: (stage_order.index(kv[0][0]), kv[0][1])):
                    spreads.append(Spread(probe.model, stage, names[i], t.answers, t.max_abs, t.top1, t.worst_mode,
                                          t.verdict))
        finally:
            for client in clients:
                client.close()
    return RepeatResult(repeats, tuple(batch_sizes), concurrency, tuple(spreads))


def summary_rows(result: RepeatResult) -> list[dict]:
    """Per probe and stage: images, answers, largest spread, top-1 changes, worst verdict."""
    rows: dict[tuple[str, str], dict] = {}
    for s in result.spreads:
        row = rows.setdefault((s.probe, s.stage), {"probe": s.probe, "stage": s.stage, "images": 0, "answers": 0,
                                                   "max_abs": 0.0, "top1_changes": 0, "verdicts": []})
        row["images"] += 1
        row["answers"] += s.answers
        row["max_abs"] = max(row["max_abs"], s.max_abs)
        row["top1_changes"] += s.top1_changes
        row["verdicts"].append(s.verdict)
    for row in rows.values():
        row["verdict"] = Verdict.worst(row.pop("verdicts"))
    return list(rows.values())


def deployment_probes(deployment, recipe: Callable[[bytes], dict]) -> list[Probe]:
    """Any deployment found on the server (:mod:`harness.deployment`): its production scores,
    sent as the model takes an image (through the client's function, for ``--client``: the
    model is then the only step), and the step that produces them alone on the reference's
    model input, where an ensemble can run it alone."""
    request = deployment.request  # the file's bytes, or the client's tensors made of them (every input, by name)
    probes = [Probe(deployment.model, "", {"output": deployment.scores_output}, scores=("output",),
                    pack=lambda files: request.inputs(files if request.batched else files[:1]),
                    batching=request.batched, batched=request.batched)]
    isolation = getattr(deployment, "isolations", {}).get(Stage.OUTPUT)
    if isolation is not None:
        from harness.deployment.discovery import numpy_dtype

        step, dtype = isolation.step, numpy_dtype(isolation.step.input(isolation.input_name).data_type)
        probes.append(Probe(step.name, isolation.input_name, {"classifier": isolation.output_name},
                            scores=("classifier",), batching=step.batched, batched=step.batched,
                            pack=np.stack if step.batched else (lambda items: items[0]),
                            prepare=lambda data: isolation.source.from_stage(recipe(data)["input"], dtype)))
    return probes


def repository_probes(pipeline: str, recipe: Callable[[bytes], dict], task: str | None = None) -> list[Probe]:
    """This repository's deployment of ``task``: the ``classify_<pipeline>`` ensemble's logits
    (``embed_<pipeline>``'s embedding), its taps model's stages (alone only: no dynamic
    batching there, and decoded images vary in size), and the classifier (the embedder) alone
    on the reference's model input."""
    models = repository_models(task)
    return [
        Probe(models.ensemble(pipeline), "IMAGE", {"output": models.ensemble_output}, scores=("output",),
              pack=pack_images),
        Probe(models.taps(pipeline), "IMAGE", {str(stage): name for stage, name in TAP_TENSORS.items()}, pack=pack_images,
              batching=False),
        Probe(models.model, models.model_input, {"classifier": models.model_output}, scores=("classifier",),
              prepare=lambda data: recipe(data)["input"]),
    ]
