"""memory/ without a daemon: the entry format, the write path and its recovery, shadowing, the index's query."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory import dreams, health, index, journal, service, store
from memory.entry import BadFrontmatter, Entry, MemoryType, Scope, parse, render, slugify
from memory.errors import InvalidMemory


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMPOZY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_an_entry_renders_and_parses_back() -> None:
    entry = Entry("Deploy: the steps", "how we ship", MemoryType.PROJECT, Scope.AGENT, "Run make deploy.\n",
                  provenance="session:sess_1", agent="coder")
    assert parse(render(entry)) == entry
    assert entry.slug == "deploy-the-steps" and slugify("  !!  ") == "entry"


@pytest.mark.parametrize(("text", "says"), [
    ("no frontmatter\n", "no frontmatter"),
    ("---\nname: x\n", "not closed"),
    ("---\nname: [oops\n---\n", "not YAML"),
    ("---\nname: x\ntype: diary\nscope: global\n---\n", "diary"),
    ("---\nname: x\ntype: user\nscope: workspace\nagent: a\n---\n", "only an agent-scoped entry"),
])
def test_bad_frontmatter_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(BadFrontmatter, match=says):
        parse(text)


def test_a_write_is_journalled_applied_and_the_same_name_twice_is_one_entry(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    first = service.write(scope="workspace", type_="user", name="Tabs", description="d", body="one", workspace=ws)
    again = service.write(scope="workspace", type_="user", name="Tabs", description="d", body="two", workspace=ws)
    assert first["created"] and not again["created"] and first["path"] == again["path"]
    assert journal.pending() == []
    assert [e["slug"] for e in service.listing(workspace=ws)] == ["tabs"]
    assert "[Tabs](user/tabs.md)" in (ws / ".compozy" / "memory" / "MEMORY.md").read_text()
    with pytest.raises(InvalidMemory):
        service.write(scope="workspace", type_="user", name="x\ny", description="", body="", workspace=ws)


def test_a_pending_change_is_finished_by_recover_once(home: Path) -> None:
    entry = Entry("Survives", "", MemoryType.USER, Scope.GLOBAL, "body\n")
    path = store.file_path(store.Where(Scope.GLOBAL), entry.type, entry.slug)
    journal.begin(journal.Change(op="write", path=str(path), scope="global", type="user", slug="survives",
                                 workspace="", agent="", content=render(entry), before=None, actor="user"))
    assert not path.exists() and len(journal.pending()) == 1
    assert store.recover() == 1 and store.recover() == 0
    assert parse(path.read_text()) == entry
    assert (home / "memory" / "MEMORY.md").read_text().count("survives.md") == 1


def test_a_deeper_scope_shadows_and_search_follows(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    service.write(scope="global", type_="project", name="Build", description="", body="make all", workspace=None)
    service.write(scope="workspace", type_="project", name="Build", description="", body="make build", workspace=ws)
    service.write(scope="agent", type_="project", name="Build", description="", body="make fast", agent="coder")
    assert service.show("build", workspace=ws)["scope"] == "workspace"
    assert service.show("build", workspace=ws, agent="coder")["scope"] == "agent"
    assert [h["scope"] for h in service.search("make", workspace=ws)] == ["workspace"]
    assert [h["scope"] for h in service.search("make")] == ["global"]
    assert [h["scope"] for h in service.search("make", workspace=ws, agent="coder")] == ["agent"]
    assert [h["scope"] for h in service.search("make", agent="other")] == ["global"]
    # Another type with the same slug shadows nothing; a file gone behind the index's back is no hit.
    service.write(scope="workspace", type_="user", name="Build", description="", body="make user", workspace=ws)
    assert sorted(h["type"] for h in service.search("make", workspace=ws)) == ["project", "user"]
    (ws / ".compozy" / "memory" / "user" / "build.md").unlink()
    assert [(h["scope"], h["type"]) for h in service.search("make", workspace=ws)] == [("workspace", "project")]


def test_the_index_query_quotes_every_word() -> None:
    assert index.fts_query('deploy OR "x" NEAR(') == '"deploy" "OR" "x" "NEAR"*'
    assert index.fts_query("!!") == ""


def test_a_recalled_session_entry_is_dream_material(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    service.write(scope="workspace", type_="feedback", name="Short", description="", body="be brief", workspace=ws,
                  actor="agent", session_id="sess_writer")
    assert dreams.candidates(ws) == []  # written, never recalled
    service.search("brief", workspace=ws, session_id="sess_writer")
    assert dreams.candidates(ws) == []  # its own writer's recall does not count
    service.search("brief", workspace=ws, session_id="sess_reader")
    [candidate] = dreams.candidates(ws)
    assert candidate.written_by == "sess_writer" and candidate.recalled_in == ["sess_reader"]


def test_a_home_without_memory_is_healthy_and_a_missing_index_is_stale_once_there_is_some() -> None:
    assert health.report().ok and health.report().index.state == "fresh"
    service.write(scope="global", type_="user", name="One", description="", body="x")
    index.index_path().unlink()
    report = health.report()
    assert not report.ok and report.index.state == "stale" and "no index file" in (report.index.cause or "")


def test_the_journal_is_prepared_once_and_again_when_its_file_is_made_anew(home: Path) -> None:
    with journal.connect() as conn:
        conn.execute("INSERT INTO roots (path, seen_at) VALUES ('/a', 'now')")
    path = home / "memory" / "journal.db"
    assert path.stat().st_mode & 0o777 == 0o600
    with journal.connect() as conn:  # prepared: no schema script, the rows still there
        assert [r[0] for r in conn.execute("SELECT path FROM roots")] == ["/a"]
    path.unlink()
    with journal.connect() as conn:  # a new file: the schema again
        assert list(conn.execute("SELECT path FROM roots")) == []
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_dream_decision_records_the_text_it_replaced_and_its_revert_puts_it_back(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    service.write(scope="global", type_="project", name="Deploy", description="", body="old way")
    service.write(scope="workspace", type_="project", name="Deploy", description="", body="new way", workspace=ws,
                  actor="agent", session_id="sess_writer")
    global_file = tmp_path / "home" / "memory" / "project" / "deploy.md"
    ws_file = ws / ".compozy" / "memory" / "project" / "deploy.md"
    old_global, old_ws = global_file.read_text(), ws_file.read_text()
    dream_id = dreams.start(ws, 1)
    [result] = dreams.apply(dream_id, ws, [{"action": "promote", "slug": "deploy", "type": "project",
                                             "to": "global", "reason": "r"}], [])
    with journal.connect() as conn:
        changes = json.loads(conn.execute("SELECT changes FROM decisions").fetchone()[0])
    assert [(c["path"], c["before"], c["after"]) for c in changes] == [
        (str(global_file), old_global, global_file.read_text()), (str(ws_file), old_ws, None)]
    assert "new way" in global_file.read_text() and not ws_file.exists()
    assert dreams.get(dream_id)["decisions"][0]["id"] == result["decision_id"]  # type: ignore[index]
    assert dreams.get("dream_none") is None
    dreams.revert(str(result["decision_id"]))
    assert global_file.read_text() == old_global and ws_file.read_text() == old_ws


def test_the_state_a_reindex_answers_is_the_one_health_reports(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    service.write(scope="global", type_="user", name="One", description="", body="x")
    service.write(scope="workspace", type_="user", name="Two", description="", body="y", workspace=ws)
    count = service.reindex()
    assert count == 2
    assert health.rebuilt_index(count) == health.report().index == health.IndexReport("fresh", None, 2)
    monkeypatch.setattr(index, "_failure", "rebuild failed: disk full")
    assert health.rebuilt_index(count) == health.report().index == health.IndexReport(
        "failed", "rebuild failed: disk full", 2)
