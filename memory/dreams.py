"""Dreams' records (journal.db): each dream, its decisions with their source sessions, and their reverts; the
material a dream weighs (entries agents wrote and later sessions recalled, not yet promoted); and the decisions a
dream's agent proposed, applied through the one write path. What starts a dream (its gates, its session) is the
`dreams` app, above the sessions app."""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from memory import journal, store
from memory.entry import Entry, MemoryType, Scope
from memory.errors import InvalidMemory, MemoryConflict, MemoryNotFound

logger = logging.getLogger(__name__)

SESSION_PROVENANCE = "session:"
ACTIONS = ("promote", "merge", "delete")


@dataclass(frozen=True)
class Candidate:
    slug: str
    type: str
    scope: str
    name: str
    description: str
    body: str
    written_by: str  # the session that wrote it
    recalled_in: list[str]  # the sessions it was recalled in since


def candidates(workspace: Path) -> list[Candidate]:
    """Recalled-but-unpromoted material: entries an agent wrote (provenance `session:ID`) that a session recalled."""
    found, _ = store.entries(None, workspace, "")
    found += store.entries(Scope.AGENT)[0]
    unpromoted = [s for s in found if s.entry.provenance.startswith(SESSION_PROVENANCE)]
    recalls = journal.recalled_by([str(s.path) for s in unpromoted])
    out: list[Candidate] = []
    for s in unpromoted:
        writer = s.entry.provenance[len(SESSION_PROVENANCE):]
        recalled = [sid for sid in recalls.get(str(s.path), []) if sid != writer]
        if recalled:
            e = s.entry
            out.append(Candidate(e.slug, e.type.value, e.scope.value, e.name, e.description, e.body[:2000], writer,
                                 recalled))
    return out


def new_id() -> str:
    return "dream_" + secrets.token_hex(8)


def start(workspace: Path, material: int) -> str:
    """A dream row, `running`; MemoryConflict when this workspace has one running (one runner per workspace)."""
    dream_id = new_id()
    with journal.connect() as conn:
        if conn.execute("SELECT 1 FROM dreams WHERE workspace = ? AND state = 'running'", (str(workspace),)).fetchone():
            raise MemoryConflict("a dream already runs for this workspace", code="dream_running")
        conn.execute("INSERT INTO dreams (id, workspace, state, started_at, candidates) VALUES (?, ?, 'running', ?, ?)",
                     (dream_id, str(workspace), journal.now_iso(), material))
    return dream_id


def attach(dream_id: str, session_id: str) -> None:
    with journal.connect() as conn:
        conn.execute("UPDATE dreams SET session_id = ? WHERE id = ?", (session_id, dream_id))


def finish(dream_id: str, state: str, detail: str = "") -> None:
    with journal.connect() as conn:
        conn.execute("UPDATE dreams SET state = ?, finished_at = ?, detail = ? WHERE id = ?",
                     (state, journal.now_iso(), detail[:2000], dream_id))


def abandon_running(detail: str) -> int:
    """At boot: a dream whose daemon died mid-run is `failed`, so its workspace may dream again."""
    with journal.connect() as conn:
        return conn.execute("UPDATE dreams SET state = 'failed', finished_at = ?, detail = ? WHERE state = 'running'",
                            (journal.now_iso(), detail)).rowcount


def last(workspace: Path | None = None) -> dict[str, object] | None:
    with journal.connect() as conn:
        row = conn.execute("SELECT * FROM dreams " + ("WHERE workspace = ? " if workspace else "")
                           + "ORDER BY started_at DESC LIMIT 1", (str(workspace),) if workspace else ()).fetchone()
    return dict(row) if row else None


def listing(limit: int = 20) -> list[dict[str, object]]:
    with journal.connect() as conn:
        dreams = [dict(r) for r in conn.execute("SELECT * FROM dreams ORDER BY started_at DESC LIMIT ?", (limit,))]
        for d in dreams:
            d["decisions"] = _decisions_of(conn, str(d["id"]))
    return dreams


def get(dream_id: str) -> dict[str, object] | None:
    """One dream as listing() shows it, with its decisions; None when there is no such dream."""
    with journal.connect() as conn:
        row = conn.execute("SELECT * FROM dreams WHERE id = ?", (dream_id,)).fetchone()
        if row is None:
            return None
        dream = dict(row)
        dream["decisions"] = _decisions_of(conn, dream_id)
    return dream


def _decisions_of(conn: sqlite3.Connection, dream_id: str) -> list[dict[str, object]]:
    return [_decision(r) for r in conn.execute("SELECT * FROM decisions WHERE dream_id = ? ORDER BY at", (dream_id,))]


def _decision(row: object) -> dict[str, object]:
    d = dict(row)  # type: ignore[call-overload]
    d["source_sessions"] = json.loads(d["source_sessions"])
    d["changes"] = [{k: v for k, v in c.items() if k not in ("before", "after")} for c in json.loads(d["changes"])]
    return d


# ---- decisions -------------------------------------------------------------------------------------------

@dataclass
class ChangeDone:
    path: str
    scope: str
    workspace: str
    agent: str
    before: str | None
    after: str | None
    journal_id: int


