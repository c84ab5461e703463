"""What a request that fails its schema answers: one stable code per error, the same for the ninja routes and the
stream consumers (which validate their query through the same schemas, outside ninja)."""

from __future__ import annotations

from typing import Any

# A field that fails its schema answers with the code the hand-written checks used before the schemas.
FIELD_CODES = {
    "limit": "invalid_limit", "last": "invalid_limit", "after_sequence": "invalid_cursor",
    "before_sequence": "invalid_cursor", "cursor": "invalid_cursor", "Last-Event-ID": "invalid_cursor",
    "ttl_seconds": "invalid_ttl", "decision": "invalid_decision", "mode": "invalid_mode", "type": "invalid_type",
    "since": "invalid_since", "state": "invalid_state", "reasoning_effort": "invalid_reasoning_effort",
    "speed": "invalid_speed", "name": "invalid_name", "format": "invalid_format", "frames": "invalid_frames",
}
MISSING_CODES = {"decision": "invalid_decision"}
# The session stream's other cursor forms (docs/reference/events.md §6.1): the same mistake as `after_sequence`.
FIELD_CODES.update(dict.fromkeys(("after", "last_event_id", "epoch", "generation"), "invalid_cursor"))


def validation_code(error: dict[str, Any]) -> str:
    """The stable code of one pydantic error, from its kind and the field (`loc` = source, [param], field…)."""
    kind, loc = error.get("type", ""), [str(part) for part in error.get("loc", [])]
    if loc and loc[0] == "body" and len(loc) <= 2:  # the body as a whole: absent, or not an object
        return "body_required" if kind == "missing" else "malformed_json"
    fields = [part for part in loc[1:] if part not in ("payload", "filters") and not part.isdigit()]
    field = fields[0] if fields else ""
    if kind in ("unreadable_text", "string_unicode"):  # NUL, or a lone surrogate pydantic caught first
        return "invalid_text"
    if kind == "extra_forbidden":
        return "unknown_field"
    if len(fields) > 1:  # inside a nested object (an AI-SDK message part…): the field names are not ours
        return "invalid_field"
    if kind == "missing":
        return MISSING_CODES.get(field, f"{field}_required")
    if field in FIELD_CODES:
        return FIELD_CODES[field]
    if kind == "string_too_long":
        return "value_too_long"
    return "invalid_field" if loc and loc[0] == "body" else "invalid_parameter"


def describe_errors(raw: list[Any]) -> tuple[str, str, list[dict[str, Any]]]:
    """(message, code, errors) for pydantic's errors, `loc` = source, [param], field…. Only type, loc and msg are
    kept: `ctx` may hold exception objects, and `input` may be huge."""
    errors = [{"type": e.get("type"), "loc": list(e.get("loc", [])), "msg": e.get("msg")} for e in raw]
    if not errors:
        return "invalid request", "invalid_request", errors
    first = errors[0]
    loc = first["loc"] if isinstance(first["loc"], list) else []
    where = ".".join(str(p) for p in loc[1:] if p not in ("payload", "filters")) or (str(loc[0]) if loc else "body")
    return f"{where}: {first['msg']}", validation_code(first), errors
