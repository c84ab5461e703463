"""The persisted session input queue: FIFO entries with ids, positions and a generation fence."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from compozy_base.config.loader import BusyInputConfig
from sessions.core.errors import InvalidRequest, NotFound, QueueFull
from sessions.models import PENDING_INPUT, InputEntry
from sessions.store.folder import utcnow
from sessions.store.ids import new_queue_entry_id

# The entries a turn's end dispatches, oldest first (a staged steer waits for a tool result instead).
DISPATCHED_MODES = ("queue", "startup")
TICK = timedelta(microseconds=1)


def queue_stamp(now: datetime, newest: datetime | None) -> datetime:
    """The creation time of a session's next queue entry: `now`, or just after its newest entry when the clock
    reads no later (a step back, or two entries in one tick). The queue runs oldest first, so its order is the
    order entries were admitted in whatever the clock does."""
    return now if newest is None or now > newest else newest + TICK


class InputQueue:
    def __init__(self, limits: BusyInputConfig) -> None:
        self.limits = limits

    def check_text(self, text: str, field: str = "message") -> str:
        """`text` trimmed; refused when blank or over the size limit. `field` names the body's field in the error
        (`message` of a prompt, `prompt` of a create, `text` of a steer)."""
        text = (text or "").strip()
        if not text:
            raise InvalidRequest(f"{field} is required", code="message_required")
        if len(text.encode("utf-8")) > self.limits.max_text_bytes:
            raise InvalidRequest(
                f"{field} exceeds session.busy_input.max_text_bytes ({self.limits.max_text_bytes})",
                code="message_too_large",
            )
        return text

    def enqueue(self, session_id: str, text: str, *, mode: str = "queue", source: str = "user",
                generation: int = 0) -> tuple[InputEntry, int]:
        """Persist one entry; (entry, 1-based position). Over the cap → 413 and nothing changes."""
        text = self.check_text(text)
        with transaction.atomic():
            pending = InputEntry.objects.filter(session_id=session_id, status__in=PENDING_INPUT).count()
            if pending >= self.limits.queue_cap:
                raise QueueFull(
                    f"session input queue is full ({pending}/{self.limits.queue_cap})",
                    data={"queue_cap": self.limits.queue_cap},
                )
            newest = InputEntry.objects.filter(session_id=session_id).order_by("-created_at").values_list(
                "created_at", flat=True).first()
            now = queue_stamp(utcnow(), newest)
            entry = InputEntry.objects.create(
                id=new_queue_entry_id(), session_id=session_id, text=text, mode=mode, source=source,
                generation=generation, created_at=now, updated_at=now,
            )
        return entry, pending + 1

    def waiting(self, session_id: str) -> bool:
        """Whether input waits for the session's next turn (what `claim_next` takes, or one it took and is
        starting): a prompt arriving between two turns goes behind it."""
        return InputEntry.objects.filter(session_id=session_id, status__in=PENDING_INPUT,
                                         mode__in=DISPATCHED_MODES).exists()

    def claim_next(self, session_id: str) -> InputEntry | None:
        """Compare-and-set the oldest queued entry to dispatching, so it runs exactly once."""
        for entry in InputEntry.objects.filter(session_id=session_id, status=InputEntry.Status.QUEUED,
                                               mode__in=DISPATCHED_MODES).order_by("created_at", "id")[:5]:
            changed = InputEntry.objects.filter(id=entry.id, status=InputEntry.Status.QUEUED).update(
                status=InputEntry.Status.DISPATCHING, updated_at=utcnow())
            if changed == 1:
                entry.status = InputEntry.Status.DISPATCHING
                return entry
        return None

    def mark(self, entry_id: str, status: str) -> None:
        InputEntry.objects.filter(id=entry_id).update(status=status, updated_at=utcnow())

    def cancel(self, session_id: str, entry_id: str) -> InputEntry:
        changed = InputEntry.objects.filter(id=entry_id, session_id=session_id,
                                            status=InputEntry.Status.QUEUED).update(
            status=InputEntry.Status.CANCELED, updated_at=utcnow())
        entry = InputEntry.objects.filter(id=entry_id, session_id=session_id).first()
        if entry is None or changed != 1:
            raise NotFound("queue entry not found or no longer queued", code="queue_entry_not_found",
                           data={"queue_entry_id": entry_id})
        return entry

    def reset_dispatching(self, session_id: str) -> None:
        """After a crash, an entry caught mid-dispatch goes back to the queue (runs once more)."""
        InputEntry.objects.filter(session_id=session_id, status=InputEntry.Status.DISPATCHING).update(
            status=InputEntry.Status.QUEUED, updated_at=utcnow())

    def drop_older(self, session_id: str, generation: int) -> dict[str, str]:
        """Cancel pending entries older than `generation` (an interrupt fences them off): their ids and texts, in
        queue order, so each is named where it is dropped (a person sees which prompt will not run)."""
        stale = dict(InputEntry.objects.filter(session_id=session_id, status=InputEntry.Status.QUEUED,
                                               generation__lt=generation).order_by("created_at", "id")
                     .values_list("id", "text"))
        InputEntry.objects.filter(id__in=list(stale)).update(status=InputEntry.Status.CANCELED, updated_at=utcnow())
        return stale

    def to_queue(self, entry_id: str) -> None:
        """A steer that found no tool result runs as a normal queued prompt instead."""
        InputEntry.objects.filter(id=entry_id, status=InputEntry.Status.QUEUED).update(mode="queue",
                                                                                       updated_at=utcnow())
