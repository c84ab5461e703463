"""`compozy doctor`'s worktree rows: git found, and a warning once the worktrees pass `[worktrees] max_disk`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.django_env import ensure_django

ensure_django()

from compozy.diagnostics.worktree_checks import check_git, check_worktree_disk  # noqa: E402
from compozy_base.config import loader as config_module  # noqa: E402
from compozy_base.config.loader import Config  # noqa: E402


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path))
    folder = tmp_path / "worktrees" / "sess_0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / "big.bin").write_bytes(b"\1" * 200_000)
    yield tmp_path
    config_module._cached = None


def test_worktrees_past_max_disk_warn_with_what_they_take(home: Path) -> None:
    config_module._cached = Config(worktrees_max_disk=100_000)
    row = check_worktree_disk()
    assert row["severity"] == "warn" and row["id"] == "worktrees_disk"
    assert row["evidence"]["size_bytes"] >= 200_000 and row["evidence"]["max_disk"] == 100_000
    assert row["suggested_command"] == "compozy worktree list"


def test_worktrees_under_max_disk_or_without_one_are_ok(home: Path) -> None:
    config_module._cached = Config(worktrees_max_disk=10 * 1024 ** 2)
    assert check_worktree_disk()["severity"] == "ok"
    config_module._cached = Config()
    assert "no [worktrees] max_disk" in check_worktree_disk()["message"]


def test_git_is_found_with_its_version(home: Path) -> None:
    row = check_git()
    assert row["severity"] == "ok" and row["evidence"]["version"][0].isdigit()
