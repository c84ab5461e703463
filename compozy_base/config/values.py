"""Value checks shared by every file the daemon reads settings from (`config.toml` and its hook declarations,
HEARTBEAT.md): Go-style durations (`30s`, `10m`, `1h30m`) and tables of strings. One home, imported by each
reader, so no reader needs another's module."""

from __future__ import annotations

import math
import re

from compozy_base.config.errors import ConfigError

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


def integer(value: object, key: str, low: int, high: int) -> int:
    """A TOML integer in `low..high`. `2123.5` was truncated to 2123 and `"abc"` ended the start in a traceback."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{key}: must be an integer in {low}..{high}, got {value!r:.60}")
    return value


def port(value: object, key: str, *, text: bool = False) -> int:
    """A TCP port (0 = any free one); with `text` (an environment variable) a decimal integer written out."""
    if text and isinstance(value, str):
        written = value.strip()
        if not written.isascii() or not written.isdigit():
            raise ConfigError(f"{key}: must be an integer in 0..65535, got {value!r:.60}")
        value = int(written)
    return integer(value, key, 0, 65535)


def boolean(value: object, key: str) -> bool:
    """true or false: `enabled = "no"` read as True."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: must be true or false, got {value!r:.60}")
    return value


def money(value: object, key: str) -> float:
    """An amount (`max_cost_usd = 25` or `2.5`), 0 when absent (no cap). TOML has `nan` and `inf`: a NaN cap is
    reached by no cost, and an infinite one is no cap that says so, so both are refused."""
    if value is None:
        return 0.0
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer past any float
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{key}: must be a finite, non-negative number, got {value!r:.60}")
    return number


def string(value: object, key: str) -> str:
    """A TOML string; "" when absent."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{key}: must be a string, got {value!r:.60}")
    return value


_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
               "G": 1024**3, "GB": 1024**3, "GIB": 1024**3, "T": 1024**4, "TB": 1024**4, "TIB": 1024**4}


def parse_size(value: object, key: str) -> int:
    """A size in bytes: an integer, or a string like `20GB` / `512 MiB` (units of 1024)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size such as 20GB")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{key}: must not be negative")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a size such as 20GB")
    text = value.strip().upper().replace(" ", "")
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    try:
        amount = float(number)
    except ValueError:
        raise ConfigError(f"{key}: expected a size such as 20GB, got {value!r:.40}") from None
    if unit not in _SIZE_UNITS or amount < 0:
        raise ConfigError(f"{key}: expected a size such as 20GB, got {value!r:.40}")
    return int(amount * _SIZE_UNITS[unit])
