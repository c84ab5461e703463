"""Commands that act on a live session: interrupt, steer, the queue, permissions, resume (attach), and
`follow_turn`, the live view of one turn that `session prompt` and `session resume` print."""

from __future__ import annotations

import http.client
import json
import os
import shlex
import sys
from typing import Any, NoReturn

import rich_click as click

from compozy.cli.app import (
    _client,
    _fmt,
    _scoped,
    cli,
    json_flag,
    output_option,
    seg,
    session,
    session_call,
)
from compozy.cli.client import ApiError, Client
from compozy.cli.output import (
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    emit,
    fail,
    fail_api,
    fail_stream,
    json_line,
    kv,
    printable,
    table,
)

TURN_END = ("done", "error", "session_stopped")


def follow_turn(client: Client, base: str, session_id: str, turn_id: str, fmt: str) -> list[dict[str, Any]]:
    """Stream one turn's raw events until it ends and return them; the last is a `TURN_END` row unless the
    stream was cut (the caller says so). `jsonl` prints each row, `human` the reply as it comes and a line for
    each permission request, `json` nothing (the caller prints the list).

    Ctrl-C ends only this view: the turn goes on in the daemon, so the exit says where to follow or stop it.
    """
    rows: list[dict[str, Any]] = []
    mid_line = False  # the reply streams without newlines; a line of ours must not start inside it
    try:
        for _, event, data in client.stream(base + "/stream", {"frames": "raw", "turn_id": turn_id}):
            row: dict[str, Any] = json.loads(data)
            if event == "error" and "sequence" not in row:
                fail_stream(row, fmt)
            rows.append(row)
            if fmt == "jsonl":
                click.echo(json_line(row))
            elif fmt == "human":
                mid_line = _echo_live(row, session_id, mid_line)
            if row.get("type") in TURN_END:
                break
    except (OSError, http.client.HTTPException):
        pass  # cut mid-stream: no terminal row
    except KeyboardInterrupt:
        _interrupted(session_id, fmt)
    return rows


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


@session.command("resume")
@click.argument("session_id", required=False)
@click.option("--latest", is_flag=True, help="The resumable session with the newest activity.")
@click.option("--workspace", default=None, help="With --latest: only this workspace.")
@click.option("--ttl", "ttl_seconds", type=click.IntRange(1, 86400), default=900, show_default=True,
              help="Holder lease in seconds.")
@click.option("--holder", default=None, metavar="NAME",
              help="Who holds the lease (default `cli:<pid>`); a script names itself so it can detach later.")
@output_option
@json_flag
def session_resume(session_id: str | None, latest: bool, workspace: str | None, ttl_seconds: int,
                   holder: str | None, fmt: str, as_json: bool) -> None:
    """Attach to a session in this terminal: live transcript plus a prompt line, under a holder lease.

    A stopped session is reactivated first under the same id. Without a terminal (or with `-o json`)
    it takes the lease, prints it and exits; `session detach ID --holder NAME` releases it (a stop ends
    it too). Refusals say why; read `session recap|history` and `session repair --dry-run` before
    starting new work.

    Examples:

        compozy session resume sess_0123456789abcdef
        compozy session resume --latest --workspace "$PWD"
        compozy session resume sess_0123456789abcdef --holder ci-job-42 -o json
    """
    fmt = _fmt(fmt, as_json)
    if bool(session_id) == bool(latest):
        fail("give a session id or --latest (not both)", "session_resume_ambiguous", fmt, EXIT_USAGE)
    client = _client()
    holder = holder or f"cli:{os.getpid()}"
    try:
        if latest:
            listing = client.request("GET", "/api/sessions", query={"resumable": "true", "workspace": workspace,
                                                                    "limit": 100})["sessions"]
            if not listing:
                fail("no resumable session", "no_resumable_session", fmt, EXIT_UNAVAILABLE)
            session_id = max(listing, key=lambda s: s.get("last_activity_at") or s["updated_at"])["id"]
        assert session_id
        current = client.request("GET", f"/api/sessions/{seg(session_id)}")["session"]
        base = _scoped(current)  # one lookup: the workspace route of a session never changes
        if current["state"] == "stopped":
            client.request("POST", base + "/reactivate")
        result = client.request("POST", base + "/attach", {"attached_to": holder, "ttl_seconds": ttl_seconds})
    except ApiError as exc:
        fail_api(exc, fmt)
    if fmt != "human" or not sys.stdin.isatty():
        emit(result, fmt, lambda: kv(f"Attached to {session_id}", sorted(result["attach"].items())))
        return
    _interactive(client, session_id, base, holder)


@session.command("detach")
@click.argument("session_id")
@click.option("--holder", required=True, metavar="NAME",
              help="The holder to release, as `session resume` printed it (`attach.attached_to`).")
