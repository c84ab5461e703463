"""What a person reads of a session's state (issue 48, "status that tells the truth"): the outcome of a stopped
session and the notice of a quiet turn. Pure: every surface (the session payload, so the page, the list and
`session status`; the attention list) reads these two rules, and the clock is a parameter.

Health keeps `dead` and `session_unhealthy` for the wake service: a stopped session has no agent process and cannot
be woken. That is no alarm to a person, who wants to know how it ended: completed, stopped by them, failed (and
how).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypedDict

from sessions.core.enums import SessionState, StopReason

OutcomeTone = Literal["ok", "neutral", "failed"]


class OutcomeDoc(TypedDict):
    """How a stopped session ended: `label` is what the page, the list and the CLI print; `tone` colours it."""

    label: str
    tone: OutcomeTone


class QuietDoc(TypedDict):
    """A running turn without agent output for a while: `text` is the notice ("no output for 1m 20s"), `since`
    when the last output came (the page counts on from it), `attention` true past the second bound."""

    since: str
    seconds: float
    text: str
    attention: bool


class PreviewDoc(TypedDict):
    """What the sessions list shows of a session: the tool its turn runs now, else the start of its last reply."""

    kind: Literal["tool", "message"]
    text: str


# One line of a list row: enough to tell sessions apart, and small in every listed payload.
PREVIEW_CHARS = 160


def preview_text(reply: str) -> str:
    """A reply as one line, cut at `PREVIEW_CHARS` (the agent's Markdown stays as text: the list never renders it)."""
    line = " ".join(reply.split())
    return line if len(line) <= PREVIEW_CHARS else line[:PREVIEW_CHARS - 1] + "…"


def preview(*, prompting: bool, current_tool: str | None, live_reply: str, last_reply: str) -> PreviewDoc | None:
    """The running turn's tool, else its reply so far, else the last turn's reply; None when there is none."""
    if prompting and current_tool:
        return {"kind": "tool", "text": preview_text(current_tool)}
    text = preview_text(live_reply) if prompting and live_reply else last_reply
    return {"kind": "message", "text": text} if text else None


# Stop reasons that are not a failure, each as a person says it. A failure on the record wins over any of them.
_NEUTRAL_STOPS: dict[str, tuple[str, OutcomeTone]] = {
    StopReason.COMPLETED: ("completed", "ok"),
    StopReason.USER_CANCELED: ("stopped by you", "neutral"),
    StopReason.SHUTDOWN: ("stopped: daemon shut down", "neutral"),
    StopReason.MAX_ITERATIONS: ("stopped: iteration limit", "neutral"),
    StopReason.LOOP_DETECTED: ("stopped: loop detected", "neutral"),
    StopReason.HOOK_STOPPED: ("stopped by a hook", "neutral"),
    StopReason.BUDGET_EXCEEDED: ("stopped: budget reached", "neutral"),
}


def outcome(state: str, stop_reason: str | None, failure_kind: str | None) -> OutcomeDoc | None:
    """The outcome of a stopped session; None while it is not stopped (its state says what it does)."""
    if state != SessionState.STOPPED:
        return None
    if failure_kind:
        return {"label": f"failed: {failure_kind}", "tone": "failed"}
    if stop_reason in _NEUTRAL_STOPS:
        label, tone = _NEUTRAL_STOPS[stop_reason]
        return {"label": label, "tone": tone}
    if stop_reason:  # error, agent_crashed, timeout without a failure object (an older record)
        return {"label": f"failed: {stop_reason}", "tone": "failed"}
    return {"label": "stopped", "tone": "neutral"}


def quiet_text(seconds: float) -> str:
    """`no output for 1m 20s`: whole seconds, minutes past one, hours past sixty (as the page's `duration()`)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"no output for {s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"no output for {m}m {s}s"
    h, m = divmod(m, 60)
    return f"no output for {h}h {m}m"


def quiet(*, prompting: bool, waiting_on_person: bool, last_output: datetime | None, turn_started: datetime | None,
          now: datetime, notice_after: float, attention_after: float) -> QuietDoc | None:
    """The quiet-turn notice, or None.

    1. Only a running turn can be quiet, and not one waiting on a person (a permission, a question): the person
       is the one to act, and the page says so already.
    2. The silence runs from the later of the turn's start and the agent's last output (a turn that never said
       anything is quiet from its start; output from an earlier turn does not count for this one).
    3. A notice from `notice_after` on (0: never), an attention item too from `attention_after` on (0: never).
    """
    if not prompting or waiting_on_person or notice_after <= 0:
        return None
    since = max((t for t in (last_output, turn_started) if t is not None), default=None)
    if since is None:
        return None
    seconds = (now - since).total_seconds()
    if seconds < notice_after:
        return None
    return {"since": since.isoformat().replace("+00:00", "Z"), "seconds": round(seconds, 3),
            "text": quiet_text(seconds), "attention": attention_after > 0 and seconds >= attention_after}
