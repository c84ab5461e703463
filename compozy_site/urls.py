from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from compozy_site.api import api, error_body
from compozy_site.metrics import metrics_view


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not found", "not_found", 404, {"path": request.path[:512]}), status=404)


handler404 = "compozy_site.urls.not_found"

urlpatterns = [
    path("api/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("", include("frontend.urls")),
]
