"""What happened that needs a person (or that a webhook asked to hear of), read off what the daemon records.

Pure rules over a saved session record or a task's history row. Each notice has a key naming what it is about and
when it began: the outbox's event id and the attention list's item id are digests of it, so a record saved again
yields the same ids, and a new failure of the same session new ones.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from accounts.links import LinkOffer
from attention.enums import AttentionKind, WebhookEvent
from sessions.core.enums import FailureKind, SessionState
from sessions.core.record import SessionMeta
from sessions.core.redact import bound_text, redact_text
from sessions.store.folder import isoformat
from tasks.enums import TaskEventKind
from tasks.models import Task, TaskEvent

SUMMARY_BYTES = 300
# Failures that are not the session's own: a person's cancel, and a login (its own event, auth_required).
_NOT_FAILED = {None, FailureKind.CANCELLATION, FailureKind.PROVIDER_AUTH_FAILURE}
# The attention list's kind of each event that needs a person (a finished turn needs nobody).
KIND_OF = {WebhookEvent.PERMISSION_REQUESTED: AttentionKind.PERMISSION, WebhookEvent.AUTH_REQUIRED: AttentionKind.AUTH,
           WebhookEvent.SESSION_FAILED: AttentionKind.FAILED, WebhookEvent.TASK_NEEDS_ATTENTION: AttentionKind.TASK,
           WebhookEvent.ELICITATION_REQUESTED: AttentionKind.ELICITATION,
           WebhookEvent.BUDGET_EXCEEDED: AttentionKind.BUDGET}


@dataclass(frozen=True)
class Notice:
    """One event, before it is fanned out to the webhooks that want it."""

    key: str  # what it is about and when it began: the event id is its digest
    event: WebhookEvent
    occurred_at: str
    summary: str
    session_id: str | None
    workspace_id: str | None
    path: str  # the dashboard page, relative
    agent: str = ""
    task_id: str | None = None
    request_id: str | None = None  # a permission request's id

    @property
    def event_id(self) -> str:
        return "evt_" + hashlib.sha256(self.key.encode()).hexdigest()[:24]

    def body(self, base_url: str, actions: list[LinkOffer] | None = None) -> str:
        """The JSON POSTed (issue 31), with `text` for chat tools' incoming webhooks. With action links (issue
        49): `actions: [{action, url}]`, and Slack's `blocks` with a button for each, so a Slack-compatible
        incoming webhook shows Approve and Deny."""
        def absolute(path: str) -> str:
            return base_url.rstrip("/") + path if base_url else path

        url = absolute(self.path)
        payload: dict[str, object] = {
            "id": self.event_id, "event": self.event.value, "occurred_at": self.occurred_at,
            "session_id": self.session_id, "workspace_id": self.workspace_id, "task_id": self.task_id,
            "agent": self.agent or None, "summary": self.summary, "url": url, "text": f"Compozy: {self.summary} {url}"}
        if actions:
            payload["actions"] = [{"action": a.action.value, "url": absolute(a.path)} for a in actions]
            payload["blocks"] = [
                {"type": "section", "text": {"type": "mrkdwn", "text": f"Compozy: {self.summary}"}},
                {"type": "actions", "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": a.action.value.capitalize()},
                     "url": absolute(a.path), "style": "primary" if a.action in ("approve", "answer") else "danger"}
                    for a in actions]}]
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _summary(text: str) -> str:
    return bound_text(redact_text(" ".join(text.split())), SUMMARY_BYTES)


def _label(meta: SessionMeta) -> str:
    return str(meta.get("name") or meta["id"])


def session_notices(meta: SessionMeta) -> list[Notice]:
    """The events a saved session record carries (pure: the record only)."""
    sid, liveness = str(meta["id"]), meta.get("liveness") or {}
    workspace_id, agent = meta.get("workspace_id"), str(meta.get("agent_name") or "")
    label, run = _label(meta), str(meta.get("activated_at") or meta.get("created_at") or "")
    failure = meta.get("failure") or {}
    kind = failure.get("kind")
    stopped = meta.get("state") == SessionState.STOPPED
    notices = []

    def add(key: str, event: WebhookEvent, at: object, summary: str, request_id: str | None = None) -> None:
        notices.append(Notice(key, event, str(at or meta["updated_at"]), _summary(summary), sid, workspace_id,
                              f"/sessions/{sid}", agent, request_id=request_id))

    if meta.get("state") == SessionState.ACTIVE:
        for req in liveness.get("permission_requests") or []:
            what = " ".join(str(x) for x in (req.get("kind"), req.get("title")) if x) or "a tool call"
            add(f"permission:{sid}:{req.get('request_id')}:{req.get('created_at')}", WebhookEvent.PERMISSION_REQUESTED,
                req.get("created_at"), f"{label} asks permission: {what}", str(req.get("request_id") or "") or None)
        for ask in liveness.get("elicitation_requests") or []:
            add(f"elicitation:{sid}:{ask.get('request_id')}:{ask.get('created_at')}",
                WebhookEvent.ELICITATION_REQUESTED, ask.get("created_at"),
                f"{label} asks: {ask.get('message') or 'a question'}", str(ask.get("request_id") or "") or None)
    turn = liveness.get("last_turn") or {}
    ended = meta.get("stopped_at") if stopped else None
    if kind == FailureKind.PROVIDER_AUTH_FAILURE:
        # On a live session the login failed a turn (the key: that turn); on a stopped one, its start or its stop.
        at = str(ended or run) if stopped else str(turn.get("turn_id") or run)
        add(f"auth:{sid}:{at}", WebhookEvent.AUTH_REQUIRED, ended or turn.get("ended_at"),
            f"{label} needs a provider login: {failure.get('summary') or ''}")
    if stopped and kind not in _NOT_FAILED:
        add(f"failed:{sid}:{ended or run}", WebhookEvent.SESSION_FAILED, ended,
            f"{label} failed ({kind}): {failure.get('summary') or ''}")
    if turn.get("turn_id"):
        add(f"turn:{sid}:{turn['turn_id']}", WebhookEvent.TURN_FINISHED, turn.get("ended_at"),
            f"{label} finished a turn ({turn.get('outcome') or 'done'})")
    return notices


def task_notice(row: TaskEvent, task: Task | None = None) -> Notice | None:
    if row.kind != TaskEventKind.NEEDS_ATTENTION:
        return None
    task = task or row.task
    return Notice(f"task:{task.id}:{row.pk}", WebhookEvent.TASK_NEEDS_ATTENTION, isoformat(row.created_at),
                  _summary(f"task {task.title} needs attention ({row.reason or 'escalated'})"),
                  session_id=None, workspace_id=task.workspace_id, path=f"/tasks#{task.id}",
                  agent=task.agent_name, task_id=task.id)
