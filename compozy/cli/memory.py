"""`compozy memory …` and `compozy mcp list`: curated memory, its index, dreams, and the MCP servers sessions get.

Thin: one API call each over the daemon socket; the daemon runs every change through memory's one write path."""

from __future__ import annotations

import os
import sys
from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, json_flag, output_option, seg
from compozy.cli.output import emit, fail, kv, table

SCOPES = ["global", "workspace", "agent"]
TYPES = ["user", "feedback", "project", "reference"]


def _ws(path: str | None) -> str | None:
    """A path is sent absolute (the daemon's cwd is not ours); an id or name as it is."""
    if path is None:
        return None
    return os.path.abspath(path) if os.sep in path or path in (".", "..") or os.path.isdir(path) else path


workspace_option = click.option("--workspace", default=None,
                                help="A workspace: its path (`.` for here), id or name. Adds its scope.")
agent_option = click.option("--agent", default=None, help="An agent's name: adds its own scope.")


@cli.group()
def memory() -> None:
    """Curated memory agents get at session start: Markdown files in three scopes (global, workspace, agent).

    Global entries live in `$COMPOZY_HOME/memory/`, a workspace's in `<workspace>/.compozy/memory/`, an agent's in
    `$COMPOZY_HOME/agents/<agent>/memory/`; each scope has a `MEMORY.md` index. An agent entry shadows a
    workspace entry of the same type and slug, which shadows a global one. Every change (this CLI, the API, the
    agents' `memory_write` tool, dreams) is journalled before its file changes, so a crash loses none and
    doubles none. Search uses a derived index (`reindex` rebuilds it from the files).

    Examples:

        compozy memory write --scope workspace --workspace . --type project --name "Build" \\
            --description "how to build" "Run make build; never make all."
        compozy memory search build --workspace .
        compozy memory health -o json
    """


@memory.command("health")
@workspace_option
@output_option
@json_flag
def memory_health(workspace: str | None, fmt: str, as_json: bool) -> None:
    """Memory's health: is every file readable and the index fresh?

    Each scope's files, the index's state (fresh, stale, rebuilding, failed with its cause), the last write,
    the last dream, and problems (bad frontmatter, files the index lacks). Exits 1 when not healthy.

    Examples:

        compozy memory health
        compozy memory health --workspace . -o json | jq .index.state
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/memory/health", query={"workspace": _ws(workspace)})

    def human() -> None:
        idx = data["index"]
        kv("Memory", [("healthy", data["ok"]), ("index", idx["state"] + (f" ({idx['cause']})" if idx["cause"] else "")),
                      ("indexed entries", idx["entries"]),
                      ("last write", (data.get("last_write") or {}).get("at")),
                      ("last dream", (data.get("last_dream") or {}).get("started_at"))])
        table("Scopes", ["Scope", "Files", "Path"], [(s["scope"], s["files"], s["path"]) for s in data["scopes"]])
        if data["problems"]:
            table("Problems", ["Path", "Problem"], [(p["path"], p["problem"]) for p in data["problems"]])

    emit(data, fmt, human)
    if not data["ok"]:
        sys.exit(1)


@memory.command("list")
@click.option("--scope", type=click.Choice(SCOPES), default=None, help="Only this scope.")
@workspace_option
@agent_option
@output_option
@json_flag
def memory_list(scope: str | None, workspace: str | None, agent: str | None, fmt: str, as_json: bool) -> None:
    """List entries: the global scope's, plus the workspace's and the agent's when named.

    `-o json`: `{"entries": [{slug, name, description, type, scope, agent, workspace, provenance, path,
    updated_at}]}`.

    Examples:

        compozy memory list --workspace .
        compozy memory list --scope agent -o json | jq -r '.entries[].slug'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/memory/entries",
                    query={"scope": scope, "workspace": _ws(workspace), "agent": agent})
    emit(data, fmt, lambda: table(None, ["Scope", "Type", "Slug", "Description"], [
        (e["scope"] + (f":{e['agent']}" if e.get("agent") else ""), e["type"], e["slug"], e["description"])
        for e in data["entries"]]) if data["entries"] else click.echo("no memory"), rows=data["entries"])


def _where(scope: str | None, type_: str | None, workspace: str | None, agent: str | None) -> dict[str, Any]:
    return {"scope": scope, "type": type_, "workspace": _ws(workspace), "agent": agent}


