"""`compozy doctor`: unhealthy subsystems first, before anyone blames the agent (docs/reference/surfaces.md §4.9).

Every check returns one DiagnosticItem; the report's status is the worst item.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compozy.diagnostics.items import item
from compozy.diagnostics.worktree_checks import check_git, check_worktree_disk
from compozy_base.config.loader import ConfigError, get_config, load_config
from compozy_base.config.sandbox import SandboxMode
from compozy_base.home import compozy_home, crash_bundles_dir, sessions_dir
from health import policy
from health.agents import service_state
from health.enums import PolicyStatus
from health.jobs import wake_every
from health.models import HeartbeatSnapshot, SessionHealth
from health.services import current_run
from sessions.acp.driver import AgentNotFound, agent_environment
from sessions.acp.launch import resolve
from sessions.acp.sandbox import bwrap_path
from sessions.catalog import cluster
from sessions.core.errors import InvalidRequest, first_line
from sessions.live.feed import watched
from sessions.models import Session, Workspace
from sessions.repair.boot import read_report
from sessions.store.folder import events_path, isoformat, list_session_dirs, parse_time, read_meta, session_dir, utcnow

SEVERITY_ORDER = ["ok", "info", "warn", "error", "critical"]
LOW_DISK_BYTES = 512 * 1024 * 1024


def check_catalog() -> dict[str, Any]:
    from django.db import Error, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM compozy_sessions_session")
            total = cursor.fetchone()[0]
    except Error as exc:
        return item("catalog", "persistence", "error", "Catalog unreachable", str(exc),
                    "python manage.py rebuild_catalog")
    return item("catalog", "persistence", "ok", "Catalog", f"{total} session row(s)", evidence={"sessions": total})


def check_event_storage() -> dict[str, Any]:
    home = compozy_home()
    sessions = sessions_dir(home)
    sessions.mkdir(parents=True, exist_ok=True)
    probe = sessions / f".doctor-{os.getpid()}"
    try:
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return item("event_storage", "persistence", "error", "Event storage not writable", str(exc))
    free = shutil.disk_usage(home).free
    if free < LOW_DISK_BYTES:
        return item("event_storage", "persistence", "warn", "Low disk space",
                    f"{free // (1024 * 1024)} MiB free under {home}", evidence={"free_bytes": free})
    return item("event_storage", "persistence", "ok", "Event storage", f"writable, {free // (1024 ** 3)} GiB free",
                evidence={"free_bytes": free, "path": str(sessions)})


def check_socket() -> dict[str, Any]:
    path = Path(get_config().socket)
    if not path.exists():
        return item("daemon_socket", "daemon", "warn", "Control socket missing", f"{path} does not exist",
                    "compozy daemon start")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return item("daemon_socket", "security", "error", "Control socket too open",
                    f"{path} has mode {oct(mode)}; it must be owner-only (0600)")
    return item("daemon_socket", "daemon", "ok", "Control socket", f"{path} (mode {oct(mode)})")


def check_sandbox() -> dict[str, Any]:
    """Whether agents run confined (sessions/acp/sandbox.py): without bubblewrap they can read the token."""
    config = get_config().sandbox
    if config.mode is SandboxMode.OFF:
        return item("agent_sandbox", "security", "warn", "Agent sandbox off",
                    "[sandbox] mode = \"off\": agents can read the daemon's token and reach its socket "
                    "(over the socket their decisions are refused; over TCP with the token they are not)",
                    "set [sandbox] mode = \"auto\"")
    if bwrap_path() is None:
        level = "error" if config.mode is SandboxMode.REQUIRED else "warn"
        return item("agent_sandbox", "security", level, "Agent sandbox unavailable",
                    "bubblewrap (bwrap) is not installed: agents run unconfined and can read the daemon's token"
                    + (", and none can start ([sandbox] mode = \"required\")" if level == "error" else ""),
                    "apt-get install bubblewrap")
    return item("agent_sandbox", "security", "ok", "Agent sandbox", f"bubblewrap ({bwrap_path()}): the agents "
                "and their terminals cannot see $COMPOZY_HOME")


def check_crash_bundles() -> dict[str, Any]:
    path = crash_bundles_dir()
    if not path.exists():
        return item("crash_bundles", "security", "ok", "Crash bundles", "none written yet")
    mode = stat.S_IMODE(path.stat().st_mode)
    count = sum(1 for _ in path.glob("*.json"))
    if mode & 0o077:
        return item("crash_bundles", "security", "error", "Crash bundle folder too open",
                    f"{path} has mode {oct(mode)}; it must be 0700")
    return item("crash_bundles", "security", "ok", "Crash bundles", f"{count} bundle(s) in {path}",
                evidence={"count": count})


# Enough to cover a home with thousands of sessions (four files each) while keeping doctor quick on a huge one.
MODE_SCAN_LIMIT = 50_000


def check_file_modes() -> dict[str, Any]:
    """COMPOZY_HOME holds transcripts, the token and catalogs: the home must be 0700 and nothing in it readable by
    group or others. The daemon tightens modes at start; a looser one since means someone changed it."""
    home = compozy_home()
    loose: list[str] = []
    scanned = 0
    for path in [home, *home.rglob("*")]:
        scanned += 1
        if scanned > MODE_SCAN_LIMIT:
            break
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            loose.append(f"{path} ({oct(stat.S_IMODE(st.st_mode))})")
    if loose:
        return item("file_modes", "security", "warn", "Files readable by other users",
                    f"{len(loose)} path(s) under {home} are open to group or others, e.g. {loose[0]}",
                    f"chmod -R go-rwx {home}", evidence={"paths": loose[:20], "count": len(loose)})
    return item("file_modes", "security", "ok", "File modes", f"{home} and everything in it are owner-only",
                evidence={"scanned": min(scanned, MODE_SCAN_LIMIT)})


def check_config() -> dict[str, Any]:
    """config.toml read again now: keys the daemon does not know (ignored, with the nearest known one), or a file
    edited since the start into one the next start refuses."""

    source = get_config().source
    try:
        current = load_config()
    except ConfigError as exc:
        return item("config", "daemon", "error", "config.toml invalid",
                    f"the next start refuses it: {exc} (this daemon runs on {source} as it was at its start)")
    unknown = [u.message() for u in current.unknown_keys]
    if unknown:
        return item("config", "daemon", "warn", "Unknown config.toml keys",
                    f"{len(unknown)} in {current.source}: {'; '.join(unknown[:3])}"
                    + (f"; and {len(unknown) - 3} more" if len(unknown) > 3 else ""),
                    evidence={"unknown_keys": [{"key": u.key, "table": u.table, "suggestion": u.suggestion or None}
                                               for u in current.unknown_keys[:LISTED]], "path": current.source})
    return item("config", "daemon", "ok", "config.toml", f"{current.source}: every key known")


def check_providers() -> list[dict[str, Any]]:
    items = []
    for provider in get_config().providers.values():
        executable = provider.command[0]
        # As a session start judges it (sessions/acp/launch.py): a built-in provider whose executable is missing
        # starts through npx, so its sessions do start (the first one downloads the pinned package).
        try:
            launch = resolve(provider.command, provider=provider.name, package=provider.npm, env=provider.env)
        except AgentNotFound:
            launch = None
        path = agent_environment(provider.env).get("PATH", "")
        found = shutil.which(executable, path=path) or (os.path.isfile(executable) and os.access(executable, os.X_OK))
        if found:
            severity, message = "ok", f"{executable} found"
        elif launch is not None and launch.package is not None:
            severity, message = "info", (f"{executable} is not on PATH; sessions run {launch.package.spec} through "
                                         "npx (the first start downloads it)")
        elif provider.npm is not None:
            severity, message = "info", (f"{executable} is not on PATH, nor is npx (Node.js): sessions using it fail "
                                         f"to start; install {executable} or Node.js")
        else:
            severity, message = "info", f"{executable} is not on PATH; sessions using it fail to start"
        items.append(item(f"provider.{provider.name}", "providers", severity, f"Provider {provider.name}", message))
    return items


def check_queue() -> dict[str, Any]:
    from huey.contrib.djhuey import HUEY

    try:
        pending = HUEY.pending_count()
        scheduled = HUEY.scheduled_count()
    except Exception as exc:  # noqa: BLE001 - each storage (SQLite, Redis) fails its own way: the item shows the cause
        return item("job_queue", "daemon", "error", "Job queue unreachable", str(exc))
    return item("job_queue", "daemon", "ok", "Job queue (huey)", f"{pending} pending, {scheduled} scheduled",
                evidence={"pending": pending, "scheduled": scheduled})


def check_failures() -> dict[str, Any]:
    """Sessions that failed, counted as information: each is history (its page and the inbox say what failed), not
    something wrong with the daemon now. As a warning, one failed session kept the dashboard's doctor chip amber
    for good (issue 48)."""
    failed = Session.objects.filter(failure__isnull=False).exclude(failure__kind="cancellation").count()
    if failed:
        return item("session_failures", "sessions", "info", "Sessions with failures",
                    f"{failed} session(s) stopped with a failure; the inbox lists those not yet acknowledged",
                    "compozy attention", evidence={"count": failed})
    return item("session_failures", "sessions", "ok", "Session failures", "none")


def check_live_streams() -> dict[str, Any]:
    """The SSE viewers this daemon process is serving, per session (one shared live feed each)."""

    streams = watched()
    viewers = sum(streams.values())
    return item("live_streams", "daemon", "ok", "Live streams",
                f"{viewers} viewer(s) on {len(streams)} session(s)", evidence={"sessions": streams})


SQLITE_MAGIC = b"SQLite format 3\x00"
LISTED = 100  # session ids named in an item's evidence, per kind


def damaged_store(path: Path, *, started: bool = False) -> str | None:
    """Why a session's events.db cannot hold its history, from its size and 100-byte header alone (cheap enough
    for every session): missing from a session that started (its create made the file before meta.json, so its
    history was deleted), empty (SQLite would read it as a store with no events), not SQLite, or shorter than its
    first page (truncated). None when it looks whole, or is missing from a session that never started."""
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
            info = os.fstat(handle.fileno())
    except FileNotFoundError:
        return "missing" if started else None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    size = info.st_size
    if size == 0:
        # SQLite creates the file empty and writes its first page a moment later: only an old empty file is damage.
        return "empty" if time.time() - info.st_mtime > 60 else None
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        return "not an SQLite database"
    page = int.from_bytes(header[16:18], "big")
    if size < (65536 if page == 1 else page):
        return f"truncated ({size} bytes, shorter than its first page)"
    return None


def check_session_metadata() -> dict[str, Any]:
    """Every session folder read now: an unreadable meta.json, or an events.db that cannot hold its history,
    and what the last boot repair could not repair. A session listed here is shown from its catalog row."""

    invalid, damaged, why_invalid = [], {}, ""
    folders = list_session_dirs()
    for session_id in folders:
        started = False
        try:
            started = bool((meta := read_meta(session_id)) and meta.get("activated_at"))
        except ValueError as exc:
            invalid.append(session_id)
            why_invalid = why_invalid or first_line(exc)  # names the file: `<path>: nested deeper than …`
        why = damaged_store(events_path(session_id), started=started)
        if why is not None:
            damaged[session_id] = why
    report = read_report()
    failed = list((report["failed"] if report else None) or [])
    # Bounded like the boot report (a tree of broken folders must not make doctor's answer huge); the counts are whole.
    evidence = {"invalid": invalid[:LISTED], "damaged_stores": dict(list(damaged.items())[:LISTED]),
                "failed": failed[:LISTED], "boot_repair_at": report["at"] if report else None,
                "folders": len(folders)}
    if not (invalid or damaged or failed):
        return item("session_metadata", "sessions", "ok", "Session metadata",
                    f"{len(folders)} session folder(s) read: every meta.json valid, every events.db whole",
                    evidence=evidence)
    if invalid:
        # Nothing in Compozy reads past a broken meta.json: a person fixes it (its events.db keeps the history).
        hint = f"fix or move aside {session_dir(invalid[0])}/meta.json"
    elif damaged:
        hint = f"compozy session evidence {next(iter(damaged))}"
    else:
        hint = f"compozy session repair {failed[0]} --dry-run"
    first = why_invalid or (list(damaged) or failed)[0]
    return item("session_metadata", "sessions", "warn", "Session folders that need a person",
                f"{len(invalid)} unreadable meta.json (session_meta_invalid), {len(damaged)} damaged events.db, "
                f"{len(failed)} failed boot repair(s); e.g. {first}", hint, evidence)


# The wake cycle is late when no tick was claimed for this many cycle intervals (a stuck or dead consumer).
WAKE_LATE_CYCLES = 4


def check_health_rows() -> dict[str, Any]:
    """Every session has a health row, and an unstopped one was written since the daemon started."""

    missing = Session.objects.filter(health__isnull=True).count()
    started = parse_time(current_run() or None)
    outdated = SessionHealth.objects.exclude(state="stopped").filter(updated_at__lt=started).count() if started else 0
    stale = SessionHealth.objects.filter(health="stale").count()
    evidence = {"missing": missing, "outdated": outdated, "stale": stale}
    if missing or outdated:
        return item("session_health_rows", "sessions", "warn", "Session health rows missing or outdated",
                    f"{missing} session(s) without a health row, {outdated} live row(s) not written since the daemon "
                    "started", "compozy daemon stop && compozy daemon start", evidence)
    if stale:
        return item("session_health_rows", "sessions", "info", "Stale sessions",
                    f"{stale} idle session(s) past [agents.heartbeat].session_health_stale_after; a prompt makes "
                    "them healthy", "compozy session list --all -o json", evidence)
    return item("session_health_rows", "sessions", "ok", "Session health", "every session has a current row",
                evidence=evidence)


def check_wake_service() -> dict[str, Any]:
    """Health recomputed for this daemon start, and the wake cycle claiming its ticks."""

    if not get_config().heartbeat.enabled:
        return item("wake_service", "daemon", "info", "Wake service", "disabled ([agents.heartbeat].enabled = false)")
    if not current_run():
        return item("wake_service", "daemon", "info", "Wake service", "the daemon is not running")
    state = service_state()
    if state["health_recomputed_at"] is None:
        return item("wake_service", "daemon", "warn", "Wake service waiting",
                    "session health is not recomputed yet for this daemon start; wakes wait for it", evidence=state)
    last = parse_time(state["last_cycle_at"])
    late = WAKE_LATE_CYCLES * wake_every()
    # Late counts from this daemon's start too: a cycle of an earlier run, or none yet, is no alarm a second in.
    since = max((t for t in (last, parse_time(current_run())) if t is not None), default=None)
    if since is None or (utcnow() - since).total_seconds() > late:
        return item("wake_service", "daemon", "warn", "Wake service not cycling",
                    f"no wake cycle in the last {int(late)} s; the daemon log says why its job consumer stalled",
                    "compozy daemon stop && compozy daemon start", evidence=state)
    if last is None or last < since:
        return item("wake_service", "daemon", "info", "Wake service starting",
                    f"no wake cycle yet since this daemon started (one is due within {int(wake_every())} s)",
                    evidence=state)
    return item("wake_service", "daemon", "ok", "Wake service", f"last cycle {state['last_cycle_at']}",
                evidence=state)


def check_heartbeat_policies() -> dict[str, Any]:
    """Each agent's newest HEARTBEAT.md snapshot (home-level re-resolved now): an invalid file pauses its wakes."""

    for name in get_config().agents:
        policy.resolve(name, "")
    invalid: list[dict[str, Any]] = []
    for agent, ws in HeartbeatSnapshot.objects.values_list("agent_name", "workspace_id").distinct():
        snap = policy.latest_snapshot(agent, ws)
        if snap is not None and snap.status == PolicyStatus.INVALID:
            invalid.append({"agent": agent, "workspace_id": ws or None, "source_path": snap.source_path,
                            "codes": sorted({d["code"] for d in snap.diagnostics})})
    if invalid:
        first = invalid[0]
        # A home-level file serves every workspace without one of its own: one file, however many snapshots.
        files = len({entry["source_path"] for entry in invalid})
        return item("heartbeat_policies", "agents", "warn", "Invalid HEARTBEAT.md",
                    f"{files} policy file(s) invalid, wakes paused (heartbeat_invalid); e.g. "
                    f"{first['source_path']}: {', '.join(first['codes'])}",
                    f"compozy agent heartbeat status {first['agent']}", {"invalid": invalid})
    return item("heartbeat_policies", "agents", "ok", "HEARTBEAT.md policies", "no invalid policy file")
