"""Finding a session, its agent and provider: meta.json with stale live states repaired (§13), scoped to a
workspace, and the live runtime if this daemon owns it."""

from __future__ import annotations

import logging

from asgiref.sync import sync_to_async
from django.db import DatabaseError

from compozy_base.auth import cluster_token_state
from compozy_base.config.agents import AgentConfig, ProviderConfig
from compozy_base.config.loader import Config
from sessions.catalog import cluster, ownership
from sessions.catalog import index as catalog
from sessions.core.enums import LIVE_STATES, SessionState
from sessions.core.errors import Conflict, InvalidRequest, NotFound
from sessions.core.live import LiveSession
from sessions.core.record import SessionMeta
from sessions.models import Session, Workspace
from sessions.repair.stale import repair_row_only, repair_stale_meta, stale_fix
from sessions.runtime.manager import get_manager
from sessions.services.payloads import SessionPayload, _live_runtime, session_payload
from sessions.store import folder, replica
from sessions.store.folder import load_meta

logger = logging.getLogger(__name__)


def resolve_agent(config: Config, agent_name: str, ws: Workspace) -> tuple[AgentConfig, ProviderConfig, str]:
    name = agent_name or ws.default_agent or config.default_agent
    agent = _agent(config, name)
    return agent, _provider(config, agent.provider or config.default_provider), name


def _agent(config: Config, name: str) -> AgentConfig:
    if not name:
        raise InvalidRequest("agent name is required", code="agent_required")
    agent = config.agents.get(name)
    if agent is None:
        raise NotFound(f"agent {name!r} is not defined", code="agent_not_found",
                       data={"agent": name, "known": sorted(config.agents)})
    return agent


def _provider(config: Config, name: str) -> ProviderConfig:
    if not name:
        raise InvalidRequest("agent provider is required", code="provider_required")
    provider = config.providers.get(name)
    if provider is None:
        raise NotFound(f"provider {name!r} is not defined", code="provider_not_found",
                       data={"provider": name, "known": sorted(config.providers)})
    return provider


def read_session_meta(session_id: str) -> SessionMeta:
    """meta.json of a session, stale live states repaired when no runtime owns them (§13). A snapshot
    the daemon could not write yet (a full disk) is newer than the file, so it wins."""
    unsaved = _unsaved_meta(session_id)
    if unsaved is not None:
        return unsaved
    try:
        meta = load_meta(session_id)
    except Conflict:
        # meta.json damaged under a session this daemon runs (by hand, a bad disk): the runtime's copy is the
        # truth, so the session can still be read and stopped, and its next write puts the file right.
        live = _runtime_meta(session_id)
        if live is None:
            raise
        return live
    if meta["state"] in LIVE_STATES and _live_runtime(session_id) is None and not _daemon_may_own(session_id):
        fixed = stale_fix(meta)
        if fixed is not None:
            try:
                meta = repair_stale_meta(meta, fixed)
            except OSError as exc:
                # A read answers even when the disk cannot take the repair (full): it shows the repaired state, and
                # the next read or boot repair writes it.
                logger.warning("session %s: stale state not written back (%s); answering with the repair",
                               session_id, exc)
                meta = fixed
    return meta


def pull_copy(session_id: str) -> None:
    """In a cluster whose nodes keep their own disks, a session this process does not write is read from this
    node's copy of its folder, first brought up to the database's (store/replica.py): a dead node's sessions
    stay readable on every survivor."""
    if not replica.enabled() or ownership.runs_here(session_id):
        return
    try:
        replica.pull(session_id)
    except DatabaseError as exc:  # answered from what this node has (the catalog row, or its copy)
        logger.warning("session %s: the cluster's copy was not read (%s)", session_id, exc)
        replica.drop_connection()


def _runtime_meta(session_id: str) -> SessionMeta | None:
    runtime = _live_runtime(session_id)
    if runtime is None:
        return None
    for _ in range(3):
        try:
            return runtime.rec.to_meta()
        except RuntimeError:  # changed by the loop while copied (this may run on a worker thread): read again
            continue
    return None


def _unsaved_meta(session_id: str) -> SessionMeta | None:
    manager = ownership.local_manager()
    rec = manager.unsaved_meta.get(session_id) if manager is not None else None
    return rec.to_meta() if rec is not None else None


def _daemon_may_own(session_id: str) -> bool:
    """A live state is live while this daemon runs (or is creating) the session, or while another node holds its
    unexpired lease. Outside a daemon (manage.py, tests) a running daemon of this home may own it too: leave it."""
    if ownership.owner(session_id).anyone:
        return True
    # An expired lease is not yet a dead owner to a node back from a database outage: the owner renews first.
    return not cluster.may_judge_leases() and cluster.leased(session_id)


