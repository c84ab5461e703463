"""What a person's approval covers: the one request they answered, or, chosen "always", the exact command.

An agent asks to run a command with a permission request (an execute tool call, its command in `rawInput`), then
runs it through a client terminal (`terminal/create`). The terminal is the command that really runs, so it runs
unasked only when what it runs is what the person saw and approved: the approved command itself, or that command
given to a shell as `sh -c COMMAND`. An `allow_once` approval is spent by the first terminal it covers, within its
turn; an `allow_always` one is a rule for the session that names the command. Anything else is asked again, the
exact command shown (sessions/core/visible.py). After a person approved "Run: ls", the agent's next
`terminal/create` of `/bin/sh -c 'echo … > proof.txt'` ran with no prompt and no permission row naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

# Shells whose `-c` argument is the command a person approved: how agents run a command line through a terminal
# (claude-agent-acp's Bash runs `bash -c`).
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ash", "ksh", "fish"})
SHELL_FLAGS = frozenset({"-c", "-lc", "-ic"})


def command_of(tool_call: Mapping[str, Any]) -> str | None:
    """The command line an execute tool call asks to run, from its `rawInput` (`command` as a string or argv)."""
    raw = tool_call.get("rawInput")
    if not isinstance(raw, Mapping):
        return None
    command = raw.get("command") or raw.get("cmd")
    if isinstance(command, str) and command.strip():
        return " ".join(command.split())
    if isinstance(command, list) and command and all(isinstance(part, str) for part in command):
        return " ".join(" ".join(command).split())
    return None


def readings(argv: Sequence[str]) -> set[str]:
    """The command lines a terminal's argv runs, each whitespace-normalised: the argv joined, and for
    `SHELL -c LINE` the line itself."""
    out = {" ".join(" ".join(argv).split())}
    if len(argv) == 3 and PurePosixPath(argv[0]).name in SHELLS and argv[1] in SHELL_FLAGS:
        out.add(" ".join(argv[2].split()))
    return out


@dataclass
class Approvals:
    """A session's standing approvals of commands: once (per turn, spent by one terminal) and always."""

    once: dict[str, list[str]] = field(default_factory=dict)  # turn id -> approved command lines, unspent
    always: set[str] = field(default_factory=set)

    def approved(self, turn_id: str, tool_call: Mapping[str, Any], *, always: bool) -> None:
        """A person approved this execute tool call: its command may run through a terminal without asking."""
        command = command_of(tool_call)
        if command is None:
            return  # nothing named: a terminal it may lead to is asked about on its own
        self._keep_only(turn_id)
        if always:
            self.always.add(command)
        else:
            self.once.setdefault(turn_id, []).append(command)

    def covers(self, turn_id: str, argv: Sequence[str]) -> str | None:
        """Why `argv` may run unasked in this turn ("always" or "once", a once spent here), or None."""
        self._keep_only(turn_id)
        lines = readings(argv)
        if lines & self.always:
            return "always"
        pending = self.once.get(turn_id, [])
        for line in pending:
            if line in lines:
                pending.remove(line)
                return "once"
        return None

    def _keep_only(self, turn_id: str) -> None:
        """A once approval lives as long as its turn: the first look from another turn drops it."""
        for other in [t for t in self.once if t != turn_id]:
            del self.once[other]
