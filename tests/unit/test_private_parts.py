"""Where Compozy leans on another library's internals, or once did (issue 43, "private parts").

Each library still reached into is pinned in pyproject.toml to a bounded range around the releases in MEASURED,
and this module fails on any release MEASURED does not name, and when what a trick relies on has changed shape:
- Twisted (compozy/api/http_server.py `write_through`, `queued_bytes`): a connection's `write` is replaced, sending
  at once while Twisted's send queue (`dataBuffer`, `offset`, `_tempDataBuffer`, `_tempDataLen`) is empty, and that
  queue is measured for the event streams' backpressure; `_writeDisconnected` says the write side is shut;
- Twisted (http_server `GuardedHTTPFactory.buildProtocol`): the HTTP/1.1 channel behind the protocol's `_channel`
  answers a head it cannot read through `_respondToBadRequestAndDisconnect`, replaced per connection;
- Twisted (compozy/api/raw_bodies.py): `Request._parsePOSTFormSubmission`, set false for every request;
- daphne (http_server `GuardedServer.http_factory`): `Server.run` builds its factory as
  `self.http_factory = HTTPFactory(self)`, which the property takes over; and `daphne.server.twisted_loop`
  (compozy/daemon/launcher.py);
- channels (compozy_site/channel_layer.py `DoorbellLayer`): InMemoryChannelLayer sweeps expiry in
  `_clean_expired()` on every receive and group send; the override runs the sweep at most once a second.
A release not named: run this module, the tests each trick names and its benchmark; then name the release in
MEASURED and let it in through the pin.

Replaced by public APIs, and checked here that they do what the private part did:
- the agent's stdout reader knows that nothing is buffered from its own count (sessions/acp/transport.py
  `TappedReader.unread`), not from asyncio StreamReader's private `_buffer`;
- the daemon's sessions run on `daphne.server.twisted_loop`, the loop daphne installs Twisted's reactor on
  (compozy/daemon/launcher.py), not on the loop read from the reactor's private `_asyncioEventloop`.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sessions.acp import transport as transport_mod
from sessions.acp.transport import TappedReader
from tests.unit.test_ndjson_reader import line, opened, run, update

ROOT = Path(__file__).resolve().parents[2]

# The releases each trick was measured on (its tests and benchmark run on them): the pins in pyproject.toml hold
# these, and no other release passes this module.
MEASURED = {
    "channels": ("4.3.2",),
    "daphne": ("4.2.3",),
    "twisted": ("26.10.0",),
}


@pytest.mark.parametrize("dist", sorted(MEASURED))
def test_each_library_reached_into_is_a_release_it_was_measured_on(dist: str) -> None:
    installed = importlib.metadata.version(dist)
    assert installed in MEASURED[dist], (
        f"{dist} {installed} is not a release Compozy's use of its internals was measured on "
        f"({', '.join(MEASURED[dist])}): see this module's docstring before adding it")


def test_pyproject_pins_each_to_a_bounded_range_holding_its_measured_releases() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {canonicalize_name(r.name): r.specifier for r in map(Requirement, dependencies)}
    for dist, releases in MEASURED.items():
        assert dist in pins, f"{dist} is not pinned in pyproject.toml"
        operators = {spec.operator for spec in pins[dist]}
        assert {">=", "<"} <= operators, f"{dist}: {pins[dist]} is not a bounded range"
        assert all(pins[dist].contains(release) for release in releases), (dist, str(pins[dist]), releases)


def _line_of(size: int, n: int) -> bytes:
    """An update line of exactly `size` bytes, newline included."""
    pad = size - len(line(update(n, "x"))) + 1
    data = line(update(n, "x" * pad))
    assert len(data) == size
    return data


def test_a_short_read_behind_bytes_still_buffered_is_not_tapped_ahead_of_them() -> None:
    """One `read` of the transport takes at most READ_BYTES: a burst larger than that leaves bytes in the reader
    while the transport, having handled every line it read, hands the loop back. A short read arriving then finds
    the transport's own queue empty; only the reader's count (`unread`) keeps it behind the bytes before it."""
    per_read = transport_mod.READ_BYTES // 4096  # lines of 4 KiB: a read ends on a line's end
    assert per_read % transport_mod.YIELD_EVERY_UPDATES == 0  # ...and the transport yields after its last line
    extra = 3
    seen: list[int] = []

    async def main() -> None:
        reader = TappedReader()
        async with opened(lambda params: seen.append(params["n"]), reader=reader) as (_, transport):
            task: asyncio.Task[Any] = asyncio.create_task(transport.receive())
            await asyncio.sleep(0)  # waiting on the pipe
            burst = [_line_of(4096, n) for n in range(per_read + extra)]
            reader.feed_data(b"".join(burst))
            while len(seen) < per_read:
                await asyncio.sleep(0)
            assert reader.unread == sum(len(b) for b in burst[per_read:])

            reader.feed_data(line(update(999)))
            assert seen == list(range(per_read))  # not recorded ahead of the three still buffered
            reader.feed_eof()
            assert await task is None
            assert seen == [*range(per_read + extra), 999]
            assert reader.unread == 0

    run(main)


def test_the_reactor_runs_on_daphnes_loop_the_daemon_binds_its_sessions_to(tmp_path: Path) -> None:
    """The launcher binds the SessionManager and the signal handlers to `daphne.server.twisted_loop` before the
    reactor runs: with daphne.server imported first (the launcher's `_prepare_django`), the reactor runs on it."""
    code = ("import asyncio\n"
            "from compozy.daemon.launcher import _prepare_django\n"
            "_prepare_django()\n"
            "from daphne.server import twisted_loop\n"
            "from twisted.internet import reactor\n"
            "seen = []\n"
            "def check():\n"
            "    try:\n"
            "        seen.append(asyncio.get_running_loop() is twisted_loop)\n"
            "    finally:\n"
            "        reactor.stop()\n"
            "reactor.callLater(0, check)\n"
            "reactor.run(installSignalHandlers=False)\n"
            "print(seen)\n")
    env = {**os.environ, "COMPOZY_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[True]", result.stdout


class _Reactor:
    """What a Twisted file descriptor asks of its reactor to write: to be watched for writability, or not."""

    def __init__(self) -> None:
        self.writers: set[Any] = set()

    def addWriter(self, writer: Any) -> None:
        self.writers.add(writer)

    def removeWriter(self, writer: Any) -> None:
        self.writers.discard(writer)


def _twisted_connection() -> tuple[Any, socket.socket, _Reactor]:
    """A Twisted TCP transport (what daphne's connections are) over one end of a socket pair with small buffers."""
    from twisted.internet import tcp
    from twisted.internet.protocol import Protocol

    ours, peer = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reactor = _Reactor()
    transport = tcp.Connection(ours, Protocol(), reactor)
    transport.connected = 1
    return transport, peer, reactor


def _read_all(peer: socket.socket) -> bytes:
    peer.setblocking(False)
    got = bytearray()
    while True:
        try:
            chunk = peer.recv(1 << 16)
        except BlockingIOError:
            return bytes(got)
        if not chunk:
            return bytes(got)
        got += chunk


def test_write_through_sends_at_once_and_leaves_the_rest_in_twisteds_queue_in_order() -> None:
    """http_server.write_through on the installed Twisted: a write the socket takes whole skips Twisted's queue; one
    it takes in part leaves the rest there (`queued_bytes` counts it), and what follows waits behind it; Twisted's
    own writes drain the queue in order, and `queued_bytes` follows them down to 0."""
    from compozy.api.http_server import has_queue, queued_bytes, write_through

    transport, peer, reactor = _twisted_connection()
    try:
        assert has_queue(transport) and queued_bytes(transport) == 0
        assert transport._writeDisconnected is False
        write_through(transport)
        assert "write" in vars(transport) and "writeSequence" in vars(transport)  # installed, not skipped

        transport.write(b"first")
        assert _read_all(peer) == b"first" and queued_bytes(transport) == 0
        assert not reactor.writers  # Twisted was never asked to watch the socket

        big = bytes(range(256)) * 4096  # 1 MiB: more than the socket takes
        transport.write(big)
        held = queued_bytes(transport)
        assert 0 < held < len(big) and reactor.writers == {transport}
        received = bytearray(_read_all(peer))  # the socket has room again, but Twisted's queue comes first:
        transport.writeSequence([b"after", b"wards"])  # this goes behind it
        assert queued_bytes(transport) == held + 10

        while reactor.writers:
            before = queued_bytes(transport)
            transport.doWrite()  # Twisted's own send, as the reactor calls it once the socket is writable
            assert queued_bytes(transport) <= before
            received += _read_all(peer)
        assert queued_bytes(transport) == 0
        assert bytes(received) == big + b"afterwards"
    finally:
        transport.socket.close()
        peer.close()


def test_write_through_leaves_a_write_after_the_write_side_closed_to_twisted_which_drops_it() -> None:
    from compozy.api.http_server import queued_bytes, write_through

    transport, peer, _ = _twisted_connection()
    try:
        write_through(transport)
        transport.loseWriteConnection()
        transport.doWrite()  # nothing queued: Twisted shuts the write side and says so in `_writeDisconnected`
        assert transport._writeDisconnected is True
        transport.write(b"late")
        assert queued_bytes(transport) == 0
        assert peer.recv(16) == b""  # the end of the stream, and nothing after it
    finally:
        transport.socket.close()
        peer.close()


def _guarded_protocol() -> tuple[Any, Any]:
    """A connection's protocol as GuardedHTTPFactory builds it, made over an in-memory transport."""
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import StringTransport

    from compozy.api.http_server import ConnectionLimits, GuardedHTTPFactory
    from compozy_base.config.loader import Timeouts

    server = SimpleNamespace(timeouts=Timeouts(), connection_limits=ConnectionLimits(8, 8),
                             protocol_connected=lambda request: None)  # daphne's request registers with its server
    address = IPv4Address("TCP", "127.0.0.1", 40000)
    protocol = GuardedHTTPFactory(server).buildProtocol(address)  # type: ignore[arg-type]
    transport = StringTransport(peerAddress=address)
    protocol.makeConnection(transport)
    return protocol, transport


@pytest.mark.parametrize("head", [
    b"GET /" + b"a" * 20_000,  # a request line longer than Twisted's line limit: it would hang up without a word
    b"GET / HTTP/1.1\r\n" + b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 1000) for i in range(20)),  # headers too large
], ids=["long-line", "large-head"])
def test_a_head_twisted_cannot_read_is_answered_through_the_hook_each_connection_replaces(head: bytes) -> None:
    """GuardedHTTPFactory finds Twisted's HTTP/1.1 channel behind the protocol's `_channel` and replaces its
    `_respondToBadRequestAndDisconnect` (and `lineLengthExceeded`): the answer is the API's error shape, not a
    bare 400 or a hang-up."""
    protocol, transport = _guarded_protocol()
    channel = protocol._channel
    assert "_respondToBadRequestAndDisconnect" in vars(channel)  # found, and replaced on this connection
    protocol.dataReceived(head)
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b'"bad_request_head"' in answer, answer[:200]


