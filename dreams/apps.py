from __future__ import annotations

from django.apps import AppConfig


class DreamsConfig(AppConfig):
    """No models: a dream's records live in memory's journal (memory/dreams.py)."""

    name = "dreams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the dream cycle's huey job wherever Django runs (as sessions/apps.py does for its jobs).
        from dreams import jobs  # noqa: F401
