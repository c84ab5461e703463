"""The `compozy session` commands: thin, one or two API calls each over the daemon socket."""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Any

import rich_click as click

from compozy.cli.app import (
    _client,
    _fmt,
    _scoped,
    _session_path,
    json_flag,
    output_option,
    seg,
    session,
)
from compozy.cli.client import ApiError, Client
from compozy.cli.live import follow_turn
from compozy.cli.output import (
    EXIT_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    dump,
    emit,
    fail,
    fail_api,
    fail_stream,
    json_line,
    kv,
)

# ---- sessions ----------------------------------------------------------------------------------

def _model_rows(s: dict[str, Any]) -> list[tuple[str, Any]]:
    """The model the agent reports it runs; the configured one only where it differs or was not applied."""
    running = s.get("agent_model") or {}
    resolution = s.get("model_resolution") or {}
    rows: list[tuple[str, Any]] = [("model", running.get("id") or s.get("model"))]
    if running and s.get("model") and s.get("model") != running.get("id"):
        rows.append(("configured model", s.get("model")))
    if resolution.get("status") not in (None, "applied"):
        rows.append(("model resolution", f"{resolution['status']}: {resolution.get('reason', '')}"))
    return rows


def _render_session(s: dict[str, Any]) -> None:
    failure = s.get("failure") or {}
    kv(f"Session {s['id']}", [
        ("name", s.get("name")), ("state", s["state"]), ("badge", s.get("badge")), ("agent", s["agent_name"]),
        ("provider", s.get("provider")), *_model_rows(s), ("workspace", s["workspace_id"]),
        ("cwd", s.get("cwd")), ("prompt", s.get("prompt_state")), ("stop reason", s.get("stop_reason")),
        ("stop detail", s.get("stop_detail")), ("failure", failure.get("kind")),
        ("failure summary", failure.get("summary")), ("crash bundle", failure.get("crash_bundle_path")),
        ("last activity", s.get("last_activity_at")), ("created", s["created_at"]), ("updated", s["updated_at"]),
    ])


# While `session new` waits for a start, it reads the start's progress rows (an npx install) once a second.
PROGRESS_POLLS = 10


def _echo_start_progress(client: Any, s: dict[str, Any], after: int) -> int:
    """Print `runtime_progress` rows recorded after `after` on stderr (stdout stays the record); the new cursor."""
    path = f"/api/workspaces/{s['workspace_id']}/sessions/{s['id']}/events"
    rows = client.request("GET", path, query={"type": ["runtime_progress"], "after_sequence": after})["events"]
    for row in rows:
        click.echo(f"… {row['content'].get('text', '')}", err=True)
    return rows[-1]["sequence"] if rows else after


@session.command("new")
@click.option("--agent", default=None, help="Agent name (default: the workspace's, else `general`).")
@click.option("--cwd", default=None, help="Absolute path; registers it as a workspace when new.")
@click.option("--workspace", default=None, help="A registered workspace id, name or path (exclusive with --cwd).")
@click.option("--name", default=None, help="Session name (optional).")
@click.option("--provider", default=None, help="Provider override, e.g. `demo`, `claude`, `codex`.")
@click.option("--model", default=None,
              help="Model id as the agent offers it, e.g. `demo-large` (default: the agent's, else the provider's); "
              "one it does not offer is reported in `session status`, not applied.")
@click.option("--reasoning-effort", default=None,
              type=click.Choice(["none", "minimal", "low", "medium", "high", "xhigh", "max"]),
              help="How hard the agent thinks (default: the agent's config); applied if the agent offers it.")
@click.option("--speed", default=None, type=click.Choice(["normal", "fast"]),
              help="`fast` uses the agent's fast mode where it offers one (default `normal`).")
@click.option("--prompt", default=None, help="First prompt, trimmed, staged durably and sent once the agent is "
              "active; an empty or blank one creates the session only.")
