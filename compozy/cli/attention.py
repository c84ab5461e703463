"""`compozy attention`: what waits on a person, across every session and task; `compozy attention ack ID`.

Thin like the other commands: one API call each over the daemon socket; no Django.
"""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, json_flag, output_option, seg
from compozy.cli.output import emit

# What a person does about each kind, printed under the list.
NEXT_STEP = {
    "permission": "compozy session approve|deny SESSION_ID REQUEST_ID",
    "auth": "log the agent's provider in, then prompt the session again",
    "failed": "compozy session events SESSION_ID, then resume or remove it",
    "task": "compozy task show TASK_ID, then compozy task retry TASK_ID",
}


def _human(items: list[dict[str, Any]]) -> None:
    from compozy.cli.events_view import ago, fit_rows, terminal_width

    if not items:
        click.echo("nothing needs attention")
        return
    rows = [[i["id"], i["kind"], ago(i["since"]), i.get("session_id") or i.get("task_id") or "",
             i["summary"]] for i in items]
    for line in fit_rows(["ID", "KIND", "SINCE", "FOR", "SUMMARY"], rows, "SUMMARY", terminal_width()):
        click.echo(line)
    kinds = sorted({i["kind"] for i in items} & set(NEXT_STEP))
    click.echo("")
    for kind in kinds:
        click.echo(f"{kind}: {NEXT_STEP[kind]}")
    click.echo("seen it: compozy attention ack ID")


@cli.group(invoke_without_command=True)
@output_option
@json_flag
@click.pass_context
def attention(ctx: click.Context, fmt: str, as_json: bool) -> None:
    """List what waits on a person: permission requests, provider logins, failed sessions, tasks that need
    attention; newest first.

    An item leaves the list when it is answered (`session approve|deny`), retried (`task retry`, a new prompt),
    removed, or acknowledged (`attention ack`). `-o json` prints `{"items": [{id, kind, summary, since, url,
    session_id, task_id, workspace_id, agent, request_id}]}`; `kind` is one of permission, elicitation, auth,
    failed, task, budget.

    Examples:

        compozy attention
        compozy attention -o json | jq -r '.items[] | select(.kind == "permission") | .session_id'
        compozy attention ack att_0123456789abcdef
    """
    if ctx.invoked_subcommand is not None:
        return
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/attention")
    emit(data, fmt, lambda: _human(data["items"]), rows=data["items"])


@attention.command("ack")
@click.argument("item_id")
@output_option
@json_flag
def attention_ack(item_id: str, fmt: str, as_json: bool) -> None:
    """Acknowledge ITEM_ID (from `compozy attention`): it leaves the list, on every node and dashboard.

    A session's failure stays on its record; acknowledging only says a person has seen it. `-o json` prints
    `{"item": {..., "acknowledged": true}}`; an item that is gone already exits 3 (`attention_not_found`).

    Examples:

        compozy attention ack att_0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/attention/{seg(item_id)}/ack")
    emit(data, fmt, lambda: click.echo(f"{data['item']['id']} acknowledged: {data['item']['summary']}"))
