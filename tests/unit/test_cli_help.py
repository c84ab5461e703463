"""Every command's `--help` teaches by example, and every example it shows parses: a renamed option or command
breaks this test, not an operator's copy-paste."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from compozy.cli.main import cli


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _leaves(command, (*path, name))
        else:
            yield (*path, name), command


LEAVES = sorted(_leaves(cli))


def _examples(help_text: str) -> list[str]:
    """The arguments of each `compozy …` line after "Examples:", pipes and comments cut off."""
    lines = [line.strip() for line in help_text.split("Examples:", 1)[1].splitlines()]
    return [shlex.split(line.split(" | ")[0].split("   #")[0])[1:] for line in lines if line.startswith("compozy ")]


def test_the_tree_is_walked() -> None:
    assert len(LEAVES) >= 40 and ("session", "approve") in [path for path, _ in LEAVES]


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=[" ".join(path) for path, _ in LEAVES])
def test_every_command_shows_examples_that_parse(path: tuple[str, ...], command: click.Command) -> None:
    assert "Examples:" in (command.help or ""), f"`compozy {' '.join(path)} --help` shows no example"
    examples = _examples(command.help or "")
    assert examples, "an Examples block with no `compozy …` line"
    for args in examples:
        target: click.Command = cli
        parent = cli.make_context("compozy", [], resilient_parsing=True)
        while isinstance(target, click.Group) and args and args[0] in target.commands:
            name, args = args[0], args[1:]
            target = target.commands[name]
            parent = click.Context(target, info_name=name, parent=parent)
        assert not isinstance(target, click.Group), f"example names no command: {args}"
        # Parsing checks every option name, choice and range the example uses; nothing is run.
        target.make_context(target.name or "", list(args), parent=parent.parent)

    # As rendered (markdown): each example on a line of its own, not run together into one paragraph.
    shown = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
    assert shown.exit_code == 0, shown.output
    rendered = [line.strip() for line in shown.output.splitlines()]
    for line in (raw.strip() for raw in (command.help or "").split("Examples:", 1)[1].splitlines()):
        if line.startswith("compozy "):
            assert line.replace("`", "") in rendered, f"example run together in --help: {line}"
