"""`[memory]`: the snapshot each session starts with, the memory tools handed to agents, and dreams' gates
(docs/reference/memory.md).

```toml
[memory]
enabled = true              # the snapshot in the first prompt and the memory MCP server per session
snapshot_max_chars = 8000   # the snapshot's bound (whole entries; the rest is left out, and said)

[memory.dream]
auto = true                 # the daemon starts a dream by itself when a workspace's gates pass
check_every = "5m"          # how often it looks
agent = ""                  # the agent a dream runs (default: [defaults] agent)
min_interval = "24h"        # since the workspace's last dream
min_sessions = 5            # sessions of the workspace completed since then
min_candidates = 3          # recalled-but-unpromoted entries
```
Set the three minimums to 0 to let any trigger through (a test, or a person who wants a dream now); the daemon
itself starts a dream only for a workspace with at least one recalled-but-unpromoted entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compozy_base.config.errors import ConfigError
from compozy_base.config.values import boolean, integer, parse_duration


@dataclass(frozen=True)
class DreamConfig:
    auto: bool = True
    check_every: float = 300.0
    agent: str = ""
    min_interval: float = 24 * 3600.0
    min_sessions: int = 5
    min_candidates: int = 3


@dataclass(frozen=True)
class MemoryConfig:
    enabled: bool = True
    snapshot_max_chars: int = 8000
    dream: DreamConfig = field(default_factory=DreamConfig)


def parse_memory(table: dict[str, Any]) -> MemoryConfig:
    dream = table.get("dream", {})
    if not isinstance(dream, dict):
        raise ConfigError("[memory.dream] must be a table")
    agent = dream.get("agent", "")
    if not isinstance(agent, str):
        raise ConfigError("memory.dream.agent: must be an agent's name")
    return MemoryConfig(
        enabled=boolean(table.get("enabled", True), "memory.enabled"),
        snapshot_max_chars=integer(table.get("snapshot_max_chars", 8000), "memory.snapshot_max_chars", 0, 200_000),
        dream=DreamConfig(auto=boolean(dream.get("auto", True), "memory.dream.auto"),
                          check_every=_check_every(dream.get("check_every", "5m")), agent=agent,
                          min_interval=parse_duration(dream.get("min_interval", "24h"), "memory.dream.min_interval"),
                          min_sessions=integer(dream.get("min_sessions", 5), "memory.dream.min_sessions", 0, 10_000),
                          min_candidates=integer(dream.get("min_candidates", 3), "memory.dream.min_candidates",
                                                 0, 10_000)))


def _check_every(value: object) -> float:
    seconds = parse_duration(value, "memory.dream.check_every")
    if not 1.0 <= seconds <= 86400.0:
        raise ConfigError("memory.dream.check_every: must be between 1s and 24h")
    return seconds
