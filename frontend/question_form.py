"""An agent's question (ACP elicitation, form mode) as a plain HTML form, and the form's answer read back into the
content the question's schema asks for: the page an `answer` action link opens (frontend/action_links.py). No
script: the schema's flat fields become inputs, and what they send is checked by the same rules as the API's
(`sessions/core/elicitation_form.py`)."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from sessions.core.elicitation_form import enum_of
from sessions.core.jsonobj import JsonObject


def _properties(schema: JsonObject) -> list[tuple[str, JsonObject]]:
    props = schema.get("properties")
    return [(str(k), v) for k, v in props.items() if isinstance(v, dict)] if isinstance(props, dict) else []


def _required(schema: JsonObject) -> set[str]:
    given = schema.get("required")
    return {str(n) for n in given} if isinstance(given, list) else set()


def _field(name: str, prop: JsonObject, required: bool) -> SafeString:
    label = str(prop.get("title") or name)
    kind = prop.get("type")
    need = SafeString(" required") if required and kind != "boolean" else SafeString("")
    if kind == "string" and (choices := enum_of(prop)) is not None:
        options = format_html_join("", '<option value="{}">{}</option>', ((c, c) for c in choices))
        control = format_html('<select name="{}"{}>{}</select>', name, need, options)
    elif kind in ("number", "integer"):
        control = format_html('<input type="number" step="{}" name="{}"{}>', "1" if kind == "integer" else "any",
                              name, need)
    elif kind == "boolean":
        control = format_html('<input type="checkbox" name="{}">', name)
    elif kind == "array":
        items = prop.get("items")
        choices = (enum_of(items) if isinstance(items, dict) else None) or []
        control = format_html_join(" ", '<label><input type="checkbox" name="{}" value="{}"> {}</label>',
                                   ((name, c, c) for c in choices))
    else:
        control = format_html('<input type="text" name="{}"{}>', name, need)
    hint = prop.get("description")
    return format_html('<p><label>{}<br>{}</label>{}</p>', label, control,
                       format_html("<br><small>{}</small>", hint) if isinstance(hint, str) and hint else "")


def render(schema: JsonObject) -> SafeString:
    required = _required(schema)
    fields = format_html_join("", "{}", ((_field(n, p, n in required),) for n, p in _properties(schema)))
    return format_html('<form method="post">{}<button class="approve" type="submit">Answer</button></form>', fields)


def _number(text: str, integer: bool) -> Any:
    """`3` is 3 for a number too (as a JSON client would send it); `2.5` only for a number."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return text if integer else float(text)
    except ValueError:
        return text  # left as sent: the schema's check names the field


def content(schema: JsonObject, posted: QueryDict) -> JsonObject:
    """The answer's content: each field of the schema that was sent, typed as the schema says (a checkbox that
    was not ticked is false); an empty optional field is left out."""
    required = _required(schema)
    out: JsonObject = {}
    for name, prop in _properties(schema):
        kind = prop.get("type")
        if kind == "boolean":
            out[name] = name in posted
        elif kind == "array":
            out[name] = posted.getlist(name)
        elif (text := posted.get(name, "")) or name in required:
            out[name] = _number(text, kind == "integer") if kind in ("number", "integer") else text
    return out
