"""The `compozy session` commands for turns and what waits on them: prompt (with its busy-input modes), interrupt,
the queue, permissions and their decisions; and `follow_turn`, the live view of one turn that `session prompt` and
`session resume` print."""

from __future__ import annotations

import http.client
import json
import shlex
import sys
from typing import Any, NoReturn

import rich_click as click

from compozy.cli.app import (
    _client,
    _fmt,
    _session_path,
    json_flag,
    output_option,
    seg,
    session,
    session_call,
)
from compozy.cli.client import ApiError, Client
from compozy.cli.output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    dump,
    emit,
    fail,
    fail_api,
    fail_stream,
    json_line,
    printable,
    table,
)

TURN_END = ("done", "error", "session_stopped")

TURN_END = ("done", "error", "session_stopped")


def follow_turn(client: Client, base: str, session_id: str, turn_id: str, fmt: str) -> list[dict[str, Any]]:
    """Stream one turn's raw events until it ends and return them; the last is a `TURN_END` row unless the
    stream was cut (the caller says so). `jsonl` prints each row, `human` the reply as it comes and a line for
    each permission request, `json` nothing (the caller prints the list).

    Ctrl-C ends only this view: the turn goes on in the daemon, so the exit says where to follow or stop it.
    """
    rows: list[dict[str, Any]] = []
    mid_line = False  # the reply streams without newlines; a line of ours must not start inside it
    tools: dict[str, str] = {}  # tool call id -> what it is called, for the line its result prints
    try:
        for _, event, data in client.stream(base + "/stream", {"frames": "raw", "turn_id": turn_id}):
            row: dict[str, Any] = json.loads(data)
            if event == "error" and "sequence" not in row:
                fail_stream(row, fmt)
            rows.append(row)
            if fmt == "jsonl":
                click.echo(json_line(row))
            elif fmt == "human":
                mid_line = _echo_tool(row, tools, mid_line)
                mid_line = _echo_live(row, session_id, mid_line)
            if row.get("type") in TURN_END:
                break
    except (OSError, http.client.HTTPException):
        pass  # cut mid-stream: no terminal row
    except KeyboardInterrupt:
        _interrupted(session_id, fmt)
    return rows


def _echo_tool(row: dict[str, Any], tools: dict[str, str], mid_line: bool) -> bool:
    """A tool call as one line once it settles (`tool Read README.md: completed`): the reply alone hid the work.
    Its name comes from its `tool_call` row (kind and title), its status from its result."""
    content = row.get("content") or {}
    call_id = str(content.get("tool_call_id") or "")
    if row.get("type") == "tool_call":
        name = " ".join(str(p) for p in (content.get("title") or content.get("tool_name"),) if p)
        tools[call_id] = name or str(content.get("tool_kind") or "tool")
        return mid_line
    if row.get("type") != "tool_result":
        return mid_line
    name = tools.get(call_id) or str(content.get("tool_name") or call_id or "tool")
    status = content.get("status") or ("failed" if content.get("tool_error") else "completed")
    line = " ".join(printable(f"tool {name}: {status}").split())
    click.echo(("\n" if mid_line else "") + line[:200])
    return False


def _echo_live(row: dict[str, Any], session_id: str, mid_line: bool) -> bool:
    """Print one streamed row for a person; whether the terminal is now mid-line.

    Agent text is stored as the agent sent it: control characters (ESC, BEL) are replaced so it cannot drive
    the terminal; newlines and tabs stay. A permission request waiting for a person would otherwise look like a
    hung turn: one line says how to answer it."""
    content = row.get("content") or {}
    if row.get("type") == "agent_message":
        text = printable(str(content.get("text") or "").replace("\r\n", "\n"))
        click.echo(text, nl=False)
        return mid_line if not text else not text.endswith("\n")
    if row.get("type") == "permission" and content.get("decision") == "pending":
        what = " ".join(printable(str(content.get("title") or content.get("resource") or "")).split())
        request = shlex.quote(printable(str(content.get("request_id"))))  # agent-chosen: safe to paste
        click.echo(("\n" if mid_line else "") + "waiting for approval" + (f" ({what})" if what else "")
                   + f": compozy session approve {session_id} {request}")
        return False
    return mid_line


def _interrupted(session_id: str, fmt: str) -> NoReturn:
    message = (f"the turn goes on in session {session_id}; follow it with `compozy session events {session_id} "
               f"--follow`, or stop it with `compozy session interrupt {session_id}`")
    if fmt != "human":
        fail(message, "interrupted", fmt, EXIT_INTERRUPTED)
    click.echo(f"\ninterrupted: {message}", err=True)
    sys.exit(EXIT_INTERRUPTED)


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
    _exit_for_turn_end(events, session_id, fmt)


def _exit_for_turn_end(events: list[dict[str, Any]], session_id: str, fmt: str) -> None:
    """The followed turn's last event decides the exit: 69 when the stream ended first, 70 when the turn failed or
    was cancelled, 0 when it was done."""
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


