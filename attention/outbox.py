"""The webhook outbox: an event that needs a person becomes one row per subscribed webhook, when it is recorded.

Session events are read off every saved record (the `sessions.catalog.index.meta_saved` signal, on the runtime's
DB thread): a permission
request the record lists, a stop with a failure, a provider that wants a login, the turn that ended last. Each event
has an id derived from what it is about and when it began, and a row's id is that id plus the webhook's, so a
record saved again (a heartbeat, boot repair, another node's failover) writes nothing new. A task's `needs_attention`
comes from its history row, in the same transaction (the `tasks.history.task_noted` signal).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from datetime import datetime, timedelta

from accounts import links
from accounts.links import LinkOffer
from accounts.principal import OWNER_PRINCIPAL
from attention.enums import WebhookEvent
from attention.models import WebhookDelivery
from attention.notices import Notice, session_notices, task_notice
from compozy_base.config.loader import get_config
from compozy_base.config.notifications import NotificationsConfig, WebhookConfig
from sessions.core.record import SessionRecord
from sessions.store.folder import parse_time, utcnow
from tasks.enums import TaskEventKind
from tasks.models import TaskEvent

logger = logging.getLogger(__name__)

# A record saved long after its event (a webhook added to config.toml, then an old session repaired or resumed)
# does not replay history to the receiver.
MAX_EVENT_AGE = timedelta(hours=1)
# Rows this process knows are written: a record saved again (every turn heartbeat) costs no catalog read.
_KNOWN_CAP = 4096
_known: OrderedDict[str, None] = OrderedDict()


def _fresh(notice: Notice, now: datetime) -> bool:
    at = parse_time(notice.occurred_at)
    return at is None or now - at <= MAX_EVENT_AGE


def _workspace_names(workspace_id: str | None) -> tuple[str, ...]:
    """The workspace's id, name and root: a webhook's `workspaces` filter may name it by any of them."""
    from sessions.models import Workspace

    ws = Workspace.objects.filter(id=workspace_id).first() if workspace_id else None
    return (ws.id, ws.name, ws.root_dir) if ws else (workspace_id or "",)


def _base_url() -> str:
    from sessions.catalog import cluster

    identity = cluster.identity()
    return identity.address if identity is not None else ""


def enqueue(notices: list[Notice], config: NotificationsConfig, now: datetime | None = None) -> int:
    """One outbox row per (notice, webhook that wants it) not written yet; the number written."""
    now = now or utcnow()
    planned: dict[str, tuple[Notice, WebhookConfig]] = {}
    for notice in notices:
        if not _fresh(notice, now):
            continue
        names: tuple[str, ...] | None = None
        for hook in config.webhooks:
            if hook.workspaces and names is None:
                names = _workspace_names(notice.workspace_id)
            if hook.wants(notice.event, notice.agent, names or (notice.workspace_id or "",)):
                row_id = f"{notice.event_id}.{hook.key}"
                if row_id not in _known:
                    planned[row_id] = (notice, hook)
    if not planned:
        return 0
    present = set(WebhookDelivery.objects.filter(id__in=list(planned)).values_list("id", flat=True))
    rows = _rows({row_id: plan for row_id, plan in planned.items() if row_id not in present}, config, now)
    if rows:
        # Two nodes (or a save racing a failover) may write the same event: the primary key keeps one.
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
        from attention.delivery import wake_dispatcher

        wake_dispatcher()
    for row_id in planned:
        _known[row_id] = None
    while len(_known) > _KNOWN_CAP:
        _known.popitem(last=False)
    return len(rows)


def _rows(planned: dict[str, tuple[Notice, WebhookConfig]], config: NotificationsConfig,
          now: datetime) -> list[WebhookDelivery]:
    base = _base_url()
    offers: dict[str, list[LinkOffer]] = {}
    rows = []
    for row_id, (notice, hook) in planned.items():
        if config.action_links and notice.event_id not in offers:
            offers[notice.event_id] = _links(notice, config, now)
        rows.append(WebhookDelivery(id=row_id, event_id=notice.event_id, event=notice.event.value, webhook=hook.key,
                                    target=hook.target, body=notice.body(base, offers.get(notice.event_id)),
                                    next_attempt_at=now, created_at=now))
    return rows


LINK_KINDS = {WebhookEvent.PERMISSION_REQUESTED: links.LinkKind.PERMISSION,
              WebhookEvent.ELICITATION_REQUESTED: links.LinkKind.ELICITATION}


def _links(notice: Notice, config: NotificationsConfig, now: datetime) -> list[LinkOffer]:
    """Approve and deny links for a permission request, answer and decline for a question (one pair per event,
    shared by its webhooks), made with the owner's authority: the daemon sends them. Other events carry none."""
    kind = LINK_KINDS.get(notice.event)
    if kind is None or not notice.request_id or not notice.session_id:
        return []
    return links.make(OWNER_PRINCIPAL, notice.session_id, notice.workspace_id or "", notice.request_id,
                      notice.summary, config.link_ttl, now, kind)


def on_meta_saved(rec: SessionRecord) -> None:
    """`meta_saved` (connected in attention/receivers.py): the record's events into the outbox. A failure here
    never fails the save (the record
    is written already); it is logged with its cause, and the next save of the record writes the rows."""
    try:
        config = get_config().notifications  # loaded once per process (a manage.py command loads it here)
        if config.webhooks:
            enqueue(session_notices(rec.to_meta()), config)
    except Exception:  # logged with its traceback; the save it follows stands
        logger.exception("session %s: writing its webhook events to the outbox failed", rec.id)


def on_task_noted(row: TaskEvent) -> None:
    """`task_noted` (connected in attention/receivers.py): inside the task's transaction, so a failure here rolls
    the task's change back too (the
    task cycle retries it) rather than lose the event."""
    if row.kind != TaskEventKind.NEEDS_ATTENTION:
        return
    from django.db import transaction

    from attention.services import ring_attention

    workspace_id = row.task.workspace_id
    # The catalog stream tells viewers once the change is visible (a session's change rings from its save).
    transaction.on_commit(lambda: ring_attention(workspace_id, ""))
    config = get_config().notifications
    if not config.webhooks:
        return
    notice = task_notice(row)
    if notice is not None:
        enqueue([notice], config)