def check_cluster() -> list[dict[str, Any]]:
    """Nodes of the cluster and the shared services (PostgreSQL, Redis); one node on SQLite is the embedded default."""

    report = cluster.status()
    db, redis = report["services"]["database"], report["services"]["redis"]
    items = [item("shared_database", "cluster", "ok" if db["status"] == "ok" else "error",
                  f"Catalog database ({db['engine']})",
                  f"reachable in {db.get('latency_ms')} ms" if db["status"] == "ok" else db.get("error", ""),
                  evidence=db)]
    if redis["status"] != "not_used":
        items.append(item("shared_redis", "cluster", "ok" if redis["status"] == "ok" else "error", "Redis",
                          f"reachable in {redis.get('latency_ms')} ms" if redis["status"] == "ok"
                          else redis.get("error", ""), evidence=redis))
    down = [n for n in report["nodes"] if n["status"] != "up"]
    expired = [lease for lease in report["leases"] if lease["expired"]]
    # A dead run's lease on a session boot repair already stopped is clean-up the next failover sweep does (within
    # a lease TTL), not a session left running nowhere: no warning for those alone.
    settled = set(Session.objects.filter(id__in=[lease["session_id"] for lease in expired],
                                         state="stopped").values_list("id", flat=True))
    stranded = [lease for lease in expired if lease["session_id"] not in settled]
    severity = "warn" if down or stranded else "ok"
    names = ", ".join(n["id"] for n in down[:5]) + (f" and {len(down) - 5} more" if len(down) > 5 else "")
    message = (f"{len(report['nodes'])} node(s), {len(down)} down" + (f" ({names})" if down else "") +
               f"; {report['lease_count']} lease(s), "
               f"{len(expired)} expired" + (f" ({len(settled)} of stopped sessions, cleared by the next failover "
                                            "sweep)" if settled else ""))
    items.append(item("cluster_nodes", "cluster", severity, f"Node {report['node_id']}", message,
                      evidence={"nodes": report["nodes"], "expired_leases": expired[:10]}))
    token = report["cluster_token"]
    if token["status"] == "refused":
        items.append(item("cluster_token", "cluster", "error", "Cluster token refused",
                          f"{token['reason']}; set the same secret on every node and restart", evidence=token))
    elif token["status"] == "ok" or len(report["nodes"]) > 1:
        items.append(item("cluster_token", "cluster", "ok" if token["status"] == "ok" else "warn", "Cluster token",
                          "set: work for other nodes' sessions is routed to them" if token["status"] == "ok" else
                          "not set: work for other nodes' sessions answers 409 session_owned_elsewhere",
                          evidence=token))
    return items


