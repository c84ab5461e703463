"""A worktree session's work on its page, in Chromium against the real daemon and a real git repository: the
Changes view (all changes and one turn's), Rewind from the checkpoint list, and Commit then Merge
(docs/reference/worktrees.md).

The scripted agent's `disk write PATH TEXT` writes the file straight on disk, as an agent's own tools do."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Dialog, Page, expect

from tests.conftest import Daemon
from tests.e2e.test_dashboard import open_session
from tests.gitrepos import checkpoints, git, make_repo, turn_with_checkpoint

ACT_MS = 20_000


def test_the_changes_view_rewind_and_merge_from_the_page(page: Page, daemon: Daemon, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    session = daemon.create(repo, isolation="worktree")
    assert session["state"] == "active", session
    worktree = Path(session["worktree"]["path"])
    first = turn_with_checkpoint(daemon, session["id"], "disk write src/a.txt first version")
    second = turn_with_checkpoint(daemon, session["id"], "disk write src/a.txt second version")

    open_session(page, daemon, session["id"])
    expect(page.locator("#work-panel")).to_be_visible()
    expect(page.locator("#work-branch")).to_have_text(f"compozy/{session['id']}")
    # All changes since the start: the file as the second turn left it.
    changed = page.locator("#work-files .work-file[data-path='src/a.txt']")
    expect(changed).to_have_attribute("data-status", "added")
    expect(page.locator("#work-summary")).to_contain_text("1 file changed")
    changed.locator("summary").click()
    expect(changed.locator(".diff-add")).to_contain_text(["+second version"])
    # One turn's changes: the second turn only changed the line.
    page.select_option("#work-turn", second)
    redrawn = page.locator("#work-files .work-file[data-path='src/a.txt']")
    expect(redrawn).to_have_attribute("data-status", "modified")  # the list was redrawn for that turn
    redrawn.locator("summary").click()
    expect(redrawn.locator(".diff-del")).to_contain_text(["-first version"])
    expect(redrawn.locator(".diff-add")).to_contain_text(["+second version"])

    # Rewind to the first turn's checkpoint: asked first, then the files and the conversation go back.
    dialogs: list[str] = []

    def accept(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    number = next(c["n"] for c in checkpoints(daemon, session["id"]) if c["turn_id"] == first)
    page.locator(f"#work-checkpoints li[data-n='{number}'] button[data-action='rewind']").click()
    expect(page.locator("#work-status")).to_contain_text(f"Rewound to checkpoint {number}", timeout=ACT_MS)
    assert dialogs and "can be undone" in dialogs[0]
    assert (worktree / "src/a.txt").read_text() == "first version\n"
    # The rewound turn stays in the transcript, marked; so does its checkpoint.
    expect(page.locator(f"#entries [data-turn='{second}'].entry-rewound").first).to_be_visible()
    expect(page.locator("#work-checkpoints li.rewound")).not_to_have_count(0)

    # Commit, then merge into the branch the session began on (the checkout is clean, so it moves too).
    page.locator("#work-land-box summary").click()
    page.fill("#work-commit-message", "from the page")
    page.click("#work-commit-button")
    expect(page.locator("#work-status")).to_contain_text("Committed", timeout=ACT_MS)
    page.click("#work-merge-button")
    expect(page.locator("#work-status")).to_contain_text("Merged into main", timeout=ACT_MS)
    assert "from the page" in git(repo, "log", "--format=%s", "main").splitlines()
    assert (repo / "src/a.txt").read_text() == "first version\n"
    assert git(repo, "status", "--porcelain") == ""
