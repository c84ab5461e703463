"""Django's stock middleware, run on the loop instead of through the one thread every sync step shares.

`MiddlewareMixin.__acall__` sends each `process_request`, `process_view` and `process_response` of a sync
middleware to asgiref's single thread-sensitive executor: eight hops per request for the four below. Under a burst
(200 creates at once) those hops queued there by the thousand, and `GET /api/status`, a sync view on the same
thread, answered only after them. Their work is a few header reads and writes (and CSRF's token check), pure
computation with no I/O, so it runs inline here; sync views and ORM work keep the thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.middleware import clickjacking, common, csrf, security


class InlineMixin:
    """Put before the Django class: its hooks are called directly when the request is served async."""

    get_response: Callable[[HttpRequest], Any]

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class SecurityMiddleware(InlineMixin, security.SecurityMiddleware):
    pass


class CommonMiddleware(InlineMixin, common.CommonMiddleware):
    pass


class CsrfViewMiddleware(InlineMixin, csrf.CsrfViewMiddleware):
    async def process_view(self, request: HttpRequest, callback: Any, callback_args: Any,  # type: ignore[override]
                           callback_kwargs: Any) -> HttpResponseBase | None:
        # A coroutine function, so the async handler awaits it here instead of adapting it to the thread.
        return super().process_view(request, callback, callback_args, callback_kwargs)


class XFrameOptionsMiddleware(InlineMixin, clickjacking.XFrameOptionsMiddleware):
    pass
