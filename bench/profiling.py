"""Optional sampling profile of the daemon during a benchmark's measured phase (`--profile`, needs py-spy).

py-spy attaches from outside (no daemon code change) and writes collapsed stacks; `summarize` turns them
into per-thread shares and the hottest frames, which is what the report needs.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

PROFILE_RATE = 100  # Hz; py-spy falls behind at higher rates on a loaded 2-core box


def find_py_spy() -> str | None:
    explicit = os.environ.get("PY_SPY")
    if explicit and Path(explicit).is_file():
        return explicit
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file():
        return str(beside)
    return shutil.which("py-spy")


class Profiler:
    """`py-spy record` on one pid until `stop()`; all threads, GIL-idle frames excluded."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None

    def start(self) -> None:
        exe = find_py_spy()
        if exe is None:
            self.error = "py-spy not found (pip install py-spy, or set PY_SPY=/path/to/py-spy)"
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([exe, "record", "--pid", str(self.pid), "--rate", str(PROFILE_RATE),
                                      "--format", "raw", "--threads", "--nonblocking", "-o", str(self.out),
                                      # Only the thread holding the GIL: where the Python CPU goes, without the
                                      # threads that wait (COMPOZY_PROFILE_GIL=1).
                                      *(["--gil"] if os.environ.get("COMPOZY_PROFILE_GIL") else [])],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> str | None:
        """Stop sampling; returns a short text summary (or why there is none)."""
        if self.proc is None:
            return self.error
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.out.exists():
            return f"py-spy wrote nothing: {err.decode(errors='replace')[-300:]}"
        summary = summarize(self.out)
        self.out.with_suffix(".summary.txt").write_text(summary)
        return summary


def _frame_name(frame: str) -> str:
    """`func (path/to/file.py:12)` → `func (file.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name


def summarize(path: Path, top: int = 25) -> str:
    threads: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        thread = frames[0].split(": ", 1)[-1] if frames[0].startswith("thread") else frames[0]
        threads[thread.rstrip(")").split("(")[0].strip() or thread] += n
        for name in {_frame_name(f) for f in frames[1:]}:
            inclusive[name] += n
        leaves[_frame_name(frames[-1])] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples at {PROFILE_RATE} Hz", "threads:"]
    lines += [f"  {n / total:6.1%}  {t}" for t, n in threads.most_common(8)]
    skip = ("_bootstrap", "Thread.run", "_run_module_as_main", "_run_code", "<module>", "run_forever", "_run_once",
            "Handle._run", "__call__", "invoke", "main (", "run_foreground", "daemon_start", "Server.run",
            "AsyncioSelectorReactor.run", "_worker")
    lines.append("hottest frames (inclusive):")
    shown = 0
    for name, n in inclusive.most_common():
        if any(s in name for s in skip):
            continue
        lines.append(f"  {n / total:6.1%}  {name}")
        shown += 1
        if shown >= top:
            break
    lines.append("hottest leaves (self):")
    lines += [f"  {n / total:6.1%}  {name}" for name, n in leaves.most_common(12)]
    return "\n".join(lines)
