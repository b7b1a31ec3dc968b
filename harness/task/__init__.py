"""Tasks: what the harness does after the model input. The registry, above the task modules.

The API a task implements is :mod:`harness.task_api`, a package at the bottom (:class:`Task`,
its comparators and typed results; its names are re-exported here for the tasks' users); it
imports only the vocabulary, so the mechanisms (deployment, compare, report) speak it without
knowing any task. This module is the one registry ``--task`` reads:
a name -> its task, each task's module imported only when it is first asked for (``import
harness.task`` loads no task's own dependencies: no shapely, no detection package).

Where tasks come from, each registered like the others:

- built in: :data:`BUILT_IN` (the first is the default);
- installed: an entry point of the group ``harness.tasks`` (``name = "package.module:Class"``);
- the user's own file: ``--task path/to/file.py:NAME`` (a :class:`Task` subclass or instance,
  loaded by :mod:`harness.user_code` as a script would run it), known by its ``name`` after.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from harness.errors import UsageError
from harness.task_api import Answer, AnswerRule, Event, Events, Judgement, OutputChoice, Section, Task, claim
from harness.task_api.models import ShippedModel

BUILT_IN = {
    "classification": "harness.task.classification:Classification",
    "embedding": "harness.task.embedding:Embedding",
    "detection": "harness.task.detection:Detection",
    "ocr": "harness.task.ocr:Ocr",
    "segmentation": "harness.task.segmentation:Segmentation",
}
"""Name -> ``module:Class`` of the tasks the project ships, in order (the first is the default)."""
ANSWER_RULES = {
    "classification": AnswerRule((), "harness.compare.answers:judge_top_k"),
    "detection": AnswerRule(("BOXES", "SCORES"), "harness.detection.compare:judge_answer"),
    "ocr": AnswerRule(("BOXES", "SCORES", "TEXTS"), "harness.ocr.compare:judge_answer"),
    "segmentation": AnswerRule(("MATTE", "MASK"), "harness.segmentation.compare:judge_answer"),
}
"""Name -> what each shipped task's served answer holds and the rule judging it against the
photo's answer alone (the load test and watch: :func:`answer_rule`), named as :data:`BUILT_IN`
names the tasks: the Locust image judges answers without the image libraries the tasks import."""
ENTRY_POINTS = "harness.tasks"
"""The entry point group an installed package registers its tasks in."""


class Registry(Mapping[str, Task]):
    """``--task`` name -> the task: where each comes from (``module:Class``) is known up front,
    the task itself made on first use (as torchvision v2 keeps kernels by type, asked when needed)."""

    def __init__(self, places: Mapping[str, str]):
        self._places = dict(places)
        self._tasks: dict[str, Task] = {}

    def __getitem__(self, name: str) -> Task:
        if name not in self._tasks:
            module, _, attribute = self._places[name].partition(":")  # KeyError: no such task
            self._tasks[name] = _instance(getattr(importlib.import_module(module), attribute), self._places[name])
        return self._tasks[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._places)

    def __len__(self) -> int:
        return len(self._places)

    def add(self, task: Task, origin: str) -> Task:
        """Register ``task`` (made elsewhere: the user's file) under its name, again when the same
        ``origin`` is loaded again; a name another task has is refused."""
        taken = self._places.get(task.name)
        if taken is not None and taken != origin:
            raise UsageError(f"task {origin}: its name {task.name!r} is the name of another task ({taken})")
        self._places[task.name] = origin
        self._tasks[task.name] = task
        return task


def _instance(obj, origin: str) -> Task:
    """A task from what a module defines: a :class:`Task` subclass (made) or instance."""
    if isinstance(obj, type) and issubclass(obj, Task):
        obj = obj()
    if not isinstance(obj, Task):
        raise UsageError(f"task {origin}: {type(obj).__name__} is not a harness.task.Task (a subclass or an instance)")
    if not isinstance(getattr(obj, "name", None), str) or not obj.name:
        raise UsageError(f"task {origin}: a task needs a name (the class attribute `name`)")
    return obj


def _installed() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINTS) if ep.name not in BUILT_IN}


TASKS = Registry({**BUILT_IN, **_installed()})
"""The one registry of tasks, in registration order (the first is the default)."""


def is_user_file(name: str) -> bool:
    """``path/to/file.py:NAME``: the user's own task."""
    return name.rpartition(":")[0].endswith(".py")


def get_task(name: str | None) -> Task:
    """The task ``name`` (None: the default, classification; ``FILE.py:NAME``: the user's task,
    registered under its own name); :class:`UsageError` naming the tasks if unknown."""
    if name is None:
        return TASKS[next(iter(TASKS))]
    if is_user_file(name):
        from harness.user_code import load_object

        return TASKS.add(_instance(load_object(name, "--task", "a task's name"), name), name)
    if name not in TASKS:
        raise UsageError(f"--task {name}: no such task; tasks: {', '.join(TASKS)}, or path/to/file.py:NAME")
    return TASKS[name]


def task_name(name: str) -> str:
    """What ``--task`` takes (argparse's ``type``): a registered task's name, or the user's
    ``FILE.py:NAME`` loaded now, so that a bad one is refused before anything starts."""
    return get_task(name).name if is_user_file(name) or name not in TASKS else name


def repository_models(name: str | None):
    """This repository's models serving the task ``name`` (None: the default): its
    :attr:`Task.repository`; :class:`UsageError` when the repository deploys none of it."""
    task = get_task(name)
    if task.repository is None:
        raise UsageError(f"--task {name}: this repository deploys no model of the {task.name} task; give --model NAME "
                         "for a model of yours on the server")
    return task.repository


DEPLOYMENT_RECORD = ".deployment.json"
"""``<name>.deployment.json`` at a repository's root: what ``harness deploy --name NAME`` wrote there."""


@dataclass(frozen=True)
class NamedDeployment:
    """A deployment its user named (``harness deploy --name``), as its record at the repository's root says."""

    name: str
    task: str
    models: tuple[str, ...]
    """Every model it wrote, by the one naming rule (:meth:`harness.client.TaskModels.renamed`)."""
    release: str
    """The Triton release it was written for (``deploy/versions.toml``'s, or one the manifest knows)."""
    reference: str = ""
    """The training definition it was deployed for (``--reference``)."""
    versions: tuple[int, ...] = (1,)
    """The versions of its model, oldest first: each deploy of the same name with the same preprocessing adds the
    next one beside the others (Triton's version folders; the ensemble calls the latest)."""

    @property
    def repository(self):
        """Its models as the harness reads them (:meth:`harness.client.TaskModels.named`)."""
        own = repository_models(self.task)
        return own.named(self.name, [m for m in own.added if own.renamed(self.name, m) in self.models])

    def write(self, repository: Path) -> None:
        record = {"deployment": self.name, "task": self.task, "release": self.release, "reference": self.reference,
                  "models": list(self.models), "versions": list(self.versions)}
        (repository / f"{self.name}{DEPLOYMENT_RECORD}").write_text(json.dumps(record, indent=1) + "\n")


def named_deployments(repository: Path) -> dict[str, NamedDeployment]:
    """The deployments named by their users in ``repository`` (by name; none in this project's own)."""
    found = {}
    for path in sorted(Path(repository).glob(f"*{DEPLOYMENT_RECORD}")):
        try:
            record = json.loads(path.read_text())
            versions = tuple(record.get("versions", [1]))  # a record written before versions: its one
            if not versions or not all(type(v) is int and v >= 1 for v in versions):
                raise ValueError(f"versions {list(versions)} are not Triton's (whole numbers from 1)")
            found[record["deployment"]] = NamedDeployment(record["deployment"], record["task"], tuple(record["models"]),
                                                          record["release"], record.get("reference", ""), versions)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}: not a deployment record harness deploy wrote ({exc})") from None
    return found


