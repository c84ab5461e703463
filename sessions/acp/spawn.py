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
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sessions.acp import sandbox
from sessions.acp.transport import TappedReader
from sessions.core.batch_scheduling import forking_batch
from sessions.core.offload import starting

logger = logging.getLogger(__name__)

# Without a pidfd (an old kernel), how often the exit is polled for.
POLL_EXIT_SECONDS = 0.1

_reaping: set[asyncio.Future[int]] = set()  # processes killed after a failed start, until reaped


class Exiting:
    """A child's pid, returncode and wait(), its exit learnt from a pidfd. A sandboxed command's exit reads as the
    command's own would (`sandbox.confined_exit`: bubblewrap exits 128+N for a child killed by signal N)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self._confined = sandbox_split(list(popen.args)) is not None  # type: ignore[arg-type]
        self._exited: asyncio.Future[int] | None = None
        self._watcher: asyncio.Future[None] | None = None

    @property
    def returncode(self) -> int | None:
        """Negative for a signal, as asyncio says it; None until the process was reaped."""
        code = self._popen.returncode
        return sandbox.confined_exit(code) if self._confined else code

    async def wait(self) -> int:
        """Until the process itself has exited, whoever still holds its pipes (a grandchild may)."""
        if self.returncode is not None:
            return self.returncode
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
            code = self.returncode
            exited.set_result(code if code is not None else -1)


class ChildProcess(Exiting):
    """The part of `asyncio.subprocess.Process` the driver uses: pid, returncode, the three pipes, wait()."""

    def __init__(self, popen: subprocess.Popen[bytes], stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        super().__init__(popen)
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr


class OutputProcess(Exiting):
    """A command with no input and one output pipe (stdout and stderr together): a client terminal's."""

    def __init__(self, popen: subprocess.Popen[bytes], stdout: asyncio.StreamReader) -> None:
        super().__init__(popen)
        self.stdout = stdout


async def spawn(argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], umask: int,
                limit: int) -> ChildProcess:
    """Start `argv` in a new session (its own process group) with three pipes; raises what Popen raises
    (FileNotFoundError, PermissionError, NotADirectoryError) for a command that cannot run."""
    popen = await _started(_popen, list(argv), str(cwd) if cwd else None, dict(env), umask)
    try:
        return await _joined(popen, limit)
    except BaseException:
        _kill(popen)
        raise


async def _started(popen: Callable[[list[str], str | None, dict[str, str], int], subprocess.Popen[bytes]],
                   argv: list[str], cwd: str | None, env: dict[str, str], umask: int) -> subprocess.Popen[bytes]:
    """`popen` run on a start-up thread; a start cancelled meanwhile kills the process it may still have made."""
    spawned = asyncio.ensure_future(starting(popen, argv, cwd, env, umask))
    try:
        return await asyncio.shield(spawned)
    except asyncio.CancelledError:
        # Canceled while the thread was starting it: the process may exist with nobody to own it.
        spawned.add_done_callback(_kill_orphan)
        raise


async def spawn_output(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], umask: int) -> OutputProcess:
    """Start `argv` as `spawn` does (its own session, off the loop), stdin from /dev/null and stderr into stdout."""
    popen = await _started(_popen_output, list(argv), str(cwd), dict(env), umask)
    try:
        loop = asyncio.get_running_loop()
        assert popen.stdout is not None
        stdout = asyncio.StreamReader(loop=loop)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout, loop=loop), popen.stdout)
        return OutputProcess(popen, stdout)
    except BaseException:
        _kill(popen)
        raise


def _popen_output(argv: list[str], cwd: str | None, env: dict[str, str], umask: int) -> subprocess.Popen[bytes]:
    _checked(argv, env)
    with forking_batch():
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True, umask=umask)


# Inside a sandbox, the command's stdin and stdout are handed to it as two extra descriptors and moved into place by
# this shim, run by the daemon's own interpreter (read-only in the sandbox) just before it execs the command.
# bubblewrap's own processes keep whatever stdio they are given, so an agent that closed its stdout, or exited while
# a child of its own held it, never showed end of file; extra descriptors they pass on and do not keep.
STDIO_SHIM = ("import os,sys;i,o=int(sys.argv[1]),int(sys.argv[2]);os.dup2(i,0);os.dup2(o,1);os.close(i);"
              "os.close(o);os.execvp(sys.argv[3],sys.argv[3:])")


def _popen(argv: list[str], cwd: str | None, env: dict[str, str], umask: int) -> subprocess.Popen[bytes]:
    split = _checked(argv, env)
    with forking_batch():  # sessions/core/batch_scheduling.py: an agent waking never preempts the shared loop
        if split is None:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=cwd, env=env, start_new_session=True, umask=umask)
        prefix, command = split
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            popen = subprocess.Popen(
                [*prefix, sys.executable, "-I", "-S", "-c", STDIO_SHIM, str(in_r), str(out_w), *command],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(in_r, out_w),
                cwd=cwd, env=env, start_new_session=True, umask=umask)
        except BaseException:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            os.close(in_r)
            os.close(out_w)
        popen.stdin, popen.stdout = os.fdopen(in_w, "wb", buffering=0), os.fdopen(out_r, "rb", buffering=0)
        return popen


def _checked(argv: list[str], env: dict[str, str]) -> tuple[list[str], list[str]] | None:
    """`sandbox_split(argv)`, the sandboxed command's executable found first: a command that cannot run raises
    FileNotFoundError here as Popen would unconfined (under bubblewrap it was bubblewrap's own exit 1, after the
    start: a crash, not a `startup_failure`). On the start-up thread (it stats PATH's directories)."""
    split = sandbox_split(argv)
    if split is not None:
        sandbox.require_executable(split[1][0], env.get("PATH"))
    return split


def sandbox_split(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """(bubblewrap and its options up to `--`, the command) for an argv the sandbox wrapped, else None."""
    if argv and Path(argv[0]).name == "bwrap" and "--" in argv:
        at = argv.index("--")
        return argv[:at + 1], argv[at + 1:]
    return None


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
