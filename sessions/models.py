"""The catalog: workspaces, session rows (a mirror of each meta.json for listing) and the input queue.

meta.json is the per-session truth; `manage.py rebuild_catalog` recreates these rows from disk.
"""

from __future__ import annotations

from django.db import models

from sessions.core.enums import SessionState, SessionType


class Workspace(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    name = models.CharField(max_length=200, unique=True)
    root_dir = models.CharField(max_length=4096, unique=True)
    add_dirs = models.JSONField(default=list)
    default_agent = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]


class Session(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="sessions")
    name = models.CharField(max_length=300, blank=True, default="")
    agent_name = models.CharField(max_length=200)
    provider = models.CharField(max_length=200, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    session_type = models.CharField(max_length=20, default=SessionType.USER,
                                    choices=[(t.value, t.value) for t in SessionType])
    state = models.CharField(max_length=20, choices=[(s.value, s.value) for s in SessionState], db_index=True)
    stop_reason = models.CharField(max_length=40, blank=True, default="")
    stop_detail = models.CharField(max_length=2048, blank=True, default="")
    failure = models.JSONField(null=True, blank=True)
    acp_session_id = models.CharField(max_length=200, blank=True, default="")
    last_activity_at = models.DateTimeField(null=True, blank=True)
    # Holder lease for resume attach (docs/reference/sessions.md §15).
    attached_to = models.CharField(max_length=200, blank=True, default="")
    attach_expires_at = models.DateTimeField(null=True, blank=True)
    # The node whose sessions folder holds meta.json and events.db (the last to write them). Without a shared
    # folder, a read or a prompt reaching another node is sent there, or refused naming it. A default in the
    # database too: rows inserted by SQL, or by a node not yet upgraded, still go in.
    folder_node = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-updated_at"]


class InputEntry(models.Model):
    """The persisted session input queue: a staged first prompt, queued prompts and steer text."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        DISPATCHING = "dispatching"
        SENT = "sent"
        FAILED = "failed"
        CANCELED = "canceled"

    id = models.CharField(primary_key=True, max_length=40)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="inputs")
    text = models.TextField()
    mode = models.CharField(max_length=20, default="queue")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    generation = models.IntegerField(default=0)
    source = models.CharField(max_length=40, default="user")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]


PENDING_INPUT = (InputEntry.Status.QUEUED, InputEntry.Status.DISPATCHING)


class SweepClaim(models.Model):
    """One row per periodic job of one daemon (supervision, tombstones, boot repair).

    A tick is claimed by moving `next_run_at` forward with a compare-and-set
    (`sessions/catalog/claims.py`), so any number
    of huey consumers may receive the job's messages and each tick still runs once."""

    name = models.CharField(primary_key=True, max_length=300)
    next_run_at = models.DateTimeField()
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    claims = models.PositiveBigIntegerField(default=0)  # ticks claimed so far: shows a tick never ran twice


class Node(models.Model):
    """One daemon of a cluster (one per COMPOZY_HOME), heartbeated by its ticker: `compozy status` lists them and
    work that must touch a session's runtime is routed to `address` (sessions/catalog/cluster.py)."""

    id = models.CharField(primary_key=True, max_length=200)
    address = models.CharField(max_length=300, blank=True, default="")
    run = models.CharField(max_length=64, blank=True, default="")  # the daemon start (daemon.json started_at)
    pid = models.IntegerField(default=0)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)


class SessionLease(models.Model):
    """Which node runs a live session: taken with a compare-and-set at launch, renewed by the owner's ticker,
    deleted at stop. Only the holder runs the agent and writes events.db; an expired lease means a dead owner."""

    session = models.OneToOneField(Session, primary_key=True, on_delete=models.CASCADE, related_name="lease")
    node_id = models.CharField(max_length=200)
    run = models.CharField(max_length=64)  # the holder's daemon start: a restarted node's old leases are dead
    address = models.CharField(max_length=300, blank=True, default="")
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)


class EventCopy(models.Model):
    """A committed event's durable copy in a cluster's database (sessions/store/replica.py): any node reads, tails
    and exports a session from these rows, and a new owner rebuilds its `events.db` from them. A table apart from
    the catalog's, keyed by session and sequence, written only by the holder of the session's lease (the insert
    locks the lease row in its own transaction). No foreign key: it outlives nothing, a removal deletes it."""

    pk = models.CompositePrimaryKey("session_id", "sequence")
    session_id = models.CharField(max_length=64)
    sequence = models.BigIntegerField()
    event_id = models.CharField(max_length=64)
    turn_id = models.CharField(max_length=64)
    type = models.CharField(max_length=64)
    agent_name = models.CharField(max_length=200)
    content = models.TextField()
    timestamp = models.CharField(max_length=40)
    archived = models.BooleanField(default=False)

    class Meta:
        db_table = "compozy_event_copy"


class MetaCopy(models.Model):
    """`meta.json`'s content, durable in a cluster's database: written with every catalog mirror, read by any node
    that has no copy of the session's folder (or an older one: `version` grows with every save)."""

    session_id = models.CharField(primary_key=True, max_length=64)
    version = models.BigIntegerField(default=1)
    meta = models.TextField()

    class Meta:
        db_table = "compozy_meta_copy"
