"""Names a user's files and options bring in, carried safely and shown escaped per format.

A file name on Linux is bytes: it may not be UTF-8, may hold control characters, bidi
overrides, HTML, Markdown, Rich markup, ``$...$`` (matplotlib mathtext) or a spreadsheet
formula, and may be 255 bytes long. :func:`identifier` makes it a *name*: valid Unicode,
one line, printable, and the same for the same bytes (what every result and report file
holds, and what ``--resume`` matches). Each output format then escapes it its own way:

- Markdown: :func:`markdown_code` (names, in code spans) and :func:`markdown_text`;
- CSV: :func:`csv_text` (a cell starting like a formula is quoted with ``'``);
- HTML: :func:`html.escape`; terminal (Rich): :func:`terminal_text`;
- matplotlib: titles with ``parse_math=False`` (never mathtext);
- derived file names: :func:`bounded_filename` (at most :data:`FILENAME_BYTES`, unique by a hash).

Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata

UNSHOWN_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
"""Unicode categories never shown as they are: control, format (bidi overrides, zero
widths), surrogates (the undecodable bytes of a name) and line/paragraph separators."""


def _escape_char(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str | bytes | os.PathLike) -> str:
    """``text`` (a str, a path, or bytes decoded as file names are) as valid, printable
    Unicode on one line: undecodable bytes as ``\\xNN``, control and format characters as
    ``\\xNN`` / ``\\uNNNN``, everything else as it is."""
    text = os.fsdecode(os.fspath(text)) if isinstance(text, (bytes, os.PathLike)) else str(text)
    return "".join(_escape_char(c) if unicodedata.category(c) in UNSHOWN_CATEGORIES else c for c in text)


def identifier(name: str | bytes | os.PathLike) -> str:
    """A file name (bytes, a str decoded with surrogateescape, or a path: its last part) as
    a name: :func:`printable`. The same bytes give the same name; two names differ unless
    one file's name literally spells the other's escapes (see
    :func:`harness.listing.list_inputs`, which refuses such a pair)."""
    text = os.fsdecode(os.fspath(name)) if isinstance(name, (bytes, os.PathLike)) else name
    return printable(os.path.basename(text) or text)


path_text = printable
"""A whole path as text safe to write anywhere (messages, manifests, reports)."""


FILENAME_BYTES = 120
"""The longest file name this harness derives from a name (a visual, a tensor file): far
below the 255-byte limit of Linux file systems, whatever prefix and suffix it gets."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def bounded_filename(name: str, suffix: str = "", prefix: str = "") -> str:
    """A file name for something derived from ``name``: ``PREFIX<readable part>.<hash>SUFFIX``,
    at most :data:`FILENAME_BYTES` bytes, only ``[A-Za-z0-9._+-]``, never hidden, and unique
    per name (16 hex digits of its SHA-256)."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    room = FILENAME_BYTES - len(prefix) - len(suffix) - len(digest) - 1
    readable = _UNSAFE.sub("_", name).lstrip(".")[:max(0, room)]
    return f"{prefix}{readable}.{digest}{suffix}"


# -- per output format ------------------------------------------------------------------------

_MARKDOWN_ACTIVE = re.compile(r"[\\`*\[\]<>|&~!#]|(?<![^\W_])_|_(?![^\W_])")
"""Characters that could start an inline construct (emphasis, code, link, HTML, entity,
strike-through, table cell); ``_`` only where it is not inside a word (CommonMark makes no
emphasis of ``INTER_LINEAR``)."""


def markdown_text(text: object) -> str:
    """``text`` as Markdown that renders exactly as the text: one line (whitespace runs
    collapsed, :func:`printable`), every character that could start an inline construct
    backslash-escaped."""
    return _MARKDOWN_ACTIVE.sub(lambda m: "\\" + m.group(0), printable(" ".join(str(text).split())))


def markdown_code(text: object) -> str:
    """``text`` (a name) as a Markdown code span: shown literally (no HTML, emphasis or link
    is ever made of it), on one line; fenced with more backticks than it holds, ``|``
    escaped (GFM splits table cells on it even in a code span)."""
    text = printable(" ".join(str(text).split())).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_row(name: object, *cells: object) -> str:
    """A Markdown table row about one image (or entry): its name as code (:func:`markdown_code`),
    every other cell as text (:func:`markdown_text`): the one way every report table shows a
    name and a reason (a ``|`` or markup in either never splits or styles the row)."""
    return "| " + " | ".join([markdown_code(name), *(markdown_text(c) for c in cells)]) + " |"


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "|", "%")


def csv_text(text: object) -> str:
    """A text cell of a CSV file that a spreadsheet never evaluates: one starting with
    ``= + - @ | %``, a tab or a carriage return gets a leading ``'`` (OWASP's advice); numbers
    are written as numbers, not through here."""
    text = "" if text is None else printable(text)
    return "'" + text if text.startswith(_FORMULA_START) else text


def plain_text(text: object) -> str:
    """``text`` for a console that prints text as text (no markup): no control or format
    character reaching the terminal (escape sequences shown as ``\\x1b``) but its line breaks
    (a message may quote a log's last lines; a name never holds one)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def terminal_text(text: object) -> str:
    """``text`` for a line printed with Rich markup: :func:`plain_text` with the markup escaped
    (``[bold]`` prints as written)."""
    from rich.markup import escape

    return escape(plain_text(text))
