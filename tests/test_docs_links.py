"""Every relative link of the README, docs/ and examples/ leads somewhere: the file exists, and a
``#section`` is a heading of it (GitHub's anchors), so a reader following one never lands on nothing."""

import re
from pathlib import Path

from harness.paths import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md")),
         *sorted((PROJECT_ROOT / "examples").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    for heading in re.findall(r"^#+\s+(.*)$", FENCE.sub("", page.read_text()), re.M):
        a = anchor(heading)
        found.add(a if a not in seen else f"{a}-{seen[a]}")
        seen[a] = seen.get(a, 0) + 1
    return found


def dead_links(pages, root: Path = PROJECT_ROOT) -> list[str]:
    dead = []
    for page in pages:
        for target in LINK.findall(FENCE.sub("", page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, section = target.partition("#")
            dest = (page.parent / path) if path else page
            where = f"{page.relative_to(root)}: {target}"
            if not dest.exists():
                dead.append(f"{where} (no such file)")
            elif section and dest.suffix == ".md" and section not in anchors(dest):
                dead.append(f"{where} (no such section)")
    return dead


MENTION = re.compile(r"README(?:'s|\s+\()\s*\"([^\"]+)\"")
"""A section of the README named in prose: the README's "Section", the main README ("Section")."""


def dead_mentions(pages, readme: Path = PROJECT_ROOT / "README.md") -> list[str]:
    headings = {" ".join(h.split()).lower() for h in re.findall(r"^#+\s+(.*)$", readme.read_text(), re.M)}
    return [f"{page.name}: README section {name!r}" for page in pages for name in MENTION.findall(page.read_text())
            if " ".join(name.split()).lower() not in headings]


def test_every_relative_link_resolves():
    assert len(PAGES) > 10 and not dead_links(PAGES)


def test_every_readme_section_named_in_prose_exists():
    assert not dead_mentions(PAGES)


def test_a_dead_link_and_a_missing_section_are_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Checking it\n\n[ok](#checking-it) [gone](missing.md) [none](page.md#nowhere)\n"
                    "```\n[inside a fence](nothing.md)\n```\n")
    assert dead_links([page], tmp_path) == ["page.md: missing.md (no such file)", "page.md: page.md#nowhere (no such section)"]
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\n## Read next\n")
    page.write_text('see the README\'s "Read next" and the main README ("Checking your\nown deployment")\n')
    assert dead_mentions([page], readme) == ["page.md: README section 'Checking your\\nown deployment'"]
