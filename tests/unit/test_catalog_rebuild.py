"""`rebuild_catalog` at scale: the orphan check must not bind one SQL variable per session."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from django.db import OperationalError, connection, transaction  # noqa: E402

from sessions.management.commands.rebuild_catalog import orphan_ids  # noqa: E402
from sessions.models import Session, Workspace  # noqa: E402
from sessions.store import folder  # noqa: E402

COMMON_SQLITE_LIMIT = 32_766  # SQLITE_MAX_VARIABLE_NUMBER of stock SQLite ≥ 3.32 (Debian raises it to 250,000)
SESSIONS = 100_000


@pytest.fixture
def catalog() -> Iterator[list[str]]:
    """100k session rows, and the catalog connection limited like a stock SQLite build. The unit tests share one
    catalog per process: rows other modules left are counted as seen, and only this fixture's rows are removed."""
    now = folder.utcnow()
    workspace = Workspace.objects.create(id="ws_00000000000000aa", name="scale", root_dir="/tmp/scale",
                                         created_at=now, updated_at=now)
    # Ids of a random prefix: other modules of this worker may have left rows with ids of their own (sess_000…1).
    prefix = secrets.token_hex(2)
    ids = [f"sess_{prefix}{n:012x}" for n in range(SESSIONS)]
    # One executemany: the ORM's bulk_create batches by the variable limit and takes ~10 s for 100k rows.
    stamp = now.isoformat()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {Session._meta.db_table} (id, workspace_id, name, agent_name, provider, model, session_type,"
            " state, stop_reason, stop_detail, acp_session_id, attached_to, created_at, updated_at)"
            " VALUES (%s, %s, '', 'a', '', '', 'user', 'stopped', '', '', '', '', %s, %s)",
            [(sid, workspace.id, stamp, stamp) for sid in ids])
    connection.ensure_connection()
    raw = connection.connection
    previous = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if connection.vendor == "sqlite" else None
    if previous is not None:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, COMMON_SQLITE_LIMIT)
    try:
        yield ids
    finally:
        if previous is not None:
            raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, previous)
        Session.objects.filter(workspace_id=workspace.id)._raw_delete(Session.objects.db)
        workspace.delete()


def test_orphans_are_found_among_100k_sessions_past_the_sqlite_variable_limit(catalog: list[str]) -> None:
    orphans = {catalog[7], catalog[40_000], catalog[-1]}
    others = set(Session.objects.exclude(workspace_id="ws_00000000000000aa").values_list("id", flat=True))
    seen = (set(catalog) - orphans) | others
    if connection.vendor == "sqlite":
        # The old query: one bound variable per folder seen.
        with pytest.raises(OperationalError, match="too many SQL variables"):
            list(Session.objects.exclude(id__in=seen).values_list("id", flat=True)[:51])
    assert orphan_ids(seen, 51) == sorted(orphans)
    assert orphan_ids(seen, 2) == sorted(orphans)[:2]
    assert orphan_ids(set(catalog) | others, 51) == []
