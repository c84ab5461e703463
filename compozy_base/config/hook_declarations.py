"""Hook declarations as written in `config.toml` (`[[hooks.declarations]]`): checked key by key into
`HookDeclaration`s (docs/reference/hooks.md §2). Raises ConfigError naming the offending key.
`source="agent_definition"`
takes an agent definition's `hooks:` list the same way (nothing reads AGENT.md files yet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compozy_base.config.errors import ConfigError
from compozy_base.config.hook_spec import HOOK_SOURCE_PRIORITY, HookDeclaration, validate_declarations
from compozy_base.config.values import parse_duration, string_table

_HOOK_KEYS = frozenset({
    "name", "event", "mode", "required", "timeout", "priority", "enabled", "matcher", "secret_env",
    "command", "args", "env", "executor",
})
_EXECUTOR_KEYS = frozenset({"kind", "command", "args", "env"})
_EXECUTOR_KINDS = frozenset({"command", "subprocess"})


def _hook_strings(value: object, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key}: expected a list of strings")
    return tuple(value)


def _executor(item: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    """The table that holds the hook's command: its `executor` table, else the declaration itself."""
    if "executor" not in item:
        return item
    executor = item["executor"]
    if not isinstance(executor, dict):
        raise ConfigError(f"{key}.executor: expected a table")
    mixed = sorted({"command", "args", "env"} & set(item))
    if mixed:
        raise ConfigError(f"hook {name!r}: executor cannot be combined with top-level {mixed[0]!r}")
    unknown = sorted(set(executor) - _EXECUTOR_KEYS)
    if unknown:
        raise ConfigError(f"{key}.executor: unknown key {unknown[0]!r}")
    kind = executor.get("kind", "command")
    if kind not in _EXECUTOR_KINDS:
        raise ConfigError(f"{key}.executor.kind: only command hooks are supported, got {kind!r}")
    return executor


def _command(executor: dict[str, Any], name: str, key: str) -> tuple[str, tuple[str, ...]]:
    """The executable and its arguments. No shell: a list is argv; a string is one executable looked up on PATH."""
    command = executor.get("command")
    args = _hook_strings(executor.get("args"), f"{key}.args")
    if isinstance(command, list):
        argv = _hook_strings(command, f"{key}.command")
        command, args = (argv[0], argv[1:] + args) if argv else ("", args)
    if not isinstance(command, str) or not command:
        raise ConfigError(f"hook {name!r} needs a command")
    return command, args


def _hook_declaration(
    item: dict[str, Any], *, source: str, agent_scope: str, workspace_scope: str, cwd: Path | None
) -> HookDeclaration:
    name = item.get("name")
    event = item.get("event")
    if not isinstance(name, str) or not name.strip() or not isinstance(event, str) or not event.strip():
        raise ConfigError("every hook declaration needs a name and an event")
    key = f"hooks.{name}"
    unknown = sorted(set(item) - _HOOK_KEYS)
    if unknown:
        raise ConfigError(f"hook {name!r}: unknown key {unknown[0]!r}")
    mode = item.get("mode", "async")
    if mode not in {"sync", "async"}:
        raise ConfigError(f"hook {name!r}: mode must be sync or async")
    required = item.get("required", False)
    if not isinstance(required, bool):
        raise ConfigError(f"{key}.required: expected true or false")
    raw_timeout = item.get("timeout", "5s")
    if isinstance(raw_timeout, int | float) and not isinstance(raw_timeout, bool) and raw_timeout < 0:
        raise ConfigError(f"{key}.timeout: must not be negative")
    timeout = parse_duration(raw_timeout, f"{key}.timeout") or 5.0  # 0 means the default, as documented
    priority = item.get("priority", HOOK_SOURCE_PRIORITY.get(source, 0))
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ConfigError(f"{key}.priority: expected an integer")
    matcher = item.get("matcher", {})
    if not isinstance(matcher, dict):
        raise ConfigError(f"{key}.matcher: expected a table")

    executor = _executor(item, name, key)
    command, args = _command(executor, name, key)
    return HookDeclaration(
        name=name,
        event=event,
        command=command,
        args=args,
        env=string_table(executor.get("env"), f"{key}.env"),
        mode=mode,
        required=required,
        timeout=timeout,
        priority=priority,
        matcher=dict(matcher),
        source=source,
        secret_env=string_table(item.get("secret_env"), f"{key}.secret_env"),
        agent_scope=agent_scope,
        workspace_scope=workspace_scope,
        cwd=cwd,
    )


def parse_hook_declarations(
    raw: object,
    *,
    source: str = "config",
    agent_scope: str = "",
    workspace_scope: str = "",
    cwd: Path | None = None,
) -> tuple[HookDeclaration, ...]:
    """Hook declarations from config.toml (`source="config"`) or AGENT.md frontmatter (`"agent_definition"`,
    with `agent_scope`); `enabled = false` entries are dropped. Raises ConfigError (docs/reference/hooks.md §2)."""

    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("[[hooks.declarations]] must be an array of tables")
    seen: set[str] = set()
    hooks: list[HookDeclaration] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ConfigError("every hook declaration needs a name and an event")
        enabled = item.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"hooks.{item.get('name')}.enabled: expected true or false")
        if not enabled:
            continue
        decl = _hook_declaration(item, source=source, agent_scope=agent_scope, workspace_scope=workspace_scope,
                                 cwd=cwd)
        if decl.name in seen:
            raise ConfigError(f"hook {decl.name!r} is declared twice")
        seen.add(decl.name)
        hooks.append(decl)
    result = tuple(hooks)
    validate_declarations(result)
    return result
