"""The agent-stdout reader (RecordingTransport.receive in sessions/acp/transport.py) over a real StreamReader:
bulk reads must keep arrival order between updates and requests/responses, join lines (and UTF-8 characters)
that a read cut in two, skip what is not a JSON-RPC object, keep a last line that lacks its newline, and
hand the loop back during a long burst of updates. Every test runs over both readers: the plain StreamReader, and
the `TappedReader` the daemon gives an agent's stdout, which hands a short read's updates over as it arrives."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from sessions.acp import transport as transport_mod
from sessions.acp.transport import RecordingTransport, TappedReader

TEST_TIMEOUT = 10.0
ASKED = range(10)  # the request ids every test's transport has sent


def update(n: int, text: str = "") -> dict[str, Any]:
    """A session/update notification; `n` orders them."""
    content = {"type": "text", "text": text or f"chunk {n}"}
    chunk = {"sessionUpdate": "agent_message_chunk", "content": content}
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "n": n, "update": chunk}}


def response(id_: int, result: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result if result is not None else {"stopReason": "end_turn"}}


def request(id_: int) -> dict[str, Any]:
    """An agent-to-client request (has an id, so it goes to the SDK, not the recorder)."""
    return {"jsonrpc": "2.0", "id": id_, "method": "fs/read_text_file", "params": {"sessionId": "s1", "path": "/x"}}


READERS = {"buffered": asyncio.StreamReader, "tapped": TappedReader}
reader_class: list[type[asyncio.StreamReader]] = [asyncio.StreamReader]


@pytest.fixture(autouse=True, params=sorted(READERS))
def reader_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """Which reader `opened` builds: every behaviour below must hold for both."""
    reader_class[0] = READERS[request.param]
    yield request.param
    reader_class[0] = asyncio.StreamReader


def line(message: Any) -> bytes:
    return (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")


@contextlib.asynccontextmanager
async def opened(on_update: Callable[[dict[str, Any]], None], others_waiting: Callable[[], bool] | None = None,
                 on_violation: Callable[[str], None] | None = None, on_eof: Callable[[], None] | None = None,
                 reader: asyncio.StreamReader | None = None,
                 ) -> AsyncIterator[tuple[asyncio.StreamReader, RecordingTransport]]:
    """A transport reading a StreamReader the test feeds, writing to a real pipe nobody reads."""
    loop = asyncio.get_running_loop()
    reader = reader if reader is not None else reader_class[0]()
    read_fd, write_fd = os.pipe()
    pipe, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb"))
    writer = asyncio.StreamWriter(pipe, protocol, None, loop)
    transport = RecordingTransport(reader, writer, on_update, others_waiting, on_violation=on_violation,
                                   on_eof=on_eof)
    for id_ in ASKED:  # our requests, so that the agent's responses answer something
        await transport.send({"jsonrpc": "2.0", "id": id_, "method": "session/prompt", "params": {}})
    try:
        yield reader, transport
    finally:
        await transport.close()
        writer.close()
        await asyncio.sleep(0)  # lets the pipe transport run connection_lost and close its end
        os.close(read_fd)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))


async def settle(rounds: int = 5) -> None:
    """Let scheduled tasks run as far as they can without new input."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def test_updates_go_to_the_recorder_in_order_and_a_response_holds_back_what_follows_it() -> None:
    """The SDK must see a response before any update the agent sent after it is recorded (a turn's end
    must not be preceded by chunks that followed it), even when one read took them all."""
    seen: list[int] = []

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"])) as (reader, transport):
            reader.feed_data(b"".join([line(update(1)), line(update(2)), line(response(7)), line(update(3)),
                                       line(request(8)), line(update(4))]))
            reader.feed_eof()

            assert await transport.receive() == response(7)
            assert seen == [1, 2]  # update 3 was read in the same chunk but is still queued

            assert await transport.receive() == request(8)
            assert seen == [1, 2, 3]

            assert await transport.receive() is None
            assert seen == [1, 2, 3, 4]

    run(main)


