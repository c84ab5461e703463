"""Jupyter-style token auth for TCP: a random token in `$COMPOZY_HOME/token` (0600), one-time login tickets for
the browser, and the dashboard cookie derived from the token (so the cookie never carries the token itself).

The UDS needs none of this: its owner-only mode and the peer-uid check are the guard there.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

from compozy_base.home import read_token, token_path

COOKIE_NAME = "compozy_auth"
# Routes a machine reads (the API, the Prometheus scrape): their refusals and errors are JSON, never a page.
MACHINE_PATHS = ("/api/", "/metrics")


def is_machine_path(path: str) -> bool:
    return path.startswith(MACHINE_PATHS) or path == "/api"  # `/api` without its slash is the API too


# A login link is for clicking now, not for keeping: long enough to copy it into a browser, short enough that a
# link left in a terminal's scrollback is useless.
TICKET_TTL_SECONDS = 120.0
# Outstanding tickets are bounded so a caller minting in a loop cannot grow the daemon's memory.
MAX_OUTSTANDING_TICKETS = 64


def ensure_token(home: Path) -> str:
    """The home's token, created at first start (O_EXCL, mode 0600); kept across restarts so scripts keep working."""
    if (token := read_token(home)) is not None:
        os.chmod(token_path(home), 0o600)
        return token
    path = token_path(home)
    token = secrets.token_urlsafe(32)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # an empty or unreadable leftover
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    return token


# Nodes of one cluster route work to a session's owner with this shared secret (env, never on disk here); each
# node still has its own token for its users. Shorter values are refused: it opens every node's API.
CLUSTER_TOKEN_ENV = "COMPOZY_CLUSTER_TOKEN"
MIN_CLUSTER_TOKEN_CHARS = 32


def cluster_token() -> str:
    token = os.environ.get(CLUSTER_TOKEN_ENV, "").strip()
    return token if len(token) >= MIN_CLUSTER_TOKEN_CHARS else ""


def cluster_token_state() -> dict[str, str]:
    """Whether this node routes work with its cluster token: `ok`, `not_set`, or `refused` with the reason (a set
    but short value was ignored silently, and routed work failed with errors that never named it)."""
    token = os.environ.get(CLUSTER_TOKEN_ENV, "").strip()
    if not token:
        return {"status": "not_set"}
    if len(token) < MIN_CLUSTER_TOKEN_CHARS:
        return {"status": "refused", "reason": f"{CLUSTER_TOKEN_ENV} is too short ({len(token)} characters, needs "
                f"{MIN_CLUSTER_TOKEN_CHARS} or more): work for sessions on other nodes is not routed"}
    return {"status": "ok"}


# A browser signs in again after a week. The age is checked here, not left to the browser's Max-Age: a copied
# cookie used to work for as long as the token did.
COOKIE_MAX_AGE = 7 * 24 * 3600


def cookie_value(token: str, issued: int | None = None, token_id: str = "") -> str:
    """`<issued epoch seconds>.<HMAC of the token over it>`: never the token itself, and dated. A person's cookie
    (signed in with their own API token, issue 49) ends `.<token id>`, which the MAC covers: the daemon's token
    signs it, and the named token must still be valid when the cookie is used."""
    issued = int(time.time()) if issued is None else issued
    label = f"compozy dashboard cookie {issued}" + (f" {token_id}" if token_id else "")
    mac = hmac.new(token.encode(), label.encode(), hashlib.sha256).hexdigest()
    return f"{issued}.{mac}" + (f".{token_id}" if token_id else "")


def cookie_token(token: str, value: str, max_age: float = COOKIE_MAX_AGE) -> str | None:
    """The token id a valid cookie signs in with: "" for the owner's, None when the cookie is not valid."""
    issued, _, rest = value.partition(".")
    _, _, token_id = rest.partition(".")
    if not issued.isdigit() or not -60 <= time.time() - int(issued) <= max_age:  # a minute of clock skew
        return None
    return token_id if same_secret(value, cookie_value(token, int(issued), token_id)) else None


# The CLI asks a TCP listener to prove it holds this home's token before it sends the token (cli/client.py).
PROOF_PATH = "/api/auth/proof"
PROOF_NONCE_CHARS = 32


