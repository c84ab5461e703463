"""Two nodes never both run one session: processes racing for the same leases on one catalog (PostgreSQL, and the
embedded SQLite file) each win a disjoint share, and every session has exactly one holder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.shared_services import fresh_database, require_postgres

NODES = 4
SESSIONS = 60


def racer(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "COMPOZY_NODE_ID")}
    return subprocess.Popen([sys.executable, "-m", "tests.lease_racer", *args], cwd=str(ROOT), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**clean, "COMPOZY_HOME": str(home), "PYTHONPATH": str(ROOT), **env})


def run_race(home: Path, env: dict[str, str]) -> None:
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--no-input"], cwd=str(ROOT), text=True,
                             capture_output=True, timeout=180,
                             env={**os.environ, "COMPOZY_HOME": str(home), **env})
    assert migrate.returncode == 0, migrate.stderr
    setup = racer(home, env, "setup", str(SESSIONS))
    out, err = setup.communicate(timeout=120)
    assert setup.returncode == 0, err
    ids = json.loads(out)
    start_at = time.time() + 4.0  # after every racer has imported Django and connected
    procs = [racer(home, env, "race", f"node-{n}", str(start_at), *ids) for n in range(NODES)]
    won: dict[str, list[str]] = {sid: [] for sid in ids}
    for n, proc in enumerate(procs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        for sid in json.loads(out):
            won[sid].append(f"node-{n}")
    doubles = {sid: nodes for sid, nodes in won.items() if len(nodes) != 1}
    assert not doubles, f"sessions without exactly one holder: {doubles}"


def test_nodes_racing_on_postgresql_never_both_take_one_lease(tmp_path: Path) -> None:
    require_postgres()
    with fresh_database() as url:
        run_race(tmp_path, {"DATABASE_URL": url})


@pytest.mark.timeout(240)
def test_processes_racing_on_the_embedded_catalog_never_both_take_one_lease(tmp_path: Path) -> None:
    run_race(tmp_path, {})
