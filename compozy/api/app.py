"""The project's NinjaAPI: one router per app, and one error shape `{error, code, diagnostic}` for every 4xx/5xx.

Domain errors carry their own code; a request that fails its schema gets the code of the field that failed
(`invalid_limit`, `invalid_cursor`, `unknown_field`, `<field>_required`…); a body that is not JSON at all is
`malformed_json`; a store that cannot be read is `event_store_unreadable`. Django's own 404/405 answers under
`/api/` are rewritten into the same shape by `json_error_middleware`.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import JSONRenderer

from compozy.api.health import router as health_router
from compozy.api.reads import router as reads_router
from compozy.api.sessions import router as sessions_router
from compozy.api.sessions import workspaces as workspaces_router
from compozy.api.validation import describe_errors
from compozy_base import strict_json
from compozy_base.auth import is_machine_path
from compozy_base.errors import CodedError, error_body
from sessions.core.errors import CatalogUnavailable, CompozyError, InvalidRequest, StorageError
from sessions.core.failures import classify

logger = logging.getLogger(__name__)


class StrictJsonParser(Parser):
    """Bodies must be one JSON object (or `null`, read as no body). Deep nesting (RecursionError) and integers
    past Python's digit limit (ValueError) are malformed JSON too, not server errors; so are NaN and Infinity,
    which JSON does not have (an answer of NaN passed a form's `minimum` and `maximum`). A key that repeats is
    `duplicate_key`: Python keeps the last, other parsers the first (compozy_base/strict_json.py)."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            body = strict_json.loads(request.body)
        except strict_json.DuplicateKey as exc:
            raise InvalidRequest(f"malformed JSON body: {exc}", code="duplicate_key") from exc
        except (ValueError, RecursionError) as exc:
            raise InvalidRequest(f"malformed JSON body: {str(exc)[:200]}", code="malformed_json") from exc
        if body is None:
            return {}  # `null`: no body, as the OpenAPI document allows for the routes whose body is optional
        if not isinstance(body, dict):
            raise InvalidRequest("the JSON body must be an object", code="malformed_json")
        return body


class StrictJsonRenderer(JSONRenderer):
    """Every answer is JSON a browser can read: never NaN or Infinity (written as null; strict_json.py)."""

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        return strict_json.dumps(data, cls=self.encoder_class, **self.json_dumps_params)


# OpenAPI links: an answer that names a session or workspace feeds the requests that take it (clients and
# schemathesis's stateful phase follow them). (path, method, status) → path parameter → where it comes from.
LINK_SOURCES: dict[tuple[str, str, int], dict[str, str]] = {
    ("/api/sessions", "get", 200): {"workspace": "$response.body#/sessions/0/workspace_id",
                                    "session_id": "$response.body#/sessions/0/id"},
    ("/api/sessions", "post", 201): {"workspace": "$response.body#/session/workspace_id",
                                     "session_id": "$response.body#/session/id"},
    ("/api/workspaces", "post", 201): {"ref": "$response.body#/workspace/id"},
    ("/api/workspaces/resolve", "post", 200): {"ref": "$response.body#/workspace/id"},
}


def add_links(schema: dict[str, Any]) -> None:
    targets = [(op["operationId"], {p["name"] for p in op.get("parameters", []) if p["in"] == "path"})
               for item in schema["paths"].values() for op in item.values()]
    for (path, method, status), sources in LINK_SOURCES.items():
        response = schema["paths"][path][method]["responses"][status]
        links = {operation_id: {"operationId": operation_id, "parameters": {name: sources[name] for name in names}}
                 for operation_id, names in targets if names and names <= set(sources)}
        response["links"] = links


# Swagger UI from this daemon's own static files (django-ninja's bundle, pinned with the package), under the
# dashboard's CSP plus the inline styles Swagger UI sets. The page runs with the caller's full API rights: it
# used to load `swagger-ui-dist@5` from a CDN, unpinned and without a CSP.
DOCS_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'")


class LocalSwagger(Swagger):
    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        response = super().render_page(request, api, **kwargs)
        response["Content-Security-Policy"] = DOCS_CSP
        return response


# The operationIds outside clients were generated from: ninja names an operation after its view's module, and the
# routers left sessions/, health/ and sessions/work/ for compozy/api/ without their API changing.
OPERATION_ID_PREFIXES = {
    "compozy.api.sessions": "sessions_api", "compozy.api.reads": "sessions_api_reads",
    "compozy.api.repair": "sessions_api_repair", "compozy.api.evidence": "sessions_api_evidence",
    "compozy.api.health": "health_api", "compozy.api.tasks": "sessions_work_api",
    "compozy.api.attention": "attention_api", "compozy.api.worktrees": "worktrees_api",
    "compozy.api.accounts": "accounts_api",
}


class CompozyAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation: Any) -> str:
        module = operation.view_func.__module__
        prefix = OPERATION_ID_PREFIXES.get(module, module.replace(".", "_"))
        return f"{prefix}_{operation.view_func.__name__}"

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        add_links(schema)
        return schema


api = CompozyAPI(title="Compozy", version="0.1.0", urls_namespace="api", parser=StrictJsonParser(), docs=LocalSwagger(),
                 renderer=StrictJsonRenderer(),
                 description="Durable, diagnosable ACP agent sessions. Every error answers "
                             "`{error, code, diagnostic}`; `code` is stable.")
