"""Memory routes (`/api/memory/...`, docs/reference/memory.md §2) and the central MCP servers (`/api/mcp/servers`).

Thin: the schemas validate, memory's service acts (off the loop), dreams' runner starts dreams."""

from __future__ import annotations

import asyncio
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from compozy.api.schemas import Ident, Name, Ref, StrictIn, Text, responses
from compozy_base.config.loader import get_config
from compozy_base.config.mcp_servers import describe
from dreams import runner
from memory import dreams as dream_records
from memory import health, service
from memory.entry import MemoryType, Scope
from sessions.catalog.index import canonical_dir, find_workspace
from sessions.core.errors import InvalidRequest, NotFound
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.ids import is_session_id

router = Router(tags=["memory"])


def workspace_root(ref: str | None) -> Path | None:
    """A registered workspace (id, name, or a path inside it) gives its root; an unregistered absolute path is
    memory's as it is (a folder that exists)."""
    if not ref:
        return None
    try:
        return Path(find_workspace(ref).root_dir)
    except NotFound:
        if not os.path.isabs(ref):
            raise
        return canonical_dir(ref, "workspace")


class Where(Schema):
    scope: Scope | None = Field(None, description="global, workspace or agent; absent: every scope that resolves.")
    type: MemoryType | None = Field(None, description="user, feedback, project or reference.")
    workspace: Ref | None = Field(None, description="A workspace id, name or absolute path.")
    agent: Name | None = Field(None, description="An agent's name: its own scope.")


class WriteIn(StrictIn):
    scope: Scope
    type: MemoryType
    name: Name
    description: Text = ""
    body: Text
    workspace: Ref | None = None
    agent: Name | None = None


class EditIn(StrictIn):
    scope: Scope | None = None
    type: MemoryType | None = None
    workspace: Ref | None = None
    agent: Name | None = None
    name: Name | None = None
    description: Text | None = None
    body: Text | None = None


class SearchQuery(Schema):
    q: Text = Field(..., description="Words to find (every one, the last as a prefix).")
    workspace: Ref | None = None
    agent: Name | None = None
    limit: int = Field(20, ge=1, le=100)


class HealthQuery(Schema):
    workspace: Ref | None = None


class TriggerIn(StrictIn):
    workspace: Ref = Field(..., description="The workspace to dream for: id, name or absolute path.")


class EntryOut(Schema):
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


class EntryFullOut(EntryOut):
    body: str


class EntriesOut(Schema):
    entries: list[EntryOut]


class EntryEnvelope(Schema):
    entry: EntryFullOut


class WriteOut(Schema):
    slug: str
    scope: str
    type: str
    path: str
    created: bool


class HitOut(Schema):
    slug: str
    name: str
    scope: str
    type: str
    snippet: str


class SearchOut(Schema):
    results: list[HitOut]


class IndexOut(Schema):
    state: str = Field(..., description="fresh, stale, rebuilding or failed")
    cause: str | None
    entries: int


class ReindexOut(Schema):
    entries: int
    index: IndexOut


class ScopeOut(Schema):
    scope: str
    path: str
    files: int
    workspace: str | None
    agent: str | None


class ProblemOut(Schema):
    path: str
    problem: str


class LastWriteOut(Schema):
    at: str
    actor: str
    session_id: str
    op: str
    scope: str
    type: str
    slug: str


class ChangeOut(Schema):
    path: str
    scope: str
    workspace: str
    agent: str
    journal_id: int


class DecisionOut(Schema):
    id: str
    dream_id: str
    at: str
    action: str
    reason: str
    source_sessions: list[str]
    changes: list[ChangeOut]
    reverted_at: str | None


class DreamOut(Schema):
    id: str
    workspace: str
    session_id: str
    state: str = Field(..., description="running, done or failed")
    started_at: str
    finished_at: str | None
    detail: str
    candidates: int
    decisions: list[DecisionOut] = []


class HealthOut(Schema):
    ok: bool
    scopes: list[ScopeOut]
    index: IndexOut
    last_write: LastWriteOut | None
    last_dream: DreamOut | None
    problems: list[ProblemOut]


class DreamsOut(Schema):
    dreams: list[DreamOut]


class DreamEnvelope(Schema):
    dream: DreamOut


class DecisionEnvelope(Schema):
    decision: DecisionOut


class SnapshotDoc(Schema):
    text: str
    entries: list[str]
    left_out: int
    chars: int
    at: str | None


class SnapshotOut(Schema):
    session_id: str
    snapshot: SnapshotDoc | None


class McpServerOut(Schema):
    name: str
    type: str
    command: str
    args: list[str]
    url: str
    env: list[str] = Field(..., description="The environment's names; their values are secrets, never shown.")
    headers: list[str] = Field(..., description="The headers' names; their values are secrets, never shown.")
    source: str
    agents: list[str]
    workspaces: list[str]
    enabled: bool | None = None


class McpServersOut(Schema):
    servers: list[McpServerOut]


def _where(q: Where) -> dict[str, Any]:
    return {"type_": q.type.value if q.type else None, "scope": q.scope.value if q.scope else None,
            "workspace": workspace_root(q.workspace), "agent": q.agent or ""}


