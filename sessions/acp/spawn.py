"""An agent subprocess started off the event loop, its pipes then joined to the loop as asyncio streams.

`asyncio.create_subprocess_exec` forks on the loop's thread and waits there for the child's exec (the parent
reads an error pipe until it closes) and for a child-watcher thread to start: under a burst of creates each
spawn held the loop every session and request shares for 40-70 ms, mostly waiting for the GIL between those
steps. Here `subprocess.Popen` runs on a start-up thread (`offload.starting`); the loop only wraps the pipes,
and learns of the exit from a pidfd (reaped with a non-blocking waitpid), so no watcher thread is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from sessions.acp.transport import TappedReader
from sessions.core.batch_scheduling import forking_batch
from sessions.core.offload import starting

logger = logging.getLogger(__name__)

# Without a pidfd (an old kernel), how often the exit is polled for.
POLL_EXIT_SECONDS = 0.1

_reaping: set[asyncio.Future[int]] = set()  # processes killed after a failed start, until reaped


class ChildProcess:
    """The part of `asyncio.subprocess.Process` the driver uses: pid, returncode, the three pipes, wait()."""

    def __init__(self, popen: subprocess.Popen[bytes], stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._exited: asyncio.Future[int] | None = None
        self._watcher: asyncio.Future[None] | None = None

    @property
    def returncode(self) -> int | None:
        """Negative for a signal, as asyncio says it; None until the process was reaped."""
        return self._popen.returncode

    async def wait(self) -> int:
        """Until the process itself has exited, whoever still holds its pipes (a grandchild may)."""
        if self._popen.returncode is not None:
            return self._popen.returncode
        if self._exited is None:
            self._exited = asyncio.get_running_loop().create_future()
            self._watcher = asyncio.ensure_future(self._watch(self._exited))
        return await asyncio.shield(self._exited)

    async def _watch(self, exited: asyncio.Future[int]) -> None:
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):  # no pidfd here (or reaped already): poll, off nothing but a timer
            while self._popen.poll() is None:
                await asyncio.sleep(POLL_EXIT_SECONDS)
        else:
            readable = loop.create_future()
            loop.add_reader(pidfd, lambda: None if readable.done() else readable.set_result(None))
            try:
                await readable
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
            self._popen.poll()  # readable: the process is a zombie, so WNOHANG reaps it at once
        if not exited.done():
            exited.set_result(self._popen.returncode if self._popen.returncode is not None else -1)


async def spawn(argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], umask: int,
                limit: int) -> ChildProcess:
    """Start `argv` in a new session (its own process group) with three pipes; raises what Popen raises
    (FileNotFoundError, PermissionError, NotADirectoryError) for a command that cannot run."""
    spawned = asyncio.ensure_future(starting(_popen, list(argv), str(cwd) if cwd else None, dict(env), umask))
    try:
        popen = await asyncio.shield(spawned)
    except asyncio.CancelledError:
        # Canceled while the thread was starting it: the process may exist with nobody to own it.
        spawned.add_done_callback(_kill_orphan)
        raise
    try:
        return await _joined(popen, limit)
    except BaseException:
        _kill(popen)
        raise


def _popen(argv: list[str], cwd: str | None, env: dict[str, str], umask: int) -> subprocess.Popen[bytes]:
    with forking_batch():  # sessions/core/batch_scheduling.py: an agent waking never preempts the shared loop
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=cwd, env=env, start_new_session=True, umask=umask)


async def _joined(popen: subprocess.Popen[bytes], limit: int) -> ChildProcess:
    loop = asyncio.get_running_loop()
    assert popen.stdin and popen.stdout and popen.stderr
    stdout = TappedReader(limit=limit, loop=loop)  # its transport handles streamed updates as they arrive
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout, loop=loop), popen.stdout)
    stderr = asyncio.StreamReader(limit=limit, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stderr, loop=loop), popen.stderr)
    # A write pipe: drain() waits on its flow control, and raises ConnectionResetError once the agent closed it.
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, popen.stdin)
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    return ChildProcess(popen, stdin, stdout, stderr)


def _kill(popen: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    # Reaped off the loop: the kill is immediate, but a wait is still a wait.
    reaping = asyncio.ensure_future(starting(popen.wait))
    _reaping.add(reaping)
    reaping.add_done_callback(_reaping.discard)


def _kill_orphan(spawned: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    if spawned.cancelled() or spawned.exception() is not None:
        return
    logger.info("agent pid %s started as its start was canceled: killed", spawned.result().pid)
    _kill(spawned.result())