@click.option("--no-wait", is_flag=True, help="Return the `starting` record at once.")
@output_option
@json_flag
def session_new(agent: str | None, cwd: str | None, workspace: str | None, name: str | None, provider: str | None,
                model: str | None, reasoning_effort: str | None, speed: str | None, prompt: str | None,
                no_wait: bool, fmt: str, as_json: bool) -> None:
    """Create a session and wait until it is `active` (or failed to start).

    With neither `--cwd` nor `--workspace`, `$COMPOZY_WORKSPACE` is used, else the current directory. Start
    progress (an npx install) goes to stderr; stdout gets the session record (`-o json`: the record itself, so
    `jq -r .id` reads its id). Exits 70 when the session fails to start.

    Examples:

        compozy session new --cwd "$PWD" --prompt "Run the tests and fix what fails."
        compozy session new --workspace ws_0123456789abcdef --provider demo --model demo-large
        compozy session new --agent general --name review --no-wait -o json | jq -r .id
    """
    fmt = _fmt(fmt, as_json)
    if cwd and workspace:
        fail("--cwd and --workspace are mutually exclusive", "workspace_conflict", fmt, EXIT_USAGE)
    body: dict[str, Any] = {k: v for k, v in {
        "agent_name": agent, "name": name, "provider": provider, "model": model,
        "reasoning_effort": reasoning_effort, "speed": speed, "prompt": prompt}.items() if v is not None}
    if workspace or (not cwd and os.environ.get("COMPOZY_WORKSPACE")):
        body["workspace"] = workspace or os.environ["COMPOZY_WORKSPACE"]
    else:
        body["workspace_path"] = cwd if cwd is not None else os.getcwd()
    client = _client()
    try:
        s = client.request("POST", "/api/sessions", body)["session"]
        progress, polls = 0, 0
        while not no_wait and s["state"] in ("starting", "stopping"):
            time.sleep(0.1)
            s = client.request("GET", f"/api/sessions/{s['id']}")["session"]
            polls += 1
            if polls % PROGRESS_POLLS == 0 and s["state"] == "starting":
                progress = _echo_start_progress(client, s, progress)
    except ApiError as exc:
        fail_api(exc, fmt)
    # A session that reached `active` started, whatever its staged first turn did next (it may have crashed
    # the agent): that is the turn's outcome, shown in the record, not a failed start.
    if not no_wait and s["state"] == "stopped" and not s.get("activated_at"):
        summary = (s.get("failure") or {}).get("summary") or s.get("stop_detail") or "unknown error"
        fail(f'session "{s["id"]}" startup failed: {summary}', (s.get("failure") or {}).get("kind", "startup_failure"),
             fmt, EXIT_FAILED, {"error": f"startup failed: {summary}", "code": "startup_failure", "session": s})
    emit(s, fmt, lambda: _render_session(s))


@session.command("status")
@click.argument("session_id")
@output_option
@json_flag
def session_status(session_id: str, fmt: str, as_json: bool) -> None:
    """The current session record (state, agent, workspace, stop reason, failure, prompt state, times) and its
    health.

    JSON is `{"session": {...}, "health": {...}, "wake_state": ...}`, so `jq '.session.failure'` reads the failure.
    Exits 69 when no such session exists.

    Examples:

        compozy session status sess_0123456789abcdef
        compozy session status sess_0123456789abcdef -o json | jq '.session.failure'
    """
    from compozy.cli.app import session_call
    from compozy.cli.health import health_pairs

    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/status")
    s = data["session"]

    def human() -> None:
        _render_session(s)
        kv("Health", health_pairs(data["health"]))

    emit(data, fmt, human)


@session.command("list")
@click.option("--all", "all_states", is_flag=True, help="Every state, not only active sessions.")
@click.option("--state", type=click.Choice(["starting", "active", "stopping", "stopped"]),
              help="Only sessions in this state (replaces the active-only default).")
@click.option("--resumable", is_flag=True, help="Only sessions you can attach to now.")
@click.option("--workspace", default=None, help="Only this workspace (id, name or absolute path).")
@click.option("--agent", default=None, help="Only sessions of this agent name.")
@click.option("--query", default=None, help="Only sessions whose name or id contains this text.")
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True,
              help="Sessions per page (1-100).")
