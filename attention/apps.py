from django.apps import AppConfig


class AttentionConfig(AppConfig):
    name = "attention"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from attention import receivers
        from sessions.catalog.index import meta_saved
        from tasks.history import task_noted

        # Every saved session record may carry a webhook event (a permission request, a failed stop, a finished
        # turn): written to the outbox there, on the runtime's DB thread, off the event loop.
        meta_saved.connect(receivers.session_outbox, dispatch_uid="attention.session_outbox")
        # A task turning `needs_attention`: its outbox row commits in the same transaction.
        task_noted.connect(receivers.task_outbox, dispatch_uid="attention.task_outbox")
