"""An elicitation answer's content against the requested schema (ACP form mode), and values typed on a command
line from the schema's field types."""

from __future__ import annotations

from typing import Any

import pytest

from sessions.core.elicitation_form import content_problems, typed_value

SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 2, "maxLength": 5},
    "count": {"type": "number", "minimum": 0},
    "age": {"type": "integer", "maximum": 150},
    "urgent": {"type": "boolean"},
    "color": {"type": "string", "enum": ["red", "green"]},
    "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
}, "required": ["name", "count"]}


def fields(problems: list[dict[str, str]]) -> list[str]:
    return [p["field"] for p in problems]


def test_content_that_fits_has_no_problems() -> None:
    assert content_problems(SCHEMA, {"name": "Ada", "count": 2.5, "age": 36, "urgent": False, "color": "red",
                                     "size": "l", "tags": ["a", "b"]}) == []
    assert content_problems(SCHEMA, {"name": "Ada", "count": 0}) == []  # optional fields may be left out
    assert content_problems({"properties": {"x": {"type": "string"}}}, {}) == []  # no required list


@pytest.mark.parametrize(("content", "field"), [
    ({"count": 1}, "name"),  # required
    ({"name": "Ada"}, "count"),
    ({"name": "Ada", "count": "1"}, "count"),  # a string is not a number
    ({"name": "Ada", "count": True}, "count"),  # nor is a boolean
    ({"name": "Ada", "count": -1}, "count"),  # minimum
    ({"name": "Ada", "count": 1, "age": 1.5}, "age"),  # not an integer
    ({"name": "Ada", "count": 1, "age": 200}, "age"),  # maximum
    ({"name": "Ada", "count": 1, "urgent": "yes"}, "urgent"),
    ({"name": "Ada", "count": 1, "color": "blue"}, "color"),  # not among the choices
    ({"name": "Ada", "count": 1, "size": "m"}, "size"),
    ({"name": "A", "count": 1}, "name"),  # minLength
    ({"name": "Adalbert", "count": 1}, "name"),  # maxLength
    ({"name": 7, "count": 1}, "name"),
    ({"name": "Ada", "count": 1, "tags": ["c"]}, "tags"),
    ({"name": "Ada", "count": 1, "tags": "a"}, "tags"),
    ({"name": "Ada", "count": 1, "other": 1}, "other"),  # not a field of the form
])
def test_content_that_does_not_fit_names_the_field(content: dict[str, Any], field: str) -> None:
    assert fields(content_problems(SCHEMA, content)) == [field]


def test_content_that_is_not_an_object() -> None:
    assert content_problems(SCHEMA, ["Ada"]) == [{"field": "", "reason": "content must be an object"}]


def test_values_typed_from_the_schema() -> None:
    props = SCHEMA["properties"]
    assert typed_value(props["count"], "3") == 3 and isinstance(typed_value(props["count"], "3"), int)
    assert typed_value(props["count"], "2.5") == 2.5
    assert typed_value(props["age"], "36") == 36
    assert typed_value(props["urgent"], "yes") is True and typed_value(props["urgent"], "False") is False
    assert typed_value(props["color"], "red") == "red"
    assert typed_value(props["tags"], "a, b") == ["a", "b"]
    for prop, raw in ((props["count"], "lots"), (props["age"], "1.5"), (props["urgent"], "maybe")):
        with pytest.raises(ValueError):
            typed_value(prop, raw)
