"""An elicitation's requested schema (ACP form mode: a flat object of string, number, integer, boolean and
multi-select fields) and whether a person's answer fits it. Pure: the API validates with it, the CLI types with it,
and the runtime checks a question against it when the agent asks (`question_problem`).

A question is bounded when it is asked, never when it is answered (issue 44): a 5 MiB message went into meta.json
past its cap and bricked its session, and a schema whose `required` was `5` or `[[1]]` made every answer a 500.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sessions.core.jsonobj import JsonObject

# The largest question (its message, UTF-8): a person reads it at a glance before answering, in an attention card
# or a terminal. Real agents' questions are a few lines (under 2 KiB); 16 KiB is eight times that, and keeps the
# question's event row, its listing and each open question's share of memory small.
MAX_MESSAGE_BYTES = 16 * 1024
# The largest requested schema (as JSON): ACP's form mode is one flat object of primitive fields, each with a title,
# a description and perhaps a few choices; 64 such fields fit in well under 32 KiB.
MAX_SCHEMA_BYTES = 32 * 1024
MAX_SCHEMA_FIELDS = 64



def enum_of(prop: JsonObject) -> list[str] | None:
    if isinstance(prop.get("enum"), list):
        return [str(v) for v in prop["enum"]]
    if isinstance(prop.get("oneOf"), list):
        return [str(o.get("const")) for o in prop["oneOf"] if isinstance(o, dict)]
    return None


def _string_problem(prop: JsonObject, value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    choices = enum_of(prop)
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(choices)}"
    if isinstance(prop.get("minLength"), int) and len(value) < prop["minLength"]:
        return f"must be at least {prop['minLength']} characters"
    if isinstance(prop.get("maxLength"), int) and len(value) > prop["maxLength"]:
        return f"must be at most {prop['maxLength']} characters"
    return None


def _field_problem(prop: JsonObject, value: Any) -> str | None:
    kind = prop.get("type")
    if kind == "string":
        return _string_problem(prop, value)
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int if kind == "integer" else (int, float)) or (
                isinstance(value, float) and not math.isfinite(value)):
            return f"must be a{'n integer' if kind == 'integer' else ' number'}"
        if isinstance(prop.get("minimum"), (int, float)) and value < prop["minimum"]:
            return f"must be at least {prop['minimum']}"
        if isinstance(prop.get("maximum"), (int, float)) and value > prop["maximum"]:
            return f"must be at most {prop['maximum']}"
        return None
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of strings"
        items = prop.get("items")
        choices = enum_of(items) if isinstance(items, dict) else None
        bad = [v for v in value if choices is not None and v not in choices]
        return f"{', '.join(bad)} not among {', '.join(choices or [])}" if bad else None
    return None  # a type this client does not know: the agent reads what it gets


def content_problems(schema: JsonObject, content: Any) -> list[dict[str, str]]:
    """What does not fit: [{"field", "reason"}], empty when `content` answers `schema`."""
    if not isinstance(content, dict):
        return [{"field": "", "reason": "content must be an object"}]
    given = schema.get("properties")
    props: JsonObject = given if isinstance(given, dict) else {}
    required = schema.get("required")
    # Checked when asked (`question_problem`); read defensively all the same: an answer is never a 500.
    names = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    problems = [{"field": name, "reason": "is required"} for name in names if name not in content]
    for name, value in content.items():
        prop = props.get(name)
        if not isinstance(prop, dict):
            problems.append({"field": name, "reason": "is not a field of the form"})
            continue
        reason = _field_problem(prop, value)
        if reason:
            problems.append({"field": name, "reason": reason})
    return problems


def schema_problem(schema: JsonObject) -> str | None:
    """Why the form cannot honour `schema` (a person could not answer it, or no answer would fit), None when it can:
    a flat object whose `properties` are objects and whose `required` lists their names."""
    if schema.get("type", "object") != "object":
        return f"`type` must be \"object\", got {schema.get('type')!r:.60}"
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return f"`properties` must be an object, got {props!r:.60}"
    if len(props) > MAX_SCHEMA_FIELDS:
        return f"the form has {len(props)} fields, at most {MAX_SCHEMA_FIELDS}"
    for name, prop in props.items():
        if not isinstance(prop, dict):  # a type it does not know is a text field (the agent reads what it gets)
            return f"field {name[:80]!r} must be an object, got {prop!r:.60}"
    required = schema.get("required")
    if required is None:
        return None
    if not isinstance(required, list) or not all(isinstance(n, str) and n in props for n in required):
        return f"`required` must be a list of the form's field names, got {required!r:.80}"
    return None


def question_problem(message: str, schema: JsonObject) -> str | None:
    """Why an agent's question (`elicitation/create`) is refused, None when it may be asked: too long, a schema
    too large, or one the form cannot honour."""
    length = len(message.encode("utf-8", "replace"))
    if length > MAX_MESSAGE_BYTES:
        return f"the question is too long: {length} bytes, at most {MAX_MESSAGE_BYTES}"
    try:
        schema_bytes = len(json.dumps(schema, ensure_ascii=False).encode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return "the requested schema cannot be read"
    if schema_bytes > MAX_SCHEMA_BYTES:
        return f"the requested schema is too large: {schema_bytes} bytes, at most {MAX_SCHEMA_BYTES}"
    return schema_problem(schema)


def typed_value(prop: JsonObject, raw: str) -> Any:
    """A value typed on a command line, read as its field's type (ValueError when it is not one)."""
    kind = prop.get("type")
    if kind == "integer":
        return int(raw)
    if kind == "number":
        number = float(raw)
        if not math.isfinite(number):  # `nan` and `inf` read as floats, which JSON has not
            raise ValueError(f"{raw!r} is not a finite number")
        return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
    if kind == "boolean":
        lowered = raw.strip().lower()
        if lowered in ("true", "yes", "y", "1", "on"):
            return True
        if lowered in ("false", "no", "n", "0", "off"):
            return False
        raise ValueError(f"{raw!r} is not true or false")
    if kind == "array":
        return [part.strip() for part in raw.split(",") if part.strip()]
    return raw
