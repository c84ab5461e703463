"""`compozy task …`: hand the daemon work it supervises, retries once when it goes silent, and flags for you.

Thin like the other commands: one API call each over the daemon socket; no Django, no ACP SDK.
"""

from __future__ import annotations

import json
import os
from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, json_flag, output_option, seg
from compozy.cli.output import emit, fail, kv, table

STATUSES = ["queued", "running", "succeeded", "failed", "canceled", "needs_attention"]


@cli.group()
def task() -> None:
    """Supervised work: a prompt the daemon runs in a session of its own and watches for you.

    A task runs as **attempts** (runs). Each run is claimed by one daemon and kept by lease heartbeats.
    When the agent goes silent (no work evidence for `[session.supervision] quiet_after`, then `stop_grace`
    more) its process tree is stopped and verified gone, and the task is requeued once as a linked attempt
    while `--max-attempts` allows (a daemon that died mid-run counts too). Past that the task is
    `needs_attention`. A new attempt starts from the files the last one left; anything it did outside them
    (a push, a message) may happen twice, so check before retrying by hand.

    Examples:

        compozy task create "Fix the flaky test in tests/test_io.py" --cwd "$PWD"
        compozy task list                      # needs_attention first
        compozy task show TASK_ID              # attempts, their sessions, the history
        compozy session events SESSION_ID      # what an attempt's agent did
        compozy task retry TASK_ID             # a failed or needs_attention task, fresh budget
    """


def _rows(tasks: list[dict[str, Any]], wide: bool) -> None:
    """One line per task, never a wrapped cell (at 80 columns the status folded into `run / nin / g`): ids and
    statuses keep their width, the reason and title give way; `--wide` adds the sessions, unshrunk."""
    from compozy.cli.events_view import fit_table, terminal_width

    columns = ["TASK", "STATUS", "ATTEMPTS", "REQUEUED", "REASON", "TITLE"]
    rows = [[t["id"], t["status"], f"{t['attempts']}/{t['max_attempts']}", t["requeued"], t.get("reason"),
             t["title"]] for t in tasks]
    if wide:
        columns.insert(4, "SESSIONS")
        for row, t in zip(rows, tasks, strict=True):
            row.insert(4, " ".join(t["session_ids"][-2:]))
    for line in fit_table(columns, rows, set() if wide else {"REASON", "TITLE"}, None if wide else terminal_width()):
        click.echo(line)


def _show(data: dict[str, Any]) -> None:
    t = data["task"]
    kv(f"Task {t['id']}", [("title", t["title"]), ("status", t["status"]), ("reason", t.get("reason")),
                           ("detail", t.get("detail")), ("agent", t.get("agent_name") or "(default)"),
                           ("workspace", t["workspace_id"]), ("cwd", t["cwd"]),
                           ("attempts", f"{t['attempts']} of max {t['max_attempts']}"),
                           ("requeued", str(t["requeued"]))])
    from compozy.cli.events_view import fit_rows, fit_table, terminal_width

    # Plain lines that never wrap (a boxed table of seven columns squeezed Status and Outcome to nothing at 80
    # columns): the ids whole, what an attempt recovers and its lease on a line of their own when set.
    width = terminal_width()
    click.echo("\nAttempts")
    attempts = fit_table(["#", "RUN", "STATUS", "OUTCOME", "SESSION"],
                         [(r["attempt"], r["id"], r["status"], r.get("outcome") or "-", r.get("session_id") or "-")
                          for r in t["runs"]], {"OUTCOME"}, width)
    click.echo(attempts[0])
    for line, run in zip(attempts[1:], t["runs"], strict=True):
        click.echo(line)
        extra = [f"recovers {run['recovers_run_id']}" if run.get("recovers_run_id") else "",
                 f"lease until {run['lease_expires_at']}" if run.get("lease_expires_at") else ""]
        if any(extra):
            click.echo("    " + "; ".join(e for e in extra if e))
    if data.get("history"):
        click.echo("\nHistory")
        rows = [(_short_time(e["created_at"]), e["kind"], e.get("run_id") or "-",
                 " · ".join(v for v in (e.get("reason"), e.get("action")) if v)) for e in data["history"]]
        for line in fit_rows(["WHEN", "EVENT", "RUN", "REASON · ACTION"], rows, "REASON · ACTION", width):
            click.echo(line)


def _short_time(timestamp: str | None) -> str:
    """`2026-12-05 10:31:02` of an RFC3339 stamp: the date and the second, without the zone's width (UTC)."""
    return (timestamp or "").replace("T", " ")[:19]


@task.command("create")
@click.argument("prompt")
@click.option("--title", default=None, help="Short name (default: the prompt's first line).")
@click.option("--agent", "agent_name", default=None, help="Agent to run (default: the workspace's, then config's).")
@click.option("--cwd", default=None, help="Directory to work in (default: the current directory). Registered as a "
              "workspace when it is not inside one.")
@click.option("--workspace", default=None, help="A registered workspace id, name or path; the agent works in its "
              "root, or in --cwd inside it.")
@click.option("--max-attempts", type=click.IntRange(1, 20), default=2, show_default=True,
              help="Attempts in all, automatic recoveries included; 1 disables automatic retry.")
@click.option("--plan", "plan_file", default=None,
              help='Coordinated sub-work, a JSON file: {"steps": [{"id": "a", "prompt": "…", "after": []}, …]}. The '
              "workspace's coordinator session runs each step in a spawned child once the steps it is after succeed.")
