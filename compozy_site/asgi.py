"""ASGI entry: the guard in front of everything, then SSE paths to channels consumers, the rest to Django."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compozy_site.settings")

from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application
from django.urls import path, re_path

django_app = get_asgi_application()

from compozy.api.guard import Guard  # noqa: E402
from compozy.api.placement import Placement  # noqa: E402
from compozy.api.routing import OwnerRouter  # noqa: E402
from compozy.api.sse import CatalogStreamConsumer, SessionStreamConsumer  # noqa: E402

# The routes themselves: tests/inproc.py drives them in-process, without the guard or a port.
routes = URLRouter([
    path("api/sessions/catalog-stream", CatalogStreamConsumer.as_asgi()),
    path("api/workspaces/<str:workspace>/sessions/<str:session_id>/stream", SessionStreamConsumer.as_asgi()),
    re_path(r"", django_app),  # type: ignore[arg-type]  # channels routes an ASGI app; the stubs know only views
])
# Host, Origin, token and body cap are checked here, once, for every route: Django's ALLOWED_HOSTS and middleware
# never see the channels consumers.
# Then work on a session another node runs is routed to that node (compozy/api/routing.py).
application = Guard(Placement(OwnerRouter(ProtocolTypeRouter({"http": routes}))))
