"""The project's real web app in-process, for request validation and error bodies: Django's URL conf, middleware
and the NinjaAPI with its routers through Django's async test client, the SSE consumers through channels' HTTP
communicator, and a SessionManager on an event loop thread of its own (as the daemon's loop runs beside its DB
threads), in a temporary COMPOZY_HOME with the integration tests' config. No daemon, port, guard or agent: the
sessions it holds are stopped ones written to the real store (meta.json, events.db, catalog row). A test that needs
a live agent, the guard or the CLI stays an integration test (tests/conftest.py's `Daemon`)."""

from __future__ import annotations

import asyncio
import contextlib
import json as jsonlib  # `json` is the keyword argument of InProcessHttp.request, as in httpx
import os
import threading
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

from tests.django_env import ensure_django

T = TypeVar("T")
# How long one in-process request may take (a wait on a hang, not a speed target).
REQUEST_TIMEOUT = 60.0


@dataclass(frozen=True)
class Answer:
    """One response, with the parts of httpx.Response the API tests read (headers are case-insensitive)."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class InProcessHttp:
    """httpx.Client's calling convention (`params`, `json`, `content`, `headers`) over the in-process app."""

    def __init__(self, app: InProcessApp) -> None:
        self.app = app

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None,
                content: bytes | None = None, headers: Mapping[str, str] | None = None) -> Answer:
        headers = dict(headers or {})
        content_type = next((headers.pop(k) for k in list(headers) if k.lower() == "content-type"), "")
        if json is not None:
            # ensure_ascii, like the tests' raw bodies: a lone surrogate travels as its \\u escape.
            content = jsonlib.dumps(json).encode()
            content_type = content_type or "application/json"
        return self.app.run(self.app.send(method, path, params or {}, content or b"", content_type, headers))

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Answer:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Answer:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Answer:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Answer:
        return self.request("DELETE", path, **kwargs)


def _is_stream(path: str) -> bool:
    # The two channels consumers of compozy_site/asgi.py; everything else is Django's.
    return path == "/api/sessions/catalog-stream" or (path.startswith("/api/workspaces/") and path.endswith("/stream"))


