"""`session recap`'s one line per message: what the agent said; its reasoning only when it said nothing else."""

from __future__ import annotations

from compozy.cli.reads import _message_line


def test_a_message_line_shows_the_reply_not_the_reasoning_mixed_in() -> None:
    both = {"role": "assistant", "parts": [{"type": "reasoning", "text": "Reading the request."},
                                           {"type": "text", "text": "Hello there."}]}
    assert _message_line(both) == "Hello there."
    thinking = {"role": "assistant", "parts": [{"type": "reasoning", "text": " planning "}]}
    assert _message_line(thinking) == "(thinking) planning"
