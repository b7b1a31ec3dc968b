"""The console's lines where stderr is a log: names as written, and long work shows progress (Rich's bar
draws nothing where stderr is no terminal)."""

from __future__ import annotations

from harness.cli import common


def test_a_log_gets_progress_lines(monkeypatch, capsys):
    monkeypatch.setattr(common, "PROGRESS_LINE_SECONDS", 0.0)
    assert not common.console.is_terminal  # pytest captures stderr: the case of a CI log
    with common.progress_bar(4, "check [ocr]") as advance:
        for name in ("a.jpg", "b.jpg", "c.jpg", "d.jpg"):
            advance(name)
    lines = capsys.readouterr().err.splitlines()
    # One line an image but the last (the job's own summary follows it), the description as text.
    assert [line.split(",")[0] for line in lines] == ["check [ocr]: 1/4 (25%)", "check [ocr]: 2/4 (50%)",
                                                      "check [ocr]: 3/4 (75%)"]
    assert all("elapsed, about" in line and line.endswith("left") for line in lines)


def test_a_log_is_not_flooded(capsys):
    with common.progress_bar(1000, "check") as advance:
        for _ in range(1000):
            advance()
    assert capsys.readouterr().err == ""  # far faster than PROGRESS_LINE_SECONDS: nothing to say


def test_a_log_line_prints_a_name_as_written(capsys):
    """A photo named with brackets is shown as named (not ``\\[draft]``: the console prints text, not
    markup), and a control sequence in a name never reaches the terminal."""
    common.say("photo [draft].jpg: decoded \x1b[2J")
    assert capsys.readouterr().err == "photo [draft].jpg: decoded \\x1b[2J\n"
