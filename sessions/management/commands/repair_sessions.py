"""`manage.py repair_sessions [ID ...|--all] [--dry-run] [--force] [--json|-o json]`: transcript repair
without the daemon.

Uses Django and the session folders directly, so it works with the daemon down. A session a running
daemon owns in a live state is refused; a stopped session may be repaired while the daemon runs.

Output: one line per session that was repaired, would be, or needs a person (`-v 2` lists every session),
then one summary line. Exit 0 when nothing needs a person (a healthy tree, or everything repaired); exit 1
when a session needs one (a damaged store, unreadable meta.json, or a named session that was refused).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from enum import StrEnum
from typing import Any, TypedDict

from django.core.management.base import CommandError, CommandParser

from sessions.core.enums import LIVE_STATES
from sessions.core.errors import CompozyError
from sessions.management.commands._cli import EXIT_NOT_FOUND, EXIT_USAGE, CliCommand
from sessions.repair.transcript import IssueCode, RepairPayload, Severity, repair_transcript
from sessions.store import folder
from sessions.store.ids import is_session_id

logger = logging.getLogger(__name__)


class Outcome(StrEnum):
    REPAIRED = "repaired"
    PLANNED = "planned"  # dry run with actions to take
    CLEAN = "clean"  # nothing to repair
    SKIPPED = "skipped"  # --all: stopped for a reason the repair rule leaves alone (a clean stop); --force repairs
    BLOCKED = "blocked"  # error issues: a damaged store, or a named session whose stop reason needs --force
    REFUSED = "refused"  # a running daemon owns the session
    FAILED = "failed"  # the session could not be read (e.g. session_meta_invalid)
    NOT_FOUND = "not_found"  # a named id with no session: a typo, not a person's job (exit 69, as `compozy`)


QUIET = frozenset({Outcome.CLEAN, Outcome.SKIPPED})  # not listed line by line unless -v 2


def needs_person(status: str, named: bool) -> bool:
    """Under --all a session the running daemon owns is simply live; a named one was asked for and refused."""
    return status in (Outcome.BLOCKED, Outcome.FAILED) or (named and status == Outcome.REFUSED)


class RepairEntry(TypedDict, total=False):
    """One session's line of the `--json` document."""

    session_id: str
    dry_run: bool
    status: str  # an Outcome
    error: str
    code: str
    repair: RepairPayload
    stale_state: str
    needs_person: bool


def classify(report: RepairPayload, dry_run: bool, *, sweep: bool = False) -> Outcome:
    codes = {issue["code"] for issue in report["issues"]}
    if IssueCode.SESSION_NOT_STOPPED in codes:
        return Outcome.REFUSED
    errors = {issue["code"] for issue in report["issues"] if issue["severity"] == Severity.ERROR}
    if sweep and errors == {IssueCode.STOP_REASON_REQUIRES_FORCE}:
        return Outcome.SKIPPED
    if errors:
        return Outcome.BLOCKED
    if report["persisted"]:
        return Outcome.REPAIRED
    if report["actions"] and dry_run:
        return Outcome.PLANNED
    return Outcome.CLEAN


MAX_NAMED = 10  # sessions named in the closing error line; --json lists them all


def _code(entry: RepairEntry) -> str:
    """Why a session needs a person: its error code, or its blocking issue codes."""
    if "code" in entry:
        return str(entry["code"])
    codes = [i["code"] for i in entry["repair"]["issues"] if i["severity"] == Severity.ERROR]
    return ", ".join(dict.fromkeys(codes)) or entry["status"]


def _first(names: list[str]) -> str:
    """At most MAX_NAMED names for one error line, and how many more there are."""
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return ", ".join(names[:MAX_NAMED]) + more


def _describe(entry: RepairEntry) -> str:
    report = entry.get("repair")
    if report is None:
        return f"{entry['error']} ({entry['code']})"
    parts = []
    if entry.get("stale_state"):
        verb = "would become" if entry["dry_run"] else "became"
        parts.append(f"stale {entry['stale_state']} {verb} stopped")
    if report["actions"]:
        names = [a["code"] + (f" ({a['tool_call_id']})" if a.get("tool_call_id") else "") for a in report["actions"]]
        parts.append(f"{len(names)} action(s): {', '.join(names)}")
    flagged = [i["code"] for i in report["issues"] if i["severity"] != Severity.INFO or not report["actions"]]
    if flagged:
        parts.append("issues: " + ", ".join(dict.fromkeys(flagged)))
    return "; ".join(parts) or "nothing to report"


