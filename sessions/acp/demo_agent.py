#!/usr/bin/env python3
"""Compozy's built-in demo agent: a real, offline, deterministic ACP agent.

Run it as ``python -m sessions.acp.demo_agent`` or ``python path/to/demo_agent.py``; it
speaks ACP (JSON-RPC 2.0, one JSON object per line) on stdin/stdout and logs to stderr.
It imports only the stdlib and the ``acp`` SDK so it works without Django or the package.

Behaviour per prompt: one thought chunk, then the reply
``Hello from the Compozy demo agent. You said: <prompt>`` in about five message chunks.
When the prompt says ``read <relative path>`` it first runs a real tool call: it asks the
client for permission and reads the file through the client's ``fs/read_text_file``.
A prompt that starts with a tour word (``tour``, ``slow``, ``plan``, ``ask``, ``edit``, ``terminal``,
``markdown``) runs the scripted tour instead (``sessions/acp/demo_tour.py``).
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this file's directory (the sessions.acp package) first on sys.path,
# where a sibling module could shadow a stdlib one (say a future ``select.py``).
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import asyncio
import contextlib
import itertools
import logging
import re
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.helpers import (
    start_read_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.interfaces import Agent, Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
    StopReason,
    TextContentBlock,
    ToolCallUpdate,
)

from sessions.acp.demo_tour import Tour, tour_parts

log = logging.getLogger("compozy-demo")

T = TypeVar("T")

AGENT_NAME = "compozy-demo"
AGENT_VERSION = "0.1.0"
REPLY_CHUNKS = 5
PREVIEW_CHARS = 200
# Pause between chunks at speed "normal" so streaming is visible in a UI (and cancellable).
NORMAL_CHUNK_DELAY = 0.03

# id -> (label, {value: label}, default value)
CONFIG_OPTIONS: dict[str, tuple[str, dict[str, str], str]] = {
    "model": ("Model", {"demo-small": "Demo small", "demo-large": "Demo large"}, "demo-small"),
    "speed": ("Speed", {"normal": "Normal", "fast": "Fast"}, "normal"),
}

# "read <path>": the path must look like a relative file path, and common words that follow
# "read" in plain English are not paths ("read the docs", "read it").
_READ_RE = re.compile(r"\bread\s+[`'\"]?([\w./-]+)", re.IGNORECASE)
_NOT_PATHS = frozenset({"a", "an", "the", "this", "that", "it", "my", "your", "me", "file", "from", "and", "to"})


class Cancelled(Exception):
    """session/cancel arrived while the turn was waiting on something."""


@dataclass(slots=True)
class DemoSession:
    cwd: str
    config: dict[str, str] = field(default_factory=lambda: {k: v[2] for k, v in CONFIG_OPTIONS.items()})
    cancel: asyncio.Event | None = None


TITLE_REQUEST = "[compozy:title]"


def demo_title(request: str) -> str:
    """The first words of the user's message, capitalised: deterministic and offline."""
    for line in request.splitlines():
        if line.startswith("User: "):
            words = re.findall(r"[\w'-]+", line[len("User: "):])[:6]
            if words:
                return " ".join(w.capitalize() if i == 0 else w for i, w in enumerate(words))
    return "Demo session"


def split_words(text: str, parts: int) -> list[str]:
    """Split ``text`` into at most ``parts`` chunks on word boundaries; chunks concatenate to ``text``."""
    words = re.findall(r"\s*\S+\s*", text) or [text]
    parts = max(1, min(parts, len(words)))
    base, extra = divmod(len(words), parts)
    chunks: list[str] = []
    start = 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        chunks.append("".join(words[start:end]))
        start = end
    return chunks


def user_request(text: str) -> str:
    """What the person asked, without a context replay Compozy prepends after a reactivation (the projection's
    `<compozy_context_replay>` block, then `User request: …`): a replayed "read x" must not run the tool again,
    and echoing the replay would nest it inside the next one."""
    if "</compozy_context_replay>" in text and "User request: " in text:
        return text.rsplit("User request: ", 1)[1]
    return text


def find_read_path(text: str) -> str | None:
    """The relative path after the word ``read``, if the prompt asks to read one."""
    for match in _READ_RE.finditer(text):
        path = match.group(1).rstrip(".,;:!?")
        if path and path.lower() not in _NOT_PATHS and not os.path.isabs(path):
            return path
    return None


def error_text(exc: BaseException) -> str:
    if isinstance(exc, RequestError):
        # Clients usually put the human-readable cause in data.details; show that, not "Internal error".
        details = exc.data.get("details") if isinstance(exc.data, dict) else None
        if isinstance(details, str) and details:
            return details
        return f"{exc} ({exc.data})" if exc.data else str(exc)
    return str(exc) or type(exc).__name__


