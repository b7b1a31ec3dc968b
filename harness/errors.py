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

import re
from typing import Callable

EXIT_OK, EXIT_FOUND, ERROR_STATUS = 0, 1, 2

DISTRIBUTION = "triton-preprocessing-harness"
"""What pip installs the harness as (the import package and the command are ``harness``)."""


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


class RunStopped(CommandError):
    """A run ended before every image (the server stopped, a signal, a disk that filled up);
    what it did is kept and ``--resume`` goes on. ``what`` says why, in one line."""

    def __init__(self, what: str, then: str = ""):
        super().__init__(what + (f". {then}" if then else ""))
        self.what = what

    def then(self, what_now: str) -> "RunStopped":
        """The same stop, its message followed by what was kept and how to go on."""
        return RunStopped(self.what, what_now)


class ServerStopped(RunStopped):
    """The server stopped answering (after retries); the run ends, keeping what it compared."""

    def __init__(self, url: str, image: str | None, reason: str, then: str = "", overloaded: bool = False):
        where = f" at image {image!r}" if image is not None else ""
        did = "kept refusing requests as overloaded" if overloaded else "stopped answering"
        super().__init__(f"the Triton server at {url} {did}{where}: {reason}", then)
        self.url, self.image, self.reason, self.overloaded = url, image, reason, overloaded

    def then(self, what_now: str) -> "ServerStopped":
        return ServerStopped(self.url, self.image, self.reason, what_now, self.overloaded)


class Interrupted(RunStopped):
    """SIGINT or SIGTERM asked the run to stop: it finished the images in flight and stopped."""


class UserCodeExit(HarnessError):
    """The user's code (a ``--client``, a ``--reference FILE.py:NAME``, a ``--postprocess``,
    a model factory, a task's hook) raised what is not an :class:`Exception`: ``SystemExit``
    (``sys.exit()``), a ``KeyboardInterrupt`` no signal caused, ``GeneratorExit`` or any other
    ``BaseException``. Left alone it would unwind the whole command (``sys.exit()`` after three
    images ends ``check`` with status 0 and no report); as an :class:`Exception` it is that
    image's failed row like any other error of the user's code."""

    def __init__(self, exc: BaseException):
        text = str(exc).strip().splitlines()
        detail = f"({text[0]})" if text else "()"
        super().__init__(f"user code raised {type(exc).__name__}{detail}")
        self.original = exc


_signalled = 0
"""How many SIGINT/SIGTERM this process received through the harness's handlers: a
``KeyboardInterrupt`` is a real interrupt only when one came (user code may raise its own)."""


def _mark_signal() -> None:
    global _signalled
    _signalled += 1


def real_interrupt(exc: BaseException) -> bool:
    """True for a ``KeyboardInterrupt`` a signal raised (in the main thread, after one of the
    harness's handlers saw SIGINT or SIGTERM): that one ends the command. One raised by user
    code, or in any other thread (where no signal handler runs), is not."""
    import threading

    return (isinstance(exc, KeyboardInterrupt) and _signalled > 0
            and threading.current_thread() is threading.main_thread())


def escapes(exc: BaseException) -> bool:
    """True for what must end the command even out of user code (a real interrupt); False
    for what is an ordinary error of the code that raised it (every :class:`Exception`, and
    ``SystemExit`` or any other ``BaseException`` from user code: :class:`UserCodeExit`)."""
    return real_interrupt(exc)


def contained(exc: BaseException) -> Exception:
    """``exc`` as an :class:`Exception` a per-image ``except Exception`` turns into that
    image's row: itself if it is one, else :class:`UserCodeExit`. The caller re-raises
    ``exc`` itself when :func:`escapes` says so."""
    return exc if isinstance(exc, Exception) else UserCodeExit(exc)


def raised(exc: BaseException) -> str:
    """What user code raised, in one line: ``Type: first line`` (for :class:`UserCodeExit`,
    the type it held: ``SystemExit: 3``)."""
    exc = exc.original if isinstance(exc, UserCodeExit) else exc
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def call_user(function: Callable, *args, **kwargs):
    """``function(*args, **kwargs)`` for user code: what it raises that is not an
    :class:`Exception` (``sys.exit()``, a ``KeyboardInterrupt`` of its own, any other
    ``BaseException``) comes out as :class:`UserCodeExit`, so it fails one image (or one
    load) instead of ending the run; a real interrupt still ends it."""
    try:
        return function(*args, **kwargs)
    except Exception:
        raise
    except BaseException as exc:
        if escapes(exc):
            raise
        raise UserCodeExit(exc) from exc


