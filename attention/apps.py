from django.apps import AppConfig


class AttentionConfig(AppConfig):
    name = "attention"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from attention.outbox import on_meta_saved, on_task_noted
        from sessions.catalog import index as catalog
        from tasks import history

        # Every saved session record may carry a webhook event (a permission request, a failed stop, a finished
        # turn): written to the outbox there, on the runtime's DB thread, off the event loop.
        if on_meta_saved not in catalog.META_SAVED:
            catalog.META_SAVED.append(on_meta_saved)
        # A task turning `needs_attention`: its outbox row commits in the same transaction.
        if on_task_noted not in history.NOTED:
            history.NOTED.append(on_task_noted)
