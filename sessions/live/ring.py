"""The newest rows of a session's live feed, kept column by column.

A row kept as a tuple is an object the collector tracks until a collection finds it holds only strings and numbers.
At 200 streaming sessions the rings took 4,000 of them a second: the youngest generation filled every two or three
seconds, with each collection's time (6-8 ms of the loop, nothing to free) going mostly to walking those rows
(`python -m bench --only capacity`, a probe timing every loop callback and collection). Columns of strings and
numbers give the collector nothing to track, however many rows they hold; a row is rebuilt as a tuple when read.
"""

from __future__ import annotations

from collections import deque
from typing import Any

Raw = tuple[Any, ...]  # (sequence, id, turn_id, type, agent_name, content JSON text, timestamp, archived)


class RowRing:
    """Contiguous rows by sequence (a session's sequences are gap-free): row `i` is sequence `first + i`."""

    __slots__ = ("_agents", "_archived", "_contents", "_ids", "_stamps", "_turns", "_types", "first")

    def __init__(self) -> None:
        self.first = 0  # the oldest row's sequence (meaningless while empty)
        self._ids: deque[str] = deque()
        self._turns: deque[str] = deque()
        self._types: deque[str] = deque()
        self._agents: deque[str] = deque()
        self._contents: deque[str] = deque()
        self._stamps: deque[str] = deque()
        self._archived: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._ids)

    def append(self, raw: Raw) -> None:
        """The next row: its sequence must follow the newest held (the feed checks before it offers)."""
        if not self._ids:
            self.first = int(raw[0])
        _, event_id, turn_id, type_, agent, content, timestamp, archived = raw
        self._ids.append(event_id)
        self._turns.append(turn_id)
        self._types.append(type_)
        self._agents.append(agent)
        self._contents.append(content)
        self._stamps.append(timestamp)
        self._archived.append(archived)

    def popleft(self) -> tuple[int, str]:
        """Drops the oldest row; returns its sequence and content."""
        sequence = self.first
        self.first += 1
        for column in (self._ids, self._turns, self._types, self._agents, self._stamps, self._archived):
            column.popleft()
        return sequence, self._contents.popleft()

    def __getitem__(self, i: int) -> Raw:
        """Row `i` (0 is the oldest) in `read_rows` form. Indexed near the newest end, where viewers read."""
        return (self.first + i, self._ids[i], self._turns[i], self._types[i], self._agents[i], self._contents[i],
                self._stamps[i], self._archived[i])

    def clear(self) -> None:
        for column in (self._ids, self._turns, self._types, self._agents, self._contents, self._stamps,
                       self._archived):
            column.clear()
