"""Refuse writes that a web page on another origin sends to the loopback daemon."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlparse

from django.http import HttpRequest, HttpResponse, JsonResponse

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def origin_allowed(origin: str, host: str) -> bool:
    """Same-origin only: the Origin's host:port must be the Host the request was sent to."""
    parsed = urlparse(origin)
    return bool(parsed.scheme in {"http", "https"} and parsed.netloc and parsed.netloc == host)


class OriginGuardMiddleware:
    """Browsers always send Origin on cross-origin POST/DELETE; scripts and the CLI send none.

    A missing Origin with a Sec-Fetch-Site of cross-site is refused too (older fetch paths).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("Origin")
            fetch_site = request.headers.get("Sec-Fetch-Site", "")
            host = request.get_host()
            # An opaque "null" Origin is never allowed: origin_allowed needs a scheme and a host.
            if (origin and not origin_allowed(origin, host)) or (not origin and fetch_site == "cross-site"):
                from compozy_site.api import error_body

                return JsonResponse(error_body("cross-origin writes are refused", "origin_forbidden", 403,
                                               {"origin": origin or "", "host": host}), status=403)
        return self.get_response(request)