def test_update_params_are_handed_over_whole() -> None:
    """The recorder gets the notification's params dict, not the envelope."""
    got: list[dict[str, Any]] = []

    async def main() -> None:
        async with opened(got.append) as (reader, transport):
            reader.feed_data(line(update(1, "hello")))
            reader.feed_eof()
            assert await transport.receive() is None

    run(main)
    assert got == [update(1, "hello")["params"]]


def test_a_notification_with_an_id_is_not_recorded_but_returned() -> None:
    """Only notifications are peeled off: a `session/update` carrying an id is a request the SDK must answer."""
    seen: list[dict[str, Any]] = []
    odd = {**update(1), "id": 5}

    async def main() -> None:
        async with opened(seen.append) as (reader, transport):
            reader.feed_data(line(odd))
            reader.feed_eof()
            assert await transport.receive() == odd
            assert await transport.receive() is None

    run(main)
    assert seen == []


def test_a_line_split_inside_a_utf8_character_is_parsed_once_and_whole() -> None:
    """A pipe read may end in the middle of a line and of a multi-byte character; the line must wait for its
    newline and decode as one, never be parsed (or mangled into U+FFFD) in pieces."""
    seen: list[dict[str, Any]] = []
    answer = response(3, {"text": "日本 café"})

    async def main() -> None:
        async with opened(seen.append) as (reader, transport):
            split_update = line(update(2, "résumé 日本"))
            cut = split_update.index("日".encode()) + 1  # inside the three bytes of 日
            split_answer = line(answer)
            cut_answer = split_answer.index("é".encode()) + 1  # between the two bytes of é

            reader.feed_data(line(update(1)) + split_update[:cut])
            pending = asyncio.create_task(transport.receive())
            await settle()
            assert [p["n"] for p in seen] == [1]  # the cut line is not parsed yet
            assert not pending.done()

            reader.feed_data(split_update[cut:] + split_answer[:cut_answer])
            await settle()
            assert not pending.done()
            assert [p["update"]["content"]["text"] for p in seen] == ["chunk 1", "résumé 日本"]

            reader.feed_data(split_answer[cut_answer:-1])  # all of it but the newline
            await settle()
            assert not pending.done()
            reader.feed_data(b"\n")
            assert await pending == answer

            reader.feed_eof()
            assert await transport.receive() is None

    run(main)
    assert len(seen) == 2
    assert "\ufffd" not in json.dumps(seen, ensure_ascii=False)


def test_lines_that_are_not_json_objects_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """A stray print or a non-object value on the agent's stdout is reported as a protocol violation and dropped;
    it must not end the stream or swallow the valid messages around it."""
    seen: list[int] = []
    violations: list[str] = []
    junk = [b"this is not json\n", b"[1,2]\n", b"42\n", b'"text"\n', b"null\n", b'{"jsonrpc": "2.0"} {"id": 1}\n',
            b'{"truncated": \n', b"\n", b"   \r\n"]

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"]), on_violation=violations.append) as (
                reader, transport):
            reader.feed_data(line(update(1)) + b"".join(junk[:4]) + line(update(2)) + b"".join(junk[4:])
                             + line(response(9)) + b"not json either\n" + line(update(3)))
            reader.feed_eof()
            assert await transport.receive() == response(9)
            assert seen == [1, 2]
            assert await transport.receive() is None
            assert seen == [1, 2, 3]

    run(main)
    # Every junk line but the two blank ones, plus the one after the response; no traceback in the log for any.
    assert len(violations) == 8 and all("not one JSON object" in v for v in violations), violations


def test_a_crlf_terminated_message_is_read() -> None:
    """Agents on some platforms end lines with CRLF; the CR must not make a line unparseable."""
    seen: list[int] = []

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"])) as (reader, transport):
            reader.feed_data(line(update(1)).replace(b"\n", b"\r\n") + line(response(1)).replace(b"\n", b"\r\n"))
            reader.feed_eof()
            assert await transport.receive() == response(1)
            assert await transport.receive() is None

    run(main)
    assert seen == [1]


