"""Coordinated work on the real daemon (docs/reference/sessions.md §16): a task's plan runs through the workspace's
one coordinator session, each step in a spawned child; a killed child's step is retried once; stopping the
coordinator reaps its children."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, wait_for
from tests.gitrepos import make_repo


def create(d: Daemon, workspace: Path, steps: list[dict[str, Any]]) -> str:
    plan = workspace.parent / "plan.json"
    plan.write_text(json.dumps({"steps": steps}))
    made = d.cli_json("task", "create", "coordinated work", "--cwd", str(workspace), "--agent", "scripted",
                      "--plan", str(plan))
    assert made["task"]["runs"] == [] and len(made["steps"]) == len(steps)
    return str(made["task"]["id"])


def steps(d: Daemon, task_id: str) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in d.cli_json("task", "steps", task_id)["steps"]}


def status(d: Daemon, task_id: str) -> str:
    return str(d.http.get(f"/api/tasks/{task_id}").json()["task"]["status"])


def test_a_plan_runs_through_one_coordinator_and_a_spawned_child_per_step(daemon: Daemon, workspace: Path) -> None:
    task_id = create(daemon, workspace, [{"id": "a", "prompt": "echo first"},
                                         {"id": "b", "prompt": "echo second", "after": ["a"]},
                                         {"id": "c", "prompt": "echo third", "after": ["a"]}])
    wait_for(lambda: status(daemon, task_id) == "succeeded", 90, "the coordinated task to succeed")
    done = steps(daemon, task_id)
    assert {s["status"] for s in done.values()} == {"succeeded"} and {s["attempts"] for s in done.values()} == {1}
    coordinators = daemon.cli_json("session", "list", "--all", "--type", "coordinator",
                                   "--workspace", str(workspace))["sessions"]
    assert len(coordinators) == 1
    coordinator = coordinators[0]["id"]
    children = {sid: daemon.meta(s["session_id"]) for sid, s in done.items()}
    for sid, meta in children.items():
        assert meta["session_type"] == "spawned"
        lineage = meta["lineage"]
        assert (lineage["parent_session_id"], lineage["root_session_id"], lineage["spawn_depth"],
                lineage["spawn_role"]) == (coordinator, coordinator, 1, f"step:{sid}")
        assert lineage["ttl_seconds"] > 0 and meta["effective_permissions"]
    # b and c waited for a: their children were created after a's had answered.
    a_done = next(e for e in daemon.all_events(done["a"]["session_id"]) if e["type"] == "done")
    assert children["b"]["created_at"] > a_done["timestamp"] and children["c"]["created_at"] > a_done["timestamp"]
    spawned = {s["id"] for s in daemon.cli_json("session", "list", "--all", "--type", "spawned",
                                                "--workspace", str(workspace))["sessions"]}
    assert spawned == {s["session_id"] for s in done.values()}
    tree = daemon.http.get(daemon.scoped(coordinator, "/children")).json()["children"]
    assert sorted((c["role"], c["parent_session_id"]) for c in tree) == [
        ("step:a", coordinator), ("step:b", coordinator), ("step:c", coordinator)]
    # No work left: the coordinator is stopped.
    wait_for(lambda: daemon.session(coordinator)["state"] == "stopped", 60, "the idle coordinator to stop")


def test_a_killed_child_fails_its_step_which_is_retried_once(daemon: Daemon, workspace: Path) -> None:
    task_id = create(daemon, workspace, [{"id": "only", "prompt": "slow 8 0.5"}])

    def first_pid() -> int | None:
        step = steps(daemon, task_id)["only"]
        if not step["session_id"]:
            return None
        pid = (daemon.meta(step["session_id"]).get("liveness") or {}).get("subprocess_pid")
        return int(pid) if pid else None

    os.kill(wait_for(first_pid, 60, "the step's child and its agent"), signal.SIGKILL)
    wait_for(lambda: status(daemon, task_id) == "succeeded", 90, "the retried step to succeed")
    step = steps(daemon, task_id)["only"]
    assert step["attempts"] == 2 and len(step["sessions"]) == 2
    killed = daemon.session(step["sessions"][0])
    assert killed["state"] == "stopped" and killed["failure"], killed
    history = daemon.http.get(f"/api/tasks/{task_id}").json()["history"]
    assert [e["detail"].get("attempt") for e in history if e["kind"] == "task.run_recovered"] == [1]


def test_stopping_the_coordinator_reaps_its_children(daemon: Daemon, workspace: Path) -> None:
    task_id = create(daemon, workspace, [{"id": "long", "prompt": "hang"}, {"id": "next", "prompt": "echo x",
                                                                          "after": ["long"]}])
    child = wait_for(lambda: steps(daemon, task_id)["long"]["session_id"], 60, "the step's child")
    coordinator = daemon.meta(child)["lineage"]["parent_session_id"]
    assert daemon.http.post(daemon.scoped(coordinator, "/stop")).status_code == 204
    wait_for(lambda: daemon.session(child)["state"] == "stopped", 60, "the child to be reaped")
    assert daemon.session(child)["stop_detail"] == "reaped: parent stopped"
    wait_for(lambda: status(daemon, task_id) == "needs_attention", 60, "the task to need attention")
    left = steps(daemon, task_id)
    assert left["long"]["status"] == "needs_attention" and "coordinator" in left["long"]["detail"]
    assert left["next"]["status"] == "queued" and left["next"]["session_id"] is None


def test_in_a_repository_each_step_works_in_a_worktree_of_its_own(daemon: Daemon, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    task_id = create(daemon, repo, [{"id": "left", "prompt": "echo left"}, {"id": "right", "prompt": "echo right"}])
    wait_for(lambda: status(daemon, task_id) == "succeeded", 90, "the coordinated task to succeed")
    children = [daemon.meta(s["session_id"]) for s in steps(daemon, task_id).values()]
    trees = [Path(m["worktree"]["path"]) for m in children]
    assert len(set(trees)) == 2 and all(t.is_dir() and t != repo for t in trees)
    assert all(Path(m["cwd"]).is_relative_to(t) for m, t in zip(children, trees, strict=True))
