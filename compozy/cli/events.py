"""`compozy session events` and `session history`: the stored record of a session, paged or followed."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import rich_click as click

from compozy.cli.app import (
    _client,
    _fmt,
    _session_path,
    json_flag,
    output_option,
    session,
)
from compozy.cli.client import ApiError, Client
from compozy.cli.output import (
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    emit,
    fail,
    fail_api,
    fail_stream,
    json_line,
)
from compozy_base import strict_json


def _print_event(row: dict[str, Any], fmt: str) -> None:
    if fmt in ("json", "jsonl"):
        click.echo(json_line(row))
        return
    from compozy.cli.events_view import clock, event_line, terminal_width

    click.echo(event_line(row, terminal_width(), clock(row.get("timestamp"))))


@session.command("events")
@click.argument("session_id")
@click.option("--last", type=click.IntRange(1, 1000), default=None,
              help="The newest N events (default 200; without it only the newest 200 are shown).")
@click.option("--after", type=click.IntRange(0), default=None,
              help="Only events after this sequence number (the first column).")
@click.option("--type", "types", multiple=True,
              help="Only these event types, e.g. `error`, `system`, `tool_call` (repeatable).")
@click.option("--since", default=None, help="Events from this time on: RFC3339, or a duration back (`5m`, `1h30m`).")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming new events until the session stops.")
@click.option("--raw", is_flag=True, help="One line per stored event: a reply's chunks each on its own line.")
@output_option
@json_flag
def session_events(session_id: str, last: int | None, after: int | None, types: tuple[str, ...], since: str | None,
                   follow: bool, raw: bool, fmt: str, as_json: bool) -> None:
    """Read the append-only event store: the best evidence of what happened.

    One page: the newest 200 events (`--last N`: the newest N, up to 1000), or with `--after SEQ` the first
    200 after it, oldest first either way. A page that leaves events out says so, and how to see them.
    One line per event: sequence, age, type and what it says; the chunks of one reply (or of its thoughts) are
    merged into one line at the first one's sequence (`--raw`: a line each). `-o json` prints `{"events": [...], "page":
    {"limit", "order", "has_more", "first_sequence", "last_sequence", "next_after"}}`, `-o jsonl` the page's rows.
    `--follow` reads raw persisted events over SSE (one JSON row a line under `-o json`), reconnects with
    `Last-Event-ID` after a drop, ends when the session stops, and exits 69 if the daemon stays away
    (about 2 minutes).

    Examples:

        compozy session events sess_0123456789abcdef --since 10m
        compozy session events sess_0123456789abcdef --type error --type system -o jsonl
        compozy session events sess_0123456789abcdef --follow
    """
    from compozy.cli.events_view import event_lines, merge_chunks, since_timestamp

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
        data = client.request("GET", base + "/events", query={
            "limit": last, "after_sequence": after, "type": list(types) or None, "since": since})
    except ApiError as exc:
        fail_api(exc, fmt)
    rows = data["events"]
    page = data.get("page") or {}

    def human() -> None:
        click.echo("\n".join(event_lines(rows if raw else merge_chunks(rows))) if rows else "no events")
        note = page_note(session_id, page)
        if note:
            click.echo(note)

    emit({"events": rows, "page": page}, fmt, human, rows=rows)


def page_note(session_id: str, page: dict[str, Any]) -> str:
    """The line under a page of events that left some out: which ones, and the command that shows them."""
    if not page.get("has_more"):
        return ""
    if page.get("order") == "after":
        return (f"first {page['limit']} events after the cursor shown; more follow: "
                f"compozy session events {session_id} --after {page.get('next_after')}")
    return (f"newest {page['limit']} events shown (from sequence {page.get('first_sequence')}); older ones: "
            f"compozy session events {session_id} --after 0 (oldest first), or --last up to 1000")


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
                    strict_json.dumps(row, sort_keys=True) if fmt != "human"
                    else f"session stopped: {row.get('stop_reason')}")
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
