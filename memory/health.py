"""`memory health` and doctor's `memory` check: each scope's files, the index's state, the last write and dream,
and the problems (bad frontmatter, files the index lacks)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memory import dreams, index, journal
from memory.store import Problem, Where, all_roots, scan_dir

logger = logging.getLogger(__name__)


@dataclass
class ScopeReport:
    scope: str
    path: str
    files: int
    workspace: str | None = None
    agent: str | None = None


@dataclass
class IndexReport:
    state: str  # fresh | stale | rebuilding | failed
    cause: str | None
    entries: int


@dataclass
class HealthReport:
    ok: bool
    scopes: list[ScopeReport]
    index: IndexReport
    last_write: dict[str, str] | None
    last_dream: dict[str, object] | None
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def report(workspace: Path | None = None) -> HealthReport:
    wheres = all_roots()
    if workspace is not None and all(w.workspace != workspace for w in wheres):
        wheres.append(Where(scope=wheres[0].scope.WORKSPACE, workspace=workspace))
    scopes: list[ScopeReport] = []
    problems: list[Problem] = []
    on_disk: dict[str, float] = {}
    for where in wheres:
        stored, bad = scan_dir(where.dir(), where)
        problems += bad
        on_disk.update({str(s.path): s.mtime for s in stored})
        scopes.append(ScopeReport(where.scope.value, str(where.dir()), len(stored),
                                  str(where.workspace) if where.workspace else None, where.agent or None))
    idx = _index_state(on_disk, problems)
    last_dream = dreams.last()
    return HealthReport(ok=not problems and idx.state == "fresh", scopes=scopes, index=idx,
                        last_write=journal.last_write(), last_dream=last_dream, problems=problems)


def rebuilt_index(count: int) -> IndexReport:
    """The index's state right after a rebuild that indexed `count` entries: no scope scanned again (the rebuild
    just did), only whether another rebuild runs now or the last one failed."""
    rebuilding, failure = index.status()
    if rebuilding:
        return IndexReport("rebuilding", None, count)
    if failure:
        return IndexReport("failed", failure, count)
    return IndexReport("fresh", None, count)


def _index_state(on_disk: dict[str, float], problems: list[Problem]) -> IndexReport:
    rebuilding, failure = index.status()
    held = index.indexed()
    count = len(held or {})
    if rebuilding:
        return IndexReport("rebuilding", None, count)
    if failure:
        return IndexReport("failed", failure, count)
    if held is None:
        if not on_disk:
            return IndexReport("fresh", None, 0)  # no memory yet: nothing to index (the first write builds it)
        return IndexReport("stale", "no index file (run `compozy memory reindex`)", 0)
    lacking = [p for p, mtime in on_disk.items() if held.get(p) != mtime]
    extra = [p for p in held if p not in on_disk]
    problems += [Problem(p, "the index lacks this file (run `compozy memory reindex`)") for p in lacking]
    if lacking or extra:
        return IndexReport("stale", f"{len(lacking)} file(s) the index lacks, {len(extra)} it holds that are gone",
                           count)
    return IndexReport("fresh", None, count)
