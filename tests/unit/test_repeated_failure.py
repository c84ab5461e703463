"""A background loop that keeps failing logs the error once in full, then a line a minute, then says it recovered."""

from __future__ import annotations

import logging

import pytest

from compozy.daemon.logs import RepeatedFailure


def test_a_repeating_error_is_logged_once_then_summarised(caplog: pytest.LogCaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    failures = RepeatedFailure(logging.getLogger("test.repeated"), every=60.0)
    full = OSError(28, "No space left on device")
    with caplog.at_level(logging.WARNING, logger="test.repeated"):
        for _ in range(30):  # a minute of ticks two seconds apart
            failures.log("sweep", "could not send sweep", full)
            clock[0] += 2.0
        failures.log("sweep", "could not send sweep", full)  # 60 s after the first report
        failures.log("sweep", "could not send sweep", ValueError("another error"))  # a new error: in full again
        failures.ok("sweep")
    records = [(r.levelname, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert records[0] == ("ERROR", "could not send sweep", True)
    assert records[1][0] == "ERROR" and "still failing" in records[1][1] and "30 more time(s)" in records[1][1]
    assert records[2] == ("ERROR", "could not send sweep", True)
    assert records[3] == ("WARNING", "sweep: working again", False)
    assert len(records) == 4


def test_a_failure_reported_at_growing_intervals_is_one_line_each_time(caplog: pytest.LogCaptureFixture,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    failures = RepeatedFailure(logging.getLogger("test.repeated"), 10.0, growth=2.0, most=40.0, traceback=False)
    down = ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")
    with caplog.at_level(logging.WARNING, logger="test.repeated"):
        for _ in range(1200):  # two minutes of attempts every 0.1 s
            failures.log("job queue", "the job queue does not answer", down)
            clock[0] += 0.1
    at = [round(r.created) for r in caplog.records]
    assert len(caplog.records) == 5 and not any(r.exc_info for r in caplog.records), at  # 0, 10, 30, 70, 110 s
    assert caplog.records[0].getMessage() == f"the job queue does not answer: ConnectionError: {down}"
