"""`python -m bench` (or `make bench`): run the benchmarks, print a table per benchmark and a summary.

Exit status: 0 when every correctness check passed (a missed performance target is reported, not failed),
1 when a check failed (sequence gap or duplicate, lost content), 2 when a benchmark could not run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from bench import cadence, capacity, cpu_split, harness, latency, memory, redaction, throughput, worktrees  # noqa: E402
from bench.harness import cpu_probe, load_average  # noqa: E402
from bench.report import BenchResult, print_result, summary_table, write_json  # noqa: E402

BENCHMARKS: dict[str, tuple[str, Callable[[Path, bool], BenchResult]]] = {
    "throughput": ("agent → events.db → SSE, against bare ACP SDK clients, raw sqlite and bare daphne",
                   throughput.run),
    "latency": ("agent → viewer latency, loop lag and CPU per frame, 20 sessions x 3 viewers with a 20k-chunk "
                "turn beside (10 and 5k with --quick)", latency.run),
    "firstturn": ("20 x 3 without the turn beside, measured while the auto-title agents of the first turns start",
                  latency.run_first_turn),
    "fanout": ("agent → viewer latency and CPU, 4 sessions x 25 viewers (2 with --quick)", latency.run_fanout),
    "cpusplit": ("CPU per tick at 1 and at 3 viewers a session: what each viewer adds, what each event costs once",
                 cpu_split.run),
    "cadence": ("store path per lone event: the Recorder against one shared writer with a hand-off cadence "
                "(in-process)", cadence.run),
    "capacity": ("sessions streaming 20 chunks/s with a raw viewer each, N raised until p99 > 50 ms, loop lag "
                 "p99 > 10 ms or the daemon > one core; beside the bare SDK client's CPU per chunk", capacity.run),
    "memory": ("daemon RSS around reads of a 1M-event session", memory.run),
    "redaction": ("redact_text on ordinary text per call, and on adversarial text per KiB at two sizes",
                  redaction.run),
    "worktrees": ("a checkpoint of a 10,000-file worktree; a worktree session's turns a second against a plain "
                  "session's", worktrees.run),
}
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    epilog = "benchmarks:\n" + "\n".join(f"  {name:<11} {text}" for name, (text, _) in BENCHMARKS.items())
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs (~2 minutes): a smoke test")
    parser.add_argument("--only", action="append", metavar="NAME", default=[],
                        help=f"run only these (repeatable or comma-separated): {', '.join(BENCHMARKS)}")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="PATH",
                        help=f"where to write results (default {DEFAULT_JSON.relative_to(ROOT)})")
    parser.add_argument("--keep", action="store_true", help="keep the temporary COMPOZY_HOMEs and databases")
    parser.add_argument("--profile", action="store_true",
                        help="sample the daemon with py-spy during measured phases (bench/results/profile-*)")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                        help="before each benchmark, wait up to SECONDS for the machine to be quiet")
    args = parser.parse_args(argv)
    names = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    args.names = names or list(BENCHMARKS)
    return args


def wait_until_quiet(console: Console, budget: float) -> float:
    """Probe until a busy thread gets >= 90% of a core, or the budget runs out; returns the last probe."""
    deadline = time.monotonic() + budget
    probe = cpu_probe()
    while probe < 0.9 and time.monotonic() < deadline:
        console.print(f"[dim]machine busy (a thread gets {probe:.0%} of a core, load {load_average():.1f}); "
                      "waiting…[/]")
        time.sleep(5)
        probe = cpu_probe()
    return probe


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    mode = "quick" if args.quick else "full"
    scratch = Path(tempfile.mkdtemp(prefix="compozy-bench-"))
    console.print(f"[bold]Compozy benchmarks[/] ({mode}: {', '.join(args.names)}); scratch {scratch}")
    results: list[BenchResult] = []
    if args.profile:
        harness.PROFILE_DIR = args.json.parent
    t0 = time.monotonic()
    try:
        for name in args.names:
            _, fn = BENCHMARKS[name]
            probe = wait_until_quiet(console, args.wait_idle) if args.wait_idle else cpu_probe()
            load = load_average()
            console.print(f"[dim]running {name}… (a busy thread gets {probe:.0%} of a core; load {load:.1f})[/]")
            start = time.monotonic()
            try:
                result = fn(scratch, args.quick)
            except Exception as exc:  # noqa: BLE001 - recorded with its traceback; the other benchmarks still run
                result = BenchResult(name, name, error=f"{type(exc).__name__}: {exc}")
                console.print(traceback.format_exc(), markup=False, highlight=False)
            result.seconds = time.monotonic() - start
            after = cpu_probe()
            result.details["machine"] = {"cpu_probe_before": probe, "cpu_probe_after": after,
                                         "load_before": load, "load_after": load_average()}
            if min(probe, after) < 0.8:
                result.notes.append(f"[yellow]machine was busy with other work: a busy thread got {probe:.0%} of a "
                                    f"core before and {after:.0%} after (load {load:.1f}); figures are pessimistic."
                                    "[/]")
            results.append(result)
            print_result(console, result)
            for label, summary in harness.PROFILES:
                result.details.setdefault("profiles", {})[label] = summary
                console.print(f"[bold]daemon profile: {label}[/]")
                console.print(summary, markup=False, highlight=False)
            harness.PROFILES.clear()
    finally:
        if args.keep:
            console.print(f"[dim]kept {scratch}[/]")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - t0
    console.print(summary_table(results))
    write_json(args.json, results, mode, started_at, elapsed)
    console.print(f"[dim]{elapsed:.0f} s; results written to {args.json}[/]")
    if any(r.error for r in results):
        return 2
    if not all(r.correct for r in results):
        console.print("[bold red]a correctness check failed[/]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
