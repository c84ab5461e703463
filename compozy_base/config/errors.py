"""The one config error: config.toml (or a value in it) is invalid; the daemon refuses to start and prints it."""

from __future__ import annotations


class ConfigError(ValueError):
    """config.toml is invalid; the daemon refuses to start and prints this message."""
