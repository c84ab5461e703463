"""Real git repositories for the worktree tests: made with the git command line, as a user's would be."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
