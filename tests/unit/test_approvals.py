"""What a person's approval covers (sessions/runtime/approvals.py) and what they are shown (core/visible.py): the
rules alone, without a daemon."""

from __future__ import annotations

from sessions.core.visible import visible
from sessions.runtime.approvals import Approvals, command_of, readings

LS = {"toolCallId": "t1", "kind": "execute", "title": "Run ls", "rawInput": {"command": "ls  -la"}}


def test_an_approved_command_covers_that_command_once_in_its_turn_and_nothing_else() -> None:
    approvals = Approvals()
    approvals.approved("turn-1", LS, always=False)
    assert approvals.covers("turn-1", ["/bin/sh", "-c", "echo pwned > proof.txt"]) is None  # another command
    assert approvals.covers("turn-1", ["/bin/sh", "-c", "ls -la"]) == "once"  # the one approved, through a shell
    assert approvals.covers("turn-1", ["ls", "-la"]) is None  # spent
    approvals.approved("turn-1", LS, always=False)
    assert approvals.covers("turn-2", ["ls", "-la"]) is None  # a once approval ends with its turn


def test_always_names_the_exact_command_for_the_session() -> None:
    approvals = Approvals()
    approvals.approved("turn-1", LS, always=True)
    for turn in ("turn-1", "turn-2", "turn-3"):
        assert approvals.covers(turn, ["bash", "-c", "ls -la"]) == "always"
    assert approvals.covers("turn-4", ["bash", "-c", "ls -la; rm -rf /"]) is None
    assert approvals.covers("turn-4", ["python", "-c", "ls -la"]) is None  # not a shell running the line


def test_a_tool_call_without_a_command_approves_no_terminal() -> None:
    approvals = Approvals()
    approvals.approved("turn-1", {"kind": "execute", "title": "Run ls"}, always=True)
    assert approvals.always == set() and approvals.covers("turn-1", ["ls"]) is None
    assert command_of({"rawInput": {"command": ["git", "status"]}}) == "git status"
    assert readings(["/usr/bin/zsh", "-lc", "make  test"]) == {"/usr/bin/zsh -lc make test", "make test"}


def test_controls_and_bidi_characters_are_shown_as_escapes() -> None:
    assert visible("invoice_\u202egpj.exe") == "invoice_\\u202egpj.exe"
    assert visible("ls\nrm -rf ~") == "ls\\nrm -rf ~"
    assert visible("a\u200bb\u2066c\x1b[31m") == "a\\u200bb\\u2066c\\u001b[31m"
    assert visible("naïve café ✓") == "naïve café ✓"  # printable text stays as it is
