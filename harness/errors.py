"""The errors a command ends with, and the one policy mapping them to an exit status.

Every command (check, compare, diagnose, accuracy, serve, infer, train, preflight, ...)
exits with:

- 0: the run found nothing its options forbid;
- 1: it found what it was asked to fail on (a stage verdict at ``--fail-on``, a top-1 flip,
  an image rejected by one side only): a result, decided by the run's own report;
- 2: it could not say (:data:`ERROR_STATUS`): bad arguments or setup (a missing file, a spec,
  model or repository the harness refuses, a dataset it cannot read), the server not
  reachable or stopped answering, nothing could be compared, or interrupted.

Commands raise; :func:`exit_status_of` is the one place an exception becomes a status
(``harness.cli.main`` prints the message). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Callable

EXIT_OK, EXIT_FOUND, ERROR_STATUS = 0, 1, 2


class HarnessError(Exception):
    """Base of every refusal of the harness's own (a spec, model, repository, dataset, image or
    server it cannot use): a command ending with one exits :data:`ERROR_STATUS` with its
    message. Library modules subclass it beside the built-in type they always were
    (``class SpecError(HarnessError, ValueError)``), so this module imports none of them."""


class CommandError(HarnessError):
    """A command cannot give a verdict: it exits with :data:`ERROR_STATUS` and this message."""


class UsageError(CommandError):
    """Bad arguments or setup (a missing image directory, a server that is not ready, ...)."""


class NothingCompared(CommandError):
    """No image could be processed on both sides: the run says nothing about the deployment."""


class ServerStopped(CommandError):
    """The server stopped answering (after retries); the run ends, keeping what it compared."""

    def __init__(self, url: str, image: str | None, reason: str, then: str = ""):
        where = f" at image {image!r}" if image is not None else ""
        message = f"the Triton server at {url} stopped answering{where}: {reason}"
        super().__init__(message + (f". {then}" if then else ""))
        self.url, self.image, self.reason = url, image, reason

    def then(self, what_now: str) -> "ServerStopped":
        """The same stop, its message followed by what was kept and how to go on."""
        return ServerStopped(self.url, self.image, self.reason, what_now)


def exit_status_of(exc: BaseException) -> int | None:
    """:data:`ERROR_STATUS` for a :class:`HarnessError` (a command's or a library's refusal:
    spec, model, repository, server, dataset, image), a missing file or an interrupt; None
    for anything else (a bug: let it raise with its traceback)."""
    if isinstance(exc, (HarnessError, FileNotFoundError, KeyboardInterrupt)):
        return ERROR_STATUS
    return None


def message_of(exc: BaseException) -> str:
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)


def run_command(command: Callable[[], int], report: Callable[[str], None]) -> int:
    """``command()``'s exit status, under the one policy: an exception :func:`exit_status_of`
    knows ends the command with its status, its message given to ``report`` (one line);
    anything else raises with its traceback. Every command line's ``main`` runs through it."""
    try:
        return command()
    except (Exception, KeyboardInterrupt) as exc:
        status = exit_status_of(exc)
        if status is None:
            raise
        report(message_of(exc))
        return status