class Command(CliCommand):
    help = ("Repair interrupted session transcripts (append an interrupted tool_result per dangling tool call, "
            "then a terminal error). Append-only and idempotent; works with the daemon down.")
    epilog = """examples:
  python manage.py repair_sessions --all --dry-run     what would be repaired, nothing written
  python manage.py repair_sessions --all               repair every session that needs it
  python manage.py repair_sessions sess_0123456789abcdef --force -o json

exit codes: 0 nothing needs a person, 1 a session needs one (listed on the last line), 65 a bad command line,
69 no session of that id (and none needs a person), as `compozy` answers for one"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_ids", nargs="*", metavar="ID", help="Session ids to repair.")
        parser.add_argument("--all", action="store_true", dest="all_sessions", help="Every session folder.")
        parser.add_argument("--dry-run", action="store_true", help="Report issues and planned actions; write nothing.")
        parser.add_argument("--force", action="store_true",
                            help="Also repair sessions stopped for reasons other than agent_crashed or error.")
        self.add_json_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[str] = options["session_ids"]
        sweep = bool(options["all_sessions"])
        if sweep == bool(ids):
            raise CommandError("give session IDs or --all (not both); see --help", returncode=EXIT_USAGE)
        dry_run, force = options["dry_run"], options["force"]
        as_json = self.wants_json(options)
        every_line = options["verbosity"] >= 2
        if sweep:
            ids = folder.list_session_dirs()
        # With --json, stdout carries only the JSON document; progress goes to stderr.
        progress = self.stderr if as_json else self.stdout
        results: list[RepairEntry] = []
        for index, session_id in enumerate(ids, 1):
            entry = self._repair_one(session_id, dry_run=dry_run, force=force, sweep=sweep)
            entry["needs_person"] = needs_person(entry["status"], named=not sweep)
            results.append(entry)
            # A live session under --all is not news; a named one that was refused is.
            quiet = entry["status"] in QUIET or (entry["status"] == Outcome.REFUSED and not entry["needs_person"])
            if every_line or not quiet:
                progress.write(f"[{index}/{len(ids)}] {session_id}  {entry['status']:<8}  {_describe(entry)}",
                               style_func=lambda text: text)
        counts = Counter(entry["status"] for entry in results)
        attention = [entry for entry in results if entry["needs_person"]]
        summary = {"total": len(results), **{outcome.value: counts.get(outcome.value, 0) for outcome in Outcome},
                   "needs_person": len(attention)}
        line = f"{len(results)} session(s): " + (", ".join(
            f"{counts[o.value]} {o.value}" for o in Outcome if counts.get(o.value)) or "none")
        line += f"; {len(attention)} need(s) a person" if attention else "; nothing needs a person"
        if dry_run:
            line += " (dry run: nothing persisted)"
        if as_json:
            self.stdout.write(json.dumps({"dry_run": dry_run, "force": force, "sessions": results,
                                          "summary": summary}, indent=2, sort_keys=True))
            self.stderr.write(line, style_func=lambda text: text)
        else:
            self.stdout.write(line)
        unknown = [entry["session_id"] for entry in results if entry["status"] == Outcome.NOT_FOUND]
        missing = f"no such session: {_first(unknown)}" if unknown else ""
        if attention:
            named = _first([f"{e['session_id']} ({_code(e)})" for e in attention])
            raise CommandError(f"{len(attention)} session(s) need a person: {named}"
                               + (f"; {missing}" if missing else ""), returncode=1)
        if missing:
            raise CommandError(missing, returncode=EXIT_NOT_FOUND)

    def _repair_one(self, session_id: str, *, dry_run: bool, force: bool, sweep: bool) -> RepairEntry:
        entry: RepairEntry = {"session_id": session_id, "dry_run": dry_run}
        if not is_session_id(session_id):
            return {**entry, "status": Outcome.NOT_FOUND.value, "error": "not a session id",
                    "code": "session_not_found"}
        try:
            before = folder.read_meta(session_id)
        except ValueError as exc:
            return {**entry, "status": Outcome.FAILED.value, "error": f"session metadata is unreadable: {exc}",
                    "code": IssueCode.SESSION_META_INVALID.value}
        try:
            report = repair_transcript(session_id, dry_run=dry_run, force=force)
        except CompozyError as exc:
            status = Outcome.NOT_FOUND if exc.code == "session_not_found" else Outcome.FAILED
            return {**entry, "status": status.value, "error": exc.message, "code": exc.code}
        except (OSError, ValueError) as exc:
            logger.exception("repair of %s failed", session_id)
            return {**entry, "status": Outcome.FAILED.value, "error": str(exc), "code": "repair_failed"}
        status = classify(report, dry_run, sweep=sweep)
        if before is not None and before["state"] in LIVE_STATES and status != Outcome.REFUSED:
            entry["stale_state"] = before["state"]
            if status == Outcome.CLEAN:  # the stale state itself was the repair
                status = Outcome.PLANNED if dry_run else Outcome.REPAIRED
        return {**entry, "status": status.value, "repair": report}
