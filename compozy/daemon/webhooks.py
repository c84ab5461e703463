"""The webhook thread: delivers the outbox (attention/delivery.py) apart from the event loop and the huey queue.

A thread of its own, like the lease keeper: a POST waits on a receiver for up to `[notifications] timeout`, which
must hold neither the loop every session shares nor a queue worker the periodic jobs need. It wakes when this
process writes an outbox row and otherwise polls, so rows written by another node, or retries falling due, are
taken within a poll; every node runs one, and the claim lets one node make each attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from compozy.daemon.logs import RepeatedFailure

logger = logging.getLogger(__name__)

# At most this long between looks at the outbox: a retry due sooner (a short `retry_min`) is looked for sooner.
POLL_SECONDS = 2.0
# Finished rows are kept this long (doctor reads the recent failures), then pruned, at most once an hour.
KEEP_FINISHED = timedelta(days=7)
PRUNE_EVERY_SECONDS = 3600.0


class WebhookDispatcher:
    def __init__(self, owner: str) -> None:
        self.owner = owner  # node and daemon start: a restarted daemon is not its killed predecessor's claimant
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compozy-webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        from attention.delivery import wake_dispatcher

        wake_dispatcher()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        from django.db import close_old_connections, connection

        from attention.delivery import deliver_due, prune, wait_for_work
        from compozy_base.config.loader import get_config
        from sessions.store.folder import utcnow

        config = get_config().notifications
        if not config.webhooks:
            return  # nothing can be written to the outbox, and rows of a removed webhook wait for its return
        poll = min(POLL_SECONDS, max(0.05, config.retry_min / 2))
        failures = RepeatedFailure(logger)
        pruned_at = 0.0
        while not self._stop.is_set():
            try:
                close_old_connections()
                if time.monotonic() - pruned_at > PRUNE_EVERY_SECONDS:
                    prune(utcnow() - KEEP_FINISHED)
                    pruned_at = time.monotonic()
                while deliver_due(self.owner, config) and not self._stop.is_set():
                    pass  # a full batch may leave more due rows behind it
                failures.ok("webhook delivery")
            except Exception as exc:  # noqa: BLE001 - a catalog outage: logged with its cause, tried again
                failures.log("webhook delivery", f"the webhook outbox could not be read; trying again in {poll:.1f}s",
                             exc)
                try:
                    connection.close()
                except Exception:  # the next pass opens a new one all the same
                    logger.warning("could not close the catalog connection after a failed outbox pass", exc_info=True)
            wait_for_work(poll)