def apply(dream_id: str, workspace: Path, proposals: list[dict[str, object]], material: list[Candidate]
          ) -> list[dict[str, object]]:
    """Each proposal through the write path with its decision record; one that cannot apply is skipped, logged
    and said in the answer."""
    results: list[dict[str, object]] = []
    for proposal in proposals[:50]:
        try:
            decision_id = _apply_one(dream_id, workspace, proposal, material)
            results.append({"decision_id": decision_id, "action": proposal.get("action")})
        except (InvalidMemory, MemoryNotFound, ValueError, KeyError, TypeError) as exc:
            logger.warning("dream %s: proposal %.200r not applied: %s", dream_id, proposal, exc)
            results.append({"skipped": str(exc)[:300], "action": proposal.get("action")})
    return results


def _target(workspace: Path, proposal: dict[str, object], slug: str) -> store.Stored:
    type_ = MemoryType(str(proposal["type"])) if proposal.get("type") else None
    try:
        return store.find(slug, type_=type_, workspace=workspace)
    except MemoryNotFound:
        agents = [s for s in store.entries(Scope.AGENT)[0] if s.entry.slug == slug
                  and (type_ is None or s.entry.type is type_)]
        if not agents:
            raise
        return agents[0]


def _sources(material: list[Candidate], slugs: list[str]) -> list[str]:
    sources: list[str] = []
    for c in material:
        if c.slug in slugs:
            for sid in [c.written_by, *c.recalled_in]:
                if sid not in sources:
                    sources.append(sid)
    return sources


def _apply_one(dream_id: str, workspace: Path, proposal: dict[str, object], material: list[Candidate]) -> str:
    action = str(proposal.get("action"))
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r:.40}")
    reason = str(proposal.get("reason") or "")[:1000]
    done: list[ChangeDone] = []
    if action == "merge":
        slugs = [str(s) for s in proposal["slugs"]]  # type: ignore[attr-defined]
        olds = [_target(workspace, proposal, s) for s in slugs]
        into = proposal["into"]
        assert isinstance(into, dict)
        first = olds[0].entry
        merged = Entry(name=str(into["name"]), description=str(into.get("description") or ""),
                       type=first.type, scope=first.scope, body=str(into.get("body") or ""),
                       provenance=f"dream:{dream_id}", agent=first.agent)
        done.append(_write(merged, olds[0].where.workspace, dream_id))
        done += [_remove(s, dream_id) for s in olds if str(s.path) != done[0].path]
    else:
        slugs = [str(proposal["slug"])]
        old = _target(workspace, proposal, slugs[0])
        if action == "delete":
            done.append(_remove(old, dream_id))
        else:
            to = Scope(str(proposal.get("to") or old.entry.scope.value))
            promoted = old.entry.with_changes(provenance=f"dream:{dream_id}", scope=to,
                                              agent=old.entry.agent if to is Scope.AGENT else "")
            done.append(_write(promoted, workspace if to is Scope.WORKSPACE else None, dream_id))
            if done[0].path != str(old.path):
                done.append(_remove(old, dream_id))
    decision_id = "dec_" + secrets.token_hex(8)
    with journal.connect() as conn:
        conn.execute("INSERT INTO decisions (id, dream_id, at, action, reason, source_sessions, changes) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (decision_id, dream_id, journal.now_iso(), action, reason,
                      json.dumps(_sources(material, slugs)), json.dumps([asdict(c) for c in done])))
    return decision_id


def _write(entry: Entry, workspace: Path | None, dream_id: str) -> ChangeDone:
    result = store.write(entry, workspace=workspace, actor="dream", dream_id=dream_id)
    return ChangeDone(result.path, entry.scope.value, str(workspace or ""), entry.agent, result.before,
                      result.content, result.journal_id)


def _remove(stored: store.Stored, dream_id: str) -> ChangeDone:
    before = stored.path.read_text(encoding="utf-8")
    jid = store.delete(stored, actor="dream", dream_id=dream_id)
    return ChangeDone(str(stored.path), stored.where.scope.value, str(stored.where.workspace or ""),
                      stored.where.agent, before, None, jid)


def revert(decision_id: str) -> dict[str, object]:
    """Every change of the decision undone, newest first, through the write path."""
    with journal.connect() as conn:
        row = conn.execute("SELECT * FROM decisions WHERE id = ?", (decision_id,)).fetchone()
    if row is None:
        raise MemoryNotFound(f"no dream decision {decision_id!r}", code="decision_not_found")
    if row["reverted_at"]:
        raise MemoryConflict(f"decision {decision_id} was reverted at {row['reverted_at']}", code="already_reverted")
    for c in reversed(json.loads(row["changes"])):
        where = store.Where(Scope(c["scope"]), Path(c["workspace"]) if c["workspace"] else None, c["agent"])
        store.restore(Path(c["path"]), c["before"], where, actor="revert", dream_id=row["dream_id"])
    with journal.connect() as conn:
        conn.execute("UPDATE decisions SET reverted_at = ? WHERE id = ?", (journal.now_iso(), decision_id))
        updated = conn.execute("SELECT * FROM decisions WHERE id = ?", (decision_id,)).fetchone()
    return _decision(updated)
