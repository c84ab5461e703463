#!/usr/bin/env python3
"""Scripted ACP agent for the test suite, on the standard library only.

One process serves many scenarios; the first word of each prompt picks the scenario
(see ``ScriptedAgent._commands``). It speaks ACP v1 (newline-delimited JSON-RPC 2.0 on stdio)
by hand: importing the ``agent-client-protocol`` SDK and pydantic cost about a second of CPU
per spawn, and the suite spawns hundreds of agents. Every message is what the SDK-based twin
(``sdk_agent.py``, kept for the tests about the SDK itself) sends, key order included;
``tests/unit/test_scripted_wire.py`` runs both on the same scripts and compares the wire.

Imports are limited to the stdlib so the file runs as a plain script in milliseconds.
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this file's directory first on sys.path,
# where a sibling module could shadow a stdlib one (say a future ``select.py``).
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import re
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("scripted-agent")

T = TypeVar("T")
Json = dict[str, Any]

PROTOCOL_VERSION = 1
# What the SDK reads stdin with (acp.core.DEFAULT_STDIO_BUFFER_LIMIT_BYTES); longer lines are read in pieces.
STDIO_LIMIT_BYTES = 50 * 1024 * 1024
# Raw-path batching: large enough to amortise write()/drain() per line, small enough that
# a session/cancel is noticed quickly and memory stays bounded.
_BATCH_LINES = 256
_BATCH_BYTES = 64 * 1024
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
REPLAY_TAG = "<compozy_context_replay>"
REPLAY_REQUEST = "User request: "
# The frozen memory snapshot Compozy puts before a session's first prompt (memory/snapshot.py): the command is what
# follows it.
MEMORY_CLOSE = "</compozy-memory>"
DREAM_MATERIAL = re.compile(r"<dream-material>\s*(.*?)\s*</dream-material>", re.S)
CONTENT_BLOCK_TYPES = {"text", "image", "audio", "resource_link", "resource"}
# `markdown`: an answer the way coding agents write one, in chunks that split Markdown syntax mid-token.
MARKDOWN_REVIEW = ["## Review of `calc.py`\n\n", "**Division by zero** in `ratio()`: ", "it raises when *b* is 0.\n\n",
                   "- check `b` first\n- return `None`\n\n", "| case | before | after |\n| --- | --- | --- |\n",
                   "| b = 0 | raises | None |\n\n", "See [the docs](https://docs.python.org/3/) or ",
                   "[mail us](mailto:dev@example.com).\n\n", "```python\ndef ratio(a, b):\n",
                   "    return None if b == 0 else a / b\n```\n"]
DIFF_OLD = "def ratio(a, b):\n    # divides by zero\n    return a / b\n"
DIFF_NEW = "def ratio(a, b):\n    if b == 0:\n        return None\n    return a / b\n"
DIFF_NOTES = "# Notes\n\nratio() no longer divides by zero.\n"
COLOURED_LOG = ("\x1b[32mPASSED\x1b[0m test_ratio\n\x1b[1;31mFAILED\x1b[0m test_zero\n"
                + "".join(f"log line {i}\n" for i in range(60)))
# `hostile html`: every way a message could try to run script in the page; none may set `window.pwned`.
HOSTILE_MARKDOWN = ("Look: <img src=x onerror=\"window.pwned=1\"> and <script>window.pwned=2</script>\n\n"
                    "[click me](javascript:window.pwned=3) "
                    "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cucHduZWQ9NDwvc2NyaXB0Pg==)"
                    " ![pic](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9IndpbmRvdy5wd25lZD03Ij48L3N2Zz4=)\n\n"
                    "<a href=\"javascript:window.pwned=8\">raw link</a> <svg onload=\"window.pwned=9\"></svg>\n"
                    "<iframe src=\"javascript:window.pwned=10\"></iframe>\n")


class Cancelled(Exception):
    """The turn was cancelled by session/cancel while waiting on something."""


class RequestError(Exception):
    """A JSON-RPC error, raised by a handler or received from the client (the SDK's codes and messages)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    @classmethod
    def invalid_params(cls, data: Json | None = None) -> RequestError:
        return cls(-32602, "Invalid params", data)

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(-32601, "Method not found", {"method": method})

    @classmethod
    def internal_error(cls, data: Json | None = None) -> RequestError:
        return cls(-32603, "Internal error", data)

    @classmethod
    def auth_required(cls, data: Json | None = None) -> RequestError:
        return cls(-32000, "Authentication required", data)

    @classmethod
    def resource_not_found(cls, uri: str | None = None) -> RequestError:
        return cls(-32002, "Resource not found", {"uri": uri} if uri is not None else None)

    def to_error_obj(self) -> Json:
        return {"code": self.code, "message": str(self), "data": self.data}


class ValidationError(Exception):
    """A message that does not have the shape ACP gives it (pydantic's role in the SDK)."""

    def __init__(self, model: str, errors: list[Json]) -> None:
        super().__init__(f"{len(errors)} validation error{'s' if len(errors) > 1 else ''} for {model}: "
                         + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self.errors = errors


@dataclass(slots=True)
class Turn:
    session_id: str
    cwd: str
    text: str
    args: list[str]
    cancel: asyncio.Event

    @property
    def rest(self) -> str:
        """Prompt text after the command word, original spacing kept."""
        parts = self.text.strip().split(maxsplit=1)
        return parts[1] if len(parts) > 1 else ""


def blocking_write(fd: int, data: bytes) -> None:
    """Write everything, blocking; stderr may share a non-blocking file description with stdout."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[written:]


def filler(size: int) -> bytes:
    """``size`` bytes of newline-separated filler, so line readers never see one giant line."""
    line = b"x" * 99 + b"\n"
    return line * (size // 100) + b"x" * (size % 100)


def error_text(exc: BaseException) -> str:
    if isinstance(exc, RequestError):
        detail = f" {json.dumps(exc.data)}" if exc.data is not None else ""
        return f"{exc.code} {exc}{detail}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# ---- ACP messages, built as the SDK serialises its models (camelCase, its key order, no nulls) --------------

def text_block(text: str) -> Json:
    return {"text": text, "type": "text"}


def message_chunk(text: str, kind: str = "agent_message_chunk") -> Json:
    return {"content": text_block(text), "sessionUpdate": kind}


def tool_call_start(tool_call_id: str, title: str, kind: str, status: str, raw_input: Json | None = None,
                    content: list[Json] | None = None) -> Json:
    update: Json = {"toolCallId": tool_call_id, "title": title, "kind": kind, "status": status}
    if content is not None:
        update["content"] = content
    if raw_input is not None:
        update["rawInput"] = raw_input
    return {**update, "sessionUpdate": "tool_call"}


def tool_call_update(tool_call_id: str, status: str, text: str) -> Json:
    return {"toolCallId": tool_call_id, "status": status,
            "content": [{"content": text_block(text), "type": "content"}], "sessionUpdate": "tool_call_update"}


def tool_call_settled(tool_call_id: str, status: str, content: list[Json]) -> Json:
    return {"toolCallId": tool_call_id, "status": status, "content": content, "sessionUpdate": "tool_call_update"}


def diff_block(path: str, new_text: str, old_text: str | None = None) -> Json:
    """ACP `diff` tool call content; a new file has no old text."""
    block: Json = {"path": path}
    if old_text is not None:
        block["oldText"] = old_text
    return {**block, "newText": new_text, "type": "diff"}


def terminal_block(terminal_id: str) -> Json:
    return {"terminalId": terminal_id, "type": "terminal"}


def field_error(loc: str, msg: str, value: Any, kind: str) -> Json:
    return {"type": kind, "loc": [loc], "msg": msg, "input": value}


def check_fields(model: str, params: Any, fields: dict[str, type]) -> Json:
    """``params`` as a dict whose ``fields`` are present with those types, else a ValidationError."""
    if not isinstance(params, dict):
        raise ValidationError(model, [{"type": "model_type", "loc": [], "msg": "Input should be an object",
                                       "input": params}])
    errors = []
    for name, kind in fields.items():
        if name not in params:
            errors.append(field_error(name, "Field required", params, "missing"))
        elif not isinstance(params[name], kind) or (kind is int and isinstance(params[name], bool)):
            errors.append(field_error(name, f"Input should be {getattr(kind, '__name__', kind)}", params[name],
                                      "type_error"))
    if errors:
        raise ValidationError(model, errors)
    return params


# ---- the JSON-RPC connection --------------------------------------------------------------------------------

class _WriteProtocol(asyncio.BaseProtocol):
    """Flow control for the stdout pipe, so ``drain()`` waits while the reader is behind."""

    def __init__(self) -> None:
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._waiter = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.resume_writing()

    async def _drain_helper(self) -> None:
        if self._paused:
            if self._waiter is None:
                self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter


class Connection:
    """JSON-RPC 2.0 over newline-delimited JSON on stdio, as the SDK's ``Connection`` runs it: every incoming
    request and notification is handled in a task of its own (in arrival order), responses go out as handlers
    finish, and stdin's EOF cancels what still runs and ends the process with 0."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_request: Callable[[str, Any], Awaitable[Any]],
                 on_notification: Callable[[str, Any], Awaitable[None]]) -> None:
        self.reader = reader
        self.writer = writer
        self._on_request = on_request
        self._on_notification = on_notification
        self._ids = itertools.count(0)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send(self, message: Json) -> None:
        await self.write((json.dumps(message, separators=(",", ":")) + "\n").encode())

    async def notify(self, method: str, params: Json) -> None:
        self._raise_if_closed()
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Json) -> Any:
        """Send a request to the client and return its result; its error is raised as a RequestError."""
        self._raise_if_closed()
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(request_id, None)

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise ConnectionError("Connection closed")

    async def serve(self) -> None:
        try:
            while (line := await self._read_line()):
                line = line.strip()
                if not line:
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    log.error("Error parsing JSON-RPC message: %.200r", line)
                    continue
                if not isinstance(message, dict):
                    log.error("JSON-RPC message is not an object: %.200r", line)
                    continue
                self._dispatch(message)
        finally:
            self._closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("Connection closed"))
            for task in list(self._tasks):
                task.cancel()
            for task in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read_line(self) -> bytes:
        chunks: list[bytes] = []
        try:
            while True:
                try:
                    chunks.append(await self.reader.readuntil(b"\n"))
                    return b"".join(chunks)
                except asyncio.LimitOverrunError as exc:
                    chunks.append(await self.reader.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            return b"".join(chunks)

    def _dispatch(self, message: Json) -> None:
        method = message.get("method")
        if method is not None:
            run = self._run_request(message) if "id" in message else self._run_notification(method, message)
            task = asyncio.ensure_future(run)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif "id" in message:
            self._handle_response(message)

    async def _run_request(self, message: Json) -> None:
        reply: Json = {"jsonrpc": "2.0", "id": message["id"]}
        method = message["method"]
        try:
            reply["result"] = await self._on_request(method, message.get("params"))
        except RequestError as exc:
            reply["error"] = exc.to_error_obj()
        except ValidationError as exc:
            reply["error"] = RequestError.invalid_params({"errors": exc.errors}).to_error_obj()
        except Exception as exc:
            log.exception("Unhandled error while handling request method=%s", method)
            try:
                data = json.loads(str(exc))
            except ValueError:
                data = {"details": str(exc)}
            reply["error"] = RequestError.internal_error(data).to_error_obj()
        await self.send(reply)

    async def _run_notification(self, method: Any, message: Json) -> None:
        try:
            await self._on_notification(method, message.get("params"))
        except Exception:
            log.exception("Unhandled error while handling notification method=%s", method)

    def _handle_response(self, message: Json) -> None:
        request_id = message["id"]
        future = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if future is None or future.done():
            return
        if "result" in message:
            future.set_result(message["result"])
        elif "error" in message:
            error = message.get("error") or {}
            if not isinstance(error, dict):
                error = {}
            future.set_exception(RequestError(error.get("code", -32603), error.get("message", "Error"),
                                              error.get("data")))
        else:
            future.set_result(None)

    def close(self) -> None:
        """Close our end of stdout for good (the client sees EOF while we live on)."""
        self.writer.close()
        with contextlib.suppress(OSError):
            os.close(1)

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the transport's user-space buffer reached the pipe (before a hard exit)."""
        transport = self.writer.transport
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while transport.get_write_buffer_size() > 0 and loop.time() < deadline:
            await asyncio.sleep(0.001)


# ---- the agent ----------------------------------------------------------------------------------------------

# What --modes offers at session/new, as claude-agent-acp offers its plan mode.
MODES: list[Json] = [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}]

