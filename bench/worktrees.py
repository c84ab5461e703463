"""Worktree sessions (docs/reference/worktrees.md): what a checkpoint per turn costs.

1. checkpoint (in-process, real git): a 10,000-file repository (files of ~100 bytes in 100 folders), a worktree
   of it, its first checkpoint (cold: the session's own index is seeded from the worktree's and every file is
   stat'ed), then the median of 5 incremental checkpoints after 10 files changed and one was added: the cost each
   turn's end pays (target ≤ 0.5 s, "well under a second"), against `git status --porcelain` on the same worktree
   (the least any change detection costs git).
2. turns: the scripted agent's turns, one after another, on a plain session and on a worktree session of the same
   2,000-file repository, alternating over rounds, medians compared. Turns of about a second (`slow 6 0.2`: an
   agent's shortest real turns take seconds) for the throughput (target: the worktree session ≥ 0.9x the plain one,
   within noise), and one-line `echo` turns for the overhead a turn pays, in ms (each worktree turn ends with its
   checkpoint before the next prompt is taken).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchDaemon
from bench.report import BenchResult, Op, Target
from tests import gitrepos
from tests.conftest import NO_TITLE
from tests.gitrepos import git

SESSION = "sess_00000000000000bb"


def make_repo(path: Path, files: int) -> Path:
    """tests.gitrepos' repository with `files` modules of ~100 bytes in 100 folders besides its own two files."""
    return gitrepos.make_repo(path, {f"pkg{i % 100:03d}/mod{i:05d}.py": f"# module {i}\nVALUE = {i}\n" + "x = 1\n" * 10
                                     for i in range(files)})


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def checkpoint_phase(root: Path, result: BenchResult, files: int) -> None:
    import os

    from sessions.worktree import checkpoints, trees

    os.environ["COMPOZY_HOME"] = str(root / "home")
    (root / "home" / "sessions" / SESSION).mkdir(parents=True)
    repo = make_repo(root / "big-repo", files)
    wt = Path(trees.add(SESSION, repo).worktree["path"])
    index, journal = root / "home" / "cp.index", root / "home" / "journal.json"
    cold = _timed(lambda: checkpoints.checkpoint(wt, index, "refs/compozy/bench/0", "cold", journal))
    runs = []
    for n in range(1, 6):
        for i in range(10):
            (wt / f"pkg{i:03d}" / f"mod{i:05d}.py").write_text(f"# changed in round {n}\n")
        (wt / f"new{n}.txt").write_text("added\n")
        runs.append(_timed(lambda n=n: checkpoints.checkpoint(wt, index, f"refs/compozy/bench/{n}", "warm", journal)))
    status = statistics.median(_timed(lambda: subprocess.run(["git", "status", "--porcelain"], cwd=wt,
                                                             capture_output=True, check=True)) for _ in range(5))
    warm = statistics.median(runs)
    result.metric("checkpoint.incremental", f"checkpoint of a {files:,}-file worktree, 11 files changed", warm, "s",
                  raw_limit=status, raw_label="git status", target=Target(Op.AT_MOST, 0.5), summary=True)
    result.metric("checkpoint.cold", f"first checkpoint of the {files:,}-file worktree (index seeded)", cold, "s")
    tree = git(wt, "ls-tree", "-r", "--name-only", "refs/compozy/bench/5").splitlines()
    expected = len(git(repo, "ls-files").splitlines()) + 5  # the repository's files and the 5 added
    result.check("the last checkpoint holds every file, the added ones included", len(tree) == expected,
                 f"{len(tree)} files in the tree, {expected} expected")


def _turns(bench: BenchDaemon, session: dict[str, Any], count: int, message: str = "echo turn") -> float:
    """Turns a second: `count` turns, each prompted once the last one (and its checkpoint) ended."""
    started = time.perf_counter()
    for i in range(count):
        bench.prompt(session, f"{message} {i}" if message.startswith("echo") else message)
        deadline = time.monotonic() + 60
        while True:
            s = bench.d.session(session["id"])
            if s["prompt_state"] == "idle" and not s.get("current_turn_id"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"turn {i} of {session['id']} did not end")
            time.sleep(0.002)
    return count / (time.perf_counter() - started)


def turns_phase(root: Path, result: BenchResult, quick: bool) -> None:
    repo = make_repo(root / "turn-repo", 2000)
    bench = BenchDaemon(root / "turns-home", extra=NO_TITLE)
    try:
        sessions = {}
        for isolation in ("none", "worktree"):
            response = bench.d.http.post("/api/sessions", json={"agent_name": "scripted", "isolation": isolation,
                                                                "workspace_path": str(repo)})
            response.raise_for_status()
            sessions[isolation] = bench.wait_state(response.json()["session"]["id"], {"active"})
        rounds, count, short = (2, 3, 10) if quick else (3, 5, 30)
        rates: dict[str, list[float]] = {"none": [], "worktree": []}
        echo: dict[str, list[float]] = {"none": [], "worktree": []}
        _turns(bench, sessions["none"], 3)  # warm-up: the agents' first turns
        _turns(bench, sessions["worktree"], 3)
        for _ in range(rounds):
            for isolation in ("none", "worktree"):
                rates[isolation].append(_turns(bench, sessions[isolation], count, "slow 6 0.2"))
                echo[isolation].append(_turns(bench, sessions[isolation], short))
        plain, isolated = statistics.median(rates["none"]), statistics.median(rates["worktree"])
        result.metric("turns.worktree", "worktree session, ~1 s turns a second", isolated, "turns/s",
                      raw_limit=plain, raw_label="plain session", target=Target(Op.AT_LEAST, 0.9, of_ratio=True),
                      summary=True)
        per_turn = 1000 / statistics.median(echo["worktree"]) - 1000 / statistics.median(echo["none"])
        result.metric("turns.overhead", "what a worktree turn adds (its checkpoint), one-line turns", per_turn, "ms",
                      raw_limit=1000 / statistics.median(echo["none"]), raw_label="a plain one-line turn")
        listed = bench.d.http.get(bench.scoped(sessions["worktree"], "/checkpoints")).json()["checkpoints"]
        expected = 3 + rounds * (count + short)
        result.check("every worktree turn left its checkpoint", len(listed) == expected,
                     f"{len(listed)} checkpoints for {expected} turns")
        result.check("the repository's checkout was never touched",
                     git(repo, "status", "--porcelain") == "", "git status in the workspace")
    finally:
        bench.stop()


def run(root: Path, quick: bool) -> BenchResult:
    result = BenchResult("worktrees", "Worktree sessions: a checkpoint per turn, and turn throughput beside a plain "
                                      "session")
    checkpoint_phase(root, result, 2000 if quick else 10_000)
    turns_phase(root, result, quick)
    return result
