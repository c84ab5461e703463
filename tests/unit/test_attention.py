"""The attention rules without a daemon (issue 31): `[notifications]` validation, the backoff, which events a saved
session record carries and their stable ids, the signature, and the outbox on a real SQLite catalog (rows per
webhook and filter, written once, claimed by one of two racing nodes, retried, given up), one POST to a real
receiver on loopback for each kind of answer, and a receiver trickling its answer (issue 44): cut at the deadline,
and holding no other receiver's deliveries."""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django(migrate=True)

from attention import delivery, outbox  # noqa: E402
from attention.delivery import Outcome, claim, due, settle, signature  # noqa: E402
from attention.enums import DeliveryStatus, WebhookEvent  # noqa: E402
from attention.models import WebhookDelivery  # noqa: E402
from attention.notices import session_notices  # noqa: E402
from attention.services import session_items  # noqa: E402
from compozy_base.config.loader import ConfigError, load_config  # noqa: E402
from compozy_base.config.notifications import NotificationsConfig, WebhookConfig, parse_notifications  # noqa: E402
from sessions.store.folder import isoformat, utcnow  # noqa: E402
from tests.conftest import wait_for  # noqa: E402

SECRET = "s3cret-value-0123456789"


def hook(url: str = "https://hooks.example.com/services/T0/B0/tokenpath", **extra: Any) -> dict[str, Any]:
    return {"url": url, "secret": SECRET, "events": ["session_failed", "turn_finished"], **extra}


def test_webhooks_load_from_config_toml(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[notifications]\nretry_min = "1s"\nretry_max = "1m"\nmax_attempts = 5\n\n[[notifications.webhooks]]\n'
        f'url = "https://ntfy.sh/my-topic"\nsecret = "{SECRET}"\nevents = ["permission_requested"]\n'
        'agents = ["claude"]\nworkspaces = ["repo"]\n')
    config = load_config(tmp_path)
    [w] = config.notifications.webhooks
    assert w.events == {WebhookEvent.PERMISSION_REQUESTED} and w.agents == {"claude"} and w.workspaces == {"repo"}
    assert (config.notifications.retry_min, config.notifications.retry_max) == (1.0, 60.0)
    assert config.unknown_keys == ()
    assert SECRET not in repr(config)


