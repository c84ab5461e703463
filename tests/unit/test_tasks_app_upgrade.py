"""Supervised tasks were the `sessions.work` app (label `work`); they are the `tasks` app now. A catalog made by the
code before the move (tests/fixtures/catalog-before-tasks-app, see MADE_BY there) must upgrade in place with
`manage.py migrate`: same rows, same answers, the tables under the new app's names."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "catalog-before-tasks-app"
READ_BACK = """
import json, django
django.setup()
from tasks import services
from tasks.models import Task, TaskEvent, TaskRun
ids = json.loads(input())
print(json.dumps({"tasks": [services.get_task(i) for i in ids],
                  "counts": {"tasks": Task.objects.count(), "runs": TaskRun.objects.count(),
                             "events": TaskEvent.objects.count()}}, default=str, sort_keys=True))
"""


def manage(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home), "DJANGO_SETTINGS_MODULE": "compozy_site.settings"}
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True,
                          timeout=120, check=False)


def tables(catalog: Path) -> set[str]:
    with sqlite3.connect(catalog) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_catalog_made_before_the_tasks_app_upgrades_with_its_tasks_intact(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    catalog = home / "catalog.sqlite3"
    with sqlite3.connect(catalog) as conn:
        conn.executescript((FIXTURE / "catalog.sql").read_text())
    assert {"work_task", "work_taskrun", "work_taskevent"} <= tables(catalog)

    migrated = manage(home, "manage.py", "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr

    after = tables(catalog)
    assert {"tasks_task", "tasks_taskrun", "tasks_taskevent"} <= after
    assert not {t for t in after if t.startswith("work_")}, after
    with sqlite3.connect(catalog) as conn:
        applied = {(a, n) for a, n in conn.execute("SELECT app, name FROM django_migrations")}
    assert {("tasks", "0001_initial"), ("tasks", "0002_tables_of_the_tasks_app")} <= applied

    expected = json.loads((FIXTURE / "expected.json").read_text())
    ids = [t["task"]["id"] for t in expected["tasks"]]
    read = manage(home, "-c", READ_BACK, stdin=json.dumps(ids))
    assert read.returncode == 0, read.stderr
    got = json.loads(read.stdout)
    for task in got["tasks"]:
        # Fields a task record gained since the fixture was made, read from the upgraded catalog as "none yet".
        assert task["task"].pop("cost") is None
    assert got == expected


def test_a_new_catalog_gets_the_tasks_tables_and_the_models_match_the_migrations(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    migrated = manage(home, "manage.py", "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    assert {"tasks_task", "tasks_taskrun", "tasks_taskevent"} <= tables(home / "catalog.sqlite3")
    check = manage(home, "manage.py", "makemigrations", "--check", "--dry-run")
    assert check.returncode == 0, check.stdout + check.stderr