def row_meta_unreadable(row: Session) -> SessionMeta:
    """The catalog row's metadata for a session whose meta.json is unreadable, with the stale-state rules applied
    to the row when no daemon runs it (a crashed run's row said `active` until boot repair or failover came)."""
    if row.state in LIVE_STATES and not _daemon_may_own(row.id):
        repair_row_only(row.id, row)
    return catalog.row_meta(row)


class SessionOwnedElsewhere(Conflict):
    """Work that must touch a live runtime reached a node that does not run it."""

    def __init__(self, session_id: str, holder: cluster.Holder) -> None:
        super().__init__(f"session {session_id} runs on node {holder.node_id} ({holder.address}); send this "
                         f"request there{_not_routed()}", code="session_owned_elsewhere",
                         data={"session_id": session_id, "owner": holder.public()})


def _not_routed() -> str:
    """Why this node did not route the request, when its cluster token is refused: nothing else points at it."""

    token = cluster_token_state()
    return f" (not routed: {token['reason']})" if token["status"] == "refused" else ""


class SessionFolderElsewhere(Conflict):
    """A session the catalog lists whose folder (meta.json, events.db) is on another node's disk, and that node did
    not answer for it (down, unreachable, or not known): the record comes from the catalog row, its store not."""

    def __init__(self, session_id: str, node: str) -> None:
        where = f"node {node}" if node else "another node"
        super().__init__(f"session {session_id} is stored on {where}, which did not answer (no shared sessions "
                         f"folder); its events and history are read there{_not_routed()}",
                         code="session_folder_elsewhere",
                         data={"session_id": session_id, "folder_node": node or None})


def _row_elsewhere(session_id: str) -> Session | None:
    """The catalog row of a session whose folder is not on this node (another node's disk), else None. Embedded
    (one node) such a row is an orphan, `rebuild_catalog`'s to clear: not found."""

    if not cluster.clustered() or folder.session_dir(session_id).exists():
        return None
    row = Session.objects.filter(id=session_id).first()
    if row is None or (row.folder_node and row.folder_node == cluster.node_id()):
        return None
    return row


def scoped_meta(session_id: str, workspace_ref: str | None, *, row_ok: bool = False) -> SessionMeta:
    """meta.json of a session that must belong to `workspace_ref` (a session outside it is 404). A session stored on
    another node's disk reads from its catalog row when `row_ok` (the record, its health), else is refused naming
    that node (`session_folder_elsewhere`): never a bare not found for a session the list shows."""
    pull_copy(session_id)
    try:
        meta = read_session_meta(session_id)
    except NotFound:
        row = _row_elsewhere(session_id)
        if row is None:
            raise
        if not row_ok:
            raise SessionFolderElsewhere(session_id, row.folder_node) from None
        meta = row_meta_unreadable(row)
    check_workspace_scope(workspace_ref, meta)
    return meta


def check_workspace_scope(workspace_ref: str | None, meta: SessionMeta) -> None:
    if workspace_ref is None:
        return
    try:
        ws = catalog.find_workspace(workspace_ref)
    except NotFound:
        raise NotFound("session not found", code="session_not_found") from None
    if ws.id != meta["workspace_id"]:
        raise NotFound("session not found in this workspace", code="session_not_found")


def get_session(session_id: str, workspace_ref: str | None = None) -> SessionPayload:
    meta = scoped_meta(session_id, workspace_ref, row_ok=True)
    return session_payload(meta)


async def _runtime_for(session_id: str, workspace_ref: str | None) -> tuple[LiveSession | None, SessionMeta]:
    try:
        meta = await sync_to_async(scoped_meta)(session_id, workspace_ref)
    except SessionFolderElsewhere:
        holder = await sync_to_async(ownership.holder_elsewhere)(session_id)
        if holder is not None:  # it runs there: the owner is the answer, not where its folder is
            raise SessionOwnedElsewhere(session_id, holder) from None
        raise
    runtime: LiveSession | None = get_manager().get(session_id)  # a SessionRuntime, checked as one here
    if runtime is None and meta["state"] in LIVE_STATES:
        holder = await sync_to_async(ownership.holder_elsewhere)(session_id)
        if holder is not None:
            raise SessionOwnedElsewhere(session_id, holder)
    return runtime, meta


def not_active(meta: SessionMeta, runtime: LiveSession | None) -> InvalidRequest:
    """400 session_not_active naming the state the session is really in: a stop under way has not written
    `stopping` yet while its pre-stop hook runs, and said "session is active, not active"."""
    state = SessionState.STOPPING.value if runtime is not None and runtime.stopping and \
        meta["state"] == SessionState.ACTIVE else str(meta["state"])
    return InvalidRequest(f"session is {state}, not active", code="session_not_active", data={"state": state})


async def _active_runtime(session_id: str, workspace_ref: str | None) -> LiveSession:
    runtime, meta = await _runtime_for(session_id, workspace_ref)
    if runtime is None or meta["state"] != SessionState.ACTIVE or runtime.stopping:
        raise not_active(meta, runtime)
    return runtime
