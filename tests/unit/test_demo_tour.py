"""The demo agent's tour words (sessions/acp/demo_tour.py): only a prompt's leading words count."""

from __future__ import annotations

from sessions.acp.demo_tour import tour_parts


def test_tour_runs_every_part_but_slow_in_the_tours_order() -> None:
    assert tour_parts("tour") == ["plan", "ask", "edit", "terminal", "markdown"]
    assert tour_parts("  Tour, please") == ["plan", "ask", "edit", "terminal", "markdown"]


def test_leading_words_pick_their_parts_and_slow_comes_last() -> None:
    assert tour_parts("slow") == ["slow"]
    assert tour_parts("slow edit plan and more") == ["plan", "edit", "slow"]


def test_a_prompt_in_plain_english_runs_no_part() -> None:
    assert tour_parts("please edit the plan") == []
    assert tour_parts("") == []
    assert tour_parts("read README.md") == []
