"""The `compozy session` commands for an agent's questions (ACP elicitation, form mode): list them, answer one."""

from __future__ import annotations

from typing import Any

import rich_click as click

from compozy.cli.app import _fmt, json_flag, output_option, seg, session, session_call
from compozy.cli.output import EXIT_UNAVAILABLE, EXIT_USAGE, emit, fail, table
from sessions.core.elicitation_form import typed_value


@session.command("elicitations")
@click.argument("session_id")
@output_option
@json_flag
def session_elicitations(session_id: str, fmt: str, as_json: bool) -> None:
    """Questions the agent asked and waits on (a message and a small form of typed fields).

    The turn waits on each one; answer with `session answer`. A stop or a cancelled turn cancels those still open.
    `-o json` shows each one's `requested_schema`: its fields, their types and which are required.

    Examples:

        compozy session elicitations sess_0123456789abcdef
        compozy session elicitations sess_0123456789abcdef -o jsonl | jq -r .id
    """
    fmt = _fmt(fmt, as_json)
    data = session_call(fmt, session_id, "GET", "/elicitations")
    emit(data, fmt, lambda: table("Pending questions", ["Request", "Message", "Fields", "Since"],
                                  [(e["id"], e["message"], _fields_summary(e["requested_schema"]), e["created_at"])
                                   for e in data["elicitations"]]), rows=data["elicitations"])


def _fields_summary(schema: dict[str, Any]) -> str:
    required = set(schema.get("required") or [])
    props = schema.get("properties") or {}
    return ", ".join(f"{name}{'*' if name in required else ''}:{_type_of(p)}" for name, p in props.items())


def _type_of(prop: dict[str, Any]) -> str:
    choices = prop.get("enum") or [o.get("const") for o in prop.get("oneOf") or []]
    return "|".join(str(c) for c in choices) if choices else str(prop.get("type") or "?")


def _content(fields: tuple[str, ...], schema: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The --field NAME=VALUE pairs, each read as its field's type in the requested schema."""
    props = schema.get("properties") or {}
    content: dict[str, Any] = {}
    for pair in fields:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            fail(f"--field takes NAME=VALUE, got {pair!r}", "invalid_field", fmt, EXIT_USAGE)
        if name not in props:
            fail(f"the form has no field {name!r} (fields: {', '.join(props) or 'none'})", "unknown_field", fmt,
                 EXIT_USAGE)
        try:
            content[name] = typed_value(props[name], raw)
        except ValueError:
            fail(f"{name} must be {_type_of(props[name])}, got {raw!r}", "invalid_field", fmt, EXIT_USAGE)
    return content


@session.command("answer")
@click.argument("session_id")
@click.argument("request_id")
@click.option("--field", "fields", multiple=True, metavar="NAME=VALUE",
              help="A form field's value (repeat for each field); typed from the form: number, integer, "
                   "boolean (true/false, yes/no), string or one of its choices.")
@click.option("--decline", is_flag=True, help="Decline to answer: the agent goes on without it.")
@click.option("--cancel", is_flag=True, help="Cancel the question (as if the form were dismissed).")
@output_option
@json_flag
def session_answer(session_id: str, request_id: str, fields: tuple[str, ...], decline: bool, cancel: bool,
                   fmt: str, as_json: bool) -> None:
    """Answer a question the agent asked (ids from `session elicitations ID`).

    With --field values the answer is accepted: every required field must be given, and each value must fit its
    field's type, or the daemon answers `invalid_elicitation_content` and the question stays open. --decline or
    --cancel answer without content. A question already answered, or cancelled with its turn, answers
    `elicitation_not_found` (exit 69).

    Examples:

        compozy session answer sess_0123456789abcdef elicit-1 --field name=Ada --field count=3 --field urgent=yes
        compozy session answer sess_0123456789abcdef elicit-1 --decline
        compozy session answer sess_0123456789abcdef elicit-1 --field color=green -o json
    """
    fmt = _fmt(fmt, as_json)
    if sum((bool(fields), decline, cancel)) > 1:
        fail("give --field values, --decline or --cancel, only one of them", "usage", fmt, EXIT_USAGE)
    if decline or cancel:
        body: dict[str, Any] = {"action": "decline" if decline else "cancel"}
    else:
        listed = session_call(fmt, session_id, "GET", "/elicitations")["elicitations"]
        pending = next((e for e in listed if e["id"] == request_id), None)
        if pending is None:
            fail(f"no pending elicitation {request_id!r}", "elicitation_not_found", fmt, EXIT_UNAVAILABLE)
        body = {"action": "accept", "content": _content(fields, pending["requested_schema"], fmt)}
    data = session_call(fmt, session_id, "POST", f"/elicitations/{seg(request_id)}", body)
    done = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}[body["action"]]
    emit(data, fmt, lambda: click.echo(f"{done} {request_id}"))
