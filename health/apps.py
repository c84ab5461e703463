from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the health jobs with huey for `manage.py run_huey` too (the daemon imports them itself).
        import health.jobs  # noqa: F401
        from health import receivers
        from sessions.catalog.index import meta_saved
        from sessions.repair.boot import boot_repair_finished

        # Every metadata save derives the session's health row (sessions/catalog/index.py sends it).
        meta_saved.connect(receivers.derive_health, dispatch_uid="health.derive")
        # Once per daemon start, after boot repair: health from the repaired metadata (sessions/jobs.py sends it).
        boot_repair_finished.connect(receivers.recompute_after_boot, dispatch_uid="health.boot_recompute")
