from django.urls import include, path

from compozy_site.api import api, not_found
from compozy_site.metrics import metrics_view

handler404 = not_found

urlpatterns = [
    path("api/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("", include("frontend.urls")),
]
