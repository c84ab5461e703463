"""What the agent says of its session outside the transcript, kept on the record: its modes and config options
(select and boolean), its slash commands, its context use and cost, and its own title for the session.

The updates stay event rows as before (the transcript and replay read them); this component also folds them into
the record, so `session status`, the list, the dashboard and `/metrics` show them without replaying events. It
also enforces the cost budget (`[limits] max_cost_usd`, or the agent's own): crossing it stops the session with
stop reason `budget_exceeded`, and a warning marker is written once the context passes 90% of its size. A cost the
budget cannot count (NaN, an infinity, a negative amount, a currency other than USD: sessions/core/money.py) is
refused with a `protocol_violation` row and never stored; under a budget it stops the session too, since a session
whose spending cannot be checked cannot be kept under its cap.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, cast

from compozy_base import metrics
from compozy_base.config.modes import PermissionMode
from sessions.acp.driver import AgentRequestError, TransportClosed
from sessions.core import money
from sessions.core.enums import EventType, FailureKind, MarkerKind, StopReason
from sessions.core.errors import CompozyError, Conflict, InvalidRequest
from sessions.core.jsonobj import JsonObject
from sessions.core.live import MarkerEvidence
from sessions.core.offload import spawn
from sessions.core.record import ConfigOptionDoc, Cost, CostDoc, Mode, Usage

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore

logger = logging.getLogger(__name__)

# The context warning: a marker once the agent's context passes this share of its size (the agent compacts or
# fails soon after; an operator may prefer to start fresh).
CONTEXT_WARNING_SHARE = 0.9
MAX_TITLE_CHARS = 120
_MARKDOWN = re.compile(r"[`*_#>\[\]~]|\]\([^)]*\)")


def plain_title(text: str) -> str:
    """A title as plain text: Markdown marks and link targets dropped, whitespace folded, bounded."""
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = _MARKDOWN.sub("", text)
    return " ".join(text.split())[:MAX_TITLE_CHARS]


def _modes(raw: object) -> Mode | None:
    """ACP `modes` ({currentModeId, availableModes}) as the record's mode."""
    if not isinstance(raw, dict):
        return None
    available = [{"id": str(m["id"]), "name": str(m.get("name") or m["id"])}
                 for m in raw.get("availableModes") or [] if isinstance(m, dict) and m.get("id")]
    return Mode(current=str(raw.get("currentModeId") or ""), available=available)


def _mode_option(options: list[ConfigOptionDoc]) -> ConfigOptionDoc | None:
    """A config option of category `mode` (agents that expose modes as a select)."""
    return next((o for o in options if o.get("category") == "mode" and o.get("type", "select") == "select"), None)


def _options(raw: object) -> list[ConfigOptionDoc] | None:
    """The select and boolean config options the agent offers, in a compact shape for the record."""
    if not isinstance(raw, list):
        return None
    kept: list[ConfigOptionDoc] = []
    for option in raw:
        if not isinstance(option, dict) or not option.get("id") or option.get("type", "select") not in (
                "select", "boolean"):
            continue
        entry: ConfigOptionDoc = {"id": str(option["id"]), "name": str(option.get("name") or option["id"]),
                                  "type": option.get("type", "select"), "current": option.get("currentValue")}
        if option.get("category"):
            entry["category"] = str(option["category"])
        if isinstance(option.get("options"), list):
            entry["options"] = [{"value": str(v.get("value")), "name": str(v.get("name") or v.get("value"))}
                                for v in option["options"] if isinstance(v, dict) and "value" in v]
        kept.append(entry)
    return kept


