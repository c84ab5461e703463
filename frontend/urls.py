from django.urls import path, re_path
from django.views.generic import RedirectView

from frontend import action_links, views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("tasks", views.tasks_page, name="tasks"),
    path("attention", views.attention_page, name="attention"),
    path("memory", views.memory_page, name="memory"),
    path("providers", views.providers_page, name="providers"),
    path("tasks/", RedirectView.as_view(url="/tasks", query_string=True), name="tasks-slash"),
    path("sessions/<str:session_id>", views.session_page, name="session"),
    # A pasted or hand-typed URL often ends with a slash; the page has one canonical address.
    path("sessions/<str:session_id>/", views.session_page_slash, name="session-slash"),
    path("sessions/<str:session_id>/events.jsonl", views.events_jsonl, name="session-events-jsonl"),
    # An action link (issue 49): no sign-in, the link is the credential.
    path("a/<str:link>", action_links.action_link, name="action-link"),
    # DEBUG is off under daphne, so nothing else serves /static/ (STATIC_URL).
    path("static/<path:path>", views.static_asset, name="static-asset"),
    # Last: any other page address. Included after api/ and metrics (compozy_site/urls.py), and never for
    # /api/, /metrics or /static/, whose misses keep the JSON 404.
    re_path(r"^(?!api/|api$|metrics$|static/).*$", views.page_not_found, name="page-not-found"),
]
