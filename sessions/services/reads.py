"""Listing sessions and reading their events and history: bounded pages from the catalog and events.db."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NotRequired, TypedDict

from django.db.models import QuerySet

from sessions.catalog import index as catalog
from sessions.core.attach_holders import holder_gone
from sessions.core.enums import SessionState, SessionType
from sessions.core.errors import Conflict, InvalidRequest, NotFound
from sessions.core.jsonobj import EventContent, JsonObject
from sessions.live import history as transcript_history
from sessions.live.history import HistoryTurn
from sessions.models import Session
from sessions.services.lookup import read_session_meta, row_meta_unreadable, scoped_meta
from sessions.services.payloads import SessionEvent, SessionPayload, envelope, session_payload
from sessions.services.reactivation import reactivatable
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.events import MAX_PAGE, HookRunView


class PageInfo(TypedDict):
    total: int
    limit: int
    has_more: bool
    next_cursor: NotRequired[str]


class SessionList(TypedDict):
    """`GET /sessions`: a page of session payloads (a TypedDict, sent as JSON as built)."""

    sessions: list[SessionPayload]
    page: PageInfo


def list_sessions(*, workspace: str | None = None, state: str | None = None, resumable: bool = False,
                  all_states: bool = False, agent: str | None = None, query: str | None = None,
                  limit: int = 50, cursor: str | None = None, session_type: str | None = None,
                  workspace_ids: Collection[str] | None = None) -> SessionList:
    """A page of sessions, newest first. `workspace_ids`, when given, limits the rows to those workspaces in the
    query itself (a workspace-limited token), so `page.total`, `has_more` and `next_cursor` count only them."""
    if not 1 <= limit <= 100:
        raise InvalidRequest("limit must be between 1 and 100", code="invalid_limit")
    qs = _session_rows(workspace=workspace, state=state, active_only=not resumable and not all_states, agent=agent,
                       query=query, session_type=session_type, workspace_ids=workspace_ids)
    if resumable and not state:
        qs = qs.filter(state__in=(SessionState.ACTIVE, SessionState.STOPPED))
    offset = 0
    if cursor:
        try:
            offset = max(int(cursor), 0)
        except ValueError as exc:
            raise InvalidRequest("invalid cursor", code="invalid_cursor") from exc
    total = qs.count()
    rows = list(qs[offset:offset + limit])
    sessions = []
    for row in rows:
        payload = _listed(row)
        if payload is None:
            continue
        if resumable and not _resumable(row, payload):
            continue
        sessions.append(payload)
    has_more = offset + limit < total
    page: PageInfo = {"total": total, "limit": limit, "has_more": has_more}
    if has_more:
        page["next_cursor"] = str(offset + limit)
    return {"sessions": sessions, "page": page}


def _resumable(row: Session, payload: EventContent) -> bool:
    """What `session resume` takes (issue 50: the list and the command agree): a live session it can attach to (no
    other holder's lease), or a stopped one it reactivates first."""
    if payload["state"] == SessionState.STOPPED:
        # From the catalog row: the payload names the session's type `type`, and reactivation reads meta.json's
        # `session_type` (a daemon-made session read as a user's, listed, then refused by `session resume`).
        return reactivatable({"session_type": row.session_type, "workspace_id": row.workspace_id,
                              "agent_name": row.agent_name, "provider": row.provider})
    lease_held = bool(row.attached_to and row.attach_expires_at and row.attach_expires_at > folder.utcnow()
                      and not holder_gone(row.attached_to))  # a closed terminal's resume holds nothing
    return bool(payload["attachable"]) and not lease_held


def _session_rows(*, workspace: str | None, state: str | None, active_only: bool, agent: str | None,
                  query: str | None, session_type: str | None,
                  workspace_ids: Collection[str] | None = None) -> QuerySet[Session]:
    """The catalog rows a list asks for, newest first."""
    qs = Session.objects.all().order_by("-updated_at", "id")
    if workspace_ids is not None:
        qs = qs.filter(workspace_id__in=list(workspace_ids))
    if workspace:
        qs = qs.filter(workspace_id=catalog.find_workspace(workspace).id)
    if state:
        if state not in set(SessionState):
            raise InvalidRequest("state must be starting, active, stopping or stopped", code="invalid_state")
        qs = qs.filter(state=state)
    elif active_only:
        qs = qs.filter(state=SessionState.ACTIVE)
    if agent:
        qs = qs.filter(agent_name=agent)
    # Dream sessions are daemon-internal and hidden unless asked for by type.
    qs = qs.filter(session_type=session_type) if session_type else qs.exclude(session_type=SessionType.DREAM)
    if query:
        qs = qs.filter(name__icontains=query) | qs.filter(id__icontains=query)
    return qs


def _listed(row: Session) -> SessionPayload | None:
    """A listed row's session payload, or None (not listed) when its folder is here without a meta.json."""
    try:
        return session_payload(read_session_meta(row.id))
    except NotFound:
        if folder.session_dir(row.id).exists():
            return None
        # Another node's session and no shared sessions folder: the catalog row is what this node knows.
        return session_payload(catalog.row_meta(row))
    except Conflict as exc:
        # meta.json is unreadable (session_meta_invalid): listed from its catalog row, marked and never
        # attachable, so the session does not vanish from the list while `page.total` still counts it.
        payload = session_payload(row_meta_unreadable(row))
        payload.update({"attachable": False, "meta_error": {"code": exc.code, "message": exc.message}})
        return payload


def _limit(value: int | None, default: int = 200) -> int:
    if value is None:
        return default
    if not 1 <= value <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}", code="invalid_limit")
    return value


