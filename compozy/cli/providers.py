"""`compozy provider list|show|test|set-key|login`, `compozy agent list` and `compozy daemon reload`: a real provider
set up without hand-editing config.toml or restarting the daemon (sessions/services/providers.py does the work)."""

from __future__ import annotations

import sys
from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, api_call, cli, daemon, json_flag, output_option, seg
from compozy.cli.health import agent
from compozy.cli.output import EXIT_USAGE, emit, fail, kv

# A test or login through npx may first download the agent's package (minutes on a slow link).
PROBE_TIMEOUT = 660.0

FOUND = {"path": "on PATH", "npx": "via npx", "missing": "MISSING"}
AUTH = {"not_needed": "not needed", "key_set": "key set", "no_key": "no key", "unknown": "unknown"}


@cli.group()
def provider() -> None:
    """The agents' providers: where each is found, its key, a handshake test, a login.

    `compozy provider list` first; `compozy provider test NAME` starts the agent for its ACP handshake;
    `compozy provider set-key NAME` stores a key (read from stdin) in `$COMPOZY_HOME/secrets.toml` and reloads.
    """


def _provider_rows(items: list[dict[str, Any]]) -> None:
    from compozy.cli.events_view import fit_table, terminal_width

    rows = [(p["name"], FOUND.get(p["found"], p["found"]), p["version"] or "-", p["key_env"] or "-",
             AUTH.get(p["auth"], p["auth"]), p["hint"] or p["display_name"]) for p in items]
    for line in fit_table(["PROVIDER", "FOUND", "VERSION", "KEY", "AUTH", "NEXT STEP"], rows, {"NEXT STEP", "KEY"},
                          terminal_width()):
        click.echo(line)


@provider.command("list")
@output_option
@json_flag
def provider_list(fmt: str, as_json: bool) -> None:
    """Every provider: found on PATH, through npx or missing; its key variable and whether it is set.

    `-o json` prints `{providers: [{name, found, path, package, version, key_env, auth, key_source, missing,
    hint}]}`; key values are never shown.

    Examples:

        compozy provider list
        compozy provider list -o json | jq '.providers[] | select(.auth == "no_key") | .hint'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/providers")
    emit(data, fmt, lambda: _provider_rows(data["providers"]), rows=data["providers"])


def _provider_kv(p: dict[str, Any]) -> None:
    kv(f"Provider {p['name']}", [
        ("name", p["display_name"]), ("command", " ".join(p["command"])),
        ("found", f"{FOUND.get(p['found'], p['found'])} {p['path']}".strip()), ("package", p["package"]),
        ("version", p["version"]), ("key variable", p["key_env"]),
        ("auth", AUTH.get(p["auth"], p["auth"]) + (f" ({p['key_source']})" if p["key_source"] else "")),
        ("in secrets.toml", ", ".join(p["secret_env"])), ("missing", "; ".join(p["missing"])),
        ("next step", p["hint"])])


@provider.command("show")
@click.argument("name")
@output_option
@json_flag
def provider_show(name: str, fmt: str, as_json: bool) -> None:
    """One provider, in full: where its agent is found, its key variable and where it is set, what is missing.

    Exits 69 (`provider_not_found`) for a name config.toml does not define.

    Examples:

        compozy provider show claude
        compozy provider show codex -o json | jq -r .provider.hint
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", f"/api/providers/{seg(name)}")
    emit(data, fmt, lambda: _provider_kv(data["provider"]))


