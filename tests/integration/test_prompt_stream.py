"""The prompt stream (docs/reference/events.md §6.2) against the real daemon and the scripted agent: a prompt that
starts a turn answers with the AI SDK's UI message stream, read here by the real AI SDK (the npm package
`ai`, tests/aisdk/chat.mjs) and by a plain SSE parser; `?format=raw` answers the CLI's raw frames; queued and
staged prompts and clients that ask for JSON keep the JSON prompt result; a viewer that leaves never ends
the turn."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import JSON_ONLY, ROOT, Daemon, chunk_count, of_type, wait_for

AISDK = ROOT / "tests" / "aisdk"


def pinned_ai_version() -> str:
    return json.loads((AISDK / "package.json").read_text())["dependencies"]["ai"]


@pytest.fixture(scope="module")
def aisdk() -> Path:
    """tests/aisdk with its pinned packages installed (`npm ci`, once; kept in tests/aisdk/node_modules)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run the AI SDK client (tests/aisdk); install Node.js 18+ and npm")
    installed = AISDK / "node_modules" / "ai" / "package.json"
    if not installed.exists() or json.loads(installed.read_text()).get("version") != pinned_ai_version():
        result = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=AISDK,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"npm ci failed in tests/aisdk: {result.stderr[-3000:]}"
    return AISDK


