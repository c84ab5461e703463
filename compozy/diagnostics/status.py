"""`compozy status`: the daemon block, session counts, recent failures (docs/reference/surfaces.md §4.9)."""

from __future__ import annotations

import os
import shutil
from typing import Any

from django.db.models import Count

from compozy_base.config.loader import get_config
from compozy_base.daemon_record import read_daemon_record
from compozy_base.home import compozy_home
from sessions.catalog import cluster
from sessions.core.enums import SessionState
from sessions.live import pressure as stream_pressure
from sessions.models import Session
from sessions.runtime.loop_lag import MONITOR, LagReport
from sessions.store import folder
from sessions.store import writer as store_writer
from tasks.services import totals as task_totals


def loop_lag() -> LagReport:
    """The shared loop's lag percentiles (`sessions.runtime.loop_lag`): cheap, read on the loop itself."""
    return MONITOR.report()


def runtime_status(lag: LagReport | None = None) -> dict[str, Any]:
    """`compozy status`: the daemon block, session counts and recent failures (docs/reference/surfaces.md §4.9).
    `lag`: the loop's
    lag as the caller read it on the loop, before this work (whose queries, on a thread, contend with the loop)."""
    config = get_config()
    record = read_daemon_record() or {}
    by_state = dict(Session.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    failures: list[dict[str, Any]] = []
    by_kind: dict[str, int] = {}
    for row in Session.objects.filter(failure__isnull=False).order_by("-updated_at")[:200]:
        kind = (row.failure or {}).get("kind")
        if not kind:
            continue
        by_kind[kind] = by_kind.get(kind, 0) + 1
        if len(failures) < 10:
            failures.append({
                "session_id": row.id, "agent_name": row.agent_name, "provider": row.provider,
                "workspace_id": row.workspace_id, "state": row.state, "failure_kind": kind,
                "summary": (row.failure or {}).get("summary"),
                "crash_bundle_path": (row.failure or {}).get("crash_bundle_path"),
                "failure": row.failure, "updated_at": folder.isoformat(row.updated_at),
            })
    total = sum(by_state.values())
    active = by_state.get(SessionState.ACTIVE, 0)
    home = compozy_home()
    free = shutil.disk_usage(home).free
    writer = store_writer.report()  # a process that stopped being restarted is a warning: commits went to threads
    return {
        "schema_version": 1,
        "generated_at": folder.isoformat(folder.utcnow()),
        "daemon": {
            "status": "running", "pid": os.getpid(), "started_at": record.get("started_at"),
            "socket": str(config.socket), "http_host": config.http_host,
            "http_port": record.get("port", config.http_port), "active_sessions": active,
            "total_sessions": total, "version": "0.1.0", "home": str(home), "config": config.source,
        },
        "sessions": {"active": active, "total": total, "by_status": by_state},
        "event_loop": {"lag": MONITOR.report() if lag is None else lag},
        "store_writer": writer,
        "streams": stream_pressure.report(),
        "cluster": cluster.status(),
        "tasks": task_totals(),
        "health": {
            "status": "ok" if not by_kind else "warn",
            "persistence": {"status": "ok" if free > 100 * 1024 * 1024 and not writer["broken"] else "warn",
                            "free_bytes": free, "store_writer": writer["broken"]},
            "failures": {"status": "ok" if not by_kind else "warn", "total": sum(by_kind.values()),
                         "by_kind": by_kind, "recent": failures},
        },
    }

