"""Every page template closes what it opens: a `<section>` left open (a merge that kept both sides of a hunk and one
closing tag) nests the panels after it inside it, and a hidden panel then hides them all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parents[2] / "frontend/templates/frontend").glob("*.html"))
BLOCKS = ("section", "details", "div", "aside", "form", "dl", "ul", "ol", "table", "main", "nav")


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_every_block_opened_is_closed(template: Path) -> None:
    text = re.sub(r"{#.*?#}", "", template.read_text(), flags=re.S)  # comments may name tags
    for tag in BLOCKS:
        opened, closed = len(re.findall(rf"<{tag}[\s>]", text)), text.count(f"</{tag}>")
        assert opened == closed, f"{template.name}: {opened} <{tag}> opened, {closed} closed"


def test_the_templates_are_found() -> None:
    assert len(TEMPLATES) >= 6
