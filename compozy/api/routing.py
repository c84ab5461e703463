"""Work that must touch a live runtime goes to the node that runs it.

Inside the guard (the caller is authenticated), before Django: a request that acts on a session's runtime (prompt,
stop, interrupt, steer, cancel, queue, permissions, elicitations, remove, children) for a session whose unexpired
lease another node holds is sent to that node's recorded address with the cluster's shared token
(`COMPOZY_CLUSTER_TOKEN`), and its answer is returned as is. Reads of a live session (events, history, recap,
transcript, status, the SSE tail) are routed the same way when its folder is not on this node (no shared sessions
folder); the tail is relayed as it streams, with the caller's Last-Event-ID, so the owner's resume guarantee holds.
A session nobody runs whose folder is on another node that is up (the catalog row's `folder_node`) is read and
continued there the same way. Without a cluster token, when the owner cannot be reached, or for a request that was
already routed once (no loops while a lease moves), the request runs here and the service layer answers 409
`session_owned_elsewhere` with the owner (or `session_folder_elsewhere` naming the node that stores it). With a
shared sessions folder reads are never routed: the catalog and the folder serve them on any node.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from accounts.principal import ACTOR_HEADER, PRINCIPAL_KEY, Principal
from compozy.api import peers
from compozy.api.guard import ASGIApp, Receive, Scope, Send, send_json
from compozy_base.auth import cluster_token
from compozy_base.errors import error_body
from sessions.catalog import cluster, ownership
from sessions.core.errors import CatalogUnavailable, first_line

if TYPE_CHECKING:
    from sessions.catalog.cluster import Holder

logger = logging.getLogger(__name__)

ROUTED_HEADER = b"x-compozy-routed"  # set on a routed request: the owner answers it itself
NODE_HEADER = b"x-compozy-node"  # on a routed answer: which node ran it
ROUTE_TIMEOUT_SECONDS = peers.REQUEST_TIMEOUT_SECONDS
RUNTIME_PATH = re.compile(
    r"^/api/workspaces/[^/]+/sessions/(sess_[0-9a-f]{16})"
    r"(?:/(?:prompt|prompt/cancel|prompt/queue(?:/[^/]+)?|stop|interrupt|steer|mode|permissions(?:/[^/]+)?|elicitations(?:/[^/]+)?|children))?$")
READ_PATH = re.compile(
    r"^/api/(?:workspaces/[^/]+/)?sessions/(sess_[0-9a-f]{16})(?:/(?:events|history|recap|transcript|status|stream))?$")
PASSED_HEADERS = {b"content-type", b"accept", b"last-event-id"}
RELAYED_HEADERS = ("content-type", "cache-control", "x-accel-buffering")


class OwnerRouter:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Everything a request asks of a session's lease (here, and in the lookups behind the view) reads it once.
        # Not a stream's: it lasts for hours, and the session may move to another node meanwhile.
        if scope.get("path", "").endswith("stream"):
            await self._route(scope, receive, send)
            return
        with ownership.one_lease_read():
            await self._route(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = cluster_token()
        session_id = _runtime_session(scope) if token else None
        read_id = _read_session(scope) if token and session_id is None else None
        if session_id is None and read_id is None:
            await self.app(scope, receive, send)
            return
        try:
            target = session_id or read_id or ""
            holder = await sync_to_async(ownership.route_target)(target, read=read_id is not None)
        except Exception as exc:  # noqa: BLE001 - any driver's failure: logged with its cause, answered 503
            # The catalog does not answer (a server database gone): a coded JSON answer, not daphne's HTML 500.
            logger.warning("could not read the lease of %s: %s", session_id or read_id, first_line(exc))
            await _catalog_unavailable(send, exc)
            return
        if holder is None or not holder.address:
            await self.app(scope, receive, send)
            return
        if read_id is not None and scope["path"].endswith("/stream"):
            _, messages = await read_body(receive)
            if not await _relay_stream(scope, receive, send, holder, token):
                await self.app(scope, replay(messages, then=receive), send)
            return
        body, messages = await read_body(receive)
        if messages[-1]["type"] != "http.request":  # client gone, or over the body cap: the guard answers that
            await self.app(scope, replay(messages), send)
            return
        answer = await send_to_peer(scope, body, holder.address, token)
        if answer is None:  # owner unreachable: answered here (409 with the owner, or repaired once expired)
            # The caller's own receive follows the replayed body: a bare disconnect made Django drop the answer.
            await self.app(scope, replay(messages, then=receive), send)
            return
        status, headers, content = answer
        if status == 401:  # the owner refused our cluster token, not the caller's: say so, or the CLI blames its own
            await _token_rejected(send, holder)
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": [*headers, (NODE_HEADER, holder.node_id.encode())]})
        await send({"type": "http.response.body", "body": content})


async def _catalog_unavailable(send: Any, exc: BaseException) -> None:
    error = CatalogUnavailable.from_exception(exc)
    await send_json(send, error.status, error_body(error.message, error.code, error.status, error.data))


async def _token_rejected(send: Any, holder: Holder) -> None:
    logger.warning("node %s refused this node's cluster token", holder.node_id)
    await send_json(send, 502, error_body(
        f"node {holder.node_id} refused this node's cluster token: COMPOZY_CLUSTER_TOKEN must be the same on every "
        "node", "cluster_token_rejected", 502, {"owner": holder.public()}))


def _runtime_session(scope: Scope) -> str | None:
    """The session id of a request that acts on a live runtime and was not routed here already."""
    if scope["type"] != "http" or any(name == ROUTED_HEADER for name, _ in scope.get("headers", [])):
        return None
    match = RUNTIME_PATH.match(scope.get("path", ""))
    if match is None:
        return None
    # Reads come from the catalog and the shared store, except pending permissions and elicitations (in the owner).
    if scope["method"] in ("GET", "HEAD") and not scope["path"].endswith(("/permissions", "/elicitations")):
        return None
    return match.group(1)


def _read_session(scope: Scope) -> str | None:
    """The session id of a read of a live session that was not routed here already."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or any(
            name == ROUTED_HEADER for name, _ in scope.get("headers", [])):
        return None
    match = READ_PATH.match(scope.get("path", ""))
    return match.group(1) if match else None


