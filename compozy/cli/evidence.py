"""`compozy session evidence ID`: download the session's redacted evidence archive (tar.gz, mode 0600)."""

from __future__ import annotations

import errno
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import rich_click as click

from compozy.cli.app import _client, _fmt, _scoped, _session_path, json_flag, output_option, session
from compozy.cli.client import ApiError, Client, _api_error, _decode
from compozy.cli.output import EXIT_NOPERM, EXIT_UNAVAILABLE, EXIT_USAGE, emit, fail, fail_api

CHUNK = 1024 * 1024
# Building the archive reads every event and the daemon log: longer than an ordinary request.
DOWNLOAD_TIMEOUT = 300.0


def _evidence_path(client: Client, session_id: str) -> str:
    try:
        return _session_path(client, session_id, "/evidence")
    except ApiError as exc:
        if exc.code != "session_meta_invalid":
            raise
    # Its meta.json is unreadable, the case evidence is most wanted for: the list still has its catalog row.
    rows = client.request("GET", "/api/sessions", query={"all": "true", "q": session_id, "limit": 100})["sessions"]
    row = next((r for r in rows if r["id"] == session_id), None)
    if row is None:
        raise ApiError(404, f"session {session_id} not found", "session_not_found")
    return _scoped(row, "/evidence")


def _save(session_id: str, out: Path | None) -> tuple[Path, int]:
    client = _client()
    path = _evidence_path(client, session_id)
    # The client answers JSON; the archive is bytes, so read the response ourselves on the client's connection.
    conn, resp = client._open("GET", path, headers={"Accept": "application/gzip"}, timeout=DOWNLOAD_TIMEOUT)
    try:
        if resp.status >= 400:
            raise _api_error(resp, _decode(resp.read()))
        disposition = resp.getheader("Content-Disposition") or ""
        name = disposition.split("filename=", 1)[-1].strip('"') if "filename=" in disposition else ""
        default = name or f"compozy-evidence-{session_id}.tar.gz"
        named = out is not None and not out.is_dir()  # a file the person chose: never replaced, never renamed
        target = out if out is not None and named else (out or Path()) / default
        target, fd = _create(target, numbered=not named)
        written = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                while chunk := resp.read(CHUNK):
                    handle.write(chunk)
                    written += len(chunk)
        except BaseException:
            target.unlink(missing_ok=True)  # never leave half an archive that looks like a whole one
            raise
        return target, written
    finally:
        conn.close()


def _create(target: Path, *, numbered: bool) -> tuple[Path, int]:
    """Open a new file owner-only from the first byte (the archive holds a whole conversation). The default name
    has the time to the second, so a second archive within it gets `-2`, `-3`… instead of failing."""
    stem = target.name.removesuffix(".tar.gz")
    for n in range(1, 100 if numbered else 2):
        candidate = target if n == 1 else target.with_name(f"{stem}-{n}.tar.gz")
        try:
            return candidate, os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if not numbered:
                raise
    raise FileExistsError(errno.EEXIST, "too many archives of this second", str(target))


# A destination that is full or failing is worth retrying later (69, as the daemon's own storage errors are); one
# the person may not write is forbidden (77); any other refusal (no such folder, not a folder) is the request's (65).
_WRITE_FAILURES = {errno.ENOSPC: ("storage_full", EXIT_UNAVAILABLE), errno.EDQUOT: ("storage_full", EXIT_UNAVAILABLE),
                   errno.EIO: ("storage_unavailable", EXIT_UNAVAILABLE),
                   errno.EACCES: ("file_not_writable", EXIT_NOPERM), errno.EPERM: ("file_not_writable", EXIT_NOPERM)}


def _write_failure(exc: OSError) -> tuple[str, int]:
    """The code and exit code of a failed write of the archive."""
    return _WRITE_FAILURES.get(exc.errno or 0, ("file_not_writable", EXIT_USAGE))


def _manifest(path: Path) -> dict[str, Any]:
    with tarfile.open(path, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/manifest.json"))
        handle = tar.extractfile(member)
        return json.loads(handle.read()) if handle else {}


@session.command("evidence")
@click.argument("session_id")
@click.option("--out", "-O", "out", type=click.Path(path_type=Path), default=None,
              help="File (or directory) to write; default `compozy-evidence-ID-TIME.tar.gz` here.")
@output_option
@json_flag
def session_evidence(session_id: str, out: Path | None, fmt: str, as_json: bool) -> None:
    """Collect everything the debugging guide asks for in one redacted archive (tar.gz, mode 0600).

    `status`, `doctor`, the session's status, its events (JSONL), history, recap, crash bundles and
    the daemon-log lines of this session. Attach it to a bug report. Never overwrites: exits 65 when the
    file exists (or its folder does not), 77 when it may not be written, 69 when its disk is full or failing
    (no half archive is left). `-o json` prints `{path, bytes, manifest}`.

    Examples:

        compozy session evidence sess_0123456789abcdef
        compozy session evidence sess_0123456789abcdef --out /tmp/
        compozy session evidence sess_0123456789abcdef -O bug-1234.tar.gz -o json | jq -r .path
    """
    fmt = _fmt(fmt, as_json)
    try:
        target, size = _save(session_id, out)
    except ApiError as exc:
        fail_api(exc, fmt)
    except FileExistsError as exc:
        fail(f"{exc.filename} already exists; choose another with --out", "file_exists", fmt, EXIT_USAGE)
    except OSError as exc:
        code, exit_code = _write_failure(exc)
        fail(f"cannot write {exc.filename or out}: {exc.strerror or exc}", code, fmt, exit_code)
    manifest = _manifest(target)
    result = {"path": str(target.resolve()), "bytes": size, "manifest": manifest}
    counts = manifest.get("counts") or {}

    def human() -> None:
        # Plain lines, not a table: the path must stay whole to be copied.
        click.echo(f"wrote {result['path']}")
        parts = ", ".join(part for part in ("status", "doctor", "session", "history", "recap")
                          if f"{part}.json" not in (manifest.get("errors") or {}))
        click.echo(f"  {size} bytes, mode 0600, redacted; {parts}")
        click.echo(f"  {counts.get('events', 0)} events, {counts.get('crash_bundles', 0)} crash bundle(s), "
                   f"{counts.get('daemon_log_lines', 0)} daemon-log lines")
        for name, error in (manifest.get("errors") or {}).items():
            click.echo(f"  not collected: {name}: {error}")

    emit(result, fmt, human)
