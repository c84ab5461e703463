"""Auto-title (`roles.auto_title`): one bounded pass through a throwaway ACP agent after the first
persisted assistant reply. The pass can do nothing but answer: every permission and fs request is refused."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from compozy_base.config.loader import ProviderConfig
from sessions.acp import client_side
from sessions.acp.driver import AgentProcess
from sessions.acp.mapping import map_update
from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.redact import redact_text

logger = logging.getLogger(__name__)

TITLE_REQUEST = "[compozy:title]"
TITLE_TIMEOUT_SECONDS = 45.0
MAX_TITLE_CHARS = 80
EXCERPT_CHARS = 600
# Title passes running at once. Each starts a whole agent process: twenty first turns finishing together
# once started twenty on 2 cores and stalled every live stream for seconds (bench/README.md).
TITLE_PASSES = asyncio.Semaphore(2)
_MARKDOWN = MarkdownIt("commonmark")


def title_prompt(user_text: str, reply_text: str) -> str:
    """The title request. The excerpts are redacted first: a title lands in meta.json, the catalog and every
    list, and a title agent that copies a key (`aws_secret_access_key …` became a title) must have none to copy.
    Redacted before the cut, with a margin, so a key cut in two at the excerpt's end is still recognised."""
    user, reply = (redact_text(text[:EXCERPT_CHARS + 1024])[:EXCERPT_CHARS] for text in (user_text, reply_text))
    return (f"{TITLE_REQUEST}\nWrite a short title (at most 6 words) for this conversation. Reply with the title "
            f"only, no quotes.\nUser: {user}\nAssistant: {reply}")


def echoes_request(candidate: str, request: str) -> bool:
    """True when `candidate` repeats the request instead of answering it. Some agents echo their prompt
    (or start a reply by quoting it): taken as a title, that named every session `[compozy:title]`."""
    if TITLE_REQUEST in candidate:
        return True
    folded = candidate.casefold()
    return any(folded.startswith(line) for line in (ln.strip().casefold() for ln in request.splitlines()) if line)


def plain_text(line: str) -> str:
    """One line of Markdown as a reader sees it: code spans, emphasis, links, headings and list bullets gone
    (a title read "Review of `calc.py"). markdown-it-py is what rich renders Markdown with."""
    out: list[str] = []
    for token in _MARKDOWN.parse(line):
        if token.type in ("code_block", "fence"):
            out.append(token.content)
        for child in token.children or []:
            if child.type in ("text", "code_inline"):
                out.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                out.append(" ")
    # A backtick left over opened a code span that never closed: markup, not a word.
    return " ".join("".join(out).replace("`", "").split())


def clean_title(text: str, request: str = "") -> str | None:
    """The first line of the reply with words in it, as plain text, as a title; None when there is none or it echoes
    `request`."""
    line = ""
    for raw in redact_text(text).splitlines():
        line = re.sub(r"^(title:\s*)", "", raw.strip(), flags=re.IGNORECASE)
        line = re.sub(r"^(title:\s*)", "", plain_text(line), flags=re.IGNORECASE).strip().strip("\"'`*#_~").strip()
        if line:
            break
    if not line:
        return None
    if echoes_request(line, request or TITLE_REQUEST):
        logger.info("auto-title pass ignored an echo of its own request: %.80r", line)
        return None
    return line if len(line) <= MAX_TITLE_CHARS else line[: MAX_TITLE_CHARS - 1].rstrip() + "…"


async def generate_title(provider: ProviderConfig, cwd: Path, user_text: str, reply_text: str) -> str | None:
    chunks: list[str] = []

    def on_update(params: JsonObject) -> None:
        update = params.get("update")
        mapped = map_update(update, {}) if isinstance(update, dict) else None
        if mapped is not None and mapped[0] == EventType.AGENT_MESSAGE:
            chunks.append(str(mapped[1].get("text") or ""))

    async def refuse(method: str, params: JsonObject) -> Any:
        from acp.exceptions import RequestError

        if method == "session/request_permission":
            return client_side.permission_response(None)
        raise RequestError.method_not_found(method)

    agent = AgentProcess(provider.command, cwd=cwd, env=provider.env, on_update=on_update, on_request=refuse)
    try:
        async with asyncio.timeout(TITLE_TIMEOUT_SECONDS):
            await agent.start()
            await agent.initialize()
            opened = await agent.request("session/new", {"cwd": str(cwd), "mcpServers": []})
            request = title_prompt(user_text, reply_text)
            await agent.request("session/prompt", {"sessionId": opened["sessionId"], "prompt": [
                {"type": "text", "text": request}]})
        return clean_title("".join(chunks), request)
    except Exception as exc:
        logger.info("auto-title pass failed: %s", exc, exc_info=True)
        return None
    finally:
        with contextlib.suppress(Exception):
            await agent.shutdown(grace=0.5)
