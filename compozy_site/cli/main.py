"""Entry point of the `compozy` console script: import every command module, then run the group."""

from __future__ import annotations

import sys

import rich_click as click

# Importing a module registers its commands.
from compozy_site.cli import (  # noqa: F401
    commands,
    evidence,
    health,
    live,
    reads,
    repair,
    system,
    tasks,
    workspaces,
)
from compozy_site.cli.app import cli
from compozy_site.cli.output import EXIT_USAGE, fail


def _wants_json(argv: list[str]) -> bool:
    """`-o json|jsonl`, `--output=json` or `--json` anywhere on the line (parsing failed, so no option object)."""
    for i, arg in enumerate(argv):
        if arg == "--json" or arg in ("-ojson", "-ojsonl", "--output=json", "--output=jsonl"):
            return True
        if arg in ("-o", "--output") and i + 1 < len(argv) and argv[i + 1] in ("json", "jsonl"):
            return True
    return False


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        code = cli.main(args=args, prog_name="compozy", standalone_mode=False)
        if isinstance(code, int) and code:  # ctx.exit(n): standalone mode would have exited with it
            sys.exit(code)
    except click.UsageError as exc:
        # One line like every other CLI error (JSON under -o json), not click's box, and the documented 65.
        command = exc.ctx.command_path if exc.ctx else "compozy"
        fail(f"{exc.format_message()} (see `{command} --help`)", "usage_error",
             "json" if _wants_json(args) else "human", EXIT_USAGE)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        fail(exc.format_message(), "error", "json" if _wants_json(args) else "human", exc.exit_code)


if __name__ == "__main__":
    main()
