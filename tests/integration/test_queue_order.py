"""FIFO at a turn's end (issue 50, row 1; sessions reference §6): prompts sent from several clients while turns
keep ending, some with `mode=queue` and some with no mode at all, run in the order the daemon acknowledged them.
A mode-less prompt that finds the session between two turns, with prompts still waiting in the queue, waits behind
them instead of starting at once.

The acknowledgement order is read two ways: the daemon's own (the sequence of each prompt's acknowledgement in the
event store: the `user_message` of a prompt accepted at once, the `prompt_queued` marker of a queued one), and the
clients' (a prompt whose answer arrived before another was sent was acknowledged first)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JSON_ONLY, NO_TITLE, Daemon, markers, module_daemon, of_type, wait_for

CLIENTS = 4
PROMPTS = 200  # in all, over the clients
# How many runs, each on a session of its own: the acceptance asks for 20 in a row (`COMPOZY_FIFO_RUNS=20`).
RUNS = int(os.environ.get("COMPOZY_FIFO_RUNS", "1"))

# The queue must hold every prompt the clients send faster than the turns end.
daemon = module_daemon('[session.busy_input]\nqueue_cap = 1000\n' + NO_TITLE)


def send_all(d: Daemon, sid: str, client: int, count: int, sent: list[dict[str, Any]],
             errors: list[BaseException]) -> None:
    """One client: `count` short turns, every other one with `mode=queue`, one at a time: each is sent as soon as
    the one before it was answered, so four clients keep prompts arriving while turns end."""
    try:
        with d.client(timeout=60.0) as http:
            url = d.scoped(sid, "/prompt")
            for i in range(count):
                text = f"slow 2 0.005 c{client}-{i}"
                body: dict[str, Any] = {"message": text}
                if i % 2:
                    body["mode"] = "queue"
                sent_at = time.monotonic()
                response = http.post(url, json=body, headers=JSON_ONLY)
                answered_at = time.monotonic()
                assert response.status_code in (200, 202), response.text
                result = response.json()["prompt"]
                assert result["status"] in ("accepted", "queued"), result
                sent.append({"text": text, "sent_at": sent_at, "answered_at": answered_at, **result})
    except BaseException as exc:  # noqa: BLE001 - reported from the test's thread
        errors.append(exc)


def turns_ended(d: Daemon, sid: str, events: list[dict[str, Any]] | None = None) -> int:
    events = d.all_events(sid) if events is None else events
    return len(of_type(events, "done")) + len(of_type(events, "error"))


def wait_finished(d: Daemon, sid: str, count: int, timeout: float = 300.0) -> list[dict[str, Any]]:
    """Every event of the session once `count` turns ended and it is idle again."""
    def ended() -> list[dict[str, Any]] | None:
        events = d.all_events(sid)
        return events if turns_ended(d, sid, events) >= count and d.session(sid)["prompt_state"] == "idle" else None
    return wait_for(ended, timeout, f"{count} finished turns")


def run_once(d: Daemon, workspace: Path) -> None:
    sid = d.create(workspace)["id"]
    sent: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    per_client = PROMPTS // CLIENTS
    threads = [threading.Thread(target=send_all, args=(d, sid, c, per_client, sent, errors))
               for c in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors[0]
    assert len(sent) == PROMPTS

    events = wait_finished(d, sid, PROMPTS)
    assert not of_type(events, "error"), of_type(events, "error")[0]
    users = of_type(events, "user_message")
    ran = [u["content"]["text"] for u in users]
    assert sorted(ran) == sorted(p["text"] for p in sent), "a prompt ran twice or never"

    # The daemon's acknowledgement order: where each prompt's acknowledgement sits in the event store.
    user_seq = {u["content"]["text"]: u["sequence"] for u in users}
    queued_seq = {m["content"]["raw"]["evidence"]["queue_entry_id"]: m["sequence"]
                  for m in markers(events, "prompt_queued")}
    acked = sorted(sent, key=lambda p: queued_seq[p["queue_entry_id"]] if p["status"] == "queued"
                   else user_seq[p["text"]])
    assert ran == [p["text"] for p in acked], (
        f"user_message order differs from acknowledgement order from position "
        f"{next(i for i, (a, b) in enumerate(zip(ran, acked, strict=True)) if a != b['text'])}: "
        f"ran {ran[:20]}, acknowledged {[p['text'] for p in acked][:20]}")

    # The clients' order: a prompt answered before another was sent was acknowledged before it.
    position = {text: i for i, text in enumerate(ran)}
    answered = sorted(sent, key=lambda p: p["answered_at"])
    for later in sent:
        earlier = [p for p in answered if p["answered_at"] < later["sent_at"]]
        jumped = [p["text"] for p in earlier if position[p["text"]] > position[later["text"]]]
        assert not jumped, f"{later['text']} ({later['status']}) ran before {jumped[:5]}, answered before it was sent"
    assert d.http.post(d.scoped(sid, "/stop")).status_code == 204  # the agent limit counts live sessions


@pytest.mark.parametrize("run", range(RUNS))
def test_queued_and_mode_less_prompts_run_in_acknowledgement_order_while_turns_end(daemon: Daemon,
                                                                                   tmp_path: Path, run: int) -> None:
    workspace = tmp_path / f"repo{run}"
    workspace.mkdir()
    run_once(daemon, workspace)


def test_a_mode_less_prompt_between_two_turns_waits_behind_the_queue(daemon: Daemon, workspace: Path) -> None:
    """The audit's command, a run of it: `slow 4 1`, queue QA and QB, then mode-less prompts, each sent as a turn
    ends (the moment the audit's 20 ms pace hit by chance, here on purpose); every mode-less prompt runs after QA and
    QB."""
    sid = daemon.create(workspace)["id"]
    first = daemon.prompt(sid, "slow 4 0.1")
    assert first.status_code == 200, first.text
    for name in ("QA", "QB"):
        response = daemon.prompt(sid, f"slow 2 0.01 {name}", mode="queue")
        assert response.status_code == 202, response.text
    sent = []
    with daemon.client(timeout=30.0) as http:
        url = daemon.scoped(sid, "/prompt")
        for i in range(30):
            # P0 at once (the first turn still runs), then each after one more turn ended: it finds the session
            # between two turns while prompts still wait in the queue.
            wait_for(lambda i=i: turns_ended(daemon, sid) >= i, 60, f"{i} turns to end")
            text = f"slow 2 0.01 P{i}"
            response = http.post(url, json={"message": text}, headers=JSON_ONLY)
            assert response.status_code in (200, 202), response.text
            sent.append(text)
    events = wait_finished(daemon, sid, 33)
    ran = [u["content"]["text"] for u in of_type(events, "user_message")]
    assert ran == ["slow 4 0.1", "slow 2 0.01 QA", "slow 2 0.01 QB", *sent]
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
