"""`compozy session repair ID`: inspect an interrupted transcript and append its repair events."""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _client, _fmt, _session_path, json_flag, output_option, session
from compozy.cli.client import ApiError
from compozy.cli.output import emit, fail, fail_api

EXIT_BLOCKED = 1


def _render(report: dict[str, Any], dry_run: bool) -> None:
    """Plain lines, not tables: codes and ids stay whole (and greppable) in any terminal width."""
    actions = report["actions"]
    if report["persisted"]:
        outcome = f"repaired, {len(actions)} event(s) appended"
    elif actions:
        outcome = f"dry run, {len(actions)} event(s) would be appended" if dry_run else "not repaired"
    else:
        outcome = "nothing to repair"
    click.echo(f"session {report['session_id']}: {outcome}")
    if report["issues"]:
        click.echo("issues:")
    for issue in report["issues"]:
        where = " ".join(f"{key}={issue[key]}" for key in ("turn_id", "event_id") if issue.get(key))
        click.echo(f"  {issue['severity']:<8} {issue['code']}" + (f"  {where}" if where else "")
                   + (f"  {issue['detail']}" if issue.get("detail") else ""))
    if actions:
        click.echo("actions:")
    for action in actions:
        parts = [f"turn_id={action['turn_id']}"]
        if action.get("tool_call_id"):
            parts.append(f"tool_call_id={action['tool_call_id']}")
        if action.get("tool_name"):
            parts.append(f"tool_name={action['tool_name']!r}")
        if action.get("event_id"):
            parts.append(f"event_id={action['event_id']}")
        state = "persisted" if action["persisted"] else "planned"
        click.echo(f"  {action['code']}  {' '.join(parts)}  ({state})")


@session.command("repair")
@click.argument("session_id")
@click.option("--dry-run", is_flag=True, help="Report issues and planned actions; append nothing.")
@click.option("--force", is_flag=True,
              help="Also repair sessions stopped for reasons other than `agent_crashed` or `error`.")
@output_option
@json_flag
def session_repair(session_id: str, dry_run: bool, force: bool, fmt: str, as_json: bool) -> None:
    """Repair an interrupted transcript: an interrupted `tool_result` per dangling tool call, then a
    terminal `error`. Append-only and idempotent; the session must be stopped.

    Exits 1 when the report has blocking errors (a stop reason that needs `--force`). A live session
    (`session_not_stopped`) or an unreadable event store (`event_store_unreadable`) is refused before any
    report: one error line, exit 65. `-o json` prints the report:
    `{session_id, persisted, issues: [...], actions: [...]}`.

    Examples:

        compozy session repair sess_0123456789abcdef --dry-run
        compozy session repair sess_0123456789abcdef
        compozy session repair sess_0123456789abcdef --force -o json
    """
    fmt = _fmt(fmt, as_json)
    try:
        client = _client()
        path = _session_path(client, session_id, "/repair")
        report = client.request("POST", path, query={"dry_run": "true" if dry_run else None,
                                                     "force": "true" if force else None})["repair"]
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(report, fmt, lambda: _render(report, dry_run))
    blocking = sorted({issue["code"] for issue in report["issues"] if issue["severity"] == "error"})
    if blocking:
        # The report went to stdout; the error line names why nothing was repaired.
        fail(f"not repaired: {', '.join(blocking)}", "repair_blocked", fmt, EXIT_BLOCKED)
