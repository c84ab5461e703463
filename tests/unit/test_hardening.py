"""Issue 33's edges below the daemon, on real files and real parsers: HEARTBEAT.md and meta.json nested or sized past
their bounds are that file's own error; hard-linked files, files too large and paths that loop are invalid params;
the daemon's own secrets never reach a child's environment; login failures spend a budget read on a given clock."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from compozy_base.auth import FailureBudget
from compozy_base.config.heartbeat import HeartbeatConfig
from compozy_base.config.hook_spec import HookDeclaration
from compozy_base.nesting import too_deep
from health import heartbeat
from sessions.acp.child_env import inherited_environment
from sessions.acp.workspace_fs import (
    Confined,
    HardLinked,
    OutsideWorkspace,
    TooLarge,
    confine,
    fs_error,
    read_text,
    write_text,
)
from sessions.core.redact import register_secret
from sessions.hooks.process import hook_env
from sessions.store import folder

INVALID_PARAMS = -32602


# ---- HEARTBEAT.md -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("front", [
    "summary: " + "[" * 10_000 + "]" * 10_000,  # flow nesting
    "- " * 5_000 + "x",  # block sequences, two bytes a level
    "preferences:\n  context: " + "{a: " * 3_000 + "1" + "}" * 3_000,
])
def test_a_heartbeat_md_nested_thousands_deep_is_an_invalid_policy_not_a_recursion_error(front: str) -> None:
    started = time.monotonic()
    parsed = heartbeat.parse(f"---\n{front}\n---\nbody\n", HeartbeatConfig(max_body_bytes=1048576))
    assert not parsed.valid
    [diagnostic] = parsed.diagnostics
    assert diagnostic["code"] == "heartbeat_malformed_frontmatter"
    assert "nested deeper than 32 levels" in diagnostic["message"] and diagnostic["line"] in (2, 3)
    assert time.monotonic() - started < 5  # the scanner slows with depth: 20 KB of brackets took it 24 s


def test_a_heartbeat_md_within_the_bound_still_parses() -> None:
    parsed = heartbeat.parse("---\nversion: 1\nsummary: s\npreferences:\n  context:\n    include: [a, b]\n---\nbody\n",
                             HeartbeatConfig())
    assert parsed.valid, parsed.diagnostics


def test_aliases_are_walked_once_however_often_they_are_used() -> None:
    """Nine levels of ten aliases each: 10^9 visits for the forbidden-key walk."""
    lines = ["l0: &l0 {k: v}"] + [f"l{i}: &l{i} {{" + ", ".join(f"a{j}: *l{i - 1}" for j in range(10)) + "}"
                                  for i in range(1, 10)]
    started = time.monotonic()
    parsed = heartbeat.parse("---\npreferences:\n  " + "\n  ".join(lines) + "\n---\nbody\n", HeartbeatConfig())
    assert time.monotonic() - started < 5
    assert not parsed.valid and parsed.errors[0]["code"] == "heartbeat_unknown_field"


# ---- meta.json ----------------------------------------------------------------------------------------------

SESSION = "sess_" + "0" * 16


def write_meta_text(home: Path, text: str) -> Path:
    path = folder.session_dir(SESSION, home) / folder.META_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def valid_meta(**extra: object) -> dict[str, object]:
    return {"id": SESSION, "agent_name": "general", "workspace_id": "ws_1", "state": "stopped", **extra}


@pytest.mark.parametrize(("levels", "why"), [(100_000, "nested deeper than 32 levels"),
                                             (40, "nested deeper than 32 levels (at x")])
def test_a_meta_json_nested_too_deep_is_that_sessions_meta_invalid(tmp_path: Path, levels: int, why: str) -> None:
    body = json.dumps(valid_meta())[:-1] + ', "x": ' + "[" * levels + "]" * levels + "}"
    path = write_meta_text(tmp_path, body)
    with pytest.raises(ValueError, match="nested deeper") as caught:
        folder.read_meta(SESSION, tmp_path)
    assert str(caught.value).startswith(f"{path}: {why}"), caught.value


def test_a_huge_meta_json_is_refused_without_parsing_it(tmp_path: Path) -> None:
    write_meta_text(tmp_path, json.dumps(valid_meta(pad="x" * folder.MAX_META_BYTES)))
    with pytest.raises(ValueError, match="larger than 4 MiB"):
        folder.read_meta(SESSION, tmp_path)


def test_an_ordinary_meta_json_reads_as_before(tmp_path: Path) -> None:
    meta = valid_meta(liveness={"a": {"b": [1, 2]}}, note="[[[[ brackets in a string ]]]]" * 10)
    write_meta_text(tmp_path, json.dumps(meta))
    assert folder.read_meta(SESSION, tmp_path) == meta


def test_too_deep_names_the_path_and_passes_what_is_within() -> None:
    assert too_deep({"a": [{"b": 1}]}, limit=3) is None
    assert too_deep({"a": [{"b": {}}]}, limit=3) == "a[0].b"
    assert too_deep([[[[]]]], limit=3) == "[0][0][0]"


# ---- the agent's fs requests ---------------------------------------------------------------------------------

@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    os.link(outside / "secret.txt", workspace / "inner.txt")
    return workspace, outside


def test_a_hard_linked_file_is_refused_for_reads_and_writes(linked: tuple[Path, Path]) -> None:
    workspace, outside = linked
    target = confine(str(workspace / "inner.txt"), [workspace])
    with pytest.raises(HardLinked, match="has 2 hard links"):
        read_text(target, None, None)
    with pytest.raises(HardLinked):
        write_text(target, "pwned")
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"  # refused before the truncation
    assert fs_error(str(target.path), HardLinked("x")).code == INVALID_PARAMS


def test_allow_hard_links_serves_them(linked: tuple[Path, Path]) -> None:
    workspace, outside = linked
    target = confine(str(workspace / "inner.txt"), [workspace])
    assert read_text(target, None, None, hard_links=True) == "TOP SECRET\n"
    write_text(target, "rewritten", hard_links=True)
    assert (outside / "secret.txt").read_text() == "rewritten"


def test_a_file_too_large_and_a_path_that_loops_are_invalid_params(tmp_path: Path) -> None:
    with open(tmp_path / "big.bin", "wb") as big:
        big.truncate(11 * 1024 * 1024)
    with pytest.raises(TooLarge) as caught:
        read_text(confine(str(tmp_path / "big.bin"), [tmp_path]), None, None)
    assert fs_error("big.bin", caught.value).code == INVALID_PARAMS
    loop = OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    assert fs_error("loop", loop).code == INVALID_PARAMS
    assert fs_error("gone", FileNotFoundError(errno.ENOENT, "gone")).code == RequestError.resource_not_found("").code
    assert fs_error("eio", OSError(errno.EIO, "I/O error")).code == -32603  # the daemon's own failure stays one


def test_a_file_flipping_between_a_symlink_and_a_file_never_answers_internal_error(tmp_path: Path) -> None:
    """The ELOOP of an open that met the symlink, followed by a look that met the file again: -32603 before."""
    (tmp_path / "regular").write_text("inside\n")
    (tmp_path / "link").symlink_to(tmp_path / "regular")
    target = Confined(tmp_path, ("f",))
    os.link(tmp_path / "regular", tmp_path / "f.tmp")
    os.replace(tmp_path / "f.tmp", tmp_path / "f")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            os.symlink(tmp_path / "regular", tmp_path / "s.tmp")
            os.replace(tmp_path / "s.tmp", tmp_path / "f")
            (tmp_path / "r.tmp").write_text("inside\n")
            os.replace(tmp_path / "r.tmp", tmp_path / "f")

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    codes: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                read_text(target, None, None)
                continue
            except OutsideWorkspace:
                code = INVALID_PARAMS  # what the permission gate answers for it
            except (OSError, ValueError) as exc:
                code = fs_error("f", exc).code
            codes[code] = codes.get(code, 0) + 1
    finally:
        stop.set()
        flipper.join(5)
    assert codes.get(INVALID_PARAMS), codes  # the race was run
    assert set(codes) <= {INVALID_PARAMS, RequestError.resource_not_found("").code}, codes


# ---- children's environments ----------------------------------------------------------------------------------

API_TOKEN = "t0k3n-" + "z" * 40


def test_a_childs_environment_has_none_of_the_daemons_secrets() -> None:
    register_secret(API_TOKEN)
    environ = {"PATH": "/bin", "COMPOZY_CLUSTER_TOKEN": "c" * 40, "DATABASE_URL": "postgres://u:p@h/db",
               "REDIS_URL": "redis://:p@h/0", "COMPOZY_SECRET_KEY": "k" * 40, "EXPORTED": API_TOKEN,
               "HEADER": f"Bearer {API_TOKEN}", "ANTHROPIC_API_KEY": "sk-ant-for-the-agent"}
    assert inherited_environment(environ) == {"PATH": "/bin", "ANTHROPIC_API_KEY": "sk-ant-for-the-agent"}


def test_a_hook_gets_none_of_them_either_not_even_by_secret_env() -> None:
    register_secret(API_TOKEN)
    environ = {"PATH": "/bin", "TMPDIR": API_TOKEN, "COMPOZY_CLUSTER_TOKEN": "c" * 40, "MINE": "ok"}
    decl = HookDeclaration(name="h", event="session.post_create", command="true", secret_env={"T": "env:MINE"})
    assert hook_env(decl, 1, environ) == {"PATH": "/bin", "T": "ok", "COMPOZY_HOOK_DEPTH": "1"}
    for name in ("COMPOZY_CLUSTER_TOKEN", "TMPDIR"):
        leak = HookDeclaration(name="h", event="session.post_create", command="true", secret_env={"T": f"env:{name}"})
        with pytest.raises(ValueError, match="holds a secret of the daemon itself"):
            hook_env(leak, 1, environ)


# ---- login ticket failures -------------------------------------------------------------------------------------

def test_login_failures_spend_a_burst_then_pass_at_their_rate() -> None:
    budget = FailureBudget(burst=3, per_second=2.0)
    now = 1000.0
    for _ in range(3):
        assert budget.wait(now) == 0.0
        budget.spend(now)
    assert budget.wait(now) == pytest.approx(0.5)
    assert budget.wait(now + 0.25) == pytest.approx(0.25)
    assert budget.wait(now + 0.5) == 0.0
    budget.spend(now + 0.5)
    assert budget.wait(now + 0.5) == pytest.approx(0.5)
    assert budget.wait(now + 100) == 0.0  # refilled, never beyond the burst
    for _ in range(3):
        budget.spend(now + 100)
    assert budget.wait(now + 100) > 0
