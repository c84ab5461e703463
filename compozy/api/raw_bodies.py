"""Twisted parses POSTed multipart and urlencoded bodies into `request.args` before daphne hands the request
to ASGI, and answers a malformed multipart body with a bare `400` and a disconnect: no JSON, no code, and
the whole body parsed in memory first. Nothing in Compozy reads `request.args` (Django parses its own body),
so the daemon switches that parsing off and every body reaches the ASGI app, its guard and the API's errors.
"""

from __future__ import annotations

from typing import Any


def keep_request_bodies_raw() -> None:
    """Idempotent; called by GuardedServer before daphne serves a request."""
    from daphne.http_protocol import WebRequest

    if getattr(WebRequest, "_compozy_raw_bodies", False):
        return
    original = WebRequest.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # read only later, in requestReceived()

    WebRequest.__init__ = __init__
    WebRequest._compozy_raw_bodies = True
