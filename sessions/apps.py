from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created

# A node paused (SIGSTOP, a VM freeze) between two statements of a transaction keeps its row locks: one paused inside
# `update_or_create` (SELECT … FOR UPDATE on a health row) held the survivor's failover and every prompt for that
# session until it woke. PostgreSQL ends a session idle in a transaction this long, so its locks go with it; none of
# our transactions waits on anything but the database between its statements. A value in DATABASE_URL's `options` wins.
IDLE_IN_TRANSACTION_TIMEOUT = "5s"


def _tune_catalog_connection(sender: Any, connection: Any, **_: Any) -> None:
    if connection.vendor != "postgresql":
        return
    if "idle_in_transaction_session_timeout" in str(connection.settings_dict.get("OPTIONS", {}).get("options", "")):
        return
    with connection.cursor() as cursor:
        cursor.execute("SET idle_in_transaction_session_timeout = %s", [IDLE_IN_TRANSACTION_TIMEOUT])


class SessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" collides with django.contrib.sessions' label; we never install that app.
    label = "compozy_sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        connection_created.connect(_tune_catalog_connection, dispatch_uid="compozy.catalog.idle_in_transaction")
        # Register the huey jobs wherever Django runs: djhuey's `run_huey` autodiscovers only `tasks` modules,
        # and the daemon's consumer must never see a message for a task it has not registered yet.
        from sessions import jobs  # noqa: F401
