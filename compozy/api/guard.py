"""The one ASGI guard in front of every route, Django views and channels consumers (the SSE streams) alike.

In order, for each HTTP request:
0. `GET /healthz` and `GET /readyz` are answered first, on any transport, with no token and no Host check: the
   orchestrator's probes (compozy/api/probes.py). They are the only unauthenticated answers besides static files.
1. On the UDS: the peer must be the daemon's own uid (the socket's 0600 mode is the first guard, this the second).
2. Over TCP: the Host must be a loopback name or the bound host (stops DNS rebinding), a browser's Origin must be
   the daemon's own, and a cross-site fetch without one may neither write nor open a stream.
3. Over TCP: the token, as `Authorization: Bearer` (scripts, the CLI) or as the dashboard cookie that a one-time
   `/login?ticket=` sets. Pages without it get the login page, everything else 401 `auth_required`.
4. Bodies over `[http] max_body_bytes` answer 413 `body_too_large`: by Content-Length up front, else counted as
   they arrive. (daphne buffers a body before the app runs, so `http_server` enforces the cap there too.)

Refusals use the API's error shape. Answers to a trusted caller carry `X-Compozy-Home`, which the CLI compares with
its own home before it trusts a daemon; the CLI also sends it, and a daemon of another home refuses with 421
`home_mismatch` before anything runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, urlparse

from accounts.actor import Actor
from accounts.principal import ACTOR_HEADER, OWNER_PRINCIPAL, PRINCIPAL_KEY, Principal
from compozy.api import probes, route_scopes
from compozy_base.auth import (
    COOKIE_MAX_AGE,
    COOKIE_NAME,
    PROOF_NONCE_CHARS,
    PROOF_PATH,
    FailureBudget,
    Tickets,
    cluster_token,
    connection_pair,
    cookie_token,
    cookie_value,
    daemon_proof,
    ensure_token,
    is_machine_path,
    same_secret,
)
from compozy_base.config.loader import get_config
from compozy_base.errors import error_body
from compozy_base.home import compozy_home
from sessions.core import offload

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Set by `compozy.api.http_server` on requests that came over the UDS; absent means TCP (fail closed).
LOCAL_SOCKET = "compozy.local_socket"
PEER_UID = "compozy.peer_uid"
PEER_PID = "compozy.peer_pid"  # the UDS peer's pid: decisions from an agent's process tree are refused
HOME_HEADER = b"x-compozy-home"
TICKET_PATH = "/api/auth/ticket"
LOGIN_PATH = "/login"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})

LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Compozy: sign in</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em}}
code{{background:#f2f2f2;padding:.1em .3em}}</style></head><body><h1>Sign in to Compozy</h1>
<p>{reason}</p><p>Run <code>compozy dashboard</code> in a terminal on this machine: it prints (and opens) a one-time
login link for this browser.</p><p>Scripts send the token instead:
<code>Authorization: Bearer $(cat $COMPOZY_HOME/token)</code> (the home defaults to <code>~/.compozy</code>).</p>
<p hidden>{code}</p></body></html>"""


def origin_allowed(origin: str, host: str) -> bool:
    """Same-origin only: the Origin's host:port must be the Host the request was sent to."""
    parsed = urlparse(origin)
    return bool(parsed.scheme in {"http", "https"} and parsed.netloc and parsed.netloc.lower() == host.lower())


