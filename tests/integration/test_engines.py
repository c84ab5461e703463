"""Engines by environment: DATABASE_URL through dj-database-url (sslmode and options survive), the same migrations
on SQLite and PostgreSQL, and an embedded default that loads none of the scale-out libraries.

Settings are read once per process, so each case runs Django in a subprocess with its own environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.shared_services import fresh_database, require_postgres

SHOW_SETTINGS = """
import json, sys
import django
django.setup()
from django.conf import settings
db = settings.DATABASES["default"]
print(json.dumps({"engine": db["ENGINE"], "name": str(db["NAME"]), "host": db.get("HOST"),
                  "port": db.get("PORT"), "user": db.get("USER"), "options": db.get("OPTIONS", {}),
                  "huey": settings.HUEY["huey_class"], "layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
                  "loaded": sorted(m for m in ("psycopg", "dj_database_url", "redis", "channels_redis")
                                   if m in sys.modules)}))
"""


def django_run(code: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "COMPOZY_NODE_ID")}
    return subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, timeout=120,
                          env={**clean, "COMPOZY_HOME": str(home), "DJANGO_SETTINGS_MODULE": "compozy_site.settings",
                               "PYTHONPATH": str(ROOT), **env})


def manage(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=str(ROOT), capture_output=True, text=True,
                          timeout=180, env={**clean, "COMPOZY_HOME": str(home), **env})


def test_embedded_default_needs_no_database_server_and_no_redis(tmp_path: Path) -> None:
    result = django_run(SHOW_SETTINGS, tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["engine"] == "django.db.backends.sqlite3"
    assert shown["name"] == str(tmp_path.resolve() / "catalog.sqlite3")
    assert shown["huey"] == "huey.SqliteHuey"
    assert shown["layer"] == "compozy_site.channel_layer.DoorbellLayer"
    # (huey and Django import redis / psycopg when installed; neither is connected to)
    assert "dj_database_url" not in shown["loaded"]


def test_database_url_keeps_sslmode_and_options(tmp_path: Path) -> None:
    url = ("postgres://compozy:s%3Acret@db.internal:6432/catalog?sslmode=verify-full"
           "&options=-c%20statement_timeout%3D5000&application_name=compozy")
    result = django_run(SHOW_SETTINGS, tmp_path, DATABASE_URL=url, REDIS_URL="redis://127.0.0.1:6379/3")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["engine"] == "django.db.backends.postgresql"
    assert (shown["name"], shown["host"], shown["port"], shown["user"]) == ("catalog", "db.internal", 6432, "compozy")
    assert shown["options"]["sslmode"] == "verify-full"
    assert shown["options"]["options"] == "-c statement_timeout=5000"
    assert shown["options"]["application_name"] == "compozy"
    assert shown["huey"] == "huey.RedisHuey"
    assert shown["layer"] == "channels_redis.core.RedisChannelLayer"


IDLE_SETTING = """
import django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SHOW idle_in_transaction_session_timeout")
    print(cursor.fetchone()[0])
"""


def test_a_catalog_connection_idle_in_a_transaction_is_ended_by_postgresql(tmp_path: Path) -> None:
    """A node paused inside a transaction kept its row locks and held the survivor's failover for as long as it
    slept (test_scale, seen in CI): every catalog connection sets an idle-in-transaction timeout."""
    require_postgres()
    with fresh_database() as url:
        result = django_run(IDLE_SETTING, tmp_path, DATABASE_URL=url)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "5s"
        chosen = django_run(IDLE_SETTING, tmp_path,
                            DATABASE_URL=url + "?options=-c%20idle_in_transaction_session_timeout%3D9000")
        assert chosen.stdout.strip() == "9s", chosen.stderr  # the operator's own value wins


def test_the_same_migrations_apply_to_a_fresh_postgresql_database(tmp_path: Path) -> None:
    require_postgres()
    with fresh_database() as url:
        migrated = manage(tmp_path, "migrate", "--no-input", DATABASE_URL=url)
        assert migrated.returncode == 0, migrated.stderr
        plan = manage(tmp_path, "showmigrations", "compozy_sessions", "health", DATABASE_URL=url)
        assert plan.returncode == 0, plan.stderr
        assert "[X]" in plan.stdout and "[ ]" not in plan.stdout, plan.stdout
        # The models and the migrations agree on PostgreSQL as on SQLite: nothing left to generate.
        check = manage(tmp_path, "makemigrations", "--check", "--dry-run", DATABASE_URL=url)
        assert check.returncode == 0, check.stdout + check.stderr
    sqlite = manage(tmp_path / "embedded", "migrate", "--no-input")
    assert sqlite.returncode == 0, sqlite.stderr
