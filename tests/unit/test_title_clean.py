"""Auto-title candidates (sessions/runtime/title.py): the first line of the reply, never an echo of the request."""

from __future__ import annotations

from sessions.runtime.title import EXCERPT_CHARS, clean_title, title_prompt

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


def test_the_title_request_and_the_title_carry_no_secret() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    user = f"AWS id AKIAZZZZSECPROBE0001 and aws_secret_access_key={secret} please"
    request = title_prompt(user, "sure, using aws_secret_access_key " + secret)
    assert secret not in request and "AKIAZZZZSECPROBE0001" not in request
    # A title agent that copies a key anyway: the title keeps its words, not the key.
    title = clean_title(f"Aws id AKIAZZZZSECPROBE0001 and aws_secret_access_key {secret}", request)
    assert title is not None and secret[:20] not in title and "AKIAZZZZSECPROBE0001" not in title


def test_a_key_cut_by_the_excerpt_is_still_redacted() -> None:
    token = "ghp_" + "A1b2C3d4E5" * 4
    user = "x" * (EXCERPT_CHARS - 10) + " " + token  # the excerpt ends inside the token
    assert token[:8] not in title_prompt(user, "ok")
