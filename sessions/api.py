"""REST routes for sessions and workspaces. Thin: parse, call sessions.services, shape the envelope."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from ninja import Router

from health.schemas import StatusDTO
from sessions import services
from sessions.errors import InvalidRequest

router = Router(tags=["sessions"])
workspaces = Router(tags=["workspaces"])


def json_body(request: HttpRequest) -> dict[str, Any]:
    """Strict JSON object bodies; malformed JSON is a 400 with a stable code, never a 500."""
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"malformed JSON body: {exc}", code="malformed_json") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the JSON body must be an object", code="malformed_json")
    return body


def _int(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be an integer", code="invalid_parameter") from exc


def truthy(value: str | None) -> bool:
    """A query flag: 1, true, yes or on (any case)."""
    return (value or "").lower() in {"1", "true", "yes", "on"}


def _types(request: HttpRequest) -> list[str] | None:
    values = request.GET.getlist("type")
    types = [t for v in values for t in v.split(",") if t]
    return types or None


# ---- sessions --------------------------------------------------------------------------------

@router.post("/sessions", response={201: dict})
async def create_session(request: HttpRequest) -> tuple[int, dict[str, Any]]:
    body = json_body(request)
    services.check_create_fields(body)
    for key in ("agent_name", "name", "workspace", "workspace_path", "provider", "model", "reasoning_effort",
                "speed", "prompt"):
        if key in body and body[key] is not None and not isinstance(body[key], str):
            raise InvalidRequest(f"{key} must be a string", code="invalid_field")
    return 201, {"session": await services.create_session(body)}


@router.get("/sessions")
async def list_sessions(request: HttpRequest) -> dict[str, Any]:
    q = request.GET
    result = await sync_to_async(services.list_sessions)(
        workspace=q.get("workspace"), state=q.get("state"), resumable=truthy(q.get("resumable")),
        all_states=truthy(q.get("all")), agent=q.get("agent"), query=q.get("q"),
        limit=_int(q.get("limit"), "limit") or 50, cursor=q.get("cursor"), session_type=q.get("type"),
    )
    if truthy(q.get("include_health")):
        from health.services import decorate_list

        result = await sync_to_async(decorate_list)(result)
    return result


@router.get("/sessions/{session_id}")
async def get_session(request: HttpRequest, session_id: str) -> dict[str, Any]:
    return {"session": await sync_to_async(services.get_session)(session_id)}


WS = "/workspaces/{workspace}/sessions/{session_id}"


@router.get(WS)
async def get_scoped_session(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    return {"session": await sync_to_async(services.get_session)(session_id, workspace)}


@router.patch(WS)
async def rename_session(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    body = json_body(request)
    if set(body) - {"name"} or not isinstance(body.get("name"), str):
        raise InvalidRequest("only name can be changed", code="invalid_field")
    return {"session": await services.rename_session(session_id, body["name"], workspace)}


@router.get(WS + "/status", response=StatusDTO)
async def session_status(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    from health.services import status_dto

    return await sync_to_async(status_dto)(session_id, workspace)


@router.delete(WS, response={204: None})
async def remove_session(request: HttpRequest, workspace: str, session_id: str) -> tuple[int, None]:
    await services.remove_session(session_id, workspace)
    return 204, None


@router.post(WS + "/stop", response={204: None})
async def stop_session(request: HttpRequest, workspace: str, session_id: str) -> tuple[int, None]:
    detail = str(json_body(request).get("detail", "")) if request.body else ""
    await services.stop_session(session_id, workspace, detail)
    return 204, None


@router.post(WS + "/prompt", response={200: dict, 202: dict})
async def prompt(request: HttpRequest, workspace: str, session_id: str) -> tuple[int, dict[str, Any]]:
    body = json_body(request)
    message = body.get("message")
    if message is None and isinstance(body.get("messages"), list):
        # AI-SDK shape: the last user message's text parts.
        for item in reversed(body["messages"]):
            if isinstance(item, dict) and item.get("role") == "user":
                content = item.get("content")
                if isinstance(content, str):
                    message = content
                else:
                    parts = item.get("parts") or []
                    message = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
                break
    if not isinstance(message, str):
        raise InvalidRequest("message is required", code="message_required")
    mode = body.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise InvalidRequest("mode must be a string", code="invalid_mode")
    expected = body.get("expected_turn_id")
    if expected is not None and not isinstance(expected, str):
        raise InvalidRequest("expected_turn_id must be a string", code="invalid_field")
    return await services.prompt_session(session_id, message, mode=mode, workspace_ref=workspace,
                                         expected_turn_id=expected)


@router.post(WS + "/interrupt")
async def interrupt(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    expected = json_body(request).get("expected_turn_id")
    return await services.interrupt_session(session_id, workspace, expected if isinstance(expected, str) else None)


@router.post(WS + "/steer", response={200: dict, 202: dict})
async def steer(request: HttpRequest, workspace: str, session_id: str) -> tuple[int, dict[str, Any]]:
    text = json_body(request).get("text")
    if not isinstance(text, str):
        raise InvalidRequest("text is required", code="text_required")
    return await services.steer_session(session_id, text, workspace)


@router.get(WS + "/prompt/queue")
async def prompt_queue(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    return await sync_to_async(services.pending_inputs)(session_id, workspace)


@router.get(WS + "/permissions")
async def permissions(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    return await services.list_permissions(session_id, workspace)


@router.post(WS + "/permissions/{request_id}")
async def decide_permission(request: HttpRequest, workspace: str, session_id: str, request_id: str) -> dict[str, Any]:
    body = json_body(request)
    decision, option = body.get("decision"), body.get("option_id")
    if not isinstance(decision, str):
        raise InvalidRequest("decision is required (approve or deny)", code="invalid_decision")
    return await services.decide_permission(session_id, request_id, decision,
                                            option if isinstance(option, str) else None, workspace)


@router.post(WS + "/prompt/cancel")
async def cancel_turn(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    return await services.cancel_turn(session_id, workspace)


@router.delete(WS + "/prompt/queue/{entry_id}")
async def cancel_queued(request: HttpRequest, workspace: str, session_id: str, entry_id: str) -> dict[str, Any]:
    return await services.cancel_queued(session_id, entry_id, workspace)


@router.post(WS + "/children", response={201: dict})
async def spawn_child(request: HttpRequest, workspace: str, session_id: str) -> tuple[int, dict[str, Any]]:
    return 201, {"session": await services.spawn_child(session_id, json_body(request), workspace)}


@router.post(WS + "/reactivate")
async def reactivate(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    return {"session": await services.reactivate(session_id, workspace)}


@router.post(WS + "/attach")
async def attach(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    body = json_body(request)
    holder = body.get("attached_to") or f"http:{request.META.get('REMOTE_ADDR') or 'local'}"
    ttl = body.get("ttl_seconds", 900)
    if not isinstance(holder, str) or not isinstance(ttl, int) or isinstance(ttl, bool):
        raise InvalidRequest("attached_to must be a string and ttl_seconds an integer", code="invalid_field")
    return await sync_to_async(services.attach)(session_id, workspace, holder, ttl)


@router.delete(WS + "/attach")
async def detach(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    holder = request.GET.get("attached_to") or ""
    return await sync_to_async(services.detach)(session_id, workspace, holder)


@router.get(WS + "/events")
async def events(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    q = request.GET
    if "before_sequence" in q:
        raise InvalidRequest("before_sequence is not supported on events; use after_sequence", code="invalid_parameter")
    after = _int(q.get("after_sequence") or request.headers.get("Last-Event-ID"), "after_sequence")
    rows = await sync_to_async(services.list_events)(
        session_id, workspace_ref=workspace, after=after, limit=_int(q.get("limit"), "limit"),
        types=_types(request), turn_id=q.get("turn_id"), agent_name=q.get("agent_name"), since=q.get("since"),
    )
    return {"events": rows}


@router.get(WS + "/history")
async def history(request: HttpRequest, workspace: str, session_id: str) -> dict[str, Any]:
    q = request.GET
    turns = await sync_to_async(services.history)(
        session_id, workspace_ref=workspace, last=_int(q.get("limit") or q.get("last"), "limit"),
        after=_int(q.get("after_sequence"), "after_sequence"),
    )
    return {"history": turns}


@router.get("/status", tags=["daemon"])
async def status(request: HttpRequest) -> dict[str, Any]:
    return await sync_to_async(services.runtime_status)()


# ---- workspaces ------------------------------------------------------------------------------

@workspaces.get("/workspaces")
async def list_workspaces(request: HttpRequest) -> dict[str, Any]:
    return {"workspaces": await sync_to_async(services.list_workspaces)()}


@workspaces.post("/workspaces", response={201: dict})
async def add_workspace(request: HttpRequest) -> tuple[int, dict[str, Any]]:
    body = json_body(request)
    unknown = set(body) - {"root_dir", "name", "add_dirs", "default_agent", "sandbox_ref"}
    if unknown:
        raise InvalidRequest(f"unknown field(s): {', '.join(sorted(unknown))}", code="unknown_field")
    if not isinstance(body.get("root_dir"), str):
        raise InvalidRequest("root_dir is required", code="root_dir_required")
    add_dirs = body.get("add_dirs") or []
    if not isinstance(add_dirs, list) or not all(isinstance(d, str) for d in add_dirs):
        raise InvalidRequest("add_dirs must be a list of absolute paths", code="invalid_field")
    record = await sync_to_async(services.add_workspace)(
        body["root_dir"], str(body.get("name") or ""), add_dirs, str(body.get("default_agent") or ""))
    return 201, {"workspace": record}


@workspaces.post("/workspaces/resolve")
async def resolve_workspace(request: HttpRequest) -> dict[str, Any]:
    from sessions import catalog

    path = json_body(request).get("path")
    if not isinstance(path, str):
        raise InvalidRequest("path is required", code="path_required")
    ws = await sync_to_async(catalog.resolve_or_register)(path)
    return {"workspace": catalog.workspace_record(ws)}


@workspaces.get("/workspaces/{ref}")
async def workspace_info(request: HttpRequest, ref: str) -> dict[str, Any]:
    return await sync_to_async(services.workspace_info)(ref)


@workspaces.get("/workspaces/{ref}/hooks/runs")
async def hook_runs(request: HttpRequest, ref: str) -> dict[str, Any]:
    q = request.GET
    session_id = q.get("session")
    if not session_id:
        raise InvalidRequest("session is required", code="session_required")
    return {"runs": await sync_to_async(services.hook_runs)(session_id, ref, event=q.get("event"),
                                                             outcome=q.get("outcome"),
                                                             last=_int(q.get("last"), "last"))}


@workspaces.delete("/workspaces/{ref}", response={204: None})
async def remove_workspace(request: HttpRequest, ref: str) -> HttpResponse | tuple[int, None]:
    await sync_to_async(services.remove_workspace)(ref)
    return 204, None
