#!/usr/bin/env python3
"""Scripted ACP agent for the test suite, on the ``agent-client-protocol`` SDK.

The twin of ``scripted_agent.py`` (the standard-library agent the harness runs by default):
the same scenarios, flags and wire, checked line for line by ``tests/unit/test_scripted_wire.py``.
This one is kept for the tests whose subject is the SDK's own behaviour (``SDK_AGENT`` in
``tests/conftest.py``); importing the SDK costs it about a second of CPU per start.

One process serves many scenarios; the first word of each prompt picks the scenario
(see ``ScriptedAgent._commands``). It speaks real ACP over stdio through the
SDK; only the hot ``stream`` path and the deliberately
invalid ``unknown`` update bypass the SDK's models and are written as raw JSON lines
onto the same stdout transport the SDK uses.

Imports are limited to the stdlib and ``acp`` so the file runs as a plain script.
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

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.helpers import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    tool_terminal_ref,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Cost,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
    StopReason,
    TextContentBlock,
    ToolCallUpdate,
    ToolKind,
    Usage,
    UsageUpdate,
)
from acp.stdio import stdio_streams

log = logging.getLogger("scripted-agent")

T = TypeVar("T")

# Raw-path batching: large enough to amortise write()/drain() per line, small enough that
# a session/cancel is noticed quickly and memory stays bounded.
_BATCH_LINES = 256
_BATCH_BYTES = 64 * 1024
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
REPLAY_TAG = "<compozy_context_replay>"
REPLAY_REQUEST = "User request: "
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


class RawWriter:
    """Pre-serialised JSON-RPC lines straight onto the stdout transport the SDK also writes to.

    Ordering with SDK sends holds because every SDK send we await has already been handed to
    this same transport, and the transport keeps FIFO order.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def send(self, message: dict[str, Any]) -> None:
        await self.write((json.dumps(message, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        """Close our end of stdout for good (the client sees EOF while we live on)."""
        self._writer.close()
        with contextlib.suppress(OSError):
            os.close(1)

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the transport's user-space buffer reached the pipe (before a hard exit)."""
        transport = self._writer.transport
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while transport.get_write_buffer_size() > 0 and loop.time() < deadline:
            await asyncio.sleep(0.001)


class ScriptedAgent:
    def __init__(self, opts: argparse.Namespace, raw: RawWriter) -> None:
        self._opts = opts
        self._raw = raw
        self._conn: Client | None = None
        self._sessions: dict[str, str] = {}  # session id -> cwd
        self._cancels: dict[str, asyncio.Event] = {}
        self._tool_ids = itertools.count(1)
        self._commands: dict[str, Callable[[Turn], Awaitable[StopReason | PromptResponse]]] = {
            "stream": self._cmd_stream,
            "slow": self._cmd_slow,
            "think": self._cmd_think,
            "tool": self._cmd_tool,
            "toolid": self._cmd_tool,  # the same, its permission request naming only the tool call id
            "toolhang": self._cmd_toolhang,
            "hang": self._cmd_hang,
            "crash": self._cmd_crash,
            "leak": self._cmd_leak,
            "exit0": self._cmd_exit0,
            "stderr": self._cmd_stderr,
            "unknown": self._cmd_unknown,
            "plan": self._cmd_plan,
            "usage": self._cmd_usage,
            "env": self._cmd_env,
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
            # What the session page renders (tests/e2e/test_session_render.py).
            "markdown": self._cmd_markdown,
            "diff": self._cmd_diff,
            "terminal": self._cmd_terminal,
            "late": self._cmd_late,
        }
        self._children: list[asyncio.subprocess.Process] = []
        self._exit_task: asyncio.Future[None] | None = None
        self._models = [m for m in (opts.models or "").split(",") if m]  # offered through a model select
        self._current_model: dict[str, str] = {}  # session id -> model id

    def _config_options(self, session_id: str) -> list[SessionConfigOptionSelect] | None:
        if not self._models:
            return None
        return [SessionConfigOptionSelect(
            type="select", id="model", name="Model", category="model",
            current_value=self._current_model.get(session_id, self._models[0]),
            options=[SessionConfigSelectOption(value=m, name=m.title()) for m in self._models])]

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def client(self) -> Client:
        if self._conn is None:
            raise RequestError.internal_error({"details": "no client connection"})
        return self._conn

    # ---- lifecycle -------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        if self._opts.broken_handshake:
            blocking_write(1, b"this is not json-rpc {{{\n")
            os._exit(2)
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=bool(self._opts.load_session)),
            agent_info=Implementation(name="scripted-agent", title="Compozy scripted test agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        if self._opts.fail_new_session:
            raise RequestError.internal_error({"details": "scripted new_session failure"})
        session_id = f"scripted-{uuid.uuid4().hex}"
        self._sessions[session_id] = cwd
        if self._opts.state_dir:
            (Path(self._opts.state_dir) / session_id).write_text(json.dumps({"cwd": cwd}))
        return NewSessionResponse(session_id=session_id, config_options=self._config_options(session_id))

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool,
                                **_: Any) -> SetSessionConfigOptionResponse:
        if config_id != "model" or value not in self._models:
            raise RequestError.invalid_params({"details": f"cannot set {config_id!r} to {value!r}"})
        self._current_model[session_id] = str(value)
        return SetSessionConfigOptionResponse(config_options=self._config_options(session_id) or [])

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        if not self._opts.load_session:
            raise RequestError.method_not_found("session/load")
        known = session_id in self._sessions or (
            _SAFE_ID.match(session_id) is not None and (Path(self._opts.state_dir) / session_id).is_file()
        )
        if not known:
            raise RequestError.resource_not_found(session_id)
        # No history replay on purpose: the client must cope with an empty load.
        self._sessions[session_id] = cwd
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **_: Any) -> None:
        if self._opts.ignore_cancel:
            log.warning("ignoring session/cancel for %s", session_id)
            return
        event = self._cancels.get(session_id)
        if event is not None:
            event.set()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        text = "\n".join(block.text for block in prompt if isinstance(block, TextContentBlock))
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
        if self._opts.dispatch_after_replay and REPLAY_TAG in text:
            # Compozy prepended a context replay: the command is what follows the last "User request:".
            text = text.rsplit(REPLAY_REQUEST, 1)[-1]
        words = text.split()
        handler = self._commands.get(words[0].lower() if words else "", self._cmd_echo)
        turn = Turn(session_id=session_id, cwd=cwd, text=text, args=words[1:], cancel=cancel)
        result: StopReason | PromptResponse
        try:
            result = await handler(turn)
        except Cancelled:
            result = "cancelled"
        finally:
            if self._cancels.get(session_id) is cancel:
                del self._cancels[session_id]
        if isinstance(result, PromptResponse):
            return result
        return PromptResponse(stop_reason=result)

    # ---- helpers ---------------------------------------------------------------------------

    async def _say(self, turn: Turn, text: str) -> None:
        await self.client.session_update(session_id=turn.session_id, update=update_agent_message_text(text))

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

    # ---- commands --------------------------------------------------------------------------

    async def _cmd_echo(self, turn: Turn) -> StopReason:
        # --echo-verbatim: a parrot that repeats the prompt word for word (some agents answer a title request so).
        await self._say(turn, turn.text if self._opts.echo_verbatim else f"echo: {turn.text}")
        return "end_turn"

    async def _cmd_stream(self, turn: Turn) -> StopReason:
        count = self._int_arg(turn, 0, "N")
        size = self._int_arg(turn, 1, "SIZE", default=0)
        # Hand-built frames: pydantic validation + the SDK's per-message future cap us far below
        # the benchmark's rate. The shape is exactly a valid session/update notification.
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
                await self._raw.write("".join(batch).encode())
                batch.clear()
                batch_bytes = 0
                await asyncio.sleep(0)  # let the receive loop see a session/cancel
                if turn.cancel.is_set():
                    return "cancelled"
        if batch:
            await self._raw.write("".join(batch).encode())
        return "end_turn"

    async def _cmd_slow(self, turn: Turn) -> StopReason:
        count = self._int_arg(turn, 0, "N")
        interval = self._float_arg(turn, 1, "INTERVAL")
        for i in range(count):
            if turn.cancel.is_set():
                return "cancelled"
            await self._say(turn, f"c{i} ")
            if i < count - 1:
                await self._sleep(turn, interval)
        return "end_turn"

    async def _cmd_think(self, turn: Turn) -> StopReason:
        await self.client.session_update(
            session_id=turn.session_id, update=update_agent_thought_text(turn.rest or "thinking")
        )
        await self._say(turn, "thought done")
        return "end_turn"

    async def _cmd_tool(self, turn: Turn) -> StopReason:
        parts = turn.text.strip().split(maxsplit=3)
        action = parts[1].lower() if len(parts) > 1 else ""
        if action not in ("read", "write") or len(parts) < 3:
            raise RequestError.invalid_params({"details": "usage: tool read PATH | tool write PATH CONTENT..."})
        path = parts[2]
        content = parts[3] if len(parts) > 3 else ""
        abs_path = os.path.normpath(os.path.join(turn.cwd, path))
        kind: ToolKind = "read" if action == "read" else "edit"
        tool_call_id = f"tool-{next(self._tool_ids)}-{uuid.uuid4().hex[:8]}"
        title = f"{'Read' if action == 'read' else 'Write'} {path}"
        raw_input: dict[str, Any] = {"path": abs_path}
        if action == "write":
            raw_input["content"] = content
        await self.client.session_update(
            session_id=turn.session_id,
            update=start_tool_call(tool_call_id, title, kind=kind, status="pending", raw_input=raw_input),
        )

        async def fail(reason: str) -> None:
            await self.client.session_update(
                session_id=turn.session_id,
                update=update_tool_call(tool_call_id, status="failed", content=[tool_content(text_block(reason))]),
            )

        try:
            response = await self._race(
                turn,
                self.client.request_permission(
                    session_id=turn.session_id,
                    tool_call=ToolCallUpdate(tool_call_id=tool_call_id) if parts[0].lower() == "toolid" else
                    ToolCallUpdate(tool_call_id=tool_call_id, title=title, kind=kind, status="pending"),
                    options=[
                        PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                        PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                    ],
                ),
            )
        except Cancelled:
            await fail("cancelled")
            return "cancelled"
        except Exception as exc:  # noqa: BLE001 - the agent reports any failure as the tool's, as real agents do
            await fail(f"permission request failed: {error_text(exc)}")
            await self._say(turn, "tool error")
            return "end_turn"
        outcome = response.outcome
        choice = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
        if choice != "allow":
            await fail("permission denied" if choice == "reject" else f"permission {choice}")
            if turn.cancel.is_set():
                return "cancelled"
            await self._say(turn, f"tool {choice}")
            return "end_turn"
        try:
            if action == "read":
                read = await self._race(turn, self.client.read_text_file(session_id=turn.session_id, path=abs_path))
                result = read.content
            else:
                await self._race(
                    turn,
                    self.client.write_text_file(session_id=turn.session_id, path=abs_path, content=content),
                )
                result = f"wrote {len(content.encode())} bytes"
        except Cancelled:
            await fail("cancelled")
            return "cancelled"
        except Exception as exc:  # noqa: BLE001 - the agent reports any failure as the tool's, as real agents do
            await fail(error_text(exc))
            await self._say(turn, "tool error")
            return "end_turn"
        await self.client.session_update(
            session_id=turn.session_id,
            update=update_tool_call(tool_call_id, status="completed", content=[tool_content(text_block(result))]),
        )
        await self._say(turn, "tool allow")
        return "end_turn"

    async def _cmd_toolhang(self, turn: Turn) -> StopReason:
        tool_call_id = f"tool-{next(self._tool_ids)}-{uuid.uuid4().hex[:8]}"
        await self.client.session_update(
            session_id=turn.session_id,
            update=start_tool_call(tool_call_id, "Run a command that never ends", kind="execute", status="in_progress"),
        )
        await turn.cancel.wait()
        return "cancelled"

    async def _cmd_tools(self, turn: Turn) -> StopReason:
        # N quick tool calls, each completed with a result, spaced by INTERVAL: tool-result boundaries
        # a client can act on (a staged steer) while the turn is still running.
        count = self._int_arg(turn, 0, "N")
        interval = self._float_arg(turn, 1, "INTERVAL")
        for i in range(count):
            if turn.cancel.is_set():
                return "cancelled"
            tool_call_id = f"tool-{next(self._tool_ids)}-{uuid.uuid4().hex[:8]}"
            await self.client.session_update(
                session_id=turn.session_id,
                update=start_tool_call(tool_call_id, f"Step {i}", kind="other", status="in_progress"),
            )
            await self.client.session_update(
                session_id=turn.session_id,
                update=update_tool_call(tool_call_id, status="completed",
                                        content=[tool_content(text_block(f"step {i} done"))]),
            )
            await self._sleep(turn, interval)
        await self._say(turn, "tools done")
        return "end_turn"

    async def _cmd_exitidle(self, turn: Turn) -> StopReason:
        # Finish the turn normally, then exit 0 SECONDS later while idle: an agent that completed.
        delay = self._float_arg(turn, 0, "SECONDS")

        async def exit_later() -> None:
            await asyncio.sleep(delay)
            await self._raw.flush()
            os._exit(0)

        self._exit_task = asyncio.ensure_future(exit_later())
        await self._say(turn, "bye")
        return "end_turn"

    async def _cmd_hang(self, turn: Turn) -> StopReason:
        await self._say(turn, "working")
        await turn.cancel.wait()  # never set under --ignore-cancel
        return "cancelled"

    async def _cmd_crash(self, turn: Turn) -> StopReason:
        for i in range(3):
            await self._say(turn, f"c{i} ")
        await self._raw.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(3600)  # unreachable; SIGKILL cannot be caught
        return "end_turn"

    async def _cmd_leak(self, turn: Turn) -> StopReason:
        """Write planted secrets to stderr (the rest of the prompt after `leak`), then crash hard."""
        secrets_text = turn.text.split(maxsplit=1)[1] if len(turn.text.split(maxsplit=1)) > 1 else ""
        sys.stderr.write(f"fatal: {secrets_text}\n")
        sys.stderr.flush()
        await self._say(turn, "about to fail ")
        await self._raw.flush()
        await asyncio.sleep(0.2)  # let the client's stderr drain read it
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(3600)
        return "end_turn"

    async def _cmd_exit0(self, turn: Turn) -> StopReason:
        await self._say(turn, "c0 ")
        await self._raw.flush()
        os._exit(0)

    async def _cmd_stderr(self, turn: Turn) -> StopReason:
        # Blocking on purpose (it stalls the whole agent): a client that doesn't drain stderr hangs here.
        blocking_write(2, filler(self._int_arg(turn, 0, "N")))
        await self._say(turn, "stderr done")
        return "end_turn"

    async def _cmd_unknown(self, turn: Turn) -> StopReason:
        await self._raw.send(
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

    async def _cmd_plan(self, turn: Turn) -> StopReason:
        entries = [
            plan_entry("Read the code", priority="high", status="in_progress"),
            plan_entry("Write the fix", priority="medium", status="pending"),
        ]
        await self.client.session_update(session_id=turn.session_id, update=update_plan(entries))
        await self._say(turn, "planned")
        return "end_turn"

    async def _cmd_usage(self, turn: Turn) -> PromptResponse:
        await self._say(turn, "usage reported")
        await self.client.session_update(
            session_id=turn.session_id,
            update=UsageUpdate(
                session_update="usage_update",
                used=1234,
                size=200000,
                cost=Cost(amount=0.0125, currency="USD"),
            ),
        )
        return PromptResponse(stop_reason="end_turn", usage=Usage(total_tokens=150, input_tokens=100, output_tokens=50))

    async def _cmd_env(self, turn: Turn) -> StopReason:
        name = turn.args[0] if turn.args else ""
        await self._say(turn, os.environ.get(name, "<unset>") if name else "<unset>")
        return "end_turn"

    async def _cmd_silent(self, turn: Turn) -> StopReason:
        await self._sleep(turn, self._float_arg(turn, 0, "SECONDS"))
        await self._say(turn, "woke")
        return "end_turn"

    async def _cmd_spawnchild(self, turn: Turn) -> StopReason:
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

    async def _cmd_closeout(self, turn: Turn) -> StopReason:
        # A wedged agent: stdout closed mid-prompt, process alive, deaf to everything.
        await self._say(turn, "closing stdout")
        await self._raw.flush()
        self._raw.close()
        await asyncio.sleep(3600)
        return "end_turn"

    async def _cmd_hostile(self, turn: Turn) -> StopReason:
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

        await self._raw.write(chunk("before ", turn.session_id))
        if kind == "surrogate":
            await self._raw.write(chunk("lone \ud800 here ", turn.session_id))  # json.dumps writes `\ud800`
        else:
            await self._raw.write(b"this is not json\n")
            await self._raw.write(chunk("INJECTED ", "another-acp-session"))
            await self._raw.write(b'{"jsonrpc":"2.0","id":[1,2],"result":{}}\n')
            await self._raw.write(b'{"jsonrpc":"2.0","id":"never-asked","result":{}}\n')
            await self._raw.write(b'{"jsonrpc":"2.0","id":0,"result":{}}\n')  # initialize was answered long ago
        await self._raw.write(chunk("after", turn.session_id))
        return "end_turn"

    # ---- what the session page renders -----------------------------------------------------------

    def _new_tool_call_id(self) -> str:
        return f"tool-{next(self._tool_ids)}-{uuid.uuid4().hex[:8]}"

    async def _update(self, turn: Turn, update: Any) -> None:
        await self.client.session_update(session_id=turn.session_id, update=update)

    async def _cmd_markdown(self, turn: Turn) -> StopReason:
        """A review in Markdown, as coding agents answer: a thought, headings, a list, a table, links, a code block."""
        await self._update(turn, update_agent_thought_text("Reading **calc.py** first."))
        for chunk in MARKDOWN_REVIEW:
            await self._say(turn, chunk)
        return "end_turn"

    async def _cmd_diff(self, turn: Turn) -> StopReason:
        """Edit tool calls carrying ACP `diff` content: a change to calc.py, a new file, and (`diff big`) a long one."""
        calls = [("Edit calc.py", tool_diff_content(os.path.join(turn.cwd, "calc.py"), DIFF_NEW, DIFF_OLD)),
                 ("Write notes.md", tool_diff_content(os.path.join(turn.cwd, "notes.md"), DIFF_NOTES))]
        if turn.args[:1] == ["big"]:
            calls.append(("Write big.txt", tool_diff_content(os.path.join(turn.cwd, "big.txt"),
                                                             "".join(f"line {i}\n" for i in range(400)))))
        for title, block in calls:
            tool_call_id = self._new_tool_call_id()
            await self._update(turn, start_tool_call(tool_call_id, title, kind="edit", status="in_progress",
                                                     content=[block]))
            await self._update(turn, update_tool_call(tool_call_id, status="completed", content=[block]))
        await self._say(turn, "edited")
        return "end_turn"

    async def _cmd_terminal(self, turn: Turn) -> StopReason:
        """A command run in a client terminal (`terminal` content; its output comes with `terminal_exited`), then a
        tool whose text output has ANSI colours and many lines."""
        tool_call_id = self._new_tool_call_id()
        content = [tool_terminal_ref("term-1")]
        await self._update(turn, start_tool_call(tool_call_id, "Run pytest", kind="execute", status="in_progress",
                                                 content=content, raw_input={"command": "pytest -q"}))
        await self._update(turn, update_tool_call(tool_call_id, status="completed", content=content))
        tool_call_id = self._new_tool_call_id()
        await self._update(turn, start_tool_call(tool_call_id, "Show the log", kind="read", status="in_progress"))
        await self._update(turn, update_tool_call(tool_call_id, status="completed",
                                                  content=[tool_content(text_block(COLOURED_LOG))]))
        await self._say(turn, "ran")
        return "end_turn"

    async def _cmd_late(self, turn: Turn) -> StopReason:
        """End the turn, then say something SECONDS later (default 0.3): a message after the turn's end."""
        delay = float(turn.args[0]) if turn.args else 0.3
        session_id = turn.session_id

        async def say_later() -> None:
            await asyncio.sleep(delay)
            await self.client.session_update(session_id=session_id,
                                             update=update_agent_message_text("a note after the turn"))

        self._exit_task = asyncio.ensure_future(say_later())
        await self._say(turn, "turn done")
        return "end_turn"

    async def _hostile_html(self, turn: Turn) -> StopReason:
        await self._update(turn, update_agent_thought_text(HOSTILE_MARKDOWN))
        tool_call_id = self._new_tool_call_id()
        block = tool_diff_content("<img src=x onerror=window.pwned=5>", HOSTILE_MARKDOWN)
        await self._update(turn, start_tool_call(tool_call_id, "<img src=x onerror=window.pwned=6>", kind="edit",
                                                 status="in_progress", content=[block]))
        await self._update(turn, update_tool_call(tool_call_id, status="completed",
                                                  content=[tool_content(text_block(HOSTILE_MARKDOWN))]))
        for line in HOSTILE_MARKDOWN.splitlines(keepends=True):
            await self._say(turn, line)
        return "end_turn"

    async def _cmd_orphanpipe(self, turn: Turn) -> StopReason:
        # Exit mid-turn while a grandchild (same group) still holds our stdout: the exit is the process's, not the
        # pipe's. `orphanpipe setsid` puts the grandchild in a session of its own, out of our group's reach.
        new_session = bool(turn.args) and turn.args[0] == "setsid"
        child = subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL, start_new_session=new_session)
        await self._say(turn, f"grandchild {child.pid}")
        await self._raw.flush()
        os._exit(0)

    async def _cmd_closeoutidle(self, turn: Turn) -> StopReason:
        # End the turn, then close stdout and live on, deaf: nothing can answer this session any more.
        async def close_later() -> None:
            await asyncio.sleep(0.3)
            await self._raw.flush()
            self._raw.close()

        self._exit_task = asyncio.ensure_future(close_later())
        await self._say(turn, "closing soon")
        return "end_turn"

    async def _cmd_wedge(self, turn: Turn) -> StopReason:
        # Deaf to session/cancel, stdin EOF and SIGTERM (the loop is blocked): only SIGKILL ends it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        await self._say(turn, "wedged")
        await self._raw.flush()
        time.sleep(3600)  # blocks the loop on purpose
        return "end_turn"

    async def _cmd_error(self, turn: Turn) -> StopReason:
        raise RequestError.internal_error({"details": "scripted prompt failure"})

    async def _cmd_autherr(self, turn: Turn) -> StopReason:
        # What claude-agent-acp answers without an API key: ACP's auth_required (-32000).
        raise RequestError.auth_required({"details": "Authentication required: run /login or set ANTHROPIC_API_KEY"})

    async def _cmd_empty(self, turn: Turn) -> StopReason:
        # A model server that is down, as opencode shows it: the turn ends at once with nothing said.
        return "end_turn"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Scripted ACP agent for tests.")
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
    parser.add_argument("--dispatch-after-replay", action="store_true",
                        help="pick the command from the text after a context replay's last 'User request:'")
    opts = parser.parse_args(argv)
    if opts.load_session and not opts.state_dir:
        parser.error("--load-session requires --state-dir")
    return opts


async def serve(opts: argparse.Namespace) -> None:
    # We own the stdio streams so the raw path can share the SDK's stdout transport.
    reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    agent = ScriptedAgent(opts, RawWriter(writer))
    await run_agent(agent, writer, reader)


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
