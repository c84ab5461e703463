"""Work that must touch a live runtime goes to the node that runs it.

Inside the guard (the caller is authenticated), before Django: a request that acts on a session's runtime (prompt,
stop, interrupt, steer, cancel, queue, permissions, remove, children) for a session whose unexpired lease another
node holds is sent to that node's recorded address with the cluster's shared token (`COMPOZY_CLUSTER_TOKEN`), and
its answer is returned as is. Without a cluster token, when the owner cannot be reached, or for a request that was
already routed once (no loops while a lease moves), the request runs here and the service layer answers 409
`session_owned_elsewhere` with the owner. Reads never need this: the catalog and the shared sessions folder serve
them on any node.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from asgiref.sync import sync_to_async

logger = logging.getLogger(__name__)

ROUTED_HEADER = b"x-compozy-routed"  # set on a routed request: the owner answers it itself
NODE_HEADER = b"x-compozy-node"  # on a routed answer: which node ran it
# A routed prompt may reactivate the session on its owner first (up to 90 s there); a stop waits for the agent.
ROUTE_TIMEOUT_SECONDS = 120.0
RUNTIME_PATH = re.compile(
    r"^/api/workspaces/[^/]+/sessions/(sess_[0-9a-f]{16})"
    r"(?:/(?:prompt|prompt/cancel|prompt/queue(?:/[^/]+)?|stop|interrupt|steer|permissions(?:/[^/]+)?|children))?$")
PASSED_HEADERS = {b"content-type", b"accept", b"last-event-id"}


class OwnerRouter:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from compozy_site.auth import cluster_token

        token = cluster_token()
        session_id = _runtime_session(scope) if token else None
        if session_id is None:
            await self.app(scope, receive, send)
            return
        from sessions import cluster

        holder = await sync_to_async(cluster.holder_elsewhere)(session_id)
        if holder is None or not holder.address:
            await self.app(scope, receive, send)
            return
        body, messages = await _read_body(receive)
        if messages[-1]["type"] != "http.request":  # client gone, or over the body cap: the guard answers that
            await self.app(scope, _replay(messages), send)
            return
        answer = await _send_to_owner(scope, body, holder.address, token)
        if answer is None:  # owner unreachable: answered here (409 with the owner, or repaired once expired)
            await self.app(scope, _replay(messages), send)
            return
        status, headers, content = answer
        await send({"type": "http.response.start", "status": status,
                    "headers": [*headers, (NODE_HEADER, holder.node_id.encode())]})
        await send({"type": "http.response.body", "body": content})


def _runtime_session(scope: dict[str, Any]) -> str | None:
    """The session id of a request that acts on a live runtime and was not routed here already."""
    if scope["type"] != "http" or any(name == ROUTED_HEADER for name, _ in scope.get("headers", [])):
        return None
    match = RUNTIME_PATH.match(scope.get("path", ""))
    if match is None:
        return None
    # Reads come from the catalog and the shared store, except pending permissions: those live in the owner.
    if scope["method"] in ("GET", "HEAD") and not scope["path"].endswith("/permissions"):
        return None
    return match.group(1)


async def _read_body(receive: Any) -> tuple[bytes, list[dict[str, Any]]]:
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


def _replay(messages: list[dict[str, Any]]) -> Any:
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    return receive


async def _send_to_owner(scope: dict[str, Any], body: bytes, address: str,
                         token: str) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
    try:
        import httpx
    except ImportError:  # the scale extra is not installed: no routing
        return None
    from sessions import cluster

    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", [])
               if name in PASSED_HEADERS}
    headers.update({"authorization": f"Bearer {token}", ROUTED_HEADER.decode(): cluster.node_id()})
    url = address.rstrip("/") + scope["path"]
    if scope.get("query_string"):
        url += "?" + scope["query_string"].decode("latin-1")
    try:
        async with httpx.AsyncClient(timeout=ROUTE_TIMEOUT_SECONDS) as client:
            response = await client.request(scope["method"], url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        logger.warning("could not route %s %s to %s: %s", scope["method"], scope["path"], address, exc)
        return None
    kept = [(b"content-type", response.headers["content-type"].encode())] if "content-type" in response.headers else []
    return response.status_code, kept, response.content
