"""`[agents.heartbeat]` (docs/reference/config.md §5): cadence, rate limits, retention and stale thresholds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from compozy_base.config.errors import ConfigError
from compozy_base.config.values import parse_duration


@dataclass(frozen=True)
class HeartbeatConfig:
    enabled: bool = True
    max_body_bytes: int = 32768
    context_projection_bytes: int = 4096
    min_interval: float = 300.0
    default_interval: float = 1800.0
    wake_cooldown: float = 60.0
    max_wakes_per_cycle: int = 25
    active_session_only: bool = True
    allow_active_hours_preferences: bool = True
    wake_event_retention: float = 168 * 3600.0
    session_health_stale_after: float = 120.0
    session_health_hook_min_interval: float = 60.0

    def digest_subset(self) -> dict[str, Any]:
        """The resolved keys a policy digest covers: a config change re-resolves every snapshot."""
        return asdict(self)


_DURATIONS = ("min_interval", "default_interval", "wake_cooldown", "wake_event_retention",
              "session_health_stale_after", "session_health_hook_min_interval")
_BOOLS = ("enabled", "active_session_only", "allow_active_hours_preferences")


def _values(raw: dict[str, Any], d: HeartbeatConfig) -> dict[str, Any]:
    """Each key of the table checked on its own (the booleans, the durations, then the integers), defaults filled."""
    values: dict[str, Any] = {}
    for key in _BOOLS:
        value = raw.get(key, getattr(d, key))
        if not isinstance(value, bool):
            raise ConfigError(f"agents.heartbeat.{key}: must be true or false")
        values[key] = value
    for key in _DURATIONS:
        value = parse_duration(raw.get(key, getattr(d, key)), f"agents.heartbeat.{key}")
        if value <= 0:
            raise ConfigError(f"agents.heartbeat.{key}: must be greater than zero")
        values[key] = value
    for key, low, high in (("max_body_bytes", 1, 1048576), ("context_projection_bytes", 1, 1048576),
                           ("max_wakes_per_cycle", 1, 1_000_000)):
        value = raw.get(key, getattr(d, key))
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"agents.heartbeat.{key}: must be an integer in {low}..{high}")
        values[key] = value
    return values


def parse_heartbeat(raw: object) -> HeartbeatConfig:
    """Validate the table; unknown keys are refused so a typo never silently keeps a default."""
    if raw is None:
        return HeartbeatConfig()
    if not isinstance(raw, dict):
        raise ConfigError("[agents.heartbeat] must be a table")
    d = HeartbeatConfig()
    unknown = set(raw) - set(asdict(d))
    if unknown:
        raise ConfigError(f"agents.heartbeat: unknown key(s) {', '.join(sorted(unknown))}")
    cfg = HeartbeatConfig(**_values(raw, d))
    if cfg.context_projection_bytes > cfg.max_body_bytes:
        raise ConfigError("agents.heartbeat.context_projection_bytes must not exceed max_body_bytes")
    if cfg.min_interval > cfg.default_interval:
        raise ConfigError("agents.heartbeat.min_interval must not exceed default_interval")
    if cfg.wake_event_retention < 3600:
        raise ConfigError("agents.heartbeat.wake_event_retention must be at least 1h")
    return cfg