@session.command("interrupt")
@click.argument("session_id")
@click.option("--expected-turn-id", default=None, help="Only interrupt if this turn is still the running one.")
@output_option
@json_flag
def session_interrupt(session_id: str, expected_turn_id: str | None, fmt: str, as_json: bool) -> None:
    """Cancel the running turn without a replacement; its text is kept for one `--steer` correction, the next
    input (a turn that starts first ends it).

    Queued prompts are dropped with it (their count is printed). With `--expected-turn-id`, a turn that
    already ended is left alone, so a script cannot cancel the next one by mistake.

    Examples:

        compozy session interrupt sess_0123456789abcdef
        compozy session interrupt sess_0123456789abcdef --expected-turn-id turn_0123456789abcdef -o json
        compozy session prompt sess_0123456789abcdef --steer "use the v2 API instead"
    """
    fmt = _fmt(fmt, as_json)
    body = {"expected_turn_id": expected_turn_id} if expected_turn_id else {}
    result = session_call(fmt, session_id, "POST", "/interrupt", body)
    p = result["prompt"]

    def human() -> None:
        dropped = len(p.get("canceled_queued_entries") or [])
        what = f"interrupted {p['previous_turn_id']}" if p.get("interrupted") else "no turn was running"
        click.echo(f"{what}; generation {p.get('queue_generation')}, {dropped} queued entr"
                   f"{'y' if dropped == 1 else 'ies'} dropped")

    emit(result, fmt, human)


@session.command("mode")
@click.argument("session_id")
@click.argument("mode")
@output_option
@json_flag
def session_mode(session_id: str, mode: str, fmt: str, as_json: bool) -> None:
    """Switch the agent's mode (`session status` lists the ones it offers under `mode.available`).

    Through ACP `session/set_mode`, or the agent's mode config option. A mode the agent does not offer exits 65
    (`invalid_mode`); an agent without modes exits 65 too (`modes_unsupported`).

    Examples:

        compozy session mode sess_0123456789abcdef plan
        compozy session mode sess_0123456789abcdef default -o json
    """
    fmt = _fmt(fmt, as_json)
    result = session_call(fmt, session_id, "POST", "/mode", {"mode": mode})
    current = ((result["session"].get("mode") or {}).get("current")) or mode
    emit(result, fmt, lambda: click.echo(f"mode {current}"))


@session.command("queue")
@click.argument("session_id")
@output_option
@json_flag
def session_queue(session_id: str, fmt: str, as_json: bool) -> None:
    """Pending input: queued prompts and staged steers, in dispatch order, with their entry ids.

    Each entry runs when the turn before it ends; `session prompt ID --cancel ENTRY_ID` drops one, and an
    interrupt drops them all (the generation number counts those resets).

    Examples:

        compozy session queue sess_0123456789abcdef
        compozy session queue sess_0123456789abcdef -o jsonl | jq -r .queue_entry_id
        compozy session prompt sess_0123456789abcdef --cancel inq_0123456789abcdef0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/prompt/queue")
    emit(data, fmt, lambda: table(f"Queue (generation {data['queue_generation']})",
                                  ["#", "Entry", "Mode", "Status", "Text"],
                                  [(e["queue_position"], e["queue_entry_id"], e["mode"], e["status"], e["text"][:80])
                                   for e in data["queue"]]), rows=data["queue"])


@session.command("permissions")
@click.argument("session_id")
@output_option
@json_flag
def session_permissions(session_id: str, fmt: str, as_json: bool) -> None:
    """Permission requests waiting for a person (the `approve-reads` policy leaves non-reads to you).

    The turn waits on each one; answer with `session approve` or `session deny`. A stop or an interrupt
    cancels those still open.

    Examples:

        compozy session permissions sess_0123456789abcdef
        compozy session permissions sess_0123456789abcdef -o jsonl | jq -r .request_id
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/permissions")
    emit(data, fmt, lambda: table("Pending permissions", ["Request", "Kind", "Title", "Since"],
                                  [(p["request_id"], p.get("kind"), p.get("title"), p["created_at"])
                                   for p in data["permissions"]]), rows=data["permissions"])


def _decide(session_id: str, request_id: str, decision: str, fmt: str) -> None:
    data = session_call(fmt, session_id, "POST", f"/permissions/{seg(request_id)}", {"decision": decision})
    emit(data, fmt, lambda: click.echo(f"{data['permission']['decision']} {request_id}"))


@session.command("approve")
@click.argument("session_id")
@click.argument("request_id")
@output_option
@json_flag
def session_approve(session_id: str, request_id: str, fmt: str, as_json: bool) -> None:
    """Approve a pending permission request (ids from `session permissions ID`).

    The agent's tool call goes ahead with the allow option it offered (allow-once before allow-always).
    A request already decided, or cancelled with its turn, answers `permission_not_found` (exit 69).

    Examples:

        compozy session approve sess_0123456789abcdef call_0001
        compozy session permissions "$SID" -o jsonl | jq -r .request_id | xargs -n1 compozy session approve "$SID"
    """
    _decide(session_id, request_id, "approve", _fmt(fmt, as_json))


@session.command("deny")
@click.argument("session_id")
@click.argument("request_id")
@output_option
@json_flag
def session_deny(session_id: str, request_id: str, fmt: str, as_json: bool) -> None:
    """Deny a pending permission request; the agent's tool call fails with "permission denied".

    The turn goes on: the agent decides what to do without the tool. A request already decided, or
    cancelled with its turn, answers `permission_not_found` (exit 69).

    Examples:

        compozy session deny sess_0123456789abcdef call_0001
        compozy session deny sess_0123456789abcdef call_0001 -o json
    """
    _decide(session_id, request_id, "deny", _fmt(fmt, as_json))