@click.option("--cursor", default=None, help="`page.next_cursor` from the previous page.")
@click.option("--wide", is_flag=True, help="More columns (badge, provider, stop reason, failure, workspace, created).")
@click.option("--include-health", is_flag=True, help="Attach each session's health DTO (`.health` in JSON).")
@output_option
@json_flag
def session_list(all_states: bool, state: str | None, resumable: bool, workspace: str | None, agent: str | None,
                 query: str | None, limit: int, cursor: str | None, wide: bool, include_health: bool, fmt: str,
                 as_json: bool) -> None:
    """List sessions (active ones by default), most recently updated first.

    `-o json` prints one page, `{sessions: [...], page: {total, has_more, next_cursor}}`; `-o jsonl` every
    matching session, one a line, following the pages (`--limit` sets their size).

    Examples:

        compozy session list --all --wide
        compozy session list --state stopped --workspace "$PWD" --limit 20
        compozy session list --resumable -o jsonl | jq -r .id
    """
    from compozy.cli.events_view import session_rows

    fmt = _fmt(fmt, as_json)
    client = _client()
    filters = {"all": "true" if all_states else None, "state": state, "resumable": "true" if resumable else None,
               "workspace": workspace, "agent": agent, "q": query, "limit": limit,
               "include_health": "true" if include_health else None}
    try:
        data = client.request("GET", "/api/sessions", query={**filters, "cursor": cursor})
        if fmt == "jsonl":
            # A script reading lines has no page object to find the next cursor in, so it gets every match.
            # A session updated while the pages are read can move to a later page: it is printed once.
            printed: set[str] = set()
            while True:
                for row in data["sessions"]:
                    if row["id"] not in printed:
                        printed.add(row["id"])
                        click.echo(json_line(row))
                if not data["page"].get("has_more"):
                    return
                data = client.request("GET", "/api/sessions",
                                      query={**filters, "cursor": data["page"]["next_cursor"]})
    except ApiError as exc:
        fail_api(exc, fmt)

    def human() -> None:
        page = data["page"]
        if not data["sessions"]:
            click.echo("no sessions" + ("" if all_states or state or resumable else " active (--all for every state)"))
            return
        for line in session_rows(data["sessions"], wide):
            click.echo(line)
        if page.get("has_more"):
            click.echo(f"{len(data['sessions'])} of {page['total']}; next page: --cursor {page.get('next_cursor')}")

    emit(data, fmt, human)


def _print_event(row: dict[str, Any], fmt: str) -> None:
    if fmt in ("json", "jsonl"):
        click.echo(json_line(row))
        return
    from compozy.cli.events_view import clock, event_line, terminal_width

    click.echo(event_line(row, terminal_width(), clock(row.get("timestamp"))))


@session.command("prompt")
@click.argument("session_id")
@click.argument("message", required=False)
@click.option("--queue", "queue_", is_flag=True, help="If busy, queue it (FIFO).")
@click.option("--interrupt", "interrupt", is_flag=True, help="If busy, cancel the turn and run this instead.")
@click.option("--steer", "steer", is_flag=True,
              help="Steer the running turn at its next tool result (as `POST …/steer`); right after `session "
              "interrupt`, resend the interrupted prompt once with this correction. Nothing to steer: exit 65.")
@click.option("--cancel", "cancel_entry", default=None, metavar="ENTRY_ID",
              help="Cancel a queued entry by id (`inq_…`, printed by `--queue` and `session queue`); no MESSAGE.")
