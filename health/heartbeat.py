"""HEARTBEAT.md: parse, validate and evaluate an agent's authored wake policy (docs/reference/health.md §5).

Pure functions (no database, no clock of their own), so the grammar and the time windows are testable with
property tests. A file is optional; a present file is valid or it pauses wakes for its agent.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any, Literal, NotRequired, TypedDict
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from compozy_base.config.errors import ConfigError
from compozy_base.config.heartbeat import HeartbeatConfig
from compozy_base.config.values import parse_duration as go_duration
from compozy_base.nesting import MAX_DEPTH

SCHEMA_VERSION = 1
# The author's YAML frontmatter as loaded: free-form, checked key by key below (`_policy`).
Frontmatter = dict[str, Any]


class Diagnostic(TypedDict):
    """One problem (or warning) of a HEARTBEAT.md, as `heartbeat inspect`, the API and the snapshot row show it."""

    code: str
    severity: str  # error or warning
    message: str
    field: NotRequired[str]
    line: NotRequired[int]
    source_path: NotRequired[str]  # the file it is about (health/policy.py)


class WindowDoc(TypedDict):
    timezone: str
    start: str  # HH:MM
    end: str


class PreferencesDoc(TypedDict, total=False):
    min_interval_seconds: float
    active_hours: list[WindowDoc]
    quiet_windows: list[WindowDoc]


class ContextDoc(TypedDict, total=False):
    include: list[str]


class HeartbeatPolicy(TypedDict, total=False):
    """The canonical frontmatter (`_policy`), as a snapshot stores it; empty for an invalid HEARTBEAT.md."""

    version: int
    enabled: bool
    summary: str
    preferences: PreferencesDoc
    context: ContextDoc
TOP_KEYS = frozenset({"version", "enabled", "summary", "preferences", "context"})
PREFERENCE_KEYS = frozenset({"min_interval", "active_hours", "quiet_windows", "context"})
WINDOW_KEYS = frozenset({"timezone", "start", "end"})
CONTEXT_KEYS = frozenset({"include"})
SUMMARY_MAX_CHARS = 280

# Keys the file must never set, and who owns them instead (the message names the owner).
FORBIDDEN: dict[str, str] = {
    **dict.fromkeys(("liveness", "health", "supervision"), "session health and [session.supervision]"),
    **dict.fromkeys(("scheduler", "interval", "cron"), "the wake scheduler and [agents.heartbeat]"),
    **dict.fromkeys(("task", "claim", "queue", "owner"), "the task runtime (task runs and claims)"),
    "lease": "task-run lease heartbeats",
    **dict.fromkeys(("network", "greet", "presence", "channel"), "Compozy Network membership"),
    **dict.fromkeys(("provider", "model", "command", "tools", "permissions", "capabilities", "hooks", "mcp_servers",
                     "env", "config"), "AGENT.md and config.toml"),
}
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
_BODY_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:=]")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_FIXED_OFFSET = re.compile(r"^(?:UTC|GMT)?\s*[+-]\d", re.IGNORECASE)


@dataclass(frozen=True)
class Window:
    timezone: str
    start: time
    end: time

    def contains(self, instant: datetime) -> bool:
        """Start inclusive, end exclusive, on the zone's wall clock; `end <= start` crosses midnight."""
        local = instant.astimezone(ZoneInfo(self.timezone)).time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end

    def as_dict(self) -> WindowDoc:
        return {"timezone": self.timezone, "start": self.start.strftime("%H:%M"), "end": self.end.strftime("%H:%M")}


@dataclass
class Parsed:
    """The outcome of one parse: a canonical policy when valid, diagnostics either way."""

    valid: bool
    policy: HeartbeatPolicy = field(default_factory=lambda: HeartbeatPolicy())
    body: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    digest: str = ""

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d["severity"] == "error"]


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses duplicate keys (YAML would keep the last one silently) and nesting past MAX_DEPTH.

    PyYAML composes a node by recursion: 10,000 levels (`[[[…`, or `- - - …`) raised RecursionError through every
    reader of the policy (inspect, wake dry runs, the wake job, the dashboard). Refused at MAX_DEPTH, the scanner
    has not read beyond the 33rd level either (it slows with depth: 20 KB of brackets took it 24 s)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)
