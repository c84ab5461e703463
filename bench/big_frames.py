"""Many viewers that stopped reading and one very large agent message (issue 33 point 2):
`python -m bench.big_frames [--viewers 300] [--mib 48] [--frames raw|transcript] [--stall 10]`.

A fresh daemon, one session, VIEWERS event streams that read their headers and then nothing (64 KiB receive
buffers), then the scripted agent's `big` scenario: one agent message of MIB MiB on one line. Reports the daemon's
RSS before, its peak (VmHWM) while the message reaches the viewers, what `compozy status` says is queued for them,
and the RSS once the stall timeout has closed their connections. The bound it checks (a missed bound is reported and
the exit code is 1): peak - before < 10 copies of the message + VIEWERS x (high-water mark + one piece).

Measured 2026-12-02 (2 cores, shared), one 48 MiB message:
- before (008609e), 30 raw viewers: RSS 132 → 1753 MiB (+1621), 44 MiB queued for each viewer, 1327 MiB in all.
- 300 raw viewers: 142 → 644 MiB (+501; bound +759), at most 981 KiB queued for one, 227 MiB in all; 300/300
  connections closed after the stall timeout.
- 30 transcript viewers before the shared delta: +1762 MiB; after: +341 MiB. 300 transcript viewers: 143 → 698
  MiB (+555), 300/300 closed.
- Loop lag p99 during the 300-viewer runs: 1.4-2.5 s (one viewer: 0.65 s): the message's own parse on the loop
  and the store thread holding the GIL while it redacts and writes 48 MiB, not the viewers.
- RSS after the connections closed: ~450-500 MiB (their queues are freed; glibc keeps the heap).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from sessions.live.pressure import HIGH_WATER_BYTES, PIECE_BYTES
from tests.conftest import start_daemon, wait_for
from tests.integration.test_big_frames import (
    MESSAGE_COPIES,
    closed_by_daemon,
    newest,
    reset_peak,
    rss_kib,
    stalled_viewer,
)


def run(root: Path, viewers: int, size: int, frames: str, stall: int) -> bool:
    workspace = root / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("bench\n")
    daemon = start_daemon(root / "home", f'[http]\nstream_stall_timeout = "{stall}s"\n')
    try:
        sid = daemon.create(workspace)["id"]
        path = daemon.scoped(sid, "/stream") + ("?frames=raw" if frames == "raw" else "")
        before = newest(daemon, sid)
        streams = [stalled_viewer(daemon, path, before) for _ in range(viewers)]
        pid = daemon.proc.pid
        start_kib = rss_kib(pid)
        reset_peak(pid)
        started = time.monotonic()
        assert daemon.prompt(sid, f"big {size}").status_code in (200, 202)
        daemon.wait_event(sid, "done", timeout=300)
        # The first viewers may reach the stall timeout before the last are full: the most seen at once is kept.
        most: dict[str, int] = {"waiting_on_client": 0, "queued_bytes": 0, "max_queued_bytes": 0}
        lag: dict[str, float] = {}
        deadline = time.monotonic() + stall
        while time.monotonic() < deadline and most["waiting_on_client"] < viewers:
            status = daemon.http.get("/api/status").json()
            lag = status["event_loop"]["lag"]["windows"][0]
            most = max(most, status["streams"], key=lambda s: (s["waiting_on_client"], s["queued_bytes"]))
            time.sleep(0.2)
        waited = time.monotonic() - started
        peak_kib = rss_kib(pid, "VmHWM")
        queued = most
        wait_for(lambda: daemon.http.get("/api/status").json()["streams"]["waiting_on_client"] == 0,
                 timeout=stall * 10, what="the stalled viewers to be let go")
        closed = sum(closed_by_daemon(s) for s in streams)
        after_kib = rss_kib(pid)
    finally:
        daemon.stop()
    bound_kib = (MESSAGE_COPIES * size + viewers * (HIGH_WATER_BYTES + PIECE_BYTES)) // 1024
    grew = peak_kib - start_kib
    print(f"{viewers} {frames} viewers, one {size >> 20} MiB message: RSS {start_kib >> 10} MiB before, "  # noqa: T201
          f"peak {peak_kib >> 10} MiB (+{grew >> 10} MiB; bound +{bound_kib >> 10} MiB: "
          f"{'held' if grew < bound_kib else 'MISSED'}); queued {queued['queued_bytes'] >> 20} MiB for "
          f"{queued['waiting_on_client']} viewers, at most {queued['max_queued_bytes'] >> 10} KiB for one; all "
          f"waiting {waited:.1f} s after the prompt; loop lag p99 {lag.get('p99_ms')} ms, max {lag.get('max_ms')} ms; "
          f"after the stall timeout {closed}/{viewers} connections closed, RSS {after_kib >> 10} MiB")
    return grew < bound_kib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--viewers", type=int, default=300)
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--frames", choices=("raw", "transcript"), default="raw")
    parser.add_argument("--stall", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compozy-big-") as root:
        held = run(Path(root), args.viewers, args.mib * 1024 * 1024, args.frames, args.stall)
    sys.exit(0 if held else 1)


if __name__ == "__main__":
    main()
