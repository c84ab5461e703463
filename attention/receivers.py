"""What attention does when another app signals: Django signal receivers, connected in `AttentionConfig.ready()`."""

from __future__ import annotations

from typing import Any

from attention.outbox import on_meta_saved, on_task_noted
from sessions.core.record import SessionRecord
from tasks.models import TaskEvent


def session_outbox(sender: object, *, record: SessionRecord, **_: Any) -> None:
    """`sessions.catalog.index.meta_saved`: the webhook events the saved record carries, into the outbox."""
    on_meta_saved(record)


def task_outbox(sender: object, *, event: TaskEvent, **_: Any) -> None:
    """`tasks.history.task_noted`: a task turning `needs_attention`, into the outbox in the task's transaction."""
    on_task_noted(event)
