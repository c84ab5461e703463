"""The ASGI guard on its own: the parts daphne never lets the integration tests reach (it caps bodies first)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from compozy.api.guard import Guard, GuardPolicy, host_name, origin_allowed
from compozy_base.auth import connection_pair, daemon_proof, on_loopback
from tests.django_env import ensure_django

TOKEN = "t" * 43
POLICY = GuardPolicy(token=TOKEN, home="/home/u/.compozy", hosts=frozenset({"127.0.0.1", "localhost", "[::1]"}),
                     max_body_bytes=1024, owner_uid=1000)


def http_scope(method: str = "POST", path: str = "/api/sessions", headers: dict[str, str] | None = None,
               **extra: Any) -> dict[str, Any]:
    base = {"host": "127.0.0.1:2123", "authorization": f"Bearer {TOKEN}", **(headers or {})}
    return {"type": "http", "method": method, "path": path, "query_string": b"",
            "headers": [(k.encode(), v.encode()) for k, v in base.items()], **extra}


def run(scope: dict[str, Any], chunks: list[bytes]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Drive the guard around an app that reads the whole body and answers 200; (app saw, client got)."""
    ensure_django()
    seen: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        if seen[-1]["type"] != "http.disconnect":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(Guard(app, POLICY)(scope, receive, send))
    return seen, sent


def answer(sent: list[dict[str, Any]]) -> tuple[int, dict[str, bytes], Any]:
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = {k.decode(): v for k, v in start["headers"]}
    return start["status"], headers, json.loads(body) if body.startswith(b"{") else body


def test_a_body_without_a_length_is_counted_and_refused_413_once_over_the_cap() -> None:
    seen, sent = run(http_scope(), [b"x" * 600, b"x" * 600, b"x" * 600])
    status, _, body = answer(sent)
    assert status == 413 and body["code"] == "body_too_large"
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]  # the app stopped at the cap


def test_a_declared_length_over_the_cap_is_refused_before_the_app_runs() -> None:
    seen, sent = run(http_scope(headers={"content-length": "5000"}), [b"x" * 10])
    assert seen == [] and answer(sent)[0] == 413


def test_a_trusted_answer_names_the_home_and_a_request_for_another_home_is_refused() -> None:
    _, sent = run(http_scope(method="GET"), [b""])
    status, headers, _ = answer(sent)
    assert status == 200 and headers["x-compozy-home"] == b"/home/u/.compozy"
    seen, sent = run(http_scope(method="GET", headers={"x-compozy-home": "/home/other/.compozy"}), [b""])
    assert seen == [] and answer(sent)[2]["code"] == "home_mismatch"


def test_the_socket_serves_only_the_daemon_uid_and_tcp_is_never_assumed_local() -> None:
    local = {"compozy.local_socket": True}
    no_token = {"authorization": ""}
    assert answer(run(http_scope("GET", headers=no_token, **local, **{"compozy.peer_uid": 1000}), [b""])[1])[0] == 200
    status, _, body = answer(run(http_scope("GET", **local, **{"compozy.peer_uid": 65534}), [b""])[1])
    assert status == 403 and body["code"] == "peer_forbidden"
    assert answer(run(http_scope("GET", headers=no_token), [b""])[1])[2]["code"] == "auth_required"


@pytest.mark.parametrize(("host", "name"), [
    ("127.0.0.1:2123", "127.0.0.1"), ("[::1]:2123", "[::1]"), ("[::1]", "[::1]"), ("LOCALHOST", "localhost"),
    ("[::1", ""), ("", ""), ("127.0.0.1:2123,evil.example", ""), ("localhost:x", ""), ("[::1]x", "")])
def test_host_name_drops_the_port(host: str, name: str) -> None:
    assert host_name(host) == name


def test_a_second_host_header_is_refused() -> None:
    scope = http_scope("GET")
    scope["headers"].append((b"host", b"evil.example"))
    seen, sent = run(scope, [b""])
    assert seen == [] and answer(sent)[2]["code"] == "host_not_allowed"


def test_only_the_same_origin_is_allowed() -> None:
    assert origin_allowed("http://127.0.0.1:2123", "127.0.0.1:2123")
    for origin in ("null", "http://127.0.0.1:2124", "http://evil.example", "file://", "http://127.0.0.1:2123.evil"):
        assert not origin_allowed(origin, "127.0.0.1:2123")


def test_the_proof_is_bound_to_the_connections_whole_address_pair() -> None:
    """Issue 44: bound to the client's port alone, the daemon's answer to a relay connecting from 127.0.0.2 with the
    CLI's port number was the proof the CLI expected on its own connection to the relay."""
    nonce = "0" * 32
    relayed = http_scope("GET", "/api/auth/proof", query_string=f"nonce={nonce}".encode(),
                         client=["127.0.0.2", 40000], server=["127.0.0.1", 2123])
    status, _, body = answer(run(relayed, [b""])[1])
    assert status == 200
    assert body["proof_bound"] == daemon_proof(TOKEN, POLICY.home, nonce, "127.0.0.2 40000 127.0.0.1 2123")
    cli_to_relay = connection_pair(("127.0.0.1", 40000), ("127.0.0.1", 41000))
    assert body["proof_bound"] != daemon_proof(TOKEN, POLICY.home, nonce, cli_to_relay)
    same_port_elsewhere = connection_pair(("127.0.0.1", 40000), ("127.0.0.1", 2123))
    assert body["proof_bound"] != daemon_proof(TOKEN, POLICY.home, nonce, same_port_elsewhere)


def test_a_connection_pair_reads_alike_from_both_ends() -> None:
    # A dual-stack listener sees an IPv4 client as IPv4-mapped IPv6; the CLI's socket says IPv4.
    assert connection_pair(["::ffff:127.0.0.1", 5], ["::ffff:127.0.0.1", 2123]) == "127.0.0.1 5 127.0.0.1 2123"
    assert connection_pair(("::1", 5, 0, 0), ("::1", 2123, 0, 0)) == "::1 5 ::1 2123"
    assert connection_pair(["/run/compozy.sock", None], ["127.0.0.1", 2123]) is None
    assert connection_pair(None, ("127.0.0.1", 2123)) is None
    assert on_loopback("127.0.1.1") and on_loopback("::ffff:127.0.0.2") and on_loopback("::1")
    assert not on_loopback("10.0.0.1") and not on_loopback("localhost")
