"""Failover (cluster rule 4): a survivor claims each lease whose owner stopped renewing and applies the
stale-state rules to that session (docs/reference/sessions.md §13), so a dead node's sessions end `stopped`, never stuck
`active`, and its last turn, if it was mid-way, gets its interrupted results and terminal error at once.

Apart from `catalog/cluster.py` (nodes and leases) because it builds on the repair rules, and those read the leases.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sessions.catalog import cluster
from sessions.catalog.ownership import runs_here
from sessions.core.errors import CompozyError
from sessions.core.record import SessionMeta
from sessions.repair.boot import check_transcript_once
from sessions.repair.stale import repair_row_only, repair_stale_meta
from sessions.store import replica
from sessions.store.folder import load_meta

logger = logging.getLogger(__name__)


def recover_expired(now: datetime | None = None) -> list[str]:
    """Failover: apply the stale-state rules to each session whose owner stopped renewing (rule 4)."""
    repaired = []
    cluster.drop_old_fences(now)
    for row in cluster.expired(now):
        if not cluster.claim_expired(row):
            continue
        session_id = row.session_id
        in_folder = True
        copied = False
        try:
            if runs_here(session_id):
                continue  # reactivated here meanwhile
            copied = replica.pull(session_id)  # each node its own disk: this node's copy, from the database
            meta = load_meta(session_id)
            fixed: SessionMeta | None = repair_stale_meta(meta)
        except Exception as exc:
            # The folder is not shared with the dead node, or its meta.json is invalid (known: one line, no
            # traceback): the catalog row is all there is to correct.
            logger.warning("failover: %s has no readable meta.json here (%s); correcting its catalog row",
                           session_id, exc, exc_info=not isinstance(exc, CompozyError))
            in_folder = False
            fixed = repair_row_only(session_id)
        if fixed is not None:
            logger.info("failover: %s of node %s is now %s (%s)", session_id, row.node_id, fixed.get("state"),
                        fixed.get("stop_reason"))
            repaired.append(session_id)
            # A copy's events.db is never written by a node that does not hold the lease (it would part from the
            # database's): the node that continues the session closes the interrupted turn (reactivation.py).
            if in_folder and not copied:
                _close_interrupted_turn(session_id, fixed)
    return repaired


def _close_interrupted_turn(session_id: str, meta: SessionMeta) -> None:
    """The dead node's last turn, if it was mid-way, gets its interrupted results and terminal error now (§13 boot
    transcript repair), not at some node's next boot."""
    try:
        if cluster.leased(session_id):
            return  # reactivated by some node meanwhile: its store is that node's to write
        check_transcript_once(session_id, meta, None)
    except Exception:
        logger.warning("failover: transcript of %s not checked", session_id, exc_info=True)