def host_name(host: str) -> str:
    """`Host` without its port: `[::1]:2123` → `[::1]`, `localhost:2123` → `localhost`; "" when malformed."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, port = host.partition("]")
        if not bracket:
            return ""
        name += "]"
    else:
        name, _, port = host.partition(":")
        port = f":{port}" if port else ""
    if port and not (port.startswith(":") and port[1:].isdigit()):
        return ""
    return name


def is_stream(path: str) -> bool:
    return path.endswith(("/stream", "/catalog-stream"))


@dataclass(frozen=True)
class GuardPolicy:
    token: str
    home: str
    hosts: frozenset[str]
    max_body_bytes: int
    owner_uid: int
    cluster_token: str = ""  # COMPOZY_CLUSTER_TOKEN: accepted from the cluster's other nodes
    audit: bool = False  # writes go to the audit log (the daemon's; a test's bare guard has no catalog)

    @classmethod
    def for_daemon(cls) -> GuardPolicy:
        config = get_config()
        home = compozy_home()
        bound = config.http_host.lower()
        hosts = LOOPBACK_HOSTS | {f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound}
        # The name other nodes reach this one by (`[cluster] advertise_url`: a container's service name, say) is
        # this daemon's own, and what routed requests carry as their Host.
        advertised = (urlparse(config.cluster.advertise_url).hostname or "").lower()
        if advertised:
            hosts |= {f"[{advertised}]" if ":" in advertised else advertised}
        hosts |= set(config.http_allowed_hosts)  # `[http] allowed_hosts`: a load balancer's or a Service's name
        return cls(ensure_token(home), str(home), frozenset(hosts), config.http_max_body_bytes, os.getuid(),
                   cluster_token(), audit=True)


class Refusal(Exception):
    def __init__(self, status: int, code: str, message: str, evidence: dict[str, Any] | None = None,
                 headers: list[tuple[bytes, bytes]] | None = None, page: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.evidence = evidence
        self.headers = headers or []
        self.page = page  # answered with the HTML login page instead of JSON


class Guard:
    def __init__(self, app: ASGIApp, policy: GuardPolicy | None = None) -> None:
        self.app = app
        self._policy = policy
        self.tickets = Tickets()
        self.login_failures = FailureBudget()
        self._login_limited = False  # logged once per run of refusals

    @property
    def policy(self) -> GuardPolicy:
        if self._policy is None:
            self._policy = GuardPolicy.for_daemon()
        return self._policy

    async def _before_checks(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """What is answered or passed on before any check (True when it was): websockets, non-HTTP scopes and
        the two probes."""
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # no websocket routes: nothing to guard
            return True
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return True
        if probes.is_probe(scope["method"], scope["path"]):
            # Before the Host and token checks: an orchestrator probes the pod's address without the token. These
            # two answers say nothing but ok / ready and which check failed (compozy/api/probes.py).
            status, body = await probes.answer(scope["path"])
            await send_json(send, status, body, head=scope["method"] == "HEAD")
            return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await self._before_checks(scope, receive, send):
            return
        policy = self.policy
        headers = _headers(scope)
        try:
            if scope.get(LOCAL_SOCKET) is True:
                self._check_peer(scope, policy)
                scope[PRINCIPAL_KEY] = OWNER_PRINCIPAL  # the daemon's own user: the owner
            else:
                self._check_host_and_origin(scope, headers, policy)
                if scope["path"] == LOGIN_PATH:
                    await self._login(scope, headers, send, policy)
                    return
                if scope["path"] == PROOF_PATH:
                    await self._prove(scope, send, policy)
                    return
                if not _public(scope["path"]):
                    scope[PRINCIPAL_KEY] = await self._check_auth(scope, headers, policy)
                    await _check_scope(scope)
            expected = headers.get(HOME_HEADER.decode())
            if expected is not None and expected != quote(policy.home):
                # The CLI names the home it means; a daemon of another home must not act on the request at all.
                raise Refusal(421, "home_mismatch", "this daemon serves another Compozy home",
                              {"expected": expected})
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > policy.max_body_bytes:
                raise _too_large(policy)
        except Refusal as refusal:
            await _refuse(send, refusal)
            return
        if scope["path"] == TICKET_PATH and scope["method"] == "POST":
            await self._mint_ticket(send, policy, scope.get(PRINCIPAL_KEY) or OWNER_PRINCIPAL)
            return
        if scope["path"] == WHOAMI_PATH and scope.get(PRINCIPAL_KEY) is not None:
            await send_json(send, 200, {"principal": scope[PRINCIPAL_KEY].public()})
            return
        # Static files are public; only an authenticated (or local) caller learns which home answers.
        await self._forward(scope, receive, send, policy, identify=not _public(scope["path"]))

    # ---- checks ----------------------------------------------------------------------------------

    @staticmethod
    def _check_peer(scope: Scope, policy: GuardPolicy) -> None:
        uid = scope.get(PEER_UID)
        if uid != policy.owner_uid:
            raise Refusal(403, "peer_forbidden", "the control socket serves only the daemon's own user",
                          {"peer_uid": uid})

    @staticmethod
    def _check_host_and_origin(scope: Scope, headers: dict[str, str], policy: GuardPolicy) -> None:
        host = headers.get("host", "")
        if host_name(host) not in policy.hosts:
            raise Refusal(400, "host_not_allowed", "this Host is not served (loopback names and the bound host only)",
                          {"host": host})
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site", "")
        cross_fetch = not origin and site in ("same-site", "cross-site")
        if (origin is not None and not origin_allowed(origin, host)) or (
                cross_fetch and (scope["method"] not in SAFE_METHODS or is_stream(scope["path"]))):
            raise Refusal(403, "origin_forbidden", "cross-origin requests are refused",
                          {"origin": origin or "", "host": host})

    @staticmethod
    async def _check_auth(scope: Scope, headers: dict[str, str], policy: GuardPolicy) -> Principal:
        """Who the request speaks for: the owner (the home's token, a cluster peer, the owner's cookie), or a
        person's token (`<id>.<secret>`, checked in the catalog, issue 49) or the cookie it signed a browser in."""
        scheme, _, given = headers.get("authorization", "").partition(" ")
        given = given.strip()
        if scheme.lower() == "bearer" and same_secret(given, policy.token):
            return OWNER_PRINCIPAL
        if scheme.lower() == "bearer" and policy.cluster_token and same_secret(given, policy.cluster_token):
            # Another node of the cluster routing work to the session this node owns, for the person who asked it.
            scope[ROUTED_KEY] = True
            return Principal.from_header(headers.get(ACTOR_HEADER, "")) or OWNER_PRINCIPAL
        if scheme.lower() == "bearer" and given.startswith(TOKEN_PREFIX):
            principal, refused = await _person(given)
            if principal is not None:
                return principal
            raise Refusal(401, refused, _REFUSED_WHY.get(refused, "this token is not valid"),
                          headers=[(b"www-authenticate", b'Bearer realm="compozy"')])
        cookie = _cookie(headers.get("cookie", ""), COOKIE_NAME)
        signed_in = cookie_token(policy.token, cookie) if cookie else None
        if signed_in is not None:
            # Cookies ignore ports, so a page on another loopback port is "same-site" and its sub-resource GETs
            # carry our cookie: only our own pages and top-level navigations may use it.
            site = headers.get("sec-fetch-site", "")
            if site in ("same-site", "cross-site") and headers.get("sec-fetch-mode") != "navigate":
                raise Refusal(403, "origin_forbidden", "cross-origin requests are refused", {"site": site})
            if signed_in == "":
                return OWNER_PRINCIPAL
            principal = await _signed_in(signed_in)
            if principal is not None:
                return principal
        # Pages get a sign-in page; the API and the Prometheus scrape (a machine, not a person) get JSON.
        if scope["method"] in ("GET", "HEAD") and not is_machine_path(scope["path"]):
            raise Refusal(401, "auth_required", "sign in with `compozy dashboard`", page=True)
        raise Refusal(401, "auth_required", "this daemon needs its token: `Authorization: Bearer <token>` from "
                      "$COMPOZY_HOME/token, or `compozy dashboard` for a browser",
                      headers=[(b"www-authenticate", b'Bearer realm="compozy"')])

    # ---- routes the guard answers itself ---------------------------------------------------------

    async def _login(self, scope: Scope, headers: dict[str, str], send: Send, policy: GuardPolicy) -> None:
        """`/login?ticket=…`: a valid single-use ticket becomes the HttpOnly, SameSite=Strict cookie."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        ticket = (query.get("ticket") or [""])[0]
        if scope["method"] == "HEAD" or headers.get("sec-fetch-mode", "navigate") != "navigate":
            # A link preview's HEAD or a page's sub-resource fetch must not use up the link (and take the cookie).
            await _login_page(send, "Open this login link in your browser.")
            return
        now = time.monotonic()
        wait = self.login_failures.wait(now)
        if wait > 0:
            if not self._login_limited:
                logger.warning("login: invalid login links arrive faster than 2 a second; /login answers 429 "
                               "login_rate_limited until they slow down")
                self._login_limited = True
            await _login_page(send, "Too many invalid login links were tried; wait a moment, then ask for a new one.",
                              status=429, code="login_rate_limited",
                              headers=[(b"retry-after", str(max(math.ceil(wait), 1)).encode())])
            return
        self._login_limited = False
        signs_in = self.tickets.redeem(ticket) if scope["method"] == "GET" else None
        if signs_in is None:
            self.login_failures.spend(now)
            await _login_page(send, "This login link has expired or was already used; ask for a new one.")
            return
        value = cookie_value(policy.token, token_id=signs_in)
        cookie = (f"{COOKIE_NAME}={value}; Path=/; Max-Age={COOKIE_MAX_AGE}; HttpOnly; "
                  "SameSite=Strict")
        await send({"type": "http.response.start", "status": 302, "headers": [
            (b"location", b"/"), (b"set-cookie", cookie.encode()), (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _prove(scope: Scope, send: Send, policy: GuardPolicy) -> None:
        """`/api/auth/proof?nonce=…`, before the token check: the CLI sends its token over TCP only to a listener
        that answers this (compozy/cli/client.py). It reveals nothing but MACs under a label of their own."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        nonce = (query.get("nonce") or [""])[0]
        if len(nonce) != PROOF_NONCE_CHARS or any(c not in "0123456789abcdef" for c in nonce):
            raise Refusal(400, "invalid_nonce", f"nonce must be {PROOF_NONCE_CHARS} lower-case hex digits")
        # Bound to this connection's address pair as daphne saw it (the peer and our end): the CLI computes it from
        # its own end and its peer, which match only on a connection it made to this daemon itself.
        pair = connection_pair(scope.get("client"), scope.get("server"))
        body = {"proof": daemon_proof(policy.token, policy.home, nonce, None),
                "proof_bound": daemon_proof(policy.token, policy.home, nonce, pair) if pair is not None else None}
        await send_json(send, 200, body)

    async def _mint_ticket(self, send: Send, policy: GuardPolicy, principal: Principal) -> None:
        # The browser the ticket signs in speaks for the token that asked for it (the owner's: no token id).
        ticket, expires = self.tickets.mint("" if principal is OWNER_PRINCIPAL else principal.token_id)
        body = {"ticket": ticket, "login_path": f"{LOGIN_PATH}?ticket={ticket}",
                "expires_at": datetime.fromtimestamp(expires, UTC).isoformat(timespec="seconds")}
        await send_json(send, 201, body, [(HOME_HEADER, quote(policy.home).encode())])

    # ---- pass-through with the body cap and the identity header -------------------------------------

    async def _forward(self, scope: Scope, receive: Receive, send: Send, policy: GuardPolicy,
                       identify: bool) -> None:
        state = {"received": 0, "over": False, "started": False}

        async def counted_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > policy.max_body_bytes:
                    state["over"] = True
                    return {"type": "http.disconnect"}  # the app stops reading; the guard answers 413
            return message

        async def marked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                if policy.audit:
                    _audit(scope, int(message.get("status", 0)))
            if message["type"] == "http.response.start" and identify:
                message = {**message, "headers": [*message.get("headers", []),
                                                  (HOME_HEADER, quote(policy.home).encode())]}
            await send(message)

        await self.app(scope, counted_receive, marked_send)
        if state["over"] and not state["started"]:
            await _refuse(send, _too_large(policy))


