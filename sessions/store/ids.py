"""Identifiers, validated before they ever reach a filesystem path."""

from __future__ import annotations

import itertools
import re
import secrets
import time

SESSION_ID_RE = re.compile(r"^sess_[0-9a-f]{16}$")
WORKSPACE_ID_RE = re.compile(r"^ws_[0-9a-f]{16}$")


def new_session_id() -> str:
    return f"sess_{secrets.token_hex(8)}"


def new_workspace_id() -> str:
    return f"ws_{secrets.token_hex(8)}"


def new_turn_id() -> str:
    return f"turn_{secrets.token_hex(8)}"


# Event ids are time-ordered: random ones land at random B-tree positions of the unique index and cost
# ~3x the insert I/O (bench/throughput.py). A per-process counter seeded from the clock stays unique.
_event_counter = itertools.count(time.time_ns())


def new_event_id() -> str:
    return f"ev_{next(_event_counter):016x}"


def new_queue_entry_id() -> str:
    return f"inq_{secrets.token_hex(16)}"


def is_session_id(value: str) -> bool:
    return bool(SESSION_ID_RE.match(value))


def is_workspace_id(value: str) -> bool:
    return bool(WORKSPACE_ID_RE.match(value))
