"""The store writer process: every shared-writer commit's redaction, JSON and SQLite, out of the daemon's process.

The daemon drafts each session's batch where it hands it off (ids, timestamps: `rows.draft`), and this process
does the rest: redaction and JSON (`rows.finish`), then `EventLog.write`: the INSERT, the transaction, the WAL's
system calls. It answers with each row's stored content, and which of them redaction changed. In a thread of the
daemon each SQLite call gave up the GIL and had to win it back from a busy event loop, so at a hundred streaming
sessions commits queued behind the loop; a process has its own interpreter, and its work leaves the loop's thread.

Its protocol is frames on stdin and stdout, each a 4-byte big-endian length and a pickle (both ends are this code,
from the same checkout): a request is a list of `WriteJob`/`CloseJob`/`SecretsJob`, answered, in order, by one frame
of a `JobResult` each. Stores are named by path: one writer per store. It waits on no lock (busy timeout 0): a
locked, failing or displaced store is answered with its error and its connection closed, and the daemon moves that
store to a writer thread of its own (store/writer/shared.py). It ends at end of input, after answering everything
before it; SIGINT and SIGTERM are the daemon's to act on, not this process's (a Ctrl-C reaches the whole process
group, and the daemon still flushes its sessions through here as it stops).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import BinaryIO, NamedTuple

from sessions.core.batch_scheduling import become_batch
from sessions.core.failures import StoreFailure
from sessions.core.redact import register_secret
from sessions.store.events import EventLog
from sessions.store.rows import Draft, Statement, finish

HEADER_BYTES = 4


class WriteJob(NamedTuple):
    path: str
    agent: str
    drafts: list[Draft]
    statements: list[Statement]
    redact: bool


class CloseJob(NamedTuple):
    path: str


class SecretsJob(NamedTuple):
    """Secrets the daemon registered (its own token has no shape to recognise it by): redacted here too. Sent
    before the first write and again whenever more were registered; never by argv or environment, which other
    processes can read."""
    secrets: tuple[str, ...]


class JobResult(NamedTuple):
    lasts: list[int] | None  # each INSERT slice's last sequence; None: nothing was committed
    contents: list[str] | None = None  # each event's stored content, as JSON
    changed: tuple[int, ...] = ()  # the events whose content redaction changed
    error: str = ""  # why not, as "ExceptionType: message"
    failure: str = ""  # a StoreFailure's reason (the store's own verdict, such as displaced): no retry can help
    seconds: float = 0.0  # how long the commit took


def frame(payload: object) -> bytes:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(HEADER_BYTES, "big") + data


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        more = stream.read(size - len(data))
        if not more:
            return None
        data += more
    return data


class Writer:
    """The stores this process holds open, by path."""

    def __init__(self) -> None:
        self.logs: dict[str, EventLog] = {}

    def run(self, job: WriteJob | CloseJob | SecretsJob) -> JobResult:
        if isinstance(job, CloseJob):
            self.close(job.path)
            return JobResult([])
        if isinstance(job, SecretsJob):
            for secret in job.secrets:
                register_secret(secret)
            return JobResult([])
        started = time.perf_counter()
        try:
            log = self.logs.get(job.path)
            if log is None:
                log = self.logs[job.path] = EventLog(Path(job.path), job.agent, redact=False, busy_timeout_ms=0)
                started = time.perf_counter()  # an open, slow on a loaded machine, is not timed as a commit
            values, changed = finish(job.drafts, redact=job.redact)
            lasts = log.write(values, job.statements)
        except Exception as exc:  # noqa: BLE001 - every kind goes back to the daemon, which classifies it
            self.close(job.path)  # the store leaves this process; its own thread opens it afresh
            failure = exc.reason if isinstance(exc, StoreFailure) else ""
            return JobResult(None, error=f"{type(exc).__name__}: {exc}", failure=failure,
                             seconds=time.perf_counter() - started)
        return JobResult(lasts, [v[4] for v in values], tuple(changed), seconds=time.perf_counter() - started)

    def close(self, path: str) -> None:
        log = self.logs.pop(path, None)
        if log is not None:
            try:
                log.close()
            except Exception as exc:  # noqa: BLE001 - a connection that fails to close holds nothing committed
                sys.stderr.write(f"store writer: closing {path} failed: {exc}\n")

    def close_all(self) -> None:
        for path in list(self.logs):
            self.close(path)


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    writer = Writer()
    answering = True
    try:
        while (head := _read_exactly(requests, HEADER_BYTES)) is not None:
            body = _read_exactly(requests, int.from_bytes(head, "big"))
            if body is None:
                break
            jobs: list[WriteJob | CloseJob | SecretsJob] = pickle.loads(body)
            results = [writer.run(job) for job in jobs]
            if answering:
                try:
                    answers.write(frame(results))
                    answers.flush()
                except BrokenPipeError:  # nobody reads (the daemon's loop closed): what is sent is still written
                    answering = False
    finally:
        writer.close_all()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    become_batch()  # sessions/core/batch_scheduling.py: woken by the loop's write, it no longer takes the loop's core
    # Answers go on a private copy of stdout; anything else printed (a library's warning) goes to stderr, so it can
    # never be read as a frame.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    # Through the module's own name, so that what it pickles names `sessions.store.writer.process`, not `__main__`.
    from sessions.store.writer import process as write_process

    write_process.main()
