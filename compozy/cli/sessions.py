"""The `compozy session` commands for a session's life: new, status, list, stop, remove, rename, spawn, resume
(attach) and detach. Thin: one or two API calls each over the daemon socket."""

from __future__ import annotations

import os
import sys
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
    session_call,
)
from compozy.cli.client import ApiError, Client
from compozy.cli.events_view import status_text
from compozy.cli.output import (
    EXIT_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    emit,
    fail,
    fail_api,
    json_line,
    kv,
)
from compozy.cli.turns import follow_turn


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


def _worktree_rows(s: dict[str, Any]) -> list[tuple[str, Any]]:
    """A worktree session's branch, folder and changed-files count (docs/reference/worktrees.md)."""
    tree = s.get("worktree") or {}
    if not tree:
        return []
    forked = s.get("forked_from") or {}
    return [("worktree", tree.get("path")), ("branch", tree.get("branch")),
            ("changed files", tree.get("changed_files")),
            ("forked from", f"{forked['session_id']} at checkpoint {forked['checkpoint']}" if forked else None)]


def _render_session(s: dict[str, Any]) -> None:
    failure = s.get("failure") or {}
    kv(f"Session {s['id']}", [
        ("name", s.get("name")), ("state", status_text(s)), ("badge", s.get("badge")), ("agent", s["agent_name"]),
        ("provider", s.get("provider")), *_model_rows(s), ("workspace", s["workspace_id"]),
        ("cwd", s.get("cwd")), *_worktree_rows(s), ("prompt", s.get("prompt_state")),
        ("stop reason", s.get("stop_reason")),
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
@click.option("--isolation", default=None, type=click.Choice(["none", "worktree"]),
              help="`worktree`: the agent works in a git worktree of its own (branch `compozy/<id>`), with a "
              "checkpoint per turn; the workspace must be a git repository (default: the agent's `isolation`, "
              "else `none`).")
@click.option("--no-wait", is_flag=True, help="Return the `starting` record at once.")
@output_option
@json_flag
def session_new(agent: str | None, cwd: str | None, workspace: str | None, name: str | None, provider: str | None,
                model: str | None, reasoning_effort: str | None, speed: str | None, prompt: str | None,
                isolation: str | None, no_wait: bool, fmt: str, as_json: bool) -> None:
    """Create a session and wait until it is `active` (or failed to start).

    With neither `--cwd` nor `--workspace`, `$COMPOZY_WORKSPACE` is used, else the current directory. Start
    progress (an npx install) goes to stderr; stdout gets the session record (`-o json`: the record itself, so
    `jq -r .id` reads its id). Exits 70 when the session fails to start, or when the agent refuses the `--prompt`
    turn at once for want of a login (the error names the key to set or the login to run).

    Examples:

        compozy session new --cwd "$PWD" --prompt "Run the tests and fix what fails."
        compozy session new --workspace ws_0123456789abcdef --provider demo --model demo-large
        compozy session new --agent general --name review --no-wait -o json | jq -r .id
        compozy session new --cwd "$PWD" --isolation worktree --prompt "Refactor the parser."
    """
    fmt = _fmt(fmt, as_json)
    if cwd and workspace:
        fail("--cwd and --workspace are mutually exclusive", "workspace_conflict", fmt, EXIT_USAGE)
    body: dict[str, Any] = {k: v for k, v in {
        "agent_name": agent, "name": name, "provider": provider, "model": model,
        "reasoning_effort": reasoning_effort, "speed": speed, "prompt": prompt,
        "isolation": isolation}.items() if v is not None}
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
    if prompt and not no_wait and s["state"] == "active":
        s = _first_turn_refused(client, s, fmt)
    emit(s, fmt, lambda: _render_session(s))


# How long `session new --prompt` watches its first turn for an agent that refuses it at once for want of a login
# (claude without a key answers in well under a second): the turn's first output, or its end, ends the watch sooner.
FIRST_TURN_WATCH_SECONDS = 10.0


def _first_turn_refused(client: Client, s: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The record once the first turn has spoken, ended, or the watch passed; exit 70 when the agent refused that
    turn for want of a login (it exited 0, and a script went on with a session that could do nothing)."""
    deadline, seen_turn = time.monotonic() + FIRST_TURN_WATCH_SECONDS, False
    try:
        while time.monotonic() < deadline:
            failure = s.get("failure") or {}
            if failure.get("kind") == "provider_auth_failure":
                fail(f'session "{s["id"]}": its first prompt failed: {failure.get("summary")}',
                     "provider_auth_failure", fmt, EXIT_FAILED,
                     {"error": f"first prompt failed: {failure.get('summary')}", "code": "provider_auth_failure",
                      "session": s})
            activity = s.get("activity") or {}
            # Idle before the staged prompt was dispatched is not its end.
            seen_turn = seen_turn or s.get("prompt_state") == "prompting" or bool(activity.get("turn_id"))
            spoke = activity.get("last_activity_kind") not in (None, "prompt_started")
            if s["state"] != "active" or spoke or (seen_turn and s.get("prompt_state") == "idle"):
                return s
            time.sleep(0.1)
            s = client.request("GET", f"/api/sessions/{s['id']}")["session"]
    except ApiError as exc:
        fail_api(exc, fmt)
    return s


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
        health = data["health"]
        if s["state"] == "stopped":
            # `dead`/`session_unhealthy` are for the wake service (JSON keeps them): a stopped session has no
            # agent process, which is no alarm; its outcome is in the state line above.
            health = {**health, "health": "no agent process (stopped)", "ineligibility_reason": "stopped"}
        kv("Health", health_pairs(health))

    emit(data, fmt, human)


@session.command("list")
@click.option("--all", "all_states", is_flag=True, help="Every state, not only active sessions.")
@click.option("--state", type=click.Choice(["starting", "active", "stopping", "stopped"]),
              help="Only sessions in this state (replaces the active-only default).")
@click.option("--resumable", is_flag=True, help="Only sessions `session resume` takes now: live ones no one else "
              "holds, and stopped ones it reactivates first (not daemon-managed ones, nor those whose workspace, agent "
              "or provider is gone).")
@click.option("--workspace", default=None, help="Only this workspace (id, name or absolute path).")
@click.option("--agent", default=None, help="Only sessions of this agent name.")
@click.option("--type", "session_type", type=click.Choice(["user", "dream", "system", "coordinator", "spawned"]),
              default=None, help="Only sessions of this type; `dream` sessions are listed only when asked for.")
@click.option("--query", default=None, help="Only sessions whose name or id contains this text.")
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True,
              help="Sessions per page (1-100).")
@click.option("--cursor", default=None, help="`page.next_cursor` from the previous page.")
@click.option("--wide", is_flag=True, help="More columns (badge, provider, stop reason, failure, workspace, created).")
@click.option("--include-health", is_flag=True, help="Attach each session's health DTO (`.health` in JSON).")
@output_option
@json_flag
def session_list(all_states: bool, state: str | None, resumable: bool, workspace: str | None, agent: str | None,
                 session_type: str | None,
                 query: str | None, limit: int, cursor: str | None, wide: bool, include_health: bool, fmt: str,
                 as_json: bool) -> None:
    """List sessions (active ones by default), most recently updated first.

    `-o json` prints one page, `{sessions: [...], page: {total, has_more, next_cursor}}`; `-o jsonl` every
    matching session, one a line, following the pages (`--limit` sets their size).

    Examples:

        compozy session list --all --wide
        compozy session list --state stopped --workspace "$PWD" --limit 20
        compozy session list --resumable -o jsonl | jq -r .id
        compozy session list --all --type dream
    """
    from compozy.cli.events_view import session_rows

    fmt = _fmt(fmt, as_json)
    client = _client()
    filters = {"all": "true" if all_states else None, "state": state, "resumable": "true" if resumable else None,
               "workspace": workspace, "agent": agent, "type": session_type, "q": query, "limit": limit,
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
@click.option("--force", is_flag=True, help="A worktree session with uncommitted or unmerged work: remove it anyway; "
              "its state is kept as the ref refs/compozy/<id>/final until `compozy worktree prune`.")
@output_option
@json_flag
def session_remove(session_id: str, force: bool, fmt: str, as_json: bool) -> None:
    """Delete a session's history for good (stops it first); prints the record as it was.

    Keep a copy first with `compozy session evidence ID` if it may be needed later. A worktree session whose
    worktree holds uncommitted or unmerged work is refused (`worktree_has_work`): commit and merge it first, or
    pass `--force`.

    Examples:

        compozy session remove sess_0123456789abcdef
        compozy session remove sess_0123456789abcdef --force
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        s = client.request("GET", f"/api/sessions/{seg(session_id)}")["session"]
        client.request("DELETE", _scoped(s), query={"force": "true"} if force else None)
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(s, fmt, lambda: click.echo(f"removed {session_id}"))


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


@session.command("resume")
@click.argument("session_id", required=False)
@click.option("--latest", is_flag=True, help="The resumable session with the newest activity.")
@click.option("--workspace", default=None, help="With --latest: only this workspace.")
@click.option("--ttl", "ttl_seconds", type=click.IntRange(1, 86400), default=900, show_default=True,
              help="Holder lease in seconds.")
@click.option("--holder", default=None, metavar="NAME",
              help="Who holds the lease (default `cli:<host>:<pid>:<start>`, this process: when it is gone, so is "
              "the lease); a script names itself so it can detach later.")
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
    holder = holder or _own_holder()
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


def _own_holder() -> str:
    """This process as the lease's holder (sessions/core/attach_holders.py): the daemon frees the lease of a
    holder of this shape whose process is gone, so a closed terminal locks no one out."""
    from compozy_base import process
    from sessions.core.attach_holders import cli_holder

    return cli_holder(os.getpid(), process.start_ticks(os.getpid()))


def _hang_up(signum: int, frame: object) -> None:
    """The terminal closed (SIGHUP) or the process is told to end: leave through `finally`, which detaches."""
    raise SystemExit(128 + signum)


def _interactive(client: Client, session_id: str, base: str, holder: str) -> None:
    import signal

    click.echo(f"attached to {session_id}; type a prompt, Ctrl-D to detach")
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, _hang_up)
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