@memory.command("show")
@click.argument("slug")
@click.option("--scope", type=click.Choice(SCOPES), default=None, help="Only this scope.")
@click.option("--type", "type_", type=click.Choice(TYPES), default=None, help="When two types share the slug.")
@workspace_option
@agent_option
@output_option
@json_flag
def memory_show(slug: str, scope: str | None, type_: str | None, workspace: str | None, agent: str | None,
                fmt: str, as_json: bool) -> None:
    """One entry whole, where it resolves first (agent ▸ workspace ▸ global).

    `-o json`: `{"entry": {..., "body"}}`. Exits 69 when there is none.

    Examples:

        compozy memory show build --workspace .
        compozy memory show likes-tabs -o json | jq -r .entry.body
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", f"/api/memory/entries/{seg(slug)}", query=_where(scope, type_, workspace, agent))

    def human() -> None:
        e = data["entry"]
        kv(e["name"], [("slug", e["slug"]), ("type", e["type"]), ("scope", e["scope"]),
                       ("description", e["description"]), ("provenance", e["provenance"]), ("path", e["path"])])
        click.echo(e["body"])

    emit(data, fmt, human)


def _body(body: str | None, file: str | None, fmt: str) -> str:
    if (body is None) == (file is None):
        fail("give the body as an argument or with --file (one of the two)", "body_required", fmt, 65)
    if file is not None:
        try:
            with open(file, encoding="utf-8") if file != "-" else sys.stdin as fh:
                return fh.read()
        except OSError as exc:
            fail(f"cannot read {file}: {exc.strerror}", "file_unreadable", fmt, 65)
    assert body is not None
    return body


@memory.command("write")
@click.argument("body", required=False)
@click.option("--scope", type=click.Choice(SCOPES), required=True, help="Where the entry lives.")
@click.option("--type", "type_", type=click.Choice(TYPES), required=True, help="What kind of memory it is.")
@click.option("--name", required=True, help="Its name; its slug is made from it.")
@click.option("--description", default="", help="One line: what it is for (the index and snapshots show it).")
@workspace_option
@agent_option
@click.option("--file", default=None, help="Read the body from this file (`-`: standard input).")
@output_option
@json_flag
def memory_write(body: str | None, scope: str, type_: str, name: str, description: str, workspace: str | None,
                 agent: str | None, file: str | None, fmt: str, as_json: bool) -> None:
    """Write an entry (BODY, or --file F); the same scope, type and name again replaces it.

    Prints its slug; `-o json`: `{slug, scope, type, path, created}`. `--workspace` for the workspace scope,
    `--agent` for the agent scope. The change is journalled before its file changes.

    Examples:

        compozy memory write --scope global --type user --name "Prefers tabs" "Indent with tabs."
        compozy memory write --scope workspace --workspace . --type reference --name Runbook --file docs/run.md
    """
    fmt = _fmt(fmt, as_json)
    text = _body(body, file, fmt)
    data = api_call(fmt, "POST", "/api/memory/entries", {
        "scope": scope, "type": type_, "name": name, "description": description, "body": text,
        "workspace": _ws(workspace), "agent": agent})
    emit(data, fmt, lambda: click.echo(data["slug"]))


@memory.command("edit")
@click.argument("slug")
@click.option("--scope", type=click.Choice(SCOPES), default=None, help="Which scope's entry.")
@click.option("--type", "type_", type=click.Choice(TYPES), default=None, help="When two types share the slug.")
@workspace_option
@agent_option
@click.option("--name", default=None, help="A new name (the entry moves to its new slug).")
@click.option("--description", default=None, help="A new description.")
@click.option("--body", default=None, help="A new body.")
@click.option("--file", default=None, help="A new body from this file (`-`: standard input).")
@output_option
@json_flag
def memory_edit(slug: str, scope: str | None, type_: str | None, workspace: str | None, agent: str | None,
                name: str | None, description: str | None, body: str | None, file: str | None, fmt: str,
                as_json: bool) -> None:
    """Change an entry's name, description or body; what is not given stays.

    Prints its (new) slug: a new name moves the entry.

    Examples:

        compozy memory edit build --workspace . --description "how to build, and what not to run"
        compozy memory edit prefers-tabs --scope global --file note.md
    """
    fmt = _fmt(fmt, as_json)
    text = _body(body, file, fmt) if body is not None or file is not None else None
    if name is None and description is None and text is None:
        fail("nothing to change: give --name, --description, --body or --file", "nothing_to_change", fmt, 65)
    data = api_call(fmt, "PATCH", f"/api/memory/entries/{seg(slug)}", {
        **_where(scope, type_, workspace, agent), "name": name, "description": description, "body": text})
    emit(data, fmt, lambda: click.echo(data["slug"]))


@memory.command("delete")
@click.argument("slug")
@click.option("--scope", type=click.Choice(SCOPES), default=None, help="Which scope's entry.")
@click.option("--type", "type_", type=click.Choice(TYPES), default=None, help="When two types share the slug.")
@workspace_option
@agent_option
@output_option
@json_flag
def memory_delete(slug: str, scope: str | None, type_: str | None, workspace: str | None, agent: str | None,
                  fmt: str, as_json: bool) -> None:
    """Delete the entry a slug resolves to.

    Journalled like a write; `-o json`: `{"deleted": {...}}`. Exits 69 when there is none.

    Examples:

        compozy memory delete build --scope workspace --workspace .
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "DELETE", f"/api/memory/entries/{seg(slug)}", query=_where(scope, type_, workspace, agent))
    emit(data, fmt, lambda: click.echo(f"deleted {data['deleted']['path']}"))


