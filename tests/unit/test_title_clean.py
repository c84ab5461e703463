"""Auto-title candidates (sessions/runtime/title.py): the first line of the reply, never an echo of the request."""

from __future__ import annotations

from sessions.runtime.title import clean_title, title_prompt

REQUEST = title_prompt("fix the login test", "Done: the test no longer races.")


def test_the_first_line_of_the_reply_is_the_title() -> None:
    assert clean_title("\nTitle: **Fix the login test**\nmore", REQUEST) == "Fix the login test"


def test_an_echo_of_the_request_is_no_title() -> None:
    assert clean_title(REQUEST, REQUEST) is None
    assert clean_title("echo: " + REQUEST, REQUEST) is None
    assert clean_title(REQUEST.splitlines()[1] + " Sure!", REQUEST) is None
    assert clean_title("User: fix the login test", REQUEST) is None


def test_a_title_that_merely_shares_words_with_the_request_is_kept() -> None:
    assert clean_title("Fix the login test", REQUEST) == "Fix the login test"
