"""Delivering the outbox: claim a due row, POST it signed, settle it. Runs on the daemon's webhook thread
(compozy/daemon/webhooks.py), never on the event loop.

1. A due row (pending, its next attempt reached, no live claim) is claimed with a compare-and-set on the values
   read (`claimed_by`, `claimed_until`, `attempts`): one node wins it; the claim lasts the POST's timeout plus a
   margin, so a node killed mid-POST leaves a claim that lapses and the row is taken again (at least once).
2. The body is POSTed as stored, signed `X-Compozy-Signature: sha256=<hex HMAC-SHA256 of the body>` with the
   webhook's current secret; redirects are not followed (the receiver is named in config.toml).
3. 2xx: delivered. A refused connection, a timeout, 5xx, 408 or 429: retried after `backoff(attempts)`, given up
   (`failed`) at `max_attempts`. Any other answer (a 4xx: the receiver refuses this body for good) fails at once,
   as does a URL no attempt can send (config load refuses those). Settling is a compare-and-set on our claim too: a
   claim that lapsed meanwhile settles nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.db.models import Q

from attention.enums import DeliveryStatus
from attention.models import WebhookDelivery
from compozy_base.config.notifications import NotificationsConfig, WebhookConfig
from sessions.core.redact import bound_text, redact_text
from sessions.store.folder import isoformat, utcnow

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Compozy-Signature"
# A claim outlives its POST by this much: the settle after a slow answer is still ours.
CLAIM_MARGIN = timedelta(seconds=30)
BATCH = 50
RETRIED_STATUSES = frozenset({408, 425, 429})
ERROR_BYTES = 400
_wake = threading.Event()


def wake_dispatcher() -> None:
    """A row was written in this process: the webhook thread looks now rather than at its next poll."""
    _wake.set()


def wait_for_work(timeout: float) -> None:
    _wake.wait(timeout)
    _wake.clear()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    retry: bool
    error: str = ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def post(hook: WebhookConfig, row: WebhookDelivery, timeout: float) -> Outcome:
    """One attempt. Errors name the target (scheme, host, port), never the URL's path or the secret."""
    body = row.body.encode()
    try:
        request = urllib.request.Request(hook.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "compozy-webhooks/1",
            SIGNATURE_HEADER: signature(hook.secret, body), "X-Compozy-Event": row.event,
            "X-Compozy-Delivery": row.event_id})
        with _opener.open(request, timeout=timeout) as response:
            response.read(64 * 1024)
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        status = exc.code
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return _failed(exc, hook)
    if 200 <= status < 300:
        return Outcome(True, False)
    error = _clean(f"{hook.target} answered HTTP {status}", hook)
    return Outcome(False, status >= 500 or status in RETRIED_STATUSES, error)


def _failed(exc: Exception, hook: WebhookConfig) -> Outcome:
    if isinstance(exc, ValueError | http.client.InvalidURL):
        # No attempt can send it (config load refuses such a URL): given up at once, its message (the path) unsaid.
        return Outcome(False, False, f"{hook.target}: the URL cannot be sent ({type(exc).__name__})")
    # Refused, unreachable, timed out, TLS, a garbled answer: the receiver is not there yet.
    reason = getattr(exc, "reason", exc)
    return Outcome(False, True, _clean(f"{hook.target}: {type(exc).__name__}: {reason}", hook))


def _clean(text: str, hook: WebhookConfig) -> str:
    """An error as stored and logged: the secret, the URL, and its credentials, path and query cut out, whatever the
    library put in it (http.client quotes a request's path, where a chat tool's URL carries its token)."""
    parts = urlsplit(hook.url)
    selector = parts.path + (f"?{parts.query}" if parts.query else "")
    for secret in (hook.secret, hook.url, selector, parts.path if len(parts.path) > 1 else "", parts.query,
                   parts.netloc.rpartition("@")[0]):
        if secret:
            text = text.replace(secret, "[REDACTED]")
    return bound_text(redact_text(text), ERROR_BYTES)