api.add_router("/", sessions_router)
api.add_router("/", health_router)
api.add_router("/", workspaces_router)
api.add_router("/", reads_router)
api.add_router("/", "compozy.api.repair.router")
api.add_router("/", "compozy.api.evidence.router")
api.add_router("/", "compozy.api.tasks.router")
api.add_router("/", "compozy.api.attention.router")
api.add_router("/", "compozy.api.worktrees.router")
api.add_router("/", "compozy.api.memory.router")
api.add_router("/", "compozy.api.providers.router")
api.add_router("/", "compozy.api.accounts.router")


def error_response(request: HttpRequest, message: str, code: str, status: int,
                   data: dict[str, object] | None = None) -> HttpResponse:
    return api.create_response(request, error_body(message, code, status, data), status=status)


@api.exception_handler(CodedError)
def on_domain_error(request: HttpRequest, exc: CodedError) -> HttpResponse:
    """Every domain's refusal (sessions, memory, accounts): one base, one handler, one shape."""
    return error_response(request, exc.message, exc.code, exc.status, exc.data)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    message, code, errors = describe_errors(list(exc.errors))
    return error_response(request, message, code, 400, {"errors": errors})


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, CompozyError):  # the body parser's own refusal, wrapped by ninja
        return on_domain_error(request, exc.__cause__)
    return error_response(request, str(exc), f"http_{exc.status_code}", exc.status_code)


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(request, "unauthorized", "unauthorized", 401)


@api.exception_handler(Exception)
def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    if classify(exc) is not None:
        # A full disk or a locked store is a condition of this machine, not a bug: say so with a code.
        logger.error("storage error on %s %s: %s", request.method, request.path, exc, exc_info=True)
        return on_domain_error(request, StorageError.from_exception(exc))
    if _catalog_down(exc):
        logger.warning("catalog unavailable on %s %s: %s", request.method, request.path, exc)
        return on_domain_error(request, CatalogUnavailable.from_exception(exc))
    if isinstance(exc, RequestDataTooBig):
        return error_response(request, "the request body is too large", "body_too_large", 413)
    if isinstance(exc, sqlite3.DatabaseError):
        # A corrupt or foreign events.db: the session exists but its store cannot be read.
        logger.warning("event store unreadable on %s %s: %s", request.method, request.path, exc)
        return error_response(request, "the session's event store cannot be read", "event_store_unreadable", 409,
                              {"detail": str(exc)[:200]})
    if isinstance(exc, FileNotFoundError):
        # A race with a removal (a session deleted while another request wrote to its folder).
        return error_response(request, "what the request named was removed while it ran", "not_found", 404)
    # Inputs the schemas should have refused; kept as 4xx should a new route forget a bound.
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        return error_response(request, "a path in the request is too long", "path_too_long", 400)
    if isinstance(exc, UnicodeEncodeError) or (isinstance(exc, ValueError) and "null byte" in str(exc)):
        return error_response(request, "the request holds text that cannot be stored (NUL or a lone surrogate)",
                              "invalid_text", 400)
    # 5xx messages are masked; the log (redacted) keeps the detail.
    logger.exception("unhandled API error on %s %s", request.method, request.path)
    return error_response(request, "internal error", "internal_error", 500)


def _catalog_down(exc: Exception) -> bool:
    """A server catalog (PostgreSQL) that went away or refuses connections: a condition, not a bug. SQLite's own
    errors (a locked or full catalog) are storage conditions, classified above."""
    from django.db import connection
    from django.db.utils import InterfaceError, OperationalError

    return isinstance(exc, OperationalError | InterfaceError) and connection.vendor != "sqlite"


STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                405: "method_not_allowed", 413: "body_too_large", 500: "internal_error"}


def as_json_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    # Pages keep Django's answers for a person's GET; the API, the metrics scrape and any other method (no page
    # takes a POST: a script sent it) get the common JSON shape.
    machine = is_machine_path(request.path) or request.method not in ("GET", "HEAD")
    if (response.status_code < 400 or not machine or response.streaming
            or response.get("Content-Type", "").startswith("application/json")):
        return response
    status = response.status_code
    code = STATUS_CODES.get(status, f"http_{status}")
    message = "method not allowed" if status == 405 else code.replace("_", " ")
    data: dict[str, object] | None = {"allow": response["Allow"]} if response.has_header("Allow") else None
    replaced = JsonResponse(error_body(message, code, status, data), status=status)
    if response.has_header("Allow"):
        replaced["Allow"] = response["Allow"]
    return replaced


# An API answer is data, never a page: opened in a browser tab (an event or a transcript holds agent text), it may
# load and run nothing. The Swagger page (/api/docs, HTML) keeps ninja's own scripts and styles.
API_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'; sandbox"


def locked_down(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if (is_machine_path(request.path) and not response.has_header("Content-Security-Policy")
            and not response.get("Content-Type", "").startswith("text/html")):
        response["Content-Security-Policy"] = API_CONTENT_SECURITY_POLICY
    return response


@sync_and_async_middleware
def json_error_middleware(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """Django's own error answers under /api/ (405 from a route's method check, 404, a masked 500) become
    the common error shape; answers that already are JSON pass unchanged. Every API answer but an HTML page gets
    the locked-down CSP."""
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest) -> HttpResponse:
            return locked_down(request, as_json_error(request, await get_response(request)))
    else:
        def middleware(request: HttpRequest) -> HttpResponse:  # type: ignore[misc]
            return locked_down(request, as_json_error(request, get_response(request)))
    return middleware