def broad_roots(roots: list[str], home: Path) -> list[str]:
    """Roots that hold the whole filesystem or the user's home (`/`, `/home`, `~`): an agent confined to one is
    not confined, since its fs requests reach `~/.ssh` and every other project."""
    return [root for root in roots if Path(root) == home or Path(root) in home.parents]


def check_workspace_roots() -> dict[str, Any]:
    home = Path.home().resolve()
    found = {ws.id: broad_roots([ws.root_dir, *(ws.add_dirs or [])], home) for ws in Workspace.objects.all()}
    found = {ws_id: roots for ws_id, roots in found.items() if roots}
    if not found:
        return item("workspace_roots", "security", "ok", "Workspace roots", "no workspace spans / or the home folder")
    first_id, first_roots = next(iter(found.items()))
    return item("workspace_roots", "security", "warn", "Broad workspace roots",
                f"{len(found)} workspace(s) span {first_roots[0]}: agents' file requests there reach every file "
                f"under it (~/.ssh included); register the project folder instead",
                f"compozy workspace remove {first_id}", evidence={"workspaces": found})


# A delivery given up within this long is a warning; older ones stay in the evidence of the `ok` item.
WEBHOOK_FAILURE_WINDOW_HOURS = 24


def check_webhooks() -> dict[str, Any]:
    """The webhook outbox: deliveries given up (max_attempts spent, a 4xx, a webhook removed) and ones retrying.
    Targets are scheme, host and port only: a webhook's URL and secret never appear here."""
    from datetime import timedelta

    from attention.delivery import outbox_state

    hooks = get_config().notifications.webhooks
    state = outbox_state(utcnow() - timedelta(hours=WEBHOOK_FAILURE_WINDOW_HOURS))
    evidence = {"webhooks": [{"key": w.key, "target": w.target, "events": sorted(w.events)} for w in hooks], **state}
    if state["failed_recent"]:
        first = state["failed"][0]
        return item("webhooks", "notifications", "warn", "Webhook deliveries given up",
                    f"{state['failed_recent']} given up in the last {WEBHOOK_FAILURE_WINDOW_HOURS} h; e.g. "
                    f"{first['event']} to {first['target']} after {first['attempts']} attempt(s): "
                    f"{first['last_error']}",
                    "compozy doctor -o json", evidence)
    if state["retrying_total"]:
        first = state["retrying"][0]
        return item("webhooks", "notifications", "info", "Webhook deliveries retrying",
                    f"{state['retrying_total']} waiting for their receiver; e.g. {first['event']} to {first['target']}:"
                    f" {first['last_error']}", evidence=evidence)
    if not hooks:
        return item("webhooks", "notifications", "ok", "Webhooks", "none configured ([[notifications.webhooks]])",
                    evidence=evidence)
    return item("webhooks", "notifications", "ok", "Webhooks",
                f"{len(hooks)} configured, {state['counts']['delivered']} delivered, {state['counts']['pending']} "
                "pending", evidence=evidence)


