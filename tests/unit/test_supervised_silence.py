"""The supervised-silence rules of `sessions/runtime/supervision.py`: what `decide` proposes from meta.json's durable
activity, what prevents the stop, and the process-tree verification against real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from tests.django_env import ensure_django

ensure_django()

from compozy_base.config.loader import Config, SupervisionConfig  # noqa: E402
from sessions.runtime.supervision import decide, verify_group_gone, verify_orphan_group  # noqa: E402
from sessions.store import folder  # noqa: E402

QUIET, GRACE = 30.0, 10.0
CONFIG = Config(supervision=replace(SupervisionConfig(), inactivity_warning_after=0, inactivity_timeout=60,
                                    progress_notify_interval=0, quiet_after=QUIET, stop_grace=GRACE))
NOW = folder.utcnow()


def meta(idle: float, kind: str = "agent_message_chunk", **activity: Any) -> dict[str, Any]:
    last = folder.isoformat(NOW - timedelta(seconds=idle))
    started = folder.isoformat(NOW - timedelta(seconds=idle + 5))
    return {"id": "sess_0000000000000001", "state": "active", "liveness": {"activity": {
        "prompt_active": True, "turn_id": "turn_1", "turn_started_at": started, "last_activity_at": last,
        "last_activity_kind": kind, **activity}}}


def test_quiet_after_warns_and_stop_grace_later_proposes_the_stop() -> None:
    assert "quiet" not in decide(meta(QUIET - 1), NOW, CONFIG).actions
    assert "quiet" in decide(meta(QUIET), NOW, CONFIG).actions
    assert "silence_stop" not in decide(meta(QUIET + GRACE - 1), NOW, CONFIG).actions
    assert {"quiet", "silence_stop"} <= set(decide(meta(QUIET + GRACE), NOW, CONFIG).actions)


def test_a_turn_that_only_started_is_silent_from_its_start() -> None:
    assert "silence_stop" in decide(meta(QUIET + GRACE, kind="prompt_started"), NOW, CONFIG).actions


def test_a_tool_in_flight_and_a_permission_waiting_on_a_person_prevent_warning_and_stop() -> None:
    assert not {"quiet", "silence_stop"} & set(decide(meta(QUIET + GRACE, tools_in_flight=1), NOW, CONFIG).actions)
    assert not {"quiet", "silence_stop"} & set(decide(meta(QUIET + GRACE, kind="agent_waiting"), NOW, CONFIG).actions)


def test_a_signal_from_an_unknown_source_prevents_the_stop_but_not_the_warning() -> None:
    actions = decide(meta(QUIET + GRACE, kind="future_widget"), NOW, CONFIG).actions
    assert "quiet" in actions and "silence_stop" not in actions


def test_stop_grace_zero_warns_without_stopping() -> None:
    config = replace(CONFIG, supervision=replace(CONFIG.supervision, stop_grace=0))
    actions = decide(meta(QUIET * 10), NOW, config).actions
    assert "quiet" in actions and "silence_stop" not in actions


def test_a_task_bound_session_is_left_to_the_silence_path_not_the_inactivity_timeout() -> None:
    assert "timeout" in decide(meta(60), NOW, CONFIG).actions
    bound = {**meta(60), "task_id": "task_1", "run_id": "run_1"}
    assert "timeout" not in decide(bound, NOW, CONFIG).actions


def test_verification_kills_survivors_and_confirms_the_group_is_gone() -> None:
    # Like an agent's group: a leader deaf to SIGTERM and a tool it spawned.
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"], start_new_session=True)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGTERM)  # ignored by the shell: the group outlives a polite stop
    result = verify_group_gone(proc.pid, wait=5.0)
    proc.wait(5)
    assert result["verified"] is True and result["escalated"] is True and result["survivors"] == []
    assert result["killpg_probe"] in ("ProcessLookupError", "exists")  # "exists": only zombies remain


def test_an_orphan_group_is_verified_gone_and_a_reused_pid_is_left_alone() -> None:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    time.sleep(0.1)
    from compozy_base.process import start_ticks

    started = start_ticks(proc.pid)
    assert verify_orphan_group(proc.pid, (started or 0) + 1)["note"] == "the pid now belongs to another process"
    assert proc.poll() is None  # not ours: untouched
    result = verify_orphan_group(proc.pid, started)
    proc.wait(5)
    assert result["verified"] is True
    assert verify_orphan_group(None, None)["verified"] is True
