"""A daemon killed (SIGKILL) in the middle of a checkpoint or a merge leaves a repository `git fsck` finds clean, and
the next start's boot repair finishes or rolls back what was cut short (sessions/repair/git_ops.py).

The daemon is stopped at the exact step by the fault-injection switch `COMPOZY_TEST_GIT_PAUSE_AT`
(sessions/worktree/journal.py), which writes `git-journal.json.paused` beside the journal and waits there."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.conftest import Daemon, start_daemon, wait_for
from tests.gitrepos import checkpoints, fsck_clean, git, make_repo

PAUSE = "COMPOZY_TEST_GIT_PAUSE_AT"


def journal(home: Path, session_id: str, suffix: str = "") -> Path:
    """The session's git journal (`suffix=".paused"`: the mark of a daemon waiting at its pause)."""
    return home / "sessions" / session_id / f"git-journal.json{suffix}"


def post_until_paused(d: Daemon, home: Path, session_id: str, path: str, body: dict[str, object], what: str) -> None:
    """An operation that stops at its pause: its answer never comes (an answer is a failure), the pause does."""
    try:
        answer = d.http.post(d.scoped(session_id, path), json=body, timeout=2)
    except httpx.ReadTimeout:
        pass
    else:
        raise AssertionError(f"{path} answered instead of pausing: {answer.status_code} {answer.text[:300]}")
    wait_for(journal(home, session_id, ".paused").exists, 30, what)


def test_kill_during_a_checkpoint_leaves_fsck_clean_and_boot_repair_rolls_it_back(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    first = start_daemon(home, env_extra={PAUSE: "checkpoint"})
    try:
        s = first.create(repo, isolation="worktree")
        assert first.prompt(s["id"], "disk write cut.txt mid checkpoint").status_code == 200
        wait_for(journal(home, s["id"], ".paused").exists, 30, "the checkpoint to reach its pause")
        ref = f"refs/compozy/{s['id']}/1"
        assert git(repo, "rev-parse", "-q", "--verify", ref, check=False)  # written, its event not yet
    finally:
        first.stop(signal.SIGKILL)
    assert fsck_clean(repo) == ""

    second = start_daemon(home)
    try:
        wait_for(lambda: not journal(home, s["id"]).exists(), 60, "boot repair to settle the journal")
        assert git(repo, "rev-parse", "-q", "--verify", f"refs/compozy/{s['id']}/1", check=False) == ""
        assert checkpoints(second, s["id"]) == []
        assert fsck_clean(repo) == ""
        # The session goes on (reactivated: the prompt carries the replayed conversation): its next turn's
        # checkpoint takes the number again and holds the edit of the turn the crash cut short.
        assert second.prompt(s["id"], "and on").status_code == 200
        wait_for(lambda: checkpoints(second, s["id"]), 60,
                 "the next checkpoint")
        listed = checkpoints(second, s["id"])
        assert [c["n"] for c in listed] == [1]
        files = git(repo, "ls-tree", "-r", "--name-only", listed[0]["commit"]).split()
        assert "cut.txt" in files
    finally:
        second.stop()


def test_kill_during_a_merge_leaves_fsck_clean_and_boot_repair_finishes_it(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    before = git(repo, "rev-parse", "main")
    first = start_daemon(home, env_extra={PAUSE: "merge"})
    try:
        s = first.create(repo, isolation="worktree")
        assert first.prompt(s["id"], "disk write merged.txt from the session").status_code == 200
        wait_for(lambda: checkpoints(first, s["id"]), 30,
                 "the turn's checkpoint")
        assert first.http.post(first.scoped(s["id"], "/commit"), json={}).status_code == 200
        post_until_paused(first, home, s["id"], "/merge", {}, "the merge's pause")
        # The checkout moved, the branch did not yet.
        assert git(repo, "rev-parse", "main") == before and (repo / "merged.txt").exists()
    finally:
        first.stop(signal.SIGKILL)
    assert fsck_clean(repo) == ""

    second = start_daemon(home)
    try:
        wait_for(lambda: not journal(home, s["id"]).exists(), 60, "boot repair to settle the journal")
        assert git(repo, "rev-parse", "main") != before
        assert git(repo, "show", "main:merged.txt") == "from the session"
        assert git(repo, "status", "--porcelain") == "" and not (repo / ".git" / "index.lock").exists()
        assert fsck_clean(repo) == ""
    finally:
        second.stop()


def test_kill_during_a_rewind_rolls_its_files_back_to_the_state_before_it(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    first = start_daemon(home, env_extra={PAUSE: "restore"})
    try:
        s = first.create(repo, isolation="worktree")
        wt = Path(s["worktree"]["path"])
        for n, message in enumerate(["disk write a.txt first", "disk write a.txt changed", "disk write b.txt second"],
                                    start=1):
            assert first.prompt(s["id"], message).status_code == 200
            wait_for(lambda n=n: len(checkpoints(first, s["id"])) == n,
                     30, f"checkpoint {n}")
        before = {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file()}
        post_until_paused(first, home, s["id"], "/rewind", {"checkpoint": 1}, "the rewind's pause")
        # Half done: checkpoint 1's files written, the later file not yet deleted.
        assert (wt / "a.txt").read_text() == "first\n" and (wt / "b.txt").exists()
    finally:
        first.stop(signal.SIGKILL)
    assert fsck_clean(repo) == ""

    second = start_daemon(home)
    try:
        wait_for(lambda: not journal(home, s["id"]).exists(), 60, "boot repair to settle the journal")
        assert {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file()} == before
        assert (wt / "a.txt").read_text() == "changed\n"
        rows = second.all_events(s["id"])
        assert not [e for e in rows if e["content"].get("title") == "session_rewound"]
        assert fsck_clean(repo) == ""
    finally:
        second.stop()
