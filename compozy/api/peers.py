"""One pooled HTTP client per peer node: what routing and placement send other nodes goes through it.

A forwarded request used to build an `httpx.AsyncClient` of its own: a new connection, a new connection pool and
(with TLS) a new handshake and SSL context each time, about 33 ms per forwarded request on loopback, and 65-120 ms
per operation behind a load balancer. A peer's client is made once, on the daemon's loop (the only loop requests
run on), and keeps its connections alive between requests; `close_all()` closes them at shutdown.

With `[cluster] ca` the peers' certificates are verified against that bundle (else the system's trust store, for an
`https://` address); a node's address says whether it is reached over TLS (`[cluster] tls_cert` makes a node
advertise `https://`).
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING

from compozy_base.config.loader import get_config

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

# A routed prompt may reactivate the session on its owner first (up to 90 s there); a stop waits for the agent.
REQUEST_TIMEOUT_SECONDS = 120.0
# Connections kept open to one peer between requests: concurrent forwarded requests beyond it open and close their
# own (a burst of creates), the pool never holds more descriptors than this per peer.
KEEPALIVE_PER_PEER = 16
# How long an idle kept-alive connection is kept: below the peer's `[http] idle_timeout` (60 s by default), so the
# pool closes it first rather than sending on a connection the peer is closing.
KEEPALIVE_EXPIRY_SECONDS = 30.0

_clients: dict[str, httpx.AsyncClient] = {}
_ssl_context: ssl.SSLContext | None = None


def client_for(address: str) -> httpx.AsyncClient:
    """The pooled client for the peer at `address` (scheme, host and port); made on first use."""
    import httpx

    key = address.rstrip("/")
    client = _clients.get(key)
    if client is None or client.is_closed:
        limits = httpx.Limits(max_keepalive_connections=KEEPALIVE_PER_PEER,
                              keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS)
        client = httpx.AsyncClient(base_url=key, timeout=REQUEST_TIMEOUT_SECONDS, limits=limits,
                                   verify=peer_ssl_context())
        _clients[key] = client
    return client


def peer_ssl_context() -> ssl.SSLContext:
    """The context peers' certificates are verified with: `[cluster] ca`, else the system's trust store. Built once:
    loading a CA bundle costs milliseconds, which a forwarded request must not pay."""
    global _ssl_context
    if _ssl_context is None:
        ca = get_config().cluster.ca
        _ssl_context = ssl.create_default_context(cafile=ca or None)
    return _ssl_context


def pooled() -> int:
    """How many peers have a client open (status, tests)."""
    return sum(1 for client in _clients.values() if not client.is_closed)


async def close_all() -> None:
    """At shutdown, on the daemon's loop: every peer's connections closed."""
    global _ssl_context
    clients = list(_clients.values())
    _clients.clear()
    _ssl_context = None
    for client in clients:
        try:
            await client.aclose()
        except Exception as exc:  # noqa: BLE001 - a connection already broken: nothing left to close
            logger.info("closing a peer's client: %s", exc)
