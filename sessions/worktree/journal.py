"""The journal of a git operation in flight: written (fsynced) before a checkpoint, a rewind or a merge changes
anything, removed when it is done, so boot repair knows what a crash cut short and finishes or rolls it back
(sessions/repair/git_ops.py)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import TypedDict

from sessions.store.folder import write_json_atomic

logger = logging.getLogger(__name__)

# Fault injection for the crash tests (tests/integration/test_worktrees_crash.py): a daemon started with this set to
# a point's name writes `<journal>.paused` there and waits, so the test can kill it at exactly that step.
PAUSE_ENV = "COMPOZY_TEST_GIT_PAUSE_AT"
PAUSE_SECONDS = 60.0


class Journal(TypedDict, total=False):
    op: str  # checkpoint, restore or merge
    session_id: str
    started_at: float
    # checkpoint
    ref: str
    index: str
    worktree: str
    # merge
    repo: str
    target_ref: str
    old: str
    new: str
    checked_out: bool
    # restore
    commit: str


def begin(path: Path, entry: Journal) -> None:
    entry.setdefault("started_at", time.time())
    write_json_atomic(path, entry)


def read(path: Path) -> Journal | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        logger.warning("unreadable git journal %s: ignored", path, exc_info=True)
        return None
    return data if isinstance(data, dict) else None  # type: ignore[return-value]


def end(path: Path) -> None:
    path.unlink(missing_ok=True)


def pause_point(journal: Path, name: str) -> None:
    if os.environ.get(PAUSE_ENV) != name:
        return
    marker = journal.with_name(journal.name + ".paused")
    marker.write_text(name)
    time.sleep(PAUSE_SECONDS)
