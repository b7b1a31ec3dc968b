"""Tasks: what the harness does after the model input, one module per task.

A :class:`~harness.task.base.Task` owns the deployed output it reads, its postprocessing
(the ``postprocess`` result stage), how two results are compared and judged, its per-image
events, its effect on a labeled set, its CSV columns, its report sections and what
``diagnose`` minimises at the output (see :mod:`harness.task.base`). The jobs, the files
and the report writers ask the task; none of them names one.

A new task is one module and one line here: :func:`register` its :class:`Task` (the
registry ``--task`` reads, like torchvision v2's kernels registered per type).
"""

from __future__ import annotations

from harness.errors import UsageError
from harness.task.base import Event, Events, OutputChoice, Section, Task

TASKS: dict[str, Task] = {}
"""``--task`` name -> the task, in registration order (the first is the default)."""


def register(task: Task) -> Task:
    TASKS[task.name] = task
    return task


def get_task(name: str | None) -> Task:
    """The task ``name`` (None: the default, classification); :class:`UsageError` naming the tasks if unknown."""
    if name is None:
        return next(iter(TASKS.values()))
    if name not in TASKS:
        raise UsageError(f"--task {name}: no such task; tasks: {', '.join(TASKS)}")
    return TASKS[name]


def claimed_by(model) -> tuple[Task, str]:
    """The task ``model`` (a ``ModelInfo``) serves, and why, when ``--task`` is not given: the
    first registered task whose signs it shows (a label file or a name like logits:
    classification; a name like an embedding: embedding), else the default; a task whose sign
    is a structure (a detector's boxes: :attr:`Task.claims_first`) is asked first."""
    for task in sorted(TASKS.values(), key=lambda t: not t.claims_first):
        why = task.claims(model)
        if why:
            return task, why
    return get_task(None), "the default task"


from harness.task.classification import Classification  # noqa: E402
from harness.task.detection import Detection  # noqa: E402
from harness.task.embedding import Embedding  # noqa: E402

register(Classification())
register(Embedding())
register(Detection())

__all__ = ["TASKS", "Event", "Events", "OutputChoice", "Section", "Task", "claimed_by", "get_task", "register"]