def test_a_last_message_without_a_newline_is_returned_before_end_of_stream() -> None:
    """An agent that exits right after writing its final response without a newline must not lose it."""

    async def main() -> None:
        async with opened(lambda params: None) as (reader, transport):
            reader.feed_data(line(update(1)) + line(response(4))[:-1])
            pending = asyncio.create_task(transport.receive())
            await settle()
            assert not pending.done()  # no newline yet: it may still be growing
            reader.feed_eof()
            assert await pending == response(4)
            assert await transport.receive() is None
            assert await transport.receive() is None  # and stays at end of stream

    run(main)


def test_a_last_update_without_a_newline_is_recorded() -> None:
    """The unterminated tail goes through the same path as any line: an update in it is recorded."""
    seen: list[int] = []

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"])) as (reader, transport):
            reader.feed_data(line(update(1)) + line(update(2))[:-1])
            reader.feed_eof()
            assert await transport.receive() is None

    run(main)
    assert seen == [1, 2]


def test_end_of_stream_after_only_whitespace_is_none() -> None:
    """A trailing blank fragment is not a message."""

    async def main() -> None:
        async with opened(lambda params: None) as (reader, transport):
            reader.feed_data(line(response(1)) + b"  ")
            reader.feed_eof()
            assert await transport.receive() == response(1)
            assert await transport.receive() is None

    run(main)


def test_a_failing_recorder_does_not_stop_the_stream(caplog: pytest.LogCaptureFixture) -> None:
    """A bug in recording one update is logged; the next updates and the response still arrive."""
    seen: list[int] = []

    def record(params: dict[str, Any]) -> None:
        if params["n"] == 2:
            raise RuntimeError("boom")
        seen.append(params["n"])

    async def main() -> None:
        async with opened(record) as (reader, transport):
            reader.feed_data(line(update(1)) + line(update(2)) + line(update(3)) + line(response(1)))
            reader.feed_eof()
            assert await transport.receive() == response(1)

    with caplog.at_level(logging.ERROR, logger=transport_mod.logger.name):
        run(main)
    assert seen == [1, 3]
    assert any("recording a session/update failed" in r.getMessage() for r in caplog.records)


def test_a_long_burst_of_updates_is_delivered_in_order_and_yields_to_the_loop() -> None:
    """One read can hold thousands of updates; handling them all without a hand-back would stall every other
    session and stream on the shared loop."""
    total = 1000
    seen: list[int] = []
    other_ran_at: list[int] = []

    async def other() -> None:
        other_ran_at.append(len(seen))

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"])) as (reader, transport):
            reader.feed_data(b"".join(line(update(n)) for n in range(total)) + line(response(1)))
            reader.feed_eof()
            neighbour = asyncio.create_task(other())  # scheduled before receive() starts
            assert await transport.receive() == response(1)
            await neighbour

    run(main)
    assert seen == list(range(total))
    assert len(other_ran_at) == 1
    assert 0 < other_ran_at[0] < total
    assert other_ran_at[0] <= transport_mod.YIELD_EVERY_UPDATES  # the first hand-back comes within one stretch


def test_a_burst_breathes_only_while_another_sessions_commit_waits_and_once_per_stretch() -> None:
    """A yield alone keeps the GIL from other sessions' store threads; a real pause lets them commit, but costs
    the burst, so it is taken only when another commit waits, and at most once per BREATHE_EVERY."""
    waiting = [False]

    async def main() -> None:
        async with opened(lambda params: None, lambda: waiting[0]) as (_, transport):
            assert transport._pause() == 0, "nobody waits: a plain yield"
            waiting[0] = True
            assert transport._pause() == transport_mod.BREATHE_SECONDS
            assert transport._pause() == 0, "within BREATHE_EVERY of the last breath"
            transport._breathed -= transport_mod.BREATHE_EVERY
            assert transport._pause() == transport_mod.BREATHE_SECONDS
        async with opened(lambda params: None) as (_, transport):
            assert transport._pause() == 0, "no recorder to ask (a title pass): never pauses"

    run(main)


