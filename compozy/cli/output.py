"""Rendering for the CLI: human tables with rich, deterministic JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import rich_click as click

from compozy.cli.client import ApiError
from compozy_base import strict_json
from sessions.store.clean import scrub_text

FORMATS = ("human", "json", "jsonl")

# Exit codes mirror sysexits (docs/reference/surfaces.md §1) so scripts can branch on the class of failure.
EXIT_USAGE = 65
EXIT_UNAVAILABLE = 69
EXIT_FAILED = 70  # the agent's turn, or a session's start, failed
EXIT_NOPERM = 77
EXIT_CONFIG = 78
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command ended by Ctrl-C


def exit_code_for(status: int) -> int:
    """Every HTTP status maps to one documented code: 408 and 429 are worth retrying later (unavailable, like
    404 and 5xx), any other 4xx is the request's fault (usage)."""
    if status in (401, 403):
        return EXIT_NOPERM
    if status == 422:
        return EXIT_CONFIG
    if status == 0 or status in (404, 408, 410, 429) or status >= 500:
        return EXIT_UNAVAILABLE
    if 400 <= status < 500:
        return EXIT_USAGE
    return 1


def dump(data: Any) -> str:
    """JSON for `-o json`: strict (a NaN, say from an older daemon, is written as null; strict_json.py)."""
    return scrub_text(strict_json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


# An error line shows this much of its message; the whole of it is in the session record or the daemon log.
ERROR_CHARS = 400


def one_line(text: str, limit: int = ERROR_CHARS) -> str:
    """A message as one readable line: an agent's stderr pasted into a failure summary spanned several."""
    line = printable(" ".join(str(text).split()))
    return line if len(line) <= limit else line[:limit - 1] + "…"


def fail(message: str, code: str = "error", fmt: str = "human", exit_code: int = 1, body: Any = None) -> NoReturn:
    if fmt in ("json", "jsonl"):
        click.echo(json.dumps(body or {"error": message, "code": code}, sort_keys=True), err=True)
    else:
        click.echo(f"error: {one_line(message)}" + (f" ({code})" if code and code != "error" else ""), err=True)
    sys.exit(exit_code)


def fail_api(exc: ApiError, fmt: str) -> NoReturn:
    fail(exc.message, exc.code, fmt, exit_code_for(exc.status), exc.body)


# An answer the command cannot read: a daemon of another version, a proxy's page, a truncated body. Exit 1, as for
# any failure that fits no documented class.
EXIT_UNEXPECTED = 1
UNEXPECTED_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


def fail_unexpected(exc: BaseException, fmt: str) -> NoReturn:
    """A command that met an answer of a shape it does not know ends in one line, never a traceback
    (COMPOZY_DEBUG=1 keeps the traceback for whoever debugs the CLI itself)."""
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    fail(f"the daemon's answer is not what this command expects ({one_line(detail, 160)}); is the daemon the same "
         "version as this CLI? `compozy daemon stop && compozy daemon start` restarts it", "unexpected_answer", fmt,
         EXIT_UNEXPECTED)


def fail_stream(row: dict[str, Any], fmt: str) -> NoReturn:
    """A stream's own error frame: the daemon failed after its 200 (a store it could not read, a bug), as a 5xx
    would have before it: worth retrying later. The frame's code is the error's (older daemons sent none)."""
    code = str(row.get("code") or "stream_error")
    fail(str(row.get("error") or "stream failed"), code, fmt, EXIT_UNAVAILABLE, row if row.get("code") else None)


def json_line(row: Any) -> str:
    """One row for `-o jsonl`: sorted keys, as written, anything no UTF-8 encoder takes replaced."""
    return scrub_text(strict_json.dumps(row, sort_keys=True, ensure_ascii=False))


def emit(data: Any, fmt: str, human: Any = None, rows: list[Any] | None = None) -> None:
    """`-o json` prints `data` whole; `-o jsonl` one JSON line per row: `rows` when the command lists something
    inside a wrapper (tasks, queue entries, permissions, doctor items), else `data`'s items or `data` itself."""
    if fmt == "json":
        click.echo(dump(data))
    elif fmt == "jsonl":
        for row in rows if rows is not None else data if isinstance(data, list) else [data]:
            click.echo(json_line(row))
    elif human is not None:
        human()
    else:
        click.echo(dump(data))


# Terminal control characters (ESC above all) in stored text: a session name or agent output must not recolour,
# move the cursor or retitle the operator's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


_ID = re.compile(r"[a-z]+_[0-9a-f]{8,}")  # sess_…, ws_…, task_…, run_…, inq_…


def printable(text: str) -> str:
    return _CONTROL.sub("\N{REPLACEMENT CHARACTER}", text)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Cells are rich markup (callers colour severities); control characters never reach the terminal."""
    from rich.console import Console
    from rich.table import Table

    cells = [["" if v is None else printable(str(v)) for v in row] for row in rows]
    t = Table(title=title, show_lines=False, header_style="bold")
    for index, col in enumerate(columns):
        # A column of ids never wraps (folded at 80 columns, `task_1b1ac` / `63cdce64e6` could not be copied):
        # the others give way.
        column = [row[index] for row in cells if index < len(row)]
        ids = bool(column) and all(not cell or _ID.fullmatch(cell) for cell in column)
        t.add_column(col, overflow="fold", no_wrap=ids, min_width=max(map(len, column)) if ids else None)
    for row in cells:
        t.add_row(*row)
    Console().print(t)


def kv(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    """Values are data, shown as they are: no markup, no control characters."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan")
    t.add_column(overflow="fold")
    for key, value in pairs:
        if value is None or value == "":
            continue
        t.add_row(key, Text(printable(value if isinstance(value, str) else json.dumps(value, sort_keys=True))))
    Console().print(t)