@pytest.mark.parametrize(("table", "key"), [
    ({"webhooks": [hook(events=["turn_done"])]}, "notifications.webhooks[0].events"),
    ({"webhooks": [hook(events=[])]}, "notifications.webhooks[0].events"),
    ({"webhooks": [hook(url="ftp://x")]}, "notifications.webhooks[0].url"),
    ({"webhooks": [hook(secret="short")]}, "notifications.webhooks[0].secret"),
    ({"webhooks": [hook(sekret="x")]}, "notifications.webhooks[0]: unknown key 'sekret'"),
    ({"webhooks": [hook(agents="claude")]}, "notifications.webhooks[0].agents"),
    ({"webhooks": [hook(), hook()]}, "notifications.webhooks[1].url"),
    ({"webhooks": hook()}, "notifications.webhooks"),
    ({"retry_min": "10s", "retry_max": "1s"}, "notifications.retry_max"),
    ({"max_attempts": 0}, "notifications.max_attempts"),
    ({"timeout": "0s"}, "notifications.timeout"),
])
def test_a_bad_notifications_table_is_refused_naming_the_key_and_never_the_secret(
        table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_notifications(table)
    assert key in str(caught.value)
    assert SECRET not in str(caught.value) and "tokenpath" not in str(caught.value)


@pytest.mark.parametrize("url", [
    "https://hooks.example.com/services/tokenpath with a space",
    "https://hooks.example.com/services/tokenpath?q=a b",
    "http://hooks example.com/tokenpath",
    "http://hooks.example.com/tokenpath\t",
    "http://hooks.example.com/tokenpath\x7f",
    "http://hooks.example.com/tokenpath/\u00e9",
    "http://h\u00f3oks.example.com/tokenpath",
    "ftp://hooks.example.com/tokenpath",
    "hooks.example.com/tokenpath",
    "http:///tokenpath",
    "http://user:tokenpath@hooks.example.com/x",
    "http://tokenpath@hooks.example.com/x",
    "http://hooks.example.com:0/tokenpath",
    "http://hooks.example.com:99999/tokenpath",
    "http://hooks.example.com:8o/tokenpath",
    "http://[::1/tokenpath",
])
def test_a_url_that_cannot_be_sent_is_refused_naming_the_webhook_never_its_path(url: str) -> None:
    """A space in it used to pass: every attempt then raised in the sender, a traceback with the path every ~33 s,
    the row never settled nor given up."""
    with pytest.raises(ConfigError) as caught:
        parse_notifications({"webhooks": [hook(), hook(url=url)]})
    message = str(caught.value)
    assert message.startswith("notifications.webhooks[1].url: ") and "\n" not in message, message
    assert "tokenpath" not in message and SECRET not in message


@pytest.mark.parametrize("url", ["https://ntfy.sh/my-topic?tpl=1&t={{.event}}&m={{.text}}", "http://[::1]:8080/x",
                                 "https://hooks.example.com:8443/a%20b?x=%C3%A9#frag", "http://127.0.0.1/"])
def test_a_url_that_can_be_sent_is_taken_as_written(url: str) -> None:
    [w] = parse_notifications({"webhooks": [hook(url=url)]}).webhooks
    assert w.url == url


def test_the_backoff_doubles_from_retry_min_up_to_retry_max() -> None:
    config = NotificationsConfig(retry_min=10, retry_max=100)
    assert [config.backoff(n) for n in range(1, 7)] == [10, 20, 40, 80, 100, 100]


def test_a_webhook_shows_its_target_without_path_credentials_or_secret() -> None:
    w = WebhookConfig("https://user:pw@chat.example.com:8443/hooks/abc?token=x", SECRET, frozenset())
    assert w.target == "https://chat.example.com:8443"
    assert SECRET not in repr(w) and w.key.startswith("wh_") and "abc" not in w.key


def test_the_signature_is_the_hex_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"id":"evt_1"}'
    assert signature(SECRET, body) == "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def meta(**extra: Any) -> dict[str, Any]:
    base = {"id": "sess_0123456789abcdef", "workspace_id": "ws_0123456789abcdef", "agent_name": "general",
            "name": "fix tests", "state": "active", "created_at": "2026-12-01T10:00:00.000000Z",
            "activated_at": "2026-12-01T10:00:01.000000Z", "updated_at": isoformat(utcnow()), "failure": None,
            "liveness": {}}
    return {**base, **extra}


def events_of(record: dict[str, Any]) -> list[str]:
    return [n.event.value for n in session_notices(record)]


def test_a_record_carries_its_permission_requests_failure_login_and_last_turn() -> None:
    waiting = meta(liveness={"permission_requests": [
        {"request_id": "call_1", "title": "Write x.txt", "kind": "edit", "created_at": "2026-12-01T10:01:00Z"}]})
    [notice] = session_notices(waiting)
    assert notice.event == WebhookEvent.PERMISSION_REQUESTED and notice.request_id == "call_1"
    assert "edit Write x.txt" in notice.summary and notice.path == "/sessions/sess_0123456789abcdef"
    failed = meta(state="stopped", stopped_at="2026-12-01T11:00:00Z",
                  failure={"kind": "process_exit", "summary": "agent process killed by SIGKILL"})
    assert events_of(failed) == ["session_failed"]
    assert events_of(meta(state="stopped", failure={"kind": "cancellation", "summary": ""})) == []
    login = meta(failure={"kind": "provider_auth_failure", "summary": "run /login"},
                 liveness={"last_turn": {"turn_id": "turn_1", "ended_at": "2026-12-01T10:02:00Z"}})
    assert events_of(login) == ["auth_required", "turn_finished"]
    assert [i.kind.value for i in session_items(login)] == ["auth"]  # a finished turn needs nobody


