"""The memory MCP server an agent runs for its session (stdio, newline-delimited JSON-RPC 2.0, MCP's stdio
transport): `memory_search`, `memory_write` and `memory_show`.

It is a relay. The agent starts it inside its sandbox, where `$COMPOZY_HOME` (the memory files, the journal, the
token, the daemon's socket) is hidden, so it cannot write memory itself; each tool call goes, one line of JSON,
to the socket the daemon opened for this one session (`--socket`, in a fresh owner-only folder under the temp
directory the sandbox shares), and the daemon runs it through memory's one write path, attributed to the
session the socket belongs to: nothing this process says can claim another session. Standard library only, and
run as a script (`python -I …/mcp_server.py`), so it starts in milliseconds and needs no import path."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any

PROTOCOL_VERSION = "2025-06-18"
MAX_LINE = 4 * 1024 * 1024

TOOLS: list[dict[str, Any]] = [
    {"name": "memory_search",
     "description": "Search curated memory (this agent's, this workspace's and the global scope) by words. "
                    "Answers the best matches with a snippet; read one whole with memory_show.",
     "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
    {"name": "memory_show",
     "description": "Read one memory entry whole, by its slug (and type when two share a slug).",
     "inputSchema": {"type": "object", "properties": {
         "slug": {"type": "string"},
         "type": {"type": "string", "enum": ["user", "feedback", "project", "reference"]}},
         "required": ["slug"]}},
    {"name": "memory_write",
     "description": "Write a memory entry worth keeping for later sessions (a fact about the user, feedback, "
                    "the project, a reference). Writing the same name again replaces it. Later sessions get it; "
                    "this one's snapshot does not change.",
     "inputSchema": {"type": "object", "properties": {
         "name": {"type": "string"}, "description": {"type": "string"},
         "type": {"type": "string", "enum": ["user", "feedback", "project", "reference"]},
         "scope": {"type": "string", "enum": ["workspace", "agent", "global"], "default": "workspace"},
         "body": {"type": "string"}}, "required": ["name", "type", "body"]}},
]


def call_daemon(path: str, tool: str, arguments: Any) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60.0)
        sock.connect(path)
        sock.sendall(json.dumps({"tool": tool, "arguments": arguments}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_LINE:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer = json.loads(data or b"{}")
    return answer if isinstance(answer, dict) else {"ok": False, "error": "the daemon's answer was not an object"}


def handle(path: str, message: dict[str, Any]) -> dict[str, Any] | None:
    method, params, mid = message.get("method"), message.get("params") or {}, message.get("id")
    if mid is None:
        return None  # a notification (notifications/initialized, cancelled): nothing to answer
    if method == "initialize":
        version = params.get("protocolVersion") if isinstance(params, dict) else None
        result: Any = {"protocolVersion": version or PROTOCOL_VERSION, "capabilities": {"tools": {}},
                       "serverInfo": {"name": "compozy-memory", "version": "1"}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name = str(params.get("name"))
        if name not in {t["name"] for t in TOOLS}:
            return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": f"unknown tool {name!r:.60}"}}
        try:
            answer = call_daemon(path, name, params.get("arguments") or {})
        except (OSError, ValueError) as exc:
            answer = {"ok": False, "error": f"the daemon did not answer: {exc}"}
        body = answer.get("result") if answer.get("ok") else {"error": answer.get("error"), "code": answer.get("code")}
        result = {"content": [{"type": "text", "text": json.dumps(body, ensure_ascii=False)}],
                  "isError": not answer.get("ok")}
        if answer.get("ok") and isinstance(body, dict):
            result["structuredContent"] = body
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no method {method!r:.60}"}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the session's socket the daemon listens on")
    parser.add_argument("--session", default="", help="the session (for people reading `ps`; the socket decides)")
    args = parser.parse_args(argv)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            reply: dict[str, Any] | None = {"jsonrpc": "2.0", "id": None,
                                            "error": {"code": -32700, "message": "parse error"}}
        else:
            reply = handle(args.socket, message) if isinstance(message, dict) else None
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
