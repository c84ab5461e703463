"""Running git: one entry point, a timeout on every call, an environment that cannot redirect it.

Blocking: call these off the event loop (`asyncio.to_thread`)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from compozy_base.home import user_umask
from sessions.core.errors import CompozyError, InvalidRequest

# A checkpoint of a 10,000-file repository takes about 0.1 s (bench/); a minute is a repository on a disk that no
# longer answers, and the caller's operation fails visibly instead of waiting for ever.
GIT_TIMEOUT = 60.0
# Variables a parent shell (or an agent's hook) may leave set that would point git at another repository, index or
# work tree than the one named on the command line.
_SCRUBBED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES")
# Commits Compozy makes itself (checkpoints, and commits where the user set no identity) are signed as this.
IDENTITY = {"GIT_AUTHOR_NAME": "Compozy", "GIT_AUTHOR_EMAIL": "compozy@localhost",
            "GIT_COMMITTER_NAME": "Compozy", "GIT_COMMITTER_EMAIL": "compozy@localhost"}


class GitUnavailable(InvalidRequest):
    status, code = 400, "git_unavailable"


class NotARepository(InvalidRequest):
    status, code = 400, "workspace_not_git"


class GitFailed(CompozyError):
    """A git command that failed where it should not have: the operation is refused, with git's own words."""

    status, code = 500, "git_failed"


@functools.cache
def git_path() -> str | None:
    return shutil.which("git")


def require_git() -> str:
    path = git_path()
    if path is None:
        raise GitUnavailable("git is not installed (or not on the daemon's PATH); worktree isolation needs it")
    return path


def git_version() -> str | None:
    """`git --version`'s number, None when git is missing or does not answer."""
    if git_path() is None:
        return None
    try:
        return run(["--version"], Path("/")).stdout.strip().rsplit(" ", 1)[-1]
    except GitFailed:
        return None


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    # Never a prompt (a credential helper, an editor) from a daemon nobody watches; messages in one language.
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"})
    env.update(extra or {})
    return env


def run(args: Sequence[str], cwd: Path, *, env: Mapping[str, str] | None = None, check: bool = True,
        timeout: float = GIT_TIMEOUT, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in `cwd`; GitFailed (with stderr's first line) on a non-zero exit when `check`."""
    result = run_bytes(args, cwd, env=env, check=check, timeout=timeout, input=input)
    return subprocess.CompletedProcess(result.args, result.returncode,
                                       result.stdout.decode("utf-8", "replace"),
                                       result.stderr.decode("utf-8", "replace"))


def run_bytes(args: Sequence[str], cwd: Path, *, env: Mapping[str, str] | None = None, check: bool = True,
              timeout: float = GIT_TIMEOUT, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    argv = [require_git(), "-c", "core.quotepath=off", "-c", "advice.detachedHead=false", *args]
    try:
        # The user's umask, not the daemon's private one: git writes the user's repository and checkout (a merged
        # file born 0600 in their checkout would be a surprise); what it writes under $COMPOZY_HOME stays in
        # owner-only folders.
        result = subprocess.run(argv, cwd=str(cwd), env=_env(env), capture_output=True, timeout=timeout,
                                input=input, check=False, umask=user_umask())
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(f"git {args[0]} did not finish in {timeout:.0f}s", data={"command": args[0]}) from exc
    except OSError as exc:
        raise GitFailed(f"git {args[0]} could not run: {exc}", data={"command": args[0]}) from exc
    if check and result.returncode != 0:
        line = (result.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]
        raise GitFailed(f"git {args[0]} failed: {line}", data={"command": args[0], "exit": result.returncode})
    return result


def out(args: Sequence[str], cwd: Path, **kwargs: object) -> str:
    """Git's stdout, stripped (all of it: a one-line answer is that line)."""
    return run(args, cwd, **kwargs).stdout.strip()  # type: ignore[arg-type]


def repo_root(path: Path) -> Path:
    """The top of the repository `path` is in; NotARepository when it is in none."""
    require_git()
    result = run(["rev-parse", "--show-toplevel"], path, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise NotARepository(f"{path} is not in a git repository; worktree isolation needs one")
    return Path(result.stdout.strip())


def common_dir(path: Path) -> Path:
    """The repository's shared git directory (a worktree's objects and refs live there)."""
    found = Path(out(["rev-parse", "--git-common-dir"], path))
    return found if found.is_absolute() else (path / found).resolve()


def is_repository(path: Path) -> bool:
    if git_path() is None or not path.is_dir():
        return False
    return run(["rev-parse", "--is-inside-work-tree"], path, check=False).stdout.strip() == "true"