def test_daphnes_server_builds_its_factory_through_the_attribute_guarded_server_takes_over() -> None:
    """daphne's Server.run has no hook for its HTTP factory: it assigns `self.http_factory = HTTPFactory(self)` and
    listens with `self.http_factory`; GuardedServer's property setter puts GuardedHTTPFactory there instead."""
    from daphne.http_protocol import HTTPFactory
    from daphne.server import Server

    from compozy.api.http_server import ConnectionLimits, GuardedHTTPFactory, GuardedServer
    from compozy_base.config.loader import Timeouts

    source = inspect.getsource(Server.run)
    assert "self.http_factory = HTTPFactory(self)" in source and "listen(self.http_factory)" in source
    server = GuardedServer(lambda scope: None, endpoints=["tcp:port=0"], max_body_bytes=1024, timeouts=Timeouts(),
                           connection_limits=ConnectionLimits(8, 8))
    server.http_factory = HTTPFactory(server)
    assert type(server.http_factory) is GuardedHTTPFactory


def test_raw_bodies_switches_off_the_form_parsing_twisteds_request_keeps_in_its_attribute() -> None:
    """compozy/api/raw_bodies.py sets `_parsePOSTFormSubmission` false after WebRequest's own __init__: Twisted's
    Request must still keep the switch there (set in __init__, read when the request is received)."""
    from twisted.web import http

    assert "self._parsePOSTFormSubmission = " in inspect.getsource(http.Request.__init__)
    assert "self._parsePOSTFormSubmission" in inspect.getsource(http.Request.requestReceived)


def test_channels_sweeps_expiry_through_clean_expired_on_receive_and_group_send(monkeypatch: Any) -> None:
    """DoorbellLayer rate-limits InMemoryChannelLayer's sweep by overriding `_clean_expired()`: channels must still
    sweep through that method, with no argument, on each receive and group send."""
    from channels.layers import InMemoryChannelLayer

    from compozy_site.channel_layer import DoorbellLayer

    assert list(inspect.signature(InMemoryChannelLayer._clean_expired).parameters) == ["self"]
    assert not hasattr(InMemoryChannelLayer(), "_swept_at")  # the override's own state clashes with nothing
    sweeps: list[str] = []
    monkeypatch.setattr(DoorbellLayer, "_clean_expired", lambda self: sweeps.append("swept"))

    async def main() -> None:
        layer = DoorbellLayer()
        channel = await layer.new_channel()
        await layer.group_add("doorbell", channel)
        await layer.group_send("doorbell", {"type": "ring"})
        assert sweeps == ["swept"]
        assert await layer.receive(channel) == {"type": "ring"}
        assert sweeps == ["swept", "swept"]

    asyncio.run(main())
