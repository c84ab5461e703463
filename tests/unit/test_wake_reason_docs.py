"""The closed set of wake reasons is the one the README documents: the health seed's thirteen, and each reason
beyond them named as an extension of ours (issue 34)."""

from __future__ import annotations

import re

from health.enums import WakeReason
from tests.conftest import ROOT

# The health seed's table, in its order.
SEED = ["session_not_found", "session_unhealthy", "session_not_attachable", "session_prompt_active",
        "session_prompt_active_race", "cooldown_active", "quiet_window", "heartbeat_disabled", "heartbeat_invalid",
        "heartbeat_no_policy", "heartbeat_rate_limited", "wake_coalesced", "synthetic_prompt_failed"]


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Session health and wakes", 1)[1].split("\n## ", 1)[0]


def test_the_seed_reasons_are_all_in_the_closed_set() -> None:
    assert set(SEED) <= {r.value for r in WakeReason}


def test_every_reason_is_documented_and_every_extension_is_called_one() -> None:
    section = " ".join(readme_section().split())
    for reason in WakeReason:
        assert f"`{reason.value}`" in section, f"{reason.value} is not in README's Session health and wakes"
    extensions = [r.value for r in WakeReason if r.value not in SEED]
    assert extensions, "no extension: drop this test's second half"
    named = re.search(r"extensions? of ours: (.*?)\. ", section)
    assert named is not None, "README does not say which reasons are extensions"
    assert sorted(re.findall(r"`([a-z_]+)` \(", named.group(1))) == sorted(extensions)
