"""`compozy session evidence ID`: everything the debugging guide asks an operator to collect, in one redacted
archive. Built here, once, for the API route (which the CLI downloads); blocking work, so callers run it off
the event loop.

Members, under `evidence-<session id>/`: `manifest.json` (what is inside and what could not be collected),
`status.json`, `doctor.json`, `session.json`, `events.jsonl` (every event, oldest first), `history.json`,
`recap.json`, `crash-bundles/*.json` and `daemon-log.txt` (the daemon's log lines that name the session).
Every member passes through the redactor again, whatever its source already did.
"""

from __future__ import annotations

import io
import logging
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from compozy.diagnostics.doctor import run_doctor
from compozy.diagnostics.status import runtime_status
from compozy_base import strict_json
from compozy_base.home import compozy_home, crash_bundles_dir
from sessions import services
from sessions.core.errors import Conflict
from sessions.core.record import FailureDoc, SessionMeta
from sessions.core.redact import redact_text, redact_value
from sessions.models import Session
from sessions.services import recap
from sessions.services.lookup import row_meta_unreadable
from sessions.store import events as event_store
from sessions.store import folder

logger = logging.getLogger(__name__)

SCHEMA = "compozy.evidence.v1"
# The archive is spooled in memory up to this size, then on disk (a long session's events run to many MiB).
SPOOL_BYTES = 16 * 1024 * 1024
# Only the tail of the daemon log is searched: it is append-only and can grow without bound.
LOG_TAIL_BYTES = 64 * 1024 * 1024
HISTORY_TURNS = 1000
# A log record starts with its asctime (settings.LOGGING); other lines continue the record above (tracebacks).
_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def daemon_log_path() -> Path | None:
    """Where this daemon's log goes: its stderr when that is a file (`daemon start` sends it to
    `logs/daemon.log`; a supervisor may send it elsewhere), else `logs/daemon.log` if there is one."""
    try:
        target = Path(os.readlink("/proc/self/fd/2"))
        if target.is_file():
            return target
    except OSError:
        pass
    fallback = compozy_home() / "logs" / "daemon.log"
    return fallback if fallback.is_file() else None


def session_log_lines(session_id: str, path: Path | None) -> list[str]:
    """The log records that name `session_id`, with their continuation lines (a traceback stays whole)."""
    if path is None:
        return []
    with path.open("rb") as handle:
        size = handle.seek(0, io.SEEK_END)
        handle.seek(max(0, size - LOG_TAIL_BYTES))
        text = handle.read().decode("utf-8", "replace")
    lines, keep = [], False
    for line in text.splitlines():
        if _RECORD_START.match(line):
            keep = session_id in line
        elif session_id in line:
            keep = True
        if keep:
            lines.append(redact_text(line))
    return lines


def crash_bundle_paths(session_id: str, failure: FailureDoc | None) -> list[Path]:
    """The session's crash bundles: every `<session id>-<kind>-<nanos>.json`, and the one its failure names."""
    directory = crash_bundles_dir()
    found = set(directory.glob(f"{session_id}-*.json")) if directory.is_dir() else set()
    named = (failure or {}).get("crash_bundle_path")
    if named and Path(named).is_file():
        found.add(Path(named))
    return sorted(found)


