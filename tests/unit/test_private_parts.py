"""Where Compozy leans on another library's internals, or once did (issue 43, "private parts").

Replaced by public APIs, and checked here that they do what the private part did:
- the agent's stdout reader knows that nothing is buffered from its own count (sessions/acp/transport.py
  `TappedReader.unread`), not from asyncio StreamReader's private `_buffer`;
- the daemon's sessions run on `daphne.server.twisted_loop`, the loop daphne installs Twisted's reactor on
  (compozy/daemon/launcher.py), not on the loop read from the reactor's private `_asyncioEventloop`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sessions.acp import transport as transport_mod
from sessions.acp.transport import TappedReader
from tests.unit.test_ndjson_reader import line, opened, run, update

ROOT = Path(__file__).resolve().parents[2]


def _line_of(size: int, n: int) -> bytes:
    """An update line of exactly `size` bytes, newline included."""
    pad = size - len(line(update(n, "x"))) + 1
    data = line(update(n, "x" * pad))
    assert len(data) == size
    return data


def test_a_short_read_behind_bytes_still_buffered_is_not_tapped_ahead_of_them() -> None:
    """One `read` of the transport takes at most READ_BYTES: a burst larger than that leaves bytes in the reader
    while the transport, having handled every line it read, hands the loop back. A short read arriving then finds
    the transport's own queue empty; only the reader's count (`unread`) keeps it behind the bytes before it."""
    per_read = transport_mod.READ_BYTES // 4096  # lines of 4 KiB: a read ends on a line's end
    assert per_read % transport_mod.YIELD_EVERY_UPDATES == 0  # ...and the transport yields after its last line
    extra = 3
    seen: list[int] = []

    async def main() -> None:
        reader = TappedReader()
        async with opened(lambda params: seen.append(params["n"]), reader=reader) as (_, transport):
            task: asyncio.Task[Any] = asyncio.create_task(transport.receive())
            await asyncio.sleep(0)  # waiting on the pipe
            burst = [_line_of(4096, n) for n in range(per_read + extra)]
            reader.feed_data(b"".join(burst))
            while len(seen) < per_read:
                await asyncio.sleep(0)
            assert reader.unread == sum(len(b) for b in burst[per_read:])

            reader.feed_data(line(update(999)))
            assert seen == list(range(per_read))  # not recorded ahead of the three still buffered
            reader.feed_eof()
            assert await task is None
            assert seen == [*range(per_read + extra), 999]
            assert reader.unread == 0

    run(main)


def test_the_reactor_runs_on_daphnes_loop_the_daemon_binds_its_sessions_to(tmp_path: Path) -> None:
    """The launcher binds the SessionManager and the signal handlers to `daphne.server.twisted_loop` before the
    reactor runs: with daphne.server imported first (the launcher's `_prepare_django`), the reactor runs on it."""
    code = ("import asyncio\n"
            "from compozy.daemon.launcher import _prepare_django\n"
            "_prepare_django()\n"
            "from daphne.server import twisted_loop\n"
            "from twisted.internet import reactor\n"
            "seen = []\n"
            "def check():\n"
            "    try:\n"
            "        seen.append(asyncio.get_running_loop() is twisted_loop)\n"
            "    finally:\n"
            "        reactor.stop()\n"
            "reactor.callLater(0, check)\n"
            "reactor.run(installSignalHandlers=False)\n"
            "print(seen)\n")
    env = {**os.environ, "COMPOZY_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[True]", result.stdout
