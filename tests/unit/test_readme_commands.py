"""Every `compozy …` command line of README's debugging table parses as the CLI it names (issue 34: the table must
match what the commands do): a renamed command or option breaks this test, not an operator's copy-paste."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from compozy.cli.main import cli
from tests.conftest import ROOT

PLACEHOLDERS = {"ID": "sess_0123456789abcdef", "SESSION_ID": "sess_0123456789abcdef", "NAME": "general",
                "REQUEST": "req-1", "…": "text"}


def table_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("| When… | Run |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"`(compozy [^`]+)`", table)


def expand(snippet: str) -> list[list[str]]:
    """The argument lists a snippet stands for: `approve|deny` names two commands, `[--dry-run]` is optional."""
    words = shlex.split(snippet.replace('"…"', "text").replace("[", "").replace("]", ""))[1:]
    alternatives = [w.split("|") if "|" in w and not w.startswith("-") else [w] for w in words]
    lines: list[list[str]] = [[]]
    for choice in alternatives:
        lines = [[*line, PLACEHOLDERS.get(c, c)] for line in lines for c in choice]
    return lines


COMMANDS = table_commands()


def test_the_table_is_read() -> None:
    assert len(COMMANDS) >= 20 and "compozy session history ID" in COMMANDS


@pytest.mark.parametrize("snippet", COMMANDS)
def test_each_command_of_the_debugging_table_parses(snippet: str) -> None:
    for args in expand(snippet):
        target: click.Command = cli
        parent = cli.make_context("compozy", [], resilient_parsing=True)
        while isinstance(target, click.Group) and args and args[0] in target.commands:
            name, args = args[0], args[1:]
            target = target.commands[name]
            parent = click.Context(target, info_name=name, parent=parent)
        # A group that runs when named alone (`compozy attention`) is a command too.
        assert not isinstance(target, click.Group) or target.invoke_without_command, f"`{snippet}` names no command"
        target.make_context(target.name or "", list(args), parent=parent.parent)
