"""Who runs a session: the providers (an ACP adapter's command, env and npm fallback) and the agents (a provider
with a model, an effort, a permission policy, MCP servers, a cost cap and a network), built in and overlaid by
`[providers.NAME]` and `[agents.NAME]`. The loader (loader.py) checks what they name against each other."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from compozy_base.config import mcp_servers
from compozy_base.config.errors import ConfigError
from compozy_base.config.mcp_servers import McpServer
from compozy_base.config.values import boolean, money, string, string_table


@dataclass(frozen=True)
class NpmPackage:
    """A built-in provider's npm fallback, run as `npx -y <name>@<version> <args…>` when its executable is
    missing (`sessions/acp/launch.py`)."""

    name: str
    version: str
    args: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    default_model: str = ""
    display_name: str = ""
    npm: NpmPackage | None = None
    # The ACP auth method to `authenticate` with when the agent offers it (sessions/acp/auth.py); "" picks the first
    # env-var method whose variables are set.
    auth_method: str = ""
    # The agent's mode in which it asks the client before acting (claude-agent-acp: `default`; it opens in `auto`,
    # where it decides alone). A new session starts in it unless the permission policy is approve-all.
    ask_mode: str = ""
    # The environment variable that holds its API key (`[providers.NAME] key_env`): what `compozy provider` and the
    # Providers page check and set, and what an auth failure names. "": none known (the demo agent needs none).
    key_env: str = ""
    # The env variables secrets.toml set (compozy_base/config/secrets.py): named in answers, their values never.
    secret_env: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentConfig:
    name: str
    provider: str = ""
    model: str = ""
    reasoning_effort: str = ""
    permissions: str = ""
    prompt: str = ""
    # Handed to the agent at session/new, load and resume (compozy_base/config/mcp_servers.py).
    mcp_servers: tuple[McpServer, ...] = ()
    max_cost_usd: float = 0.0  # this agent's sessions' cost cap (0: `[limits] max_cost_usd`)
    network: bool | None = None  # its sandbox's network (`[agents.NAME] network`); None: `[sandbox] network`
    isolation: str = ""  # `none` or `worktree` (docs/reference/worktrees.md); "": a create's own, else none


# Pinned npm packages of the built-in adapters (`npm view <package> version`, 2026-11-30). Pinned, not
# @latest: an adapter release can change what a session runs between two starts of the same session.
NPM_PACKAGES = {
    "claude": NpmPackage("@agentclientprotocol/claude-agent-acp", "0.101.0"),
    "codex": NpmPackage("@agentclientprotocol/codex-acp", "2.6.0"),
    "gemini": NpmPackage("@google/gemini-cli", "0.61.0", ("--acp",)),
    "opencode": NpmPackage("opencode-ai", "1.18.33", ("acp",)),
}


# Claude Code refuses to start as root ("--dangerously-skip-permissions cannot be used with root/sudo"), which is
# how most containers run it, unless IS_SANDBOX is exactly "1": the daemon is the sandbox's keeper (its permission
# policy decides, and `[sandbox]` confines the agent where bubblewrap is installed). `[providers.claude] env` may set
# it otherwise; the variable is harmless when not root.
CLAUDE_ENV = {"IS_SANDBOX": "1"}


def builtin_providers() -> dict[str, ProviderConfig]:
    """The demo agent runs with this interpreter, so it works wherever the package is installed.

    The third-party built-ins set no default model: each adapter starts on its own default, and the ids they
    offer (claude: default, opus, sonnet, haiku; gemini: none) are not ones we could name in advance."""
    return {
        "demo": ProviderConfig(
            "demo", (sys.executable, "-m", "sessions.acp.demo_agent"), default_model="demo-small",
            display_name="Compozy demo agent (offline)",
        ),
        "claude": ProviderConfig("claude", ("claude-agent-acp",), env=dict(CLAUDE_ENV), display_name="Claude Code",
                                 npm=NPM_PACKAGES["claude"], ask_mode="default", key_env="ANTHROPIC_API_KEY"),
        "codex": ProviderConfig("codex", ("codex-acp",), display_name="Codex", npm=NPM_PACKAGES["codex"],
                                key_env="OPENAI_API_KEY"),
        "gemini": ProviderConfig("gemini", ("gemini", "--acp"), display_name="Gemini CLI",
                                 npm=NPM_PACKAGES["gemini"], key_env="GEMINI_API_KEY"),
        "opencode": ProviderConfig("opencode", ("opencode", "acp"), display_name="opencode",
                                   npm=NPM_PACKAGES["opencode"]),
    }


def builtin_agents() -> dict[str, AgentConfig]:
    return {"general": AgentConfig("general")}


def _command(value: object, args: object, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        parts = shlex.split(value)
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise ConfigError(f"{key}.command: expected a string or a list of strings")
    if args is not None:
        if not isinstance(args, list) or not all(isinstance(v, str) for v in args):
            raise ConfigError(f"{key}.args: expected a list of strings")
        parts += args
    if not parts:
        raise ConfigError(f"{key}.command is required")
    return tuple(parts)


def parse_providers(raw: dict[str, Any]) -> dict[str, ProviderConfig]:
    providers = builtin_providers()
    for name, body in raw.items():
        key = f"providers.{name}"
        if not isinstance(body, dict):
            raise ConfigError(f"[{key}] must be a table")
        base = providers.get(name)
        if "command" in body:
            command = _command(body["command"], body.get("args"), key)
        elif base is not None:
            command = base.command + tuple(_command(base.command[0], body.get("args"), key)[1:])
        else:
            raise ConfigError(f"[{key}] needs a command (custom providers must name their executable)")
        models = body.get("models", {})
        providers[name] = ProviderConfig(
            name,
            command,
            env={**(base.env if base else {}), **string_table(body.get("env"), f"{key}.env")},
            default_model=str(models.get("default", "")) if isinstance(models, dict) and models.get("default")
            else (base.default_model if base else ""),
            display_name=str(body.get("display_name") or (base.display_name if base else name)),
            # A command of one's own replaces the built-in adapter, and with it the npm fallback.
            npm=base.npm if base is not None and command[:1] == base.command[:1] else None,
            auth_method=string(body.get("auth_method"), f"{key}.auth_method") or (base.auth_method if base else ""),
            ask_mode=string(body.get("ask_mode"), f"{key}.ask_mode") or (base.ask_mode if base else ""),
            key_env=string(body.get("key_env"), f"{key}.key_env") or (base.key_env if base else ""),
        )
    return providers


ISOLATIONS = ("none", "worktree")


def isolation(value: object, key: str) -> str:
    """`none` or `worktree`; "" when unset."""
    if value is None or value == "":
        return ""
    if value not in ISOLATIONS:
        raise ConfigError(f"{key}: must be none or worktree")
    return str(value)


def parse_agents(agents_table: dict[str, Any]) -> dict[str, AgentConfig]:
    """The built-in agents overlaid by `[agents.NAME]` tables (`[agents.heartbeat]` taken out already)."""
    agents = builtin_agents()
    for name, body in agents_table.items():
        if not isinstance(body, dict):
            raise ConfigError(f"[agents.{name}] must be a table")
        agents[name] = AgentConfig(
            name=name,
            provider=str(body.get("provider", "")),
            model=str(body.get("model", "")),
            reasoning_effort=str(body.get("reasoning_effort", "")),
            permissions=str(body.get("permissions", "")),
            prompt=str(body.get("prompt", "")),
            mcp_servers=mcp_servers.parse(body.get("mcp_servers"), f"agents.{name}.mcp_servers"),
            max_cost_usd=money(body.get("max_cost_usd"), f"agents.{name}.max_cost_usd"),
            network=boolean(body["network"], f"agents.{name}.network") if "network" in body else None,
            isolation=isolation(body.get("isolation"), f"agents.{name}.isolation"),
        )
    return agents


