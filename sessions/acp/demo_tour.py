"""The demo agent's scripted tour (issue 48): what a new user needs to see of Compozy without a real provider.

A prompt that starts with one or more of these words runs their parts, in this order, in one turn:

- ``tour``: every part below but ``slow``;
- ``plan``: a plan of the turn's steps, then the same plan done;
- ``ask``: a question (ACP elicitation, a form) that a person answers;
- ``edit``: an edit of ``compozy-tour.md`` in the workspace, after a permission request (``approve-reads`` leaves
  it to a person; ``approve-all`` approves it), shown as a diff;
- ``terminal``: a command run in a client terminal (``approve-reads`` asks a person first);
- ``markdown``: a reply in Markdown with code blocks;
- ``slow``: a turn of about 20 s with a tool call every few seconds, to try queue, steer and interrupt.

Only the leading words count, so a prompt in plain English ("please edit the plan") is echoed as before.
Imports only the stdlib and the ``acp`` SDK, like the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

from acp import RequestError
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
    AcceptElicitationResponse,
    AllowedOutcome,
    ElicitationFormSessionMode,
    PermissionOption,
    PlanEntry,
    ToolCallUpdate,
)

PARTS = ("plan", "ask", "edit", "terminal", "markdown")
# What each part's plan entry says.
STEPS = {"ask": "Ask you a question", "edit": "Edit compozy-tour.md (after your permission)",
         "terminal": "Run a command in a terminal", "markdown": "Answer in Markdown with code",
         "slow": "Take about 20 s"}
WORDS = frozenset({"tour", "slow", *PARTS})
TOUR_FILE = "compozy-tour.md"
# `slow`: long enough to queue a prompt, stage a steer and interrupt by hand; a tool call every few steps gives a
# staged steer its tool-result boundary.
SLOW_STEPS = 20
SLOW_STEP_SECONDS = 1.0
SLOW_TOOL_EVERY = 5

MARKDOWN_REPLY = """## What you just saw

1. A **plan**, sent first and again once done.
2. A **question** you answered in a form.
3. A **permission request**, then an **edit** of `{file}` shown as a diff.
4. A **terminal** command and its output.

Code blocks are highlighted and have a copy button:

```python
def greet(name: str) -> str:
    return f"Hello, {{name}}!"
```

```bash
compozy session list --all
```

