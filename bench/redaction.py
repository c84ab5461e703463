"""Redaction cost (sessions/core/redact.py), in-process: it runs on every stored event and on agent output of
any size, so ordinary text must stay cheap and adversarial text must cost linear time.

Ordinary text: µs per 200-character call (target ≤ 20 µs), against one `str.lower()` of the same text (the
least any case-insensitive scan pays). Adversarial text (runs of key words, unclosed quotes, repeated
separators): µs per KiB at 64 KiB and at 256 KiB; linear cost keeps the two equal (target: the larger input costs
at most 2x per KiB). `tokentoken…` once cost 7 s for 256 KiB, 28 ms per KiB and growing with the size.
"""

from __future__ import annotations

import timeit
from pathlib import Path

from bench.report import BenchResult, Op, Target
from sessions.core.redact import redact_text

ORDINARY = ("The daemon stores every event in the session's events.db; run `compozy session events ID` to see "
            "them, or open the dashboard and follow the live tail while the agent works on src/app.py.")[:200]
ADVERSARIAL = {
    "key words in one run": "token",
    "dashed key words": "auth-",
    "assignments": "token=x ",
    "unclosed quoted keys": "'token': '",
    "separators": "key: ",
    "spaced identifier keys": "api_key ",
    "private key armour": "-----BEGIN RSA PRIVATE KEY-----",
}


def _per_call(func: object, number: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=5)) / number  # type: ignore[arg-type]


def run(root: Path, quick: bool) -> BenchResult:
    result = BenchResult("redaction", "Redaction: ordinary text per call, adversarial text per KiB at two sizes")
    ordinary = _per_call(lambda: redact_text(ORDINARY), 2000) * 1e6
    lower = _per_call(lambda: ORDINARY.lower(), 2000) * 1e6
    result.metric("ordinary", "ordinary 200-char text, per call", ordinary, "µs", raw_limit=lower,
                  raw_label="str.lower", target=Target(Op.AT_MOST, 20.0), summary=True)
    sizes = (16, 64) if quick else (64, 256)
    worst = 0.0
    for name, unit in ADVERSARIAL.items():
        per_kib = []
        for kib in sizes:
            text = (unit * (kib * 1024 // len(unit) + 1))[: kib * 1024]
            per_kib.append(_per_call(lambda t=text: redact_text(t), 1) * 1e6 / kib)
        growth = per_kib[1] / per_kib[0] if per_kib[0] else 0.0
        worst = max(worst, growth)
        result.metric(f"adversarial.{name}", f"{name}: per KiB at {sizes[1]} KiB", per_kib[1], "µs",
                      raw_limit=per_kib[0], raw_label=f"per KiB at {sizes[0]} KiB", target=Target(Op.AT_MOST, 2.0,
                                                                                                     of_ratio=True))
    result.details["worst_growth"] = worst
    result.check("adversarial text is redacted in linear time (per-KiB cost grows at most 2x for 4x the text)",
                 worst <= 2.0, f"worst growth {worst:.2f}x")
    return result
