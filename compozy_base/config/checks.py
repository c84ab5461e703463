"""Reading `config.toml` with bounds, and the keys it may hold.

The file is read once at start, at most 1 MiB and 32 levels deep: a 5000-deep array made tomllib recurse out of the
start with a traceback. A table or key the daemon does not know is warned about, never silently ignored: a typo in
`[session.supervision]` kept the defaults without a word. The warning names the nearest known key (difflib), in the
start's log and output and in `compozy doctor`.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compozy_base.config.errors import ConfigError
from compozy_base.nesting import MAX_DEPTH, too_deep

MAX_CONFIG_BYTES = 1024 * 1024

# What each table may hold: a nested dict is a table, None a value. "*" stands for any name (an agent, a provider);
# FREE for a table whose keys are the user's own (environment maps) or that its own reader checks key by key and
# refuses what it does not know (`[agents.heartbeat]`, hook declarations).
FREE: dict[str, Any] = {}
_SUPERVISION = ("activity_heartbeat_interval", "progress_notify_interval", "inactivity_warning_after",
                "inactivity_timeout", "timeout_cancel_grace", "quiet_after", "stop_grace", "quiet_notice_after",
                "quiet_attention_after")
SCHEMA: dict[str, Any] = {
    "http": dict.fromkeys(("host", "port", "allow_remote", "allowed_hosts", "max_body_bytes", "header_timeout",
                           "body_timeout", "idle_timeout", "stream_stall_timeout", "max_connections",
                           "max_connections_per_peer")),
    "daemon": {"socket": None},
    "defaults": dict.fromkeys(("agent", "provider")),
    "permissions": {"mode": None},
    "session": {
        "supervision": dict.fromkeys(_SUPERVISION),
        "busy_input": dict.fromkeys(("default_mode", "queue_cap", "max_text_bytes")),
        "limits": {"timeout": None},
        "stop": dict.fromkeys(("cancel_grace", "kill_grace", "closed_stdout_grace")),
        "store": {"write_deadline": None},
    },
    "limits": {"max_concurrent_agents": None, "max_cost_usd": None, "max_terminals_per_session": None},
    "sandbox": dict.fromkeys(("mode", "network", "writable", "hidden", "expose")),
    "memory": {"enabled": None, "snapshot_max_chars": None,
               "dream": dict.fromkeys(("auto", "check_every", "agent", "min_interval", "min_sessions",
                                        "min_candidates"))},
    # Each server's keys are checked by its own reader (compozy_base/config/mcp_servers.py), which refuses others.
    "mcp": {"servers": FREE},
    # `fallback_chain` is an array of tables, each checked key by key by its reader (compozy_base/config/loader.py).
    "roles": {"auto_title": dict.fromkeys(("enabled", "agent", "provider", "model", "reasoning_effort",
                                           "fallback_chain"))},
    "redact": {"enabled": None},
    "tasks": {"lease_ttl": None, "isolation": None},
    "workspaces": {"allow_hard_links": None},
    "worktrees": {"max_disk": None},
    "agents": {"heartbeat": FREE,
               "*": {**dict.fromkeys(("provider", "model", "reasoning_effort", "permissions", "prompt", "isolation",
                                      "max_cost_usd", "network")),
                     "mcp_servers": FREE}},
    "providers": {"*": {"command": None, "args": None, "env": FREE, "display_name": None, "models": {"default": None},
                        "auth_method": None, "ask_mode": None, "key_env": None}},
    "hooks": {"declarations": FREE},
    "cluster": dict.fromkeys(("node_id", "lease_ttl", "advertise_url", "tls_cert", "tls_key", "ca")),
    # Each webhook's keys are checked by its own reader (compozy_base/config/notifications.py), which refuses others.
    "notifications": {"webhooks": FREE, **dict.fromkeys(("retry_min", "retry_max", "max_attempts", "timeout",
                                                       "action_links", "link_ttl"))},
}


@dataclass(frozen=True)
class UnknownKey:
    """A table or key of config.toml the daemon does not read, and the known key it was probably meant to be."""

    key: str  # dotted, as TOML would spell it: `session.supervision.quiet_afer`
    table: bool
    suggestion: str = ""  # dotted too; "" when nothing is near

    def message(self) -> str:
        what = "table" if self.table else "key"
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return f"unknown {what} {self.key} (ignored{hint})"


def _leaves(schema: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Every known key's last name → its dotted path (the first one wins), for a key put in the wrong table."""
    out: dict[str, str] = {}
    for name, sub in schema.items():
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(sub, dict) and sub is not FREE:
            for leaf, where in _leaves(sub, path).items():
                out.setdefault(leaf, where)
        out.setdefault(name, path)
    return out


_LEAVES = _leaves(SCHEMA)


def _suggest(name: str, known: list[str], prefix: str) -> str:
    near = difflib.get_close_matches(name, [k for k in known if k != "*"], n=1, cutoff=0.6)
    if near:
        return f"{prefix}.{near[0]}" if prefix else near[0]
    elsewhere = _LEAVES.get(name, "")
    return elsewhere if elsewhere and elsewhere != (f"{prefix}.{name}" if prefix else name) else ""


def unknown_keys(data: dict[str, Any], schema: dict[str, Any] = SCHEMA, prefix: str = "") -> list[UnknownKey]:
    """The tables and keys of `data` that `schema` does not know, in file order."""
    found: list[UnknownKey] = []
    for name, value in data.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        sub = schema.get(name, schema.get("*", ...))
        if sub is ...:
            found.append(UnknownKey(path, isinstance(value, dict), _suggest(str(name), list(schema), prefix)))
        elif isinstance(sub, dict) and sub is not FREE and isinstance(value, dict):
            found += unknown_keys(value, sub, path)
    return found


def read_toml(path: Path) -> dict[str, Any] | None:
    """config.toml parsed, or None when there is none; ConfigError naming the file (and the key when it can)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    except RecursionError:
        key = deep_value_key(text)
        raise ConfigError(f"{key + ': ' if key else ''}nested deeper than {MAX_DEPTH} levels ({path})") from None
    deep = too_deep(data)
    if deep is not None:
        raise ConfigError(f"{_cut(deep)}: nested deeper than {MAX_DEPTH} levels ({path})")
    return data


def _cut(key: str, limit: int = 80) -> str:
    return key if len(key) <= limit else key[:limit - 1] + "…"


def deep_value_key(text: str, limit: int = MAX_DEPTH) -> str:
    """The dotted key whose value nests arrays or inline tables past `limit`, found by a scan that skips strings
    and comments (tomllib recursed out before it could say where); "" when the scan finds none."""
    table, key, depth, i, n = "", "", 0, 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start, i = True, i + 1
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "#":
            i = _line_end(text, i)
            continue
        if depth == 0 and at_line_start:
            at_line_start = False
            end = _line_end(text, i)
            if c == "[":  # a table header: [a.b] or [[a.b]]
                table, key = text[i:end].split("#", 1)[0].strip().strip("[]").strip(), ""
                i = end
                continue
            eq = text.find("=", i, end)
            if eq < 0:
                i = end
                continue
            key, i = text[i:eq].strip().strip("\"'"), eq + 1
            continue
        if c in "\"'":
            i = _string_end(text, i)
            continue
        if c in "[{":
            depth += 1
            if depth > limit:
                return _cut(f"{table}.{key}" if table else key)
        elif c in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return ""


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _string_end(text: str, i: int) -> int:
    """Just past the string that starts at `i`: basic or literal, one line or three quotes."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        return len(text) if end < 0 else end + 3
    j = i + 1
    while j < len(text) and text[j] not in (quote, "\n"):
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1
