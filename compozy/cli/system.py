"""The daemon itself from the CLI: `status`, `doctor`, `dashboard` and `daemon start|stop|status`."""

from __future__ import annotations

import os
import sys
from typing import Any

import rich_click as click

from compozy.cli.app import (
    _client,
    _fmt,
    api_call,
    cli,
    daemon,
    json_flag,
    output_option,
)
from compozy.cli.client import ApiError
from compozy.cli.output import EXIT_UNAVAILABLE, EXIT_USAGE, emit, fail, fail_api, kv, one_line, table

# ---- status ------------------------------------------------------------------------------------

@cli.command("status")
@output_option
@json_flag
def status_cmd(fmt: str, as_json: bool) -> None:
    """Consolidated runtime status: the daemon, session counts and recent session failures.

    The first step when debugging. Exits 69 when the daemon is unreachable. `-o json` adds what the table
    leaves out, such as `.event_loop.lag` when everything feels slow.

    Examples:

        compozy status
        compozy status -o json | jq '.health.failures.recent'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/status")

    def human() -> None:
        d = data["daemon"]
        kv("Compozy daemon", [("status", d["status"]), ("pid", str(d["pid"])), ("started", d.get("started_at")),
                              ("http", f"http://{d['http_host']}:{d['http_port']}"), ("socket", d["socket"]),
                              ("home", d.get("home")), ("config", d.get("config")),
                              ("sessions", f"{d['active_sessions']} active / {d['total_sessions']} total"),
                              ("tasks", _task_line(data.get("tasks"))),
                              ("slow viewers", _streams_line(data.get("streams"))),
                              ("store writer", _writer_line(data.get("store_writer")))])
        cluster = data.get("cluster") or {}
        services = cluster.get("services") or {}
        if cluster.get("clustered") or len(cluster.get("nodes") or []) > 1:
            table("Cluster nodes", ["Node", "Status", "Address", "Leases"],
                  [(("* " if n["this_node"] else "") + n["id"], n["status"], n["address"], str(n["leases"]))
                   for n in cluster["nodes"]])
            token = cluster.get("cluster_token") or {}
            kv("Services", [*((name, svc.get("status", "")) for name, svc in services.items()),
                            ("cluster token", token.get("reason") or token.get("status", ""))])
        failures = data["health"]["failures"]
        if failures["recent"]:
            _failure_lines(failures["recent"])

    emit(data, fmt, human)


def _writer_line(writer: dict[str, Any] | None) -> str:
    """Where commits run: the daemon's writer thread, or under load its store writer process."""
    if not writer:
        return ""
    if writer.get("broken"):
        return f"thread only: {writer['broken']}"
    line = f"{writer['mode']} ({writer['batches_per_second']:g} batches/s)"
    return line + (f", {writer['restarts']} restart(s)" if writer.get("restarts") else "")


def _failure_lines(recent: list[dict[str, Any]]) -> None:
    """One line per failure, whatever the width (a boxed table folded each into ~13 lines at 80 columns, its crash
    bundle path a column of fragments): the summary gives way; the bundle's path is one command away."""
    from compozy.cli.events_view import fit_table, terminal_width

    click.echo("\nRecent session failures")
    rows = [(f["session_id"], f["failure_kind"], f["state"], f["agent_name"], one_line(f.get("summary") or "", 400))
            for f in recent]
    for line in fit_table(["SESSION", "FAILURE", "STATE", "AGENT", "SUMMARY"], rows, {"AGENT", "SUMMARY"},
                          terminal_width()):
        click.echo(line)
    if any(f.get("crash_bundle_path") for f in recent):
        click.echo("crash bundles: compozy session status ID (or compozy status -o json)")


def _streams_line(streams: dict[str, Any] | None) -> str:
    """Event streams waiting for a client that reads slowly or not at all (their backlog is bounded)."""
    if not streams or not streams.get("waiting_on_client"):
        return "none"
    return f"{streams['waiting_on_client']} waiting ({streams['queued_bytes'] / 1048576:.1f} MiB queued)"


