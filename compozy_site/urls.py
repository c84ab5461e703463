from django.urls import include, path

from compozy.api.app import api
from compozy.api.metrics import metrics_view
from compozy_base.errors import not_found

handler404 = not_found

urlpatterns = [
    path("api/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("", include("frontend.urls")),
]
