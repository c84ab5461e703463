"""Claiming periodic work in the catalog, so several workers may run at once without locks.

The shape of healthchecks' `sendalerts`: read the row, then move it forward with a compare-and-set
(`filter(name=…, next_run_at=old).update(next_run_at=new)`); exactly one updated row means this worker
won the tick, zero means another one did (or the tick is not due). No lock is held while the work runs.
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime, timedelta

from django.db import IntegrityError
from django.db.models import F

from compozy_base import process
from compozy_base.home import compozy_home
from sessions.models import SweepClaim
from sessions.store import folder


def owner_id() -> str:
    """The node whose sessions a daemon owns: one daemon per COMPOZY_HOME, homes told apart by host."""
    return f"{socket.gethostname()}:{compozy_home()}"


def claimer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


def claim_tick(name: str, every: float, *, now: datetime | None = None, claimer: str | None = None) -> bool:
    """Claim the tick of `name` that is due at `now`; the next one falls due `every` seconds later.

    1. Read the row (create it, due now, the first time).
    2. Not due yet → False: another worker ran this tick.
    3. Compare-and-set `next_run_at` from the value read to `now + every`; one changed row → ours.
    """
    now = now or folder.utcnow()
    try:
        row, _ = SweepClaim.objects.get_or_create(name=name, defaults={"next_run_at": now})
    except IntegrityError:  # created by a racing worker between our read and insert
        row = SweepClaim.objects.get(name=name)
    if row.next_run_at > now:
        return False
    changed = SweepClaim.objects.filter(name=name, next_run_at=row.next_run_at).update(
        next_run_at=now + timedelta(seconds=every), claimed_by=claimer or claimer_id(), claimed_at=now,
        claims=F("claims") + 1)
    return changed == 1


def _holder_gone(claimed_by: str) -> bool:
    """Whether a claim's holder was a process on this host that no longer runs (`claimer_id`'s host:pid:thread)."""
    host, _, rest = claimed_by.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return not process.exists(int(pid))  # alive (ourselves, or as another user): its lease stands


def claim_lease(name: str, lease: float) -> bool:
    """Claim `name` for `lease` seconds: work that must run once, whose worker may die before it records that it
    ran. The claim falls due again when the lease ends, or at once when its holder was a process on this host that
    is gone (a daemon killed between its claim and its verdict, restarted: it must not wait out the lease)."""
    if claim_tick(name, lease):
        return True
    row = SweepClaim.objects.filter(name=name).first()
    if row is None or not _holder_gone(row.claimed_by or ""):
        return False
    return claim_tick(name, lease, now=row.next_run_at)  # the same compare-and-set, from the row read