class AgentState:
    """Folds the agent's session-level updates into the session's record."""

    def __init__(self, session: SessionCore) -> None:
        self._session = session
        self._warned_context = False
        self._budget_hit = False
        self._turn_cost_start: float | None = None

    # ---- from the ACP session's opening and its updates ----------------------------------------------

    def opened(self, result: JsonObject) -> None:
        """The answer to session/new, load or resume: its modes and config options."""
        rec = self._session.rec
        options = _options(result.get("configOptions"))
        if options is not None:
            rec.config_options = cast(list[JsonObject], options)  # the model keeps them as plain dicts
        mode = _modes(result.get("modes"))
        if mode is None and options is not None and (select := _mode_option(options)) is not None:
            mode = Mode(current=str(select.get("current") or ""),
                        available=[{"id": o["value"], "name": o["name"]} for o in select.get("options", [])])
        if mode is not None:
            rec.mode = mode

    def update(self, kind: str, update: JsonObject) -> bool:
        """A session/update the record cares about; True when the record changed (the caller saves it)."""
        rec = self._session.rec
        if kind == "current_mode_update" and update.get("currentModeId"):
            rec.mode = Mode(current=str(update["currentModeId"]), available=rec.mode.available if rec.mode else [])
            return True
        if kind == "config_option_update":
            options = _options(update.get("configOptions"))
            if options is None:
                return False
            rec.config_options = cast(list[JsonObject], options)
            if (select := _mode_option(options)) is not None and rec.mode is not None:
                rec.mode = Mode(current=str(select.get("current") or ""), available=rec.mode.available)
            return True
        if kind == "available_commands_update" and isinstance(update.get("availableCommands"), list):
            rec.available_commands = [{"name": str(c["name"]), "description": str(c.get("description") or "")}
                                      for c in update["availableCommands"] if isinstance(c, dict) and c.get("name")]
            return True
        if kind == "usage_update":
            return self._usage(update)
        if kind == "session_info_update" and isinstance(update.get("title"), str):
            return self._agent_title(update["title"])
        return False

    def _usage(self, update: JsonObject) -> bool:
        rec = self._session.rec
        usage = rec.usage.model_copy() if rec.usage else Usage()
        if isinstance(update.get("used"), int):
            usage.context_used = update["used"]
        if isinstance(update.get("size"), int):
            usage.context_size = update["size"]
        refused = None
        if update.get("cost") is not None:  # ACP's cost is optional: null is "not reported", not a lie
            cost, refused = money.cost(update["cost"])
            if cost is not None:
                before = _counted(usage) or 0.0
                usage.cost = Cost(amount=cost["amount"], currency=cost["currency"])
                if usage.cost.amount > before:
                    metrics.COST.labels(provider=rec.provider or "", agent=rec.agent_name,
                                        currency=usage.cost.currency).inc(usage.cost.amount - before)
            else:
                self._session.protocol_violation(f"a usage_update whose cost was refused: {refused}")
        rec.usage = usage
        self._context_warning(usage)
        self._budget(usage, refused)
        return True

    def _agent_title(self, title: str) -> bool:
        """The agent's own title wins over the auto-title pass, never over a name a person gave."""
        rec = self._session.rec
        text = plain_title(title)
        if not text or rec.name_source == "user" or (rec.name and rec.name_source is None):
            return False
        if rec.name == text and rec.name_source == "agent":
            return False
        rec.name, rec.name_source = text, "agent"
        return True

    async def start_asking(self, policy: str) -> None:
        """A new ACP session starts in the provider's `ask_mode` unless the policy approves everything anyway.

        claude-agent-acp opens in `auto`, where claude's own classifier decides on commands that write and the client is
        never asked: under deny-all or approve-reads a command could run that the policy would have refused. In its
        `default` mode claude asks first (read-only commands still run unasked: claude's rule, not ours). A person may
        switch to another mode afterwards; that is their choice, recorded like any other."""
        rec = self._session.rec
        want = self._session.provider.ask_mode
        if (not want or policy == PermissionMode.APPROVE_ALL or rec.mode is None or rec.mode.current == want
                or want not in [m["id"] for m in rec.mode.available]):
            return
        try:
            await self.set_mode(want)
        except CompozyError as exc:  # visible on the session: the policy may not hold for this agent
            logger.warning("session %s: could not start in mode %r: %s", rec.id, want, exc)
            self._session.record(EventType.SYSTEM, {
                "title": "mode_not_changed", "text": f"could not start in mode {want!r} ({exc}); the agent may act "
                                                      f"without asking under the {policy} policy"}, turn_id="")

    # ---- a person's choice ---------------------------------------------------------------------------

    async def set_mode(self, mode_id: str) -> None:
        """Switch the agent's mode: `session/set_mode`, or the mode config option where the agent exposes modes as
        one. The record follows the agent's answer (and any `current_mode_update` it sends)."""
        session, rec = self._session, self._session.rec
        if session.agent is None or rec.mode is None or not rec.mode.available:
            raise Conflict("the agent offers no modes", code="modes_unsupported")
        if mode_id not in [m["id"] for m in rec.mode.available]:
            raise InvalidRequest(f"mode {mode_id!r} is not one the agent offers ("
                                 f"{', '.join(m['id'] for m in rec.mode.available)})", code="invalid_mode")
        option = _mode_option(cast(list[ConfigOptionDoc], rec.config_options or []))  # as `_options` wrote them
        before = rec.mode.current  # the agent may say `current_mode_update` before it answers
        try:
            if option is not None:
                answer = await session.agent.request("session/set_config_option", {
                    "sessionId": rec.acp_session_id, "configId": option["id"], "value": mode_id}, timeout=30)
                if isinstance(answer, dict) and (options := _options(answer.get("configOptions"))) is not None:
                    rec.config_options = cast(list[JsonObject], options)
            else:
                await session.agent.request("session/set_mode", {"sessionId": rec.acp_session_id, "modeId": mode_id},
                                            timeout=30)
        except (AgentRequestError, TransportClosed, TimeoutError) as exc:
            raise Conflict(f"the agent refused mode {mode_id!r}: {exc}", code="mode_rejected") from exc
        rec.mode = Mode(current=mode_id, available=rec.mode.available if rec.mode else [])
        session.record(EventType.SYSTEM, {"title": "mode_changed", "text": f"mode {before or '?'} -> {mode_id}",
                                          "raw": {"from": before, "to": mode_id}}, turn_id="")
        await session.persist()

    # ---- per turn: its cost ------------------------------------------------------------------------

    def turn_started(self) -> None:
        self._turn_cost_start = _counted(self._session.rec.usage) or 0.0

    def turn_cost(self) -> CostDoc | None:
        """The cost of the turn that just ended ({amount, currency}), when the agent reports cost. Never below 0:
        a cumulative cost that went down (an agent that restarted its count, or lied) credits nothing."""
        spent = _counted(self._session.rec.usage)
        if spent is None or self._turn_cost_start is None:
            return None
        return {"amount": round(max(0.0, spent - self._turn_cost_start), 6), "currency": money.BUDGET_CURRENCY}

    # ---- limits --------------------------------------------------------------------------------------

    def _context_warning(self, usage: Usage) -> None:
        if self._warned_context or not usage.context_used or not usage.context_size:
            return
        if usage.context_used >= CONTEXT_WARNING_SHARE * usage.context_size:
            self._warned_context = True
            share = round(100 * usage.context_used / usage.context_size)
            self._session.marker(MarkerKind.CONTEXT_NEAR_LIMIT, f"Context {share}% full "
                                 f"({usage.context_used} of {usage.context_size})",
                                 {"context_used": usage.context_used, "context_size": usage.context_size})

    def budget_usd(self) -> float | None:
        """The cap on this session's cost in USD, None for none: its agent's `max_cost_usd`, else `[limits]
        max_cost_usd` (0 there = none). A task's attempt carries what its earlier attempts left (the record's
        `budget_usd`), never more than the configured cap; a carried value that is no amount (NaN, negative) leaves
        nothing, rather than no cap."""
        session = self._session
        agent = session.config.agents.get(session.rec.agent_name)
        configured = (agent.max_cost_usd if agent is not None and agent.max_cost_usd else 0.0) \
            or session.config.max_cost_usd
        if session.rec.budget_usd is None:
            return configured or None
        left = money.amount(session.rec.budget_usd)
        if left is None:
            return 0.0
        return min(left, configured) if configured else left

    def _budget(self, usage: Usage, refused: str | None = None) -> None:
        """Stop the session once its cost reaches the cap, or once it reported a cost the cap cannot count."""
        cap = self.budget_usd()
        if self._budget_hit or cap is None:
            return
        spent = _counted(usage)
        if refused is not None:
            summary = f"{refused}: the budget of {cap:.2f} USD cannot be checked against it"
            evidence: MarkerEvidence = {"refused": refused, "budget": cap}
        elif spent is not None and spent >= cap:
            summary = f"cost {spent:.2f} USD reached the budget of {cap:.2f} USD"
            evidence = {"cost": spent, "budget": cap}
        else:
            return
        self._budget_hit = True
        logger.warning("session %s: %s; stopping it", self._session.rec.id, summary)
        self._session.marker(MarkerKind.BUDGET_EXCEEDED, summary, evidence)
        spawn(self._stop_for_budget(summary))

    async def _stop_for_budget(self, summary: str) -> None:
        failure = await self._session.failure(FailureKind.BUDGET_EXCEEDED, summary)
        await self._session.stop(StopReason.BUDGET_EXCEEDED, summary, failure=failure)


def _counted(usage: Usage | None) -> float | None:
    """The record's cumulative cost in USD as a budget counts it; None when there is none it can count (none reported,
    or a record an earlier version wrote with a NaN, a negative amount or another currency)."""
    if usage is None or usage.cost is None:
        return None
    counted, _ = money.cost({"amount": usage.cost.amount, "currency": usage.cost.currency})
    return counted["amount"] if counted is not None else None
