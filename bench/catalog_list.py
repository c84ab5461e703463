"""Catalog list latency at 10k sessions, on the embedded SQLite catalog and on PostgreSQL.

    .venv/bin/python -m bench.catalog_list [--sessions 10000] [--repeat 40]

Each engine runs in a process of its own (Django reads its settings once): a fresh catalog (a temporary
COMPOZY_HOME; for PostgreSQL a `compozy_bench_<hex>` database made and dropped here, through
COMPOZY_BENCH_POSTGRES_URL, default postgresql://postgres@127.0.0.1:5432/postgres), migrated, then N session rows
with their meta.json folders (1% active), then the same service calls the API's `GET /api/sessions` makes, timed in
process (no HTTP): what the catalog costs, not the network. PostgreSQL is skipped, with the reason, when absent.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
ADMIN_URL = os.environ.get("COMPOZY_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ACTIVE_SHARE = 100  # one session in this many is live: a busy team's catalog is mostly history


def _cases(sessions: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("list, default (active only)", {}),
        ("list --all, first page of 50", {"all_states": True}),
        ("list --all, last page (offset)", {"all_states": True, "cursor": str(max(sessions - 50, 0))}),
        ("list --state stopped --agent", {"state": "stopped", "agent": "general"}),
        ("list --query (name or id)", {"all_states": True, "query": "ab12"}),
    ]


def worker(sessions: int, repeat: int) -> dict[str, Any]:
    """Runs inside the engine's process: fill the catalog, then time each case."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from sessions import services
    from sessions.models import Session, Workspace
    from sessions.store import folder

    started = time.perf_counter()
    now = folder.utcnow()
    ws = Workspace.objects.create(id="ws_00000000000000bb", name="bench", root_dir="/tmp/bench-catalog",
                                  created_at=now, updated_at=now)
    rows, root = [], folder.session_dir("sess_0000000000000000").parent
    root.mkdir(parents=True, exist_ok=True)
    for i in range(sessions):
        sid = f"sess_{secrets.token_hex(8)}"
        state = "active" if i % ACTIVE_SHARE == 0 else "stopped"
        stamp = now.replace(microsecond=0) - timedelta(seconds=sessions - i)
        meta = {"id": sid, "name": f"session {i}", "agent_name": "general", "provider": "demo",
                "workspace_id": ws.id, "workspace_path": ws.root_dir, "cwd": ws.root_dir, "session_type": "user",
                "state": state, "stop_reason": "" if state == "active" else "completed", "stop_detail": "",
                "failure": None, "acp_session_id": "", "liveness": {"activity": {}},
                "created_at": folder.isoformat(stamp), "updated_at": folder.isoformat(stamp)}
        (root / sid).mkdir()
        (root / sid / "meta.json").write_text(json.dumps(meta))  # plain writes: filling, not measuring
        rows.append(Session(id=sid, workspace=ws, name=meta["name"], agent_name="general", provider="demo",
                            state=state, stop_reason=meta["stop_reason"], created_at=stamp, updated_at=stamp))
    Session.objects.bulk_create(rows, batch_size=1000)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    fill = time.perf_counter() - started
    # A live session with no daemon would be repaired on read; pretend a daemon of this home runs (none writes).
    from compozy_base import daemon_record

    daemon_record.daemon_running = lambda: True  # type: ignore[assignment]
    results: dict[str, Any] = {"engine": connection.vendor, "fill_seconds": round(fill, 1), "cases": {}}
    for name, query in _cases(sessions):
        services.list_sessions(**query)  # warm: connection, statement cache, page cache
        took = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            page = services.list_sessions(**query)
            took.append((time.perf_counter() - t0) * 1000)
        took.sort()
        results["cases"][name] = {"p50_ms": round(statistics.median(took), 2),
                                  "p95_ms": round(took[int(len(took) * 0.95) - 1], 2),
                                  "rows": len(page["sessions"]), "total": page["page"]["total"]}
    t0 = time.perf_counter()
    for _ in range(repeat):
        list(Session.objects.order_by("-updated_at", "id")[:50])
    results["catalog_query_ms"] = round((time.perf_counter() - t0) * 1000 / repeat, 2)
    return results


def _with_db(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def run_engine(engine: str, sessions: int, repeat: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"compozy-bench-{engine}-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "COMPOZY_SESSIONS_DIR")}
    env.update(COMPOZY_HOME=str(home), PYTHONPATH=str(ROOT))
    database = ""
    try:
        if engine == "postgresql":
            try:
                import psycopg

                database = f"compozy_bench_{secrets.token_hex(6)}"
                with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
                    conn.execute(f'CREATE DATABASE "{database}"')
            except Exception as exc:  # noqa: BLE001 - no server is a skip, its cause in the result
                return {"engine": engine, "skipped": f"PostgreSQL not reachable at {ADMIN_URL}: {exc}"}
            env["DATABASE_URL"] = _with_db(ADMIN_URL, database)
        proc = subprocess.run([sys.executable, "-m", "bench.catalog_list", "--worker", "--sessions", str(sessions),
                               "--repeat", str(repeat)], cwd=str(ROOT), env=env, capture_output=True, text=True,
                              timeout=1800)
        if proc.returncode != 0:
            return {"engine": engine, "skipped": f"worker failed: {proc.stderr[-2000:]}"}
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if database:
            import psycopg

            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.catalog_list", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.sessions, args.repeat)))  # noqa: T201 - the worker answers on stdout
        return 0
    from rich.console import Console
    from rich.table import Table

    results = [run_engine(engine, args.sessions, args.repeat) for engine in ("sqlite", "postgresql")]
    table = Table(title=f"Catalog list latency, {args.sessions:,} sessions ({args.repeat} calls each, in process)")
    table.add_column("call (services.list_sessions)")
    for result in results:
        table.add_column(f"{result['engine']} p50 / p95 ms", justify="right")
    ran = [r for r in results if "cases" in r]
    for name, _ in _cases(args.sessions):
        table.add_row(name, *[f"{r['cases'][name]['p50_ms']} / {r['cases'][name]['p95_ms']}" if "cases" in r
                              else "skipped" for r in results])
    table.add_row("catalog query alone (50 newest rows)",
                  *[f"{r['catalog_query_ms']}" if "cases" in r else "skipped" for r in results])
    table.add_row("fill (rows + meta.json), s", *[str(r.get("fill_seconds", "-")) for r in results])
    console = Console()
    console.print(table)
    for r in results:
        if "skipped" in r:
            console.print(f"{r['engine']}: {r['skipped']}")
    return 0 if ran else 2


if __name__ == "__main__":
    sys.exit(main())
