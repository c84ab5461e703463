"""Results model, rich tables and the JSON file. Benchmarks report; only correctness checks gate."""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


class Verdict(StrEnum):
    MEETS = "meets"
    MISSES = "misses"
    INFO = "-"


class Op(StrEnum):
    AT_LEAST = ">="
    AT_MOST = "<="


@dataclass
class Target:
    op: Op
    value: float
    of_ratio: bool = False  # the target applies to value / raw limit, not to the value

    def check(self, measured: float | None) -> Verdict:
        if measured is None:
            return Verdict.MISSES
        ok = measured >= self.value if self.op is Op.AT_LEAST else measured <= self.value
        return Verdict.MEETS if ok else Verdict.MISSES

    def __str__(self) -> str:
        sign = "≥" if self.op is Op.AT_LEAST else "≤"
        return f"{sign} {self.value:g}x" if self.of_ratio else f"{sign} {fmt(self.value)}"


@dataclass
class Metric:
    key: str
    label: str
    value: float
    unit: str
    raw_limit: float | None = None
    raw_label: str = ""
    target: Target | None = None
    note: str = ""
    summary: bool = False  # also shown in the final summary table

    @property
    def ratio(self) -> float | None:
        if self.raw_limit in (None, 0):
            return None
        return self.value / self.raw_limit

    @property
    def verdict(self) -> Verdict:
        if self.target is None:
            return Verdict.INFO
        return self.target.check(self.ratio if self.target.of_ratio else self.value)

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "value": self.value, "unit": self.unit,
                "raw_limit": self.raw_limit, "raw_label": self.raw_label or None, "ratio": self.ratio,
                "target": str(self.target) if self.target else None, "verdict": self.verdict.value,
                "note": self.note or None}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class BenchResult:
    name: str
    title: str
    metrics: list[Metric] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def metric(self, *args: Any, **kwargs: Any) -> Metric:
        m = Metric(*args, **kwargs)
        self.metrics.append(m)
        return m

    def check(self, name: str, ok: bool, detail: str) -> Check:
        c = Check(name, ok, detail)
        self.checks.append(c)
        return c

    @property
    def correct(self) -> bool:
        return all(c.ok for c in self.checks)


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return ""
    return f"{ratio:.1%}" if ratio < 0.1 else f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.1f}x"


VERDICT_STYLE = {Verdict.MEETS: "green", Verdict.MISSES: "bold red", Verdict.INFO: "dim"}


def bench_table(result: BenchResult) -> Table:
    table = Table(title=f"{result.title}  ({result.seconds:.0f} s)", title_justify="left", expand=False)
    for col, justify in (("metric", "left"), ("value", "right"), ("raw limit", "right"), ("ratio", "right"),
                         ("target", "right"), ("verdict", "left"), ("note", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for m in result.metrics:
        raw = f"{fmt(m.raw_limit)} ({m.raw_label})" if m.raw_limit is not None and m.raw_label else fmt(m.raw_limit)
        verdict = m.verdict
        table.add_row(m.label, fmt(m.value, m.unit), raw, fmt_ratio(m.ratio), str(m.target or ""),
                      f"[{VERDICT_STYLE[verdict]}]{verdict.value}[/]", m.note)
    for c in result.checks:
        style = "green" if c.ok else "bold red"
        table.add_row(f"check: {c.name}", "", "", "", "", f"[{style}]{'ok' if c.ok else 'FAILED'}[/]", c.detail)
    return table


def summary_table(results: list[BenchResult]) -> Table:
    table = Table(title="Summary", title_justify="left")
    for col, justify in (("metric", "left"), ("value", "right"), ("raw limit", "right"), ("ratio", "right"),
                         ("target", "right"), ("verdict", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for result in results:
        if result.error:
            table.add_row(f"{result.name}", "", "", "", "", f"[bold red]error[/]: {result.error[:80]}")
            continue
        for m in result.metrics:
            if m.summary:
                verdict = m.verdict
                table.add_row(m.label, fmt(m.value, m.unit), fmt(m.raw_limit), fmt_ratio(m.ratio),
                              str(m.target or ""), f"[{VERDICT_STYLE[verdict]}]{verdict.value}[/]")
        for c in result.checks:
            style = "green" if c.ok else "bold red"
            table.add_row(f"check: {result.name}/{c.name}", "", "", "", "", f"[{style}]{'ok' if c.ok else 'FAILED'}[/]")
    return table


def print_result(console: Console, result: BenchResult) -> None:
    if result.error:
        console.print(f"[bold red]{result.title}: error[/] {result.error}")
        return
    console.print(bench_table(result))
    for note in result.notes:
        console.print(f"  [dim]• {note}[/]")
    console.print()


def machine_info() -> dict[str, Any]:
    import os

    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                            "cpus": os.cpu_count()}
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()[0].split()
        info["mem_gib"] = round(int(meminfo[1]) / 1024 / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    try:
        import sqlite3

        info["sqlite"] = sqlite3.sqlite_version
    except ImportError:
        pass
    return info


def write_json(path: Path, results: list[BenchResult], mode: str, started_at: str, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema": "compozy.bench.v1",
        "started_at": started_at,
        "mode": mode,
        "seconds": round(seconds, 1),
        "machine": machine_info(),
        "benchmarks": [
            {"name": r.name, "title": r.title, "seconds": round(r.seconds, 1), "error": r.error,
             "metrics": [m.as_json() for m in r.metrics], "checks": [asdict(c) for c in r.checks],
             "notes": r.notes, "details": r.details}
            for r in results
        ],
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