# What --require-auth offers: codex-acp's shape (an `api-key` method naming no variables, so only a configured
# auth_method picks it), an env-var method a client can choose by itself, and a terminal login.
AUTH_METHODS: list[Json] = [
    {"id": "api-key", "name": "API Key", "description": "Use an API key to authenticate"},
    {"id": "env-key", "name": "Scripted key", "type": "env_var", "vars": [{"name": "SCRIPTED_API_KEY"}]},
    {"id": "login", "name": "Log in", "type": "terminal", "args": ["login"]},
]

class ScriptedAgent:
    def __init__(self, opts: argparse.Namespace) -> None:
        self._opts = opts
        self._conn: Connection | None = None
        self._sessions: dict[str, str] = {}  # session id -> cwd
        self._cancels: dict[str, asyncio.Event] = {}
        self._tool_ids = itertools.count(1)
        self._client_caps: Json = {}  # what the client offered at initialize (`ask` needs elicitation.form)
        self._commands: dict[str, Callable[[Turn], Awaitable[str | Json]]] = {
            "stream": self._cmd_stream,
            "slow": self._cmd_slow,
            "think": self._cmd_think,
            "tool": self._cmd_tool,
            "fswrite": self._cmd_fswrite,
            "disk": self._cmd_disk,
            "toolid": self._cmd_tool,  # the same, its permission request naming only the tool call id
            "toolhang": self._cmd_toolhang,
            "ask": self._cmd_ask,
            "hang": self._cmd_hang,
            "crash": self._cmd_crash,
            "leak": self._cmd_leak,
            "exit0": self._cmd_exit0,
            "stderr": self._cmd_stderr,
            "unknown": self._cmd_unknown,
            "plan": self._cmd_plan,
            "usage": self._cmd_usage,
            "env": self._cmd_env,
            "envhash": self._cmd_envhash,
            "silent": self._cmd_silent,
            "error": self._cmd_error,
            "autherr": self._cmd_autherr,
            "empty": self._cmd_empty,
            "spawnchild": self._cmd_spawnchild,
            "closeout": self._cmd_closeout,
            "wedge": self._cmd_wedge,
            "tools": self._cmd_tools,
            "exitidle": self._cmd_exitidle,
            "hostile": self._cmd_hostile,
            "orphanpipe": self._cmd_orphanpipe,
            "closeoutidle": self._cmd_closeoutidle,
            "term": self._cmd_term,
            "agentinfo": self._cmd_agentinfo,
            "spend": self._cmd_spend,
            "cost": self._cmd_cost,
            "nans": self._cmd_nans,
            "askodd": self._cmd_askodd,
            "big": self._cmd_big,
            "bigline": self._cmd_bigline,
            # What the session page renders (tests/e2e/test_session_render.py).
            "markdown": self._cmd_markdown,
            "diff": self._cmd_diff,
            "terminal": self._cmd_terminal,
            "late": self._cmd_late,
            "probe": self._cmd_probe,
            "selfapprove": self._cmd_selfapprove,
            "swap": self._cmd_swap,
            "termflood": self._cmd_termflood,
            # Memory's MCP tools (tests/integration/test_memory.py): `memwrite TYPE SCOPE NAME BODY…`,
            # `memsearch QUERY…`, `memshow SLUG`; each answers the tool's result as JSON.
            "memwrite": self._cmd_memwrite,
            "memsearch": self._cmd_memsearch,
            "memshow": self._cmd_memshow,
            "dream": self._cmd_dream,
        }
        self._children: list[asyncio.subprocess.Process] = []
        self._mcp: dict[str, list[Json]] = {}  # session id -> the mcpServers it was handed
        self._pending_mcp: list[Json] = []
        self._exit_task: asyncio.Future[None] | None = None
        self._models = [m for m in (opts.models or "").split(",") if m]  # offered through a model select
        self._current_model: dict[str, str] = {}  # session id -> model id
        self._lifecycle = {c for c in (opts.lifecycle or "").split(",") if c}
        self._authenticated = bool(opts.login_file and Path(opts.login_file).exists())

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise RequestError.internal_error({"details": "no client connection"})
        return self._conn

    def connect(self, conn: Connection) -> None:
        self._conn = conn

    def _config_options(self, session_id: str) -> list[Json] | None:
        if not self._models:
            return None
        return [{"currentValue": self._current_model.get(session_id, self._models[0]),
                 "options": [{"value": m, "name": m.title()} for m in self._models],
                 "id": "model", "name": "Model", "category": "model", "type": "select"}]

    # ---- dispatch (the SDK's router: params checked, then the handler; anything else is method-not-found) ---

    def _offered(self) -> set[str]:
        """The optional methods this run offers (flags), besides the SDK's required ones."""
        methods = {"authenticate"} if self._opts.require_auth else set()
        methods |= {"session/resume"} if "resume" in self._lifecycle else set()
        methods |= {"session/close"} if self._lifecycle & {"close", "closefail"} else set()
        return methods | ({"session/set_mode"} if self._opts.modes else set())

    async def _offered_request(self, method: str, params: Any) -> Any:
        if method == "authenticate":
            return await self.authenticate(check_fields("AuthenticateRequest", params, {"methodId": str})["methodId"])
        if method == "session/resume":
            p = check_fields("ResumeSessionRequest", params, {"cwd": str, "sessionId": str})
            return await self.resume_session(p["cwd"], p["sessionId"])
        if method == "session/close":
            p = check_fields("CloseSessionRequest", params, {"sessionId": str})
            self._log_call(method, p)
            if "closefail" in self._lifecycle:
                raise RequestError.internal_error({"details": "scripted session/close failure"})
            self._sessions.pop(p["sessionId"], None)
            return {}
        p = check_fields("SetSessionModeRequest", params, {"sessionId": str, "modeId": str})
        return await self.set_mode(p["sessionId"], p["modeId"])

    async def handle_request(self, method: str, params: Any) -> Any:
        if method in ("session/new", "session/load", "session/resume") and isinstance(params, dict):
            self._log_call("mcp", {"for": method, "mcpServers": params.get("mcpServers")})
            servers = params.get("mcpServers")
            self._pending_mcp = servers if isinstance(servers, list) else []
        if method == "initialize":
            # Any protocolVersion passes: the SDK maps one it cannot parse to 1 rather than refuse the client.
            check_fields("InitializeRequest", params, {"protocolVersion": object})
            caps = params.get("clientCapabilities")
            self._client_caps = caps if isinstance(caps, dict) else {}
            return await self.initialize()
        if method == "session/new":
            p = check_fields("NewSessionRequest", params, {"cwd": str, "mcpServers": list})
            return await self.new_session(p["cwd"])
        if method == "session/load":
            p = check_fields("LoadSessionRequest", params, {"cwd": str, "sessionId": str, "mcpServers": list})
            return await self.load_session(p["cwd"], p["sessionId"])
        if method in self._offered():
            return await self._offered_request(method, params)
        if method == "session/set_config_option":
            boolean = isinstance(params, dict) and params.get("type") == "boolean"
            p = check_fields("SetSessionConfigOptionBooleanRequest" if boolean else
                             "SetSessionConfigOptionSelectRequest", params,
                             {"sessionId": str, "configId": str, "value": bool if boolean else str})
            return await self.set_config_option(p["configId"], p["sessionId"], p["value"])
        if method == "session/prompt":
            p = check_fields("PromptRequest", params, {"sessionId": str, "prompt": list})
            blocks = p["prompt"]
            bad = [i for i, b in enumerate(blocks) if not isinstance(b, dict) or b.get("type") not in
                   CONTENT_BLOCK_TYPES or (b["type"] == "text" and not isinstance(b.get("text"), str))]
            if bad:
                raise ValidationError("PromptRequest", [field_error(f"prompt.{i}", "Input should be a content block",
                                                                    blocks[i], "union_tag_invalid") for i in bad])
            return await self.prompt(blocks, p["sessionId"])
        raise RequestError.method_not_found(method)

    async def handle_notification(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            await self.cancel(check_fields("CancelNotification", params, {"sessionId": str})["sessionId"])
            return
        if not (isinstance(method, str) and method.startswith("_")):  # extension notifications are ignored
            raise RequestError.method_not_found(method)

    # ---- lifecycle -------------------------------------------------------------------------

    async def initialize(self) -> Json:
        if self._opts.broken_handshake:
            blocking_write(1, b"this is not json-rpc {{{\n")
            os._exit(2)
        capabilities: Json = {"loadSession": bool(self._opts.load_session)}
        if self._opts.mcp_http:
            capabilities["mcpCapabilities"] = {"http": True, "sse": False}
        if self._lifecycle:
            offered = {"close" if name == "closefail" else name for name in self._lifecycle}
            capabilities["sessionCapabilities"] = {name: {} for name in sorted(offered)}
        answer: Json = {"protocolVersion": PROTOCOL_VERSION, "agentCapabilities": capabilities,
                        "agentInfo": {"name": "scripted-agent", "title": "Compozy scripted test agent",
                                      "version": "1.0"}}
        if self._opts.require_auth:
            answer["authMethods"] = AUTH_METHODS
        return answer

    async def authenticate(self, method_id: str) -> Json:
        self._log_call("authenticate", {"methodId": method_id})
        if method_id not in {m["id"] for m in AUTH_METHODS}:
            raise RequestError.invalid_params({"details": f"unknown auth method {method_id!r}"})
        if method_id == "login" or not os.environ.get("SCRIPTED_API_KEY"):
            raise RequestError.auth_required({"details": f"{method_id}: SCRIPTED_API_KEY is not set"})
        self._authenticated = True
        return {}

    async def resume_session(self, cwd: str, session_id: str) -> Json:
        self._log_call("session/resume", {"sessionId": session_id})
        known = session_id in self._sessions or (
            self._opts.state_dir is not None and _SAFE_ID.match(session_id) is not None
            and (Path(self._opts.state_dir) / session_id).is_file())
        if not known:
            raise RequestError.resource_not_found(session_id)
        self._sessions[session_id] = cwd
        return {}

    def _log_call(self, method: str, params: Json) -> None:
        if self._opts.call_log:
            with open(self._opts.call_log, "a", encoding="utf-8") as log_file:
                log_file.write(json.dumps({"method": method, "params": params, "pid": os.getpid()}) + "\n")

    async def new_session(self, cwd: str) -> Json:
        if self._opts.fail_new_session:
            raise RequestError.internal_error({"details": "scripted new_session failure"})
        if self._opts.require_auth and not self._authenticated:
            raise RequestError.auth_required({"details": "Authentication required"})
        session_id = f"scripted-{uuid.uuid4().hex}"
        self._sessions[session_id] = cwd
        self._mcp[session_id] = self._pending_mcp
        if self._opts.state_dir:
            (Path(self._opts.state_dir) / session_id).write_text(json.dumps({"cwd": cwd}))
        options = self._config_options(session_id)
        modes = {"modes": {"currentModeId": "default", "availableModes": MODES}} if self._opts.modes else {}
        return {"sessionId": session_id, **({"configOptions": options} if options is not None else {}), **modes}

    async def set_mode(self, session_id: str, mode_id: str) -> Json:
        if mode_id not in [m["id"] for m in MODES]:
            raise RequestError.invalid_params({"details": f"no mode {mode_id!r}"})
        self._log_call("session/set_mode", {"modeId": mode_id})
        await self.conn.notify("session/update", {"sessionId": session_id, "update": {
            "sessionUpdate": "current_mode_update", "currentModeId": mode_id}})
        return {}

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool) -> Json:
        if config_id != "model" or value not in self._models:
            raise RequestError.invalid_params({"details": f"cannot set {config_id!r} to {value!r}"})
        self._current_model[session_id] = str(value)
        return {"configOptions": self._config_options(session_id) or []}

    async def load_session(self, cwd: str, session_id: str) -> Json:
        self._log_call("session/load", {"sessionId": session_id})
        if not self._opts.load_session:
            raise RequestError.method_not_found("session/load")
        known = session_id in self._sessions or (
            _SAFE_ID.match(session_id) is not None and (Path(self._opts.state_dir) / session_id).is_file()
        )
        if not known:
            raise RequestError.resource_not_found(session_id)
        # No history replay on purpose: the client must cope with an empty load.
        self._sessions[session_id] = cwd
        return {}

    async def cancel(self, session_id: str) -> None:
        if self._opts.ignore_cancel:
            log.warning("ignoring session/cancel for %s", session_id)
            return
        event = self._cancels.get(session_id)
        if event is not None:
            event.set()

    async def prompt(self, prompt: list[Json], session_id: str) -> Json:
        text = "\n".join(block["text"] for block in prompt if block["type"] == "text")
        if self._opts.prompt_log:
            with open(self._opts.prompt_log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"session_id": session_id, "text": text}) + "\n")
                fh.flush()
        cwd = self._sessions.get(session_id)
        if cwd is None:
            raise RequestError.resource_not_found(session_id)
        # Registered before the first await so a cancel that follows the prompt is never lost.
        cancel = asyncio.Event()
        self._cancels[session_id] = cancel
        if text.startswith("<compozy-memory") and MEMORY_CLOSE in text:
            text = text.split(MEMORY_CLOSE, 1)[1].lstrip()
        if DREAM_MATERIAL.search(text):
            text = "dream " + text  # a dream's prompt: answer its decisions (_cmd_dream)
        if self._opts.dispatch_after_replay and REPLAY_TAG in text:
            # Compozy prepended a context replay: the command is what follows the last "User request:".
            text = text.rsplit(REPLAY_REQUEST, 1)[-1]
        words = text.split()
        handler = self._commands.get(words[0].lower() if words else "", self._cmd_echo)
        turn = Turn(session_id=session_id, cwd=cwd, text=text, args=words[1:], cancel=cancel)
        result: str | Json
        try:
            result = await handler(turn)
        except Cancelled:
            result = "cancelled"
        finally:
            if self._cancels.get(session_id) is cancel:
                del self._cancels[session_id]
        return result if isinstance(result, dict) else {"stopReason": result}

    # ---- helpers ---------------------------------------------------------------------------

    async def _update(self, turn: Turn, update: Json) -> None:
        await self.conn.notify("session/update", {"sessionId": turn.session_id, "update": update})

    async def _say(self, turn: Turn, text: str) -> None:
        await self._update(turn, message_chunk(text))

    async def _race(self, turn: Turn, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the turn is cancelled first (then raise Cancelled)."""
        task = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(turn.cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise Cancelled

    async def _sleep(self, turn: Turn, seconds: float) -> None:
        """Sleep, but raise Cancelled as soon as session/cancel arrives."""
        try:
            await asyncio.wait_for(turn.cancel.wait(), timeout=max(seconds, 0.0))
        except TimeoutError:
            return
        raise Cancelled

    def _int_arg(self, turn: Turn, index: int, name: str, default: int | None = None) -> int:
        try:
            return int(turn.args[index])
        except IndexError:
            if default is not None:
                return default
        except ValueError:
            pass
        raise RequestError.invalid_params({"details": f"{name} must be an integer"})

    def _float_arg(self, turn: Turn, index: int, name: str) -> float:
        try:
            return float(turn.args[index])
        except (IndexError, ValueError):
            raise RequestError.invalid_params({"details": f"{name} must be a number"}) from None

    def _tool_call_id(self) -> str:
        return f"tool-{next(self._tool_ids)}-{uuid.uuid4().hex[:8]}"

    async def _permission(self, turn: Turn, tool_call_id: str, title: str, kind: str, id_only: bool = False) -> str:
        """The option the client picked for this tool call (``cancelled`` for its cancelled outcome)."""
        tool_call: Json = {"toolCallId": tool_call_id} if id_only else {
            "toolCallId": tool_call_id, "kind": kind, "status": "pending", "title": title}
        response = await self.conn.request("session/request_permission", {
            "sessionId": turn.session_id,
            "toolCall": tool_call,
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}],
        })
        outcome = check_fields("RequestPermissionResponse", response, {"outcome": dict})["outcome"]
        if outcome.get("outcome") == "selected":
            return str(check_fields("AllowedOutcome", outcome, {"optionId": str})["optionId"])
        if outcome.get("outcome") == "cancelled":
            return "cancelled"
        raise ValidationError("RequestPermissionResponse", [
            field_error("outcome", "Input tag should be 'selected' or 'cancelled'", outcome, "union_tag_invalid")])

    # ---- commands --------------------------------------------------------------------------

    async def _mcp_call(self, turn: Turn, tool: str, arguments: Json) -> Any:
        """One MCP tool call on the session's `compozy-memory` server, as a real agent makes it: the stdio server
        started from what session/new handed, initialize, initialized, tools/call, then closed."""
        server = next((s for s in self._mcp.get(turn.session_id, []) if s.get("name") == "compozy-memory"), None)
        if server is None:
            raise RequestError.internal_error({"details": "no compozy-memory MCP server was handed"})
        env = {**os.environ, **{e["name"]: e["value"] for e in server.get("env", [])}}
        proc = await asyncio.create_subprocess_exec(server["command"], *server.get("args", []), env=env,
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "scripted", "version": "1"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool,
                                                                                 "arguments": arguments}}]
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
        await proc.stdin.drain()
        answers: dict[int, Json] = {}
        while 2 not in answers:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line:
                break
            reply = json.loads(line)
            answers[reply.get("id")] = reply
        proc.stdin.close()
        await proc.wait()
        result = answers.get(2, {}).get("result") or {}
        text = (result.get("content") or [{}])[0].get("text", "")
        return {"isError": result.get("isError"), "result": json.loads(text) if text else None}

    async def _cmd_memwrite(self, turn: Turn) -> str:
        type_, scope, name = turn.args[0], turn.args[1], turn.args[2]
        answer = await self._mcp_call(turn, "memory_write", {"type": type_, "scope": scope, "name": name,
                                                             "description": f"{name} (written by an agent)",
                                                             "body": " ".join(turn.args[3:])})
        await self._say(turn, json.dumps(answer))
        return "end_turn"

    async def _cmd_memsearch(self, turn: Turn) -> str:
        await self._say(turn, json.dumps(await self._mcp_call(turn, "memory_search", {"query": " ".join(turn.args)})))
        return "end_turn"

    async def _cmd_memshow(self, turn: Turn) -> str:
        await self._say(turn, json.dumps(await self._mcp_call(turn, "memory_show", {"slug": turn.args[0]})))
        return "end_turn"

    async def _cmd_dream(self, turn: Turn) -> str:
        """A dream's answer: promote every candidate of its material to the workspace scope."""
        match = DREAM_MATERIAL.search(turn.text)
        material = json.loads(match.group(1)) if match else {}
        decisions = [{"action": "promote", "slug": c["slug"], "type": c["type"], "to": "workspace",
                      "reason": f"recalled in {len(c['recalled_in'])} session(s)"}
                     for c in material.get("candidates", [])]
        await self._say(turn, "Consolidated.\n\n```json\n" + json.dumps({"decisions": decisions}) + "\n```\n")
        return "end_turn"

    async def _cmd_echo(self, turn: Turn) -> str:
        # --echo-verbatim: a parrot that repeats the prompt word for word (some agents answer a title request so).
        await self._say(turn, turn.text if self._opts.echo_verbatim else f"echo: {turn.text}")
        return "end_turn"

    async def _cmd_stream(self, turn: Turn) -> str:
        count = self._int_arg(turn, 0, "N")
        size = self._int_arg(turn, 1, "SIZE", default=0)
        # Hand-built frames, one serialisation for the whole run: the benchmark's rate. The shape is exactly a
        # valid session/update notification.
        prefix = (
            '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
            + json.dumps(turn.session_id)
            + ',"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
        )
        suffix = "}}}}\n"
        batch: list[str] = []
        batch_bytes = 0
        for i in range(count):
            chunk = f"c{i} "
            if size > len(chunk):
                chunk = chunk.ljust(size, "x")
            line = prefix + json.dumps(chunk) + suffix
            batch.append(line)
            batch_bytes += len(line)
            if len(batch) >= _BATCH_LINES or batch_bytes >= _BATCH_BYTES:
                await self.conn.write("".join(batch).encode())
                batch.clear()
                batch_bytes = 0
                await asyncio.sleep(0)  # let the receive loop see a session/cancel
                if turn.cancel.is_set():
                    return "cancelled"
        if batch:
            await self.conn.write("".join(batch).encode())
        return "end_turn"

    async def _cmd_big(self, turn: Turn) -> str:
        """`big BYTES`: one agent message chunk of BYTES characters (`b` then `x`s), one line on the wire."""
        size = self._int_arg(turn, 0, "BYTES")
        text = "b" + "x" * max(0, size - 1)
        await self.conn.write((
            '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":' + json.dumps(turn.session_id)
            + ',"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' + text
            + '"}}}}\n').encode())
        return "end_turn"

    async def _cmd_bigline(self, turn: Turn) -> str:
        """`bigline BYTES [WHERE] [CHUNKS]`: one unbroken line of BYTES characters (`b` then `x`s, no space, no
        newline) where a page shows it: `message` (the default) or `thought`, sent in CHUNKS pieces (default 1);
        `tool`, an executed tool call's text output; `title`, a tool call's title; `input`, its raw input; `diff`,
        a new file of that one line; `terminal`, a client terminal printing it (the daemon keeps its last MiB, the
        tool call reports what `terminal/output` answers)."""
        size = self._int_arg(turn, 0, "BYTES")
        where = turn.args[1] if len(turn.args) > 1 else "message"
        chunks = max(1, self._int_arg(turn, 2, "CHUNKS", default=1))
        line = "b" + "x" * max(0, size - 1)
        if where in ("message", "thought"):
            kind = "agent_message_chunk" if where == "message" else "agent_thought_chunk"
            step = -(-len(line) // chunks)
            for start in range(0, len(line), step):
                await self._update(turn, message_chunk(line[start:start + step], kind))
            return "end_turn"
        tool_call_id = self._tool_call_id()
        if where == "terminal":
            await self._update(turn, tool_call_start(tool_call_id, "Run bigline", "execute", "in_progress",
                                                     {"command": "bigline"}))
            created = await self.conn.request("terminal/create", {
                "sessionId": turn.session_id, "command": "/bin/sh",
                "args": ["-c", f"printf b; head -c {max(0, size - 1)} /dev/zero | tr '\\0' x"]})
            terminal_id = check_fields("CreateTerminalResponse", created, {"terminalId": str})["terminalId"]
            await self._update(turn, {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id,
                                      "content": [terminal_block(terminal_id)]})
            await self.conn.request("terminal/wait_for_exit", {"sessionId": turn.session_id, "terminalId": terminal_id})
            output = await self.conn.request("terminal/output", {"sessionId": turn.session_id,
                                                                 "terminalId": terminal_id})
            await self.conn.request("terminal/release", {"sessionId": turn.session_id, "terminalId": terminal_id})
            await self._update(turn, tool_call_settled(tool_call_id, "completed", [
                terminal_block(terminal_id), {"content": text_block(output["output"]), "type": "content"}]))
        elif where == "tool":
            await self._update(turn, tool_call_start(tool_call_id, "Run bigline", "execute", "in_progress",
                                                     {"command": "bigline"}))
            await self._update(turn, tool_call_update(tool_call_id, "completed", line))
        elif where == "title":
            await self._update(turn, tool_call_start(tool_call_id, line, "execute", "in_progress"))
            await self._update(turn, tool_call_update(tool_call_id, "completed", "done"))
        elif where == "input":
            await self._update(turn, tool_call_start(tool_call_id, "Run bigline", "execute", "in_progress",
                                                     {"command": line}))
            await self._update(turn, tool_call_update(tool_call_id, "completed", "done"))
        elif where == "diff":
            block = diff_block(os.path.join(turn.cwd, "big.txt"), line + "\n")
            await self._update(turn, tool_call_start(tool_call_id, "Write big.txt", "edit", "in_progress",
                                                     content=[block]))
            await self._update(turn, tool_call_settled(tool_call_id, "completed", [block]))
        else:
            raise RequestError.invalid_params({"details": f"bigline: no place {where!r}"})
        await self._say(turn, f"bigline {where} sent")
        return "end_turn"

    async def _cmd_slow(self, turn: Turn) -> str:
        count = self._int_arg(turn, 0, "N")
        interval = self._float_arg(turn, 1, "INTERVAL")
        for i in range(count):
            if turn.cancel.is_set():
                return "cancelled"
            await self._say(turn, f"c{i} ")
            if i < count - 1:
                await self._sleep(turn, interval)
        return "end_turn"

    async def _cmd_think(self, turn: Turn) -> str:
        await self._update(turn, message_chunk(turn.rest or "thinking", "agent_thought_chunk"))
        await self._say(turn, "thought done")
        return "end_turn"

    async def _cmd_ask(self, turn: Turn) -> str:
        """ACP elicitation (form mode): ask the client a small form, then say what came back."""
        if not isinstance((self._client_caps.get("elicitation") or {}).get("form"), dict):
            await self._say(turn, "ask: the client offers no form elicitation")
            return "end_turn"
        schema: Json = {"type": "object", "properties": {
            "name": {"type": "string", "title": "Name", "description": "who is asking"},
            "count": {"type": "number", "title": "How many"},
            "urgent": {"type": "boolean", "title": "Urgent?"},
            "color": {"type": "string", "title": "Color", "enum": ["red", "green", "blue"]},
        }, "required": ["name", "count"]}
        try:
            answer = await self._race(turn, self.conn.request("elicitation/create", {
                "sessionId": turn.session_id, "mode": "form", "requestedSchema": schema,
                "message": turn.text.partition(" ")[2].strip() or "A few details, please"}))
        except Cancelled:
            return "cancelled"
        except Exception as exc:  # noqa: BLE001 - the agent says what failed, as real agents do
            await self._say(turn, f"ask error: {error_text(exc)}")
            return "end_turn"
        action = answer.get("action") if isinstance(answer, dict) else None
        if action == "accept":
            await self._say(turn, "ask accept: " + json.dumps(answer.get("content") or {}, sort_keys=True))
        else:
            await self._say(turn, f"ask {action}")
        return "cancelled" if turn.cancel.is_set() else "end_turn"

    async def _cmd_fswrite(self, turn: Turn) -> str:
        """`fswrite PATH CONTENT...`: the client's `fs/write_text_file` (no tool call, no permission), as an agent
        that edits through its client does; says `fswrite ok` or `fswrite error: …`."""
        parts = turn.text.strip().split(maxsplit=2)
        if len(parts) < 2:
            raise RequestError.invalid_params({"details": "usage: fswrite PATH CONTENT..."})
        abs_path = os.path.normpath(os.path.join(turn.cwd, parts[1]))
        try:
            await self.conn.request("fs/write_text_file", {"sessionId": turn.session_id, "path": abs_path,
                                                           "content": (parts[2] if len(parts) > 2 else "") + "\n"})
        except Exception as exc:  # noqa: BLE001 - reported as the agent's answer, as real agents do
            await self._say(turn, f"fswrite error: {error_text(exc)}")
            return "end_turn"
        await self._say(turn, "fswrite ok")
        return "end_turn"

    async def _cmd_disk(self, turn: Turn) -> str:
        """`disk write PATH CONTENT...`, `disk rm PATH`, `disk bytes PATH N` (N pseudo-random bytes, binary),
        `disk git ARGS...`: straight on disk in the session's cwd, as Claude Code's own tools edit files; says
        `disk ok` (or git's output)."""
        parts = turn.text.strip().split(maxsplit=3)
        if len(parts) < 3:
            raise RequestError.invalid_params({"details": "usage: disk write|rm|bytes|git PATH [CONTENT]"})
        action, target = parts[1].lower(), os.path.normpath(os.path.join(turn.cwd, parts[2]))
        if action == "write":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            Path(target).write_text((parts[3] if len(parts) > 3 else "") + "\n")
        elif action == "rm":
            os.unlink(target)
        elif action == "bytes":
            count = int(parts[3]) if len(parts) > 3 else 64
            Path(target).write_bytes(bytes((i * 37 + 11) % 256 for i in range(count)) + b"\0")
        elif action == "git":
            args = turn.text.strip().split()[2:]
            done = subprocess.run(["git", *args], cwd=turn.cwd, capture_output=True, text=True, check=False)
            await self._say(turn, f"disk git {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}")
            return "end_turn"
        else:
            raise RequestError.invalid_params({"details": f"unknown disk action {action}"})
        await self._say(turn, "disk ok")
        return "end_turn"

    async def _cmd_tool(self, turn: Turn) -> str:
        parts = turn.text.strip().split(maxsplit=3)
        action = parts[1].lower() if len(parts) > 1 else ""
        if action not in ("read", "write") or len(parts) < 3:
            raise RequestError.invalid_params({"details": "usage: tool read PATH | tool write PATH CONTENT..."})
        path = parts[2]
        content = parts[3] if len(parts) > 3 else ""
        abs_path = os.path.normpath(os.path.join(turn.cwd, path))
        kind = "read" if action == "read" else "edit"
        tool_call_id = self._tool_call_id()
        title = f"{'Read' if action == 'read' else 'Write'} {path}"
        raw_input: Json = {"path": abs_path}
        if action == "write":
            raw_input["content"] = content
        await self._update(turn, tool_call_start(tool_call_id, title, kind, "pending", raw_input))

        async def fail(reason: str) -> None:
            await self._update(turn, tool_call_update(tool_call_id, "failed", reason))

        try:
            choice = await self._race(turn, self._permission(turn, tool_call_id, title, kind,
                                                                  id_only=parts[0].lower() == "toolid"))
        except Cancelled:
            await fail("cancelled")
            return "cancelled"
        except Exception as exc:  # noqa: BLE001 - the agent reports any failure as the tool's, as real agents do
            await fail(f"permission request failed: {error_text(exc)}")
            await self._say(turn, "tool error")
            return "end_turn"
        if choice != "allow":
            await fail("permission denied" if choice == "reject" else f"permission {choice}")
            if turn.cancel.is_set():
                return "cancelled"
            await self._say(turn, f"tool {choice}")
            return "end_turn"
        try:
            if action == "read":
                read = await self._race(turn, self.conn.request("fs/read_text_file",
                                                                {"sessionId": turn.session_id, "path": abs_path}))
                result = check_fields("ReadTextFileResponse", read, {"content": str})["content"]
            else:
                await self._race(turn, self.conn.request(
                    "fs/write_text_file", {"sessionId": turn.session_id, "path": abs_path, "content": content}))
                result = f"wrote {len(content.encode())} bytes"
        except Cancelled:
            await fail("cancelled")
            return "cancelled"
        except Exception as exc:  # noqa: BLE001 - the agent reports any failure as the tool's, as real agents do
            await fail(error_text(exc))
            await self._say(turn, "tool error")
            return "end_turn"
        await self._update(turn, tool_call_update(tool_call_id, "completed", result))
        await self._say(turn, "tool allow")
        return "end_turn"

    async def _cmd_toolhang(self, turn: Turn) -> str:
        tool_call_id = self._tool_call_id()
        await self._update(turn, tool_call_start(tool_call_id, "Run a command that never ends", "execute",
                                                 "in_progress"))
        await turn.cancel.wait()
        return "cancelled"

    async def _cmd_tools(self, turn: Turn) -> str:
        # N quick tool calls, each completed with a result, spaced by INTERVAL: tool-result boundaries
        # a client can act on (a staged steer) while the turn is still running.
        count = self._int_arg(turn, 0, "N")
        interval = self._float_arg(turn, 1, "INTERVAL")
        for i in range(count):
            if turn.cancel.is_set():
                return "cancelled"
            tool_call_id = self._tool_call_id()
            await self._update(turn, tool_call_start(tool_call_id, f"Step {i}", "other", "in_progress"))
            await self._update(turn, tool_call_update(tool_call_id, "completed", f"step {i} done"))
            await self._sleep(turn, interval)
        await self._say(turn, "tools done")
        return "end_turn"

    async def _cmd_exitidle(self, turn: Turn) -> str:
        # Finish the turn normally, then exit 0 SECONDS later while idle: an agent that completed.
        delay = self._float_arg(turn, 0, "SECONDS")

        async def exit_later() -> None:
            await asyncio.sleep(delay)
            await self.conn.flush()
            os._exit(0)

        self._exit_task = asyncio.ensure_future(exit_later())
        await self._say(turn, "bye")
        return "end_turn"

    async def _cmd_hang(self, turn: Turn) -> str:
        await self._say(turn, "working")
        await turn.cancel.wait()  # never set under --ignore-cancel
        return "cancelled"

    async def _cmd_crash(self, turn: Turn) -> str:
        for i in range(3):
            await self._say(turn, f"c{i} ")
        await self.conn.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(3600)  # unreachable; SIGKILL cannot be caught
        return "end_turn"

    async def _cmd_leak(self, turn: Turn) -> str:
        """Write planted secrets to stderr (the rest of the prompt after `leak`), then crash hard."""
        secrets_text = turn.text.split(maxsplit=1)[1] if len(turn.text.split(maxsplit=1)) > 1 else ""
        sys.stderr.write(f"fatal: {secrets_text}\n")
        sys.stderr.flush()
        await self._say(turn, "about to fail ")
        await self.conn.flush()
        await asyncio.sleep(0.2)  # let the client's stderr drain read it
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(3600)
        return "end_turn"

    async def _cmd_exit0(self, turn: Turn) -> str:
        await self._say(turn, "c0 ")
        await self.conn.flush()
        os._exit(0)

    async def _cmd_stderr(self, turn: Turn) -> str:
        # Blocking on purpose (it stalls the whole agent): a client that doesn't drain stderr hangs here.
        blocking_write(2, filler(self._int_arg(turn, 0, "N")))
        await self._say(turn, "stderr done")
        return "end_turn"

    async def _cmd_unknown(self, turn: Turn) -> str:
        await self.conn.send(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": turn.session_id,
                    "update": {"sessionUpdate": "future_widget", "payload": {"x": 1}},
                },
            }
        )
        await self._say(turn, "after unknown")
        return "end_turn"

    async def _cmd_plan(self, turn: Turn) -> str:
        entries = [
            {"content": "Read the code", "priority": "high", "status": "in_progress"},
            {"content": "Write the fix", "priority": "medium", "status": "pending"},
        ]
        await self._update(turn, {"entries": entries, "sessionUpdate": "plan"})
        await self._say(turn, "planned")
        return "end_turn"

    async def _cmd_usage(self, turn: Turn) -> Json:
        await self._say(turn, "usage reported")
        await self._update(turn, {"used": 1234, "size": 200000, "cost": {"amount": 0.0125, "currency": "USD"},
                                  "sessionUpdate": "usage_update"})
        return {"stopReason": "end_turn", "usage": {"totalTokens": 150, "inputTokens": 100, "outputTokens": 50}}

    async def _cmd_agentinfo(self, turn: Turn) -> str:
        # What claude-agent-acp and codex-acp send beside the reply: commands, their own title, context and cost.
        await self._update(turn, {"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "review", "description": "Review the current changes", "input": None},
            {"name": "init", "description": "Write an AGENTS.md"}]})
        await self._update(turn, {"sessionUpdate": "session_info_update", "title": "**Fix** `ratio()` in calc.py"})
        await self._say(turn, "noted")
        await self._update(turn, {"sessionUpdate": "usage_update", "used": 95000, "size": 100000,
                                  "cost": {"amount": 0.42, "currency": "USD"}})
        return "end_turn"

    async def _cmd_spend(self, turn: Turn) -> str:
        # `spend AMOUNT`: the session's cumulative cost reaches AMOUNT USD mid-turn; the turn then works on until
        # it is cancelled (a budget's stop cancels it).
        amount = self._float_arg(turn, 0, "AMOUNT")
        await self._say(turn, "spending")
        await self._update(turn, {"sessionUpdate": "usage_update", "used": 1000, "size": 100000,
                                  "cost": {"amount": amount, "currency": "USD"}})
        await turn.cancel.wait()
        return "cancelled"

    async def _cmd_cost(self, turn: Turn) -> str:
        """`cost ITEM... [hold|fail]`: one usage_update per ITEM, `AMOUNT[:CURRENCY]`, in order. AMOUNT is read as
        Python reads a float, so `nan`, `inf`, `-inf` and `-1e9` go out as the lies JSON cannot hold (NaN, Infinity)
        or should not (a negative cost); a `+` in CURRENCY is a space (`USD+` is "USD "), the default USD. Then the
        turn ends (end_turn), fails with an error answer (`fail`) or works on until it is cancelled (`hold`)."""
        items = list(turn.args)
        ending = items.pop() if items and items[-1] in ("hold", "fail") else "end"
        await self._say(turn, "spending")
        for item in items:
            amount, _, currency = item.partition(":")
            try:
                value = float(amount)
            except ValueError:
                raise RequestError.invalid_params({"details": f"{amount!r} is not an amount"}) from None
            await self._update(turn, {"sessionUpdate": "usage_update", "used": 1000, "size": 100000,
                                      "cost": {"amount": value, "currency": currency.replace("+", " ") or "USD"}})
        if ending == "hold":
            await turn.cancel.wait()
            return "cancelled"
        if ending == "fail":
            raise RequestError.internal_error({"details": "failed after spending"})
        return "end_turn"

    async def _cmd_nans(self, turn: Turn) -> Json:
        """Numbers JSON does not have, wherever an agent puts numbers: NaN, Infinity and -Infinity (json.dumps
        writes them), and 1e400 (a JSON number that overflows to infinity), in a usage update and its cost, a tool
        call's input and output, a plan and a config option; then a question whose schema holds them, open until
        it is answered or the turn is cancelled; the prompt's answer carries them in its usage."""
        nan, inf = float("nan"), float("inf")
        overflow = "__overflow__"

        async def send(update: Json) -> None:
            line = json.dumps({"jsonrpc": "2.0", "method": "session/update",
                               "params": {"sessionId": turn.session_id, "update": update}}, separators=(",", ":"))
            await self.conn.write((line.replace(f'"{overflow}"', "1e400") + "\n").encode())

        await self._say(turn, "numbers")
        await send({"sessionUpdate": "usage_update", "used": nan, "size": overflow,
                    "cost": {"amount": nan, "currency": "USD"}})
        tool_call_id = self._tool_call_id()
        await send(tool_call_start(tool_call_id, "Measure", "other", "in_progress",
                                   {"ratio": nan, "limit": inf, "floor": -inf, "big": overflow, "list": [nan, 1]}))
        await send({**tool_call_update(tool_call_id, "completed", "measured"), "rawOutput": {"value": -inf}})
        await send({"sessionUpdate": "plan", "entries": [{"content": "Weigh", "priority": "high", "status": "pending",
                                                          "weight": nan}]})
        await send({"sessionUpdate": "config_option_update", "configOptions": [
            {"id": "ratio", "name": "Ratio", "type": "select", "currentValue": nan,
             "options": [{"value": inf, "name": "All"}]}]})
        schema: Json = {"type": "object", "properties": {
            "count": {"type": "number", "title": "How many", "minimum": nan, "maximum": inf, "default": -inf}},
            "required": ["count"]}
        with contextlib.suppress(Cancelled, Exception):
            await self._race(turn, self.conn.request("elicitation/create", {
                "sessionId": turn.session_id, "mode": "form", "requestedSchema": schema, "message": "How many?"}))
        return {"stopReason": "cancelled" if turn.cancel.is_set() else "end_turn",
                "usage": {"totalTokens": nan, "inputTokens": inf, "outputTokens": -inf}}

    async def _cmd_askodd(self, turn: Turn) -> str:
        """Questions a client should refuse, or survive: `askodd big BYTES` (one question BYTES long), `askodd
        required JSON` (a schema whose `required` is JSON: `5`, `[[1]]`), `askodd many N BYTES` (N questions of
        BYTES each, all open at once until answered or the turn is cancelled). Says what came back as it comes, a
        line per question: `qI ask error: …` for a refusal, `qI ask ACTION` for an answer."""
        kind = turn.args[0] if turn.args else ""
        schema: Json = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}}
        count, size = 1, 32
        if kind == "big":
            size = self._int_arg(turn, 1, "BYTES")
        elif kind == "required":
            schema["required"] = json.loads(turn.args[1]) if len(turn.args) > 1 else 5
        elif kind == "many":
            count, size = self._int_arg(turn, 1, "N"), self._int_arg(turn, 2, "BYTES")
        else:
            raise RequestError.invalid_params({"details": "usage: askodd big BYTES | required JSON | many N BYTES"})

        async def ask(i: int) -> None:
            message = f"q{i} " + "x" * max(0, size - len(f"q{i} "))
            try:
                answer = await self.conn.request("elicitation/create", {
                    "sessionId": turn.session_id, "mode": "form", "requestedSchema": schema, "message": message})
            except Exception as exc:  # noqa: BLE001 - the agent says what failed, as real agents do
                outcome = f"ask error: {error_text(exc)}"
            else:
                outcome = f"ask {answer.get('action') if isinstance(answer, dict) else answer}"
            await self._say(turn, f"q{i} {outcome}\n")

        try:
            await self._race(turn, asyncio.gather(*(ask(i) for i in range(count))))
        except Cancelled:
            return "cancelled"
        return "end_turn"

    async def _cmd_env(self, turn: Turn) -> str:
        name = turn.args[0] if turn.args else ""
        await self._say(turn, os.environ.get(name, "<unset>") if name else "<unset>")
        return "end_turn"

    async def _cmd_envhash(self, turn: Turn) -> str:
        """The SHA-256 of a variable's value: proves a secret reached the agent without the reply carrying it."""
        import hashlib

        value = os.environ.get(turn.args[0]) if turn.args else None
        await self._say(turn, hashlib.sha256(value.encode()).hexdigest() if value is not None else "<unset>")
        return "end_turn"

    async def _cmd_silent(self, turn: Turn) -> str:
        await self._sleep(turn, self._float_arg(turn, 0, "SECONDS"))
        await self._say(turn, "woke")
        return "end_turn"

    async def _cmd_spawnchild(self, turn: Turn) -> str:
        # A tool-like grandchild in our process group; the client's stop must kill the whole group.
        # We neither kill nor reap it on cancel: that is the client's job, and what the test checks.
        # `spawnchild setsid` puts it in a session of its own (a daemonizing tool), out of the group kill's reach.
        child = await asyncio.create_subprocess_exec(
            "sleep", "300", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=bool(turn.args) and turn.args[0] == "setsid",
        )
        self._children.append(child)
        await self._say(turn, f"child pid {child.pid}")
        await turn.cancel.wait()
        return "cancelled"

    async def _cmd_closeout(self, turn: Turn) -> str:
        # A wedged agent: stdout closed mid-prompt, process alive, deaf to everything.
        await self._say(turn, "closing stdout")
        await self.conn.flush()
        self.conn.close()
        await asyncio.sleep(3600)
        return "end_turn"

    async def _cmd_hostile(self, turn: Turn) -> str:
        """Output ACP does not allow, between valid chunks: `hostile surrogate` (a lone surrogate escape in a chunk)
        or `hostile garbage` (a line that is not JSON, a chunk for another ACP session, a response nobody asked for
        with a list as its id, answers to a request never sent and to one answered long ago). `hostile html`: valid
        ACP whose text attacks the page that shows it (HTML, `javascript:` and data URLs in messages, thoughts,
        tool titles, diffs and tool output); each payload would set `window.pwned`."""
        kind = turn.args[0] if turn.args else "garbage"
        if kind == "html":
            return await self._hostile_html(turn)

        def chunk(text: str, session_id: str) -> bytes:
            update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
            return (json.dumps({"jsonrpc": "2.0", "method": "session/update",
                                "params": {"sessionId": session_id, "update": update}}) + "\n").encode()

        await self.conn.write(chunk("before ", turn.session_id))
        if kind == "surrogate":
            await self.conn.write(chunk("lone \ud800 here ", turn.session_id))  # json.dumps writes `\ud800`
        else:
            await self.conn.write(b"this is not json\n")
            await self.conn.write(chunk("INJECTED ", "another-acp-session"))
            await self.conn.write(b'{"jsonrpc":"2.0","id":[1,2],"result":{}}\n')
            await self.conn.write(b'{"jsonrpc":"2.0","id":"never-asked","result":{}}\n')
            await self.conn.write(b'{"jsonrpc":"2.0","id":0,"result":{}}\n')  # initialize was answered long ago
        await self.conn.write(chunk("after", turn.session_id))
        return "end_turn"

    # ---- what the session page renders -----------------------------------------------------------

    async def _cmd_markdown(self, turn: Turn) -> str:
        """A review in Markdown, as coding agents answer: a thought, headings, a list, a table, links, a code block."""
        await self._update(turn, message_chunk("Reading **calc.py** first.", "agent_thought_chunk"))
        for chunk in MARKDOWN_REVIEW:
            await self._say(turn, chunk)
        return "end_turn"

    async def _cmd_diff(self, turn: Turn) -> str:
        """Edit tool calls carrying ACP `diff` content: a change to calc.py, a new file, and (`diff big`) a long one."""
        calls = [("Edit calc.py", diff_block(os.path.join(turn.cwd, "calc.py"), DIFF_NEW, DIFF_OLD)),
                 ("Write notes.md", diff_block(os.path.join(turn.cwd, "notes.md"), DIFF_NOTES))]
        if turn.args[:1] == ["big"]:
            calls.append(("Write big.txt", diff_block(os.path.join(turn.cwd, "big.txt"),
                                                      "".join(f"line {i}\n" for i in range(400)))))
        for title, block in calls:
            tool_call_id = self._tool_call_id()
            await self._update(turn, tool_call_start(tool_call_id, title, "edit", "in_progress", content=[block]))
            await self._update(turn, tool_call_settled(tool_call_id, "completed", [block]))
        await self._say(turn, "edited")
        return "end_turn"

    async def _cmd_terminal(self, turn: Turn) -> str:
        """A command run in a client terminal (`terminal` content; its output comes with `terminal_exited`), then a
        tool whose text output has ANSI colours and many lines."""
        tool_call_id = self._tool_call_id()
        content = [terminal_block("term-1")]
        await self._update(turn, tool_call_start(tool_call_id, "Run pytest", "execute", "in_progress",
                                                 {"command": "pytest -q"}, content=content))
        await self._update(turn, tool_call_settled(tool_call_id, "completed", content))
        tool_call_id = self._tool_call_id()
        await self._update(turn, tool_call_start(tool_call_id, "Show the log", "read", "in_progress"))
        await self._update(turn, tool_call_update(tool_call_id, "completed", COLOURED_LOG))
        await self._say(turn, "ran")
        return "end_turn"

    async def _cmd_late(self, turn: Turn) -> str:
        """End the turn, then say something SECONDS later (default 0.3): a message after the turn's end."""
        delay = float(turn.args[0]) if turn.args else 0.3
        session_id = turn.session_id

        async def say_later() -> None:
            await asyncio.sleep(delay)
            await self.conn.notify("session/update", {"sessionId": session_id,
                                                      "update": message_chunk("a note after the turn")})

        self._exit_task = asyncio.ensure_future(say_later())
        await self._say(turn, "turn done")
        return "end_turn"

    async def _hostile_html(self, turn: Turn) -> str:
        await self._update(turn, message_chunk(HOSTILE_MARKDOWN, "agent_thought_chunk"))
        tool_call_id = self._tool_call_id()
        block = diff_block("<img src=x onerror=window.pwned=5>", HOSTILE_MARKDOWN)
        await self._update(turn, tool_call_start(tool_call_id, "<img src=x onerror=window.pwned=6>", "edit",
                                                 "in_progress", content=[block]))
        await self._update(turn, tool_call_update(tool_call_id, "completed", HOSTILE_MARKDOWN))
        for line in HOSTILE_MARKDOWN.splitlines(keepends=True):
            await self._say(turn, line)
        return "end_turn"

    async def _cmd_orphanpipe(self, turn: Turn) -> str:
        # Exit mid-turn while a grandchild (same group) still holds our stdout: the exit is the process's, not the
        # pipe's. `orphanpipe setsid` puts the grandchild in a session of its own, out of our group's reach.
        new_session = bool(turn.args) and turn.args[0] == "setsid"
        child = subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL, start_new_session=new_session)
        await self._say(turn, f"grandchild {child.pid}")
        await self.conn.flush()
        os._exit(0)

    async def _cmd_closeoutidle(self, turn: Turn) -> str:
        # End the turn, then close stdout and live on, deaf: nothing can answer this session any more.
        async def close_later() -> None:
            await asyncio.sleep(0.3)
            await self.conn.flush()
            self.conn.close()

        self._exit_task = asyncio.ensure_future(close_later())
        await self._say(turn, "closing soon")
        return "end_turn"

    async def _cmd_wedge(self, turn: Turn) -> str:
        # Deaf to session/cancel, stdin EOF and SIGTERM (the loop is blocked): only SIGKILL ends it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        await self._say(turn, "wedged")
        await self.conn.flush()
        time.sleep(3600)  # blocks the loop on purpose
        return "end_turn"

    async def _cmd_error(self, turn: Turn) -> str:
        raise RequestError.internal_error({"details": "scripted prompt failure"})

    async def _cmd_autherr(self, turn: Turn) -> str:
        # What claude-agent-acp answers without an API key: ACP's auth_required (-32000).
        raise RequestError.auth_required({"details": "Authentication required: run /login or set ANTHROPIC_API_KEY"})

    async def _cmd_term(self, turn: Turn) -> str:
        # `term [--ask] [--keep] SHELL-COMMAND`: runs it through the client's terminal, as claude-agent-acp runs
        # Bash (--ask: its permission request first; --keep: never waits or releases, so only the stop ends it).
        words = turn.rest.split()
        ask, keep = "--ask" in words, "--keep" in words
        script = " ".join(w for w in words if w not in ("--ask", "--keep"))
        tool_call_id = self._tool_call_id()
        await self._update(turn, tool_call_start(tool_call_id, f"Run {script}", "execute", "pending",
                                                 {"command": script}))
        if ask and await self._race(turn, self._permission(turn, tool_call_id, f"Run {script}", "execute")) \
                != "allow":
            await self._update(turn, tool_call_update(tool_call_id, "failed", "not allowed"))
            return "end_turn"
        try:
            created = await self.conn.request("terminal/create", {
                "sessionId": turn.session_id, "command": "/bin/sh", "args": ["-c", script], "outputByteLimit": 4096})
        except RequestError as exc:
            await self._update(turn, tool_call_update(tool_call_id, "failed", error_text(exc)))
            await self._say(turn, f"refused: {error_text(exc)}")
            return "end_turn"
        terminal_id = check_fields("CreateTerminalResponse", created, {"terminalId": str})["terminalId"]
        await self._update(turn, {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id,
                                  "content": [{"type": "terminal", "terminalId": terminal_id}]})
        if keep:
            await self._say(turn, f"left {terminal_id} running")
            return "end_turn"
        status = await self.conn.request("terminal/wait_for_exit", {"sessionId": turn.session_id,
                                                                    "terminalId": terminal_id})
        output = await self.conn.request("terminal/output", {"sessionId": turn.session_id, "terminalId": terminal_id})
        await self.conn.request("terminal/release", {"sessionId": turn.session_id, "terminalId": terminal_id})
        await self._update(turn, tool_call_update(tool_call_id, "completed", output["output"]))
        await self._say(turn, f"exit {status.get('exitCode')} truncated {output.get('truncated')}: {output['output']}")
        return "end_turn"

    async def _cmd_probe(self, turn: Turn) -> str:
        """`probe PATH...`: what a hostile agent can reach. Each path read (a socket: connected to), then a file
        written in its cwd; says `PATH=read|connected|refused(REASON)` for each and `cwd=written|refused(REASON)`."""
        said = []
        for path in turn.rest.split():
            said.append(f"{path}={await asyncio.to_thread(reach, Path(path))}")
        try:
            Path("probe-wrote.txt").write_text("written by the agent\n")
            said.append("cwd=written")
        except OSError as exc:
            said.append(f"cwd=refused({exc.strerror})")
        await self._say(turn, " ".join(said))
        return "end_turn"

    async def _cmd_selfapprove(self, turn: Turn) -> str:
        """`selfapprove SOCKET URL-PREFIX`: ask to run a command, then try to approve that very request over the
        daemon's control socket (POST URL-PREFIX + its request id), as a hostile agent that read the socket's
        path; says how the daemon answered, then waits for the real decision."""
        sock, prefix = turn.args[0], turn.args[1]
        tool_call_id = self._tool_call_id()
        await self._update(turn, tool_call_start(tool_call_id, "Run rm -rf ~", "execute", "pending",
                                                 {"command": "rm -rf ~"}))
        asking = asyncio.ensure_future(self._permission(turn, tool_call_id, "Run rm -rf ~", "execute"))
        # The daemon looks at who asks before it looks for the request: one POST, whether or not the request is
        # open yet, is answered as the agent's.
        status, body = await asyncio.to_thread(post_unix, sock, prefix + tool_call_id, {"decision": "approve"})
        code = ""
        with contextlib.suppress(ValueError, AttributeError):
            code = json.loads(body).get("code", "")
        await self._say(turn, f"self-approval answered {status} {code}")
        outcome = await self._race(turn, asking)
        await self._say(turn, f" then the person chose {outcome}")
        return "end_turn"

    async def _cmd_swap(self, turn: Turn) -> str:
        """`swap APPROVED ;; RUN`: ask to run APPROVED, then run RUN through a client terminal instead (the
        bait and switch an approval must not cover); says the terminal's outcome."""
        approved, _, run = turn.rest.partition(";;")
        approved, run = approved.strip(), run.strip()
        tool_call_id = self._tool_call_id()
        await self._update(turn, tool_call_start(tool_call_id, f"Run {approved}", "execute", "pending",
                                                 {"command": approved}))
        if await self._race(turn, self._permission(turn, tool_call_id, f"Run {approved}", "execute")) != "allow":
            await self._say(turn, "not allowed")
            return "end_turn"
        try:
            created = await self.conn.request("terminal/create", {
                "sessionId": turn.session_id, "command": "/bin/sh", "args": ["-c", run]})
        except RequestError as exc:
            await self._say(turn, f"refused: {error_text(exc)}")
            return "end_turn"
        terminal_id = check_fields("CreateTerminalResponse", created, {"terminalId": str})["terminalId"]
        status = await self.conn.request("terminal/wait_for_exit", {"sessionId": turn.session_id,
                                                                    "terminalId": terminal_id})
        await self.conn.request("terminal/release", {"sessionId": turn.session_id, "terminalId": terminal_id})
        await self._say(turn, f"ran {run!r}: exit {status.get('exitCode')}")
        return "end_turn"

    async def _cmd_termflood(self, turn: Turn) -> str:
        """`termflood N`: a terminal with 1 MB of output, then N `terminal/output` calls sent at once (pipelined),
        as a hostile agent polls to stall the daemon's loop; says how many answers came back."""
        count = int(turn.args[0]) if turn.args else 200
        created = await self.conn.request("terminal/create", {
            "sessionId": turn.session_id, "command": "/bin/sh",
            "args": ["-c", "head -c 1000000 /dev/zero | tr '\\0' x"]})
        terminal_id = check_fields("CreateTerminalResponse", created, {"terminalId": str})["terminalId"]
        await self.conn.request("terminal/wait_for_exit", {"sessionId": turn.session_id, "terminalId": terminal_id})
        answers = await asyncio.gather(*(self.conn.request("terminal/output", {
            "sessionId": turn.session_id, "terminalId": terminal_id}) for _ in range(count)))
        await self.conn.request("terminal/release", {"sessionId": turn.session_id, "terminalId": terminal_id})
        sizes = {len(a["output"]) for a in answers}
        await self._say(turn, f"flooded {len(answers)} answers of {sorted(sizes)} characters")
        return "end_turn"

    async def _cmd_empty(self, turn: Turn) -> str:
        # A model server that is down, as opencode shows it: the turn ends at once with nothing said.
        return "end_turn"