@output_option
@json_flag
def session_detach(session_id: str, holder: str, fmt: str, as_json: bool) -> None:
    """Release a holder lease taken by `session resume` (a no-op when NAME does not hold it).

    The session keeps running; only the holder's claim ends. An interactive `session resume` releases
    its own lease when you press Ctrl-D.

    Examples:

        compozy session detach sess_0123456789abcdef --holder ci-job-42
        compozy session resume sess_0123456789abcdef --holder ci-job-42 -o json   # the lease to release later
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "DELETE", "/attach", query={"attached_to": holder})
    emit(data, fmt, lambda: click.echo(f"detached {holder} from {session_id}"))


def _interactive(client: Client, session_id: str, base: str, holder: str) -> None:
    click.echo(f"attached to {session_id}; type a prompt, Ctrl-D to detach")
    try:
        while True:
            try:
                line = input("> ").strip()
            except EOFError:
                break
            if not line:
                continue
            try:
                result = client.request("POST", base + "/prompt", {"message": line})["prompt"]
            except ApiError as exc:
                click.echo(f"error: {exc.message} ({exc.code})", err=True)
                continue
            if result["status"] != "accepted":
                click.echo(f"{result['status']}: {result.get('queue_entry_id', '')}")
                continue
            follow_turn(client, base, session_id, result["turn_id"], "human")
            click.echo()
    finally:
        try:
            client.request("DELETE", base + "/attach", query={"attached_to": holder})
        except ApiError:
            pass


@session.command("rename")
@click.argument("session_id")
@click.argument("name")
@output_option
@json_flag
def session_rename(session_id: str, name: str, fmt: str, as_json: bool) -> None:
    """Name a session; an explicit name always wins over the auto-title.

    The name shows in `session list`, the dashboard and `session recap`; the session id never changes.

    Examples:

        compozy session rename sess_0123456789abcdef "fix flaky login test"
        compozy session rename sess_0123456789abcdef "nightly triage" -o json
    """
    fmt = _fmt(fmt, as_json)
    s = session_call(fmt, session_id, "PATCH", "", {"name": name})["session"]
    emit(s, fmt, lambda: click.echo(f"renamed {session_id} to {s['name']!r}"))


@session.command("spawn")
@click.argument("parent_id")
@click.option("--role", required=True, help="What the child is for (recorded in its lineage).")
@click.option("--ttl", "ttl_seconds", type=click.IntRange(1, 7 * 24 * 3600), required=True,
              help="Seconds until the child is reaped.")
@click.option("--agent", default=None, help="Agent (default: the parent's).")
@click.option("--prompt", default=None, help="First prompt for the child.")
@click.option("--permissions", type=click.Choice(["deny-all", "approve-reads", "approve-all"]), default=None,
              help="Never wider than the parent's.")
@output_option
@json_flag
def session_spawn(parent_id: str, role: str, ttl_seconds: int, agent: str | None, prompt: str | None,
                  permissions: str | None, fmt: str, as_json: bool) -> None:
    """Spawn a child session (type `spawned`) that is reaped when its TTL expires or its parent stops.

    The parent must be running; the child shares its workspace, and `session status CHILD -o json` shows
    its `lineage` (parent, role, TTL).

    Examples:

        compozy session spawn sess_0123456789abcdef --role reviewer --ttl 3600 --prompt "review the diff"
        compozy session spawn sess_0123456789abcdef --role scout --ttl 600 --permissions deny-all -o json
    """
    fmt = _fmt(fmt, as_json)
    body: dict[str, Any] = {"role": role, "ttl_seconds": ttl_seconds}
    for key, value in (("agent_name", agent), ("prompt", prompt), ("permissions", permissions)):
        if value is not None:
            body[key] = value
    s = session_call(fmt, parent_id, "POST", "/children", body)["session"]
    emit(s, fmt, lambda: kv(f"Spawned {s['id']}", [("parent", parent_id), ("role", role),
                                                   ("permissions", s.get("effective_permissions")),
                                                   ("ttl expires", (s.get("lineage") or {}).get("ttl_expires_at"))]))


@cli.group()
def hooks() -> None:
    """Lifecycle hook audit (`[[hooks.declarations]]` in config.toml)."""


@hooks.command("runs")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--event", default=None, help="Only runs for this hook event.")
@click.option("--last", type=click.IntRange(1, 1000), default=None, help="Only the newest N runs.")
@output_option
@json_flag
def hooks_runs(session_id: str, event: str | None, last: int | None, fmt: str, as_json: bool) -> None:
    """Every hook run of a session (from its events.db), oldest first.

    One row per run: the hook, the event that fired it, sync or async, its outcome and how long it took.

    Examples:

        compozy hooks runs --session sess_0123456789abcdef
        compozy hooks runs --session sess_0123456789abcdef --event session.post_stop --last 5 -o json
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        ws = client.request("GET", f"/api/sessions/{seg(session_id)}")["session"]["workspace_id"]
        runs = client.request("GET", f"/api/workspaces/{ws}/hooks/runs",
                              query={"session": session_id, "event": event, "last": last})["runs"]
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(runs, fmt, lambda: table("Hook runs", ["When", "Hook", "Event", "Mode", "Outcome", "ms", "Error"], [
        (r["recorded_at"], r["hook_name"], r["event"], r["mode"], r["outcome"], r["duration_ms"], r.get("error"))
        for r in runs]))
