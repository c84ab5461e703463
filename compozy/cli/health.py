"""Health and wake commands: `session health|inspect`, and `agent heartbeat status|wake` (docs/reference/surfaces.md
§2).

`session status` (sessions.py) shows the same health DTO beside the session record. Human output is a short
key/value view; `--json`/`-o json` prints the API's DTO unchanged.
"""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, json_flag, output_option, seg, session, session_call
from compozy.cli.output import emit, kv, table


def health_pairs(h: dict[str, Any]) -> list[tuple[str, Any]]:
    return [("state", h["state"]), ("health", h["health"]), ("active prompt", h["active_prompt"]),
            ("attachable", h["attachable"]), ("eligible for wake", h["eligible_for_wake"]),
            ("ineligibility reason", h.get("ineligibility_reason")), ("last activity", h.get("last_activity_at")),
            ("last presence", h.get("last_presence_at")), ("last error", h.get("last_error")),
            ("updated", h.get("updated_at"))]


@session.command("health")
@click.argument("session_id")
@output_option
@json_flag
def session_health(session_id: str, fmt: str, as_json: bool) -> None:
    """Session health: state, health, whether a prompt can be delivered now and whether a wake may target it.

    Metadata only: never calls the model. JSON is `{"health": {...}}`. Exits 69 when no such session exists.

    Examples:

        compozy session health sess_0123456789abcdef
        compozy session health sess_0123456789abcdef -o json | jq -r .health.attachable
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/health")
    emit(data, fmt, lambda: kv(f"Health of {session_id}", health_pairs(data["health"])))


@session.command("inspect")
@click.argument("session_id")
@click.option("--include-wake-events", type=click.IntRange(0, 100), default=5, show_default=True,
              help="How many recent wake decisions to include.")
@output_option
@json_flag
def session_inspect(session_id: str, include_wake_events: int, fmt: str, as_json: bool) -> None:
    """Health plus the HEARTBEAT.md correlation: policy snapshot id and digest, wake state, last wake audit,
    and the redacted last error.

    `-o json` also carries the recent wake decisions (`.wake_events`, as many as `--include-wake-events`).

    Examples:

        compozy session inspect sess_0123456789abcdef
        compozy session inspect sess_0123456789abcdef --include-wake-events 20 -o json
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/inspect", query={"include_recent_wake_events": include_wake_events})

    def human() -> None:
        wake = data.get("wake_state") or {}
        last = data.get("last_wake_event") or {}
        kv(f"Inspect {session_id}", [
            *health_pairs(data["health"]), ("policy snapshot", data.get("policy_snapshot_id")),
            ("policy digest", data.get("policy_digest")),
            ("policy status", (data.get("policy") or {}).get("validation_status")),
            ("last wake", wake.get("last_wake_at")), ("next wake allowed", wake.get("next_allowed_at")),
            ("last wake result", f"{last.get('result')} ({last.get('reason')})" if last else None)])

    emit(data, fmt, human)


@cli.group()
def agent() -> None:
    """The agents sessions run as (`compozy agent list`) and their HEARTBEAT.md wake policy
    (`compozy agent heartbeat`)."""


@agent.group()
def heartbeat() -> None:
    """HEARTBEAT.md wake policy: status and manual wakes (`.compozy/agents/NAME/HEARTBEAT.md`)."""


@heartbeat.command("status")
@click.argument("name")
@click.option("--workspace", default=None, help="Resolve the workspace's HEARTBEAT.md (id, name or path).")
@click.option("--session", "session_id", default=None, help="Include this session's wake state.")
@click.option("--include-session-health", is_flag=True, help="With --session: include its health.")
@click.option("--include-wake-events", is_flag=True, help="Include recent wake decisions.")
@output_option
@json_flag
def heartbeat_status(name: str, workspace: str | None, session_id: str | None, include_session_health: bool,
                     include_wake_events: bool, fmt: str, as_json: bool) -> None:
    """Policy status of an agent: present, valid, digest, snapshot, diagnostics, wake service state, and the wake
    state with its closed reason: the agent's (`wake_reason`, e.g. `heartbeat_no_policy` without a HEARTBEAT.md)
    and, per live session, the decision a wake would reach now (`sessions[]`: `result`, `reason`; nothing sent).

    NAME is an agent from config.toml (e.g. `general`); its policy is `<workspace>/.compozy/agents/NAME/HEARTBEAT.md`,
    else `$COMPOZY_HOME/agents/NAME/HEARTBEAT.md`. With `--session`, only that session (any state).

    Examples:

        compozy agent heartbeat status general
        compozy agent heartbeat status general --workspace "$PWD" --include-wake-events
        compozy agent heartbeat status general --session sess_0123456789abcdef -o json
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", f"/api/agents/{seg(name)}/heartbeat/status", query={
        "workspace": workspace, "session_id": session_id,
        "include_session_health": "true" if include_session_health else None,
        "include_recent_wake_events": "true" if include_wake_events else None})

    def human() -> None:
        kv(f"HEARTBEAT.md of {name}", [
            ("status", data["validation_status"]), ("active", data["active"]), ("enabled", data["enabled"]),
            ("source", data.get("source_path")), ("snapshot", data["snapshot_id"]), ("digest", data.get("digest")),
            ("summary", data.get("summary")),
            ("min interval", (data.get("preferences") or {}).get("min_interval_seconds")),
            ("wake", f"refused: {data['wake_reason']}" if data.get("wake_reason") else "per session")])
        if data.get("sessions"):
            table("Wake decisions now", ["Session", "State", "Result", "Reason"],
                  [(w["session_id"], w["state"], w["result"], w["reason"]) for w in data["sessions"]])
        if data.get("diagnostics"):
            table("Diagnostics", ["Severity", "Code", "Message"],
                  [(d["severity"], d["code"], d["message"]) for d in data["diagnostics"]])

    emit(data, fmt, human)


@heartbeat.command("wake")
@click.argument("name")
@click.option("--session", "session_id", required=True, help="The session to wake.")
@click.option("--dry-run", is_flag=True, help="Decide without sending or recording anything.")
@output_option
@json_flag
def heartbeat_wake(name: str, session_id: str, dry_run: bool, fmt: str, as_json: bool) -> None:
    """Ask the wake service to re-orient a session now. A refused wake is not an error: the decision says why
    (`result` and a closed `reason`; a session that does not exist is `session_not_found`).

    Any decision, sent or refused, exits 0 (an unknown agent exits 69); `-o json` prints
    `{"decision": {"result": ..., "reason": ..., ...}}`.

    Examples:

        compozy agent heartbeat wake general --session sess_0123456789abcdef --dry-run
        compozy agent heartbeat wake general --session sess_0123456789abcdef -o json
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/agents/{seg(name)}/heartbeat/wake",
                    {"session_id": session_id, "dry_run": dry_run})
    d = data["decision"]
    emit(data, fmt, lambda: kv(f"Wake {session_id}", [
        ("result", d["result"]), ("reason", d["reason"]), ("wake event", d.get("wake_event_id")),
        ("synthetic prompt", d.get("synthetic_prompt_id")), ("policy snapshot", d.get("policy_snapshot_id"))]))