def test_event_ids_are_stable_across_saves_and_new_for_a_new_failure() -> None:
    first = meta(state="stopped", stopped_at="2026-12-01T11:00:00Z", failure={"kind": "timeout", "summary": "x"})
    resaved = {**first, "updated_at": "2026-12-01T12:00:00.000000Z"}
    again = {**first, "stopped_at": "2026-12-01T13:00:00Z"}
    [a], [b], [c] = session_notices(first), session_notices(resaved), session_notices(again)
    assert a.event_id == b.event_id != c.event_id
    assert session_items(first)[0].id == session_items(resaved)[0].id != session_items(again)[0].id


def test_a_secret_in_a_tool_title_is_redacted_from_the_summary() -> None:
    record = meta(liveness={"permission_requests": [
        {"request_id": "c", "title": "curl -H 'Authorization: Bearer sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123'",
         "kind": "execute", "created_at": "2026-12-01T10:01:00Z"}]})
    assert "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123" not in session_notices(record)[0].summary


# ---- the outbox on a real catalog --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def empty_outbox() -> None:
    WebhookDelivery.objects.all().delete()
    outbox._known.clear()


def config(*hooks: WebhookConfig, **extra: Any) -> NotificationsConfig:
    return NotificationsConfig(webhooks=hooks, retry_min=1.0, retry_max=8.0, max_attempts=3, **extra)


FAILED = meta(state="stopped", stopped_at=isoformat(utcnow()), failure={"kind": "timeout", "summary": "silent"})
ALL = frozenset(WebhookEvent)


def test_an_event_is_one_row_per_webhook_that_wants_it_and_is_written_once() -> None:
    mine = WebhookConfig("http://127.0.0.1:1/a", SECRET, ALL)
    other_agent = WebhookConfig("http://127.0.0.1:1/b", SECRET, ALL, agents=frozenset({"claude"}))
    other_ws = WebhookConfig("http://127.0.0.1:1/c", SECRET, ALL, workspaces=frozenset({"elsewhere"}))
    not_failures = WebhookConfig("http://127.0.0.1:1/d", SECRET, frozenset({WebhookEvent.TURN_FINISHED}))
    notifications = config(mine, other_agent, other_ws, not_failures)
    assert outbox.enqueue(session_notices(FAILED), notifications) == 1
    outbox._known.clear()  # another process (a node, a restart) saving the same record
    assert outbox.enqueue(session_notices(FAILED), notifications) == 0
    [row] = WebhookDelivery.objects.all()
    assert row.webhook == mine.key and row.status == DeliveryStatus.PENDING and SECRET not in row.body
    assert row.target == "http://127.0.0.1:1"


def test_an_old_event_is_not_replayed_to_a_webhook_added_later() -> None:
    old = {**FAILED, "stopped_at": isoformat(utcnow() - timedelta(hours=2))}
    assert outbox.enqueue(session_notices(old), config(WebhookConfig("http://127.0.0.1:1/a", SECRET, ALL))) == 0


