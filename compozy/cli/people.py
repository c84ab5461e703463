"""`compozy user`, `compozy token`, `compozy audit`: people, their scoped API tokens, and who did what.

Thin like the other commands: one API call each over the daemon socket (the owner's), no Django.
"""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, json_flag, output_option, seg, session, session_call
from compozy.cli.output import emit, printable, table

SCOPES = ("read", "prompt", "approve", "admin")


@cli.group()
def user() -> None:
    """People who use this daemon: each gets tokens of their own (`compozy token create --user NAME`)."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(["admin", "operator", "viewer"]), default="operator", show_default=True,
              help="admin: every scope; operator: read, prompt, approve; viewer: read only.")
@output_option
@json_flag
def user_add(name: str, role: str, fmt: str, as_json: bool) -> None:
    """Add a person NAME with a ROLE, which bounds the scopes their tokens may carry.

    The owner (the token made at first start, and this CLI over the daemon's socket) needs no entry. `-o json`
    prints `{"user": {name, role, created_at}}`; a name taken already exits non-zero (`user_exists`).

    Examples:

        compozy user add alice --role operator
        compozy user add reviewer --role viewer
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", "/api/users", {"name": name, "role": role})
    emit(data, fmt, lambda: click.echo(f"user {data['user']['name']} added ({data['user']['role']}); "
                                       f"give them a token: compozy token create --user {data['user']['name']}"))


@user.command("list")
@output_option
@json_flag
def user_list(fmt: str, as_json: bool) -> None:
    """List people and their roles.

    `-o json` prints `{"users": [{name, role, created_at}]}`.

    Examples:

        compozy user list
        compozy user list -o json | jq -r '.users[] | select(.role == "viewer") | .name'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/users")
    emit(data, fmt, lambda: table(None, ["NAME", "ROLE", "ADDED"],
                                  [[u["name"], u["role"], u["created_at"]] for u in data["users"]]),
         rows=data["users"])


@cli.group()
def token() -> None:
    """API tokens of people: scoped (read, prompt, approve, admin), optionally to some workspaces, expiring."""


@token.command("create")
@click.option("--user", "user_name", required=True, help="Whose token (see `compozy user list`).")
@click.option("--scope", "scopes", multiple=True, type=click.Choice(SCOPES),
              help="Repeatable. read: list and tail; prompt: drive sessions; approve: answer permissions and "
                   "questions; admin: everything. Default: every scope the user's role allows.")
@click.option("--workspace", "workspaces", multiple=True,
              help="Repeatable: a workspace name, id or path. Sessions elsewhere do not exist for this token.")
@click.option("--expires", help="A duration such as 30d or 12h; default: never.")
@output_option
@json_flag
def token_create(user_name: str, scopes: tuple[str, ...], workspaces: tuple[str, ...], expires: str | None,
                 fmt: str, as_json: bool) -> None:
    """Create a token for a person. The secret is printed once and only its hash is kept: copy it now.

    Use it as `Authorization: Bearer <secret>`, or sign a browser in with it (`POST /api/auth/ticket` with the
    token, then open the printed `/login?ticket=` link). `-o json` prints `{"token": {id, user, scopes,
    workspaces, expires_at, ...}, "secret": "tok_….…"}`.

    Examples:

        compozy token create --user alice --scope prompt --scope approve --expires 30d
        compozy token create --user reviewer --scope read --workspace my-repo
    """
    fmt = _fmt(fmt, as_json)
    body: dict[str, Any] = {"user": user_name, "scopes": list(scopes), "workspaces": list(workspaces)}
    if expires:
        body["expires"] = expires
    data = api_call(fmt, "POST", "/api/tokens", body)

    def human() -> None:
        t = data["token"]
        click.echo(f"token {t['id']} for {t['user']}: {', '.join(t['scopes'])}"
                   + (f"; workspaces {', '.join(t['workspaces'])}" if t["workspaces"] else "")
                   + (f"; expires {t['expires_at']}" if t["expires_at"] else ""))
        click.echo(data["secret"])
        click.echo("shown once: store it now (only its hash is kept)")

    emit(data, fmt, human)


@token.command("list")
@click.option("--user", "user_name", help="Only this person's tokens.")
@output_option
@json_flag
def token_list(user_name: str | None, fmt: str, as_json: bool) -> None:
    """List tokens (never their secrets): id, person, scopes, workspaces, state (active, expired, revoked).

    `-o json` prints `{"tokens": [...]}`.

    Examples:

        compozy token list --user alice
        compozy token list -o json | jq -r '.tokens[] | select(.state == "active") | .id'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/tokens", query={"user": user_name} if user_name else None)
    emit(data, fmt, lambda: table(None, ["ID", "USER", "SCOPES", "WORKSPACES", "STATE", "EXPIRES"], [
        [t["id"], t["user"], ",".join(t["scopes"]), ",".join(t["workspaces"]) or "all", t["state"],
         t["expires_at"] or "never"] for t in data["tokens"]]), rows=data["tokens"])


@token.command("revoke")
@click.argument("token_id")
@output_option
@json_flag
def token_revoke(token_id: str, fmt: str, as_json: bool) -> None:
    """Revoke TOKEN_ID: refused at once here, and on every node of a cluster within seconds (a browser it signed
    in is signed out too). `-o json` prints `{"token": {..., "state": "revoked"}}`.

    Examples:

        compozy token revoke tok_0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/tokens/{seg(token_id)}/revoke")
    emit(data, fmt, lambda: click.echo(f"token {data['token']['id']} revoked"))


@cli.command()
@click.option("--user", "user_name", help="Only what this person did.")
@click.option("--since", help="A duration back from now (1h, 30m, 2d) or an RFC3339 time.")
@click.option("--limit", type=click.IntRange(1, 5000), default=200, show_default=True)
@output_option
@json_flag
def audit(user_name: str | None, since: str | None, limit: int, fmt: str, as_json: bool) -> None:
    """Who did what, newest first: every write through the API (creates, prompts, approvals, stops, removals…)
    with its actor: a person's name and token id, `daemon`, `agent:<session>` or `webhook-link`.

    `-o json` prints `{"entries": [{id, at, actor, actor_kind, user, token_id, action, method, path, session_id,
    status, detail}]}`.

    Examples:

        compozy audit --since 1h
        compozy audit --user alice -o json | jq -r '.entries[].action'
    """
    fmt = _fmt(fmt, as_json)
    query: dict[str, Any] = {"limit": limit}
    if user_name:
        query["user"] = user_name
    if since:
        query["since"] = since
    data = api_call(fmt, "GET", "/api/audit", query=query)
    emit(data, fmt, lambda: table(None, ["AT", "ACTOR", "TOKEN", "ACTION", "SESSION", "STATUS"], [
        [e["at"], printable(e["actor"]), e["token_id"], e["action"], e["session_id"], e["status"]]
        for e in data["entries"]]), rows=data["entries"])


@session.command("control")
@click.argument("session_id")
@click.option("--take", is_flag=True, help="Take control (this CLI speaks for the daemon's owner).")
@output_option
@json_flag
def session_control(session_id: str, take: bool, fmt: str, as_json: bool) -> None:
    """Who holds control of SESSION_ID; with --take, take it.

    Several people may watch a session; one holds control: its creator, or who took it since. A prompt, steer
    or interrupt from anyone else answers 409 `session_controlled_by` unless it queues (`mode: queue`). Taking
    control shows live to the session's viewers (a `control_taken` row on its stream). `-o json` prints
    `{session_id, controller, token_id, taken_at}`.

    Examples:

        compozy session control sess_0123456789abcdef
        compozy session control sess_0123456789abcdef --take
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "POST" if take else "GET", "/control", {"take": True} if take else None)
    emit(data, fmt, lambda: click.echo(f"{data['session_id']}: "
                                       + (f"controlled by {data['controller']}" if data["controller"]
                                          else "nobody holds control")))