@memory.command("search")
@click.argument("query")
@workspace_option
@agent_option
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True, help="At most this many.")
@output_option
@json_flag
def memory_search(query: str, workspace: str | None, agent: str | None, limit: int, fmt: str, as_json: bool) -> None:
    """Search memory: global, plus the workspace's and the agent's scopes when named.

    Every word must match, the last as a prefix. `-o json`: `{"results": [{slug, name, scope, type, snippet}]}`.

    Examples:

        compozy memory search "flaky test" --workspace .
        compozy memory search deploy -o json | jq -r '.results[].slug'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/memory/search", query={"q": query, "workspace": _ws(workspace), "agent": agent,
                                                          "limit": limit})
    emit(data, fmt, lambda: table(None, ["Scope", "Type", "Slug", "Snippet"], [
        (r["scope"], r["type"], r["slug"], r["snippet"]) for r in data["results"]]) if data["results"]
        else click.echo("no match"), rows=data["results"])


@memory.command("reindex")
@output_option
@json_flag
def memory_reindex(fmt: str, as_json: bool) -> None:
    """Rebuild the search index from the files.

    The index is derived: deleting it loses nothing. `-o json`: `{entries, index{state, ...}}`.

    Examples:

        compozy memory reindex
        compozy memory reindex -o json | jq .index.state
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", "/api/memory/reindex")
    emit(data, fmt, lambda: click.echo(f"index rebuilt: {data['entries']} entries ({data['index']['state']})"))


@memory.group("dream")
def dream() -> None:
    """Dreams: a daemon-managed `dream` session (approve-all, hidden from `session list` unless `--type dream`)
    that reads recent sessions and memory and promotes, merges or deletes entries. Each change is a decision
    with its source sessions, and can be reverted.

    A dream runs when its gates pass (`[memory.dream]`): time since the workspace's last dream, sessions
    completed since, one dream at a time per workspace, and enough recalled-but-unpromoted entries.
    """


@dream.command("trigger")
@workspace_option
@output_option
@json_flag
def dream_trigger(workspace: str | None, fmt: str, as_json: bool) -> None:
    """Start a dream for the workspace (default: the current directory).

    A gate that does not pass is named in the one-line error (code `dream_gate_closed`,
    `.diagnostic.evidence.gate` in JSON). `-o json`: `{"dream": {id, session_id, state, ...}}`.

    Examples:

        compozy memory dream trigger --workspace .
        compozy memory dream trigger -o json | jq -r .dream.session_id
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", "/api/memory/dreams/trigger", {"workspace": _ws(workspace or ".")})
    emit(data, fmt, lambda: click.echo(f"{data['dream']['id']} started in session {data['dream']['session_id']}"))


@dream.command("status")
@output_option
@json_flag
def dream_status(fmt: str, as_json: bool) -> None:
    """The latest dreams, newest first, each with its decisions.

    A decision shows its action, its source sessions and whether it was reverted. `-o json`: `{"dreams": [...]}`.

    Examples:

        compozy memory dream status
        compozy memory dream status -o json | jq -r '.dreams[0].decisions[].id'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/memory/dreams")

    def human() -> None:
        if not data["dreams"]:
            click.echo("no dreams yet")
            return
        table("Dreams", ["Dream", "State", "Session", "Started", "Detail"], [
            (d["id"], d["state"], d["session_id"], d["started_at"], d["detail"]) for d in data["dreams"]])
        table("Decisions", ["Decision", "Dream", "Action", "Sources", "Reverted"], [
            (c["id"], d["id"], c["action"], " ".join(c["source_sessions"]), c.get("reverted_at") or "")
            for d in data["dreams"] for c in d["decisions"]])

    emit(data, fmt, human, rows=data["dreams"])


@dream.command("revert")
@click.argument("decision_id")
@output_option
@json_flag
def dream_revert(decision_id: str, fmt: str, as_json: bool) -> None:
    """Undo one dream decision.

    Every file it changed is put back, through the same journalled write path.

    Examples:

        compozy memory dream revert dec_0123456789abcdef
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/memory/dreams/decisions/{seg(decision_id)}/revert")
    emit(data, fmt, lambda: click.echo(f"reverted {decision_id}"))


@cli.group()
def mcp() -> None:
    """MCP servers handed to agents at session/new: `[[mcp.servers]]` (filtered by agent and workspace),
    `[[agents.NAME.mcp_servers]]`, and each session's own `compozy-memory` server."""


@mcp.command("list")
@output_option
@json_flag
def mcp_list(fmt: str, as_json: bool) -> None:
    """Every configured MCP server: where it is configured, its transport, whom it is for.

    Secrets are named, never shown. `-o json`: `{"servers": [...]}`.

    Examples:

        compozy mcp list
        compozy mcp list -o json | jq -r '.servers[].name'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/mcp/servers")
    emit(data, fmt, lambda: table(None, ["Name", "Type", "Source", "Agents", "Workspaces", "Target"], [
        (s["name"], s["type"], s["source"], ",".join(s["agents"]) or "all", ",".join(s["workspaces"]) or "all",
         s["url"] or " ".join([s["command"], *s["args"]])) for s in data["servers"]]), rows=data["servers"])