class DemoAgent:
    def __init__(self) -> None:
        self._conn: Client | None = None
        self._sessions: dict[str, DemoSession] = {}
        self._tool_ids = itertools.count(1)
        self._client_caps: dict[str, Any] = {}  # what the client offered at initialize (the tour's terminal, questions)

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def client(self) -> Client:
        if self._conn is None:
            raise RequestError.internal_error({"details": "no client connection"})
        return self._conn

    def _session(self, session_id: str) -> DemoSession:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        return session

    @staticmethod
    def _config_options(session: DemoSession) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        return [
            SessionConfigOptionSelect(
                type="select",
                id=config_id,
                name=label,
                category="model" if config_id == "model" else None,
                current_value=session.config[config_id],
                options=[SessionConfigSelectOption(value=v, name=n) for v, n in values.items()],
            )
            for config_id, (label, values, _) in CONFIG_OPTIONS.items()
        ]

    # ---- lifecycle -------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **_: Any) -> InitializeResponse:
        if client_capabilities is not None:
            self._client_caps = client_capabilities.model_dump(mode="json", exclude_none=True)
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name=AGENT_NAME, title="Compozy demo agent", version=AGENT_VERSION),
        )

    async def authenticate(self, method_id: str, **_: Any) -> None:
        return None  # nothing to authenticate; no API keys by design

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session_id = f"demo-{uuid.uuid4().hex}"
        session = DemoSession(cwd=cwd)
        self._sessions[session_id] = session
        return NewSessionResponse(session_id=session_id, config_options=self._config_options(session))

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        # Sessions live in memory only, so a load works within this process and fails after a restart.
        session = self._session(session_id)
        session.cwd = cwd
        return LoadSessionResponse(config_options=self._config_options(session))

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **_: Any
    ) -> SetSessionConfigOptionResponse:
        session = self._session(session_id)
        spec = CONFIG_OPTIONS.get(config_id)
        if spec is None:
            raise RequestError.invalid_params({"details": f"unknown config option {config_id!r}"})
        if not isinstance(value, str) or value not in spec[1]:
            raise RequestError.invalid_params(
                {"details": f"{config_id} must be one of {sorted(spec[1])}, got {value!r}"}
            )
        session.config[config_id] = value
        return SetSessionConfigOptionResponse(config_options=self._config_options(session))

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.cancel is not None:
            session.cancel.set()

    # ---- prompt turn -----------------------------------------------------------------------

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        session = self._session(session_id)
        # Set before the first await so a cancel sent right after the prompt is never missed.
        cancel = asyncio.Event()
        session.cancel = cancel
        text = "\n".join(block.text for block in prompt if isinstance(block, TextContentBlock))
        try:
            stop = await self._turn(session_id, session, text, cancel)
        except Cancelled:
            stop = "cancelled"
        finally:
            if session.cancel is cancel:
                session.cancel = None
        return PromptResponse(stop_reason=stop)

    async def _turn(self, session_id: str, session: DemoSession, text: str, cancel: asyncio.Event) -> StopReason:
        if text.startswith(TITLE_REQUEST):
            # Compozy's auto-title pass: answer with a short title, deterministically.
            await self.client.session_update(session_id=session_id,
                                             update=update_agent_message_text(demo_title(text)))
            return "end_turn"
        delay = NORMAL_CHUNK_DELAY if session.config["speed"] == "normal" else 0.0
        await self.client.session_update(
            session_id=session_id, update=update_agent_thought_text("Reading the request.")
        )
        await self._pause(cancel, delay)
        request = user_request(text)
        parts = tour_parts(request)
        if parts:
            tour = Tour(self.client, session_id, session.cwd, self._client_caps,
                        lambda awaitable: self._race(cancel, awaitable), cancel, lambda: next(self._tool_ids))
            await tour.run(parts)
            return "cancelled" if cancel.is_set() else "end_turn"
        path = find_read_path(request)
        if path is not None:
            await self._read_tool(session_id, session, path, cancel)
        reply = f"Hello from the Compozy demo agent. You said: {request}"
        for chunk in split_words(reply, REPLY_CHUNKS):
            if cancel.is_set():
                return "cancelled"
            await self.client.session_update(session_id=session_id, update=update_agent_message_text(chunk))
            await self._pause(cancel, delay)
        return "cancelled" if cancel.is_set() else "end_turn"

    async def _read_tool(self, session_id: str, session: DemoSession, path: str, cancel: asyncio.Event) -> None:
        tool_call_id = f"read-{next(self._tool_ids)}"
        abs_path = os.path.normpath(os.path.join(session.cwd, path))
        title = f"Read {path}"
        await self.client.session_update(
            session_id=session_id, update=start_read_tool_call(tool_call_id, title, abs_path)
        )

        async def finish(ok: bool, message: str) -> None:
            await self.client.session_update(
                session_id=session_id,
                update=update_tool_call(
                    tool_call_id,
                    status="completed" if ok else "failed",
                    content=[tool_content(text_block(message))],
                ),
            )

        try:
            permission = await self._race(
                cancel,
                self.client.request_permission(
                    session_id=session_id,
                    tool_call=ToolCallUpdate(tool_call_id=tool_call_id, title=title, kind="read", status="pending"),
                    options=[
                        PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
                        PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                    ],
                ),
            )
            outcome = permission.outcome
            if not (isinstance(outcome, AllowedOutcome) and outcome.option_id == "allow"):
                await finish(False, "Permission denied.")
                return
            result = await self._race(cancel, self.client.read_text_file(session_id=session_id, path=abs_path))
        except Cancelled:
            await finish(False, "Cancelled.")
            raise
        except Exception as exc:  # noqa: BLE001 - the tool fails, not the agent: logged, told to the client
            log.warning("read tool for %s failed: %s", abs_path, error_text(exc))
            await finish(False, f"Could not read {path}: {error_text(exc)}")
            return
        await finish(True, result.content[:PREVIEW_CHARS])

    @staticmethod
    async def _pause(cancel: asyncio.Event, delay: float) -> None:
        if delay <= 0:
            await asyncio.sleep(0)  # still yield so a session/cancel can be processed
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cancel.wait(), timeout=delay)

    @staticmethod
    async def _race(cancel: asyncio.Event, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the turn is cancelled first (a client may never answer)."""
        task = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:  # the request was given up on: its failure answers nothing
            log.warning("a request given up on failed", exc_info=True)
        raise Cancelled


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="compozy-demo: %(levelname)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        # The SDK's router answers method-not-found for a method an agent does not define (fork, list, modes…);
        # its `Agent` Protocol lists them all, so a partial agent is cast to it.
        asyncio.run(run_agent(cast("Agent", DemoAgent())))


if __name__ == "__main__":
    main()
