"""A stream's wait for news: rung or timed out, with one standing timer rather than one per wait."""

from __future__ import annotations

import asyncio

from tests.django_env import ensure_django

ensure_django()

from compozy.api.sse import StreamingConsumer  # noqa: E402 - needs the settings above


def new_stream() -> StreamingConsumer:
    """A stream as `http_request` leaves it for its pump: only the wake matters to a wait."""
    stream = StreamingConsumer()
    stream.wake = asyncio.Event()
    return stream


async def rung(stream: StreamingConsumer, timeout: float) -> None:
    """One wait the stream's doorbell ends (as the feed rings it on new rows)."""
    asyncio.get_running_loop().call_soon(stream.wake.set)
    assert await stream.wait_for_wake(timeout) is True


def test_a_ring_answers_true_and_keeps_the_one_timer() -> None:
    async def main() -> None:
        stream = new_stream()
        timers = []  # the handles themselves, kept: ids of freed handles could be reused and look like one
        for _ in range(50):
            await rung(stream, 30.0)
            timers.append(stream._timer)
        assert timers[0] is not None and all(t is timers[0] for t in timers), "a timer per wait"
        stream.stop_timer()
        assert stream._timer is None

    asyncio.run(main())


def test_a_quiet_wait_times_out_at_its_own_deadline_even_after_a_longer_one() -> None:
    async def main() -> None:
        stream = new_stream()
        loop = asyncio.get_running_loop()
        await rung(stream, 3600.0)  # leaves its timer standing an hour out
        began = loop.time()
        # Bounded: waiting on the hour-long timer would hang here, not fail.
        assert await asyncio.wait_for(stream.wait_for_wake(0.05), 30) is False
        assert loop.time() - began >= 0.05
        assert await stream.wait_for_wake(0.02) is False, "a timeout again after one"

    asyncio.run(main())


def test_a_deadline_passing_between_waits_is_no_ring_for_the_next_wait() -> None:
    async def main() -> None:
        stream = new_stream()
        loop = asyncio.get_running_loop()
        await rung(stream, 0.01)
        fired = loop.create_future()
        expire = stream._expire

        def seen() -> None:  # the standing timer fires while nobody waits (the stream is sending)
            expire()
            fired.set_result(None)

        assert stream._timer is not None
        stream._timer.cancel()
        stream._timer = loop.call_at(stream._deadline, seen)
        await fired
        assert not stream.wake.is_set(), "a stale deadline rang the next wait"
        assert await stream.wait_for_wake(0.01) is False

    asyncio.run(main())
