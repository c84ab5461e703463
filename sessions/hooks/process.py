"""Running one hook command (docs/reference/hooks.md §5): the allowlisted environment, stdin fed and stdout/stderr read
with bounds, the timeout, and the process group terminated (SIGTERM, a short grace, SIGKILL) so no grandchild
outlives its hook. `runner.py` decides what to run and what the result means."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compozy_base.config.hook_spec import HookDeclaration
from compozy_base.home import user_umask
from sessions.acp.child_env import inherited_environment, is_daemon_secret
from sessions.acp.spawn import ChildProcess, spawn

HOOK_DEPTH_ENV = "COMPOZY_HOOK_DEPTH"
STDOUT_LIMIT = 1024 * 1024
STDERR_LIMIT = 64 * 1024
TERM_GRACE = 0.25
PIPE_SETTLE = 1.0
TRUNCATED = "...[truncated]"

_ENV_ALLOW = frozenset({"HOME", "PATH", "LANG", "LOGNAME", "SHELL", "TERM", "TEMP", "USER"})
_ENV_ALLOW_PREFIXES = ("LC_", "TMP")


def format_duration(seconds: float) -> str:
    """Go's time.Duration spelling for the timeout error: `3s`, `500ms`, `1.5s`, `1m30s`."""
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{int(hours)}h" if hours else ""
    if hours or minutes:
        text += f"{int(minutes)}m"
    return text + f"{round(secs, 6):g}s"


@dataclass
class CommandResult:
    returncode: int | None = None
    stdout: bytes = b""
    stdout_truncated: bool = False
    stderr: str = ""
    error: str = ""  # spawn failure or timeout


def hook_env(decl: HookDeclaration, depth: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Allowlisted daemon environment + declared env + resolved secret_env; raises ValueError on a bad ref (one to a
    secret of the daemon's own included)."""
    environ = os.environ if environ is None else environ
    # An allowlisted name (TMP…, LC_…) that carries a secret of the daemon is dropped too.
    env = {k: v for k, v in inherited_environment(environ).items()
           if k in _ENV_ALLOW or k.startswith(_ENV_ALLOW_PREFIXES)}
    env.update(decl.env)
    for var, ref in decl.secret_env.items():
        kind, _, name = ref.partition(":")
        if kind != "env":
            raise ValueError(f"secret_env {var}: {kind} references are not supported")
        if name not in environ:
            raise ValueError(f"secret_env {var}: environment variable {name} is not set")
        if is_daemon_secret(name, environ[name]):
            raise ValueError(f"secret_env {var}: {name} holds a secret of the daemon itself, never given to a hook")
        env[var] = environ[name]
    env[HOOK_DEPTH_ENV] = str(depth)
    return env


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _terminate_group(proc: ChildProcess) -> None:
    """SIGTERM the hook's process group, 250 ms grace, then SIGKILL it (grandchildren included)."""
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), TERM_GRACE)
    # Unconditional: a grandchild may ignore SIGTERM or outlive the leader.
    _signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """Keep the first `limit` bytes and keep draining, so a chatty hook never blocks on a full pipe."""
    buf = bytearray()
    truncated = False
    while chunk := await stream.read(65536):
        room = limit - len(buf)
        if room > 0:
            buf += chunk[:room]
        if len(chunk) > room:
            truncated = True
    return bytes(buf), truncated


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    # A hook may exit without reading its stdin; that is not an error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.close()


async def run_command(argv: list[str], stdin: bytes, env: dict[str, str], cwd: Path | None,
                      timeout: float) -> CommandResult:
    try:
        # Spawned on a start-up thread, not forked on the loop (sessions/acp/spawn.py): hooks run on the create
        # and start paths, where a burst of them held every stream.
        proc = await spawn(argv, cwd=cwd, env=env, umask=user_umask(), limit=STDOUT_LIMIT)
    except OSError as exc:
        return CommandResult(error=f"hook command failed: {exc}")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    feeder = asyncio.create_task(_feed(proc.stdin, stdin))
    out_reader = asyncio.create_task(_read_bounded(proc.stdout, STDOUT_LIMIT))
    err_reader = asyncio.create_task(_read_bounded(proc.stderr, STDERR_LIMIT))
    pipes = (feeder, out_reader, err_reader)
    result = CommandResult()
    try:
        async with asyncio.timeout(timeout):
            await proc.wait()
            result.stdout, result.stdout_truncated = await out_reader
            stderr, truncated = await err_reader
            result.stderr = stderr.decode("utf-8", "replace") + (TRUNCATED if truncated else "")
            result.returncode = proc.returncode
    except TimeoutError:
        await _terminate_group(proc)
        result.error = f"hook timed out after {format_duration(timeout)}"
    except BaseException:
        # Cancelled (e.g. the prompt was cancelled or the daemon stops): never leave the hook running.
        _signal_group(proc.pid, signal.SIGKILL)
        await _settle(proc, pipes)
        raise
    await _settle(proc, pipes)
    return result


async def _settle(proc: ChildProcess, pipes: tuple[asyncio.Task[Any], ...]) -> None:
    """Let the pipes reach EOF so the subprocess transport closes on its loop (it complains when it is
    collected after the loop closed); give up after a moment on a pipe held open outside the group."""
    try:
        async with asyncio.timeout(PIPE_SETTLE):
            await proc.wait()
            await asyncio.gather(*pipes, return_exceptions=True)
    except (TimeoutError, asyncio.CancelledError):
        pass
    finally:
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)


def exit_error(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            status = f"signal: {signal.Signals(-returncode).name}"
        except ValueError:
            status = f"signal: {-returncode}"
    else:
        status = f"exit status {returncode}"
    detail = stderr.strip()
    return f"hook command failed: {status} ({detail})" if detail else f"hook command failed: {status}"
