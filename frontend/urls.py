from django.urls import path

from frontend import views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("tasks", views.tasks_page, name="tasks"),
    path("sessions/<str:session_id>", views.session_page, name="session"),
    path("sessions/<str:session_id>/events.jsonl", views.events_jsonl, name="session-events-jsonl"),
    # DEBUG is off under daphne, so nothing else serves /static/ (STATIC_URL).
    path("static/<path:path>", views.static_asset, name="static-asset"),
]
