"""Human output that reads well in an 80-column terminal: one line per event, tables whose ids never wrap,
relative times. Only the human format lives here; `-o json`/`jsonl` print the API's rows unchanged."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from compozy.cli.output import printable

# Width when stdout is no terminal and COLUMNS is unset (a pipe, a file): wide enough for a summary worth
# grepping, narrow enough that one huge tool output does not make a multi-kilobyte line.
PIPE_COLUMNS = 160
ELLIPSIS = "…"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATIONS = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def terminal_width() -> int:
    return shutil.get_terminal_size((PIPE_COLUMNS, 24)).columns


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def ago(timestamp: str | None, now: datetime | None = None) -> str:
    """`12s ago`, `3m ago`, `2h05m ago`, `4d03h ago`: two units at most, so the column stays narrow."""
    if not timestamp:
        return ""
    seconds = int(((now or datetime.now(UTC)) - parse_time(timestamp)).total_seconds())
    if seconds < 0:
        return "now"
    if seconds < 60:
        return f"{seconds}s ago"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes}m ago"
    if days == 0:
        return f"{hours}h{minutes % 60:02d}m ago" if minutes % 60 else f"{hours}h ago"
    return f"{days}d{hours % 24:02d}h ago" if hours % 24 else f"{days}d ago"


def since_timestamp(value: str, now: datetime | None = None) -> str:
    """`--since`: an RFC3339 time or a duration back from now (`90s`, `5m`, `1h30m`, `2d`), as the store's
    own timestamp form (`…T08:00:00.000000Z`): the store compares timestamps as text."""
    text = value.strip()
    if _DURATIONS.fullmatch(text):
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text))
        try:
            moment = (now or datetime.now(UTC)) - timedelta(seconds=seconds)
        except OverflowError:  # further back than year 1: every event is newer
            return "0001-01-01T00:00:00.000000Z"
    else:
        try:
            moment = parse_time(text)
        except ValueError:
            raise ValueError(f"--since takes an RFC3339 time or a duration like 5m or 1h30m, not {value!r}") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def clip(text: str, width: int) -> str:
    """`text` on one line, at most `width` characters, an ellipsis where it was cut."""
    line = " ".join(str(text).split())
    if width <= 0:
        return ""
    return line if len(line) <= width else line[: width - 1] + ELLIPSIS


def event_summary(row: dict[str, Any]) -> str:
    """What an event says, in words: its text, the tool and outcome, the decision, the stop reason."""
    c = row.get("content") or {}
    type_ = row.get("type", "")
    failure = c.get("failure") or {}
    if type_ in ("user_message", "agent_message", "thought", "synthetic_reentry", "runtime_progress",
                 "runtime_warning"):
        return str(c.get("text") or "")
    if type_ == "tool_call":
        return " ".join(str(p) for p in (c.get("tool_kind"), c.get("title") or c.get("tool_name")) if p)
    if type_ == "tool_result":
        outcome = c.get("tool_error") or c.get("status") or "completed"
        return f"{c.get('tool_name') or c.get('tool_call_id') or 'tool'}: {outcome}"
    if type_ == "permission":
        return f"{c.get('action') or 'permission'} {c.get('resource') or c.get('title') or ''} → {c.get('decision')}"
    if type_ == "done":
        return str(c.get("stop_reason") or "")
    if type_ in ("error", "session_stopped"):
        parts = [c.get("stop_reason"), failure.get("kind"), c.get("error") or failure.get("summary")]
        return " · ".join(str(p) for p in parts if p)
    if type_.startswith("transcript_marker") or type_ in ("system", "available_commands_update"):
        return ": ".join(str(p) for p in (c.get("title"), c.get("text")) if p)
    if type_ == "usage":
        usage = c.get("usage") or {}
        return " ".join(f"{k}={v}" for k, v in usage.items() if v is not None and k != "timestamp")
    rest = {k: v for k, v in c.items() if k not in ("schema", "type", "timestamp", "session_id", "turn_id")}
    return json.dumps(rest, sort_keys=True, ensure_ascii=False)


def event_line(row: dict[str, Any], width: int, when: str, type_width: int = 13) -> str:
    """`  SEQ  WHEN  TYPE  summary`, cut to `width` columns."""
    head = f"{row['sequence']:>5}  {when:>9}  {row['type']:<{type_width}}  "
    # Stored text is the agent's: its ESC and BEL sequences must not recolour or retitle the terminal.
    return (head + clip(printable(event_summary(row)), width - len(head))).rstrip()


def event_lines(rows: Sequence[dict[str, Any]], width: int | None = None, now: datetime | None = None) -> list[str]:
    width = width or terminal_width()
    now = now or datetime.now(UTC)
    type_width = min(max((len(r["type"]) for r in rows), default=4), 25)
    return [event_line(r, width, ago(r.get("timestamp"), now), type_width) for r in rows]


def clock(timestamp: str | None) -> str:
    """Local wall-clock time of a live event (`--follow`: a relative time would always read `0s ago`)."""
    return parse_time(timestamp).astimezone().strftime("%H:%M:%S") if timestamp else ""


def fit_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], flexible: set[str],
              width: int | None) -> list[str]:
    """A plain table: two spaces between columns, never a wrapped cell. Columns not in `flexible` (ids,
    states, times) keep their full width; flexible ones shrink, widest first, with an ellipsis, until the
    line fits `width` (None: no limit)."""
    cells = [["" if v is None else " ".join(printable(str(v)).split()) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    if width is not None:
        flex = [i for i, c in enumerate(columns) if c in flexible]
        while sum(widths) + 2 * (len(widths) - 1) > width and flex:
            widest = max(flex, key=lambda i: widths[i])
            if widths[widest] <= max(len(columns[widest]), 4):
                flex.remove(widest)
                continue
            widths[widest] -= 1
    lines = []
    for row in [list(columns), *cells]:
        line = "  ".join(clip(cell, w).ljust(w) if i < len(widths) - 1 else clip(cell, w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
        lines.append(line.rstrip())
    return lines


def cost_text(usage: dict[str, Any] | None) -> str | None:
    """`1.23 USD`, from a session's usage; None when the agent reports no cost."""
    cost = (usage or {}).get("cost") or {}
    return f"{cost['amount']:.2f} {cost.get('currency') or 'USD'}" if isinstance(cost.get("amount"), int | float) \
        else None


