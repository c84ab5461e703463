"""Who holds a session's attach lease, and whether that holder is gone.

`compozy session resume` holds the lease as its own process: `cli:<host>:<pid>:<start ticks>`. A terminal closed
under it killed the CLI before it could detach, and the lease kept everyone else out for its whole TTL (15 minutes by
default). A holder of that shape on this host whose process no longer runs (or is another process by now: the start
ticks differ) holds nothing, and the next attach takes the lease over. Any other holder (`--holder ci-job-42`, a
page, a CLI on another host) keeps it until it detaches or the TTL passes.
"""

from __future__ import annotations

import re
import socket

from compozy_base import process

_CLI = re.compile(r"^cli:(?P<host>[^:]+):(?P<pid>\d{1,10}):(?P<ticks>\d{1,20})$")


def cli_holder(pid: int, ticks: int | None, host: str | None = None) -> str:
    """The holder name of a CLI process (what `session resume` sends by default)."""
    return f"cli:{host or socket.gethostname()}:{pid}:{ticks if ticks is not None else 0}"


def holder_gone(holder: str, host: str | None = None) -> bool:
    """`holder` names a CLI process of this host that has exited (or whose pid now runs something else)."""
    match = _CLI.match(holder or "")
    if match is None or match["host"] != (host or socket.gethostname()):
        return False
    return not process.same_process(int(match["pid"]), ticks=int(match["ticks"]))
