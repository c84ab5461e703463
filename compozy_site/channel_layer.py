"""The embedded channel layer: channels' in-memory layer with its expiry sweep rate-limited.

InMemoryChannelLayer sweeps every channel queue and every group membership on each send and each
receive, so one doorbell costs O(live consumers); with 60 live viewers that sweep was a tenth of the
daemon's CPU. Expiry (messages after 60 s, group memberships after a day) needs no sub-second precision,
so the sweep runs at most once a second. Everything else is channels' own code.
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
