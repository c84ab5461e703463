"""The modes a config file names: a session's permission policy and what a prompt does while a turn runs.

They live with the config (the lowest layer that reads them) so the config loader needs nothing from the sessions
app; the session runtime, its records and the API use these same enums."""

from __future__ import annotations

from enum import StrEnum


class PermissionMode(StrEnum):
    DENY_ALL = "deny-all"
    APPROVE_READS = "approve-reads"
    APPROVE_ALL = "approve-all"


class BusyMode(StrEnum):
    QUEUE = "queue"
    INTERRUPT = "interrupt"
    STEER = "steer"