@router.get("/memory/health", response=responses({200: HealthOut}))
async def memory_health(request: HttpRequest, query: Query[HealthQuery]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        return health.report(workspace_root(query.workspace)).to_dict()

    return await sync_to_async(run)()


@router.get("/memory/entries", response=responses({200: EntriesOut}))
async def list_entries(request: HttpRequest, query: Query[Where]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        where = _where(query)
        return {"entries": service.listing(scope=where["scope"], workspace=where["workspace"], agent=where["agent"])}

    return await sync_to_async(run)()


@router.post("/memory/entries", response=responses({201: WriteOut}))
async def write_entry(request: HttpRequest, body: WriteIn) -> tuple[int, Any]:
    def run() -> Any:
        return service.write(scope=body.scope.value, type_=body.type.value, name=body.name,
                             description=body.description, body=body.body, workspace=workspace_root(body.workspace),
                             agent=body.agent or "", actor="user")

    return 201, await sync_to_async(run)()


@router.get("/memory/entries/{slug}", response=responses({200: EntryEnvelope}))
async def show_entry(request: HttpRequest, slug: Ident, query: Query[Where]) -> dict[str, Any]:
    return {"entry": await sync_to_async(lambda: service.show(slug, **_where(query)))()}


@router.patch("/memory/entries/{slug}", response=responses({200: WriteOut}))
async def edit_entry(request: HttpRequest, slug: Ident, body: EditIn) -> Any:
    def run() -> Any:
        return service.edit(slug, type_=body.type.value if body.type else None,
                            scope=body.scope.value if body.scope else None, workspace=workspace_root(body.workspace),
                            agent=body.agent or "", name=body.name, description=body.description, body=body.body)

    return await sync_to_async(run)()


@router.delete("/memory/entries/{slug}", response=responses({200: dict[str, EntryOut]}))
async def delete_entry(request: HttpRequest, slug: Ident, query: Query[Where]) -> dict[str, Any]:
    return {"deleted": await sync_to_async(lambda: service.delete(slug, **_where(query)))()}


@router.get("/memory/search", response=responses({200: SearchOut}))
async def search(request: HttpRequest, query: Query[SearchQuery]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        return {"results": service.search(query.q, workspace=workspace_root(query.workspace),
                                          agent=query.agent or "", limit=query.limit)}

    return await sync_to_async(run)()


@router.post("/memory/reindex", response=responses({200: ReindexOut}))
async def reindex(request: HttpRequest) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        count = service.reindex()
        return {"entries": count, "index": asdict(health.rebuilt_index(count))}

    return await sync_to_async(run)()


@router.post("/memory/dreams/trigger", response=responses({202: DreamEnvelope}))
async def trigger_dream(request: HttpRequest, body: TriggerIn) -> tuple[int, dict[str, Any]]:
    root = await sync_to_async(workspace_root)(body.workspace)
    if root is None:
        raise InvalidRequest("a dream needs its workspace", code="workspace_required")
    return 202, {"dream": await runner.trigger(root)}


@router.get("/memory/dreams", response=responses({200: DreamsOut}))
async def dream_status(request: HttpRequest) -> dict[str, Any]:
    return await runner.status()


@router.post("/memory/dreams/decisions/{decision_id}/revert", response=responses({200: DecisionEnvelope}))
async def revert_decision(request: HttpRequest, decision_id: Ident) -> dict[str, Any]:
    return {"decision": await asyncio.to_thread(dream_records.revert, decision_id)}


def session_snapshot(session_id: str) -> dict[str, Any]:
    """What the session was given at its start: its `memory_snapshot` row, or null."""
    if not is_session_id(session_id) or folder.read_meta(session_id) is None:
        raise NotFound("session not found", code="session_not_found", data={"session_id": session_id})
    rows = event_store.read_events(folder.events_path(session_id), types=["system"], limit=200)
    row = next((r for r in rows if (r.get("content") or {}).get("title") == "memory_snapshot"), None)
    if row is None:
        return {"session_id": session_id, "snapshot": None}
    content = row["content"]
    return {"session_id": session_id, "snapshot": {"text": content.get("text"), **(content.get("raw") or {}),
                                                   "at": row.get("timestamp")}}


@router.get("/memory/sessions/{session_id}/snapshot", response=responses({200: SnapshotOut}))
async def snapshot_of(request: HttpRequest, session_id: Ident) -> dict[str, Any]:
    return await asyncio.to_thread(session_snapshot, session_id)


@router.get("/mcp/servers", response=responses({200: McpServersOut}))
async def mcp_servers(request: HttpRequest) -> dict[str, Any]:
    """Every MCP server a session may be handed, secrets named, never shown."""
    config = get_config()
    servers = [{**describe(c.server), "source": "mcp.servers", "agents": list(c.agents),
                "workspaces": list(c.workspaces)} for c in config.mcp_servers]
    for name, agent in sorted(config.agents.items()):
        servers += [{**describe(s), "source": f"agents.{name}.mcp_servers", "agents": [name], "workspaces": []}
                    for s in agent.mcp_servers]
    servers.append({"name": "compozy-memory", "type": "stdio", "command": "(per session)", "args": [], "url": "",
                    "env": [], "headers": [], "source": "memory", "agents": [], "workspaces": [],
                    "enabled": config.memory.enabled})
    return {"servers": servers}
