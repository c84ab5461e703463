"""The transport ceiling: a minimal ASGI app served by daphne that emits pre-built SSE frames.

`GET /stream?n=N&page=P` answers N `agent_message` frames shaped like the daemon's raw frames
(`id:` sequence, `event:` type, `data:` a SessionEventPayload-sized JSON envelope), P frames per
`http.response.body` message (the daemon's SSE consumer sends pages of up to 1000), then one `done` frame.
Frames are built before the response starts, so the client measures the transport alone.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
SESSION_ID = "sess_0123456789abcdef"
WORKSPACE_ID = "ws_0123456789abcdef"
TURN_ID = "turn_0123456789abcdef"
TIMESTAMP = "2026-01-01T00:00:00.000000Z"


def sse_frame(seq: int, event: str, content: dict[str, Any]) -> bytes:
    envelope = {"session_id": SESSION_ID, "workspace_id": WORKSPACE_ID, "id": f"ev_{seq:032x}", "sequence": seq,
                "turn_id": TURN_ID, "type": event, "agent_name": "scripted",
                "content": {"schema": "compozy.session.event.v1", "type": event, "timestamp": TIMESTAMP,
                            "session_id": f"scripted-{'0' * 32}", **content, "turn_id": TURN_ID},
                "timestamp": TIMESTAMP, "archived": False}
    data = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    return f"id: {seq}\nevent: {event}\ndata: {data}\n\n".encode()


def build_frames(n: int) -> list[bytes]:
    frames = [sse_frame(i + 1, "agent_message", {"text": f"c{i} "}) for i in range(n)]
    frames.append(sse_frame(n + 1, "done", {"stop_reason": "end_turn", "prompt_stop_reason": "end_turn"}))
    return frames


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    query = parse_qs(scope.get("query_string", b"").decode())
    n = int((query.get("n") or ["1000"])[0])
    page = max(1, int((query.get("page") or ["1000"])[0]))
    frames = build_frames(n)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": b": connected\n\n", "more_body": True})
    for start in range(0, len(frames), page):
        await send({"type": "http.response.body", "body": b"".join(frames[start:start + page]), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
