"""The project's NinjaAPI: one router per app, one exception handler with stable error codes."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from health.api import router as health_router
from sessions.api import router as sessions_router
from sessions.api import workspaces as workspaces_router
from sessions.api_reads import router as reads_router
from sessions.errors import CompozyError

logger = logging.getLogger(__name__)

api = NinjaAPI(title="Compozy", version="0.1.0", urls_namespace="api",
               description="Durable, diagnosable ACP agent sessions.")
api.add_router("/", sessions_router)
api.add_router("/", health_router)
api.add_router("/", workspaces_router)
api.add_router("/", reads_router)
api.add_router("/", "sessions.api_repair.router")
api.add_router("/", "sessions.api_evidence.router")
api.add_router("/", "sessions.work.api.router")


def error_body(message: str, code: str, status: int, data: dict[str, object] | None = None) -> dict[str, object]:
    severity = "error" if status >= 500 else "warn"
    body: dict[str, object] = {
        "error": message,
        "code": code,
        "diagnostic": {"code": code, "severity": severity, "message": message, "data_freshness": "live"},
    }
    if data:
        body["diagnostic"]["evidence"] = data  # type: ignore[index]
    return body


@api.exception_handler(CompozyError)
def on_domain_error(request: HttpRequest, exc: CompozyError) -> HttpResponse:
    return api.create_response(request, error_body(exc.message, exc.code, exc.status, exc.data), status=exc.status)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return api.create_response(request, error_body("invalid request", "invalid_request", 400,
                                                   {"errors": exc.errors}), status=400)


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return api.create_response(request, error_body(str(exc), f"http_{exc.status_code}", exc.status_code),
                               status=exc.status_code)


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return api.create_response(request, error_body("unauthorized", "unauthorized", 401), status=401)


@api.exception_handler(Exception)
def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    from sessions.errors import StorageError
    from sessions.store.failures import classify

    if classify(exc) is not None:
        # A full disk or a locked store is a condition of this machine, not a bug: say so with a code.
        logger.error("storage error on %s %s: %s", request.method, request.path, exc)
        return on_domain_error(request, StorageError.from_exception(exc))
    # 5xx messages are masked; the log (redacted) keeps the detail.
    logger.exception("unhandled API error on %s %s", request.method, request.path)
    return api.create_response(request, error_body("internal error", "internal_error", 500), status=500)
