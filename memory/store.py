"""The one write path every writer takes (CLI, API, agents' tools, dreams), and the reads over the files.

A change is decided (its whole new text, or its removal) and journalled before the file changes
(memory/journal.py); the file lands atomically; the scope's `MEMORY.md` is rewritten; the row is marked applied;
the derived index follows. `recover` finishes at boot what a crash left between the journal and the file.
Blocking throughout (SQLite, fsync): callers run it off the loop."""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from compozy_base.files import atomic_write, fsync_dir
from memory import index, journal
from memory.entry import PRECEDENCE, BadFrontmatter, Entry, MemoryType, Scope, parse, render, validate
from memory.errors import InvalidMemory, MemoryNotFound
from memory.paths import agents_root, scope_dir

logger = logging.getLogger(__name__)

INDEX_FILE = "MEMORY.md"
# The test hook of the crash between the journal and the file (tests/integration/test_memory.py): the process
# kills itself with SIGKILL right after the journal row commits, as a power cut would.
CRASH_HOOK = "COMPOZY_TEST_MEMORY_CRASH"

_lock = threading.RLock()  # one change at a time in this process: MEMORY.md is rewritten from the folder


@dataclass(frozen=True)
class Where:
    """A scope and what places it: the workspace root, the agent."""

    scope: Scope
    workspace: Path | None = None
    agent: str = ""

    def dir(self) -> Path:
        return scope_dir(self.scope, workspace=self.workspace, agent=self.agent)


@dataclass(frozen=True)
class Stored:
    entry: Entry
    path: Path
    where: Where
    mtime: float


@dataclass(frozen=True)
class Problem:
    path: str
    problem: str


@dataclass(frozen=True)
class WriteResult:
    slug: str
    path: str
    created: bool
    journal_id: int
    before: str | None  # the file's text the write replaced (None: it created the file)
    content: str  # the text written


def where_of(entry: Entry, workspace: Path | None) -> Where:
    if entry.scope is Scope.WORKSPACE and workspace is None:
        raise InvalidMemory("a workspace-scoped entry needs its workspace", code="workspace_required")
    return Where(entry.scope, workspace if entry.scope is Scope.WORKSPACE else None, entry.agent)


def file_path(where: Where, type_: MemoryType | str, slug: str) -> Path:
    return where.dir() / str(type_) / f"{slug}.md"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def write(entry: Entry, *, workspace: Path | None = None, actor: str = "user", session_id: str = "",
          dream_id: str = "") -> WriteResult:
    """Create or replace the entry `(scope, type, slug)`: the same name written twice is one entry."""
    try:
        entry = validate(entry)
    except ValueError as exc:
        raise InvalidMemory(str(exc)) from exc
    where = where_of(entry, workspace)
    path = file_path(where, entry.type, entry.slug)
    content = render(entry)
    with _lock:
        before = _read(path)
        jid = _commit(journal.Change(op="write", path=str(path), scope=entry.scope.value, type=entry.type.value,
                                     slug=entry.slug, workspace=str(where.workspace or ""), agent=entry.agent,
                                     content=content, before=before, actor=actor, session_id=session_id,
                                     dream_id=dream_id))
    return WriteResult(entry.slug, str(path), before is None, jid, before, content)


def delete(stored: Stored, *, actor: str = "user", session_id: str = "", dream_id: str = "") -> int:
    with _lock:
        before = _read(stored.path)
        if before is None:
            raise MemoryNotFound(f"no memory at {stored.path}")
        e = stored.entry
        return _commit(journal.Change(op="delete", path=str(stored.path), scope=e.scope.value, type=e.type.value,
                                      slug=e.slug, workspace=str(stored.where.workspace or ""), agent=e.agent,
                                      content=None, before=before, actor=actor, session_id=session_id,
                                      dream_id=dream_id))


def restore(path: Path, text: str | None, where: Where, *, actor: str, dream_id: str = "") -> int:
    """A file put back to `text` (None: removed) through the same path: a dream decision's revert."""
    with _lock:
        before = _read(path)
        try:
            e = parse(text) if text is not None else parse(before or "")
            scope, type_, slug, agent = e.scope.value, e.type.value, e.slug, e.agent
        except BadFrontmatter:
            scope, type_, slug, agent = where.scope.value, path.parent.name, path.stem, where.agent
        return _commit(journal.Change(op="write" if text is not None else "delete", path=str(path), scope=scope,
                                      type=type_, slug=slug, workspace=str(where.workspace or ""), agent=agent,
                                      content=text, before=before, actor=actor, dream_id=dream_id))


def _commit(change: journal.Change) -> int:
    jid = journal.begin(change)
    if os.environ.get(CRASH_HOOK) == "after_journal":
        logger.warning("memory: %s set: killing this process between the journal and the file", CRASH_HOOK)
        os.kill(os.getpid(), signal.SIGKILL)
    _apply(jid, change)
    return jid


def _apply(jid: int, change: journal.Change) -> None:
    path = Path(change.path)
    if change.content is not None:
        atomic_write(path, change.content)
    elif path.exists():
        path.unlink()
        fsync_dir(path.parent)
    scope_root = path.parent.parent
    write_index_file(scope_root)
    journal.applied(jid)
    follow_index(path, change)


def follow_index(path: Path, change: journal.Change) -> None:
    """The derived index updated for one change (rebuilt whole when it is missing)."""
    try:
        item = None
        if change.content is not None:
            stored = Stored(parse(change.content), path,
                            Where(Scope(change.scope), Path(change.workspace) if change.workspace else None,
                                  change.agent), path.stat().st_mtime)
            item = to_item(stored)
        if not index.update(str(path), item):
            reindex()
    except Exception as exc:
        logger.exception("memory: the index could not follow %s; it is stale until `memory reindex`", path)
        index.mark_failed(f"update for {path.name} failed: {exc}")


