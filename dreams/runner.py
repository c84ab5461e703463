"""A dream, from its trigger to its decisions: the gates (gates.py), a `dream` session created with its material
as the staged prompt (approve-all: sessions/catalog/lineage.py), its answer read once its turn ends, each proposed
change applied through memory's write path with a decision record (memory/dreams.py), then the session stopped.

Runs on the daemon's loop; every read and write is off it."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime
from pathlib import Path

from compozy_base.config.loader import get_config
from dreams.answer import parse_answer
from dreams.gates import GateInputs, blocked
from memory import dreams as records
from memory import store
from memory.errors import MemoryConflict
from sessions import services
from sessions.core.enums import SessionState, SessionType
from sessions.core.errors import Conflict
from sessions.core.offload import db
from sessions.models import Session
from sessions.services.create import CreateBody
from sessions.store import events as event_store
from sessions.store import folder

logger = logging.getLogger(__name__)

ANSWER_TIMEOUT = 600.0  # a dream whose agent says nothing for this long fails, its session stopped
POLL_SECONDS = 0.5
RECENT_SESSIONS = 10
_following: set[asyncio.Task[None]] = set()


class DreamBlocked(Conflict):
    """A trigger whose gates do not pass: the answer names the gate."""

    code = "dream_gate_closed"


def _parse_time(value: object) -> datetime | None:
    return folder.parse_time(str(value)) if value else None


def _completed_since(workspace: Path, since: datetime | None) -> tuple[int, list[Session]]:
    """How many sessions of the workspace stopped since, and the newest RECENT_SESSIONS of them."""
    rows = Session.objects.filter(workspace__root_dir=str(workspace), state=SessionState.STOPPED).exclude(
        session_type=SessionType.DREAM)
    if since is not None:
        rows = rows.filter(updated_at__gt=since)
    return rows.count(), list(rows.order_by("-updated_at")[:RECENT_SESSIONS])


def gate_inputs(workspace: Path) -> tuple[GateInputs, list[records.Candidate], list[Session]]:
    last = records.last(workspace)
    last_at = _parse_time(last["started_at"]) if last else None
    completed, recent = _completed_since(workspace, last_at)
    material = records.candidates(workspace)
    return (GateInputs(running=bool(last and last["state"] == "running"), last_dream_at=last_at,
                       completed_since=completed, candidates=len(material)), material, recent)


def _last_answer(session_id: str, limit: int = 600) -> str:
    rows = event_store.read_events(folder.events_path(session_id), types=["agent_message"], newest=True, limit=20)
    text = "".join(str((r.get("content") or {}).get("text") or "") for r in rows)
    return text[-limit:]


def prompt_for(workspace: Path, material: list[records.Candidate], recent: list[Session]) -> str:
    entries, _ = store.entries(None, workspace, "", shadow=True)
    payload = {
        "workspace": str(workspace),
        "candidates": [c.__dict__ for c in material],
        "memory": [{"slug": s.entry.slug, "type": s.entry.type.value, "scope": s.entry.scope.value,
                    "name": s.entry.name, "description": s.entry.description} for s in entries[:200]],
        "recent_sessions": [{"id": s.id, "name": s.name, "last_answer": _last_answer(s.id)}
                            for s in recent[:RECENT_SESSIONS]],
    }
    return ("You are Compozy's dream: consolidate the curated memory of this workspace. The material below holds "
            "entries agents wrote that later sessions recalled (candidates), the memory as it stands, and what recent "
            "sessions ended with. Propose promotions (a candidate kept as curated memory, optionally to a broader "
            "scope: `to` is workspace or global), merges (several entries into one) and deletions (what is wrong "
            "or stale). Change no file yourself.\n\n<dream-material>\n" + json.dumps(payload, ensure_ascii=False)
            + "\n</dream-material>\n\nAnswer with one fenced json block: {\"decisions\": [{\"action\": \"promote\", "
            "\"slug\": …, \"type\": …, \"to\": \"workspace\", \"reason\": …}, {\"action\": \"merge\", \"slugs\": […], "
            "\"type\": …, \"into\": {\"name\": …, \"description\": …, \"body\": …}, \"reason\": …}, "
            "{\"action\": \"delete\", \"slug\": …, \"type\": …, \"reason\": …}]}")


async def trigger(workspace: Path) -> dict[str, object]:
    """Start a dream for the workspace when its gates pass; DreamBlocked naming the gate when one does not."""
    config = get_config().memory.dream
    inputs, material, recent = await db(gate_inputs, workspace)
    gate = blocked(inputs, config, folder.utcnow())
    if gate is not None:
        raise DreamBlocked(f"dream blocked by its {gate.gate} gate: {gate.detail}",
                           data={"gate": gate.gate, "detail": gate.detail})
    try:
        dream_id = await asyncio.to_thread(records.start, workspace, len(material))
    except MemoryConflict as exc:
        raise DreamBlocked(exc.message, data={"gate": "one_runner", "detail": exc.message}) from exc
    try:
        prompt = await db(prompt_for, workspace, material, recent)
        body: CreateBody = {"workspace_path": str(workspace), "prompt": prompt, "name": f"dream {dream_id}"}
        if config.agent:
            body["agent_name"] = config.agent
        created = await services.create_session(body, SessionType.DREAM)
    except Exception as exc:
        await asyncio.to_thread(records.finish, dream_id, "failed", f"the dream session could not start: {exc}")
        raise
    await asyncio.to_thread(records.attach, dream_id, created["id"])
    task = asyncio.get_running_loop().create_task(_follow(dream_id, created["id"], workspace, material))
    _following.add(task)
    task.add_done_callback(_following.discard)
    return await asyncio.to_thread(_dream, dream_id)


def _dream(dream_id: str) -> dict[str, object]:
    dream = records.get(dream_id)
    assert dream is not None, dream_id  # started above: its row is written before the session is created
    return dream


def _outcome(session_id: str) -> tuple[str, str] | None:
    """("done", answer) once the dream's turn ended with end_turn, ("failed", why) when it failed or the session
    stopped. The success rule is the tasks' and coordinated steps' (sessions/services/outcomes.py): a turn cut short
    (cancelled, refusal, max_tokens) holds no complete answer to apply. The answer is that turn's every
    agent_message row: a streamed reply is stored as one row per write batch."""
    outcome = services.turn_outcome(session_id)
    if outcome is not None:
        if outcome.succeeded:
            return "done", services.turn_text(session_id, outcome.turn_id)
        return "failed", f"the dream's turn failed: {outcome.detail}"
    meta = folder.read_meta(session_id)
    if meta is not None and meta.get("state") == SessionState.STOPPED:
        return "failed", f"the dream session stopped: {meta.get('stop_reason')}"
    return None


async def _follow(dream_id: str, session_id: str, workspace: Path, material: list[records.Candidate]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ANSWER_TIMEOUT
    state, detail = "failed", "the dream's agent did not answer in time"
    try:
        while loop.time() < deadline:
            outcome = await asyncio.to_thread(_outcome, session_id)
            if outcome is not None:
                state, detail = outcome
                break
            await asyncio.sleep(POLL_SECONDS)  # the store is the dream's one witness; read it twice a second
        if state == "done":
            proposals = parse_answer(detail)
            results = await asyncio.to_thread(records.apply, dream_id, workspace, proposals, material)
            applied = sum(1 for r in results if "decision_id" in r)
            detail = f"{applied} decision(s) applied, {len(results) - applied} skipped"
    except Exception as exc:  # a dream that fails is its record's state, with the cause
        logger.exception("dream %s failed", dream_id)
        state, detail = "failed", str(exc)[:500]
    await asyncio.to_thread(records.finish, dream_id, state, detail)
    logger.info("dream %s %s: %s", dream_id, state, detail)
    try:
        await services.stop_session(session_id, detail=f"dream {state}")
    except Exception:  # the session may have stopped by itself; logged, the dream is recorded
        logger.info("dream %s: its session %s was already stopping", dream_id, session_id, exc_info=True)


async def status() -> dict[str, object]:
    return {"dreams": await asyncio.to_thread(records.listing, 20)}


__all__ = ["DreamBlocked", "parse_answer", "status", "trigger"]
