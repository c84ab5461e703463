"""Commit and merge a session's branch without touching a dirty checkout.

The merge is computed in the object store (`git merge-tree --write-tree`, git 2.38+): nothing of the user's checkout
moves until the result is known to be clean. Then, when the target branch is the one checked out (and the checkout is
clean), its files move forward with `read-tree -m -u` (git's fast-forward of a clean index); last the branch ref,
compare-and-set on its old value."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sessions.core.errors import Conflict
from sessions.worktree import git, journal


class CheckoutDirty(Conflict):
    status, code = 409, "checkout_dirty"


class MergeConflict(Conflict):
    status, code = 409, "merge_conflict"


@dataclass(frozen=True)
class Merged:
    target: str
    commit: str  # the target's new head (its old one when already up to date)
    previous: str
    up_to_date: bool
    squash: bool
    files: list[str] = field(default_factory=list)  # files the merge changed on the target


def identity(repo: Path) -> dict[str, str]:
    """The user's git identity when set (a commit the user asked for is theirs), else Compozy's."""
    name = git.run(["config", "user.name"], repo, check=False).stdout.strip()
    email = git.run(["config", "user.email"], repo, check=False).stdout.strip()
    return {} if name and email else dict(git.IDENTITY)


def commit_all(worktree: Path, message: str) -> str | None:
    """Everything in the worktree (untracked too, not ignored) committed on its branch; None when nothing changed."""
    git.run(["add", "-A", "--", "."], worktree)
    if git.run(["diff", "--cached", "--quiet"], worktree, check=False).returncode == 0:
        return None
    git.run(["commit", "-q", "--no-verify", "-m", message], worktree, env=identity(worktree))
    return git.out(["rev-parse", "HEAD"], worktree)


def checked_out_branch(repo: Path) -> str:
    return git.run(["symbolic-ref", "-q", "HEAD"], repo, check=False).stdout.strip()


def _checkout_dirty(repo: Path) -> list[str]:
    """Tracked files changed or staged in the user's checkout (untracked files are theirs to keep: read-tree refuses
    to overwrite one, which is answered as dirty too)."""
    listed = git.run(["status", "--porcelain", "-z", "--untracked-files=no"], repo).stdout
    return [entry[3:] for entry in listed.split("\0") if len(entry) > 3]


def merge(repo: Path, branch: str, target: str, *, squash: bool, message: str, journal_file: Path) -> Merged:
    """`branch` merged into `target` (a branch name). Steps: 1. both resolved; 2. up to date? done; 3. the merge
    computed in the object store (MergeConflict with the files); 4. its commit; 5. the journal; 6. a checked-out
    target's clean checkout moved forward (CheckoutDirty otherwise); 7. the ref, compare-and-set; 8. the journal
    ended. A crash between 5 and 8 is finished or rolled back by boot repair (sessions/repair/git_ops.py)."""
    target_ref = target if target.startswith("refs/") else f"refs/heads/{target}"
    old = git.run(["rev-parse", "--verify", "-q", f"{target_ref}^{{commit}}"], repo, check=False).stdout.strip()
    if not old:
        raise Conflict(f"no branch {target!r} to merge into", code="merge_target_not_found")
    tip = git.out(["rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}"], repo)
    name = target_ref.removeprefix("refs/heads/")
    if git.run(["merge-base", "--is-ancestor", tip, old], repo, check=False).returncode == 0:
        return Merged(name, old, old, True, squash)
    checked_out = checked_out_branch(repo) == target_ref
    if checked_out:
        dirty = _checkout_dirty(repo)
        if dirty:
            raise CheckoutDirty(f"the checkout of {name} has uncommitted changes; commit or stash them first",
                                data={"files": dirty[:100]})
    result = git.run(["merge-tree", "--write-tree", "--name-only", "--no-messages", old, tip], repo, check=False)
    lines = result.stdout.splitlines()
    if result.returncode == 1:
        files = sorted({line for line in lines[1:] if line})
        raise MergeConflict(f"merging {branch} into {name} conflicts in {len(files)} file(s)", data={"files": files})
    if result.returncode != 0 or not lines:
        raise git.GitFailed(f"git merge-tree failed: {result.stderr.strip()[:300]}")
    tree = lines[0].strip()
    parents = ["-p", old] if squash else ["-p", old, "-p", tip]
    new = git.out(["commit-tree", tree, *parents, "-m", message], repo, env=identity(repo))
    changed = [f for f in git.run(["diff-tree", "-r", "-z", "--name-only", old, new], repo).stdout.split("\0") if f]
    journal.begin(journal_file, {"op": "merge", "repo": str(repo), "target_ref": target_ref, "old": old, "new": new,
                                 "checked_out": checked_out})
    if checked_out:
        moved = git.run(["read-tree", "-m", "-u", old, new], repo, check=False)
        if moved.returncode != 0:
            journal.end(journal_file)
            raise CheckoutDirty(f"the checkout of {name} cannot take the merge: {moved.stderr.strip()[:300]}",
                                data={"files": []})
    journal.pause_point(journal_file, "merge")
    git.run(["update-ref", target_ref, new, old], repo)
    journal.end(journal_file)
    return Merged(name, new, old, False, squash, changed)
