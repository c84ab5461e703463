"""Browser pages: the dashboard, the session page, the events download and the app's static files.

Pages are thin: they embed the first data the page needs (so the first paint costs no API round trip)
and leave every write to the JSON API, which the page's JavaScript calls with `fetch` (same origin).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import mimetypes
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import ninja
from asgiref.sync import sync_to_async
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotModified,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from accounts.principal import PRINCIPAL_KEY, Principal
from attention.services import list_items
from compozy_base.config.loader import get_config
from compozy_base.errors import error_body, not_found
from health.services import decorate_list
from memory import health as memory_health
from memory import service as memory_service
from sessions import services
from sessions.core.enums import Badge, SessionState
from sessions.core.errors import CompozyError
from sessions.core.record import SessionMeta
from sessions.live import transcript
from sessions.services.prompts import QueuedInput
from sessions.services.providers import list_providers
from sessions.store import events as event_store
from sessions.store import folder
from sessions.store.rows import EventRow
from tasks.services import list_tasks

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
NINJA_STATIC_DIR = Path(ninja.__file__).resolve().parent / "static"  # holds ninja/swagger-ui-bundle.js, …
# The session page's first transcript snapshot holds the newest entries; older ones load on scroll.
SNAPSHOT_ENTRIES = 100
# Rows per read while streaming a download: one page in memory at a time.
DOWNLOAD_PAGE = 1000
# Pages load only their own scripts, styles and images and talk only to their own origin: no inline script or
# style, no data: or foreign URL, no frame, worker or plugin. The session page shows untrusted agent output, so a
# sanitiser bug must not be enough: Trusted Types make every HTML sink refuse a plain string, and the only policy
# allowed is the one DOMPurify creates for its own parsing (frontend/static/frontend/js/markdown.js).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
    "frame-src 'none'; object-src 'none'; worker-src 'none'; "
    "require-trusted-types-for 'script'; trusted-types dompurify"
)
# A download of agent output is data: a browser that shows it instead runs and loads nothing.
DOWNLOAD_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'; sandbox"
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".map": "application/json",
    ".woff2": "font/woff2",
}

def _secure(response: HttpResponse) -> HttpResponse:
    # nosniff and Referrer-Policy: same-origin come from SecurityMiddleware on every response.
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response


def _agents() -> list[dict[str, str]]:
    config = get_config()
    return [{"name": a.name, "provider": a.provider or config.default_provider}
            for a in sorted(config.agents.values(), key=lambda a: a.name)]


def _dashboard_context(workspace_ids: frozenset[str] | None) -> dict[str, Any]:
    """What the dashboard shows; `workspace_ids` (a workspace-limited token's) limits its sessions in the query."""
    config = get_config()
    return {
        "agents": _agents(),
        "default_agent": config.default_agent,
        "workspaces": services.list_workspaces(),
        "sessions": decorate_list(services.list_sessions(all_states=True, limit=100, workspace_ids=workspace_ids)),
        "states": [s.value for s in SessionState],
        "badges": [b.value for b in Badge],
    }


# Pages only read (require_safe): CSRF has nothing to protect, and exempting them lets a POST get a 405
# instead of Django's CSRF page.
@csrf_exempt
@require_safe
async def dashboard(request: HttpRequest) -> HttpResponse:
    principal = getattr(request, "scope", {}).get(PRINCIPAL_KEY)
    # A token limited to some workspaces sees only their sessions, as `GET /api/sessions` answers it.
    workspace_ids = principal.workspaces if isinstance(principal, Principal) and principal.limited else None
    context = await sync_to_async(_dashboard_context)(workspace_ids)
    if workspace_ids is not None:
        context["workspaces"] = [w for w in context["workspaces"] if str(w.get("id")) in workspace_ids]
    page = {
        "initial": context["sessions"],
        "workspaces": context["workspaces"],
    }
    return _secure(render(request, "frontend/dashboard.html", {**context, "page": page}))


@csrf_exempt
@require_safe
async def attention_page(request: HttpRequest) -> HttpResponse:
    """The inbox: what waits on a person, newest first (the list `GET /api/attention` gives)."""

    attention = await sync_to_async(list_items)()
    return _secure(render(request, "frontend/attention.html", {"attention": attention,
                                                               "page": {"initial": attention}}))


@csrf_exempt
@require_safe
async def tasks_page(request: HttpRequest) -> HttpResponse:
    """Supervised work: tasks with their attempts and linked sessions, needs-attention first."""

    tasks = await sync_to_async(list_tasks)()
    page = {"initial": tasks}
    return _secure(render(request, "frontend/tasks.html", {"tasks": tasks, "page": page}))


def _memory_context() -> dict[str, Any]:
    return {"health": memory_health.report().to_dict(), "entries": memory_service.listing(),
            "workspaces": [{"id": w["id"], "name": w["name"], "root_dir": w["root_dir"]}
                           for w in services.list_workspaces()]}


@csrf_exempt
@require_safe
async def memory_page(request: HttpRequest) -> HttpResponse:
    """Memory: browse, search and edit entries, and what a session was given at its start (docs/reference/memory.md
    §2). Entries are shown as text, never as HTML: an agent wrote some of them."""
    context = await sync_to_async(_memory_context)()
    return _secure(render(request, "frontend/memory.html", {"memory": context, "page": {"initial": context}}))


@csrf_exempt
@require_safe
async def providers_page(request: HttpRequest) -> HttpResponse:
    """Each provider's state and a form to set its key (which the API writes to secrets.toml, then reloads)."""

    providers = await sync_to_async(list_providers)()
    return _secure(render(request, "frontend/providers.html", {"page": {"initial": providers}}))


def _queue(session_id: str) -> list[QueuedInput]:
    """Pending input entries, exactly as the queue route gives them (the page refreshes from it later)."""
    return list(services.pending_inputs(session_id)["queue"])


def _session_context(session_id: str) -> dict[str, Any]:
    session = services.get_session(session_id)
    meta = services.read_session_meta(session_id)
    store_error = None
    try:
        event_store.max_sequence(folder.events_path(session_id))
    except sqlite3.DatabaseError as exc:
        # A corrupt events.db: the page still shows the session's metadata and says what is wrong.
        logger.warning("event store of %s unreadable: %s", session_id, exc)
        store_error = str(exc)[:200]
    config = get_config()
    supervision = config.supervision
    return {
        "session": session,
        # The transcript itself comes over the stream; the fences let its first URL resume with deltas.
        "transcript": {"epoch": transcript.session_epoch(meta), "generation": transcript.TRANSCRIPT_GENERATION,
                       "limit": SNAPSHOT_ENTRIES},
        "store_error": store_error,
        "queue": _queue(session_id),
        "supervision": {
            "activity_heartbeat_interval": supervision.activity_heartbeat_interval,
            "progress_notify_interval": supervision.progress_notify_interval,
            "inactivity_warning_after": supervision.inactivity_warning_after,
            "inactivity_timeout": supervision.inactivity_timeout,
            "timeout_cancel_grace": supervision.timeout_cancel_grace,
            "quiet_notice_after": supervision.quiet_notice_after,
        },
        "busy_input": {"default_mode": str(config.busy_input.default_mode), "queue_cap": config.busy_input.queue_cap,
                       "max_text_bytes": config.busy_input.max_text_bytes},
    }


@csrf_exempt
@require_safe
async def session_page(request: HttpRequest, session_id: str) -> HttpResponse:
    try:
        context = await sync_to_async(_session_context)(session_id)
    except CompozyError as exc:
        response = render(request, "frontend/not_found.html", {"session_id": session_id, "error": exc.message},
                          status=exc.status if exc.status >= 400 else 404)
        return _secure(response)
    session = context["session"]
    page = context
    return _secure(render(request, "frontend/session.html", {"session": session, "page": page,
                                                             "store_error": context["store_error"]}))


@csrf_exempt
@require_safe
async def session_page_slash(request: HttpRequest, session_id: str) -> HttpResponse:
    return HttpResponseRedirect(f"/sessions/{quote(session_id)}")


def _wants_html(request: HttpRequest) -> bool:
    return "text/html" in request.headers.get("Accept", "")


@csrf_exempt
async def page_not_found(request: HttpRequest) -> HttpResponse:
    """Any page address that matches nothing: a browser gets the styled page, a script the API's JSON 404."""
    if request.method not in ("GET", "HEAD") or not _wants_html(request):
        return not_found(request)
    response = render(request, "frontend/not_found.html", {"path": request.path[:512]}, status=404)
    return _secure(response)


def _take(rows: Iterator[EventRow], count: int) -> list[EventRow]:
    return list(itertools.islice(rows, count))


async def _jsonl(meta: SessionMeta, path: Path, ceiling: int) -> AsyncIterator[bytes]:
    """Envelopes as JSON lines, read a page at a time in a worker thread, up to the sequence at request time."""
    rows = event_store.iter_events(path, page=DOWNLOAD_PAGE)
    while True:
        batch = await asyncio.to_thread(_take, rows, DOWNLOAD_PAGE)
        lines = []
        done = not batch
        for row in batch:
            if row["sequence"] > ceiling:
                done = True
                break
            lines.append(json.dumps(services.envelope(meta, row), ensure_ascii=False, separators=(",", ":")))
        if lines:
            yield ("\n".join(lines) + "\n").encode("utf-8")
        if done:
            return


@csrf_exempt
@require_safe
async def events_jsonl(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """GET /sessions/<id>/events.jsonl: every stored event of the session, streamed."""
    try:
        meta = await sync_to_async(services.read_session_meta)(session_id)
    except CompozyError as exc:
        return _secure(render(request, "frontend/not_found.html", {"session_id": session_id, "error": exc.message},
                              status=404))
    path = folder.events_path(session_id)
    try:
        ceiling = await asyncio.to_thread(event_store.max_sequence, path)
    except sqlite3.DatabaseError as exc:
        body = error_body("the session's event store cannot be read", "event_store_unreadable", 409,
                          {"detail": str(exc)[:200]})
        return JsonResponse(body, status=409)
    response = StreamingHttpResponse(_jsonl(meta, path, ceiling), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{session_id}-events.jsonl"'
    response["Cache-Control"] = "no-store"
    response["Content-Security-Policy"] = DOWNLOAD_CONTENT_SECURITY_POLICY
    return response


def _static_file(path: str) -> Path:
    """The file under STATIC_DIR (or, for `ninja/…`, django-ninja's Swagger UI bundle) that `path` names;
    anything that could leave the directory is a 404."""
    pure = PurePosixPath(path)
    if (not path or "\\" in path or "\x00" in path or pure.is_absolute()
            or any(part in ("", ".", "..") or part.startswith(".") for part in pure.parts)):
        raise Http404("no such file")
    root = NINJA_STATIC_DIR if pure.parts[0] == "ninja" else STATIC_DIR
    candidate = (root / pure).resolve()
    if not candidate.is_relative_to(root.resolve()) or not candidate.is_file():
        raise Http404("no such file")
    return candidate


_static_cache: dict[Path, tuple[int, int, bytes]] = {}


@csrf_exempt
@require_safe
def static_asset(request: HttpRequest, path: str) -> HttpResponse:
    """The app's CSS and JS. DEBUG is off under daphne, so Django would not serve them; we do, from this
    app's static dir only, with an ETag so the browser revalidates cheaply after an upgrade."""
    file = _static_file(path)
    stat = file.stat()
    etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
    if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
        response: HttpResponse = HttpResponseNotModified()
    else:
        cached = _static_cache.get(file)
        if cached is None or cached[:2] != (stat.st_mtime_ns, stat.st_size):
            cached = (stat.st_mtime_ns, stat.st_size, file.read_bytes())
            _static_cache[file] = cached
        content_type = CONTENT_TYPES.get(file.suffix) or mimetypes.guess_type(file.name)[0]
        response = HttpResponse(cached[2], content_type=content_type or "application/octet-stream")
    response["ETag"] = etag
    response["Cache-Control"] = "no-cache"
    return response