def daemon_proof(token: str, home: str, nonce: str, pair: str | None) -> str:
    """HMAC-SHA256 of the token over a nonce, the home and (on loopback) the connection's address pair
    (`connection_pair`).

    The message starts with its own label, so no proof can equal a dashboard cookie's MAC (`cookie_value`): the
    route answers anyone who reaches it, and must not sign what another check accepts."""
    message = f"compozy daemon proof\n{home}\n{nonce}\n{pair or ''}"
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


def connection_pair(client: Sequence[object] | None, server: Sequence[object] | None) -> str | None:
    """A TCP connection's two ends, `client-address client-port server-address server-port`, from either end's view:
    the daemon's peer and own address, or the CLI's own address and its peer. None unless both are (address, port).

    A relay cannot make its connection to the daemon look like the CLI's connection to it: two connections with one
    address pair cannot exist, and binding the client's port alone let a relay connecting from 127.0.0.2 with the
    CLI's port number pass (issue 44). An IPv4-mapped IPv6 address (a dual-stack listener's view) is its IPv4."""
    ends = []
    for end in (client, server):
        if end is None or len(end) < 2 or not isinstance(end[1], int) or isinstance(end[1], bool):
            return None
        ends += [_address(end[0]), str(end[1])]
    return " ".join(ends)


def on_loopback(host: object) -> bool:
    """An address on loopback (127.0.0.0/8, ::1, an IPv4-mapped one of them); a name is not an address."""
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def _address(host: object) -> str:
    ip = _ip(host)
    return str(host) if ip is None else str(ip)


def _ip(host: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(str(host).partition("%")[0])  # an IPv6 scope: one end may name it, the other not
    except ValueError:
        return None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped or ip


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


# Failed login-ticket redemptions: a burst of 20 (old links clicked again), then 2 a second. A ticket has 192 bits,
# so guessing was never practical, but 2,260 guesses a second cost the daemon for nothing.
LOGIN_FAILURE_BURST = 20
LOGIN_FAILURES_PER_SECOND = 2.0


class FailureBudget:
    """A token bucket of failures: `wait(now)` says how long until one more attempt is allowed (0: now). One for the
    whole daemon: every loopback client has the same address. The clock is the caller's (`time.monotonic()`)."""

    def __init__(self, burst: int = LOGIN_FAILURE_BURST, per_second: float = LOGIN_FAILURES_PER_SECOND) -> None:
        self.burst, self.per_second = burst, per_second
        self._left = float(burst)
        self._at: float | None = None

    def _refill(self, now: float) -> None:
        if self._at is not None:
            self._left = min(float(self.burst), self._left + max(now - self._at, 0.0) * self.per_second)
        self._at = now

    def wait(self, now: float) -> float:
        self._refill(now)
        return 0.0 if self._left >= 1.0 else (1.0 - self._left) / self.per_second

    def spend(self, now: float) -> None:
        self._refill(now)
        self._left = max(self._left - 1.0, 0.0)


class Tickets:
    """Short-lived, single-use login tickets, kept in the daemon's memory (a restart voids them all)."""

    def __init__(self, ttl: float = TICKET_TTL_SECONDS) -> None:
        self.ttl = ttl
        self._expiry: dict[str, tuple[float, str]] = {}  # ticket → (expiry, the token id it signs in; "" the owner)

    def mint(self, token_id: str = "") -> tuple[str, float]:
        """A new ticket and its expiry (epoch seconds); redeemed, it signs the browser in as `token_id`."""
        now = time.monotonic()
        self._expiry = {t: exp for t, exp in self._expiry.items() if exp[0] > now}
        while len(self._expiry) >= MAX_OUTSTANDING_TICKETS:
            self._expiry.pop(next(iter(self._expiry)))  # the oldest goes first
        ticket = secrets.token_urlsafe(24)
        self._expiry[ticket] = (now + self.ttl, token_id)
        return ticket, time.time() + self.ttl

    def redeem(self, ticket: str) -> str | None:
        """The token id the ticket signs in ("" for the owner), None when it is unknown, used or expired."""
        entry = self._expiry.pop(ticket, None)
        return entry[1] if entry is not None and entry[0] > time.monotonic() else None
