from django.apps import AppConfig


class WorkConfig(AppConfig):
    name = "sessions.work"
    label = "work"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Listen for verified supervision stops (the huey job itself lives with the others in sessions/jobs.py).
        from sessions.work import recovery  # noqa: F401
