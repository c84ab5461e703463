"""Value checks shared by every file the daemon reads settings from (`config.toml` and its hook declarations,
HEARTBEAT.md): Go-style durations (`30s`, `10m`, `1h30m`) and tables of strings. One home, imported by each
reader, so no reader needs another's module."""

from __future__ import annotations

import re

from sessions.errors import ConfigError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object, key: str) -> float:
    """Seconds from a Go-style duration string (or a bare number of seconds)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like '30s', got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: expected a duration like '30s', got {value!r}")
    text = value.strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ConfigError(f"{key}: invalid duration {value!r} (use Go syntax such as 30s, 10m, 1h30m)")
    return total


def string_table(value: object, key: str) -> dict[str, str]:
    """A TOML table whose values are all strings (environment maps); `{}` when absent."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{key}: expected a table of strings")
    return {str(k): v for k, v in value.items()}