def chat(daemon: Daemon, session_id: str, message: str, *, timeout: float = 60.0) -> dict[str, Any]:
    """Run the AI-SDK client against a real prompt; its assembled message, error chunks and chunk types."""
    url = daemon.base_url + daemon.scoped(session_id, "/prompt")
    result = subprocess.run(["node", str(AISDK / "chat.mjs"), url, daemon.token, message], cwd=AISDK,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"AI-SDK client failed: {result.stderr[-3000:]}"
    return json.loads(result.stdout)


def sse_frames(body: str) -> list[dict[str, str]]:
    """Frames of an SSE body (comments skipped): {id?, event?, data}."""
    frames = []
    for block in body.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        if "data" in fields:
            frames.append(fields)
    return frames


def stream(daemon: Daemon, session_id: str, message: str, **params: str) -> httpx.Response:
    response = daemon.http.post(daemon.scoped(session_id, "/prompt"), json={"message": message}, params=params)
    assert response.status_code == 200, response.text
    return response


def last_turn(daemon: Daemon, session_id: str) -> list[dict[str, Any]]:
    """The events of the session's newest turn (the one a stream answered)."""
    [newest] = of_type(daemon.events(session_id, type="user_message", limit=1), "user_message")
    return daemon.turn_events(session_id, newest["turn_id"])


def prompt_streams(daemon: Daemon) -> float:
    """Open prompt streams, from the daemon's own gauge."""
    samples = text_string_to_metric_families(daemon.http.get("/metrics").text)
    return sum(s.value for family in samples for s in family.samples
               if s.name == "compozy_sse_clients" and s.labels.get("stream") == "prompt")


def texts(events: list[dict[str, Any]], type_: str) -> list[str]:
    return [e["content"]["text"] for e in of_type(events, type_) if e["content"].get("text")]


# ---- the AI SDK --------------------------------------------------------------------------------

def test_ai_sdk_client_assembles_streamed_text_equal_to_the_stored_chunks(daemon: Daemon, workspace: Path,
                                                                          aisdk: Path) -> None:
    session = daemon.create(workspace)
    got = chat(daemon, session["id"], "stream 40")
    turn = last_turn(daemon, session["id"])
    message = got["message"]
    assert message["role"] == "assistant" and message["id"] == f"msg_{turn[0]['turn_id']}"
    text_parts = [p for p in message["parts"] if p["type"] == "text"]
    assert [p["text"] for p in text_parts] == ["".join(texts(turn, "agent_message"))]
    assert chunk_count(p["text"] for p in text_parts) == 40
    assert all(p["state"] == "done" for p in text_parts)
    # The turn's other rows arrive whole as data parts; the user's own message is not echoed back.
    [done] = [p["data"] for p in message["parts"] if p["type"] == "data-compozy-event"]
    assert done["type"] == "done" and done["content"]["stop_reason"] == "end_turn"
    assert done["session_id"] == session["id"] and done["sequence"] == of_type(turn, "done")[0]["sequence"]
    assert got["errors"] == []
    assert got["chunks"][0] == "start" and got["chunks"][-1] == "finish"


def test_ai_sdk_client_gets_a_reasoning_part_for_thought(daemon: Daemon, workspace: Path, aisdk: Path) -> None:
    session = daemon.create(workspace)
    parts = chat(daemon, session["id"], "think weighing the options")["message"]["parts"]
    assert [(p["type"], p.get("text")) for p in parts if p["type"] in ("reasoning", "text")] == [
        ("reasoning", "weighing the options"), ("text", "thought done")]


def test_ai_sdk_client_gets_a_tool_part_with_input_output_and_the_permission(daemon: Daemon, workspace: Path,
                                                                            aisdk: Path) -> None:
    session = daemon.create(workspace)
    parts = chat(daemon, session["id"], "tool read README.md")["message"]["parts"]
    turn = last_turn(daemon, session["id"])
    [call] = of_type(turn, "tool_call")
    [tool] = [p for p in parts if p["type"] == "dynamic-tool"]
    assert tool["toolCallId"] == call["content"]["tool_call_id"]
    assert tool["state"] == "output-available"
    assert tool["input"] == call["content"]["tool_input"] and tool["input"]["path"].endswith("README.md")
    assert tool["output"] == of_type(turn, "tool_result")[0]["content"]["tool_result"]
    assert tool["output"]["content"] == "hello from the workspace\n"
    [permission] = [p for p in parts if p["type"] == "data-compozy-permission"]
    assert permission["id"] == tool["toolCallId"]
    assert permission["data"]["decision"] == "approved" and permission["data"]["session_id"] == session["id"]
    assert {o["option_id"] for o in permission["data"]["options"]} == {"allow", "reject"}
    assert [p["text"] for p in parts if p["type"] == "text"] == ["tool allow"]


def test_ai_sdk_client_sees_a_permission_waiting_on_a_person_and_its_decision(daemon: Daemon, workspace: Path,
                                                                              aisdk: Path) -> None:
    session = daemon.create(workspace, agent="reader")  # approve-reads: a write waits for a person
    url = daemon.base_url + daemon.scoped(session["id"], "/prompt")
    client = subprocess.Popen(["node", str(AISDK / "chat.mjs"), url, daemon.token, "tool write out.txt hi"],
                              cwd=AISDK, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        permissions = daemon.scoped(session["id"], "/permissions")
        [pending] = wait_for(lambda: daemon.http.get(permissions).json()["permissions"], timeout=30,
                             what="the write's permission request")
        approved = daemon.http.post(f"{permissions}/{pending['request_id']}", json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 0, err
    parts = json.loads(out)["message"]["parts"]
    [permission] = [p for p in parts if p["type"] == "data-compozy-permission"]
    # Shown while pending (a UI offers approve/deny), then settled in place by the decision row.
    assert permission["id"] == pending["request_id"]
    assert permission["data"]["decision"] == "approved"
    [tool] = [p for p in parts if p["type"] == "dynamic-tool"]
    assert tool["state"] == "output-available" and tool["input"]["content"] == "hi"
    assert (workspace / "out.txt").read_text() == "hi"


def test_ai_sdk_client_gets_an_error_when_the_turn_fails(daemon: Daemon, workspace: Path, aisdk: Path) -> None:
    session = daemon.create(workspace)
    got = chat(daemon, session["id"], "error")
    [error] = of_type(last_turn(daemon, session["id"]), "error")
    assert got["errors"] == [error["content"]["error"]]
    assert "scripted prompt failure" in got["errors"][0]
    events = [p["data"] for p in got["message"]["parts"] if p["type"] == "data-compozy-event"]
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["content"]["failure"]["kind"] == "prompt_failure"
    assert got["chunks"][-2:] == ["error", "finish"]


# ---- the wire form -----------------------------------------------------------------------------

def test_ui_stream_frames_follow_the_ai_sdk_protocol(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    response = stream(daemon, session["id"], "stream 5")
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["cache-control"] == "no-cache"
    datas = [f["data"] for f in sse_frames(response.text)]
    assert datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    assert [c["type"] for c in chunks][:2] == ["start", "text-start"]
    assert [c["type"] for c in chunks][-3:] == ["text-end", "data-compozy-event", "finish"]
    deltas = [c for c in chunks if c["type"] == "text-delta"]
    assert {c["id"] for c in deltas} == {chunks[1]["id"]}
    assert chunk_count(c["delta"] for c in deltas) == 5


@pytest.mark.parametrize("name", ["frames", "format"])  # the session stream's name, and the older alias
def test_raw_frames_answer_live_agent_events_for_the_cli(daemon: Daemon, workspace: Path, name: str) -> None:
    session = daemon.create(workspace)
    response = stream(daemon, session["id"], "stream 6", **{name: "raw"})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "x-vercel-ai-ui-message-stream" not in response.headers
    frames = sse_frames(response.text)
    turn = last_turn(daemon, session["id"])
    after_prompt = [e for e in turn if e["type"] != "user_message"]
    assert [(f["event"], int(f["id"])) for f in frames] == [(e["type"], e["sequence"]) for e in after_prompt]
    datas = [json.loads(f["data"]) for f in frames]
    for data, event in zip(datas, after_prompt, strict=True):
        assert data["type"] == event["type"] and data["session_id"] == session["id"]
        assert data["turn_id"] == event["turn_id"] and data["timestamp"] == event["timestamp"]
        assert set(data) <= {"type", "session_id", "turn_id", "timestamp", "text", "title", "tool_call_id",
                             "stop_reason", "error", "failure", "usage", "runtime", "raw"}
    assert "".join(d.get("text", "") for d in datas) == "".join(texts(turn, "agent_message"))
    assert datas[-1]["type"] == "done" and datas[-1]["stop_reason"] == "end_turn"


def test_an_unknown_format_is_refused(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    response = daemon.http.post(daemon.scoped(session["id"], "/prompt"), json={"message": "hi"},
                                params={"format": "xml"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_format"
    for params, code in (({"frames": "xml"}, "invalid_frames"),
                         ({"frames": "raw", "format": "ui"}, "invalid_parameter")):
        response = daemon.http.post(daemon.scoped(session["id"], "/prompt"), json={"message": "hi"}, params=params)
        assert response.status_code == 400 and response.json()["code"] == code, (params, response.text)


def test_rows_of_other_turns_are_not_streamed(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    earlier = daemon.run_turn(session["id"], "stream 3")
    frames = sse_frames(stream(daemon, session["id"], "slow 3 0.05", format="raw").text)
    turn = last_turn(daemon, session["id"])
    assert {json.loads(f["data"])["turn_id"] for f in frames} == {turn[0]["turn_id"]}
    assert earlier[0]["turn_id"] != turn[0]["turn_id"]
    assert chunk_count(json.loads(f["data"]).get("text", "") for f in frames) == 3


# ---- JSON stays JSON ---------------------------------------------------------------------------

def test_accept_json_keeps_the_json_prompt_result(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    response = daemon.http.post(daemon.scoped(session["id"], "/prompt"), json={"message": "stream 2"},
                                headers=JSON_ONLY)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    result = response.json()["prompt"]
    assert result["status"] == "accepted" and result["session_id"] == session["id"]
    assert of_type(daemon.turn_events(session["id"], result["turn_id"]), "done")
    # Asking for both means the stream.
    both = daemon.http.post(daemon.scoped(session["id"], "/prompt"), json={"message": "stream 2"},
                            headers={"Accept": "application/json, text/event-stream"})
    assert both.headers["content-type"].startswith("text/event-stream")


def test_a_queued_or_staged_prompt_on_a_busy_session_answers_202_json(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    busy = daemon.prompt(session["id"], "slow 30 0.1")
    assert busy.status_code == 200, busy.text
    url = daemon.scoped(session["id"], "/prompt")
    queued = daemon.http.post(url, json={"message": "stream 2", "mode": "queue"})
    assert queued.status_code == 202, queued.text
    assert queued.headers["content-type"].startswith("application/json")
    assert queued.json()["prompt"]["status"] == "queued"
    staged = daemon.http.post(url, json={"message": "look at the tests", "mode": "steer"})
    assert staged.status_code == 202 and staged.json()["prompt"]["status"] == "staged"
    entry = queued.json()["prompt"]["queue_entry_id"]
    canceled = daemon.http.delete(daemon.scoped(session["id"], f"/prompt/queue/{entry}"))
    assert canceled.status_code == 200 and canceled.json()["prompt"]["status"] == "canceled"


def test_interrupt_with_a_replacement_streams_the_new_turn(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    busy = daemon.prompt(session["id"], "slow 50 0.1")
    assert busy.status_code == 200, busy.text
    response = daemon.http.post(daemon.scoped(session["id"], "/prompt"),
                                json={"message": "stream 4", "mode": "interrupt"}, params={"frames": "raw"})
    assert response.status_code == 200, response.text
    new_turn = last_turn(daemon, session["id"])[0]["turn_id"]
    assert new_turn != busy.json()["prompt"]["turn_id"]
    frames = [json.loads(f["data"]) for f in sse_frames(response.text)]
    assert {f["turn_id"] for f in frames} == {new_turn}
    assert chunk_count(f.get("text", "") for f in frames) == 4 and frames[-1]["type"] == "done"


# ---- a viewer that leaves ------------------------------------------------------------------------

def test_a_viewer_that_disconnects_mid_stream_leaves_the_turn_running_to_done(daemon: Daemon,
                                                                              workspace: Path) -> None:
    session = daemon.create(workspace)
    with daemon.client(timeout=30.0) as viewer, viewer.stream(
            "POST", daemon.scoped(session["id"], "/prompt"), json={"message": "slow 15 0.1"}) as response:
        assert response.status_code == 200
        seen = ""
        for piece in response.iter_text():
            seen += piece
            if '"text-delta"' in seen:
                assert prompt_streams(daemon) == 1
                break  # leave after the first words: the client closes the connection
    # The viewer's read ends with it (its feed subscription too), while the turn goes on.
    wait_for(lambda: prompt_streams(daemon) == 0, timeout=10, what="the prompt stream's read to end")
    turn = last_turn(daemon, session["id"])
    [done] = of_type(turn, "done")
    assert done["content"]["stop_reason"] == "end_turn"
    assert chunk_count(texts(turn, "agent_message")) == 15
    assert not [e for e in turn if e["type"] == "transcript_marker.created"
                and e["content"]["title"] == "transcript_marker.prompt_cancel"]
    # The session is idle and takes the next prompt.
    assert daemon.run_turn(session["id"], "stream 1")


def test_openapi_declares_the_stream_and_the_json_answers(daemon: Daemon) -> None:
    spec = daemon.http.get("/api/openapi.json").json()
    [operation] = [ops["post"] for path, ops in spec["paths"].items() if path.endswith("/prompt") and "post" in ops]
    ok = operation["responses"]["200"]["content"]
    assert "text/event-stream" in ok and "application/json" in ok
    assert "application/json" in operation["responses"]["202"]["content"]
    assert any(p["name"] == "format" and p["in"] == "query" for p in operation["parameters"])


def test_a_stream_waits_for_a_slow_turn_and_sends_its_words_as_they_come(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace)
    arrivals: list[float] = []
    with daemon.http.stream("POST", daemon.scoped(session["id"], "/prompt"),
                            json={"message": "slow 4 0.3"}, params={"format": "raw"}) as response:
        started = time.monotonic()
        buffer = ""
        for piece in response.iter_text():
            buffer += piece
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                if "event: agent_message" in block:
                    arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 4
    assert arrivals[-1] - arrivals[0] >= 0.6  # live, not one burst at the turn's end
