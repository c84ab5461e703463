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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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


def parse(raw: object, key: str) -> tuple[McpServer, ...]:
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
        servers.append(_stdio(body, name, where) if kind == "stdio" else _remote(body, name, kind, where))
    return tuple(servers)


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
