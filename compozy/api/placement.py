"""Placement: in a cluster, a create (`POST /api/sessions`, from the API or the CLI) runs on the node with room.

Inside the guard (the caller is authenticated), before Django, for a create that was not forwarded here already:
1. The candidates are this node and every other node that is up and has an address, ordered by live agents (their
   unexpired leases in the catalog: each live runtime holds one), fewest first; a tie goes to this node (no hop),
   then by node id so that every node orders the same way.
2. Each is tried in turn: this node runs the create itself, another node gets it forwarded once
   (`X-Compozy-Routed`, the cluster token) through its pooled client. A node that answers 429
   `agent_limit_reached` is full (the counts are a moment old, and each node's `[limits] max_concurrent_agents`
   is its own), one that cannot be reached or is shutting down (503 `daemon_draining`) is passed over; any other
   answer is the create's, relayed as is with `X-Compozy-Node` naming the node that ran it.
3. Only when every node refused it as full is the answer 429 `agent_limit_reached`, with each node's count.
Without a cluster token, a catalog to read or another node that is up, the create runs here as before; so does one
whose caller pinned it here (`X-Compozy-Placement: here`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from compozy.api.guard import ASGIApp, Message, Receive, Scope, Send, send_json
from compozy.api.routing import NODE_HEADER, ROUTED_HEADER, read_body, replay, send_to_peer
from compozy_base.auth import cluster_token
from compozy_base.errors import error_body
from sessions.catalog import cluster
from sessions.core.errors import first_line

logger = logging.getLogger(__name__)

CREATE_PATH = "/api/sessions"
# `X-Compozy-Placement: here` pins a create to the node asked (its workspace exists only on this machine, a test
# that needs to know where a session runs); the 429 is then this node's own.
PLACEMENT_HEADER = b"x-compozy-placement"
FULL = "agent_limit_reached"
# A node that answers this is passed over as well: it stops taking sessions.
DRAINING = "daemon_draining"


@dataclass(frozen=True)
class Candidate:
    node_id: str
    address: str  # "" for this node
    live: int  # unexpired leases in the catalog when the create arrived
    here: bool


@dataclass
class Answer:
    """An HTTP answer held back until it is known not to be a refusal to pass over."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def code(self) -> str:
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return ""
        return str(parsed.get("code") or "") if isinstance(parsed, dict) else ""

    def evidence(self) -> dict[str, Any]:
        try:
            parsed = json.loads(self.body)
            found = parsed["diagnostic"]["evidence"]
        except (ValueError, KeyError, TypeError):
            return {}
        return found if isinstance(found, dict) else {}

    def passed_over(self) -> bool:
        return (self.status == 429 and self.code() == FULL) or (self.status == 503 and self.code() == DRAINING)


def candidates(me: str) -> list[Candidate]:
    """This node and every other node up with an address, fewest live agents first (a tie: this node first)."""
    found = {node["id"]: node for node in cluster.nodes()}
    mine = found.pop(me, None)
    out = [Candidate(me, "", mine["leases"] if mine else 0, True)]
    out += [Candidate(node["id"], node["address"], node["leases"], False) for node in found.values()
            if node["status"] == "up" and node["address"]]
    return sorted(out, key=lambda c: (c.live, not c.here, c.node_id))


def is_create(scope: Scope) -> bool:
    """A create to place: not forwarded here already, nor pinned to this node by its caller."""
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("path") != CREATE_PATH:
        return False
    headers = scope.get("headers", [])
    return not any(name == ROUTED_HEADER or (name == PLACEMENT_HEADER and value.lower() == b"here")
                   for name, value in headers)


class Placement:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = cluster_token()
        if not token or not is_create(scope) or not cluster.clustered():
            await self.app(scope, receive, send)
            return
        body, messages = await read_body(receive)
        if messages[-1]["type"] != "http.request":  # client gone, or over the body cap: the guard answers that
            await self.app(scope, replay(messages), send)
            return
        try:
            order = await sync_to_async(_candidates)()
        except Exception as exc:  # noqa: BLE001 - any driver's failure: the create runs here and says why
            logger.warning("placement could not read the nodes, creating here: %s", first_line(exc))
            await self.app(scope, replay(messages, then=receive), send)
            return
        refusals: list[tuple[Candidate, Answer]] = []
        for candidate in order:
            answer = await self._try(candidate, scope, body, messages, receive, token)
            if answer is None:
                continue  # unreachable: logged by the forwarder
            if not answer.passed_over():
                await _relay(send, answer, candidate)
                return
            refusals.append((candidate, answer))
        await _all_full(send, refusals)

    async def _try(self, candidate: Candidate, scope: Scope, body: bytes, messages: list[dict[str, Any]],
                   receive: Receive, token: str) -> Answer | None:
        if candidate.here:
            return await _run_here(self.app, scope, replay(messages, then=receive))
        found = await send_to_peer(scope, body, candidate.address, token)
        if found is None:
            return None
        status, headers, content = found
        if status == 401:  # the peer refused our cluster token: a misconfigured node is passed over, loudly
            logger.warning("node %s refused this node's cluster token; a create is not placed there",
                           candidate.node_id)
            return None
        return Answer(status, headers, content)


def _candidates() -> list[Candidate]:
    cluster.usable_connection()  # outside Django's request cycle: nobody else replaces a dead connection here
    return candidates(cluster.node_id())


async def _run_here(app: ASGIApp, scope: Scope, receive: Receive) -> Answer:
    """The create run by this node, its answer held back (a create's answer is one small JSON body). `receive`
    replays the body, then waits on the caller's own: a bare disconnect after the body made Django drop the
    answer."""
    held = Answer(500, [], b"")
    chunks: list[bytes] = []

    started = False

    async def hold(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
            held.status, held.headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, hold)
    if not started:  # the caller left before the create answered: nobody reads what is sent now
        logger.info("a create ended without an answer (the caller went away)")
    held.body = b"".join(chunks)
    return held


async def _relay(send: Send, answer: Answer, candidate: Candidate) -> None:
    headers = [(k, v) for k, v in answer.headers if k.lower() != b"content-length"]
    headers += [(b"content-length", str(len(answer.body)).encode()), (NODE_HEADER, candidate.node_id.encode())]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def _all_full(send: Send, refusals: list[tuple[Candidate, Answer]]) -> None:
    nodes = [{"node_id": c.node_id, **{k: v for k, v in a.evidence().items() if k in ("live", "max_concurrent_agents")}}
             for c, a in refusals]
    if len(refusals) == 1:
        only = refusals[0][1]  # this node alone could be asked: its own answer, unchanged
        await send_json(send, only.status, json.loads(only.body))
        return
    await send_json(send, 429, error_body(
        f"every node of the cluster is at its agent limit ({len(refusals)} asked); stop a session or try again later",
        FULL, 429, {"nodes": nodes}))
