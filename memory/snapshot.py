"""The frozen snapshot a session starts with: the resolved scopes (agent ▸ workspace ▸ global) as one bounded,
marked block the first prompt carries. Taken once at start: what a session writes later reaches the next session,
never a running one's context."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memory.store import entries

OPEN = "<compozy-memory"
CLOSE = "</compozy-memory>"
DEFAULT_MAX_CHARS = 8000


@dataclass(frozen=True)
class Snapshot:
    text: str  # the marked block; "" when there is nothing to give
    slugs: list[str]  # "scope/type/slug" of each entry given, in the order given
    truncated: int  # entries left out for the bound


def take(workspace: Path | None, agent: str, max_chars: int = DEFAULT_MAX_CHARS) -> Snapshot:
    found, _ = entries(None, workspace, agent, shadow=True)
    if not found:
        return Snapshot("", [], 0)
    parts: list[str] = []
    given: list[str] = []
    used = 0
    for s in found:
        e = s.entry
        part = f"## {e.name} ({e.scope.value} {e.type.value}: {e.slug})\n{e.description}\n\n{e.body.strip()}\n"
        if used + len(part) > max_chars:
            break
        parts.append(part)
        given.append(f"{e.scope.value}/{e.type.value}/{e.slug}")
        used += len(part)
    left = len(found) - len(given)
    head = (f'{OPEN} snapshot="frozen" entries="{len(given)}"'
            + (f' left_out="{left}"' if left else "") + ">\n"
            "Curated memory from earlier sessions (frozen at this session's start; search it with the "
            "memory_search tool, add to it with memory_write).\n\n")
    return Snapshot(head + "\n".join(parts) + CLOSE, given, left)