def named_deployment(repository: Path, name: str) -> NamedDeployment:
    """The deployment ``name`` of ``repository``; :class:`UsageError` naming those it holds."""
    found = named_deployments(repository)
    if name not in found:
        raise UsageError(f"--deployment {name}: {repository} holds no deployment of that name (it holds: "
                         f"{', '.join(found) or 'none named'})")
    return found[name]


def shipped_models() -> list[str]:
    """Every model this repository ships: those of each registered task (:attr:`TaskModels.added`),
    in registration order, each once. Imports every task."""
    return list(dict.fromkeys(m for task in TASKS.values() if task.repository for m in task.repository.added))


def shipped_engines() -> list[str]:
    """Of :func:`shipped_models`, those built as TensorRT engines on a GPU. Imports every task."""
    return list(dict.fromkeys(m for task in TASKS.values() if task.repository for m in task.repository.engines))


def shipped_files() -> list[ShippedModel]:
    """Of :func:`shipped_models`, those that need more than their folder (:attr:`TaskModels.shipped`:
    their export, the check of their files, their cpu profile's replacement), each once, in
    registration order (the default task's first). Imports every task."""
    found: dict[str, ShippedModel] = {}
    for task in TASKS.values():
        for model in task.repository.shipped if task.repository else ():
            found.setdefault(model.name, model)
    return list(found.values())


def answer_rule(answer) -> Callable[[Answer, Answer], Judgement]:
    """The rule judging a served answer shaped like ``answer`` (output name -> array): that of the
    task in :data:`ANSWER_RULES` whose outputs it holds, the most of them first (an OCR model's
    boxes and texts before a detector's boxes); the default task's (no outputs named) otherwise."""
    held = [rule for rule in ANSWER_RULES.values() if set(rule.outputs) <= set(answer)]
    return max(held, key=lambda rule: len(rule.outputs)).load()


def claimed_by(model) -> tuple[Task, str]:
    """The task ``model`` (a ``ModelInfo``) serves, and why, when ``--task`` is not given: the
    first registered task whose signs it shows (a label file or a name like logits:
    classification; a name like an embedding: embedding), else the default; a task whose sign
    is a structure (a detector's boxes: :attr:`Task.claims_first`) is asked first. Asks, so
    imports, every task."""
    return claim(model, list(TASKS.values()))


__all__ = ["ANSWER_RULES", "BUILT_IN", "DEPLOYMENT_RECORD", "TASKS", "Event", "Events", "NamedDeployment", "OutputChoice",
           "Registry", "Section", "Task", "answer_rule", "claimed_by", "get_task", "named_deployment", "named_deployments",
           "repository_models", "shipped_engines", "shipped_files", "shipped_models", "task_name"]
