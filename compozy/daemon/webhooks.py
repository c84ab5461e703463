"""The webhook threads: deliver the outbox (attention/delivery.py) apart from the event loop and the huey queue.

Threads of their own, like the lease keeper: a POST waits on a receiver for up to `[notifications] timeout`, which
must hold neither the loop every session shares nor a queue worker the periodic jobs need. Each webhook has its own
worker, so a receiver that is slow, down or hostile (one trickling a byte every 2 s held the single thread there was,
and every other receiver's events with it) delays only its own deliveries; one more thread prunes finished rows and
gives up the rows of a webhook no longer in config.toml. They wake when this process writes an outbox row and
otherwise poll, so rows written by another node, or retries falling due, are taken within a poll; every node runs
them, and the claim lets one node make each attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from compozy.daemon.logs import RepeatedFailure

logger = logging.getLogger(__name__)

# At most this long between looks at the outbox: a retry due sooner (a short `retry_min`) is looked for sooner.
POLL_SECONDS = 2.0
# Finished rows are kept this long (doctor reads the recent failures), then pruned, at most once an hour.
KEEP_FINISHED = timedelta(days=7)
PRUNE_EVERY_SECONDS = 3600.0
# How long `stop` waits for the threads in all (an attempt in flight is cut; a catalog write may still take a moment).
STOP_WAIT_SECONDS = 5.0


class WebhookDispatcher:
    def __init__(self, owner: str) -> None:
        self.owner = owner  # node and daemon start: a restarted daemon is not its killed predecessor's claimant
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        from attention.delivery import deliver_due, prune
        from compozy_base.config.loader import get_config
        from sessions.store.folder import utcnow

        config = get_config().notifications
        if not config.webhooks:
            return  # nothing can be written to the outbox, and rows of a removed webhook wait for its return
        poll = min(POLL_SECONDS, max(0.05, config.retry_min / 2))
        keys = [hook.key for hook in config.webhooks]
        pruned_at = [0.0]

        def tidy() -> int:
            if time.monotonic() - pruned_at[0] > PRUNE_EVERY_SECONDS:
                prune(utcnow() - KEEP_FINISHED)
                pruned_at[0] = time.monotonic()
            # A removed webhook's rows: given up, no POST.
            return deliver_due(self.owner, config, besides=keys, stop=self._stop)

        def worker(key: str) -> Callable[[], int]:
            return lambda: deliver_due(self.owner, config, webhook=key, stop=self._stop)

        passes = [(f"compozy-webhook-{n}", worker(key)) for n, key in enumerate(keys)]
        passes.append(("compozy-webhooks", tidy))
        self._threads = [threading.Thread(target=self._loop, args=(one_pass, poll), name=name, daemon=True)
                         for name, one_pass in passes]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """The threads end: an attempt in flight is cut (settled without an answer, retried after the restart)."""
        self._stop.set()
        from attention.delivery import cut_attempts, wake_dispatcher

        cut_attempts()
        wake_dispatcher()
        until = time.monotonic() + STOP_WAIT_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, until - time.monotonic()))

    def _loop(self, one_pass: Callable[[], int], poll: float) -> None:
        from django.db import close_old_connections, connection

        from attention.delivery import rings, wait_for_work

        failures = RepeatedFailure(logger)
        seen = rings()
        try:
            while not self._stop.is_set():
                try:
                    close_old_connections()
                    while one_pass() and not self._stop.is_set():
                        pass  # a full batch may leave more due rows behind it
                    failures.ok("webhook delivery")
                except Exception as exc:  # noqa: BLE001 - a catalog outage: logged with its cause, tried again
                    failures.log("webhook delivery",
                                 f"the webhook outbox could not be read; trying again in {poll:.1f}s", exc)
                    try:
                        connection.close()
                    except Exception:  # the next pass opens a new one all the same
                        logger.warning("could not close the catalog connection after a failed outbox pass",
                                       exc_info=True)
                seen = wait_for_work(poll, seen)
        finally:
            connection.close()  # this thread's own: a stopped dispatcher leaves no catalog connection open
