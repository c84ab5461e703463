"""MCP servers an agent is handed at `session/new`, `session/load` and `session/resume` (`[agents.NAME] mcp_servers`).

```toml
[[agents.reviewer.mcp_servers]]
name = "files"
command = "/usr/local/bin/mcp-files"          # stdio: every ACP agent supports it
args = ["--root", "/srv/docs"]
env = { FILES_TOKEN = "…" }

[[agents.reviewer.mcp_servers]]
name = "tracker"
type = "http"                                  # or "sse": handed only to an agent that says it supports them
url = "https://tracker.example/mcp"
headers = { Authorization = "Bearer …" }
```

Env and header values are secrets: the daemon registers them for redaction, so they never reach an event, a log, a
crash bundle or an evidence archive, and no API answer carries them.

Central servers, for every agent or the agents and workspaces they name (`[[mcp.servers]]`, `parse_central`): the
same keys, plus `agents` and `workspaces` filters (absent: every one) and `env_from` / `headers_from`, whose values
name variables of the daemon's own environment, read at start (a secret kept out of config.toml):

```toml
[[mcp.servers]]
name = "tracker"
type = "http"
url = "https://tracker.example/mcp"
headers_from = { Authorization = "TRACKER_AUTH" }   # the value of $TRACKER_AUTH when the daemon starts
agents = ["reviewer"]                                 # only these agents' sessions
workspaces = ["/srv/app"]                             # only sessions in these workspaces (paths)
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from compozy_base.config.errors import ConfigError
from compozy_base.config.values import string_table

TRANSPORTS = ("stdio", "http", "sse")


@dataclass(frozen=True)
class McpServer:
    name: str
    type: str = "stdio"
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    def secrets(self) -> list[str]:
        return [*self.env.values(), *self.headers.values()]

    def to_acp(self) -> dict[str, Any]:
        """The server as ACP's `McpServer` union: stdio has no `type`, http and sse do."""
        if self.type == "stdio":
            return {"name": self.name, "command": self.command, "args": list(self.args),
                    "env": [{"name": k, "value": v} for k, v in self.env.items()]}
        return {"type": self.type, "name": self.name, "url": self.url,
                "headers": [{"name": k, "value": v} for k, v in self.headers.items()]}


def parse(raw: object, key: str, environ: Mapping[str, str] | None = None) -> tuple[McpServer, ...]:
    """`[[agents.NAME.mcp_servers]]`; a clear ConfigError naming the key for anything it cannot use."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{key}: expected an array of tables ([[{key}]])")
    servers: list[McpServer] = []
    for i, body in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: expected a table")
        name, kind = body.get("name"), body.get("type", "stdio")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name: required, a non-empty string")
        if name in {s.name for s in servers}:
            raise ConfigError(f"{where}.name: {name!r} is named twice")
        if kind not in TRANSPORTS:
            raise ConfigError(f"{where}.type: must be one of {', '.join(TRANSPORTS)}, got {kind!r:.60}")
        server = _stdio(body, name, where) if kind == "stdio" else _remote(body, name, kind, where)
        if environ is not None:
            server = _from_env(server, body, where, environ)
        servers.append(server)
    return tuple(servers)


@dataclass(frozen=True)
class CentralServer:
    """A `[[mcp.servers]]` entry: the server and whom it is for (empty: everyone)."""

    server: McpServer
    agents: tuple[str, ...] = ()
    workspaces: tuple[str, ...] = ()

    def applies(self, agent: str, workspace_root: str) -> bool:
        return (not self.agents or agent in self.agents) and (not self.workspaces or workspace_root in self.workspaces)


CENTRAL_KEYS = frozenset({"name", "type", "command", "args", "env", "url", "headers", "env_from", "headers_from",
                          "agents", "workspaces"})


def parse_central(raw: object, environ: Mapping[str, str]) -> tuple[CentralServer, ...]:
    """`[[mcp.servers]]`: as `[[agents.NAME.mcp_servers]]`, plus the filters and the values from the environment."""
    servers = parse(raw, "mcp.servers", environ)
    central: list[CentralServer] = []
    for i, (server, body) in enumerate(zip(servers, raw or [], strict=True)):  # type: ignore[call-overload]
        where = f"mcp.servers[{i}]"
        unknown = set(body) - CENTRAL_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        central.append(CentralServer(server, _names(body.get("agents"), f"{where}.agents"),
                                     _names(body.get("workspaces"), f"{where}.workspaces", paths=True)))
    return tuple(central)


def _names(value: object, key: str, paths: bool = False) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}: expected a list of {'absolute paths' if paths else 'names'}")
    if paths and not all(v.startswith("/") for v in value):
        raise ConfigError(f"{key}: workspaces are named by their absolute paths")
    return tuple(v.rstrip("/") or "/" for v in value) if paths else tuple(value)


def _from_env(server: McpServer, body: Mapping[str, Any], where: str, environ: Mapping[str, str]) -> McpServer:
    """`env_from` / `headers_from`: each value names a variable of the daemon's environment, read now."""
    def read(field_name: str) -> dict[str, str]:
        names = string_table(body.get(field_name), f"{where}.{field_name}")
        missing = [v for v in names.values() if v not in environ]
        if missing:
            raise ConfigError(f"{where}.{field_name}: the daemon's environment has no {', '.join(missing)}")
        return {k: environ[v] for k, v in names.items()}

    env, headers = read("env_from"), read("headers_from")
    if server.type == "stdio" and headers:
        raise ConfigError(f"{where}.headers_from: only an http or sse server takes headers")
    if server.type != "stdio" and env:
        raise ConfigError(f"{where}.env_from: only a stdio server takes an environment")
    return replace(server, env={**server.env, **env}, headers={**server.headers, **headers})


def describe(server: McpServer) -> dict[str, Any]:
    """What `compozy mcp list` shows: everything but the secrets' values (their names only)."""
    return {"name": server.name, "type": server.type, "command": server.command, "args": list(server.args),
            "url": server.url, "env": sorted(server.env), "headers": sorted(server.headers)}


def _stdio(body: Mapping[str, Any], name: str, where: str) -> McpServer:
    command, args = body.get("command"), body.get("args", [])
    if not isinstance(command, str) or not command:
        raise ConfigError(f"{where}.command: required for a stdio server, a non-empty string")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}.args: expected a list of strings")
    env = string_table(body.get("env"), f"{where}.env")
    return McpServer(name, "stdio", command=command, args=tuple(args), env=env)


def _remote(body: Mapping[str, Any], name: str, kind: str, where: str) -> McpServer:
    url = body.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url: required for an {kind} server, an http(s) URL")
    return McpServer(name, kind, url=url, headers=string_table(body.get("headers"), f"{where}.headers"))


def for_agent(servers: tuple[McpServer, ...], capabilities: Mapping[str, Any]) -> tuple[list[dict[str, Any]],
                                                                                        list[str]]:
    """The `mcpServers` param for this agent and the names left out because it does not support their transport
    (its `initialize` answer's `mcpCapabilities`; stdio is always supported)."""
    handed, skipped = [], []
    for server in servers:
        if server.type == "stdio" or capabilities.get(server.type) is True:
            handed.append(server.to_acp())
        else:
            skipped.append(f"{server.name} ({server.type})")
    return handed, skipped
