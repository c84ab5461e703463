"""The `compozy` command group, its subgroups and the options every command shares.

Command modules register on these groups; `compozy.cli.main` imports them all.
Keep imports light: `compozy status` must not import Django or the ACP SDK.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import rich_click as click

from compozy.cli.client import Client
from compozy.cli.output import FORMATS

click.rich_click.USE_MARKDOWN = True
click.rich_click.SHOW_ARGUMENTS = True

output_option = click.option("-o", "--output", "fmt", type=click.Choice(FORMATS), default="human",
                             show_default=True, help="Output format: `human` tables, or `json`/`jsonl` for scripts.")
json_flag = click.option("--json", "as_json", is_flag=True, help="Same as `-o json`.")


def _fmt(fmt: str, as_json: bool) -> str:
    return "json" if as_json else fmt


def _client() -> Client:
    return Client()


def seg(value: str) -> str:
    """One path segment from user input: a space, `?`, `/` or non-ASCII id must stay inside its segment
    (unquoted, `x?y` looked up session `x` and `a b` crashed the HTTP client)."""
    return quote(value, safe="")


def _session_path(client: Client, session_id: str, suffix: str = "") -> str:
    """Session-scoped commands take just the id; the client finds the workspace route."""
    if not session_id.strip():  # it read as a bare `not found` from the list route
        raise click.UsageError("a session id is required (compozy session list shows them)")
    return _scoped(client.request("GET", f"/api/sessions/{seg(session_id)}")["session"], suffix)


def _scoped(session: dict[str, Any], suffix: str = "") -> str:
    """The workspace-scoped route of a session payload already fetched."""
    return f"/api/workspaces/{session['workspace_id']}/sessions/{session['id']}{suffix}"


class HelpGroup(click.RichGroup):
    """A command group named without a command shows its help and exits 0 (rich-click exits 2 for it, a code
    the CLI does not document)."""

    group_class = type  # its subgroups are HelpGroups too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # A group that is also a command (`compozy attention` lists) runs when named alone.
        if not args and not ctx.resilient_parsing and not self.invoke_without_command:
            click.echo(ctx.get_help())
            ctx.exit(0)
        return super().parse_args(ctx, args)


@click.group(cls=HelpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="compozy")
def cli() -> None:
    """**Compozy** keeps long ACP coding-agent sessions durable and diagnosable.

    Start the daemon with `compozy daemon start`, then create a session:

        compozy session new --agent general --cwd "$PWD" --prompt "hello"

    Debugging a session: `compozy status`, then `compozy session status ID -o json`,
    `compozy session events ID`, `compozy session history ID`. Every command takes `-o json` for scripts;
    errors are one line on stderr.

    Exit codes: 0 ok; 65 bad request, conflict or bad command line; 69 not found, daemon unavailable or retry
    later (408, 429, 5xx, a daemon that could not start); 70 the agent's turn or a session's start failed;
    77 forbidden; 78 unprocessable or invalid `config.toml`; `doctor` and `session repair` exit 1 for a failed
    check or a blocked repair. A command group named alone (`compozy session`) shows its help and exits 0.
    """


@cli.group()
def daemon() -> None:
    """Start, stop and inspect the background daemon."""


@cli.group()
def session() -> None:
    """Create, prompt, stop and inspect sessions."""


@cli.group()
def workspace() -> None:
    """Register and inspect workspaces (the directories sessions work in)."""


def api_call(fmt: str, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
    """One request to the daemon's API (`timeout`: the client's default when None); any API error ends the command
    in one line."""
    from compozy.cli.client import ApiError
    from compozy.cli.output import fail_api

    client = _client() if timeout is None else Client(timeout=timeout)
    try:
        return client.request(method, path, body, query=query)
    except ApiError as exc:
        fail_api(exc, fmt)


def session_call(fmt: str, session_id: str, method: str, suffix: str = "", body: Any = None,
                 query: dict[str, Any] | None = None) -> Any:
    """One request on a session's workspace-scoped route; any API error ends the command in one line."""
    from compozy.cli.client import ApiError
    from compozy.cli.output import fail_api

    client = _client()
    try:
        return client.request(method, _session_path(client, session_id, suffix), body, query=query)
    except ApiError as exc:
        fail_api(exc, fmt)
