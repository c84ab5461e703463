"""Bad requests get a JSON error body with a stable code and the right HTTP status (docs/reference/surfaces.md §1),
and a
refused create leaves no session behind. In-process (tests/inproc.py): the real URL conf, middleware, NinjaAPI and
store, no daemon. The guard, the CLI's one-line errors and exit codes, and what needs a live agent are in
tests/integration/test_errors.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.inproc import Answer, InProcessApp, inproc_app

UNKNOWN_SESSION = "sess_0123456789abcdef"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessApp]:
    with inproc_app(tmp_path_factory.mktemp("home")) as app:
        yield app


@pytest.fixture(scope="module")
def stopped_session(api: InProcessApp, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return api.stopped_session(tmp_path_factory.mktemp("stopped-ws"))


Request = Callable[[InProcessApp, Path, dict[str, Any]], Answer]


def create(body: dict[str, Any]) -> Request:
    return lambda d, ws, stopped: d.http.post("/api/sessions", json={
        k: (str(ws) if v == "$WS" else v) for k, v in body.items()})


HTTP_CASES: list[Any] = [
    pytest.param(create({"agent_name": "no-such-agent", "workspace_path": "$WS"}), 404, "agent_not_found",
                 id="unknown-agent"),
    pytest.param(create({"agent_name": "scripted", "workspace_path": "relative/dir"}), 400,
                 "workspace_path_not_absolute", id="relative-workspace-path"),
    pytest.param(create({"agent_name": "scripted", "workspace": "anything", "workspace_path": "$WS"}), 400,
                 "workspace_conflict", id="both-workspace-fields"),
    pytest.param(create({"agent_name": "scripted"}), 400, "workspace_required", id="no-workspace-field"),
    pytest.param(lambda d, ws, s: d.http.post("/api/sessions", content=b'{"agent_name": "scripted",',
                                              headers={"Content-Type": "application/json"}),
                 400, "malformed_json", id="malformed-json"),
    pytest.param(create({"agent_name": "scripted", "workspace_path": "$WS", "colour": "blue"}), 400,
                 "unknown_field", id="unknown-field"),
    pytest.param(lambda d, ws, s: d.http.get(f"/api/sessions/{UNKNOWN_SESSION}"), 404, "session_not_found",
                 id="unknown-session"),
    pytest.param(lambda d, ws, s: d.http.get("/api/sessions/sess_not-an-id"), 404, "session_not_found",
                 id="malformed-session-id"),
    pytest.param(lambda d, ws, s: d.http.post(d.scoped(s["id"], "/stop"), content=b"{nope",
                                              headers={"Content-Type": "application/json"}),
                 400, "malformed_json", id="malformed-json-on-stop"),
    # A misspelt fence must be refused: ignored, `expected_turn` would interrupt whatever turn is running.
    pytest.param(lambda d, ws, s: d.http.post(d.scoped(s["id"], "/interrupt"),
                                              json={"expected_turn": "turn_0000000000000000"}),
                 400, "unknown_field", id="misspelt-interrupt-fence"),
    pytest.param(lambda d, ws, s: d.http.post(d.scoped(s["id"], "/stop"), json={"reason": "bogus"}),
                 400, "unknown_field", id="unknown-field-on-stop"),
    pytest.param(create({"agent_name": "scripted", "workspace_path": "/nonexistent/compozy/ws"}), 410,
                 "workspace_root_missing", id="missing-workspace-path"),
]


@pytest.mark.parametrize(("send", "status", "code"), HTTP_CASES)
def test_bad_requests_get_a_stable_json_error(api: InProcessApp, workspace: Path, stopped_session: dict[str, Any],
                                             send: Request, status: int, code: str) -> None:
    before = api.http.get("/api/sessions", params={"all": "true"}).json()["page"]["total"]
    response = send(api, workspace, stopped_session)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert body["code"] == code
    assert body["diagnostic"]["code"] == code
    # A refused create leaves no session behind.
    assert api.http.get("/api/sessions", params={"all": "true"}).json()["page"]["total"] == before
