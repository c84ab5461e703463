"""Backpressure for event streams (sessions/live/pressure.py): a stream waits while more than the high-water
mark is queued for its client, goes on once the client takes it, and ends when the client takes nothing for the
stall time; `report` shows the streams waiting."""

from __future__ import annotations

import asyncio

from sessions.live import pressure as stream_pressure
from sessions.live.pressure import drained


def test_nothing_to_wait_for_under_the_mark_or_without_a_transport() -> None:
    assert asyncio.run(drained(None))
    assert asyncio.run(drained(lambda: 10, high_water=100))


def test_a_stream_waits_until_the_client_takes_its_backlog() -> None:
    queued = [500]

    async def main() -> tuple[bool, dict[str, int]]:
        async def client() -> None:
            while queued[0] > 0:
                await asyncio.sleep(0.03)
                queued[0] -= 100

        reader = asyncio.ensure_future(client())
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(drained(lambda: queued[0], high_water=150, stall=5))
        await asyncio.sleep(0.05)
        seen = stream_pressure.report()
        ok = await waiting
        await reader
        return ok, seen

    ok, seen = asyncio.run(main())
    assert ok and queued[0] <= 150
    assert seen["waiting_on_client"] == 1 and seen["queued_bytes"] > 150
    assert stream_pressure.report()["waiting_on_client"] == 0


def test_a_client_that_takes_nothing_for_the_stall_time_ends_its_stream() -> None:
    assert asyncio.run(drained(lambda: 500, high_water=100, stall=0.1)) is False
    assert stream_pressure.report()["waiting_on_client"] == 0


def test_small_frames_are_joined_and_a_large_one_is_cut_into_pieces_never_joined() -> None:
    piece = stream_pressure.PIECE_BYTES
    big = b"b" * (2 * piece + 10)
    out = list(stream_pressure.pieces([b"a1", b"a2", big, b"c1"]))
    assert out == [b"a1a2", big[:piece], big[piece:2 * piece], big[2 * piece:], b"c1"]
    assert b"".join(out) == b"a1a2" + big + b"c1"
    # Small frames never make a write larger than a piece.
    many = [b"x" * 1000] * (3 * piece // 1000)
    assert all(len(p) <= piece for p in stream_pressure.pieces(many))
    assert b"".join(stream_pressure.pieces(many)) == b"".join(many)
    assert list(stream_pressure.pieces(b"one")) == [b"one"]