def status_text(s: dict[str, Any]) -> str:
    """What a person reads of a session's state (sessions/core/display.py): a stopped one's outcome (`completed`,
    `stopped by you`, `failed: timeout`), a quiet turn's notice, else its state."""
    outcome, quiet = s.get("outcome") or {}, s.get("quiet") or {}
    if outcome.get("label"):
        return f"{s['state']}: {outcome['label']}"
    if quiet.get("text"):
        return f"{s['state']}: {quiet['text']}"
    return str(s["state"])


def session_rows(sessions: Sequence[dict[str, Any]], wide: bool, now: datetime | None = None) -> list[str]:
    """`session list`: id, state, agent, last activity and name; `--wide` adds the rest, unshrunk."""
    now = now or datetime.now(UTC)
    if wide:
        columns = ["ID", "NAME", "STATE", "BADGE", "AGENT", "PROVIDER", "MODE", "COST", "STOP REASON", "FAILURE",
                   "WORKSPACE", "ACTIVE", "CREATED"]
        rows: list[tuple[Any, ...]] = [
            (s["id"], s.get("name"), status_text(s), s.get("badge"), s["agent_name"], s.get("provider"),
             (s.get("mode") or {}).get("current"), cost_text(s.get("usage")), s.get("stop_reason"),
             (s.get("failure") or {}).get("kind"), s.get("workspace_id"),
             ago(s.get("last_activity_at") or s["updated_at"], now), ago(s.get("created_at"), now))
            for s in sessions]
        return fit_table(columns, rows, set(), None)
    columns = ["ID", "STATE", "AGENT", "ACTIVE", "NAME"]
    rows = [(s["id"], status_text(s), s["agent_name"], ago(s.get("last_activity_at") or s["updated_at"], now),
             s.get("name")) for s in sessions]
    return fit_table(columns, rows, {"AGENT", "NAME"}, terminal_width())


