from __future__ import annotations

from django.apps import AppConfig


class CoordinationConfig(AppConfig):
    name = "coordination"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the coordination cycle's huey job wherever Django runs (as sessions/apps.py does for its jobs).
        from coordination import jobs  # noqa: F401
