"""What a refused request must answer and leave alone, for the in-process API tests (tests/inproc.py) and the
end-to-end ones against the real daemon (tests/conftest.py's `Daemon`) alike: both have `http` (httpx's calling
convention), `home`, `scoped()` and `all_events()`."""

from __future__ import annotations

from typing import Any

TOO_BIG = str(2**63)


def error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The common error shape with this status and code; returns the body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]
    assert body["diagnostic"]["code"] == code
    return body


def snapshot(api: Any, session_id: str) -> tuple[int, int, bytes, int]:
    """What a refused request must not change: sessions, workspaces, this session's meta.json and events."""
    listing = api.http.get("/api/sessions", params={"all": "true"})
    assert listing.status_code == 200, listing.text
    workspaces = api.http.get("/api/workspaces").json()["workspaces"]
    meta = (api.home / "sessions" / session_id / "meta.json").read_bytes()
    return listing.json()["page"]["total"], len(workspaces), meta, len(api.all_events(session_id))


def post_raw(api: Any, path: str, body: bytes) -> Any:
    return api.http.post(path, content=body, headers={"Content-Type": "application/json"})
