"""Auto-title (`roles.auto_title`): one bounded pass through a throwaway ACP agent after the first
persisted assistant reply. The pass can do nothing but answer: every permission and fs request is refused.

The title agent is `[roles.auto_title] agent` (empty: the invoking session's, as the session runs it), then the
role's provider, model and reasoning effort override it; `fallback_chain` routes are tried in order while a route
cannot open the title session (start, initialize, session/new, model and effort applied), each attempt recorded
as `role.fallback.used`. Once a route opened it, the pass is never rerouted (config reference §6)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from compozy_base.config.agents import ProviderConfig
from compozy_base.config.loader import Config
from sessions.acp import client_side
from sessions.acp.driver import AgentProcess
from sessions.acp.mapping import map_update
from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.redact import redact_text
from sessions.runtime.options import plan

logger = logging.getLogger(__name__)

TITLE_REQUEST = "[compozy:title]"
TITLE_TIMEOUT_SECONDS = 45.0
MAX_TITLE_CHARS = 80
EXCERPT_CHARS = 600
# Title passes running at once. Each starts a whole agent process: twenty first turns finishing together
# once started twenty on 2 cores and stalled every live stream for seconds (bench/README.md).
TITLE_PASSES = asyncio.Semaphore(2)
_MARKDOWN = MarkdownIt("commonmark")


@dataclass(frozen=True)
class Route:
    """Where a title pass runs: a provider, and the model and reasoning effort applied through its config options
    ("": the agent's own). `model_explicit`: a model that is not offered refuses the route (one that came from the
    provider's default is only not applied, as for a session)."""

    provider: ProviderConfig
    model: str = ""
    reasoning_effort: str = ""
    model_explicit: bool = False

    def public(self) -> dict[str, str]:
        return {"provider": self.provider.name, "model": self.model, "reasoning_effort": self.reasoning_effort}


@dataclass(frozen=True)
class TitleOutcome:
    title: str | None
    route: int | None = None  # the index of the route that opened the title session; None when none did


class RouteRefused(Exception):
    """A route could not open the title session: the next route is tried."""


def title_routes(config: Config, *, agent: str, provider: str, model: str, reasoning_effort: str,
                 model_explicit: bool) -> list[Route]:
    """The title pass's routes, in order (config reference §6). The primary: `[roles.auto_title] agent` as its
    definition resolves (provider, model, effort; no agent: the invoking session's `agent`, `provider`, `model`,
    `reasoning_effort`, as the session runs), then the role's own provider, model and effort over it (a model
    does not carry over to another provider: model ids are the provider's). Then each `fallback_chain` route."""
    role = config.auto_title
    if role.agent:
        definition = config.agents[role.agent]
        provider = definition.provider or config.default_provider
        model, reasoning_effort = definition.model, definition.reasoning_effort
        model_explicit = bool(model)
    if role.provider and role.provider != provider:
        provider, model, model_explicit = role.provider, "", False
    chosen = config.providers[provider]
    primary = Route(chosen, role.model or model or chosen.default_model, role.reasoning_effort or reasoning_effort,
                    bool(role.model) or (model_explicit and bool(model)))
    chain = [Route(config.providers[r.provider], r.model or config.providers[r.provider].default_model,
                   r.reasoning_effort, bool(r.model)) for r in role.fallback_chain]
    return [primary, *chain]


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


async def generate_title(routes: Sequence[Route], cwd: Path, user_text: str, reply_text: str, *,
                         on_fallback: Callable[[int, Route, str], None] | None = None,
                         confine: Callable[[Sequence[str]], list[str]] = list) -> TitleOutcome:
    """One title pass: each route in turn until one opens the title session, then its answer as the title (None
    when it gave none). `on_fallback(index, route, why the route before failed)` is called before each fallback."""
    request = title_prompt(user_text, reply_text)
    reason = ""
    for index, route in enumerate(routes):
        if index and on_fallback is not None:
            on_fallback(index, route, reason)
        try:
            return TitleOutcome(await _run_route(route, cwd, request, confine), index)
        except RouteRefused as exc:
            reason = str(exc)
            logger.info("auto-title route %d (%s) could not open the title session: %s", index,
                        route.provider.name, reason)
        except Exception as exc:  # after the route opened the title session: never rerouted
            logger.info("auto-title pass failed: %s", exc, exc_info=True)
            return TitleOutcome(None, index)
    logger.info("auto-title pass failed: no route opened the title session (%s)", reason)
    return TitleOutcome(None, None)


async def _run_route(route: Route, cwd: Path, request: str,
                     confine: Callable[[Sequence[str]], list[str]] = list) -> str | None:
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

    provider = route.provider
    # The session's own sandbox: it is the same kind of agent, asked for a title.
    agent = AgentProcess(provider.command, cwd=cwd, env=provider.env, on_update=on_update, on_request=refuse,
                         confine=confine)
    try:
        try:
            async with asyncio.timeout(TITLE_TIMEOUT_SECONDS):
                session_id = await _open(agent, route, cwd)
        except TimeoutError as exc:
            raise RouteRefused(f"the title session did not open within {TITLE_TIMEOUT_SECONDS:.0f} s") from exc
        async with asyncio.timeout(TITLE_TIMEOUT_SECONDS):
            await agent.request("session/prompt", {"sessionId": session_id, "prompt": [
                {"type": "text", "text": request}]})
        return clean_title("".join(chunks), request)
    finally:
        with contextlib.suppress(Exception):
            await agent.shutdown(grace=0.5)


async def _open(agent: AgentProcess, route: Route, cwd: Path) -> str:
    """Start the title agent and open its session with the route's model and effort: the title session is accepted
    when this returns. RouteRefused when it could not be (the next route is tried)."""
    try:
        await agent.start()
        await agent.initialize()
        opened = await agent.request("session/new", {"cwd": str(cwd), "mcpServers": []})
        session_id = str(opened["sessionId"])
        options = opened.get("configOptions") if isinstance(opened.get("configOptions"), list) else []
        steps = plan(options, model=route.model, model_explicit=route.model_explicit,
                     reasoning_effort=route.reasoning_effort, speed="normal", models=opened.get("models"))
        sets = [*steps.sets, *([("model", "", steps.set_model)] if steps.set_model else [])]
        for _, config_id, value in sets:
            await agent.request("session/set_config_option" if config_id else "session/set_model",
                                {"sessionId": session_id, "configId": config_id, "value": value} if config_id
                                else {"sessionId": session_id, "modelId": value})
    except Exception as exc:
        raise RouteRefused(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc
    rejected = {what: r for what, r in steps.resolutions.items() if r["status"] == "rejected"}
    if rejected:
        raise RouteRefused("; ".join(f"{what} {r['requested']!r} rejected ({r['reason']})"
                                     for what, r in rejected.items()))
    return session_id
