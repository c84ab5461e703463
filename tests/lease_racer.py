"""One "node" of the lease race test: a process of its own on the shared catalog (DATABASE_URL, or a SQLite file in
COMPOZY_HOME), so the race is between connections and processes as between real nodes.

    python -m tests.lease_racer setup N          → creates N live session rows, prints their ids (JSON)
    python -m tests.lease_racer race NODE AT ID… → at wall-clock AT, takes each lease; prints the ids it won
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")
    import django

    django.setup()
    from sessions.catalog import cluster
    from sessions.models import Session, Workspace
    from sessions.store import folder

    if argv[0] == "setup":
        now = folder.utcnow()
        ws = Workspace.objects.create(id="ws_00000000000000ee", name="race", root_dir="/tmp/race", created_at=now,
                                      updated_at=now)
        ids = [f"sess_{i:016x}" for i in range(int(argv[1]))]
        Session.objects.bulk_create([Session(id=sid, workspace=ws, agent_name="scripted", state="starting",
                                             created_at=now, updated_at=now) for sid in ids])
        print(json.dumps(ids))  # noqa: T201 - the racer answers on stdout
        return
    node, at, ids = argv[1], float(argv[2]), argv[3:]
    me = cluster.Identity(node, f"run-{node}", f"http://{node}", 30.0)
    Session.objects.exists()  # connect before the start line, so every node starts racing at once
    time.sleep(max(0.0, at - time.time()))
    won = [sid for sid in ids if cluster.take(sid, me) is None]
    print(json.dumps(won))  # noqa: T201 - the racer answers on stdout


if __name__ == "__main__":
    main(sys.argv[1:])
