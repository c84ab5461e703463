"""Bounded questions (issue 44), the rules without a daemon: what an agent may ask (`question_problem`: message and
schema size, a schema the form can honour), answers that never raise whatever the schema, and a meta.json past its
cap that stays readable (read slim) and is never written past it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessions.core.elicitation_form import (
    MAX_MESSAGE_BYTES,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_FIELDS,
    content_problems,
    question_problem,
    schema_problem,
    typed_value,
)
from sessions.core.record import SessionRecord
from sessions.store import folder

SID = "sess_0123456789abcdef"
FORM: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"}},
                        "required": ["name"]}


def test_a_question_within_the_limits_may_be_asked() -> None:
    assert question_problem("What is your name?", FORM) is None
    assert question_problem("é" * (MAX_MESSAGE_BYTES // 2), {"type": "object", "properties": {}}) is None
    assert question_problem("", {}) is None  # no fields at all: the person accepts, declines or cancels


@pytest.mark.parametrize(("message", "schema", "why"), [
    ("x" * (MAX_MESSAGE_BYTES + 1), FORM, "too long"),
    ("é" * (MAX_MESSAGE_BYTES // 2 + 1), FORM, "too long"),  # bytes, not characters
    ("x" * 5 * 1024 * 1024, FORM, "too long"),
    ("q", {"properties": {"a": {"type": "string", "description": "d" * MAX_SCHEMA_BYTES}}}, "too large"),
    ("q", {"properties": {f"f{i}": {"type": "string"} for i in range(MAX_SCHEMA_FIELDS + 1)}}, "fields"),
])
def test_a_question_past_the_limits_is_refused(message: str, schema: dict[str, Any], why: str) -> None:
    problem = question_problem(message, schema)
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize("schema", [
    {"properties": FORM["properties"], "required": 5},
    {"properties": FORM["properties"], "required": [[1]]},
    {"properties": FORM["properties"], "required": "name"},
    {"properties": FORM["properties"], "required": ["nowhere"]},
    {"properties": FORM["properties"], "required": [None]},
    {"properties": [1, 2]},
    {"properties": {"a": 5}},
    {"type": "array", "properties": {}},
])
def test_a_schema_the_form_cannot_honour_is_refused(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is not None
    assert question_problem("q", schema) is not None


def test_a_schema_the_form_can_honour_passes_with_what_it_ignores() -> None:
    assert schema_problem({"properties": {"n": {"type": "number", "minimum": None, "maximum": "x"}},
                           "required": None}) is None
    assert schema_problem({"properties": {"x": {"title": "untyped"}, "y": {"type": "color"},
                                          "z": {"type": ["string", "null"]}}}) is None  # text fields


@pytest.mark.parametrize("schema", [
    {"properties": {"a": {"type": "string"}}, "required": 5},
    {"properties": {"a": {"type": "string"}}, "required": [[1]]},
    {"properties": {"a": {"type": "string"}}, "required": [{"x": 1}, "a"]},
    {"properties": "nope", "required": "a"},
    {"properties": {"a": {"type": "string", "enum": 5, "minLength": "2"}}},
    {"properties": {"a": {"type": "number", "minimum": None, "maximum": [1]}}},
    {"properties": {"a": {"type": "array", "items": {"enum": [[1], {"x": 2}]}}}},
])
def test_answering_never_raises_whatever_the_schema(schema: dict[str, Any]) -> None:
    # `required: 5` and `[[1]]` made every accept a 500 with a traceback.
    for content in ({}, {"a": "x"}, {"a": 1}, {"a": ["x"]}, {"b": None}, "not an object"):
        problems = content_problems(schema, content)
        assert isinstance(problems, list)


def test_an_answer_of_nan_or_infinity_does_not_fit_a_number() -> None:
    schema = {"properties": {"n": {"type": "number", "minimum": 0, "maximum": 10}}}
    assert content_problems(schema, {"n": float("nan")}) == [{"field": "n", "reason": "must be a number"}]
    assert content_problems(schema, {"n": float("inf")})
    for typed in ("nan", "inf", "-Infinity"):
        with pytest.raises(ValueError):
            typed_value({"type": "number"}, typed)


# ---- meta.json: never written past its cap, readable when it is ------------------------------------------------

def record(**extra: Any) -> SessionRecord:
    return SessionRecord.from_meta({"id": SID, "workspace_id": "ws_1", "agent_name": "a", "state": "stopped",
                                    **extra})


def oversized(tmp_path: Path) -> dict[str, Any]:
    """A meta.json as an earlier version wrote it with a 5 MiB question open, its agent since gone."""
    meta = record().to_meta()
    meta["liveness"] = {"elicitation_requests": [{"request_id": "elicit-1", "message": "x" * 5 * 1024 * 1024}],
                        "subprocess_pid": 4242}
    meta["config_options"] = [{"id": "o", "name": "O", "type": "select", "current": "a"}]
    meta["name"] = "kept"
    path = tmp_path / "sessions" / SID / "meta.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(meta, indent=2))
    assert path.stat().st_size > folder.MAX_META_BYTES
    return meta


def test_a_meta_json_past_its_cap_is_read_slim(tmp_path: Path) -> None:
    # It answered 409 session_meta_invalid to every read and `repair`, for good.
    oversized(tmp_path)
    assert folder.meta_oversized(SID, tmp_path)
    meta = folder.read_meta(SID, tmp_path)
    assert meta is not None and meta["name"] == "kept" and meta["liveness"] == {"subprocess_pid": 4242}
    assert "config_options" not in meta
    folder.write_meta(SessionRecord.from_meta(meta), tmp_path)  # what a repair does with it
    assert not folder.meta_oversized(SID, tmp_path)
    assert folder.read_meta(SID, tmp_path) == meta


def test_a_meta_json_past_what_can_be_salvaged_stays_refused(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / SID / "meta.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**record().to_meta(), "name": "x" * (folder.MAX_META_BYTES + 10)}))
    with pytest.raises(ValueError, match="even without"):
        folder.read_meta(SID, tmp_path)
    with path.open("a") as handle:
        handle.truncate(folder.MAX_META_SALVAGE_BYTES + 1)
    with pytest.raises(ValueError, match="larger than 64 MiB"):
        folder.read_meta(SID, tmp_path)


def test_a_record_is_never_written_past_the_cap(tmp_path: Path) -> None:
    rec = record(available_commands=[{"name": "c", "description": "d" * folder.MAX_META_BYTES}], name="kept")
    folder.write_meta(rec, tmp_path)
    assert not folder.meta_oversized(SID, tmp_path)
    meta = folder.read_meta(SID, tmp_path)
    assert meta is not None and meta["name"] == "kept" and "available_commands" not in meta
    with pytest.raises(ValueError, match="would be"):
        folder.write_meta(record(name="n" * folder.MAX_META_BYTES), tmp_path)


def test_slim_leaves_the_record_it_was_given_alone() -> None:
    meta = {"id": SID, "liveness": {"permission_requests": [1], "subprocess_pid": 7}, "acp_caps": {"agent_info": 1}}
    assert folder.slim(meta) == {"id": SID, "liveness": {"subprocess_pid": 7}, "acp_caps": {}}
    assert meta["liveness"] == {"permission_requests": [1], "subprocess_pid": 7}
    assert meta["acp_caps"] == {"agent_info": 1}