# ---- session history ------------------------------------------------------------------------------------------

LABEL = 11  # "permission" and a space


def _labelled(label: str, text: str, width: int, whole: bool) -> list[str]:
    """`  label      text`: the whole text (its lines indented under the first) when `whole`, else one clipped line."""
    head = f"  {label:<{LABEL - 1}} "
    if not whole:
        return [(head + clip(printable(text), width - len(head))).rstrip()]
    lines = printable(text).strip("\n").splitlines() or [""]
    return [(head + lines[0]).rstrip(), *((" " * len(head) + line).rstrip() for line in lines[1:])]


def _event_part(data: dict[str, Any]) -> tuple[str, str]:
    """A `data-compozy-event` (or pending permission) part as (label, one line)."""
    type_ = str(data.get("event_type") or "")
    marker = data.get("marker") or {}
    failure = data.get("failure") or {}
    if type_.startswith("transcript_marker"):
        kind = str(marker.get("kind") or data.get("title") or "").removeprefix("transcript_marker.")
        return "marker", f"{kind}: {marker.get('summary') or data.get('text') or ''}"
    if type_ == "permission":
        target = data.get("resource") or data.get("title") or data.get("tool_call_id") or ""
        return "permission", f"{data.get('action') or 'permission'} {target} → {data.get('decision') or 'pending'}"
    if type_ in ("error", "session_stopped"):
        parts = [data.get("stop_reason"), failure.get("kind"), data.get("error") or failure.get("summary")
                 or data.get("stop_detail")]
        return ("error" if type_ == "error" else "stopped"), " · ".join(str(p) for p in parts if p)
    if type_ == "plan":
        entries = data.get("entries") or []
        return "plan", "; ".join(str(e.get("content") if isinstance(e, dict) else e) for e in entries)
    if type_ in ("runtime_progress", "runtime_warning"):
        return "runtime", str(data.get("text") or "")
    return type_ or "event", ": ".join(str(p) for p in (data.get("title"), data.get("text") or data.get("error"))
                                       if p)


def _shown_requests(parts: Sequence[dict[str, Any]]) -> set[str]:
    """The ids of the permission requests a message shows (`data-compozy-permission`): the transcript updates each
    with the decision that settled it, so the decision's own event part is not a line of its own (it was: every
    decision printed twice)."""
    return {str(p.get("id")) for p in parts if p.get("type") == "data-compozy-permission"}


def message_lines(message: dict[str, Any], width: int) -> list[str]:
    """One message of a turn: the user's text, the agent's reply (text and thoughts whole), one line per tool call
    with its status, and each marker or event where it happened; a permission request once, with its decision."""
    role = message.get("role")
    meta = message.get("metadata") or {}
    lines: list[str] = []
    requests = _shown_requests(message.get("parts") or [])
    for part in message.get("parts") or []:
        kind = part.get("type")
        if kind == "text":
            label = "agent" if role == "assistant" else "wake" if meta.get("synthetic_reentry") else \
                "steer" if meta.get("source") == "steer" else "user"
            lines += _labelled(label, str(part.get("text") or ""), width, True)
        elif kind == "reasoning":
            lines += _labelled("thought", str(part.get("text") or ""), width, True)
        elif kind == "dynamic-tool":
            name = part.get("title") or part.get("toolName") or "tool"
            status = part.get("status") or {"output-available": "completed", "output-error": "failed"}.get(
                str(part.get("state")), "pending")
            kind_ = f" ({part['toolKind']})" if part.get("toolKind") else ""
            error = f": {part['errorText']}" if part.get("errorText") else ""
            lines += _labelled("tool", f"{name}{kind_} {status}{error}", width, False)
        elif kind == "data-compozy-permission":
            label, text = _event_part(part.get("data") or {})
            lines += _labelled(label, text, width, False)
        elif kind == "data-compozy-event":
            data = part.get("data") or {}
            if data.get("event_type") == "permission" and str(data.get("request_id") or "") in requests:
                continue  # the request's own line says it
            label, text = _event_part(data)
            lines += _labelled(label, text, width, False)
    stop = meta.get("stop_reason")
    if role == "assistant" and stop and stop != "end_turn":
        lines += _labelled("ended", str(stop), width, False)
    return lines