class InProcessApp:
    """The app and its SessionManager; `http` sends requests, the helpers mirror tests.conftest.Daemon's."""

    def __init__(self, home: Path) -> None:
        from django.test import AsyncClient

        from compozy_base.config.loader import get_config
        from sessions.catalog import cluster
        from sessions.runtime.manager import SessionManager, set_manager
        from sessions.store.folder import isoformat, utcnow

        self.home = home
        config = get_config()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="inproc-loop", daemon=True)
        self._thread.start()
        self.manager = SessionManager(config)
        self.manager.bind_loop(self.loop)
        set_manager(self.manager)
        # As the launcher does before the first request: the identity leases and ownership are read under.
        cluster.set_identity(cluster.Identity(cluster.node_id(), isoformat(utcnow()), "http://127.0.0.1:0",
                                              config.cluster.lease_ttl))
        # Answers as a server sends them: an exception a view did not handle is a 500, not raised into the test.
        self.client = AsyncClient(raise_request_exception=False)
        self.http = InProcessHttp(self)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(REQUEST_TIMEOUT)

    async def send(self, method: str, path: str, params: Mapping[str, Any], body: bytes, content_type: str,
                   headers: dict[str, str]) -> Answer:
        raw_path, _, query = path.partition("?")
        if params:
            query = urlencode(params, doseq=True)
        if _is_stream(raw_path):
            return await self._stream(method, raw_path, query, body, content_type, headers)
        response = await self.client.generic(method, path if not params else raw_path, data=body,
                                             content_type=content_type or "application/octet-stream",
                                             headers=headers, query_params=dict(params) or None)
        assert not response.streaming, f"{method} {path} answered a stream; read it through a live daemon"
        return Answer(response.status_code, response.headers, response.content)

    async def _stream(self, method: str, path: str, query: str, body: bytes, content_type: str,
                      headers: dict[str, str]) -> Answer:
        """A stream request through the project's ASGI routes (compozy_site.asgi.routes). Only answers that end
        (an error) are read: a stream that opens is a test that needs a live daemon."""
        from channels.testing import HttpCommunicator

        from compozy_site.asgi import routes

        sent = [(k.lower().encode(), v.encode("latin1")) for k, v in headers.items()]
        if content_type:
            sent.append((b"content-type", content_type.encode()))
        communicator = HttpCommunicator(routes, method, path + (f"?{query}" if query else ""), body=body,
                                        headers=sent)
        answer = await communicator.get_response(timeout=REQUEST_TIMEOUT)
        assert answer["status"] != 200, f"{method} {path} opened a stream; read it through a live daemon"
        return Answer(answer["status"], _Headers(answer["headers"]), answer["body"])

    # ---- tests.conftest.Daemon's helpers ------------------------------------------------------------

    def session(self, session_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/sessions/{session_id}")
        assert response.status_code == 200, response.text
        session: dict[str, Any] = response.json()["session"]
        return session

    def scoped(self, session_id: str, suffix: str = "") -> str:
        return f"/api/workspaces/{self.session(session_id)['workspace_id']}/sessions/{session_id}{suffix}"

    def events(self, session_id: str, **query: Any) -> list[dict[str, Any]]:
        response = self.http.get(self.scoped(session_id, "/events"), params={"limit": 1000, **query})
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    def all_events(self, session_id: str, after: int = 0) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            after = rows[-1]["sequence"] if rows else after
            page = self.events(session_id, after_sequence=after)
            if not page:
                return rows
            rows += page

    def prompt(self, session_id: str, message: str, **extra: Any) -> Answer:
        return self.http.post(self.scoped(session_id, "/prompt"), json={"message": message, **extra},
                              headers={"Accept": "application/json"})

    def stopped_session(self, workspace: Path, name: str = "") -> dict[str, Any]:
        """A session as a finished run leaves it, written through the store's own functions: meta.json, an events.db
        with one turn and its stop, the catalog row. Returns its payload as the API reads it."""
        from sessions.catalog import index as catalog
        from sessions.core.record import SessionRecord
        from sessions.store import folder
        from sessions.store.events import EventLog
        from sessions.store.ids import new_session_id, new_turn_id
        from sessions.store.ops import NewEvent

        ws = catalog.resolve_or_register(str(workspace))
        session_id, turn = new_session_id(), new_turn_id()
        now = folder.isoformat(folder.utcnow())
        meta = {
            "id": session_id, "name": name, "agent_name": "scripted", "provider": "scripted", "model": "",
            "workspace_id": ws.id, "workspace_path": ws.root_dir, "cwd": ws.root_dir, "session_type": "user",
            "effective_permissions": "deny-all", "state": "stopped", "stop_reason": "user_canceled",
            "stop_detail": "", "failure": None, "acp_session_id": "acp-1", "liveness": {"activity": {}},
            "input_generation": 1, "created_at": now, "activated_at": now, "updated_at": now,
        }
        folder.session_dir(session_id).mkdir(parents=True)
        log = EventLog(folder.events_path(session_id), "scripted")
        log.append([NewEvent("user_message", turn, {"text": "hello"}), NewEvent("agent_message", turn, {"text": "hi"}),
                    NewEvent("done", turn, {"stop_reason": "end_turn"}),
                    NewEvent("session_stopped", "", {"stop_reason": "user_canceled", "stop_detail": ""})])
        log.close()
        folder.write_meta(SessionRecord.from_meta(meta))
        catalog.upsert_session_row(SessionRecord.from_meta(meta))
        return self.session(session_id)

    def close(self) -> None:
        from sessions.catalog import cluster
        from sessions.runtime.manager import set_manager

        try:
            self.run(self.manager.shutdown())  # nothing to stop, unless a test started an agent by mistake
        finally:
            set_manager(None)
            cluster.set_identity(None)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


class _Headers(dict[str, str]):
    """ASGI response headers, looked up case-insensitively."""

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        super().__init__((k.decode("latin1").lower(), v.decode("latin1")) for k, v in pairs)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)


@contextlib.contextmanager
def inproc_app(home: Path) -> Iterator[InProcessApp]:
    """The app in a fresh `home` (config.toml as the integration tests' daemon has it); COMPOZY_HOME and the
    config cache point at it until the block ends."""
    from tests.conftest import daemon_config

    ensure_django(migrate=True)
    from compozy_base.config import loader as config_module
    from sessions.store.folder import utcnow

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(daemon_config(home))
    previous = os.environ.get("COMPOZY_HOME")
    os.environ["COMPOZY_HOME"] = str(home)
    config_module._cached = None
    started = utcnow()
    app = InProcessApp(home)
    try:
        yield app
    finally:
        app.close()
        _drop_rows_since(started)
        config_module._cached = None
        if previous is None:
            os.environ.pop("COMPOZY_HOME", None)
        else:
            os.environ["COMPOZY_HOME"] = previous


def _drop_rows_since(started: datetime) -> None:
    """The catalog is the test process's, shared with the other unit modules (some count its rows): what this app
    wrote goes with it. Nothing else writes to it while a module's tests run."""
    from sessions.models import Session, Workspace
    from tasks.models import Task

    for model in (Task, Session, Workspace):  # dependents first: a workspace PROTECTs its sessions and tasks
        model.objects.filter(created_at__gte=started).delete()
