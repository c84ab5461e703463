"""Worktree sessions on real git repositories (docs/reference/worktrees.md), with the scripted agent editing files
both through the client's `fs/write_text_file` (`fswrite`) and straight on disk (`disk`), as Claude Code's own tools
do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests import conftest
from tests.conftest import Daemon, module_daemon, of_type, wait_for
from tests.gitrepos import checkpoints, fsck_clean, git, make_repo
from tests.gitrepos import turn_with_checkpoint as turn

# An agent whose sessions get a worktree unless the create says otherwise (`[agents.NAME] isolation`).
daemon = module_daemon('[agents.isolated]\nprovider = "scripted"\nisolation = "worktree"\n')


def new(daemon: Daemon, repo: Path, **extra: Any) -> dict[str, Any]:
    session = daemon.create(repo, isolation="worktree", **extra)
    assert session["state"] == "active", session
    return session


def said(daemon: Daemon, session_id: str, turn_id: str) -> str:
    return conftest.said(daemon.turn_events(session_id, turn_id))


def changes(daemon: Daemon, session_id: str, **query: str) -> dict[str, Any]:
    response = daemon.http.get(daemon.scoped(session_id, "/changes"), params=query)
    assert response.status_code == 200, response.text
    return response.json()


def test_two_worktree_sessions_leave_the_checkout_alone_and_changes_list_what_each_did(daemon: Daemon,
                                                                                    tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD")
    a, b = new(daemon, repo), new(daemon, repo)
    wt_a, wt_b = Path(a["worktree"]["path"]), Path(b["worktree"]["path"])
    assert a["isolation"] == "worktree" and a["cwd"] == str(wt_a)
    assert a["worktree"] == {"path": str(wt_a), "branch": f"compozy/{a['id']}", "base_commit": head,
                             "repo": str(repo), "base_branch": "main"}
    first = turn(daemon, a["id"], "fswrite notes/a.txt from the client")
    assert "fswrite ok" in conftest.said(daemon.events(a["id"]))
    turn(daemon, a["id"], "disk write src/b.txt straight on disk")
    turn(daemon, a["id"], "disk write debug.log ignored by the repository")
    turn(daemon, a["id"], "disk bytes blob.bin 300")
    turn(daemon, a["id"], "disk rm README.md")
    turn(daemon, b["id"], "disk write b-only.txt mine")
    # The agent's own git works in its worktree (the sandbox leaves the repository's git directory writable).
    assert "disk git 0" in said(daemon, b["id"], turn(daemon, b["id"], "disk git add -A"))
    assert "disk git 0" in said(daemon, b["id"], turn(daemon, b["id"], "disk git commit -q -m agent-commit"))

    # The user's checkout: never touched.
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(repo, "rev-parse", "HEAD") == head and (repo / "README.md").exists()
    # Each session sees only its own edits.
    assert (wt_a / "notes/a.txt").read_text() == "from the client\n" and not (wt_a / "b-only.txt").exists()
    assert (wt_b / "b-only.txt").read_text() == "mine\n" and not (wt_b / "notes/a.txt").exists()

    found = changes(daemon, a["id"])
    by_path = {f["path"]: f for f in found["files"]}
    assert found["base"] == head
    assert set(by_path) == {"notes/a.txt", "src/b.txt", "blob.bin", "README.md"}  # debug.log is ignored
    assert by_path["notes/a.txt"]["status"] == "added" and by_path["notes/a.txt"]["additions"] == 1
    assert "+from the client" in by_path["notes/a.txt"]["patch"]
    assert by_path["README.md"]["status"] == "deleted" and by_path["README.md"]["deletions"] == 1
    assert by_path["blob.bin"]["binary"] is True and by_path["blob.bin"]["patch"] is None
    assert by_path["blob.bin"]["patch_omitted"] == "binary" and found["truncated"] is False
    assert [f["path"] for f in changes(daemon, a["id"], turn=first)["files"]] == ["notes/a.txt"]
    assert [f["path"] for f in changes(daemon, b["id"])["files"]] == ["b-only.txt"]
    # The list's count, kept with the record at each checkpoint (no git call per listed session).
    wait_for(lambda: daemon.session(a["id"])["worktree"].get("changed_files") == 4, 30, "the changed-files count")
    assert git(repo, "log", "-1", "--format=%s", f"compozy/{b['id']}") == "agent-commit"

    # A checkpoint per turn, as refs, without moving the branch, HEAD or the index the agent sees.
    listed = checkpoints(daemon, a["id"])
    assert [c["n"] for c in listed] == [1, 2, 3, 4, 5] and all(c["reason"] == "turn" for c in listed)
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", f"refs/compozy/{a['id']}/")
    assert {line.split()[0] for line in refs.splitlines()} == {f"refs/compozy/{a['id']}/{n}" for n in range(1, 6)}
    assert git(wt_a, "rev-parse", "HEAD") == head and git(wt_a, "diff", "--cached", "--name-only") == ""
    assert "debug.log" not in git(repo, "ls-tree", "-r", "--name-only", listed[-1]["commit"])
    assert of_type(daemon.events(a["id"]), "checkpoint")[-1]["content"]["commit"] == listed[-1]["commit"]
    assert fsck_clean(repo) == ""


def test_rewind_restores_files_byte_for_byte_and_the_agent_sees_the_earlier_conversation_only(
        daemon: Daemon, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"keep.txt": "original\n"})
    s = new(daemon, repo)
    wt = Path(s["worktree"]["path"])
    turn(daemon, s["id"], "fswrite f.txt one")
    at_one = {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file() and p.name != ".git"}
    turn(daemon, s["id"], "disk write f.txt two")
    turn(daemon, s["id"], "disk write g.txt laterword")
    turn(daemon, s["id"], "disk bytes keep.txt 50")
    assert (wt / "g.txt").exists()

    missing = daemon.http.post(daemon.scoped(s["id"], "/rewind"), json={"checkpoint": 99})
    assert missing.status_code == 404 and missing.json()["code"] == "checkpoint_not_found"
    # Not while a turn runs.
    assert daemon.prompt(s["id"], "toolhang").status_code == 200
    daemon.wait_event(s["id"], "tool_call")
    busy = daemon.http.post(daemon.scoped(s["id"], "/rewind"), json={"checkpoint": 1})
    assert busy.status_code == 409 and busy.json()["code"] == "session_busy"
    assert daemon.http.post(daemon.scoped(s["id"], "/prompt/cancel")).status_code == 200
    wait_for(lambda: daemon.session(s["id"])["prompt_state"] == "idle", 30, "the cancelled turn's end")
    wait_for(lambda: len(checkpoints(daemon, s["id"])) == 5, 30, "the cancelled turn's checkpoint")

    response = daemon.http.post(daemon.scoped(s["id"], "/rewind"), json={"checkpoint": 1})
    assert response.status_code == 200, response.text
    rewound = response.json()
    assert {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file() and p.name != ".git"} == at_one
    assert rewound["session"]["worktree"]["changed_files"] == 1
    assert len(rewound["rewound_turns"]) == 4 and rewound["before"]["reason"] == "rewind"
    marker = [e for e in daemon.events(s["id"]) if e["type"] == "transcript_marker.created"
              and e["content"]["title"] == "session_rewound"]
    assert marker and marker[-1]["content"]["raw"]["evidence"]["rewound_turns"] == rewound["rewound_turns"]
    listed = checkpoints(daemon, s["id"])
    assert [c["rewound"] for c in listed if c["reason"] == "turn"] == [False, True, True, True, True]
    history = daemon.http.get(daemon.scoped(s["id"], "/history")).json()["history"]
    assert {t["turn_id"] for t in history if t.get("rewound")} == set(rewound["rewound_turns"])

    # The agent continues from checkpoint 1's turn: the replay holds it and nothing after.
    echoed = said(daemon, s["id"], turn(daemon, s["id"], "what now"))
    assert "fswrite f.txt one" in echoed and "laterword" not in echoed and "disk write f.txt two" not in echoed

    # A rewind is undone by rewinding to the checkpoint taken before it.
    undo = daemon.http.post(daemon.scoped(s["id"], "/rewind"), json={"checkpoint": rewound["before"]["n"]})
    assert undo.status_code == 200, undo.text
    assert (wt / "g.txt").read_text() == "laterword\n" and (wt / "f.txt").read_text() == "two\n"
    assert fsck_clean(repo) == ""


def test_fork_commit_and_merge(daemon: Daemon, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"shared.txt": "base\n"})
    s = new(daemon, repo, name="feature work")
    turn(daemon, s["id"], "fswrite feature.txt the feature")
    turn(daemon, s["id"], "disk write later.txt after the fork point")

    forked = daemon.http.post(daemon.scoped(s["id"], "/fork"), json={"checkpoint": 1})
    assert forked.status_code == 201, forked.text
    child = forked.json()["session"]
    assert child["forked_from"] == {"session_id": s["id"], "checkpoint": 1}
    child_wt = Path(child["worktree"]["path"])
    assert (child_wt / "feature.txt").read_text() == "the feature\n" and not (child_wt / "later.txt").exists()
    daemon.wait_state(child["id"], {"active"})
    echoed = said(daemon, child["id"], turn(daemon, child["id"], "and the fork"))
    assert "fswrite feature.txt the feature" in echoed and "after the fork point" not in echoed
    newest = daemon.http.post(daemon.scoped(s["id"], "/fork"), json={})  # no checkpoint named: the newest
    assert newest.status_code == 201, newest.text
    assert newest.json()["session"]["forked_from"] == {"session_id": s["id"], "checkpoint": 2}
    assert (Path(newest.json()["session"]["worktree"]["path"]) / "later.txt").read_text() == "after the fork point\n"

    committed = daemon.http.post(daemon.scoped(s["id"], "/commit"), json={})
    assert committed.status_code == 200 and committed.json()["committed"] is True
    assert git(repo, "log", "-1", "--format=%s", f"compozy/{s['id']}") == "feature work"

    # A dirty checkout of the target is refused, and left exactly as it was.
    (repo / "README.md").write_text("the user's own edit\n")
    dirty = daemon.http.post(daemon.scoped(s["id"], "/merge"), json={})
    assert dirty.status_code == 409 and dirty.json()["code"] == "checkout_dirty"
    assert (repo / "README.md").read_text() == "the user's own edit\n" and not (repo / "feature.txt").exists()
    git(repo, "checkout", "--", "README.md")

    merged = daemon.http.post(daemon.scoped(s["id"], "/merge"), json={})
    assert merged.status_code == 200, merged.text
    body = merged.json()
    assert body["merged"] is True and body["target"] == "main" and set(body["files"]) == {"feature.txt", "later.txt"}
    assert git(repo, "rev-parse", "main") == body["commit"] and (repo / "feature.txt").read_text() == "the feature\n"
    mask = os.umask(0)
    os.umask(mask)
    assert (repo / "feature.txt").stat().st_mode & 0o777 == 0o666 & ~mask  # the user's umask, not the daemon's
    assert git(repo, "status", "--porcelain") == ""

    # A conflict names the files and changes nothing.
    (repo / "shared.txt").write_text("the user's line\n")
    git(repo, "commit", "-qam", "user edit")
    turn(daemon, child["id"], "disk write shared.txt the fork's line")
    assert daemon.http.post(daemon.scoped(child["id"], "/commit"), json={"message": "fork edit"}).status_code == 200
    before = git(repo, "rev-parse", "main")
    conflict = daemon.http.post(daemon.scoped(child["id"], "/merge"), json={"into": "main"})
    assert conflict.status_code == 409 and conflict.json()["code"] == "merge_conflict"
    assert "shared.txt" in conflict.json()["diagnostic"]["evidence"]["files"]
    assert git(repo, "rev-parse", "main") == before and git(repo, "status", "--porcelain") == ""
    assert fsck_clean(repo) == ""


def test_remove_refuses_unsaved_work_and_keeps_a_final_ref_when_forced(daemon: Daemon, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    s = new(daemon, repo)
    wt = Path(s["worktree"]["path"])
    turn(daemon, s["id"], "disk write unsaved.txt precious")
    refused = daemon.cli("session", "remove", s["id"])
    assert refused.returncode != 0 and "worktree_has_work" in refused.stderr
    assert wt.is_dir() and daemon.session(s["id"])["state"] == "active"

    daemon.cli_json("session", "remove", s["id"], "--force")
    assert not wt.exists()
    final = git(repo, "rev-parse", f"refs/compozy/{s['id']}/final")
    assert git(repo, "show", f"{final}:unsaved.txt") == "precious"
    listed = daemon.cli_json("worktree", "list")
    assert s["id"] not in {w["session_id"] for w in listed["worktrees"]}
    dry = daemon.cli_json("worktree", "prune", "--dry-run")
    assert f"refs/compozy/{s['id']}/final" in {p["name"] for p in dry["pruned"]}
    assert git(repo, "rev-parse", f"refs/compozy/{s['id']}/final") == final
    daemon.cli_json("worktree", "prune")
    assert git(repo, "rev-parse", "-q", "--verify", f"refs/compozy/{s['id']}/final", check=False) == ""
    assert fsck_clean(repo) == ""


def test_remove_of_a_clean_session_takes_its_worktree_and_branch(daemon: Daemon, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    s = new(daemon, repo)
    wt, branch = Path(s["worktree"]["path"]), s["worktree"]["branch"]
    assert wt.is_dir() and git(repo, "branch", "--list", branch) != ""
    daemon.cli_json("session", "remove", s["id"])
    assert not wt.exists() and git(repo, "branch", "--list", branch) == ""
    assert git(repo, "rev-parse", "-q", "--verify", f"refs/compozy/{s['id']}/final", check=False) == ""
    assert fsck_clean(repo) == ""


def test_cli_reads_changes_and_checkpoints_and_refuses_a_plain_folder(daemon: Daemon, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    response = daemon.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(plain),
                                                        "isolation": "worktree"})
    assert response.status_code == 400 and response.json()["code"] == "workspace_not_git"
    repo = make_repo(tmp_path / "repo")
    created = daemon.cli_json("session", "new", "--cwd", str(repo), "--agent", "scripted", "--isolation", "worktree")
    turn(daemon, created["id"], "fswrite cli.txt via the cli")
    assert [f["path"] for f in daemon.cli_json("session", "changes", created["id"])["files"]] == ["cli.txt"]
    listed = daemon.cli_json("session", "checkpoints", created["id"])["checkpoints"]
    assert [c["n"] for c in listed] == [1]
    human = daemon.cli("session", "changes", created["id"], "--patch")
    assert human.returncode == 0 and "+via the cli" in human.stdout
    status = daemon.cli("session", "status", created["id"])
    assert status.returncode == 0 and f"compozy/{created['id']}" in status.stdout
    listing = daemon.cli_json("worktree", "list")
    rows = listing["worktrees"]
    mine = next(w for w in rows if w["session_id"] == created["id"])
    assert mine["dirty"] is True and mine["ahead"] == 0 and mine["size_bytes"] > 0
    doctor = {i["id"]: i for i in daemon.cli_json("doctor", "--only", "worktrees")["items"]}
    assert doctor["git"]["severity"] == "ok" and doctor["worktrees_disk"]["severity"] == "ok"
    assert doctor["worktrees_disk"]["evidence"]["size_bytes"] >= mine["size_bytes"]
    # The listing's total is its rows' (each folder once), the same bytes the doctor measures on the whole folder.
    assert listing["size_bytes"] == doctor["worktrees_disk"]["evidence"]["size_bytes"] >= mine["size_bytes"]


def test_a_plain_session_has_no_worktree_and_an_agent_can_ask_for_one(daemon: Daemon, workspace: Path,
                                                                       tmp_path: Path) -> None:
    s = daemon.create(workspace)
    assert s["isolation"] == "none" and s["worktree"] is None and s["cwd"] == str(workspace)
    response = daemon.http.get(daemon.scoped(s["id"], "/changes"))
    assert response.status_code == 400 and response.json()["code"] == "session_not_isolated"
    repo = make_repo(tmp_path / "repo")
    by_agent = daemon.create(repo, agent="isolated")
    assert by_agent["isolation"] == "worktree" and by_agent["worktree"]["branch"] == f"compozy/{by_agent['id']}"
    overridden = daemon.create(repo, agent="isolated", isolation="none")
    assert overridden["isolation"] == "none" and overridden["cwd"] == str(repo)


def task_runs(daemon: Daemon, task_id: str) -> list[dict[str, Any]]:
    response = daemon.http.get(f"/api/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return list(response.json()["task"]["runs"])


def test_a_task_in_a_git_workspace_gets_a_worktree_and_its_retry_continues_there(daemon: Daemon,
                                                                                  tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    created = daemon.http.post("/api/tasks", json={"prompt": "error", "agent_name": "scripted",
                                                   "workspace_path": str(repo)})
    assert created.status_code == 201, created.text
    task_id = created.json()["task"]["id"]
    wait_for(lambda: daemon.http.get(f"/api/tasks/{task_id}").json()["task"]["status"] == "failed", 60,
             "the task's first attempt to fail")
    first = daemon.session(task_runs(daemon, task_id)[0]["session_id"])
    assert first["isolation"] == "worktree" and Path(first["worktree"]["path"]).is_dir()
    (Path(first["worktree"]["path"]) / "progress.txt").write_text("the first attempt's work\n")
    daemon.cli_json("task", "retry", task_id)
    wait_for(lambda: len([r for r in task_runs(daemon, task_id) if r.get("session_id")]) == 2, 60,
             "the retry's session")
    second = daemon.session(next(r["session_id"] for r in task_runs(daemon, task_id) if r["attempt"] == 2))
    assert second["worktree"]["path"] == first["worktree"]["path"] and second["cwd"] == first["cwd"]
    assert (Path(second["worktree"]["path"]) / "progress.txt").read_text() == "the first attempt's work\n"
    assert git(repo, "status", "--porcelain") == ""


def test_a_stopped_session_rewinds_and_its_reactivation_replays_only_the_earlier_turns(daemon: Daemon,
                                                                                        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    s = new(daemon, repo)
    wt = Path(s["worktree"]["path"])
    turn(daemon, s["id"], "fswrite kept.txt earlyword")
    turn(daemon, s["id"], "disk write gone.txt lateword")
    assert daemon.http.post(daemon.scoped(s["id"], "/stop")).status_code == 204
    daemon.wait_state(s["id"], {"stopped"})
    response = daemon.cli_json("session", "rewind", s["id"], "--to", "1")
    assert response["checkpoint"] == 1 and len(response["rewound_turns"]) == 1
    assert (wt / "kept.txt").read_text() == "earlyword\n" and not (wt / "gone.txt").exists()
    assert daemon.meta(s["id"])["acp_session_id"] == ""  # the agent's own memory of the later turn is dropped
    echoed = said(daemon, s["id"], turn(daemon, s["id"], "after the stop"))  # the prompt reactivates it
    assert "fswrite kept.txt earlyword" in echoed and "lateword" not in echoed