# YAML 1.1 reads an unquoted `22:00` as the base-60 integer 1320; clocks must stay strings. Drop the int and float
# resolvers and add back decimal-only ones.
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"),
                                    list("-+0123456789"))
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.[0-9_]+(?:[eE][-+][0-9]+)?$"),
                                    list("-+0123456789."))


def diag(code: str, message: str, *, severity: str = "error", field_: str | None = None,
         line: int | None = None) -> Diagnostic:
    out: Diagnostic = {"code": code, "severity": severity, "message": message}
    if field_ is not None:
        out["field"] = field_
    if line is not None:
        out["line"] = line
    return out


def split(text: str) -> tuple[str | None, str, int]:
    """(frontmatter or None, body, the body's first line number). Raises ValueError when unterminated."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.startswith("---\n") and text.strip() != "---":
        return None, text, 1
    lines = text.split("\n")
    for i in range(1, len(lines)):
        if lines[i].rstrip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1:]), i + 2
    raise ValueError("frontmatter is not terminated by a '---' line")


def parse_duration(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        seconds = go_duration(value, "min_interval")
    except ConfigError:
        return None
    return seconds if seconds > 0 else None


def parse_clock(value: object) -> time | None:
    match = _CLOCK.match(value) if isinstance(value, str) else None
    return time(int(match.group(1)), int(match.group(2))) if match else None


def valid_timezone(name: object) -> bool:
    if not isinstance(name, str) or not name or _FIXED_OFFSET.match(name) or name.startswith(("Etc/GMT+", "Etc/GMT-")):
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _windows(raw: object, key: str, out: list[Diagnostic]) -> list[Window]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        out.append(diag("heartbeat_invalid_field_type", f"{key} must be a list of windows", field_=key))
        return []
    windows = []
    for i, item in enumerate(raw):
        name = f"{key}[{i}]"
        if not isinstance(item, dict):
            out.append(diag("heartbeat_invalid_field_type", f"{name} must be a mapping", field_=name))
            continue
        unknown = set(item) - WINDOW_KEYS
        if unknown:
            out.append(diag("heartbeat_unknown_field", f"{name}: unknown key(s) {', '.join(map(str, unknown))}",
                            field_=name))
            continue
        if not valid_timezone(item.get("timezone")):
            out.append(diag("heartbeat_invalid_timezone", f"{name}.timezone must be an IANA time zone such as "
                            f"Europe/Berlin, got {item.get('timezone')!r}", field_=f"{name}.timezone"))
            continue
        start, end = parse_clock(item.get("start")), parse_clock(item.get("end"))
        if start is None or end is None:
            out.append(diag("heartbeat_invalid_time_window", f"{name}: start and end must be HH:MM (00:00-23:59)",
                            field_=name))
            continue
        windows.append(Window(str(item["timezone"]), start, end))
    return windows


def _forbidden(data: Frontmatter, prefix: str, out: list[Diagnostic], seen: set[int] | None = None) -> None:
    # A mapping reached twice through YAML aliases is checked once: nine levels of ten aliases each are 10^9 visits.
    seen = set() if seen is None else seen
    if id(data) in seen:
        return
    seen.add(id(data))
    for key, value in data.items():
        owner = FORBIDDEN.get(str(key).lower())
        if owner:
            out.append(diag("heartbeat_forbidden_field", f"{prefix}{key} is not for HEARTBEAT.md: it belongs to "
                            f"{owner}", field_=f"{prefix}{key}"))
        elif isinstance(value, dict):
            _forbidden(value, f"{prefix}{key}.", out, seen)


def _include(raw: object, key: str, out: list[Diagnostic]) -> list[str]:
    if not isinstance(raw, dict) or set(raw) - CONTEXT_KEYS:
        out.append(diag("heartbeat_invalid_field_type", f"{key} must be a mapping with `include`", field_=key))
        return []
    items = raw.get("include", [])
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        out.append(diag("heartbeat_invalid_field_type", f"{key}.include must be a list of strings",
                        field_=f"{key}.include"))
        return []
    return list(items)


def _body_checks(body: str, first_line: int, out: list[Diagnostic]) -> None:
    fence = False
    for n, line in enumerate(body.split("\n"), start=first_line):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        heading = _HEADING.match(line)
        if heading:
            word = heading.group(1).strip().lower().replace(" ", "_")
            if word in FORBIDDEN:
                out.append(diag("heartbeat_reserved_section", f"section '{heading.group(1)}' is reserved: it belongs "
                                f"to {FORBIDDEN[word]}", line=n))
            continue
        match = _BODY_FIELD.match(line)
        if match and match.group(1).lower() in FORBIDDEN:
            out.append(diag("heartbeat_reserved_body_field", f"'{match.group(1)}' cannot be set in the body: it "
                            f"belongs to {FORBIDDEN[match.group(1).lower()]}", line=n))


def parse(text: str, cfg: HeartbeatConfig) -> Parsed:
    """Validate a HEARTBEAT.md. Never raises: every problem is a diagnostic, and any error makes it invalid."""
    out: list[Diagnostic] = []
    try:
        front, body, first_line = split(text)
    except ValueError as exc:
        return Parsed(False, diagnostics=[diag("heartbeat_malformed_frontmatter", str(exc), line=1)])
    body = body.strip("\n")
    if front is not None and len(front.encode()) > cfg.max_body_bytes:
        out.append(diag("heartbeat_oversized_frontmatter", f"frontmatter exceeds {cfg.max_body_bytes} bytes"))
    if len(body.encode()) > cfg.max_body_bytes:
        out.append(diag("heartbeat_oversized_body", f"body exceeds {cfg.max_body_bytes} bytes"))
    if out:
        return Parsed(False, diagnostics=out)
    data: Any = {}
    if front is not None and front.strip():
        try:
            data = yaml.load(front, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            return Parsed(False, diagnostics=[diag("heartbeat_malformed_frontmatter", f"invalid YAML: {exc}",
                                                   line=mark.line + 2 if mark else None)])
        except RecursionError:  # the bound above should make this unreachable; a parse never raises
            return Parsed(False, diagnostics=[diag("heartbeat_malformed_frontmatter",
                                                   f"invalid YAML: nested deeper than {MAX_DEPTH} levels")])
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return Parsed(False, diagnostics=[diag("heartbeat_malformed_frontmatter", "frontmatter must be a mapping")])
    policy = _policy(data, cfg, out)
    _body_checks(body, first_line, out)
    parsed = Parsed(not any(d["severity"] == "error" for d in out), policy, body, out)
    if parsed.valid:
        parsed.digest = digest(policy, body, cfg)
    return parsed


def _interval(prefs: Frontmatter, cfg: HeartbeatConfig, out: list[Diagnostic]) -> float:
    """`preferences.min_interval`, raised to the configured floor; the configured default when absent or invalid."""
    if "min_interval" not in prefs:
        return cfg.default_interval
    parsed_interval = parse_duration(prefs["min_interval"])
    if parsed_interval is None:
        out.append(diag("heartbeat_invalid_min_interval", "preferences.min_interval must be a duration such as "
                        "30m", field_="preferences.min_interval"))
        return cfg.default_interval
    if parsed_interval < cfg.min_interval:
        out.append(diag("heartbeat_preference_clamped", f"preferences.min_interval raised to the configured floor "
                        f"of {int(cfg.min_interval)}s", severity="warning", field_="preferences.min_interval"))
        return cfg.min_interval
    return parsed_interval


def _policy(data: Frontmatter, cfg: HeartbeatConfig, out: list[Diagnostic]) -> HeartbeatPolicy:
    """The canonical frontmatter: defaults resolved, clamps applied, windows normalised."""
    _forbidden(data, "", out)
    unknown = {str(k) for k in data} - TOP_KEYS - set(FORBIDDEN)
    if unknown:
        out.append(diag("heartbeat_unknown_field", f"unknown key(s): {', '.join(sorted(unknown))}"))
    version = data.get("version", SCHEMA_VERSION)
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        out.append(diag("heartbeat_invalid_version", f"version must be {SCHEMA_VERSION}", field_="version"))
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        out.append(diag("heartbeat_invalid_field_type", "enabled must be true or false", field_="enabled"))
        enabled = False
    summary = data.get("summary", "")
    if not isinstance(summary, str):
        out.append(diag("heartbeat_invalid_field_type", "summary must be a string", field_="summary"))
        summary = ""
    prefs = data.get("preferences") or {}
    if not isinstance(prefs, dict):
        out.append(diag("heartbeat_invalid_field_type", "preferences must be a mapping", field_="preferences"))
        prefs = {}
    unknown_prefs = {str(k) for k in prefs} - PREFERENCE_KEYS - set(FORBIDDEN)
    if unknown_prefs:
        out.append(diag("heartbeat_unknown_field", f"unknown preference key(s): {', '.join(sorted(unknown_prefs))}",
                        field_="preferences"))
    interval = _interval(prefs, cfg, out)
    active = _windows(prefs.get("active_hours"), "preferences.active_hours", out)
    quiet = _windows(prefs.get("quiet_windows"), "preferences.quiet_windows", out)
    if (active or quiet) and not cfg.allow_active_hours_preferences:
        out.append(diag("heartbeat_preference_ignored", "active_hours and quiet_windows are ignored: "
                        "[agents.heartbeat].allow_active_hours_preferences is false", severity="warning",
                        field_="preferences"))
        active, quiet = [], []
    include: list[str] = []
    for key, raw in (("context", data.get("context")), ("preferences.context", prefs.get("context"))):
        if raw is not None:
            include += [i for i in _include(raw, key, out) if i not in include]
    return {"version": SCHEMA_VERSION, "enabled": enabled, "summary": summary.strip()[:SUMMARY_MAX_CHARS],
            "preferences": {"min_interval_seconds": interval, "active_hours": [w.as_dict() for w in active],
                            "quiet_windows": [w.as_dict() for w in quiet]},
            "context": {"include": include}}


def digest(policy: HeartbeatPolicy, body: str, cfg: HeartbeatConfig) -> str:
    """sha256 over the schema version, canonical frontmatter JSON, normalised body and the config subset."""
    blob = json.dumps({"schema": SCHEMA_VERSION, "frontmatter": policy, "body": body,
                       "config": cfg.digest_subset()}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def config_digest(cfg: HeartbeatConfig) -> str:
    blob = json.dumps(cfg.digest_subset(), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def windows_of(policy: HeartbeatPolicy, key: Literal["active_hours", "quiet_windows"]) -> list[Window]:
    return [Window(w["timezone"], parse_clock(w["start"]) or time(0), parse_clock(w["end"]) or time(0))
            for w in policy.get("preferences", {}).get(key, [])]


def allowed_at(policy: HeartbeatPolicy, instant: datetime) -> bool:
    """Inside some active window (or none authored) and inside no quiet window."""
    active = windows_of(policy, "active_hours")
    if active and not any(w.contains(instant) for w in active):
        return False
    return not any(w.contains(instant) for w in windows_of(policy, "quiet_windows"))


def interval_of(policy: HeartbeatPolicy) -> timedelta:
    return timedelta(seconds=float(policy.get("preferences", {}).get("min_interval_seconds") or 0))
