"""ACP `terminal/*` requests answered for one session: the permission policy decides (execute actions), the
terminals themselves live in terminals.py, and what ran is recorded (`system` rows titled `terminal_created` and
`terminal_exited`, the output's tail bounded and redacted) so the session page and the evidence show it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sessions.core.enums import EventType
from sessions.core.jsonobj import JsonObject
from sessions.core.redact import bound_tail
from sessions.core.visible import visible
from sessions.runtime.confinement import confiner
from sessions.runtime.terminals import ExitStatus, Terminal, TerminalRefused, Terminals

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore

logger = logging.getLogger(__name__)

# How much of a terminal's output its `terminal_exited` row keeps: the end, where a failure usually is.
RECORDED_OUTPUT_BYTES = 16 * 1024


class ExecuteApproval(Protocol):
    @property
    def mode(self) -> str: ...

    async def approve_execute(self, tool_call_id: str, argv: list[str]) -> bool: ...


def offered(mode: str) -> bool:
    """Whether `clientCapabilities.terminal` is offered: not under deny-all, where no command may ever run."""
    return mode in ("approve-all", "approve-reads")


class TerminalGateway:
    def __init__(self, session: SessionCore, approval: ExecuteApproval) -> None:
        self._session = session
        self._approval = approval
        self._terminals: Terminals | None = None
        self._recorded_exit: set[str] = set()
        # One `terminal/output` answer at a time: each carries up to a megabyte, encoded and written on the loop
        # as its handler returns. 200 polls sent at once were all answered in one loop iteration (2.2 s with no
        # timer run); one at a time, each answer is its own iteration and the loop's other work runs between them.
        self._answering = asyncio.Lock()

    @property
    def terminals(self) -> Terminals:
        if self._terminals is None:  # built at first use: the session's cwd and roots are settled by then
            session = self._session
            self._terminals = Terminals(
                session.roots, Path(session.rec.cwd), session.provider.env,
                run_mark=lambda: session.agent.mark if session.agent is not None else None,
                confine=confiner(session), most=session.config.max_terminals_per_session)
        return self._terminals

    async def serve(self, method: str, params: JsonObject) -> JsonObject | ExitStatus:  # ACP terminal/*
        from acp.exceptions import RequestError

        try:
            if method == "terminal/create":
                return await self._create(params)
            terminal = self.terminals.get(params)
            if method == "terminal/output":
                async with self._answering:
                    text = await terminal.text()
                    await asyncio.sleep(0)  # the answer before this one is written before this one is built
                status = terminal.exit_status()
                return {"output": text, "truncated": terminal.truncated,
                        **({"exitStatus": status} if status else {})}
            if method == "terminal/wait_for_exit":
                status = await self.terminals.wait_for_exit(terminal)
                await self._record_exit(terminal)
                return status
            if method == "terminal/kill":
                await self.terminals.kill(terminal)
                return {}
            if method == "terminal/release":
                await self.terminals.release(terminal)
                await self._record_exit(terminal)
                return {}
        except TerminalRefused as exc:
            raise RequestError.invalid_params({"reason": str(exc)}) from exc
        raise RequestError.method_not_found(method)

    async def _create(self, params: JsonObject) -> JsonObject:
        from acp.exceptions import RequestError

        raw_args = params.get("args")
        argv = [str(params.get("command") or ""), *(map(str, raw_args) if isinstance(raw_args, list) else ())]
        command = " ".join(argv)
        call_id = f"terminal-{len(self.terminals) + 1}"
        if not offered(self._approval.mode) or not await self._approval.approve_execute(call_id, argv):
            self._session.record(EventType.PERMISSION, {
                "action": "terminal/create", "resource": visible(command), "decision": "denied",
                "title": visible(f"Run: {command}"), "decision_source": f"policy:{self._approval.mode}"})
            raise RequestError.invalid_params({"reason": f"running {command!r} is not allowed by the permission "
                                                         f"policy ({self._approval.mode})"})
        terminal = await self.terminals.create(params)
        self._session.record(EventType.SYSTEM, {"title": "terminal_created", "text": command, "raw": {
            "terminal_id": terminal.id, "command": terminal.command, "cwd": str(params.get("cwd") or "")}})
        return {"terminalId": terminal.id}

    async def _record_exit(self, terminal: Terminal) -> None:
        if terminal.id in self._recorded_exit:
            return
        self._recorded_exit.add(terminal.id)
        text = await terminal.text()
        status = terminal.exit_status() or {"exitCode": None, "signal": None}
        ended = f"exit {status['exitCode']}" if status["exitCode"] is not None else f"signal {status['signal']}"
        self._session.record(EventType.SYSTEM, {"title": "terminal_exited", "text": f"{' '.join(terminal.command)}: "
                                                f"{ended}", "raw": {
            "terminal_id": terminal.id, "command": terminal.command, "exit_code": status["exitCode"],
            "signal": status["signal"], "truncated": terminal.truncated,
            "output": bound_tail(text, RECORDED_OUTPUT_BYTES)}})

    async def close_all(self) -> None:
        """At stop (and so at daemon shutdown): every terminal's group killed, what it ran recorded."""
        if self._terminals is None:
            return
        still_open = self._terminals.open_terminals()
        await self._terminals.close_all()
        for terminal in still_open:
            await self._record_exit(terminal)