Try `slow` next: a 20-second turn to queue, steer and interrupt.
"""


def tour_parts(text: str) -> list[str]:
    """The parts a prompt asks for: its leading tour words, in the tour's order (`tour` is all of them but slow,
    `slow` comes last). Empty when the prompt does not start with one."""
    words: set[str] = set()
    for word in re.findall(r"[A-Za-z]+|\S", text.strip()):
        lowered = word.lower()
        if lowered not in WORDS:
            break
        words.add(lowered)
    if "tour" in words:
        words.update(PARTS)
    return [p for p in (*PARTS, "slow") if p in words]


Race = Callable[[Awaitable[Any]], Awaitable[Any]]


class Tour:
    """One turn's tour: the parts run one after the other, each saying what it does."""

    def __init__(self, client: Client, session_id: str, cwd: str, caps: dict[str, Any], race: Race,
                 cancel: asyncio.Event, tool_ids: Callable[[], int]) -> None:
        self.client = client
        self.session_id = session_id
        self.cwd = cwd
        self.caps = caps
        self.race = race
        self.cancel = cancel
        self._tool_ids = tool_ids
        self.greeting = "Hello"
        self._plan: dict[str, PlanEntry] = {}

    async def run(self, parts: list[str]) -> None:
        """The parts in order; with `plan`, the plan first (its first step running) and again at the end, all
        done. Not once per step: every plan update is an entry in the transcript, and nine of them buried the rest."""
        steps = [p for p in parts if p != "plan"]
        if "plan" in parts:
            self._plan = {p: plan_entry(STEPS[p], priority="medium", status="in_progress" if i == 0 else "pending")
                          for i, p in enumerate(steps)}
            await self._send_plan()
        for part in steps:
            await getattr(self, f"_{part}")()
        if "plan" in parts:
            for entry in self._plan.values():
                entry.status = "completed"
            await self._send_plan()
        if parts == ["plan"]:
            await self.say("The plan above is all this prompt asked for.")

    async def say(self, text: str) -> None:
        await self.client.session_update(session_id=self.session_id, update=update_agent_message_text(text))

    async def _send_plan(self) -> None:
        await self.client.session_update(session_id=self.session_id, update=update_plan(list(self._plan.values())))

    def _tool_id(self, kind: str) -> str:
        return f"{kind}-{self._tool_ids()}"

    # ---- the parts -----------------------------------------------------------------------------------

    async def _ask(self) -> None:
        if not isinstance((self.caps.get("elicitation") or {}).get("form"), dict):
            await self.say("The client offers no questions (form elicitation); the greeting stays `Hello`.\n\n")
            return
        mode = ElicitationFormSessionMode.model_validate({"sessionId": self.session_id, "requestedSchema": {
            "type": "object", "required": ["greeting"], "properties": {
                "greeting": {"type": "string", "title": "Greeting", "enum": ["Hello", "Hi", "Howdy"],
                             "description": "the word the tour writes into compozy-tour.md"}}}})
        answer = await self.race(self.client.create_elicitation("Which greeting should the tour write?", mode))
        if isinstance(answer, AcceptElicitationResponse) and answer.content:
            self.greeting = str(answer.content.get("greeting") or self.greeting)
            await self.say(f"You chose **{self.greeting}**.\n\n")
        else:
            await self.say(f"No answer ({getattr(answer, 'action', 'cancel')}); the greeting stays `Hello`.\n\n")

    async def _edit(self) -> None:
        tool_call_id = self._tool_id("edit")
        path = os.path.join(self.cwd, TOUR_FILE)
        title = f"Edit {TOUR_FILE}"
        await self.client.session_update(session_id=self.session_id, update=start_tool_call(
            tool_call_id, title, kind="edit", status="pending", raw_input={"path": path}))
        permission = await self.race(self.client.request_permission(
            session_id=self.session_id,
            tool_call=ToolCallUpdate(tool_call_id=tool_call_id, title=title, kind="edit", status="pending"),
            options=[PermissionOption(option_id="allow", name="Allow the edit", kind="allow_once"),
                     PermissionOption(option_id="reject", name="Reject", kind="reject_once")]))
        if not (isinstance(permission.outcome, AllowedOutcome) and permission.outcome.option_id == "allow"):
            await self._settle(tool_call_id, "failed", "Permission denied: the file is unchanged.")
            await self.say("The edit was not allowed; nothing was written.\n\n")
            return
        old: str | None = None
        with contextlib.suppress(RequestError):  # a missing file is a new one: the diff shows it whole
            old = (await self.race(self.client.read_text_file(session_id=self.session_id, path=path))).content
        base = old or "# Compozy tour\n\n"
        new = base + ("" if base.endswith("\n") else "\n") + f"- {self.greeting} from the Compozy demo tour.\n"
        await self.race(self.client.write_text_file(session_id=self.session_id, path=path, content=new))
        await self.client.session_update(session_id=self.session_id, update=update_tool_call(
            tool_call_id, status="completed", content=[tool_diff_content(path, new, old)]))
        await self.say(f"Wrote `{TOUR_FILE}` in the workspace.\n\n")

    async def _terminal(self) -> None:
        tool_call_id = self._tool_id("run")
        command = "echo 'Compozy tour: a terminal'; ls -1 | head -n 5"
        await self.client.session_update(session_id=self.session_id, update=start_tool_call(
            tool_call_id, "Run: list the workspace", kind="execute", status="in_progress",
            raw_input={"command": command}))
        if not self.caps.get("terminal"):
            await self._settle(tool_call_id, "failed", "The client offers no terminals (deny-all).")
            return
        try:
            created = await self.race(self.client.create_terminal(
                session_id=self.session_id, command="/bin/sh", args=["-c", command], cwd=self.cwd))
        except Exception as exc:  # a refused command fails the tool call, not the turn
            if self.cancel.is_set():
                raise  # the turn was cancelled while the command was being set up: the turn ends
            await self._settle(tool_call_id, "failed", f"The command did not run: {exc}")
            return
        terminal_id = created.terminal_id
        await self.client.session_update(session_id=self.session_id, update=update_tool_call(
            tool_call_id, content=[tool_terminal_ref(terminal_id)]))
        await self.race(self.client.wait_for_terminal_exit(session_id=self.session_id, terminal_id=terminal_id))
        output = await self.race(self.client.terminal_output(session_id=self.session_id, terminal_id=terminal_id))
        await self.client.release_terminal(session_id=self.session_id, terminal_id=terminal_id)
        await self.client.session_update(session_id=self.session_id, update=update_tool_call(
            tool_call_id, status="completed",
            content=[tool_terminal_ref(terminal_id), tool_content(text_block(output.output))]))

    async def _markdown(self) -> None:
        await self.say(MARKDOWN_REPLY.format(file=TOUR_FILE))

    async def _slow(self) -> None:
        """About 20 s: a line a second, a tool call every few; a cancel ends it at once."""
        await self.client.session_update(session_id=self.session_id,
                                         update=update_agent_thought_text("Taking my time (about 20 s)."))
        for step in range(1, SLOW_STEPS + 1):
            if self.cancel.is_set():
                return
            if step % SLOW_TOOL_EVERY == 0:
                tool_call_id = self._tool_id("think")
                await self.client.session_update(session_id=self.session_id, update=start_tool_call(
                    tool_call_id, f"Think, step {step}", kind="think", status="in_progress"))
                await self._settle(tool_call_id, "completed", f"step {step} thought through")
            await self.say(f"Step {step} of {SLOW_STEPS}. ")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cancel.wait(), timeout=SLOW_STEP_SECONDS)
        await self.say("\n\nDone, slowly.")

    async def _settle(self, tool_call_id: str, status: str, text: str) -> None:
        await self.client.session_update(session_id=self.session_id, update=update_tool_call(
            tool_call_id, status=status, content=[tool_content(text_block(text))]))  # type: ignore[arg-type]