def check_memory() -> dict[str, Any]:
    """Memory's files and index (docs/reference/memory.md §2): a file with bad frontmatter or an index that
    lags its files can make a session look broken (it was not given what it should have known)."""
    from memory import health

    report = health.report()
    idx = report.index
    evidence = {"index": {"state": idx.state, "cause": idx.cause, "entries": idx.entries},
                "scopes": len(report.scopes), "problems": [{"path": p.path, "problem": p.problem}
                                                          for p in report.problems[:20]]}
    bad = [p for p in report.problems if p.problem.startswith(("bad frontmatter", "misplaced", "unreadable"))]
    if idx.state == "failed":
        return item("memory", "memory", "error", "Memory index failed", idx.cause or "the index failed",
                    "compozy memory reindex", evidence)
    if bad:
        return item("memory", "memory", "warn", "Memory files unreadable",
                    f"{len(bad)} file(s) left out of memory: {bad[0].path}: {bad[0].problem}",
                    "compozy memory health", evidence)
    if idx.state != "fresh":
        return item("memory", "memory", "warn", "Memory index stale", idx.cause or idx.state,
                    "compozy memory reindex", evidence)
    files = sum(s.files for s in report.scopes)
    return item("memory", "memory", "ok", "Memory", f"{files} entr(y/ies) in {len(report.scopes)} scope(s), index "
                "fresh", evidence=evidence)