@click.option("--no-follow", is_flag=True, help="Return once accepted instead of streaming the turn.")
@output_option
@json_flag
def session_prompt(session_id: str, message: str | None, queue_: bool, interrupt: bool, steer: bool,
                   cancel_entry: str | None, no_follow: bool, fmt: str, as_json: bool) -> None:
    """Send a prompt. On an idle session the turn streams here until it is `done`.

    A stopped session is continued under the same id. Busy sessions follow the busy-input mode (default
    from `session.busy_input.default_mode`); a queued prompt prints its entry id. `--steer` is `POST …/steer`:
    staged for the running turn's next tool result, or, right after `compozy session interrupt`, the interrupted
    prompt sent once more with this correction as a new turn (which streams here). `-o jsonl` prints each
    event as it arrives, `-o json` the turn's events as one array at the end. Exits 70 when the turn fails
    or is cancelled before it ends (a stop or an interrupt from elsewhere), 69 when the stream is cut first.

    Examples:

        compozy session prompt sess_0123456789abcdef "Explain the stop path."
        compozy session prompt sess_0123456789abcdef "then run the tests" --queue
        compozy session prompt sess_0123456789abcdef "use the staging database instead" --steer
        compozy session prompt sess_0123456789abcdef --cancel inq_0123456789abcdef0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    chosen = [name for name, on in (("queue", queue_), ("interrupt", interrupt), ("steer", steer)) if on]
    if len(chosen) + bool(cancel_entry) > 1:
        fail("give at most one of --queue, --interrupt, --steer and --cancel", "invalid_request", fmt, EXIT_USAGE)
    mode = chosen[0] if chosen else None
    client = _client()
    try:
        if cancel_entry:
            if message:
                fail("--cancel takes no message", "invalid_request", fmt, EXIT_USAGE)
            result = client.request("DELETE", _session_path(client, session_id, f"/prompt/queue/{seg(cancel_entry)}"))
            emit(result, fmt, lambda: click.echo(f"canceled queued entry {cancel_entry}"))
            return
        if not message:
            fail("a message is required", "message_required", fmt, EXIT_USAGE)
        base = _session_path(client, session_id)
        if mode == "steer":
            # The steer route itself: after an interrupt it composes the salvaged prompt, and with nothing to steer
            # it says so (409) instead of starting a plain turn.
            result = client.request("POST", base + "/steer", {"text": message})
        else:
            body: dict[str, Any] = {"message": message}
            if mode:
                body["mode"] = mode
            result = client.request("POST", base + "/prompt", body)
        prompt = result["prompt"]
        if prompt["status"] != "accepted" or no_follow:
            position = f" at position {prompt['queue_position']}" if prompt.get("queue_position") else ""
            emit(result, fmt, lambda: click.echo(
                f"{prompt['status']}" + (f": entry {prompt['queue_entry_id']}{position}"
                                         if prompt.get("queue_entry_id") else "")))
            return
        events = follow_turn(client, base, session_id, prompt["turn_id"], fmt)
    except ApiError as exc:
        fail_api(exc, fmt)
    if fmt == "json":
        click.echo(dump(events))
    elif fmt == "human":
        click.echo()
    last = events[-1] if events else {}
    if last.get("type") not in ("done", "error", "session_stopped"):
        # The stream closed before the turn ended (the daemon went away): what was printed may be partial.
        fail("the stream ended before the turn did (is the daemon running? `compozy status`); read the rest "
             f"with `compozy session events {session_id}`", "stream_ended", fmt, EXIT_UNAVAILABLE)
    if last.get("type") == "error" or last.get("type") == "session_stopped":
        # The turn failed: every output format says so in the exit code (scripts read that, not the text).
        # A stored row keeps the failure in `content`; the stream's closing frame for a stopped session has it on top.
        content = last.get("content") or last
        failure = content.get("failure") or {}
        kind = failure.get("kind") or "turn_failed"
        detail = failure.get("summary") or content.get("error") or content.get("stop_detail") or \
            content.get("stop_reason") or "turn failed"
        fail(str(detail), kind, fmt, EXIT_FAILED)
    if last.get("type") == "done" and (last.get("content") or {}).get("prompt_stop_reason") == "cancelled":
        # Stopped or interrupted from elsewhere: what was printed is not the whole reply.
        fail("turn cancelled before it ended (a stop or an interrupt); the reply above is partial",
             "turn_cancelled", fmt, EXIT_FAILED)


@session.command("stop")
@click.argument("session_id")
@output_option
@json_flag
def session_stop(session_id: str, fmt: str, as_json: bool) -> None:
    """Stop a session (cancel, then escalate), then print the stopped record.

    `-o json` prints the session record; a stop from here has stop reason `user_canceled`.

    Examples:

        compozy session stop sess_0123456789abcdef
        compozy session stop sess_0123456789abcdef -o json | jq -r .stop_reason
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        client.request("POST", _session_path(client, session_id, "/stop"))
        s = client.request("GET", f"/api/sessions/{seg(session_id)}")["session"]
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(s, fmt, lambda: _render_session(s))


