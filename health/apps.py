from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the health jobs with huey for `manage.py run_huey` too (the daemon imports them itself).
        import health.jobs  # noqa: F401