# The guard's catalog reads and audit writes have a thread of their own: on the runtime's DB thread they queued
# with every session's saves (a stop's `stopped` waited behind the stop request's own audit row).
_CATALOG = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compozy-guard-db")
T = TypeVar("T")


async def _catalog(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await offload.run_on(_CATALOG, fn, *args, **kwargs)


TOKEN_PREFIX = "tok_"
ROUTED_KEY = "compozy.routed"  # set when the cluster token authenticated the request
WHOAMI_PATH = "/api/auth/whoami"
_REFUSED_WHY = {"token_revoked": "this token was revoked", "token_expired": "this token has expired"}


async def _person(given: str) -> tuple[Principal | None, str]:
    """A person's token checked in the catalog (off the loop, on the guard's catalog thread): the principal, or the
    refusal's code."""
    from accounts import services
    return await _catalog(services.authenticate, given, datetime.now(UTC))


async def _signed_in(token_id: str) -> Principal | None:
    from accounts import services
    return await _catalog(services.principal_for_id, token_id, datetime.now(UTC))


async def _check_scope(scope: Scope) -> None:
    """The route's declared scope (compozy/api/route_scopes.py), then a token limited to some workspaces: a session
    outside them is answered as if it did not exist (404: it may not know of it), other routes are refused."""
    principal: Principal = scope[PRINCIPAL_KEY]
    method, path = scope["method"], scope["path"]
    needed, _ = route_scopes.needed(method, path)
    if not principal.may(needed):
        raise Refusal(403, "insufficient_scope", f"this route needs the {needed.value} scope; this token has "
                      f"{', '.join(sorted(principal.scopes)) or 'none'}",
                      {"needed": needed.value, "scopes": sorted(principal.scopes)})
    if not principal.limited or _public(path):
        return
    session_id = route_scopes.session_of(path)
    if session_id is not None:
        workspace = await _catalog(_workspace_of, session_id)
        if workspace is not None and not principal.sees(workspace):
            raise Refusal(404, "session_not_found", "session not found", {"session_id": session_id[:64]})
        return
    if not route_scopes.open_to_limited(path):
        raise Refusal(403, "token_workspace_limited", "this token is limited to some workspaces; this route "
                      "reaches beyond them", {"workspaces": sorted(principal.workspaces)})


def _workspace_of(session_id: str) -> str | None:
    from sessions.models import Session

    return Session.objects.filter(id=session_id).values_list("workspace_id", flat=True).first()


def _audit(scope: Scope, status: int) -> None:
    """A write that was carried out (a 2xx or 3xx) goes to the audit log with its actor, off the loop and not
    awaited: the answer does not wait for the log. A failure to log is logged with its cause."""
    method, path = scope["method"], scope["path"]
    principal: Principal | None = scope.get(PRINCIPAL_KEY)
    if method in SAFE_METHODS or status >= 400 or principal is None:
        return
    if scope.get(ROUTED_KEY):
        return  # routed here by the node that took it (with the cluster token), which logged it
    _, action = route_scopes.needed(method, path)
    session_id = route_scopes.session_of(path) or ""
    from sessions.core.offload import spawn

    async def write(actor: Actor) -> None:
        from accounts import services

        try:
            await _catalog(services.record, actor, action, datetime.now(UTC), method=method, path=path,
                     session_id=session_id, status=status)
        except Exception:
            logger.exception("audit: could not record %s %s by %s", method, path, actor.label)

    spawn(write(principal.actor))


def _public(path: str) -> bool:
    """The login page's assets need no token: static files are the app's own code, never user data. An action
    link (`/a/…`, frontend/action_links.py) is its own credential."""
    return path.startswith(("/static/", "/a/")) or path == "/favicon.ico"


def _too_large(policy: GuardPolicy) -> Refusal:
    return Refusal(413, "body_too_large", f"request bodies are limited to {policy.max_body_bytes} bytes",
                   {"max_body_bytes": policy.max_body_bytes})


def _headers(scope: Scope) -> dict[str, str]:
    """Headers by lower-cased name (latin-1, as HTTP/1.1 carries them). A repeated header is joined with "," as
    Django joins it, so a second Host, Origin or Authorization can only make a check fail, never pass."""
    out: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        out[name] = f"{out[name]},{value}" if name in out else value
    return out


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: list[tuple[bytes, bytes]] | None = None, head: bool = False) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        (b"cache-control", b"no-store"), *(headers or [])]})
    await send({"type": "http.response.body", "body": b"" if head else data})


async def _refuse(send: Send, refusal: Refusal) -> None:
    if refusal.page:
        await _login_page(send, "This dashboard needs a sign-in.")
        return

    await send_json(send, refusal.status, error_body(refusal.message, refusal.code, refusal.status,
                                                      refusal.evidence), refusal.headers)


async def _login_page(send: Send, reason: str, status: int = 401, code: str = "auth_required",
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = LOGIN_PAGE.format(reason=reason, code=code).encode()
    await send({"type": "http.response.start", "status": status, "headers": [*(headers or []),
        (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(data)).encode()),
        (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'"),
        (b"x-frame-options", b"DENY")]})
    await send({"type": "http.response.body", "body": data})