@provider.command("test")
@click.argument("name")
@output_option
@json_flag
def provider_test(name: str, fmt: str, as_json: bool) -> None:
    """Start the provider's agent for its ACP handshake, then stop it: its version and the login methods it
    offers, or what is missing. Exits 1 when the agent could not be started or did not answer.

    A provider that runs through npx downloads its pinned package on its first start (minutes on a slow link).

    Examples:

        compozy provider test claude
        compozy provider test codex -o json | jq '.auth_methods'
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/providers/{seg(name)}/test", timeout=PROBE_TIMEOUT)

    def human() -> None:
        _provider_kv(data["provider"])
        if data["ok"]:
            click.echo(f"ok: {data['agent_name'] or name} {data['version']} answered the ACP handshake")
        for method in data["auth_methods"]:
            click.echo(f"login method {method['how']} (`compozy provider login {name} --method {method['id']}`)")

    emit(data, fmt, human)
    if not data["ok"]:
        fail(f"provider {name}: {data['error']}", "provider_test_failed", fmt, 1)


@provider.command("set-key")
@click.argument("name")
@click.argument("variable", required=False, default="")
@output_option
@json_flag
def provider_set_key(name: str, variable: str, fmt: str, as_json: bool) -> None:
    """Store the provider's key, read from stdin, in secrets.toml; then reload the providers.

    Read from stdin, never the command line (which other users can see); written to `$COMPOZY_HOME/secrets.toml`
    (0600, never config.toml). Sessions started from now on have it; live ones keep the environment they started
    with. VARIABLE defaults to the provider's key variable (`compozy provider show NAME`); an empty stdin removes it.

    Examples:

        printf %s "$ANTHROPIC_API_KEY" | compozy provider set-key claude
        compozy provider set-key codex OPENAI_API_KEY   # then paste the key and press Enter
    """
    fmt = _fmt(fmt, as_json)
    if sys.stdin.isatty():
        click.echo(f"paste the key for {name}, then Enter:", err=True)
        value = sys.stdin.readline().strip()
    else:
        value = sys.stdin.read().strip()
    if "\n" in value:
        fail("the key must be one line", "invalid_secret", fmt, EXIT_USAGE)
    data = api_call(fmt, "PUT", f"/api/providers/{seg(name)}/key", {"variable": variable, "value": value})

    def human() -> None:
        p = data["provider"]
        what = "removed" if not value else "set"
        click.echo(f"{p['name']}: {variable or p['key_env']} {what} in secrets.toml; providers reloaded "
                   f"(auth: {AUTH.get(p['auth'], p['auth'])})")

    emit(data, fmt, human)


@provider.command("login")
@click.argument("name")
@click.option("--method", default="", help="An auth method id the agent offers (`compozy provider test NAME` "
              "lists them); default: the one sessions would choose, else the first.")
@output_option
@json_flag
def provider_login(name: str, method: str, fmt: str, as_json: bool) -> None:
    """Log the provider's agent in through ACP `authenticate`, with one of the methods it offers at `initialize`.
    Exits 1 when the agent offers none, refuses, or the method is a terminal one (its command is printed: run it in
    a terminal).

    Examples:

        compozy provider login codex --method chat-gpt
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", f"/api/providers/{seg(name)}/login", {"method": method}, timeout=PROBE_TIMEOUT)

    def human() -> None:
        for offered in data["auth_methods"]:
            click.echo(f"offered: {offered['how']}")
        if data["ok"]:
            click.echo(f"{name}: logged in with {data['method']}")

    emit(data, fmt, human)
    if not data["ok"]:
        fail(f"provider {name}: {data['error']}", "provider_login_failed", fmt, 1)


@agent.command("list")
@output_option
@json_flag
def agent_list(fmt: str, as_json: bool) -> None:
    """Every agent, its provider, model and permission policy, and whether its provider can start.

    `-o json` prints `{agents: [{name, provider, model, permissions, default, provider_found, provider_auth}]}`.

    Examples:

        compozy agent list
        compozy agent list -o json | jq -r '.agents[].name'
    """
    from compozy.cli.events_view import fit_table, terminal_width

    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "GET", "/api/agents")

    def human() -> None:
        rows = [(("* " if a["default"] else "") + a["name"], a["provider"], a["model"] or "-", a["permissions"],
                 FOUND.get(a["provider_found"], a["provider_found"]), AUTH.get(a["provider_auth"], a["provider_auth"]))
                for a in data["agents"]]
        for line in fit_table(["AGENT", "PROVIDER", "MODEL", "PERMISSIONS", "FOUND", "AUTH"], rows, {"MODEL"},
                              terminal_width()):
            click.echo(line)

    emit(data, fmt, human, rows=data["agents"])


@daemon.command("reload")
@output_option
@json_flag
def daemon_reload(fmt: str, as_json: bool) -> None:
    """Reload `[providers.*]` and `[agents.*]` from config.toml (and the keys in secrets.toml) without a restart.

    Live sessions keep running as they started. A file a start would refuse is refused whole with its one-line
    error (exit 78) and the daemon keeps what it had. `kill -HUP <pid>` does the same.

    Examples:

        compozy daemon reload
        compozy daemon reload -o json | jq .reload.added
    """
    fmt = _fmt(fmt, as_json)
    data = api_call(fmt, "POST", "/api/daemon/reload")

    def human() -> None:
        r = data["reload"]
        click.echo(f"reloaded {r['source']}: {len(r['providers'])} provider(s), {len(r['agents'])} agent(s)")
        for label in ("added", "removed", "changed"):
            if r[label]:
                click.echo(f"  {label}: {', '.join(r[label])}")

    emit(data, fmt, human)
