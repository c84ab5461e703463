from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the health jobs with huey for `manage.py run_huey` too (the daemon imports them itself).
        import health.jobs  # noqa: F401
        from health.services import boot_recompute, on_meta_saved
        from sessions.catalog import index as catalog
        from sessions.repair.boot import BOOT_REPAIRED

        # Every metadata save derives the session's health row (sessions/catalog/index.py calls what is registered).
        if on_meta_saved not in catalog.META_SAVED:
            catalog.META_SAVED.append(on_meta_saved)
        # Once per daemon start, after boot repair: health from the repaired metadata (sessions/jobs.py calls it).
        if boot_recompute not in BOOT_REPAIRED:
            BOOT_REPAIRED.append(boot_recompute)