def _owner_request(scope: Scope, token: str) -> tuple[str, dict[str, str]]:
    """The URL (relative to the owner's pooled client, `peers.client_for`) and headers of the request relayed to
    the session's owner."""
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", [])
               if name in PASSED_HEADERS}
    headers.update({"authorization": f"Bearer {token}", ROUTED_HEADER.decode(): cluster.node_id()})
    principal = scope.get(PRINCIPAL_KEY)
    if isinstance(principal, Principal):  # who asked, so the owner's events name them (issue 49)
        headers[ACTOR_HEADER] = principal.to_header()
    url = scope["path"]
    if scope.get("query_string"):
        url += "?" + scope["query_string"].decode("latin-1")
    return url, headers


async def _relay_stream(scope: Scope, receive: Any, send: Any, holder: Any, token: str) -> bool:
    """Relay the owner's SSE tail until either side ends it. False: the owner could not be reached."""
    import asyncio

    try:
        import httpx
    except ImportError:
        return False
    url, headers = _owner_request(scope, token)
    started = False

    async def pump() -> None:
        nonlocal started
        # No read timeout: a quiet tail sends keep-alive comments, and the caller decides when to leave.
        client = peers.client_for(holder.address)
        async with client.stream("GET", url, headers=headers,
                                 timeout=httpx.Timeout(ROUTE_TIMEOUT_SECONDS, read=None)) as response:
            if response.status_code == 401:
                started = True
                await _token_rejected(send, holder)
                return
            kept = [(k.encode(), response.headers[k].encode()) for k in RELAYED_HEADERS if k in response.headers]
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [*kept, (NODE_HEADER, holder.node_id.encode())]})
            started = True
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def caller_gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            continue

    relay, gone = asyncio.ensure_future(pump()), asyncio.ensure_future(caller_gone())
    try:
        await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (relay, gone):
            task.cancel()
        await asyncio.gather(relay, gone, return_exceptions=True)
    if relay.done() and not relay.cancelled() and relay.exception() is not None:
        if not started:
            logger.warning("could not relay the tail of %s from %s: %s", scope["path"], holder.address,
                           relay.exception())
            return False
        # The owner went away mid-stream: end ours; the client resumes.
        try:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Exception:  # the caller may be gone as well: nothing is left to end
            logger.warning("could not end the relayed tail of %s", scope["path"], exc_info=True)
    return True


async def read_body(receive: Any) -> tuple[bytes, list[dict[str, Any]]]:
    messages, chunks = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks), messages


def replay(messages: list[dict[str, Any]], then: Any = None) -> Any:
    """The request messages already read, then the caller's own receive (or a disconnect)."""
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return await then() if then is not None else {"type": "http.disconnect"}

    return receive


async def send_to_peer(scope: Scope, body: bytes, address: str,
                         token: str) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
    """The peer's answer (status, the content type, the body), or None when it could not be reached."""
    try:
        import httpx
    except ImportError:  # the scale extra is not installed: no routing
        return None
    url, headers = _owner_request(scope, token)
    try:
        response = await peers.client_for(address).request(scope["method"], url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        logger.warning("could not route %s %s to %s: %s", scope["method"], scope["path"], address, exc)
        return None
    kept = [(b"content-type", response.headers["content-type"].encode())] if "content-type" in response.headers else []
    return response.status_code, kept, response.content