def to_item(s: Stored) -> index.Item:
    e = s.entry
    return index.Item(path=str(s.path), scope=s.where.scope.value, workspace=str(s.where.workspace or ""),
                      agent=s.where.agent, type=e.type.value, slug=e.slug, name=e.name, description=e.description,
                      body=e.body, mtime=s.mtime)


def reindex() -> int:
    """The index rebuilt from every scope's files; the count of entries it holds."""
    items: list[index.Item] = []
    for where in all_roots():
        stored, _ = scan_dir(where.dir(), where)
        items += [to_item(s) for s in stored]
    return index.rebuild(items)


def recover() -> int:
    """Finish every change a crash left between its journal row and its file (daemon start). Idempotent."""
    done = 0
    with _lock:
        for jid, change in journal.pending():
            try:
                _apply(jid, change)
                done += 1
                logger.info("memory: finished journalled %s of %s (journal %d)", change.op, change.path, jid)
            except OSError:
                logger.exception("memory: journalled %s of %s could not be finished", change.op, change.path)
    return done


def write_index_file(scope_root: Path) -> None:
    """The scope's `MEMORY.md`: one line per readable entry, rewritten from the folder after every change."""
    stored, _ = scan_dir(scope_root, None)
    lines = ["# Memory", ""]
    for s in sorted(stored, key=lambda s: (s.entry.type.value, s.entry.slug)):
        rel = s.path.relative_to(scope_root)
        lines.append(f"- [{s.entry.name}]({rel.as_posix()}) ({s.entry.type.value}): {s.entry.description}".rstrip())
    atomic_write(scope_root / INDEX_FILE, "\n".join(lines) + "\n")


# ---- reads -------------------------------------------------------------------------------------------------

def scan_dir(root: Path, where: Where | None) -> tuple[list[Stored], list[Problem]]:
    """Every entry file of one scope's folder (`<root>/<type>/<slug>.md`), and the files it could not read."""
    stored: list[Stored] = []
    problems: list[Problem] = []
    for type_ in MemoryType:
        folder = root / type_.value
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.md")):
            try:
                entry = parse(path.read_text(encoding="utf-8"))
            except (BadFrontmatter, UnicodeDecodeError) as exc:
                problems.append(Problem(str(path), f"bad frontmatter: {exc}"))
                continue
            except OSError as exc:
                problems.append(Problem(str(path), f"unreadable: {exc.strerror or exc}"))
                continue
            if entry.type is not type_ or entry.slug != path.stem:
                problems.append(Problem(str(path), f"misplaced: its frontmatter says {entry.type.value}/"
                                        f"{entry.slug}.md"))
                continue
            w = where or Where(entry.scope, None, entry.agent)
            stored.append(Stored(entry, path, w, path.stat().st_mtime))
    return stored, problems


def scope_wheres(scope: Scope | None = None, workspace: Path | None = None, agent: str = "") -> list[Where]:
    """The scopes a read covers, deepest first: an agent's, the workspace's, the global one."""
    wheres: list[Where] = []
    if scope in (None, Scope.AGENT):
        if agent:
            wheres.append(Where(Scope.AGENT, None, agent))
        elif scope is Scope.AGENT:
            root = agents_root()
            names = sorted(p.name for p in root.iterdir() if (p / "memory").is_dir()) if root.is_dir() else []
            wheres += [Where(Scope.AGENT, None, n) for n in names]
    if scope in (None, Scope.WORKSPACE) and workspace is not None:
        wheres.append(Where(Scope.WORKSPACE, workspace))
    if scope in (None, Scope.GLOBAL):
        wheres.append(Where(Scope.GLOBAL))
    return wheres


def entries(scope: Scope | None = None, workspace: Path | None = None, agent: str = "",
            shadow: bool = False) -> tuple[list[Stored], list[Problem]]:
    found: list[Stored] = []
    problems: list[Problem] = []
    for where in scope_wheres(scope, workspace, agent):
        stored, bad = scan_dir(where.dir(), where)
        found += stored
        problems += bad
    if shadow:
        found = resolve(found)
    return found, problems


def resolve(found: list[Stored]) -> list[Stored]:
    """Precedence agent ▸ workspace ▸ global: a deeper entry shadows a shallower one with the same (type, slug)."""
    best: dict[tuple[str, str], Stored] = {}
    for s in sorted(found, key=lambda s: PRECEDENCE.index(s.where.scope)):
        best.setdefault(s.entry.key, s)
    return sorted(best.values(), key=lambda s: (PRECEDENCE.index(s.where.scope), s.entry.type.value, s.entry.slug))


def find(slug: str, *, type_: MemoryType | None = None, scope: Scope | None = None, workspace: Path | None = None,
         agent: str = "") -> Stored:
    """The entry a slug names where it resolves first (agent ▸ workspace ▸ global), or MemoryNotFound."""
    found, _ = entries(scope, workspace, agent)
    matches = [s for s in resolve(found) if s.entry.slug == slug and (type_ is None or s.entry.type is type_)]
    if not matches:
        raise MemoryNotFound(f"no memory {slug!r}", data={"slug": slug})
    return matches[0]


def all_roots() -> list[Where]:
    """Every scope folder the index covers: the global one, each agent's, each workspace memory has seen."""
    wheres = [Where(Scope.GLOBAL)]
    root = agents_root()
    if root.is_dir():
        wheres += [Where(Scope.AGENT, None, p.name) for p in sorted(root.iterdir()) if (p / "memory").is_dir()]
    wheres += [Where(Scope.WORKSPACE, ws) for ws in journal.roots() if (ws / ".compozy" / "memory").is_dir()]
    return wheres