class StopSignals:
    """For a ``with`` block in the main thread: the first SIGINT or SIGTERM sets :attr:`event`
    (:attr:`reason` names it) so that a run stops at its next image and writes what it has;
    a second one raises :class:`KeyboardInterrupt` at once (the request loop turns it into a
    stop that still writes the partial report). ``finishing``: while the reports are written,
    every signal only sets :attr:`event` (the writing takes a moment and must not be cut).
    Elsewhere (not the main thread) it does nothing."""

    def __init__(self, finishing: bool = False):
        import threading

        self.event = threading.Event()
        self.reason = ""
        self.finishing = finishing
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        import signal

        _mark_signal()
        if self.event.is_set() and not self.finishing:
            raise KeyboardInterrupt
        self.reason = f"interrupted by {signal.Signals(signum).name}"
        self.event.set()

    def __enter__(self) -> "StopSignals":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def terminate_as_interrupt() -> None:
    """SIGTERM raises :class:`KeyboardInterrupt` like SIGINT, so a terminated command unwinds
    (its ``finally`` blocks stop its embedded server and remove its build folder) and exits
    with :data:`ERROR_STATUS`. Call from the main thread."""
    import signal

    def interrupt(signum, frame):
        _mark_signal()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupt)  # the same, counted: a real Ctrl-C, not user code's own


def install_hint(extra: str) -> str:
    """The one line that installs ``extra`` of the harness."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_providing(module: str) -> str | None:
    """The extra (never ``test``) that installs the distribution named as ``module``'s top-level
    package (``locust``, ``timm``, ``polygraphy``, ...), read from the harness's own declaration: the
    installed metadata, or the checkout's pyproject.toml where the environment holds none under this name
    (installed before the rename). None: no extra provides it, or the harness depends on it anyway (numpy,
    which the server extra pins)."""
    import importlib.metadata
    from pathlib import Path

    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
        pairs = [(line, found.group(1) if (found := re.search(r'extra == "([^"]+)"', line)) else None) for line in declared]
    except importlib.metadata.PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"  # harness.paths.PROJECT_ROOT's (no import here)
        if not pyproject.is_file():
            return None
        project = tomllib.loads(pyproject.read_text())["project"]
        pairs = [(requirement, None) for requirement in project["dependencies"]]
        pairs += [(requirement, extra) for extra, requirements in project["optional-dependencies"].items()
                  for requirement in requirements]
    wanted = _normalized(module.partition(".")[0])
    extras = {extra for requirement, extra in pairs if _normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group()) == wanted}
    return None if None in extras else min(extras - {"test"}, default=None)


class MissingExtra(UsageError):
    """A job needs a package only an extra of the harness installs; says which, in one line."""

    def __init__(self, module: str, extra: str):
        super().__init__(f"{module.partition('.')[0]} is not installed (the harness's {extra} extra): {install_hint(extra)}")


def require(module: str) -> None:
    """Raise :class:`MissingExtra` when ``module`` (an extra's) cannot be imported here."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        extra = extra_providing(module)
        raise MissingExtra(module, extra) if extra else UsageError(f"{module} is not installed")


def _missing_extra(exc: BaseException) -> MissingExtra | None:
    """A :class:`ModuleNotFoundError` of a package an extra installs, as the line that says which."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and (extra := extra_providing(exc.name)):
        return MissingExtra(exc.name, extra)
    return None


def exit_status_of(exc: BaseException) -> int | None:
    """:data:`ERROR_STATUS` for a :class:`HarnessError` (a command's or a library's refusal:
    spec, model, repository, server, dataset, image), a missing file or an interrupt; None
    for anything else (a bug: let it raise with its traceback)."""
    if isinstance(exc, (HarnessError, FileNotFoundError, KeyboardInterrupt)) or _missing_extra(exc):
        return ERROR_STATUS
    if not isinstance(exc, Exception):  # SystemExit & co. out of user code that no image boundary held
        return ERROR_STATUS
    return None


def message_of(exc: BaseException) -> str:
    if real_interrupt(exc) or (isinstance(exc, KeyboardInterrupt) and _signalled):
        return "interrupted"
    if not isinstance(exc, (Exception, KeyboardInterrupt)):
        return f"{UserCodeExit(exc)}: the command stopped without a verdict"
    if missing := _missing_extra(exc):
        return str(missing)
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)


def run_command(command: Callable[[], int], report: Callable[[str], None]) -> int:
    """``command()``'s exit status, under the one policy: an exception :func:`exit_status_of`
    knows ends the command with its status, its message given to ``report`` (one line);
    anything else raises with its traceback. Every command line's ``main`` runs through it."""
    try:
        return command()
    except BaseException as exc:  # SystemExit too: user code's sys.exit() must not end a run with status 0
        status = exit_status_of(exc)
        if status is None:
            raise
        report(message_of(exc))
        return status
