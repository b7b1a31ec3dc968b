"""The user's own code, named ``path/to/file.py:name``: a training callable or Compose
(``--reference``), a client's preprocessing (``--client``), a model factory.

Standard library only (the Locust image loads clients with it). The file is imported as a
script would run it: its folder first on ``sys.path``, so its sibling modules import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError, call_user


class UserCodeError(UsageError, ValueError):
    """``file.py:name`` cannot be loaded: a bad form, a missing file or name, or an import that fails."""


def load_object(ref: str, what: str = "reference", names: str = "NAME (opencv, torchvision)") -> Any:
    """``path/to/file.py:name`` -> the object ``name`` defined in that file; ``what`` (the
    option's role) and ``names`` (what else it takes) word the one-line errors."""
    path_text, _, name = ref.rpartition(":")
    path = Path(path_text)
    if not path_text or not name or path.suffix != ".py":
        raise UserCodeError(f"{what} {ref!r}: expected {names} or path/to/file.py:name")
    try:
        found, regular = path.exists(), path.is_file()
    except OSError as exc:  # a name longer than the system takes
        raise UserCodeError(f"{what} {ref!r}: {path}: {exc.strerror or exc}") from None
    if not found:
        raise UserCodeError(f"{what} {ref!r}: {path} not found")
    if not regular:  # a FIFO or a link to /dev/zero would be read without end
        raise UserCodeError(f"{what} {ref!r}: {path} is not a regular file")
    module_name = f"harness_{what.strip('-').replace('-', '_')}_{path.stem}"
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        call_user(spec.loader.exec_module, module)  # sys.exit() at import: a refusal, not the end of the run
    except Exception as exc:
        raise UserCodeError(f"{what} {ref!r}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, name):
        raise UserCodeError(f"{what} {ref!r}: {path} defines no {name!r}")
    return getattr(module, name)
