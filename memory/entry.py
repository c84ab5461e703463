"""One memory entry: a Markdown file with YAML frontmatter (`name`, `description`, `type`, `scope`, `agent` when
scoped to one, `provenance`), its slug, and the rules that parse and render it."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum

import yaml

MAX_NAME = 200
MAX_DESCRIPTION = 1000
MAX_BODY = 64 * 1024  # an entry is a note, not a document: the snapshot must hold many
SLUG_CHARS = 64


class Scope(StrEnum):
    GLOBAL = "global"
    WORKSPACE = "workspace"
    AGENT = "agent"


# Deepest first: agent ▸ workspace ▸ global. A deeper entry shadows a shallower one with the same (type, slug).
PRECEDENCE = (Scope.AGENT, Scope.WORKSPACE, Scope.GLOBAL)


class MemoryType(StrEnum):
    USER = "user"
    FEEDBACK = "feedback"
    PROJECT = "project"
    REFERENCE = "reference"


class BadFrontmatter(ValueError):
    """A file whose frontmatter cannot be read: shown by `memory health` and `doctor`, left out of everything
    else, never rewritten by us."""


@dataclass(frozen=True)
class Entry:
    name: str
    description: str
    type: MemoryType
    scope: Scope
    body: str
    provenance: str = "user"
    agent: str = ""

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def key(self) -> tuple[str, str]:
        """What shadows across scopes."""
        return self.type.value, self.slug

    def with_changes(self, **changes: object) -> Entry:
        return replace(self, **changes)  # type: ignore[arg-type]


def slugify(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:SLUG_CHARS].strip("-")
    return slug or "entry"


def check_agent_name(agent: str) -> str:
    """An agent name is a path segment under `$COMPOZY_HOME/agents/`: no separators, no dot names."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", agent):
        raise ValueError(f"agent name {agent!r:.80} is not a plain name")
    return agent


def validate(entry: Entry) -> Entry:
    """The rules every writer meets; raises ValueError naming the field."""
    if not entry.name.strip() or len(entry.name) > MAX_NAME or "\n" in entry.name:
        raise ValueError(f"name: required, one line, at most {MAX_NAME} characters")
    if len(entry.description) > MAX_DESCRIPTION or "\n" in entry.description:
        raise ValueError(f"description: one line, at most {MAX_DESCRIPTION} characters")
    if len(entry.body.encode("utf-8")) > MAX_BODY:
        raise ValueError(f"body: at most {MAX_BODY} bytes")
    if entry.scope is Scope.AGENT:
        check_agent_name(entry.agent)
    elif entry.agent:
        raise ValueError("agent: only an agent-scoped entry names an agent")
    return entry


def render(entry: Entry) -> str:
    front: dict[str, str] = {"name": entry.name, "description": entry.description, "type": entry.type.value,
                             "scope": entry.scope.value}
    if entry.agent:
        front["agent"] = entry.agent
    front["provenance"] = entry.provenance
    head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10_000).strip()
    body = entry.body if entry.body.endswith("\n") or not entry.body else entry.body + "\n"
    return f"---\n{head}\n---\n\n{body}"


def parse(text: str) -> Entry:
    """A file's entry; BadFrontmatter saying what is wrong."""
    if not text.startswith("---\n"):
        raise BadFrontmatter("no frontmatter (the file must start with a --- line)")
    end = text.find("\n---", 4)
    if end < 0:
        raise BadFrontmatter("the frontmatter is not closed by a --- line")
    try:
        front = yaml.safe_load(text[4:end])
    except yaml.YAMLError as exc:
        raise BadFrontmatter(f"the frontmatter is not YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(front, dict):
        raise BadFrontmatter("the frontmatter is not a mapping")
    body = text[end + 4:].lstrip("\n")
    try:
        entry = Entry(name=_text(front, "name"), description=_text(front, "description", ""),
                      type=MemoryType(_text(front, "type")), scope=Scope(_text(front, "scope")), body=body,
                      provenance=_text(front, "provenance", "user"), agent=_text(front, "agent", ""))
        return validate(entry)
    except ValueError as exc:
        raise BadFrontmatter(str(exc)) from exc


def _text(front: dict[object, object], key: str, default: str | None = None) -> str:
    value = front.get(key, default)
    if value is None:
        raise ValueError(f"{key}: required")
    if not isinstance(value, str):
        raise ValueError(f"{key}: must be text")
    return value
