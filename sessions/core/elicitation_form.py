"""An elicitation's requested schema (ACP form mode: a flat object of string, number, integer, boolean and
multi-select fields; the agent's JSON schema, hence `JsonObject`) and whether a person's answer fits it.
Pure: the API validates with it, the CLI types with it."""

from __future__ import annotations

from typing import Any

from sessions.core.jsonobj import JsonObject


def _enum_of(prop: JsonObject) -> list[str] | None:
    if isinstance(prop.get("enum"), list):
        return [str(v) for v in prop["enum"]]
    if isinstance(prop.get("oneOf"), list):
        return [str(o.get("const")) for o in prop["oneOf"] if isinstance(o, dict)]
    return None


def _string_problem(prop: JsonObject, value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    choices = _enum_of(prop)
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
        if isinstance(value, bool) or not isinstance(value, int if kind == "integer" else (int, float)):
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
        choices = _enum_of(items) if isinstance(items, dict) else None
        bad = [v for v in value if choices is not None and v not in choices]
        return f"{', '.join(bad)} not among {', '.join(choices or [])}" if bad else None
    return None  # a type this client does not know: the agent reads what it gets


def content_problems(schema: JsonObject, content: Any) -> list[dict[str, str]]:
    """What does not fit: [{"field", "reason"}], empty when `content` answers `schema`."""
    if not isinstance(content, dict):
        return [{"field": "", "reason": "content must be an object"}]
    given = schema.get("properties")
    props: JsonObject = given if isinstance(given, dict) else {}
    problems = [{"field": str(name), "reason": "is required"}
                for name in schema.get("required") or [] if name not in content]
    for name, value in content.items():
        prop = props.get(name)
        if not isinstance(prop, dict):
            problems.append({"field": name, "reason": "is not a field of the form"})
            continue
        reason = _field_problem(prop, value)
        if reason:
            problems.append({"field": name, "reason": reason})
    return problems


def typed_value(prop: JsonObject, raw: str) -> Any:
    """A value typed on a command line, read as its field's type (ValueError when it is not one)."""
    kind = prop.get("type")
    if kind == "integer":
        return int(raw)
    if kind == "number":
        number = float(raw)
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
