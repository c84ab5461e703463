"""Transcript markers as stored: one writer's shape for the row's content, and one reader of a rewind's marker."""

from __future__ import annotations

from sessions.core.enums import EventType, MarkerKind
from sessions.core.jsonobj import EventContent
from sessions.core.live import MarkerEvidence, MarkerRaw
from sessions.core.redact import bound_text, redact_text

SUMMARY_LIMIT = 2048  # bytes of a marker's summary


def marker_content(kind: MarkerKind, summary: str, evidence: MarkerEvidence | None,
                   occurred_at: str | None) -> EventContent:
    """A `transcript_marker` row's content: its title, the summary (redacted, bounded) and `raw` with the evidence."""
    raw: MarkerRaw = {"kind": f"transcript_marker.{kind.value}", "occurred_at": occurred_at,
                      "summary": bound_text(redact_text(summary), SUMMARY_LIMIT)}
    if evidence:
        raw["evidence"] = evidence
    return {"title": kind.value, "text": raw["summary"], "raw": raw}


def rewind_of(type_: str, content: EventContent) -> tuple[str, set[str]] | None:
    """A `session_rewound` marker's target commit ("" when it names none) and the turns it took back; None for any
    other row."""
    if type_ != EventType.TRANSCRIPT_MARKER or content.get("title") != MarkerKind.SESSION_REWOUND:
        return None
    evidence = (content.get("raw") or {}).get("evidence") or {}
    return str(evidence.get("commit") or ""), {str(t) for t in evidence.get("rewound_turns") or []}
