"""`compozy session recap`: the deterministic snapshot to read before attaching or starting new work."""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _client, _fmt, _session_path, json_flag, output_option, session
from compozy.cli.client import ApiError
from compozy.cli.output import emit, fail_api, kv, table


def _message_line(message: dict[str, Any]) -> str:
    """One line per UI message: what it said (the reasoning, marked, only when it said nothing else), else what
    its parts are."""
    parts = message.get("parts", [])
    said = " ".join(t for p in parts if p.get("type") == "text" and (t := p.get("text", "").strip()))
    thought = " ".join(t for p in parts if p.get("type") == "reasoning" and (t := p.get("text", "").strip()))
    text = said or (f"(thinking) {thought}" if thought else "")
    if not text:
        kinds = []
        for part in message.get("parts", []):
            if part.get("type") == "dynamic-tool":
                kinds.append(f"tool {part.get('toolName')} ({part.get('state')})")
            elif str(part.get("type", "")).startswith("data-"):
                data = part.get("data") or {}
                if data.get("event_type") == "session_stopped":
                    # Its failure's text is the error row's just before it (and the recap's Failure): said once.
                    kinds.append(f"session stopped ({data.get('stop_reason') or 'unknown'})")
                    continue
                label = (data.get("marker") or {}).get("kind") or data.get("event_type") or part["type"]
                kinds.append(str(data.get("error") or data.get("text") or data.get("decision") or label))
        text = "; ".join(kinds)
    text = " ".join(text.split())
    return text if len(text) <= 160 else text[:157] + "..."


def marker_rows(recap: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Each marker once, pending ones first: a pending marker is often a recent one too (a `provider_failure` is
    both), and it was listed twice."""
    pending = recap["pending_markers"]
    shown = {m.get("sequence") for m in pending}
    return ([("yes", m["kind"], m["occurred_at"], m["summary"]) for m in pending]
            + [("", m["kind"], m["occurred_at"], m["summary"]) for m in recap["recent_markers"]
               if m.get("sequence") is None or m.get("sequence") not in shown])


def _render(recap: dict[str, Any]) -> None:
    s = recap["session"]
    snap = recap["snapshot"]
    failure = s.get("failure") or {}
    kv(f"Recap {s['id']}", [
        ("State", f"{s['state']} ({s['badge']})"),
        ("Agent", s["agent_name"]),
        ("Workspace", s.get("workspace_path") or s["workspace_id"]),
        ("Stop reason", s.get("stop_reason")),
        ("Stop detail", s.get("stop_detail")),
        ("Failure", f"{failure.get('kind')}: {failure.get('summary')}" if failure else None),
        ("Crash bundle", failure.get("crash_bundle_path")),
        ("Active run", (f"{recap['active_run']['turn_id']} since {recap['active_run']['started_at']}"
                        if recap.get("active_run") else None)),
        ("Snapshot", f"events ≤ {snap['event_cursor']} as of {snap['generated_at']} ({snap['consistency']})"),
    ])
    if recap["pending_markers"] or recap["recent_markers"]:
        table("Markers (pending first)", ["Pending", "Kind", "When", "Summary"], marker_rows(recap))
    if recap["pending_inputs"]:
        table("Queued inputs", ["#", "Entry", "Mode", "Text"],
              [(i["queue_position"], i["queue_entry_id"], i["mode"], i["text"][:80]) for i in recap["pending_inputs"]])
    table("Recent messages", ["Role", "When", "Message"],
          [(m["role"], (m.get("metadata") or {}).get("created_at", ""), _message_line(m))
           for m in recap["recent_messages"]])


@session.command("recap")
@click.argument("session_id")
@click.option("--limit", type=click.IntRange(1, 100), default=None, help="Recent messages (default 20, max 100).")
@output_option
@json_flag
def session_recap(session_id: str, limit: int | None, fmt: str, as_json: bool) -> None:
    """A deterministic, bounded, redacted recap: state, failure, active run, markers, queue, recent messages.

    Read it before `session resume`, or instead of it for a stopped session. The same store prints
    the same bytes (`-o json`).

    Examples:

        compozy session recap sess_0123456789abcdef
        compozy session recap sess_0123456789abcdef --limit 5 -o json | jq .pending_markers
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        recap = client.request("GET", _session_path(client, session_id, "/recap"), query={"limit": limit})["recap"]
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(recap, fmt, lambda: _render(recap))
