"""Entry point of the `compozy` console script: import every command module, then run the group."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO, cast

import rich_click as click

# Importing a module registers its commands.
from compozy.cli import (  # noqa: F401
    attention,
    elicit,
    events,
    evidence,
    health,
    hooks,
    memory,
    people,
    providers,
    reads,
    repair,
    sessions,
    system,
    tasks,
    turns,
    workspaces,
    worktrees,
)
from compozy.cli.app import cli
from compozy.cli.client import ApiError
from compozy.cli.output import EXIT_INTERRUPTED, EXIT_USAGE, UNEXPECTED_ERRORS, fail, fail_api, fail_unexpected


class ReaderGone(BaseException):
    """The reader of stdout closed the pipe (`compozy … | head -1`): it has what it wanted, so the command is
    done and exits 0. Not an OSError: commands take an OSError while streaming for a lost daemon (and would
    reconnect for ever, or report a cut stream), and not an Exception, which a command may catch."""


class _Stdout:
    """sys.stdout, except that a write or flush into a pipe whose reader is gone raises ReaderGone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise self._gone() from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise self._gone() from None

    def _gone(self) -> ReaderGone:
        # What is still buffered goes to /dev/null: flushed at exit into the closed pipe, Python would print
        # "Exception ignored … BrokenPipeError" on stderr.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        return ReaderGone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


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
    stdout = sys.stdout
    if stdout is None:  # started with fd 1 closed: no reader to lose
        _run(args)
        return
    sys.stdout = cast(TextIO, _Stdout(stdout))
    try:
        _run(args)
    except ReaderGone:
        sys.exit(0)
    finally:
        # The last of the output: if the reader is gone it goes to /dev/null, and the exit status stands.
        with contextlib.suppress(ReaderGone):
            sys.stdout.flush()
        sys.stdout = stdout


def _run(args: list[str]) -> None:
    try:
        code = cli.main(args=args, prog_name="compozy", standalone_mode=False)
        if isinstance(code, int) and code:  # ctx.exit(n): standalone mode would have exited with it
            sys.exit(code)
    except click.UsageError as exc:
        # One line like every other CLI error (JSON under -o json), not click's box, and the documented 65.
        command = exc.ctx.command_path if exc.ctx else "compozy"
        fail(f"{exc.format_message()} (see `{command} --help`)", "usage_error",
             "json" if _wants_json(args) else "human", EXIT_USAGE)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        fail(exc.format_message(), "error", "json" if _wants_json(args) else "human", exc.exit_code)
    except ApiError as exc:
        # One a command did not expect where it came (the client built before its try: a config.toml it refused).
        fail_api(exc, "json" if _wants_json(args) else "human")
    except UNEXPECTED_ERRORS as exc:
        if os.environ.get("COMPOZY_DEBUG") == "1":
            raise
        fail_unexpected(exc, "json" if _wants_json(args) else "human")


if __name__ == "__main__":
    main()
