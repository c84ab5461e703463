"""huey runs inside the daemon process: worker threads, no signal handlers of its own."""

from __future__ import annotations

import logging

from huey.consumer import Consumer

logger = logging.getLogger(__name__)


class InProcessConsumer(Consumer):
    # The launcher owns SIGTERM/SIGINT (stop sessions first); huey must not replace those handlers.
    def _set_signal_handlers(self) -> None:
        return None

    @classmethod
    def build(cls) -> InProcessConsumer:
        from huey.contrib.djhuey import HUEY

        # Periodic crontab tasks are minute-grained; our sweeps reschedule themselves instead.
        return cls(HUEY, workers=2, worker_type="thread", periodic=False, initial_delay=0.05, max_delay=0.5,
                   check_worker_health=False)

    def stop(self, graceful: bool = True) -> None:  # type: ignore[override]
        try:
            super().stop(graceful=graceful)
        except Exception:
            logger.exception("huey consumer did not stop cleanly")