def _task_line(tasks: dict[str, Any] | None) -> str | None:
    if not tasks or not tasks.get("total"):
        return None
    by = tasks.get("by_status") or {}
    return (f"{tasks['needs_attention']} need attention, {by.get('running', 0)} running, {by.get('queued', 0)} "
            f"queued / {tasks['total']} total; {tasks['requeued']} requeued (compozy task list)")


@cli.command("doctor")
@click.option("--only", multiple=True,
              help="Only these check ids or categories, e.g. `security`, `sessions`, `cluster` (repeatable).")
@click.option("--exclude", multiple=True, help="Skip these check ids or categories (repeatable).")
@click.option("--quiet", is_flag=True, help="Omit OK items.")
@output_option
@json_flag
def doctor_cmd(only: tuple[str, ...], exclude: tuple[str, ...], quiet: bool, fmt: str, as_json: bool) -> None:
    """Check the daemon's subsystems (catalog, event storage, socket, job queue, providers) before the agent.

    Exits 1 when any item is an error (or critical), 65 for an unknown check id or category (the message
    lists the known ones). Categories: `daemon`, `persistence`, `sessions`, `agents`, `providers`,
    `security`, `cluster`.

    Examples:

        compozy doctor --quiet
        compozy doctor --only security --only sessions
        compozy doctor -o json | jq -r '.items[] | select(.severity != "ok") | .id'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/doctor", query={"only": list(only) or None,
                                                 "exclude": list(exclude) or None,
                                                 "quiet": "true" if quiet else None})
    emit(data, fmt, lambda: _doctor_lines(data), rows=data["items"])
    if data["status"] == "error":
        sys.exit(1)


DOCTOR_COLOURS = {"ok": "green", "info": "cyan", "warn": "yellow", "error": "red", "critical": "red"}


def _doctor_lines(data: dict[str, Any]) -> None:
    """One line per check (its severity and title), its message wrapped at words beneath it and its command on a
    line of its own: a four-column table wrapped mid-word at 80 columns and kept an empty "Try" column."""
    from compozy.cli.events_view import clip, terminal_width, wrap

    width = terminal_width()
    click.echo(f"compozy doctor: {data['status']}")
    for i in data["items"]:
        severity = i["severity"]
        click.echo(click.style(f"{severity:<8}", fg=DOCTOR_COLOURS.get(severity, "white")) + " "
                   + clip(i["title"], width - 9))
        for line in wrap(i["message"], width, " " * 9):
            click.echo(line)
        if i.get("suggested_command"):
            for line in wrap(f"try: {i['suggested_command']}", width, " " * 9):
                click.echo(line)


@cli.command("dashboard")
@click.option("--no-open", is_flag=True, help="Only print the link; do not open a browser.")
@output_option
@json_flag
def dashboard_cmd(no_open: bool, fmt: str, as_json: bool) -> None:
    """Sign a browser in to the dashboard: prints (and, with a desktop, opens) a one-time login link.

    The link works once, for 2 minutes, and leaves an HttpOnly cookie in that browser. Scripts send the token
    instead: `Authorization: Bearer $(cat ~/.compozy/token)`. `-o json` prints `{url, expires_at, opened}`.

    Examples:

        compozy dashboard
        compozy dashboard --no-open -o json | jq -r .url
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        ticket = client.request("POST", "/api/auth/ticket")
    except ApiError as exc:
        fail_api(exc, fmt)
    url = client.http_base + ticket["login_path"]
    opened = False
    # Without a desktop, webbrowser falls back to console browsers (lynx, w3m) that would take over the terminal.
    if not no_open and (sys.platform in ("darwin", "win32") or os.environ.get("DISPLAY")
                        or os.environ.get("WAYLAND_DISPLAY")):
        import webbrowser

        opened = webbrowser.open(url)
    data = {"url": url, "expires_at": ticket["expires_at"], "opened": opened}
    emit(data, fmt, lambda: click.echo(f"{'Opened' if opened else 'Open'} this one-time login link (valid until "
                                       f"{ticket['expires_at']}):\n{url}"))


# ---- daemon ------------------------------------------------------------------------------------

