"""Removing a worktree session (sessions/services/control.py): the worktree is only checked before the agent is
stopped, and goes after the stop, so whatever the agent writes until then is not lost with a folder removed under
it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.django_env import ensure_django

ensure_django()

from sessions.core.record import SessionMeta  # noqa: E402
from sessions.services import control  # noqa: E402
from sessions.services.worktrees import WorktreeHasWork  # noqa: E402
from sessions.worktree import trees  # noqa: E402
from tests.gitrepos import git, make_repo  # noqa: E402

SESSION = "sess_0123456789abcdef"


class StopWatcher:
    """A live session's runtime as remove sees it: `stop` notes whether the worktree was still there."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.seen: list[bool] = []

    async def stop(self, *_args: Any) -> None:
        self.seen.append(self.worktree.is_dir())


def remove_with(monkeypatch: pytest.MonkeyPatch, meta: SessionMeta, runtime: StopWatcher) -> None:
    async def runtime_for(_session_id: str, _ref: str | None) -> tuple[StopWatcher, SessionMeta]:
        return runtime, meta

    monkeypatch.setattr(control, "_runtime_for", runtime_for)
    monkeypatch.setattr(control, "get_session", lambda session_id: {"id": session_id})
    monkeypatch.setattr(control, "delete_session_files", lambda *_args: None)
    asyncio.run(control.remove_session(SESSION))


@pytest.fixture
def placed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> trees.Placed:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "sessions").mkdir(parents=True)
    return trees.add(SESSION, make_repo(tmp_path / "repo"))


def test_a_clean_worktree_stays_until_the_agent_is_stopped_then_goes_with_its_branch(
        placed: trees.Placed, monkeypatch: pytest.MonkeyPatch) -> None:
    wt, repo = Path(placed.worktree["path"]), Path(placed.worktree["repo"])
    runtime = StopWatcher(wt)
    remove_with(monkeypatch, {"id": SESSION, "worktree": placed.worktree, "workspace_id": "w"}, runtime)
    assert runtime.seen == [True]
    assert not wt.exists()
    assert git(repo, "branch", "--list", placed.worktree["branch"]) == ""


def test_unsaved_work_refuses_before_the_agent_is_stopped(placed: trees.Placed,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    wt = Path(placed.worktree["path"])
    (wt / "unsaved.txt").write_text("precious\n")
    runtime = StopWatcher(wt)
    with pytest.raises(WorktreeHasWork):
        remove_with(monkeypatch, {"id": SESSION, "worktree": placed.worktree, "workspace_id": "w"}, runtime)
    assert runtime.seen == [] and (wt / "unsaved.txt").read_text() == "precious\n"
