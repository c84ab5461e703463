"""A session's folder: `sessions/<id>/meta.json` (atomic) and `sessions/<id>/events.db`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import cast, overload

from compozy_base import strict_json
from compozy_base.home import sessions_dir
from compozy_base.nesting import MAX_DEPTH, may_nest_deeper, too_deep
from sessions.core.enums import SessionState
from sessions.core.errors import Conflict, NotFound
from sessions.core.jsonobj import EventContent, JsonObject
from sessions.core.record import SessionMeta, SessionRecord
from sessions.store.ids import is_session_id

# The timestamp format lives in its own module (store/timestamps.py); most callers know it from here.
from sessions.store.timestamps import isoformat as isoformat
from sessions.store.timestamps import utcnow as utcnow

META_FILE = "meta.json"
EVENTS_FILE = "events.db"
REQUIRED_META_KEYS = ("id", "agent_name", "workspace_id", "state")
STATES = frozenset(state.value for state in SessionState)
logger = logging.getLogger(__name__)

# meta.json is a few KiB; a file far past that was not written by us, and every session list reads it.
MAX_META_BYTES = 4 * 1024 * 1024
# Except that earlier versions wrote what the agent sent into it whole: a 5 MiB question made a 5 MiB record, which
# every read and `repair` then refused for good (issue 44). A file past the cap is read up to this and slimmed
# (SLIM_PATHS dropped) until a write (a repair, boot repair, the session's next save) stores the slim record.
MAX_META_SALVAGE_BYTES = 64 * 1024 * 1024
# What a record too large to keep loses: what the agent said of itself and the requests that waited on a person,
# all sent again or rebuilt by the next agent process (start_path.py empties the request lists at every start).
SLIM_PATHS = (("liveness", "elicitation_requests"), ("liveness", "permission_requests"), ("config_options",),
              ("available_commands",), ("mode",), ("acp_caps", "agent_info"))
_dumps = strict_json.dumper(indent=2, sort_keys=True)  # ASCII: its length is its size in bytes


@overload
def parse_time(text: str) -> datetime: ...
@overload
def parse_time(text: str | None) -> datetime | None: ...


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def session_dir(session_id: str, home: Path | None = None) -> Path:
    """The folder of a session; refuses anything that is not a well-formed id (no path tricks)."""
    if not is_session_id(session_id):
        raise ValueError(f"invalid session id {session_id!r}")
    return sessions_dir(home) / session_id


def events_path(session_id: str, home: Path | None = None) -> Path:
    return session_dir(session_id, home) / EVENTS_FILE


def write_json_atomic(path: Path, data: Mapping[str, object], mode: int = 0o600) -> None:
    """Temp file in the same folder, fsync, rename, fsync the folder: a crash leaves old or new, never half."""
    _write_text_atomic(path, _dumps(data), mode)  # strict: no NaN or Infinity (strict_json.py)


def _write_text_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)



def slim(given: EventContent) -> JsonObject:
    """`given` (meta.json's document) without SLIM_PATHS (a copy where it held any)."""
    meta: JsonObject = dict(given)
    for *parents, key in SLIM_PATHS:
        block = meta
        for name in parents:
            inner = block.get(name)
            if not isinstance(inner, dict):
                break
            block[name] = block = dict(inner)
        else:
            block.pop(key, None)
    return meta


def write_meta(rec: SessionRecord, home: Path | None = None) -> None:
    """meta.json of the record: the keys it was read or built with, and those set since (sessions/core/record.py).
    Never past MAX_META_BYTES, which no reader would take: a record that would be is written slim (`slim`)."""
    meta = rec.to_meta()
    for key in REQUIRED_META_KEYS:
        if not meta.get(key):
            raise ValueError(f"meta.json needs {key}")
    text = _dumps(meta)
    if len(text) >= MAX_META_BYTES:
        logger.warning("session %s: its record is %d bytes, past %d: written without what its agent sent of "
                       "itself (%s)", rec.id, len(text), MAX_META_BYTES, ", ".join(".".join(p) for p in SLIM_PATHS))
        text = _dumps(slim(meta))
        if len(text) >= MAX_META_BYTES:
            raise ValueError(f"meta.json of {rec.id} would be {len(text)} bytes, past {MAX_META_BYTES}")
    _write_text_atomic(session_dir(rec.id, home) / META_FILE, text)


def meta_oversized(session_id: str, home: Path | None = None) -> bool:
    """Whether meta.json is past MAX_META_BYTES (read slim by `read_meta`, until written again)."""
    try:
        return (session_dir(session_id, home) / META_FILE).stat().st_size > MAX_META_BYTES
    except OSError:
        return False


def read_meta(session_id: str, home: Path | None = None) -> SessionMeta | None:
    """None when the folder or file is missing; ValueError when meta.json is not valid session metadata, or cannot
    be read (an I/O error): every reader already treats that session on its own, from its catalog row. A file past
    MAX_META_BYTES is read slim (`slim`), when that brings it under."""
    path = session_dir(session_id, home) / META_FILE
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_META_BYTES + 1)
            oversized = len(raw) > MAX_META_BYTES
            if oversized:
                raw += handle.read(MAX_META_SALVAGE_BYTES + 1 - len(raw))
        if len(raw) > MAX_META_SALVAGE_BYTES:
            raise ValueError(f"{path}: larger than {MAX_META_SALVAGE_BYTES // 1048576} MiB")
        text = raw.decode("utf-8")
        data = json.loads(text)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: invalid JSON ({exc})") from exc
    except RecursionError:
        # 100,000 levels made every session list, the dashboard and doctor fail with RecursionError, restart after
        # restart; now it is this one session's session_meta_invalid.
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except OSError as exc:
        # One bad file (EIO from a failing disk) once failed `session list` as a whole, as "storage is not writable".
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    if may_nest_deeper(text) and (deep := too_deep(data)) is not None:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels (at {deep[:80]})")
    # Oversized first: a file past the cap that is still past it without what its agent sent is that (its size),
    # whatever else is wrong with it.
    if oversized and isinstance(data, dict):
        data = slim(data)
        if len(_dumps(data)) >= MAX_META_BYTES:
            raise ValueError(f"{path}: larger than {MAX_META_BYTES // 1048576} MiB, even without what its agent sent")
    if not isinstance(data, dict) or any(not data.get(k) for k in REQUIRED_META_KEYS):
        raise ValueError(f"{path}: missing required keys {REQUIRED_META_KEYS}")
    # A state outside the closed set cannot be repaired by any rule: refuse it here, once, for every reader.
    if not isinstance(data["state"], str) or data["state"] not in STATES:
        raise ValueError(f"{path}: unknown state {data['state']!r}")
    return cast(SessionMeta, data)  # its required keys checked; the rest as written (no validation on a read)


def list_session_dirs(home: Path | None = None) -> list[str]:
    root = sessions_dir(home)
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and is_session_id(p.name))


def load_meta(session_id: str) -> SessionMeta:
    """meta.json as stored (no repair), with the domain errors every surface answers with: 404 for an unknown
    or malformed id, 409 for unreadable metadata."""
    if not is_session_id(session_id):
        raise NotFound("session not found", code="session_not_found", data={"session_id": session_id})
    try:
        meta = read_meta(session_id)
    except ValueError as exc:
        raise Conflict(f"session metadata is unreadable: {exc}", code="session_meta_invalid") from exc
    if meta is None:
        raise NotFound("session not found", code="session_not_found", data={"session_id": session_id})
    return meta