def due(now: datetime) -> list[WebhookDelivery]:
    unclaimed = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    return list(WebhookDelivery.objects.filter(unclaimed, status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
                .order_by("next_attempt_at", "id")[:BATCH])


def claim(row: WebhookDelivery, owner: str, until: datetime) -> bool:
    """Compare-and-set from the values read: exactly one claimant changes the row."""
    won = WebhookDelivery.objects.filter(
        id=row.id, status=DeliveryStatus.PENDING, claimed_by=row.claimed_by, claimed_until=row.claimed_until,
        attempts=row.attempts).update(claimed_by=owner, claimed_until=until)
    return won == 1


def settle(row: WebhookDelivery, owner: str, outcome: Outcome, config: NotificationsConfig, now: datetime) -> str:
    """The attempt's result written under our claim; the row's new status."""
    attempts = row.attempts + 1
    fields: dict[str, Any] = {"attempts": attempts, "claimed_by": "", "claimed_until": None,
                              "last_error": outcome.error}
    if outcome.delivered:
        status = DeliveryStatus.DELIVERED
    elif outcome.retry and attempts < config.max_attempts:
        status = DeliveryStatus.PENDING
        fields["next_attempt_at"] = now + timedelta(seconds=config.backoff(attempts))
    else:
        status = DeliveryStatus.FAILED
    if status != DeliveryStatus.PENDING:
        fields["finished_at"] = now
    changed = WebhookDelivery.objects.filter(id=row.id, claimed_by=owner).update(status=status, **fields)
    if not changed:
        logger.warning("webhook delivery %s: its claim lapsed during the attempt; another node retries it", row.id)
    return status


def deliver_due(owner: str, config: NotificationsConfig, now: datetime | None = None) -> int:
    """One pass over the due rows; the number of attempts made."""
    now = now or utcnow()
    made = 0
    for row in due(now):
        if not claim(row, owner, now + timedelta(seconds=config.timeout) + CLAIM_MARGIN):
            continue  # another node (or a lapsed claim's new holder) has it
        hook = config.webhook(row.webhook)
        if hook is None:
            outcome = Outcome(False, False, "its webhook is no longer in config.toml")
        else:
            try:
                outcome = post(hook, row, config.timeout)
            except Exception as exc:  # noqa: BLE001 - this row's failure, settled and retried, never the outbox's
                outcome = Outcome(False, True, _clean(f"{hook.target}: the attempt failed: {type(exc).__name__}: "
                                                      f"{exc}", hook))
        made += 1
        status = settle(row, owner, outcome, config, utcnow())
        if status == DeliveryStatus.FAILED:
            logger.error("webhook %s: gave up delivering %s (%s) after %d attempt(s): %s", row.webhook, row.event_id,
                         row.event, row.attempts + 1, outcome.error)
        elif not outcome.delivered:
            logger.info("webhook %s: %s (%s) not delivered yet: %s", row.webhook, row.event_id, row.event,
                        outcome.error)
    return made


def prune(before: datetime) -> int:
    """Delivered and given-up rows finished before `before`: the outbox is a queue, not an archive."""
    done = (DeliveryStatus.DELIVERED, DeliveryStatus.FAILED)
    deleted, _ = WebhookDelivery.objects.filter(status__in=done, finished_at__lt=before).delete()
    return deleted


def outbox_state(failed_since: datetime, limit: int = 5) -> dict[str, Any]:
    """What doctor shows: counts by status, the rows given up since `failed_since` (newest first) and the ones
    retrying."""
    counts = {s.value: WebhookDelivery.objects.filter(status=s).count() for s in DeliveryStatus}
    failed = WebhookDelivery.objects.filter(status=DeliveryStatus.FAILED, finished_at__gte=failed_since)
    retrying = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, attempts__gt=0).order_by("-attempts")
    return {"counts": counts, "failed_recent": failed.count(),
            "failed": [_shown(r) for r in failed.order_by("-finished_at")[:limit]],
            "retrying": [_shown(r) for r in retrying[:limit]],
            "retrying_total": retrying.count()}


def _shown(row: WebhookDelivery) -> dict[str, Any]:
    return {"id": row.event_id, "event": row.event, "webhook": row.webhook, "target": row.target,
            "attempts": row.attempts, "last_error": row.last_error,
            "next_attempt_at": isoformat(row.next_attempt_at), "finished_at": isoformat(row.finished_at)}