CHECKS: list[Callable[[], dict[str, Any] | list[dict[str, Any]]]] = [
    check_config, check_catalog, check_event_storage, check_socket, check_sandbox, check_crash_bundles,
    check_file_modes, check_queue, check_failures, check_live_streams, check_providers, check_health_rows,
    check_session_metadata,
    check_wake_service, check_heartbeat_policies, check_cluster, check_workspace_roots, check_webhooks,
    check_git, check_worktree_disk,
    check_memory,
]


def run_doctor(only: list[str] | None = None, exclude: list[str] | None = None, quiet: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    items: list[dict[str, Any]] = []
    for check in CHECKS:
        try:
            result = check()
        except Exception as exc:  # noqa: BLE001 - a broken check is an item showing its cause; the others still run
            # One line (a database driver's message runs over several), naming the failure's kind.
            first = first_line(exc)
            result = item(check.__name__.removeprefix("check_"), "daemon", "error", "Check failed",
                          f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
        items.extend(result if isinstance(result, list) else [result])
    known = {i["id"] for i in items} | {i["category"] for i in items}
    unknown = sorted({name for name in (only or []) + (exclude or []) if name not in known})
    if unknown:
        # A typo must not read as "nothing wrong" (an empty report, status ok).
        raise InvalidRequest(f"unknown check(s): {', '.join(unknown)[:200]}; checks: {', '.join(sorted(known))}",
                             code="invalid_check", data={"unknown": unknown[:20], "known": sorted(known)})
    if only:
        items = [i for i in items if i["id"] in only or i["category"] in only]
    if exclude:
        items = [i for i in items if i["id"] not in exclude and i["category"] not in exclude]
    counts = {s: sum(1 for i in items if i["severity"] == s) for s in SEVERITY_ORDER}
    worst = max((SEVERITY_ORDER.index(i["severity"]) for i in items), default=0)
    status = {0: "ok", 1: "ok", 2: "warn"}.get(worst, "error")
    if quiet:
        items = [i for i in items if i["severity"] != "ok"]
    return {"schema_version": 1, "generated_at": isoformat(utcnow()),
            "duration_ms": round((time.monotonic() - started) * 1000, 1), "status": status,
            "summary": {"total": sum(counts.values()), "counts_by_severity": counts}, "items": items}