def history_lines(turns: Sequence[dict[str, Any]], session_id: str, width: int | None = None,
                  now: datetime | None = None) -> list[str]:
    """`session history`: a header per turn, then its messages in the order they happened."""
    width = width or terminal_width()
    now = now or datetime.now(UTC)
    lines: list[str] = []
    for turn in turns:
        name = "outside a turn" if turn["turn_id"] in ("", "-") else f"turn {turn['turn_id']}"
        lines.append(f"── {name} · {ago(turn.get('started_at'), now)}")
        if turn.get("truncated"):
            lines.append(f"  … {turn['omitted_events']} events not shown: compozy session events {session_id} "
                         f"--after {turn['start_sequence']}")
        for message in turn.get("messages") or []:
            lines += message_lines(message, width)
    return lines


def wrap(text: str, width: int, indent: str = "    ") -> list[str]:
    """`text` (made printable, on one line) wrapped at word boundaries under `indent`, each line at most `width`
    columns; a word longer than the room (a path, a URL) is broken, never cut."""
    import textwrap

    room = max(width - len(indent), 20)
    return [indent + line for line in textwrap.wrap(" ".join(printable(str(text)).split()), room,
                                                    break_on_hyphens=False)]


def fit_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], below: str, width: int | None) -> list[str]:
    """One line per row when the whole table fits `width`; else the table without the `below` column, each row
    followed by that column's text wrapped beneath it. At 80 columns a summary cut to a few characters could not be
    read (`compozy attention`, a task's history); this way every column keeps all it says."""
    whole = fit_table(columns, rows, set(), None)
    if width is None or max(map(len, whole)) <= width:
        return whole
    at = list(columns).index(below)
    kept = [c for i, c in enumerate(columns) if i != at]
    table_lines = fit_table(kept, [[v for i, v in enumerate(row) if i != at] for row in rows], set(), width)
    lines = [table_lines[0]]
    for line, row in zip(table_lines[1:], rows, strict=True):
        lines.append(line)
        lines += wrap(row[at] or "", width) if row[at] else []
    return lines


# The rows a turn streams in chunks: `session events` shows each run of them as one line (`--raw`: a line each).
CHUNK_TYPES = ("agent_message", "thought")


def merge_chunks(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive chunk rows of one type and turn as one row: the first's sequence, the last's time, the texts
    joined, `content.chunks` their count. A reply of 300 chunks was 300 lines."""
    merged: list[dict[str, Any]] = []
    for row in rows:
        last = merged[-1] if merged else None
        if (last is not None and row.get("type") in CHUNK_TYPES and last.get("type") == row.get("type")
                and last.get("turn_id") == row.get("turn_id")):
            content = last["content"]
            content["text"] = str(content.get("text") or "") + str((row.get("content") or {}).get("text") or "")
            content["chunks"] = int(content.get("chunks") or 1) + 1
            last["timestamp"] = row.get("timestamp")
            continue
        merged.append({**row, "content": dict(row.get("content") or {})} if row.get("type") in CHUNK_TYPES
                      else row)
    return merged