def _json(data: Any) -> bytes:
    return (strict_json.dumps(redact_value(data), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _write_events(session_id: str, meta: SessionMeta, out: IO[bytes]) -> int:
    """Every event, oldest first, one JSON object a line, paged so memory stays bounded."""
    path = folder.events_path(session_id)
    after, count = 0, 0
    while True:
        page = event_store.read_events(path, after=after, limit=event_store.MAX_PAGE)
        for row in page:
            out.write(strict_json.dumps(redact_value(services.envelope(meta, row)), sort_keys=True,
                                        ensure_ascii=False).encode() + b"\n")
        count += len(page)
        if len(page) < event_store.MAX_PAGE:
            return count
        after = page[-1]["sequence"]


def _meta_or_row(session_id: str, workspace_ref: str | None) -> tuple[SessionMeta, str | None]:
    """meta.json, or, when it is unreadable (session_meta_invalid), its catalog row and the error: evidence is
    most wanted for a session nothing else can read."""
    try:
        return services.scoped_meta(session_id, workspace_ref), None
    except Conflict as exc:
        if exc.code != "session_meta_invalid":
            raise
        row = Session.objects.filter(id=session_id).first()
        if row is None:
            raise
        meta = row_meta_unreadable(row)  # as the list shows it: a crashed run's row never reads active
        services.check_workspace_scope(workspace_ref, meta)
        return meta, redact_text(f"{exc.code}: {exc}")


def build_evidence(session_id: str, workspace_ref: str | None = None) -> tuple[IO[bytes], str]:
    """(the tar.gz, rewound, and its file name). A part that cannot be collected is named in the manifest's
    `errors` and the rest is still collected: evidence is gathered when things are broken."""
    meta, meta_error = _meta_or_row(session_id, workspace_ref)  # 404 before any work
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = f"evidence-{session_id}"
    archive = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - handed to the caller
    files: list[str] = []
    errors: dict[str, str] = {}
    counts: dict[str, int] = {}

    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        def add(name: str, data: bytes | IO[bytes], size: int | None = None) -> None:
            info = tarfile.TarInfo(f"{root}/{name}")
            info.mode, info.mtime = 0o600, int(time.time())
            if isinstance(data, bytes):
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.size = size or 0
                tar.addfile(info, data)
            files.append(name)

        def collect(name: str, build: Callable[[], Any]) -> None:
            try:
                add(name, _json(build()))
            except Exception as exc:  # noqa: BLE001 - one broken part must not cost the others (logged)
                logger.warning("evidence for %s: %s failed: %s", session_id, name, exc)
                errors[name] = redact_text(f"{type(exc).__name__}: {exc}")

        if meta_error is not None:
            # The case evidence exists for: the broken file itself, redacted, and the error; the rest from the row.
            errors["session.json"] = meta_error
            try:
                raw = (folder.session_dir(session_id) / folder.META_FILE).read_bytes()
                add("meta.json.broken", redact_text(raw.decode("utf-8", "replace")).encode())
            except OSError as exc:
                errors["meta.json.broken"] = str(exc)
        collect("status.json", runtime_status)
        collect("doctor.json", run_doctor)
        if meta_error is None:
            collect("session.json", lambda: {"session": services.get_session(session_id, workspace_ref)})
        try:
            with tempfile.TemporaryFile() as spool:
                counts["events"] = _write_events(session_id, meta, spool)
                size = spool.tell()
                spool.seek(0)
                add("events.jsonl", spool, size)
        except Exception as exc:  # noqa: BLE001 - one broken part must not cost the others (logged)
            logger.warning("evidence for %s: events.jsonl failed: %s", session_id, exc)
            errors["events.jsonl"] = redact_text(f"{type(exc).__name__}: {exc}")
        collect("history.json", lambda: {"history": services.history(session_id, workspace_ref=workspace_ref,
                                                                      last=HISTORY_TURNS)})
        collect("recap.json", lambda: {"recap": recap.build_recap(session_id, workspace_ref=workspace_ref,
                                                                  limit=recap.MAX_LIMIT)})
        bundles = crash_bundle_paths(session_id, meta.get("failure"))
        for bundle in bundles:
            try:
                add(f"crash-bundles/{bundle.name}", redact_text(bundle.read_text(encoding="utf-8")).encode())
            except OSError as exc:
                errors[f"crash-bundles/{bundle.name}"] = str(exc)
        counts["crash_bundles"] = len(bundles)
        log_path = daemon_log_path()
        try:
            lines = session_log_lines(session_id, log_path)
            add("daemon-log.txt", "".join(f"{line}\n" for line in lines).encode())
            counts["daemon_log_lines"] = len(lines)
        except OSError as exc:
            errors["daemon-log.txt"] = str(exc)
        manifest = {"schema": SCHEMA, "session_id": session_id, "workspace_id": meta["workspace_id"],
                    "generated_at": folder.isoformat(folder.utcnow()), "files": ["manifest.json", *files],
                    "counts": counts, "errors": errors, "daemon_log": str(log_path) if log_path else None,
                    "redacted": True}
        add("manifest.json", _json(manifest))
    archive.seek(0)
    return archive, f"compozy-evidence-{session_id}-{stamp}.tar.gz"
