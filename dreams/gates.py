"""The gates a dream passes before it runs, as pure rules with the clock a parameter
(tests/unit/test_dream_gates.py): one runner per workspace, time since its last dream, sessions completed since,
and enough recalled-but-unpromoted material."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from compozy_base.config.memory import DreamConfig


@dataclass(frozen=True)
class GateInputs:
    running: bool  # a dream of this workspace runs now
    last_dream_at: datetime | None
    completed_since: int  # the workspace's sessions completed since its last dream (ever, without one)
    candidates: int


@dataclass(frozen=True)
class Blocked:
    gate: str  # one_runner | min_interval | min_sessions | min_candidates
    detail: str


def blocked(inputs: GateInputs, config: DreamConfig, now: datetime) -> Blocked | None:
    """The first gate that does not pass, or None: the dream may run."""
    if inputs.running:
        return Blocked("one_runner", "a dream already runs for this workspace")
    if inputs.last_dream_at is not None and config.min_interval > 0:
        waited = (now - inputs.last_dream_at).total_seconds()
        if waited < config.min_interval:
            return Blocked("min_interval", f"the last dream was {waited:.0f}s ago; the gate is "
                                           f"{config.min_interval:.0f}s")
    if inputs.completed_since < config.min_sessions:
        return Blocked("min_sessions", f"{inputs.completed_since} session(s) completed since the last dream; the gate "
                                       f"is {config.min_sessions}")
    if inputs.candidates < config.min_candidates:
        return Blocked("min_candidates", f"{inputs.candidates} recalled-but-unpromoted entr(y/ies); the gate is "
                                         f"{config.min_candidates}")
    return None
