"""Lifecycle hook dispatcher: real hook subprocesses (small Python scripts), real EventLog storage."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from compozy_base.config.hook_declarations import parse_hook_declarations
from compozy_base.config.loader import ConfigError, HookDeclaration, load_config
from sessions.hooks import (
    ASYNC_ONLY_EVENTS,
    PATCH_KEYS,
    HookEvent,
    HookOutcome,
    HookRunner,
    current_depth,
    format_duration,
    merge_declarations,
    text_vs_authored,
    validate_declarations,
)
from sessions.store.events import EventLog, read_hook_runs
from tests.conftest import wait_gone

ROW_KEYS = {"id", "hook_name", "event", "source", "mode", "duration_ns", "outcome", "dispatch_depth",
            "patch_applied", "error", "required", "recorded_at"}

# Reads the payload, applies an expression to it and prints the result as the patch (or nothing).
PATCH_SCRIPT = """
import json, sys
payload = json.load(sys.stdin)
patch = {patch}
if patch is not None:
    print(json.dumps(patch))
"""


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def hook(name: str, event: str, path: Path | None = None, *, mode: str = "sync", args: tuple[str, ...] = (),
         **kwargs: Any) -> HookDeclaration:
    argv = (str(path), *args) if path is not None else args
    return HookDeclaration(name=name, event=event, command=sys.executable, args=argv, mode=mode, **kwargs)


def patch_hook(tmp_path: Path, name: str, event: str, patch: str, **kwargs: Any) -> HookDeclaration:
    """A hook whose stdout is `patch` (a Python expression over `payload`)."""
    return hook(name, event, script(tmp_path, name, PATCH_SCRIPT.format(patch=patch)), **kwargs)


def shell_hook(name: str, event: str, command: str, **kwargs: Any) -> HookDeclaration:
    return HookDeclaration(name=name, event=event, command="/bin/sh", args=("-c", command), **kwargs)


class Rows(list[dict[str, Any]]):
    def outcomes(self) -> dict[str, str]:
        return {row["hook_name"]: row["outcome"] for row in self}


def dispatch(runner: HookRunner, event: str, payload: dict[str, Any], **kwargs: Any) -> HookOutcome:
    return asyncio.run(runner.dispatch(event, payload, **kwargs))


def runner_with_rows(decls: list[HookDeclaration], **kwargs: Any) -> tuple[HookRunner, Rows]:
    rows = Rows()
    return HookRunner(decls, record_run=rows.append, **kwargs), rows


# ---- patches and the sync chain -------------------------------------------------------------------


def test_sync_patch_is_applied_and_hook_receives_the_payload_on_stdin(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    body = f"""
    import json, sys
    payload = json.load(sys.stdin)
    open({str(seen)!r}, "w").write(json.dumps(payload))
    print(json.dumps({{"message": payload["message"].upper(), "context_blocks": [{{"kind": "note", "text": "x"}}]}}))
    """
    runner, rows = runner_with_rows([hook("upper", "input.pre_submit", script(tmp_path, "upper", body))])
    outcome = dispatch(runner, "input.pre_submit", {"message": "hello", "session_id": "sess_1", "agent_name": "a"})

    assert outcome.ok and not outcome.denied and not outcome.required_failed
    assert outcome.payload["message"] == "HELLO"
    assert outcome.payload["context_blocks"] == [{"kind": "note", "text": "x"}]
    stdin = json.loads(seen.read_text())
    assert stdin["message"] == "hello" and stdin["event"] == "input.pre_submit" and stdin["timestamp"]
    assert rows == outcome.runs and len(rows) == 1
    row = rows[0]
    assert set(row) == ROW_KEYS
    assert re.fullmatch(r"hook-[0-9a-f]{16}", row["id"])
    assert row["outcome"] == "applied" and row["mode"] == "sync" and row["source"] == "config"
    assert row["dispatch_depth"] == 1 and row["duration_ns"] > 0 and row["error"] is None
    assert json.loads(row["patch_applied"])["message"] == "HELLO"


def test_each_sync_hook_sees_the_previous_patch_and_order_is_source_then_priority_then_name(
    tmp_path: Path,
) -> None:
    append = '{"message": payload["message"] + "|" + %r}'
    decls = [
        patch_hook(tmp_path, "b", "input.pre_submit", append % "b"),
        patch_hook(tmp_path, "skill-hi", "input.pre_submit", append % "skill-hi", source="skill", priority=5000),
        patch_hook(tmp_path, "agentdef", "input.pre_submit", append % "agentdef", source="agent_definition",
                   priority=2000),
        patch_hook(tmp_path, "a", "input.pre_submit", append % "a"),
        patch_hook(tmp_path, "z-high", "input.pre_submit", append % "z-high", priority=900),
        patch_hook(tmp_path, "native-low", "input.pre_submit", append % "native-low", source="native", priority=0),
    ]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "input.pre_submit", {"message": "m"})

    order = ["native-low", "z-high", "a", "b", "agentdef", "skill-hi"]
    assert outcome.payload["message"] == "m|" + "|".join(order)
    assert [r["hook_name"] for r in rows] == order
    assert {r["outcome"] for r in rows} == {"applied"}


def test_empty_stdout_is_an_empty_patch(tmp_path: Path) -> None:
    runner, rows = runner_with_rows([patch_hook(tmp_path, "quiet", "input.pre_submit", "None")])
    outcome = dispatch(runner, "input.pre_submit", {"message": "same"})
    assert outcome.ok and outcome.payload["message"] == "same"
    assert rows.outcomes() == {"quiet": "applied"}
    assert rows[0]["patch_applied"] is None


def test_no_matching_hook_runs_nothing_and_writes_no_row(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    runner, rows = runner_with_rows([shell_hook("other", "turn.start", f"touch {marker}")])
    outcome = dispatch(runner, "input.pre_submit", {"message": "x"})
    assert outcome.ok and outcome.runs == [] and rows == []
    assert not marker.exists()
    assert not runner.has_hooks("input.pre_submit") and runner.has_hooks("turn.start")


# ---- deny, required, failures ---------------------------------------------------------------------


def test_deny_ends_the_chain_and_skips_async_hooks(tmp_path: Path) -> None:
    later = tmp_path / "later-ran"
    observer = tmp_path / "observer-ran"
    decls = [
        patch_hook(tmp_path, "edit", "input.pre_submit", '{"message": "edited"}', priority=900),
        patch_hook(tmp_path, "blocker", "input.pre_submit", '{"deny": True, "deny_reason": "contains a secret"}'),
        shell_hook("later", "input.pre_submit", f"touch {later}", mode="sync", priority=100),
        shell_hook("observer", "input.pre_submit", f"touch {observer}", mode="async"),
    ]
    runner, rows = runner_with_rows(decls)

    async def go() -> HookOutcome:
        outcome = await runner.dispatch("input.pre_submit", {"message": "my password"})
        await runner.drain(timeout=5)
        return outcome

    outcome = asyncio.run(go())
    assert outcome.denied and not outcome.ok and not outcome.required_failed
    assert outcome.deny_reason == "contains a secret" and outcome.hook_name == "blocker"
    assert not outcome.hook_required
    assert outcome.error == 'hooks: event "input.pre_submit" denied: contains a secret'
    assert outcome.payload["message"] == "edited"  # patches before the denial stay visible
    assert rows.outcomes() == {"edit": "applied", "blocker": "denied"}
    assert not later.exists() and not observer.exists()


def test_required_hook_failure_aborts_the_dispatch(tmp_path: Path) -> None:
    later = tmp_path / "later-ran"
    body = """
    import sys
    print('{"message": "ignored"}')
    sys.stderr.write("policy engine unreachable\\n")
    sys.exit(3)
    """
    decls = [
        hook("policy", "tool.pre_call", script(tmp_path, "policy", body), required=True, priority=900),
        shell_hook("later", "tool.pre_call", f"touch {later}", mode="sync"),
    ]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "tool.pre_call", {"tool_id": "shell", "read_only": False, "tool_input": {}})

    assert outcome.required_failed and not outcome.denied and not outcome.ok
    assert outcome.error == 'hooks: required hook "policy" failed for event "tool.pre_call"'
    assert outcome.hook_name == "policy" and outcome.hook_required
    assert rows.outcomes() == {"policy": "failed"}
    assert rows[0]["error"] == "hook command failed: exit status 3 (policy engine unreachable)"
    assert rows[0]["required"] is True
    assert not later.exists()


def test_non_required_failure_is_recorded_and_skipped(tmp_path: Path) -> None:
    body = """
    import sys
    print('{"message": "from a failing hook"}')
    sys.exit(1)
    """
    decls = [
        hook("flaky", "input.pre_submit", script(tmp_path, "flaky", body), priority=900),
        patch_hook(tmp_path, "suffix", "input.pre_submit", '{"message": payload["message"] + "!"}'),
    ]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "input.pre_submit", {"message": "hi"})

    assert outcome.ok and outcome.payload["message"] == "hi!"
    assert rows.outcomes() == {"flaky": "failed", "suffix": "applied"}
    assert rows[0]["error"] == "hook command failed: exit status 1"
    assert rows[0]["patch_applied"] is None


def test_missing_command_is_a_failed_run() -> None:
    decl = HookDeclaration(name="ghost", event="turn.start", command="/nonexistent/compozy-hook", mode="sync")
    runner, rows = runner_with_rows([decl])
    outcome = dispatch(runner, "turn.start", {"turn_id": "t1"})
    assert outcome.ok
    assert rows.outcomes() == {"ghost": "failed"}
    assert rows[0]["error"].startswith("hook command failed: ")


@pytest.mark.parametrize(
    ("stdout", "error"),
    [
        ('{"message": "x", "model": "gpt"}', "hook patch: unknown key 'model' for event 'input.pre_submit'"),
        ('{"message": "a"} {"message": "b"}', "hook patch: unexpected data after the JSON object"),
        ('{"message": "a"}\n{}', "hook patch: unexpected data after the JSON object"),
        ('["message"]', "hook patch must be a JSON object"),
        ('{"message": 42}', "hook patch: 'message' must be a string"),
        ('{"deny": "yes"}', "hook patch: 'deny' must be a boolean"),
        ('{"message": NaN}', "hook patch: invalid JSON value NaN"),
        ("not json", "hook patch: invalid JSON"),
    ],
)
def test_strict_patch_decoding_failures_are_failed_runs(tmp_path: Path, stdout: str, error: str) -> None:
    body = f"import sys; sys.stdin.read(); sys.stdout.write({stdout!r})"
    runner, rows = runner_with_rows([hook("bad", "input.pre_submit", script(tmp_path, "bad", body))])
    outcome = dispatch(runner, "input.pre_submit", {"message": "original"})
    assert outcome.ok and outcome.payload["message"] == "original"
    assert rows.outcomes() == {"bad": "failed"}
    assert rows[0]["error"].startswith(error)


def test_oversized_stdout_is_bounded_and_fails_the_run(tmp_path: Path) -> None:
    body = "import sys; sys.stdout.write('x' * (3 * 1024 * 1024))"
    runner, rows = runner_with_rows([hook("chatty", "input.pre_submit", script(tmp_path, "chatty", body))])
    dispatch(runner, "input.pre_submit", {"message": "m"})
    assert rows.outcomes() == {"chatty": "failed"}
    assert rows[0]["error"] == "hook patch: output exceeds 1048576 bytes"


def test_long_stderr_is_truncated_in_the_error(tmp_path: Path) -> None:
    body = "import sys; sys.stderr.write('e' * 200000); sys.exit(2)"
    runner, rows = runner_with_rows([hook("loud", "turn.start", script(tmp_path, "loud", body))])
    dispatch(runner, "turn.start", {})
    error = rows[0]["error"]
    assert error.startswith("hook command failed: exit status 2 (eee")
    assert "...[truncated]" in error and len(error) < 70 * 1024


def test_errors_and_patches_are_redacted(tmp_path: Path) -> None:
    key = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
    body = f"""
    import json, sys
    json.load(sys.stdin)
    print(json.dumps({{"tool_input": {{"api_key": {key!r}}}}}))
    """
    fail = f"import sys; sys.stderr.write('token={key}'); sys.exit(1)"
    decls = [hook("leaky", "tool.pre_call", script(tmp_path, "leaky", body)),
             hook("failing", "tool.pre_call", script(tmp_path, "failing", fail))]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "tool.pre_call", {"tool_id": "x"})
    assert outcome.payload["tool_input"] == {"api_key": key}  # the operation gets the real value
    assert all(key not in json.dumps(row) for row in rows)
    by_name = {r["hook_name"]: r for r in rows}
    assert "[REDACTED]" in by_name["leaky"]["patch_applied"] and "[REDACTED]" in by_name["failing"]["error"]


# ---- guards -------------------------------------------------------------------------------------


def test_permission_patch_turning_a_denial_into_allow_is_rejected(tmp_path: Path) -> None:
    decls = [
        patch_hook(tmp_path, "upgrade", "permission.request", '{"decision": "approved", "reason": "trust me"}'),
        patch_hook(tmp_path, "annotate", "permission.request", '{"reason": "seen by annotate"}', priority=100),
    ]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "permission.request", {"request_id": "r1", "decision": "denied"})
    assert outcome.ok and not outcome.denied
    assert outcome.payload["decision"] == "denied"
    assert outcome.payload["reason"] == "seen by annotate"  # the whole rejected patch was dropped
    assert rows.outcomes() == {"upgrade": "rejected", "annotate": "applied"}
    assert "may not turn decision 'denied' into 'approved'" in rows[0]["error"]
    assert json.loads(rows[0]["patch_applied"])["decision"] == "approved"


def test_permission_patch_may_tighten_an_allow_into_a_denial(tmp_path: Path) -> None:
    decls = [patch_hook(tmp_path, "tighten", "permission.request", '{"decision": "denied", "reason": "no"}')]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "permission.request", {"request_id": "r1", "decision": "approved"})
    assert outcome.payload["decision"] == "denied"
    assert rows.outcomes() == {"tighten": "applied"}


def test_pre_create_patch_may_not_move_a_session_out_of_coordinator(tmp_path: Path) -> None:
    decls = [patch_hook(tmp_path, "retype", "session.pre_create", '{"session_type": "user"}')]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "session.pre_create", {"session_type": "coordinator"})
    assert outcome.payload["session_type"] == "coordinator"
    assert rows.outcomes() == {"retype": "rejected"}


# ---- timeout ------------------------------------------------------------------------------------


def test_timeout_kills_the_hooks_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # The grandchild ignores SIGTERM (kept across exec), so only the SIGKILL to the group can end it.
    command = (
        f"/bin/sh -c \"trap '' TERM; echo \\$\\$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 60\" &"
        f" while [ ! -s {pid_file} ]; do sleep 0.01; done; exec sleep 60"
    )
    runner, rows = runner_with_rows([shell_hook("sleeper", "turn.start", command, mode="sync", timeout=2.0)])
    outcome = dispatch(runner, "turn.start", {"turn_id": "t1"})

    assert outcome.ok  # not required: recorded and skipped
    assert rows.outcomes() == {"sleeper": "failed"}
    assert rows[0]["error"] == "hook timed out after 2s"
    grandchild_pid = int(pid_file.read_text())
    assert wait_gone(grandchild_pid, 5), f"grandchild {grandchild_pid} survived the timeout"


def test_required_hook_timeout_aborts() -> None:
    decl = hook("slow", "input.pre_submit", args=("-c", "import time; time.sleep(30)"), required=True,
                timeout=0.3)
    runner, rows = runner_with_rows([decl])
    outcome = dispatch(runner, "input.pre_submit", {"message": "m"})
    assert outcome.required_failed
    assert rows[0]["error"] == "hook timed out after 300ms"


def test_cancelling_a_dispatch_kills_the_running_hook_and_records_the_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "hook.pid"
    command = f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 60"
    runner, rows = runner_with_rows([shell_hook("gate", "tool.pre_call", command, mode="sync", timeout=60)])

    async def go() -> None:
        task = asyncio.create_task(runner.dispatch("tool.pre_call", {"tool_id": "x"}))
        while not pid_file.exists():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert rows.outcomes() == {"gate": "failed"} and rows[0]["error"] == "hook run cancelled"
    pid = int(pid_file.read_text())
    assert wait_gone(pid, 5), f"hook {pid} survived the cancellation"


def test_payload_with_non_json_values_and_lone_surrogates_reaches_the_hook(tmp_path: Path) -> None:
    body = """
    import json, sys
    payload = json.load(sys.stdin)
    print(json.dumps({"message": payload["message"] + "|" + payload["path"]}))
    """
    runner, rows = runner_with_rows([hook("echo", "input.pre_submit", script(tmp_path, "echo", body))])
    outcome = dispatch(runner, "input.pre_submit", {"message": "bad \udc80 byte", "path": tmp_path})
    assert rows.outcomes() == {"echo": "applied"}
    assert outcome.payload["message"] == f"bad \udc80 byte|{tmp_path}"


def test_format_duration_uses_go_spelling() -> None:
    assert [format_duration(s) for s in (3, 0.5, 1.5, 90, 5)] == ["3s", "500ms", "1.5s", "1m30s", "5s"]


# ---- dispatch depth -----------------------------------------------------------------------------


def test_sync_dispatch_beyond_max_depth_errors_and_async_runs_are_skipped(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    decls = [shell_hook("gate", "turn.start", f"touch {marker}", mode="sync"),
             shell_hook("watch", "turn.start", f"touch {marker}", mode="async")]
    runner, rows = runner_with_rows(decls)
    outcome = dispatch(runner, "turn.start", {"turn_id": "t"}, depth=4)
    assert outcome.error == 'hooks: dispatch depth exceeded for event "turn.start": depth 4 exceeds max 3'
    assert not outcome.ok
    assert rows.outcomes() == {"gate": "skipped", "watch": "skipped"}
    assert {r["dispatch_depth"] for r in rows} == {4} and {r["duration_ns"] for r in rows} == {0}
    assert not marker.exists()

    async_only, async_rows = runner_with_rows([shell_hook("watch", "message.delta", "true", mode="async")])
    outcome = dispatch(async_only, "message.delta", {"text": "x"}, depth=4)
    assert outcome.ok  # async-only: nothing to fail, the run is just skipped
    assert async_rows.outcomes() == {"watch": "skipped"}


def test_nested_dispatches_inherit_depth_in_process_and_export_it_to_hooks(tmp_path: Path) -> None:
    body = """
    import json, os, sys
    json.load(sys.stdin)
    print(json.dumps({"labels": {"depth": os.environ["COMPOZY_HOOK_DEPTH"]}}))
    """
    decl = hook("depth", "turn.start", script(tmp_path, "depth", body))
    outcomes: list[HookOutcome] = []
    nested: list[asyncio.Task[HookOutcome]] = []
    rows = Rows()

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        if row["outcome"] == "skipped":
            return
        # An operation the hooked one starts (here: from inside the dispatch) is a nested dispatch.
        nested.append(asyncio.get_running_loop().create_task(runner.dispatch("turn.start", {"turn_id": "t"})))

    runner = HookRunner([decl], record_run=record)

    async def go() -> None:
        assert current_depth() == 0
        outcomes.append(await runner.dispatch("turn.start", {"turn_id": "t"}))
        while len(outcomes) < 4:
            outcomes.append(await nested[len(outcomes) - 1])
        assert current_depth() == 0

    asyncio.run(go())
    assert [o.payload.get("labels") for o in outcomes[:3]] == [{"depth": "1"}, {"depth": "2"}, {"depth": "3"}]
    assert [r["dispatch_depth"] for r in rows] == [1, 2, 3, 4]
    assert [r["outcome"] for r in rows] == ["applied", "applied", "applied", "skipped"]
    assert outcomes[3].error.startswith('hooks: dispatch depth exceeded for event "turn.start": depth 4')


# ---- async pool ---------------------------------------------------------------------------------


def test_async_hooks_get_the_patched_payload_and_their_patches_are_discarded(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    body = f"""
    import json, sys
    payload = json.load(sys.stdin)
    open({str(seen)!r}, "w").write(json.dumps(payload))
    print(json.dumps({{"message": "from async"}}))
    """
    decls = [patch_hook(tmp_path, "edit", "input.pre_submit", '{"message": "edited"}'),
             hook("observe", "input.pre_submit", script(tmp_path, "observe", body), mode="async")]
    runner, rows = runner_with_rows(decls)

    async def go() -> HookOutcome:
        outcome = await runner.dispatch("input.pre_submit", {"message": "typed"})
        await runner.drain(timeout=10)
        return outcome

    outcome = asyncio.run(go())
    assert outcome.payload["message"] == "edited"
    assert json.loads(seen.read_text())["message"] == "edited"
    assert rows.outcomes() == {"edit": "applied", "observe": "applied"}
    assert [r["hook_name"] for r in outcome.runs] == ["edit"]  # async rows arrive later, via record_run
    observe = rows[1]
    assert observe["mode"] == "async" and observe["patch_applied"] is None


def test_async_pool_drops_runs_when_the_queue_is_full() -> None:
    count = 70
    decls = [shell_hook(f"obs-{i:02d}", "message.delta", "cat >/dev/null", mode="async") for i in range(count)]
    runner, rows = runner_with_rows(decls)

    async def go() -> HookOutcome:
        outcome = await runner.dispatch("message.delta", {"text": "chunk"})
        await runner.drain(timeout=30)
        return outcome

    outcome = asyncio.run(go())
    # 64 queue slots; workers have not picked anything up before the dispatch returns.
    dropped = [r for r in outcome.runs if r["outcome"] == "dropped"]
    assert len(dropped) == count - 64
    assert all(r["error"] == "async hook queue full (64)" for r in dropped)
    assert len(rows) == count and len({r["hook_name"] for r in rows}) == count  # one row per run
    assert sum(r["outcome"] == "applied" for r in rows) == 64


def test_drain_kills_running_async_hooks_and_drops_queued_ones() -> None:
    decls = [hook(f"slow-{i}", "session.health.update.after", args=("-c", "import time; time.sleep(30)"),
                  mode="async", timeout=60) for i in range(3)]
    runner, rows = runner_with_rows(decls, async_workers=1)

    async def go() -> None:
        await runner.dispatch("session.health.update.after", {"state": "idle"})
        await asyncio.sleep(0.3)
        await runner.drain(timeout=0.5)
        late = await runner.dispatch("session.health.update.after", {"state": "idle"})
        assert {r["outcome"] for r in late.runs} == {"dropped"}

    asyncio.run(go())
    first = rows[:3]
    assert sorted(r["outcome"] for r in first) == ["dropped", "dropped", "failed"]
    assert next(r for r in first if r["outcome"] == "failed")["error"] == "hook run cancelled at shutdown"


# ---- environment, cwd, matchers -----------------------------------------------------------------


def test_hook_environment_is_an_allowlist_plus_declared_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOZY_PARENT_SECRET", "parent-only-value")
    monkeypatch.setenv("LC_TESTVAR", "kept")
    monkeypatch.setenv("SOURCE_OF_SECRET", "resolved-value")
    dump = tmp_path / "env.json"
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    body = f"""
    import json, os
    open({str(dump)!r}, "w").write(json.dumps({{"env": dict(os.environ), "cwd": os.getcwd()}}))
    """
    decl = hook("env", "turn.start", script(tmp_path, "env", body), env={"POLICY": "1"},
                secret_env={"API_TOKEN": "env:SOURCE_OF_SECRET"})
    runner, rows = runner_with_rows([decl], cwd=workdir)
    dispatch(runner, "turn.start", {})
    assert rows.outcomes() == {"env": "applied"}
    seen = json.loads(dump.read_text())
    env = seen["env"]
    assert "COMPOZY_PARENT_SECRET" not in env and "SOURCE_OF_SECRET" not in env
    assert env["PATH"] == os.environ["PATH"] and env["LC_TESTVAR"] == "kept"
    assert env["POLICY"] == "1" and env["API_TOKEN"] == "resolved-value" and env["COMPOZY_HOOK_DEPTH"] == "1"
    assert Path(seen["cwd"]).resolve() == workdir.resolve()


def test_unresolvable_secret_env_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    decl = shell_hook("needs-secret", "turn.start", "true", mode="sync", secret_env={"K": "env:NOT_SET_ANYWHERE"})
    runner, rows = runner_with_rows([decl])
    dispatch(runner, "turn.start", {})
    assert rows.outcomes() == {"needs-secret": "failed"}
    assert "NOT_SET_ANYWHERE is not set" in rows[0]["error"]


def test_matchers_use_globs_and_tool_read_only() -> None:
    decls = [
        shell_hook("fs", "tool.pre_call", "true", mode="sync", matcher={"tool_name": "fs_*"}),
        shell_hook("reads", "tool.pre_call", "true", mode="sync", matcher={"tool_read_only": True}),
        shell_hook("any", "tool.pre_call", "true", mode="sync", matcher={"tool_name": "*"}),
        shell_hook("class", "tool.pre_call", "true", mode="sync", matcher={"tool_name": "[sf]?_write"}),
    ]
    runner, rows = runner_with_rows(decls)
    dispatch(runner, "tool.pre_call", {"tool_id": "fs_read", "read_only": True})
    assert [r["hook_name"] for r in rows] == ["any", "fs", "reads"]
    rows.clear()
    dispatch(runner, "tool.pre_call", {"tool_id": "shell", "read_only": False})
    assert [r["hook_name"] for r in rows] == ["any"]
    rows.clear()
    dispatch(runner, "tool.pre_call", {"tool_id": "fs_write", "read_only": False})
    assert [r["hook_name"] for r in rows] == ["any", "class", "fs"]


def test_agent_and_workspace_scoped_hooks_only_run_for_their_scope() -> None:
    decls = [shell_hook("agent-hook", "turn.start", "true", mode="sync", source="agent_definition",
                        agent_scope="reviewer"),
             shell_hook("ws-hook", "turn.start", "true", mode="sync", workspace_scope="ws_1")]
    runner, rows = runner_with_rows(decls)
    dispatch(runner, "turn.start", {"agent_name": "general", "workspace_id": "ws_2"})
    assert rows == []
    dispatch(runner, "turn.start", {"agent_name": "reviewer", "workspace_id": "ws_1"})
    assert [r["hook_name"] for r in rows] == ["ws-hook", "agent-hook"]


# ---- audit rows in a real events.db --------------------------------------------------------------


def test_rows_are_written_through_event_log_and_read_back(tmp_path: Path) -> None:
    db = tmp_path / "sess" / "events.db"
    log = EventLog(db, "general")
    decls = [
        patch_hook(tmp_path, "edit", "input.pre_submit", '{"message": "edited"}', required=True),
        hook("broken", "input.pre_submit", args=("-c", "import sys; sys.exit(4)")),
        patch_hook(tmp_path, "stop-guard", "session.pre_stop", '{"deny": True, "deny_reason": "busy"}'),
        shell_hook("watch", "session.post_stop", "cat >/dev/null", mode="async"),
    ]
    other_session: list[dict[str, Any]] = []
    runner = HookRunner(decls, record_run=other_session.append)

    async def go() -> None:
        # A daemon-wide runner can send each dispatch's rows (async ones too) to that session's log.
        await runner.dispatch("input.pre_submit", {"message": "typed"}, record_run=log.record_hook_run)
        await runner.dispatch("session.pre_stop", {"session_id": "s"}, record_run=log.record_hook_run)
        await runner.dispatch("session.post_stop", {"session_id": "s"}, record_run=log.record_hook_run)
        await runner.dispatch("session.post_stop", {"session_id": "other"})
        await runner.drain(timeout=10)

    asyncio.run(go())
    log.close()
    stored = read_hook_runs(db)
    by_name = {r["hook_name"]: r for r in stored}
    assert len(stored) == 4 and set(by_name) == {"edit", "broken", "stop-guard", "watch"}
    edit = by_name["edit"]
    assert edit["outcome"] == "applied" and edit["required"] is True and edit["mode"] == "sync"
    assert json.loads(edit["patch_applied"]) == {"message": "edited"}
    assert edit["source"] == "config" and edit["dispatch_depth"] == 1 and edit["duration_ms"] > 0
    assert by_name["broken"]["outcome"] == "failed"
    assert by_name["broken"]["error"] == "hook command failed: exit status 4"
    guard = by_name["stop-guard"]
    assert guard["outcome"] == "denied" and guard["patch_applied"] is None  # session family: not stored
    assert by_name["watch"]["outcome"] == "applied" and by_name["watch"]["mode"] == "async"
    assert [r["hook_name"] for r in read_hook_runs(db, outcome="denied")] == ["stop-guard"]
    assert [(r["hook_name"], r["outcome"]) for r in other_session] == [("watch", "applied")]


# ---- declarations and config ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decl", "message"),
    [
        (HookDeclaration("x", "session.exploded", "true"), "unknown event 'session.exploded'"),
        (HookDeclaration("x", "turn.start", "true", mode="async", required=True), "required hooks must be sync"),
        (HookDeclaration("x", "message.delta", "true", mode="sync"), "is async-only"),
        (HookDeclaration("x", "tool.pre_call", "true", matcher={"agent_name": "a"}),
         "matcher field 'agent_name' does not apply to tool events"),
        (HookDeclaration("x", "session.pre_stop", "true", matcher={"tool_name": "a"}),
         "matcher field 'tool_name' does not apply to session events"),
        (HookDeclaration("x", "tool.pre_call", "true", matcher={"tool_read_only": "yes"}),
         "tool_read_only must be true or false"),
        (HookDeclaration("x", "turn.start", "true", timeout=-1), "timeout must not be negative"),
        (HookDeclaration("x", "turn.start", "true", source="agent_definition", agent_scope="a",
                         matcher={"agent_name": "b"}), "differs from its agent"),
        (HookDeclaration("x", "turn.start", "true", secret_env={"K": "plain"}), "secret_env.K"),
    ],
)
def test_invalid_declarations_are_rejected(decl: HookDeclaration, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_declarations([decl])
    with pytest.raises(ConfigError):
        HookRunner([decl])


def test_event_tables_cover_every_event() -> None:
    assert set(PATCH_KEYS) == set(HookEvent)
    assert len(HookEvent) == 24
    expected = {HookEvent.SESSION_HEALTH_UPDATE_AFTER, HookEvent.MESSAGE_DELTA, HookEvent.PERMISSION_RESOLVED,
                HookEvent.PERMISSION_DENIED}
    assert expected == ASYNC_ONLY_EVENTS


def write_config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(textwrap.dedent(text), encoding="utf-8")


def test_load_config_parses_hooks_in_both_forms(tmp_path: Path) -> None:
    write_config(tmp_path, """
        [[hooks.declarations]]
        name = "block-secrets"
        event = "input.pre_submit"
        mode = "sync"
        required = true
        timeout = "3s"
        command = "/usr/local/bin/policy"
        args = ["--strict"]
        env = { POLICY = "1" }
        secret_env = { TOKEN = "env:POLICY_TOKEN" }
        [hooks.declarations.matcher]
        agent_name = "general"

        [[hooks.declarations]]
        name = "nested"
        event = "tool.post_call"
        priority = 7
        timeout = "0s"
        executor = { kind = "command", command = "notify", args = ["-q"], env = { A = "b" } }

        [[hooks.declarations]]
        name = "off"
        event = "not.an.event"
        enabled = false
        command = "x"
    """)
    hooks = {h.name: h for h in load_config(tmp_path).hooks}
    assert set(hooks) == {"block-secrets", "nested"}
    block = hooks["block-secrets"]
    assert (block.mode, block.required, block.timeout, block.priority) == ("sync", True, 3.0, 500)
    assert block.command == "/usr/local/bin/policy" and block.args == ("--strict",)
    assert block.env == {"POLICY": "1"} and block.secret_env == {"TOKEN": "env:POLICY_TOKEN"}
    assert block.matcher == {"agent_name": "general"} and block.source == "config"
    nested = hooks["nested"]
    assert (nested.command, nested.args, nested.env) == ("notify", ("-q",), {"A": "b"})
    assert (nested.mode, nested.timeout, nested.priority) == ("async", 5.0, 7)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('name = "h"\nevent = "turn.begin"\ncommand = "x"', "unknown event 'turn.begin'"),
        ('name = "h"\nevent = "turn.start"\nrequired = true\ncommand = "x"', "required hooks must be sync"),
        ('name = "h"\nevent = "permission.denied"\nmode = "sync"\ncommand = "x"', "is async-only"),
        ('name = "h"\nevent = "message.end"\ncommand = "x"\nmatcher = { agent_name = "a" }',
         "does not apply to message events"),
        ('name = "h"\nevent = "turn.start"\ncommand = "x"\ntimeout = -2', "must not be negative"),
        ('event = "turn.start"\ncommand = "x"', "needs a name and an event"),
        ('name = "h"\nevent = "turn.start"', "needs a command"),
        ('name = "h"\nevent = "turn.start"\ncommand = "x"\nexecutor = { command = "y" }',
         "executor cannot be combined"),
        ('name = "h"\nevent = "turn.start"\nexecutor = { kind = "http", command = "y" }',
         "only command hooks are supported"),
        ('name = "h"\nevent = "turn.start"\ncommand = "x"\ncomand = "y"', "unknown key 'comand'"),
    ],
)
def test_invalid_hooks_fail_config_load(tmp_path: Path, body: str, message: str) -> None:
    write_config(tmp_path, "[[hooks.declarations]]\n" + body + "\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(tmp_path)


def test_duplicate_hook_names_fail_config_load(tmp_path: Path) -> None:
    entry = '[[hooks.declarations]]\nname = "h"\nevent = "turn.start"\ncommand = "x"\n'
    write_config(tmp_path, entry + entry)
    with pytest.raises(ConfigError, match="declared twice"):
        load_config(tmp_path)


def test_agent_definition_hooks_are_scoped_and_prioritised_by_source() -> None:
    raw = [{"name": "lint", "event": "tool.post_call", "command": "lint"}]
    (decl,) = parse_hook_declarations(raw, source="agent_definition", agent_scope="reviewer")
    assert decl.agent_scope == "reviewer" and decl.priority == 100 and decl.source == "agent_definition"
    bad = [{"name": "x", "event": "turn.start", "command": "c", "matcher": {"agent_name": "other"}}]
    with pytest.raises(ConfigError, match="differs from its agent"):
        parse_hook_declarations(bad, source="agent_definition", agent_scope="reviewer")


def test_workspace_overlay_replaces_a_same_name_hook_whole() -> None:
    base = (HookDeclaration("a", "turn.start", "one", env={"X": "1"}), HookDeclaration("b", "turn.end", "two"))
    overlay = (HookDeclaration("a", "turn.end", "three"),)
    merged = {d.name: d for d in merge_declarations(base, overlay)}
    assert merged["a"] == overlay[0] and merged["b"] == base[1]


# ---- text vs authored_text ---------------------------------------------------------------------


def test_text_vs_authored_keeps_authored_text_only_when_a_hook_changed_it() -> None:
    assert text_vs_authored("  hello  ", "hello") == {"text": "hello"}
    assert text_vs_authored("hello", "hello") == {"text": "hello"}
    assert text_vs_authored("  hello ", "HELLO") == {"text": "HELLO", "authored_text": "hello"}
