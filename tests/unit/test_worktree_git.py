"""The git plumbing of worktree sessions (sessions/worktree/) on real repositories, without a daemon: checkpoints
leave the branch, HEAD and index alone; a restore is byte for byte; changes name binaries and bound patches; a merge
never touches a dirty checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessions.worktree import changes, checkpoints, merging, trees
from tests.gitrepos import fsck_clean, git, make_repo

SESSION = "sess_0123456789abcdef"


@pytest.fixture
def placed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> trees.Placed:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "sessions" / SESSION).mkdir(parents=True)
    return trees.add(SESSION, make_repo(tmp_path / "repo", {"src/old.py": "print('old')\n" * 20}))


def index(tmp_path: Path, name: str = "cp.index") -> Path:
    return tmp_path / "home" / "sessions" / SESSION / name


def test_a_checkpoint_records_untracked_files_and_moves_nothing_the_agent_sees(placed: trees.Placed,
                                                                                tmp_path: Path) -> None:
    wt = Path(placed.worktree["path"])
    (wt / "new.txt").write_text("untracked\n")
    (wt / "noise.log").write_text("ignored\n")
    git(wt, "add", "README.md")  # something staged by the agent stays staged
    head, staged = git(wt, "rev-parse", "HEAD"), git(wt, "diff", "--cached", "--name-only")
    commit = checkpoints.checkpoint(wt, index(tmp_path), "refs/compozy/x/1", "cp", index(tmp_path, "j.json"))
    assert git(wt, "rev-parse", "refs/compozy/x/1") == commit and git(wt, "rev-parse", f"{commit}^") == head
    assert set(git(wt, "ls-tree", "-r", "--name-only", commit).split()) >= {"new.txt", "src/old.py"}
    assert "noise.log" not in git(wt, "ls-tree", "-r", "--name-only", commit)
    assert git(wt, "rev-parse", "HEAD") == head and git(wt, "diff", "--cached", "--name-only") == staged
    assert git(wt, "symbolic-ref", "--short", "HEAD") == f"compozy/{SESSION}"
    assert fsck_clean(Path(placed.worktree["repo"])) == ""


def test_restore_is_byte_for_byte_modes_included_and_deletes_what_came_later(placed: trees.Placed,
                                                                              tmp_path: Path) -> None:
    wt = Path(placed.worktree["path"])
    (wt / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(wt / "tool.sh", 0o755)
    (wt / "data.bin").write_bytes(bytes(range(256)) * 4)
    first = checkpoints.checkpoint(wt, index(tmp_path), "refs/compozy/x/1", "cp", index(tmp_path, "j.json"))
    snapshot = {p.relative_to(wt): p.read_bytes() for p in wt.rglob("*") if p.is_file() and ".git" not in p.parts}
    (wt / "data.bin").write_bytes(b"changed")
    os.chmod(wt / "tool.sh", 0o644)
    (wt / "later.txt").write_text("later\n")
    (wt / "src" / "old.py").unlink()
    second = checkpoints.checkpoint(wt, index(tmp_path), "refs/compozy/x/2", "cp", index(tmp_path, "j.json"))
    checkpoints.restore(wt, first, second, index(tmp_path, "scratch.index"))
    after = {p.relative_to(wt): p.read_bytes() for p in wt.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == snapshot and os.stat(wt / "tool.sh").st_mode & 0o111


def test_changes_name_binaries_find_renames_and_bound_patches(placed: trees.Placed, tmp_path: Path) -> None:
    wt = Path(placed.worktree["path"])
    git(wt, "mv", "src/old.py", "src/new.py")
    (wt / "pic.png").write_bytes(b"\x89PNG\0\0" + bytes(range(200)))
    (wt / "huge.txt").write_text("x" * 100 + "\n" * 1 + ("line\n" * 70_000))
    tree = checkpoints.write_tree(wt, index(tmp_path))
    found = changes.compare(wt, placed.worktree["base_commit"], tree)
    by_path = {f["path"]: f for f in found["files"]}
    assert by_path["src/new.py"]["status"] == "renamed" and by_path["src/new.py"]["old_path"] == "src/old.py"
    assert by_path["pic.png"]["binary"] and by_path["pic.png"]["patch_omitted"] == "binary"
    assert by_path["huge.txt"]["patch"] is None and by_path["huge.txt"]["patch_omitted"] == "too_large"
    assert by_path["huge.txt"]["additions"] == 70_001 and found["truncated"] is True
    assert found["patch_bytes"] > changes.MAX_FILE_PATCH_BYTES and found["patch_limit"] == changes.MAX_PATCH_BYTES


def test_a_merge_refuses_a_dirty_checkout_and_a_conflict_changing_nothing(placed: trees.Placed,
                                                                          tmp_path: Path) -> None:
    wt, repo = Path(placed.worktree["path"]), Path(placed.worktree["repo"])
    (wt / "README.md").write_text("the session's readme\n")
    assert merging.commit_all(wt, "session edit")
    journal = index(tmp_path, "j.json")
    (repo / "README.md").write_text("dirty\n")
    with pytest.raises(merging.CheckoutDirty):
        merging.merge(repo, placed.worktree["branch"], "main", squash=False, message="m", journal_file=journal)
    git(repo, "commit", "-qam", "the user's readme")
    before = git(repo, "rev-parse", "main")
    with pytest.raises(merging.MergeConflict) as conflict:
        merging.merge(repo, placed.worktree["branch"], "main", squash=True, message="m", journal_file=journal)
    assert conflict.value.data["files"] == ["README.md"]
    assert git(repo, "rev-parse", "main") == before and (repo / "README.md").read_text() == "dirty\n"
    assert not journal.exists() and fsck_clean(repo) == ""


def test_the_agent_cwd_is_the_workspace_place_in_the_worktree_and_discard_takes_the_branch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "repo", {"pkg/sub/mod.py": "x = 1\n"})
    whole = trees.add(SESSION, repo)
    assert whole.cwd == Path(whole.worktree["path"])
    trees.discard(whole.worktree)
    assert not Path(whole.worktree["path"]).exists() and git(repo, "branch", "--list", whole.worktree["branch"]) == ""
    inner = trees.add(SESSION, repo / "pkg" / "sub")
    assert inner.cwd == Path(inner.worktree["path"]) / "pkg" / "sub" and (inner.cwd / "mod.py").is_file()
    assert fsck_clean(repo) == ""
