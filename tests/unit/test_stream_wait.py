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


def test_a_ring_answers_true_and_keeps_the_one_timer() -> None:
    async def main() -> None:
        stream = new_stream()
        loop = asyncio.get_running_loop()
        timers = set()
        for _ in range(50):
            loop.call_soon(stream.wake.set)
            assert await stream.wait_for_wake(30.0) is True
            timers.add(id(stream._timer))
        assert len(timers) == 1, "a timer per wait"
        stream.stop_timer()
        assert stream._timer is None

    asyncio.run(main())


def test_a_quiet_wait_times_out_at_its_own_deadline_even_after_a_longer_one() -> None:
    async def main() -> None:
        stream = new_stream()
        loop = asyncio.get_running_loop()
        loop.call_soon(stream.wake.set)
        assert await stream.wait_for_wake(3600.0) is True  # leaves its timer standing an hour out
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
        loop.call_soon(stream.wake.set)
        assert await stream.wait_for_wake(0.01) is True
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
