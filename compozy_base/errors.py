"""The one error shape every JSON error answer has (API, pages' script answers, the guard, the router, the
transport): `{"error", "code", "diagnostic": {code, severity, message, data_freshness, evidence?}}`."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse


class CodedError(Exception):
    """A refusal with a stable machine code and the HTTP status it maps to: the base of every domain's errors
    (sessions, memory, accounts), so the API answers all of them in one handler (compozy/api/app.py) with the one
    shape below. `data` becomes the diagnostic's evidence."""

    status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status
        self.data: dict[str, Any] = data or {}


def error_body(message: str, code: str, status: int, data: dict[str, object] | None = None) -> dict[str, object]:
    severity = "error" if status >= 500 else "warn"
    diagnostic: dict[str, object] = {"code": code, "severity": severity, "message": message, "data_freshness": "live"}
    if data:
        diagnostic["evidence"] = data
    return {"error": message, "code": code, "diagnostic": diagnostic}


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Django's handler404 and the pages' catch-all for a script: a path that matches nothing, in the JSON shape."""
    return JsonResponse(error_body("not found", "not_found", 404, {"path": request.path[:512]}), status=404)