def reach(path: Path) -> str:
    """How far this process gets with `path`: read (a file), connected (a socket) or refused(REASON)."""
    import socket

    try:
        if path.is_socket():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(str(path))
            return "connected"
        path.read_bytes()
        return "read"
    except OSError as exc:
        return f"refused({exc.strerror})"


def post_unix(sock: str, path: str, body: Json) -> tuple[int, str]:
    """POST `body` as JSON to `path` over the unix socket `sock`: (status, body), (0, reason) when unreachable."""
    import http.client
    import socket

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(sock)

    conn = UnixConnection("localhost", timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)
    finally:
        conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Scripted ACP agent for tests (standard library only).")
    parser.add_argument("--load-session", action="store_true", help="advertise and implement session/load")
    parser.add_argument("--state-dir", help="where session ids persist across restarts")
    parser.add_argument("--broken-handshake", action="store_true", help="answer initialize with garbage, exit 2")
    parser.add_argument("--fail-new-session", action="store_true", help="session/new returns an internal error")
    parser.add_argument("--exit-on-start", action="store_true", help="exit 1 before reading anything")
    parser.add_argument("--prompt-log", help="append one JSON line per received prompt")
    parser.add_argument("--stderr-at-start", type=int, default=0, metavar="N", help="write N bytes to stderr first")
    parser.add_argument("--ignore-cancel", action="store_true", help="ignore session/cancel entirely")
    parser.add_argument("--echo-verbatim", action="store_true", help="echo prompts word for word, no 'echo: '")
    parser.add_argument("--models", help="comma-separated model ids offered through a `model` config option; "
                        "the first is current")
    parser.add_argument("--require-auth", action="store_true",
                        help="offer auth methods as codex-acp does (api-key lists no variables, env-key names "
                        "SCRIPTED_API_KEY, login is a terminal method); session/new answers auth_required until "
                        "`authenticate` succeeded, which needs SCRIPTED_API_KEY set")
    parser.add_argument("--login-file", help="with --require-auth: authenticated from the start once this file "
                        "exists (a login the agent stored, as after `opencode auth login`)")
    parser.add_argument("--lifecycle", default="", help="comma-separated session capabilities to offer and "
                        "implement: resume (like load, without replay), close, closefail (offered, refused)")
    parser.add_argument("--modes", action="store_true", help="offer modes (default, plan) and session/set_mode")
    parser.add_argument("--mcp-http", action="store_true", help="advertise MCP servers over http (not sse)")
    parser.add_argument("--call-log", help="append one JSON line per lifecycle request received (method, params)")
    parser.add_argument("--dispatch-after-replay", action="store_true",
                        help="pick the command from the text after a context replay's last 'User request:'")
    opts = parser.parse_args(argv)
    if opts.load_session and not opts.state_dir:
        parser.error("--load-session requires --state-dir")
    return opts


async def stdio_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """stdin and stdout as asyncio streams (stdout becomes non-blocking, as under the SDK)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIO_LIMIT_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    protocol = _WriteProtocol()
    transport, _ = await loop.connect_write_pipe(lambda: protocol, sys.stdout)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def serve(opts: argparse.Namespace) -> None:
    reader, writer = await stdio_streams()
    agent = ScriptedAgent(opts)
    conn = Connection(reader, writer, agent.handle_request, agent.handle_notification)
    agent.connect(conn)
    await conn.serve()


def main(argv: list[str] | None = None) -> None:
    opts = parse_args(argv)
    if opts.exit_on_start:
        blocking_write(2, b"boom at start\n")
        sys.exit(1)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="scripted-agent: %(levelname)s %(message)s")
    if opts.state_dir:
        Path(opts.state_dir).mkdir(parents=True, exist_ok=True)
    if opts.stderr_at_start > 0:
        blocking_write(2, filler(opts.stderr_at_start))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(opts))


if __name__ == "__main__":
    main()
