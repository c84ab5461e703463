"""Delivering the outbox: claim a due row, POST it signed, settle it. Runs on the daemon's webhook threads, one per
webhook (compozy/daemon/webhooks.py), never on the event loop.

1. A due row (pending, its next attempt reached, no live claim) is claimed with a compare-and-set on the values
   read (`claimed_by`, `claimed_until`, `attempts`): one node wins it; the claim lasts the POST's timeout plus a
   margin, so a node killed mid-POST leaves a claim that lapses and the row is taken again (at least once).
2. The body is POSTed as stored, signed `X-Compozy-Signature: sha256=<hex HMAC-SHA256 of the body>` with the
   webhook's current secret; redirects are not followed (the receiver is named in config.toml). The timeout bounds
   the whole attempt (`_Deadline`), not each socket read, so the POST ends within the claim.
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
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection
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
# The doorbell every webhook worker listens to: a count of rings, so a ring during a worker's pass is not lost.
_work = threading.Condition()
_rings = 0


def wake_dispatcher() -> None:
    """A row was written in this process: every webhook worker looks now rather than at its next poll."""
    global _rings
    with _work:
        _rings += 1
        _work.notify_all()


def rings() -> int:
    with _work:
        return _rings


def wait_for_work(timeout: float, seen: int) -> int:
    """Until a ring after the `seen`th (at once if it rang during the pass) or `timeout`; the rings so far."""
    with _work:
        _work.wait_for(lambda: _rings != seen, timeout)
        return _rings


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


class _Deadline:
    """A time limit on a whole attempt, not on each socket read: a receiver sending a byte every 2 s kept every read
    of a 10 s timeout alive, and with them the attempt, for as long as it liked. When it passes, the connection is
    shut down under whatever read or write waits on it. The connection is watched through a duplicate of its
    descriptor (a TLS socket has the same one), closed with the attempt."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self.cut = False  # expired early: the daemon stops
        self._ends = 0.0
        self._lock = threading.Lock()
        self._watched: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._ends = time.monotonic() + self.seconds
        self._timer.start()
        with _live_lock:
            _live.add(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
        with _live_lock:
            _live.discard(self)
        with self._lock:
            for dup in self._watched:
                dup.close()
            self._watched.clear()

    def left(self) -> float:
        return max(0.01, self._ends - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        dup = socket.fromfd(sock.fileno(), sock.family, sock.type)
        with self._lock:
            self._watched.append(dup)
            if self.expired:
                _shut(dup)

    def _expire(self, cut: bool = False) -> None:
        with self._lock:
            if not self.expired:
                self.cut = cut
            self.expired = True
            for dup in self._watched:
                _shut(dup)

    def connections(self, http_class: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        """What urllib builds its connection with: ours, watched from the moment it connects."""
        watched = _WatchedHTTPS if issubclass(http_class, http.client.HTTPSConnection) else _WatchedHTTP

        def connection(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = watched(host, **kwargs)
            conn.deadline = self
            return conn

        return connection


# The attempts in flight in this process: `cut_attempts` ends them when the daemon stops.
_live: set[_Deadline] = set()
_live_lock = threading.Lock()


def cut_attempts() -> None:
    """The daemon stops: every attempt in flight ends now, settled as one without an answer, not at its deadline."""
    with _live_lock:
        live = list(_live)
    for deadline in live:
        deadline._expire(cut=True)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # shuts the connection for every descriptor of it, unlike close()
    except OSError:
        pass  # already closed by its end


def _connect_watched(conn: _WatchedHTTP | _WatchedHTTPS, connect: Callable[[], None]) -> None:
    # Connecting, and a TLS handshake (which Python bounds in all by the socket timeout), end by the deadline too.
    conn.timeout = conn.deadline.left()
    connect()
    assert conn.sock is not None
    conn.deadline.watch(conn.sock)


class _WatchedHTTP(http.client.HTTPConnection):
    deadline: _Deadline

    def connect(self) -> None:
        _connect_watched(self, super().connect)


class _WatchedHTTPS(http.client.HTTPSConnection):
    deadline: _Deadline

    def connect(self) -> None:
        _connect_watched(self, super().connect)


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class: Any, req: urllib.request.Request, **http_conn_args: Any) -> Any:
        return super().do_open(self.deadline.connections(http_class), req, **http_conn_args)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class: Any, req: urllib.request.Request, **http_conn_args: Any) -> Any:
        return super().do_open(self.deadline.connections(http_class), req, **http_conn_args)


def post(hook: WebhookConfig, row: WebhookDelivery, timeout: float) -> Outcome:
    """One attempt, ended by `timeout` in all (name resolution aside). Errors name the target (scheme, host, port),
    never the URL's path or the secret."""
    body = row.body.encode()
    deadline = _Deadline(timeout)
    opener = urllib.request.build_opener(_NoRedirect, _WatchedHTTPHandler(deadline), _WatchedHTTPSHandler(deadline))
    try:
        request = urllib.request.Request(hook.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "compozy-webhooks/1",
            SIGNATURE_HEADER: signature(hook.secret, body), "X-Compozy-Event": row.event,
            "X-Compozy-Delivery": row.event_id})
        with deadline, opener.open(request, timeout=timeout) as response:
            status = response.status
            try:
                response.read(64 * 1024)
            except (OSError, http.client.HTTPException):
                pass  # the answer is its status: a body cut off (by the deadline or the receiver) changes nothing
    except urllib.error.HTTPError as exc:
        exc.close()
        status = exc.code
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return _failed(exc, hook, deadline)
    if 200 <= status < 300:
        return Outcome(True, False)
    error = _clean(f"{hook.target} answered HTTP {status}", hook)
    return Outcome(False, status >= 500 or status in RETRIED_STATUSES, error)


def _failed(exc: Exception, hook: WebhookConfig, deadline: _Deadline) -> Outcome:
    if deadline.cut:
        return Outcome(False, True, f"{hook.target}: cut by the daemon's stop before an answer")
    if deadline.expired:
        return Outcome(False, True, f"{hook.target}: no answer within the {deadline.seconds:g}s deadline "
                                    "([notifications] timeout)")
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


def due(now: datetime, webhook: str | None = None, besides: Collection[str] = ()) -> list[WebhookDelivery]:
    """The due rows, oldest first: only `webhook`'s when named; none of a webhook in `besides` (each has its own
    worker)."""
    unclaimed = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    rows = WebhookDelivery.objects.filter(unclaimed, status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
    if webhook is not None:
        rows = rows.filter(webhook=webhook)
    if besides:
        rows = rows.exclude(webhook__in=list(besides))
    return list(rows.order_by("next_attempt_at", "id")[:BATCH])


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


def deliver_due(owner: str, config: NotificationsConfig, now: datetime | None = None, webhook: str | None = None,
                besides: Collection[str] = (), stop: threading.Event | None = None) -> int:
    """One pass over the due rows (of `webhook` only, or none of `besides`: see `due`), until `stop` is set; the
    number of attempts made."""
    now = now or utcnow()
    made = 0
    for row in due(now, webhook, besides):
        if stop is not None and stop.is_set():
            break
        # From this row's start, not the pass's: rows behind a slow receiver's are claimed for a whole attempt too.
        if not claim(row, owner, max(now, utcnow()) + timedelta(seconds=config.timeout) + CLAIM_MARGIN):
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
