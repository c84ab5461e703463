"""The `compozy workspace` commands: register and inspect the directories sessions work in."""

from __future__ import annotations

import os
from typing import Any

import rich_click as click

from compozy.cli.app import _client, _fmt, api_call, json_flag, output_option, seg, workspace
from compozy.cli.client import ApiError
from compozy.cli.output import EXIT_UNAVAILABLE, emit, fail, fail_api, kv, table


def _ws_rows(items: list[dict[str, Any]]) -> None:
    table("Workspaces", ["ID", "Name", "Root", "Add Dirs", "Default Agent", "Updated"],
          [(w["id"], w["name"], w["root_dir"], len(w["add_dirs"]), w.get("default_agent"), w["updated_at"])
           for w in items])


@workspace.command("list")
@output_option
@json_flag
def workspace_list(fmt: str, as_json: bool) -> None:
    """Every registered workspace.

    `-o json` prints a list of workspace records (`id`, `name`, `root_dir`, `add_dirs`, `default_agent`, …).

    Examples:

        compozy workspace list
        compozy workspace list -o json | jq -r '.[].root_dir'
    """
    fmt = _fmt(fmt, as_json)
    items = api_call(fmt, "GET", "/api/workspaces")["workspaces"]
    emit(items, fmt, lambda: _ws_rows(items))


@workspace.command("info")
@click.argument("ref", required=False)
@output_option
@json_flag
def workspace_info(ref: str | None, fmt: str, as_json: bool) -> None:
    """Root, extra roots, sessions, visible agents and providers. No REF: the cwd's nearest workspace.

    REF is a workspace id, name or absolute path. Exits 69 when REF names no workspace, or without REF
    when none contains the current directory. `-o json` prints `{workspace, sessions, agents, providers, …}`.

    Examples:

        compozy workspace info
        compozy workspace info ws_0123456789abcdef -o json | jq '.providers'
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        if not ref:
            listing = client.request("GET", "/api/workspaces")["workspaces"]
            cwd = os.path.realpath(os.getcwd())
            matches = [w for w in listing if cwd == w["root_dir"] or cwd.startswith(w["root_dir"].rstrip("/") + "/")]
            if not matches:
                fail(f"no registered workspace contains {cwd}", "workspace_not_found", fmt, EXIT_UNAVAILABLE)
            ref = max(matches, key=lambda w: len(w["root_dir"]))["id"]
        data = client.request("GET", f"/api/workspaces/{seg(ref)}")
    except ApiError as exc:
        fail_api(exc, fmt)

    def human() -> None:
        w = data["workspace"]
        kv(f"Workspace {w['name']}", [("id", w["id"]), ("root", w["root_dir"]), ("add dirs", w["add_dirs"]),
                                       ("default agent", w.get("default_agent"))])
        table("Agents", ["Name", "Provider"], [(a["name"], a["provider"]) for a in data["agents"]])
        table("Providers", ["Name", "Command", "Available"],
              [(p["name"], " ".join(p["command"]), "yes" if p["available"] else "no") for p in data["providers"]])

    emit(data, fmt, human)


@workspace.command("add")
@click.argument("path")
@click.option("--name", default=None,
              help="Name to refer to it by (default: the directory's name, made unique with `-2`, `-3`, …).")
@click.option("--add-dir", "add_dirs", multiple=True, help="Extra root (absolute, repeatable).")
@click.option("--default-agent", default=None,
              help="Agent for sessions and tasks here that name none (an agent defined in config.toml).")
@output_option
@json_flag
def workspace_add(path: str, name: str | None, add_dirs: tuple[str, ...], default_agent: str | None, fmt: str,
                  as_json: bool) -> None:
    """Register an absolute path as a workspace.

    `session new --cwd` registers a new directory by itself; add one here to name it, give it extra roots or
    a default agent. Exits 65 when PATH is relative or already registered, or the name is taken; 69 when
    PATH does not exist.

    Examples:

        compozy workspace add "$PWD"
        compozy workspace add /srv/src/app --name app --add-dir /srv/src/lib --default-agent general
    """
    fmt = _fmt(fmt, as_json)
    body: dict[str, Any] = {"root_dir": path, "add_dirs": list(add_dirs)}
    if name:
        body["name"] = name
    if default_agent:
        body["default_agent"] = default_agent
    w = api_call(fmt, "POST", "/api/workspaces", body)["workspace"]
    emit(w, fmt, lambda: _ws_rows([w]))


@workspace.command("remove")
@click.argument("ref")
@output_option
@json_flag
def workspace_remove(ref: str, fmt: str, as_json: bool) -> None:
    """Unregister a workspace; its stopped sessions (their history) and finished tasks are deleted with it.

    REF is a workspace id, name or absolute path. Refused with exit 65, deleting nothing, while a session
    is live or a task queued or running there.

    Examples:

        compozy workspace remove ws_0123456789abcdef
        compozy workspace remove app
    """
    fmt = _fmt(fmt, as_json)
    client = _client()
    try:
        w = client.request("GET", f"/api/workspaces/{seg(ref)}")["workspace"]
        client.request("DELETE", f"/api/workspaces/{w['id']}")
    except ApiError as exc:
        fail_api(exc, fmt)
    emit(w, fmt, lambda: click.echo(f"removed workspace {w['name']} ({w['id']})"))