@session.command("remove")
@click.argument("session_id")
@output_option
@json_flag
def session_remove(session_id: str, fmt: str, as_json: bool) -> None:
    """Delete a session's history for good (stops it first); prints the record as it was.

    Keep a copy first with `compozy session evidence ID` if it may be needed later.

    Examples:

        compozy session remove sess_0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        s = client.request("GET", f"/api/sessions/{seg(session_id)}")["session"]
        client.request("DELETE", _scoped(s))
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(s, fmt, lambda: click.echo(f"removed {session_id}"))


@session.command("events")
@click.argument("session_id")
@click.option("--last", type=click.IntRange(1, 1000), default=None, help="Only the newest N events.")
@click.option("--after", type=click.IntRange(0), default=None,
              help="Only events after this sequence number (the first column).")
@click.option("--type", "types", multiple=True,
              help="Only these event types, e.g. `error`, `system`, `tool_call` (repeatable).")
@click.option("--since", default=None, help="Events from this time on: RFC3339, or a duration back (`5m`, `1h30m`).")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming new events until the session stops.")
@output_option
@json_flag
def session_events(session_id: str, last: int | None, after: int | None, types: tuple[str, ...], since: str | None,
                   follow: bool, fmt: str, as_json: bool) -> None:
    """Read the append-only event store: the best evidence of what happened.

    One line per event: sequence, age, type and what it says. `-o json`/`-o jsonl` print whole rows.
    `--follow` reads raw persisted events over SSE (one JSON row a line under `-o json`), reconnects with
    `Last-Event-ID` after a drop, ends when the session stops, and exits 69 if the daemon stays away
    (about 2 minutes).

    Examples:

        compozy session events sess_0123456789abcdef --since 10m
        compozy session events sess_0123456789abcdef --type error --type system -o jsonl
        compozy session events sess_0123456789abcdef --follow
    """
    from compozy.cli.events_view import event_lines, since_timestamp

    fmt = _fmt(fmt, as_json)
    try:
        since = since_timestamp(since) if since else None
    except ValueError as exc:
        fail(str(exc), "invalid_since", fmt, EXIT_USAGE)
    client = _client()
    try:
        base = _session_path(client, session_id)
        if follow:
            _follow(client, base, after, last, list(types), "jsonl" if fmt == "json" else fmt, since)
            return
        rows = client.request("GET", base + "/events", query={
            "limit": last, "after_sequence": after, "type": list(types) or None, "since": since})["events"]
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(rows, fmt, lambda: click.echo("\n".join(event_lines(rows)) if rows else "no events"))


# Reconnects of `events --follow` in a row before it gives up: about 2 minutes of backoff, so a daemon restart
# (boot, migrations, a busy machine) fits.
FOLLOW_RETRIES = 65


def _follow(client: Client, base: str, after: int | None, last: int | None, types: list[str], fmt: str,
            since: str | None = None) -> None:
    cursor = after
    retries = 0
    query: dict[str, Any] = {"frames": "raw", "type": types or None, "since": since}
    if cursor is None and last:
        query["limit"] = last
    while True:
        try:
            for event_id, event, data in client.stream(base + "/stream", query, last_event_id=cursor):
                retries = 0
                row = json.loads(data)
                if event == "error" and "sequence" not in row:  # the stream's own error, not a stored `error` row
                    fail_stream(row, fmt)
                if event_id:
                    cursor = int(event_id)
                    query.pop("limit", None)
                _print_event(row, fmt) if "sequence" in row else click.echo(
                    json.dumps(row, sort_keys=True) if fmt != "human" else f"session stopped: {row.get('stop_reason')}")
                if event == "session_stopped":
                    return
            # The stream closed without the session stopping (a daemon restart): reconnect after the cursor.
            if retries >= FOLLOW_RETRIES:
                fail("the stream keeps closing; is the daemon running? (`compozy status`)", "stream_ended", fmt,
                     EXIT_UNAVAILABLE)
        except ApiError as exc:
            if exc.status != 0 or retries >= FOLLOW_RETRIES:
                raise
        except (OSError, http.client.HTTPException):
            if retries >= FOLLOW_RETRIES:
                fail("lost the daemon and could not reconnect (`compozy status`)", "stream_ended", fmt,
                     EXIT_UNAVAILABLE)
        retries += 1
        time.sleep(min(0.2 * retries, 2.0))


@session.command("history")
@click.argument("session_id")
@click.option("--last", type=click.IntRange(1, 1000), default=None, help="Only the newest N turns (default 200).")
@click.option("--after", type=click.IntRange(0), default=None,
              help="Only what happened after this sequence number (see `session events`).")
@output_option
@json_flag
def session_history(session_id: str, last: int | None, after: int | None, fmt: str, as_json: bool) -> None:
    """The user-visible turn sequence: per turn, in time order, the user's message, the agent's reply as one
    message with its thoughts, each tool call as one line with its status, and the markers where they happened.

    `session events` keeps the rows. `-o json` prints the same structure, oldest turn first:
    `[{"turn_id", "started_at", "start_sequence", "sequence", "event_count", "messages": [...]}]`, each message
    a UI message (`role`, `parts`: `text`, `reasoning`, `dynamic-tool`, `data-compozy-event`) as the transcript
    stream assembles it. A turn too long to read whole (over 1,000 events) keeps its first event and its newest
    ones (`truncated`, `omitted_events`).

    Examples:

        compozy session history sess_0123456789abcdef --last 3
        compozy session history sess_0123456789abcdef -o json | jq -r '.[-1].turn_id'
    """
    from compozy.cli.events_view import history_lines

    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        turns = client.request("GET", _session_path(client, session_id, "/history"),
                               query={"limit": last, "after_sequence": after})["history"]
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(turns, fmt, lambda: click.echo("\n".join(history_lines(turns, session_id)) if turns else "no turns yet"))