def test_two_nodes_claiming_one_row_at_once_give_it_to_one() -> None:
    outbox.enqueue(session_notices(FAILED), config(WebhookConfig("http://127.0.0.1:1/a", SECRET, ALL)))
    [row] = due(utcnow())
    until = utcnow() + timedelta(seconds=30)
    barrier, wins = threading.Barrier(4), []

    def race(owner: str) -> None:
        from django.db import connection

        barrier.wait()
        wins.append(claim(row, owner, until))
        connection.close()

    threads = [threading.Thread(target=race, args=(f"node-{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False, False, False, True]
    assert due(utcnow()) == []  # claimed: nobody else takes it while the claim lasts
    assert due(until + timedelta(seconds=1)) != []  # a claim left by a killed node lapses


def test_a_failed_attempt_is_retried_with_backoff_then_given_up() -> None:
    notifications = config(WebhookConfig("http://127.0.0.1:1/a", SECRET, ALL))
    outbox.enqueue(session_notices(FAILED), notifications)
    now = utcnow()
    for attempt, expected in ((1, DeliveryStatus.PENDING), (2, DeliveryStatus.PENDING), (3, DeliveryStatus.FAILED)):
        [row] = WebhookDelivery.objects.all()
        assert claim(row, "me", now + timedelta(seconds=30))
        assert settle(row, "me", Outcome(False, True, "refused"), notifications, now) == expected
        row.refresh_from_db()
        assert row.attempts == attempt and row.claimed_by == ""
        if expected == DeliveryStatus.PENDING:
            assert row.next_attempt_at == now + timedelta(seconds=notifications.backoff(attempt))
    assert delivery.outbox_state(now - timedelta(hours=1))["failed_recent"] == 1


def test_a_settle_after_the_claim_lapsed_and_was_taken_changes_nothing() -> None:
    notifications = config(WebhookConfig("http://127.0.0.1:1/a", SECRET, ALL))
    outbox.enqueue(session_notices(FAILED), notifications)
    [row] = WebhookDelivery.objects.all()
    assert claim(row, "slow", utcnow() - timedelta(seconds=1))
    [lapsed] = due(utcnow())
    assert claim(lapsed, "fast", utcnow() + timedelta(seconds=30))
    settle(row, "slow", Outcome(True, False), notifications, utcnow())
    lapsed.refresh_from_db()
    assert lapsed.status == DeliveryStatus.PENDING and lapsed.claimed_by == "fast"


def test_finished_rows_are_pruned_after_their_keep_and_pending_ones_never() -> None:
    notifications = config(WebhookConfig("http://127.0.0.1:1/a", SECRET, ALL),
                           WebhookConfig("http://127.0.0.1:1/b", SECRET, ALL))
    outbox.enqueue(session_notices(FAILED), notifications)
    done, waiting = WebhookDelivery.objects.order_by("id")
    assert claim(done, "me", utcnow() + timedelta(seconds=30))
    settle(done, "me", Outcome(True, False), notifications, utcnow() - timedelta(days=8))
    assert delivery.prune(utcnow() - timedelta(days=7)) == 1
    assert list(WebhookDelivery.objects.values_list("id", flat=True)) == [waiting.id]


def test_an_ipv6_receiver_is_shown_with_its_brackets() -> None:
    assert WebhookConfig("http://[::1]:8080/x", SECRET, frozenset()).target == "http://[::1]:8080"


def _row() -> WebhookDelivery:
    return WebhookDelivery(id="evt_x.wh_y", event_id="evt_x", event="session_failed", webhook="wh_y", target="",
                           body='{"id":"evt_x"}', next_attempt_at=utcnow(), created_at=utcnow())


@pytest.mark.parametrize(("status", "retry"), [(200, None), (204, None), (503, True), (500, True), (429, True),
                                               (400, False), (410, False), (302, False)])
def test_an_answer_is_delivered_retried_or_given_up_by_its_status(status: int, retry: bool | None) -> None:
    from tests.webhook_receiver import Receiver

    receiver = Receiver(status=status).start()
    try:
        outcome = delivery.post(WebhookConfig(receiver.url, SECRET, ALL), _row(), timeout=5)
    finally:
        receiver.stop()
    assert outcome.delivered is (retry is None)
    if retry is not None:
        assert outcome.retry is retry and str(status) in outcome.error
        assert "private-path-token" not in outcome.error and SECRET not in outcome.error
    [got] = receiver.deliveries
    assert got.signed_with(SECRET) and got.headers["x-compozy-delivery"] == "evt_x"


def test_a_receiver_that_never_answers_or_is_not_there_is_retried() -> None:
    import socket

    from tests.webhook_receiver import free_port

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook/private-path-token"
        hung = delivery.post(WebhookConfig(url, SECRET, ALL), _row(), timeout=0.3)
    refused = delivery.post(WebhookConfig(f"http://127.0.0.1:{free_port()}/p", SECRET, ALL), _row(), timeout=1)
    for outcome in (hung, refused):
        assert not outcome.delivered and outcome.retry and "private-path-token" not in outcome.error
        assert outcome.error.startswith("http://127.0.0.1:")


def test_a_url_the_sender_refuses_is_given_up_at_once_and_never_logged_with_its_path(
        caplog: pytest.LogCaptureFixture) -> None:
    """Config load refuses such a URL; should one get past it, the attempt is a failure of the row (visible state),
    given up at once (no attempt can succeed), and neither the row nor the log carries its path or query."""
    bad = WebhookConfig("http://127.0.0.1:1/hook/private-path-token with space?key=private-query", SECRET, ALL)
    notifications = config(bad)
    outbox.enqueue(session_notices(FAILED), notifications)
    with caplog.at_level(logging.DEBUG):
        assert delivery.deliver_due("me", notifications) == 1
    [row] = WebhookDelivery.objects.all()
    assert row.status == DeliveryStatus.FAILED and row.attempts == 1 and row.claimed_by == ""
    assert row.last_error.startswith("http://127.0.0.1:1: ") and "cannot be sent" in row.last_error
    shown = row.last_error + caplog.text
    assert "private-path-token" not in shown and "private-query" not in shown and SECRET not in shown


def test_an_answer_trickled_a_byte_at_a_time_is_cut_at_the_deadline() -> None:
    """The timeout bounds the whole attempt, not each read: a byte every 0.4 s kept every 1 s read alive, and the
    attempt lasted as long as the receiver liked."""
    from tests.webhook_receiver import Trickler

    trickler = Trickler(every=0.4, limit=10).start()
    try:
        started = time.monotonic()
        outcome = delivery.post(WebhookConfig(trickler.url, SECRET, ALL), _row(), timeout=1.0)
        took = time.monotonic() - started
    finally:
        trickler.stop()
    assert not outcome.delivered and outcome.retry, outcome
    assert "deadline" in outcome.error and "private-path-token" not in outcome.error
    assert took < 1.5, f"the attempt lasted {took:.2f}s against a 1s deadline"


def failed_at(n: int) -> dict[str, Any]:
    return meta(id=f"sess_{n:016x}", state="stopped", stopped_at=isoformat(utcnow()),
                failure={"kind": "timeout", "summary": f"silent {n}"})


def test_a_receiver_trickling_its_answer_does_not_hold_a_healthy_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: one receiver sending a byte every 2 s held the single delivery thread for good (a healthy receiver
    got 1 of 4 events). Now each receiver has its own worker and each attempt its deadline: the healthy receiver
    gets all 4 events within the trickler's own deadline, and the trickler's attempt ends at it."""
    from compozy.daemon.webhooks import WebhookDispatcher
    from compozy_base.config import loader
    from tests.webhook_receiver import Receiver, Trickler

    deadline = 3.0
    trickler, healthy = Trickler(every=2.0).start(), Receiver().start()
    slow = WebhookConfig(trickler.url, SECRET, ALL)
    fast = WebhookConfig(healthy.url, SECRET, ALL)
    notifications = NotificationsConfig(webhooks=(slow, fast), retry_min=60, retry_max=60, max_attempts=3,
                                        timeout=deadline)
    for n in range(4):
        assert outbox.enqueue(session_notices(failed_at(n)), notifications) == 2
    monkeypatch.setattr(loader, "get_config", lambda: SimpleNamespace(notifications=notifications))
    dispatcher = WebhookDispatcher("node#trickle")
    started = time.monotonic()
    dispatcher.start()
    try:
        wait_for(lambda: len(healthy.received()) >= 4, timeout=deadline + 10, what="the healthy receiver's 4 events")
        got = len(healthy.received())
        all_in = time.monotonic() - started
        wait_for(lambda: trickler.held, timeout=deadline + 10, what="the trickler's first attempt to end")
        held = trickler.held[0] if trickler.held else None
    finally:
        dispatcher.stop()
        trickler.stop()
        healthy.stop()
    figures = f"the healthy receiver got {got} of 4 in {all_in:.2f}s; the trickler's first attempt held {held}s"
    assert got == 4 and all_in < deadline, figures
    assert held is not None and held < deadline + 1, figures
    assert {r.status for r in WebhookDelivery.objects.filter(webhook=fast.key)} == {DeliveryStatus.DELIVERED}
    # The trickler's failure is the row's visible state: an attempt made, its reason, a retry to come.
    assert any(r.attempts == 1 and r.status == DeliveryStatus.PENDING and "3s deadline" in r.last_error
               for r in WebhookDelivery.objects.filter(webhook=slow.key))
