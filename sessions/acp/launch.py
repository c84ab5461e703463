"""How a provider's agent is launched: its own executable when it is on PATH, else its npm package via npx.

The built-in providers name the adapters' executables (`claude-agent-acp`, `codex-acp`, `gemini`,
`opencode`). On a fresh machine none is installed, so a built-in provider whose executable is missing
runs its npm package through `npx -y <package>@<pinned version>` instead. Versions are pinned: `@latest`
would change what a session runs from one start to the next, and a new adapter release has changed its
ACP surface before. The first start downloads the package (tens of seconds to minutes), so the session
records progress while it waits, and the handshake gets a longer timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass

from compozy_base.config.agents import NpmPackage
from sessions.acp.driver import AgentNotFound, AgentProcess, agent_environment
from sessions.core.jsonobj import JsonObject

logger = logging.getLogger(__name__)

# A first `npx -y` fetches the package and its dependencies; claude-agent-acp pulls ~100 MB on a slow link.
NPX_INITIALIZE_TIMEOUT = 600.0
# How often a start waiting on npx records that it is still installing: often enough that a watcher
# sees it is alive, rarely enough that a slow download does not fill the log.
PROGRESS_INTERVAL = 10.0


@dataclass(frozen=True)
class Launch:
    """The command to run; `package` is set when it runs the npm fallback through npx."""

    argv: list[str]
    package: NpmPackage | None = None
    missing: str = ""  # the executable that was not found, when falling back

    def initialize_timeout(self, default: float) -> float:
        return max(default, NPX_INITIALIZE_TIMEOUT) if self.package else default


def _which(name: str, env: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH", ""))


def resolve(command: Sequence[str], *, provider: str, package: NpmPackage | None,
            env: Mapping[str, str] | None) -> Launch:
    """The command itself when its executable exists (or it names a path, left to the spawn to judge);
    else the npm fallback through npx. Raises AgentNotFound naming both when neither exists."""
    argv = list(command)
    executable = argv[0] if argv else ""
    if package is None or not executable or "/" in executable:
        return Launch(argv)
    full_env = agent_environment(env)
    if _which(executable, full_env):
        return Launch(argv)
    npx = _which("npx", full_env)
    if npx is None:
        raise AgentNotFound(
            f"provider {provider!r}: executable {executable!r} is not on PATH, and npx (Node.js) is not either, "
            f"so its npm package {package.spec} cannot be run; install {executable!r} or Node.js (npx)")
    _say_once((provider, executable, package.spec), "provider %s: %s not on PATH, running %s via npx")
    return Launch([npx, "-y", package.spec, *package.args], package, executable)


# The causes logged already in this process. Every doctor run and every start resolves each provider again: the same
# "not on PATH, running via npx" line was ~105 of a first hour's ~120 log lines. Said once per cause; the doctor and
# `compozy provider list` show the state whenever asked.
_said: set[tuple[str, ...]] = set()


def _say_once(cause: tuple[str, ...], message: str) -> None:
    if cause in _said:
        return
    _said.add(cause)
    logger.info(message, *cause)


@contextlib.asynccontextmanager
async def install_progress(launch: Launch, agent: AgentProcess,
                           record: Callable[[str, JsonObject], None]) -> AsyncIterator[None]:
    """While an npx start is waiting for the handshake, record `runtime_progress` rows saying so."""
    if launch.package is None:
        yield
        return
    spec = launch.package.spec
    started = time.monotonic()

    def note(text: str) -> None:
        record("runtime_progress", {"text": text, "runtime": {
            "phase": "installing", "package": spec, "via": "npx", "missing_executable": launch.missing,
            "elapsed_seconds": round(time.monotonic() - started, 1)}})

    note(f"installing {spec} via npx ({launch.missing!r} is not on PATH); the first start downloads it")

    async def keep_noting() -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            last = agent.stderr.text().strip().splitlines()[-1:] or [""]
            note(f"still installing {spec} via npx ({int(time.monotonic() - started)}s)"
                 + (f": {last[0][-200:]}" if last[0] else ""))

    task = asyncio.create_task(keep_noting())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
