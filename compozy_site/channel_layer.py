"""The embedded channel layer: channels' in-memory layer with its expiry sweep rate-limited.

InMemoryChannelLayer sweeps every channel queue and every group membership on each send and each
receive, so one doorbell costs O(live consumers); with 60 live viewers that sweep was a tenth of the
daemon's CPU. Expiry (messages after 60 s, group memberships after a day) needs no sub-second precision,
so the sweep runs at most once a second. Everything else is channels' own code.

channels has no public way to do this: the sweep is InMemoryChannelLayer's private `_clean_expired()`, which its
`receive` and `group_send` call, overridden here. channels is pinned in pyproject.toml to the releases this was
measured on; tests/unit/test_private_parts.py fails on any other and when channels no longer sweeps through it.
"""

from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer

SWEEP_SECONDS = 1.0


class DoorbellLayer(InMemoryChannelLayer):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._swept_at = float("-inf")

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < SWEEP_SECONDS:
            return
        self._swept_at = now
        super()._clean_expired()
