"""`compozy hooks runs`: the audit rows of a session's lifecycle hooks."""

from __future__ import annotations

import rich_click as click

from compozy.cli.app import (
    _client,
    _fmt,
    cli,
    json_flag,
    output_option,
    seg,
)
from compozy.cli.client import ApiError
from compozy.cli.output import (
    emit,
    fail_api,
    table,
)


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
