"""A TCP proxy a test can cut: a daemon reaches PostgreSQL through it, and the test takes the database away (every
connection reset, new ones refused) and gives it back, as a network partition or a managed failover would.

Threads, not asyncio: the test's own thread calls `cut` and `restore` while daemons' connections stream through.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse, urlunparse


class TcpProxy:
    """Listens on a free loopback port and forwards each connection to `target` until `cut`."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener: socket.socket | None = None
        self.port = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._closed = False
        self.accepted = 0
        self.refused = 0
        self._listen()

    def _listen(self) -> None:
        """Listen on `port` (the first time: a free one), the same port again after a `cut(refuse=True)`."""
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name=f"proxy-{self.port}", daemon=True).start()

    def url(self, database_url: str) -> str:
        """`database_url` (or a Redis URL) pointed at this proxy instead of the server."""
        parsed = urlparse(database_url)
        netloc = parsed.netloc.rsplit("@", 1)
        auth = f"{netloc[0]}@" if len(netloc) == 2 else ""
        return urlunparse(parsed._replace(netloc=f"{auth}127.0.0.1:{self.port}"))

    def cut(self, refuse: bool = False) -> None:
        """Every open connection reset; new ones are accepted and closed at once until `restore` (a partition), or
        with `refuse` refused, nothing listening on the port (the server's host down: one error, always the same)."""
        self._cut.set()
        with self._lock:
            sockets, self._open = list(self._open), set()
            listener, self._listener = (self._listener, None) if refuse else (None, self._listener)
        for sock in sockets:
            _reset(sock)
        if listener is not None:  # shut down first: a close alone leaves a thread blocked in accept() listening
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def restore(self) -> None:
        if self._listener is None:
            self._listen()
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self.cut(refuse=True)

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            self.accepted += 1
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with self._lock:
                    self._open.discard(sock)
                _reset(sock)


def _reset(sock: socket.socket) -> None:
    """Closed with a reset (SO_LINGER 0), as a partition that the peer's kernel reports. Shut down first: a close
    alone leaves the connection up while a pipe thread is still blocked in recv() on it, and the daemon's side then
    waits on a connection that acknowledges everything and answers nothing."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


DEFAULT_PORTS = {"redis": 6379, "rediss": 6379}


@contextmanager
def proxied(url: str) -> Iterator[TcpProxy]:
    """A proxy to the server of `url` (PostgreSQL's or Redis's), closed on exit; `proxy.url(url)` reaches it."""
    parsed = urlparse(url)
    proxy = TcpProxy(parsed.hostname or "127.0.0.1", parsed.port or DEFAULT_PORTS.get(parsed.scheme, 5432))
    try:
        yield proxy
    finally:
        proxy.close()