@daemon.command("start")
@click.option("--foreground", is_flag=True, help="Run in this terminal until Ctrl-C (used by `make run`).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="HTTP port (default from config.toml, else 2123; 0 = any free).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Seconds to wait for a background start; a daemon not ready by then is stopped.")
@output_option
@json_flag
def daemon_start(foreground: bool, port: int | None, timeout: float, fmt: str, as_json: bool) -> None:
    """Start the daemon: HTTP on 127.0.0.1 and the owner-only socket `$COMPOZY_HOME/daemon.sock`.

    Without `--foreground` it starts in the background, waits until ready (`--timeout`) and prints its record;
    a daemon that is not ready in time is stopped, so a failed start never leaves one running. It also waits,
    at most 30 s, for this start's boot repair (`boot_repair`: what it scanned and repaired), so a session
    a crash left open reads repaired right after it returns. Exits 65
    when this home's daemon already runs, 78 for an invalid `config.toml`, 69 when it could not start.

    Examples:

        compozy daemon start
        compozy daemon start --foreground --port 2124
        COMPOZY_HOME=~/.compozy-b compozy daemon start --port 0 -o json
    """
    from compozy.daemon.background import start_detached
    from compozy.daemon.errors import DaemonAlreadyRunning, DaemonError
    from compozy.daemon.launcher import run_foreground

    fmt = _fmt(fmt, as_json)
    try:
        if foreground:
            sys.exit(run_foreground(port))
        record = start_detached(port, timeout)
    except DaemonAlreadyRunning as exc:
        fail(str(exc), "daemon_already_running", fmt, EXIT_USAGE)
    except DaemonError as exc:
        fail(str(exc), "daemon_start_failed", fmt, exc.exit_code)
    shown = {"boot_repair": _boot_line, "config_warnings": "; ".join}
    emit(record, fmt, lambda: kv("Compozy daemon started", sorted(
        (key, shown[key](value) if key in shown else value) for key, value in record.items())))


def _boot_line(boot: dict[str, Any]) -> str:
    """This start's boot repair in one line: what it found, or that it goes on in the background."""
    if boot.get("status") != "done":
        return "still running (the daemon serves meanwhile; `compozy doctor` shows its verdict)"
    line = (f"done: {boot.get('scanned', 0)} session(s) scanned, {boot.get('repaired', 0)} stale state(s) and "
            f"{boot.get('transcripts_repaired', 0)} transcript(s) repaired")
    person = boot.get("invalid", 0) + boot.get("failed", 0)
    return line + (f"; {person} need a person (`compozy doctor`)" if person else "")


@daemon.command("stop")
@output_option
@json_flag
def daemon_stop(fmt: str, as_json: bool) -> None:
    """Stop the daemon: live sessions stop with reason `shutdown`, then it exits (waits up to 15 s).

    Exits 69 when no daemon runs for this home.

    Examples:

        compozy daemon stop
    """
    from compozy.daemon.background import stop_daemon
    from compozy.daemon.errors import DaemonError

    fmt = _fmt(fmt, as_json)
    try:
        record = stop_daemon()
    except DaemonError as exc:
        fail(str(exc), "daemon_not_running", fmt, EXIT_UNAVAILABLE)
    emit(record, fmt, lambda: click.echo(f"daemon stopped (pid={record.get('pid')})"))


@daemon.command("status")
@output_option
@json_flag
def daemon_status(fmt: str, as_json: bool) -> None:
    """Print the daemon record; `stopped` (exit 0) when no daemon runs, with a `note` when the last one was
    killed or crashed (its record was left behind).

    Reads this home's record and checks its process is alive, without calling the daemon (`compozy status`
    does that).

    Examples:

        compozy daemon status
        compozy daemon status -o json | jq -r .status
    """
    from compozy_base.daemon_record import read_daemon_record, running_record

    fmt = _fmt(fmt, as_json)
    running = running_record()
    left = None if running else read_daemon_record()
    record = {**(running or left or {}), "status": "running" if running else "stopped"}
    if left:
        # A clean stop removes the record: one left behind means the daemon was killed or crashed.
        record["note"] = (f"the daemon (pid {left.get('pid')}) ended without a clean stop (killed or crashed); "
                          "`compozy daemon start` repairs its sessions")
    emit(record, fmt, lambda: kv("Compozy daemon", sorted(record.items())))
