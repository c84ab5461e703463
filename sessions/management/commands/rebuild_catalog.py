"""`manage.py rebuild_catalog [--json]`: recreate catalog rows (Workspace + Session) from the session folders.

meta.json is the per-session truth; the catalog mirrors it for listing. After a lost or damaged
`catalog.sqlite3` this puts the rows back. Idempotent: a second run creates nothing. The persisted
input queue cannot be recovered from the folders.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from django.db import transaction

from compozy_base.daemon_record import daemon_running
from sessions.catalog import index as catalog
from sessions.core.record import SessionMeta, SessionRecord
from sessions.management.commands._cli import CliCommand
from sessions.models import Session, Workspace
from sessions.store import folder

MAX_LISTED = 50


class RebuildError(Exception):
    pass


def ensure_workspace(meta: SessionMeta) -> bool:
    """The session's workspace row, created from `workspace_id` + `workspace_path` when missing. True if created."""
    ws_id = meta["workspace_id"]
    if Workspace.objects.filter(id=ws_id).exists():
        return False
    root = meta.get("workspace_path") or ""
    if not root or not os.path.isabs(root):
        raise RebuildError(f"workspace {ws_id} is not in the catalog and meta.json has no absolute workspace_path")
    other = Workspace.objects.filter(root_dir=root).first()
    if other is not None:
        raise RebuildError(f"workspace path {root} is registered as {other.id}, not {ws_id}")
    moment = folder.parse_time(meta.get("created_at")) or folder.utcnow()
    Workspace.objects.create(id=ws_id, name=catalog.unique_workspace_name(Path(root).name), root_dir=root, add_dirs=[],
                             default_agent="", created_at=moment, updated_at=moment)
    return True


ORPHAN_SCAN_CHUNK = 2000
REBUILD_BATCH = 500  # folders per catalog transaction


def orphan_ids(folders: set[str], limit: int) -> list[str]:
    """Catalog session ids without a folder in `folders`, at most `limit`.

    A set difference in Python over the ids streamed in chunks: `exclude(id__in=folders)` binds one SQL variable
    per session and fails past SQLite's limit (32,766 on common builds; 999 on old ones)."""
    found: list[str] = []
    ids = Session.objects.order_by("id").values_list("id", flat=True)
    for session_id in ids.iterator(chunk_size=ORPHAN_SCAN_CHUNK):
        if session_id not in folders:
            found.append(session_id)
            if len(found) >= limit:
                break
    return found


class Command(CliCommand):
    help = "Recreate catalog rows (workspaces and sessions) from the session folders' meta.json. Idempotent."
    epilog = """examples:
  python manage.py rebuild_catalog            after a lost or damaged catalog.sqlite3
  python manage.py rebuild_catalog -o json    counts and per-folder errors as one JSON document

exit codes: 0 every folder cataloged, 1 a folder could not be (listed), 65 a bad command line"""

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_json_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if daemon_running():
            self.stderr.write("warning: a daemon is running; its own catalog writes may race this rebuild")
        call_command("migrate", interactive=False, verbosity=0, skip_checks=True)
        counts = {"scanned": 0, "workspaces_created": 0, "sessions_created": 0, "sessions_updated": 0,
                  "sessions_skipped": 0}
        errors: list[dict[str, str]] = []
        ids = folder.list_session_dirs()
        for start in range(0, len(ids), REBUILD_BATCH):
            # One commit per batch (a commit per session took 22 s for 5k folders); a savepoint per session
            # still keeps one bad folder from undoing its neighbours.
            with transaction.atomic():
                for session_id in ids[start:start + REBUILD_BATCH]:
                    counts["scanned"] += 1
                    try:
                        meta = folder.read_meta(session_id)
                        if meta is None:
                            raise RebuildError("no meta.json")
                        with transaction.atomic():
                            counts["workspaces_created"] += ensure_workspace(meta)
                            existed = Session.objects.filter(id=session_id).exists()
                            catalog.upsert_session_row(SessionRecord.from_meta(meta))
                    except (RebuildError, ValueError, KeyError, TypeError) as exc:
                        counts["sessions_skipped"] += 1
                        message = str(exc) if not isinstance(exc, KeyError) else f"meta.json lacks {exc}"
                        errors.append({"session_id": session_id, "error": message})
                        continue
                    counts["sessions_updated" if existed else "sessions_created"] += 1
        # A folder whose meta.json could not be read is skipped above, but it exists: its row is no orphan.
        orphans = orphan_ids(set(ids), MAX_LISTED + 1)
        result = {**counts, "workspaces_total": Workspace.objects.count(), "sessions_total": Session.objects.count(),
                  "orphan_rows": orphans[:MAX_LISTED], "errors": errors[:MAX_LISTED]}
        if self.wants_json(options):
            self.stdout.write(json.dumps(result, indent=2, sort_keys=True))
        else:
            for error in errors[:MAX_LISTED]:
                self.stdout.write(f"skipped {error['session_id']}: {error['error']}")
            if orphans:
                self.stdout.write(f"catalog rows without a session folder: {', '.join(orphans[:MAX_LISTED])}")
            self.stdout.write(
                f"rebuilt catalog from {counts['scanned']} folder(s): {counts['sessions_created']} session row(s) "
                f"created, {counts['sessions_updated']} refreshed, {counts['sessions_skipped']} skipped; "
                f"{counts['workspaces_created']} workspace row(s) created")
        if errors:
            raise CommandError(f"{len(errors)} session folder(s) could not be cataloged", returncode=1)
