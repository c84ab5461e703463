"""The typed session record (sessions/core/record.py) reads every meta.json today's code writes and gives the same
document back: the file format does not change (tests/fixtures/meta-written-before-the-record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessions.core.enums import SessionState
from sessions.core.record import Activity, SessionRecord, activity_of
from tests.conftest import ROOT

SAMPLES = sorted((ROOT / "tests" / "fixtures" / "meta-written-before-the-record").glob("*.json"))


def test_there_are_samples_of_every_state() -> None:
    states = {json.loads(p.read_text())["state"] for p in SAMPLES}
    assert {"active", "stopped"} <= states


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_a_meta_json_of_today_round_trips_unchanged(sample: Path) -> None:
    meta = json.loads(sample.read_text())
    record = SessionRecord.from_meta(meta)
    assert record.to_meta() == meta
    assert record.state == SessionState(meta["state"])
    assert record.liveness.activity.turn_id == ((meta.get("liveness") or {}).get("activity") or {}).get("turn_id")


def test_keys_it_does_not_name_are_kept() -> None:
    meta = json.loads(SAMPLES[0].read_text())
    meta["an_operator_note"] = {"why": "kept"}
    meta["liveness"]["activity"]["a_newer_field"] = 3
    assert SessionRecord.from_meta(meta).to_meta() == meta


def test_a_damaged_record_is_a_value_error_naming_the_field() -> None:
    meta = json.loads(SAMPLES[0].read_text())
    meta["state"] = "exploded"
    with pytest.raises(ValueError, match="state"):
        SessionRecord.from_meta(meta)


def test_activity_of_reads_what_the_chains_read() -> None:
    assert activity_of({}) == Activity()
    assert activity_of({"liveness": None}) == Activity()
    assert activity_of({"liveness": {"activity": "garbage"}}) == Activity()
    assert activity_of({"liveness": {"activity": {"turn_id": "turn_1", "prompt_active": True}}}).prompt_active


MINIMAL = {"id": "sess_0000000000000001", "workspace_id": "ws_0000000000000001", "agent_name": "scripted",
           "state": "starting", "created_at": "2026-12-02T14:06:12.860607Z"}


def test_a_block_only_read_stays_out_of_the_file() -> None:
    record = SessionRecord.from_meta(dict(MINIMAL))
    assert record.liveness.activity.turn_id is None and record.liveness.stall_state == ""
    assert record.to_meta() == MINIMAL


def test_a_block_written_into_is_written_with_what_was_set_and_nothing_else() -> None:
    record = SessionRecord.from_meta(dict(MINIMAL))
    record.activity_to_write().prompt_active = True
    record.liveness_to_write().pending_permissions = 2
    record.supervision_to_write()["silence_stop"] = {"verified": True}
    assert record.to_meta() == {**MINIMAL, "liveness": {"activity": {"prompt_active": True}, "pending_permissions": 2},
                                "supervision": {"silence_stop": {"verified": True}}}


def test_a_key_set_to_none_is_written_as_null_as_the_dict_wrote_it() -> None:
    record = SessionRecord.from_meta({**MINIMAL, "liveness": {"activity": {}}})
    record.failure = None
    record.activity_to_write().current_tool = None
    assert record.to_meta() == {**MINIMAL, "failure": None, "liveness": {"activity": {"current_tool": None}}}


def test_a_snapshot_does_not_follow_later_changes() -> None:
    record = SessionRecord.from_meta({**MINIMAL, "liveness": {"activity": {"tools_in_flight": 1}}})
    snapshot = record.model_copy(deep=True)
    record.activity_to_write().tools_in_flight = 3
    record.name = "renamed"
    assert snapshot.to_meta() == {**MINIMAL, "liveness": {"activity": {"tools_in_flight": 1}}}
