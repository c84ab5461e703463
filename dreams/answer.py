"""What a dream's agent answers: its decisions, in the last fenced json block of its reply (pure: unit tested)."""

from __future__ import annotations

import json
import re
from typing import Any

JSON_BLOCK = re.compile(r"```json\s*(\{.*?\})\s*```", re.S)


def parse_answer(text: str) -> list[dict[str, Any]]:
    """The decisions of the last fenced json block of the answer; ValueError saying what is missing."""
    blocks = JSON_BLOCK.findall(text)
    if not blocks:
        raise ValueError("the dream's answer holds no fenced json block")
    decisions = json.loads(blocks[-1]).get("decisions")
    if not isinstance(decisions, list):
        raise ValueError("the dream's json block has no decisions list")
    return [d for d in decisions if isinstance(d, dict)]
