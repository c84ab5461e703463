from django.apps import AppConfig


class TasksConfig(AppConfig):
    """Supervised tasks: a prompt run to completion in a session of its own, retried, recovered (was `sessions.work`,
    label `work`: tasks/migrations adopt a catalog made then)."""

    name = "tasks"
    label = "tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # `recovery` listens for verified supervision stops; `jobs` registers the task-run cycle's huey job wherever
        # Django runs (as sessions/apps.py does for its jobs).
        from tasks import jobs, recovery  # noqa: F401
        from tasks.workspaces import register_as_workspace_user

        register_as_workspace_user()
