"""`[sandbox]`: how agents and the commands they run through our terminals are confined (docs/security.md).

Whoever controls an agent's output controls the agent; the daemon that supervises it must stay out of its reach.
On Linux each agent and each client terminal runs under bubblewrap: `$COMPOZY_HOME` (the token, the socket, other
sessions' folders, config and secrets) is hidden, the session's workspace roots are writable, `$HOME` stays
writable (an agent's own config and cache live there: Claude Code's `~/.claude`, Codex's `~/.codex`), and the rest
of the filesystem is read-only.

```toml
[sandbox]
mode = "auto"        # auto: bubblewrap when found, else the weaker mode (a doctor warning); off; required
network = true       # the agents' network; `[agents.NAME] network = false` cuts one agent's
writable = []        # more paths the agents may write (absolute)
hidden = []          # more paths they must not see at all (absolute)
expose = []          # paths under $COMPOZY_HOME shown to them again, writable (a test harness's agent files)
```
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from compozy_base.config.errors import ConfigError
from compozy_base.config.values import boolean


class SandboxMode(StrEnum):
    AUTO = "auto"  # bubblewrap when it is installed; the weaker mode, warned about, when not
    OFF = "off"  # never: the agents run as the daemon's user sees the machine
    REQUIRED = "required"  # an agent that cannot be confined does not start (startup_failure, saying why)


@dataclass(frozen=True)
class SandboxConfig:
    mode: SandboxMode = SandboxMode.AUTO
    network: bool = True
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    expose: tuple[Path, ...] = ()


def _paths(value: object, key: str) -> tuple[Path, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}: must be a list of absolute paths")
    paths = tuple(Path(v) for v in value)
    for path in paths:
        if not path.is_absolute():
            raise ConfigError(f"{key}: {str(path)[:200]!r} is not an absolute path")
    return paths


def parse_sandbox(table: dict[str, Any]) -> SandboxConfig:
    try:
        mode = SandboxMode(str(table.get("mode", "auto")))
    except ValueError:
        raise ConfigError(f"sandbox.mode: must be one of {', '.join(SandboxMode)}") from None
    return SandboxConfig(
        mode=mode,
        network=boolean(table.get("network", True), "sandbox.network"),
        writable=_paths(table.get("writable"), "sandbox.writable"),
        hidden=_paths(table.get("hidden"), "sandbox.hidden"),
        expose=_paths(table.get("expose"), "sandbox.expose"),
    )
