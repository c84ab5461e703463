"""Redaction across streamed chunks (sessions/core/redact_stream.py and the recorder's hold): a secret streamed
in small, spaced deltas reaches the store whole, in one redacted row, and a private-key block that spans rows
hides every row up to its END line. Real recorder, real events.db, a real event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sessions.core.redact import REDACTED
from sessions.core.redact_stream import PrivateKeyCarry, secret_tail
from sessions.store.events import read_events
from sessions.store.writer import recorder as recorder_mod
from sessions.store.writer.recorder import Recorder

GHP = "ghp_" + "SECPROBE0123456789abcdefghijklmnop"
SK = "sk-proj-" + "SECPROBESPLITOPENAIabcdefghijklmn"


@pytest.mark.parametrize(("text", "held"), [
    ("my token is ghp_SE", "ghp_SE"),
    ("my token is g", "g"),
    ("my token is gh", "gh"),
    ("key s", "s"),
    ("use sk-proj-SECPR", "sk-proj-SECPR"),
    ("set pas", "pas"),
    ("set password=SECP", "password=SECP"),
    ('{"api_key": "abc', '"api_key": "abc'),
    ("export OPENAI_API_KEY=", "OPENAI_API_KEY="),
    ("password: ", "password: "),
    ("Authorization: Bearer ", "Bearer "),
    ("aws configure set aws_secret_access_key ", "aws_secret_access_key "),
    ("clone https://user:pa", "https://user:pa"),
    ("here:\n-----BEGIN RSA PRIVATE KEY-----\nMIIE", "-----BEGIN RSA PRIVATE KEY-----\nMIIE"),
    ("here:\n-----BEG", "-----BEG"),
])
def test_what_may_begin_a_secret_is_held(text: str, held: str) -> None:
    assert text[len(text) - secret_tail(text):] == held


@pytest.mark.parametrize("text", [
    "t1733000000000000000;", "c41 ", "Hello from the Compozy demo agent. ", "the stop path", "done.",
    "see https://example.com/docs", "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----\n",
    "max_tokens=4096 ", "",
])
def test_ordinary_text_is_not_held(text: str) -> None:
    assert secret_tail(text) == 0


def test_a_private_key_block_that_spans_rows_hides_them_up_to_its_end() -> None:
    carry = PrivateKeyCarry()
    rows = ["key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl", "bnNzaC1rZXkSECRET1\n", "SECRET2\n-----END OPENSSH",
            " PRIVATE KEY-----\nmore", "-----END OPENSSH PRIVATE KEY----- stays"]
    out = [carry.apply("t1", "agent_message", row) for row in rows]
    assert out[0] == rows[0]  # the row itself goes to redact_text, which hides the block to its end
    assert out[1] == out[2] == REDACTED and out[3] == REDACTED
    # The END line was split across rows 3 and 4: row 4 is still inside the block until its own END.
    assert out[4] == REDACTED + rows[4]
    assert carry.apply("t1", "agent_message", "after") == "after"
    assert carry.apply("t2", "agent_message", "other stream") == "other stream"


def stream(path: Path, deltas: list[str], gap: float, **kwargs: Any) -> list[dict[str, Any]]:
    """Record `deltas` as an agent streams them, `gap` seconds apart, then end the turn; the rows stored."""

    async def main() -> None:
        rec = Recorder(path, "general", lambda stored, rows: None, **kwargs)
        for delta in deltas:
            rec.record("agent_message", "t1", {"type": "text", "text": delta})
            await asyncio.sleep(gap)
        rec.record("done", "t1", {"stop_reason": "end_turn"})
        await rec.flush()
        await rec.close()

    asyncio.run(main())
    return read_events(path, limit=1000)


def sixes(text: str) -> list[str]:
    return [text[i:i + 6] for i in range(0, len(text), 6)]


def test_a_secret_streamed_six_characters_at_a_time_is_stored_whole_and_redacted(tmp_path: Path) -> None:
    text = f"first {GHP} then {SK} and password=SECPROBESPLITPW done. "
    rows = stream(tmp_path / "events.db", sixes(text), 0.02)
    stored = "".join(r["content"]["text"] for r in rows if r["type"] == "agent_message")
    for secret in (GHP, SK, "SECPROBESPLITPW"):
        for piece in sixes(secret)[1:]:
            assert piece not in stored, (piece, [r["content"].get("text") for r in rows])
    assert stored == f"first {REDACTED} then {REDACTED} and password={REDACTED} done. "
    assert rows[-1]["type"] == "done"


def test_without_redaction_nothing_is_held_and_nothing_redacted(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The stored text is the streamed text; and a tail that would be held with redaction on (`sk-`) reaches the
    # store with no flush and no timer to release it.
    text = f"first {GHP} done. "
    rows = stream(tmp_path / "plain.db", sixes(text), 0.02, redact=False)
    assert "".join(r["content"]["text"] for r in rows if r["type"] == "agent_message") == text
    monkeypatch.setattr(recorder_mod, "HOLD_SECONDS", 3600.0)
    committed: list[str] = []

    async def main() -> None:
        rec = Recorder(tmp_path / "events.db", "general",
                       lambda stored, rows: committed.extend(e["content"]["text"] for e in stored), redact=False)
        rec.record("agent_message", "t1", {"type": "text", "text": "ends in sk-"})
        await until(lambda: committed)
        await rec.close()

    asyncio.run(main())
    assert committed == ["ends in sk-"]


async def until(check: Any, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_tail_is_held_no_longer_than_the_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent that stops in the middle of what looks like a token: the tail reaches the store (and viewers)
    # once HOLD_SECONDS have passed, without waiting for the turn to end.
    monkeypatch.setattr(recorder_mod, "HOLD_SECONDS", 0.2)
    committed: list[str] = []

    async def main() -> tuple[list[str], list[str]]:
        rec = Recorder(tmp_path / "events.db", "general",
                       lambda stored, rows: committed.extend(e["content"].get("text", "") for e in stored))
        rec.record("agent_message", "t1", {"type": "text", "text": "the token is ghp_"})
        await until(lambda: committed)
        head = list(committed)
        await until(lambda: len(committed) == 2)
        both = list(committed)
        await rec.close()
        return head, both

    head, both = asyncio.run(main())
    assert head == ["the token is "]
    assert both == ["the token is ", "ghp_"]


def test_a_flush_releases_a_held_tail_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_mod, "HOLD_SECONDS", 3600.0)  # only the flush can release it

    async def main() -> None:
        rec = Recorder(tmp_path / "events.db", "general", lambda stored, rows: None)
        rec.record("agent_message", "t1", {"type": "text", "text": "ends in sk-"})
        await asyncio.wait_for(rec.flush(), 30)
        await rec.close()

    asyncio.run(main())
    assert "".join(r["content"]["text"] for r in read_events(tmp_path / "events.db", limit=10)) == "ends in sk-"
