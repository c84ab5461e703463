"""Crash bundles: redacted, bounded, private, atomically written JSON files."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sessions.store.crash_bundles import (
    BUNDLE_FAILURE_KINDS,
    SCHEMA,
    TEXT_CAP_BYTES,
    bound_tail,
    write_crash_bundle,
)

NOW = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
NOW_NANOS = 1741064767123456000

OPENAI_KEY = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
BEARER_TOKEN = "tok3n.Abc-Def_123456"
URL_PASSWORD = "hunter2"
ARG_KEY = "sk-ant-api03-" + "Qq1Ww2Ee3Rr4Tt5Yy6Uu7Ii8"
ENV_VALUE = "plainEnvSecretValue42"
PLANTED = [OPENAI_KEY, BEARER_TOKEN, URL_PASSWORD, "bob:hunter2", ARG_KEY, ENV_VALUE, "pa55word!"]


def _write(directory: Path, **overrides: Any) -> Path:
    kwargs: dict[str, Any] = {
        "session_id": "sess-0001",
        "agent_name": "claude",
        "provider": "anthropic",
        "state": "failed",
        "failure_kind": "process_exit",
        "summary": "agent exited with code 1",
        "process": {
            "pid": 4242,
            "command": "/usr/bin/agent",
            "args": ["--model", "x"],
            "cwd": "/work/project",
            "started_at": "2025-03-04T05:00:00Z",
        },
        "error": "process exited",
        "stderr": "boom",
        "now": NOW,
    }
    kwargs.update(overrides)
    return write_crash_bundle(directory, **kwargs)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_bundle_kinds() -> None:
    assert {"startup_failure", "load_session_failure", "protocol_failure",
            "prompt_failure", "process_exit", "transport_failure",
            "storage_failure"} == BUNDLE_FAILURE_KINDS  # fmt: skip


def test_bundle_schema_and_fields(tmp_path: Path) -> None:
    path = _write(tmp_path / "bundles")
    assert path.name == f"sess-0001-process_exit-{NOW_NANOS}.json"
    bundle = json.loads(path.read_text(encoding="utf-8"))
    assert list(bundle) == [
        "schema", "session_id", "agent_name", "provider", "state", "failure", "process", "error", "stderr",
        "created_at",
    ]  # fmt: skip
    assert bundle["schema"] == SCHEMA
    assert bundle["session_id"] == "sess-0001"
    assert bundle["failure"] == {"kind": "process_exit", "summary": "agent exited with code 1"}
    assert bundle["process"] == {
        "pid": 4242,
        "command": "/usr/bin/agent",
        "args": ["--model", "x"],
        "cwd": "/work/project",
        "started_at": "2025-03-04T05:00:00Z",
    }
    assert bundle["error"] == "process exited"
    assert bundle["stderr"] == "boom"
    assert bundle["created_at"] == "2025-03-04T05:06:07.123456Z"


def test_planted_secrets_never_reach_disk(tmp_path: Path) -> None:
    stderr = (
        "starting agent\n"
        f"OPENAI_API_KEY={ENV_VALUE}\n"
        f"POST https://bob:{URL_PASSWORD}@example.com/v1 with Authorization: Bearer {BEARER_TOKEN}\n"
        f"error: invalid key {OPENAI_KEY}\n"
    )
    path = _write(
        tmp_path,
        summary=f"startup failed using {OPENAI_KEY}",
        error=f"HTTP 401 for https://bob:{URL_PASSWORD}@example.com (Authorization: Bearer {BEARER_TOKEN})",
        stderr=stderr,
        process={
            "pid": 1,
            "command": f"agent --api-key {ARG_KEY}",
            "args": ["--api-key", ARG_KEY, "--password", "pa55word!", f"--token={BEARER_TOKEN}"],
            "cwd": "/tmp",
            "started_at": None,
            "returncode": 1,
        },
    )
    raw = path.read_bytes()
    for secret in PLANTED:
        assert secret.encode() not in raw, secret
    bundle = json.loads(raw)
    redacted_args = ["--api-key", "[REDACTED]", "--password", "[REDACTED]", "--token=[REDACTED]"]
    assert bundle["process"]["args"] == redacted_args
    assert bundle["process"]["returncode"] == 1
    assert "Authorization: Bearer [REDACTED]" in bundle["stderr"]
    assert "https://[REDACTED]@example.com" in bundle["error"]


def test_file_and_directory_modes(tmp_path: Path) -> None:
    old_umask = os.umask(0o000)  # a permissive umask must not widen the bundle's permissions
    try:
        directory = tmp_path / "logs" / "crash-bundles"
        path = _write(directory)
    finally:
        os.umask(old_umask)
    assert _mode(path) == 0o600
    assert _mode(directory) == 0o700
    assert _mode(directory.parent) == 0o700
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temp files left behind


def test_existing_directory_is_tightened(tmp_path: Path) -> None:
    directory = tmp_path / "bundles"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    _write(directory)
    assert _mode(directory) == 0o700


def test_stderr_keeps_tail_and_text_is_capped(tmp_path: Path) -> None:
    head_marker = "FIRST-LINE-MARKER"
    tail_marker = "panic: final words of the agent"
    stderr = head_marker + "\n" + ("noise line é€😀\n" * 20_000) + tail_marker
    error, summary = "E" * (TEXT_CAP_BYTES * 2), "S" * (TEXT_CAP_BYTES + 1)
    path = _write(tmp_path, stderr=stderr, error=error, summary=summary)
    bundle = json.loads(path.read_text(encoding="utf-8"))
    assert bundle["stderr"].startswith("...[truncated]")
    assert bundle["stderr"].endswith(tail_marker)
    assert head_marker not in bundle["stderr"]
    assert bundle["error"].startswith("EEEE") and bundle["error"].endswith("...[truncated]")
    for field in (bundle["stderr"], bundle["error"], bundle["failure"]["summary"]):
        assert len(field.encode("utf-8")) <= TEXT_CAP_BYTES


def test_name_is_sanitised_and_bounded(tmp_path: Path) -> None:
    path = _write(tmp_path, session_id="../../etc/pass wd:é" + "x" * 300, failure_kind="prompt failure/x")
    assert path.parent == tmp_path
    assert len(path.name.encode("utf-8")) <= 160
    assert path.name.startswith("------etc-pass-wd--")
    assert path.name.endswith(f"-prompt-failure-x-{NOW_NANOS}.json")
    stem = path.name.removesuffix(".json")
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in stem)


def test_same_instant_does_not_overwrite(tmp_path: Path) -> None:
    first = _write(tmp_path, error="one")
    second = _write(tmp_path, error="two")
    assert first != second
    assert json.loads(first.read_text())["error"] == "one"
    assert json.loads(second.read_text())["error"] == "two"


def test_default_now_and_naive_datetime(tmp_path: Path) -> None:
    path = _write(tmp_path, now=None)
    created = json.loads(path.read_text())["created_at"]
    assert created.endswith("Z")
    age = datetime.now(UTC) - datetime.fromisoformat(created.replace("Z", "+00:00"))
    assert abs(age.total_seconds()) < 60
    naive = _write(tmp_path / "naive", now=NOW.replace(tzinfo=None))
    assert naive.name.endswith(f"-{NOW_NANOS}.json")


def test_started_at_datetime_is_rfc3339(tmp_path: Path) -> None:
    process = {"pid": None, "command": "agent", "args": [], "cwd": "/", "started_at": NOW}
    bundle = json.loads(_write(tmp_path, process=process).read_text())
    assert bundle["process"]["started_at"] == "2025-03-04T05:06:07.123456Z"
    assert bundle["process"]["pid"] is None


def test_undecodable_stderr_is_written(tmp_path: Path) -> None:
    stderr = b"bad byte \xff here".decode("utf-8", "surrogateescape")
    bundle = json.loads(_write(tmp_path, stderr=stderr).read_text(encoding="utf-8"))
    assert bundle["stderr"] == "bad byte \\udcff here"


def test_write_failure_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(OSError, match="disk full"):
        _write(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_bound_tail_is_exported() -> None:
    assert bound_tail("abcdefghij", 8, prefix="..") == "..efghij"
