"""HEARTBEAT.md snapshots (docs/reference/health.md §5): locate an agent's file, validate it, keep an immutable snapshot
per change of the file or of `[agents.heartbeat]`, and answer `agent heartbeat status`."""

from __future__ import annotations

import hashlib
import logging
import secrets
from pathlib import Path
from typing import TypedDict, cast

from django.db import DatabaseError

from compozy_base.config.heartbeat import HeartbeatConfig
from compozy_base.config.loader import get_config
from compozy_base.home import compozy_home
from health import heartbeat
from health.enums import PolicyStatus
from health.models import HeartbeatSnapshot
from sessions.models import Workspace
from sessions.store.folder import isoformat, utcnow

logger = logging.getLogger(__name__)

FILE_NAME = "HEARTBEAT.md"
# A file far beyond the body limit is refused before it is read whole (frontmatter + body, twice the limit).
READ_LIMIT_FACTOR = 2


def candidate_paths(agent_name: str, workspace_root: str | None) -> list[Path]:
    """First wins, as for AGENT.md: the workspace's own, then the daemon home's."""
    paths = []
    if workspace_root:
        paths.append(Path(workspace_root) / ".compozy" / "agents" / agent_name / FILE_NAME)
    paths.append(compozy_home() / "agents" / agent_name / FILE_NAME)
    return paths


def _workspace_root(workspace_id: str) -> str | None:
    if not workspace_id:
        return None
    ws = Workspace.objects.filter(id=workspace_id).only("root_dir").first()
    return ws.root_dir if ws else None


def latest_snapshot(agent_name: str, workspace_id: str = "") -> HeartbeatSnapshot | None:
    return HeartbeatSnapshot.objects.filter(agent_name=agent_name, workspace_id=workspace_id).order_by(
        "-created_at", "-id").first()


def resolve(agent_name: str, workspace_id: str = "", cfg: HeartbeatConfig | None = None) -> HeartbeatSnapshot:
    """The current snapshot of an agent's policy, re-resolved when the file or the config digest changed."""
    cfg = cfg or get_config().heartbeat
    config_digest = heartbeat.config_digest(cfg)
    path = next((p for p in candidate_paths(agent_name, _workspace_root(workspace_id)) if p.is_file()), None)
    raw = b""
    if path is not None:
        try:
            with path.open("rb") as fh:
                raw = fh.read(cfg.max_body_bytes * READ_LIMIT_FACTOR + 16)
        except OSError:
            path, raw = None, b""
    file_digest = "sha256:" + hashlib.sha256(raw).hexdigest() if path else ""
    latest = latest_snapshot(agent_name, workspace_id)
    if latest is not None and latest.file_digest == file_digest and latest.config_digest == config_digest \
            and latest.source_path == (str(path) if path else ""):
        return latest
    if path is None:
        parsed = heartbeat.Parsed(False)
        status = PolicyStatus.MISSING
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None:
            parsed = heartbeat.Parsed(False, diagnostics=[heartbeat.diag("heartbeat_malformed_frontmatter",
                                                                         "HEARTBEAT.md is not UTF-8")])
        else:
            parsed = heartbeat.parse(text, cfg)
        status = PolicyStatus.VALID if parsed.valid else PolicyStatus.INVALID
    for d in parsed.diagnostics:
        d.setdefault("source_path", str(path))
    snap = HeartbeatSnapshot(
        id="hbs_" + secrets.token_hex(8), agent_name=agent_name, workspace_id=workspace_id,
        source_path=str(path) if path else "", status=status, digest=parsed.digest, file_digest=file_digest,
        config_digest=config_digest, policy=parsed.policy if parsed.valid else {}, body=parsed.body,
        diagnostics=parsed.diagnostics, created_at=utcnow())
    try:
        snap.save(force_insert=True)
    except DatabaseError as exc:
        # A read (`session inspect`, `agent heartbeat status`) must answer when the catalog cannot take a write
        # (a full disk): the policy is resolved all the same, unstored, so its snapshot id is empty (names none).
        logger.warning("HEARTBEAT.md snapshot of %s resolved but not stored: %s", agent_name, exc)
        snap.id = ""
    return snap


class SnapshotSummary(TypedDict):
    snapshot_id: str
    validation_status: str
    digest: str | None
    config_digest: str
    source_path: str | None
    created_at: str | None


class HeartbeatStatus(TypedDict):
    """Heartbeat status DTO (docs/reference/surfaces.md §4.8)."""

    agent_name: str
    workspace_id: str | None
    source_path: str | None
    present: bool
    valid: bool
    validation_status: str
    enabled: bool
    config_enabled: bool
    active: bool
    digest: str | None
    config_digest: str
    snapshot_id: str
    summary: str | None
    preferences: heartbeat.PreferencesDoc
    context: heartbeat.ContextDoc
    diagnostics: list[heartbeat.Diagnostic]


def snapshot_summary(snap: HeartbeatSnapshot | None) -> SnapshotSummary | None:
    if snap is None:
        return None
    return {"snapshot_id": snap.id, "validation_status": snap.status, "digest": snap.digest or None,
            "config_digest": snap.config_digest, "source_path": snap.source_path or None,
            "created_at": isoformat(snap.created_at)}


def status(agent_name: str, workspace_id: str = "", cfg: HeartbeatConfig | None = None) -> HeartbeatStatus:
    """Heartbeat status DTO (docs/reference/surfaces.md §4.8), re-resolving the file first."""
    cfg = cfg or get_config().heartbeat
    snap = resolve(agent_name, workspace_id, cfg)
    policy = cast(heartbeat.HeartbeatPolicy, snap.policy or {})  # as `resolve` stored it (`Parsed.policy`)
    valid = snap.status == PolicyStatus.VALID
    enabled = bool(policy.get("enabled", False)) if valid else False
    return {
        "agent_name": agent_name, "workspace_id": workspace_id or None, "source_path": snap.source_path or None,
        "present": snap.status != PolicyStatus.MISSING, "valid": valid, "validation_status": snap.status,
        "enabled": enabled, "config_enabled": cfg.enabled, "active": valid and enabled and cfg.enabled,
        "digest": snap.digest or None, "config_digest": snap.config_digest, "snapshot_id": snap.id,
        "summary": policy.get("summary") or None, "preferences": policy.get("preferences") or {},
        "context": policy.get("context") or {}, "diagnostics": list(snap.diagnostics),
    }
