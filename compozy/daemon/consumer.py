"""huey runs inside the daemon process: worker threads, no signal handlers of its own, and a ticker that
enqueues the periodic jobs (`sessions/jobs.py` says why they are not self-rescheduling chains)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from huey.consumer import Consumer, Scheduler, Worker

from compozy.daemon.logs import RepeatedFailure

logger = logging.getLogger(__name__)

QUEUE = "job queue"
# A queue that cannot be read or written (Redis down, a locked SQLite file) is one failure, whoever meets it: a line
# when it starts, then after 10 s, 20 s, 40 s… at most every 10 min, and one when it works again. huey's own workers
# logged a traceback per attempt (5,182 lines in 12 s with Redis gone); status and doctor report it meanwhile.
QUEUE_FAILURE = RepeatedFailure(logger, 10.0, growth=2.0, most=600.0, traceback=False)
QUEUE_DOWN = "the job queue does not answer (jobs are neither sent nor taken); retrying"
QUEUE_RETRY_MOST = 5.0  # a worker retries an unreadable queue at growing intervals up to this

BOOT_RETRY_SECONDS = 5.0  # boot repair is tried again until it ran for this start
# Jobs of this daemon start (boot repair with the health recompute, the wake cycle, which waits for that recompute):
# run here, never sent through the queue, whose other consumers (other nodes on a shared Redis) would run them for a
# start that is not theirs, and keep the "recomputed" mark in their own memory.
START_JOBS = frozenset({"boot", "wake"})
TICKER_MAX_WAIT = 1.0  # the ticker thread wakes at least this often to notice a stop


class QuietWorker(Worker):
    """huey's worker loop, with a queue it cannot read reported to QUEUE_FAILURE and retried at growing intervals."""

    delay: float  # huey's Worker sets it in __init__, untyped

    def loop(self, now: Any = None) -> None:
        try:
            task = self.huey.dequeue()
        except Exception as exc:  # noqa: BLE001 - each storage (SQLite, Redis) fails its own way; logged with the cause
            QUEUE_FAILURE.log(QUEUE, QUEUE_DOWN, exc)
            self.stop_flag.wait(self.delay)
            self.delay = min(max(self.delay, self.default_delay) * 2, QUEUE_RETRY_MOST)
            return
        QUEUE_FAILURE.ok(QUEUE)
        if task is not None:
            self.delay = self.default_delay
            try:
                self.huey.execute(task, now)
            except Exception:
                self._logger.exception("Unhandled error during execution of task %s.", task.id)
        elif not self.huey.storage.blocking:
            self.sleep()


class QuietScheduler(Scheduler):
    """Our jobs are never delayed (the Ticker sends them when due), so the schedule is read only to honour huey; a
    queue that does not answer is the workers' to report and retry, not read every second besides."""

    def loop(self, now: Any = None) -> None:
        if QUEUE_FAILURE.failing(QUEUE):
            self.stop_flag.wait(self.interval)
            return
        try:
            for task in self.huey.read_schedule(now):
                self.huey.enqueue(task)
        except Exception as exc:  # noqa: BLE001 - each storage (SQLite, Redis) fails its own way; logged with the cause
            QUEUE_FAILURE.log(QUEUE, QUEUE_DOWN, exc)
        self.stop_flag.wait(self.interval)


class InProcessConsumer(Consumer):
    worker_class = QuietWorker
    scheduler_class = QuietScheduler

    # The launcher owns SIGTERM/SIGINT (stop sessions first); huey must not replace those handlers.
    def _set_signal_handlers(self) -> None:
        return None

    @classmethod
    def build(cls) -> InProcessConsumer:
        from huey.contrib.djhuey import HUEY

        # The task modules must be registered before the consumer takes its first message, or huey logs
        # "not found in TaskRegistry" and drops it. `SessionsConfig.ready` imports them too (for run_huey).
        import health.jobs  # noqa: F401
        import sessions.jobs  # noqa: F401

        # Periodic crontab tasks are minute-grained; the Ticker sends our periodic jobs instead.
        return cls(HUEY, workers=2, worker_type="thread", periodic=False, initial_delay=0.05, max_delay=0.5,
                   check_worker_health=False)

    def stop(self, graceful: bool = True) -> None:
        try:
            super().stop(graceful=graceful)
        except Exception:
            logger.exception("huey consumer did not stop cleanly")