def list_events(session_id: str, *, workspace_ref: str | None = None, after: int | None = None,
                limit: int | None = None, types: Sequence[str] | None = None, turn_id: str | None = None,
                agent_name: str | None = None, since: str | None = None) -> list[SessionEvent]:
    return list(events_page(session_id, workspace_ref=workspace_ref, after=after, limit=limit, types=types,
                            turn_id=turn_id, agent_name=agent_name, since=since)["events"])


def events_page(session_id: str, *, workspace_ref: str | None = None, after: int | None = None,
                limit: int | None = None, types: Sequence[str] | None = None, turn_id: str | None = None,
                agent_name: str | None = None, since: str | None = None) -> JsonObject:
    """`{events, page}`: one page of matching rows, ascending, and what it is a page of (issue 50: a read without a
    limit silently showed only the newest 200). Without `after` the page is the newest `limit` matches and
    `has_more` says older ones were left out; with `after`, the oldest after it and `has_more` says newer ones
    follow (`next_after` continues). `first_sequence`/`last_sequence`: the sequences shown (null when none)."""
    meta = scoped_meta(session_id, workspace_ref)
    if after is not None and after < 0:
        raise InvalidRequest("after_sequence must be a non-negative integer", code="invalid_cursor")
    size = _limit(limit)
    newest = after is None
    rows = event_store.read_events(
        folder.events_path(session_id), after=after or 0, limit=size + 1,
        newest=newest, types=types, turn_id=turn_id, agent_name=agent_name, since=since,
    )
    has_more = len(rows) > size
    if has_more:
        rows = rows[1:] if newest else rows[:size]
    page: JsonObject = {"limit": size, "order": "newest" if newest else "after", "has_more": has_more,
                            "first_sequence": rows[0]["sequence"] if rows else None,
                            "last_sequence": rows[-1]["sequence"] if rows else None}
    if has_more and not newest:
        page["next_after"] = rows[-1]["sequence"]
    return {"events": [envelope(meta, r) for r in rows], "page": page}


def history(session_id: str, *, workspace_ref: str | None = None, last: int | None = None,
            after: int | None = None) -> list[HistoryTurn]:
    """The user-visible turn sequence (debugging seed, step 5): the newest `last` turns, each assembled into
    messages by the transcript's assembler; `list_events` keeps the rows. Bounded whatever the turn sizes
    (`transcript_history.read_history`)."""
    scoped_meta(session_id, workspace_ref)  # 404 outside the workspace, and the stale-metadata repair of a read
    if after is not None and after < 0:
        raise InvalidRequest("after_sequence must be a non-negative integer", code="invalid_cursor")
    return transcript_history.read_history(folder.events_path(session_id), last=_limit(last), after=after or 0)


def hook_runs(session_id: str, workspace_ref: str | None, *, event: str | None = None, outcome: str | None = None,
              last: int | None = None) -> list[HookRunView]:
    """hook_runs rows of one session, oldest first (`last` keeps the newest N)."""
    scoped_meta(session_id, workspace_ref)  # 404 outside the workspace
    return event_store.read_hook_runs(folder.events_path(session_id), event=event, outcome=outcome,
                                      last=_limit(last, 1000))
