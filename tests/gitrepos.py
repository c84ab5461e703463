"""Real git repositories for the worktree tests: made with the git command line, as a user's would be; and the
worktree routes' reads those tests share (a session's checkpoints, a turn that waits for its own)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, wait_for

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on branch `main` with one commit: README.md, a .gitignore that ignores `*.log`, and `files`."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test User")
    git(path, "config", "user.email", "test@example.com")
    (path / "README.md").write_text("hello from the repository\n")
    (path / ".gitignore").write_text("*.log\n")
    for name, text in (files or {}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def fsck_clean(repo: Path) -> str:
    """`git fsck --full --strict`'s complaints (dangling objects are not complaints): "" when clean."""
    done = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling"], cwd=repo, capture_output=True,
                          text=True, check=False)
    return "" if done.returncode == 0 else (done.stdout + done.stderr)


def checkpoints(daemon: Daemon, session_id: str) -> list[dict[str, Any]]:
    """`GET …/checkpoints`: the session's checkpoints, oldest first."""
    response = daemon.http.get(daemon.scoped(session_id, "/checkpoints"))
    assert response.status_code == 200, response.text
    return list(response.json()["checkpoints"])


def turn_with_checkpoint(daemon: Daemon, session_id: str, message: str) -> str:
    """One turn, and its checkpoint: the turn's id once the checkpoint is recorded."""
    turn_id = str(daemon.run_turn(session_id, message)[0]["turn_id"])
    wait_for(lambda: any(c["turn_id"] == turn_id for c in checkpoints(daemon, session_id)), 30,
             f"the checkpoint of {message!r}")
    return turn_id