@output_option
@json_flag
def task_create(prompt: str, title: str | None, agent_name: str | None, cwd: str | None, workspace: str | None,
                max_attempts: int, plan_file: str | None, fmt: str, as_json: bool) -> None:
    """Queue PROMPT as a task; the daemon starts it in a new session as soon as an agent slot is free.

    Prints `TASK_ID queued: TITLE`; `-o json` prints `{"task": {...}}` (`.task.id`, `.task.status`).

    Examples:

        compozy task create "Fix the flaky test in tests/test_io.py" --cwd "$PWD"
        compozy task create "Update the changelog" --workspace ws_0123456789abcdef --max-attempts 1
        compozy task create "Review the open diff" --title review -o json | jq -r .task.id
        compozy task create "Ship the release" --plan plan.json --cwd "$PWD"
    """
    fmt = _fmt(fmt, as_json)
    body: dict[str, Any] = {"prompt": prompt, "title": title, "agent_name": agent_name, "max_attempts": max_attempts}
    if plan_file is not None:
        try:
            with open(plan_file, encoding="utf-8") as fh:
                body["plan"] = json.load(fh)
        except (OSError, ValueError) as exc:
            fail(f"cannot read the plan {plan_file}: {exc}", "invalid_plan", fmt, 65)
    if workspace:
        body.update(workspace=workspace, cwd=os.path.abspath(cwd) if cwd else None)
    else:
        body["workspace_path"] = os.path.abspath(cwd or os.getcwd())
    data = api_call(fmt, "POST", "/api/tasks", body)
    emit(data, fmt, lambda: click.echo(f"{data['task']['id']} queued: {data['task']['title']}"))


@task.command("list")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only tasks with this status.")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True,
              help="At most this many tasks, the most recently updated (1-500).")
@click.option("--wide", is_flag=True, help="Add each task's newest sessions, and shrink no column.")
@output_option
@json_flag
def task_list(status: str | None, limit: int, wide: bool, fmt: str, as_json: bool) -> None:
    """List tasks, those that need a person first.

    Newest first within a status; one line per task (reason and title cut to the terminal's width), then a
    totals line that counts every task. `--wide` adds the linked sessions. `-o json` prints
    `{tasks: [...], totals: {total, by_status, needs_attention, requeued, ...}}`.

    Examples:

        compozy task list
        compozy task list --status needs_attention --wide
        compozy task list --status running -o json | jq -r '.tasks[].id'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/tasks", query={"status": status, "limit": limit})

    def human() -> None:
        if not data["tasks"]:
            click.echo("no tasks")
            return
        _rows(data["tasks"], wide)
        totals = data["totals"]
        click.echo(f"{totals['total']} tasks, {totals['needs_attention']} need attention, "
                   f"{totals['requeued']} requeued")

    emit(data, fmt, human, rows=data["tasks"])


@task.command("show")
@click.argument("task_id")
@output_option
@json_flag
def task_show(task_id: str, fmt: str, as_json: bool) -> None:
    """A task, its attempts (each with its session) and its history (`task.run_recovered`, …).

    `-o json` prints `{"task": {..., "runs": [...]}, "history": [...]}`. Exits 69 when no such task exists.

    Examples:

        compozy task show task_0123456789abcdef
        compozy task show task_0123456789abcdef -o json | jq -r '.task.runs[-1].session_id'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", f"/api/tasks/{seg(task_id)}")
    emit(data, fmt, lambda: _show(data))


@task.command("cancel")
@click.argument("task_id")
@output_option
@json_flag
def task_cancel(task_id: str, fmt: str, as_json: bool) -> None:
    """Cancel a task: its running session is stopped and it is never retried automatically.

    Cancelling a canceled task is a no-op; a succeeded one exits 65 (`task_finished`).

    Examples:

        compozy task cancel task_0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/tasks/{seg(task_id)}/cancel")
    emit(data, fmt, lambda: click.echo(f"{task_id} {data['task']['status']}"))


@task.command("retry")
@click.argument("task_id")
@output_option
@json_flag
def task_retry(task_id: str, fmt: str, as_json: bool) -> None:
    """Queue one more attempt of a failed, canceled or needs_attention task, with a fresh attempt budget.

    Check first what the last attempt left behind (`compozy task show`, then `compozy session events`):
    committed files stay, and external effects are not undone. A queued, running or succeeded task exits 65
    (`task_not_retryable`).

    Examples:

        compozy task retry task_0123456789abcdef
        compozy task retry task_0123456789abcdef -o json | jq -r .task.status
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/tasks/{seg(task_id)}/retry")
    emit(data, fmt, lambda: click.echo(f"{task_id} {data['task']['status']} (attempt {data['task']['attempts']})"))


@task.command("steps")
@click.argument("task_id")
@output_option
@json_flag
def task_steps(task_id: str, fmt: str, as_json: bool) -> None:
    """A coordinated task's steps: status, attempts and each attempt's spawned child.

    A failed step is retried once, then needs you. `-o json`: `{"task_id", "steps": [{id, prompt, after, status,
    attempts, session_id, sessions, coordinator_id, detail}]}`.

    Examples:

        compozy task steps TASK_ID
        compozy task steps TASK_ID -o json | jq -r '.steps[].session_id'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", f"/api/tasks/{seg(task_id)}/steps")
    emit(data, fmt, lambda: table(f"Steps of {task_id}", ["Step", "Status", "After", "Attempts", "Session", "Detail"], [
        (s["id"], s["status"], ",".join(s["after"]), s["attempts"], s.get("session_id"), s["detail"])
        for s in data["steps"]]), rows=data["steps"])
