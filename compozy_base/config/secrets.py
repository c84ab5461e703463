"""`$COMPOZY_HOME/secrets.toml`: the providers' keys, kept apart from `config.toml` and owner-only.

Written by the daemon when a key is set (the dashboard's Providers page, `compozy provider set-key`), read at start
and on every reload, and laid over `[providers.NAME] env` (a key set here wins). Its shape:

    [providers.claude.env]
    ANTHROPIC_API_KEY = "sk-ant-…"

The file is refused unless it is the owner's alone (0600): a key readable by others is a key given away. Values are
registered as secrets, so they are redacted from events, logs and evidence bundles, and no API answer carries them
(only the variables' names).
"""

from __future__ import annotations

import dataclasses
import re
import stat
from pathlib import Path

from compozy_base.config.agents import ProviderConfig
from compozy_base.config.checks import read_toml
from compozy_base.config.errors import ConfigError
from compozy_base.files import atomic_write

SECRETS_FILE = "secrets.toml"
# An environment variable's name as a shell takes it: the file is written by hand too, and a name with a space or
# `=` would reach the agent's environment as something else.
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A key is one line of printable text; 4 KiB leaves room for the longest tokens we know (JWTs, ~2 KiB).
MAX_VALUE_CHARS = 4096

# provider name -> variable -> value
Secrets = dict[str, dict[str, str]]


def secrets_path(home: Path) -> Path:
    return home / SECRETS_FILE


def read_secrets(home: Path) -> Secrets:
    """The providers' keys in `home`'s secrets.toml ({} when there is none); ConfigError naming the offending key."""
    path = secrets_path(home)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    if stat.S_IMODE(mode) & 0o077:
        raise ConfigError(f"{path}: must be readable by its owner only (chmod 600 {path})")
    data = read_toml(path) or {}
    unknown = [key for key in data if key != "providers"]
    if unknown:
        raise ConfigError(f"secrets.toml: unknown table {unknown[0]!r:.60} (it holds [providers.NAME.env] only)")
    providers = data.get("providers", {})
    if not isinstance(providers, dict):
        raise ConfigError("secrets.toml: [providers] must be a table")
    secrets: Secrets = {}
    for name, body in providers.items():
        where = f"secrets.toml: providers.{name}"
        if not isinstance(body, dict) or set(body) - {"env"} or not isinstance(body.get("env", {}), dict):
            raise ConfigError(f"{where}: must hold an env table only ([providers.{name}.env])")
        secrets[name] = {variable: check_value(value, f"{where}.env.{variable}")
                         for variable, value in body.get("env", {}).items() if check_variable(variable, where)}
    return secrets


def check_variable(variable: str, where: str) -> bool:
    if not VARIABLE.match(variable):
        raise ConfigError(f"{where}: {variable!r:.60} is not an environment variable's name")
    return True


def check_value(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE_CHARS or not value.isprintable():
        raise ConfigError(f"{where}: must be one line of printable text, 1 to {MAX_VALUE_CHARS} characters")
    return value


def write_secret(home: Path, provider: str, variable: str, value: str) -> Secrets:
    """Set (or with value "" remove) one provider's variable, the file replaced atomically and born 0600."""
    check_variable(variable, f"providers.{provider}")
    secrets = read_secrets(home)
    env = secrets.setdefault(provider, {})
    if value:
        env[variable] = check_value(value, f"providers.{provider}.env.{variable}")
    else:
        env.pop(variable, None)
    secrets = {name: env for name, env in secrets.items() if env}
    atomic_write(secrets_path(home), render(secrets), mode=0o600)
    return secrets


def render(secrets: Secrets) -> str:
    lines = ["# Written by compozy (the Providers page, `compozy provider set-key`): the providers' keys. Owner-only."]
    for name in sorted(secrets):
        lines += ["", f"[providers.{_toml_key(name)}.env]"]
        lines += [f"{variable} = {_toml_string(value)}" for variable, value in sorted(secrets[name].items())]
    return "\n".join(lines) + "\n"


def _toml_key(name: str) -> str:
    return name if re.match(r"^[A-Za-z0-9_-]+$", name) else _toml_string(name)


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def overlay(providers: dict[str, ProviderConfig], secrets: Secrets) -> dict[str, ProviderConfig]:
    """The providers with their keys from secrets.toml laid over their env (a key set here wins over config.toml);
    a provider that secrets.toml names but no config defines is refused."""
    for name in secrets:
        if name not in providers:
            raise ConfigError(f"secrets.toml: providers.{name}: no provider named {name!r:.60} "
                              f"(known: {', '.join(sorted(providers))})")
    return {name: dataclasses.replace(provider, env={**provider.env, **secrets[name]},
                                      secret_env=tuple(sorted(secrets[name])))
            if secrets.get(name) else provider for name, provider in providers.items()}


def secret_values(providers: dict[str, ProviderConfig]) -> list[str]:
    """The values secrets.toml gave the providers: what the daemon registers for redaction."""
    return [provider.env[variable] for provider in providers.values() for variable in provider.secret_env]
