"""The preprocessing operations, one module each, and the one registry of them.

An operation is one decision of the preprocessing (the channel order, the normalization, ...).
Its module declares, in one place (after DALI's operator schema and torchvision v2's kernel
registry, ``{functional: {type: kernel}}``):

- its spec keys (:class:`Key`: table, name, default, choices, doc): what the spec reads and
  validates (:mod:`harness.spec` loops over :data:`OPERATIONS`);
- its kernel for each backend (:data:`BACKENDS`), registered with :meth:`Operation.kernel`:
  each library's step of the operation's stage loops over the stage's operations
  (:func:`apply`), naming none;
- the one rule of what a backend cannot do (:meth:`Operation.refusal`, :func:`refusal`): a
  backend without a kernel, or whose kernel refuses a value, says why; the same answer tells
  whether a spec can be served and whether diagnose can try a hypothesis;
- the alternatives users get wrong (:class:`Alternative`: diagnose's hypotheses);
- its wording: ``describe`` (the preprocessing in words), ``hint`` (where a stage's divergence
  comes from).

This package imports only the standard library and the harness's vocabulary: the spec, which
runs inside the Triton and TensorRT containers, reads it. A kernel imports its library when it
runs (numpy, OpenCV, torch, DALI: whichever the backend is).
"""

from __future__ import annotations

from typing import Any

from harness.operations.base import BACKENDS, Alternative, Key, Operation
from harness.stage import Stage

OPERATIONS: dict[str, Operation] = {}
"""Name -> operation, in pipeline order (within a stage, the order their kernels run)."""


def register(operation: Operation) -> Operation:
    """Add an operation to :data:`OPERATIONS` (its keys owned by it alone)."""
    if operation.name in OPERATIONS:
        raise ValueError(f"operation {operation.name!r} is registered already")
    owned = {k.path for op in OPERATIONS.values() for k in op.keys}
    if taken := owned & {k.path for k in operation.keys}:
        raise ValueError(f"{operation.name}: keys {sorted(taken)} belong to another operation")
    OPERATIONS[operation.name] = operation
    return operation


def keys() -> list[Key]:
    """Every registered operation's keys."""
    return [k for op in OPERATIONS.values() for k in op.keys]


def of_stage(stage: Stage) -> list[Operation]:
    """The operations of ``stage``, in the order their kernels run."""
    return [op for op in OPERATIONS.values() if op.stage is stage]


def apply(stage: Stage, backend: str, x: Any, p: Any) -> Any:
    """``x`` through each of ``stage``'s operations' ``backend`` kernels, in order."""
    for op in of_stage(stage):
        x = op.kernels[backend](x, p)
    return x


def refusal(backend: str, p: Any, but: tuple[Operation, ...] = ()) -> str | None:
    """Why ``backend`` cannot preprocess as ``p`` asks, by the first operation that refuses
    (None: every operation can); ``but``: operations another library does there (a reference
    recipe's own decoder of the switches)."""
    for op in OPERATIONS.values():
        if op not in but and (reason := op.refusal(backend, p)) is not None:
            return reason
    return None


def alternatives(recipe: str, reference: Any, deployed: Any, *names: str) -> list[Alternative]:
    """The named operations' alternatives to ``reference`` under ``recipe`` (diagnose's catalogue)."""
    return [a for name in names for a in OPERATIONS[name].alternatives(recipe, reference, deployed)]


def partners() -> list[tuple[str, str]]:
    """Every operation's compound alternatives (pairs of culprits), in registration order."""
    return [pair for op in OPERATIONS.values() for pair in op.partners]


def invalid(p: Any) -> str | None:
    """Why ``p``'s values do not go together, by the first operation that says so (None: they do)."""
    for op in OPERATIONS.values():
        if (reason := op.invalid(p)) is not None:
            return reason
    return None


def hint(stage: Stage) -> str:
    """The stage's operations' hints, joined."""
    return ", ".join(op.hint for op in of_stage(stage))


# The built-in operations, in pipeline order: within a stage, the order their kernels run.
from harness.operations import channels, crop, decode, normalization, resize_filter, resize_mode  # noqa: E402

for _operation in (decode.OPERATION, resize_filter.OPERATION, resize_mode.OPERATION, crop.OPERATION, normalization.OPERATION,
                   channels.OPERATION):
    register(_operation)


__all__ = ["BACKENDS", "OPERATIONS", "Alternative", "Key", "Operation", "alternatives", "apply", "hint", "keys",
           "invalid", "of_stage", "partners", "refusal", "register"]
