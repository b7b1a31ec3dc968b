"""harness/names.py: file names as identifiers, escaped per output format."""

import csv
import io
import os

from harness.names import FILENAME_BYTES, bounded_filename, csv_text, identifier, markdown_code, markdown_text, terminal_text

HOSTILE = [b"bad\xff\xfename.jpg", b"a\x1b[31mred\x1b[0m.jpg", "rtl\u202egnp.jpg".encode(), b"$\\undefinedcmd$.jpg",
           b"<img src=x onerror=alert(1)>.jpg", b"=HYPERLINK(\"x\").jpg", b"[bold]rich[/bold].jpg",
           b"tab\there|pipe`tick`.jpg", b"x" * 250 + b".jpg", "caf\u00e9.jpg".encode(), b"line\nbreak.jpg"]


def test_an_identifier_is_printable_unicode_on_one_line_and_the_same_for_the_same_bytes():
    names = [identifier(raw) for raw in HOSTILE]
    assert len(set(names)) == len(names)
    for raw, name in zip(HOSTILE, names):
        name.encode("utf-8")  # no surrogate left
        assert name.isprintable(), name
        assert identifier(os.fsdecode(raw)) == name == identifier(b"/some/dir/" + raw)
    assert names[0] == "bad\\xff\\xfename.jpg"
    assert names[1] == "a\\x1b[31mred\\x1b[0m.jpg"
    assert names[2] == "rtl\\u202egnp.jpg"  # a bidi override never reaches a terminal or a page
    assert names[9] == "café.jpg" and names[3] == "$\\undefinedcmd$.jpg"  # printable text stays as it is


def test_derived_file_names_are_bounded_unique_and_plain():
    long_a, long_b = "x" * 250 + "a.jpg", "x" * 250 + "b.jpg"
    a, b = bounded_filename(long_a, ".npz", "resize__"), bounded_filename(long_b, ".npz", "resize__")
    assert a != b and len(a.encode()) <= FILENAME_BYTES and len(b.encode()) <= FILENAME_BYTES
    assert a.startswith("resize__xxx") and a.endswith(".npz")
    for raw in HOSTILE:
        name = bounded_filename(identifier(raw), ".npz")
        assert all(c.isalnum() or c in "._+-" for c in name) and not name.startswith("."), name
    assert bounded_filename("..hidden") != bounded_filename("hidden") and not bounded_filename("..x").startswith(".")


def test_markdown_shows_text_as_written():
    assert markdown_code("a|b") == "`a\\|b`"  # a pipe never splits a table cell
    assert markdown_code("tick`s") == "``tick`s``" and markdown_code("`x") == "`` `x ``"
    assert markdown_text("<b>x</b> *y* [z](u) a|b") == "\\<b\\>x\\</b\\> \\*y\\* \\[z\\](u) a\\|b"
    assert markdown_text("INTER_LINEAR") == "INTER_LINEAR"  # no emphasis inside a word: left alone
    assert markdown_text("_em_") == "\\_em\\_" and markdown_text("two\nlines") == "two lines"


def test_markdown_renders_to_exactly_the_text():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    for raw in HOSTILE:
        name = identifier(raw)
        table = f"| image | reason |\n|---|---|\n| {markdown_code(name)} | {markdown_text(name)} |\n"
        html = md.render(table)
        assert html.count("<td>") == 2, html  # one row, two cells: nothing split it
        assert "<img" not in html and "<b>" not in html and "<strong>" not in html and "<em>" not in html


def test_csv_cells_never_start_a_formula():
    for text in ("=1+2", "+1", "-1", "@SUM(A1)", "|cmd", "%x"):
        assert csv_text(text) == "'" + text
    assert csv_text("photo.jpg") == "photo.jpg" and csv_text(None) == ""
    buf = io.StringIO()
    csv.writer(buf).writerow([csv_text(identifier(raw)) for raw in HOSTILE])
    row = next(csv.reader(io.StringIO(buf.getvalue())))
    assert row[5].startswith("'=") and len(row) == len(HOSTILE)


def test_terminal_text_is_neither_markup_nor_control_sequences():
    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    console.print(terminal_text("[bold]x[/bold] \x1b[2J"))
    assert console.file.getvalue() == "[bold]x[/bold] \\x1b[2J\n"
