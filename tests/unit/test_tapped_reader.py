"""The daemon's reader of an agent's stdout (`TappedReader` in sessions/acp/transport.py): a short read of whole
lines, with nothing queued before it, has its updates recorded as it arrives, without a wake of the receive task;
whatever is not an update, and everything after it, waits for `receive` in its place. test_ndjson_reader.py runs
every ordering, framing and burst case over this reader too."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sessions.acp import transport as transport_mod
from sessions.acp.transport import RecordingTransport, TappedReader
from tests.unit.test_ndjson_reader import line, opened, request, response, run, settle, update


@contextlib.asynccontextmanager
async def receiving(seen: list[int]) -> AsyncIterator[tuple[TappedReader, RecordingTransport,
                                                             asyncio.Task[dict[str, Any] | None]]]:
    """A transport over a TappedReader, the updates' `n`s into `seen`, its receive task already waiting on the
    pipe (as the SDK's receive loop waits)."""
    reader = TappedReader()
    async with opened(lambda params: seen.append(params["n"]), reader=reader) as (_, transport):
        task = asyncio.create_task(transport.receive())
        await settle()
        yield reader, transport, task


def test_a_lone_update_is_recorded_as_it_arrives_and_a_response_still_reaches_receive() -> None:
    seen: list[int] = []

    async def main() -> None:
        async with receiving(seen) as (reader, _, task):
            reader.feed_data(line(update(1)))
            assert seen == [1]  # in feed_data itself: no task step between the read and the recorder
            reader.feed_data(line(update(2)))
            assert seen == [1, 2]
            await settle()
            assert not task.done()  # the updates never woke it

            reader.feed_data(line(response(3)))
            assert await task == response(3)

    run(main)


def test_what_follows_a_request_waits_behind_it_and_a_later_read_does_not_jump_the_queue() -> None:
    seen: list[int] = []

    async def main() -> None:
        async with receiving(seen) as (reader, transport, task):
            reader.feed_data(line(update(1)) + line(request(8)) + line(update(2)))
            assert seen == [1]  # the update before the request, at once; the one after it waits its turn
            assert await task == request(8)
            assert seen == [1]

            reader.feed_data(line(update(3)))  # update 2 is still queued: this one goes behind it
            assert seen == [1]
            reader.feed_eof()
            assert await transport.receive() is None
            assert seen == [1, 2, 3]

    run(main)


def test_a_burst_and_a_line_cut_by_a_read_go_through_receive() -> None:
    """A burst is handled by `receive`, which hands the loop back; a partial line waits for its newline there."""
    seen: list[int] = []

    async def main() -> None:
        async with receiving(seen) as (reader, _, task):
            burst = transport_mod.TAP_LINES + 1
            reader.feed_data(b"".join(line(update(n)) for n in range(burst)))
            assert seen == []
            await settle(burst)
            assert seen == list(range(burst))

            cut = line(update(100))
            reader.feed_data(cut[:10])
            await settle()
            reader.feed_data(cut[10:])  # the start of this line is with receive: so is its end
            assert seen == list(range(burst))
            await settle()
            assert seen == [*range(burst), 100]

            reader.feed_data(line(response(4)))
            assert await task == response(4)

    run(main)


def test_a_closed_transport_records_nothing_more() -> None:
    """Once the connection is closed its receive loop stops reading; a late update must not reach the recorder
    through the tap either."""
    seen: list[int] = []

    async def main() -> None:
        async with receiving(seen) as (reader, transport, _):
            reader.feed_data(line(update(1)))
            assert seen == [1]
            await transport.close()
            reader.feed_data(line(update(2)))
            assert seen == [1]

    run(main)
