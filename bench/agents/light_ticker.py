#!/usr/bin/env python3
"""The capacity benchmark's ticker agent: `ticker_agent.py`'s wire on the standard library alone.

Prompt `tick N INTERVAL_MS`: N agent_message chunks, INTERVAL_MS apart on an absolute schedule, each chunk's text
`t<ns>;` with `time.time_ns()` taken just before the line is written. Any other prompt is echoed.

Why a second ticker: the capacity run starts hundreds of these on the same two cores as the daemon. The SDK's models
and an asyncio task and timer per chunk cost the agent about as much per chunk as the daemon's whole path, so this
one is a select() loop that formats a line: the machine's CPU stays with what is measured. The wire is the same
JSON-RPC over stdio (one line per message).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSION = 1
OUT = sys.stdout.fileno()


def send(message: dict[str, Any]) -> None:
    write((json.dumps(message, separators=(",", ":")) + "\n").encode())


def write(data: bytes) -> None:
    while data:
        data = data[os.write(OUT, data):]


def say(session_id: str, text: str) -> None:
    # Built by hand: this line is the whole per-chunk cost of the agent.
    write(('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + session_id
           + '","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' + text
           + '"}}}}\n').encode())


@dataclass
class Turn:
    request_id: Any
    session_id: str
    left: int
    interval: float
    next_at: float
    cancelled: bool = False


def handle(message: dict[str, Any], sessions: set[str], turns: dict[str, Turn]) -> None:
    method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": request_id, "result": {
            "protocolVersion": PROTOCOL_VERSION, "agentCapabilities": {"loadSession": False},
            "agentInfo": {"name": "light-ticker", "version": "1.0"}, "authMethods": []}})
    elif method == "session/new":
        session_id = f"ticker-{uuid.uuid4().hex}"
        sessions.add(session_id)
        send({"jsonrpc": "2.0", "id": request_id, "result": {"sessionId": session_id}})
    elif method == "session/prompt":
        session_id = params.get("sessionId", "")
        if session_id not in sessions:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32002, "message": "unknown session"}})
            return
        text = " ".join(b.get("text", "") for b in params.get("prompt") or [] if isinstance(b, dict))
        words = text.split()
        if words and words[0].lower() == "tick":
            count = int(words[1]) if len(words) > 1 else 1
            interval = float(words[2]) / 1000.0 if len(words) > 2 else 0.05
            turns[session_id] = Turn(request_id, session_id, count, interval, time.monotonic())
        else:
            say(session_id, json.dumps(f"echo: {text}")[1:-1])
            send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
    elif method == "session/cancel":
        turn = turns.get(params.get("sessionId", ""))
        if turn is not None:
            turn.cancelled = True
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})


def main() -> None:
    stdin = sys.stdin.fileno()
    sessions: set[str] = set()
    turns: dict[str, Turn] = {}
    pending = b""
    while True:
        now = time.monotonic()
        for turn in list(turns.values()):
            while not turn.cancelled and turn.left and turn.next_at <= now:
                say(turn.session_id, f"t{time.time_ns()};")
                turn.left -= 1
                turn.next_at += turn.interval  # an absolute schedule: no drift
            if turn.cancelled or not turn.left:
                del turns[turn.session_id]
                stop = "cancelled" if turn.cancelled else "end_turn"
                send({"jsonrpc": "2.0", "id": turn.request_id, "result": {"stopReason": stop}})
        timeout = max(0.0, min(t.next_at for t in turns.values()) - time.monotonic()) if turns else None
        readable, _, _ = select.select([stdin], [], [], timeout)
        if not readable:
            continue
        data = os.read(stdin, 1 << 16)
        if not data:
            return
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(message, dict) and "method" in message:
                handle(message, sessions, turns)


if __name__ == "__main__":
    try:
        main()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
