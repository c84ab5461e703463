"""Crash bundles: one redacted, size-bounded JSON file per failed session, for post-mortem diagnosis.

Bundles are written to a private directory (0700) as private files (0600), atomically, so a reader
never sees half a bundle and other local users never see agent output. Everything is redacted before
it touches the disk: bundles get attached to bug reports.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from sessions.core.redact import bound_tail, bound_text, redact_argv, redact_value

__all__ = [
    "BUNDLE_FAILURE_KINDS",
    "SCHEMA",
    "TEXT_CAP_BYTES",
    "bound_tail",
    "write_crash_bundle",
]

SCHEMA = "compozy.session_crash_bundle.v1"


class FailureFacts(TypedDict):
    kind: str
    summary: str


class CrashBundle(TypedDict):
    """The bundle's JSON document (`SCHEMA`)."""

    schema: str
    session_id: str
    agent_name: str
    provider: str
    state: str
    failure: FailureFacts
    process: dict[str, object]  # the named facts, then whatever other scalars the caller knew (`_process_section`)
    error: str
    stderr: str
    created_at: str

# Failures where the agent process or protocol broke; cancellations, timeouts, permission denials and
# auth errors are explained by the failure object alone and get no bundle.
BUNDLE_FAILURE_KINDS: frozenset[str] = frozenset(
    {
        "startup_failure",
        "load_session_failure",
        "protocol_failure",
        "prompt_failure",
        "process_exit",
        "transport_failure",
        "storage_failure",
    }
)

TEXT_CAP_BYTES = 32 * 1024

_MAX_NAME_BYTES = 160
_MAX_KIND_CHARS = 48
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
# Raw text is cut to this many characters before redaction so a huge stderr cannot make redaction slow;
# the cut is moved to a line break so no partial (unrecognisable) secret sits at the edge.
_PRE_CUT_CHARS = 4 * TEXT_CAP_BYTES
_PROCESS_KEYS = ("pid", "command", "args", "cwd", "started_at")


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _utc(moment: datetime | None) -> datetime:
    if moment is None:
        return datetime.now(UTC)
    # A naive datetime is taken as UTC, the daemon's clock convention.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _unix_nanos(moment: datetime) -> int:
    # Integer arithmetic: float timestamps lose the microseconds at current epoch magnitudes.
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _clean(text: Any) -> str:
    """A str that encodes as UTF-8 (agent output decoded with surrogateescape may not)."""
    value = "" if text is None else str(text)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _pre_cut_head(text: str) -> str:
    if len(text) <= _PRE_CUT_CHARS:
        return text
    cut = text[:_PRE_CUT_CHARS]
    nl = cut.rfind("\n")
    return cut[:nl] if nl > 0 else cut


def _pre_cut_tail(text: str) -> str:
    if len(text) <= _PRE_CUT_CHARS:
        return text
    cut = text[-_PRE_CUT_CHARS:]
    nl = cut.find("\n")
    return cut[nl + 1 :] if 0 <= nl < len(cut) - 1 else cut


def _head_text(text: Any) -> str:
    return bound_text(redact_value(_pre_cut_head(_clean(text))), TEXT_CAP_BYTES)


def _tail_text(text: Any) -> str:
    return bound_tail(redact_value(_pre_cut_tail(_clean(text))), TEXT_CAP_BYTES)


def _started_at(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return _rfc3339(_utc(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _rfc3339(datetime.fromtimestamp(value, UTC))
    return _head_text(value)


def _pid(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _process_section(process: Mapping[str, Any]) -> dict[str, object]:  # the caller's facts, free-form
    raw_args = process.get("args") or []
    if isinstance(raw_args, str | bytes):
        raw_args = [raw_args]
    section: dict[str, object] = {  # the named facts, then any other scalar the caller had (below)
        "pid": _pid(process.get("pid")),
        "command": _head_text(process.get("command")),
        # Argument-aware redaction: ["--api-key", "x"] must hide "x", which plain text rules cannot see.
        "args": [_head_text(arg) for arg in redact_argv(_clean(a) for a in raw_args)],
        "cwd": _head_text(process.get("cwd")),
        "started_at": _started_at(process.get("started_at")),
    }
    # Extra scalar facts (e.g. returncode) are kept as crash evidence, redacted like everything else.
    for key, value in process.items():
        if key in _PROCESS_KEYS or not isinstance(key, str):
            continue
        if value is None or isinstance(value, bool | int | float):
            section[key] = value
        elif isinstance(value, str):
            section[key] = _head_text(value)
    return redact_value(section)


def _bundle_name(session_id: str, failure_kind: str, nanos: int) -> str:
    """``<session-id>-<kind>-<unix-nanos>.json``, filesystem-safe and at most 160 bytes (all ASCII)."""
    kind = _UNSAFE_NAME_CHARS.sub("-", failure_kind)[:_MAX_KIND_CHARS] or "unknown"
    sid = _UNSAFE_NAME_CHARS.sub("-", session_id) or "session"
    tail = f"-{kind}-{nanos}.json"
    return f"{sid[: _MAX_NAME_BYTES - len(tail)]}{tail}"


def _ensure_private_dir(directory: Path) -> None:
    """Create ``directory`` and missing parents as 0700, chmod'ing explicitly so the umask cannot widen it."""
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # created concurrently by another writer
            continue
        os.chmod(path, 0o700)
    if not missing:
        try:
            os.chmod(directory, 0o700)  # tighten a pre-existing crash directory we own
        except PermissionError:
            pass
    if not directory.is_dir():
        raise NotADirectoryError(str(directory))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_crash_bundle(
    directory: Path,
    *,
    session_id: str,
    agent_name: str,
    provider: str,
    state: str,
    failure_kind: str,
    summary: str,
    process: Mapping[str, Any],
    error: str,
    stderr: str,
    now: datetime | None = None,
) -> Path:
    """Write a redacted crash bundle into ``directory`` atomically and return its path."""
    directory = Path(directory)
    moment = _utc(now)
    payload: CrashBundle = {
        "schema": SCHEMA,
        "session_id": _head_text(session_id),
        "agent_name": _head_text(agent_name),
        "provider": _head_text(provider),
        "state": _head_text(state),
        "failure": {"kind": _head_text(failure_kind), "summary": _head_text(summary)},
        "process": _process_section(process or {}),
        "error": _head_text(error),
        # The end of stderr (the panic, the last traceback) is what explains the crash.
        "stderr": _tail_text(stderr),
        "created_at": _rfc3339(moment),
    }
    data = (json.dumps(payload, ensure_ascii=False, indent=2) + "\n").encode("utf-8")

    _ensure_private_dir(directory)
    nanos = _unix_nanos(moment)
    final = directory / _bundle_name(str(session_id), str(failure_kind), nanos)
    while final.exists():  # same session, kind and instant: never overwrite an earlier bundle
        nanos += 1
        final = directory / _bundle_name(str(session_id), str(failure_kind), nanos)

    tmp = directory / f".{final.stem[:100]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # the umask can only narrow 0600, but be explicit about the result
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)
    return final
