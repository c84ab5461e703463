"""ASGI entry: SSE paths go to channels consumers, everything else to Django (API and pages)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")

from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application
from django.urls import path, re_path

django_app = get_asgi_application()

from sessions.sse import CatalogStreamConsumer, SessionStreamConsumer  # noqa: E402

application = ProtocolTypeRouter({
    "http": URLRouter([
        path("api/sessions/catalog-stream", CatalogStreamConsumer.as_asgi()),
        path("api/workspaces/<str:workspace>/sessions/<str:session_id>/stream", SessionStreamConsumer.as_asgi()),
        re_path(r"", django_app),
    ]),
})
