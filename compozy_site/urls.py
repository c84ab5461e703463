from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from compozy_site.api import api
from compozy_site.metrics import metrics_view


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "not found", "code": "not_found"}, status=404)


handler404 = "compozy_site.urls.not_found"

urlpatterns = [
    path("api/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("", include("frontend.urls")),
]
