"""The documentation a newcomer follows: the README's two commands stay as they are, and every
link between the pages under docs/ (and to the files they name) resolves, anchors included."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/burstbot run"
TEST = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"


def test_the_readme_keeps_its_two_commands_for_a_fresh_machine() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert RUN in lines and TEST in lines


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"(?m)^#+ (.*)$", text)
    }


def test_links_between_the_docs_resolve() -> None:
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "model" / "README.md"]
    broken = []
    for page in pages:
        text = re.sub(r"`[^`]*`", "", page.read_text(encoding="utf-8"))  # code is not a link
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                broken.append(f"{page.name}: {link}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert broken == []


def test_the_docs_never_point_outside_the_repository() -> None:
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "DESIGN.md" not in page.read_text(encoding="utf-8"), page.name
