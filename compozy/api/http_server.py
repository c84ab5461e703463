"""daphne, with the limits an ASGI app cannot enforce itself: the body cap before buffering, the header timeout,
and which transport (and, on the UDS, which uid) a request came from.

Twisted reads the whole body into a BytesIO or temp file, and daphne then queues all of it to the app in one go,
before any ASGI code runs: a 300 MB POST cost 300 MB of RSS even though the app refused it. So the cap sits in
the request's `gotLength` (Content-Length) and `handleContentChunk` (chunked bodies): an oversized body is
answered 413 at once and the rest of it is read and dropped, never stored.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from typing import Any

import daphne.server  # noqa: F401  (installs the asyncio reactor before twisted.internet.reactor is imported)
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server
from twisted.internet import reactor as _reactor
from twisted.internet.address import UNIXAddress
from twisted.internet.interfaces import ISSLTransport

from compozy.api.guard import LOCAL_SOCKET, PEER_PID, PEER_UID
from compozy.api.raw_bodies import keep_request_bodies_raw
from compozy_base.config.loader import Timeouts
from compozy_base.errors import error_body
from sessions.live.pressure import ABORT, BACKLOG

# twisted types `reactor` as its module, not as the IReactorTime/IReactorTCP it installs.
reactor: Any = _reactor

logger = logging.getLogger(__name__)

# The defaults of `[http] header_timeout`, `idle_timeout` and `body_timeout` (compozy_base/config/loader.py `Timeouts`).
# The surfaces reference: headers must arrive within 5 s (a slow-header client otherwise holds a connection for
# hours), and an idle keep-alive connection closes after 60 s. The whole body (at most `max_body_bytes`, 1 MiB by
# default) must arrive within 30 s of the headers: the idle timeout restarts with every byte, and daphne hands
# nothing to the guard before the body is complete, so a client sending a byte every few seconds held a
# connection, unauthenticated, for as long as it liked.
# daphne gives the app no backpressure: eight stalled viewers of one fast turn queued 15 GB before the kernel killed
# the daemon. Each request's scope carries `BACKLOG` (bytes queued for its connection), which the event streams
# wait on (sessions/live/pressure.py `drained`; a large frame goes in `pieces`). Behind that, an event stream with
# this much queued is cut (the viewer resumes with Last-Event-ID from the store); other responses (a download) are
# never cut: they cannot resume.
STREAM_BACKLOG_BYTES = 64 * 1024 * 1024
# After a 413 the client is usually still sending: closing at once would reset the connection and lose the answer,
# so the rest is read and dropped, for at most this long.
LINGER_SECONDS = 10.0


class GuardedRequest(WebRequest):
    server: GuardedServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._over_cap = False
        self._body_seen = 0
        self._linger: Any = None
        super().__init__(*args, **kwargs)
        self._body_timer: Any = None

    def gotLength(self, length: int | None) -> None:
        # The head is in (Twisted calls this once all headers are read): its deadline (HeadDeadline) is met.
        deadline = getattr(self.channel, "compozy_head_deadline", None)
        if deadline is not None:
            deadline.met()
        if length is not None and length > self.server.max_body_bytes:
            # Twisted answers `Expect: 100-continue` right after this call; the client must not be invited to send.
            self.requestHeaders.removeHeader(b"expect")
            self.content = _Discard()
            self._refuse(f"a {length}-byte body")
            return
        self._body_timer = reactor.callLater(self.server.timeouts.http_body, self._body_too_slow)
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._over_cap:
            return
        self._body_seen += len(data)
        if self._body_seen > self.server.max_body_bytes:
            self.content.close()
            self.content = _Discard()
            self._refuse("a chunked body over the cap")
            return
        super().handleContentChunk(data)

    def handle_reply(self, message: dict[str, Any]) -> None:
        if message.get("type") == "http.response.start" and self.channel is not None and self.channel.transport:
            # Per response: a keep-alive connection's next response (a download) is not an event stream.
            content_type = dict(message.get("headers") or []).get(b"content-type", b"")
            stream = content_type.startswith(b"text/event-stream")
            self.channel.transport.compozy_backlog_cap = STREAM_BACKLOG_BYTES if stream else 0
        super().handle_reply(message)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        self._cancel(self._body_timer)
        if self._over_cap:
            self.channel.transport.loseConnection()  # the 413 is written; the dropped body is fully read
            return
        if any(b"websocket" in value.lower() for value in self.requestHeaders.getRawHeaders(b"upgrade", [])):
            # No route speaks WebSocket: daphne would upgrade, find no app and answer a bare 403 with no code.
            _write_error(self.channel.transport, 400, "Bad Request", "websocket_unsupported",
                         "this daemon has no WebSocket endpoints: live events are server-sent events (GET …/stream "
                         "with Accept: text/event-stream)")
            self.channel.transport.loseConnection()
            return
        super().requestReceived(command, path, version)

    def connectionLost(self, reason: Any) -> None:
        self._cancel(self._body_timer)
        self._cancel(self._linger)
        super().connectionLost(reason)

    def _refuse(self, what: str) -> None:
        self._over_cap = True
        limit = self.server.max_body_bytes
        logger.warning("refused %s (limit %d bytes)", what, limit)
        transport = self.channel.transport
        _write_error(transport, 413, "Content Too Large", "body_too_large",
                     f"request bodies are limited to {limit} bytes", {"max_body_bytes": limit})
        self._linger = reactor.callLater(LINGER_SECONDS, transport.abortConnection)

    def _body_too_slow(self) -> None:
        self._body_timer = None
        if self.channel is not None and self.channel.transport is not None:
            limit = self.server.timeouts.http_body
            logger.warning("closed a request whose body took over %g s", limit)
            _write_error(self.channel.transport, 408, "Request Timeout", "body_timeout",
                         f"the request body did not arrive within {limit:g} s of its headers")
            self.channel.transport.loseConnection()

    @staticmethod
    def _cancel(call: Any) -> None:
        if call is not None and call.active():
            call.cancel()


def _write_error(transport: Any, status: int, reason: str, code: str, message: str,
                 evidence: dict[str, Any] | None = None) -> None:
    """An error answer in the API's shape, written straight to the connection (no request object to answer
    through yet); the connection closes after it."""
    body = json.dumps(error_body(message, code, status, evidence)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    transport.write(head + body)


def _bad_head(channel: Any) -> None:
    """Twisted's answer to a request line or headers it cannot read is a bare `400` with no body; ours is the
    API's error shape, so every error a client gets has a code (a 16 KiB request line is easy to pass with
    percent-encoded query values)."""
    _write_error(channel.transport, 400, "Bad Request", "bad_request_head",
                 f"the request line or headers could not be read: a line or all of them longer than "
                 f"{channel.totalHeadersSize} bytes, more than {channel.maxHeaders} headers, or malformed")
    channel.loseConnection()


class _Discard:
    """Where an oversized body goes: nowhere."""

    closed = False

    def write(self, data: bytes) -> None:
        pass

    def read(self, size: int = -1) -> bytes:
        return b""

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


class HeadDeadline:
    """A request head, request line included, must arrive within `seconds`: the first of a connection from its
    accept, each later one from its first byte. The idle timeout restarts with every byte, so on its own a client
    sending a byte every few seconds (slowloris) held the connection as long as it liked, before any request
    object (and its guard) existed."""

    def __init__(self, channel: Any, seconds: float) -> None:
        self.channel, self.seconds = channel, seconds
        self.waiting = True  # for a head: until its headers are in; again once its response is done
        self.timer: Any = reactor.callLater(seconds, self._too_slow)

    def data(self) -> None:
        if self.waiting and self.timer is None:
            self.timer = reactor.callLater(self.seconds, self._too_slow)

    def met(self) -> None:
        self.waiting = False
        self.cancel()

    def next_request(self) -> None:
        self.waiting = True

    def cancel(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None

    def _too_slow(self) -> None:
        self.timer = None
        transport = self.channel.transport
        if transport is not None:
            _write_error(transport, 408, "Request Timeout", "header_timeout",
                         f"the request head did not arrive within {self.seconds:g} s")
            transport.loseConnection()


class ConnectionLimits:
    """Open connections, in total and per peer address, kept below the descriptor limit (each also costs memory
    and a reactor slot). One over either limit gets a 503 `too_many_connections` and is closed; the refusals are
    logged once per REFUSAL_LOG_SECONDS with their count, not once each (a flood must not also flood the log)."""

    REFUSAL_LOG_SECONDS = 60.0

    def __init__(self, total: int, per_peer: int) -> None:
        self.total, self.per_peer = total, per_peer
        self.open = 0
        self.by_peer: dict[str, int] = {}
        self.refused = 0  # since the last log line
        self.logged_at = float("-inf")

    def admit(self, peer: str) -> bool:
        if self.open >= self.total or self.by_peer.get(peer, 0) >= self.per_peer:
            self._refused(peer)
            return False
        self.open += 1
        self.by_peer[peer] = self.by_peer.get(peer, 0) + 1
        return True

    def release(self, peer: str) -> None:
        self.open -= 1
        left = self.by_peer.get(peer, 1) - 1
        if left > 0:
            self.by_peer[peer] = left
        else:
            self.by_peer.pop(peer, None)

    def _refused(self, peer: str) -> None:
        self.refused += 1
        now = reactor.seconds()
        if now - self.logged_at >= self.REFUSAL_LOG_SECONDS:
            logger.warning("refused %d connection(s) over the limits (open %d of %d; peer %s has %d of %d)",
                           self.refused, self.open, self.total, peer, self.by_peer.get(peer, 0), self.per_peer)
            self.refused, self.logged_at = 0, now


def _peer(addr: Any) -> str:
    host = getattr(addr, "host", None)
    return str(host) if host else "unix"


class GuardedHTTPFactory(HTTPFactory):
    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self.timeOut = server.timeouts.http_idle

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = GuardedRequest
        # Twisted answers a head it cannot read with a bare 400 through the HTTP/1.1 channel's private
        # `_respondToBadRequestAndDisconnect` (no public hook), found behind the HTTP/1.1-or-2 wrapper's private
        # `_channel`; a channel without it keeps Twisted's answer. Twisted is pinned to the releases this was measured
        # on, and tests/unit/test_private_parts.py fails on any other and when the hook no longer answers.
        channel = getattr(protocol, "_channel", protocol)
        if hasattr(channel, "_respondToBadRequestAndDisconnect"):
            channel._respondToBadRequestAndDisconnect = lambda: _bad_head(channel)
            channel.lineLengthExceeded = lambda line: _bad_head(channel)  # Twisted would just hang up
        _Connection(protocol, channel, self.server.connection_limits, _peer(addr),
                    self.server.timeouts.http_header).install()
        return protocol


class _Connection:
    """One accepted connection's hooks into Twisted's protocol: admitted under the limits (else a 503), its writes
    sent straight through, each request head held to its deadline, its slot released when it closes."""

    def __init__(self, protocol: Any, channel: Any, limits: ConnectionLimits, peer: str, head_seconds: float) -> None:
        self.protocol, self.channel, self.limits, self.peer, self.head_seconds = (protocol, channel, limits, peer,
                                                                                 head_seconds)
        self.admitted = False
        self.deadline: HeadDeadline | None = None
        self._connect, self._received, self._lost = protocol.makeConnection, protocol.dataReceived, \
            protocol.connectionLost
        self._done = getattr(channel, "requestDone", None)

    def install(self) -> None:
        self.protocol.makeConnection = self.make_connection
        self.protocol.dataReceived = self.data_received
        self.protocol.connectionLost = self.connection_lost
        if self._done is not None:
            self.channel.requestDone = self.request_done

    def make_connection(self, transport: Any) -> None:
        if not self.limits.admit(self.peer):
            _write_error(transport, 503, "Service Unavailable", "too_many_connections",
                         "this daemon has as many connections open as it takes; try again shortly",
                         {"max_connections": self.limits.total, "max_connections_per_peer": self.limits.per_peer})
            transport.loseConnection()
            return
        self.admitted = True
        write_through(transport)
        self.deadline = self.channel.compozy_head_deadline = HeadDeadline(self.channel, self.head_seconds)
        self._connect(transport)

    def data_received(self, data: bytes) -> None:
        if self.deadline is None:
            return  # refused at accept: nothing it sends is read
        self.deadline.data()
        self._received(data)

    def connection_lost(self, reason: Any) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        if self.admitted:
            self.admitted = False
            self.limits.release(self.peer)
        self._lost(reason)

    def request_done(self, request: Any) -> None:
        if self._done is not None:
            self._done(request)
        if self.deadline is not None:
            self.deadline.next_request()


# Twisted's internals, on purpose: Twisted has no public count of the bytes it holds for a connection (the event
# streams' backpressure waits on it: sessions/live/pressure.py; a registered producer is told only when the queue
# passes its 64 KiB bufferSize) and no public way to send at once when nothing is queued (`write_through`). Both
# read FileDescriptor's send queue: `dataBuffer` from `offset` on, then the writes not yet joined to it
# (`_tempDataBuffer`, `_tempDataLen`); the write path also reads `_writeDisconnected` (write side shut) and replaces
# the transport's `write`/`writeSequence`. Twisted is pinned in pyproject.toml to the releases this was measured on,
# and tests/unit/test_private_parts.py fails on any other and on a queue of another shape. A transport without these
# parts (another kind of connection) keeps Twisted's own write path and reports no backlog.
_QUEUE_ATTRS = ("dataBuffer", "offset", "_tempDataBuffer", "_tempDataLen")


def queued_bytes(transport: Any) -> int:
    """What Twisted holds for this connection, not yet taken by the socket."""
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


def has_queue(transport: Any) -> bool:
    return all(hasattr(transport, a) for a in _QUEUE_ATTRS)


def write_through(transport: Any) -> None:
    """Send what is written at once when nothing is queued before it, as asyncio's own transports do.

    Twisted queues every write and sends it on the next writable event: for a live SSE frame that is an
    `epoll_ctl` to watch the socket, a loop iteration and the reactor's logging-context dispatch, the send, and
    another `epoll_ctl` to stop watching, per viewer per event. A send the socket cannot take whole (a slow
    client) leaves the rest to Twisted's queue, so flow control and error handling stay Twisted's. What it relies
    on in Twisted, and the test that guards it: the comment above `_QUEUE_ATTRS`."""
    if ISSLTransport.providedBy(transport):
        # TLS (`[cluster] tls_cert`): the TLS protocol wraps the TCP transport and hands it unknown attributes, so
        # the socket below looked plain; a send on it went out unencrypted (the client's `WRONG_VERSION_NUMBER`).
        # Its writes keep Twisted's path; the backlog the streams wait on is still the TCP transport's queue.
        return
    sock = getattr(transport, "socket", None)
    if sock is None or not has_queue(transport) or not hasattr(transport, "_writeDisconnected"):
        return  # not a plain TCP/UNIX connection of the Twisted version this was written against: keep its path
    queued_write = transport.write

    def write(data: bytes) -> None:
        if (data and type(data) is bytes and transport.connected and not transport._writeDisconnected
                and not transport._tempDataBuffer and len(transport.dataBuffer) == transport.offset):
            try:
                sent = sock.send(data)
            except OSError:  # would block, or a broken connection: Twisted's own path finds and reports it
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        cap = getattr(transport, "compozy_backlog_cap", 0)
        if cap and queued_bytes(transport) > cap:  # already behind by that much: one large write is not cut
            if not getattr(transport, "compozy_cut", False):
                transport.compozy_cut = True
                logger.warning("cut an event stream whose client stopped reading (%d MiB queued)", cap >> 20)
                transport.abortConnection()
            return
        queued_write(data)

    def write_sequence(iovec: Any) -> None:
        write(b"".join(iovec))

    transport.write = write
    transport.writeSequence = write_sequence


class GuardedServer(Server):
    def __init__(self, *args: Any, max_body_bytes: int, timeouts: Timeouts, connection_limits: ConnectionLimits,
                 **kwargs: Any) -> None:
        # Twisted must not parse POSTed form bodies before ASGI (a malformed multipart got a bare 400).
        keep_request_bodies_raw()
        super().__init__(*args, **kwargs)
        self.max_body_bytes = max_body_bytes
        self.timeouts = timeouts
        self.connection_limits = connection_limits

    # daphne's run() builds `HTTPFactory(self)` inline with no hook; assigning it lands here and we build ours.
    # daphne is pinned to the releases this was measured on; tests/unit/test_private_parts.py fails on any other and
    # when run() no longer builds its factory by this assignment.
    @property
    def http_factory(self) -> HTTPFactory:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory: HTTPFactory) -> None:
        self._http_factory = GuardedHTTPFactory(self)

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        """Tag UDS requests (and their peer's uid) for the guard; TCP requests carry no tag and need the token."""
        transport = getattr(protocol, "transport", None)
        if transport is not None and isinstance(transport.getHost(), UNIXAddress):
            scope[LOCAL_SOCKET] = True
            scope[PEER_PID], scope[PEER_UID] = peer_credentials(transport.getHandle())
        if transport is not None and has_queue(transport):
            scope[BACKLOG] = lambda: queued_bytes(transport)
            # A stalled viewer's connection is closed, not only its response ended: what is queued for it goes too.
            scope[ABORT] = transport.abortConnection
        return super().create_application(protocol, scope)


def peer_credentials(sock: socket.socket) -> tuple[int | None, int | None]:
    """The pid and uid of the process at the other end of a unix socket (SO_PEERCRED: pid, uid, gid)."""
    try:
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
    except (OSError, AttributeError):
        return None, None
    return int(pid), int(uid)
