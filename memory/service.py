"""The one service every surface calls (the API, the CLI through it, the agents' tools, the dashboard): plain
typed answers over memory/store.py. Blocking: callers run it off the loop."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TypedDict

from memory import index, journal, store
from memory.entry import PRECEDENCE, Entry, MemoryType, Scope
from memory.errors import InvalidMemory, MemoryNotFound
from memory.paths import index_path

logger = logging.getLogger(__name__)


class EntryOut(TypedDict):
    slug: str
    name: str
    description: str
    type: str
    scope: str
    agent: str | None
    workspace: str | None
    provenance: str
    path: str
    updated_at: float


class EntryFull(EntryOut):
    body: str


class WriteOut(TypedDict):
    slug: str
    scope: str
    type: str
    path: str
    created: bool


class SearchHit(TypedDict):
    slug: str
    name: str
    scope: str
    type: str
    snippet: str


def _out(s: store.Stored) -> EntryOut:
    e = s.entry
    return EntryOut(slug=e.slug, name=e.name, description=e.description, type=e.type.value, scope=e.scope.value,
                    agent=e.agent or None, workspace=str(s.where.workspace) if s.where.workspace else None,
                    provenance=e.provenance, path=str(s.path), updated_at=s.mtime)


def _full(s: store.Stored) -> EntryFull:
    return EntryFull(**_out(s), body=s.entry.body)


def parse_scope(value: str | None) -> Scope | None:
    try:
        return Scope(value) if value else None
    except ValueError as exc:
        raise InvalidMemory(f"scope must be one of {', '.join(Scope)}", code="invalid_scope") from exc


def parse_type(value: str | None) -> MemoryType | None:
    try:
        return MemoryType(value) if value else None
    except ValueError as exc:
        raise InvalidMemory(f"type must be one of {', '.join(MemoryType)}", code="invalid_type") from exc


def write(*, scope: str, type_: str, name: str, description: str, body: str, workspace: Path | None = None,
          agent: str = "", actor: str = "user", session_id: str = "") -> WriteOut:
    s, t = parse_scope(scope), parse_type(type_)
    if s is None or t is None:
        raise InvalidMemory("scope and type are required", code="invalid_memory")
    if s is Scope.AGENT and not agent:
        raise InvalidMemory("an agent-scoped entry needs --agent", code="agent_required")
    provenance = f"session:{session_id}" if session_id else actor
    entry = Entry(name=name, description=description, type=t, scope=s, body=body, provenance=provenance,
                  agent=agent if s is Scope.AGENT else "")
    result = store.write(entry, workspace=workspace, actor=actor, session_id=session_id)
    return WriteOut(slug=result.slug, scope=s.value, type=t.value, path=result.path, created=result.created)


def show(slug: str, *, type_: str | None = None, scope: str | None = None, workspace: Path | None = None,
         agent: str = "", session_id: str = "") -> EntryFull:
    found = store.find(slug, type_=parse_type(type_), scope=parse_scope(scope), workspace=workspace, agent=agent)
    journal.note_recalls(session_id, [str(found.path)], "show")
    return _full(found)


def edit(slug: str, *, type_: str | None = None, scope: str | None = None, workspace: Path | None = None,
         agent: str = "", name: str | None = None, description: str | None = None, body: str | None = None,
         actor: str = "user") -> WriteOut:
    """Fields changed in place; a new name moves the entry to its new slug (a write, then the old one removed)."""
    found = store.find(slug, type_=parse_type(type_), scope=parse_scope(scope), workspace=workspace, agent=agent)
    changed = found.entry.with_changes(**{k: v for k, v in (("name", name), ("description", description),
                                                            ("body", body)) if v is not None})
    result = store.write(changed, workspace=found.where.workspace, actor=actor)
    if result.path != str(found.path):
        store.delete(found, actor=actor)
    return WriteOut(slug=result.slug, scope=changed.scope.value, type=changed.type.value, path=result.path,
                    created=False)


def delete(slug: str, *, type_: str | None = None, scope: str | None = None, workspace: Path | None = None,
           agent: str = "", actor: str = "user") -> EntryOut:
    found = store.find(slug, type_=parse_type(type_), scope=parse_scope(scope), workspace=workspace, agent=agent)
    store.delete(found, actor=actor)
    return _out(found)


def listing(*, scope: str | None = None, workspace: Path | None = None, agent: str = "") -> list[EntryOut]:
    found, _ = store.entries(parse_scope(scope), workspace, agent)
    return [_out(s) for s in found]


def search(query: str, *, workspace: Path | None = None, agent: str = "", session_id: str = "",
           limit: int = 20) -> list[SearchHit]:
    """Hits over the scopes this reader resolves, the shadowed ones left out; a missing index is rebuilt first."""
    if not query.strip():
        raise InvalidMemory("a search needs some words", code="query_required")
    if workspace is not None:
        journal.note_root(workspace)
    if not index_path().exists():
        logger.info("memory: no index to search; rebuilding it from the files")
        store.reindex()
    wheres = store.scope_wheres(None, workspace, agent)
    allowed = {str(w.dir()) for w in wheres}
    hits = [h for h in index.search(query, allowed=allowed, limit=limit * 2) if _visible(h, wheres)][:limit]
    journal.note_recalls(session_id, [h.path for h in hits], "search")
    return [SearchHit(slug=h.slug, name=h.name, scope=h.scope, type=h.type, snippet=h.snippet) for h in hits]


def _visible(hit: index.Hit, wheres: list[store.Where]) -> bool:
    """The hit's file is there and no deeper scope the reader resolves holds a file of the same (type, slug):
    that one would shadow it (agent ▸ workspace ▸ global). One stat per scope, no file read."""
    if not Path(hit.path).is_file():
        return False
    depth = PRECEDENCE.index(Scope(hit.scope))
    return not any(store.file_path(w, hit.type, hit.slug).is_file() for w in wheres
                   if PRECEDENCE.index(w.scope) < depth)


def reindex() -> int:
    return store.reindex()


__all__ = ["EntryFull", "EntryOut", "MemoryNotFound", "SearchHit", "WriteOut", "delete", "edit", "listing",
           "reindex", "search", "show", "write"]