def test_a_burst_with_a_commit_waiting_is_still_delivered_whole_and_in_order() -> None:
    total = 5000
    seen: list[int] = []

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"]), lambda: True) as (reader, transport):
            reader.feed_data(b"".join(line(update(n)) for n in range(total)) + line(response(1)))
            reader.feed_eof()
            assert await transport.receive() == response(1)

    run(main)
    assert seen == list(range(total))


def test_lone_surrogates_from_the_agent_become_replacement_characters() -> None:
    """`\\ud800` is legal JSON but no UTF-8 encoder takes it: one in a chunk failed its session's whole commit batch."""
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        async with opened(seen.append) as (reader, transport):
            bad = update(1, "lone \ud800 surrogate, pair \ud83d\ude00")
            reader.feed_data(json.dumps(bad).encode() + b"\n"
                             + json.dumps(response(2, {"stopReason": "end\udfff"})).encode() + b"\n")
            reader.feed_eof()
            answer = await transport.receive()
            assert answer is not None and answer["result"]["stopReason"] == "end\ufffd"

    run(main)
    text = seen[0]["update"]["content"]["text"]
    assert text == "lone \ufffd surrogate, pair \U0001f600"
    text.encode("utf-8")


def test_malformed_responses_are_fixed_or_dropped_and_reported() -> None:
    """A string `error` left the prompt it answered waiting for ever, and a list id killed the SDK's receive loop:
    the first becomes a proper error (so the request fails), the second is dropped; both are reported."""
    violations: list[str] = []

    async def main() -> None:
        async with opened(lambda params: None, on_violation=violations.append) as (reader, transport):
            for message in ({"jsonrpc": "2.0", "id": 3, "error": "a string error"},
                            {"jsonrpc": "2.0", "id": [1, 2], "result": {}},
                            {"jsonrpc": "2.0", "id": 4},
                            {"jsonrpc": "2.0", "method": 7},
                            response(5)):
                reader.feed_data(line(message))
            reader.feed_eof()
            first = await transport.receive()
            assert first == {"jsonrpc": "2.0", "id": 3,
                             "error": {"code": -32603, "message": "malformed error from the agent: 'a string error'"}}
            assert (await transport.receive())["error"]["code"] == -32603  # id 4: neither result nor error
            assert await transport.receive() == response(5)
            assert await transport.receive() is None

    run(main)
    assert len(violations) == 4, violations


def test_a_response_to_a_request_never_sent_or_already_answered_is_dropped_and_reported() -> None:
    """The SDK dropped such a response without a word, and the request the agent meant to answer waited on."""
    violations: list[str] = []

    async def main() -> None:
        async with opened(lambda params: None, on_violation=violations.append) as (reader, transport):
            for message in (response(5), response(5), response(99), {"jsonrpc": "2.0", "id": "x", "result": {}},
                            response(6)):
                reader.feed_data(line(message))
            reader.feed_eof()
            assert await transport.receive() == response(5)
            assert await transport.receive() == response(6)
            assert await transport.receive() is None

    run(main)
    assert violations == ["a response to request 5, which was never sent or was already answered",
                          "a response to request 99, which was never sent or was already answered",
                          "a response to request 'x', which was never sent or was already answered"]


def test_a_line_over_the_limit_is_dropped_without_being_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport_mod, "STDIO_LIMIT_BYTES", 1000)
    seen: list[int] = []
    violations: list[str] = []
    eof: list[bool] = []

    async def main() -> None:
        async with opened(lambda params: seen.append(params["n"]), on_violation=violations.append,
                          on_eof=lambda: eof.append(True)) as (reader, t):
            reading = asyncio.ensure_future(t.receive())
            reader.feed_data(line(update(1)))
            for _ in range(5):  # 5 reads of 600 bytes, no newline: dropped once past 1000, never joined
                await settle()
                reader.feed_data(b"A" * 600)
                await settle()
                assert t._partial_bytes <= 1000
            reader.feed_data(b"AAAA\n" + line(update(2)))
            reader.feed_eof()
            assert await reading is None

    run(main)
    assert seen == [1, 2]
    assert len(violations) == 1 and "over" in violations[0]
    assert eof == [True]