class Ticker:
    """A daemon thread that enqueues each periodic job when it falls due; the jobs claim their own ticks.

    If a job's previous message has not reached this process when the next one is due (lost, or taken by
    another consumer on the queue that cannot run it), the ticker runs the job here as well, on a small pool
    so it never waits on one: the claim still lets each tick run once. The jobs of this daemon start
    (`START_JOBS`) always run on that pool. Errors (a locked or full queue) cost one tick and are logged; the
    thread keeps going until `stop()`."""

    def __init__(self, run: str, sweep_every: Callable[[], float]) -> None:
        self.run = run  # the daemon start this ticker serves (daemon.json `started_at`)
        self.sweep_every = sweep_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compozy-ticker", daemon=True)
        self._local = ThreadPoolExecutor(max_workers=2, thread_name_prefix="compozy-jobs")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._local.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        from huey.contrib.djhuey import close_db

        from coordination import jobs as coordination_jobs
        from dreams import jobs as dream_jobs
        from health import jobs as health_jobs
        from sessions import jobs
        from tasks import jobs as task_jobs

        sends: dict[str, tuple[Any, tuple[Any, ...], Callable[[], float]]] = {
            "boot": (jobs.boot_repair, (self.run,), lambda: BOOT_RETRY_SECONDS),
            "sweep": (jobs.supervision_sweep, (), self.sweep_every),
            "tombstones": (jobs.remove_tombstones, (), lambda: jobs.TOMBSTONE_EVERY),
            "health_sweep": (health_jobs.health_sweep, (), health_jobs.sweep_every),
            "wake": (health_jobs.wake_cycle, (self.run,), health_jobs.wake_every),
            "tasks": (task_jobs.task_cycle, (), task_jobs.task_every),
            "dreams": (dream_jobs.dream_cycle, (), dream_jobs.dream_every),
            "coordination": (coordination_jobs.coordination_cycle, (), coordination_jobs.coordination_every),
        }
        due = dict.fromkeys(sends, 0.0)
        sent = dict.fromkeys(sends, 0.0)
        while not self._stop.is_set():
            if "boot" in due and jobs.boot_repaired(self.run):
                del due["boot"]
            for name, at in list(due.items()):
                now = time.monotonic()
                if now < at:
                    continue
                task, args, every = sends[name]
                try:
                    if name in START_JOBS:
                        self._run_here(name, close_db(task.call_local), args)
                    else:
                        if sent[name] and jobs.arrived(name) < sent[name]:
                            self._run_here(name, close_db(task.call_local), args)
                        task(*args)
                    sent[name] = now
                    if name not in START_JOBS:
                        QUEUE_FAILURE.ok(QUEUE)
                except Exception as exc:  # noqa: BLE001 - logged with the cause; the ticker keeps going
                    # Only the queue fails a send: one report for every job, as the workers'.
                    QUEUE_FAILURE.log(QUEUE, QUEUE_DOWN, exc)
                due[name] = now + every()
            self._stop.wait(max(0.05, min(TICKER_MAX_WAIT, min(due.values()) - time.monotonic())))

    def _run_here(self, name: str, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
        def run() -> None:
            try:
                call(*args)
            except Exception:  # a future's exception is never looked at: say it here, as huey would
                logger.exception("job %s failed; it runs again at its next tick", name)

        self._local.submit(run)


class LeaseKeeper:
    """A daemon thread that keeps this node's session leases (sessions/catalog/cluster.py), apart from the huey queue: a
    lost or delayed message must never cost a live session its lease.

    Every third of `[cluster] lease_ttl`:
    1. heartbeat this node's `Node` row (clustered only: an idle embedded daemon writes nothing to its catalog);
    2. renew the leases of the sessions this daemon runs; one another node took (we were cut off longer than the
       TTL) is stopped here, because its new owner runs the agent and writes events.db now;
    3. failover: sessions whose owner stopped renewing are claimed and repaired to `stopped` (stale-state rules),
       only once this node has been connected for a full TTL since its last failed tick (cluster rule 6: after a
       database outage every owner first renews what expired meanwhile, on the database's clock).
    4. the durable copies: what this node held through an outage is sent to the database (store/replica.py).
    """

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compozy-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _live_ids(self) -> list[str]:
        for _ in range(5):
            try:  # the loop thread adds and removes runtimes meanwhile
                return list({*self.manager.runtimes, *self.manager.reserved})
            except RuntimeError:
                continue
        return []

    def tick(self) -> None:
        from sessions.catalog import cluster
        from sessions.repair import failover

        me = cluster.identity()
        if me is None:
            return
        if cluster.clustered():
            cluster.heartbeat_node(me)
        cluster.connection_state.connected(time.monotonic())
        lost = cluster.renew(self._live_ids(), me)
        for session_id in lost:
            if session_id not in self.manager.runtimes:
                continue  # a create still writing its catalog row
            holder = cluster.take(session_id, me)  # gone without a taker: ours again
            if holder is not None:
                taker = "failover" if holder.fenced else holder.node_id
                logger.error("session %s: lease lost to %s while this node was cut off; stopping its agent here "
                             "without writing", session_id, taker)
                self.manager.hand_off_fence(session_id, taker)
        if cluster.may_judge_leases():
            failover.recover_expired()

    def _loop(self) -> None:
        from django.db import close_old_connections

        from sessions.catalog import cluster

        me = cluster.identity()
        every = (me.lease_ttl if me else 15.0) / 3
        try:
            if me is not None:
                cluster.register_node(me)
        except Exception:
            logger.exception("could not register this node in the catalog")
        failures = RepeatedFailure(logger)
        while not self._stop.wait(every):
            try:
                close_old_connections()
                self.tick()
                failures.ok("lease renewal")
            except Exception as exc:  # noqa: BLE001 - logged with the cause; the keeper keeps renewing
                cluster.connection_state.lost()
                failures.log("lease renewal", f"lease renewal failed; trying again in {every:.1f}s", exc)
                from django.db import connection

                try:
                    connection.close()  # a broken server connection is replaced on the next tick
                except Exception:  # the next tick opens a new one all the same
                    logger.warning("could not close the catalog connection after a failed renewal", exc_info=True)
