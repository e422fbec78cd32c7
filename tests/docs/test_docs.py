"""The docs a newcomer reads: the README opens with the two commands, and every relative
link in the README and in docs/ reaches a file that exists and, with a ``#fragment``, a
heading in it (pages move; a link left behind would send a reader nowhere)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# the repository: the folder above this file that holds pyproject.toml (wherever tests/ files it)
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", page.read_text())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in HEADING.findall(text)}


def test_the_readme_opens_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[:3] == ["# Ringflow", "", "```sh"]
    assert lines[3].startswith("make run    # ") and lines[4].startswith("make test   # ")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for link in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif fragment and target.suffix == ".md" and fragment not in anchors(target):
            broken.append(f"{link}: no heading #{fragment} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"
